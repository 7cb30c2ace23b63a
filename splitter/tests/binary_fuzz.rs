//! Mutation fuzzing of the ELF and PE readers on stable Rust: random edits
//! of the committed fat binaries (tests/fixtures: ELF from clang 15 and 19,
//! PE DLLs and EXEs, the PE32 and ARM64 error images) and of their split
//! outputs go through the reader (`Elf::parse` / `Pe::parse` and every
//! table accessor), the split planning path (`split_fat_elf`: classify,
//! bundle scan, rewrite, verification of the rewritten bytes) and
//! `inspect`. None may panic or hang, and no single allocation may exceed
//! [`ALLOC_RATIO`] times the input (plus 1 MiB).
//!
//! `KPACK_FUZZ_ITERS` sets the iteration count per test (default 100000),
//! `KPACK_FUZZ_SECS` the time limit per test (default 10 s; `0` lifts it),
//! `KPACK_FUZZ_SEED` the seed, to replay a failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rocm_kpack_splitter::coff::{self, Pe};
use rocm_kpack_splitter::elf::{self, Elf};
use rocm_kpack_splitter::split::binary::{split_fat_elf, ElfSplit};
use rocm_kpack_testkit::alloc::{PeakAlloc, PEAK};

#[global_allocator]
static ALLOC: PeakAlloc = PeakAlloc;

/// Largest single allocation allowed per input byte. The rewrite holds the
/// output's new headers and the relocation list; a `DT_RELR` bitmap word
/// (8 bytes) expands to up to 63 relocations, and a growing `Vec` may
/// double: 63 * 40 / 8 * 2 = 630.
const ALLOC_RATIO: u64 = 1024;
/// No single input may take longer than this (a hang, not a slow input).
const MAX_ONE_INPUT: Duration = Duration::from_secs(5);

const INTERESTING: &[u64] = &[
    0,
    1,
    2,
    7,
    8,
    0x18,
    0x38,
    0x40,
    0x7f,
    0x80,
    0xff,
    0x100,
    0xfff,
    0x1000,
    0xff00,
    0xffff,
    0x1_0000,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    0x1_0000_0000,
    i64::MAX as u64,
    u64::MAX,
];

/// SplitMix64: deterministic, seedable, no dependency.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// One seed: its bytes and the header fields worth editing, as
/// `(file offset, width in bytes)`.
struct Seed {
    name: String,
    bytes: Vec<u8>,
    fields: Vec<(usize, usize)>,
}

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

fn read_seeds(paths: &[&str]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for p in paths {
        let path = fixtures().join(p);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // The split output of each fat fixture is a seed too (the
        // already-split paths, the marker section, HIPK wrappers).
        if let Ok(ElfSplit::Split(s)) = split_fat_elf(&bytes, "fuzz", vec!["fuzz".into()]) {
            let host = s.host.to_vec().expect("fixture splits");
            out.push((format!("{p} (split)"), host));
        }
        out.push((p.to_string(), bytes));
    }
    out
}

/// ELF fields: the file header, every program and section header, the
/// dynamic table.
fn elf_fields(data: &[u8]) -> Vec<(usize, usize)> {
    let mut f: Vec<(usize, usize)> = [
        (4, 1),
        (5, 1),
        (16, 2),
        (18, 2),
        (24, 8),
        (32, 8),
        (40, 8),
        (52, 2),
        (54, 2),
        (56, 2),
        (58, 2),
        (60, 2),
        (62, 2),
    ]
    .to_vec();
    let elf = Elf::parse(data).expect("seed parses");
    let phoff = elf.phoff() as usize;
    for i in 0..elf.phdrs.len() {
        for (o, w) in [(0, 4), (4, 4), (8, 8), (16, 8), (32, 8), (40, 8), (48, 8)] {
            f.push((phoff + i * 56 + o, w));
        }
        let p = elf.phdrs[i];
        if p.p_type == elf::read::PT_DYNAMIC {
            for e in 0..(p.p_filesz / 16) as usize {
                f.push((p.p_offset as usize + e * 16, 8));
                f.push((p.p_offset as usize + e * 16 + 8, 8));
            }
        }
    }
    let shoff = elf.shoff() as usize;
    for i in 0..elf.shdrs.len() {
        for (o, w) in [(0, 4), (4, 4), (8, 8), (16, 8), (24, 8), (32, 8), (48, 8)] {
            f.push((shoff + i * 64 + o, w));
        }
    }
    f
}

/// PE fields: `e_lfanew`, the file and optional headers, the data
/// directories, every section header.
fn pe_fields(data: &[u8]) -> Vec<(usize, usize)> {
    let pe = Pe::parse(data).expect("seed parses");
    let mut f = vec![(0x3c, 4)];
    let nt = pe.nt_offset;
    for (o, w) in [(4, 2), (6, 2), (12, 4), (20, 2), (22, 2)] {
        f.push((nt + o, w));
    }
    let opt = pe.opt_offset;
    for (o, w) in [
        (0, 2),
        (8, 4),
        (24, 8),
        (32, 4),
        (36, 4),
        (56, 4),
        (60, 4),
        (64, 4),
        (70, 2),
        (108, 4),
    ] {
        f.push((opt + o, w));
    }
    for i in 0..pe.dirs.len() {
        f.push((pe.dirs_offset + 8 * i, 4));
        f.push((pe.dirs_offset + 8 * i + 4, 4));
    }
    for s in &pe.sections {
        for (o, w) in [(0, 8), (8, 4), (12, 4), (16, 4), (20, 4), (36, 4)] {
            f.push((pe.section_table + 40 * s.index + o, w));
        }
    }
    f
}

fn put_le(b: &mut [u8], at: usize, width: usize, v: u64) {
    for (i, byte) in v.to_le_bytes().iter().take(width).enumerate() {
        if let Some(x) = b.get_mut(at + i) {
            *x = *byte;
        }
    }
}

fn get_le(b: &[u8], at: usize, width: usize) -> u64 {
    let mut v = [0u8; 8];
    for (i, x) in v.iter_mut().take(width).enumerate() {
        *x = b.get(at + i).copied().unwrap_or(0);
    }
    u64::from_le_bytes(v)
}

fn mutate(rng: &mut Rng, seed: &Seed) -> Vec<u8> {
    let mut b = seed.bytes.clone();
    for _ in 0..1 + rng.below(3) {
        let len = b.len().max(1);
        let at = rng.below(len);
        match rng.below(10) {
            // Bit flip.
            0 => {
                if let Some(x) = b.get_mut(at) {
                    *x ^= 1 << rng.below(8);
                }
            }
            // Random byte.
            1 => {
                if let Some(x) = b.get_mut(at) {
                    *x = rng.next_u64() as u8;
                }
            }
            // Interesting value anywhere.
            2 => {
                let v = INTERESTING[rng.below(INTERESTING.len())];
                put_le(&mut b, at, [1, 2, 4, 8][rng.below(4)], v);
            }
            // Truncation.
            3 => b.truncate(at),
            // Header field: an interesting value, the file's length
            // (+-2), or the field's value nudged.
            4..=7 => {
                let (off, width) = seed.fields[rng.below(seed.fields.len())];
                let old = get_le(&b, off, width);
                let v = match rng.below(4) {
                    0 | 1 => INTERESTING[rng.below(INTERESTING.len())],
                    2 => (b.len() as u64)
                        .wrapping_add(rng.below(5) as u64)
                        .wrapping_sub(2),
                    _ => old.wrapping_add(rng.below(33) as u64).wrapping_sub(16),
                };
                put_le(&mut b, off, width, v);
            }
            // Insert or remove a byte (shifts everything after).
            8 => {
                if rng.below(2) == 0 {
                    b.insert(at.min(b.len()), rng.next_u64() as u8);
                } else if at < b.len() {
                    b.remove(at);
                }
            }
            // Copy a chunk over another place.
            _ => {
                let n = 1 + rng.below(64);
                let src = b
                    .get(at..(at + n).min(b.len()))
                    .unwrap_or_default()
                    .to_vec();
                let to = rng.below(len);
                for (i, x) in src.iter().enumerate() {
                    if let Some(y) = b.get_mut(to + i) {
                        *y = *x;
                    }
                }
            }
        }
    }
    b
}

/// How far an input got: 0 rejected by the reader, 1 parsed, 2 rewritten
/// (split planned), 3 rewritten and the output verified.
type Depth = usize;

/// The ELF reader with every accessor, the split planning path, inspect.
fn exercise_elf(bytes: &[u8]) -> Depth {
    let parsed = Elf::parse(bytes);
    if let Ok(elf) = &parsed {
        for i in 0..elf.shdrs.len().min(256) {
            let _ = elf.section_name(i);
            let _ = elf.section_data(i);
        }
        let _ = elf.dynamic();
        let _ = elf.dynamic_relocations();
        let _ = elf.dynamic_symbols();
        let _ = elf.dynamic_symbol(1);
        let _ = elf.u64_at_vaddr(elf.phdrs.first().map_or(0, |p| p.p_vaddr));
        let _ = elf::verify::check_structure(elf);
    }
    let _ = elf::inspect::inspect_elf(bytes);
    plan(bytes).max(usize::from(parsed.is_ok()))
}

/// The PE reader with every accessor, the split planning path, inspect.
fn exercise_pe(bytes: &[u8]) -> Depth {
    let _ = coff::is_pe(bytes);
    let parsed = Pe::parse(bytes);
    if let Ok(pe) = &parsed {
        for i in 0..pe.sections.len().min(256) {
            let _ = pe.section_data(i);
        }
        let _ = pe.base_relocations();
        let _ = pe.find_section(coff::read::FATBIN_SECTION);
        let _ = pe.rva_to_offset(pe.sections.first().map_or(0, |s| s.rva), 8);
    }
    let _ = coff::inspect::inspect_pe(bytes);
    plan(bytes).max(usize::from(parsed.is_ok()))
}

/// Classify, scan the bundles, rewrite, and verify the rewritten bytes.
fn plan(bytes: &[u8]) -> Depth {
    match split_fat_elf(bytes, "fuzz", vec!["fuzz".into()]) {
        Ok(ElfSplit::Split(s)) => 2 + usize::from(s.host.to_vec().is_ok()),
        _ => 0,
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn run(what: &str, seeds: Vec<Seed>, exercise: fn(&[u8]) -> Depth) {
    let iters = env_u64("KPACK_FUZZ_ITERS").unwrap_or(100_000);
    let seed = env_u64("KPACK_FUZZ_SEED").unwrap_or(0x6b70_616b);
    let budget = match env_u64("KPACK_FUZZ_SECS") {
        Some(0) => None,
        Some(s) => Some(Duration::from_secs(s)),
        None => Some(Duration::from_secs(10)),
    };
    // The seeds themselves must go through cleanly first.
    for s in &seeds {
        assert!(exercise(&s.bytes) >= 1, "{} does not parse", s.name);
    }
    let mut depths = [0u64; 4];
    let mut rng = Rng(seed);
    let start = Instant::now();
    let mut done = 0u64;
    let mut slowest = Duration::ZERO;
    let mut largest = 0usize;
    while done < iters && budget.is_none_or(|b| start.elapsed() < b) {
        let s = &seeds[rng.below(seeds.len())];
        let bytes = mutate(&mut rng, s);
        PEAK.with(|p| p.set(0));
        let t = Instant::now();
        let Ok(depth) = catch_unwind(AssertUnwindSafe(|| exercise(&bytes))) else {
            panic!(
                "{what}: panic on mutated {} (seed {seed}, iteration {done}; replay with \
                 KPACK_FUZZ_SEED={seed} KPACK_FUZZ_ITERS={})",
                s.name,
                done + 1
            );
        };
        if let Some(d) = depths.get_mut(depth) {
            *d += 1;
        }
        let took = t.elapsed();
        assert!(
            took <= MAX_ONE_INPUT,
            "{what}: mutated {} took {took:?} (seed {seed}, iteration {done})",
            s.name
        );
        slowest = slowest.max(took);
        let peak = PEAK.with(|p| p.get());
        largest = largest.max(peak);
        let bound = bytes.len() as u64 * ALLOC_RATIO + (1 << 20);
        assert!(
            peak as u64 <= bound,
            "{what}: {peak}-byte allocation for {}-byte mutated {} (seed {seed}, iteration {done})",
            bytes.len(),
            s.name
        );
        done += 1;
    }
    eprintln!(
        "{what} fuzz: {done} inputs from {} seeds in {:?} (slowest input {slowest:?}, largest allocation {largest} bytes); \
         rejected by the reader {}, parsed {}, split planned {}, split output verified {}",
        seeds.len(),
        start.elapsed(),
        depths[0],
        depths[1],
        depths[2],
        depths[3]
    );
    assert!(done >= iters.min(100), "only {done} iterations ran");
}

#[test]
fn mutated_elf_files_never_panic() {
    let mut paths = Vec::new();
    for dir in ["clang15", "clang19", "clang19-compressed"] {
        for f in [
            "app_nopie",
            "app_pie",
            "app_rdc",
            "libfixture.so",
            "libmulti.so",
        ] {
            paths.push(format!("{dir}/{f}"));
        }
    }
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    let seeds = read_seeds(&paths)
        .into_iter()
        .map(|(name, bytes)| Seed {
            fields: elf_fields(&bytes),
            name,
            bytes,
        })
        .collect();
    run("ELF", seeds, exercise_elf);
}

#[test]
fn mutated_pe_images_never_panic() {
    let seeds = read_seeds(&[
        "windows/clang19/kpfix.dll",
        "windows/clang19/kpapp.exe",
        "windows/clang19-compressed/kpfix.dll",
        "windows/clang19-compressed/kpapp.exe",
        "windows/errors/pe32.dll",
        "windows/errors/arm64.dll",
    ])
    .into_iter()
    .map(|(name, bytes)| Seed {
        fields: pe_fields(&bytes),
        name,
        bytes,
    })
    .collect();
    run("PE", seeds, exercise_pe);
}
