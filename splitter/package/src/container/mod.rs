//! Deterministic containers of the deb, rpm and wheel writers, one module
//! per format: [`ar`] (the deb), [`tar`] (its members), [`cpio`] (the rpm
//! payload), [`zip`] (the wheel). Each module says whether it uses a crate
//! or hand-written code, and why.
//!
//! Every writer takes the timestamp from the caller (SOURCE_DATE_EPOCH),
//! fixes owners to 0:0 root/root, and writes entries in the order it is
//! given (callers sort). Data is streamed from readers; nothing buffers a
//! whole member. Members whose size must precede their data (`ar`, `zip`)
//! are written with a placeholder and patched by seeking back, so the
//! output must be a seekable file.

pub mod ar;
pub mod cpio;
pub mod tar;
pub mod zip;

pub use self::ar::{read_ar_members, ArMember, ArWriter};
pub use self::cpio::{CpioData, CpioEntry, CpioReader, CpioWriter};
pub use self::tar::TarWriter;
pub use self::zip::{dos_datetime, ZipWriter};

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
