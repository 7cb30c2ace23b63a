//! Conformance with the reference writer's test vectors (docs/formats.md
//! section 6) and the format rules our writer must follow.

use crate::archive_common::*;
use rocm_kpack_format::archive::{Archive, ArchiveWriter, CompressionScheme, TocEntry};
use rocm_kpack_format::msgpack::{self, Value};
use std::io::{Cursor, Seek, SeekFrom, Write};

fn assert_contents(archive: &Archive, kernels: &[(&str, &str, Vec<u8>)], ordinals: &[u32]) {
    let listed: Vec<(&str, &str, &TocEntry)> = archive.entries().collect();
    assert_eq!(listed.len(), kernels.len());
    for (((b, a, data), (lb, la, e)), &ord) in kernels.iter().zip(&listed).zip(ordinals) {
        assert_eq!((*b, *a), (*lb, *la), "TOC order");
        assert_eq!(e.ordinal, ord, "{b} {a}");
        assert_eq!(e.original_size, data.len() as u64);
        assert_eq!(e.metadata, None);
        assert_eq!(&archive.kernel(b, a).unwrap(), data, "{b} {a}");
        assert_eq!(&archive.kernel_by_ordinal(ord).unwrap(), data);
    }
    archive.verify().unwrap();
}

#[test]
fn reads_test_noop_vector() {
    let bytes = noop_bytes();
    assert_eq!(bytes.len(), 903);
    let a = Archive::from_bytes(bytes).unwrap();
    assert_eq!(a.group_name(), "test");
    assert_eq!(a.gfx_arch_family(), "gfx900X");
    assert_eq!(a.gfx_arches(), ["gfx900", "gfx906"]);
    assert_eq!(a.scheme(), CompressionScheme::None);
    assert_eq!(a.binaries(), ["bin/testapp#0", "lib/libtest.so#0"]);
    assert_eq!(a.blob_count(), 3);
    assert!(a.has_arch("gfx906") && !a.has_arch("gfx908"));
    assert_contents(&a, &noop_kernels(), &[0, 1, 2]);
    assert_eq!(a.stored_size(1).unwrap(), 219);
    assert!(matches!(
        a.kernel("bin/testapp#0", "gfx906"),
        Err(rocm_kpack_format::Error::KernelNotFound { .. })
    ));
}

#[test]
fn reads_test_zstd_vector() {
    let bytes = zstd_bytes();
    assert_eq!(bytes.len(), 518);
    let a = Archive::from_bytes(bytes).unwrap();
    assert_eq!(a.group_name(), "test");
    assert_eq!(a.gfx_arch_family(), "gfx110X");
    assert_eq!(a.gfx_arches(), ["gfx1100", "gfx1101"]);
    assert_eq!(a.scheme(), CompressionScheme::ZstdPerKernel);
    assert_eq!(a.zstd_region(), Some((64, 134)));
    assert_eq!(a.binaries(), ["bin/hiptest#0", "lib/libhip.so#0"]);
    assert_contents(&a, &zstd_kernels(), &[0, 1, 2]);
    assert!(a.stored_size(0).unwrap() < 1019);
}

#[test]
fn open_reads_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("test_zstd.kpack");
    std::fs::write(&path, zstd_bytes()).unwrap();
    let a = Archive::open(&path).unwrap();
    assert_contents(&a, &zstd_kernels(), &[0, 1, 2]);
    assert!(matches!(
        Archive::open(&dir.path().join("missing.kpack")),
        Err(rocm_kpack_format::Error::FileNotFound { .. })
    ));
    let bad = dir.path().join("truncated.kpack");
    std::fs::write(&bad, &zstd_bytes()[..300]).unwrap();
    let e = Archive::open(&bad).unwrap_err();
    assert!(e.to_string().contains("truncated.kpack"), "{e}");
}

#[test]
fn open_reads_no_blob_bytes() {
    // Wreck every byte of the blob region after num_frames: header and TOC
    // are intact, so opening works, and only reading a kernel notices.
    for mut bytes in [zstd_bytes(), noop_bytes()] {
        let toc = u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize;
        let a = Archive::from_bytes(bytes.clone()).unwrap();
        let first = if a.scheme() == CompressionScheme::ZstdPerKernel {
            68
        } else {
            64
        };
        bytes[first..toc].fill(0xee);
        let a = Archive::from_bytes(bytes).unwrap();
        assert_eq!(a.entries().count(), 3);
        let (b, ar, _) = a.entries().next().unwrap();
        let got = a.kernel(b, ar);
        if a.scheme() == CompressionScheme::ZstdPerKernel {
            assert!(got.is_err());
        } else {
            assert_eq!(got.unwrap(), vec![0xee; 119]);
        }
    }
}

#[test]
fn writer_reproduces_test_noop_byte_for_byte() {
    let ours = write_archive(CompressionScheme::None, "test", "gfx900X", &noop_kernels());
    assert_eq!(ours, noop_bytes());
}

#[test]
fn writer_matches_test_zstd_layout() {
    let ours = write_archive(
        CompressionScheme::ZstdPerKernel,
        "test",
        "gfx110X",
        &zstd_kernels(),
    );
    let a = Archive::from_bytes(ours.clone()).unwrap();
    assert_contents(&a, &zstd_kernels(), &[0, 1, 2]);
    // Same zstd library, level and frame parameters as the reference
    // writer: the whole file comes out identical.
    assert_eq!(ours, zstd_bytes());
}

/// Frame spans of a zstd archive, walked by hand from the header.
fn frames(bytes: &[u8]) -> Vec<&[u8]> {
    let n = u32::from_le_bytes(bytes[64..68].try_into().unwrap());
    let mut pos = 68;
    let mut out = Vec::new();
    for _ in 0..n {
        let len = u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
        pos += 4;
        out.push(&bytes[pos..pos + len]);
        pos += len;
    }
    out
}

#[test]
fn frames_we_write_carry_content_size() {
    let kernels = vec![
        ("a#0", "gfx1100", Vec::new()),
        ("a#0", "gfx1101", vec![7u8; 1]),
        (
            "b#0",
            "gfx1100",
            (0..300_000u32).flat_map(|i| i.to_le_bytes()).collect(),
        ),
    ];
    let bytes = write_archive(CompressionScheme::ZstdPerKernel, "g", "gfx110X", &kernels);
    let fs = frames(&bytes);
    assert_eq!(fs.len(), 3);
    for (frame, (_, _, data)) in fs.iter().zip(&kernels) {
        assert_eq!(
            zstd::zstd_safe::get_frame_content_size(frame).unwrap(),
            Some(data.len() as u64)
        );
        // Frame_Header_Descriptor: single-segment or an FCS field present.
        let fhd = frame[4];
        assert!(fhd & 0x20 != 0 || fhd >> 6 != 0, "FHD {fhd:#x}");
    }
}

#[test]
fn toc_key_order_and_types() {
    for (scheme, tail) in [
        (CompressionScheme::None, &["blobs"][..]),
        (
            CompressionScheme::ZstdPerKernel,
            &["zstd_offset", "zstd_size"][..],
        ),
    ] {
        let bytes = write_archive(scheme, "test", "gfx900X", &noop_kernels());
        let toc_offset = u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize;
        let toc = msgpack::decode::<Value>(&bytes[toc_offset..]).unwrap();
        let keys: Vec<&str> = toc
            .as_map()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str().unwrap())
            .collect();
        let mut want = vec![
            "format_version",
            "group_name",
            "gfx_arch_family",
            "gfx_arches",
            "toc",
            "compression_scheme",
        ];
        want.extend_from_slice(tail);
        assert_eq!(keys, want);
        let entry = toc
            .get("toc")
            .unwrap()
            .get("lib/libtest.so#0")
            .unwrap()
            .get("gfx906")
            .unwrap();
        let entry_keys: Vec<&str> = entry
            .as_map()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str().unwrap())
            .collect();
        assert_eq!(entry_keys, ["type", "ordinal", "original_size"]);
        assert_eq!(entry.get("type"), Some(&Value::String("hsaco".into())));
    }
}

#[test]
fn dedup_shares_ordinals_and_shrinks_output() {
    let k = noop_kernels();
    let mut dup = k.clone();
    dup.push(("bin/other#0", "gfx906", k[0].2.clone()));
    dup.push(("bin/other#1", "gfx900", k[2].2.clone()));
    for scheme in [CompressionScheme::None, CompressionScheme::ZstdPerKernel] {
        let plain = write_archive(scheme, "t", "gfx900X", &k);
        let with_dup = write_archive(scheme, "t", "gfx900X", &dup);
        let a = Archive::from_bytes(with_dup.clone()).unwrap();
        assert_eq!(a.blob_count(), 3);
        assert_eq!(a.entry("bin/other#0", "gfx906").unwrap().ordinal, 0);
        assert_eq!(a.entry("bin/other#1", "gfx900").unwrap().ordinal, 2);
        for (b, ar, d) in &dup {
            assert_eq!(&a.kernel(b, ar).unwrap(), d);
        }
        // Two extra TOC entries cost far less than two extra blobs would.
        let blob_bytes = (k[0].2.len() + k[2].2.len()) as u64;
        assert!(
            ((with_dup.len() - plain.len()) as u64) < blob_bytes / 2,
            "{scheme}: {} -> {}",
            plain.len(),
            with_dup.len()
        );
    }
}

#[test]
fn dedup_works_across_the_in_flight_window() {
    let data: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i; 1000]).collect();
    let mut w = ArchiveWriter::new(
        Cursor::new(Vec::new()),
        "t",
        "gfx110X",
        CompressionScheme::ZstdPerKernel,
        3,
    )
    .unwrap();
    w.set_in_flight_bytes(1500);
    for round in 0..3 {
        for (i, d) in data.iter().enumerate() {
            w.add_kernel(&format!("bin{round}#{i}"), "gfx1100", d.clone())
                .unwrap();
        }
    }
    let a = Archive::from_bytes(w.finish().unwrap().into_inner()).unwrap();
    assert_eq!(a.blob_count(), 6);
    for round in 0..3 {
        for (i, d) in data.iter().enumerate() {
            let key = format!("bin{round}#{i}");
            assert_eq!(a.entry(&key, "gfx1100").unwrap().ordinal, i as u32);
            assert_eq!(&a.kernel(&key, "gfx1100").unwrap(), d);
        }
    }
}

#[test]
fn output_is_deterministic_and_independent_of_in_flight_bound() {
    let kernels: Vec<(String, &str, Vec<u8>)> = (0..40u32)
        .map(|i| {
            let data: Vec<u8> = (0..(i * 997 % 5000)).map(|j| (j * i % 251) as u8).collect();
            (
                format!("lib/x.so#{i}"),
                if i % 3 == 0 {
                    "gfx1100"
                } else {
                    "gfx90a:xnack+"
                },
                data,
            )
        })
        .collect();
    let run = |bound: usize| {
        let mut w = ArchiveWriter::new(
            Cursor::new(Vec::new()),
            "x",
            "gfx110X",
            CompressionScheme::ZstdPerKernel,
            3,
        )
        .unwrap();
        w.set_in_flight_bytes(bound);
        for (b, a, d) in &kernels {
            w.add_kernel(b, a, d.clone()).unwrap();
        }
        w.finish().unwrap().into_inner()
    };
    let reference = run(0);
    assert_eq!(run(0), reference);
    assert_eq!(run(10_000), reference);
    assert_eq!(run(usize::MAX), reference);
}

#[test]
fn writer_starts_at_stream_position_and_patches_header() {
    let mut out = Cursor::new(Vec::new());
    out.write_all(b"PREFIX").unwrap();
    let mut w = ArchiveWriter::new(out, "test", "gfx900X", CompressionScheme::None, 3).unwrap();
    for (b, a, d) in noop_kernels() {
        w.add_kernel(b, a, d).unwrap();
    }
    let mut out = w.finish().unwrap();
    assert_eq!(out.stream_position().unwrap(), 6 + 903);
    out.seek(SeekFrom::Start(0)).unwrap();
    let bytes = out.into_inner();
    assert_eq!(&bytes[..6], b"PREFIX");
    assert_eq!(&bytes[6..], &noop_bytes()[..]);
}

#[test]
fn gfx_arches_metadata_and_writer_errors() {
    let mut w = ArchiveWriter::new(
        Cursor::new(Vec::new()),
        "t",
        "gfx110X",
        CompressionScheme::ZstdPerKernel,
        3,
    )
    .unwrap();
    let meta = Value::Map(vec![(Value::String("note".into()), Value::from(7))]);
    w.add_kernel_with_metadata("b#0", "gfx1101", vec![1, 2, 3], Some(meta.clone()))
        .unwrap();
    w.add_kernel("b#0", "gfx1100", vec![4]).unwrap();
    assert!(
        w.add_kernel("b#0", "gfx1100", vec![5]).is_err(),
        "duplicate pair"
    );
    assert!(w.add_kernel("", "gfx1100", vec![5]).is_err());
    assert!(w
        .add_kernel_with_metadata("c#0", "gfx1100", vec![], Some(Value::from(1)))
        .is_err());
    w.set_gfx_arches(vec!["gfx1100".into(), "gfx1101".into(), "gfx1102".into()]);
    let a = Archive::from_bytes(w.finish().unwrap().into_inner()).unwrap();
    assert_eq!(a.gfx_arches(), ["gfx1100", "gfx1101", "gfx1102"]);
    assert_eq!(a.entry("b#0", "gfx1101").unwrap().metadata, Some(meta));
    assert_eq!(a.kernel("b#0", "gfx1101").unwrap(), [1, 2, 3]);

    let mut w = ArchiveWriter::new(
        Cursor::new(Vec::new()),
        "t",
        "f",
        CompressionScheme::None,
        3,
    )
    .unwrap();
    w.add_kernel("b#0", "gfx1100", vec![1]).unwrap();
    w.set_gfx_arches(vec!["gfx1101".into()]);
    assert!(w.finish().is_err(), "gfx_arches must cover every TOC arch");

    assert!(ArchiveWriter::new(
        Cursor::new(Vec::new()),
        "t",
        "f",
        CompressionScheme::ZstdPerKernel,
        99
    )
    .is_err());
}

#[test]
fn empty_archives_round_trip() {
    for scheme in [CompressionScheme::None, CompressionScheme::ZstdPerKernel] {
        let bytes = write_archive(scheme, "empty", "gfx110X", &[]);
        let a = Archive::from_bytes(bytes).unwrap();
        assert_eq!(a.entries().count(), 0);
        assert_eq!(a.blob_count(), 0);
        assert!(a.gfx_arches().is_empty());
        a.verify().unwrap();
    }
}

#[test]
fn archive_is_send_sync_and_kernel_runs_concurrently() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Archive>();

    let kernels: Vec<(String, &str, Vec<u8>)> = (0..64u32)
        .map(|i| {
            (
                format!("lib/k.so#{i}"),
                "gfx1100",
                (0..20_000u32).map(|j| (j ^ i) as u8).collect(),
            )
        })
        .collect();
    let refs: Vec<(&str, &str, Vec<u8>)> = kernels
        .iter()
        .map(|(b, a, d)| (b.as_str(), *a, d.clone()))
        .collect();
    let bytes = write_archive(CompressionScheme::ZstdPerKernel, "c", "gfx110X", &refs);
    let archive = Archive::from_bytes(bytes).unwrap();
    std::thread::scope(|s| {
        for t in 0..8 {
            let (archive, kernels) = (&archive, &kernels);
            s.spawn(move || {
                for i in 0..kernels.len() {
                    let (b, a, d) = &kernels[(i + t * 7) % kernels.len()];
                    assert_eq!(&archive.kernel(b, a).unwrap(), d);
                }
            });
        }
    });
}

#[test]
fn writers_inside_the_rayon_pool_do_not_deadlock() {
    use rayon::prelude::*;
    // More concurrent writers than pool threads, each waiting on jobs that
    // need the same pool.
    let make = |i: u32| -> Vec<u8> {
        let mut w = ArchiveWriter::new(
            Cursor::new(Vec::new()),
            "p",
            "gfx110X",
            CompressionScheme::ZstdPerKernel,
            3,
        )
        .unwrap();
        w.set_in_flight_bytes(10_000);
        for k in 0..40u32 {
            let data: Vec<u8> = (0..5000u32).map(|j| (j * (k + 1) + i) as u8).collect();
            w.add_kernel(&format!("lib/p{i}.so#{k}"), "gfx1100", data)
                .unwrap();
        }
        w.finish().unwrap().into_inner()
    };
    let parallel: Vec<Vec<u8>> = (0..4 * rayon::current_num_threads() as u32)
        .into_par_iter()
        .map(make)
        .collect();
    for (i, bytes) in parallel.iter().enumerate() {
        assert_eq!(bytes, &make(i as u32));
    }
}
