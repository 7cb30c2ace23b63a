//! One exclusive lock per directory (`flock` on a lock file inside it; a
//! second run waits, at most as long as its caller says), and the checks
//! that decide whether a directory may be written at all: no other user
//! may change what is in it. The waiting time and the permission policy
//! are arguments ([`LockOptions`]), chosen by the caller's command line,
//! never process-wide settings.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Whether directories other users may write are refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PermissionPolicy {
    /// Refuse a directory another user could change ([`check_dir_permissions`]).
    #[default]
    Strict,
    /// Accept it (the user said so, e.g. `--unsafe-permissions`).
    Unsafe,
}

impl PermissionPolicy {
    /// [`PermissionPolicy::Unsafe`] when `allow_unsafe`.
    pub fn from_allow_unsafe(allow_unsafe: bool) -> Self {
        if allow_unsafe {
            PermissionPolicy::Unsafe
        } else {
            PermissionPolicy::Strict
        }
    }

    /// Whether directories are checked.
    pub fn is_strict(self) -> bool {
        self == PermissionPolicy::Strict
    }
}

/// How a run takes a directory's lock: how long it waits for another
/// holder, and whether the directory's permissions are checked first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockOptions {
    /// Longest wait for a lock another process holds.
    pub wait: Duration,
    /// Whether a directory other users may write is refused.
    pub permissions: PermissionPolicy,
}

/// What a tool's locked directories look like and how its messages name
/// it: fixed per tool, unlike [`LockOptions`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockNames {
    /// The lock file's name inside the directory.
    pub lock_file: &'static str,
    /// Temporary files of the tool start with this...
    pub temp_prefix: &'static str,
    /// ...and end with this: a killed run's leftovers, removed once the
    /// lock is held.
    pub temp_suffix: &'static str,
    /// The name a locked directory must have (checked on its canonical
    /// path), if any.
    pub dir_name: Option<&'static str>,
    /// The program holding such locks, as messages name it.
    pub program: &'static str,
    /// What to do about a lock held too long.
    pub wait_hint: &'static str,
    /// What to do about a directory refused for its permissions.
    pub permission_hint: &'static str,
}

impl LockNames {
    /// Whether `name` is one of the tool's temporary files.
    pub fn is_temp_name(&self, name: &str) -> bool {
        name.starts_with(self.temp_prefix) && name.ends_with(self.temp_suffix)
    }
}

/// An exclusive lock on one directory, released on drop.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
    dir: PathBuf,
}

/// Mode of the lock file: no other user may open it, so no other user can
/// hold it (`flock` needs an open descriptor).
const LOCK_MODE: u32 = 0o600;

/// How often a waiting run looks at the lock again.
const LOCK_POLL: Duration = Duration::from_millis(100);

impl DirLock {
    /// Takes the lock of `dir`, creating the lock file (mode 0600, owned
    /// by this user, opened `O_NOFOLLOW`). When another process holds it,
    /// calls `on_wait` once with the holder's pid (when `/proc/locks`
    /// tells) and waits at most `options.wait`, then fails with `TimedOut`
    /// naming the holder. A lock held by another user's process is not
    /// trusted: that user could only have opened the file while it was
    /// readable (an older version created it 0644), so the file is
    /// replaced by a fresh 0600 one. Then removes temporary files
    /// ([`LockNames::is_temp_name`]) a crashed run left behind.
    ///
    /// Unless `options.permissions` is [`PermissionPolicy::Unsafe`],
    /// refuses (`PermissionDenied`) a directory that another user may
    /// write ([`check_dir_permissions`]); always refuses a lock file that
    /// is a symlink or not a regular file.
    pub fn acquire(
        dir: &Path,
        names: &LockNames,
        options: LockOptions,
        on_wait: impl FnOnce(&Path, Option<u32>),
    ) -> io::Result<DirLock> {
        if options.permissions.is_strict() {
            check_dir_permissions(dir, names)?;
        }
        let path = dir.join(names.lock_file);
        let deadline = Instant::now() + options.wait;
        let mut on_wait = Some(on_wait);
        loop {
            let file = open_lock(&path)?;
            use rustix::fs::{flock, FlockOperation};
            match flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {
                    // A run that replaced a hostile lock file may have
                    // unlinked this one after it was opened: then start over.
                    if !same_file(&file, &path)? {
                        continue;
                    }
                    remove_stale_temps(dir, names)?;
                    return Ok(DirLock {
                        _file: file,
                        dir: dir.to_path_buf(),
                    });
                }
                Err(e) if e == rustix::io::Errno::WOULDBLOCK => {}
                Err(e) => return Err(e.into()),
            }
            let holders = lock_holders(&file);
            let me = rustix::process::geteuid().as_raw();
            if let Some((h, uid)) = holders
                .iter()
                .find_map(|h| h.uid.filter(|&u| u != me).map(|u| (h, u)))
            {
                tracing::warn!(
                    "{} is held by pid {} of uid {uid}, another user: not trusted; replacing the lock file",
                    path.display(),
                    h.pid,
                );
                if same_file(&file, &path)? {
                    fs::remove_file(&path).or_else(|e| {
                        if e.kind() == io::ErrorKind::NotFound {
                            Ok(())
                        } else {
                            Err(e)
                        }
                    })?;
                }
                continue;
            }
            let pid = holders.first().map(|h| h.pid);
            if let Some(f) = on_wait.take() {
                f(&path, pid);
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{} is held by {} for more than {} s; try again later, or {}",
                        path.display(),
                        pid.map_or_else(
                            || "another process".to_string(),
                            |p| format!("another {} (pid {p})", names.program)
                        ),
                        options.wait.as_secs(),
                        names.wait_hint
                    ),
                ));
            }
            std::thread::sleep(LOCK_POLL);
        }
    }

    /// The locked directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Opens (creating) the lock file: 0600, never through a symlink, never a
/// FIFO or device; an existing file is made this user's and 0600.
fn open_lock(path: &Path) -> io::Result<File> {
    // Said plainly here; O_NOFOLLOW below is what enforces it.
    if fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(denied(format!(
            "{} is a symlink; not following it",
            path.display()
        )));
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(LOCK_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| refuse_symlink(path, e))?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(denied(format!("{} is not a regular file", path.display())));
    }
    let me = rustix::process::geteuid();
    if meta.uid() != me.as_raw() {
        rustix::fs::fchown(&file, Some(me), Some(rustix::process::getegid())).map_err(|e| {
            denied(format!(
                "{} is owned by uid {}, not this user: {e}",
                path.display(),
                meta.uid()
            ))
        })?;
    }
    if meta.mode() & 0o7777 != LOCK_MODE {
        file.set_permissions(fs::Permissions::from_mode(LOCK_MODE))?;
    }
    Ok(file)
}

/// Whether `path` (not followed) is still the file `file` has open.
fn same_file(file: &File, path: &Path) -> io::Result<bool> {
    let open = file.metadata()?;
    Ok(match fs::symlink_metadata(path) {
        Ok(now) => (now.dev(), now.ino()) == (open.dev(), open.ino()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(e),
    })
}

/// A process holding a `flock` on a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Holder {
    pid: u32,
    /// Its effective uid, when `/proc/<pid>` is visible.
    uid: Option<u32>,
}

/// Most bytes of `/proc/locks` read.
const PROC_LOCKS_LIMIT: u64 = 16 << 20;

/// The holders of `flock` locks on `file`, from `/proc/locks` (empty when
/// it cannot be read).
fn lock_holders(file: &File) -> Vec<Holder> {
    let Ok(meta) = file.metadata() else {
        return Vec::new();
    };
    let text = crate::read_limited(Path::new("/proc/locks"), PROC_LOCKS_LIMIT)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .or_else(|_| fs::read_to_string("/proc/locks"))
        .unwrap_or_default();
    parse_lock_holders(
        &text,
        rustix::fs::major(meta.dev()),
        rustix::fs::minor(meta.dev()),
        meta.ino(),
    )
    .into_iter()
    .map(|pid| Holder {
        pid,
        uid: fs::metadata(format!("/proc/{pid}")).ok().map(|m| m.uid()),
    })
    .collect()
}

/// Pids holding (not waiting for) a FLOCK on device `major:minor`, inode
/// `ino`, in the text of `/proc/locks`
/// (`1: FLOCK  ADVISORY  WRITE 4242 fd:01:123 0 EOF`).
fn parse_lock_holders(text: &str, major: u32, minor: u32, ino: u64) -> Vec<u32> {
    let mut out = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // Waiters are shown as `1: -> FLOCK ...`.
        let [_, kind, _, _, pid, id, ..] = fields.as_slice() else {
            continue;
        };
        if *kind != "FLOCK" {
            continue;
        }
        let mut parts = id.split(':');
        let (Some(ma), Some(mi), Some(i)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let matches = u32::from_str_radix(ma, 16).ok() == Some(major)
            && u32::from_str_radix(mi, 16).ok() == Some(minor)
            && i.parse::<u64>().ok() == Some(ino);
        if let (true, Ok(pid)) = (matches, pid.parse::<u32>()) {
            if !out.contains(&pid) {
                out.push(pid);
            }
        }
    }
    out
}

/// A `PermissionDenied` error saying `msg`.
pub fn denied(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, msg)
}

/// `ELOOP` from an `O_NOFOLLOW` open said as what it means.
fn refuse_symlink(path: &Path, e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        denied(format!("{} is a symlink; not following it", path.display()))
    } else {
        e
    }
}

/// Whether another user could change what is in `dir`, as sudo and ssh
/// judge their files: `dir` must be a real directory (named
/// [`LockNames::dir_name`] when that is set); it and its parent must be
/// owned by root or by this user and writable by no one else (group root
/// excepted); every directory above must be owned by root or this user
/// and, when others may write it, sticky (as `/tmp`). Checked on the
/// canonical path, which is where writes land.
pub fn check_dir_permissions(dir: &Path, names: &LockNames) -> io::Result<()> {
    let meta = fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(denied(format!(
            "{} is not a directory (a symlink?)",
            dir.display()
        )));
    }
    let real = fs::canonicalize(dir)?;
    if let Some(want) = names.dir_name {
        if real.file_name().is_none_or(|n| n != want) {
            return Err(denied(format!(
                "{} is not a {want} directory",
                real.display()
            )));
        }
    }
    let me = rustix::process::geteuid().as_raw();
    let hint = names.permission_hint;
    for (depth, ancestor) in real.ancestors().enumerate() {
        let m = fs::symlink_metadata(ancestor)?;
        let who = m.uid();
        if who != 0 && who != me {
            return Err(denied(format!(
                "refusing {}: {} is owned by uid {who}, not root or this user; {hint}",
                dir.display(),
                ancestor.display()
            )));
        }
        let group_write = m.mode() & 0o020 != 0 && m.gid() != 0;
        let other_write = m.mode() & 0o002 != 0;
        let sticky = m.mode() & 0o1000 != 0;
        let near = depth < 2;
        if (group_write || other_write) && (near || !sticky) {
            return Err(denied(format!(
                "refusing {}: other users may write {} (mode {:o}); {hint}",
                dir.display(),
                ancestor.display(),
                m.mode() & 0o7777
            )));
        }
    }
    Ok(())
}

/// Removes the tool's temporary files in `dir` (only safe under the lock).
fn remove_stale_temps(dir: &Path, names: &LockNames) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry
            .file_name()
            .to_str()
            .is_some_and(|n| names.is_temp_name(n))
        {
            tracing::info!("removing leftover {}", entry.path().display());
            match fs::remove_file(entry.path()) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAMES: LockNames = LockNames {
        lock_file: ".t.lock",
        temp_prefix: ".t.",
        temp_suffix: ".tmp",
        dir_name: Some(".kpack"),
        program: "t",
        wait_hint: "pass --wait",
        permission_hint: "fix its permissions or pass --unsafe-permissions",
    };

    fn options(wait: Duration) -> LockOptions {
        LockOptions {
            wait,
            permissions: PermissionPolicy::Strict,
        }
    }

    #[test]
    fn lock_cleans_stale_temps_and_a_second_waits_only_as_asked() {
        let top = tempfile::tempdir().expect("tempdir");
        let dir = top.path().join(".kpack");
        fs::create_dir(&dir).expect("mkdir");
        let stale = dir.join(".t.123.0.tmp");
        fs::write(&stale, b"junk").expect("write");
        let lock = DirLock::acquire(&dir, &NAMES, options(Duration::ZERO), |_, _| {
            panic!("nobody else holds it")
        })
        .expect("lock");
        let mode = fs::metadata(dir.join(NAMES.lock_file))
            .expect("stat")
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600, "no other user may open (and so hold) the lock");
        assert!(!stale.exists());
        assert_eq!(lock.dir(), dir);
        // The wait is the caller's: a zero wait fails at once, naming it.
        let mut waited = false;
        let started = Instant::now();
        let err = DirLock::acquire(&dir, &NAMES, options(Duration::ZERO), |_, _| waited = true)
            .expect_err("held");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        assert!(err.to_string().contains("pass --wait"), "{err}");
        assert!(waited && started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn lock_holders_from_proc_locks() {
        let text = "1: FLOCK  ADVISORY  WRITE 4242 fd:01:123 0 EOF\n\
                    1: -> FLOCK  ADVISORY  WRITE 4343 fd:01:123 0 EOF\n\
                    2: POSIX  ADVISORY  WRITE 4444 fd:01:123 0 EOF\n\
                    3: FLOCK  ADVISORY  WRITE 4545 fd:01:124 0 EOF\n";
        assert_eq!(parse_lock_holders(text, 0xfd, 1, 123), vec![4242]);
        assert!(parse_lock_holders(text, 0xfd, 2, 123).is_empty());
    }

    #[test]
    fn permissions_of_directories() {
        let top = tempfile::tempdir().expect("tempdir");
        let prefix = top.path().join("prefix");
        let kdir = prefix.join(".kpack");
        fs::create_dir_all(&kdir).expect("mkdir");
        fs::set_permissions(&prefix, fs::Permissions::from_mode(0o755)).expect("chmod");
        fs::set_permissions(&kdir, fs::Permissions::from_mode(0o755)).expect("chmod");
        check_dir_permissions(&kdir, &NAMES).expect("safe");
        for (dir, mode) in [(&kdir, 0o777), (&kdir, 0o1777), (&prefix, 0o757)] {
            fs::set_permissions(dir, fs::Permissions::from_mode(mode)).expect("chmod");
            let err = check_dir_permissions(&kdir, &NAMES).expect_err("writable by others");
            assert!(err.to_string().contains("--unsafe-permissions"), "{err}");
            // The policy is the caller's: Unsafe takes the lock all the same.
            let unsafe_options = LockOptions {
                wait: Duration::ZERO,
                permissions: PermissionPolicy::Unsafe,
            };
            drop(DirLock::acquire(&kdir, &NAMES, unsafe_options, |_, _| {}).expect("unsafe"));
            fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        let not_kpack = top.path().join("other");
        fs::create_dir(&not_kpack).expect("mkdir");
        assert!(check_dir_permissions(&not_kpack, &NAMES).is_err());
        let link = prefix.join("lib");
        fs::create_dir(&link).expect("mkdir");
        std::os::unix::fs::symlink(&kdir, link.join(".kpack")).expect("symlink");
        assert!(
            check_dir_permissions(&link.join(".kpack"), &NAMES).is_err(),
            "a symlinked directory is refused"
        );
    }
}
