//! zip, the wheel container: hand-written writer (reading uses the `zip`
//! crate, in `wheel.rs`).
//!
//! `zip::ZipWriter` was measured against this writer (same entries, DOS
//! time, deflate level 6, Unix permissions) and cannot give today's bytes:
//! the archives have the same length and identical deflate streams, but
//! the crate sets the UTF-8 name flag (bit 11) only for non-ASCII names
//! where this writer always sets it, records "version made by" 2.0 (its
//! version needed) where this writer records 4.5, and marks stored entries
//! as needing version 1.0 rather than 2.0. None of these is an option of
//! the crate, and wheel bytes must not change, so the writer stays: local
//! headers are patched with CRC and sizes by seeking back (no data
//! descriptors), zip64 fields are written only for entries or offsets that
//! need them.

use std::io::{self, Read, Seek, SeekFrom, Write};

use flate2::write::DeflateEncoder;
use sha2::{Digest, Sha256};

use crate::dates::civil;

/// Converts a Unix time to MS-DOS date and time (UTC), clamped to
/// 1980-01-01..2107-12-31 (the representable range).
pub fn dos_datetime(epoch: u64) -> (u16, u16) {
    const MIN: u64 = 315_532_800; // 1980-01-01
    const MAX: u64 = 4_354_819_198; // 2107-12-31 23:59:58
    let t = epoch.clamp(MIN, MAX);
    let (y, mo, d, h, mi, s) = civil(t);
    let date = (((y - 1980) as u16) << 9) | ((mo as u16) << 5) | d as u16;
    let time = ((h as u16) << 11) | ((mi as u16) << 5) | (s / 2) as u16;
    (date, time)
}

struct ZipCentral {
    name: String,
    crc: u32,
    csize: u64,
    usize: u64,
    offset: u64,
    mode: u32,
    method: u16,
}

/// Deterministic zip writer: deflate (or stored for empty files), one
/// DOS timestamp, Unix permissions in the external attributes, zip64
/// extra fields only for entries or offsets that need them.
pub struct ZipWriter<W: Write + Seek> {
    out: W,
    date: u16,
    time: u16,
    entries: Vec<ZipCentral>,
}

const ZIP64_LIMIT: u64 = 0xFFFF_FFFE;

impl<W: Write + Seek> ZipWriter<W> {
    /// A zip on `out`; every entry gets the DOS time of `epoch` (clamped to 1980).
    pub fn new(out: W, epoch: u64) -> Self {
        let (date, time) = dos_datetime(epoch);
        ZipWriter {
            out,
            date,
            time,
            entries: Vec::new(),
        }
    }

    /// Adds a file of `size` bytes read from `data`; returns its sha256.
    pub fn add_file(
        &mut self,
        name: &str,
        mode: u32,
        size: u64,
        data: &mut dyn Read,
    ) -> io::Result<[u8; 32]> {
        let offset = self.out.stream_position()?;
        let zip64 = size >= ZIP64_LIMIT;
        let method: u16 = if size == 0 { 0 } else { 8 };
        let mut local = Vec::with_capacity(30 + name.len() + 20);
        local.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        local.extend_from_slice(&(if zip64 { 45u16 } else { 20u16 }).to_le_bytes());
        local.extend_from_slice(&0x0800u16.to_le_bytes()); // UTF-8 names
        local.extend_from_slice(&method.to_le_bytes());
        local.extend_from_slice(&self.time.to_le_bytes());
        local.extend_from_slice(&self.date.to_le_bytes());
        local.extend_from_slice(&[0u8; 12]); // crc, csize, usize: patched
        local.extend_from_slice(&(name.len() as u16).to_le_bytes());
        local.extend_from_slice(&(if zip64 { 20u16 } else { 0u16 }).to_le_bytes());
        local.extend_from_slice(name.as_bytes());
        if zip64 {
            local.extend_from_slice(&1u16.to_le_bytes());
            local.extend_from_slice(&16u16.to_le_bytes());
            local.extend_from_slice(&[0u8; 16]);
        }
        if name.len() > u16::MAX as usize {
            return Err(io::Error::other("zip entry name too long"));
        }
        self.out.write_all(&local)?;
        let data_start = self.out.stream_position()?;
        let mut crc = crc32fast::Hasher::new();
        let mut sha = Sha256::new();
        let mut counted = 0u64;
        {
            let mut reader = CrcShaReader {
                inner: data.take(size),
                crc: &mut crc,
                sha: &mut sha,
                count: &mut counted,
            };
            if method == 8 {
                let mut enc = DeflateEncoder::new(&mut self.out, flate2::Compression::new(6));
                io::copy(&mut reader, &mut enc)?;
                enc.finish()?;
            } else {
                io::copy(&mut reader, &mut self.out)?;
            }
        }
        if counted != size {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{name}: expected {size} bytes, read {counted}"),
            ));
        }
        let end = self.out.stream_position()?;
        let csize = end - data_start;
        let crc = crc.finalize();
        if !zip64 && csize >= ZIP64_LIMIT {
            return Err(io::Error::other(format!(
                "{name}: compressed size exceeds 4 GiB without zip64"
            )));
        }
        // Patch crc and sizes.
        self.out.seek(SeekFrom::Start(offset + 14))?;
        self.out.write_all(&crc.to_le_bytes())?;
        if zip64 {
            self.out.write_all(&u32::MAX.to_le_bytes())?;
            self.out.write_all(&u32::MAX.to_le_bytes())?;
            self.out
                .seek(SeekFrom::Start(offset + 30 + name.len() as u64 + 4))?;
            self.out.write_all(&size.to_le_bytes())?;
            self.out.write_all(&csize.to_le_bytes())?;
        } else {
            self.out.write_all(&(csize as u32).to_le_bytes())?;
            self.out.write_all(&(size as u32).to_le_bytes())?;
        }
        self.out.seek(SeekFrom::Start(end))?;
        self.entries.push(ZipCentral {
            name: name.to_string(),
            crc,
            csize,
            usize: size,
            offset,
            mode,
            method,
        });
        Ok(sha.finalize().into())
    }

    /// Adds a file from memory; returns its sha256.
    pub fn add_bytes(&mut self, name: &str, mode: u32, data: &[u8]) -> io::Result<[u8; 32]> {
        let mut r = data;
        self.add_file(name, mode, data.len() as u64, &mut r)
    }

    /// Writes the central directory (zip64 end records when needed).
    pub fn finish(mut self) -> io::Result<W> {
        let cd_start = self.out.stream_position()?;
        for e in &self.entries {
            let mut extra = Vec::new();
            let big_u = e.usize >= ZIP64_LIMIT;
            let big_c = e.csize >= ZIP64_LIMIT;
            let big_o = e.offset >= ZIP64_LIMIT;
            if big_u || big_c || big_o {
                let mut body = Vec::new();
                if big_u {
                    body.extend_from_slice(&e.usize.to_le_bytes());
                }
                if big_c {
                    body.extend_from_slice(&e.csize.to_le_bytes());
                }
                if big_o {
                    body.extend_from_slice(&e.offset.to_le_bytes());
                }
                extra.extend_from_slice(&1u16.to_le_bytes());
                extra.extend_from_slice(&(body.len() as u16).to_le_bytes());
                extra.extend_from_slice(&body);
            }
            let needs64 = !extra.is_empty();
            let mut c = Vec::with_capacity(46 + e.name.len() + extra.len());
            c.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
            c.extend_from_slice(&((3u16 << 8) | 45).to_le_bytes()); // made by Unix
            c.extend_from_slice(&(if needs64 { 45u16 } else { 20u16 }).to_le_bytes());
            c.extend_from_slice(&0x0800u16.to_le_bytes());
            c.extend_from_slice(&e.method.to_le_bytes());
            c.extend_from_slice(&self.time.to_le_bytes());
            c.extend_from_slice(&self.date.to_le_bytes());
            c.extend_from_slice(&e.crc.to_le_bytes());
            c.extend_from_slice(&(if big_c { u32::MAX } else { e.csize as u32 }).to_le_bytes());
            c.extend_from_slice(&(if big_u { u32::MAX } else { e.usize as u32 }).to_le_bytes());
            c.extend_from_slice(&(e.name.len() as u16).to_le_bytes());
            c.extend_from_slice(&(extra.len() as u16).to_le_bytes());
            c.extend_from_slice(&0u16.to_le_bytes()); // comment
            c.extend_from_slice(&0u16.to_le_bytes()); // disk
            c.extend_from_slice(&0u16.to_le_bytes()); // internal attrs
            let attrs = (0o100000u32 | (e.mode & 0o7777)) << 16;
            c.extend_from_slice(&attrs.to_le_bytes());
            c.extend_from_slice(&(if big_o { u32::MAX } else { e.offset as u32 }).to_le_bytes());
            c.extend_from_slice(e.name.as_bytes());
            c.extend_from_slice(&extra);
            self.out.write_all(&c)?;
        }
        let cd_end = self.out.stream_position()?;
        let cd_size = cd_end - cd_start;
        let count = self.entries.len() as u64;
        let need64 = count >= 0xFFFF || cd_size >= ZIP64_LIMIT || cd_start >= ZIP64_LIMIT;
        if need64 {
            let mut z = Vec::new();
            z.extend_from_slice(&0x0606_4b50u32.to_le_bytes());
            z.extend_from_slice(&44u64.to_le_bytes());
            z.extend_from_slice(&((3u16 << 8) | 45).to_le_bytes());
            z.extend_from_slice(&45u16.to_le_bytes());
            z.extend_from_slice(&0u32.to_le_bytes());
            z.extend_from_slice(&0u32.to_le_bytes());
            z.extend_from_slice(&count.to_le_bytes());
            z.extend_from_slice(&count.to_le_bytes());
            z.extend_from_slice(&cd_size.to_le_bytes());
            z.extend_from_slice(&cd_start.to_le_bytes());
            z.extend_from_slice(&0x0706_4b50u32.to_le_bytes());
            z.extend_from_slice(&0u32.to_le_bytes());
            z.extend_from_slice(&cd_end.to_le_bytes());
            z.extend_from_slice(&1u32.to_le_bytes());
            self.out.write_all(&z)?;
        }
        let mut end = Vec::with_capacity(22);
        end.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
        end.extend_from_slice(&0u16.to_le_bytes());
        end.extend_from_slice(&0u16.to_le_bytes());
        let n16 = if need64 { u16::MAX } else { count as u16 };
        end.extend_from_slice(&n16.to_le_bytes());
        end.extend_from_slice(&n16.to_le_bytes());
        end.extend_from_slice(&(if need64 { u32::MAX } else { cd_size as u32 }).to_le_bytes());
        end.extend_from_slice(&(if need64 { u32::MAX } else { cd_start as u32 }).to_le_bytes());
        end.extend_from_slice(&0u16.to_le_bytes());
        self.out.write_all(&end)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

struct CrcShaReader<'a, R: Read> {
    inner: R,
    crc: &'a mut crc32fast::Hasher,
    sha: &'a mut Sha256,
    count: &'a mut u64,
}

impl<R: Read> Read for CrcShaReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let done = buf.get(..n).unwrap_or_default();
        self.crc.update(done);
        self.sha.update(done);
        *self.count += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dos_times_clamp_to_1980() {
        assert_eq!(dos_datetime(0), dos_datetime(315_532_800));
    }
}
