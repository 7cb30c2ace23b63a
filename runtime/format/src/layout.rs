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
//!
//! The module is split by what it names: `files` (archive and manifest
//! names, marker search paths), `database` (database keys and paths),
//! [`store`], [`pip`], [`fetch`] and the [`names`] validators. Everything
//! is reachable as `layout::X`, as before the split.

mod database;
mod files;
pub mod store;

pub use database::{
    database_dir_key, database_key, database_tree_path, split_database_key, MAX_DATABASE_UP,
};
pub use files::{
    archive_file_name, archive_unit, expand_pattern, is_archive_path, is_archive_pattern,
    is_in_kpack_dir, is_manifest_path, kpack_prefix_of, manifest_component, manifest_file_name,
    marker_search_paths, split_pattern, ARCHIVE_EXT, GFXARCH_PLACEHOLDER, KPACK_DIR, MANIFEST_EXT,
    MAX_MANIFEST_FILE,
};

/// Largest fetcher state file (`.rocm-kpack-fetch-state.json`) read.
pub const MAX_STATE_FILE: u64 = 16 << 20;

/// Largest sources file (`sources.d/*.toml`, `<component>.sources.toml`) read.
pub const MAX_SOURCES_FILE: u64 = 1 << 20;

/// The pip index `rocm-kpack publish --pip` writes: beside the flat
/// `simple/` index, one PEP 503 view per GPU family in which the base
/// distributions require their family's device wheels.
pub mod pip {
    /// Directory of the per-family views, relative to the repository root.
    pub const VIEWS_DIR: &str = "families";

    /// `families/<group, lower case>/`: the index URL path of a family's
    /// view (what `rocm-kpack-fetch pip-index-url` prints after the base).
    pub fn view_path(group: &str) -> String {
        format!("{VIEWS_DIR}/{}/", group.to_ascii_lowercase())
    }
}

/// The names of the fetcher's sources files that packages ship and the
/// fetcher reads (the files it keeps in `.kpack/` directories, and the
/// sources files' schema, are the fetcher's own: `fetcher/src/config.rs`).
pub mod fetch {
    /// Directory of sources files, relative to the root (`/`).
    pub const SOURCES_D: &str = "etc/rocm-kpack/sources.d";

    /// The sources file that the `rocm-kpack-fetch` packages built by
    /// `rocm-kpack publish --store-url` install in [`SOURCES_D`].
    pub const PUBLISHED_SOURCES_FILE: &str = "50-rocm-kpack-publish.toml";

    /// Suffix of a package-shipped sources file next to `<component>.kpm`.
    pub const COMPONENT_SOURCES_SUFFIX: &str = ".sources.toml";

    /// `<component>.sources.toml`: the sources a package ships for one
    /// component, in its `.kpack/` directory.
    pub fn component_sources_file_name(component: &str) -> String {
        format!("{component}{COMPONENT_SOURCES_SUFFIX}")
    }
}

/// Validators for the file and path names read from input (manifests,
/// the fetcher's state file, package members) before they become a path
/// component or a URL path segment. Each kind has one grammar; whatever
/// fails it is refused with a [`names::NameError`] that the caller wraps
/// with the field and the file.
///
/// Every accepted single name is non-empty, at most [`names::MAX_NAME`]
/// bytes, free of `/`, `\`, `%`, `..`, NUL, whitespace and control
/// characters, and never starts with `-` or `.` ([`names::plain`]). The
/// package-field grammars (Debian, rpm, PEP 427/440/508) build on the same
/// rule and live with the package model (`rocm_kpack_pkgspec::fields`).
pub mod names;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_accept_real_ones() {
        use names::{check, NameKind::*};
        for (kind, ok) in [
            (MemberPath, "usr/lib/x86_64-linux-gnu/libfoo.so.1"),
            (MemberPath, "opt/my dir/file with spaces"),
            (Component, "librocsparse"),
            (ArchiveFile, "librocsparse_gfx90X.kpack"),
            (ArchiveFile, "libfixture_gfx90a:xnack-.kpack"),
            (ArchiveFile, "lib_gfx9-4-generic.kpack"),
            (ManifestFile, "librocsparse.kpm"),
        ] {
            assert_eq!(check(kind, ok), Ok(()), "{kind:?} {ok:?}");
        }
    }

    #[test]
    fn names_refuse_hostile_ones() {
        use names::{check, NameKind::*};
        let long = "a".repeat(300);
        let long_archive = format!("{}.kpack", "a".repeat(300));
        let long_path = "a/".repeat(3000);
        let kinds_and_names: &[(names::NameKind, &[&str])] = &[
            (
                MemberPath,
                &[
                    "../etc/passwd",
                    "/etc/passwd",
                    "a/../../b",
                    "a//b",
                    "a/./b",
                    "a\nb",
                    "a\0b",
                    "",
                    &long_path,
                ],
            ),
            (
                Component,
                &["..", "../x", "/x", "a/b", "%2e%2e", "x\n", ".x", &long],
            ),
            (
                ArchiveFile,
                &[
                    "..",
                    "../x.kpack",
                    "/etc/x.kpack",
                    "http:host",
                    "http:host.kpack",
                    "file:%2F..%2Fetc.kpack",
                    "//host/x.kpack",
                    "%2e%2e.kpack",
                    "x.kpack\n",
                    "x\0.kpack",
                    "a/b.kpack",
                    "x.txt",
                    ".kpack",
                    "x\\y.kpack",
                    &long_archive,
                ],
            ),
            (
                ManifestFile,
                &["../x.kpm", ".kpm", "x.kpack", "/x.kpm", "a b.kpm"],
            ),
        ];
        for (kind, bad) in kinds_and_names {
            for name in *bad {
                let err =
                    check(*kind, name).expect_err(&format!("{kind:?} {name:?} must be refused"));
                let text = err.to_string();
                assert!(text.starts_with("refusing "), "{text}");
                assert!(text.len() < 300, "message is bounded: {text}");
                assert!(!text.contains('\n') && !text.contains('\0'), "{text:?}");
            }
        }
    }

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
