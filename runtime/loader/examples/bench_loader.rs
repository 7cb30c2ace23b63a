//! Loader benchmark: prints figures, asserts nothing.
//!
//!   cargo build --release -p rocm-kpack-capi      # the C library it also measures
//!   cargo run --release -p rocm-kpack-loader --example bench_loader -- <archive.kpack | dir> [--target T]
//!   cargo run --release -p rocm-kpack-loader --example bench_loader -- --from-fat <elf> [--out DIR] [--target T]
//!
//! `--binary <host-only ELF>` (a binary from `rocm-kpack split-binary`) also
//! times the first load the way a launch does it: marker read out of the
//! binary's `.rocm_kpack_ref`, search through its `.kpm` manifest.
//!
//! With `--from-fat`, every bundle of the ELF's `.hip_fatbin` becomes code
//! object `#<bundle index>` of `lib/<name>` in one zstd archive per target
//! (written to DIR, default a temp dir), which is then measured like an
//! archive set (e.g. Debian's librocsparse: 111 bundles per target).
//!
//! Measured, in one run, on the archive holding the chosen target (default:
//! the one with the most code objects):
//! - RSS after opening (VmRSS delta) vs the archive size: open must not read
//!   the blob region;
//! - cache creation + first code object (Rust API and C ABI), page cache warm;
//!   the C ABI is the built `librocm_kpack.so` of the same profile, opened
//!   with dlopen as a HIP runtime would link it;
//! - all code objects for the target: loader (Rust API, C ABI) vs plain zstd
//!   decompression of the same frames with one reused context (baseline);
//! - decompression throughput over every kernel of the archive, 1 and 2 threads.

use std::ffi::{c_char, c_void, CString};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rocm_kpack_format::archive::{Archive, ArchiveWriter, CompressionScheme};
use rocm_kpack_format::layout;
use rocm_kpack_format::marker::Marker;
use rocm_kpack_loader::loader::{Cache, LoaderConfig};

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> AnyResult<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opt = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let target_arg = opt("--target");
    let _tmp;
    let archives: Vec<PathBuf> = if let Some(fat) = opt("--from-fat") {
        let out = match opt("--out") {
            Some(d) => PathBuf::from(d),
            None => {
                _tmp = tempfile::tempdir()?;
                _tmp.path().to_path_buf()
            }
        };
        archives_from_fat(Path::new(&fat), &out)?
    } else {
        let p = PathBuf::from(
            args.first()
                .ok_or("usage: bench_loader <archive|dir> | --from-fat <elf>")?,
        );
        if p.is_dir() {
            let mut v: Vec<PathBuf> = std::fs::read_dir(&p)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "kpack"))
                .collect();
            v.sort();
            v
        } else {
            vec![p]
        }
    };
    if archives.is_empty() {
        return Err("no .kpack archives".into());
    }

    // Pick the archive and target with the most code objects.
    let mut best: Option<(PathBuf, String, usize)> = None;
    for p in &archives {
        let a = Archive::open(p)?;
        for arch in a.gfx_arches() {
            if target_arg.as_ref().is_some_and(|t| t != arch) {
                continue;
            }
            let n = a.entries().filter(|(_, x, _)| x == arch).count();
            if !matches!(&best, Some((_, _, m)) if *m >= n) {
                best = Some((p.clone(), arch.clone(), n));
            }
        }
    }
    let (path, target, count) = best.ok_or("target not found in any archive")?;
    let size = std::fs::metadata(&path)?.len();
    println!(
        "archive  {} ({:.1} MiB, {} archives in the set)",
        path.display(),
        mib(size),
        archives.len()
    );
    println!("target   {target}: {count} code objects");

    // Page cache warm-up: read the file once.
    let mut f = std::fs::File::open(&path)?;
    let mut buf = vec![0u8; 1 << 20];
    while f.read(&mut buf)? > 0 {}
    drop(buf);

    // RSS after open.
    let before = vm_rss_kib();
    let archive = Archive::open(&path)?;
    let after = vm_rss_kib();
    println!(
        "open     RSS +{} KiB after Archive::open ({:.3}% of the {:.1} MiB archive; blob region {:.1} MiB)",
        after.saturating_sub(before),
        after.saturating_sub(before) as f64 * 1024.0 * 100.0 / size as f64,
        mib(size),
        mib(archive.blob_region_len())
    );

    let keys: Vec<String> = {
        let mut k: Vec<(u32, String)> = archive
            .entries()
            .filter(|(_, a, _)| *a == target)
            .map(|(b, _, e)| (e.ordinal, b.to_owned()))
            .collect();
        k.sort();
        k.into_iter().map(|(_, b)| b).collect()
    };
    let requests: Vec<(Marker, u32)> = keys
        .iter()
        .map(|k| {
            let (name, co) = k.rsplit_once('#').unwrap_or((k, "0"));
            (
                Marker {
                    kpack_search_paths: vec![path.display().to_string()],
                    kernel_name: name.to_owned(),
                },
                co.parse().unwrap_or(0),
            )
        })
        .collect();
    let binary = path.with_file_name("host-binary");
    let config = LoaderConfig::default();

    // First load: new cache + one code object, median of 21.
    let (m0, c0) = &requests[0];
    let first = median((0..21).map(|_| {
        let t = Instant::now();
        let cache = Cache::with_config(config.clone());
        let co = cache
            .load_code_object(m0, &binary, *c0, &[target.as_str()])
            .map(|c| c.data.len());
        let d = t.elapsed();
        assert!(co.is_ok(), "first load failed: {co:?}");
        d
    }));
    let first_c = median((0..21).map(|_| c_first_load(m0, &binary, *c0, &target)));
    println!(
        "first    cache + first code object: {:.3} ms (Rust API), {:.3} ms (C ABI; {:.1} KiB object)",
        ms(first),
        ms(first_c),
        archive.entry(&keys[0], &target).map_or(0, |e| e.original_size) as f64 / 1024.0
    );

    // The same first load split into its parts: Archive::open (header +
    // TOC) and the first kernel() on the fresh archive (frame index +
    // decompression).
    let (e0, a0) = (&keys[0], target.as_str());
    let mut parts = Vec::with_capacity(21);
    for _ in 0..21 {
        let t = Instant::now();
        let a = Archive::open(&path)?;
        let opened = t.elapsed();
        let t = Instant::now();
        std::hint::black_box(a.kernel(e0, a0)?);
        parts.push((opened, t.elapsed()));
    }
    // Worst case for the lazy frame index: the first request is for the
    // archive's last frame, so every size prefix is walked.
    let (last_b, last_a, _) = archive
        .entries()
        .max_by_key(|(_, _, e)| e.ordinal)
        .ok_or("empty archive")?;
    let (last_b, last_a) = (last_b.to_owned(), last_a.to_owned());
    let mut last = Vec::with_capacity(21);
    for _ in 0..21 {
        let a = Archive::open(&path)?;
        let t = Instant::now();
        std::hint::black_box(a.kernel(&last_b, &last_a)?);
        let first = t.elapsed();
        let t = Instant::now();
        std::hint::black_box(a.kernel(&last_b, &last_a)?);
        last.push((first, t.elapsed()));
    }
    println!(
        "parts    Archive::open {:.3} ms, first kernel() {:.3} ms; first kernel() of the last of {} frames {:.3} ms, of which decompression {:.3} ms (medians)",
        ms(median(parts.iter().map(|p| p.0))),
        ms(median(parts.iter().map(|p| p.1))),
        archive.blob_count(),
        ms(median(last.iter().map(|p| p.0))),
        ms(median(last.iter().map(|p| p.1)))
    );

    if let Some(host) = opt("--binary") {
        let host = PathBuf::from(host);
        let elf = std::fs::read(&host)?;
        let marker =
            Marker::parse(elf_section(&elf, ".rocm_kpack_ref").ok_or("no .rocm_kpack_ref")?)?;
        let d = median((0..21).map(|_| {
            let t = Instant::now();
            let cache = Cache::with_config(config.clone());
            let co = cache.load_code_object(&marker, &host, 0, &[target.as_str()]);
            let d = t.elapsed();
            assert!(
                co.is_ok(),
                "first load through the marker failed: {:?}",
                co.err()
            );
            d
        }));
        println!(
            "first    through {}'s marker and manifest: {:.3} ms",
            host.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            ms(d)
        );
    }

    // All code objects for the target: loader (Rust API, C ABI) and the
    // plain zstd baseline, interleaved round by round so load from other
    // processes hits all three alike; best round of each.
    let cache = Cache::with_config(config.clone());
    let frames = zstd_frames(&path, &archive, &target)?;
    let mut total_bytes = 0u64;
    let (mut all_rust, mut all_c, mut baseline) = (Duration::MAX, Duration::MAX, Duration::MAX);
    for _ in 0..7 {
        total_bytes = 0;
        let t = Instant::now();
        for (m, co) in &requests {
            let c = cache.load_code_object(m, &binary, *co, &[target.as_str()]);
            total_bytes += c.map(|c| c.data.len() as u64).unwrap_or(0);
        }
        all_rust = all_rust.min(t.elapsed());
        all_c = all_c.min(c_load_all(&requests, &binary, &target));
        let mut dctx = zstd::bulk::Decompressor::new()?;
        let t = Instant::now();
        for (frame, n) in &frames {
            let out = dctx.decompress(frame, *n)?;
            std::hint::black_box(out);
        }
        baseline = baseline.min(t.elapsed());
    }
    println!(
        "all      {} code objects, {:.1} MiB: loader {:.1} ms (Rust API), {:.1} ms (C ABI); plain zstd {:.1} ms",
        requests.len(),
        mib(total_bytes),
        ms(all_rust),
        ms(all_c),
        ms(baseline)
    );
    println!(
        "ratio    loader / plain zstd: {:.2}x (Rust API), {:.2}x (C ABI)   [target: <= 1.3x]",
        all_rust.as_secs_f64() / baseline.as_secs_f64(),
        all_c.as_secs_f64() / baseline.as_secs_f64()
    );

    // Throughput over every kernel of the archive, 1 vs 2 threads.
    let every: Vec<(String, String)> = archive
        .entries()
        .map(|(b, a, _)| (b.to_owned(), a.to_owned()))
        .collect();
    let out_bytes: u64 = archive.entries().map(|(_, _, e)| e.original_size).sum();
    for threads in [1usize, 2] {
        let d = best_of(3, || {
            let t = Instant::now();
            std::thread::scope(|s| {
                for chunk in every.chunks(every.len().div_ceil(threads)) {
                    let a = &archive;
                    s.spawn(move || {
                        for (b, arch) in chunk {
                            std::hint::black_box(a.kernel(b, arch).expect("kernel"));
                        }
                    });
                }
            });
            t.elapsed()
        });
        println!(
            "threads  {threads}: {} kernels, {:.1} MiB out in {:.1} ms = {:.0} MiB/s",
            every.len(),
            mib(out_bytes),
            ms(d),
            mib(out_bytes) / d.as_secs_f64()
        );
    }
    println!("rss      VmRSS now {} KiB", vm_rss_kib());
    Ok(())
}

/// The C ABI entry points the benchmark calls, from the built library.
#[allow(non_camel_case_types)]
type kpack_cache_t = *mut c_void;

/// `kpack_load_code_object`.
type LoadFn = unsafe extern "C" fn(
    kpack_cache_t,
    *const c_void,
    *const c_char,
    u32,
    *const *const c_char,
    usize,
    *mut *mut c_void,
    *mut usize,
) -> u32;

struct CApi {
    cache_create: unsafe extern "C" fn(*mut kpack_cache_t) -> u32,
    cache_destroy: unsafe extern "C" fn(kpack_cache_t),
    load: LoadFn,
    free: unsafe extern "C" fn(*mut c_void),
}

/// `librocm_kpack.so` beside the example's profile directory
/// (`target/<profile>/examples/bench_loader` -> `target/<profile>/`).
fn capi() -> &'static CApi {
    static API: std::sync::OnceLock<CApi> = std::sync::OnceLock::new();
    API.get_or_init(|| {
        let exe = std::env::current_exe().expect("current_exe");
        let lib = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>/examples")
            .join("librocm_kpack.so");
        let path = CString::new(lib.display().to_string()).expect("path");
        // SAFETY: dlopen/dlsym with NUL-terminated names; the symbols have
        // the signatures of kpack.h, and the library stays loaded.
        unsafe {
            let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW);
            assert!(
                !handle.is_null(),
                "cannot open {} (build it first: cargo build --release -p rocm-kpack-capi)",
                lib.display()
            );
            let sym = |name: &str| {
                let c = CString::new(name).expect("name");
                let p = libc::dlsym(handle, c.as_ptr());
                assert!(!p.is_null(), "{name} missing from {}", lib.display());
                p
            };
            CApi {
                cache_create: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(*mut kpack_cache_t) -> u32,
                >(sym("kpack_cache_create")),
                cache_destroy: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(kpack_cache_t),
                >(sym("kpack_cache_destroy")),
                load: std::mem::transmute::<*mut c_void, LoadFn>(sym("kpack_load_code_object")),
                free: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut c_void)>(sym(
                    "kpack_free_code_object",
                )),
            }
        }
    })
}

fn c_first_load(m: &Marker, binary: &Path, co: u32, target: &str) -> Duration {
    let api = capi();
    let marker = m.to_msgpack().expect("marker");
    let bin = CString::new(binary.display().to_string()).expect("path");
    let arch = CString::new(target).expect("arch");
    let list = [arch.as_ptr()];
    let t = Instant::now();
    let mut cache: kpack_cache_t = std::ptr::null_mut();
    let mut out: *mut c_void = std::ptr::null_mut();
    let mut n = 0usize;
    // SAFETY: valid pointers; buffers released once.
    unsafe {
        (api.cache_create)(&mut cache);
        let rc = (api.load)(
            cache,
            marker.as_ptr().cast(),
            bin.as_ptr(),
            co,
            list.as_ptr(),
            1,
            &mut out,
            &mut n,
        );
        let d = t.elapsed();
        assert_eq!(rc, rocm_kpack_format::ErrorCode::Success as u32);
        (api.free)(out);
        (api.cache_destroy)(cache);
        d
    }
}

fn c_load_all(requests: &[(Marker, u32)], binary: &Path, target: &str) -> Duration {
    let api = capi();
    let markers: Vec<Vec<u8>> = requests
        .iter()
        .map(|(m, _)| m.to_msgpack().expect("marker"))
        .collect();
    let bin = CString::new(binary.display().to_string()).expect("path");
    let arch = CString::new(target).expect("arch");
    let list: [*const c_char; 1] = [arch.as_ptr()];
    let mut cache: kpack_cache_t = std::ptr::null_mut();
    // SAFETY: valid pointers; buffers released once.
    unsafe {
        (api.cache_create)(&mut cache);
        // Open the archive outside the timed loop, like the Rust run.
        let mut out: *mut c_void = std::ptr::null_mut();
        let mut n = 0usize;
        (api.load)(
            cache,
            markers[0].as_ptr().cast(),
            bin.as_ptr(),
            requests[0].1,
            list.as_ptr(),
            1,
            &mut out,
            &mut n,
        );
        (api.free)(out);
        let t = Instant::now();
        for (m, (_, co)) in markers.iter().zip(requests) {
            let rc = (api.load)(
                cache,
                m.as_ptr().cast(),
                bin.as_ptr(),
                *co,
                list.as_ptr(),
                1,
                &mut out,
                &mut n,
            );
            assert_eq!(rc, rocm_kpack_format::ErrorCode::Success as u32);
            (api.free)(out);
        }
        let d = t.elapsed();
        (api.cache_destroy)(cache);
        d
    }
}

/// The zstd frames (and decompressed sizes) of the target's code objects,
/// read straight from the file's zstd region.
fn zstd_frames(path: &Path, archive: &Archive, target: &str) -> AnyResult<Vec<(Vec<u8>, usize)>> {
    let (off, len) = archive
        .zstd_region()
        .ok_or("archive is not zstd-per-kernel")?;
    let bytes = std::fs::read(path)?;
    let region = bytes
        .get(off as usize..(off + len) as usize)
        .ok_or("region out of range")?;
    let count = u32::from_le_bytes(region.get(0..4).ok_or("short")?.try_into()?) as usize;
    let mut spans = Vec::with_capacity(count);
    let mut pos = 4usize;
    for _ in 0..count {
        let n = u32::from_le_bytes(region.get(pos..pos + 4).ok_or("short")?.try_into()?) as usize;
        spans.push((pos + 4, n));
        pos += 4 + n;
    }
    let mut entries: Vec<(u32, u64)> = archive
        .entries()
        .filter(|(_, a, _)| *a == target)
        .map(|(_, _, e)| (e.ordinal, e.original_size))
        .collect();
    entries.sort();
    entries
        .into_iter()
        .map(|(ord, size)| {
            let (s, n) = spans
                .get(ord as usize)
                .copied()
                .ok_or("ordinal out of range")?;
            Ok((
                region.get(s..s + n).ok_or("frame out of range")?.to_vec(),
                size as usize,
            ))
        })
        .collect()
}

/// One zstd archive per target from the bundles of an ELF's `.hip_fatbin`.
fn archives_from_fat(elf: &Path, out: &Path) -> AnyResult<Vec<PathBuf>> {
    let file = std::fs::File::open(elf)?;
    // SAFETY: read-only map of an input file not modified meanwhile.
    let map = unsafe { memmap2::Mmap::map(&file)? };
    let section = elf_section(&map, ".hip_fatbin").ok_or("no .hip_fatbin section")?;
    let bundles = rocm_kpack_format::bundle::parse_fatbin(section)?;
    let name = elf
        .file_name()
        .ok_or("no file name")?
        .to_string_lossy()
        .into_owned();
    let mut by_target: std::collections::BTreeMap<String, Vec<(usize, &[u8])>> = Default::default();
    for (i, b) in bundles.iter().enumerate() {
        for (t, data) in b.code_objects() {
            by_target.entry(t.to_owned()).or_default().push((i, data));
        }
    }
    std::fs::create_dir_all(out)?;
    let t = Instant::now();
    let mut paths = Vec::new();
    for (target, objects) in by_target {
        let p = out.join(layout::archive_file_name(
            "bench",
            &target.replace(':', "_"),
        ));
        let f = std::io::BufWriter::new(std::fs::File::create(&p)?);
        let mut w = ArchiveWriter::new(f, "bench", &target, CompressionScheme::ZstdPerKernel, 3)?;
        for (i, data) in objects {
            w.add_kernel(&format!("lib/{name}#{i}"), &target, data.to_vec())?;
        }
        w.finish()?;
        paths.push(p);
    }
    eprintln!(
        "wrote {} archives from {} bundles in {:.1} s",
        paths.len(),
        bundles.len(),
        t.elapsed().as_secs_f64()
    );
    Ok(paths)
}

/// A section of a little-endian ELF64 file by name.
fn elf_section<'a>(elf: &'a [u8], name: &str) -> Option<&'a [u8]> {
    let rd = |at: usize, n: usize| -> Option<u64> {
        let b = elf.get(at..at + n)?;
        Some(b.iter().rev().fold(0u64, |v, &x| (v << 8) | u64::from(x)))
    };
    if elf.get(0..4)? != b"\x7fELF" {
        return None;
    }
    let shoff = rd(0x28, 8)? as usize;
    let shentsize = rd(0x3a, 2)? as usize;
    let shnum = rd(0x3c, 2)? as usize;
    let shstrndx = rd(0x3e, 2)? as usize;
    let strtab = rd(shoff + shstrndx * shentsize + 0x18, 8)? as usize;
    (0..shnum).find_map(|i| {
        let sh = shoff + i * shentsize;
        let n = strtab + rd(sh, 4)? as usize;
        let end = n + elf.get(n..)?.iter().position(|&b| b == 0)?;
        if elf.get(n..end)? != name.as_bytes() {
            return None;
        }
        let (off, size) = (rd(sh + 0x18, 8)? as usize, rd(sh + 0x20, 8)? as usize);
        elf.get(off..off + size)
    })
}

fn vm_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn median(it: impl Iterator<Item = Duration>) -> Duration {
    let mut v: Vec<Duration> = it.collect();
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn best_of(n: usize, mut f: impl FnMut() -> Duration) -> Duration {
    (0..n).map(|_| f()).min().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}
