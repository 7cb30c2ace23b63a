//! Walk an install tree (never following a symlink) and classify what it
//! holds: fat binaries, already split binaries, kernel databases (with their
//! arch), kpack files, other files, symlinks (and whether they leave the
//! tree), hard links and directories.
//!
//! The walk is sequential and sorted; classifying files (which opens them)
//! runs in parallel. Paths are `/`-separated and relative to the scanned
//! root, which is also what the spec's database globs are matched against.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use filetime::FileTime;
use rayon::prelude::*;
use rocm_kpack_fs::PathError;
use rocm_kpack_pkgspec::DatabaseClassifier;
use serde::Serialize;

use crate::elf::{self, Classification, Elf};
use crate::split::binary::SplitError;

/// Why a tree cannot be scanned.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    /// A file or directory could not be read.
    // Not transparent: the PathError stays in the source chain, where
    // rocm_kpack_cli::hint_for finds the path of a full file system.
    #[error("{0}")]
    Io(#[from] PathError),
    /// A name that is not UTF-8 (markers and archive keys are strings).
    #[error("{}: file name is not valid UTF-8", path.display())]
    NotUtf8 { path: PathBuf },
    /// A FIFO, socket or device node.
    #[error("{}: unsupported file type ({kind}); install trees hold files, directories and symlinks", path.display())]
    Special { path: PathBuf, kind: &'static str },
    /// An ELF file or PE image with device code that cannot be split.
    #[error("{}: has device code but cannot be split", path.display())]
    Binary {
        path: PathBuf,
        #[source]
        source: Box<SplitError>,
    },
}

impl ScanError {
    fn io(path: &Path, source: io::Error) -> Self {
        ScanError::Io(PathError::new("cannot read", path, source))
    }
}

/// What a regular file is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "class")]
pub enum FileClass {
    /// An x86-64 ELF with device code in `.hip_fatbin`, or a PE32+ x86-64
    /// DLL/EXE with device code in `.hip_fat`.
    FatBinary,
    /// An x86-64 ELF or PE image that is already split (kpack marker or
    /// HIPK wrappers).
    SplitBinary,
    /// A per-arch kernel database file.
    Database {
        /// Target id read from the path (`gfx90a:xnack+`).
        arch: String,
        /// The spec rule that matched.
        rule: String,
    },
    /// A `.kpack` archive or `.kpm` manifest in a `.kpack/` directory.
    KpackFile,
    /// Anything else (copied unchanged).
    Other,
}

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum EntryKind {
    /// A directory.
    Dir,
    /// A regular file.
    File {
        size: u64,
        class: FileClass,
        /// `(device, inode)` when the file has more than one name.
        #[serde(skip_serializing_if = "Option::is_none")]
        inode: Option<(u64, u64)>,
    },
    /// A symbolic link, never followed.
    Symlink {
        /// The link text, verbatim.
        target: String,
        /// The link is absolute or climbs out of the scanned root.
        outside: bool,
        /// The link's own path names a database arch (it moves with them).
        #[serde(skip_serializing_if = "Option::is_none")]
        database: Option<String>,
    },
}

/// One entry of a scanned tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// Path relative to the root, `/`-separated.
    pub rel: String,
    /// What it is.
    pub kind: EntryKind,
    /// Permission bits (including setuid/setgid/sticky).
    pub mode: u32,
    /// Modification time.
    #[serde(skip)]
    pub mtime: FileTime,
}

/// A scanned tree.
#[derive(Debug, Clone)]
pub struct Scan {
    /// The scanned directory.
    pub root: PathBuf,
    /// Every entry below it, sorted by path.
    pub entries: Vec<Entry>,
    /// The root directory's own mode and mtime.
    pub root_mode: u32,
    pub root_mtime: FileTime,
}

impl Scan {
    /// The absolute path of an entry.
    pub fn path_of(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// Newest modification time in the tree (the root's if empty).
    pub fn newest_mtime(&self) -> FileTime {
        self.entries
            .iter()
            .map(|e| e.mtime)
            .max()
            .unwrap_or(self.root_mtime)
            .max(self.root_mtime)
    }
}

/// Walks `root` (which must be a directory) and classifies every entry.
pub fn scan(root: &Path, databases: &DatabaseClassifier) -> Result<Scan, ScanError> {
    let root_meta = fs::symlink_metadata(root).map_err(|e| ScanError::io(root, e))?;
    // Raw walk: paths and metadata, sorted.
    let mut raw: Vec<(String, fs::Metadata)> = Vec::new();
    for item in walkdir::WalkDir::new(root)
        .follow_links(false)
        .min_depth(1)
        .sort_by_file_name()
    {
        let item = item.map_err(|e| {
            let path = e.path().unwrap_or(root).to_path_buf();
            let source = e
                .into_io_error()
                .unwrap_or_else(|| io::Error::other("file system loop"));
            ScanError::io(&path, source)
        })?;
        let rel_path = item.path().strip_prefix(root).unwrap_or(item.path());
        let rel = rel_string(rel_path).ok_or_else(|| ScanError::NotUtf8 {
            path: item.path().to_path_buf(),
        })?;
        let meta = item.metadata().map_err(|e| {
            ScanError::io(
                item.path(),
                e.into_io_error()
                    .unwrap_or_else(|| io::Error::other("metadata")),
            )
        })?;
        raw.push((rel, meta));
    }

    let entries: Result<Vec<Entry>, ScanError> = raw
        .into_par_iter()
        .map(|(rel, meta)| classify_entry(root, rel, &meta, databases))
        .collect();
    let mut entries = entries?;
    entries.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(Scan {
        root: root.to_path_buf(),
        entries,
        root_mode: root_meta.permissions().mode() & 0o7777,
        root_mtime: FileTime::from_last_modification_time(&root_meta),
    })
}

/// `/`-joined UTF-8 components of a relative path.
fn rel_string(p: &Path) -> Option<String> {
    let mut parts = Vec::new();
    for c in p.components() {
        match c {
            Component::Normal(s) => parts.push(s.to_str()?),
            _ => return None,
        }
    }
    Some(parts.join("/"))
}

fn classify_entry(
    root: &Path,
    rel: String,
    meta: &fs::Metadata,
    databases: &DatabaseClassifier,
) -> Result<Entry, ScanError> {
    let path = root.join(&rel);
    let ft = meta.file_type();
    let kind = if ft.is_dir() {
        EntryKind::Dir
    } else if ft.is_symlink() {
        let target = fs::read_link(&path).map_err(|e| ScanError::io(&path, e))?;
        let target = target
            .to_str()
            .ok_or_else(|| ScanError::NotUtf8 { path: path.clone() })?
            .to_string();
        EntryKind::Symlink {
            outside: link_leaves_root(&rel, &target),
            database: databases.classify(&rel).map(|m| m.arch),
            target,
        }
    } else if ft.is_file() {
        let class = classify_file(&path, &rel, meta, databases)?;
        EntryKind::File {
            size: meta.len(),
            class,
            inode: (meta.nlink() > 1).then(|| (meta.dev(), meta.ino())),
        }
    } else {
        use std::os::unix::fs::FileTypeExt;
        let kind = if ft.is_fifo() {
            "FIFO"
        } else if ft.is_socket() {
            "socket"
        } else if ft.is_block_device() {
            "block device"
        } else if ft.is_char_device() {
            "character device"
        } else {
            "unknown"
        };
        return Err(ScanError::Special { path, kind });
    };
    Ok(Entry {
        rel,
        kind,
        mode: meta.permissions().mode() & 0o7777,
        mtime: FileTime::from_last_modification_time(meta),
    })
}

/// Whether a symlink at `rel` with link text `target` points outside the
/// root: absolute, or `..` climbing above it (judged on the text alone; the
/// link is never followed).
pub fn link_leaves_root(rel: &str, target: &str) -> bool {
    if target.starts_with('/') {
        return true;
    }
    // Depth of the directory holding the link.
    let mut depth: i64 = rel.matches('/').count() as i64;
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            _ => depth += 1,
        }
    }
    false
}

/// Whether `rel` is a `.kpack` archive or `.kpm` manifest in a `.kpack/`
/// directory.
pub fn is_kpack_path(rel: &str) -> bool {
    rocm_kpack_format::layout::is_in_kpack_dir(rel)
}

const ELFCLASS64: u8 = 2;
const ELFDATA2LSB: u8 = 1;
const EM_X86_64: u16 = 62;

/// Whether the first bytes are those of an x86-64 ELF64 little-endian file.
pub fn is_x86_64_elf(head: &[u8]) -> bool {
    head.get(..4) == Some(b"\x7fELF")
        && head.get(4) == Some(&ELFCLASS64)
        && head.get(5) == Some(&ELFDATA2LSB)
        && head
            .get(18..20)
            .and_then(|m| <[u8; 2]>::try_from(m).ok())
            .map(u16::from_le_bytes)
            == Some(EM_X86_64)
}

fn classify_file(
    path: &Path,
    rel: &str,
    meta: &fs::Metadata,
    databases: &DatabaseClassifier,
) -> Result<FileClass, ScanError> {
    if is_kpack_path(rel) {
        return Ok(FileClass::KpackFile);
    }
    if let Some(m) = databases.classify(rel) {
        return Ok(FileClass::Database {
            arch: m.arch,
            rule: m.rule,
        });
    }
    // Open every file, so an unreadable one is an error here rather than
    // a surprise half-way through writing the output.
    let mut file = File::open(path).map_err(|e| ScanError::io(path, e))?;
    let head = read_head(&mut file, 64).map_err(|e| ScanError::io(path, e))?;
    if head.starts_with(b"MZ") {
        return classify_pe(path, &file);
    }
    if !is_x86_64_elf(&head) || meta.len() < 64 {
        return Ok(FileClass::Other);
    }
    // SAFETY: read-only private mapping of a file we only read; another
    // process truncating it meanwhile would fault (the usual mmap caveat).
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| ScanError::io(path, e))?;
    let elf = match Elf::parse(&map) {
        Ok(elf) => elf,
        Err(e) => {
            tracing::warn!(file = %path.display(), "x86-64 ELF that cannot be parsed ({e}); copied unchanged");
            return Ok(FileClass::Other);
        }
    };
    let interesting = [
        crate::elf::rewrite::FATBIN_SECTION,
        crate::elf::rewrite::MARKER_SECTION,
        crate::elf::rewrite::WRAPPER_SECTION,
    ]
    .iter()
    .any(|s| matches!(elf.find_section(s), Ok(Some(_))));
    if !interesting {
        return Ok(FileClass::Other);
    }
    match elf::classify(&map) {
        Ok(Classification::HostOnly) => Ok(FileClass::Other),
        Ok(Classification::AlreadySplit(_)) => Ok(FileClass::SplitBinary),
        Ok(Classification::Fat(_)) => Ok(FileClass::FatBinary),
        Err(e) => Err(ScanError::Binary {
            path: path.to_path_buf(),
            source: Box::new(SplitError::Elf(e)),
        }),
    }
}

/// A DLL/EXE: fat, split, or (the common case) no device code at all.
fn classify_pe(path: &Path, file: &File) -> Result<FileClass, ScanError> {
    // SAFETY: read-only private mapping of a file we only read; another
    // process truncating it meanwhile would fault (the usual mmap caveat).
    let map = unsafe { memmap2::Mmap::map(file) }.map_err(|e| ScanError::io(path, e))?;
    if !crate::coff::is_pe(&map) {
        return Ok(FileClass::Other);
    }
    match crate::coff::classify(&map) {
        Ok(crate::coff::Classification::HostOnly) => {
            tracing::debug!(file = %path.display(), "PE image without device code; copied unchanged");
            Ok(FileClass::Other)
        }
        Ok(crate::coff::Classification::AlreadySplit(_)) => Ok(FileClass::SplitBinary),
        Ok(crate::coff::Classification::Fat(_)) => Ok(FileClass::FatBinary),
        // An odd DLL that carries no device code is not our concern.
        Err(e) if !has_fat_section_name(&map) => {
            tracing::warn!(file = %path.display(), "PE image that cannot be parsed ({e}); copied unchanged");
            Ok(FileClass::Other)
        }
        Err(e) => Err(ScanError::Binary {
            path: path.to_path_buf(),
            source: Box::new(SplitError::Pe(e)),
        }),
    }
}

/// Whether the bytes mention `.hip_fat` at all (an unparseable image that
/// does is an error, not something to copy silently).
fn has_fat_section_name(data: &[u8]) -> bool {
    let name = crate::coff::read::FATBIN_SECTION.as_bytes();
    data.windows(name.len()).any(|w| w == name)
}

/// The first `max` bytes of `f` (fewer when it is shorter): what
/// classifies a file by its magic. The bytes come back as they were read,
/// so no count has to be matched against a buffer.
pub fn read_head(f: &mut impl Read, max: u64) -> io::Result<Vec<u8>> {
    let mut head = Vec::new();
    f.take(max).read_to_end(&mut head)?;
    Ok(head)
}

/// Groups of names that share one inode, each sorted, keyed by the first
/// name (only inodes with at least two names in the scan).
pub fn hard_link_groups(scan: &Scan) -> BTreeMap<String, Vec<String>> {
    let mut by_inode: BTreeMap<(u64, u64), Vec<String>> = BTreeMap::new();
    for e in &scan.entries {
        if let EntryKind::File {
            inode: Some(ino), ..
        } = &e.kind
        {
            by_inode.entry(*ino).or_default().push(e.rel.clone());
        }
    }
    by_inode
        .into_values()
        .filter(|names| names.len() > 1)
        .filter_map(|mut names| {
            names.sort();
            let first = names.first()?.clone();
            Some((first, names))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_leaving_the_root() {
        assert!(!link_leaves_root("lib/libx.so", "libx.so.1"));
        assert!(!link_leaves_root("lib/libx.so", "../lib/libx.so.1"));
        assert!(link_leaves_root("lib/libx.so", "../../x"));
        assert!(link_leaves_root("libx.so", "../x"));
        assert!(link_leaves_root("lib/libx.so", "/usr/lib/libx.so"));
        assert!(!link_leaves_root("a/b/c", "../../d"));
        assert!(link_leaves_root("a/b/c", "../../../d"));
        assert!(link_leaves_root("a/b", "c/../../../d"));
    }

    #[test]
    fn kpack_paths() {
        assert!(is_kpack_path(".kpack/x.kpm"));
        assert!(is_kpack_path("lib/.kpack/x_gfx90X.kpack"));
        assert!(!is_kpack_path("lib/x.kpack"));
        assert!(!is_kpack_path("lib/.kpack/readme"));
    }

    #[test]
    fn elf_header_check() {
        let mut h = [0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2;
        h[5] = 1;
        h[18] = 62;
        assert!(is_x86_64_elf(&h));
        h[18] = 224; // EM_AMDGPU
        assert!(!is_x86_64_elf(&h));
        assert!(!is_x86_64_elf(b"\x7fEL"));
    }
}
