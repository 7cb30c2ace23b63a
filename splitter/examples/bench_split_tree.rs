//! Benchmark (prints figures; not a test): `split` of an install tree that
//! holds Debian's librocrand and librocsparse (multiarch layout, 1.3 GB of
//! fat binaries) plus the committed fixtures (an /opt-style tree), with 1
//! and 2 worker threads, each run in its own process so peak RSS is its own.
//! Baseline measured in the same run: `zstd -3 -T<n>` over the same input
//! bytes.
//!
//! ```text
//! tests/scripts/fetch-debian-testdata.sh librocrand1 librocsparse0
//! cargo run --release -p rocm-kpack-splitter --example bench_split_tree [-- CACHE_DIR]
//! ```
//! CACHE_DIR defaults to `$ROCM_KPACK_TESTDATA` or `target/debian-cache`
//! (the packages extracted under `extracted/<name>_<version>/`).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use rocm_kpack_splitter::split::engine::SplitOptions;
use rocm_kpack_splitter::split::output::ArchiveOutput;
use rocm_kpack_splitter::split::tree::split_tree;

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

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("--child") => child(&args[1..]),
        _ => parent(args.first().map(PathBuf::from)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_split_tree: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `--child THREADS INPUT OUT`: one split, figures on stdout as
/// `wall cpu maxrss_kib files bytes_in bytes_out`.
fn child(args: &[String]) -> anyhow::Result<()> {
    let [threads, input, out] = args else {
        anyhow::bail!("usage: --child THREADS INPUT OUT");
    };
    let opts = SplitOptions {
        output: ArchiveOutput {
            jobs: Some(threads.parse()?),
            ..ArchiveOutput::release()
        },
        ..SplitOptions::default()
    };
    let t0 = Instant::now();
    let r = split_tree(Path::new(input), Path::new(out), &opts)?;
    let wall = t0.elapsed().as_secs_f64();
    let u = usage(libc::RUSAGE_SELF);
    println!(
        "{wall} {} {} {} {} {}",
        u.cpu_s, u.max_rss_kib, r.files_in, r.bytes_in, r.bytes_out
    );
    Ok(())
}

fn find_extracted(cache: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let dir = cache.join("extracted");
    let mut hits: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| {
            anyhow::anyhow!(
                "{}: {e}; run tests/scripts/fetch-debian-testdata.sh librocrand1 librocsparse0",
                dir.display()
            )
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{name}_")))
        })
        .collect();
    hits.sort();
    hits.pop().ok_or_else(|| {
        anyhow::anyhow!(
            "{name} is not extracted under {}; run tests/scripts/fetch-debian-testdata.sh librocrand1 librocsparse0",
            dir.display()
        )
    })
}

/// Hard link (same file system) or copy.
fn link_or_copy(from: &Path, to: &Path) -> anyhow::Result<()> {
    if let Some(p) = to.parent() {
        std::fs::create_dir_all(p)?;
    }
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to)?;
    }
    Ok(())
}

fn build_tree(cache: &Path, root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let lib = "usr/lib/x86_64-linux-gnu";
    let mut inputs = Vec::new();
    for (pkg, file, link) in [
        ("librocrand1", "librocrand.so.1.1", "librocrand.so.1"),
        ("librocsparse0", "librocsparse.so.0.1", "librocsparse.so.0"),
    ] {
        let src = find_extracted(cache, pkg)?;
        let dst = root.join(lib).join(file);
        link_or_copy(&src.join(lib).join(file), &dst)?;
        std::os::unix::fs::symlink(file, root.join(lib).join(link))?;
        for doc in std::fs::read_dir(src.join("usr/share/doc"))?.flatten() {
            for f in std::fs::read_dir(doc.path())?.flatten() {
                link_or_copy(
                    &f.path(),
                    &root
                        .join("usr/share/doc")
                        .join(doc.file_name())
                        .join(f.file_name()),
                )?;
            }
        }
        inputs.push(dst);
    }
    let fixtures = workspace().join("tests/fixtures/clang19");
    for name in [
        "app_pie",
        "app_nopie",
        "app_rdc",
        "libfixture.so",
        "libmulti.so",
    ] {
        let dir = if name.starts_with("lib") {
            "lib"
        } else {
            "bin"
        };
        let dst = root.join("opt/fixtures").join(dir).join(name);
        link_or_copy(&fixtures.join(name), &dst)?;
        inputs.push(dst);
    }
    Ok(inputs)
}

fn parent(cache: Option<PathBuf>) -> anyhow::Result<()> {
    let cache = cache
        .or_else(|| std::env::var_os("ROCM_KPACK_TESTDATA").map(PathBuf::from))
        .unwrap_or_else(|| workspace().join("target/debian-cache"));
    let work = tempfile::Builder::new()
        .prefix("bench-split-tree-")
        .tempdir_in(&cache)
        .or_else(|_| tempfile::tempdir())?;
    let input = work.path().join("tree");
    let binaries = build_tree(&cache, &input)?;
    // Warm the page cache so every run reads from memory.
    let status = Command::new("cat")
        .args(&binaries)
        .stdout(std::process::Stdio::null())
        .status()?;
    anyhow::ensure!(status.success(), "cat failed");
    let in_bytes: u64 = binaries
        .iter()
        .map(|b| std::fs::metadata(b).map(|m| m.len()).unwrap_or(0))
        .sum();
    let mib = |b: f64| b / (1024.0 * 1024.0);
    println!(
        "tree: {} ({} fat binaries, {:.1} MiB)",
        input.display(),
        binaries.len(),
        mib(in_bytes as f64)
    );
    let me = std::env::current_exe()?;
    let mut walls = Vec::new();
    for threads in [1usize, 2] {
        let out = work.path().join(format!("out-{threads}"));
        let o = Command::new(&me)
            .arg("--child")
            .arg(threads.to_string())
            .arg(&input)
            .arg(&out)
            .output()?;
        anyhow::ensure!(
            o.status.success(),
            "split with {threads} thread(s) failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let text = String::from_utf8_lossy(&o.stdout);
        let f: Vec<f64> = text
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        let [wall, cpu, rss, files, bytes_in, bytes_out] = f[..] else {
            anyhow::bail!("child printed {text:?}");
        };
        // Baseline: zstd -3 with the same number of threads over the same bytes.
        let zb = usage(libc::RUSAGE_CHILDREN);
        let t = Instant::now();
        let status = Command::new("zstd")
            .args(["-3", "-q", "-c", &format!("-T{threads}")])
            .args(&binaries)
            .stdout(std::process::Stdio::null())
            .status()?;
        anyhow::ensure!(status.success(), "zstd failed");
        let zwall = t.elapsed().as_secs_f64();
        let za = usage(libc::RUSAGE_CHILDREN);
        println!(
            "{threads} thread(s): wall {wall:.2} s, CPU {cpu:.2} s, peak RSS {:.0} MiB, {files:.0} files ({:.1} files/s), \
             {:.1} MiB in ({:.1} MiB/s), {:.1} MiB out",
            rss / 1024.0,
            files / wall,
            mib(bytes_in),
            mib(bytes_in) / wall,
            mib(bytes_out)
        );
        println!(
            "    zstd -3 -T{threads} on the same bytes: wall {zwall:.2} s, CPU {:.2} s; split/zstd wall {:.2}x",
            za.cpu_s - zb.cpu_s,
            wall / zwall
        );
        walls.push(wall);
        std::fs::remove_dir_all(&out)?;
    }
    if let [one, two] = walls[..] {
        println!(
            "scaling 1 -> 2 threads: {:.2}x faster ({:.0}% parallel efficiency)",
            one / two,
            50.0 * one / two
        );
    }
    Ok(())
}
