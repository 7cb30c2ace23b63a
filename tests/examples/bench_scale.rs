//! Benchmark (prints figures; not a test) of issue 23's goals: memory
//! bounded by the budget and scaling with cores. For each input it runs
//! `rocm-kpack split-binary --level 19` as a user would (a child process,
//! peak RSS from wait4), with every core and with `--jobs 1`, and in the same
//! run `zstd -19 -T0` on the same decompressed device bytes (every code
//! object of the input, streamed out first), then prints wall time, peak
//! RSS, bytes in and out, the split/zstd ratio and the 1 -> N speedup.
//!
//! ```text
//! cargo run --release -p rocm-kpack-tests --example bench_scale -- INPUT... [--level N] [--repeat N] [--no-jobs1] [--no-budget-run] [--before BIN] [--kpack BIN]
//! ```
//! INPUT is a path or one of `ccob` (the >= 1 GB many-bundle CCOB library,
//! built by clang-19 once and cached), `ccob-half` (the same with half the
//! bundles), `librocsparse0`, `librocsolver0` (Debian packages, fetched,
//! pinned and cached like the test data). With both `ccob-half` and `ccob`,
//! the last line is the time ratio for twice the input (goal <= 2.1x).
//! `--repeat N` (default 1) runs zstd and each split N times, printing every
//! wall time (the spread) and ratios of the means.
//! `--level N` (default 19) is the level of both the split and zstd;
//! `--kpack BIN` the `rocm-kpack` measured (default: this profile's build).
//! `--before BIN` also runs another `rocm-kpack` (say, a build of an older
//! commit) the same way, for a before/after peak RSS.
//!
//! Goals: peak RSS <= 1 GiB (and <= --memory when given), split time <=
//! 1.2x `zstd -19 -T0` on the same bytes.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use rocm_kpack_format::bundle::scan_fatbin;
use rocm_kpack_splitter::elf::{classify, Classification};
use rocm_kpack_test_support::{bins, ccob, debian};

/// Wall seconds and peak RSS (bytes) of a child, which must succeed. The
/// peak is the child's `VmHWM`, sampled every 10 ms until it exits: the
/// `ru_maxrss` of wait4 would include this process's own high-water mark
/// (the child is spawned from its address space).
fn measure(cmd: &mut Command) -> anyhow::Result<(f64, u64)> {
    let t0 = Instant::now();
    let mut child = cmd.stdout(Stdio::null()).spawn()?;
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0u64;
    let status = loop {
        if let Ok(text) = std::fs::read_to_string(&status_file) {
            let hwm = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
            peak_kib = peak_kib.max(hwm.unwrap_or(0));
        }
        if let Some(s) = child.try_wait()? {
            break s;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let wall = t0.elapsed().as_secs_f64();
    anyhow::ensure!(status.success(), "{cmd:?} failed ({status})");
    Ok((wall, peak_kib * 1024))
}

fn tree_bytes(dir: &Path) -> u64 {
    walk(dir)
        .iter()
        .filter_map(|p| p.metadata().ok())
        .map(|m| m.len())
        .sum()
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn input(name: &str) -> anyhow::Result<PathBuf> {
    Ok(match name {
        "ccob" => ccob::library(ccob::Shape::LARGE)?,
        "ccob-half" => ccob::library(ccob::Shape::HALF)?,
        "librocsparse0" => debian::librocsparse_so()?,
        "librocsolver0" => debian::librocsolver_so()?,
        path => PathBuf::from(path),
    })
}

/// Writes every code object of `lib` (decompressed) to `out`; returns
/// their bytes and count.
fn device_bytes(lib: &Path, out: &Path) -> anyhow::Result<(u64, usize)> {
    use std::io::Write;
    let file = std::fs::File::open(lib)?;
    // SAFETY: read-only map of an input nobody modifies during the run.
    let map = unsafe { memmap2::Mmap::map(&file)? };
    let Classification::Fat(fat) = classify(&map)? else {
        anyhow::bail!("{} has no .hip_fatbin", lib.display());
    };
    let mut w = std::io::BufWriter::new(std::fs::File::create(out)?);
    let (mut bytes, mut count) = (0u64, 0usize);
    for b in scan_fatbin(fat.fatbin_bytes()?)? {
        b.stream_code_objects(|_, d| -> anyhow::Result<()> {
            w.write_all(&d)?;
            bytes += d.len() as u64;
            count += 1;
            Ok(())
        })?;
    }
    w.flush()?;
    Ok((bytes, count))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let jobs1 = !args.iter().any(|a| a == "--no-jobs1");
    let budget_run = !args.iter().any(|a| a == "--no-budget-run");
    let level = args
        .iter()
        .position(|a| a == "--level")
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| "19".to_string());
    let before = args
        .iter()
        .position(|a| a == "--before")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from);
    let kpack = args
        .iter()
        .position(|a| a == "--kpack")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from);
    let repeat: usize = args
        .iter()
        .position(|a| a == "--repeat")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
        .max(1);
    let inputs: Vec<&String> = args
        .iter()
        .enumerate()
        .filter(|(i, a)| {
            !a.starts_with("--")
                && args.get(i.wrapping_sub(1)).is_none_or(|p| {
                    !matches!(p.as_str(), "--before" | "--level" | "--kpack" | "--repeat")
                })
        })
        .map(|(_, a)| a)
        .collect();
    if inputs.is_empty() {
        eprintln!("usage: bench_scale INPUT... [--no-jobs1] [--before BIN]   (INPUT: ccob, librocsparse0, librocsolver0 or a path)");
        return ExitCode::from(2);
    }
    // Input name -> (mean split wall with every core, device bytes).
    let mut results = std::collections::BTreeMap::new();
    for name in inputs {
        let kpack = kpack.clone().unwrap_or_else(|| bins::bin("rocm-kpack"));
        match run(
            name,
            &kpack,
            &level,
            repeat,
            jobs1,
            budget_run,
            before.as_deref(),
        ) {
            Ok(r) => {
                results.insert(name.as_str(), r);
            }
            Err(e) => {
                eprintln!("bench_scale: {name}: {e:#}");
                return ExitCode::FAILURE;
            }
        }
    }
    if let (Some(&(half, half_bytes)), Some(&(full, full_bytes))) =
        (results.get("ccob-half"), results.get("ccob"))
    {
        println!(
            "== scaling: ccob is {:.2}x ccob-half's device bytes and takes {:.2}x its split time (goal <= 2.1x for 2x)",
            full_bytes as f64 / half_bytes as f64,
            full / half
        );
    }
    ExitCode::SUCCESS
}

/// `repeat` measurements of `cmd` (a fresh command each time): every
/// wall time, their mean, and the largest peak RSS.
fn repeated(
    repeat: usize,
    mut cmd: impl FnMut() -> anyhow::Result<(f64, u64)>,
) -> anyhow::Result<(Vec<f64>, f64, u64)> {
    let mut walls = Vec::with_capacity(repeat);
    let mut rss = 0;
    for _ in 0..repeat {
        let (w, r) = cmd()?;
        walls.push(w);
        rss = rss.max(r);
    }
    let mean = walls.iter().sum::<f64>() / walls.len() as f64;
    Ok((walls, mean, rss))
}

/// Wall times for the report: `12.3 s` or `12.3 s (12.1 .. 12.6, 3 runs)`.
fn walls_text(walls: &[f64], mean: f64) -> String {
    if walls.len() < 2 {
        return format!("{mean:7.1} s");
    }
    let min = walls.iter().copied().fold(f64::INFINITY, f64::min);
    let max = walls.iter().copied().fold(0.0, f64::max);
    format!("{mean:7.1} s ({min:.1} .. {max:.1}, {} runs)", walls.len())
}

/// Measures one input; returns the mean split wall time with every core
/// and the decompressed device bytes.
#[allow(clippy::too_many_arguments)]
fn run(
    name: &str,
    kpack: &Path,
    level: &str,
    repeat: usize,
    jobs1: bool,
    budget_run: bool,
    before: Option<&Path>,
) -> anyhow::Result<(f64, u64)> {
    let lib = input(name)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let work = tempfile::tempdir()?;
    let mib = |b: u64| b as f64 / 1048576.0;
    let in_size = std::fs::metadata(&lib)?.len();
    // Warm the page cache: both sides read from memory.
    Command::new("cat")
        .arg(&lib)
        .stdout(Stdio::null())
        .status()?;
    let dev = work.path().join("device.bin");
    let (dev_bytes, count) = device_bytes(&lib, &dev)?;
    println!("== {name}: {} ({:.1} MiB in; {count} code objects, {:.1} MiB decompressed device code; {cores} cores)", lib.display(), mib(in_size), mib(dev_bytes));

    let zst = work.path().join("device.zst");
    let (zwalls, zwall, zrss) = repeated(repeat, || {
        measure(
            Command::new("zstd")
                .args([&format!("-{level}"), "-T0", "-q", "-f", "-o"])
                .arg(&zst)
                .arg(&dev),
        )
    })?;
    let zsize = std::fs::metadata(&zst)?.len();
    std::fs::remove_file(&zst)?;
    println!(
        "zstd -{level} -T0       : wall {}, peak RSS {:7.1} MiB, out {:.1} MiB",
        walls_text(&zwalls, zwall),
        mib(zrss),
        mib(zsize)
    );

    let split = |bin: &Path,
                 jobs: Option<usize>,
                 level: &str,
                 tag: &str|
     -> anyhow::Result<(f64, u64, u64)> {
        let out = work.path().join(format!("out-{tag}"));
        let mut cmd = Command::new(bin);
        cmd.args(["split-binary", "-q", "--level", level]);
        if let Some(j) = jobs {
            cmd.args(["--jobs", &j.to_string()]);
        }
        let (wall, rss) = measure(cmd.arg("--out").arg(&out).arg(&lib))?;
        let bytes = tree_bytes(&out);
        std::fs::remove_dir_all(&out)?;
        Ok((wall, rss, bytes))
    };
    let mut out_n = 0;
    let (walls_n, wall_n, rss_n) = repeated(repeat, || {
        let (w, r, o) = split(kpack, Some(cores), level, "n")?;
        out_n = o;
        Ok((w, r))
    })?;
    println!(
        "split --jobs {cores:<2}    : wall {}, peak RSS {:7.1} MiB, out {:.1} MiB (host + archives); {:.2}x zstd's time (goal <= 1.2x)",
        walls_text(&walls_n, wall_n),
        mib(rss_n),
        mib(out_n),
        wall_n / zwall
    );
    if jobs1 {
        let (walls_1, wall_1, rss_1) = repeated(repeat, || {
            split(kpack, Some(1), level, "1").map(|(w, r, _)| (w, r))
        })?;
        let speedup = wall_1 / wall_n;
        // Amdahl: the parallel fraction this speedup implies on `cores`.
        // A speedup at or above linear (noise on a shared machine, caches)
        // implies no serial part to project from: capped at 1.
        let p_raw = if cores > 1 {
            (1.0 - 1.0 / speedup) / (1.0 - 1.0 / cores as f64)
        } else {
            1.0
        };
        let p = p_raw.clamp(0.0, 1.0);
        let capped = if p_raw > 1.0 {
            ", at or above linear: projection capped at linear"
        } else {
            ""
        };
        println!(
            "split --jobs 1     : wall {}, peak RSS {:7.1} MiB; speedup 1 -> {cores}: {speedup:.2}x (parallel fraction {:.2}{capped}; projected 1 -> 16: {:.1}x, 1 -> 64: {:.1}x)",
            walls_text(&walls_1, wall_1),
            mib(rss_1),
            p,
            1.0 / ((1.0 - p) + p / 16.0),
            1.0 / ((1.0 - p) + p / 64.0)
        );
    }
    if budget_run {
        let out = work.path().join("out-m");
        let (w, r) = measure(
            Command::new(kpack)
                .args([
                    "split-binary",
                    "-q",
                    "--level",
                    level,
                    "--memory",
                    "256M",
                    "--out",
                ])
                .arg(&out)
                .arg(&lib),
        )?;
        std::fs::remove_dir_all(&out)?;
        println!(
            "split --memory 256M: wall {w:7.1} s, peak RSS {:7.1} MiB (goal <= 256 MiB)",
            mib(r)
        );
    }
    if let Some(b) = before {
        let (wb, rb, _) = split(b, None, level, "before")?;
        println!(
            "before ({})    : wall {wb:7.1} s, peak RSS {:7.1} MiB",
            b.display(),
            mib(rb)
        );
    }
    Ok((wall_n, dev_bytes))
}
