//! Putting verified archives into `.kpack` directories: one lock per
//! directory (`flock` on `.rocm-kpack-fetch.lock`; a second run waits),
//! and every file appears by `rename` of a complete, fsynced file on the
//! same filesystem, followed by an fsync of the directory. A `.kpack` file
//! is therefore either absent, the old one, or the new verified one; a crash
//! leaves at most a hidden `.rocm-kpack-fetch.*.tmp` file, removed by the
//! next run that takes the lock.
//!
//! When the download cache is on the prefix's filesystem, the verified
//! partial file itself is renamed into place (no second copy: renames
//! across directories of one filesystem are just as atomic); otherwise it
//! is copied into a temp file next to the destination, re-hashed while
//! copying, fsynced and renamed.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};


use sha2::{Digest, Sha256};

use crate::download::Partial;

use rocm_kpack_format::fsutil::PendingFile;
use rocm_kpack_format::layout::fetch::{LOCK_FILE, TEMP_PREFIX, TEMP_SUFFIX};

/// Installed archives are readable by everyone (the loader runs as any user).
const ARCHIVE_MODE: u32 = 0o644;

/// Block size for hashing and copying.
const BLOCK: usize = 1 << 20;

/// An exclusive lock on one `.kpack` directory, released on drop.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
    dir: PathBuf,
}

impl DirLock {
    /// Takes the lock of `kpack_dir`, creating the lock file. When another
    /// process holds it, calls `on_wait` once and blocks until it is free.
    /// Then removes temporary files a crashed run left behind.
    pub fn acquire(kpack_dir: &Path, on_wait: impl FnOnce(&Path)) -> io::Result<DirLock> {
        let path = kpack_dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(&path)?;
        use rustix::fs::{flock, FlockOperation};
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
                on_wait(&path);
                flock(&file, FlockOperation::LockExclusive)?;
            }
            Err(e) => return Err(e.into()),
        }
        remove_stale_temps(kpack_dir)?;
        Ok(DirLock {
            _file: file,
            dir: kpack_dir.to_path_buf(),
        })
    }

    /// The locked directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

fn is_temp_name(name: &str) -> bool {
    name.starts_with(TEMP_PREFIX) && name.ends_with(TEMP_SUFFIX)
}

/// Removes `.rocm-kpack-fetch.*.tmp` files (only safe under the lock).
fn remove_stale_temps(dir: &Path) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().to_str().is_some_and(is_temp_name) {
            tracing::info!("removing leftover {}", entry.path().display());
            match fs::remove_file(entry.path()) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
    }
    Ok(())
}


pub use rocm_kpack_format::fsutil::sync_dir;

/// Writes `bytes` to `path` atomically (mode 0644), under a temporary name
/// that [`DirLock::acquire`] recognises as a leftover if the run is killed.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = PendingFile::create_named(path, TEMP_PREFIX, TEMP_SUFFIX)?;
    f.write_all(bytes)?;
    f.set_permissions(fs::Permissions::from_mode(0o644))?;
    f.commit()?;
    Ok(())
}

/// Size and SHA-256 of a file.
pub fn hash_file(path: &Path) -> io::Result<(u64, [u8; 32])> {
    rocm_kpack_format::fsutil::sha256_reader(File::open(path)?)
}

/// Why an archive could not be put in place.
#[derive(Debug, thiserror::Error)]
pub enum PlaceError {
    /// A file operation failed; nothing partial is visible.
    #[error("installing {}: {source}", dest.display())]
    Io {
        /// The archive's final path.
        dest: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The copy read back different bytes than were verified.
    #[error("installing {}: copy has sha256 {actual}, expected {expected}", dest.display())]
    Changed {
        /// The archive's final path.
        dest: PathBuf,
        /// Expected hex digest.
        expected: String,
        /// Hex digest of the copy.
        actual: String,
    },
}

/// Installs the verified `partial` as `dest` by renaming it when the cache
/// is on the same filesystem (consuming it), else by a verified copy.
/// Returns the installed file's metadata.
pub fn place_from_partial(
    partial: Partial,
    dest: &Path,
    sha256: &[u8; 32],
) -> Result<fs::Metadata, PlaceError> {
    let io_err = |source| PlaceError::Io {
        dest: dest.to_path_buf(),
        source,
    };
    let dir = dest.parent().unwrap_or(Path::new("."));
    let same_fs = fs::metadata(dir).map_err(io_err)?.dev() == partial.file().metadata().map_err(io_err)?.dev();
    if !same_fs {
        let meta = place_copy(partial.path(), dest, sha256)?;
        let _ = partial.remove();
        return Ok(meta);
    }
    partial.file().sync_all().map_err(io_err)?;
    partial
        .file()
        .set_permissions(fs::Permissions::from_mode(ARCHIVE_MODE))
        .map_err(io_err)?;
    fs::rename(partial.path(), dest).map_err(io_err)?;
    sync_dir(dir).map_err(io_err)?;
    fs::metadata(dest).map_err(io_err)
}

/// Installs a copy of the verified file `src` as `dest`: copied into a
/// temp file next to `dest` while hashing, checked, fsynced, renamed.
pub fn place_copy(src: &Path, dest: &Path, sha256: &[u8; 32]) -> Result<fs::Metadata, PlaceError> {
    let io_err = |source| PlaceError::Io {
        dest: dest.to_path_buf(),
        source,
    };
    let mut input = File::open(src).map_err(io_err)?;
    let mut out =
        PendingFile::create_named(dest, TEMP_PREFIX, TEMP_SUFFIX).map_err(|e| io_err(e.source))?;
    out.set_permissions(fs::Permissions::from_mode(ARCHIVE_MODE))
        .map_err(|e| io_err(e.source))?;
    {
        let mut hasher = Sha256::new();
        let mut block = vec![0u8; BLOCK];
        loop {
            let n = input.read(&mut block).map_err(io_err)?;
            if n == 0 {
                break;
            }
            let data = block.get(..n).unwrap_or_default();
            hasher.update(data);
            out.write_all(data).map_err(io_err)?;
        }
        let actual: [u8; 32] = hasher.finalize().into();
        if &actual != sha256 {
            return Err(PlaceError::Changed {
                dest: dest.to_path_buf(),
                expected: hex::encode(sha256),
                actual: hex::encode(actual),
            });
        }
    }
    out.commit().map_err(|e| io_err(e.source))?;
    fs::metadata(dest).map_err(io_err)
}

/// Removes an installed archive and syncs its directory.
pub fn remove_archive(path: &Path) -> io::Result<()> {
    fs::remove_file(path)?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_leaves_no_temp() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f.json");
        write_atomically(&path, b"one").expect("write");
        write_atomically(&path, b"two").expect("write");
        assert_eq!(fs::read(&path).expect("read"), b"two");
        let names: Vec<_> = fs::read_dir(dir.path())
            .expect("ls")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("f.json")]);
    }

    #[test]
    fn lock_cleans_stale_temps_and_copy_checks_hash() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stale = dir.path().join(".rocm-kpack-fetch.123.0.tmp");
        fs::write(&stale, b"junk").expect("write");
        let lock = DirLock::acquire(dir.path(), |_| panic!("nobody else holds it")).expect("lock");
        assert!(!stale.exists());
        assert_eq!(lock.dir(), dir.path());

        let src = dir.path().join("src.bin");
        fs::write(&src, b"payload").expect("write");
        let sha: [u8; 32] = Sha256::digest(b"payload").into();
        let dest = dir.path().join("a.kpack");
        place_copy(&src, &dest, &sha).expect("copy");
        assert_eq!(fs::read(&dest).expect("read"), b"payload");
        let wrong = [0u8; 32];
        let err = place_copy(&src, &dir.path().join("b.kpack"), &wrong).expect_err("must fail");
        assert!(err.to_string().contains(&hex::encode(wrong)), "{err}");
        assert!(!dir.path().join("b.kpack").exists());
        assert_eq!(hash_file(&dest).expect("hash"), (7, sha));
    }
}
