//! Benchmark of the `.kpack` writer (not a test): packs a directory of code
//! objects into a zstd-per-kernel archive and, in the same run, compresses
//! the same bytes with `zstd -3 -T0` as the baseline.
//!
//! ```text
//! cargo run --release -p rocm-kpack-loader --example bench_archive_write -- INPUT [OUT.kpack]
//! ```
//!
//! INPUT is a fat ELF binary (e.g. Debian's `librocsparse.so.0.1`: run
//! `bash tests/scripts/fetch-debian-testdata.sh` first), whose `.hip_fatbin`
//! is cut into one file per code object with this crate's bundle parser, or a
//! directory of code objects. Layout of a directory: `DIR/<arch>/<name>` (one code object per file; `<arch>`
//! becomes the arch key, `<name>` the binary key). Files directly in DIR get
//! the arch `unknown`. Runs both `BENCH_RUNS` times (default 3),
//! alternating, and prints each run, then the best wall time of each, CPU
//! time, peak RSS, output sizes and ratios. Targets: writer time within
//! 1.5x of zstd's, peak RSS under 512 MiB.

use rocm_kpack_format::archive::{Archive, ArchiveWriter, CompressionScheme, DEFAULT_ZSTD_LEVEL};
use std::error::Error;
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

type BoxResult<T> = Result<T, Box<dyn Error>>;

struct Input {
    arch: String,
    key: String,
    path: PathBuf,
}

fn collect(dir: &Path) -> BoxResult<Vec<Input>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or("non-UTF-8 name")?
            .to_owned();
        if path.is_dir() {
            for sub in std::fs::read_dir(&path)? {
                let sub = sub?.path();
                if sub.is_file() {
                    let key = sub
                        .file_name()
                        .and_then(|n| n.to_str())
                        .ok_or("non-UTF-8 name")?;
                    out.push(Input {
                        arch: name.clone(),
                        key: key.to_owned(),
                        path: sub.clone(),
                    });
                }
            }
        } else if path.is_file() {
            out.push(Input {
                arch: "unknown".into(),
                key: name,
                path,
            });
        }
    }
    // Sorted input order makes the archive deterministic.
    out.sort_by(|a, b| (&a.key, &a.arch).cmp(&(&b.key, &b.arch)));
    Ok(out)
}

/// Writes every code object of `elf`'s `.hip_fatbin` to
/// `dir/<target>/<bundle index>.co`, using the runtime's bundle parser.
fn cut_fat_binary(elf: &Path, dir: &Path) -> BoxResult<usize> {
    use object::{Object, ObjectSection};
    let data = std::fs::read(elf)?;
    let file = object::File::parse(&*data)?;
    let section = file
        .section_by_name(".hip_fatbin")
        .ok_or("no .hip_fatbin section")?;
    let bundles = rocm_kpack_format::bundle::parse_fatbin(section.data()?)?;
    let mut n = 0;
    for (index, bundle) in bundles.iter().enumerate() {
        for (target, code) in bundle.code_objects() {
            // ':' is legal on Linux but keep names portable.
            let sub = dir.join(target.replace(':', "_"));
            std::fs::create_dir_all(&sub)?;
            std::fs::write(sub.join(format!("{index:04}.co")), code)?;
            n += 1;
        }
    }
    Ok(n)
}

/// Resource use so far: peak RSS (bytes) and CPU time (user + system).
struct Usage {
    peak_rss: u64,
    cpu: Duration,
}

/// `RUSAGE_SELF` or `RUSAGE_CHILDREN` (waited-for children).
fn usage(who: libc::c_int) -> Usage {
    // SAFETY: rusage is plain data; all-zero is a valid value.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a properly sized rusage.
    if unsafe { libc::getrusage(who, &mut u) } != 0 {
        return Usage {
            peak_rss: 0,
            cpu: Duration::ZERO,
        };
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    let mut peak_rss = u64::try_from(u.ru_maxrss).unwrap_or(0) * 1024; // KiB on Linux
    if who == libc::RUSAGE_SELF {
        // ru_maxrss survives exec (Linux folds the spawning address space's
        // high-water mark into it); VmHWM belongs to this address space only.
        if let Some(hwm) = vm_hwm() {
            peak_rss = hwm;
        }
    }
    Usage {
        peak_rss,
        cpu: tv(u.ru_utime) + tv(u.ru_stime),
    }
}

/// Peak resident set of this process's address space (`VmHWM`), in bytes.
fn vm_hwm() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn write_archive(inputs: &[Input], out: &Path) -> BoxResult<(Duration, u64)> {
    let start = Instant::now();
    let file = BufWriter::with_capacity(1 << 20, File::create(out)?);
    let mut w = ArchiveWriter::new(
        file,
        "bench",
        "bench",
        CompressionScheme::ZstdPerKernel,
        DEFAULT_ZSTD_LEVEL,
    )?;
    for i in inputs {
        w.add_kernel(&i.key, &i.arch, std::fs::read(&i.path)?)?;
    }
    let file = w.finish()?;
    // Flushed, not fsynced: the zstd baseline writes to a pipe.
    drop(file.into_inner().map_err(|e| e.into_error())?);
    let elapsed = start.elapsed();
    Ok((elapsed, std::fs::metadata(out)?.len()))
}

fn zstd_baseline(inputs: &[Input]) -> BoxResult<(Duration, u64)> {
    let start = Instant::now();
    let mut child = Command::new("zstd")
        .args(["-3", "-T0", "-c", "-q"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut stdout = child.stdout.take().ok_or("no zstd stdout")?;
    let counter = std::thread::spawn(move || -> std::io::Result<u64> {
        let mut buf = vec![0u8; 1 << 20];
        let mut n = 0u64;
        loop {
            match stdout.read(&mut buf)? {
                0 => return Ok(n),
                k => n += k as u64,
            }
        }
    });
    {
        let mut stdin = child.stdin.take().ok_or("no zstd stdin")?;
        for i in inputs {
            stdin.write_all(&std::fs::read(&i.path)?)?;
        }
    }
    let status = child.wait()?;
    let size = counter.join().map_err(|_| "counter thread panicked")??;
    if !status.success() {
        return Err(format!("zstd failed: {status}").into());
    }
    Ok((start.elapsed(), size))
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn run() -> BoxResult<()> {
    let mut args = std::env::args_os().skip(1);
    let dir = PathBuf::from(
        args.next()
            .ok_or("usage: bench_archive_write DIR [OUT.kpack]")?,
    );
    let tmp = tempfile::tempdir()?;
    if dir.is_file() {
        // Cut, then measure in a fresh process: this one has held the
        // whole fat binary, which would dominate its peak RSS.
        let cut = tmp.path().join("code-objects");
        let n = cut_fat_binary(&dir, &cut)?;
        println!("cut {n} code objects out of {}", dir.display());
        let mut child = Command::new(std::env::current_exe()?);
        child.arg(&cut);
        if let Some(o) = args.next() {
            child.arg(o);
        }
        let status = child.status()?;
        return if status.success() {
            Ok(())
        } else {
            Err(format!("benchmark child failed: {status}").into())
        };
    }
    let out = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| tmp.path().join("bench.kpack"));

    let inputs = collect(&dir)?;
    // Untimed warm-up: both contenders then read the inputs from the page
    // cache, and the time of reading alone is known.
    let read_start = Instant::now();
    let mut total = 0u64;
    for i in &inputs {
        total += std::fs::read(&i.path)?.len() as u64;
    }
    println!(
        "input: {} code objects, {:.1} MiB, from {} (reading them: {:.2} s)",
        inputs.len(),
        mib(total),
        dir.display(),
        read_start.elapsed().as_secs_f64()
    );
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    println!(
        "threads: {}, runs: {runs} (alternating; best of each reported, as other load only slows a run down)",
        rayon::current_num_threads()
    );

    let secs = |d: Duration| d.as_secs_f64();
    let mut best_ours = (Duration::MAX, Duration::ZERO);
    let mut best_zstd = (Duration::MAX, Duration::ZERO);
    let (mut ours_size, mut zstd_size, mut writer_rss) = (0, 0, 0);
    for run in 1..=runs {
        let cpu_before = usage(libc::RUSAGE_SELF).cpu;
        let (ours, size) = write_archive(&inputs, &out)?;
        let after = usage(libc::RUSAGE_SELF);
        let ours_cpu = after.cpu - cpu_before;
        if run == 1 {
            // Before any zstd run, so this is the writer's own peak.
            writer_rss = after.peak_rss;
        }
        ours_size = size;

        let self_before = usage(libc::RUSAGE_SELF).cpu;
        let child_before = usage(libc::RUSAGE_CHILDREN).cpu;
        let (zstd, size) = zstd_baseline(&inputs)?;
        let zstd_cpu = (usage(libc::RUSAGE_SELF).cpu - self_before)
            + (usage(libc::RUSAGE_CHILDREN).cpu - child_before);
        zstd_size = size;

        println!(
            "run {run}: kpack writer {:6.2} s (cpu {:5.2} s) | zstd -3 -T0 {:6.2} s (cpu {:5.2} s incl. feeding) | {:.2}x",
            secs(ours),
            secs(ours_cpu),
            secs(zstd),
            secs(zstd_cpu),
            secs(ours) / secs(zstd)
        );
        if ours < best_ours.0 {
            best_ours = (ours, ours_cpu);
        }
        if zstd < best_zstd.0 {
            best_zstd = (zstd, zstd_cpu);
        }
    }
    let zstd_rss = usage(libc::RUSAGE_CHILDREN).peak_rss;

    let read_start = Instant::now();
    let archive = Archive::open(&out)?;
    archive.verify()?;
    let read_time = read_start.elapsed();
    drop(archive);

    let (ours, ours_cpu) = best_ours;
    let (zstd, zstd_cpu) = best_zstd;
    println!(
        "kpack writer : {:7.2} s  {:7.1} MiB/s  output {:8.1} MiB  ratio {:.3}",
        secs(ours),
        mib(total) / secs(ours),
        mib(ours_size),
        ours_size as f64 / total as f64,
    );
    println!(
        "zstd -3 -T0  : {:7.2} s  {:7.1} MiB/s  output {:8.1} MiB  ratio {:.3}",
        secs(zstd),
        mib(total) / secs(zstd),
        mib(zstd_size),
        zstd_size as f64 / total as f64,
    );
    println!(
        "writer / zstd: time {:.2}x (target <= 1.5x), cpu {:.2}x, size {:.3}x",
        secs(ours) / secs(zstd),
        secs(ours_cpu) / secs(zstd_cpu),
        ours_size as f64 / zstd_size as f64
    );
    println!(
        "peak RSS     : writer process {:.1} MiB (target < 512 MiB), zstd {:.1} MiB",
        mib(writer_rss),
        mib(zstd_rss)
    );
    println!(
        "read back    : open + verify (decompress all {} blobs) {:.2} s",
        inputs.len(),
        secs(read_time)
    );
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_archive_write: {e}");
            ExitCode::FAILURE
        }
    }
}
