//! Hashing and counting adapters for streams that are written and read
//! once: packages hash files on the way into a container rather than in a
//! second pass.

use std::io::{self, Read, Write};

use md5::Md5;
use sha2::{Digest, Sha256};

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

/// sha256, optional md5 and a byte count of one stream.
struct Hashes {
    sha256: Sha256,
    md5: Option<Md5>,
    count: u64,
}

impl Hashes {
    fn new(md5: bool) -> Self {
        Hashes {
            sha256: Sha256::new(),
            md5: md5.then(Md5::new),
            count: 0,
        }
    }
    fn update(&mut self, data: &[u8]) {
        self.sha256.update(data);
        if let Some(m) = self.md5.as_mut() {
            m.update(data);
        }
        self.count += data.len() as u64;
    }
    /// sha256, md5 (zeros when not requested), count.
    fn finish(self) -> ([u8; 32], [u8; 16], u64) {
        let sha: [u8; 32] = self.sha256.finalize().into();
        let md5: [u8; 16] = self.md5.map(|m| m.finalize().into()).unwrap_or([0; 16]);
        (sha, md5, self.count)
    }
}

/// Counts and hashes everything written through it (sha256 + md5).
pub struct HashingWriter<W: Write> {
    inner: W,
    hashes: Hashes,
}

impl<W: Write> HashingWriter<W> {
    /// Hashes with sha256, and md5 too when `md5`.
    pub fn new(inner: W, md5: bool) -> Self {
        HashingWriter {
            inner,
            hashes: Hashes::new(md5),
        }
    }
    /// Bytes written so far.
    pub fn count(&self) -> u64 {
        self.hashes.count
    }
    /// The inner writer plus sha256, md5 (zeros when not requested) and count.
    pub fn finish(self) -> (W, [u8; 32], [u8; 16], u64) {
        let (sha, md5, count) = self.hashes.finish();
        (self.inner, sha, md5, count)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hashes.update(buf.get(..n).unwrap_or_default());
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Counts and hashes everything read through it.
pub struct HashingReader<R: Read> {
    inner: R,
    hashes: Hashes,
}

impl<R: Read> HashingReader<R> {
    /// Hashes with sha256, and md5 too when `md5`.
    pub fn new(inner: R, md5: bool) -> Self {
        HashingReader {
            inner,
            hashes: Hashes::new(md5),
        }
    }
    /// sha256, md5 (zeros when not requested), bytes read.
    pub fn finish(self) -> ([u8; 32], [u8; 16], u64) {
        self.hashes.finish()
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hashes.update(buf.get(..n).unwrap_or_default());
        Ok(n)
    }
}

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
        let want = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
        if want == 0 {
            return Ok(0);
        }
        let n = self.inner.read(buf.get_mut(..want).unwrap_or_default())?;
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

/// Copies exactly `size` bytes from `src` to `dst` (see [`ExactReader`]).
pub fn copy_exact<R: Read + ?Sized, W: Write + ?Sized>(
    src: &mut R,
    dst: &mut W,
    size: u64,
) -> io::Result<()> {
    io::copy(&mut ExactReader::new(src, size), dst).map(drop)
}
