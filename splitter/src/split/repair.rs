//! `rocm-kpack repair-phdr`: find the ELF files whose program header table
//! Linux before 5.18 would not find ([`crate::elf::phdr::check`]), in trees
//! split by any tool and possibly stripped since, and repair them in place
//! when asked ([`RepairOptions::apply`]): each repaired file is written
//! beside the original and renamed over it, with its permissions and
//! owner, so a reader sees the old file or the new one, never a mix.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rocm_kpack_fs::{open_regular, PathError, PendingFile};
use serde::Serialize;

use crate::elf::phdr::{self, Repair};
use crate::elf::Elf;
use crate::split::engine::{EngineError, Result};
use crate::split::scan::{is_x86_64_elf, read_head};

/// What [`repair_phdr`] does.
#[derive(Debug, Clone, Copy, Default)]
pub struct RepairOptions {
    /// Rewrite the files found; otherwise only list them.
    pub apply: bool,
}

/// One file whose table is misplaced.
#[derive(Debug, Clone, Serialize)]
pub struct MisplacedFile {
    pub path: PathBuf,
    /// What is wrong.
    pub problem: String,
    /// How it is (or would be) repaired.
    pub repair: Repair,
    /// Bytes the file grows by.
    pub grown: u64,
    /// Whether it was rewritten.
    pub repaired: bool,
}

/// The result of [`repair_phdr`].
#[derive(Debug, Clone, Serialize)]
pub struct RepairReport {
    /// ELF files looked at.
    pub scanned: usize,
    pub files: Vec<MisplacedFile>,
    pub applied: bool,
}

impl std::fmt::Display for RepairReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for m in &self.files {
            let how = match m.repair {
                Repair::Moved => format!(
                    "the table back after the ELF header, the sections in its way in a new segment (the file grows by {} bytes)",
                    m.grown
                ),
                Repair::Appended => format!(
                    "a copy of the table at the end (the file grows by {} bytes)",
                    m.grown
                ),
            };
            let verb = if m.repaired {
                "repaired"
            } else {
                "would repair"
            };
            writeln!(f, "{}: {}", m.path.display(), m.problem)?;
            writeln!(f, "  {verb}: {how}")?;
        }
        let n = self.files.len();
        let files = if self.scanned == 1 { "file" } else { "files" };
        match (n, self.applied) {
            (0, _) => writeln!(
                f,
                "{} ELF {files} scanned: every program header table is where every kernel finds it",
                self.scanned
            ),
            (_, true) => writeln!(f, "{} ELF {files} scanned, {n} repaired", self.scanned),
            (_, false) => writeln!(
                f,
                "{} ELF {files} scanned, {n} to repair: run again with --yes to rewrite them in place",
                self.scanned
            ),
        }
    }
}

/// Checks (and with `opts.apply` repairs) every x86-64 ELF file under
/// `paths` (files or directories; symbolic links are not followed).
pub fn repair_phdr(paths: &[PathBuf], opts: RepairOptions) -> Result<RepairReport> {
    let mut report = RepairReport {
        scanned: 0,
        files: Vec::new(),
        applied: opts.apply,
    };
    for root in paths {
        let meta =
            std::fs::symlink_metadata(root).map_err(|e| PathError::new("cannot read", root, e))?;
        if !meta.is_dir() && !meta.is_file() {
            return Err(EngineError::Input {
                path: root.clone(),
                why: "is neither a directory nor a regular file".into(),
            });
        }
        for item in walkdir::WalkDir::new(root)
            .follow_links(false)
            .sort_by_file_name()
        {
            let item = item.map_err(|e| {
                let path = e.path().unwrap_or(root).to_path_buf();
                PathError::new("cannot read", path, e.into())
            })?;
            if !item.file_type().is_file() {
                continue;
            }
            match look_at(item.path(), opts.apply)? {
                Seen::NotElf => {}
                Seen::Fine => report.scanned += 1,
                Seen::Misplaced(found) => {
                    report.scanned += 1;
                    report.files.push(found);
                }
            }
        }
    }
    Ok(report)
}

enum Seen {
    NotElf,
    Fine,
    Misplaced(MisplacedFile),
}

fn look_at(path: &Path, apply: bool) -> Result<Seen> {
    let file = open_regular(path)?;
    let meta = file
        .metadata()
        .map_err(|e| PathError::new("cannot read", path, e))?;
    let mut head_reader = &file;
    let head =
        read_head(&mut head_reader, 64).map_err(|e| PathError::new("cannot read", path, e))?;
    if !is_x86_64_elf(&head) {
        return Ok(Seen::NotElf);
    }
    // SAFETY: a read-only private mapping; the file is replaced by rename,
    // never written in place.
    let map =
        unsafe { memmap2::Mmap::map(&file) }.map_err(|e| PathError::new("cannot map", path, e))?;
    let Ok(elf) = Elf::parse(&map) else {
        // Not one of the ELF files this tool reads (32-bit, object files):
        // the kernel does not run those as programs either.
        return Ok(Seen::NotElf);
    };
    let Err(misplaced) = phdr::check(&elf) else {
        return Ok(Seen::Fine);
    };
    let invalid = |e: crate::elf::ElfError| EngineError::Input {
        path: path.to_path_buf(),
        why: format!("cannot repair: {e}"),
    };
    let repaired = phdr::repair(&elf).map_err(invalid)?;
    let mut found = MisplacedFile {
        path: path.to_path_buf(),
        problem: misplaced.to_string(),
        repair: repaired.how,
        grown: repaired.grown,
        repaired: false,
    };
    if apply {
        let mut pending = PendingFile::create(path)?;
        repaired
            .image
            .write_to(&mut pending)
            .map_err(|e| PathError::new("cannot write", pending.temp_path(), e))?;
        let written = pending.temp_path().to_path_buf();
        // SAFETY: our own temporary file, mapped read-only after writing.
        let check = unsafe { memmap2::Mmap::map(&*pending.file_mut()) }
            .map_err(|e| PathError::new("cannot map", &written, e))?;
        if !Elf::parse(&check).is_ok_and(|e| phdr::check(&e).is_ok()) {
            return Err(EngineError::Input {
                path: path.to_path_buf(),
                why: "the repaired file does not keep the rule, so it was not written (a bug)"
                    .into(),
            });
        }
        drop(check);
        // Keep the owner where we may (root repairing a package tree; a
        // file of another user's cannot be given to them otherwise), then
        // the mode, which chown may have cleared set-id bits of.
        let _ = std::os::unix::fs::chown(&written, Some(meta.uid()), Some(meta.gid()));
        pending.set_permissions(std::fs::Permissions::from_mode(meta.mode() & 0o7777))?;
        pending.commit()?;
        found.repaired = true;
    }
    Ok(Seen::Misplaced(found))
}
