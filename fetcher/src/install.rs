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

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::download::Partial;
use crate::state::StateEntry;

use crate::config::{LOCK_FILE, TEMP_PREFIX, TEMP_SUFFIX};
use rocm_kpack_format::layout::names::{self, NameKind};
use rocm_kpack_format::layout::KPACK_DIR;
use rocm_kpack_fs::{HashingWriter, PathError};
use std::sync::atomic::Ordering;

/// Installed archives are readable by everyone (the loader runs as any user).
const ARCHIVE_MODE: u32 = 0o644;

/// Block size for copying.
const BLOCK: usize = 1 << 20;

use rocm_kpack_fs::lock::{denied, LockNames};
pub use rocm_kpack_fs::lock::{DirLock, LockOptions, PermissionPolicy};

/// The fetcher's lock file, temporary files and the words of its lock
/// and permission errors ([`DirLock::acquire`]).
pub const LOCK_NAMES: LockNames = LockNames {
    lock_file: LOCK_FILE,
    temp_prefix: TEMP_PREFIX,
    temp_suffix: TEMP_SUFFIX,
    dir_name: Some(KPACK_DIR),
    program: "rocm-kpack-fetch",
    wait_hint: "pass --wait SECONDS to wait longer",
    permission_hint: PERMISSION_HINT,
};

const PERMISSION_HINT: &str = "fix its permissions or pass --unsafe-permissions";

/// Default of `--wait`: seconds an interactive command waits for a
/// `.kpack` directory another rocm-kpack-fetch holds.
pub const DEFAULT_LOCK_WAIT_SECS: u64 = 300;

/// Takes the lock of the `.kpack` directory `kpack_dir` as `options` say
/// (checked, unless [`PermissionPolicy::Unsafe`], by
/// [`rocm_kpack_fs::lock::check_dir_permissions`]), saying on stderr when
/// it has to wait ([`say_waiting`]).
pub fn lock_kpack_dir(kpack_dir: &Path, options: LockOptions) -> io::Result<DirLock> {
    DirLock::acquire(kpack_dir, &LOCK_NAMES, options, |path, pid| {
        say_waiting(path, pid, options.wait);
    })
}

/// [`lock_kpack_dir`] that waits without a word (tidying up after others).
pub fn lock_kpack_dir_quietly(kpack_dir: &Path, options: LockOptions) -> io::Result<DirLock> {
    DirLock::acquire(kpack_dir, &LOCK_NAMES, options, |_, _| {})
}

/// The line a command prints when it has to wait for a lock.
fn say_waiting(path: &Path, pid: Option<u32>, wait: std::time::Duration) {
    eprintln!(
        "waiting for another rocm-kpack-fetch{} to finish ({} is locked; giving up after {} s, see --wait)",
        pid.map_or_else(String::new, |p| format!(" (pid {p})")),
        path.display(),
        wait.as_secs()
    );
}

pub use rocm_kpack_fs::sync_dir;

/// Why an archive could not be put in place.
#[derive(Debug, thiserror::Error)]
pub enum PlaceError {
    /// A file operation failed; nothing partial is visible. The path is
    /// the archive's final path.
    #[error(transparent)]
    Io(#[from] PathError),
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

/// Where a verified file goes: a directory opened without following
/// symlinks (and, for a database file, each directory on the way checked
/// and opened the same way), and the name in it. Everything after the open
/// is relative to that descriptor (`openat`, `renameat`), so no symlink
/// swapped in after the checks can send the write elsewhere.
#[derive(Debug)]
pub struct Destination {
    dir: rustix::fd::OwnedFd,
    name: String,
    path: PathBuf,
}

const DIR_FLAGS: rustix::fs::OFlags = rustix::fs::OFlags::RDONLY
    .union(rustix::fs::OFlags::DIRECTORY)
    .union(rustix::fs::OFlags::NOFOLLOW)
    .union(rustix::fs::OFlags::CLOEXEC);

impl Destination {
    /// The archive `name` in the `.kpack` directory `kpack_dir` (locked and
    /// checked by [`DirLock::acquire`]).
    pub fn archive(kpack_dir: &Path, name: &str) -> io::Result<Destination> {
        names::check(NameKind::ArchiveFile, name)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let dir = open_dir(&rustix::fs::CWD, kpack_dir.as_os_str(), kpack_dir)?;
        Ok(Destination {
            dir,
            name: name.to_string(),
            path: kpack_dir.join(name),
        })
    }

    /// The database file `key` of `prefix` (a manifest's prefix, `../` for
    /// each level above it: see [`crate::resolve::database_base`]): opens
    /// the directory the key climbs to, then each directory below it,
    /// making the missing ones (mode 0755), never through a symlink; each
    /// must be owned by root or this user and writable by no one else
    /// (sticky excepted), as [`rocm_kpack_fs::lock::check_dir_permissions`]
    /// asks of a `.kpack` directory, unless `permissions` is
    /// [`PermissionPolicy::Unsafe`]. Refuses a destination that
    /// is a symlink or a directory. Also returns the directories it made,
    /// as keys like `key`, shallowest first (recorded in the state so that
    /// removal takes them away again).
    pub fn database(
        prefix: &Path,
        key: &str,
        permissions: PermissionPolicy,
    ) -> io::Result<(Destination, Vec<String>)> {
        use rustix::fs::{mkdirat, statat, AtFlags, FileType, Mode};
        names::check(NameKind::DatabaseKey, key)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let (base, rel) = crate::resolve::database_base(prefix, key);
        // The `../` steps of the key: `rel` is what follows them.
        let climb = key.strip_suffix(rel).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{rel:?} does not end the database key {key:?}"),
            )
        })?;
        let mut dir = open_dir(&rustix::fs::CWD, base.as_os_str(), &base)?;
        check_dir_owner(&dir, &base, permissions)?;
        let mut shown = base.clone();
        let mut created = Vec::new();
        let comps: Vec<&str> = rel.split('/').collect();
        let Some((file, parents)) = comps.split_last() else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty path"));
        };
        // The key of the directory at each step: `climb` then the
        // components so far.
        let mut dir_key = climb.to_string();
        for (depth, comp) in parents.iter().enumerate() {
            shown.push(comp);
            if depth > 0 {
                dir_key.push('/');
            }
            dir_key.push_str(comp);
            match mkdirat(&dir, *comp, Mode::from_raw_mode(0o755)) {
                Ok(()) => created.push(dir_key.clone()),
                // Made before, by anyone (another download of this run
                // among them): what it is is checked on opening.
                Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(io::Error::from(e)),
            }
            let next = open_dir(&dir, comp.as_ref(), &shown)?;
            check_dir_owner(&next, &shown, permissions)?;
            dir = next;
        }
        let path = base.join(rel);
        match statat(&dir, *file, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st)
                if matches!(
                    FileType::from_raw_mode(st.st_mode),
                    FileType::Symlink | FileType::Directory
                ) =>
            {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "{} is a symlink or directory; not replacing it",
                        path.display()
                    ),
                ))
            }
            _ => {}
        }
        let dest = Destination {
            dir,
            name: (*file).to_string(),
            path,
        };
        Ok((dest, created))
    }

    /// The destination's path (for messages and the report).
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn metadata(&self) -> io::Result<fs::Metadata> {
        use rustix::fs::{openat, Mode, OFlags};
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let fd = openat(&self.dir, self.name.as_str(), flags, Mode::empty())?;
        File::from(fd).metadata()
    }
}

/// Opens the directory `name` in `at` without following a symlink; `shown`
/// names it in errors.
fn open_dir(
    at: &impl rustix::fd::AsFd,
    name: &std::ffi::OsStr,
    shown: &Path,
) -> io::Result<rustix::fd::OwnedFd> {
    rustix::fs::openat(at, name, DIR_FLAGS, rustix::fs::Mode::empty()).map_err(|e| match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is a symlink or not a directory; not installing a file through it",
                shown.display()
            ),
        ),
        e => io::Error::new(
            io::Error::from(e).kind(),
            format!("opening {}: {e}", shown.display()),
        ),
    })
}

/// Refuses an open directory another user could change: owned by neither
/// root nor this user, or writable by another user (group root excepted)
/// without the sticky bit. Skipped with [`PermissionPolicy::Unsafe`].
fn check_dir_owner(
    dir: &rustix::fd::OwnedFd,
    shown: &Path,
    permissions: PermissionPolicy,
) -> io::Result<()> {
    if !permissions.is_strict() {
        return Ok(());
    }
    let st = rustix::fs::fstat(dir)?;
    let me = rustix::process::geteuid().as_raw();
    let hint = PERMISSION_HINT;
    if st.st_uid != 0 && st.st_uid != me {
        return Err(denied(format!(
            "{} is owned by uid {}, not root or this user; not installing a file in it; {hint}",
            shown.display(),
            st.st_uid
        )));
    }
    let mode = st.st_mode;
    let group_write = mode & 0o020 != 0 && st.st_gid != 0;
    let other_write = mode & 0o002 != 0;
    if (group_write || other_write) && mode & 0o1000 == 0 {
        return Err(denied(format!(
            "other users may write {} (mode {:o}); not installing a file in it; {hint}",
            shown.display(),
            mode & 0o7777
        )));
    }
    Ok(())
}

/// Installs the verified `partial` at `dest` by renaming it when the cache
/// is on the same filesystem (consuming it), else by a verified copy.
/// Returns the installed file's metadata.
pub fn place_from_partial(
    partial: Partial,
    dest: &Destination,
    sha256: &[u8; 32],
) -> Result<fs::Metadata, PlaceError> {
    let io_err = |source| PlaceError::Io(PathError::new("installing", &dest.path, source));
    let dir_dev = rustix::fs::fstat(&dest.dir)
        .map_err(|e| io_err(e.into()))?
        .st_dev;
    let same_fs = dir_dev == partial.file().metadata().map_err(io_err)?.dev();
    if !same_fs {
        let meta = place_copy(partial.path(), dest, sha256)?;
        let _ = partial.remove();
        return Ok(meta);
    }
    partial
        .file()
        .set_permissions(fs::Permissions::from_mode(ARCHIVE_MODE))
        .map_err(io_err)?;
    partial.file().sync_all().map_err(io_err)?;
    rustix::fs::renameat(
        rustix::fs::CWD,
        partial.path(),
        &dest.dir,
        dest.name.as_str(),
    )
    .map_err(|e| io_err(e.into()))?;
    rustix::fs::fsync(&dest.dir).map_err(|e| io_err(e.into()))?;
    dest.metadata().map_err(io_err)
}

/// Installs a copy of the verified file `src` at `dest`: copied into a
/// temp file made (`O_EXCL`, `O_NOFOLLOW`) in the destination's open
/// directory while hashing, checked, fsynced, renamed within that
/// directory.
pub fn place_copy(
    src: &Path,
    dest: &Destination,
    sha256: &[u8; 32],
) -> Result<fs::Metadata, PlaceError> {
    let io_err = |source| PlaceError::Io(PathError::new("installing", &dest.path, source));
    let input = File::open(src).map_err(io_err)?;
    let (meta, _) = place_written(dest, Some(sha256), |out| {
        let mut hashing = HashingWriter::new(out);
        io::copy(
            &mut io::BufReader::with_capacity(BLOCK, input),
            &mut hashing,
        )?;
        let (_, actual, _) = hashing.finish();
        Ok(actual)
    })?;
    Ok(meta)
}

/// Installs what `write` writes at `dest`: into a temp file made
/// (`O_EXCL`, `O_NOFOLLOW`) in the destination's open directory, which
/// `write` fills and returns the sha256 of; when `sha256` is given the
/// file must have it. Then fsynced and renamed within that directory, so
/// `dest` is the old file or the complete new one, never a part; on any
/// error the temp file is removed (a crash leaves one that
/// [`DirLock::acquire`] removes). Returns the installed file's metadata
/// and sha256.
pub fn place_written(
    dest: &Destination,
    sha256: Option<&[u8; 32]>,
    write: impl FnOnce(&mut File) -> io::Result<[u8; 32]>,
) -> Result<(fs::Metadata, [u8; 32]), PlaceError> {
    use rustix::fs::{openat, renameat, unlinkat, AtFlags, Mode, OFlags};
    let io_err = |source| PlaceError::Io(PathError::new("installing", &dest.path, source));
    let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mode = Mode::from_raw_mode(ARCHIVE_MODE);
    let (temp, fd) = loop {
        let temp = temp_name();
        match openat(&dest.dir, temp.as_str(), flags, mode) {
            Ok(fd) => break (temp, fd),
            Err(rustix::io::Errno::EXIST) => continue,
            Err(e) => return Err(io_err(e.into())),
        }
    };
    let written = (|| {
        let mut out = File::from(fd);
        out.set_permissions(fs::Permissions::from_mode(ARCHIVE_MODE))?;
        let actual = write(&mut out)?;
        out.sync_all()?;
        Ok::<_, io::Error>(actual)
    })();
    let commit = match written {
        Ok(actual) if sha256.is_some_and(|want| &actual != want) => Err(PlaceError::Changed {
            dest: dest.path.clone(),
            expected: sha256.map(hex::encode).unwrap_or_default(),
            actual: hex::encode(actual),
        }),
        Ok(actual) => renameat(&dest.dir, temp.as_str(), &dest.dir, dest.name.as_str())
            .and_then(|()| rustix::fs::fsync(&dest.dir))
            .map(|()| actual)
            .map_err(|e| io_err(e.into())),
        Err(e) => Err(io_err(e)),
    };
    match commit {
        Ok(actual) => Ok((dest.metadata().map_err(io_err)?, actual)),
        Err(e) => {
            let _ = unlinkat(&dest.dir, temp.as_str(), AtFlags::empty());
            Err(e)
        }
    }
}

/// A fresh temporary name [`DirLock::acquire`] recognises as a leftover.
fn temp_name() -> String {
    use std::sync::atomic::AtomicU64;
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{TEMP_PREFIX}{}.{}.{nanos}{TEMP_SUFFIX}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// After the database file `key` of the prefix of `kpack_dir` is removed:
/// removes its parent directories that `created` (the state's record of
/// directories this tool made, keys like `key`) lists, deepest first, each
/// only if empty, reached without following symlinks below the directory
/// the key climbs to; stops at the first one that is not recorded, not
/// empty or not removable. Drops the removed (or already gone) ones from
/// `created`. The caller holds the lock.
pub fn remove_created_dirs(
    kpack_dir: &Path,
    key: &str,
    created: &mut std::collections::BTreeSet<String>,
) {
    let Some(prefix) = kpack_dir.parent() else {
        return;
    };
    if names::check(NameKind::DatabaseKey, key).is_err() {
        return;
    }
    let (_, rel) = crate::resolve::database_base(prefix, key);
    let Some(climb) = key.strip_suffix(rel) else {
        return;
    };
    // The keys of the file's parent directories, shallowest first.
    let mut dir_keys = Vec::new();
    let mut dir_key = climb.to_string();
    let comps: Vec<&str> = rel.split('/').collect();
    if let Some((_, parents)) = comps.split_last() {
        for (depth, comp) in parents.iter().enumerate() {
            if depth > 0 {
                dir_key.push('/');
            }
            dir_key.push_str(comp);
            dir_keys.push(dir_key.clone());
        }
    }
    for dir_key in dir_keys.iter().rev() {
        if !created.contains(dir_key) || !remove_created_dir(prefix, dir_key) {
            return;
        }
        created.remove(dir_key);
    }
}

/// Removes every directory `created` records (deepest first) that is
/// empty, dropping it from `created`; for a state about to be dropped
/// (its manifests and files are gone), so that no directory the fetcher
/// made outlives its record. Others (something else put files there) stay
/// in `created`. The caller holds the lock.
pub fn remove_all_created_dirs(kpack_dir: &Path, created: &mut std::collections::BTreeSet<String>) {
    let Some(prefix) = kpack_dir.parent() else {
        return;
    };
    let mut deepest_first: Vec<String> = created.iter().cloned().collect();
    deepest_first.sort_by_key(|k| std::cmp::Reverse(k.matches('/').count()));
    for key in deepest_first {
        if remove_created_dir(prefix, &key) {
            created.remove(&key);
        }
    }
}

/// Removes the directory `key` (a directory key as the state records it,
/// relative to `prefix`) if it is empty, reached without following a
/// symlink below the directory the key climbs to. `true` when it is gone.
fn remove_created_dir(prefix: &Path, key: &str) -> bool {
    use rustix::fs::{unlinkat, AtFlags};
    if names::check(NameKind::DatabaseKey, key).is_err() {
        return false;
    }
    let (base, rel) = crate::resolve::database_base(prefix, key);
    let comps: Vec<&str> = rel.split('/').collect();
    let Some((name, parents)) = comps.split_last() else {
        return false;
    };
    let Some(parent) = open_below(&base, parents) else {
        return false;
    };
    // Not empty (another file, ours or not), a symlink or a file now: kept.
    matches!(
        unlinkat(&parent, *name, AtFlags::REMOVEDIR),
        Ok(()) | Err(rustix::io::Errno::NOENT)
    )
}

/// The directory `prefix/comps...`, opened component by component without
/// following a symlink; `None` when one is missing, a symlink or no
/// directory.
fn open_below(prefix: &Path, comps: &[&str]) -> Option<rustix::fd::OwnedFd> {
    use rustix::fs::{openat, Mode, CWD};
    let dir_flags = DIR_FLAGS;
    let mut dir = openat(CWD, prefix, dir_flags, Mode::empty()).ok()?;
    for c in comps {
        dir = openat(&dir, *c, dir_flags, Mode::empty()).ok()?;
    }
    Some(dir)
}

/// Why a recorded archive was not deleted.
#[derive(Debug, thiserror::Error)]
pub enum DeleteError {
    /// It is not what the fetcher installed (or not where it may delete).
    #[error("not removing {}: {reason}", path.display())]
    Refused {
        /// The archive.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A file operation failed on the archive.
    #[error(transparent)]
    Io(#[from] PathError),
}

/// The one way the fetcher deletes a kernel-database file (`remove`, `gc`,
/// package removal): `rel`, a valid database key relative to the prefix of
/// `kpack_dir` ([`crate::resolve::database_base`]), reached without following any symlink, and only a regular
/// file whose size and sha256 are those `entry` recorded, and that no
/// installed package owns (the user may have installed the family's device
/// package since: then its copy is the package manager's). The caller holds
/// the directory's [`DirLock`]. Returns `false` when the file is already
/// gone.
pub fn delete_recorded_database(
    kpack_dir: &Path,
    rel: &str,
    entry: &StateEntry,
) -> Result<bool, DeleteError> {
    delete_item(crate::plan::ItemKind::Database, kpack_dir, rel, entry)
}

/// The installed package owning `path`, asked of dpkg and rpm where their
/// databases exist below the system root `path` is under (found from
/// `prefix` upwards), `None` when neither knows it.
pub fn package_owner(prefix: &Path, path: &Path) -> Option<String> {
    let root = prefix
        .ancestors()
        .find(|a| a.join("var/lib/dpkg/status").is_file() || a.join("var/lib/rpm").is_dir())?;
    let apt = crate::pm::apt::Apt {
        root: root.to_path_buf(),
        extra: Vec::new(),
        native: Default::default(),
    };
    if root.join("var/lib/dpkg/status").is_file() {
        if let Ok(Some(owner)) = apt.owner(path) {
            return Some(owner);
        }
    }
    if root.join("var/lib/rpm").is_dir() {
        let dnf = crate::pm::dnf::Dnf {
            root: root.to_path_buf(),
            extra: Vec::new(),
            native: Default::default(),
        };
        if let Ok(Some(owner)) = dnf.owner(path) {
            return Some(owner);
        }
    }
    None
}

/// The one way the fetcher deletes an archive (`remove`, `gc`, superseded
/// archives, package removal): `name`, a valid archive file name, directly
/// in `kpack_dir`, a `.kpack` directory that is not a symlink, and only a
/// regular file (never a symlink, which is not followed) whose size and
/// sha256 are those `entry` recorded. The caller holds the directory's
/// [`DirLock`]. Returns `false` when the file is already gone.
pub fn delete_recorded(
    kpack_dir: &Path,
    name: &str,
    entry: &StateEntry,
) -> Result<bool, DeleteError> {
    delete_item(crate::plan::ItemKind::Archive, kpack_dir, name, entry)
}

/// [`delete_recorded`] and [`delete_recorded_database`]: an archive lies
/// directly in `kpack_dir`, a database file at its path below the prefix;
/// every directory on the way is opened without following symlinks.
fn delete_item(
    kind: crate::plan::ItemKind,
    kpack_dir: &Path,
    name: &str,
    entry: &StateEntry,
) -> Result<bool, DeleteError> {
    use crate::plan::ItemKind;
    use rustix::fs::{openat, Mode, CWD};
    let (base, name, name_kind) = match kind {
        ItemKind::Archive => (kpack_dir.to_path_buf(), name, NameKind::ArchiveFile),
        ItemKind::Database => {
            names::check(NameKind::DatabaseKey, name).map_err(|e| DeleteError::Refused {
                path: kpack_dir.join(name),
                reason: e.to_string(),
            })?;
            let (base, rel) =
                crate::resolve::database_base(kpack_dir.parent().unwrap_or(Path::new("/")), name);
            (base, rel, NameKind::DatabasePath)
        }
    };
    let base = base.as_path();
    let path = base.join(name);
    let refused = |reason: String| DeleteError::Refused {
        path: path.clone(),
        reason,
    };
    let io_err = |e: io::Error| DeleteError::Io(PathError::new("removing", &path, e));
    names::check(name_kind, name).map_err(|e| refused(e.to_string()))?;
    if kpack_dir.file_name().is_none_or(|n| n != KPACK_DIR) {
        return Err(refused(format!(
            "{} is not a {KPACK_DIR} directory",
            kpack_dir.display()
        )));
    }
    let dir_flags = DIR_FLAGS;
    let not_dir = |shown: &str| refused(format!("{shown} is a symlink or not a directory"));
    let mut dir = openat(CWD, base, dir_flags, Mode::empty()).map_err(|e| match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => not_dir(&base.display().to_string()),
        e => io_err(e.into()),
    })?;
    let comps: Vec<&str> = name.split('/').collect();
    let Some((file, parents)) = comps.split_last() else {
        return Err(refused("empty path".into()));
    };
    for c in parents {
        dir = match openat(&dir, *c, dir_flags, Mode::empty()) {
            Ok(d) => d,
            Err(rustix::io::Errno::NOENT) => return Ok(false),
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => return Err(not_dir(c)),
            Err(e) => return Err(io_err(e.into())),
        };
    }
    if kind == ItemKind::Database {
        if let Some(owner) = package_owner(base, &path) {
            return Err(refused(format!("the installed package {owner} owns it")));
        }
    }
    check_and_unlink(&dir, file, entry, &refused, &io_err).map(|done| done.is_some())
}

/// Unlinks `name` in the open directory `dir` if it is a regular file (not
/// followed if a symlink) with the size and sha256 `entry` recorded, and
/// still the same file when unlinked. `Ok(None)` when it is gone already.
fn check_and_unlink(
    dir: &rustix::fd::OwnedFd,
    name: &str,
    entry: &StateEntry,
    refused: &dyn Fn(String) -> DeleteError,
    io_err: &dyn Fn(io::Error) -> DeleteError,
) -> Result<Option<()>, DeleteError> {
    use rustix::fs::{fstat, openat, statat, unlinkat, AtFlags, Mode, OFlags};
    let want = hex::decode(&entry.sha256)
        .ok()
        .and_then(|v| <[u8; 32]>::try_from(v).ok())
        .ok_or_else(|| {
            refused(format!(
                "the recorded sha256 {:?} is not 64 hex digits",
                entry.sha256
            ))
        })?;
    let file_flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let fd = match openat(dir, name, file_flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(rustix::io::Errno::LOOP) => return Err(refused("it is a symlink".into())),
        Err(e) => return Err(io_err(e.into())),
    };
    let st = fstat(&fd).map_err(|e| io_err(e.into()))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(refused("not a regular file".into()));
    }
    if u64::try_from(st.st_size).ok() != Some(entry.size) {
        return Err(refused(format!(
            "it has {} bytes, rocm-kpack-fetch installed {} (changed since?)",
            st.st_size, entry.size
        )));
    }
    let (_, got) = rocm_kpack_fs::sha256_reader(File::from(fd)).map_err(io_err)?;
    if got != want {
        return Err(refused(format!(
            "its sha256 {} is not the {} rocm-kpack-fetch installed (changed since?)",
            hex::encode(got),
            entry.sha256
        )));
    }
    // Still the same file at that name (nobody may write the directory,
    // but check: unlink removes whatever the name holds now).
    let now = statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| io_err(e.into()))?;
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) {
        return Err(refused("it was replaced while being checked".into()));
    }
    unlinkat(dir, name, AtFlags::empty()).map_err(|e| io_err(e.into()))?;
    rustix::fs::fsync(dir).map_err(|e| io_err(e.into()))?;
    Ok(Some(()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    /// Database files of one directory are fetched in parallel: each
    /// download making the same missing directories succeeds, and between
    /// them every directory is recorded exactly once.
    #[test]
    fn concurrent_downloads_make_the_same_database_dirs() {
        for round in 0..20 {
            let top = tempfile::tempdir().expect("tempdir");
            let prefix = top.path();
            let made: Vec<Vec<String>> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..4)
                    .map(|i| {
                        s.spawn(move || {
                            Destination::database(
                                prefix,
                                &format!("rocblas/library/deep/f{i}.co"),
                                PermissionPolicy::Strict,
                            )
                            .map(|(_, created)| created)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("thread").expect("make dirs"))
                    .collect()
            });
            let mut all: Vec<String> = made.into_iter().flatten().collect();
            all.sort();
            assert_eq!(
                all,
                ["rocblas", "rocblas/library", "rocblas/library/deep"],
                "round {round}"
            );
        }
        // A file where a directory belongs is still refused.
        let top = tempfile::tempdir().expect("tempdir");
        fs::write(top.path().join("rocblas"), b"x").expect("write");
        assert!(Destination::database(
            top.path(),
            "rocblas/library/f.co",
            PermissionPolicy::Strict
        )
        .is_err());
    }

    #[test]
    fn lock_cleans_stale_temps_and_copy_checks_hash() {
        let top = tempfile::tempdir().expect("tempdir");
        let kdir = top.path().join(KPACK_DIR);
        fs::create_dir(&kdir).expect("mkdir");
        let dir = kdir.as_path();
        let stale = dir.join(".rocm-kpack-fetch.123.0.tmp");
        fs::write(&stale, b"junk").expect("write");
        let options = LockOptions {
            wait: std::time::Duration::ZERO,
            permissions: PermissionPolicy::Strict,
        };
        let lock = DirLock::acquire(dir, &LOCK_NAMES, options, |_, _| {
            panic!("nobody else holds it")
        })
        .expect("lock");
        let mode = fs::metadata(dir.join(LOCK_FILE)).expect("stat").mode() & 0o777;
        assert_eq!(mode, 0o600, "no other user may open (and so hold) the lock");
        assert!(!stale.exists());
        assert_eq!(lock.dir(), dir);

        let src = dir.join("src.bin");
        fs::write(&src, b"payload").expect("write");
        let sha: [u8; 32] = Sha256::digest(b"payload").into();
        let dest = dir.join("a.kpack");
        let at = |name: &str| Destination::archive(dir, name).expect("open");
        place_copy(&src, &at("a.kpack"), &sha).expect("copy");
        assert_eq!(fs::read(&dest).expect("read"), b"payload");
        let wrong = [0u8; 32];
        let err = place_copy(&src, &at("b.kpack"), &wrong).expect_err("must fail");
        assert!(err.to_string().contains(&hex::encode(wrong)), "{err}");
        assert!(!dir.join("b.kpack").exists());
        let left: Vec<_> = fs::read_dir(dir)
            .expect("ls")
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| LOCK_NAMES.is_temp_name(n))
            })
            .collect();
        assert!(
            left.is_empty(),
            "a failed copy leaves no temp file: {left:?}"
        );
        assert_eq!(rocm_kpack_fs::sha256_file(&dest).expect("hash"), (7, sha));
    }

    fn recorded(bytes: &[u8]) -> StateEntry {
        StateEntry {
            component: "x".into(),
            manifest: "x.kpm".into(),
            family: "gfx90X".into(),
            architectures: vec!["gfx90a".into()],
            size: bytes.len() as u64,
            sha256: hex::encode(Sha256::digest(bytes)),
            source: None,
            installed_at: 0,
            targets: vec![],
            reason: String::new(),
            file: None,
            rebuilt: None,
        }
    }

    #[test]
    fn deletes_only_unchanged_regular_files_in_kpack_dirs() {
        let top = tempfile::tempdir().expect("tempdir");
        let kdir = top.path().join(KPACK_DIR);
        fs::create_dir(&kdir).expect("mkdir");
        let entry = recorded(b"archive");
        // Changed content, wrong size, a symlink, a bad name, a non-.kpack dir.
        fs::write(kdir.join("changed.kpack"), b"ARCHIVE").expect("write");
        fs::write(kdir.join("longer.kpack"), b"archive!").expect("write");
        let victim = top.path().join("victim");
        fs::write(&victim, b"archive").expect("write");
        std::os::unix::fs::symlink(&victim, kdir.join("link.kpack")).expect("symlink");
        for name in [
            "changed.kpack",
            "longer.kpack",
            "link.kpack",
            "../victim",
            "/etc/passwd",
        ] {
            let err = delete_recorded(&kdir, name, &entry).expect_err(name);
            assert!(matches!(err, DeleteError::Refused { .. }), "{name}: {err}");
        }
        let plain = top.path().join("plain");
        fs::create_dir(&plain).expect("mkdir");
        fs::write(plain.join("a.kpack"), b"archive").expect("write");
        assert!(delete_recorded(&plain, "a.kpack", &entry).is_err());
        assert!(plain.join("a.kpack").exists() && victim.exists());
        assert!(kdir.join("changed.kpack").exists() && kdir.join("link.kpack").exists());
        // The real thing goes; a second call finds it gone.
        fs::write(kdir.join("ok.kpack"), b"archive").expect("write");
        assert!(delete_recorded(&kdir, "ok.kpack", &entry).expect("delete"));
        assert!(!kdir.join("ok.kpack").exists());
        assert!(!delete_recorded(&kdir, "ok.kpack", &entry).expect("gone"));
    }
}
