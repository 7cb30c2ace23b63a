//! Reading `.kpack` archives: header and TOC are parsed and validated at
//! open, blobs are touched only when a kernel is asked for.

use super::{
    CompressionScheme, TocEntry, FORMAT_VERSION, HEADER_SIZE, MAGIC, MAX_KERNEL_SIZE,
    MAX_ZSTD_RATIO,
};
use crate::error::{Error, Result};
use crate::msgpack::{Reader, Value};
use memmap2::Mmap;
use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::path::Path;
use std::sync::OnceLock;

/// A byte range inside the archive file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    offset: u64,
    len: u64,
}

enum Backing {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mapped(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// Frame-index failure, kept as plain data so the cached result can be
/// turned into a fresh [`Error`] on every call.
type FrameIndex = std::result::Result<Vec<Span>, (u64, String)>;

enum Blobs {
    /// `none`: blob spans from the TOC's `blobs` array, by ordinal.
    Plain(Vec<Span>),
    /// `zstd-per-kernel`: the region, its frame count, and the frame spans,
    /// found by walking the size prefixes on first use (so opening an
    /// archive reads no blob pages).
    Zstd {
        region: Span,
        num_frames: u32,
        frames: OnceLock<FrameIndex>,
    },
}

struct BinaryToc {
    name: String,
    arches: Vec<(String, TocEntry)>,
}

/// An open `.kpack` archive.
///
/// `Send + Sync`: [`Archive::kernel`] takes `&self` and may run on many
/// threads at once; each call decompresses with its own zstd context, and
/// the only shared mutable state is a once-initialised frame index.
pub struct Archive {
    data: Backing,
    group_name: String,
    gfx_arch_family: String,
    gfx_arches: Vec<String>,
    scheme: CompressionScheme,
    toc_offset: u64,
    toc: Vec<BinaryToc>,
    index: HashMap<String, usize>,
    blobs: Blobs,
}

impl fmt::Debug for Archive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Archive")
            .field("len", &self.file_len())
            .field("group_name", &self.group_name)
            .field("gfx_arch_family", &self.gfx_arch_family)
            .field("gfx_arches", &self.gfx_arches)
            .field("scheme", &self.scheme)
            .field("binaries", &self.toc.len())
            .finish()
    }
}

fn toc_err(toc_offset: u64, detail: impl Into<String>) -> Error {
    Error::format("kpack TOC", toc_offset, detail)
}

/// The pairs of a map with distinct str keys, or an error naming `what`.
fn map_of<'v>(v: &'v Value, what: &str, at: u64) -> Result<Vec<(&'v str, &'v Value)>> {
    v.map_entries().ok_or_else(|| {
        toc_err(
            at,
            format!(
                "{what} must be a map with distinct str keys, found {}",
                if v.as_map().is_some() {
                    "a map with repeated or non-str keys"
                } else {
                    v.type_name()
                }
            ),
        )
    })
}

fn str_of<'v>(v: &'v Value, what: &str, at: u64) -> Result<&'v str> {
    v.as_str()
        .ok_or_else(|| toc_err(at, format!("{what} must be a str, found {}", v.type_name())))
}

fn uint_of(v: &Value, what: &str, at: u64) -> Result<u64> {
    v.as_u64().ok_or_else(|| {
        toc_err(
            at,
            format!("{what} must be an unsigned int, found {}", v.type_name()),
        )
    })
}

fn required<'v>(v: Option<&'v Value>, what: &str, at: u64) -> Result<&'v Value> {
    v.ok_or_else(|| toc_err(at, format!("missing {what}")))
}

fn read_u32_le(data: &[u8], at: u64) -> Option<u32> {
    let start = usize::try_from(at).ok()?;
    let bytes = data.get(start..start.checked_add(4)?)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
}

fn read_u64_le(data: &[u8], at: u64) -> Option<u64> {
    let start = usize::try_from(at).ok()?;
    let bytes = data.get(start..start.checked_add(8)?)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

/// Everything parsed from header + TOC, before it is joined with the bytes.
struct Parsed {
    group_name: String,
    gfx_arch_family: String,
    gfx_arches: Vec<String>,
    scheme: CompressionScheme,
    toc_offset: u64,
    toc: Vec<BinaryToc>,
    blobs: Blobs,
}

fn parse(data: &[u8]) -> Result<Parsed> {
    let len = data.len() as u64;
    if len < HEADER_SIZE {
        return Err(Error::format(
            "kpack header",
            0,
            format!("file is {len} bytes, shorter than the {HEADER_SIZE}-byte header"),
        ));
    }
    if data.get(0..4) != Some(&MAGIC[..]) {
        return Err(Error::format(
            "kpack header",
            0,
            "bad magic (expected \"KPAK\")",
        ));
    }
    let version =
        read_u32_le(data, 4).ok_or_else(|| Error::format("kpack header", 4, "truncated"))?;
    if version != FORMAT_VERSION {
        return Err(Error::UnsupportedVersion {
            what: "kpack archive",
            found: u64::from(version),
            supported: "1",
        });
    }
    let toc_offset =
        read_u64_le(data, 8).ok_or_else(|| Error::format("kpack header", 8, "truncated"))?;
    if toc_offset < HEADER_SIZE || toc_offset >= len {
        return Err(Error::format(
            "kpack header",
            8,
            format!("toc_offset {toc_offset} outside [{HEADER_SIZE}, {len})"),
        ));
    }
    if data.get(16..64).is_some_and(|r| r.iter().any(|&b| b != 0)) {
        // Version 1 says zero; tolerated so a future writer's use of the
        // reserved bytes does not make archives unreadable.
        tracing::debug!("kpack header: reserved bytes are not zero");
    }

    let toc_bytes = usize::try_from(toc_offset)
        .ok()
        .and_then(|start| data.get(start..))
        .ok_or_else(|| Error::format("kpack header", 8, "toc_offset out of range"))?;
    let mut reader = Reader::with_base_offset(toc_bytes, toc_offset);
    let toc_value = reader.read_value()?;
    if reader.remaining() != 0 {
        return Err(toc_err(
            toc_offset,
            format!("{} bytes follow the TOC (nothing may)", reader.remaining()),
        ));
    }
    parse_toc(data, toc_offset, &toc_value)
}

fn parse_toc(data: &[u8], at: u64, toc_value: &Value) -> Result<Parsed> {
    let top = map_of(toc_value, "TOC", at)?;
    let get = |key: &str| top.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
    for (k, _) in &top {
        if !matches!(
            *k,
            "format_version"
                | "group_name"
                | "gfx_arch_family"
                | "gfx_arches"
                | "toc"
                | "compression_scheme"
                | "blobs"
                | "zstd_offset"
                | "zstd_size"
        ) {
            tracing::debug!(key = %k, "kpack TOC: ignoring unknown key");
        }
    }

    let version = uint_of(
        required(get("format_version"), "format_version", at)?,
        "format_version",
        at,
    )?;
    if version != u64::from(FORMAT_VERSION) {
        return Err(Error::UnsupportedVersion {
            what: "kpack TOC",
            found: version,
            supported: "1",
        });
    }
    let group_name = str_of(
        required(get("group_name"), "group_name", at)?,
        "group_name",
        at,
    )?;
    let gfx_arch_family = str_of(
        required(get("gfx_arch_family"), "gfx_arch_family", at)?,
        "gfx_arch_family",
        at,
    )?;

    let arches_v = required(get("gfx_arches"), "gfx_arches", at)?;
    let arches_list = arches_v.as_array().ok_or_else(|| {
        toc_err(
            at,
            format!(
                "gfx_arches must be an array, found {}",
                arches_v.type_name()
            ),
        )
    })?;
    let mut gfx_arches: Vec<String> = Vec::with_capacity(arches_list.len());
    for a in arches_list {
        let a = str_of(a, "gfx_arches element", at)?;
        if gfx_arches.iter().any(|seen| seen == a) {
            return Err(toc_err(at, format!("gfx_arches lists {a:?} twice")));
        }
        gfx_arches.push(a.to_owned());
    }

    let scheme_name = str_of(
        required(get("compression_scheme"), "compression_scheme", at)?,
        "compression_scheme",
        at,
    )?;
    let scheme = CompressionScheme::from_name(scheme_name)
        .ok_or_else(|| toc_err(at, format!("unknown compression_scheme {scheme_name:?}")))?;

    let toc_v = required(get("toc"), "toc", at)?;
    let mut toc: Vec<BinaryToc> = Vec::new();
    for (binary, arches_v) in map_of(toc_v, "toc", at)? {
        let mut arches = Vec::new();
        for (arch, entry_v) in map_of(arches_v, "toc entry map", at)? {
            if !gfx_arches.iter().any(|a| a == arch) {
                return Err(toc_err(
                    at,
                    format!("toc arch {arch:?} of {binary:?} is not listed in gfx_arches"),
                ));
            }
            arches.push((arch.to_owned(), parse_entry(entry_v, binary, arch, at)?));
        }
        toc.push(BinaryToc {
            name: binary.to_owned(),
            arches,
        });
    }

    let blobs = match scheme {
        CompressionScheme::None => {
            let blobs_v = required(get("blobs"), "blobs", at)?;
            let list = blobs_v.as_array().ok_or_else(|| {
                toc_err(
                    at,
                    format!("blobs must be an array, found {}", blobs_v.type_name()),
                )
            })?;
            let mut spans = Vec::with_capacity(list.len());
            for (i, b) in list.iter().enumerate() {
                let m = map_of(b, "blobs element", at)?;
                let field = |key: &str| {
                    let v = m.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
                    let what = format!("blobs[{i}].{key}");
                    uint_of(required(v, &what, at)?, &what, at)
                };
                let span = Span {
                    offset: field("offset")?,
                    len: field("size")?,
                };
                let end = span.offset.checked_add(span.len);
                if span.offset < HEADER_SIZE || !matches!(end, Some(end) if end <= at) {
                    return Err(toc_err(
                        at,
                        format!(
                            "blob {i} [{}, +{}) lies outside the blob region [{HEADER_SIZE}, {at})",
                            span.offset, span.len
                        ),
                    ));
                }
                spans.push(span);
            }
            for (binary, arch, e) in toc_entries(&toc) {
                let span = usize::try_from(e.ordinal).ok().and_then(|i| spans.get(i));
                match span {
                    None => {
                        return Err(toc_err(
                            at,
                            format!(
                                "{binary:?}/{arch:?}: ordinal {} but only {} blobs",
                                e.ordinal,
                                spans.len()
                            ),
                        ))
                    }
                    Some(s) if s.len != e.original_size => {
                        return Err(toc_err(
                            at,
                            format!(
                                "{binary:?}/{arch:?}: original_size {} but blob {} is {} bytes",
                                e.original_size, e.ordinal, s.len
                            ),
                        ))
                    }
                    Some(_) => {}
                }
            }
            Blobs::Plain(spans)
        }
        CompressionScheme::ZstdPerKernel => {
            let offset = uint_of(
                required(get("zstd_offset"), "zstd_offset", at)?,
                "zstd_offset",
                at,
            )?;
            let size = uint_of(
                required(get("zstd_size"), "zstd_size", at)?,
                "zstd_size",
                at,
            )?;
            let end = offset.checked_add(size);
            if offset < HEADER_SIZE || size < 4 || !matches!(end, Some(end) if end <= at) {
                return Err(toc_err(
                    at,
                    format!(
                        "zstd region [{offset}, +{size}) is not inside the blob region [{HEADER_SIZE}, {at})"
                    ),
                ));
            }
            let num_frames = read_u32_le(data, offset)
                .ok_or_else(|| Error::format("kpack zstd region", offset, "truncated"))?;
            // Each frame has at least its 4-byte size prefix.
            if u64::from(num_frames) > (size - 4) / 4 {
                return Err(Error::format(
                    "kpack zstd region",
                    offset,
                    format!("num_frames {num_frames} cannot fit in {size} bytes"),
                ));
            }
            let mut sizes: HashMap<u32, u64> = HashMap::new();
            for (binary, arch, e) in toc_entries(&toc) {
                if e.ordinal >= num_frames {
                    return Err(toc_err(
                        at,
                        format!(
                            "{binary:?}/{arch:?}: ordinal {} but only {num_frames} frames",
                            e.ordinal
                        ),
                    ));
                }
                if let Some(prev) = sizes.insert(e.ordinal, e.original_size) {
                    if prev != e.original_size {
                        return Err(toc_err(
                            at,
                            format!(
                                "entries sharing ordinal {} disagree on original_size ({prev} vs {})",
                                e.ordinal, e.original_size
                            ),
                        ));
                    }
                }
            }
            Blobs::Zstd {
                region: Span { offset, len: size },
                num_frames,
                frames: OnceLock::new(),
            }
        }
    };

    Ok(Parsed {
        group_name: group_name.to_owned(),
        gfx_arch_family: gfx_arch_family.to_owned(),
        gfx_arches,
        scheme,
        toc_offset: at,
        toc,
        blobs,
    })
}

fn parse_entry(v: &Value, binary: &str, arch: &str, at: u64) -> Result<TocEntry> {
    let what = |field: &str| format!("toc[{binary:?}][{arch:?}].{field}");
    let m = map_of(v, &what("entry"), at)?;
    let get = |key: &str| m.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
    let kind = str_of(required(get("type"), &what("type"), at)?, &what("type"), at)?;
    if kind != "hsaco" {
        tracing::debug!(binary, arch, kind, "kpack TOC: entry type is not \"hsaco\"");
    }
    let ordinal = uint_of(
        required(get("ordinal"), &what("ordinal"), at)?,
        &what("ordinal"),
        at,
    )?;
    let ordinal = u32::try_from(ordinal)
        .map_err(|_| toc_err(at, format!("{} {ordinal} exceeds u32", what("ordinal"))))?;
    let original_size = uint_of(
        required(get("original_size"), &what("original_size"), at)?,
        &what("original_size"),
        at,
    )?;
    if original_size > MAX_KERNEL_SIZE {
        return Err(toc_err(
            at,
            format!(
                "{} {original_size} exceeds the {MAX_KERNEL_SIZE}-byte limit",
                what("original_size")
            ),
        ));
    }
    let metadata = match get("metadata") {
        None => None,
        Some(v @ Value::Map(_)) => Some(v.clone()),
        Some(v) => {
            return Err(toc_err(
                at,
                format!(
                    "{} must be a map, found {}",
                    what("metadata"),
                    v.type_name()
                ),
            ))
        }
    };
    Ok(TocEntry {
        ordinal,
        original_size,
        metadata,
    })
}

fn toc_entries(toc: &[BinaryToc]) -> impl Iterator<Item = (&str, &str, &TocEntry)> {
    toc.iter().flat_map(|b| {
        b.arches
            .iter()
            .map(move |(a, e)| (b.name.as_str(), a.as_str(), e))
    })
}

/// Walks the `u32 size` prefixes of a zstd region.
fn build_frame_index(data: &[u8], region: Span, num_frames: u32) -> FrameIndex {
    let end = region
        .offset
        .checked_add(region.len)
        .ok_or((region.offset, "region end overflows".to_owned()))?;
    let mut pos = region.offset + 4;
    let mut frames = Vec::with_capacity(num_frames as usize);
    for i in 0..num_frames {
        let size = match read_u32_le(data, pos) {
            Some(s) if pos + 4 <= end => u64::from(s),
            _ => {
                return Err((
                    pos,
                    format!("size prefix of frame {i} runs past the region"),
                ))
            }
        };
        pos += 4;
        match pos.checked_add(size) {
            Some(frame_end) if frame_end <= end => {}
            _ => {
                return Err((
                    pos,
                    format!("frame {i} of {size} bytes runs past the region end {end}"),
                ))
            }
        }
        frames.push(Span {
            offset: pos,
            len: size,
        });
        pos += size;
    }
    if pos != end {
        return Err((
            pos,
            format!("{} unused bytes after the last frame", end - pos),
        ));
    }
    Ok(frames)
}

/// Decompresses one frame that must hold exactly `expected` bytes (when
/// known). Checks the declared content size against the TOC and against
/// [`MAX_ZSTD_RATIO`] before allocating anything.
fn decompress_frame(frame: &[u8], at: u64, expected: Option<u64>) -> Result<Vec<u8>> {
    let fail =
        |detail: String| Error::Decompression(format!("zstd frame at offset {at}: {detail}"));
    let content_size = match zstd::zstd_safe::get_frame_content_size(frame) {
        Ok(Some(n)) => n,
        Ok(None) => return Err(fail("frame header lacks the content size".into())),
        Err(_) => return Err(fail("not a valid zstd frame header".into())),
    };
    if let Some(expected) = expected {
        if content_size != expected {
            return Err(fail(format!(
                "frame declares {content_size} bytes, TOC original_size is {expected}"
            )));
        }
    }
    let ratio_cap = (frame.len() as u64).saturating_mul(MAX_ZSTD_RATIO);
    if content_size > MAX_KERNEL_SIZE || content_size > ratio_cap {
        return Err(fail(format!(
            "declared size {content_size} is impossible for a {}-byte frame",
            frame.len()
        )));
    }
    match zstd::zstd_safe::find_frame_compressed_size(frame) {
        Ok(n) if n == frame.len() => {}
        Ok(n) => {
            return Err(fail(format!(
                "region holds {} bytes but the frame is {n} bytes",
                frame.len()
            )))
        }
        Err(code) => {
            return Err(fail(format!(
                "malformed frame: {}",
                zstd::zstd_safe::get_error_name(code)
            )))
        }
    }
    let capacity =
        usize::try_from(content_size).map_err(|_| fail("size exceeds address space".into()))?;
    let out = zstd::bulk::decompress(frame, capacity).map_err(|e| fail(e.to_string()))?;
    if out.len() as u64 != content_size {
        return Err(fail(format!(
            "decompressed to {} bytes, frame declares {content_size}",
            out.len()
        )));
    }
    Ok(out)
}

impl Archive {
    /// Memory-maps and opens `path`, validating header and TOC.
    pub fn open(path: &Path) -> Result<Archive> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        if len < HEADER_SIZE {
            return Err(Error::format(
                "kpack header",
                0,
                format!(
                    "{}: file is {len} bytes, shorter than the header",
                    path.display()
                ),
            ));
        }
        // SAFETY: the mapping is read-only. Archives are installed read-only
        // and replaced by rename, never rewritten in place, so the bytes do
        // not change while mapped; every read below is bounds-checked.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        // Name the file in structural errors: a loader tries several.
        Self::from_backing(Backing::Mapped(map)).map_err(|e| match e {
            Error::InvalidFormat {
                what,
                offset,
                detail,
            } => Error::InvalidFormat {
                what,
                offset,
                detail: format!("{}: {detail}", path.display()),
            },
            Error::Msgpack { offset, detail } => Error::Msgpack {
                offset,
                detail: format!("{}: {detail}", path.display()),
            },
            other => other,
        })
    }

    /// Opens an archive held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Archive> {
        Self::from_backing(Backing::Owned(bytes))
    }

    fn from_backing(data: Backing) -> Result<Archive> {
        let p = parse(data.bytes())?;
        let mut index = HashMap::with_capacity(p.toc.len());
        for (i, b) in p.toc.iter().enumerate() {
            index.insert(b.name.clone(), i);
        }
        Ok(Archive {
            data,
            group_name: p.group_name,
            gfx_arch_family: p.gfx_arch_family,
            gfx_arches: p.gfx_arches,
            scheme: p.scheme,
            toc_offset: p.toc_offset,
            toc: p.toc,
            index,
            blobs: p.blobs,
        })
    }

    /// The component / artifact prefix the archive belongs to.
    pub fn group_name(&self) -> &str {
        &self.group_name
    }

    /// The family (or single target) the archive covers, e.g. `gfx110X`.
    pub fn gfx_arch_family(&self) -> &str {
        &self.gfx_arch_family
    }

    /// Every arch key used in the TOC, in the archive's order.
    pub fn gfx_arches(&self) -> &[String] {
        &self.gfx_arches
    }

    /// How blobs are stored.
    pub fn scheme(&self) -> CompressionScheme {
        self.scheme
    }

    /// Whether `arch` (an exact arch key) is listed in `gfx_arches`.
    pub fn has_arch(&self, arch: &str) -> bool {
        self.gfx_arches.iter().any(|a| a == arch)
    }

    /// Binary keys, sorted lexicographically.
    pub fn binaries(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.toc.iter().map(|b| b.name.as_str()).collect();
        names.sort_unstable();
        names
    }

    /// The TOC entry for an exact (binary key, arch key) pair.
    pub fn entry(&self, binary: &str, arch: &str) -> Option<&TocEntry> {
        let b = self.toc.get(*self.index.get(binary)?)?;
        b.arches.iter().find(|(a, _)| a == arch).map(|(_, e)| e)
    }

    /// Every (binary, arch, entry) in TOC order.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str, &TocEntry)> + '_ {
        toc_entries(&self.toc)
    }

    /// Number of distinct blobs (ordinals are `0..blob_count()`).
    pub fn blob_count(&self) -> u32 {
        match &self.blobs {
            Blobs::Plain(spans) => u32::try_from(spans.len()).unwrap_or(u32::MAX),
            Blobs::Zstd { num_frames, .. } => *num_frames,
        }
    }

    /// Absolute offset of the TOC.
    pub fn toc_offset(&self) -> u64 {
        self.toc_offset
    }

    /// Size of the archive in bytes.
    pub fn file_len(&self) -> u64 {
        self.data.bytes().len() as u64
    }

    /// Bytes between the header and the TOC.
    pub fn blob_region_len(&self) -> u64 {
        self.toc_offset - HEADER_SIZE
    }

    /// `(zstd_offset, zstd_size)` for zstd archives.
    pub fn zstd_region(&self) -> Option<(u64, u64)> {
        match &self.blobs {
            Blobs::Zstd { region, .. } => Some((region.offset, region.len)),
            Blobs::Plain(_) => None,
        }
    }

    /// Bytes blob `ordinal` occupies in the file (the frame size for zstd,
    /// without its prefix), e.g. for compression ratios.
    pub fn stored_size(&self, ordinal: u32) -> Result<u64> {
        Ok(self.blob_span(ordinal)?.len)
    }

    /// The code object for an exact (binary key, arch key) pair.
    pub fn kernel(&self, binary: &str, arch: &str) -> Result<Vec<u8>> {
        let entry = self
            .entry(binary, arch)
            .ok_or_else(|| Error::KernelNotFound {
                binary: binary.to_owned(),
                arch: arch.to_owned(),
            })?;
        self.read_blob(entry.ordinal, Some(entry.original_size))
    }

    /// The blob with this ordinal, decompressed.
    pub fn kernel_by_ordinal(&self, ordinal: u32) -> Result<Vec<u8>> {
        self.read_blob(ordinal, None)
    }

    /// Reads every blob once and checks it against the TOC (sizes, frame
    /// integrity). Opening validates only the structure.
    pub fn verify(&self) -> Result<()> {
        let mut expected: HashMap<u32, u64> = HashMap::new();
        for (_, _, e) in self.entries() {
            expected.insert(e.ordinal, e.original_size);
        }
        for ordinal in 0..self.blob_count() {
            self.read_blob(ordinal, expected.get(&ordinal).copied())?;
        }
        Ok(())
    }

    fn frames(&self) -> Result<&[Span]> {
        match &self.blobs {
            Blobs::Zstd {
                region,
                num_frames,
                frames,
            } => frames
                .get_or_init(|| build_frame_index(self.data.bytes(), *region, *num_frames))
                .as_deref()
                .map_err(|(at, detail)| Error::format("kpack zstd region", *at, detail.clone())),
            Blobs::Plain(spans) => Ok(spans),
        }
    }

    fn blob_span(&self, ordinal: u32) -> Result<Span> {
        let spans = self.frames()?;
        usize::try_from(ordinal)
            .ok()
            .and_then(|i| spans.get(i))
            .copied()
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "ordinal {ordinal} out of range ({} blobs)",
                    spans.len()
                ))
            })
    }

    fn slice(&self, span: Span) -> Result<&[u8]> {
        let start = usize::try_from(span.offset).ok();
        let end = span
            .offset
            .checked_add(span.len)
            .and_then(|e| usize::try_from(e).ok());
        start
            .zip(end)
            .and_then(|(s, e)| self.data.bytes().get(s..e))
            .ok_or_else(|| Error::format("kpack blob", span.offset, "blob runs past end of file"))
    }

    fn read_blob(&self, ordinal: u32, expected: Option<u64>) -> Result<Vec<u8>> {
        let span = self.blob_span(ordinal)?;
        let bytes = self.slice(span)?;
        match self.scheme {
            CompressionScheme::None => {
                if let Some(expected) = expected {
                    if expected != span.len {
                        return Err(Error::format(
                            "kpack blob",
                            span.offset,
                            format!(
                                "blob is {} bytes, TOC original_size is {expected}",
                                span.len
                            ),
                        ));
                    }
                }
                Ok(bytes.to_vec())
            }
            CompressionScheme::ZstdPerKernel => decompress_frame(bytes, span.offset, expected),
        }
    }
}
