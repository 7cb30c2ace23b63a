//! Safe extraction of package members into a directory, shared by the
//! deb, rpm and wheel readers (split-package unpacks with it).
//!
//! Nothing is ever written outside the destination: names with `..`,
//! absolute names and control characters are refused (by the readers'
//! normalization), as are symlinks whose relative targets leave the root,
//! entries below a symlink, and duplicate entries. Files are created with
//! `O_EXCL`, so an existing path (or a symlink planted there) is never
//! written through.

use std::collections::BTreeSet;
use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::digest::{copy_exact_sides, CopyError};
use crate::tree::{check_relative_path, check_symlink_target, parent_of};
use crate::PackageError;

/// Extracts entries into an empty directory.
pub struct Extractor {
    dest: PathBuf,
    origin: PathBuf,
    links: BTreeSet<String>,
    seen: BTreeSet<String>,
}

impl Extractor {
    /// Starts extracting `origin`'s members into `dest`, which must exist
    /// and be empty.
    pub fn new(dest: &Path, origin: &Path) -> Result<Extractor, PackageError> {
        let mut it = fs::read_dir(dest).map_err(|e| PackageError::io("cannot list", dest, e))?;
        if it.next().is_some() {
            return Err(PackageError::Invalid(format!(
                "{}: extraction directory is not empty",
                dest.display()
            )));
        }
        Ok(Extractor {
            dest: dest.to_path_buf(),
            origin: origin.to_path_buf(),
            links: BTreeSet::new(),
            seen: BTreeSet::new(),
        })
    }

    fn check(&mut self, path: &str, dir: bool) -> Result<PathBuf, PackageError> {
        check_relative_path(path)
            .map_err(|why| PackageError::unsafe_path(&self.origin, path, why))?;
        let mut anc = parent_of(path);
        while !anc.is_empty() {
            if self.links.contains(anc) {
                return Err(PackageError::unsafe_path(
                    &self.origin,
                    path,
                    "entry below a symlink",
                ));
            }
            anc = parent_of(anc);
        }
        if self.links.contains(path) || (!dir && !self.seen.insert(path.to_string())) {
            return Err(PackageError::unsafe_path(
                &self.origin,
                path,
                "duplicate entry",
            ));
        }
        let target = self.dest.join(path);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(|e| PackageError::io("cannot create", parent, e))?;
        }
        Ok(target)
    }

    /// A directory.
    pub fn dir(&mut self, path: &str, mode: u32) -> Result<(), PackageError> {
        let target = self.check(path, true)?;
        fs::create_dir_all(&target).map_err(|e| PackageError::io("cannot create", &target, e))?;
        fs::set_permissions(&target, fs::Permissions::from_mode((mode & 0o777) | 0o700))
            .map_err(|e| PackageError::io("cannot chmod", &target, e))
    }

    /// A symlink (its relative target must stay inside the root).
    pub fn symlink(&mut self, path: &str, link: &str) -> Result<(), PackageError> {
        check_symlink_target(path, link)
            .map_err(|why| PackageError::unsafe_path(&self.origin, path, why))?;
        let target = self.check(path, false)?;
        std::os::unix::fs::symlink(link, &target)
            .map_err(|e| PackageError::io("cannot create", &target, e))?;
        self.links.insert(path.to_string());
        Ok(())
    }

    /// A regular file of exactly `size` bytes.
    pub fn file(
        &mut self,
        path: &str,
        mode: u32,
        size: u64,
        data: &mut dyn Read,
    ) -> Result<(), PackageError> {
        let target = self.check(path, false)?;
        let mut out = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&target)
            .map_err(|e| PackageError::io("cannot create", &target, e))?;
        // A failed read is the package's fault; a failed write is the
        // output's (a full disk), and names the file being written.
        copy_exact_sides(data, &mut out, size).map_err(|e| match e {
            CopyError::Read(e) => PackageError::corrupt(&self.origin, format!("{path}: {e}")),
            CopyError::Write(e) => PackageError::io("cannot write", &target, e),
        })?;
        fs::set_permissions(&target, fs::Permissions::from_mode(mode & 0o777))
            .map_err(|e| PackageError::io("cannot chmod", &target, e))
    }
}
