//! ELF surgery for x86-64 ELF64 little-endian fat binaries.
//!
//! Data flow: [`read`] parses the headers, dynamic relocations and the fat
//! binary wrappers of the input (through `object::elf`'s raw types, every
//! read bounds-checked); [`rewrite`] plans the new layout (device
//! code out, marker in) and writes the host-only bytes; [`verify`] re-parses
//! the result (with the `object` crate and our own checks) before anything is
//! written to disk; [`inspect`] reports what a fat or split binary carries.

pub mod inspect;
pub mod phdr;
pub mod read;
pub mod rewrite;
pub mod room;
pub mod verify;

pub use read::{Elf, Phdr, Shdr};
pub use rewrite::{classify, rewrite, Classification, FatElf, Rewritten, WrapperInfo};

/// Why an ELF file cannot be split.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    /// The input does not start with the ELF magic.
    #[error("not an ELF file")]
    NotElf,
    /// A header or table runs past the end of the file.
    #[error("truncated ELF: {0}")]
    Truncated(String),
    /// A valid ELF file this tool does not handle (32-bit, big-endian,
    /// another machine, relocatable objects).
    #[error("unsupported ELF: {0}")]
    Unsupported(String),
    /// Inconsistent headers, tables or fat binary wrappers.
    #[error("malformed ELF: {0}")]
    Malformed(String),
    /// Splitting would leave something pointing at removed device code.
    #[error("refusing to split: {0}")]
    Refused(String),
    /// The rewritten file failed the structural checks (a bug in the
    /// rewrite; nothing is written).
    #[error("rewritten ELF failed verification: {0}")]
    Verify(String),
    /// A format inside the ELF file (bundles, marker) is invalid.
    #[error(transparent)]
    Format(#[from] rocm_kpack_format::Error),
}

/// Shorthand result type of this module.
pub type Result<T, E = ElfError> = std::result::Result<T, E>;
