//! Benchmark (prints figures; not a test): split one fat binary with
//! zstd-per-kernel level 3 and compare with `zstd -3 -T0` on the raw
//! `.hip_fatbin` bytes of the same file, measured in the same run.
//!
//! ```text
//! splitter/benches/bench_split.sh              # fetches librocsparse, runs this in release
//! cargo run --release -p rocm-kpack-splitter --example bench_split -- FILE [--level N]
//! ```
//! Targets (issue 3): split wall time within 2x of the zstd time, peak RSS
//! under 512 MiB.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use rocm_kpack_splitter::elf::{classify, Classification};
use rocm_kpack_splitter::split::binary::{split_binary, SplitBinaryOptions};
use rocm_kpack_splitter::split::output::ArchiveOutput;

struct Usage {
    cpu_s: f64,
    max_rss_kib: i64,
}

fn usage(who: libc::c_int) -> Usage {
    // SAFETY: getrusage writes one plain struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    Usage {
        cpu_s: t(ru.ru_utime) + t(ru.ru_stime),
        max_rss_kib: ru.ru_maxrss,
    }
}

fn dir_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut input: Option<PathBuf> = None;
    let mut level = 3;
    while let Some(a) = args.next() {
        if a == "--level" {
            level = args.next().and_then(|v| v.parse().ok()).unwrap_or(3);
        } else {
            input = Some(PathBuf::from(a));
        }
    }
    let Some(input) = input else {
        eprintln!("usage: bench_split FILE [--level N]   (see splitter/benches/bench_split.sh)");
        return ExitCode::from(2);
    };
    match run(&input, level) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_split: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(input: &Path, level: i32) -> anyhow::Result<()> {
    let work = tempfile::Builder::new()
        .prefix("bench-split-")
        .tempdir_in(input.parent().unwrap_or(Path::new(".")))
        .or_else(|_| tempfile::tempdir())?;
    let out = work.path().join("out");
    std::fs::create_dir(&out)?;
    let in_size = std::fs::metadata(input)?.len();
    // Warm the page cache so both measurements read from memory.
    let warm = Instant::now();
    let status = Command::new("cat")
        .arg(input)
        .stdout(std::process::Stdio::null())
        .status()?;
    anyhow::ensure!(status.success(), "cat failed");
    let warm_s = warm.elapsed().as_secs_f64();

    let opts = SplitBinaryOptions {
        output: ArchiveOutput {
            zstd_level: level,
            ..ArchiveOutput::fast()
        },
        ..SplitBinaryOptions::default()
    };
    let before = usage(libc::RUSAGE_SELF);
    let t0 = Instant::now();
    let report = split_binary(input, &out, &opts)?;
    let wall = t0.elapsed().as_secs_f64();
    let after = usage(libc::RUSAGE_SELF);
    let out_bytes = dir_size(&out) + dir_size(&out.join(".kpack"));

    // Baseline: zstd -3 -T0 on the raw .hip_fatbin bytes of the same file.
    let raw = work.path().join("hip_fatbin.bin");
    {
        let file = std::fs::File::open(input)?;
        // SAFETY: read-only map of a file nobody modifies during the run.
        let map = unsafe { memmap2::Mmap::map(&file)? };
        match classify(&map)? {
            Classification::Fat(fat) => std::fs::write(&raw, fat.fatbin_bytes()?)?,
            _ => anyhow::bail!("{} has no .hip_fatbin", input.display()),
        }
    }
    let raw_size = std::fs::metadata(&raw)?.len();
    let zbefore = usage(libc::RUSAGE_CHILDREN);
    let t1 = Instant::now();
    let status = Command::new("zstd")
        .args([format!("-{level}").as_str(), "-T0", "-q", "-f", "-c"])
        .arg(&raw)
        .stdout(std::fs::File::create(work.path().join("hip_fatbin.zst"))?)
        .status()?;
    let zwall = t1.elapsed().as_secs_f64();
    anyhow::ensure!(status.success(), "zstd failed");
    let zafter = usage(libc::RUSAGE_CHILDREN);
    let zsize = std::fs::metadata(work.path().join("hip_fatbin.zst"))?.len();

    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    println!(
        "input: {} ({:.1} MiB; page cache warmed in {warm_s:.2} s)",
        input.display(),
        mib(in_size)
    );
    println!(
        "split: {} bundles, {} code objects, {} wrappers, {} archives",
        report.bundles,
        report.code_objects,
        report.wrappers.len(),
        report.archives.len()
    );
    for a in &report.archives {
        println!(
            "  {} ({}): {:.1} MiB, {} entries, arches {}",
            a.unit,
            a.group,
            mib(a.size),
            a.entries,
            a.architectures.join(" ")
        );
    }
    println!(
        "  host-only binary: {:.2} MiB (input - .hip_fatbin = {:.2} MiB)",
        mib(report.output_size),
        mib(in_size - report.fatbin_size)
    );
    println!(
        "split (zstd-{level}):   wall {wall:.2} s, CPU {:.2} s, peak RSS {:.0} MiB, in {:.1} MiB, out {:.1} MiB",
        after.cpu_s - before.cpu_s,
        after.max_rss_kib as f64 / 1024.0,
        mib(in_size),
        mib(out_bytes)
    );
    println!(
        "zstd -{level} -T0 raw:  wall {zwall:.2} s, CPU {:.2} s, in {:.1} MiB, out {:.1} MiB",
        zafter.cpu_s - zbefore.cpu_s,
        mib(raw_size),
        mib(zsize)
    );
    println!(
        "ratio split/zstd wall: {:.2}x (target <= 2x); peak RSS target < 512 MiB: {}",
        wall / zwall,
        if after.max_rss_kib < 512 * 1024 {
            "met"
        } else {
            "MISSED"
        }
    );
    Ok(())
}
