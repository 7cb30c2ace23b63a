//! The framing shared by the store's decoded streams (the archive
//! transport form `KPKT`, `archive::transport`, and the database set
//! `KPDS`, [`crate::database_set`]): a 4-byte magic, a `u32` format, a
//! `u64` TOC length (all little-endian), then a MessagePack TOC of at most
//! [`MAX_TOC_SIZE`] bytes. What follows the TOC is each stream's own.

use std::io::{self, Read};

use crate::archive::MAX_TOC_SIZE;
use crate::error::{Error, Result};
use rocm_kpack_fs::PathError;

/// Fixed header: magic, format, TOC length.
pub(crate) const HEADER_LEN: u64 = 16;

/// The header of a stream whose TOC is `toc_len` bytes.
#[cfg(feature = "write_core")]
pub(crate) fn header(magic: [u8; 4], format: u32, toc_len: u64) -> [u8; HEADER_LEN as usize] {
    let mut h = [0u8; HEADER_LEN as usize];
    h[0..4].copy_from_slice(&magic);
    h[4..8].copy_from_slice(&format.to_le_bytes());
    h[8..16].copy_from_slice(&toc_len.to_le_bytes());
    h
}

/// What a stream is, for its errors.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Framing {
    /// In words (`kpack transport form`).
    pub what: &'static str,
    pub magic: [u8; 4],
    /// The one format this build reads, and its spelling for messages.
    pub format: u32,
    pub supported: &'static str,
}

impl Framing {
    /// A malformed stream at `offset`.
    pub fn bad(&self, offset: u64, detail: impl Into<String>) -> Error {
        Error::format(self.what, offset, detail)
    }

    /// An I/O error while reading or writing the stream.
    pub fn io(&self, action: &'static str, e: io::Error) -> Error {
        Error::Io(PathError::new(action, format!("<{}>", self.what), e))
    }

    /// Reads the header and the TOC: the magic and format must be this
    /// stream's, the TOC at most [`MAX_TOC_SIZE`] bytes (a length claim
    /// alone allocates nothing). Returns the TOC's bytes.
    pub fn read_toc(&self, r: &mut dyn Read) -> Result<Vec<u8>> {
        let mut header = [0u8; HEADER_LEN as usize];
        r.read_exact(&mut header).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => self.bad(0, "truncated header"),
            _ => self.io("cannot read", e),
        })?;
        if header[0..4] != self.magic {
            return Err(self.bad(
                0,
                format!(
                    "bad magic (expected \"{}\")",
                    String::from_utf8_lossy(&self.magic)
                ),
            ));
        }
        let format = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        if format != self.format {
            return Err(Error::UnsupportedVersion {
                what: self.what,
                found: u64::from(format),
                supported: self.supported,
            });
        }
        let toc_len = u64::from_le_bytes([
            header[8], header[9], header[10], header[11], header[12], header[13], header[14],
            header[15],
        ]);
        if toc_len > MAX_TOC_SIZE {
            return Err(self.bad(
                8,
                format!("the TOC is {toc_len} bytes, over the {MAX_TOC_SIZE}-byte limit"),
            ));
        }
        let mut toc = Vec::new();
        r.take(toc_len)
            .read_to_end(&mut toc)
            .map_err(|e| self.io("cannot read", e))?;
        if toc.len() as u64 != toc_len {
            return Err(self.bad(
                HEADER_LEN,
                format!("truncated TOC ({} of {toc_len} bytes)", toc.len()),
            ));
        }
        Ok(toc)
    }

    /// Fails unless `r` is at its end: nothing may follow the stream's
    /// `last` region (`blob`, `member`).
    pub fn expect_end(&self, r: &mut dyn Read, at: u64, last: &str) -> Result<()> {
        let mut probe = [0u8; 1];
        let trailing = loop {
            match r.read(&mut probe) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other.map_err(|e| self.io("cannot read", e))?,
            }
        };
        if trailing != 0 {
            return Err(self.bad(at, format!("data after the last {last}")));
        }
        Ok(())
    }
}
