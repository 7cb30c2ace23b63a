//! `.kpack` archives, version 1 (docs/formats.md section 1).
//!
//! ```text
//! 0   "KPAK"  u32 version=1  u64 toc_offset  48 zero bytes
//! 64  blob region (scheme-dependent)
//! toc_offset..EOF  one MessagePack map (the TOC)
//! ```
//!
//! [`Archive`] reads (memory-mapped, lazily), `ArchiveWriter` (feature
//! `write`) writes (streaming, deterministic, deduplicating, compressing
//! in parallel).

mod read;
#[cfg(feature = "write")]
pub mod transport;
mod wire;
#[cfg(feature = "write")]
mod write;

pub use read::Archive;
#[cfg(feature = "write")]
pub use write::{ArchiveWriter, DEFAULT_IN_FLIGHT_BYTES};

use crate::msgpack::Value;
use std::fmt;

/// File magic.
pub const MAGIC: [u8; 4] = *b"KPAK";
/// The only format version this crate reads and writes.
pub const FORMAT_VERSION: u32 = 1;
/// Size of the fixed header; the blob region starts here.
pub const HEADER_SIZE: u64 = 64;
/// zstd level used when the caller has no preference and speed matters
/// more than size (one binary at a time, tests, development builds).
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;
/// zstd level of release outputs (trees, artifacts, packages, recombined
/// shards): what users download. Chosen by measurement on Debian's
/// librocsparse (see `docs/formats.md`); decoding speed does not depend on
/// the level, so only the one-time split pays for it.
pub const RELEASE_ZSTD_LEVEL: i32 = 19;

/// Largest kernel the writer stores and the reader decompresses (1 GiB):
/// a TOC entry above it is refused when the archive is opened. Real code
/// objects are at most tens of MiB; a bigger entry is corruption or a bomb
/// (a 128 KiB zstd frame truthfully decodes to 4 GiB), and this is what
/// bounds the memory reading one kernel of a hostile archive can cost.
pub const MAX_KERNEL_SIZE: u64 = 1 << 30;

/// Largest TOC the reader parses (256 MiB; a million entries take about
/// 60 MiB). The TOC is the one part of an archive decoded into memory, so
/// this bounds what opening a hostile archive can cost.
pub const MAX_TOC_SIZE: u64 = 256 << 20;

/// An archive larger than this (1 MiB) must have most of its bytes on disk:
/// one whose allocated blocks cover less than half its size is sparse (a
/// hole posing as data) and is refused before it is mapped.
pub const SPARSE_CHECK_MIN: u64 = 1 << 20;

/// Largest decompressed/compressed ratio the reader accepts for a zstd
/// frame. A zstd block decodes to at most 128 KiB and takes at least 4
/// bytes (an RLE block), so no valid frame exceeds 32768:1. A frame that
/// claims more is lying, and the reader refuses it before allocating, so
/// the memory a kernel can cost is bounded by the bytes of its frame.
pub const MAX_ZSTD_RATIO: u64 = 32 * 1024;

/// How kernels are stored in the blob region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompressionScheme {
    /// `"none"`: kernels concatenated, located by the TOC's `blobs` array.
    None,
    /// `"zstd-per-kernel"`: `u32 num_frames`, then per ordinal a `u32`
    /// size and one independent zstd frame carrying its content size.
    ZstdPerKernel,
}

impl CompressionScheme {
    /// The TOC spelling of the scheme.
    pub fn as_str(self) -> &'static str {
        match self {
            CompressionScheme::None => "none",
            CompressionScheme::ZstdPerKernel => "zstd-per-kernel",
        }
    }

    /// Parses the TOC spelling.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "none" => Some(CompressionScheme::None),
            "zstd-per-kernel" => Some(CompressionScheme::ZstdPerKernel),
            _ => None,
        }
    }
}

impl fmt::Display for CompressionScheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One TOC entry: where a (binary, arch) code object lives.
#[derive(Debug, Clone, PartialEq)]
pub struct TocEntry {
    /// Index of the blob (several entries may share one).
    pub ordinal: u32,
    /// Exact size of the code object once decompressed.
    pub original_size: u64,
    /// Free-form metadata map, when the writer recorded one.
    pub metadata: Option<Value>,
}
