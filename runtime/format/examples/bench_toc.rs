//! Benchmark of opening `.kpack` archives with large TOCs (not a test):
//! 1k, 10k, 100k and 1M entries (`BENCH_SIZES=1000,20000` to choose).
//! For each size it times, best of `BENCH_RUNS` (default 3):
//!
//! - `decode`: the TOC's MessagePack decoded to a value tree
//!   (`msgpack::decode::<Value>`: the bounded scan, then rmp-serde into
//!   `rmpv::Value`; the baseline, linear by construction);
//! - `open`: `Archive::from_bytes` (decode, validate, index), what the
//!   Rust loader, the C ABI's `kpack_open` and `rocm-kpack inspect` do;
//! - `lookup`: `Archive::entry` for every entry.
//!
//! and prints them per entry with the ratio open/decode. Linear parsing
//! keeps the per-entry times and the ratio flat from 1k to 1M entries; a
//! quadratic step shows as a ratio that grows tenfold per row.
//!
//! ```text
//! cargo run --release -p rocm-kpack-format --example bench_toc
//! cargo run --release -p rocm-kpack-format --example bench_toc -- write DIR   # also keep the files
//! ```

use rocm_kpack_format::archive::Archive;
use rocm_kpack_format::msgpack::{self, Value};
use rocm_kpack_testkit::toc as gen;
use std::time::{Duration, Instant};

fn best(runs: usize, mut f: impl FnMut()) -> Duration {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn per_entry(d: Duration, n: usize) -> f64 {
    d.as_secs_f64() * 1e9 / n as f64
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let sizes: Vec<usize> = match std::env::var("BENCH_SIZES") {
        Ok(v) => v.split(',').filter_map(|s| s.trim().parse().ok()).collect(),
        Err(_) => vec![1_000, 10_000, 100_000, 1_000_000],
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let write_dir = match args.as_slice() {
        [cmd, dir] if cmd == "write" => Some(std::path::PathBuf::from(dir)),
        [] => None,
        _ => return Err("usage: bench_toc [write DIR]".into()),
    };
    println!(
        "{:>9} {:>10} {:>12} {:>12} {:>12} {:>10}",
        "entries", "toc bytes", "decode ns/e", "open ns/e", "lookup ns/e", "open/decode"
    );
    for n in sizes {
        let bytes = gen::many_entries(n);
        if let Some(dir) = &write_dir {
            std::fs::create_dir_all(dir)?;
            std::fs::write(
                dir.join(rocm_kpack_format::layout::archive_file_name(
                    "toc",
                    &n.to_string(),
                )),
                &bytes,
            )?;
        }
        let toc_offset = u64::from_le_bytes(bytes[8..16].try_into()?);
        let toc = &bytes[toc_offset as usize..];
        let decode = best(runs, || {
            let v = msgpack::decode::<Value>(toc).expect("decode");
            std::hint::black_box(v);
        });
        let open = best(runs, || {
            let a = Archive::from_bytes(bytes.clone()).expect("open");
            std::hint::black_box(a);
        });
        let archive = Archive::from_bytes(bytes.clone())?;
        let keys: Vec<String> = (0..n).map(gen::binary_key).collect();
        let lookup = best(runs, || {
            for k in &keys {
                std::hint::black_box(archive.entry(k, "gfx90a").expect("entry"));
            }
        });
        println!(
            "{n:>9} {:>10} {:>12.0} {:>12.0} {:>12.0} {:>10.2}",
            toc.len(),
            per_entry(decode, n),
            per_entry(open, n),
            per_entry(lookup, n),
            open.as_secs_f64() / decode.as_secs_f64()
        );
    }
    Ok(())
}
