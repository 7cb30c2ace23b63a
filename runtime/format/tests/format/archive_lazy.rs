//! Lazy access to zstd archives: frames are located only as far as a request
//! needs (what a request sees never depends on earlier requests), and kernels
//! can be decompressed straight into caller-provided memory
//! (`kernel_into`, `kernel_with`) with the same checks as `kernel`.

use crate::archive_common::*;
use rocm_kpack_format::archive::{Archive, CompressionScheme};
use rocm_kpack_format::msgpack::{self, Value};
use rocm_kpack_format::Error;
use std::mem::MaybeUninit;

/// Byte offset of frame `i`'s size prefix in a zstd archive.
fn frame_prefix(bytes: &[u8], i: usize) -> usize {
    let mut pos = 68;
    for _ in 0..i {
        pos += 4 + u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
    }
    pos
}

fn toc_offset(bytes: &[u8]) -> usize {
    u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize
}

/// `bytes` with `extra` inserted just before the TOC, the header and the
/// TOC's `zstd_size` adjusted so the region covers them.
fn with_bytes_after_last_frame(bytes: &[u8], extra: &[u8]) -> Vec<u8> {
    let at = toc_offset(bytes);
    let mut toc = msgpack::decode::<Value>(&bytes[at..]).unwrap();
    if let Value::Map(pairs) = &mut toc {
        for (k, v) in pairs.iter_mut() {
            if k.as_str() == Some("zstd_size") {
                *v = Value::from(v.as_u64().unwrap() + extra.len() as u64);
            }
        }
    }
    let mut out = bytes[..at].to_vec();
    out.extend_from_slice(extra);
    out[8..16].copy_from_slice(&((at + extra.len()) as u64).to_le_bytes());
    out.extend(msgpack::encode(&toc).unwrap());
    out
}

#[test]
fn a_broken_prefix_hides_its_frame_and_later_ones_only() {
    let good = zstd_bytes();
    let mut b = good.clone();
    let p = frame_prefix(&good, 1);
    b[p..p + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let a = Archive::from_bytes(b).unwrap();
    let k = zstd_kernels();
    // Same answers whatever was asked first, and asked again.
    for _ in 0..2 {
        assert_eq!(a.kernel(k[0].0, k[0].1).unwrap(), k[0].2);
        let e = a.kernel(k[1].0, k[1].1).unwrap_err();
        assert!(matches!(e, Error::InvalidFormat { .. }), "{e}");
        assert!(e.to_string().contains("frame 1"), "{e}");
        assert!(a.kernel(k[2].0, k[2].1).is_err());
    }
    let a = Archive::from_bytes({
        let mut b = good.clone();
        b[p..p + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        b
    })
    .unwrap();
    // Asking for the last frame first gives the same results.
    assert!(a.kernel(k[2].0, k[2].1).is_err());
    assert_eq!(a.kernel(k[0].0, k[0].1).unwrap(), k[0].2);
    assert!(a.verify().is_err());
}

#[test]
fn bytes_after_the_last_frame_make_the_last_frame_unreadable() {
    let b = with_bytes_after_last_frame(&zstd_bytes(), b"junk");
    let a = Archive::from_bytes(b).unwrap();
    let k = zstd_kernels();
    assert_eq!(a.kernel(k[0].0, k[0].1).unwrap(), k[0].2);
    assert_eq!(a.kernel(k[1].0, k[1].1).unwrap(), k[1].2);
    let e = a.kernel(k[2].0, k[2].1).unwrap_err();
    assert!(
        e.to_string()
            .contains("4 unused bytes after the last frame"),
        "{e}"
    );
    assert!(a.verify().is_err());
    assert!(a.stored_size(2).is_err());
    assert!(a.stored_size(0).is_ok());
}

#[test]
fn a_region_without_frames_must_be_just_the_count() {
    let writer = |extra: &[u8]| {
        let empty = write_archive(CompressionScheme::ZstdPerKernel, "t", "gfx110X", &[]);
        with_bytes_after_last_frame(&empty, extra)
    };
    let a = Archive::from_bytes(writer(b"")).unwrap();
    assert_eq!(a.blob_count(), 0);
    a.verify().unwrap();
    let e = Archive::from_bytes(writer(b"xx")).unwrap_err();
    assert!(e.to_string().contains("no frames"), "{e}");
}

#[test]
fn kernel_into_and_kernel_with_match_kernel() {
    for bytes in [zstd_bytes(), noop_bytes(), our_zstd_archive()] {
        let a = Archive::from_bytes(bytes).unwrap();
        for (b, ar, e) in a.entries() {
            let want = a.kernel(b, ar).unwrap();
            assert_eq!(a.kernel_len(b, ar).unwrap() as u64, e.original_size);
            assert_eq!(want.len() as u64, e.original_size);

            // Exactly the size, and a larger buffer (only the prefix written).
            let mut out = vec![0x5a_u8; want.len()];
            assert_eq!(a.kernel_into(b, ar, &mut out).unwrap(), want.len());
            assert_eq!(out, want);
            let mut big = vec![0x5a_u8; want.len() + 7];
            assert_eq!(a.kernel_into(b, ar, &mut big).unwrap(), want.len());
            assert_eq!(&big[..want.len()], &want[..]);
            assert_eq!(&big[want.len()..], &[0x5a; 7]);
            // One byte short: refused, nothing claimed.
            let mut small = vec![0u8; want.len() - 1];
            assert!(matches!(
                a.kernel_into(b, ar, &mut small),
                Err(Error::InvalidArgument(_))
            ));

            let mut asked = None;
            let (buf, len) = a
                .kernel_with(b, ar, |n| {
                    asked = Some(n);
                    Ok(vec![MaybeUninit::<u8>::uninit(); n])
                })
                .unwrap();
            assert_eq!(asked, Some(want.len()));
            assert_eq!(len, want.len());
            // SAFETY: kernel_with initialized the first `len` bytes.
            let got: Vec<u8> = buf[..len]
                .iter()
                .map(|b| unsafe { b.assume_init() })
                .collect();
            assert_eq!(got, want);
        }
        assert!(matches!(
            a.kernel_into("nope", "gfx1100", &mut [0; 8]),
            Err(Error::KernelNotFound { .. })
        ));
    }
}

#[test]
fn kernel_with_checks_the_frame_before_allocating() {
    // Declared content size patched to disagree with the TOC: the allocator
    // must not be asked for anything.
    let mut b = zstd_bytes();
    let p = frame_prefix(&b, 0) + 4;
    assert_eq!(b[p + 4], 0x60, "FHD: single segment, 2-byte FCS");
    b[p + 5] ^= 0x01;
    let a = Archive::from_bytes(b).unwrap();
    let k = zstd_kernels();
    let mut called = false;
    let r = a.kernel_with(k[0].0, k[0].1, |n| {
        called = true;
        Ok(vec![MaybeUninit::<u8>::uninit(); n])
    });
    assert!(matches!(r, Err(Error::Decompression(_))), "{:?}", r.err());
    assert!(!called);
    assert!(a.kernel_len(k[0].0, k[0].1).is_err());

    // An allocation failure is passed through unchanged.
    let a = Archive::from_bytes(zstd_bytes()).unwrap();
    let r = a.kernel_with(k[1].0, k[1].1, |_| -> Result<Vec<MaybeUninit<u8>>, Error> {
        Err(Error::InvalidArgument("no memory today".into()))
    });
    assert!(matches!(r, Err(Error::InvalidArgument(m)) if m == "no memory today"));
    // A buffer smaller than asked for is refused.
    let r = a.kernel_with(k[1].0, k[1].1, |n| {
        Ok(vec![MaybeUninit::<u8>::uninit(); n - 1])
    });
    assert!(matches!(r, Err(Error::InvalidArgument(_))));
}

#[test]
fn threads_racing_on_a_fresh_index_all_get_correct_bytes() {
    // Many frames, so the walk is long enough for threads to overlap in it.
    let kernels: Vec<(String, String, Vec<u8>)> = (0..200u32)
        .map(|i| {
            let mut data = format!("kernel {i} ").into_bytes();
            data.extend(std::iter::repeat_n((i % 251) as u8, 300 + i as usize * 7));
            (format!("lib/libk.so#{i}"), "gfx1100".to_owned(), data)
        })
        .collect();
    let refs: Vec<(&str, &str, Vec<u8>)> = kernels
        .iter()
        .map(|(b, a, d)| (b.as_str(), a.as_str(), d.clone()))
        .collect();
    let bytes = write_archive(CompressionScheme::ZstdPerKernel, "t", "gfx110X", &refs);
    for round in 0..20 {
        let a = Archive::from_bytes(bytes.clone()).unwrap();
        std::thread::scope(|s| {
            for t in 0..8usize {
                let (a, kernels) = (&a, &kernels);
                s.spawn(move || {
                    // Each thread walks the ordinals in its own order.
                    for j in 0..kernels.len() {
                        let i = (j * (2 * t + 1) + round * 13) % kernels.len();
                        let (b, ar, want) = &kernels[i];
                        assert_eq!(&a.kernel(b, ar).unwrap(), want, "thread {t} kernel {i}");
                    }
                });
            }
        });
    }
}
