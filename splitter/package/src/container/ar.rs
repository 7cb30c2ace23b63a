//! `ar`, the deb container: written with the `ar` crate's `Builder`,
//! read with `object::read::archive`.
//!
//! `ar::Builder` writes each member header (the common format: names of
//! up to 16 bytes, which deb members are) before its data, so a member's
//! size must be known first; `deb.rs` therefore spools the compressed
//! data archive to a temporary file before adding it.
//!
//! Reading uses `object`, which reads only the member headers (through
//! `ReadCache`: the file is neither mapped nor loaded) and bounds-checks
//! them; this module adds the deb-specific checks: the plain `!<arch>`
//! magic (no thin archives) and member data within the file.

use std::io::{self, Read, Seek, Write};

use object::read::archive::ArchiveFile;
use object::read::ReadCache;

/// `ar` archive writer (the deb container) on `ar::Builder`: every member
/// owned by 0:0, mode 0100644, one mtime (SOURCE_DATE_EPOCH).
pub struct ArWriter<W: Write> {
    builder: ar::Builder<W>,
    mtime: u64,
}

impl<W: Write> ArWriter<W> {
    /// An archive on `out`; the global header is written with the first member.
    pub fn new(out: W, mtime: u64) -> Self {
        ArWriter {
            builder: ar::Builder::new(out),
            mtime,
        }
    }

    /// Adds a member of `size` bytes read from `data` (exactly `size`
    /// bytes, else an error).
    pub fn add_reader<R: Read>(&mut self, name: &str, size: u64, data: R) -> io::Result<()> {
        // ar's common format: longer names would need an extension dpkg
        // does not read.
        if name.len() > 16 {
            return Err(io::Error::other(format!(
                "ar member name {name:?} too long"
            )));
        }
        // The header's size field has 10 decimal digits; the crate would
        // widen it and break the header.
        if size > 9_999_999_999 {
            return Err(io::Error::other(format!(
                "ar member {name:?} larger than 9999999999 bytes"
            )));
        }
        let mut h = ar::Header::new(name.as_bytes().to_vec(), size);
        h.set_mtime(self.mtime.min(999_999_999_999));
        h.set_uid(0);
        h.set_gid(0);
        h.set_mode(0o100644);
        self.builder.append(&h, data)
    }

    /// Adds a member from memory.
    pub fn add_bytes(&mut self, name: &str, data: &[u8]) -> io::Result<()> {
        self.add_reader(name, data.len() as u64, data)
    }

    /// Returns the output, flushed.
    pub fn finish(self) -> io::Result<W> {
        let mut out = self.builder.into_inner()?;
        out.flush()?;
        Ok(out)
    }
}

/// One member of an `ar` archive as read: name and data range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArMember {
    /// Member name (without the `/` or spaces that end it).
    pub name: String,
    /// Absolute offset of the data.
    pub offset: u64,
    /// Data size.
    pub size: u64,
}

/// Lists the members of an `ar` archive of total length `len` read from
/// `r` (positioned at its start). Errors are plain strings; callers add the
/// file name.
/// `object` ends a name or size field at its first space (the padding),
/// so bytes after it are ignored rather than refused.
pub fn read_ar_members<R: Read + Seek>(r: &mut R, len: u64) -> Result<Vec<ArMember>, String> {
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic)
        .map_err(|_| "too short for an ar archive".to_string())?;
    if &magic != b"!<arch>\n" {
        return Err("not an ar archive (bad magic)".into());
    }
    let cache = ReadCache::new(r);
    let archive = ArchiveFile::parse(&cache).map_err(|e| format!("bad ar archive: {e}"))?;
    let mut members = Vec::new();
    for member in archive.members() {
        let member = member.map_err(|e| format!("bad ar member: {e}"))?;
        let name = String::from_utf8_lossy(member.name()).into_owned();
        let (offset, size) = member.file_range();
        if offset.checked_add(size).filter(|&end| end <= len).is_none() {
            return Err(format!("ar member {name:?} runs past the end of the file"));
        }
        members.push(ArMember { name, offset, size });
    }
    Ok(members)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_round_trip_with_padding() {
        let mut w = ArWriter::new(io::Cursor::new(Vec::new()), 1_700_000_000);
        w.add_bytes("debian-binary", b"2.0\n").expect("a");
        w.add_reader("data.tar", 3, &b"abc"[..]).expect("b");
        w.add_bytes("z", b"").expect("c");
        let bytes = w.finish().expect("finish").into_inner();
        assert!(bytes.starts_with(
            b"!<arch>\ndebian-binary   1700000000  0     0     100644  4         `\n2.0\n"
        ));
        let members =
            read_ar_members(&mut io::Cursor::new(&bytes), bytes.len() as u64).expect("read");
        let got: Vec<_> = members
            .iter()
            .map(|m| (m.name.as_str(), m.offset, m.size))
            .collect();
        // "abc" is padded to an even length before the next header.
        assert_eq!(
            got,
            [
                ("debian-binary", 68, 4),
                ("data.tar", 132, 3),
                ("z", 196, 0)
            ]
        );
    }

    #[test]
    fn short_data_and_long_names_are_errors() {
        let mut w = ArWriter::new(Vec::new(), 0);
        assert!(w.add_reader("data.tar", 5, &b"ab"[..]).is_err());
        let mut w = ArWriter::new(Vec::new(), 0);
        assert!(w.add_bytes("a-name-of-17-byte", b"").is_err());
    }
}
