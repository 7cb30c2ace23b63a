//! The rpm reader: lead and both headers parsed under a decode budget,
//! digests checked, the payload streamed entry by entry.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use rocm_kpack_fs::{sha256_reader, HashingReader};
use rocm_kpack_pkgspec::fields::FieldKind;
use sha2::{Digest, Sha256};

use super::tags::{
    tag, FILE_CONFIG, PGPHASHALGO_SHA256, SCRIPT_TAGS, T_BIN, T_I18NSTRING, T_INT16, T_INT32,
    T_INT64, T_STRING, T_STRING_ARRAY,
};
use super::Dep;
use crate::compress::{decoder, Compression};
use crate::container::CpioReader;
use crate::PackageError;

/// A decoded header value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagValue {
    /// INT8/INT16/INT32/INT64/CHAR values widened.
    Ints(Vec<u64>),
    /// STRING, STRING_ARRAY, I18NSTRING.
    Strings(Vec<String>),
    /// BIN.
    Bin(Vec<u8>),
}

/// One parsed header: its tags and where it was in the file.
#[derive(Debug, Clone, Default)]
pub struct Header {
    tags: BTreeMap<u32, TagValue>,
    /// Offset of the header's magic in the file.
    pub start: u64,
    /// Offset just past the header.
    pub end: u64,
}

impl Header {
    /// The first string of a tag.
    pub fn string(&self, t: u32) -> Option<&str> {
        match self.tags.get(&t) {
            Some(TagValue::Strings(v)) => v.first().map(String::as_str),
            _ => None,
        }
    }
    /// All strings of a tag (empty if absent).
    pub fn strings(&self, t: u32) -> &[String] {
        match self.tags.get(&t) {
            Some(TagValue::Strings(v)) => v,
            _ => &[],
        }
    }
    /// Integers of a tag (empty if absent).
    pub fn ints(&self, t: u32) -> &[u64] {
        match self.tags.get(&t) {
            Some(TagValue::Ints(v)) => v,
            _ => &[],
        }
    }
    /// The first integer of a tag.
    pub fn int(&self, t: u32) -> Option<u64> {
        self.ints(t).first().copied()
    }
    /// Binary data of a tag.
    pub fn bin(&self, t: u32) -> Option<&[u8]> {
        match self.tags.get(&t) {
            Some(TagValue::Bin(b)) => Some(b),
            _ => None,
        }
    }
}

const MAX_INDEX: u32 = 0x10000;
const MAX_DATA: u32 = 256 << 20;

/// How many bytes of decoded tags (strings, widened integers, map entries)
/// one byte of an rpm file may produce, over all its headers: tags may
/// share and overlap their data, so without a budget a few megabytes of
/// header decode into gigabytes. Real headers decode to about 2-3x the
/// header's size, and a file is larger than its headers.
pub const DECODE_BUDGET_PER_BYTE: u64 = 4;

/// Memory one decoded map entry is charged (key, value and tree overhead).
const ENTRY_COST: u64 = 64;

/// Parses one header. `budget` is the decoded-memory allowance left for
/// the file (see [`DECODE_BUDGET_PER_BYTE`]); each tag's cost is taken
/// from it before the tag is decoded.
fn read_header<R: Read>(
    r: &mut R,
    start: u64,
    file_len: u64,
    path: &Path,
    budget: &mut u64,
) -> Result<(Header, Vec<u8>), PackageError> {
    let bad = |d: String| PackageError::corrupt(path, d);
    let mut intro = [0u8; 16];
    r.read_exact(&mut intro)
        .map_err(|_| bad(format!("truncated rpm header at offset {start}")))?;
    if intro[0..3] != [0x8e, 0xad, 0xe8] {
        return Err(bad(format!("bad rpm header magic at offset {start}")));
    }
    let il = u32::from_be_bytes([intro[8], intro[9], intro[10], intro[11]]);
    let dl = u32::from_be_bytes([intro[12], intro[13], intro[14], intro[15]]);
    if il == 0 || il > MAX_INDEX || dl > MAX_DATA {
        return Err(bad(format!(
            "implausible rpm header size ({il} entries, {dl} bytes)"
        )));
    }
    // Never allocate more than the file can hold.
    let need = u64::from(il) * 16 + u64::from(dl);
    if start + 16 + need > file_len {
        return Err(bad(format!(
            "rpm header at offset {start} claims {need} bytes, past the end of the file"
        )));
    }
    // One buffer, returned as the blob: the header is never copied.
    let mut blob = vec![0u8; 16 + il as usize * 16 + dl as usize];
    let index_len = il as usize * 16;
    let short = || {
        bad(format!(
            "rpm header at offset {start}: buffer shorter than its index"
        ))
    };
    let (head, body) = blob.split_first_chunk_mut::<16>().ok_or_else(short)?;
    *head = intro;
    r.read_exact(body)
        .map_err(|_| bad(format!("truncated rpm header at offset {start}")))?;
    let (index, data) = blob
        .get(16..)
        .and_then(|body| body.split_at_checked(index_len))
        .ok_or_else(short)?;
    let mut tags = BTreeMap::new();
    let mut charge = |t: u32, cost: u64| -> Result<(), PackageError> {
        let cost = cost.saturating_add(ENTRY_COST);
        if cost > *budget {
            return Err(bad(format!(
                "rpm header at offset {start}: tag {t} would decode past {DECODE_BUDGET_PER_BYTE}x the file's size (overlapping or inflated tags)"
            )));
        }
        *budget -= cost;
        Ok(())
    };
    for e in index.chunks_exact(16) {
        let be = |i: usize| -> u32 {
            u32::from_be_bytes([
                e.get(i).copied().unwrap_or(0),
                e.get(i + 1).copied().unwrap_or(0),
                e.get(i + 2).copied().unwrap_or(0),
                e.get(i + 3).copied().unwrap_or(0),
            ])
        };
        let (t, ty, off, count) = (be(0), be(4), be(8) as i32, be(12));
        if t == tag::HEADERSIGNATURES || t == tag::HEADERIMMUTABLE || off < 0 {
            continue;
        }
        let off = off as usize;
        let tail = data
            .get(off..)
            .ok_or_else(|| bad(format!("tag {t}: offset {off} outside the data store")))?;
        let count = count as usize;
        let mut ints = |width: usize| -> Result<TagValue, PackageError> {
            let bytes = tail
                .get(..count.saturating_mul(width))
                .ok_or_else(|| bad(format!("tag {t}: {count} values run past the data store")))?;
            charge(t, (count as u64).saturating_mul(8))?;
            Ok(TagValue::Ints(
                bytes
                    .chunks_exact(width)
                    .map(|c| c.iter().fold(0u64, |a, &b| (a << 8) | u64::from(b)))
                    .collect(),
            ))
        };
        let v = match ty {
            1 | 2 => ints(1)?,
            T_INT16 => ints(2)?,
            T_INT32 => ints(4)?,
            T_INT64 => ints(8)?,
            T_STRING | T_STRING_ARRAY | T_I18NSTRING => {
                let n = if ty == T_STRING { 1 } else { count };
                if n > tail.len() {
                    return Err(bad(format!("tag {t}: {n} strings run past the data store")));
                }
                // Measure first, charge, then allocate.
                let mut pos = 0usize;
                for _ in 0..n {
                    let len = tail
                        .get(pos..)
                        .and_then(|s| s.iter().position(|&b| b == 0))
                        .ok_or_else(|| bad(format!("tag {t}: unterminated string")))?;
                    pos += len + 1;
                }
                let slots = (n as u64).saturating_mul(std::mem::size_of::<String>() as u64);
                charge(t, slots.saturating_add(pos as u64))?;
                // The n strings measured, each with its NUL.
                let strings = tail
                    .get(..pos)
                    .ok_or_else(|| bad(format!("tag {t}: {n} strings run past the data store")))?;
                TagValue::Strings(
                    strings
                        .split(|&b| b == 0)
                        .take(n)
                        .map(|s| String::from_utf8_lossy(s).into_owned())
                        .collect(),
                )
            }
            T_BIN => {
                let bytes = tail
                    .get(..count)
                    .ok_or_else(|| bad(format!("tag {t}: binary runs past the data store")))?;
                charge(t, count as u64)?;
                TagValue::Bin(bytes.to_vec())
            }
            _ => continue,
        };
        tags.insert(t, v);
    }
    let end = start + blob.len() as u64;
    Ok((Header { tags, start, end }, blob))
}

/// A file listed in an rpm header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpmFile {
    /// Absolute install path.
    pub path: String,
    /// Mode with type bits.
    pub mode: u32,
    /// Size.
    pub size: u64,
    /// Hex digest ("" for non-files).
    pub digest: String,
    /// Symlink target ("" otherwise).
    pub link: String,
}

/// An rpm opened for reading: both headers parsed and the header SHA256
/// (when present) verified.
#[derive(Debug, Clone)]
pub struct RpmReader {
    /// The file.
    pub path: PathBuf,
    /// Signature header.
    pub signature: Header,
    /// Main header (`start`/`end` give the repodata header-range).
    pub header: Header,
    /// File length.
    pub file_size: u64,
}

impl RpmReader {
    /// Opens and checks an rpm.
    pub fn open(path: &Path) -> Result<RpmReader, PackageError> {
        let f = File::open(path).map_err(|e| PackageError::io("cannot open", path, e))?;
        let file_size = f
            .metadata()
            .map_err(|e| PackageError::io("cannot stat", path, e))?
            .len();
        let mut r = BufReader::new(f);
        let mut lead = [0u8; 96];
        r.read_exact(&mut lead)
            .map_err(|_| PackageError::corrupt(path, "too short for an rpm"))?;
        if lead[0..4] != [0xed, 0xab, 0xee, 0xdb] {
            return Err(PackageError::corrupt(path, "not an rpm (bad lead magic)"));
        }
        let mut budget = file_size.saturating_mul(DECODE_BUDGET_PER_BYTE);
        let (signature, sig_blob) = read_header(&mut r, 96, file_size, path, &mut budget)?;
        let pad = (8 - sig_blob.len() % 8) % 8;
        let truncated = || PackageError::corrupt(path, "truncated after the signature header");
        let mut skip = [0u8; 8];
        let padding = skip.get_mut(..pad).ok_or_else(truncated)?;
        r.read_exact(padding).map_err(|_| truncated())?;
        let start = 96 + sig_blob.len() as u64 + pad as u64;
        let (header, blob) = read_header(&mut r, start, file_size, path, &mut budget)?;
        if let Some(want) = signature.string(tag::SIG_SHA256) {
            let got = hex::encode(Sha256::digest(&blob));
            if !got.eq_ignore_ascii_case(want) {
                return Err(PackageError::corrupt(path, "header SHA256 digest mismatch"));
            }
        }
        if let Some(size) = signature
            .int(tag::SIG_SIZE)
            .or(signature.int(tag::SIG_LONGSIZE))
        {
            if header.start + size != file_size {
                return Err(PackageError::corrupt(
                    path,
                    format!(
                        "size mismatch: header + payload should be {size} bytes, file has {}",
                        file_size.saturating_sub(header.start)
                    ),
                ));
            }
        }
        for (field, t, kind) in [
            ("NAME", tag::NAME, FieldKind::RpmName),
            ("VERSION", tag::VERSION, FieldKind::RpmVersion),
            ("RELEASE", tag::RELEASE, FieldKind::RpmRelease),
            ("ARCH", tag::ARCH, FieldKind::RpmArch),
        ] {
            let value = header
                .string(t)
                .ok_or_else(|| PackageError::corrupt(path, format!("header has no {field}")))?;
            PackageError::check_name(path, field, kind, value)?;
        }
        Ok(RpmReader {
            path: path.to_path_buf(),
            signature,
            header,
            file_size,
        })
    }

    /// Name.
    pub fn name(&self) -> &str {
        self.header.string(tag::NAME).unwrap_or("")
    }
    /// Epoch (0 if absent).
    pub fn epoch(&self) -> u64 {
        self.header.int(tag::EPOCH).unwrap_or(0)
    }
    /// Version.
    pub fn version(&self) -> &str {
        self.header.string(tag::VERSION).unwrap_or("")
    }
    /// Release.
    pub fn release(&self) -> &str {
        self.header.string(tag::RELEASE).unwrap_or("")
    }
    /// Arch.
    pub fn arch(&self) -> &str {
        self.header.string(tag::ARCH).unwrap_or("")
    }

    fn deps(&self, n: u32, f: u32, v: u32) -> Vec<Dep> {
        let names = self.header.strings(n);
        let flags = self.header.ints(f);
        let vers = self.header.strings(v);
        names
            .iter()
            .enumerate()
            .map(|(i, name)| Dep {
                name: name.clone(),
                flags: flags.get(i).copied().unwrap_or(0) as u32,
                version: vers.get(i).cloned().unwrap_or_default(),
            })
            .collect()
    }
    /// Provides.
    pub fn provides(&self) -> Vec<Dep> {
        self.deps(tag::PROVIDENAME, tag::PROVIDEFLAGS, tag::PROVIDEVERSION)
    }
    /// Requires.
    pub fn requires(&self) -> Vec<Dep> {
        self.deps(tag::REQUIRENAME, tag::REQUIREFLAGS, tag::REQUIREVERSION)
    }
    /// Conflicts.
    pub fn conflicts(&self) -> Vec<Dep> {
        self.deps(tag::CONFLICTNAME, tag::CONFLICTFLAGS, tag::CONFLICTVERSION)
    }
    /// Obsoletes.
    pub fn obsoletes(&self) -> Vec<Dep> {
        self.deps(tag::OBSOLETENAME, tag::OBSOLETEFLAGS, tag::OBSOLETEVERSION)
    }
    /// Recommends.
    pub fn recommends(&self) -> Vec<Dep> {
        self.deps(
            tag::RECOMMENDNAME,
            tag::RECOMMENDFLAGS,
            tag::RECOMMENDVERSION,
        )
    }

    /// The file list.
    pub fn files(&self) -> Vec<RpmFile> {
        let h = &self.header;
        let dirs = h.strings(tag::DIRNAMES);
        let idx = h.ints(tag::DIRINDEXES);
        let sizes = if h.ints(tag::LONGFILESIZES).is_empty() {
            h.ints(tag::FILESIZES)
        } else {
            h.ints(tag::LONGFILESIZES)
        };
        h.strings(tag::BASENAMES)
            .iter()
            .enumerate()
            .map(|(i, base)| {
                let dir = idx
                    .get(i)
                    .and_then(|&d| dirs.get(d as usize))
                    .map(String::as_str)
                    .unwrap_or("/");
                RpmFile {
                    path: format!("{dir}{base}"),
                    mode: h.ints(tag::FILEMODES).get(i).copied().unwrap_or(0) as u32,
                    size: sizes.get(i).copied().unwrap_or(0),
                    digest: h
                        .strings(tag::FILEDIGESTS)
                        .get(i)
                        .cloned()
                        .unwrap_or_default(),
                    link: h
                        .strings(tag::FILELINKTOS)
                        .get(i)
                        .cloned()
                        .unwrap_or_default(),
                }
            })
            .collect()
    }

    /// Scriptlets: script tag -> (interpreter, body).
    pub fn scripts(&self) -> BTreeMap<u32, (String, String)> {
        let mut out = BTreeMap::new();
        for (script, prog) in SCRIPT_TAGS {
            if let Some(body) = self.header.string(script) {
                let interp = self.header.string(prog).unwrap_or("/bin/sh").to_string();
                out.insert(script, (interp, body.to_string()));
            }
        }
        out
    }

    /// Paths (relative) flagged %config.
    pub fn config_files(&self) -> Vec<String> {
        let flags = self.header.ints(tag::FILEFLAGS);
        self.files()
            .into_iter()
            .enumerate()
            .filter(|(i, _)| {
                flags
                    .get(*i)
                    .is_some_and(|f| f & u64::from(FILE_CONFIG) != 0)
            })
            .map(|(_, f)| f.path.trim_start_matches('/').to_string())
            .collect()
    }

    /// Installed size.
    pub fn installed_size(&self) -> u64 {
        self.header
            .int(tag::LONGSIZE)
            .or(self.header.int(tag::SIZE))
            .unwrap_or(0)
    }

    /// Uncompressed payload size from the signature.
    pub fn archive_size(&self) -> u64 {
        self.signature
            .int(tag::SIG_LONGARCHIVESIZE)
            .or(self.signature.int(tag::SIG_PAYLOADSIZE))
            .unwrap_or(0)
    }

    fn payload_compression(&self) -> Result<Compression, PackageError> {
        match self.header.string(tag::PAYLOADCOMPRESSOR).unwrap_or("gzip") {
            "gzip" => Ok(Compression::Gzip),
            "xz" => Ok(Compression::Xz),
            "zstd" => Ok(Compression::Zstd),
            "identity" => Ok(Compression::None),
            other => Err(PackageError::corrupt(
                &self.path,
                format!("unsupported payload compressor {other:?}"),
            )),
        }
    }

    /// Calls `f` for every payload entry (name normalized to a relative
    /// path) with a reader over its data, then checks the payload digest.
    pub fn for_each_entry<F>(&self, mut f: F) -> Result<(), PackageError>
    where
        F: FnMut(&str, u32, u64, &mut dyn Read) -> Result<(), PackageError>,
    {
        let path = &self.path;
        let mut file = File::open(path).map_err(|e| PackageError::io("cannot open", path, e))?;
        file.seek(SeekFrom::Start(self.header.end))
            .map_err(|e| PackageError::io("cannot read", path, e))?;
        let mut hashing = HashingReader::new(BufReader::with_capacity(1 << 20, file));
        {
            let dec = decoder(&mut hashing, self.payload_compression()?)
                .map_err(|e| PackageError::corrupt(path, e.to_string()))?;
            let mut cpio = CpioReader::new(dec);
            loop {
                let entry = cpio
                    .next_entry()
                    .map_err(|e| PackageError::corrupt(path, format!("payload: {e}")))?;
                let Some(entry) = entry else { break };
                let Some(rel) = crate::tree::normalize_member(&entry.name)
                    .map_err(|why| PackageError::unsafe_path(path, &entry.name, why))?
                else {
                    continue;
                };
                let mut data = cpio.data();
                f(&rel, entry.mode, entry.size, &mut data)?;
            }
            // Drain what the decoder did not need so the digest covers all.
        }
        io::copy(&mut hashing, &mut io::sink())
            .map_err(|e| PackageError::io("cannot read", path, e))?;
        let (sha, _) = hashing.finish();
        if let Some(want) = self.header.strings(tag::PAYLOADDIGEST).first() {
            if self.header.int(tag::PAYLOADDIGESTALGO) == Some(u64::from(PGPHASHALGO_SHA256))
                && !hex::encode(sha).eq_ignore_ascii_case(want)
            {
                return Err(PackageError::corrupt(
                    path,
                    "payload SHA256 digest mismatch",
                ));
            }
        }
        Ok(())
    }

    /// Extracts the payload into `dest` (existing, empty), refusing
    /// anything that would land outside it (see [`crate::extract`]), and
    /// checks the payload digest.
    pub fn extract(&self, dest: &Path) -> Result<(), PackageError> {
        let mut x = crate::extract::Extractor::new(dest, &self.path)?;
        self.for_each_entry(|path, mode, size, data| match mode & 0o170000 {
            0o040000 => x.dir(path, mode),
            0o120000 => {
                if size > 4096 {
                    return Err(PackageError::corrupt(
                        &self.path,
                        format!("{path}: symlink target too long"),
                    ));
                }
                let mut target = String::new();
                data.read_to_string(&mut target)
                    .map_err(|e| PackageError::corrupt(&self.path, format!("{path}: {e}")))?;
                x.symlink(path, &target)
            }
            0o100000 => x.file(path, mode, size, data),
            _ => Err(PackageError::unsafe_path(&self.path, path, "special file")),
        })
    }

    /// Verifies the payload digest by reading the whole payload.
    pub fn verify_payload(&self) -> Result<(), PackageError> {
        let path = &self.path;
        let Some(want) = self.header.strings(tag::PAYLOADDIGEST).first() else {
            return Ok(());
        };
        if self.header.int(tag::PAYLOADDIGESTALGO) != Some(u64::from(PGPHASHALGO_SHA256)) {
            return Ok(());
        }
        let mut file = File::open(path).map_err(|e| PackageError::io("cannot open", path, e))?;
        file.seek(SeekFrom::Start(self.header.end))
            .map_err(|e| PackageError::io("cannot read", path, e))?;
        let (_, sha) = sha256_reader(BufReader::with_capacity(1 << 20, file))
            .map_err(|e| PackageError::io("cannot read", path, e))?;
        if !hex::encode(sha).eq_ignore_ascii_case(want) {
            return Err(PackageError::corrupt(
                path,
                "payload SHA256 digest mismatch",
            ));
        }
        Ok(())
    }
}
