//! Hostile and broken archives: every one must give an error (never a
//! panic), and no single allocation may exceed what the input justifies.

use rocm_kpack_testkit::bomb;

use crate::archive_common::*;
use rocm_kpack_format::archive::{Archive, CompressionScheme};
use rocm_kpack_format::msgpack::{self, Value};
use rocm_kpack_format::Error;
use rocm_kpack_testkit::alloc::PEAK;

/// Opens `bytes` and, if that works, reads every entry and blob; returns
/// the first error. Asserts the allocation bound on the way.
fn open_and_read_all(bytes: &[u8]) -> Result<(), Error> {
    PEAK.with(|p| p.set(0));
    let result = (|| {
        let a = Archive::from_bytes(bytes.to_vec())?;
        let entries: Vec<(String, String)> = a
            .entries()
            .map(|(b, ar, _)| (b.to_owned(), ar.to_owned()))
            .collect();
        for (b, ar) in entries {
            a.kernel(&b, &ar)?;
        }
        for o in 0..a.blob_count() {
            a.kernel_by_ordinal(o)?;
        }
        a.verify()
    })();
    let peak = PEAK.with(|p| p.get());
    // The input copy itself is len bytes; decoded structures may cost a
    // constant factor more; decompressed kernels are checked separately.
    let bound = (bytes.len() * 64).max(1 << 20);
    assert!(
        peak <= bound,
        "allocated {peak} bytes for a {}-byte input",
        bytes.len()
    );
    result
}

fn expect_err(bytes: &[u8], why: &str) -> Error {
    match open_and_read_all(bytes) {
        Ok(()) => panic!("{why}: accepted"),
        Err(e) => e,
    }
}

fn toc_offset(bytes: &[u8]) -> usize {
    u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize
}

/// Re-encodes the TOC after `f` changes it.
fn with_toc(bytes: &[u8], f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let at = toc_offset(bytes);
    let mut toc = msgpack::decode::<Value>(&bytes[at..]).unwrap();
    f(&mut toc);
    let mut out = bytes[..at].to_vec();
    out.extend(msgpack::encode(&toc).unwrap());
    out
}

fn field<'v>(v: &'v mut Value, key: &str) -> &'v mut Value {
    match v {
        Value::Map(pairs) => {
            &mut pairs
                .iter_mut()
                .find(|(k, _)| k.as_str() == Some(key))
                .unwrap()
                .1
        }
        _ => panic!("not a map"),
    }
}

fn remove(v: &mut Value, key: &str) {
    if let Value::Map(pairs) = v {
        pairs.retain(|(k, _)| k.as_str() != Some(key));
    }
}

fn entry<'v>(toc: &'v mut Value, binary: &str, arch: &str) -> &'v mut Value {
    field(field(field(toc, "toc"), binary), arch)
}

fn s(x: &str) -> Value {
    Value::String(x.into())
}

fn valid_inputs() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("noop", noop_bytes()),
        ("zstd", zstd_bytes()),
        ("ours", our_zstd_archive()),
    ]
}

#[test]
fn valid_inputs_pass_the_same_checks() {
    for (name, bytes) in valid_inputs() {
        open_and_read_all(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn truncation_at_every_offset_is_an_error() {
    for (name, bytes) in valid_inputs() {
        for cut in 0..bytes.len() {
            expect_err(&bytes[..cut], &format!("{name} cut at {cut}"));
        }
    }
}

#[test]
fn bad_header() {
    let good = noop_bytes();
    let mut b = good.clone();
    b[0] = b'X';
    assert!(matches!(
        expect_err(&b, "magic"),
        Error::InvalidFormat { .. }
    ));

    let mut b = good.clone();
    b[4] = 2;
    let e = expect_err(&b, "version 2");
    assert!(
        matches!(e, Error::UnsupportedVersion { found: 2, .. }),
        "{e}"
    );
    assert_eq!(e.code(), rocm_kpack_format::ErrorCode::UnsupportedVersion);

    for toc in [0u64, 63, good.len() as u64, u64::MAX, 1 << 40] {
        let mut b = good.clone();
        b[8..16].copy_from_slice(&toc.to_le_bytes());
        expect_err(&b, &format!("toc_offset {toc}"));
    }
    // toc_offset inside the blob region: garbage where the TOC should be.
    let mut b = good.clone();
    b[8..16].copy_from_slice(&100u64.to_le_bytes());
    expect_err(&b, "toc_offset into blobs");
    expect_err(&[], "empty");
}

#[test]
fn trailing_bytes_after_toc() {
    for (name, mut b) in valid_inputs() {
        b.push(0);
        expect_err(&b, &format!("{name} + 1 byte"));
    }
}

#[test]
fn toc_version_2() {
    let b = with_toc(&noop_bytes(), |t| {
        *field(t, "format_version") = Value::from(2)
    });
    assert!(matches!(
        expect_err(&b, "toc v2"),
        Error::UnsupportedVersion { found: 2, .. }
    ));
}

#[test]
fn wrong_msgpack_types() {
    type Mutation = (&'static str, fn(&mut Value));
    let cases: &[Mutation] = &[
        ("toc not a map", |t| *t = Value::Array(vec![])),
        ("group_name bin", |t| {
            *field(t, "group_name") = Value::Binary(b"test".to_vec())
        }),
        ("family int", |t| {
            *field(t, "gfx_arch_family") = Value::from(9)
        }),
        ("gfx_arches str", |t| *field(t, "gfx_arches") = s("gfx900")),
        ("gfx_arches elem bin", |t| {
            *field(t, "gfx_arches") =
                Value::Array(vec![s("gfx900"), Value::Binary(b"gfx906".to_vec())])
        }),
        ("gfx_arches duplicate", |t| {
            *field(t, "gfx_arches") = Value::Array(vec![s("gfx900"), s("gfx906"), s("gfx900")])
        }),
        ("toc arch missing from gfx_arches", |t| {
            *field(t, "gfx_arches") = Value::Array(vec![s("gfx900")])
        }),
        ("scheme unknown", |t| {
            *field(t, "compression_scheme") = s("lz4")
        }),
        ("scheme bin", |t| {
            *field(t, "compression_scheme") = Value::Binary(b"none".to_vec())
        }),
        ("toc array", |t| *field(t, "toc") = Value::Array(vec![])),
        ("binary map is str", |t| {
            *field(field(t, "toc"), "bin/testapp#0") = s("x")
        }),
        ("binary key bin", |t| {
            if let Value::Map(p) = field(t, "toc") {
                p[0].0 = Value::Binary(b"lib/libtest.so#0".to_vec());
            }
        }),
        ("duplicate binary key", |t| {
            if let Value::Map(p) = field(t, "toc") {
                p[1].0 = p[0].0.clone();
            }
        }),
        ("ordinal str", |t| {
            *field(entry(t, "bin/testapp#0", "gfx900"), "ordinal") = s("2")
        }),
        ("ordinal negative", |t| {
            *field(entry(t, "bin/testapp#0", "gfx900"), "ordinal") = Value::from(-1)
        }),
        ("ordinal > u32", |t| {
            *field(entry(t, "bin/testapp#0", "gfx900"), "ordinal") = Value::from(1u64 << 32)
        }),
        ("ordinal out of range", |t| {
            *field(entry(t, "bin/testapp#0", "gfx900"), "ordinal") = Value::from(3)
        }),
        ("original_size float", |t| {
            *field(entry(t, "bin/testapp#0", "gfx900"), "original_size") = Value::F64(168.0)
        }),
        ("original_size lies", |t| {
            *field(entry(t, "bin/testapp#0", "gfx900"), "original_size") = Value::from(167)
        }),
        ("type missing", |t| {
            remove(entry(t, "bin/testapp#0", "gfx900"), "type")
        }),
        ("type bin", |t| {
            *field(entry(t, "bin/testapp#0", "gfx900"), "type") = Value::Binary(b"hsaco".to_vec())
        }),
        ("metadata not a map", |t| {
            if let Value::Map(p) = entry(t, "bin/testapp#0", "gfx900") {
                p.push((s("metadata"), Value::from(1)));
            }
        }),
        ("blobs missing", |t| remove(t, "blobs")),
        ("blobs map", |t| *field(t, "blobs") = Value::Map(vec![])),
        ("blob entry array", |t| {
            if let Value::Array(a) = field(t, "blobs") {
                a[0] = Value::Array(vec![Value::from(64), Value::from(119)]);
            }
        }),
        ("blob offset str", |t| {
            if let Value::Array(a) = field(t, "blobs") {
                *field(&mut a[0], "offset") = s("64");
            }
        }),
        ("blob offset past EOF", |t| {
            if let Value::Array(a) = field(t, "blobs") {
                *field(&mut a[2], "offset") = Value::from(100_000);
            }
        }),
        ("blob overlaps TOC", |t| {
            if let Value::Array(a) = field(t, "blobs") {
                *field(&mut a[2], "offset") = Value::from(500);
            }
        }),
        ("blob in header", |t| {
            if let Value::Array(a) = field(t, "blobs") {
                *field(&mut a[0], "offset") = Value::from(0);
            }
        }),
        ("blob offset overflow", |t| {
            if let Value::Array(a) = field(t, "blobs") {
                *field(&mut a[2], "offset") = Value::from(u64::MAX - 10);
            }
        }),
        ("blob count too small", |t| {
            if let Value::Array(a) = field(t, "blobs") {
                a.pop();
            }
        }),
        ("format_version missing", |t| remove(t, "format_version")),
        ("group_name missing", |t| remove(t, "group_name")),
    ];
    for (why, mutate) in cases {
        let b = with_toc(&noop_bytes(), mutate);
        expect_err(&b, why);
    }
}

#[test]
fn zstd_toc_errors() {
    type Mutation = (&'static str, fn(&mut Value));
    let cases: &[Mutation] = &[
        ("zstd_offset missing", |t| remove(t, "zstd_offset")),
        ("zstd_size str", |t| *field(t, "zstd_size") = s("134")),
        ("zstd_offset in header", |t| {
            *field(t, "zstd_offset") = Value::from(8)
        }),
        ("zstd_size past TOC", |t| {
            *field(t, "zstd_size") = Value::from(135)
        }),
        ("zstd_size huge", |t| {
            *field(t, "zstd_size") = Value::from(u64::MAX)
        }),
        ("zstd_size short", |t| {
            *field(t, "zstd_size") = Value::from(133)
        }),
        ("zstd_size tiny", |t| {
            *field(t, "zstd_size") = Value::from(2)
        }),
        ("ordinal >= num_frames", |t| {
            *field(entry(t, "bin/hiptest#0", "gfx1100"), "ordinal") = Value::from(3)
        }),
        ("original_size lies high", |t| {
            *field(entry(t, "bin/hiptest#0", "gfx1100"), "original_size") = Value::from(1019)
        }),
        ("original_size lies low", |t| {
            *field(entry(t, "bin/hiptest#0", "gfx1100"), "original_size") = Value::from(1000)
        }),
        ("original_size zip bomb", |t| {
            *field(entry(t, "bin/hiptest#0", "gfx1100"), "original_size") = Value::from(3u64 << 30)
        }),
        ("original_size over limit", |t| {
            *field(entry(t, "bin/hiptest#0", "gfx1100"), "original_size") = Value::from(1u64 << 40)
        }),
    ];
    for (why, mutate) in cases {
        let b = with_toc(&zstd_bytes(), mutate);
        expect_err(&b, why);
    }
}

/// Byte offset of frame `i`'s size prefix in a zstd archive.
fn frame_prefix(bytes: &[u8], i: usize) -> usize {
    let mut pos = 68;
    for _ in 0..i {
        pos += 4 + u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
    }
    pos
}

#[test]
fn zstd_region_lies() {
    let good = zstd_bytes();

    let mut b = good.clone();
    b[64..68].copy_from_slice(&u32::MAX.to_le_bytes());
    expect_err(&b, "num_frames huge");
    let mut b = good.clone();
    b[64..68].copy_from_slice(&4u32.to_le_bytes());
    expect_err(&b, "num_frames one too many");
    let mut b = good.clone();
    b[64..68].copy_from_slice(&2u32.to_le_bytes());
    expect_err(&b, "num_frames one too few");

    for i in 0..3 {
        let p = frame_prefix(&good, i);
        let size = u32::from_le_bytes(good[p..p + 4].try_into().unwrap());
        for lie in [size - 1, size + 1, u32::MAX, 0] {
            let mut b = good.clone();
            b[p..p + 4].copy_from_slice(&lie.to_le_bytes());
            expect_err(&b, &format!("frame {i} size {size} -> {lie}"));
        }
        // Not a zstd frame at all.
        let mut b = good.clone();
        b[p + 4] ^= 0xff;
        expect_err(&b, &format!("frame {i} magic"));
    }
}

/// Frame header content-size field: the zstd vector's frames are
/// single-segment with a 2-byte FCS at frame offset 5 (value - 256).
fn patch_fcs(bytes: &mut [u8], frame: usize, declared: u64) {
    let p = frame_prefix(bytes, frame) + 4;
    assert_eq!(bytes[p + 4], 0x60, "FHD: single segment, 2-byte FCS");
    let v = u16::try_from(declared - 256).unwrap();
    bytes[p + 5..p + 7].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn frame_content_size_lies() {
    for declared in [1018u64, 1020, 60_000] {
        // TOC and frame agree on a size the data does not have.
        let mut b = with_toc(&zstd_bytes(), |t| {
            *field(entry(t, "lib/libhip.so#0", "gfx1100"), "original_size") = Value::from(declared)
        });
        patch_fcs(&mut b, 0, declared);
        expect_err(&b, &format!("frame declares {declared}"));
    }
}

#[test]
fn frame_without_content_size_is_rejected() {
    let data = zstd_kernels()[2].2.clone();
    let mut c = zstd::bulk::Compressor::new(3).unwrap();
    c.set_parameter(zstd::zstd_safe::CParameter::ContentSizeFlag(false))
        .unwrap();
    let frame = c.compress(&data).unwrap();
    assert_eq!(
        zstd::zstd_safe::get_frame_content_size(&frame).unwrap(),
        None
    );

    // Rebuild the archive with frame 2 replaced.
    let good = zstd_bytes();
    let p = frame_prefix(&good, 2);
    let old_len = u32::from_le_bytes(good[p..p + 4].try_into().unwrap()) as usize;
    let at = toc_offset(&good);
    let mut b = good[..p].to_vec();
    b.extend((frame.len() as u32).to_le_bytes());
    b.extend(&frame);
    b.extend(&good[p + 4 + old_len..at]);
    let new_at = b.len() as u64;
    b[8..16].copy_from_slice(&new_at.to_le_bytes());
    let mut toc = msgpack::decode::<Value>(&good[at..]).unwrap();
    *field(&mut toc, "zstd_size") = Value::from(new_at - 64);
    b.extend(msgpack::encode(&toc).unwrap());
    let e = expect_err(&b, "no content size");
    assert!(e.to_string().contains("content size"), "{e}");
}

#[test]
fn zip_bomb_is_refused_before_allocating() {
    // A small frame that truthfully decodes to a lot: 8 MiB of zeros.
    let bomb = vec![0u8; 8 << 20];
    let bytes = write_archive(
        CompressionScheme::ZstdPerKernel,
        "z",
        "gfx110X",
        &[("b#0", "gfx1100", bomb.clone())],
    );
    assert!(bytes.len() < 4096, "{} bytes", bytes.len());
    // Legitimate: reads back (ratio within what zstd can produce).
    let a = Archive::from_bytes(bytes.clone()).unwrap();
    assert_eq!(a.kernel("b#0", "gfx1100").unwrap(), bomb);

    // The same frame claiming 512 MiB (under MAX_KERNEL_SIZE) in TOC and
    // frame header: refused by the ratio cap, and nothing near that size
    // is allocated.
    let claim = |size: u32| {
        let p = 68 + 4;
        let mut b = with_toc(&bytes, |t| {
            *field(entry(t, "b#0", "gfx1100"), "original_size") = Value::from(size)
        });
        let fhd = b[p + 4];
        assert_eq!(fhd >> 6, 2, "4-byte FCS expected, FHD {fhd:#x}");
        let fcs_at = p + 5 + usize::from(fhd & 0x20 == 0);
        b[fcs_at..fcs_at + 4].copy_from_slice(&size.to_le_bytes());
        b
    };
    let e = expect_err(&claim(512 << 20), "512 MiB claim");
    assert!(e.to_string().contains("impossible"), "{e}");
    // 3 GiB is over MAX_KERNEL_SIZE: refused when the TOC is read.
    let e = expect_err(&claim(3 << 30), "3 GiB claim");
    assert!(e.to_string().contains("limit"), "{e}");
}

#[test]
fn truthful_4_gib_bomb_is_refused_before_allocating() {
    // 4 GiB of zeros in a 128 KiB frame: within the 32768:1 ratio, so only
    // MAX_KERNEL_SIZE stands between it and a 4 GiB buffer.
    let b = bomb::zstd_bomb_archive(4 << 30);
    let e = expect_err(&b, "4 GiB bomb");
    assert!(e.to_string().contains("limit"), "{e}");
}

#[test]
fn huge_counts_in_toc() {
    let good = noop_bytes();
    let at = toc_offset(&good);
    for toc in [
        vec![0xdf, 0xff, 0xff, 0xff, 0xff],       // map32 of 4G pairs
        vec![0xdd, 0xff, 0xff, 0xff, 0xff],       // array32
        vec![0xdb, 0xff, 0xff, 0xff, 0xff, b'a'], // str32
        vec![0x81, 0xa3, b't', b'o', b'c', 0xdf, 0x7f, 0xff, 0xff, 0xff],
        vec![0x91; 200], // nesting
    ] {
        let mut b = good[..at].to_vec();
        b.extend(&toc);
        expect_err(&b, &format!("toc {:02x?}", &toc[..toc.len().min(8)]));
    }
    // blobs array claiming 2^32-1 elements inside an otherwise valid TOC.
    let b = with_toc(&good, |t| *field(t, "blobs") = Value::Array(vec![]));
    let pos = b.len() - 1;
    let mut b2 = b[..pos].to_vec();
    assert_eq!(b[pos], 0x90);
    b2.extend([0xdd, 0xff, 0xff, 0xff, 0xff]);
    expect_err(&b2, "blobs count");
}

#[test]
fn errors_have_useful_codes() {
    let b = with_toc(&zstd_bytes(), |t| {
        *field(entry(t, "bin/hiptest#0", "gfx1100"), "original_size") = Value::from(1000)
    });
    let a = Archive::from_bytes(b).unwrap();
    let e = a.kernel("bin/hiptest#0", "gfx1100").unwrap_err();
    assert_eq!(e.code(), rocm_kpack_format::ErrorCode::DecompressionFailed);
    // Other kernels of the same archive still read.
    assert_eq!(
        a.kernel("lib/libhip.so#0", "gfx1101").unwrap(),
        zstd_kernels()[1].2
    );
    let e = expect_err(&noop_bytes()[..100], "truncated");
    assert!(matches!(
        e.code(),
        rocm_kpack_format::ErrorCode::InvalidFormat
            | rocm_kpack_format::ErrorCode::MsgpackParseFailed
    ));
}
