//! Filesystem snapshots for hostile-input tests: a directory tree walked
//! into `relative path -> (type, size, sha256 / link target)`, without
//! following symlinks, so a test can assert that a command wrote or deleted
//! nothing outside the place it was told to use.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// What a path is, as far as the snapshot can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// A regular file: mode, size and sha256 (hex).
    File {
        mode: u32,
        size: u64,
        sha256: String,
    },
    /// A directory and its mode.
    Dir { mode: u32 },
    /// A symlink and its target (never followed).
    Symlink { target: PathBuf },
    /// A FIFO, socket or device.
    Other,
}

/// A walked tree.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Snapshot {
    /// Relative path (the root itself is `""`) -> node.
    pub nodes: BTreeMap<PathBuf, Node>,
}

/// Walks `root` (a missing root is an empty snapshot).
pub fn snapshot(root: &Path) -> Snapshot {
    let mut nodes = BTreeMap::new();
    walk(root, Path::new(""), &mut nodes);
    Snapshot { nodes }
}

fn walk(root: &Path, rel: &Path, out: &mut BTreeMap<PathBuf, Node>) {
    let path = root.join(rel);
    let Ok(meta) = fs::symlink_metadata(&path) else {
        return;
    };
    let mode = meta.mode() & 0o7777;
    let ty = meta.file_type();
    let node = if ty.is_symlink() {
        Node::Symlink {
            target: fs::read_link(&path).unwrap_or_default(),
        }
    } else if ty.is_file() {
        let bytes = fs::read(&path).unwrap_or_default();
        Node::File {
            mode,
            size: meta.len(),
            sha256: hex::encode(Sha256::digest(&bytes)),
        }
    } else if ty.is_dir() {
        Node::Dir { mode }
    } else {
        Node::Other
    };
    let is_dir = matches!(node, Node::Dir { .. });
    out.insert(rel.to_path_buf(), node);
    if is_dir {
        let mut names: Vec<_> = fs::read_dir(&path)
            .map(|e| e.filter_map(Result::ok).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        names.sort();
        for name in names {
            walk(root, &rel.join(name), out);
        }
    }
}

/// What changed between two snapshots.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Diff {
    /// Paths only in the later snapshot.
    pub added: Vec<PathBuf>,
    /// Paths only in the earlier one.
    pub removed: Vec<PathBuf>,
    /// Paths in both whose node differs.
    pub changed: Vec<PathBuf>,
}

impl Diff {
    /// No change at all.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }

    /// Every changed path (added, removed or changed).
    pub fn paths(&self) -> impl Iterator<Item = &PathBuf> {
        self.added.iter().chain(&self.removed).chain(&self.changed)
    }

    /// Changes outside `allowed` (relative paths; a change below an
    /// allowed directory is allowed too).
    pub fn outside(&self, allowed: &[&Path]) -> Vec<PathBuf> {
        self.paths()
            .filter(|p| !allowed.iter().any(|a| p.starts_with(a)))
            .cloned()
            .collect()
    }
}

impl fmt::Display for Diff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.added {
            writeln!(f, "+ {}", p.display())?;
        }
        for p in &self.removed {
            writeln!(f, "- {}", p.display())?;
        }
        for p in &self.changed {
            writeln!(f, "~ {}", p.display())?;
        }
        Ok(())
    }
}

impl Snapshot {
    /// The changes from `self` to `later`.
    pub fn diff(&self, later: &Snapshot) -> Diff {
        let mut d = Diff::default();
        for (p, n) in &later.nodes {
            match self.nodes.get(p) {
                None => d.added.push(p.clone()),
                Some(old) if old != n => d.changed.push(p.clone()),
                Some(_) => {}
            }
        }
        d.removed = self
            .nodes
            .keys()
            .filter(|p| !later.nodes.contains_key(*p))
            .cloned()
            .collect();
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sees_additions_removals_changes_and_symlinks() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::create_dir(dir.path().join("d")).expect("mkdir");
        fs::write(dir.path().join("d/a"), b"1").expect("write");
        fs::write(dir.path().join("b"), b"2").expect("write");
        let before = snapshot(dir.path());
        fs::write(dir.path().join("d/a"), b"3").expect("write");
        fs::remove_file(dir.path().join("b")).expect("rm");
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("d/l")).expect("symlink");
        let d = before.diff(&snapshot(dir.path()));
        assert_eq!(d.changed, [PathBuf::from("d/a")]);
        assert_eq!(d.removed, [PathBuf::from("b")]);
        assert_eq!(d.added, [PathBuf::from("d/l")]);
        assert_eq!(d.outside(&[Path::new("d")]), [PathBuf::from("b")]);
        assert!(before.diff(&before).is_empty());
    }
}
