//! One error type for every format and the loader. Each variant carries the
//! context a person needs (file, offset, what was expected); [`Error::code`]
//! maps it onto the fixed `kpack_error_t` numbering of the C ABI.

use std::path::PathBuf;

use rocm_kpack_fs::PathError;

/// Result alias used throughout the runtime crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The `kpack_error_t` values of the reference C ABI. Never renumber.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    Success = 0,
    InvalidArgument = 1,
    FileNotFound = 2,
    InvalidFormat = 3,
    UnsupportedVersion = 4,
    KernelNotFound = 5,
    DecompressionFailed = 6,
    OutOfMemory = 7,
    NotImplemented = 8,
    IoError = 9,
    MsgpackParseFailed = 10,
    PathDiscoveryFailed = 11,
    InvalidMetadata = 12,
    ArchiveNotFound = 13,
    ArchNotFound = 14,
}

/// Every failure the runtime reports.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("{}: file not found", path.display())]
    FileNotFound { path: PathBuf },
    #[error(transparent)]
    Io(PathError),
    /// Structural problem in a binary format (bad magic, truncation, offsets
    /// out of range, wrong field types).
    #[error("invalid {what} at offset {offset}: {detail}")]
    InvalidFormat {
        what: &'static str,
        offset: u64,
        detail: String,
    },
    #[error("unsupported {what} version {found} (this build reads {supported})")]
    UnsupportedVersion {
        what: &'static str,
        found: u64,
        supported: &'static str,
    },
    #[error("malformed MessagePack at offset {offset}: {detail}")]
    Msgpack { offset: u64, detail: String },
    #[error("no kernel {binary:?} for architecture {arch:?}")]
    KernelNotFound { binary: String, arch: String },
    #[error("decompression failed: {0}")]
    Decompression(String),
    #[error("invalid metadata: {0}")]
    InvalidMetadata(String),
    #[error("no archive found; searched: {}", searched.join(", "))]
    ArchiveNotFound { searched: Vec<String> },
    #[error("no compatible architecture: wanted [{}], available [{}]", wanted.join(", "), available.join(", "))]
    ArchNotFound {
        wanted: Vec<String>,
        available: Vec<String>,
    },
    #[error("disabled by ROCM_KPACK_DISABLE")]
    Disabled,
    #[error("cannot discover binary path: {0}")]
    PathDiscovery(String),
}

impl Error {
    /// The C ABI error code for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::InvalidArgument(_) => ErrorCode::InvalidArgument,
            Error::FileNotFound { .. } => ErrorCode::FileNotFound,
            Error::Io(_) => ErrorCode::IoError,
            Error::InvalidFormat { .. } => ErrorCode::InvalidFormat,
            Error::UnsupportedVersion { .. } => ErrorCode::UnsupportedVersion,
            Error::Msgpack { .. } => ErrorCode::MsgpackParseFailed,
            Error::KernelNotFound { .. } => ErrorCode::KernelNotFound,
            Error::Decompression(_) => ErrorCode::DecompressionFailed,
            Error::InvalidMetadata(_) => ErrorCode::InvalidMetadata,
            Error::ArchiveNotFound { .. } => ErrorCode::ArchiveNotFound,
            Error::ArchNotFound { .. } => ErrorCode::ArchNotFound,
            Error::Disabled => ErrorCode::NotImplemented,
            Error::PathDiscovery(_) => ErrorCode::PathDiscoveryFailed,
        }
    }

    /// An error reading `path`; `NotFound` becomes [`Error::FileNotFound`].
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        PathError::new("cannot read", path, source).into()
    }

    /// Shorthand for [`Error::InvalidFormat`].
    pub fn format(what: &'static str, offset: u64, detail: impl Into<String>) -> Self {
        Error::InvalidFormat {
            what,
            offset,
            detail: detail.into(),
        }
    }
}

impl From<PathError> for Error {
    /// `NotFound` becomes [`Error::FileNotFound`].
    fn from(e: PathError) -> Self {
        if e.source.kind() == std::io::ErrorKind::NotFound {
            Error::FileNotFound { path: e.path }
        } else {
            Error::Io(e)
        }
    }
}
