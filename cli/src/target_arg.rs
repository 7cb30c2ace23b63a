//! `--target`: the one spelling of "these GPU targets" on both command
//! lines, repeatable or comma-separated, checked against the family table
//! when parsed so a typo fails at once with a hint.

/// clap value parser for a directory option that must exist (`--root`,
/// `--sysfs-root`): a typo is a usage error, not an empty result.
pub fn existing_dir(text: &str) -> Result<std::path::PathBuf, String> {
    let path = std::path::PathBuf::from(text);
    if path.is_dir() {
        Ok(path)
    } else if path.exists() {
        Err(format!("{text} is not a directory"))
    } else {
        Err(format!("{text}: no such directory"))
    }
}

/// clap value parser for an output directory (`--out DIR`): created if
/// missing, so any path will do except one that exists and is not a
/// directory (a plain file), which is a usage error at once rather than a
/// failure to create it later.
pub fn out_dir(text: &str) -> Result<std::path::PathBuf, String> {
    let path = std::path::PathBuf::from(text);
    if text.is_empty() {
        return Err("an empty path".into());
    }
    match std::fs::metadata(&path) {
        Ok(m) if !m.is_dir() => Err(format!("{text} exists and is not a directory")),
        _ => Ok(path),
    }
}

/// clap value parser for one `--target` value: a target the family table
/// knows, returned in canonical form (`gfx90a:xnack-:sramecc+` becomes
/// `gfx90a:sramecc+:xnack-`). Declare the argument with
/// `value_delimiter = ','` so `--target a,b` and `--target a --target b`
/// are the same.
pub fn parse_target(text: &str) -> Result<String, String> {
    rocm_kpack_pkgspec::targets::check_target(text)
        .map(|id| id.to_string())
        .map_err(|e| e.to_string())
}
