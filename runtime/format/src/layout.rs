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

/// Directory, beside the binaries, that holds archives and manifests.
pub const KPACK_DIR: &str = ".kpack";

/// File extension of archives (no dot).
pub const ARCHIVE_EXT: &str = "kpack";

/// File extension of manifests (no dot).
pub const MANIFEST_EXT: &str = "kpm";

/// Largest `.kpm` manifest read (docs/formats.md, "Input size limits").
pub const MAX_MANIFEST_FILE: u64 = 64 << 20;

/// Largest fetcher state file (`.rocm-kpack-fetch-state.json`) read.
pub const MAX_STATE_FILE: u64 = 16 << 20;

/// Largest sources file (`sources.d/*.toml`, `<component>.sources.toml`) read.
pub const MAX_SOURCES_FILE: u64 = 1 << 20;

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
        format!(
            "{up}{KPACK_DIR}/{}",
            archive_file_name(component, GFXARCH_PLACEHOLDER)
        ),
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

/// The prefix of a kpack file: the directory holding its `.kpack/`
/// directory (`usr/lib/x86_64-linux-gnu/.kpack/x.kpm` ->
/// `usr/lib/x86_64-linux-gnu`; `.kpack/x.kpm` -> ``). Manifest database
/// paths are relative to it.
pub fn kpack_prefix_of(rel: &str) -> &str {
    let dir = rel.rsplit_once('/').map_or("", |(d, _)| d);
    let kpack_parent = dir.strip_suffix(KPACK_DIR).unwrap_or(dir);
    kpack_parent.strip_suffix('/').unwrap_or(kpack_parent)
}

/// The most directory levels a database file may lie above its manifest's
/// prefix (`usr/lib/x86_64-linux-gnu` is three below its install root).
pub const MAX_DATABASE_UP: usize = 16;

/// Where a manifest's database file lies relative to the manifest's prefix,
/// as the fetcher names it in its state: `path` itself when the manifest
/// has no `prefix_path` (its paths are below the prefix); else `path` is
/// below the root the prefix lies `prefix_path` below, and the key climbs
/// the fewest levels needed, one `../` each (`prefix_path`
/// `usr/lib/x86_64-linux-gnu`, `usr/share/miopen/db/gfx90a68.kdb` ->
/// `../../share/miopen/db/gfx90a68.kdb`; `usr/lib/x86_64-linux-gnu/rocblas/x.co`
/// -> `rocblas/x.co`). `None` when `path` is the prefix or one of its
/// directories, or climbs more than [`MAX_DATABASE_UP`] levels. Both must
/// have passed their validators.
pub fn database_key(prefix_path: Option<&str>, path: &str) -> Option<String> {
    let Some(prefix_path) = prefix_path else {
        return Some(path.to_string());
    };
    let prefix: Vec<&str> = prefix_path.split('/').collect();
    let mut rest: Vec<&str> = path.split('/').collect();
    let mut matched = 0;
    while matched < prefix.len() && rest.len() > 1 && rest.first() == prefix.get(matched) {
        rest.remove(0);
        matched += 1;
    }
    let up = prefix.len() - matched;
    if up > MAX_DATABASE_UP
        || (matched < prefix.len() && rest.len() <= 1 && rest.first() == prefix.get(matched))
    {
        return None;
    }
    Some(format!("{}{}", "../".repeat(up), rest.join("/")))
}

/// A manifest's database file's path in the tree (package, install root)
/// the manifest's prefix `prefix` is in: `prefix/path`, or with a
/// `prefix_path` the root it names, `prefix` without that tail, joined to
/// `path`. `None` when `prefix` does not end in `prefix_path`.
pub fn database_tree_path(prefix: &str, prefix_path: Option<&str>, path: &str) -> Option<String> {
    let base = match prefix_path {
        None => prefix,
        Some(pp) if prefix == pp => "",
        Some(pp) => prefix.strip_suffix(pp)?.strip_suffix('/')?,
    };
    Some(if base.is_empty() {
        path.to_string()
    } else {
        format!("{base}/{path}")
    })
}

/// A [`database_key`] taken apart: how many levels it climbs above the
/// prefix, and the database path below that directory. `None` when the key
/// climbs more than [`MAX_DATABASE_UP`] levels or `..` appears past its
/// start (the path is then checked by the caller).
pub fn split_database_key(key: &str) -> Option<(usize, &str)> {
    let mut rest = key;
    let mut up = 0;
    while let Some(r) = rest.strip_prefix("../") {
        rest = r;
        up += 1;
    }
    (up <= MAX_DATABASE_UP).then_some((up, rest))
}

/// The key of the directory `dir` (a database path) `up` levels above the
/// prefix, as [`database_key`] spells it.
pub fn database_dir_key(up: usize, dir: &str) -> String {
    format!("{}{dir}", "../".repeat(up))
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

    /// The transport encoding of kernel-database objects: one zstd frame
    /// (`index.json` says `"encoding": "zstd"`; archives, already
    /// compressed, are stored as they are: `"identity"`).
    pub const DATABASE_ENCODING: &str = "zstd";

    /// The file-name suffix of [`DATABASE_ENCODING`] objects.
    pub const DATABASE_SUFFIX: &str = ".zst";

    /// The first bytes of a zstd frame, which a database object must start
    /// with: anything else is an encoding this reader does not know.
    pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

    /// `by-hash/sha256/<hex>.zst`: where the database file whose installed
    /// bytes have this digest lives, encoded, relative to the store root.
    pub fn database_object_path(sha256: &[u8; 32]) -> String {
        format!("{}{DATABASE_SUFFIX}", by_hash_path(sha256))
    }
}

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
pub mod names {
    use std::fmt;

    /// The longest accepted single name, in bytes (`NAME_MAX`).
    pub const MAX_NAME: usize = 255;

    /// The longest accepted member path, in bytes (`PATH_MAX`).
    pub const MAX_PATH: usize = 4096;

    /// What a name is; selects the grammar.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum NameKind {
        /// A relative install path inside a package (`usr/lib/x.so`).
        MemberPath,
        /// A component (`librocsparse`).
        Component,
        /// An archive file name (`<component>_<unit>.kpack`).
        ArchiveFile,
        /// A manifest file name (`<component>.kpm`).
        ManifestFile,
        /// A kernel-database file's path below a manifest's prefix
        /// (`rocblas/library/TensileLibrary_gfx90a.co`).
        DatabasePath,
        /// A database file's place relative to the manifest's prefix, as
        /// the fetcher records it (`../../share/miopen/db/x.kdb`; see
        /// [`super::database_key`]).
        DatabaseKey,
    }

    impl NameKind {
        /// The kind in words, for messages.
        pub fn describe(self) -> &'static str {
            match self {
                NameKind::MemberPath => "member path",
                NameKind::Component => "component name",
                NameKind::ArchiveFile => "archive file name",
                NameKind::ManifestFile => "manifest file name",
                NameKind::DatabasePath => "database path",
                NameKind::DatabaseKey => "database path relative to the prefix",
            }
        }
    }

    /// A refused name: what it was to be, a printable spelling and why.
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    #[error("refusing {kind} {shown}: {reason}")]
    pub struct NameError {
        /// What the name was to be, in words (`archive file name`).
        pub kind: &'static str,
        /// The name, escaped and shortened for printing.
        pub shown: String,
        /// Why it is refused.
        pub reason: String,
    }

    /// A name escaped (`{:?}`) and cut to 80 characters, so a hostile name
    /// cannot forge or flood a message.
    pub fn shown(name: &str) -> String {
        const SHOWN: usize = 80;
        if name.chars().count() <= SHOWN {
            return format!("{name:?}");
        }
        let head: String = name.chars().take(SHOWN).collect();
        format!("{head:?}... ({} bytes)", name.len())
    }

    /// The refusal of `name` as a `kind` (in words), because of `reason`.
    pub fn refuse(kind: &'static str, name: &str, reason: impl fmt::Display) -> NameError {
        NameError {
            kind,
            shown: shown(name),
            reason: reason.to_string(),
        }
    }

    /// Checks what every single name must be (see the module docs), then
    /// that each character is alphanumeric or in `extra`. `kind` says what
    /// the name is, in words.
    pub fn plain(kind: &'static str, name: &str, extra: &str) -> Result<(), NameError> {
        if name.is_empty() {
            return Err(refuse(kind, name, "empty"));
        }
        if name.len() > MAX_NAME {
            return Err(refuse(kind, name, format!("longer than {MAX_NAME} bytes")));
        }
        if name.contains("..") {
            return Err(refuse(kind, name, "contains `..`"));
        }
        if let Some(c) = name
            .chars()
            .find(|c| !c.is_ascii_alphanumeric() && !extra.contains(*c))
        {
            let why = match c {
                '/' | '\\' => "a path separator".to_string(),
                '\0' => "a NUL byte".to_string(),
                '%' => "a percent-encoding".to_string(),
                c if c.is_control() || c.is_whitespace() => {
                    format!("the control or space character {c:?}")
                }
                c => format!("the character {c:?}"),
            };
            return Err(refuse(kind, name, format!("contains {why}")));
        }
        if name.starts_with(['.', '-']) {
            return Err(refuse(kind, name, "starts with `.` or `-`"));
        }
        Ok(())
    }

    /// Refuses a name that does not start with an ASCII letter or digit.
    pub fn starts_alnum(kind: &'static str, name: &str) -> Result<(), NameError> {
        if name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
            Ok(())
        } else {
            Err(refuse(kind, name, "must start with a letter or digit"))
        }
    }

    /// Whether `text` is spelled like a URL scheme (`http`, `file`,
    /// `git+ssh`): joined onto a URL, `<scheme>:rest` would be absolute.
    fn looks_like_scheme(text: &str) -> bool {
        text.starts_with(|c: char| c.is_ascii_alphabetic())
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    }

    /// Checks `name` against the grammar of `kind`.
    pub fn check(kind: NameKind, name: &str) -> Result<(), NameError> {
        let what = kind.describe();
        match kind {
            NameKind::MemberPath => check_member_path(name),
            NameKind::DatabasePath => {
                check_member_path(name).map_err(|e| refuse(what, name, e.reason))?;
                if name.contains('\\') {
                    return Err(refuse(what, name, "contains a backslash"));
                }
                if name.split('/').any(|c| c == super::KPACK_DIR) {
                    return Err(refuse(
                        what,
                        name,
                        format!("lies in a {} directory", super::KPACK_DIR),
                    ));
                }
                if super::is_archive_path(name)
                    || super::manifest_component(name.rsplit('/').next().unwrap_or(name)).is_some()
                {
                    return Err(refuse(what, name, "names a kpack archive or manifest"));
                }
                Ok(())
            }
            NameKind::DatabaseKey => {
                let (_, rest) = super::split_database_key(name).ok_or_else(|| {
                    refuse(
                        what,
                        name,
                        format!("climbs more than {} levels", super::MAX_DATABASE_UP),
                    )
                })?;
                check(NameKind::DatabasePath, rest).map_err(|e| refuse(what, name, e.reason))
            }
            NameKind::Component => {
                plain(what, name, "._+-")?;
                starts_alnum(what, name)
            }
            NameKind::ArchiveFile => {
                // Archive names carry target ids: `x_gfx90a:xnack-.kpack`.
                plain(what, name, "._+:-")?;
                starts_alnum(what, name)?;
                if !super::is_archive_path(name) {
                    return Err(refuse(
                        what,
                        name,
                        format!("does not end in .{}", super::ARCHIVE_EXT),
                    ));
                }
                if name
                    .split_once(':')
                    .is_some_and(|(head, _)| looks_like_scheme(head))
                {
                    return Err(refuse(what, name, "starts like a URL scheme"));
                }
                Ok(())
            }
            NameKind::ManifestFile => {
                let component = super::manifest_component(name).ok_or_else(|| {
                    refuse(
                        what,
                        name,
                        format!("does not end in .{}", super::MANIFEST_EXT),
                    )
                })?;
                check(NameKind::Component, component).map_err(|e| refuse(what, name, e.reason))
            }
        }
    }

    /// A member path: relative, `/`-separated, every component a plain
    /// name (no `.`, `..` or empty ones), no control characters, at most
    /// [`MAX_PATH`] bytes. Other characters are allowed: packages install
    /// arbitrary file names.
    fn check_member_path(path: &str) -> Result<(), NameError> {
        let kind = NameKind::MemberPath.describe();
        if path.is_empty() {
            return Err(refuse(kind, path, "empty path"));
        }
        if path.len() > MAX_PATH {
            return Err(refuse(kind, path, format!("longer than {MAX_PATH} bytes")));
        }
        if path.starts_with('/') {
            return Err(refuse(kind, path, "absolute path"));
        }
        if path.chars().any(char::is_control) {
            return Err(refuse(kind, path, "control character in name"));
        }
        for comp in path.split('/') {
            match comp {
                "" => return Err(refuse(kind, path, "empty path component")),
                "." | ".." => return Err(refuse(kind, path, format!("`{comp}` path component"))),
                c if c.len() > MAX_NAME => {
                    return Err(refuse(
                        kind,
                        path,
                        format!("a component longer than {MAX_NAME} bytes"),
                    ))
                }
                _ => {}
            }
        }
        Ok(())
    }
}

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
