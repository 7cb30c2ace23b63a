//! The host-only output of a rewrite, described instead of built: runs of
//! the input file, zero fill and small owned parts (ELF headers, the marker,
//! the grown section-name table; PE headers and `.kpackrf`), with byte
//! patches on top (wrapper slots, relocation addends, zeroed old tables,
//! PE section table and checksum). Both the ELF and the PE rewrite use it. Writing it streams the input
//! through a fixed-size buffer, so the memory a split takes for its host
//! output does not grow with the host code (a 459 MB plugin library keeps
//! 430 MB of it), and the bytes are the ones an in-memory copy would hold.

use std::io::{self, Write};

/// Bytes written per step: one buffer of this size is all the copy holds.
pub const CHUNK: usize = 1 << 20;

#[derive(Debug, Clone)]
enum Piece {
    /// `len` bytes of the input from `offset`.
    Input { offset: usize, len: usize },
    /// `len` zero bytes.
    Zeros(usize),
    /// Bytes of its own.
    Owned(Vec<u8>),
}

impl Piece {
    fn len(&self) -> usize {
        match self {
            Piece::Input { len, .. } | Piece::Zeros(len) => *len,
            Piece::Owned(b) => b.len(),
        }
    }
}

/// An output file as pieces of `src` and its own bytes, patched.
#[derive(Debug, Clone)]
pub struct Image<'a> {
    src: &'a [u8],
    pieces: Vec<Piece>,
    len: usize,
    /// (offset, bytes), applied in order over the pieces: a later patch
    /// wins where two overlap, as later writes into a buffer would.
    patches: Vec<(usize, Vec<u8>)>,
}

impl<'a> Image<'a> {
    /// An empty image over the input `src`.
    pub fn new(src: &'a [u8]) -> Self {
        Image {
            src,
            pieces: Vec::new(),
            len: 0,
            patches: Vec::new(),
        }
    }

    /// Current length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `src[offset..offset + len]`; `None` when out of range.
    pub fn copy(&mut self, offset: usize, len: usize) -> Option<()> {
        self.src.get(offset..offset.checked_add(len)?)?;
        if len > 0 {
            self.pieces.push(Piece::Input { offset, len });
            self.len += len;
        }
        Some(())
    }

    /// Appends bytes of its own.
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        if !bytes.is_empty() {
            self.pieces.push(Piece::Owned(bytes.to_vec()));
            self.len += bytes.len();
        }
    }

    /// Grows to `len` with zeros (never shrinks).
    pub fn pad_to(&mut self, len: usize) {
        if len > self.len {
            self.pieces.push(Piece::Zeros(len - self.len));
            self.len = len;
        }
    }

    /// Overwrites `bytes.len()` bytes at `offset`, which must already
    /// exist; `None` otherwise.
    pub fn patch(&mut self, offset: usize, bytes: &[u8]) -> Option<()> {
        if offset.checked_add(bytes.len())? > self.len {
            return None;
        }
        self.patches.push((offset, bytes.to_vec()));
        Some(())
    }

    /// Zeros `len` existing bytes at `offset`; `None` when out of range.
    pub fn zero(&mut self, offset: usize, len: usize) -> Option<()> {
        self.patch(offset, &vec![0; len])
    }

    /// The `buf.len()` output bytes at `offset`, patches applied (a few
    /// bytes: rewrites read back fields they placed); `None` when out of
    /// range.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Option<()> {
        let end = offset.checked_add(buf.len())?;
        if end > self.len {
            return None;
        }
        let mut at = 0usize; // output offset of the current piece
        for piece in &self.pieces {
            let (p0, p1) = (at, at + piece.len());
            let (a, b) = (p0.max(offset), p1.min(end));
            if a < b {
                let dst = &mut buf[a - offset..b - offset];
                match piece {
                    Piece::Input { offset: src, .. } => {
                        dst.copy_from_slice(self.src.get(src + (a - p0)..src + (b - p0))?)
                    }
                    Piece::Zeros(_) => dst.fill(0),
                    Piece::Owned(bytes) => dst.copy_from_slice(&bytes[a - p0..b - p0]),
                }
            }
            if p1 >= end {
                break;
            }
            at = p1;
        }
        for (off, bytes) in &self.patches {
            let (p0, p1) = (*off, off + bytes.len());
            let (a, b) = (p0.max(offset), p1.min(end));
            if a < b {
                buf[a - offset..b - offset].copy_from_slice(&bytes[a - p0..b - p0]);
            }
        }
        Some(())
    }

    /// Memory the image holds besides the input: its own parts and
    /// patches, plus the buffer [`Image::write_to`] uses.
    pub fn memory(&self) -> u64 {
        let owned: usize = self
            .pieces
            .iter()
            .map(|p| match p {
                Piece::Owned(b) => b.len(),
                _ => 0,
            })
            .sum();
        let patched: usize = self.patches.iter().map(|(_, b)| b.len()).sum();
        (owned + patched + CHUNK) as u64
    }

    /// Writes the image to `w`, [`CHUNK`] bytes at a time.
    pub fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        let mut buf: Vec<u8> = Vec::with_capacity(CHUNK);
        let mut at = 0usize; // output offset of buf[0]
        let mut flush = |buf: &mut Vec<u8>, at: &mut usize| -> io::Result<()> {
            let end = *at + buf.len();
            for (off, bytes) in &self.patches {
                let (p0, p1) = (*off, off + bytes.len());
                let (a, b) = (p0.max(*at), p1.min(end));
                if a < b {
                    buf[a - *at..b - *at].copy_from_slice(&bytes[a - p0..b - p0]);
                }
            }
            w.write_all(buf)?;
            *at = end;
            buf.clear();
            Ok(())
        };
        for piece in &self.pieces {
            let mut done = 0;
            while done < piece.len() {
                let n = (piece.len() - done).min(CHUNK - buf.len());
                match piece {
                    Piece::Input { offset, .. } => {
                        let from = offset + done;
                        buf.extend_from_slice(self.src.get(from..from + n).ok_or_else(|| {
                            io::Error::new(
                                io::ErrorKind::InvalidInput,
                                "image piece out of the input",
                            )
                        })?);
                    }
                    Piece::Zeros(_) => buf.resize(buf.len() + n, 0),
                    Piece::Owned(b) => buf.extend_from_slice(&b[done..done + n]),
                }
                done += n;
                if buf.len() == CHUNK {
                    flush(&mut buf, &mut at)?;
                }
            }
        }
        if !buf.is_empty() {
            flush(&mut buf, &mut at)?;
        }
        Ok(())
    }

    /// The whole image in memory (tests, small inputs).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len);
        // Writing to a Vec cannot fail; pieces were range-checked.
        let _ = self.write_to(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same operations on a Vec and on an Image give the same bytes,
    /// across chunk boundaries and overlapping patches.
    #[test]
    fn image_matches_a_buffer() {
        let src: Vec<u8> = (0..3 * CHUNK + 123)
            .map(|i| (i * 7 + i / 251) as u8)
            .collect();
        let mut v: Vec<u8> = Vec::new();
        let mut img = Image::new(&src);
        v.extend_from_slice(&src[10..CHUNK + 20]);
        img.copy(10, CHUNK + 10).expect("in range");
        v.resize(v.len() + 5000, 0);
        img.pad_to(img.len() + 5000);
        v.extend_from_slice(&src[2 * CHUNK..3 * CHUNK + 100]);
        img.copy(2 * CHUNK, CHUNK + 100).expect("in range");
        v[CHUNK - 3..CHUNK + 9].fill(0);
        img.zero(CHUNK - 3, 12).expect("in range");
        v.extend_from_slice(b"marker");
        img.extend_from_slice(b"marker");
        v[CHUNK..CHUNK + 4].copy_from_slice(b"HIPK");
        img.patch(CHUNK, b"HIPK").expect("in range");
        let n = v.len();
        v[n - 8..n - 2].copy_from_slice(b"abcdef");
        img.patch(n - 8, b"abcdef").expect("in range");
        assert!(img.patch(n - 1, b"xy").is_none());
        for (off, len) in [
            (0, 16),
            (CHUNK - 8, 40),
            (CHUNK + 4990, 30),
            (n - 10, 10),
            (n - 8, 6),
        ] {
            let mut got = vec![0xaa; len];
            img.read(off, &mut got).expect("in range");
            assert_eq!(got, v[off..off + len], "read at {off}");
        }
        assert!(img.read(n - 1, &mut [0; 2]).is_none());
        assert!(img.copy(src.len() - 1, 2).is_none());
        assert_eq!(img.len(), v.len());
        assert!(img.to_vec() == v);
    }
}
