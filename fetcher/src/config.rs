//! The fetcher's own files and configuration schema: the lock, state and
//! temporary files it keeps in each `.kpack/` directory it installs into,
//! and the sources files it reads (`sources.d/*.toml`, a package's
//! `<component>.sources.toml`). Where packages put sources files is
//! shared with the packagers: `rocm_kpack_format::layout::fetch`.

use serde::Deserialize;

/// Extension of the files read from
/// [`SOURCES_D`](rocm_kpack_format::layout::fetch::SOURCES_D) (no dot).
pub const SOURCES_EXT: &str = "toml";

/// One install at a time per `.kpack/` directory.
pub const LOCK_FILE: &str = ".rocm-kpack-fetch.lock";

/// What was installed, from where and why.
pub const STATE_FILE: &str = ".rocm-kpack-fetch-state.json";

/// Temporary files: `<prefix><pid>.<n><suffix>`, so stale ones from a
/// killed run are recognisable.
pub const TEMP_PREFIX: &str = ".rocm-kpack-fetch.";
/// See [`TEMP_PREFIX`].
pub const TEMP_SUFFIX: &str = ".tmp";

/// A sources file: `[[source]]` tables, tried in order.
///
/// ```toml
/// [[source]]
/// url = "https://repo.example.org/kpack/"
/// components = ["librocrand"]   # optional: only these components
/// ```
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourcesFile {
    /// The sources, in the order they are tried.
    #[serde(default)]
    pub source: Vec<SourceEntry>,
}

/// One `[[source]]` of a [`SourcesFile`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceEntry {
    /// Base URL (or absolute directory path) of a kpack store.
    pub url: String,
    /// Only for these components (absent: all).
    pub components: Option<Vec<String>>,
}
