//! The marker a split host binary carries in `.rocm_kpack_ref` (ELF) or
//! `.kpackrf` (PE/COFF): where its archives are and under which name its
//! code objects are filed (docs/formats.md section 2).

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use crate::error::{Error, Result};
use crate::le;
use crate::msgpack::{self, Named, Str};
use rocm_kpack_fs::PathError;

/// The section holding the marker in an ELF host binary.
pub const ELF_SECTION: &str = ".rocm_kpack_ref";

/// Largest marker accepted (the reference library uses the same bound).
pub const MAX_LEN: usize = 64 * 1024;

/// Most section headers [`read_elf_marker`] looks through; real host
/// binaries have a few dozen.
const MAX_SECTIONS: u64 = 4096;
/// Largest section-name table read (linkers write a few hundred bytes).
const MAX_SHSTRTAB: u64 = 1 << 20;

/// Decoded marker contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// Candidate archive locations, in order: `.kpm` manifests, patterns
    /// containing `@GFXARCH@`, plain `.kpack` paths. Relative paths are
    /// resolved against the directory of the host binary.
    pub kpack_search_paths: Vec<String>,
    /// The binary's TOC key without the `#N` code-object suffix.
    pub kernel_name: String,
}

fn bad(detail: impl Into<String>) -> Error {
    Error::InvalidMetadata(format!("marker: {}", detail.into()))
}

/// The marker's wire form: exactly these two keys, in this order.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire<'a> {
    #[serde(borrow)]
    kpack_search_paths: Vec<Str<'a>>,
    #[serde(borrow)]
    kernel_name: Str<'a>,
}

impl Marker {
    /// Parses marker bytes. The map must hold exactly `kpack_search_paths`
    /// ([str]) and `kernel_name` (str). Trailing zero bytes are accepted
    /// (section padding); anything else after the map is an error.
    pub fn parse(bytes: &[u8]) -> Result<Marker> {
        let len = msgpack::measure(bytes, 0)?;
        let (value, rest) = bytes
            .split_at_checked(len)
            .ok_or_else(|| bad("truncated"))?;
        if rest.iter().any(|&b| b != 0) {
            return Err(bad(format!(
                "{} unexpected bytes after the map",
                rest.len()
            )));
        }
        let wire = msgpack::deserialize::<Named<Wire<'_>>>(value)
            .map_err(bad)?
            .0;
        Ok(Marker {
            kpack_search_paths: wire
                .kpack_search_paths
                .iter()
                .map(|s| s.0.to_owned())
                .collect(),
            kernel_name: wire.kernel_name.0.to_owned(),
        })
    }

    /// Encodes the marker: keys in the order `kpack_search_paths`,
    /// `kernel_name`, strings as `str`. Same marker, same bytes.
    #[cfg(feature = "write_core")]
    pub fn to_msgpack(&self) -> Result<Vec<u8>> {
        msgpack::encode(&Wire {
            kpack_search_paths: self.kpack_search_paths.iter().map(|s| Str(s)).collect(),
            kernel_name: Str(&self.kernel_name),
        })
    }
}

fn bad_elf(path: &Path, offset: u64, detail: impl Into<String>) -> Error {
    Error::InvalidFormat {
        what: "ELF host binary",
        offset,
        detail: format!("{}: {}", path.display(), detail.into()),
    }
}

/// Reads the marker of the ELF file open as `file` (named `path` in
/// errors) from its [`ELF_SECTION`] without loading the binary: the ELF
/// header, the section headers (at most 4096), the section-name table (at
/// most 1 MiB) and the section itself (at most [`MAX_LEN`] bytes) are all
/// that is read, whatever the file claims. `Ok(None)` when the file is not
/// a little-endian ELF64 file or carries no marker section (a binary that
/// was never split); an error when it is one with broken section headers
/// or a marker that does not parse.
pub fn read_elf_marker<R: Read + Seek>(file: &mut R, path: &Path) -> Result<Option<Marker>> {
    let io = |source: std::io::Error| Error::Io(PathError::new("cannot read", path, source));
    let mut header = [0u8; 64];
    let mut got = 0;
    while got < header.len() {
        match file.read(&mut header[got..]).map_err(io)? {
            0 => return Ok(None),
            n => got += n,
        }
    }
    // ELFCLASS64, ELFDATA2LSB: the hosts the loader runs on.
    if header[..4] != *b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return Ok(None);
    }
    // Every field read is checked: a short table is an error, never a 0.
    let short = |at: u64| bad_elf(path, at, "field runs past the end of its header");
    let shoff = le::u64_at(&header, 0x28).ok_or_else(|| short(0x28))?;
    let shentsize = u64::from(le::u16_at(&header, 0x3a).ok_or_else(|| short(0x3a))?);
    let shnum = u64::from(le::u16_at(&header, 0x3c).ok_or_else(|| short(0x3c))?);
    let shstrndx = u64::from(le::u16_at(&header, 0x3e).ok_or_else(|| short(0x3e))?);
    if shoff == 0 || shnum == 0 {
        return Ok(None);
    }
    if shentsize < 64 || shnum > MAX_SECTIONS || shstrndx >= shnum {
        return Err(bad_elf(
            path,
            0x3a,
            format!("{shnum} section headers of {shentsize} bytes, names in section {shstrndx}"),
        ));
    }
    // Claimed extents are checked against the file's real length before
    // anything is allocated for them: a 400-byte file claiming 4096
    // headers of 64 KiB each costs nothing.
    let file_len = file.seek(SeekFrom::End(0)).map_err(io)?;
    let fits = |offset: u64, size: u64| offset.checked_add(size).is_some_and(|end| end <= file_len);
    // At most 4096 entries of at most 65535 bytes: no overflow.
    let table_len = shnum * shentsize;
    if !fits(shoff, table_len) {
        return Err(bad_elf(
            path,
            shoff,
            "section headers run past the end of the file",
        ));
    }
    let mut table = vec![
        0u8;
        usize::try_from(table_len).map_err(|_| bad_elf(
            path,
            0x3a,
            "section header table too large"
        ))?
    ];
    file.seek(SeekFrom::Start(shoff)).map_err(io)?;
    file.read_exact(&mut table)
        .map_err(|_| bad_elf(path, shoff, "section headers run past the end of the file"))?;
    // Section header `i`, exactly `shentsize` bytes of the table.
    let entry = |i: u64| -> Result<(&[u8], u64)> {
        let start = i * shentsize;
        usize::try_from(start)
            .ok()
            .zip(usize::try_from(start + shentsize).ok())
            .and_then(|(s, e)| table.get(s..e))
            .map(|e| (e, shoff.saturating_add(start)))
            .ok_or_else(|| bad_elf(path, shoff, format!("section header {i} past the table")))
    };
    // (offset, size) of a section, its size bounded by `max`.
    let mut read_section = |i: u64, max: u64| -> Result<Vec<u8>> {
        let (sh, at) = entry(i)?;
        let offset = le::u64_at(sh, 0x18).ok_or_else(|| short(at + 0x18))?;
        let size = le::u64_at(sh, 0x20).ok_or_else(|| short(at + 0x20))?;
        if size > max {
            return Err(bad_elf(
                path,
                offset,
                format!("section {i} is {size} bytes, over the {max}-byte limit"),
            ));
        }
        if !fits(offset, size) {
            return Err(bad_elf(
                path,
                offset,
                format!("section {i} runs past the end of the file"),
            ));
        }
        // `size <= max`, at most 1 MiB, and inside the file.
        let mut bytes =
            vec![0u8; usize::try_from(size).map_err(|_| bad_elf(path, offset, "size"))?];
        file.seek(SeekFrom::Start(offset)).map_err(io)?;
        file.read_exact(&mut bytes).map_err(|_| {
            bad_elf(
                path,
                offset,
                format!("section {i} runs past the end of the file"),
            )
        })?;
        Ok(bytes)
    };
    let names = read_section(shstrndx, MAX_SHSTRTAB)?;
    let wanted = ELF_SECTION.as_bytes();
    let mut found = None;
    for i in 0..shnum {
        // A name offset past the table names nothing (as with `readelf`).
        let (sh, at) = entry(i)?;
        let name = usize::try_from(le::u32_at(sh, 0).ok_or_else(|| short(at))?)
            .ok()
            .and_then(|at| names.get(at..))
            .and_then(|rest| rest.get(..rest.iter().position(|&b| b == 0)?));
        if name == Some(wanted) {
            found = Some(i);
            break;
        }
    }
    let Some(index) = found else {
        return Ok(None);
    };
    let bytes = read_section(index, MAX_LEN as u64)?;
    Marker::parse(&bytes).map(Some)
}
