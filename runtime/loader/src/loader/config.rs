//! Loader settings. The C ABI reads them from the environment once, at cache
//! creation; Rust callers (and tests) can build them explicitly so nothing
//! races on process-global environment variables.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// `ROCM_KPACK_PATH`: archive paths replacing every other search path.
pub const ENV_PATH: &str = "ROCM_KPACK_PATH";
/// `ROCM_KPACK_PATH_PREFIX`: archive paths searched before the marker's.
pub const ENV_PATH_PREFIX: &str = "ROCM_KPACK_PATH_PREFIX";
/// `ROCM_KPACK_DISABLE`: truthy -> every load returns `NOT_IMPLEMENTED`.
pub const ENV_DISABLE: &str = "ROCM_KPACK_DISABLE";
/// `ROCM_KPACK_DEBUG`: truthy -> `kpack: ` trace lines on stderr.
pub const ENV_DEBUG: &str = "ROCM_KPACK_DEBUG";
/// `ROCM_KPACK_ARCH_OVERRIDE`: comma-separated arch list replacing the caller's.
pub const ENV_ARCH_OVERRIDE: &str = "ROCM_KPACK_ARCH_OVERRIDE";

/// Separator of path lists in `ROCM_KPACK_PATH` and `ROCM_KPACK_PATH_PREFIX`.
pub const PATH_LIST_SEPARATOR: u8 = if cfg!(windows) { b';' } else { b':' };

/// Everything the loader takes from outside its arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoaderConfig {
    /// Direct archive paths that replace all search paths (`ROCM_KPACK_PATH`);
    /// `None` when unset or holding no entries.
    pub path_override: Option<Vec<PathBuf>>,
    /// Direct archive paths searched first (`ROCM_KPACK_PATH_PREFIX`).
    pub path_prefix: Vec<PathBuf>,
    /// Loads fail with `NOT_IMPLEMENTED` (`ROCM_KPACK_DISABLE`).
    pub disabled: bool,
    /// Log the search to stderr (`ROCM_KPACK_DEBUG`).
    pub debug: bool,
    /// Replaces the caller's arch list (`ROCM_KPACK_ARCH_OVERRIDE`).
    pub arch_override: Option<Vec<String>>,
}

impl LoaderConfig {
    /// Read the five `ROCM_KPACK_*` variables of this process.
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var_os(name))
    }

    /// Build from any variable lookup (a map in tests, the process
    /// environment in [`LoaderConfig::from_env`]).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<OsString>) -> Self {
        let path_override = lookup(ENV_PATH)
            .map(|v| split_path_list(&v))
            .filter(|paths| !paths.is_empty());
        let path_prefix = lookup(ENV_PATH_PREFIX)
            .map(|v| split_path_list(&v))
            .unwrap_or_default();
        let arch_override = lookup(ENV_ARCH_OVERRIDE)
            .map(|v| split_arch_list(&v.to_string_lossy()))
            .filter(|arches| !arches.is_empty());
        LoaderConfig {
            path_override,
            path_prefix,
            disabled: is_truthy(lookup(ENV_DISABLE).as_deref()),
            debug: is_truthy(lookup(ENV_DEBUG).as_deref()),
            arch_override,
        }
    }
}

/// The reference library's truthiness rule: set, non-empty and not starting
/// with `0` (so `0`, `00` and the empty string all mean "off").
pub fn is_truthy(value: Option<&OsStr>) -> bool {
    match value {
        Some(v) => {
            let bytes = v.as_encoded_bytes();
            bytes.first().is_some_and(|&b| b != b'0')
        }
        None => false,
    }
}

/// Split a `:`-separated path list, dropping empty entries.
pub fn split_path_list(value: &OsStr) -> Vec<PathBuf> {
    value
        .as_encoded_bytes()
        .split(|&b| b == PATH_LIST_SEPARATOR)
        .filter(|part| !part.is_empty())
        // SAFETY: splitting at an ASCII byte keeps each part valid in the
        // platform's OsStr encoding.
        .map(|part| PathBuf::from(unsafe { OsStr::from_encoded_bytes_unchecked(part) }))
        .collect()
}

/// A marker search path resolved against the directory of the binary that
/// holds the marker. Markers are written with `/`, but a marker made on
/// Windows may use `\\`: both separate components on every platform (a
/// `\\` inside a file name is not something the tools ever write). An
/// absolute entry stands alone.
pub fn resolve_search_path(base: &Path, entry: &str) -> PathBuf {
    if Path::new(entry).is_absolute() {
        return PathBuf::from(entry);
    }
    let mut out = base.to_path_buf();
    for part in entry
        .split(['/', '\\'])
        .filter(|p| !p.is_empty() && *p != ".")
    {
        out.push(part);
    }
    out
}

/// Split a comma-separated arch list, trimming blanks and dropping empties.
pub fn split_arch_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> LoaderConfig {
        let map: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        LoaderConfig::from_lookup(|name| map.get(name).cloned())
    }

    #[test]
    fn truthiness_follows_the_reference_rule() {
        for (value, expected) in [
            ("1", true),
            ("yes", true),
            ("0", false),
            ("", false),
            ("0x", false),
        ] {
            assert_eq!(
                config(&[(ENV_DISABLE, value)]).disabled,
                expected,
                "{value:?}"
            );
            assert_eq!(config(&[(ENV_DEBUG, value)]).debug, expected, "{value:?}");
        }
        assert!(!config(&[]).disabled);
    }

    #[test]
    fn path_lists_skip_empty_entries() {
        let sep = char::from(PATH_LIST_SEPARATOR);
        let c = config(&[
            (ENV_PATH, &format!("/a{sep}{sep}/b{sep}")),
            (ENV_PATH_PREFIX, "/p"),
        ]);
        assert_eq!(
            c.path_override,
            Some(vec![PathBuf::from("/a"), PathBuf::from("/b")])
        );
        assert_eq!(c.path_prefix, vec![PathBuf::from("/p")]);
        assert_eq!(config(&[(ENV_PATH, &sep.to_string())]).path_override, None);
        assert_eq!(config(&[(ENV_PATH, "")]).path_override, None);
    }

    /// Windows lists are `;`-separated: drive letters keep their `:`.
    #[test]
    #[cfg(windows)]
    fn windows_path_lists_use_semicolons() {
        let c = config(&[(ENV_PATH, r"C:\kp\a.kpack;D:/b.kpack;")]);
        assert_eq!(
            c.path_override,
            Some(vec![
                PathBuf::from(r"C:\kp\a.kpack"),
                PathBuf::from("D:/b.kpack")
            ])
        );
    }

    #[test]
    fn search_paths_accept_both_separators() {
        let base = Path::new("lib");
        let want = base.join("..").join(".kpack").join("x.kpm");
        assert_eq!(resolve_search_path(base, "../.kpack/x.kpm"), want);
        assert_eq!(resolve_search_path(base, r"..\.kpack\x.kpm"), want);
        assert_eq!(resolve_search_path(base, r"..\.kpack/./x.kpm"), want);
        assert_eq!(
            resolve_search_path(base, "x_@GFXARCH@.kpack"),
            base.join("x_@GFXARCH@.kpack")
        );
        let abs = std::env::temp_dir().join("a.kpack");
        let abs_text = abs.to_str().expect("utf-8 temp dir");
        assert_eq!(resolve_search_path(base, abs_text), abs);
    }

    #[test]
    fn arch_override_is_a_comma_list() {
        let c = config(&[(ENV_ARCH_OVERRIDE, "gfx1100, gfx90a:xnack+,,")]);
        assert_eq!(
            c.arch_override,
            Some(vec!["gfx1100".into(), "gfx90a:xnack+".into()])
        );
        assert_eq!(config(&[(ENV_ARCH_OVERRIDE, " , ")]).arch_override, None);
    }
}
