//! Hostile rpm headers: the header parser's memory is bounded by the size
//! of its input. A counting allocator records the peak of live heap bytes
//! while `RpmReader::open` reads crafted files (tags that overlap, share
//! and inflate their data store, and random headers); the peak must stay
//! within 8x the file's size, and every file ends in a result, never a
//! panic. `KPACK_FUZZ_ITERS` sets the random iterations (default 300).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::Path;

use rocm_kpack_package::rpm::RpmReader;

/// Live and peak heap bytes of the current thread.
struct CountingAlloc;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn add(delta: isize) {
    let _ = LIVE.try_with(|l| {
        let now = l.get() + delta;
        l.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
    });
}

unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        add(layout.size() as isize);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        add(-(layout.size() as isize));
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        add(new_size as isize - layout.size() as isize);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

// The global allocator of the whole `suite` binary (tests/tests/suite/main.rs):
// it counts per thread, so the other modules' tests, running on other
// threads of the same process, do not move this module's figures.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Peak live heap bytes (above the level at the start) while `f` runs.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let out = f();
    let peak = PEAK.with(Cell::get) - base;
    (out, usize::try_from(peak).unwrap_or(0))
}

const T_INT8: u32 = 2;
const T_INT32: u32 = 4;
const T_STRING: u32 = 6;
const T_BIN: u32 = 7;
const T_STRING_ARRAY: u32 = 8;

/// One index entry: tag, type, offset, count.
type Entry = (u32, u32, i32, u32);

fn header(entries: &[Entry], data: &[u8]) -> Vec<u8> {
    let mut h = vec![0x8e, 0xad, 0xe8, 0x01, 0, 0, 0, 0];
    h.extend_from_slice(&(entries.len() as u32).to_be_bytes());
    h.extend_from_slice(&(data.len() as u32).to_be_bytes());
    for (t, ty, off, count) in entries {
        for v in [*t, *ty, *off as u32, *count] {
            h.extend_from_slice(&v.to_be_bytes());
        }
    }
    h.extend_from_slice(data);
    h
}

/// A file: lead, an empty-ish signature header, padding, `main`.
fn rpm(main: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 96];
    f[..4].copy_from_slice(&[0xed, 0xab, 0xee, 0xdb]);
    f[4] = 3;
    let sig = header(&[(1000, T_BIN, 0, 4)], &[0, 0, 0, 0]);
    f.extend_from_slice(&sig);
    while !f.len().is_multiple_of(8) {
        f.push(0);
    }
    f.extend_from_slice(main);
    f
}

/// Reads `bytes` as an rpm and checks the memory bound; returns the error
/// text (or "ok").
fn open_bounded(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    let (result, peak) = peak_of(|| RpmReader::open(&path).map(drop).map_err(|e| e.to_string()));
    // The random case writes KPACK_FUZZ_ITERS of these (20,000 of some
    // 320 KB in scripts/test.sh): kept, they took 6 GB of CI's disk.
    std::fs::remove_file(&path).unwrap();
    let limit = 8 * bytes.len();
    if !name.starts_with("random") {
        eprintln!(
            "{name}: {} byte input, peak {peak} bytes ({:.2}x)",
            bytes.len(),
            peak as f64 / bytes.len() as f64
        );
    }
    assert!(
        peak <= limit,
        "{name}: peak {peak} bytes > 8x the {} byte input",
        bytes.len()
    );
    result.err().unwrap_or_else(|| "ok".into())
}

#[test]
fn inflating_string_arrays_are_refused_within_the_memory_bound() {
    let dir = tempfile::tempdir().unwrap();
    let size = 8 << 20;
    // 8 MiB of NULs: every offset starts a run of empty strings.
    let zeros = vec![0u8; size];
    let cases: Vec<(&str, Vec<Entry>)> = vec![
        // The report's case: many tags, each a huge array over the same bytes.
        (
            "overlapping-string-arrays",
            (0..4096)
                .map(|i| (5000 + i, T_STRING_ARRAY, 0, size as u32))
                .collect(),
        ),
        // One array of as many empty strings as bytes.
        (
            "one-huge-array",
            vec![(1118, T_STRING_ARRAY, 0, size as u32)],
        ),
        // Widened integers: 1 byte in, 8 bytes out, over and over.
        (
            "overlapping-int8",
            (0..64)
                .map(|i| (6000 + i, T_INT8, 0, size as u32))
                .collect(),
        ),
        // Shared binary blobs.
        (
            "overlapping-bin",
            (0..64).map(|i| (7000 + i, T_BIN, 0, size as u32)).collect(),
        ),
        // Many small tags, the most entries the parser takes.
        (
            "many-entries",
            (0..65536)
                .map(|i| (10000 + i, T_STRING, (i % 1024) as i32, 1))
                .collect(),
        ),
    ];
    for (name, entries) in cases {
        let bytes = rpm(&header(&entries, &zeros));
        let err = open_bounded(dir.path(), name, &bytes);
        assert_ne!(err, "ok", "{name} must be refused");
        assert!(
            err.contains(name)
                || err.contains(".rpm")
                || err.contains(&*dir.path().to_string_lossy()),
            "{err}"
        );
    }
}

#[test]
fn plausible_headers_still_parse_and_names_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let mut data = Vec::new();
    let mut entries = Vec::new();
    let mut put = |t: u32, ty: u32, s: &[u8], count: u32, data: &mut Vec<u8>| {
        entries.push((t, ty, data.len() as i32, count));
        data.extend_from_slice(s);
    };
    put(1000, T_STRING, b"demo\0", 1, &mut data);
    put(1001, T_STRING, b"1.0\0", 1, &mut data);
    put(1002, T_STRING, b"1\0", 1, &mut data);
    put(1022, T_STRING, b"x86_64\0", 1, &mut data);
    // A file list: 20000 names, link targets and user names.
    let mut names = Vec::new();
    for i in 0..20000 {
        names.extend_from_slice(format!("libfile{i}.so\0").as_bytes());
    }
    put(1117, T_STRING_ARRAY, &names, 20000, &mut data);
    put(1036, T_STRING_ARRAY, &vec![0u8; 20000], 20000, &mut data);
    put(
        1039,
        T_STRING_ARRAY,
        &b"root\0".repeat(20000),
        20000,
        &mut data,
    );
    put(1028, T_INT32, &vec![0u8; 80000], 20000, &mut data);
    let err = open_bounded(dir.path(), "plausible", &rpm(&header(&entries, &data)));
    assert_eq!(err, "ok");

    // The same header with a hostile NAME, VERSION, RELEASE or ARCH.
    for (tag, value) in [
        (1000, &b"../../x\0"[..]),
        (1000, b"/etc/x\0"),
        (1000, b"a%2F..\0"),
        (1001, b"1/../..\0"),
        (1002, b"1\n2\0"),
        (1022, b"x86_64/../../..\0"),
        (1022, b"http:host\0"),
    ] {
        let mut d = data.clone();
        let mut e = entries.clone();
        let at = e.iter().position(|x| x.0 == tag).unwrap();
        e[at].2 = d.len() as i32;
        d.extend_from_slice(value);
        let err = open_bounded(dir.path(), "hostile-name", &rpm(&header(&e, &d)));
        assert!(err.contains("refusing rpm"), "{tag}: {err}");
    }
}

#[test]
fn random_headers_stay_within_the_memory_bound() {
    let iters: u64 = std::env::var("KPACK_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let dir = tempfile::tempdir().unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for i in 0..iters {
        let size = 64 * 1024 + (next() % (512 * 1024)) as usize;
        let mut data = vec![0u8; size];
        for b in data.iter_mut() {
            // Mostly NULs and short strings: the worst case for strings.
            let r = next();
            *b = if r % 4 == 0 { b'a' + (r % 26) as u8 } else { 0 };
        }
        let n = 1 + (next() % 3000) as usize;
        let entries: Vec<Entry> = (0..n)
            .map(|_| {
                let ty = 1 + (next() % 9) as u32;
                let off = (next() % size as u64) as i32;
                let count = match next() % 3 {
                    0 => (next() % 16) as u32,
                    1 => (next() % size as u64) as u32,
                    _ => u32::MAX,
                };
                (1000 + (next() % 200) as u32, ty, off, count)
            })
            .collect();
        open_bounded(
            dir.path(),
            &format!("random-{i}"),
            &rpm(&header(&entries, &data)),
        );
    }
}
