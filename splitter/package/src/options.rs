//! What a [`crate::package`] run is asked for: formats, metadata, the
//! spec, timestamps and compression.

use rocm_kpack_pkgspec::Spec;
use serde::Serialize;

use crate::compress::Compression;
use crate::meta::PackageMeta;
use crate::progress::ProgressHandle;
use crate::PackageError;

/// Output package format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Debian package.
    Deb,
    /// RPM package.
    Rpm,
    /// Python wheel.
    Wheel,
}

impl Format {
    /// Parses `deb`, `rpm`, `wheel`/`whl`.
    pub fn from_name(s: &str) -> Option<Format> {
        match s {
            "deb" => Some(Format::Deb),
            "rpm" => Some(Format::Rpm),
            "wheel" | "whl" => Some(Format::Wheel),
            _ => None,
        }
    }
}

/// The timestamp used when SOURCE_DATE_EPOCH is not set (2024-01-01).
pub const DEFAULT_SOURCE_DATE_EPOCH: u64 = 1_704_067_200;

/// SOURCE_DATE_EPOCH from the environment, or the default. A set but
/// malformed value is an error.
pub fn source_date_epoch() -> Result<u64, PackageError> {
    match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) if !v.trim().is_empty() => v.trim().parse().map_err(|_| {
            PackageError::Invalid(format!(
                "SOURCE_DATE_EPOCH={v:?} is not a number of seconds"
            ))
        }),
        _ => Ok(DEFAULT_SOURCE_DATE_EPOCH),
    }
}

/// How [`package`] packages.
#[derive(Debug, Clone)]
pub struct PackageOptions {
    /// Formats to write.
    pub formats: Vec<Format>,
    /// Metadata of the original package.
    pub meta: PackageMeta,
    /// Device groups (for the targets a generic ISA serves).
    pub spec: Spec,
    /// Timestamp of every entry and the rpm build time.
    pub source_date_epoch: u64,
    /// Compression of deb members and rpm payloads (default xz).
    pub compression: Compression,
    /// Compression level (None = the compressor's default).
    pub level: Option<u32>,
    /// Compression of device packages; None = automatic, from the whole
    /// payload: when it is only `.kpack` archives that are all
    /// zstd-compressed per kernel, recompressing with xz -6 saves about 1%
    /// at about 2 MB/s, so such groups get gzip level 1 (readable by every
    /// dpkg and rpm); groups with uncompressed archives or with anything
    /// else (kernel-database files: uncompressed code objects) get
    /// `compression` at `level`, the release setting (xz -6 by default).
    /// A spec with `[package] device_payload = "solid"` makes the automatic
    /// choice zstd -19 with a 2^27 window ([`Compression::ZstdLong`]).
    pub device_compression: Option<Compression>,
    /// Device package compression level (None = the compressor's default).
    pub device_level: Option<u32>,
    /// Replace package files that exist (`--force`); else they are refused.
    pub replace_existing: bool,
    /// Where progress goes (one item per package written).
    pub progress: ProgressHandle,
}

impl PackageOptions {
    /// Options with defaults for everything but the metadata.
    pub fn new(meta: PackageMeta) -> PackageOptions {
        PackageOptions {
            formats: vec![Format::Deb],
            meta,
            spec: Spec::default_families(),
            source_date_epoch: DEFAULT_SOURCE_DATE_EPOCH,
            compression: Compression::Xz,
            level: None,
            device_compression: None,
            device_level: None,
            replace_existing: false,
            progress: ProgressHandle::default(),
        }
    }
}
