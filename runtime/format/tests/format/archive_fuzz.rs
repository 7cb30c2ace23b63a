//! Mutation fuzzing on stable Rust: random edits of valid archives,
//! markers (bare and in an ELF section), manifests, offload bundles (plain
//! and CCOB) and HIPF/HIPK wrapper segments go through every parser and
//! accessor; none may panic, and no allocation may exceed MAX_ZSTD_RATIO
//! times the input.
//!
//! `KPACK_FUZZ_ITERS` sets the iteration count (default 100000),
//! `KPACK_FUZZ_SECS` the time stop (default 10 s; 0: none, so that
//! `KPACK_FUZZ_ITERS=1000000 KPACK_FUZZ_SECS=0` runs a million inputs),
//! `KPACK_FUZZ_SEED` the seed, to replay a failure.

use crate::archive_common::*;
use rocm_kpack_format::archive::{Archive, MAX_ZSTD_RATIO};
use rocm_kpack_format::bundle::{self, CcobMethod};
use rocm_kpack_format::manifest::Manifest;
use rocm_kpack_format::marker::{self, Marker};
use rocm_kpack_format::msgpack;
use rocm_kpack_format::wrapper::FatbinWrapper;
use rocm_kpack_format::Error;
use rocm_kpack_testkit::alloc::PEAK;
use std::io::Cursor;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::{Duration, Instant};

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
    let _ = msgpack::value_len(|i| bytes.get(i).copied().unwrap_or(0), bytes.len());
    let _ = Marker::parse(bytes);
    let _ = marker::read_elf_marker(&mut Cursor::new(bytes), Path::new("fuzz.so"));
    let _ = FatbinWrapper::parse_all(bytes);
    if let Ok(w) = FatbinWrapper::parse(bytes) {
        let _ = (w.is_hipf(), w.is_hipk(), w.co_index(), w.to_bytes());
    }
    if let Ok(bundles) = bundle::parse_fatbin(bytes) {
        for b in &bundles {
            let _ = b.code_objects().count();
            for e in &b.entries {
                let _ = (e.is_host(), e.target_id(), b.entry_data(e));
            }
        }
    }
    if let Ok(refs) = bundle::scan_fatbin(bytes) {
        for r in &refs {
            let _ = (r.targets().count(), r.decoder_memory(), r.raw().len());
            let _ = r.stream_code_objects::<Error>(|_, data| {
                std::hint::black_box(data.len());
                Ok(())
            });
        }
    }
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

/// A small plain offload bundle: host entry and two code objects, 8-byte
/// aligned so mutations land on the header often.
fn bundle_bytes() -> Vec<u8> {
    let a: Vec<u8> = (0..200u32).map(|i| (i * 7 % 251) as u8).collect();
    bundle::write_bundle_aligned(
        &[
            ("host-x86_64-unknown-linux", &[]),
            ("hipv4-amdgcn-amd-amdhsa--gfx1100", &a),
            (
                "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+",
                b"\x7fELF code object",
            ),
        ],
        8,
    )
}

fn ccob(version: u16, method: CcobMethod) -> Vec<u8> {
    bundle::compress_ccob(&bundle_bytes(), version, method).unwrap()
}

/// `.hipFatBinSegment`: a HIPF wrapper and a HIPK one.
fn wrapper_segment() -> Vec<u8> {
    let hipf = FatbinWrapper {
        magic: rocm_kpack_format::wrapper::HIPF_MAGIC,
        ..FatbinWrapper::hipk(0x1000, 0)
    };
    [hipf.to_bytes(), FatbinWrapper::hipk(0x2000, 3).to_bytes()].concat()
}

/// A minimal little-endian ELF64 file whose `.rocm_kpack_ref` holds the
/// sample marker: header, section-name table, the marker, and three
/// section headers (null, `.shstrtab`, the marker), laid out as a linker
/// would; read back through the reader before it seeds anything.
fn elf_with_marker() -> Vec<u8> {
    let names = b"\0.shstrtab\0.rocm_kpack_ref\0";
    let data = sample_marker().to_msgpack().unwrap();
    let names_at = 64u64;
    let data_at = names_at + names.len() as u64;
    let shoff = (data_at + data.len() as u64).next_multiple_of(8);
    let mut b = vec![0u8; 64];
    b[..8].copy_from_slice(b"\x7fELF\x02\x01\x01\x00");
    b[16..18].copy_from_slice(&1u16.to_le_bytes()); // ET_REL
    b[18..20].copy_from_slice(&62u16.to_le_bytes()); // EM_X86_64
    b[20..24].copy_from_slice(&1u32.to_le_bytes());
    b[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
    b[0x34..0x36].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
    b[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes()); // e_shentsize
    b[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes()); // e_shnum
    b[0x3e..0x40].copy_from_slice(&1u16.to_le_bytes()); // e_shstrndx
    b.extend_from_slice(names);
    b.extend_from_slice(&data);
    b.resize(shoff as usize, 0);
    let section = |name: u32, kind: u32, offset: u64, size: u64| {
        let mut sh = vec![0u8; 64];
        sh[0..4].copy_from_slice(&name.to_le_bytes());
        sh[4..8].copy_from_slice(&kind.to_le_bytes());
        sh[0x18..0x20].copy_from_slice(&offset.to_le_bytes());
        sh[0x20..0x28].copy_from_slice(&size.to_le_bytes());
        sh[0x30..0x38].copy_from_slice(&1u64.to_le_bytes()); // sh_addralign
        sh
    };
    b.extend(vec![0u8; 64]);
    b.extend(section(1, 3, names_at, names.len() as u64)); // SHT_STRTAB
    b.extend(section(11, 1, data_at, data.len() as u64)); // SHT_PROGBITS
    let found = marker::read_elf_marker(&mut Cursor::new(&b), Path::new("seed.o"));
    assert_eq!(
        found.unwrap(),
        Some(sample_marker()),
        "seed must carry the marker"
    );
    b
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
    let budget = match std::env::var("KPACK_FUZZ_SECS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        Some(0) => Duration::MAX,
        Some(secs) => Duration::from_secs(secs),
        None => Duration::from_secs(10),
    };
    let corpus: Vec<(&str, Vec<u8>)> = vec![
        ("noop", noop_bytes()),
        ("zstd", zstd_bytes()),
        ("ours", our_zstd_archive()),
        ("marker", sample_marker().to_msgpack().unwrap()),
        ("manifest", sample_manifest().to_msgpack().unwrap()),
        ("legacy manifest", legacy_manifest_bytes()),
        ("marker in ELF", elf_with_marker()),
        ("bundle", bundle_bytes()),
        ("CCOB v2 zlib", ccob(2, CcobMethod::Zlib)),
        ("CCOB v3 zstd", ccob(3, CcobMethod::Zstd)),
        ("CCOB v1 zstd", ccob(1, CcobMethod::Zstd)),
        ("wrapper segment", wrapper_segment()),
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
