//! Hashing and counting adapters for streams that are written and read
//! once: packages hash files on the way into a container rather than in a
//! second pass.

use std::io::{self, Read, Write};

use sha2::Digest;

/// Adapts a [`Digest`] to [`Write`] so `io::copy` can feed it.
pub struct DigestWriter<D: Digest>(pub D);

impl<D: Digest> Write for DigestWriter<D> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

pub use rocm_kpack_fs::{HashingReader, HashingWriter};

/// Reads exactly `size` bytes of `inner`: stops there, and a source that
/// ends early is an error (the file changed while it was being packaged).
pub struct ExactReader<R> {
    inner: R,
    size: u64,
    done: u64,
}

impl<R: Read> ExactReader<R> {
    /// The first `size` bytes of `inner`.
    pub fn new(inner: R, size: u64) -> Self {
        ExactReader {
            inner,
            size,
            done: 0,
        }
    }
}

impl<R: Read> Read for ExactReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.size - self.done;
        if left == 0 || buf.is_empty() {
            return Ok(0);
        }
        let n = (&mut self.inner).take(left).read(buf)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "expected {} bytes, read {} (file changed while packaging?)",
                    self.size, self.done
                ),
            ));
        }
        self.done += n as u64;
        Ok(n)
    }
}

/// Which side of [`copy_exact_sides`] failed: the source (a short or
/// corrupt input) or the destination (a full disk names the output).
#[derive(Debug)]
pub enum CopyError {
    /// Reading the source failed or it ended early.
    Read(io::Error),
    /// Writing the destination failed.
    Write(io::Error),
}

/// Copies exactly `size` bytes from `src` to `dst` (see [`ExactReader`]),
/// saying which side failed.
pub fn copy_exact_sides<R: Read + ?Sized, W: Write + ?Sized>(
    src: &mut R,
    dst: &mut W,
    size: u64,
) -> Result<(), CopyError> {
    let mut src = ExactReader::new(src, size);
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(CopyError::Read(e)),
        };
        let chunk = buf.get(..n).ok_or_else(|| {
            CopyError::Read(io::Error::new(
                io::ErrorKind::InvalidData,
                "a reader reported more bytes than its buffer holds",
            ))
        })?;
        dst.write_all(chunk).map_err(CopyError::Write)?;
    }
}

/// Copies exactly `size` bytes from `src` to `dst` (see [`ExactReader`]).
pub fn copy_exact<R: Read + ?Sized, W: Write + ?Sized>(
    src: &mut R,
    dst: &mut W,
    size: u64,
) -> io::Result<()> {
    copy_exact_sides(src, dst, size).map_err(|e| match e {
        CopyError::Read(e) | CopyError::Write(e) => e,
    })
}
