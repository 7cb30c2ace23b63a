//! The transport form of an archive (docs/formats.md section 1.1): what a
//! kpack store serves so that a download is one solid compressed stream
//! instead of one zstd frame per code object, each starting with an empty
//! window. The fetcher re-frames it into an ordinary archive on the
//! machine that installs it.
//!
//! ```text
//! 0   "KPKT"  u32 format=1  u64 toc_len
//! 16  toc: MessagePack map {group_name, gfx_arch_family, gfx_arches,
//!          entries: [{binary, arch, size, blob, metadata?}, ...]}
//!     every distinct blob once, uncompressed, in order of first reference
//! ```
//!
//! `entries` are the archive's TOC entries in TOC order; `blob` numbers the
//! archive's blobs by first reference in that order. So the form depends
//! only on what an archive holds (names, arches, metadata, the bytes of
//! each code object and which entries share a blob), not on how it was
//! compressed: an archive rebuilt from a transport at any zstd level has
//! that same transport, which is how `verify` checks a rebuilt archive
//! against the sha256 its manifest gives.
//!
//! On the store the form is one zstd frame ([`encode_store_object`]).

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{self, Read, Seek, Write};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{Archive, ArchiveWriter, CompressionScheme, MAX_KERNEL_SIZE};
use crate::error::{Error, Result};
use crate::framing::{self, Framing};
use crate::msgpack::{self, present, Named, Str, Value};
use rocm_kpack_fs::{HashingReader, HashingWriter};

/// Magic of the decoded transport form.
pub const MAGIC: [u8; 4] = *b"KPKT";
/// The transport format this crate writes and reads. A manifest or stream
/// naming another is not read (the fetcher then downloads the archive
/// itself).
pub const FORMAT: u32 = 1;
/// Fixed header: magic, format, TOC length.
pub const HEADER_LEN: u64 = framing::HEADER_LEN;
/// Window of store objects (transport forms and database files): 2^27 =
/// 128 MiB, what `zstd --long` uses and every zstd decoder accepts without
/// being told. It bounds the memory a decoder of a hostile object needs.
pub const WINDOW_LOG: u32 = 27;

/// What identifies a transport form: its decoded size and sha256, and how
/// many distinct blobs it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportSummary {
    /// Bytes of the decoded form.
    pub size: u64,
    /// SHA-256 of the decoded form.
    pub sha256: [u8; 32],
    /// Distinct blobs.
    pub blobs: u32,
}

/// The TOC of the transport form.
#[derive(Serialize, Deserialize)]
struct WireTransport<'a> {
    #[serde(borrow)]
    group_name: Str<'a>,
    #[serde(borrow)]
    gfx_arch_family: Str<'a>,
    #[serde(borrow)]
    gfx_arches: Vec<Str<'a>>,
    #[serde(borrow)]
    entries: Vec<Named<WireEntry<'a>>>,
}

#[derive(Serialize, Deserialize)]
struct WireEntry<'a> {
    #[serde(borrow)]
    binary: Str<'a>,
    #[serde(borrow)]
    arch: Str<'a>,
    size: u64,
    blob: u32,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    metadata: Option<Cow<'a, Value>>,
}

const FRAMING: Framing = Framing {
    what: "kpack transport form",
    magic: MAGIC,
    format: FORMAT,
    supported: "1",
};

fn bad(offset: u64, detail: impl Into<String>) -> Error {
    FRAMING.bad(offset, detail)
}

fn io_err(what: &'static str, e: io::Error) -> Error {
    FRAMING.io(what, e)
}

/// What [`write_transport`] writes, worked out from the archive's TOC.
struct Plan {
    /// The transport TOC, encoded.
    toc: Vec<u8>,
    /// Per transport blob, the archive ordinal and size it is read from.
    blobs: Vec<(u32, u64)>,
}

fn plan(archive: &Archive) -> Result<Plan> {
    let mut blob_of: HashMap<u32, u32> = HashMap::new();
    let mut blobs: Vec<(u32, u64)> = Vec::new();
    let mut entries = Vec::new();
    for (binary, arch, e) in archive.entries() {
        let blob = match blob_of.get(&e.ordinal) {
            Some(&b) => b,
            None => {
                let b = u32::try_from(blobs.len())
                    .map_err(|_| Error::InvalidArgument("more than 2^32 blobs".into()))?;
                blob_of.insert(e.ordinal, b);
                blobs.push((e.ordinal, e.original_size));
                b
            }
        };
        entries.push(Named(WireEntry {
            binary: Str(binary),
            arch: Str(arch),
            size: e.original_size,
            blob,
            metadata: e.metadata.as_ref().map(Cow::Borrowed),
        }));
    }
    let toc = msgpack::encode(&WireTransport {
        group_name: Str(archive.group_name()),
        gfx_arch_family: Str(archive.gfx_arch_family()),
        gfx_arches: archive.gfx_arches().iter().map(|a| Str(a)).collect(),
        entries,
    })?;
    Ok(Plan { toc, blobs })
}

/// Writes the transport form of `archive` to `out`, decompressing one code
/// object at a time (each checked against its TOC entry).
pub fn write_transport(archive: &Archive, out: &mut dyn Write) -> Result<TransportSummary> {
    let Plan { toc, blobs } = plan(archive)?;
    let mut w = HashingWriter::new(out);
    w.write_all(&framing::header(MAGIC, FORMAT, toc.len() as u64))
        .map_err(|e| io_err("cannot write", e))?;
    w.write_all(&toc).map_err(|e| io_err("cannot write", e))?;
    for &(ordinal, size) in &blobs {
        let data = archive.kernel_by_ordinal(ordinal)?;
        if data.len() as u64 != size {
            return Err(Error::Decompression(format!(
                "blob {ordinal} holds {} bytes, its TOC entry says {size}",
                data.len()
            )));
        }
        w.write_all(&data).map_err(|e| io_err("cannot write", e))?;
    }
    let (_, sha256, size) = w.finish();
    Ok(TransportSummary {
        size,
        sha256,
        blobs: blobs.len() as u32,
    })
}

/// Size and sha256 of the transport form of `archive`, without keeping it:
/// reads every code object (each checked against its TOC entry) and hashes
/// every byte of the form, the TOC included.
pub fn transport_summary(archive: &Archive) -> Result<TransportSummary> {
    write_transport(archive, &mut io::sink())
}

/// The manifest's `transport` value for `archive`, whose frames were
/// written at `frame_level` (`None`: unknown, or uncompressed).
pub fn manifest_transport(
    archive: &Archive,
    frame_level: Option<i32>,
) -> Result<crate::manifest::ArchiveTransport> {
    let s = transport_summary(archive)?;
    Ok(crate::manifest::ArchiveTransport::Solid {
        size: s.size,
        sha256: s.sha256,
        level: frame_level,
    })
}

/// How [`rebuild_archive`] frames the code objects.
#[derive(Debug, Clone)]
pub struct RebuildOptions {
    /// zstd level of each code object's frame.
    pub level: i32,
    /// Bound on the bytes of code objects read but not yet written
    /// ([`super::DEFAULT_IN_FLIGHT_BYTES`] when in doubt): with the
    /// decoder's window this bounds the rebuild's memory.
    pub in_flight_bytes: usize,
    /// Where the frames are compressed (None: the current rayon pool).
    pub pool: Option<Arc<rayon::ThreadPool>>,
}

/// Reads a decoded transport form from `flat` and writes the archive it
/// describes to `out`, one zstd frame per blob at `opts.level`, in
/// parallel. Returns `out` and the summary of what was read: the caller
/// compares it with the one its manifest names before using the archive.
/// Every length is checked against the limits of the archive format;
/// anything after the last blob is an error.
pub fn rebuild_archive<W: Write + Seek>(
    flat: &mut dyn Read,
    out: W,
    opts: &RebuildOptions,
) -> Result<(W, TransportSummary)> {
    let mut r = HashingReader::new(flat);
    let (out, _, blobs) = rebuild_checked_archive(&mut r, out, opts)?;
    let (sha256, size) = r.finish();
    Ok((
        out,
        TransportSummary {
            size,
            sha256,
            blobs,
        },
    ))
}

/// [`rebuild_archive`] of a stream the caller has already checked against
/// the manifest, size and sha256 (the fetcher's download, hashed as it
/// arrived, read back from the same open file): not hashed again, since
/// sha256 costs about as much CPU as framing at a low level. Returns
/// `out`, the bytes read and the number of distinct blobs.
pub fn rebuild_checked_archive<W: Write + Seek>(
    flat: &mut dyn Read,
    out: W,
    opts: &RebuildOptions,
) -> Result<(W, u64, u32)> {
    let mut r = flat;
    let toc = FRAMING.read_toc(&mut r)?;
    let toc_len = toc.len() as u64;
    let wire: Named<WireTransport<'_>> = msgpack::decode(&toc).map_err(|e| match e {
        Error::Msgpack { offset, detail } => bad(HEADER_LEN + offset, detail),
        other => other,
    })?;
    let wire = wire.0;

    let mut writer = ArchiveWriter::new(
        out,
        wire.group_name.0,
        wire.gfx_arch_family.0,
        CompressionScheme::ZstdPerKernel,
        opts.level,
    )?;
    writer.keep_blob_structure();
    writer.set_in_flight_bytes(opts.in_flight_bytes);
    if let Some(pool) = &opts.pool {
        writer.set_pool(Arc::clone(pool));
    }
    writer.set_gfx_arches(wire.gfx_arches.iter().map(|a| a.0.to_owned()).collect());

    let mut sizes: Vec<u64> = Vec::new();
    let mut at = HEADER_LEN + toc_len;
    for e in &wire.entries {
        let name = || format!("{}/{}", e.binary.0, e.arch.0);
        let metadata = e.metadata.as_ref().map(|m| m.as_ref().clone());
        match e.blob as usize {
            b if b < sizes.len() => {
                if sizes.get(b) != Some(&e.size) {
                    return Err(bad(
                        HEADER_LEN,
                        format!(
                            "entry {} says blob {b} is {} bytes; an earlier entry says {:?}",
                            name(),
                            e.size,
                            sizes.get(b)
                        ),
                    ));
                }
                writer.add_reference(e.binary.0, e.arch.0, e.blob, e.size, metadata)?;
            }
            b if b == sizes.len() => {
                if e.size > MAX_KERNEL_SIZE {
                    return Err(bad(
                        HEADER_LEN,
                        format!(
                            "entry {} is {} bytes, over the {MAX_KERNEL_SIZE}-byte limit",
                            name(),
                            e.size
                        ),
                    ));
                }
                // Grown as the bytes arrive: a size claim alone allocates
                // nothing.
                let mut data = Vec::new();
                (&mut r)
                    .take(e.size)
                    .read_to_end(&mut data)
                    .map_err(|err| io_err("cannot read", err))?;
                if data.len() as u64 != e.size {
                    return Err(bad(
                        at + data.len() as u64,
                        format!(
                            "truncated: blob {b} ({}) has {} of {} bytes",
                            name(),
                            data.len(),
                            e.size
                        ),
                    ));
                }
                at += e.size;
                sizes.push(e.size);
                writer.add_kernel_with_metadata(e.binary.0, e.arch.0, data, metadata)?;
            }
            b => {
                return Err(bad(
                    HEADER_LEN,
                    format!(
                        "entry {} refers to blob {b} before blob {} (blobs come in order of first reference)",
                        name(),
                        sizes.len()
                    ),
                ))
            }
        }
    }
    FRAMING.expect_end(&mut r, at, "blob")?;
    let out = writer.finish()?;
    Ok((out, at, sizes.len() as u32))
}

/// Encodes `data` (`size` bytes, known up front) as a store object: one
/// zstd frame at `level` with a [`WINDOW_LOG`] window and long-distance
/// matching (repeats far apart, such as the xnack+ and xnack- builds of one
/// kernel, are found), content size and checksum, single-threaded so the
/// bytes depend on nothing but the input. Returns sha256 and size of the
/// bytes read; a stream of another length fails the encoder.
pub fn encode_store_object(
    data: &mut dyn Read,
    out: impl Write,
    level: i32,
    size: u64,
) -> io::Result<([u8; 32], u64)> {
    let mut enc = zstd::stream::write::Encoder::new(out, level)?;
    // zstd sizes its tables to the pledged size, so a small object does
    // not pay for a window it cannot use.
    enc.set_pledged_src_size(Some(size))?;
    enc.long_distance_matching(true)?;
    enc.window_log(WINDOW_LOG)?;
    enc.include_checksum(true)?;
    let mut w = HashingWriter::new(enc);
    io::copy(data, &mut w)?;
    let (enc, sha, size) = w.finish();
    let mut out = enc.finish()?;
    out.flush()?;
    Ok((sha, size))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::archive::{DEFAULT_IN_FLIGHT_BYTES, MAX_TOC_SIZE};
    use std::io::Cursor;

    /// An archive with two binaries, a shared blob and metadata.
    fn sample(scheme: CompressionScheme, level: i32) -> Vec<u8> {
        let mut w =
            ArchiveWriter::new(Cursor::new(Vec::new()), "libx", "gfx90a", scheme, level).unwrap();
        let meta = Value::Map(vec![(Value::from("k"), Value::from(1))]);
        w.add_kernel("lib/libx.so#0", "gfx90a:xnack-", vec![1u8; 5000])
            .unwrap();
        w.add_kernel_with_metadata(
            "lib/libx.so#0",
            "gfx90a:xnack+",
            vec![2u8; 3000],
            Some(meta),
        )
        .unwrap();
        // Same bytes as the first kernel: one blob for both.
        w.add_kernel("lib/liby.so#0", "gfx90a:xnack-", vec![1u8; 5000])
            .unwrap();
        w.add_kernel(
            "lib/liby.so#0",
            "gfx90a:xnack+",
            (0..=255u8).cycle().take(70_000).collect(),
        )
        .unwrap();
        w.finish().unwrap().into_inner()
    }

    fn opts(level: i32) -> RebuildOptions {
        RebuildOptions {
            level,
            in_flight_bytes: DEFAULT_IN_FLIGHT_BYTES,
            pool: None,
        }
    }

    fn flat_of(bytes: &[u8]) -> (Vec<u8>, TransportSummary) {
        let a = Archive::from_bytes(bytes.to_vec()).unwrap();
        let mut flat = Vec::new();
        let s = write_transport(&a, &mut flat).unwrap();
        (flat, s)
    }

    #[test]
    fn a_rebuild_at_the_same_level_is_the_archive_byte_for_byte() {
        let published = sample(CompressionScheme::ZstdPerKernel, 19);
        let (flat, summary) = flat_of(&published);
        assert_eq!(summary.blobs, 3, "the shared blob travels once");
        assert_eq!(summary.size, flat.len() as u64);
        let (out, read) =
            rebuild_archive(&mut flat.as_slice(), Cursor::new(Vec::new()), &opts(19)).unwrap();
        assert_eq!(read, summary);
        assert_eq!(out.into_inner(), published);
        // Without hashing: the same archive, the same size and blobs.
        let (out, size, blobs) =
            rebuild_checked_archive(&mut flat.as_slice(), Cursor::new(Vec::new()), &opts(19))
                .unwrap();
        assert_eq!((size, blobs), (summary.size, summary.blobs));
        assert_eq!(out.into_inner(), published);
    }

    #[test]
    fn the_transport_does_not_depend_on_the_frame_level() {
        let published = sample(CompressionScheme::ZstdPerKernel, 19);
        let (flat, summary) = flat_of(&published);
        let (out, _) =
            rebuild_archive(&mut flat.as_slice(), Cursor::new(Vec::new()), &opts(1)).unwrap();
        let rebuilt = out.into_inner();
        assert_ne!(rebuilt, published, "level 1 frames differ from level 19");
        let a = Archive::from_bytes(rebuilt).unwrap();
        assert_eq!(transport_summary(&a).unwrap(), summary);
        let p = Archive::from_bytes(published).unwrap();
        for (b, arch, _) in p.entries() {
            assert_eq!(a.kernel(b, arch).unwrap(), p.kernel(b, arch).unwrap());
        }
        // An uncompressed archive with the same content has the same transport.
        let none = Archive::from_bytes(sample(CompressionScheme::None, 0)).unwrap();
        assert_eq!(transport_summary(&none).unwrap(), summary);
    }

    #[test]
    fn damaged_transports_are_refused() {
        let (flat, _) = flat_of(&sample(CompressionScheme::ZstdPerKernel, 3));
        let rebuild = |bytes: &[u8]| {
            rebuild_archive(&mut &bytes[..], Cursor::new(Vec::new()), &opts(1)).map(|_| ())
        };
        // Truncated anywhere.
        for cut in [0, 3, 15, 20, flat.len() - 1] {
            let e = rebuild(&flat[..cut]).unwrap_err();
            assert!(e.to_string().contains("truncated"), "{cut}: {e}");
        }
        // Trailing bytes.
        let mut longer = flat.clone();
        longer.push(0);
        assert!(rebuild(&longer)
            .unwrap_err()
            .to_string()
            .contains("after the last blob"));
        // Another format.
        let mut newer = flat.clone();
        newer[4] = 2;
        assert!(matches!(
            rebuild(&newer).unwrap_err(),
            Error::UnsupportedVersion { found: 2, .. }
        ));
        // A TOC length past the limit.
        let mut huge = flat.clone();
        huge[8..16].copy_from_slice(&(MAX_TOC_SIZE + 1).to_le_bytes());
        assert!(rebuild(&huge).unwrap_err().to_string().contains("limit"));
        // A flipped bit in a blob changes the summary, not the structure.
        let mut flipped = flat.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        let (_, s) =
            rebuild_archive(&mut flipped.as_slice(), Cursor::new(Vec::new()), &opts(1)).unwrap();
        let (_, want) = flat_of(&sample(CompressionScheme::ZstdPerKernel, 3));
        assert_ne!(s.sha256, want.sha256);
    }

    #[test]
    fn hostile_tocs_are_refused() {
        let toc = |entries: Vec<Named<WireEntry<'static>>>| {
            let toc = msgpack::encode(&WireTransport {
                group_name: Str("libx"),
                gfx_arch_family: Str("gfx90a"),
                gfx_arches: vec![Str("gfx90a")],
                entries,
            })
            .unwrap();
            let mut out = MAGIC.to_vec();
            out.extend_from_slice(&FORMAT.to_le_bytes());
            out.extend_from_slice(&(toc.len() as u64).to_le_bytes());
            out.extend_from_slice(&toc);
            out
        };
        let entry = |binary: &'static str, size: u64, blob: u32| {
            Named(WireEntry {
                binary: Str(binary),
                arch: Str("gfx90a"),
                size,
                blob,
                metadata: None,
            })
        };
        let rebuild = |bytes: &[u8]| {
            rebuild_archive(&mut &bytes[..], Cursor::new(Vec::new()), &opts(1))
                .map(|_| ())
                .unwrap_err()
                .to_string()
        };
        // A blob out of order.
        assert!(rebuild(&toc(vec![entry("a", 4, 1)])).contains("before blob 0"));
        // A size past the kernel limit, and a size claim with no bytes.
        assert!(rebuild(&toc(vec![entry("a", MAX_KERNEL_SIZE + 1, 0)])).contains("limit"));
        assert!(rebuild(&toc(vec![entry("a", 1 << 29, 0)])).contains("truncated"));
        // A reference that disagrees about the blob's size.
        let mut t = toc(vec![entry("a", 4, 0), entry("b", 5, 0)]);
        t.extend_from_slice(b"abcd");
        assert!(rebuild(&t).contains("earlier entry says"));
    }

    #[test]
    fn store_objects_decode_with_a_default_decoder() {
        let (flat, summary) = flat_of(&sample(CompressionScheme::ZstdPerKernel, 3));
        let mut obj = Vec::new();
        let (sha, size) =
            encode_store_object(&mut flat.as_slice(), &mut obj, 3, flat.len() as u64).unwrap();
        assert_eq!((sha, size), (summary.sha256, summary.size));
        assert_eq!(zstd::decode_all(obj.as_slice()).unwrap(), flat);
        // A stream shorter than pledged is an error, not a short object.
        assert!(
            encode_store_object(&mut &flat[1..], &mut Vec::new(), 3, flat.len() as u64).is_err()
        );
    }
}
