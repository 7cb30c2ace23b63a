//! zip, the wheel container, written with `zip::ZipWriter` (reading uses
//! the same crate, in `wheel.rs`).
//!
//! Deterministic: every entry gets the one DOS time of SOURCE_DATE_EPOCH
//! (clamped to the representable 1980..2107), the permissions the caller
//! gives, and entries appear in the order they are added (callers sort).
//! Files are deflated at level 6, empty ones stored. The output is
//! seekable, so the crate patches CRC and sizes into the local headers
//! (no data descriptors); files of 4 GiB or more get zip64 fields.

use std::io::{self, Read, Seek, Write};

use ::zip::write::SimpleFileOptions;
use ::zip::{CompressionMethod, DateTime};
use rocm_kpack_fs::HashingWriter;

use crate::dates::civil;

/// The zip entry time of a Unix time (UTC), clamped to the range a DOS
/// timestamp holds.
fn entry_time(epoch: u64) -> DateTime {
    const MIN: u64 = 315_532_800; // 1980-01-01
    const MAX: u64 = 4_354_819_198; // 2107-12-31 23:59:58
    let (y, mo, d, h, mi, s) = civil(epoch.clamp(MIN, MAX));
    // Inside the clamp every field is in range; the fallback is never taken.
    DateTime::from_date_and_time(
        u16::try_from(y).unwrap_or(1980),
        mo as u8,
        d as u8,
        h as u8,
        mi as u8,
        s as u8,
    )
    .unwrap_or_default()
}

/// Deterministic zip writer (see the module documentation).
pub struct ZipWriter<W: Write + Seek> {
    zip: ::zip::ZipWriter<W>,
    time: DateTime,
}

/// Whether an entry of `size` bytes may need zip64 sizes: its deflate
/// stream can outgrow the data a little (zlib's `deflateBound`), and the
/// crate refuses a non-zip64 entry that passes 4 GiB.
fn needs_zip64(size: u64) -> bool {
    size.saturating_add((size >> 11) + 64) >= u64::from(u32::MAX)
}

fn zip_err(e: ::zip::result::ZipError) -> io::Error {
    match e {
        ::zip::result::ZipError::Io(e) => e,
        other => io::Error::other(other),
    }
}

impl<W: Write + Seek> ZipWriter<W> {
    /// A zip on `out`; every entry gets the DOS time of `epoch`.
    pub fn new(out: W, epoch: u64) -> Self {
        ZipWriter {
            zip: ::zip::ZipWriter::new(out),
            time: entry_time(epoch),
        }
    }

    /// Adds a file of `size` bytes read from `data` (exactly `size`
    /// bytes, else an error); returns its sha256.
    pub fn add_file(
        &mut self,
        name: &str,
        mode: u32,
        size: u64,
        data: &mut dyn Read,
    ) -> io::Result<[u8; 32]> {
        let options = SimpleFileOptions::default()
            .last_modified_time(self.time)
            .unix_permissions(mode)
            .large_file(needs_zip64(size));
        let options = if size == 0 {
            options.compression_method(CompressionMethod::Stored)
        } else {
            options
                .compression_method(CompressionMethod::Deflated)
                .compression_level(Some(6))
        };
        self.zip.start_file(name, options).map_err(zip_err)?;
        let mut hashing = HashingWriter::new(&mut self.zip);
        let copied = io::copy(&mut data.take(size), &mut hashing)?;
        let (_, digest, _) = hashing.finish();
        if copied != size {
            // Leave no half entry behind for `finish` to complete.
            self.zip.abort_file().map_err(zip_err)?;
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{name}: expected {size} bytes, read {copied}"),
            ));
        }
        Ok(digest)
    }

    /// Adds a file from memory; returns its sha256.
    pub fn add_bytes(&mut self, name: &str, mode: u32, data: &[u8]) -> io::Result<[u8; 32]> {
        let mut r = data;
        self.add_file(name, mode, data.len() as u64, &mut r)
    }

    /// Writes the central directory and returns the output, flushed.
    pub fn finish(self) -> io::Result<W> {
        let mut out = self.zip.finish().map_err(zip_err)?;
        out.flush()?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    #[test]
    fn entry_times_clamp_to_1980() {
        assert_eq!(entry_time(0), entry_time(315_532_800));
        let t = entry_time(1_704_067_200); // 2024-01-01 00:00:00
        assert_eq!((t.year(), t.month(), t.day(), t.hour()), (2024, 1, 1, 0));
        assert_eq!(entry_time(u64::MAX).year(), 2107);
    }

    #[test]
    fn entries_round_trip_with_modes_and_hashes() {
        let mut w = ZipWriter::new(io::Cursor::new(Vec::new()), 1_704_067_200);
        let sha = w.add_bytes("a/x.py", 0o755, b"print(1)\n").expect("a");
        assert_eq!(sha, <[u8; 32]>::from(Sha256::digest(b"print(1)\n")));
        w.add_bytes("a/empty", 0o644, b"").expect("b");
        let short = w.add_file("a/short", 0o644, 5, &mut &b"ab"[..]);
        assert!(short.is_err());
        assert!(needs_zip64(u64::from(u32::MAX) - 1000) && !needs_zip64(1 << 31));
        let bytes = w.finish().expect("finish").into_inner();
        let mut z = ::zip::ZipArchive::new(io::Cursor::new(bytes)).expect("read");
        let x = z.by_name("a/x.py").expect("x");
        assert_eq!(x.unix_mode(), Some(0o100755));
        assert_eq!(x.compression(), CompressionMethod::Deflated);
        assert_eq!(x.last_modified(), Some(entry_time(1_704_067_200)));
        drop(x);
        let e = z.by_name("a/empty").expect("empty");
        assert_eq!(e.compression(), CompressionMethod::Stored);
        drop(e);
        assert_eq!(z.len(), 2, "the short entry was dropped");
    }
}
