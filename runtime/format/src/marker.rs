//! The marker a split host binary carries in `.rocm_kpack_ref` (ELF) or
//! `.kpackrf` (PE/COFF): where its archives are and under which name its
//! code objects are filed (docs/formats.md section 2).

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use crate::error::{Error, Result};
use crate::msgpack;
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

impl Marker {
    /// Parses marker bytes. The map must hold exactly `kpack_search_paths`
    /// ([str]) and `kernel_name` (str). Trailing zero bytes are accepted
    /// (section padding); anything else after the map is an error.
    pub fn parse(bytes: &[u8]) -> Result<Marker> {
        let mut reader = msgpack::Reader::new(bytes);
        let value = reader.read_value()?;
        let rest = bytes.get(reader.position()..).unwrap_or_default();
        if rest.iter().any(|&b| b != 0) {
            return Err(bad(format!(
                "{} unexpected bytes after the map",
                rest.len()
            )));
        }
        let map = value.map_entries().ok_or_else(|| {
            bad(format!(
                "expected a map with distinct str keys, found {}",
                value.type_name()
            ))
        })?;
        let mut paths = None;
        let mut name = None;
        for (key, v) in map {
            match key {
                "kpack_search_paths" => {
                    let list = v.as_array().ok_or_else(|| {
                        bad(format!(
                            "kpack_search_paths must be an array, found {}",
                            v.type_name()
                        ))
                    })?;
                    let mut out = Vec::with_capacity(list.len());
                    for item in list {
                        let s = item.as_str().ok_or_else(|| {
                            bad(format!(
                                "kpack_search_paths element must be a str, found {}",
                                item.type_name()
                            ))
                        })?;
                        out.push(s.to_owned());
                    }
                    paths = Some(out);
                }
                "kernel_name" => {
                    let s = v.as_str().ok_or_else(|| {
                        bad(format!(
                            "kernel_name must be a str, found {}",
                            v.type_name()
                        ))
                    })?;
                    name = Some(s.to_owned());
                }
                other => return Err(bad(format!("unexpected key {other:?}"))),
            }
        }
        Ok(Marker {
            kpack_search_paths: paths.ok_or_else(|| bad("missing kpack_search_paths"))?,
            kernel_name: name.ok_or_else(|| bad("missing kernel_name"))?,
        })
    }

    /// Encodes the marker: keys in the order `kpack_search_paths`,
    /// `kernel_name`, strings as `str`. Same marker, same bytes.
    pub fn to_msgpack(&self) -> Result<Vec<u8>> {
        let mut b = Vec::new();
        msgpack::write_map_len(&mut b, 2)?;
        msgpack::write_str(&mut b, "kpack_search_paths")?;
        msgpack::write_str_array(&mut b, &self.kpack_search_paths)?;
        msgpack::write_str(&mut b, "kernel_name")?;
        msgpack::write_str(&mut b, &self.kernel_name)?;
        Ok(b)
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
    let u16_at = |b: &[u8], at: usize| {
        b.get(at..at + 2)
            .map_or(0, |x| u16::from_le_bytes([x[0], x[1]]))
    };
    let u32_at = |b: &[u8], at: usize| {
        b.get(at..at + 4)
            .and_then(|x| x.try_into().ok())
            .map_or(0, u32::from_le_bytes)
    };
    let u64_at = |b: &[u8], at: usize| {
        b.get(at..at + 8)
            .and_then(|x| x.try_into().ok())
            .map_or(0, u64::from_le_bytes)
    };
    let shoff = u64_at(&header, 0x28);
    let shentsize = u64::from(u16_at(&header, 0x3a));
    let shnum = u64::from(u16_at(&header, 0x3c));
    let shstrndx = u64::from(u16_at(&header, 0x3e));
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
    let mut table = vec![0u8; usize::try_from(shnum * shentsize).unwrap_or(usize::MAX)];
    file.seek(SeekFrom::Start(shoff)).map_err(io)?;
    file.read_exact(&mut table)
        .map_err(|_| bad_elf(path, shoff, "section headers run past the end of the file"))?;
    let entry = |i: u64| {
        table
            .get(usize::try_from(i * shentsize).unwrap_or(usize::MAX)..)
            .unwrap_or_default()
    };
    // (offset, size) of a section, its size bounded by `max`.
    let mut read_section = |i: u64, max: u64| -> Result<Vec<u8>> {
        let sh = entry(i);
        let (offset, size) = (u64_at(sh, 0x18), u64_at(sh, 0x20));
        if size > max {
            return Err(bad_elf(
                path,
                offset,
                format!("section {i} is {size} bytes, over the {max}-byte limit"),
            ));
        }
        let mut bytes = vec![0u8; usize::try_from(size).unwrap_or(0)];
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
    let found = (0..shnum).find(|&i| {
        let at = usize::try_from(u32_at(entry(i), 0)).unwrap_or(usize::MAX);
        names
            .get(at..)
            .and_then(|rest| rest.get(..rest.iter().position(|&b| b == 0)?))
            .is_some_and(|name| name == wanted)
    });
    let Some(index) = found else {
        return Ok(None);
    };
    let bytes = read_section(index, MAX_LEN as u64)?;
    Marker::parse(&bytes).map(Some)
}
