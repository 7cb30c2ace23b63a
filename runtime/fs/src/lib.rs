//! File plumbing every crate shares: I/O errors that name their file,
//! hashing a file in blocks, and atomic writes (temp file beside the
//! destination, fsync, rename, fsync of the directory), so that no reader
//! ever sees a partial archive, manifest, package or state file, and a
//! crash leaves either the old file or the new one.
//!
//! Files another user may have planted or changed (state, manifests,
//! sources files, archives) are opened through [`open_regular`] /
//! [`read_limited`]: never through a symlink, never blocking on a FIFO or
//! device, and never read past a size limit chosen by the caller (the
//! limits are listed in `docs/formats.md`, "Input size limits", and kept
//! beside each format in `rocm-kpack-format`).

#[cfg(feature = "write")]
use std::fs::Permissions;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use sha2::Digest;
#[cfg(feature = "write")]
use tempfile::NamedTempFile;

#[cfg(all(unix, feature = "lock"))]
pub mod lock;

#[cfg(feature = "fast-sha256")]
mod fast_sha256;
/// SHA-256 as every hashing helper here computes it. With the
/// `fast-sha256` feature (the fetcher, which hashes every byte it installs)
/// it is ring's assembly, about 1.4 to 2 times the throughput of `sha2`'s
/// portable code on CPUs without SHA extensions (docs/packaging.md,
/// "Benchmark: install CPU"); the digests are the same.
#[cfg(feature = "fast-sha256")]
pub use fast_sha256::Sha256;
/// SHA-256 as every hashing helper here computes it (`sha2`'s; the
/// `fast-sha256` feature swaps in a faster implementation).
#[cfg(not(feature = "fast-sha256"))]
pub use sha2::Sha256;

/// Block size for hashing.
const BLOCK: usize = 1 << 20;

/// An I/O error with what was being done and to which file.
#[derive(Debug, thiserror::Error)]
#[error("{action} {}: {source}", path.display())]
pub struct PathError {
    /// What was being done ("cannot write", "cannot rename into", ...).
    pub action: &'static str,
    /// The file or directory.
    pub path: PathBuf,
    /// The cause.
    #[source]
    pub source: io::Error,
}

impl PathError {
    /// Wraps `source` with its action and path.
    pub fn new(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        PathError {
            action,
            path: path.into(),
            source,
        }
    }
}

/// `path` made absolute through its deepest existing ancestor
/// (canonicalized), with the missing components appended: where an output
/// that may not exist yet would be, to compare with an input before
/// anything is created.
pub fn resolve_existing(path: &Path) -> io::Result<PathBuf> {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    let mut base = abs.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(c) = fs::canonicalize(base) {
            let mut out = c;
            for r in rest.iter().rev() {
                out.push(r);
            }
            return Ok(out);
        }
        match (base.parent(), base.file_name()) {
            (Some(p), Some(n)) => {
                rest.push(n.to_os_string());
                base = p;
            }
            _ => return Ok(abs),
        }
    }
}

/// The [`PathError`] of a failed copy of `from` to `to`: running out of
/// space (or quota, or the file-size limit) is the destination's, so it
/// names `to`; any other failure names `from`.
pub fn copy_error(from: &Path, to: &Path, source: io::Error) -> PathError {
    match source.kind() {
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded | io::ErrorKind::FileTooLarge => {
            PathError::new("cannot write", to, source)
        }
        _ => PathError::new("cannot copy", from, source),
    }
}

impl From<PathError> for io::Error {
    fn from(e: PathError) -> io::Error {
        io::Error::new(e.source.kind(), e)
    }
}

/// The `n` bytes of `buf` a `read` or `write` reported handling. A count
/// past the buffer breaks the `Read`/`Write` contract; it is an error here,
/// not a shorter slice that would hash or count the wrong bytes.
fn handled(buf: &[u8], n: usize) -> io::Result<&[u8]> {
    buf.get(..n).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "a reader or writer reported {n} bytes for a {}-byte buffer",
                buf.len()
            ),
        )
    })
}

/// Feeds `reader` to `consume` block by block; returns the byte count.
pub fn for_each_block(mut reader: impl Read, mut consume: impl FnMut(&[u8])) -> io::Result<u64> {
    let mut block = vec![0u8; BLOCK];
    let mut len = 0u64;
    loop {
        let n = match reader.read(&mut block) {
            Ok(0) => return Ok(len),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        consume(handled(&block, n)?);
        len += n as u64;
    }
}

/// Size and SHA-256 of everything `reader` yields.
pub fn sha256_reader(reader: impl Read) -> io::Result<(u64, [u8; 32])> {
    let mut hashing = HashingReader::new(reader);
    for_each_block(&mut hashing, |_| {})?;
    let (sha, len) = hashing.finish();
    Ok((len, sha))
}

/// Counts and SHA-256-hashes everything written through it, so that a
/// file is hashed on its way to disk rather than in a second pass.
#[derive(Debug)]
pub struct HashingWriter<W> {
    inner: W,
    sha256: Sha256,
    count: u64,
}

impl<W: Write> HashingWriter<W> {
    /// Hashes what is written to `inner`.
    pub fn new(inner: W) -> Self {
        HashingWriter {
            inner,
            sha256: Sha256::new(),
            count: 0,
        }
    }
    /// Bytes written so far.
    pub fn count(&self) -> u64 {
        self.count
    }
    /// The inner writer.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.inner
    }
    /// The inner writer, the SHA-256 and the byte count.
    pub fn finish(self) -> (W, [u8; 32], u64) {
        (self.inner, self.sha256.finalize().into(), self.count)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.sha256.update(handled(buf, n)?);
        self.count += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Counts and hashes everything read through it: SHA-256 by default, any
/// other digest (a deb's md5sums) through [`HashingReader::with_digest`].
#[derive(Debug)]
pub struct HashingReader<R, D = Sha256> {
    inner: R,
    digest: D,
    count: u64,
}

impl<R: Read> HashingReader<R> {
    /// SHA-256-hashes what is read from `inner`.
    pub fn new(inner: R) -> Self {
        HashingReader::with_digest(inner, Sha256::new())
    }
    /// The SHA-256 and the byte count of what was read.
    pub fn finish(self) -> ([u8; 32], u64) {
        (self.digest.finalize().into(), self.count)
    }
}

impl<R: Read, D: Digest> HashingReader<R, D> {
    /// Hashes what is read from `inner` with `digest`.
    pub fn with_digest(inner: R, digest: D) -> Self {
        HashingReader {
            inner,
            digest,
            count: 0,
        }
    }
    /// The digest and the byte count of what was read.
    pub fn finish_digest(self) -> (sha2::digest::Output<D>, u64) {
        (self.digest.finalize(), self.count)
    }
}

impl<R: Read, D: Digest> Read for HashingReader<R, D> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.digest.update(handled(buf, n)?);
        self.count += n as u64;
        Ok(n)
    }
}

/// Size and SHA-256 of a file.
pub fn sha256_file(path: &Path) -> Result<(u64, [u8; 32]), PathError> {
    let file = File::open(path).map_err(|e| PathError::new("cannot open", path, e))?;
    sha256_reader(file).map_err(|e| PathError::new("cannot read", path, e))
}

/// Size and SHA-256 of a file another user may have planted or changed:
/// only a regular file, never through a symlink and never blocking on a
/// FIFO ([`open_regular`]). [`sha256_file`] is for files this process
/// made.
pub fn sha256_regular(path: &Path) -> Result<(u64, [u8; 32]), PathError> {
    let file = open_regular(path)?;
    sha256_reader(file).map_err(|e| PathError::new("cannot read", path, e))
}

/// Opens `path` for reading without following a symlink in its last
/// component and without blocking (a FIFO or a device never stalls the
/// caller), and checks with `fstat` that it is a regular file. The file is
/// switched back to blocking reads before it is returned.
pub fn open_regular(path: &Path) -> Result<File, PathError> {
    open_checked(path, true)
}

/// [`open_regular`] that follows symlinks: for directories an
/// administrator configured (a local store), where a link to a file
/// elsewhere is ordinary. What the link leads to must still be a regular
/// file, opened without blocking.
pub fn open_regular_following(path: &Path) -> Result<File, PathError> {
    open_checked(path, false)
}

fn open_checked(path: &Path, no_follow: bool) -> Result<File, PathError> {
    let refuse = |detail: String| {
        PathError::new(
            "refusing",
            path,
            io::Error::new(io::ErrorKind::InvalidInput, detail),
        )
    };
    let mut options = fs::OpenOptions::new();
    options.read(true);
    // Windows has no O_NOFOLLOW: there a symlink is opened as what it
    // leads to. What is built for Windows is the C library and the crates
    // under it, which read archives from the install tree.
    #[cfg(not(unix))]
    let _ = no_follow;
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let follow = if no_follow { libc::O_NOFOLLOW } else { 0 };
        options.custom_flags(follow | libc::O_NONBLOCK | libc::O_CLOEXEC);
    }
    let file = options.open(path).map_err(|e| {
        #[cfg(unix)]
        if no_follow && e.raw_os_error() == Some(libc::ELOOP) {
            return refuse("it is a symlink; not following it".into());
        }
        PathError::new("cannot open", path, e)
    })?;
    let meta = file
        .metadata()
        .map_err(|e| PathError::new("cannot stat", path, e))?;
    if !meta.is_file() {
        return Err(refuse(format!(
            "it is not a regular file (a {})",
            kind_of(&meta)
        )));
    }
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        let fd = file.as_raw_fd();
        // SAFETY: plain fcntl calls on a descriptor this function owns.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above.
        if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
            return Err(PathError::new(
                "cannot read",
                path,
                io::Error::last_os_error(),
            ));
        }
    }
    Ok(file)
}

/// What a non-regular file is, in words.
fn kind_of(meta: &fs::Metadata) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        if t.is_fifo() {
            return "FIFO";
        }
        if t.is_char_device() || t.is_block_device() {
            return "device";
        }
        if t.is_socket() {
            return "socket";
        }
    }
    if meta.is_dir() {
        "directory"
    } else {
        "special file"
    }
}

/// Reads the whole of `path`, a regular file ([`open_regular`]) of at most
/// `limit` bytes: a larger file is refused before anything is read, and a
/// file that grows while being read is refused at `limit + 1` bytes, so
/// memory is bounded by `limit`, never by what the file claims.
pub fn read_limited(path: &Path, limit: u64) -> Result<Vec<u8>, PathError> {
    read_limited_open(open_regular(path)?, path, limit)
}

/// [`read_limited`] through [`open_regular_following`]: for a file in a
/// directory an administrator configured (a local store's `index.json`).
pub fn read_limited_following(path: &Path, limit: u64) -> Result<Vec<u8>, PathError> {
    read_limited_open(open_regular_following(path)?, path, limit)
}

fn read_limited_open(file: File, path: &Path, limit: u64) -> Result<Vec<u8>, PathError> {
    let size = file
        .metadata()
        .map_err(|e| PathError::new("cannot stat", path, e))?
        .len();
    let too_big = |n: u64| {
        PathError::new(
            "refusing",
            path,
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("it is {n} bytes, over the {limit}-byte limit for this kind of file"),
            ),
        )
    };
    if size > limit {
        return Err(too_big(size));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| PathError::new("cannot read", path, e))?;
    if bytes.len() as u64 > limit {
        return Err(too_big(bytes.len() as u64));
    }
    Ok(bytes)
}

/// fsync a directory, making a rename in it durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(windows)]
    {
        // A directory cannot be opened as a file (nor flushed) on Windows;
        // NTFS journals the rename itself.
        let _ = dir;
        Ok(())
    }
    #[cfg(not(windows))]
    {
        File::open(dir)?.sync_all()
    }
}

/// The directory a file is in (`.` for a bare name).
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

#[cfg(feature = "write")]
/// A file written under a temporary name beside its destination and made
/// visible by [`PendingFile::commit`]. Dropping it uncommitted removes the
/// temporary file.
#[derive(Debug)]
pub struct PendingFile {
    temp: NamedTempFile,
    dest: PathBuf,
}

#[cfg(feature = "write")]
impl PendingFile {
    /// An empty temporary file in `dest`'s directory, named `.<random>.tmp`.
    pub fn create(dest: &Path) -> Result<Self, PathError> {
        Self::create_named(dest, DEFAULT_TEMP_PREFIX, DEFAULT_TEMP_SUFFIX)
    }

    /// Like [`PendingFile::create`] with the temporary name
    /// `<prefix><random><suffix>`, so that a tool can recognise (and clean
    /// up) what a killed run of it left behind.
    pub fn create_named(dest: &Path, prefix: &str, suffix: &str) -> Result<Self, PathError> {
        let dir = parent_dir(dest);
        let temp = tempfile::Builder::new()
            .prefix(prefix)
            .suffix(suffix)
            .tempfile_in(dir)
            .map_err(|e| PathError::new("cannot create a file in", dir, e))?;
        Ok(PendingFile {
            temp,
            dest: dest.to_path_buf(),
        })
    }

    /// A temporary file holding `bytes`, with `permissions` if given.
    pub fn write(
        dest: &Path,
        bytes: &[u8],
        permissions: Option<Permissions>,
    ) -> Result<Self, PathError> {
        Self::write_named(dest, bytes, permissions, TempName::default())
    }

    /// [`PendingFile::write`] under the temporary name `temp`.
    pub fn write_named(
        dest: &Path,
        bytes: &[u8],
        permissions: Option<Permissions>,
        temp: TempName,
    ) -> Result<Self, PathError> {
        let mut pending = Self::create_named(dest, temp.prefix, temp.suffix)?;
        pending
            .temp
            .write_all(bytes)
            .and_then(|()| pending.temp.flush())
            .map_err(|e| PathError::new("cannot write", pending.temp.path(), e))?;
        if let Some(p) = permissions {
            pending.set_permissions(p)?;
        }
        Ok(pending)
    }

    /// The open temporary file.
    pub fn file_mut(&mut self) -> &mut File {
        self.temp.as_file_mut()
    }

    /// The temporary file's path.
    pub fn temp_path(&self) -> &Path {
        self.temp.path()
    }

    /// The destination.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// Changes the destination, for a file named by its content (known
    /// once it is written). `dest` must be in the directory the file was
    /// created for: a rename is atomic only within one file system.
    pub fn set_dest(&mut self, dest: PathBuf) {
        self.dest = dest;
    }

    /// Sets the permissions the file will have at its destination.
    pub fn set_permissions(&self, permissions: Permissions) -> Result<(), PathError> {
        fs::set_permissions(self.temp.path(), permissions)
            .map_err(|e| PathError::new("cannot set permissions of", &self.dest, e))
    }

    /// Flushes the file to disk, renames it to its destination (atomic on
    /// one file system) and makes the rename durable.
    pub fn commit(self) -> Result<PathBuf, PathError> {
        self.commit_as("cannot rename into")
    }

    /// [`PendingFile::commit`], saying `action` ("cannot store", ...) when
    /// the rename fails.
    pub fn commit_as(self, action: &'static str) -> Result<PathBuf, PathError> {
        let dest = self.dest;
        self.temp
            .as_file()
            .sync_all()
            .map_err(|e| PathError::new("cannot write", self.temp.path(), e))?;
        self.temp
            .persist(&dest)
            .map_err(|e| PathError::new(action, &dest, e.error))?;
        let dir = parent_dir(&dest);
        sync_dir(dir).map_err(|e| PathError::new("cannot sync directory", dir, e))?;
        Ok(dest)
    }
}

#[cfg(feature = "write")]
impl Write for PendingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.temp.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.temp.flush()
    }
}

#[cfg(feature = "write")]
impl io::Seek for PendingFile {
    fn seek(&mut self, pos: io::SeekFrom) -> io::Result<u64> {
        self.temp.seek(pos)
    }
}

#[cfg(feature = "write")]
/// Writes `bytes` to `dest` atomically, with `permissions` if given.
pub fn write_atomically(
    dest: &Path,
    bytes: &[u8],
    permissions: Option<Permissions>,
) -> Result<(), PathError> {
    write_atomically_named(dest, bytes, permissions, TempName::default())
}

#[cfg(feature = "write")]
/// [`write_atomically`] under the temporary name `temp`, so that a tool
/// recognises (and removes) what a killed run of it left behind.
pub fn write_atomically_named(
    dest: &Path,
    bytes: &[u8],
    permissions: Option<Permissions>,
    temp: TempName,
) -> Result<(), PathError> {
    PendingFile::write_named(dest, bytes, permissions, temp)?
        .commit()
        .map(drop)
}

const DEFAULT_TEMP_PREFIX: &str = ".";
const DEFAULT_TEMP_SUFFIX: &str = ".tmp";

/// How a temporary file is named: `<prefix><random><suffix>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TempName {
    /// Start of the name.
    pub prefix: &'static str,
    /// End of the name.
    pub suffix: &'static str,
}

impl Default for TempName {
    fn default() -> Self {
        TempName {
            prefix: DEFAULT_TEMP_PREFIX,
            suffix: DEFAULT_TEMP_SUFFIX,
        }
    }
}

/// Renames the complete file `from` to `to` durably: `from` reaches the
/// disk before it is visible under its final name, and the rename is made
/// durable by an fsync of `to`'s directory. For a file written elsewhere
/// (a download, a staged archive) on the same file system; a file written
/// for `to` from the start is a [`PendingFile`].
pub fn rename_durably(from: &Path, to: &Path) -> Result<(), PathError> {
    File::open(from)
        .and_then(|f| f.sync_all())
        .map_err(|e| PathError::new("cannot sync", from, e))?;
    fs::rename(from, to).map_err(|e| PathError::new("cannot rename into", to, e))?;
    let dir = parent_dir(to);
    sync_dir(dir).map_err(|e| PathError::new("cannot sync directory", dir, e))
}

/// Flushes every regular file and directory below `dir` (and `dir`) to
/// disk, not following symlinks: a staged output tree is made durable
/// before it is renamed into place, so a crash leaves the old output or
/// the complete new one.
pub fn sync_tree(dir: &Path) -> Result<(), PathError> {
    let meta = fs::symlink_metadata(dir).map_err(|e| PathError::new("cannot stat", dir, e))?;
    if meta.is_file() {
        return File::open(dir)
            .and_then(|f| f.sync_all())
            .map_err(|e| PathError::new("cannot sync", dir, e));
    }
    if !meta.is_dir() {
        return Ok(());
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = fs::read_dir(&d).map_err(|e| PathError::new("cannot list", &d, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| PathError::new("cannot list", &d, e))?;
            let kind = entry
                .file_type()
                .map_err(|e| PathError::new("cannot stat", entry.path(), e))?;
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() {
                let path = entry.path();
                File::open(&path)
                    .and_then(|f| f.sync_all())
                    .map_err(|e| PathError::new("cannot sync", &path, e))?;
            }
        }
        sync_dir(&d).map_err(|e| PathError::new("cannot sync directory", &d, e))?;
    }
    Ok(())
}

/// The one overwrite rule of every command that writes outputs: an output
/// entry that already exists is replaced only when the caller says so
/// (`--force` on the command lines); otherwise this refuses, before
/// anything is written.
pub fn check_replaceable(dest: &Path, replace: bool) -> Result<(), PathError> {
    if !replace && fs::symlink_metadata(dest).is_ok() {
        return Err(PathError::new(
            "refusing to replace",
            dest,
            io::Error::new(
                io::ErrorKind::AlreadyExists,
                "it already exists (--force replaces it)",
            ),
        ));
    }
    Ok(())
}

#[cfg(feature = "write")]
/// Moves a staged file or directory to `dest` under [`check_replaceable`].
/// A replaced directory is first renamed aside in `dest`'s directory and
/// removed after the new one is in place, so `dest` is never missing and
/// never half old, half new.
pub fn move_into_place(staged: &Path, dest: &Path, replace: bool) -> Result<(), PathError> {
    check_replaceable(dest, replace)?;
    let dir = parent_dir(dest);
    let old = match fs::symlink_metadata(dest) {
        Ok(meta) if meta.is_dir() => {
            let aside = tempfile::Builder::new()
                .prefix(".rocm-kpack-replaced-")
                .tempdir_in(dir)
                .map_err(|e| PathError::new("cannot create a directory in", dir, e))?;
            let target = aside.path().join("old");
            fs::rename(dest, &target).map_err(|e| PathError::new("cannot move aside", dest, e))?;
            Some(aside)
        }
        _ => None,
    };
    fs::rename(staged, dest).map_err(|e| PathError::new("cannot rename into", dest, e))?;
    sync_dir(dir).map_err(|e| PathError::new("cannot sync directory", dir, e))?;
    if let Some(aside) = old {
        aside
            .close()
            .map_err(|e| PathError::new("cannot remove the replaced copy of", dest, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// A reader and writer that claims, once, more bytes than the buffer it
    /// was given (then reads as empty).
    struct Overclaims(bool);
    impl std::io::Read for Overclaims {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let claimed = std::mem::replace(&mut self.0, true);
            Ok(if claimed { 0 } else { buf.len() + 1 })
        }
    }
    impl std::io::Write for Overclaims {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            Ok(buf.len() + 1)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_count_past_the_buffer_is_an_error_not_an_empty_slice() {
        let err = super::sha256_reader(Overclaims(false)).expect_err("overclaiming reader");
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
        assert!(err.to_string().contains("bytes for a"), "{err}");
        let mut w = super::HashingWriter::new(Overclaims(false));
        assert!(std::io::Write::write(&mut w, b"abc").is_err());
    }

    use super::*;

    #[test]
    #[cfg(feature = "write")]
    fn outputs_are_replaced_only_when_asked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let staged = dir.path().join("staged");
        let dest = dir.path().join("out");
        fs::create_dir_all(staged.join("new")).expect("mkdir");
        fs::create_dir_all(dest.join("old")).expect("mkdir");
        let err = move_into_place(&staged, &dest, false).expect_err("exists");
        assert!(err.to_string().contains("--force"), "{err}");
        assert!(dest.join("old").is_dir() && staged.is_dir());
        move_into_place(&staged, &dest, true).expect("replace");
        assert!(dest.join("new").is_dir() && !dest.join("old").exists() && !staged.exists());
        // Only `out` is left: the aside copy is gone.
        assert_eq!(fs::read_dir(dir.path()).expect("ls").count(), 1);
        check_replaceable(&dir.path().join("absent"), false).expect("free");
    }

    #[test]
    #[cfg(feature = "write")]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        write_atomically(&path, b"one", None).expect("write");
        write_atomically(&path, b"two", None).expect("write");
        assert_eq!(fs::read(&path).expect("read"), b"two");
        assert_eq!(fs::read_dir(dir.path()).expect("ls").count(), 1);
    }

    #[test]
    #[cfg(feature = "write")]
    fn uncommitted_file_disappears() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pending =
            PendingFile::create_named(&dir.path().join("f"), ".x.", ".tmp").expect("create");
        let name = pending
            .temp_path()
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        assert!(name.starts_with(".x.") && name.ends_with(".tmp"), "{name}");
        drop(pending);
        assert_eq!(fs::read_dir(dir.path()).expect("ls").count(), 0);
    }

    #[test]
    fn hashes_match_one_shot() {
        let data = vec![7u8; BLOCK * 2 + 5];
        let (len, sha) = sha256_reader(&data[..]).expect("hash");
        assert_eq!(len, data.len() as u64);
        let want = <[u8; 32]>::from(Sha256::digest(&data));
        assert_eq!(sha, want);
        let mut w = HashingWriter::new(Vec::new());
        io::copy(&mut &data[..], &mut w).expect("copy");
        let (copy, wsha, wlen) = w.finish();
        assert_eq!((copy.as_slice(), wsha, wlen), (&data[..], want, len));
        let mut r = HashingReader::new(&data[..]);
        io::copy(&mut r, &mut io::sink()).expect("copy");
        assert_eq!(r.finish(), (want, len));
    }

    #[test]
    fn durable_rename_moves_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (from, to) = (dir.path().join("a"), dir.path().join("b"));
        fs::write(&from, b"x").expect("write");
        rename_durably(&from, &to).expect("rename");
        assert!(!from.exists() && fs::read(&to).expect("read") == b"x");
        let err = rename_durably(&from, &to).expect_err("gone");
        assert!(err.to_string().contains("/a"), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn only_regular_files_of_bounded_size_are_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ok = dir.path().join("ok");
        fs::write(&ok, b"12345").expect("write");
        assert_eq!(read_limited(&ok, 5).expect("read"), b"12345");
        let err = read_limited(&ok, 4).expect_err("too big");
        assert!(err.to_string().contains("over the 4-byte limit"), "{err}");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().expect("utf8")).expect("cstr");
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = read_limited(&fifo, 5).expect_err("fifo");
        assert!(err.to_string().contains("FIFO"), "{err}");
        let err = read_limited(Path::new("/dev/zero"), 5).expect_err("device");
        assert!(err.to_string().contains("device"), "{err}");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&ok, &link).expect("symlink");
        let err = read_limited(&link, 5).expect_err("symlink");
        assert!(err.to_string().contains("symlink"), "{err}");
        // In a directory an administrator configured, links are followed,
        // to regular files only: one to a FIFO or a device is refused
        // without blocking.
        let mut text = String::new();
        open_regular_following(&link)
            .expect("open")
            .read_to_string(&mut text)
            .expect("read");
        assert_eq!(text, "12345");
        let to_fifo = dir.path().join("to-fifo");
        std::os::unix::fs::symlink(&fifo, &to_fifo).expect("symlink");
        for path in [&fifo, &to_fifo] {
            let err = open_regular_following(path).expect_err("fifo");
            assert!(err.to_string().contains("FIFO"), "{err}");
        }
        let to_zero = dir.path().join("to-zero");
        std::os::unix::fs::symlink("/dev/zero", &to_zero).expect("symlink");
        let err = open_regular_following(&to_zero).expect_err("device");
        assert!(err.to_string().contains("device"), "{err}");
        // A sparse file claiming 3 GiB is refused by its size, unread.
        let sparse = dir.path().join("sparse");
        File::create(&sparse)
            .and_then(|f| f.set_len(3 << 30))
            .expect("sparse");
        let err = read_limited(&sparse, 16 << 20).expect_err("sparse");
        assert!(err.to_string().contains("limit"), "{err}");
    }

    #[test]
    fn errors_name_the_file() {
        let err = sha256_file(Path::new("/nonexistent/x")).expect_err("missing");
        assert!(err.to_string().contains("/nonexistent/x"), "{err}");
    }
}
