//! The payload of one package: a sorted set of entries (directories, files,
//! symlinks) with install paths, read from a split tree without ever
//! following a symlink, or assembled in memory.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::PackageError;

/// Where a file's bytes come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// A file on disk, read when the package is written.
    Path(PathBuf),
    /// Bytes generated in memory (metadata files; always small).
    Bytes(Vec<u8>),
}

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    /// A directory.
    Dir,
    /// A regular file of `size` bytes.
    File {
        /// Its bytes.
        content: Content,
        /// Its size.
        size: u64,
    },
    /// A symbolic link (target kept verbatim).
    Symlink {
        /// Link target.
        target: String,
    },
}

/// One payload entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Install path relative to the root, `/`-separated, no leading `./`
    /// or `/`, no trailing `/` (e.g. `usr/lib/x86_64-linux-gnu/libx.so.1`).
    pub path: String,
    /// Permission bits (normalized: 0755 / 0644 for files, 0755 for
    /// directories, 0777 for symlinks).
    pub mode: u32,
    /// Kind and content.
    pub kind: EntryKind,
}

impl Entry {
    /// A file from memory.
    pub fn bytes(path: &str, mode: u32, data: Vec<u8>) -> Entry {
        Entry {
            path: path.to_string(),
            mode,
            kind: EntryKind::File {
                size: data.len() as u64,
                content: Content::Bytes(data),
            },
        }
    }

    /// A symlink.
    pub fn symlink(path: &str, target: &str) -> Entry {
        Entry {
            path: path.to_string(),
            mode: 0o777,
            kind: EntryKind::Symlink {
                target: target.to_string(),
            },
        }
    }

    /// Size of a file (0 for others).
    pub fn size(&self) -> u64 {
        match &self.kind {
            EntryKind::File { size, .. } => *size,
            _ => 0,
        }
    }

    /// Opens a file's content for reading (exactly `size` bytes expected).
    pub fn open(&self) -> Result<Box<dyn Read + '_>, PackageError> {
        match &self.kind {
            EntryKind::File {
                content: Content::Path(p),
                ..
            } => {
                let f = File::open(p).map_err(|e| PackageError::io("cannot open", p, e))?;
                Ok(Box::new(io::BufReader::with_capacity(1 << 20, f)))
            }
            EntryKind::File {
                content: Content::Bytes(b),
                ..
            } => Ok(Box::new(&b[..])),
            _ => Ok(Box::new(io::empty())),
        }
    }

    /// Where the bytes come from, for error messages.
    pub fn source_display(&self) -> String {
        match &self.kind {
            EntryKind::File {
                content: Content::Path(p),
                ..
            } => p.display().to_string(),
            _ => self.path.clone(),
        }
    }

    /// The final path component.
    pub fn file_name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }

    /// The parent directory path ("" for top-level entries).
    pub fn parent(&self) -> &str {
        parent_of(&self.path)
    }
}

/// The parent of a `/`-separated relative path ("" at the top).
pub fn parent_of(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(p, _)| p)
}

/// Checks one relative install path: non-empty components, no `.`/`..`,
/// no control characters, UTF-8 given; the member-path grammar of
/// `layout::names` (also bounds its length).
pub fn check_relative_path(path: &str) -> Result<(), String> {
    use rocm_kpack_format::layout::names::{check, NameKind};
    check(NameKind::MemberPath, path).map_err(|e| e.reason)
}

/// Normalizes a member name (`./usr/lib/`, `usr/lib`, `/usr/lib`) to a
/// relative install path; `None` for the root itself. `..` components,
/// empty names and control characters are errors.
pub fn normalize_member(name: &str) -> Result<Option<String>, String> {
    let mut s = name;
    while let Some(rest) = s.strip_prefix("./") {
        s = rest;
    }
    let s = s.trim_start_matches('/').trim_end_matches('/');
    if s.is_empty() || s == "." {
        return Ok(None);
    }
    let cleaned: Vec<&str> = s
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    let joined = cleaned.join("/");
    check_relative_path(&joined)?;
    Ok(Some(joined))
}

/// Checks that a relative symlink target stays inside the root when
/// resolved from the link's directory (absolute targets are install paths
/// and allowed; they are never followed here).
pub fn check_symlink_target(link_path: &str, target: &str) -> Result<(), String> {
    if target.is_empty() {
        return Err("empty symlink target".into());
    }
    if target.chars().any(|c| c.is_control()) {
        return Err("control character in symlink target".into());
    }
    if target.starts_with('/') {
        return Ok(());
    }
    let mut depth: Vec<&str> = parent_of(link_path)
        .split('/')
        .filter(|c| !c.is_empty())
        .collect();
    for comp in target.split('/') {
        match comp {
            "" | "." => {}
            ".." => {
                if depth.pop().is_none() {
                    return Err(format!("symlink target {target:?} escapes the root"));
                }
            }
            c => depth.push(c),
        }
    }
    Ok(())
}

/// A package payload: entries keyed (and so sorted) by path.
#[derive(Debug, Clone, Default)]
pub struct Payload {
    entries: BTreeMap<String, Entry>,
    /// Told the bytes the writers read as they compress them.
    progress: crate::progress::ProgressHandle,
}

/// A reader that tells a [`crate::progress::Progress`] the bytes it yields.
struct Counted<'a> {
    inner: Box<dyn Read + 'a>,
    progress: &'a crate::progress::ProgressHandle,
}

impl Read for Counted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.progress.bytes(n as u64);
        Ok(n)
    }
}

impl Payload {
    /// An empty payload.
    pub fn new() -> Payload {
        Payload::default()
    }

    /// Reports the bytes the package writers read from this payload
    /// ([`Payload::open_written`]) to `progress`.
    pub fn set_progress(&mut self, progress: crate::progress::ProgressHandle) {
        self.progress = progress;
    }

    /// [`Entry::open`] for the pass that writes the package: the bytes
    /// read are reported to the payload's progress (the hashing passes
    /// before it read with [`Entry::open`], unreported).
    pub fn open_written<'a>(
        &'a self,
        entry: &'a Entry,
    ) -> Result<Box<dyn Read + 'a>, PackageError> {
        Ok(Box::new(Counted {
            inner: entry.open()?,
            progress: &self.progress,
        }))
    }

    /// Reads a tree. Symlinks are recorded, never followed; special files,
    /// non-UTF-8 names, control characters and symlinks escaping the root
    /// are errors. Modes are normalized (see [`Entry::mode`]).
    pub fn scan(root: &Path) -> Result<Payload, PackageError> {
        let meta = fs::metadata(root).map_err(|e| PackageError::io("cannot read", root, e))?;
        if !meta.is_dir() {
            return Err(PackageError::Invalid(format!(
                "{} is not a directory",
                root.display()
            )));
        }
        let mut payload = Payload::new();
        let mut stack = vec![(root.to_path_buf(), String::new())];
        while let Some((dir, rel)) = stack.pop() {
            let rd = fs::read_dir(&dir).map_err(|e| PackageError::io("cannot list", &dir, e))?;
            for item in rd {
                let item = item.map_err(|e| PackageError::io("cannot list", &dir, e))?;
                let fs_path = item.path();
                let name = item.file_name();
                let name = name.to_str().ok_or_else(|| {
                    PackageError::unsafe_path(
                        root,
                        &fs_path.display().to_string(),
                        "non-UTF-8 name",
                    )
                })?;
                let path = if rel.is_empty() {
                    name.to_string()
                } else {
                    format!("{rel}/{name}")
                };
                check_relative_path(&path)
                    .map_err(|why| PackageError::unsafe_path(root, &path, why))?;
                let md = fs::symlink_metadata(&fs_path)
                    .map_err(|e| PackageError::io("cannot stat", &fs_path, e))?;
                let ft = md.file_type();
                let perm = md.permissions().mode();
                let entry = if ft.is_symlink() {
                    let target = fs::read_link(&fs_path)
                        .map_err(|e| PackageError::io("cannot read link", &fs_path, e))?;
                    let target = target.to_str().ok_or_else(|| {
                        PackageError::unsafe_path(root, &path, "non-UTF-8 symlink target")
                    })?;
                    check_symlink_target(&path, target)
                        .map_err(|why| PackageError::unsafe_path(root, &path, why))?;
                    Entry::symlink(&path, target)
                } else if ft.is_dir() {
                    stack.push((fs_path.clone(), path.clone()));
                    Entry {
                        path: path.clone(),
                        mode: 0o755,
                        kind: EntryKind::Dir,
                    }
                } else if ft.is_file() {
                    Entry {
                        path: path.clone(),
                        mode: if perm & 0o111 != 0 { 0o755 } else { 0o644 },
                        kind: EntryKind::File {
                            content: Content::Path(fs_path.clone()),
                            size: md.len(),
                        },
                    }
                } else {
                    return Err(PackageError::unsafe_path(
                        root,
                        &path,
                        "special file (device, fifo or socket) cannot be packaged",
                    ));
                };
                payload.entries.insert(path, entry);
            }
        }
        Ok(payload)
    }

    /// Adds an entry; an existing entry at the same path is an error.
    pub fn insert(&mut self, entry: Entry) -> Result<(), PackageError> {
        check_relative_path(&entry.path)
            .map_err(|why| PackageError::Invalid(format!("{}: {why}", entry.path)))?;
        if self.entries.contains_key(&entry.path) {
            return Err(PackageError::Invalid(format!(
                "{}: entry already present in the package",
                entry.path
            )));
        }
        self.entries.insert(entry.path.clone(), entry);
        Ok(())
    }

    /// Adds or replaces an entry.
    pub fn replace(&mut self, entry: Entry) {
        self.entries.insert(entry.path.clone(), entry);
    }

    /// Removes an entry (directories: only the entry itself).
    pub fn remove(&mut self, path: &str) -> Option<Entry> {
        self.entries.remove(path)
    }

    /// The entry at `path`.
    pub fn get(&self, path: &str) -> Option<&Entry> {
        self.entries.get(path)
    }

    /// Whether `path` is present.
    pub fn contains(&self, path: &str) -> bool {
        self.entries.contains_key(path)
    }

    /// Entries in path order.
    pub fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds a 0755 directory entry for every missing ancestor.
    pub fn add_parent_dirs(&mut self) {
        let mut missing = Vec::new();
        for e in self.entries.values() {
            let mut p = e.parent();
            while !p.is_empty() {
                if !self.entries.contains_key(p) {
                    missing.push(p.to_string());
                }
                p = parent_of(p);
            }
        }
        for p in missing {
            self.entries.entry(p.clone()).or_insert(Entry {
                path: p,
                mode: 0o755,
                kind: EntryKind::Dir,
            });
        }
    }

    /// Installed size in KiB as dpkg-gencontrol computes it: every file
    /// and symlink (its target length) rounded up to KiB, plus 1 KiB per
    /// directory including the root.
    pub fn installed_size_kib(&self) -> u64 {
        1 + self
            .entries
            .values()
            .map(|e| match &e.kind {
                EntryKind::File { size, .. } => size.div_ceil(1024),
                EntryKind::Symlink { target } => (target.len() as u64).div_ceil(1024),
                EntryKind::Dir => 1,
            })
            .sum::<u64>()
    }

    /// Sum of file sizes in bytes.
    pub fn total_file_bytes(&self) -> u64 {
        self.entries.values().map(Entry::size).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlink_escape() {
        assert!(check_symlink_target("usr/lib/a", "b").is_ok());
        assert!(check_symlink_target("usr/lib/a", "../../x").is_ok());
        assert!(check_symlink_target("usr/lib/a", "../../../x").is_err());
        assert!(check_symlink_target("a", "../x").is_err());
        assert!(check_symlink_target("usr/a", "/etc/passwd").is_ok());
    }

    #[test]
    fn paths() {
        assert!(check_relative_path("usr/lib").is_ok());
        assert!(check_relative_path("usr/../etc").is_err());
        assert!(check_relative_path("/etc").is_err());
        assert!(check_relative_path("a\nb").is_err());
    }
}
