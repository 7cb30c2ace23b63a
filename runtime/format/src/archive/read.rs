//! Reading `.kpack` archives: header and TOC are parsed and validated at
//! open, blobs are touched only when a kernel is asked for.

use super::wire::{TocIn, VersionOnly, WireEntry, WireToc};
use super::{
    CompressionScheme, TocEntry, FORMAT_VERSION, HEADER_SIZE, MAGIC, MAX_KERNEL_SIZE, MAX_TOC_SIZE,
    MAX_ZSTD_RATIO,
};
use crate::error::{Error, Result};
use crate::le;
use crate::msgpack::{self, Named};
use memmap2::Mmap;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::fs::File;
use std::mem::MaybeUninit;
use std::path::Path;
use std::sync::{Mutex, OnceLock, PoisonError};

/// A byte range inside the archive file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    offset: u64,
    len: u64,
}

enum Backing {
    /// The file mapped, and kept open for small reads (see
    /// [`Backing::read_u32_le`]).
    Mapped(Mmap, File),
    Owned(Vec<u8>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mapped(m, _) => m,
            Backing::Owned(v) => v,
        }
    }

    /// The little-endian `u32` at `at`, if in bounds. From a file, read with
    /// `pread` rather than through the map: the zstd frame walk reads one
    /// prefix per frame, each on its own page, and a 4-byte read costs
    /// several times less than faulting a page in (and maps nothing).
    fn read_u32_le(&self, at: u64) -> Option<u32> {
        let bytes = self.bytes();
        let end = at.checked_add(4)?;
        if end > bytes.len() as u64 {
            return None;
        }
        #[cfg(unix)]
        if let Backing::Mapped(_, file) = self {
            use std::os::unix::fs::FileExt;
            let mut buf = [0u8; 4];
            if file.read_exact_at(&mut buf, at).is_ok() {
                return Some(u32::from_le_bytes(buf));
            }
            // A failed read falls back to the map, which sees the same file.
        }
        #[cfg(windows)]
        if let Backing::Mapped(_, file) = self {
            // Positional read (ReadFile with an OVERLAPPED offset).
            use std::os::windows::fs::FileExt;
            let mut buf = [0u8; 4];
            if file.seek_read(&mut buf, at).ok() == Some(4) {
                return Some(u32::from_le_bytes(buf));
            }
        }
        le::u32_at_offset(bytes, at)
    }
}

enum Blobs {
    /// `none`: blob spans from the TOC's `blobs` array, by ordinal.
    Plain(Vec<Span>),
    /// `zstd-per-kernel`: frames located on demand (so opening an archive
    /// reads no blob pages).
    Zstd(FrameIndex),
}

/// The frame spans of a zstd region, found by walking the `u32` size
/// prefixes only as far as the highest ordinal asked for so far, reading
/// each with `pread` ([`Backing::read_u32_le`]). Each prefix sits on its own
/// page, so walking every frame through the map at first use faulted in one
/// page per frame (hundreds for a family archive, about 1 ms) before the
/// first kernel could load.
///
/// The span of frame `i` depends only on prefixes `0..=i` (and, for the
/// last frame, on ending exactly at the region end), so what a request
/// sees does not depend on which requests came before it: a broken prefix
/// makes its own frame and every later one unreadable, never earlier ones.
struct FrameIndex {
    region: Span,
    num_frames: u32,
    /// Every span, once the walk has located them all: lookups then take
    /// no lock.
    complete: OnceLock<Box<[Span]>>,
    /// The walk so far. Held only while extending the walk or copying a
    /// span out, never while decompressing.
    walk: Mutex<FrameWalk>,
}

struct FrameWalk {
    /// Spans of frames `0..spans.len()`.
    spans: Vec<Span>,
    /// Offset of the next size prefix.
    next: u64,
    /// Why frame `spans.len()` cannot be located (offset, detail), kept
    /// as plain data so each call gets a fresh [`Error`].
    broken: Option<(u64, String)>,
}

impl FrameIndex {
    fn new(region: Span, num_frames: u32) -> Self {
        FrameIndex {
            region,
            num_frames,
            complete: OnceLock::new(),
            walk: Mutex::new(FrameWalk {
                spans: Vec::new(),
                next: region.offset.saturating_add(4),
                broken: None,
            }),
        }
    }

    /// The span of frame `ordinal`, walking prefixes up to it if needed.
    fn span(&self, data: &Backing, ordinal: u32) -> Result<Span> {
        if ordinal >= self.num_frames {
            return Err(Error::InvalidArgument(format!(
                "ordinal {ordinal} out of range ({} blobs)",
                self.num_frames
            )));
        }
        let i = ordinal as usize;
        if let Some(all) = self.complete.get() {
            return all
                .get(i)
                .copied()
                .ok_or_else(|| Error::InvalidArgument(format!("ordinal {ordinal} out of range")));
        }
        // Nothing under the lock can panic midway through an update, so a
        // poisoned walk is still consistent.
        let mut walk = self.walk.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(all) = self.complete.get() {
            // Another thread finished the walk while we waited.
            return all
                .get(i)
                .copied()
                .ok_or_else(|| Error::InvalidArgument(format!("ordinal {ordinal} out of range")));
        }
        while walk.spans.len() <= i {
            if let Some((at, detail)) = &walk.broken {
                return Err(Error::format("kpack zstd region", *at, detail.clone()));
            }
            let index = walk.spans.len() as u32;
            match self.locate(data, index, walk.next) {
                Ok(span) => {
                    walk.next = span.offset + span.len;
                    walk.spans.push(span);
                }
                Err(broken) => walk.broken = Some(broken),
            }
        }
        let span = walk.spans.get(i).copied();
        if walk.spans.len() == self.num_frames as usize {
            let _ = self
                .complete
                .set(std::mem::take(&mut walk.spans).into_boxed_slice());
        }
        span.ok_or_else(|| Error::InvalidArgument(format!("ordinal {ordinal} out of range")))
    }

    /// Frame `index`, whose size prefix is at `pos`.
    fn locate(
        &self,
        data: &Backing,
        index: u32,
        pos: u64,
    ) -> std::result::Result<Span, (u64, String)> {
        let end = self.region.offset.saturating_add(self.region.len);
        let size = match pos.checked_add(4) {
            Some(p) if p <= end => data.read_u32_le(pos),
            _ => None,
        }
        .ok_or_else(|| {
            (
                pos,
                format!("size prefix of frame {index} runs past the region"),
            )
        })?;
        let offset = pos + 4;
        let frame_end = match offset.checked_add(u64::from(size)) {
            Some(e) if e <= end => e,
            _ => {
                return Err((
                    offset,
                    format!("frame {index} of {size} bytes runs past the region end {end}"),
                ))
            }
        };
        if index + 1 == self.num_frames && frame_end != end {
            return Err((
                frame_end,
                format!(
                    "{} unused bytes after the last frame ({index})",
                    end - frame_end
                ),
            ));
        }
        Ok(Span {
            offset,
            len: u64::from(size),
        })
    }
}

struct BinaryToc {
    name: String,
    arches: Vec<(String, TocEntry)>,
}

/// An open `.kpack` archive.
///
/// `Send + Sync`: [`Archive::kernel`] takes `&self` and may run on many
/// threads at once; each thread decompresses with its own zstd context,
/// and the only shared mutable state is the frame index, locked only while
/// it grows (never during decompression).
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
        le::u32_at_offset(data, 4).ok_or_else(|| Error::format("kpack header", 4, "truncated"))?;
    if version != FORMAT_VERSION {
        return Err(Error::UnsupportedVersion {
            what: "kpack archive",
            found: u64::from(version),
            supported: "1",
        });
    }
    let toc_offset =
        le::u64_at_offset(data, 8).ok_or_else(|| Error::format("kpack header", 8, "truncated"))?;
    if toc_offset < HEADER_SIZE || toc_offset >= len {
        return Err(Error::format(
            "kpack header",
            8,
            format!("toc_offset {toc_offset} outside [{HEADER_SIZE}, {len})"),
        ));
    }
    if len - toc_offset > MAX_TOC_SIZE {
        return Err(Error::format(
            "kpack header",
            8,
            format!(
                "the TOC is {} bytes, over the {MAX_TOC_SIZE}-byte limit",
                len - toc_offset
            ),
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
    let len = msgpack::measure(toc_bytes, toc_offset)?;
    if len != toc_bytes.len() {
        return Err(toc_err(
            toc_offset,
            format!(
                "{} bytes follow the TOC (nothing may)",
                toc_bytes.len() - len
            ),
        ));
    }
    let at = toc_offset;
    let wire: WireToc<'_, TocIn<'_>> = match msgpack::deserialize::<Named<_>>(toc_bytes) {
        Ok(w) => w.0,
        Err(detail) => {
            // A TOC of another version may have another shape: say so
            // rather than what shape it lacks.
            if let Ok(v) = msgpack::deserialize::<Named<VersionOnly>>(toc_bytes) {
                check_version(v.format_version)?;
            }
            return Err(toc_err(at, detail));
        }
    };
    parse_toc(data, at, wire)
}

fn check_version(version: u64) -> Result<()> {
    if version != u64::from(FORMAT_VERSION) {
        return Err(Error::UnsupportedVersion {
            what: "kpack TOC",
            found: version,
            supported: "1",
        });
    }
    Ok(())
}

fn parse_toc(data: &[u8], at: u64, wire: WireToc<'_, TocIn<'_>>) -> Result<Parsed> {
    check_version(wire.format_version)?;
    let missing = |key: &str| toc_err(at, format!("missing {key}"));
    let group_name = wire.group_name.0;
    let gfx_arch_family = wire.gfx_arch_family.0;
    let mut gfx_arches: Vec<String> = Vec::with_capacity(wire.gfx_arches.len());
    // Hashed, so a TOC with many arches costs linear time, not quadratic.
    let mut known: HashSet<&str> = HashSet::with_capacity(wire.gfx_arches.len());
    for a in &wire.gfx_arches {
        if !known.insert(a.0) {
            return Err(toc_err(at, format!("gfx_arches lists {:?} twice", a.0)));
        }
        gfx_arches.push(a.0.to_owned());
    }

    let scheme_name = wire.compression_scheme.0;
    let scheme = CompressionScheme::from_name(scheme_name)
        .ok_or_else(|| toc_err(at, format!("unknown compression_scheme {scheme_name:?}")))?;

    let mut toc: Vec<BinaryToc> = Vec::with_capacity(wire.toc.0.len());
    for (binary, arches_in) in wire.toc.0 {
        let binary = binary.0;
        let mut arches = Vec::with_capacity(arches_in.0.len());
        for (arch, entry) in arches_in.0 {
            let arch = arch.0;
            if !known.contains(arch) {
                return Err(toc_err(
                    at,
                    format!("toc arch {arch:?} of {binary:?} is not listed in gfx_arches"),
                ));
            }
            arches.push((arch.to_owned(), parse_entry(entry.0, binary, arch, at)?));
        }
        toc.push(BinaryToc {
            name: binary.to_owned(),
            arches,
        });
    }

    let blobs = match scheme {
        CompressionScheme::None => {
            let list = wire.blobs.ok_or_else(|| missing("blobs"))?;
            let mut spans = Vec::with_capacity(list.len());
            for (i, b) in list.iter().enumerate() {
                let span = Span {
                    offset: b.offset,
                    len: b.size,
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
            let offset = wire.zstd_offset.ok_or_else(|| missing("zstd_offset"))?;
            let size = wire.zstd_size.ok_or_else(|| missing("zstd_size"))?;
            let end = offset.checked_add(size);
            if offset < HEADER_SIZE || size < 4 || !matches!(end, Some(end) if end <= at) {
                return Err(toc_err(
                    at,
                    format!(
                        "zstd region [{offset}, +{size}) is not inside the blob region [{HEADER_SIZE}, {at})"
                    ),
                ));
            }
            let num_frames = le::u32_at_offset(data, offset)
                .ok_or_else(|| Error::format("kpack zstd region", offset, "truncated"))?;
            // Each frame has at least its 4-byte size prefix.
            if u64::from(num_frames) > (size - 4) / 4 {
                return Err(Error::format(
                    "kpack zstd region",
                    offset,
                    format!("num_frames {num_frames} cannot fit in {size} bytes"),
                ));
            }
            // With no frames the region is just the count; checked here
            // because no request will ever walk it.
            if num_frames == 0 && size != 4 {
                return Err(Error::format(
                    "kpack zstd region",
                    offset,
                    format!("no frames, but the region is {size} bytes"),
                ));
            }
            let entry_count: usize = toc.iter().map(|b| b.arches.len()).sum();
            let mut sizes: HashMap<u32, u64> = HashMap::with_capacity(entry_count);
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
            Blobs::Zstd(FrameIndex::new(Span { offset, len: size }, num_frames))
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

fn parse_entry(e: WireEntry<'_>, binary: &str, arch: &str, at: u64) -> Result<TocEntry> {
    let field = |name: &str| format!("toc[{binary:?}][{arch:?}].{name}");
    if e.kind.0 != "hsaco" {
        tracing::debug!(
            binary,
            arch,
            kind = e.kind.0,
            "kpack TOC: entry type is not \"hsaco\""
        );
    }
    let ordinal = u32::try_from(e.ordinal).map_err(|_| {
        toc_err(
            at,
            format!("{} {} exceeds u32", field("ordinal"), e.ordinal),
        )
    })?;
    if e.original_size > MAX_KERNEL_SIZE {
        return Err(toc_err(
            at,
            format!(
                "{} {} exceeds the {MAX_KERNEL_SIZE}-byte limit",
                field("original_size"),
                e.original_size
            ),
        ));
    }
    let metadata = match e.metadata {
        None => None,
        Some(v) if v.is_map() => Some(v.into_owned()),
        Some(v) => {
            return Err(toc_err(
                at,
                format!("{} must be a map, found {v}", field("metadata")),
            ))
        }
    };
    Ok(TocEntry {
        ordinal,
        original_size: e.original_size,
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

/// Checks a zstd frame that must decode to exactly `expected` bytes (when
/// known) without decompressing it: the declared content size against the
/// TOC and [`MAX_ZSTD_RATIO`], and the frame's own length against its
/// span. Returns the content size, so buffers are sized from input the
/// frame justifies.
fn check_frame(frame: &[u8], at: u64, expected: Option<u64>) -> Result<usize> {
    let fail = |detail: String| frame_error(at, detail);
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
    usize::try_from(content_size).map_err(|_| fail("size exceeds address space".into()))
}

fn frame_error(at: u64, detail: String) -> Error {
    Error::Decompression(format!("zstd frame at offset {at}: {detail}"))
}

/// The part of a caller's buffer zstd may write to, as zstd's output
/// buffer type. Only the first `filled` bytes are initialized.
struct Uninit<'a> {
    buf: &'a mut [MaybeUninit<u8>],
    filled: usize,
}

// SAFETY: `as_mut_ptr` is valid for writes of `capacity()` bytes (the whole
// slice); `as_slice` covers only the `filled` bytes zstd reported writing;
// `filled_until` is the only thing that grows `filled`.
unsafe impl zstd::zstd_safe::WriteBuf for Uninit<'_> {
    fn as_slice(&self) -> &[u8] {
        // `filled_until`, the only writer of `filled`, clamps it to the
        // slice: the split is in range by construction.
        let (init, _) = self.buf.split_at(self.filled);
        // SAFETY: the first `filled` bytes were written by zstd.
        unsafe { std::slice::from_raw_parts(init.as_ptr().cast::<u8>(), init.len()) }
    }

    fn capacity(&self) -> usize {
        self.buf.len()
    }

    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.buf.as_mut_ptr().cast::<u8>()
    }

    unsafe fn filled_until(&mut self, n: usize) {
        self.filled = n.min(self.buf.len());
    }
}

/// Decompresses a checked frame of `len` content bytes into the first
/// `len` bytes of `out`, initializing exactly those.
fn decompress_into(frame: &[u8], at: u64, len: usize, out: &mut [MaybeUninit<u8>]) -> Result<()> {
    let have = out.len();
    let out = out.get_mut(..len).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "output buffer of {have} bytes is too small for a {len}-byte kernel"
        ))
    })?;
    let mut buf = Uninit {
        buf: out,
        filled: 0,
    };
    let written = with_dctx(|dctx| dctx.decompress(&mut buf, frame))?
        .map_err(|code| frame_error(at, zstd::zstd_safe::get_error_name(code).to_owned()))?;
    if written != len || buf.filled != len {
        return Err(frame_error(
            at,
            format!("decompressed to {written} bytes, frame declares {len}"),
        ));
    }
    Ok(())
}

/// Runs `f` with this thread's zstd decompression context, created on
/// first use, so loading many kernels does not set one up per kernel. The
/// context is taken out of its slot while in use: a nested call, or one
/// during thread teardown, simply gets a fresh context.
fn with_dctx<R>(f: impl FnOnce(&mut zstd::zstd_safe::DCtx<'static>) -> R) -> Result<R> {
    use std::cell::Cell;
    thread_local! {
        static DCTX: Cell<Option<zstd::zstd_safe::DCtx<'static>>> = const { Cell::new(None) };
    }
    let cached = DCTX.try_with(Cell::take).ok().flatten();
    let mut dctx = match cached {
        Some(d) => d,
        None => zstd::zstd_safe::DCtx::try_create()
            .ok_or_else(|| Error::Decompression("cannot create a zstd context".into()))?,
    };
    let r = f(&mut dctx);
    let _ = DCTX.try_with(|slot| slot.set(Some(dctx)));
    Ok(r)
}

/// View of an initialized byte buffer as possibly-uninitialized bytes, for
/// the one write path.
fn as_uninit(out: &mut [u8]) -> &mut [MaybeUninit<u8>] {
    // SAFETY: `MaybeUninit<u8>` has the layout of `u8`, and everything
    // written through the view is an initialized byte, so `out` stays
    // initialized.
    unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<MaybeUninit<u8>>(), out.len()) }
}

/// A blob located and checked, ready to be decompressed or copied.
struct Located<'a> {
    bytes: &'a [u8],
    at: u64,
    len: usize,
}

impl Archive {
    /// Memory-maps and opens `path`, validating header and TOC.
    pub fn open(path: &Path) -> Result<Archive> {
        // Never a FIFO or device (open would block, or map endless bytes),
        // never through a symlink planted in place of an archive.
        let file = rocm_kpack_fs::open_regular(path).map_err(|e| Error::io(path, e.source))?;
        let meta = file.metadata().map_err(|e| Error::io(path, e))?;
        let len = meta.len();
        #[cfg(unix)]
        {
            use super::SPARSE_CHECK_MIN;
            use std::os::unix::fs::MetadataExt;
            let allocated = meta.blocks().saturating_mul(512);
            if len > SPARSE_CHECK_MIN && allocated < len / 2 {
                return Err(Error::format(
                    "kpack archive",
                    0,
                    format!(
                        "{}: sparse file ({len} bytes, {allocated} on disk); refusing it",
                        path.display()
                    ),
                ));
            }
        }
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
        Self::from_backing(Backing::Mapped(map, file)).map_err(|e| match e {
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
            Blobs::Zstd(index) => index.num_frames,
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
            Blobs::Zstd(index) => Some((index.region.offset, index.region.len)),
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
        let entry = self.entry_or_err(binary, arch)?;
        self.read_blob(entry.ordinal, Some(entry.original_size))
    }

    /// Size of the code object for (binary, arch) once decompressed, after
    /// checking its blob against the TOC (for zstd: the frame header and
    /// length), without decompressing it.
    pub fn kernel_len(&self, binary: &str, arch: &str) -> Result<usize> {
        let entry = self.entry_or_err(binary, arch)?;
        Ok(self.locate(entry.ordinal, Some(entry.original_size))?.len)
    }

    /// Decompresses the code object for (binary, arch) into the start of
    /// `out`, which must hold at least [`Self::kernel_len`] bytes; returns
    /// the number of bytes written. Nothing is allocated for the kernel.
    pub fn kernel_into(&self, binary: &str, arch: &str, out: &mut [u8]) -> Result<usize> {
        let entry = self.entry_or_err(binary, arch)?;
        let blob = self.locate(entry.ordinal, Some(entry.original_size))?;
        self.fill(&blob, as_uninit(out))?;
        Ok(blob.len)
    }

    /// Decompresses the code object for (binary, arch) into a buffer the
    /// caller provides once its size is known: `alloc(len)` is called
    /// exactly once, after the blob was checked against the TOC (so `len`
    /// is justified by the archive's bytes), and must return a buffer of at
    /// least `len` bytes. On success its first `len` bytes are initialized
    /// with the code object; on failure the buffer is dropped. Lets a caller
    /// hand out memory it allocates itself (e.g. `malloc` for C) without a
    /// copy.
    pub fn kernel_with<B, F>(&self, binary: &str, arch: &str, alloc: F) -> Result<(B, usize)>
    where
        B: AsMut<[MaybeUninit<u8>]>,
        F: FnOnce(usize) -> Result<B>,
    {
        let entry = self.entry_or_err(binary, arch)?;
        let blob = self.locate(entry.ordinal, Some(entry.original_size))?;
        let mut buf = alloc(blob.len)?;
        self.fill(&blob, buf.as_mut())?;
        Ok((buf, blob.len))
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

    fn entry_or_err(&self, binary: &str, arch: &str) -> Result<&TocEntry> {
        self.entry(binary, arch)
            .ok_or_else(|| Error::KernelNotFound {
                binary: binary.to_owned(),
                arch: arch.to_owned(),
            })
    }

    fn blob_span(&self, ordinal: u32) -> Result<Span> {
        match &self.blobs {
            Blobs::Zstd(index) => index.span(&self.data, ordinal),
            Blobs::Plain(spans) => usize::try_from(ordinal)
                .ok()
                .and_then(|i| spans.get(i))
                .copied()
                .ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "ordinal {ordinal} out of range ({} blobs)",
                        spans.len()
                    ))
                }),
        }
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

    /// Finds blob `ordinal` and checks it holds `expected` bytes (when
    /// known) before anything is allocated for it.
    fn locate(&self, ordinal: u32, expected: Option<u64>) -> Result<Located<'_>> {
        let span = self.blob_span(ordinal)?;
        let bytes = self.slice(span)?;
        let len = match self.scheme {
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
                bytes.len()
            }
            CompressionScheme::ZstdPerKernel => check_frame(bytes, span.offset, expected)?,
        };
        Ok(Located {
            bytes,
            at: span.offset,
            len,
        })
    }

    /// Writes a located blob's content into the first `blob.len` bytes of
    /// `out`, initializing exactly those.
    fn fill(&self, blob: &Located<'_>, out: &mut [MaybeUninit<u8>]) -> Result<()> {
        match self.scheme {
            CompressionScheme::ZstdPerKernel => decompress_into(blob.bytes, blob.at, blob.len, out),
            CompressionScheme::None => {
                let have = out.len();
                let out = out.get_mut(..blob.bytes.len()).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "output buffer of {have} bytes is too small for a {}-byte kernel",
                        blob.bytes.len()
                    ))
                })?;
                for (o, b) in out.iter_mut().zip(blob.bytes) {
                    o.write(*b);
                }
                Ok(())
            }
        }
    }

    fn read_blob(&self, ordinal: u32, expected: Option<u64>) -> Result<Vec<u8>> {
        let blob = self.locate(ordinal, expected)?;
        let mut out: Vec<u8> = Vec::with_capacity(blob.len);
        self.fill(&blob, out.spare_capacity_mut())?;
        // SAFETY: `fill` succeeded, so it initialized the first `blob.len`
        // bytes of the spare capacity, which holds at least that many.
        unsafe { out.set_len(blob.len) };
        Ok(out)
    }
}
