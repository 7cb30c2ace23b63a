//! The one place that names rocm-kpack's files and directories: archive and
//! manifest names, the search paths a marker records, the kpack store's
//! content-addressed paths, and the fetcher's configuration, lock and state
//! files. Every other crate builds these names through this module, so the
//! splitter that writes a tree, the loader that searches it and the fetcher
//! that fills it cannot disagree (`docs/formats.md`, "File layout").
//!
//! The archive name is what the reference loader expands: a marker's
//! `<component>_@GFXARCH@.kpack` pattern with `@GFXARCH@` replaced by a
//! processor name, so `<component>_<unit>.kpack` is found by any loader
//! that follows the pattern.

use serde::Deserialize;

/// Directory, beside the binaries, that holds archives and manifests.
pub const KPACK_DIR: &str = ".kpack";

/// File extension of archives (no dot).
pub const ARCHIVE_EXT: &str = "kpack";

/// File extension of manifests (no dot).
pub const MANIFEST_EXT: &str = "kpm";

/// Placeholder in a marker's search path that the loader replaces with the
/// architecture it is looking for.
pub const GFXARCH_PLACEHOLDER: &str = "@GFXARCH@";

/// `<component>_<unit>.kpack`: the archive of one device group, processor
/// or generic ISA (`unit`) of a component.
pub fn archive_file_name(component: &str, unit: &str) -> String {
    format!("{component}_{unit}.{ARCHIVE_EXT}")
}

/// `<component>.kpm`: the manifest listing a component's archives.
pub fn manifest_file_name(component: &str) -> String {
    format!("{component}.{MANIFEST_EXT}")
}

/// The component a manifest file name belongs to (`x.kpm` -> `x`).
pub fn manifest_component(file_name: &str) -> Option<&str> {
    file_name
        .strip_suffix(MANIFEST_EXT)
        .and_then(|s| s.strip_suffix('.'))
        .filter(|c| !c.is_empty())
}

/// The unit of `component`'s archive file name
/// (`x_gfx90a.kpack` -> `gfx90a`), if it is one of that component's.
pub fn archive_unit<'a>(component: &str, file_name: &'a str) -> Option<&'a str> {
    file_name
        .strip_prefix(component)
        .and_then(|r| r.strip_prefix('_'))
        .and_then(|r| r.strip_suffix(ARCHIVE_EXT))
        .and_then(|r| r.strip_suffix('.'))
        .filter(|u| !u.is_empty())
}

/// The two search paths a split binary's marker records, relative to the
/// binary's directory: the manifest first, then the archive pattern.
/// `up` is the way from that directory to the tree's `.kpack/` parent
/// (`""` or `"../"`, `"../../"`, ...).
pub fn marker_search_paths(up: &str, component: &str) -> [String; 2] {
    [
        format!("{up}{KPACK_DIR}/{}", manifest_file_name(component)),
        format!("{up}{KPACK_DIR}/{}", archive_file_name(component, GFXARCH_PLACEHOLDER)),
    ]
}

/// Whether a marker search path is an archive pattern.
pub fn is_archive_pattern(search_path: &str) -> bool {
    search_path.contains(GFXARCH_PLACEHOLDER)
}

/// Whether a marker search path names a manifest.
pub fn is_manifest_path(path: &str) -> bool {
    has_extension(path, MANIFEST_EXT)
}

/// Whether a file name is an archive's (`*.kpack`).
pub fn is_archive_path(path: &str) -> bool {
    has_extension(path, ARCHIVE_EXT)
}

/// A pattern with its placeholder replaced by `arch` (the first occurrence,
/// as the reference loader does).
pub fn expand_pattern(pattern: &str, arch: &str) -> String {
    pattern.replacen(GFXARCH_PLACEHOLDER, arch, 1)
}

/// The text before and after the placeholder of an archive pattern.
pub fn split_pattern(pattern: &str) -> Option<(&str, &str)> {
    pattern.split_once(GFXARCH_PLACEHOLDER)
}

/// Whether a `/`-separated relative path is an archive or manifest directly
/// inside a `.kpack/` directory (the only place the tools put them).
pub fn is_in_kpack_dir(rel: &str) -> bool {
    let (dir, name) = rel.rsplit_once('/').unwrap_or(("", rel));
    let in_kpack_dir = dir == KPACK_DIR || dir.ends_with(&format!("/{KPACK_DIR}"));
    in_kpack_dir && (is_archive_path(name) || is_manifest_path(name))
}

fn has_extension(path: &str, ext: &str) -> bool {
    path.strip_suffix(ext).is_some_and(|s| s.ends_with('.'))
}

/// The kpack store: a directory (or URL) of archives by content,
/// `by-hash/sha256/<hex>`, plus an index.
pub mod store {
    /// The content-addressed directory, relative to the store root.
    pub const BY_HASH_DIR: &str = "by-hash/sha256";

    /// The store's index of archives, relative to its root.
    pub const INDEX_FILE: &str = "index.json";

    /// `by-hash/sha256/<hex>`: where the archive with this digest lives,
    /// relative to the store root (or a source URL).
    pub fn by_hash_path(sha256: &[u8; 32]) -> String {
        format!("{BY_HASH_DIR}/{}", hex::encode(sha256))
    }
}

/// The fetcher's files: where it reads sources, and the lock, state and
/// temporary files it keeps in each `.kpack/` directory it installs into.
pub mod fetch {
    use super::Deserialize;

    /// Directory of sources files, relative to the root (`/`).
    pub const SOURCES_D: &str = "etc/rocm-kpack/sources.d";

    /// Extension of the files read from [`SOURCES_D`] (no dot).
    pub const SOURCES_EXT: &str = "toml";

    /// Suffix of a package-shipped sources file next to `<component>.kpm`.
    pub const COMPONENT_SOURCES_SUFFIX: &str = ".sources.toml";

    /// `<component>.sources.toml`: the sources a package ships for one
    /// component, in its `.kpack/` directory.
    pub fn component_sources_file_name(component: &str) -> String {
        format!("{component}{COMPONENT_SOURCES_SUFFIX}")
    }

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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let name = archive_file_name("librocsparse", "gfx90a");
        assert_eq!(name, "librocsparse_gfx90a.kpack");
        assert_eq!(archive_unit("librocsparse", &name), Some("gfx90a"));
        assert_eq!(archive_unit("librocsparse", "librocsparse.kpack"), None);
        assert_eq!(archive_unit("lib", "other_gfx90a.kpack"), None);
        assert_eq!(manifest_component(&manifest_file_name("x")), Some("x"));
        assert_eq!(manifest_component(".kpm"), None);
        assert_eq!(manifest_component("xkpm"), None);
    }

    #[test]
    fn marker_paths_expand_to_archive_names() {
        let [kpm, pattern] = marker_search_paths("../", "rand");
        assert_eq!(kpm, "../.kpack/rand.kpm");
        assert_eq!(pattern, "../.kpack/rand_@GFXARCH@.kpack");
        assert!(is_archive_pattern(&pattern) && is_manifest_path(&kpm));
        assert_eq!(
            expand_pattern(&pattern, "gfx90a:xnack-"),
            format!("../.kpack/{}", archive_file_name("rand", "gfx90a:xnack-"))
        );
        assert_eq!(split_pattern(&pattern), Some(("../.kpack/rand_", ".kpack")));
    }

    #[test]
    fn kpack_dir_paths() {
        assert!(is_in_kpack_dir(".kpack/x.kpm"));
        assert!(is_in_kpack_dir("lib/.kpack/x_gfx90X.kpack"));
        assert!(!is_in_kpack_dir("lib/x.kpack"));
        assert!(!is_in_kpack_dir("lib/.kpack/readme"));
        assert!(!is_in_kpack_dir("lib/my.kpack/x.kpm"));
    }

    #[test]
    fn store_paths() {
        assert_eq!(
            store::by_hash_path(&[0xab; 32]),
            format!("by-hash/sha256/{}", "ab".repeat(32))
        );
    }
}
