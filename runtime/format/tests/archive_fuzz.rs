//! Mutation fuzzing on stable Rust: random edits of valid archives,
//! markers and manifests go through every parser and accessor; none may
//! panic, and no allocation may exceed MAX_ZSTD_RATIO times the input.
//!
//! `KPACK_FUZZ_ITERS` sets the iteration count (default 100000; the run also
//! stops after 10 s), `KPACK_FUZZ_SEED` the seed, to replay a failure.
#![allow(clippy::unwrap_used)]

mod archive_common;
mod peak_alloc;

use archive_common::*;
use peak_alloc::{PeakAlloc, PEAK};
use rocm_kpack_format::archive::{Archive, MAX_ZSTD_RATIO};
use rocm_kpack_format::manifest::Manifest;
use rocm_kpack_format::marker::Marker;
use rocm_kpack_format::msgpack;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

#[global_allocator]
static ALLOC: PeakAlloc = PeakAlloc;

const INTERESTING: &[u64] = &[
    0,
    1,
    0x7f,
    0x80,
    0xff,
    0x100,
    0xffff,
    0x1_0000,
    0xffff_ffff,
    u64::MAX,
];
const MARKERS: &[u8] = &[
    0xc0, 0xc1, 0xc4, 0xc6, 0xcc, 0xcf, 0xd3, 0xd9, 0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0x9f, 0x8f, 0xbf,
];

fn mutate(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut b = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = b.len().max(1);
        let at = rng.below(len);
        match rng.below(9) {
            0 => {
                if let Some(x) = b.get_mut(at) {
                    *x ^= 1 << rng.below(8);
                }
            }
            1 => {
                if let Some(x) = b.get_mut(at) {
                    *x = rng.next_u64() as u8;
                }
            }
            2 => {
                if let Some(x) = b.get_mut(at) {
                    *x = MARKERS[rng.below(MARKERS.len())];
                }
            }
            3 => b.insert(at.min(b.len()), rng.next_u64() as u8),
            4 => {
                if at < b.len() {
                    b.remove(at);
                }
            }
            5 => b.truncate(at),
            6 => {
                // Overwrite a little-endian integer (header and prefixes).
                let v = if rng.below(2) == 0 {
                    INTERESTING[rng.below(INTERESTING.len())]
                } else {
                    (input.len() as u64)
                        .wrapping_add(rng.below(5) as u64)
                        .wrapping_sub(2)
                };
                let width = [1, 2, 4, 8][rng.below(4)];
                for (i, byte) in v.to_le_bytes().iter().take(width).enumerate() {
                    if let Some(x) = b.get_mut(at + i) {
                        *x = *byte;
                    }
                }
            }
            7 => {
                // Big-endian, as MessagePack lengths are.
                let v = INTERESTING[rng.below(INTERESTING.len())];
                for (i, byte) in v.to_be_bytes().iter().skip(4).enumerate() {
                    if let Some(x) = b.get_mut(at + i) {
                        *x = *byte;
                    }
                }
            }
            _ => {
                // Duplicate a chunk.
                let end = (at + 1 + rng.below(16)).min(b.len());
                let chunk = b.get(at..end).unwrap_or_default().to_vec();
                let to = rng.below(b.len() + 1);
                b.splice(to..to, chunk);
            }
        }
    }
    b
}

/// Every parser and accessor over `bytes`; results are ignored, only
/// panics and allocation size matter.
fn exercise(bytes: &[u8]) {
    let _ = msgpack::decode::<msgpack::Value>(bytes);
    let _ = Marker::parse(bytes);
    let _ = Manifest::parse(bytes).map(|m| {
        let _ = m.file_for_arch("gfx1100");
        let _ = m.to_msgpack();
    });
    if let Ok(a) = Archive::from_bytes(bytes.to_vec()) {
        let _ = (
            a.group_name(),
            a.gfx_arch_family(),
            a.scheme(),
            a.toc_offset(),
        );
        let _ = (
            a.file_len(),
            a.blob_region_len(),
            a.zstd_region(),
            a.has_arch("gfx900"),
        );
        let _ = a.binaries();
        let pairs: Vec<(String, String)> = a
            .entries()
            .map(|(b, ar, _)| (b.to_owned(), ar.to_owned()))
            .collect();
        for (b, ar) in &pairs {
            let _ = a.entry(b, ar);
            let _ = a.kernel(b, ar);
        }
        for o in 0..a.blob_count().saturating_add(2).min(64) {
            let _ = a.kernel_by_ordinal(o);
            let _ = a.stored_size(o);
        }
        let _ = a.verify();
        let _ = a.kernel("missing", "gfx900");
    }
}

#[test]
fn mutated_inputs_never_panic() {
    let iters: u64 = std::env::var("KPACK_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let seed: u64 = std::env::var("KPACK_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x6b70_616b);
    let budget = Duration::from_secs(10);
    let corpus: Vec<(&str, Vec<u8>)> = vec![
        ("noop", noop_bytes()),
        ("zstd", zstd_bytes()),
        ("ours", our_zstd_archive()),
        ("marker", sample_marker().to_msgpack().unwrap()),
        ("manifest", sample_manifest().to_msgpack().unwrap()),
        ("legacy manifest", legacy_manifest_bytes()),
    ];
    let mut rng = Rng(seed);
    let start = Instant::now();
    let mut done = 0u64;
    while done < iters && start.elapsed() < budget {
        let (name, input) = &corpus[rng.below(corpus.len())];
        let bytes = mutate(&mut rng, input);
        PEAK.with(|p| p.set(0));
        if catch_unwind(AssertUnwindSafe(|| exercise(&bytes))).is_err() {
            panic!(
                "panic on mutated {name} (seed {seed}, iteration {done}): {}",
                hex::encode(&bytes)
            );
        }
        let peak = PEAK.with(|p| p.get());
        let bound = (bytes.len() as u64 * MAX_ZSTD_RATIO).max(1 << 20);
        assert!(
            peak as u64 <= bound,
            "{peak}-byte allocation for {}-byte mutated {name}: {}",
            bytes.len(),
            hex::encode(&bytes)
        );
        done += 1;
    }
    eprintln!("fuzz: {done} inputs in {:?}", start.elapsed());
    assert!(done >= iters.min(100), "only {done} iterations ran");
}
