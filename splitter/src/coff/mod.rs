//! PE/COFF surgery for x86-64 PE32+ fat binaries (Windows DLLs and EXEs).
//!
//! The Windows counterpart of [`crate::elf`]. HIP on Windows keeps device
//! code in `.hip_fat` (offload bundles or CCOB), the
//! `__CudaFatBinaryWrapper`s in `.hipFatB`, and the wrappers' pointers are
//! absolute addresses fixed up through base relocations (`.reloc`). PE
//! section names are limited to 8 bytes, so the marker section is
//! `.kpackrf` (the public rocm-kpack name) rather than `.rocm_kpack_ref`.
//!
//! Data flow: [`read`] parses the headers (validated by `object`'s PE
//! reader), sections, base relocations and wrappers; [`rewrite`] appends
//! `.kpackrf`, redirects the wrappers (HIPF -> HIPK, `reserved1` =
//! co_index) and reclaims `.hip_fat`'s file bytes; [`verify`] re-parses the
//! result before anything is written; [`inspect`] reports what a PE file
//! carries.

pub mod inspect;
pub mod read;
pub mod rewrite;
pub mod verify;

pub use read::{classify, is_pe, Classification, FatPe, Pe, Section};
pub use rewrite::{rewrite, Rewritten};

/// Why a PE file cannot be split.
#[derive(Debug, thiserror::Error)]
pub enum PeError {
    /// The input does not start with an `MZ` header leading to `PE\0\0`.
    #[error("not a PE/COFF image: {0}")]
    NotPe(String),
    /// A header or table runs past the end of the file.
    #[error("truncated PE image: {0}")]
    Truncated(String),
    /// A valid image this tool does not split (PE32, a machine other than
    /// x86-64).
    #[error("unsupported PE image: {0}")]
    Unsupported(String),
    /// Inconsistent headers, sections, relocations or wrappers.
    #[error("malformed PE image: {0}")]
    Malformed(String),
    /// Splitting would leave something pointing at reclaimed device code.
    #[error("refusing to split: {0}")]
    Refused(String),
    /// The rewritten image failed verification (a bug in the rewrite;
    /// nothing is written).
    #[error("rewritten PE image failed verification: {0}")]
    Verify(String),
    /// A format inside the image (bundles, marker) is invalid.
    #[error(transparent)]
    Format(#[from] rocm_kpack_format::Error),
}

/// Shorthand result type of this module.
pub type Result<T, E = PeError> = std::result::Result<T, E>;
