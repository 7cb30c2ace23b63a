//! The packaging error type.

use std::io;
use std::path::{Path, PathBuf};

use rocm_kpack_fs::PathError;

/// Everything that can stop building or reading a package.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    /// A file system operation failed.
    // Not transparent: the PathError stays in the source chain, where
    // rocm_kpack_cli::hint_for finds the path of a full file system.
    #[error("{0}")]
    Io(#[from] PathError),
    /// An input package (or split tree file) is malformed.
    #[error("{}: {detail}", path.display())]
    Corrupt {
        /// The input.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A member path or symlink that would leave the install root, or a
    /// name that cannot be packaged.
    #[error("{}: unsafe entry {member:?}: {why}", path.display())]
    UnsafePath {
        /// The tree or package holding it.
        path: PathBuf,
        /// The entry.
        member: String,
        /// Why it is refused.
        why: String,
    },
    /// A name read from a package (a control field, an rpm tag, a wheel
    /// file name) that may not become a file name or path.
    #[error("{}: {field}: {source}", path.display())]
    UnsafeName {
        /// The package.
        path: PathBuf,
        /// The field or tag it came from (`Package`, `NAME`, ...).
        field: &'static str,
        /// The validator's verdict.
        #[source]
        source: rocm_kpack_format::layout::names::NameError,
    },
    /// A wheel whose RECORD does not match its files.
    #[error("{}: RECORD mismatch: {detail}", path.display())]
    Record {
        /// The wheel.
        path: PathBuf,
        /// Which entry and how.
        detail: String,
    },
    /// A `.kpack` archive or `.kpm` manifest that does not parse.
    #[error("{}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// The format error.
        #[source]
        source: rocm_kpack_format::Error,
    },
    /// The spec is invalid.
    #[error(transparent)]
    Spec(#[from] rocm_kpack_pkgspec::SpecError),
    /// Bad options or metadata.
    #[error("{0}")]
    Invalid(String),
}

impl PackageError {
    /// An I/O error on `path`.
    pub fn io(what: &'static str, path: &Path, source: io::Error) -> Self {
        PackageError::Io(PathError::new(what, path, source))
    }

    /// A malformed input.
    pub fn corrupt(path: &Path, detail: impl Into<String>) -> Self {
        PackageError::Corrupt {
            path: path.to_path_buf(),
            detail: detail.into(),
        }
    }

    /// Checks a name read from the package at `path` (field `field`).
    pub fn check_name(
        path: &Path,
        field: &'static str,
        kind: rocm_kpack_pkgspec::fields::FieldKind,
        name: &str,
    ) -> Result<(), Self> {
        rocm_kpack_pkgspec::fields::check(kind, name).map_err(|source| PackageError::UnsafeName {
            path: path.to_path_buf(),
            field,
            source,
        })
    }

    /// A refused entry.
    pub fn unsafe_path(path: &Path, member: &str, why: impl Into<String>) -> Self {
        PackageError::UnsafePath {
            path: path.to_path_buf(),
            member: member.to_string(),
            why: why.into(),
        }
    }
}
