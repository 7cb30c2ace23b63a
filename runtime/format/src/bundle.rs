//! Offload bundles inside `.hip_fatbin` (docs/formats.md section 5).
//!
//! A `.hip_fatbin` section is a sequence of bundles, one per translation unit
//! (or one per device link with `-fgpu-rdc`), with zero padding between them
//! (the linker aligns each to 4096). Each bundle is either uncompressed
//! (`__CLANG_OFFLOAD_BUNDLE__` header listing entries) or a compressed bundle
//! (`CCOB` header + zlib/zstd payload that decompresses to an uncompressed
//! bundle).
//!
//! Boundaries are always computed from headers: an uncompressed bundle ends at
//! the largest `offset + size` of its entries, a CCOB at its total size (v2/v3)
//! or at the end of its compressed stream (v1). Searching for the next magic
//! would be wrong: code objects can contain those bytes.
//!
//! Every size read from input is checked against the bytes actually present
//! before anything is allocated; decompression output is bounded by the
//! claimed size, which itself is capped relative to the compressed size.

use std::borrow::Cow;
use std::fmt;
use std::io::Read;

use md5::{Digest, Md5};

use crate::le;

#[cfg(feature = "write_core")]
mod write;
use crate::{Error, Result};
#[cfg(feature = "write_core")]
pub use write::{compress_ccob, write_bundle, write_bundle_aligned};

/// Magic of an uncompressed bundle (no NUL).
pub const BUNDLE_MAGIC: &[u8; 24] = b"__CLANG_OFFLOAD_BUNDLE__";
/// Magic of a compressed bundle.
pub const CCOB_MAGIC: &[u8; 4] = b"CCOB";
/// Alignment of code objects inside bundles written by clang for HIP
/// (`clang-offload-bundler -bundle-align=4096`); [`write_bundle`] uses it.
pub const HIP_BUNDLE_ALIGN: u64 = 4096;

/// Bytes of header before the first entry: magic + entry count.
const BUNDLE_HEADER_LEN: usize = 32;
/// Per-entry fixed fields: offset, size, triple length.
const ENTRY_FIXED_LEN: usize = 24;
/// Largest decompressed/compressed ratio accepted. Real bundles compress
/// about 3-10x (mostly code, some alignment padding); anything near this is a
/// zip bomb.
const MAX_RATIO: u64 = 1024;
/// Claimed sizes up to this are accepted whatever the compressed size
/// (tiny inputs legitimately have large ratios).
const MIN_SIZE_CAP: u64 = 64 * 1024;
/// No bundle is larger than this (also the u32 limit of v1/v2 headers).
const MAX_UNCOMPRESSED: u64 = 4 * 1024 * 1024 * 1024;
/// Longest triple accepted; real ones are under 64 bytes.
const MAX_TRIPLE_LEN: u64 = 4096;

/// Compression method of a CCOB (header field `method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CcobMethod {
    /// 0: zlib stream (RFC 1950).
    Zlib,
    /// 1: zstd frame.
    Zstd,
}

impl CcobMethod {
    /// The on-disk method number.
    pub fn code(self) -> u16 {
        match self {
            CcobMethod::Zlib => 0,
            CcobMethod::Zstd => 1,
        }
    }

    /// The method for an on-disk number.
    pub fn from_code(code: u16) -> Option<CcobMethod> {
        match code {
            0 => Some(CcobMethod::Zlib),
            1 => Some(CcobMethod::Zstd),
            _ => None,
        }
    }
}

impl fmt::Display for CcobMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CcobMethod::Zlib => "zlib",
            CcobMethod::Zstd => "zstd",
        })
    }
}

/// One entry of an uncompressed bundle header.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BundleEntry {
    /// `hipv4-amdgcn-amd-amdhsa--gfx1100`, `host-x86_64-unknown-linux`, ...
    pub triple: String,
    /// Offset of the code object from the start of the (uncompressed) bundle.
    pub offset: u64,
    /// Size of the code object in bytes.
    pub size: u64,
}

impl BundleEntry {
    /// True for the host entry (offload kind `host`), which carries no code.
    pub fn is_host(&self) -> bool {
        self.triple.starts_with("host-")
    }

    /// The target id: the text after the last `--` (`gfx90a:xnack+`). Old
    /// triples without `--` (`hip-amdgcn-amd-amdhsa-gfx906`: kind, 3-part
    /// triple, processor) give the fifth component if it is a `gfx` id.
    /// `None` for host entries and empty ids.
    pub fn target_id(&self) -> Option<&str> {
        if self.is_host() {
            return None;
        }
        let id = match self.triple.rfind("--") {
            Some(i) => self.triple.get(i + 2..)?,
            None => self
                .triple
                .splitn(5, '-')
                .nth(4)
                .filter(|id| id.starts_with("gfx"))?,
        };
        (!id.is_empty()).then_some(id)
    }
}

/// How a bundle is stored in the section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Plain `__CLANG_OFFLOAD_BUNDLE__`.
    None,
    /// `CCOB` header with these fields.
    Ccob {
        /// 1, 2 or 3.
        version: u16,
        /// zlib or zstd.
        method: CcobMethod,
        /// Whole CCOB size from the header (v2/v3); `None` for v1.
        total_size: Option<u64>,
        /// Size of the uncompressed bundle.
        uncompressed_size: u64,
        /// First 8 bytes of the MD5 of the uncompressed bundle, read as a
        /// little-endian u64 (clang's `MD5Result::low()`).
        hash: u64,
    },
}

/// One bundle of a `.hip_fatbin` section.
#[derive(Debug, Clone)]
pub struct Bundle<'a> {
    /// Offset of the bundle in the section.
    pub offset: u64,
    /// Bytes the bundle occupies in the section (compressed size for CCOB).
    pub len: u64,
    /// Stored compressed or not.
    pub compression: Compression,
    /// Entries in header order.
    pub entries: Vec<BundleEntry>,
    /// The uncompressed bundle: borrowed from the section, or decompressed.
    pub data: Cow<'a, [u8]>,
}

impl<'a> Bundle<'a> {
    /// True if stored as a CCOB.
    pub fn is_compressed(&self) -> bool {
        matches!(self.compression, Compression::Ccob { .. })
    }

    /// The bytes of one entry (validated at parse time).
    pub fn entry_data(&self, entry: &BundleEntry) -> Option<&[u8]> {
        let start = usize::try_from(entry.offset).ok()?;
        let len = usize::try_from(entry.size).ok()?;
        self.data.get(start..start.checked_add(len)?)
    }

    /// Device code objects as `(target id, bytes)`, in header order; host
    /// entries are skipped.
    pub fn code_objects(&self) -> impl Iterator<Item = (&str, &[u8])> + '_ {
        self.entries
            .iter()
            .filter_map(|e| Some((e.target_id()?, self.entry_data(e)?)))
    }

    /// The code object for exactly `target_id`, if present.
    pub fn code_object(&self, target_id: &str) -> Option<&[u8]> {
        self.code_objects()
            .find(|(t, _)| *t == target_id)
            .map(|(_, d)| d)
    }

    /// Converts borrowed data into owned data.
    pub fn into_owned(self) -> Bundle<'static> {
        Bundle {
            offset: self.offset,
            len: self.len,
            compression: self.compression,
            entries: self.entries,
            data: Cow::Owned(self.data.into_owned()),
        }
    }
}

/// Parses every bundle of a `.hip_fatbin` section. Zero bytes between
/// bundles are padding; any other byte that does not start a bundle is an
/// error. An empty (or all-zero) section gives no bundles. Every CCOB is
/// decompressed into memory: splitting uses [`scan_fatbin`] instead.
pub fn parse_fatbin(section: &[u8]) -> Result<Vec<Bundle<'_>>> {
    walk_fatbin(section, |s, at| {
        let b = parse_bundle_at(s, at)?;
        Ok((b.len, b))
    })
}

/// Locates every bundle of a `.hip_fatbin` section like [`parse_fatbin`],
/// without reading its code objects: a CCOB is decompressed only as far as
/// its header (a v1 zlib CCOB, which has no size field, is decompressed
/// once to a sink to find its end). Memory stays at the headers whatever
/// the bundles hold; [`BundleRef::stream_code_objects`] reads them later.
pub fn scan_fatbin(section: &[u8]) -> Result<Vec<BundleRef<'_>>> {
    walk_fatbin(section, |s, at| {
        let b = scan_bundle_at(s, at)?;
        Ok((b.len, b))
    })
}

/// The bundle walk shared by [`parse_fatbin`] and [`scan_fatbin`]: `parse`
/// reads the bundle at an offset and says how long it is.
fn walk_fatbin<'a, T>(
    section: &'a [u8],
    parse: impl Fn(&'a [u8], usize) -> Result<(u64, T)>,
) -> Result<Vec<T>> {
    let mut bundles = Vec::new();
    let mut pos = 0usize;
    while let Some(rest) = section.get(pos..) {
        pos += rest.iter().take_while(|&&b| b == 0).count();
        if pos >= section.len() {
            break;
        }
        let (len, bundle) = parse(section, pos)?;
        let len = usize::try_from(len)
            .map_err(|_| Error::format("offload bundle", pos as u64, "length overflows usize"))?;
        // Every bundle has a non-empty header, so this always advances.
        pos = pos.saturating_add(len.max(1));
        bundles.push(bundle);
    }
    Ok(bundles)
}

/// What starts at `offset`: a plain bundle, a CCOB, or an error naming the
/// bytes found.
enum BundleStart<'a> {
    Plain(&'a [u8]),
    Ccob(&'a [u8]),
}

fn bundle_start(section: &[u8], offset: usize) -> Result<BundleStart<'_>> {
    let rest = section.get(offset..).ok_or_else(|| {
        Error::format(
            "offload bundle",
            offset as u64,
            format!(
                "offset past the end of the section ({} bytes)",
                section.len()
            ),
        )
    })?;
    if rest.starts_with(BUNDLE_MAGIC) {
        Ok(BundleStart::Plain(rest))
    } else if rest.starts_with(CCOB_MAGIC) {
        Ok(BundleStart::Ccob(rest))
    } else {
        let head: Vec<String> = rest.iter().take(8).map(|b| format!("{b:02x}")).collect();
        Err(Error::format(
            "offload bundle",
            offset as u64,
            format!(
                "no bundle magic (__CLANG_OFFLOAD_BUNDLE__ or CCOB); found bytes {}",
                head.join(" ")
            ),
        ))
    }
}

/// The entries and bytes of the plain bundle at the start of `rest`.
fn plain_bundle(rest: &[u8], offset: u64) -> Result<(Vec<BundleEntry>, &[u8])> {
    let (entries, end) = parse_entries(rest, offset, "offload bundle")?;
    let data = rest
        .get(..end)
        .ok_or_else(|| Error::format("offload bundle", offset, "bundle end past the section"))?;
    Ok((entries, data))
}

/// Parses the bundle (plain or CCOB) starting at `offset` of `section`.
pub fn parse_bundle_at(section: &[u8], offset: usize) -> Result<Bundle<'_>> {
    match bundle_start(section, offset)? {
        BundleStart::Plain(rest) => {
            let (entries, data) = plain_bundle(rest, offset as u64)?;
            Ok(Bundle {
                offset: offset as u64,
                len: data.len() as u64,
                compression: Compression::None,
                entries,
                data: Cow::Borrowed(data),
            })
        }
        BundleStart::Ccob(rest) => parse_ccob(rest, offset as u64),
    }
}

/// A bundle located and its entries listed, code objects not yet read (see
/// [`scan_fatbin`]).
#[derive(Debug, Clone)]
pub struct BundleRef<'a> {
    /// Offset of the bundle in the section.
    pub offset: u64,
    /// Bytes the bundle occupies in the section (compressed size for CCOB).
    pub len: u64,
    /// Stored compressed or not.
    pub compression: Compression,
    /// Entries in header order.
    pub entries: Vec<BundleEntry>,
    /// Plain: the bundle; CCOB: the whole CCOB, header included.
    bytes: &'a [u8],
}

/// Bytes a zstd frame's decoder allocates for its window, from the frame
/// header (RFC 8878 section 3.1.1.1): the window descriptor, or the content
/// size for a single-segment frame. `None` when the header is unreadable.
fn zstd_window(frame: &[u8], content: u64) -> Option<u64> {
    let descriptor = *frame.get(4)?;
    if descriptor & 0x20 != 0 {
        return Some(content);
    }
    let wd = *frame.get(5)?;
    let log = 10 + u32::from(wd >> 3);
    let base = 1u64.checked_shl(log)?;
    Some((base + base / 8 * u64::from(wd & 7)).min(content))
}

impl<'a> BundleRef<'a> {
    /// True if stored as a CCOB.
    pub fn is_compressed(&self) -> bool {
        matches!(self.compression, Compression::Ccob { .. })
    }

    /// The bundle's bytes in the section (a CCOB's compressed ones).
    pub fn raw(&self) -> &'a [u8] {
        self.bytes
    }

    /// Device code objects as `(target id, size)`, in header order (host
    /// entries skipped), like [`Bundle::code_objects`].
    pub fn targets(&self) -> impl Iterator<Item = (&str, u64)> + '_ {
        self.entries
            .iter()
            .filter_map(|e| Some((e.target_id()?, e.size)))
    }

    /// Memory that [`BundleRef::stream_code_objects`] needs besides the
    /// code object it hands out: a zstd decoder's window (up to the
    /// decompressed size, as the frame header says) and its buffers; a
    /// zlib decoder's 32 KiB window; nothing for a plain bundle.
    pub fn decoder_memory(&self) -> u64 {
        const BUFFERS: u64 = 256 << 10;
        match self.compression {
            Compression::None => 0,
            Compression::Ccob {
                method: CcobMethod::Zlib,
                ..
            } => BUFFERS,
            Compression::Ccob {
                version,
                uncompressed_size,
                ..
            } => {
                let header_len = ccob_header_len(version);
                let window = self
                    .bytes
                    .get(header_len..)
                    .and_then(|frame| zstd_window(frame, uncompressed_size))
                    .unwrap_or(uncompressed_size);
                window.saturating_add(BUFFERS)
            }
        }
    }

    /// Hands every device code object to `f`, one at a time, in offset
    /// order (ties in header order): borrowed from the section for a plain
    /// bundle, decompressed on the fly for a CCOB, so memory stays at one
    /// code object plus [`BundleRef::decoder_memory`]. Entries whose bytes
    /// overlap (never written by clang) are read together and copied out.
    /// A CCOB's size and MD5 are checked once its stream ends: on a
    /// mismatch `f` has already seen its code objects, and the caller must
    /// discard what it made of them.
    pub fn stream_code_objects<E: From<Error>>(
        &self,
        mut f: impl FnMut(&BundleEntry, Cow<'a, [u8]>) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let mut order: Vec<&BundleEntry> = self
            .entries
            .iter()
            .filter(|e| e.target_id().is_some())
            .collect();
        order.sort_by_key(|e| e.offset);
        let bytes: &'a [u8] = self.bytes;
        let mut inflow = match self.compression {
            Compression::None => {
                for e in order {
                    let data = usize::try_from(e.offset)
                        .ok()
                        .zip(usize::try_from(e.size).ok())
                        .and_then(|(at, n)| bytes.get(at..at.checked_add(n)?))
                        .ok_or_else(|| {
                            Error::format("offload bundle", self.offset, "entry past the bundle")
                        })?;
                    f(e, Cow::Borrowed(data))?;
                }
                return Ok(());
            }
            Compression::Ccob { .. } => {
                let (h, payload) = ccob_payload(bytes, self.offset)?;
                Inflow::open(&h, payload, self.offset)?
            }
        };
        let mut i = 0;
        while let Some(first) = order.get(i) {
            let start = first.offset;
            let mut end = start.saturating_add(first.size);
            let mut j = i + 1;
            while let Some(e) = order.get(j).filter(|e| e.offset < end) {
                end = end.max(e.offset.saturating_add(e.size));
                j += 1;
            }
            inflow.skip_to(start)?;
            let len =
                usize::try_from(end - start).map_err(|_| inflow.fail(&"entry overflows usize"))?;
            let mut buf = vec![0u8; len];
            inflow.read_exact(&mut buf)?;
            match order.get(i..j) {
                Some([only]) => f(only, Cow::Owned(buf))?,
                Some(cluster) => {
                    for e in cluster {
                        let at = (e.offset - start) as usize;
                        // Entries of a cluster lie inside it, by construction.
                        let piece = usize::try_from(e.size)
                            .ok()
                            .and_then(|size| buf.get(at..at.checked_add(size)?))
                            .ok_or_else(|| inflow.fail(&"entry outside its cluster"))?;
                        f(e, Cow::Owned(piece.to_vec()))?;
                    }
                }
                None => {}
            }
            i = j;
        }
        inflow.finish()?;
        Ok(())
    }
}

/// Locates the bundle at `offset` of `section` and lists its entries (see
/// [`scan_fatbin`]).
pub fn scan_bundle_at(section: &[u8], offset: usize) -> Result<BundleRef<'_>> {
    let base = offset as u64;
    match bundle_start(section, offset)? {
        BundleStart::Plain(rest) => {
            let (entries, data) = plain_bundle(rest, base)?;
            Ok(BundleRef {
                offset: base,
                len: data.len() as u64,
                compression: Compression::None,
                entries,
                bytes: data,
            })
        }
        BundleStart::Ccob(rest) => {
            let (h, payload) = ccob_payload(rest, base)?;
            let mut inflow = Inflow::open(&h, payload, base)?;
            // Grow a prefix of the decompressed bundle until its header parses.
            let mut prefix = Vec::new();
            let mut want = 64u64 << 10;
            let entries = loop {
                let target = want.min(h.uncompressed_size) as usize;
                let have = prefix.len();
                prefix.resize(target, 0);
                let more = prefix
                    .get_mut(have..)
                    .ok_or_else(|| inflow.fail(&"header prefix shrank"))?;
                inflow.read_exact(more)?;
                match parse_entries_within(
                    &prefix,
                    h.uncompressed_size,
                    0,
                    "decompressed offload bundle",
                ) {
                    Ok((entries, _)) => break entries,
                    Err(HeaderError::Bad(e)) => return Err(e),
                    Err(HeaderError::NeedMore) => want = want.saturating_mul(4),
                }
            };
            let len = match h.total_size {
                Some(total) => total,
                // v1: the stream's end is the bundle's end (decompressed
                // once here, so checked here too).
                None => (h.header_len + inflow.finish()?) as u64,
            };
            let bytes = rest
                .get(..usize::try_from(len).unwrap_or(usize::MAX))
                .ok_or_else(|| {
                    Error::format("compressed offload bundle", base, "past the section")
                })?;
            Ok(BundleRef {
                offset: base,
                len,
                compression: h.compression(),
                entries,
                bytes,
            })
        }
    }
}

/// Parses the header of the uncompressed bundle at the start of `data` (which
/// may continue past the bundle). Returns the entries and the bundle end.
/// `base` is only for error offsets.
fn parse_entries(data: &[u8], base: u64, what: &'static str) -> Result<(Vec<BundleEntry>, usize)> {
    match parse_entries_within(data, data.len() as u64, base, what) {
        Ok((entries, end)) => Ok((entries, end as usize)),
        Err(HeaderError::Bad(e)) => Err(e),
        // Unreachable with total == data.len(): every truncation is final.
        Err(HeaderError::NeedMore) => Err(Error::format(what, base, "truncated header")),
    }
}

/// Why a header did not parse: bad, or (streaming) more bytes are needed.
enum HeaderError {
    NeedMore,
    Bad(Error),
}

/// [`parse_entries`] on a prefix `data` of a bundle of `total` bytes:
/// entries are checked against `total`; a header running past the prefix
/// (but not past `total`) gives [`HeaderError::NeedMore`]. The end is the
/// bundle end (at most `total`).
fn parse_entries_within(
    data: &[u8],
    total: u64,
    base: u64,
    what: &'static str,
) -> std::result::Result<(Vec<BundleEntry>, u64), HeaderError> {
    let bad =
        |at: usize, detail: String| HeaderError::Bad(Error::format(what, base + at as u64, detail));
    // A read past the prefix: more bytes may help only if the bundle has them.
    let short = |at: usize, detail: String| {
        if (data.len() as u64) < total {
            HeaderError::NeedMore
        } else {
            bad(at, detail)
        }
    };
    match data.get(..BUNDLE_MAGIC.len()) {
        Some(m) if m == &BUNDLE_MAGIC[..] => {}
        Some(_) => return Err(bad(0, "missing __CLANG_OFFLOAD_BUNDLE__ magic".into())),
        None => return Err(short(0, "missing __CLANG_OFFLOAD_BUNDLE__ magic".into())),
    }
    let count = le::u64_at(data, BUNDLE_MAGIC.len())
        .ok_or_else(|| short(BUNDLE_MAGIC.len(), "truncated entry count".into()))?;
    // Each entry needs at least its fixed fields: bounds the allocation.
    let room = total.saturating_sub(BUNDLE_HEADER_LEN as u64) / ENTRY_FIXED_LEN as u64;
    if count > room {
        return Err(bad(
            BUNDLE_MAGIC.len(),
            format!("entry count {count} cannot fit in {total} bytes"),
        ));
    }
    let mut entries = Vec::with_capacity(count as usize);
    let mut pos = BUNDLE_HEADER_LEN;
    let mut end = 0u64;
    for i in 0..count {
        let (Some(offset), Some(size), Some(triple_len)) = (
            le::u64_at(data, pos),
            le::u64_at(data, pos + 8),
            le::u64_at(data, pos + 16),
        ) else {
            return Err(short(pos, format!("entry {i}: truncated")));
        };
        pos += ENTRY_FIXED_LEN;
        if triple_len > MAX_TRIPLE_LEN {
            return Err(bad(
                pos - 8,
                format!("entry {i}: triple length {triple_len}"),
            ));
        }
        let triple_end = pos + triple_len as usize;
        let triple = data.get(pos..triple_end).ok_or_else(|| {
            short(
                pos,
                format!("entry {i}: triple of {triple_len} bytes truncated"),
            )
        })?;
        let triple = std::str::from_utf8(triple)
            .map_err(|_| bad(pos, format!("entry {i}: triple is not UTF-8")))?
            .to_string();
        pos = triple_end;
        let entry_end = offset
            .checked_add(size)
            .filter(|&e| e <= total)
            .ok_or_else(|| {
                bad(
                    pos,
                    format!(
                        "entry {i} ({triple}): [{offset}, +{size}) is past the end of the data ({total} bytes)"
                    ),
                )
            })?;
        end = end.max(entry_end);
        entries.push(BundleEntry {
            triple,
            offset,
            size,
        });
    }
    let header_end = pos as u64;
    if let Some(e) = entries.iter().find(|e| e.size > 0 && e.offset < header_end) {
        return Err(bad(
            0,
            format!(
                "entry {} at offset {} overlaps the header ({header_end} bytes)",
                e.triple, e.offset
            ),
        ));
    }
    Ok((entries, end.max(header_end)))
}

/// Fields of a CCOB header.
struct CcobHeader {
    version: u16,
    method: CcobMethod,
    header_len: usize,
    total_size: Option<u64>,
    uncompressed_size: u64,
    hash: u64,
}

fn parse_ccob_header(data: &[u8], base: u64) -> Result<CcobHeader> {
    let what = "compressed offload bundle";
    let trunc = |at: usize| Error::format(what, base + at as u64, "truncated header");
    let version = le::u16_at(data, 4).ok_or_else(|| trunc(4))?;
    let method_code = le::u16_at(data, 6).ok_or_else(|| trunc(6))?;
    let (header_len, total_size, uncompressed_size, hash) = match version {
        1 => (
            20,
            None,
            u64::from(le::u32_at(data, 8).ok_or_else(|| trunc(8))?),
            le::u64_at(data, 12).ok_or_else(|| trunc(12))?,
        ),
        2 => (
            24,
            Some(u64::from(le::u32_at(data, 8).ok_or_else(|| trunc(8))?)),
            u64::from(le::u32_at(data, 12).ok_or_else(|| trunc(12))?),
            le::u64_at(data, 16).ok_or_else(|| trunc(16))?,
        ),
        3 => (
            32,
            Some(le::u64_at(data, 8).ok_or_else(|| trunc(8))?),
            le::u64_at(data, 16).ok_or_else(|| trunc(16))?,
            le::u64_at(data, 24).ok_or_else(|| trunc(24))?,
        ),
        v => {
            return Err(Error::UnsupportedVersion {
                what: "compressed offload bundle (CCOB)",
                found: u64::from(v),
                supported: "1, 2, 3",
            })
        }
    };
    let method = CcobMethod::from_code(method_code).ok_or_else(|| {
        Error::format(
            what,
            base + 6,
            format!("unknown compression method {method_code} (0 = zlib, 1 = zstd)"),
        )
    })?;
    Ok(CcobHeader {
        version,
        method,
        header_len,
        total_size,
        uncompressed_size,
        hash,
    })
}

/// Header length of a CCOB `version` (1, 2, 3; others never pass
/// [`parse_ccob_header`]).
fn ccob_header_len(version: u16) -> usize {
    match version {
        1 => 20,
        2 => 24,
        _ => 32,
    }
}

impl CcobHeader {
    fn compression(&self) -> Compression {
        Compression::Ccob {
            version: self.version,
            method: self.method,
            total_size: self.total_size,
            uncompressed_size: self.uncompressed_size,
            hash: self.hash,
        }
    }
}

/// The largest uncompressed size accepted for `compressed_len` input bytes.
fn size_cap(compressed_len: usize) -> u64 {
    (compressed_len as u64)
        .saturating_mul(MAX_RATIO)
        .clamp(MIN_SIZE_CAP, MAX_UNCOMPRESSED)
}

/// A CCOB's header and compressed payload: `[header_len, total_size)` for
/// v2/v3; for v1 the rest of the section (the decoder stops at the end of
/// the first stream). The claimed size is checked against the ratio cap.
fn ccob_payload(data: &[u8], base: u64) -> Result<(CcobHeader, &[u8])> {
    let what = "compressed offload bundle";
    let h = parse_ccob_header(data, base)?;
    let payload_end = match h.total_size {
        Some(total) => {
            if total < h.header_len as u64 || total > data.len() as u64 {
                return Err(Error::format(
                    what,
                    base + 8,
                    format!(
                        "total size {total} outside [{}, {}] (header to end of section)",
                        h.header_len,
                        data.len()
                    ),
                ));
            }
            total as usize
        }
        None => data.len(),
    };
    let payload = data
        .get(h.header_len..payload_end)
        .ok_or_else(|| Error::format(what, base, "truncated header"))?;
    if h.uncompressed_size > size_cap(payload.len()) {
        return Err(Error::format(
            what,
            base + 8,
            format!(
                "claims {} uncompressed bytes from {} compressed bytes (limit {})",
                h.uncompressed_size,
                payload.len(),
                size_cap(payload.len())
            ),
        ));
    }
    Ok((h, payload))
}

fn parse_ccob(data: &[u8], base: u64) -> Result<Bundle<'static>> {
    let (h, payload) = ccob_payload(data, base)?;
    let mut inflow = Inflow::open(&h, payload, base)?;
    // Never more than the claimed size; start small, the Vec grows with
    // real output only.
    let mut decompressed =
        Vec::with_capacity(h.uncompressed_size.min(payload.len() as u64 * 8) as usize);
    inflow.read_to_end(&mut decompressed)?;
    let consumed = inflow.finish()?;
    let (entries, _end) = parse_entries(&decompressed, 0, "decompressed offload bundle")?;
    let len = match h.total_size {
        Some(total) => total,
        None => (h.header_len + consumed) as u64,
    };
    Ok(Bundle {
        offset: base,
        len,
        compression: h.compression(),
        entries,
        data: Cow::Owned(decompressed),
    })
}

/// A CCOB payload's decoder.
enum Decoder<'a> {
    Zlib(flate2::bufread::ZlibDecoder<&'a [u8]>),
    Zstd(zstd::stream::read::Decoder<'static, &'a [u8]>, usize),
}

impl Read for Decoder<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Decoder::Zlib(d) => d.read(buf),
            Decoder::Zstd(d, _) => d.read(buf),
        }
    }
}

/// The decompressed bytes of a CCOB as a stream: never more than the
/// claimed size (+1 to detect overruns), counted and hashed as they pass,
/// so [`Inflow::finish`] can check size and MD5 without holding the data.
struct Inflow<'a> {
    dec: std::io::Take<Decoder<'a>>,
    md5: Md5,
    pos: u64,
    method: CcobMethod,
    expected: u64,
    hash: u64,
    /// Offsets of the bundle and of its payload, for errors.
    bundle: u64,
    base: u64,
}

impl<'a> Inflow<'a> {
    /// With no total size (CCOB v1) only the first zlib stream / zstd
    /// frame is read.
    fn open(h: &CcobHeader, payload: &'a [u8], bundle: u64) -> Result<Inflow<'a>> {
        let base = bundle + h.header_len as u64;
        let fail = |e: &dyn fmt::Display| {
            Error::Decompression(format!("{} payload at offset {base}: {e}", h.method))
        };
        let expected = h.uncompressed_size;
        let dec = match h.method {
            CcobMethod::Zlib => Decoder::Zlib(flate2::bufread::ZlibDecoder::new(payload)),
            CcobMethod::Zstd => {
                let frame = if h.total_size.is_none() {
                    let n = zstd::zstd_safe::find_frame_compressed_size(payload)
                        .map_err(|code| fail(&zstd::zstd_safe::get_error_name(code)))?;
                    payload
                        .get(..n)
                        .ok_or_else(|| fail(&"frame size past the data"))?
                } else {
                    payload
                };
                let mut dec =
                    zstd::stream::read::Decoder::with_buffer(frame).map_err(|e| fail(&e))?;
                // A window larger than the output is never needed; a hostile
                // frame header must not make the decoder allocate one.
                let bits = 64 - expected.saturating_sub(1).leading_zeros();
                dec.window_log_max((bits + 1).clamp(10, 31))
                    .map_err(|e| fail(&e))?;
                Decoder::Zstd(dec, frame.len())
            }
        };
        Ok(Inflow {
            dec: dec.take(expected.saturating_add(1)),
            md5: Md5::new(),
            pos: 0,
            method: h.method,
            expected,
            hash: h.hash,
            bundle,
            base,
        })
    }

    fn fail(&self, e: &dyn fmt::Display) -> Error {
        Error::Decompression(format!(
            "{} payload at offset {}: {e}",
            self.method, self.base
        ))
    }

    /// Reads up to `buf.len()` bytes; 0 only at the end of the stream.
    fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        let n = self.dec.read(buf).map_err(|e| self.fail(&e))?;
        let got = buf
            .get(..n)
            .ok_or_else(|| self.fail(&"decoder reported more bytes than it was given room for"))?;
        self.md5.update(got);
        self.pos += n as u64;
        Ok(n)
    }

    fn read_exact(&mut self, mut buf: &mut [u8]) -> Result<()> {
        while !buf.is_empty() {
            let n = self.read(buf)?;
            if n == 0 {
                return Err(self.short());
            }
            buf = buf.get_mut(n..).ok_or_else(|| self.short())?;
        }
        Ok(())
    }

    fn read_to_end(&mut self, out: &mut Vec<u8>) -> Result<()> {
        let mut chunk = vec![0u8; 64 << 10];
        loop {
            let n = self.read(&mut chunk)?;
            if n == 0 {
                return Ok(());
            }
            out.extend_from_slice(chunk.get(..n).ok_or_else(|| self.short())?);
        }
    }

    /// Reads and drops bytes up to stream offset `to` (no-op if already
    /// there).
    fn skip_to(&mut self, to: u64) -> Result<()> {
        let mut chunk = [0u8; 16 << 10];
        while self.pos < to {
            let want = (to - self.pos).min(chunk.len() as u64) as usize;
            let room = chunk.get_mut(..want).ok_or_else(|| self.short())?;
            if self.read(room)? == 0 {
                return Err(self.short());
            }
        }
        Ok(())
    }

    fn short(&self) -> Error {
        self.fail(&format_args!(
            "decompressed to {} bytes, header says {}",
            self.pos, self.expected
        ))
    }

    /// Compressed bytes the decoder consumed so far.
    fn consumed(&self) -> usize {
        match self.dec.get_ref() {
            Decoder::Zlib(d) => d.total_in() as usize,
            Decoder::Zstd(_, frame_len) => *frame_len,
        }
    }

    /// Drains the rest of the stream and checks its size and MD5 (first 8
    /// bytes, little-endian: clang's `MD5Result::low()`). Returns the
    /// compressed bytes the stream took.
    fn finish(mut self) -> Result<usize> {
        self.skip_to(self.expected)?;
        let mut one = [0u8; 1];
        if self.pos > self.expected || self.read(&mut one)? != 0 {
            return Err(self.fail(&format_args!(
                "decompressed to {}+ bytes, header says {}",
                self.pos, self.expected
            )));
        }
        let consumed = self.consumed();
        let (method, base) = (self.method, self.base);
        let digest = self.md5.finalize();
        let actual = le::u64_at(&digest, 0).ok_or_else(|| {
            Error::Decompression(format!(
                "{method} payload at offset {base}: short MD5 digest"
            ))
        })?;
        if actual != self.hash {
            return Err(Error::Decompression(format!(
                "compressed offload bundle at offset {}: MD5 of the decompressed data \
                 {actual:#018x} does not match the header's {:#018x}",
                self.bundle, self.hash
            )));
        }
        Ok(consumed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let a: Vec<u8> = (0..3000u32).map(|i| (i * 7 % 251) as u8).collect();
        let b: Vec<u8> = b"\x7fELF CCOB __CLANG_OFFLOAD_BUNDLE__ inside".repeat(20);
        write_bundle(&[
            ("host-x86_64-unknown-linux", &[]),
            ("hipv4-amdgcn-amd-amdhsa--gfx1100", &a),
            ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+", &b),
        ])
    }

    #[test]
    fn writes_clang_layout_and_parses_back() {
        let bytes = sample();
        let bundles = parse_fatbin(&bytes).expect("parse");
        assert_eq!(bundles.len(), 1);
        let b = &bundles[0];
        assert_eq!(b.len as usize, bytes.len());
        assert_eq!(b.entries[0].offset, 4096);
        assert_eq!(b.entries[0].size, 0);
        assert_eq!(b.entries[1].offset, 4096);
        assert_eq!(b.entries[2].offset, 8192);
        let cos: Vec<_> = b.code_objects().map(|(t, d)| (t, d.len())).collect();
        assert_eq!(cos, [("gfx1100", 3000), ("gfx90a:xnack+", 820)]);
        assert_eq!(b.code_object("gfx1100").map(<[u8]>::len), Some(3000));
    }

    #[test]
    fn target_ids_from_triples() {
        let e = |t: &str| BundleEntry {
            triple: t.into(),
            offset: 0,
            size: 0,
        };
        assert_eq!(
            e("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+").target_id(),
            Some("gfx90a:xnack+")
        );
        assert_eq!(
            e("hip-amdgcn-amd-amdhsa-gfx906").target_id(),
            Some("gfx906")
        );
        assert_eq!(e("hip-amdgcn-amd-amdhsa").target_id(), None);
        assert_eq!(e("host-x86_64-unknown-linux--").target_id(), None);
        assert_eq!(e("host-x86_64-unknown-linux").target_id(), None);
        assert_eq!(e("hipv4-amdgcn-amd-amdhsa--").target_id(), None);
        assert!(e("host-x86_64-unknown-linux").is_host());
    }

    #[test]
    fn every_ccob_variant_round_trips() {
        let plain = sample();
        for version in 1..=3 {
            for method in [CcobMethod::Zlib, CcobMethod::Zstd] {
                let c = compress_ccob(&plain, version, method).expect("compress");
                let b = parse_bundle_at(&c, 0).expect("parse");
                assert_eq!(b.len as usize, c.len(), "v{version} {method}");
                assert_eq!(&b.data[..], &plain[..]);
                match b.compression {
                    Compression::Ccob {
                        version: v,
                        method: m,
                        uncompressed_size,
                        ..
                    } => {
                        assert_eq!(
                            (v, m, uncompressed_size),
                            (version, method, plain.len() as u64)
                        );
                    }
                    Compression::None => panic!("not compressed"),
                }
            }
        }
        assert!(compress_ccob(&plain, 4, CcobMethod::Zstd).is_err());
        assert!(compress_ccob(&plain, 0, CcobMethod::Zstd).is_err());
    }

    #[test]
    fn sequence_with_padding_and_v1_boundaries() {
        let plain = sample();
        let mut section = plain.clone();
        section.resize(section.len().next_multiple_of(4096), 0);
        let v1z = compress_ccob(&plain, 1, CcobMethod::Zlib).expect("v1 zlib");
        section.extend_from_slice(&v1z);
        section.extend_from_slice(&[0; 13]);
        let v1s = compress_ccob(&plain, 1, CcobMethod::Zstd).expect("v1 zstd");
        section.extend_from_slice(&v1s);
        section.extend_from_slice(&compress_ccob(&plain, 3, CcobMethod::Zstd).expect("v3"));
        section.extend_from_slice(&[0; 100]);
        let bundles = parse_fatbin(&section).expect("parse");
        assert_eq!(bundles.len(), 4);
        assert_eq!(bundles[1].len as usize, v1z.len());
        assert_eq!(
            bundles[2].offset as usize,
            bundles[1].offset as usize + v1z.len() + 13
        );
        assert_eq!(bundles[2].len as usize, v1s.len());
        for b in &bundles {
            assert_eq!(&b.data[..], &plain[..]);
        }
        // A non-zero byte between bundles is an error, not a skip.
        let mut bad = plain.clone();
        bad.extend_from_slice(&[0, 0, 1]);
        assert!(parse_fatbin(&bad).is_err());
        assert_eq!(parse_fatbin(&[0; 64]).map(|v| v.len()).ok(), Some(0));
    }

    #[test]
    fn hash_and_size_are_checked() {
        let plain = sample();
        let mut c = compress_ccob(&plain, 2, CcobMethod::Zstd).expect("compress");
        c[16] ^= 1;
        assert!(matches!(
            parse_bundle_at(&c, 0),
            Err(Error::Decompression(_))
        ));
        c[16] ^= 1;
        // Claim one byte more and one byte less than the real size.
        for delta in [1i64, -1] {
            let mut d = c.clone();
            let size = (plain.len() as i64 + delta) as u32;
            d[12..16].copy_from_slice(&size.to_le_bytes());
            assert!(parse_bundle_at(&d, 0).is_err(), "delta {delta}");
        }
    }

    #[test]
    fn zip_bomb_is_refused_before_allocating() {
        // 64 MiB of zeros compresses to a few KiB: above the ratio cap.
        let zeros = vec![0u8; 64 << 20];
        let c = compress_ccob(&zeros, 3, CcobMethod::Zstd).expect("compress");
        assert!(c.len() < 64 << 10);
        let err = parse_bundle_at(&c, 0).err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("claims")));
        // A header claiming 100 GB.
        let mut big = compress_ccob(&sample(), 3, CcobMethod::Zstd).expect("compress");
        big[16..24].copy_from_slice(&100_000_000_000u64.to_le_bytes());
        assert!(parse_bundle_at(&big, 0).is_err());
    }
}
