//! Deterministic containers of the deb, rpm and wheel writers, one module
//! per format: [`ar`] (the deb, on the `ar` crate), [`tar`] (its members,
//! on `tar`), [`cpio`] (the rpm payload, our own: the `cpio` crate was
//! measured against it, docs/packaging.md), [`zip`] (the wheel, on `zip`).
//!
//! Every writer takes the timestamp from the caller (SOURCE_DATE_EPOCH),
//! fixes owners to 0:0 (root/root where the format names them), and
//! writes entries in the order it is given (callers sort). Data is
//! streamed from readers; nothing buffers a whole member. `zip` patches
//! sizes by seeking back, so a wheel's output must be seekable; `ar` needs
//! a member's size first (see [`ar`]).

pub mod ar;
pub mod cpio;
pub mod tar;
pub mod zip;

pub use self::ar::{read_ar_members, ArMember, ArWriter};
pub use self::cpio::{CpioData, CpioEntry, CpioReader, CpioWriter};
pub use self::tar::TarWriter;
pub use self::zip::ZipWriter;

/// Kind of a tar / cpio entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryType {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link.
    Symlink,
}
