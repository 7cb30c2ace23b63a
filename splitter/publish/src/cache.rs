//! Encoded store objects kept between runs (`publish --cache DIR`), so that
//! a content is compressed at the release level once, not at every
//! publish of a repository that still carries it.
//!
//! An entry is `<DIR>/<params>/<sha256 of the decoded bytes>.zst`, where
//! `<params>` names everything the encoded bytes depend on: the zstd
//! library version, the level and the window ([`ObjectCache::open`]). So
//! an entry, when intact, is byte for byte what encoding would write, and
//! a store published from the cache is the store published without it.
//!
//! The cache is not trusted: an entry is used only after it decodes, whole,
//! to its name's sha256; anything else (short, bit-flipped, a symlink, not
//! a file) is logged, removed and encoded again, never published.

use std::fs;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use rocm_kpack_fs::PendingFile;

use crate::PublishError;

/// A directory of encoded objects for one set of encoding parameters.
#[derive(Debug, Clone)]
pub struct ObjectCache {
    dir: PathBuf,
}

impl ObjectCache {
    /// The cache at `root` for objects encoded at `level` with a window of
    /// 2^`window_log` (created if missing).
    pub fn open(root: &Path, level: i32, window_log: u32) -> Result<ObjectCache, PublishError> {
        let params = format!(
            "zstd-{}-l{level}-w{window_log}",
            zstd::zstd_safe::version_number()
        );
        let dir = root.join(params);
        fs::create_dir_all(&dir).map_err(|e| PublishError::io("cannot create", &dir, e))?;
        Ok(ObjectCache { dir })
    }

    /// Where the object decoding to `sha256` is kept.
    pub fn entry_path(&self, sha256: &[u8; 32]) -> PathBuf {
        self.dir.join(format!(
            "{}{}",
            hex::encode(sha256),
            rocm_kpack_format::layout::store::DATABASE_SUFFIX
        ))
    }

    /// Copies the cached object decoding to `sha256` into `dest`; returns
    /// its size, or None when the cache has no intact entry (a damaged one
    /// is removed, with a warning).
    pub fn copy_to(&self, sha256: &[u8; 32], dest: &Path) -> Result<Option<u64>, PublishError> {
        let entry = self.entry_path(sha256);
        let mut src = match rocm_kpack_fs::open_regular(&entry) {
            Ok(f) => f,
            Err(e) if e.source.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                tracing::warn!("cache entry {}: {e}; encoding again", entry.display());
                self.discard(&entry);
                return Ok(None);
            }
        };
        let mut tmp = PendingFile::create_named(dest, crate::store::INCOMING, "")?;
        let size = copy_file(&mut src, &mut tmp)
            .map_err(|e| PublishError::io("cannot copy", &entry, e))?;
        // Checked on the copy: what is published is what was checked.
        if !crate::store::decodes_to(tmp.temp_path(), sha256) {
            tracing::warn!(
                "cache entry {} does not decode to its sha256; encoding again",
                entry.display()
            );
            self.discard(&entry);
            return Ok(None);
        }
        crate::store::commit_object(tmp)?;
        Ok(Some(size))
    }

    /// Adds the encoded object at `encoded` (which decodes to `sha256`).
    /// A cache that cannot be written costs the next run time, not this
    /// one its output: failures are logged.
    pub fn insert(&self, sha256: &[u8; 32], encoded: &Path) {
        let entry = self.entry_path(sha256);
        let copied = (|| -> Result<(), PublishError> {
            let mut src = rocm_kpack_fs::open_regular(encoded)?;
            let mut tmp = PendingFile::create_named(&entry, crate::store::INCOMING, "")?;
            copy_file(&mut src, &mut tmp)
                .map_err(|e| PublishError::io("cannot copy", encoded, e))?;
            tmp.commit_as("cannot write")?;
            Ok(())
        })();
        if let Err(e) = copied {
            tracing::warn!("cannot add {} to the cache: {e}", entry.display());
        }
    }

    fn discard(&self, entry: &Path) {
        if let Err(e) = fs::remove_file(entry) {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!("cannot remove {}: {e}", entry.display());
            }
        }
    }
}

/// Copies `src` to the end of `dest`, flushed; returns the bytes copied.
fn copy_file(src: &mut fs::File, dest: &mut PendingFile) -> io::Result<u64> {
    let mut w = BufWriter::with_capacity(1 << 20, dest);
    let n = io::copy(src, &mut w)?;
    w.flush()?;
    Ok(n)
}
