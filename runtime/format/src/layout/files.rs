//! The names of kpack files and directories: archives, manifests, the
//! `.kpack/` directory beside the binaries, and the search paths a marker
//! records (re-exported as `layout::*`).

/// Directory, beside the binaries, that holds archives and manifests.
pub const KPACK_DIR: &str = ".kpack";

/// File extension of archives (no dot).
pub const ARCHIVE_EXT: &str = "kpack";

/// File extension of manifests (no dot).
pub const MANIFEST_EXT: &str = "kpm";

/// Largest `.kpm` manifest read (docs/formats.md, "Input size limits").
pub const MAX_MANIFEST_FILE: u64 = 64 << 20;

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

fn has_extension(path: &str, ext: &str) -> bool {
    path.strip_suffix(ext).is_some_and(|s| s.ends_with('.'))
}
