//! Writing `.kpack` archives as a stream: header first (patched at the
//! end), blobs as they come, TOC last.
//!
//! Each added kernel becomes a job on the rayon pool that hashes it (for
//! deduplication) and, for zstd, compresses it, while the caller goes on
//! adding kernels. Results are collected strictly in insertion order, which
//! fixes ordinals and blob order, so the output depends only on the
//! sequence of `add_kernel` calls. The bytes of kernels added but not yet
//! written are bounded ([`DEFAULT_IN_FLIGHT_BYTES`]), which bounds memory.

use super::wire::{TocOut, WireBlob, WireToc};
use super::{CompressionScheme, TocEntry, FORMAT_VERSION, HEADER_SIZE, MAGIC, MAX_KERNEL_SIZE};
use crate::error::{Error, Result};
use crate::msgpack::{self, Named, Str, Value};
use rocm_kpack_fs::PathError;
use sha2::{Digest, Sha256};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{Seek, SeekFrom, Write};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex};

/// Default bound on the bytes of kernels added but not yet written. Peak
/// memory of the writer is about this plus their compressed frames.
pub const DEFAULT_IN_FLIGHT_BYTES: usize = 64 << 20;

/// Bound on the number of kernels in flight, so floods of tiny kernels
/// cannot queue without limit either.
const MAX_IN_FLIGHT_KERNELS: usize = 4096;

fn out_err(source: std::io::Error) -> Error {
    Error::Io(PathError::new("cannot write", "<kpack output>", source))
}

fn zstd_err(detail: String) -> Error {
    Error::Io(PathError::new(
        "cannot write",
        "<zstd compressor>",
        std::io::Error::other(detail),
    ))
}

/// What a kernel's background job hands back.
struct Done {
    /// `None` when the writer does not deduplicate.
    digest: Option<[u8; 32]>,
    /// zstd: the frame, or `None` when an earlier kernel had these bytes.
    frame: Option<Result<Vec<u8>>>,
    /// `none`: the kernel itself, for the writer thread to write.
    data: Option<Vec<u8>>,
}

/// A kernel whose job may still be running.
struct InFlight {
    binary: usize,
    arch: usize,
    len: usize,
    done: Receiver<Done>,
}

/// Streaming `.kpack` writer. See the module docs for ordering and memory.
pub struct ArchiveWriter<W: Write + Seek> {
    out: W,
    /// Stream position of the archive's first byte.
    base: u64,
    /// Bytes written so far, relative to `base`.
    pos: u64,
    group_name: String,
    gfx_arch_family: String,
    scheme: CompressionScheme,
    level: i32,
    explicit_arches: Option<Vec<String>>,
    seen_arches: Vec<String>,
    toc: Vec<(String, Vec<(String, TocEntry)>)>,
    toc_index: HashMap<String, usize>,
    /// Content digest -> ordinal of every blob written.
    by_digest: HashMap<[u8; 32], u32>,
    /// The same digests, readable by jobs so they skip compressing known
    /// content. Only a hint: ordinals come from `by_digest`.
    known: Arc<Mutex<HashSet<[u8; 32]>>>,
    /// `none` only: (offset, size) per ordinal.
    blobs: Vec<(u64, u64)>,
    blob_count: u32,
    queue: VecDeque<InFlight>,
    queued_bytes: usize,
    max_in_flight: usize,
    /// Where the jobs run (None: the current rayon pool).
    pool: Option<Arc<rayon::ThreadPool>>,
    /// Whether identical kernels share a blob (always, except when
    /// rebuilding from a transport form, whose blobs are given).
    dedup: bool,
    /// Set after a failed write: the output is inconsistent from then on.
    poisoned: bool,
}

impl<W: Write + Seek> ArchiveWriter<W> {
    /// Starts an archive at the current position of `out`. `zstd_level` is
    /// used only by [`CompressionScheme::ZstdPerKernel`]
    /// ([`super::DEFAULT_ZSTD_LEVEL`] when in doubt).
    pub fn new(
        mut out: W,
        group_name: &str,
        gfx_arch_family: &str,
        scheme: CompressionScheme,
        zstd_level: i32,
    ) -> Result<Self> {
        let levels = zstd::zstd_safe::min_c_level()..=zstd::zstd_safe::max_c_level();
        if scheme == CompressionScheme::ZstdPerKernel && !levels.contains(&zstd_level) {
            return Err(Error::InvalidArgument(format!(
                "zstd level {zstd_level} outside {levels:?}"
            )));
        }
        let base = out.stream_position().map_err(out_err)?;
        let mut header = [0u8; HEADER_SIZE as usize];
        header[0..4].copy_from_slice(&MAGIC);
        header[4..8].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.write_all(&header).map_err(out_err)?;
        let mut pos = HEADER_SIZE;
        if scheme == CompressionScheme::ZstdPerKernel {
            // num_frames, patched by finish().
            out.write_all(&0u32.to_le_bytes()).map_err(out_err)?;
            pos += 4;
        }
        Ok(ArchiveWriter {
            out,
            base,
            pos,
            group_name: group_name.to_owned(),
            gfx_arch_family: gfx_arch_family.to_owned(),
            scheme,
            level: zstd_level,
            explicit_arches: None,
            seen_arches: Vec::new(),
            toc: Vec::new(),
            toc_index: HashMap::new(),
            by_digest: HashMap::new(),
            known: Arc::new(Mutex::new(HashSet::new())),
            blobs: Vec::new(),
            blob_count: 0,
            queue: VecDeque::new(),
            queued_bytes: 0,
            max_in_flight: DEFAULT_IN_FLIGHT_BYTES,
            pool: None,
            dedup: true,
            poisoned: false,
        })
    }

    /// Sets the `gfx_arches` list written to the TOC (it must contain every
    /// arch added). Default: arches in order of first appearance.
    pub fn set_gfx_arches(&mut self, arches: Vec<String>) {
        self.explicit_arches = Some(arches);
    }

    /// Changes the bound on the bytes of kernels added but not yet
    /// written. Larger values give the compression jobs more slack; the
    /// output does not depend on it.
    pub fn set_in_flight_bytes(&mut self, bytes: usize) {
        self.max_in_flight = bytes;
    }

    /// Runs the hash and compression jobs on `pool` instead of the current
    /// rayon pool: writers driven from threads outside a pool (which then
    /// block instead of helping) still use exactly its threads.
    pub fn set_pool(&mut self, pool: Arc<rayon::ThreadPool>) {
        self.pool = Some(pool);
    }

    /// Bytes of kernels added but not yet written.
    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    /// Waits for the oldest kernel added but not yet written and writes it
    /// (no-op when none is queued): lets a caller bound the queues of
    /// several writers together. The output does not depend on it.
    pub fn write_oldest(&mut self) -> Result<()> {
        if self.poisoned {
            return Err(Error::InvalidArgument(
                "archive writer failed earlier".into(),
            ));
        }
        self.complete_oldest()
    }

    /// Adds the code object for (`binary_key`, `arch`). Ordinals and TOC
    /// order follow the order of calls; identical bytes share an ordinal.
    pub fn add_kernel(&mut self, binary_key: &str, arch: &str, data: Vec<u8>) -> Result<()> {
        self.add_kernel_with_metadata(binary_key, arch, data, None)
    }

    /// [`ArchiveWriter::add_kernel`] with a `metadata` map for the TOC entry.
    pub fn add_kernel_with_metadata(
        &mut self,
        binary_key: &str,
        arch: &str,
        data: Vec<u8>,
        metadata: Option<Value>,
    ) -> Result<()> {
        let (binary, arch_index) =
            self.push_entry(binary_key, arch, data.len() as u64, 0, metadata)?;
        self.submit(binary, arch_index, data);
        while self.queued_bytes > self.max_in_flight || self.queue.len() > MAX_IN_FLIGHT_KERNELS {
            self.complete_oldest()?;
        }
        Ok(())
    }

    /// Writes every kernel as a blob of its own, identical bytes or not:
    /// for a rebuild whose blob structure is given (the transport form),
    /// which then also skips hashing. References to a blob are added with
    /// [`Self::add_reference`].
    pub(super) fn keep_blob_structure(&mut self) {
        self.dedup = false;
    }

    /// Adds a TOC entry for a blob added earlier (its ordinal is the number
    /// of kernels added before it). Only after [`Self::keep_blob_structure`].
    pub(super) fn add_reference(
        &mut self,
        binary_key: &str,
        arch: &str,
        ordinal: u32,
        original_size: u64,
        metadata: Option<Value>,
    ) -> Result<()> {
        let added = self.blob_count as usize + self.queue.len();
        if self.dedup || ordinal as usize >= added {
            return Err(Error::InvalidArgument(format!(
                "kernel {binary_key:?}/{arch:?} refers to blob {ordinal}, which was not added"
            )));
        }
        self.push_entry(binary_key, arch, original_size, ordinal, metadata)
            .map(drop)
    }

    /// Checks and records one TOC entry; returns its (binary, arch) index.
    fn push_entry(
        &mut self,
        binary_key: &str,
        arch: &str,
        original_size: u64,
        ordinal: u32,
        metadata: Option<Value>,
    ) -> Result<(usize, usize)> {
        if self.poisoned {
            return Err(Error::InvalidArgument(
                "archive writer failed earlier".into(),
            ));
        }
        if binary_key.is_empty() || arch.is_empty() {
            return Err(Error::InvalidArgument("empty binary key or arch".into()));
        }
        if original_size > MAX_KERNEL_SIZE {
            return Err(Error::InvalidArgument(format!(
                "kernel {binary_key:?}/{arch:?} is {original_size} bytes, over the {MAX_KERNEL_SIZE}-byte limit"
            )));
        }
        if let Some(m) = &metadata {
            if !msgpack::is_str_keyed_map(m) {
                return Err(Error::InvalidArgument(
                    "metadata must be a map with distinct str keys".into(),
                ));
            }
        }
        let binary = match self.toc_index.get(binary_key) {
            Some(&i) => i,
            None => {
                self.toc.push((binary_key.to_owned(), Vec::new()));
                self.toc_index
                    .insert(binary_key.to_owned(), self.toc.len() - 1);
                self.toc.len() - 1
            }
        };
        let arches = match self.toc.get_mut(binary) {
            Some((_, arches)) => arches,
            None => {
                return Err(Error::InvalidArgument(
                    "internal TOC index out of sync".into(),
                ))
            }
        };
        if arches.iter().any(|(a, _)| a == arch) {
            return Err(Error::InvalidArgument(format!(
                "kernel {binary_key:?}/{arch:?} added twice"
            )));
        }
        arches.push((
            arch.to_owned(),
            TocEntry {
                ordinal,
                original_size,
                metadata,
            },
        ));
        let arch_index = arches.len() - 1;
        if !self.seen_arches.iter().any(|a| a == arch) {
            self.seen_arches.push(arch.to_owned());
        }
        Ok((binary, arch_index))
    }

    fn write_out(&mut self, bytes: &[u8]) -> Result<()> {
        if let Err(e) = self.out.write_all(bytes) {
            self.poisoned = true;
            return Err(out_err(e));
        }
        self.pos = self
            .pos
            .checked_add(bytes.len() as u64)
            .ok_or_else(|| Error::InvalidArgument("archive exceeds 2^64 bytes".into()))?;
        Ok(())
    }

    /// Starts the hash (and compression) job of one kernel.
    fn submit(&mut self, binary: usize, arch: usize, data: Vec<u8>) {
        let (tx, done) = sync_channel(1);
        let len = data.len();
        let known = Arc::clone(&self.known);
        let compress = self.scheme == CompressionScheme::ZstdPerKernel;
        let level = self.level;
        let dedup = self.dedup;
        let job = move || run_job(data, &known, dedup, compress, level, tx);
        match &self.pool {
            Some(pool) => pool.spawn(job),
            None => rayon::spawn(job),
        }
        self.queue.push_back(InFlight {
            binary,
            arch,
            len,
            done,
        });
        self.queued_bytes = self.queued_bytes.saturating_add(len);
    }

    /// Waits for the oldest job, assigns its ordinal (insertion order) and
    /// writes its blob if the content is new.
    fn complete_oldest(&mut self) -> Result<()> {
        let Some(job) = self.queue.pop_front() else {
            return Ok(());
        };
        self.queued_bytes = self.queued_bytes.saturating_sub(job.len);
        let Some(done) = wait(&job.done) else {
            self.poisoned = true;
            return Err(zstd_err("a compression job ended without a result".into()));
        };
        let known_ordinal = done.digest.and_then(|d| self.by_digest.get(&d).copied());
        let ordinal = match known_ordinal {
            Some(o) => o,
            None => {
                let o = self.blob_count;
                self.blob_count = o
                    .checked_add(1)
                    .ok_or_else(|| Error::InvalidArgument("more than 2^32 blobs".into()))?;
                match (done.frame, done.data) {
                    (Some(frame), _) => {
                        let frame = frame.inspect_err(|_| self.poisoned = true)?;
                        let len = u32::try_from(frame.len()).map_err(|_| {
                            zstd_err(format!("frame of {} bytes exceeds u32", frame.len()))
                        })?;
                        self.write_out(&len.to_le_bytes())?;
                        self.write_out(&frame)?;
                    }
                    (None, Some(data)) => {
                        self.blobs.push((self.pos, data.len() as u64));
                        self.write_out(&data)?;
                    }
                    (None, None) => {
                        // The job skipped compression because the content
                        // was known, yet no ordinal holds it: impossible
                        // unless the hint set and by_digest disagree.
                        self.poisoned = true;
                        return Err(zstd_err("kernel was not compressed".into()));
                    }
                }
                if let Some(digest) = done.digest {
                    self.by_digest.insert(digest, o);
                    if let Ok(mut known) = self.known.lock() {
                        known.insert(digest);
                    }
                }
                o
            }
        };
        if let Some(entry) = self
            .toc
            .get_mut(job.binary)
            .and_then(|(_, arches)| arches.get_mut(job.arch))
        {
            entry.1.ordinal = ordinal;
        }
        Ok(())
    }

    /// Writes what is pending and the TOC, patches the header, and returns
    /// the output positioned at the archive's end.
    pub fn finish(mut self) -> Result<W> {
        if self.poisoned {
            return Err(Error::InvalidArgument(
                "archive writer failed earlier".into(),
            ));
        }
        while !self.queue.is_empty() {
            self.complete_oldest()?;
        }
        let arches = match self.explicit_arches.take() {
            Some(list) => {
                for (i, a) in list.iter().enumerate() {
                    if list.iter().take(i).any(|b| b == a) {
                        return Err(Error::InvalidArgument(format!(
                            "gfx_arches lists {a:?} twice"
                        )));
                    }
                }
                if let Some(missing) = self.seen_arches.iter().find(|a| !list.contains(a)) {
                    return Err(Error::InvalidArgument(format!(
                        "gfx_arches lacks {missing:?}, which the TOC uses"
                    )));
                }
                list
            }
            None => std::mem::take(&mut self.seen_arches),
        };
        let toc_offset = self.pos;
        let toc = self.encode_toc(&arches, toc_offset)?;
        self.write_out(&toc)?;
        let end = self.pos;

        let patch = |out: &mut W, at: u64, bytes: &[u8]| -> std::io::Result<()> {
            out.seek(SeekFrom::Start(at))?;
            out.write_all(bytes)
        };
        let base = self.base;
        let result = (|| {
            patch(&mut self.out, base + 8, &toc_offset.to_le_bytes())?;
            if self.scheme == CompressionScheme::ZstdPerKernel {
                patch(
                    &mut self.out,
                    base + HEADER_SIZE,
                    &self.blob_count.to_le_bytes(),
                )?;
            }
            self.out.seek(SeekFrom::Start(base + end))?;
            self.out.flush()
        })();
        result.map_err(out_err)?;
        Ok(self.out)
    }

    fn encode_toc(&self, arches: &[String], toc_offset: u64) -> Result<Vec<u8>> {
        let zstd = self.scheme == CompressionScheme::ZstdPerKernel;
        msgpack::encode(&WireToc {
            format_version: u64::from(FORMAT_VERSION),
            group_name: Str(&self.group_name),
            gfx_arch_family: Str(&self.gfx_arch_family),
            gfx_arches: arches.iter().map(|a| Str(a)).collect(),
            toc: TocOut(&self.toc),
            compression_scheme: Str(self.scheme.as_str()),
            zstd_offset: zstd.then_some(HEADER_SIZE),
            zstd_size: zstd.then(|| toc_offset - HEADER_SIZE),
            blobs: (!zstd).then(|| {
                self.blobs
                    .iter()
                    .map(|&(offset, size)| Named(WireBlob { offset, size }))
                    .collect()
            }),
        })
    }
}

/// One kernel's job: hash (when deduplicating), then compress unless the
/// content is known.
fn run_job(
    data: Vec<u8>,
    known: &Mutex<HashSet<[u8; 32]>>,
    dedup: bool,
    compress: bool,
    level: i32,
    tx: SyncSender<Done>,
) {
    let digest: Option<[u8; 32]> = dedup.then(|| Sha256::digest(&data).into());
    let done = if compress {
        let seen = digest.is_some_and(|d| known.lock().map(|k| k.contains(&d)).unwrap_or(false));
        let frame = (!seen).then(|| compress_cached(level, &data));
        Done {
            digest,
            frame,
            data: None,
        }
    } else {
        Done {
            digest,
            frame: None,
            data: Some(data),
        }
    };
    // The writer may have been dropped; then nobody wants the result.
    let _ = tx.send(done);
}

/// Receives a job's result. On a rayon worker thread (a writer used inside
/// a parallel loop) it runs pending pool work instead of blocking, so
/// writers cannot starve the pool of the threads their own jobs need.
fn wait(done: &Receiver<Done>) -> Option<Done> {
    loop {
        match done.try_recv() {
            Ok(d) => return Some(d),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) => match rayon::yield_now() {
                Some(rayon::Yield::Executed) => {}
                // Outside the pool, or no queued work left: the job is
                // running on another thread, so blocking is safe.
                _ => return done.recv().ok(),
            },
        }
    }
}

thread_local! {
    /// One zstd context per pool thread, reused across kernels.
    static COMPRESSOR: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> =
        const { RefCell::new(None) };
}

fn compress_cached(level: i32, data: &[u8]) -> Result<Vec<u8>> {
    COMPRESSOR.with(|cell| {
        let mut slot = cell
            .try_borrow_mut()
            .map_err(|_| zstd_err("compressor re-entered".into()))?;
        let reusable = matches!(&*slot, Some((l, _)) if *l == level);
        if !reusable {
            *slot = Some((level, new_compressor(level)?));
        }
        match slot.as_mut() {
            Some((_, c)) => compress_frame(c, data),
            None => Err(zstd_err("no compressor".into())),
        }
    })
}

fn new_compressor(level: i32) -> Result<zstd::bulk::Compressor<'static>> {
    let mut c = zstd::bulk::Compressor::new(level).map_err(|e| zstd_err(e.to_string()))?;
    // Readers need the content size in every frame header (the Python
    // reader sizes its buffer from it). It is zstd's default; be explicit.
    c.set_parameter(zstd::zstd_safe::CParameter::ContentSizeFlag(true))
        .map_err(|e| zstd_err(e.to_string()))?;
    Ok(c)
}

fn compress_frame(c: &mut zstd::bulk::Compressor<'static>, data: &[u8]) -> Result<Vec<u8>> {
    let frame = c.compress(data).map_err(|e| zstd_err(e.to_string()))?;
    // Guard the format invariant rather than trust library defaults.
    match zstd::zstd_safe::get_frame_content_size(&frame) {
        Ok(Some(n)) if n == data.len() as u64 => Ok(frame),
        other => Err(zstd_err(format!(
            "compressed frame lacks the right content size ({other:?} for {} bytes)",
            data.len()
        ))),
    }
}
