//! `cpio` newc, the rpm payload: our own writer and reader.
//!
//! Kept our own after measuring the `cpio` crate, which writes the same
//! bytes (docs/packaging.md, "Why the cpio writer is our own"; checked by
//! tests/cpio_crate.rs): this writer copies exactly each entry's size (a
//! source that ends early is an error; the crate pads nothing and reports
//! nothing) and returns the archive's length, which the rpm signature
//! records. Inode numbers, owners and the one mtime are the caller's, and
//! each entry's data is streamed from (or to) a reader of its own so that
//! the payload is compressed and hashed on the way. The reader accepts the
//! `070702` (crc) magic as well.

use std::io::{self, Read, Write};

use crate::digest::copy_exact;

/// `cpio` newc writer (the rpm payload): inode = entry index, nlink 1,
/// owners 0, one mtime.
pub struct CpioWriter<W: Write> {
    out: W,
    mtime: u64,
    written: u64,
}

impl<W: Write> CpioWriter<W> {
    /// A cpio stream on `out`.
    pub fn new(out: W, mtime: u64) -> Self {
        CpioWriter {
            out,
            mtime,
            written: 0,
        }
    }

    fn pad4(&mut self) -> io::Result<()> {
        let rem = (self.written % 4) as usize;
        if rem != 0 {
            self.out.write_all(&[0u8; 4][..4 - rem])?;
            self.written += (4 - rem) as u64;
        }
        Ok(())
    }

    fn header(&mut self, name: &str, ino: u32, mode: u32, nlink: u32, size: u64) -> io::Result<()> {
        let size32 = u32::try_from(size).map_err(|_| {
            io::Error::other(format!("{name}: larger than 4 GiB (cpio newc limit)"))
        })?;
        let namesize = name.len() + 1;
        let mtime = u32::try_from(self.mtime).unwrap_or(u32::MAX);
        let h = format!(
            "070701{ino:08x}{mode:08x}{:08x}{:08x}{nlink:08x}{mtime:08x}{size32:08x}{:08x}{:08x}{:08x}{:08x}{namesize:08x}{:08x}",
            0, 0, 0, 0, 0, 0, 0
        );
        self.out.write_all(h.as_bytes())?;
        self.out.write_all(name.as_bytes())?;
        self.out.write_all(&[0])?;
        self.written += (h.len() + namesize) as u64;
        self.pad4()
    }

    /// Adds one entry; `mode` includes the file type bits.
    pub fn append(
        &mut self,
        name: &str,
        ino: u32,
        mode: u32,
        size: u64,
        data: Option<&mut dyn Read>,
    ) -> io::Result<()> {
        self.header(name, ino, mode, 1, size)?;
        if size > 0 {
            let src = data.ok_or_else(|| io::Error::other("cpio entry without data"))?;
            copy_exact(src, &mut self.out, size)?;
            self.written += size;
            self.pad4()?;
        }
        Ok(())
    }

    /// Writes the trailer; returns the output and the archive's length
    /// (trailer included: rpm's PAYLOADSIZE).
    pub fn finish(mut self) -> io::Result<(W, u64)> {
        self.header("TRAILER!!!", 0, 0, 1, 0)?;
        Ok((self.out, self.written))
    }
}

/// One entry read from a cpio (newc or crc) stream.
#[derive(Debug, Clone)]
pub struct CpioEntry {
    /// Name as stored (e.g. `./usr/lib/x`).
    pub name: String,
    /// Mode with type bits.
    pub mode: u32,
    /// Data size.
    pub size: u64,
}

/// Streaming cpio (newc/crc) reader.
pub struct CpioReader<R: Read> {
    inner: R,
    pos: u64,
    pending: u64,
    done: bool,
}

impl<R: Read> CpioReader<R> {
    /// Reads entries from `inner`.
    pub fn new(inner: R) -> Self {
        CpioReader {
            inner,
            pos: 0,
            pending: 0,
            done: false,
        }
    }

    fn skip(&mut self, n: u64) -> io::Result<()> {
        let skipped = io::copy(&mut (&mut self.inner).take(n), &mut io::sink())?;
        if skipped != n {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "truncated cpio",
            ));
        }
        self.pos += n;
        Ok(())
    }

    fn align(&mut self) -> io::Result<()> {
        let rem = self.pos % 4;
        if rem != 0 {
            self.skip(4 - rem)?;
        }
        Ok(())
    }

    /// The next entry, or None after the trailer. Unread data of the
    /// previous entry is skipped.
    pub fn next_entry(&mut self) -> io::Result<Option<CpioEntry>> {
        if self.done {
            return Ok(None);
        }
        if self.pending > 0 {
            let p = self.pending;
            self.pending = 0;
            self.skip(p)?;
        }
        self.align()?;
        let mut h = [0u8; 110];
        self.inner.read_exact(&mut h)?;
        self.pos += 110;
        if !h.starts_with(b"070701") && !h.starts_with(b"070702") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad cpio magic at payload offset {}", self.pos - 110),
            ));
        }
        let field = |i: usize| -> io::Result<u64> {
            let s = h
                .get(6 + i * 8..14 + i * 8)
                .and_then(|b| std::str::from_utf8(b).ok())
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad cpio field"))?;
            u64::from_str_radix(s, 16)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad cpio field"))
        };
        let mode = u32::try_from(field(1)?).unwrap_or(0);
        let size = field(6)?;
        let namesize = field(11)?;
        if namesize == 0 || namesize > 65_536 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "bad cpio name size",
            ));
        }
        let mut name = vec![0u8; namesize as usize];
        self.inner.read_exact(&mut name)?;
        self.pos += namesize;
        if name.last() == Some(&0) {
            name.pop();
        }
        let name = String::from_utf8(name)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "non-UTF-8 cpio name"))?;
        self.align()?;
        if name == "TRAILER!!!" {
            self.done = true;
            return Ok(None);
        }
        self.pending = size;
        Ok(Some(CpioEntry { name, mode, size }))
    }

    /// A reader over the current entry's data (exactly its size).
    pub fn data(&mut self) -> CpioData<'_, R> {
        CpioData { reader: self }
    }
}

/// Data of the current cpio entry.
pub struct CpioData<'a, R: Read> {
    reader: &'a mut CpioReader<R>,
}

impl<R: Read> Read for CpioData<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let pending = self.reader.pending;
        if pending == 0 || buf.is_empty() {
            return Ok(0);
        }
        let n = (&mut self.reader.inner).take(pending).read(buf)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "truncated cpio data",
            ));
        }
        self.reader.pending -= n as u64;
        self.reader.pos += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpio_roundtrip() {
        let mut w = CpioWriter::new(Vec::new(), 5);
        w.append("./a", 1, 0o100644, 3, Some(&mut &b"abc"[..]))
            .expect("a");
        w.append("./d", 2, 0o040755, 0, None).expect("d");
        let (bytes, len) = w.finish().expect("finish");
        assert_eq!(len, bytes.len() as u64);
        let mut r = CpioReader::new(&bytes[..]);
        let e = r.next_entry().expect("read").expect("entry");
        assert_eq!((e.name.as_str(), e.size), ("./a", 3));
        let mut s = String::new();
        r.data().read_to_string(&mut s).expect("data");
        assert_eq!(s, "abc");
        let e = r.next_entry().expect("read").expect("entry");
        assert_eq!(e.mode, 0o040755);
        assert!(r.next_entry().expect("read").is_none());
    }
}
