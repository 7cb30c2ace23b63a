//! Where a manifest's database files lie relative to its prefix, and the
//! keys the fetcher names them by (re-exported as `layout::*`).

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
