//! `ar`, the deb container: a hand-written writer, and a reader on
//! `object::read::archive`.
//!
//! Writing stays hand-written because `data.tar.*` is streamed into the
//! archive and its size is known only at the end: the writer leaves a
//! placeholder header and patches it by seeking back. The `ar` crate's
//! `Builder` wants the size in the header before the data (so the
//! compressed data archive, gigabytes for some libraries, would first have
//! to be spooled to a temporary file), and `object` only reads archives.
//! The header is one `format!` of fixed-width fields.
//!
//! Reading uses `object`, which reads only the member headers (through
//! `ReadCache`: the file is neither mapped nor loaded) and bounds-checks
//! them; this module adds the deb-specific checks: the plain `!<arch>`
//! magic (no thin archives) and member data within the file.

use std::io::{self, Read, Seek, SeekFrom, Write};

use object::read::archive::ArchiveFile;
use object::read::ReadCache;

/// `ar` archive writer (the deb container). Member sizes are patched after
/// the data is written, so members can be streamed.
pub struct ArWriter<W: Write + Seek> {
    out: W,
    mtime: u64,
}

impl<W: Write + Seek> ArWriter<W> {
    /// Writes the global header.
    pub fn new(mut out: W, mtime: u64) -> io::Result<Self> {
        out.write_all(b"!<arch>\n")?;
        Ok(ArWriter { out, mtime })
    }

    fn header(&self, name: &str, size: u64) -> io::Result<[u8; 60]> {
        if name.len() > 16 {
            return Err(io::Error::other(format!(
                "ar member name {name:?} too long"
            )));
        }
        if size > 9_999_999_999 {
            return Err(io::Error::other("ar member larger than 9999999999 bytes"));
        }
        let text = format!(
            "{name:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n",
            self.mtime.min(999_999_999_999),
            0,
            0,
            "100644",
            size
        );
        let mut h = [0u8; 60];
        if text.len() != 60 {
            return Err(io::Error::other("ar header overflow"));
        }
        h.copy_from_slice(text.as_bytes());
        Ok(h)
    }

    /// Adds a member from memory.
    pub fn add_bytes(&mut self, name: &str, data: &[u8]) -> io::Result<()> {
        let h = self.header(name, data.len() as u64)?;
        self.out.write_all(&h)?;
        self.out.write_all(data)?;
        if data.len() % 2 == 1 {
            self.out.write_all(b"\n")?;
        }
        Ok(())
    }

    /// Adds a member whose data `fill` streams into the writer it is given;
    /// the size is patched afterwards.
    pub fn add_streamed<F>(&mut self, name: &str, fill: F) -> io::Result<u64>
    where
        F: FnOnce(&mut W) -> io::Result<()>,
    {
        let start = self.out.stream_position()?;
        let placeholder = self.header(name, 0)?;
        self.out.write_all(&placeholder)?;
        fill(&mut self.out)?;
        let end = self.out.stream_position()?;
        let size = end
            .checked_sub(start + 60)
            .ok_or_else(|| io::Error::other("ar member writer moved backwards"))?;
        let h = self.header(name, size)?;
        self.out.seek(SeekFrom::Start(start))?;
        self.out.write_all(&h)?;
        self.out.seek(SeekFrom::Start(end))?;
        if size % 2 == 1 {
            self.out.write_all(b"\n")?;
        }
        Ok(size)
    }

    /// Returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
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
