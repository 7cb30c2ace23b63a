//! How archives are written, for every command that writes them
//! (`split-binary`, `split`, `split-package`, `recombine`): compression,
//! level, threads, memory budget, and whether existing outputs may be
//! replaced.

use rocm_kpack_format::archive::{CompressionScheme, DEFAULT_ZSTD_LEVEL, RELEASE_ZSTD_LEVEL};

use crate::budget::Work;

/// Archive output settings. [`ArchiveOutput::release`] is the default of
/// the commands whose outputs users download; [`ArchiveOutput::fast`] that
/// of `split-binary`, which is for trying things out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchiveOutput {
    /// Archive compression (None: zstd, one frame per code object; for
    /// `recombine`, the scheme of each shard's archive, which may then be
    /// copied unchanged).
    pub compression: Option<CompressionScheme>,
    /// zstd level of the archives written. The level never changes the
    /// bytes a loader gets back.
    pub zstd_level: i32,
    /// Compression threads (None: one per core, as the budget allows).
    pub jobs: Option<usize>,
    /// Memory budget in bytes (None: [`crate::budget::default_budget`]):
    /// bounds the compression threads and each writer's queue.
    pub memory: Option<u64>,
    /// Replace outputs that exist (`--force`); else they are refused.
    pub replace_existing: bool,
}

impl ArchiveOutput {
    /// zstd at [`RELEASE_ZSTD_LEVEL`], every core, the default budget.
    pub fn release() -> Self {
        ArchiveOutput {
            compression: None,
            zstd_level: RELEASE_ZSTD_LEVEL,
            jobs: None,
            memory: None,
            replace_existing: false,
        }
    }

    /// As [`ArchiveOutput::release`], at the fast [`DEFAULT_ZSTD_LEVEL`].
    pub fn fast() -> Self {
        ArchiveOutput {
            zstd_level: DEFAULT_ZSTD_LEVEL,
            ..ArchiveOutput::release()
        }
    }

    /// The scheme of the archives written (zstd when none was asked for).
    pub fn scheme(&self) -> CompressionScheme {
        self.compression.unwrap_or(CompressionScheme::ZstdPerKernel)
    }

    /// The worker pool and memory budget these settings give.
    pub fn work(&self) -> Result<Work, String> {
        Work::new(self.memory, self.jobs, self.scheme(), self.zstd_level)
    }
}

impl Default for ArchiveOutput {
    fn default() -> Self {
        ArchiveOutput::release()
    }
}
