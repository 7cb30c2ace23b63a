//! Benchmark (prints figures; not a test): a fat Debian package end to end
//! through split and package: extract the .deb, split every fat ELF in it
//! with `split_binary` into a split directory (generic/ + one tree per
//! family), then build debs with the original control fields
//! (`--control-from`). Prints wall time and peak RSS of the packaging step
//! (measured in a child process so the split does not count), and the
//! sizes of the fat deb versus the generic and each device deb.
//!
//! ```text
//! cargo run --release -p rocm-kpack-splitter --example bench_package -- \
//!     /var/cache/rocm-kpack-debs/librocsparse0_5.3.0+dfsg-2_amd64.deb \
//!     [--work DIR] [--archives zstd|none] [--compression KIND] [--level N]
//!     [--device-compression KIND] [--device-level N]
//! ```
//! `--archives none` splits into uncompressed archives, so the package
//! compressor sees the raw code objects (pair it with
//! `--device-compression xz`): smaller packages, larger installs.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use rocm_kpack_format::archive::CompressionScheme;
use rocm_kpack_package::compress::Compression;
use rocm_kpack_package::deb::DebReader;
use rocm_kpack_package::meta::PackageMeta;
use rocm_kpack_package::{package, Format, PackageOptions};
use rocm_kpack_splitter::split::binary::{split_binary, SplitBinaryOptions, SplitOutcome};
use rocm_kpack_splitter::split::output::ArchiveOutput;

fn max_rss_kib() -> i64 {
    // SAFETY: getrusage writes one plain struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_maxrss
}

fn copy_tree(src: &Path, dst: &Path) -> std::io::Result<()> {
    fs::create_dir_all(dst)?;
    for e in fs::read_dir(src)? {
        let e = e?;
        let (s, d) = (e.path(), dst.join(e.file_name()));
        let ft = e.file_type()?;
        if ft.is_symlink() {
            symlink(fs::read_link(&s)?, &d)?;
        } else if ft.is_dir() {
            copy_tree(&s, &d)?;
        } else {
            fs::copy(&s, &d)?;
        }
    }
    Ok(())
}

fn elf_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for e in fs::read_dir(dir)? {
        let e = e?;
        let ft = e.file_type()?;
        if ft.is_dir() {
            elf_files(&e.path(), out)?;
        } else if ft.is_file() {
            let mut magic = [0u8; 4];
            if std::io::Read::read_exact(&mut fs::File::open(e.path())?, &mut magic).is_ok()
                && &magic == b"\x7fELF"
            {
                out.push(e.path());
            }
        }
    }
    Ok(())
}

/// Builds `work/split` from the extracted package; returns the split time.
fn make_split(root: &Path, split: &Path, scheme: CompressionScheme) -> Result<f64, String> {
    let t = Instant::now();
    let generic = split.join("generic");
    copy_tree(root, &generic).map_err(|e| format!("copy: {e}"))?;
    let mut elves = Vec::new();
    elf_files(root, &mut elves).map_err(|e| format!("scan: {e}"))?;
    for (i, elf) in elves.iter().enumerate() {
        let rel = elf.strip_prefix(root).map_err(|e| e.to_string())?;
        let rel_dir = rel.parent().unwrap_or(Path::new(""));
        let scratch = split.join(format!(".scratch{i}"));
        fs::create_dir_all(&scratch).map_err(|e| e.to_string())?;
        let opts = SplitBinaryOptions {
            output: ArchiveOutput {
                compression: Some(scheme),
                ..ArchiveOutput::fast()
            },
            ..SplitBinaryOptions::default()
        };
        let report =
            split_binary(elf, &scratch, &opts).map_err(|e| format!("{}: {e}", elf.display()))?;
        if report.outcome == SplitOutcome::Split {
            fs::rename(&report.output, generic.join(rel)).map_err(|e| e.to_string())?;
            for a in &report.archives {
                let dir = split.join(&a.group).join(rel_dir).join(".kpack");
                fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                let name = a.path.file_name().ok_or("archive name")?;
                fs::rename(&a.path, dir.join(name)).map_err(|e| e.to_string())?;
            }
            if let Some(m) = &report.manifest {
                let dir = generic.join(rel_dir).join(".kpack");
                fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                let name = m.file_name().ok_or("manifest name")?;
                fs::rename(m, dir.join(name)).map_err(|e| e.to_string())?;
            }
        }
        fs::remove_dir_all(&scratch).map_err(|e| e.to_string())?;
    }
    Ok(t.elapsed().as_secs_f64())
}

struct Comp {
    generic: Compression,
    level: Option<u32>,
    /// None: automatic (see PackageOptions::device_compression).
    device: Option<Compression>,
    device_level: Option<u32>,
}

/// The child: package and print `wall_s peak_rss_kib`.
fn package_only(split: &Path, out: &Path, deb: &Path, c: &Comp) -> Result<(), String> {
    let t = Instant::now();
    let r = DebReader::open(deb).map_err(|e| e.to_string())?;
    let mut opts = PackageOptions::new(PackageMeta::from_control(
        &r.control,
        r.control_files.clone(),
    ));
    opts.formats = vec![Format::Deb];
    opts.compression = c.generic;
    opts.level = c.level;
    opts.device_compression = c.device;
    opts.device_level = c.device_level;
    package(split, out, &opts).map_err(|e| e.to_string())?;
    println!("{:.2} {}", t.elapsed().as_secs_f64(), max_rss_kib());
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut deb: Option<PathBuf> = None;
    let mut work: Option<PathBuf> = None;
    let mut c = Comp {
        generic: Compression::Xz,
        level: None,
        device: None,
        device_level: None,
    };
    let mut scheme = CompressionScheme::ZstdPerKernel;
    let mut child: Option<(PathBuf, PathBuf)> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--work" => work = it.next().map(PathBuf::from),
            "--compression" | "--device-compression" => {
                let Some(k) = it.next().and_then(|k| Compression::from_name(k)) else {
                    eprintln!("{a}: xz, gzip, zstd or none");
                    return ExitCode::from(2);
                };
                if a == "--compression" {
                    c.generic = k;
                } else {
                    c.device = Some(k);
                }
            }
            "--level" => c.level = it.next().and_then(|v| v.parse().ok()),
            "--device-level" => c.device_level = it.next().and_then(|v| v.parse().ok()),
            "--archives" => {
                scheme = match it.next().map(String::as_str) {
                    Some("none") => CompressionScheme::None,
                    Some("zstd") => CompressionScheme::ZstdPerKernel,
                    _ => {
                        eprintln!("--archives: zstd or none");
                        return ExitCode::from(2);
                    }
                }
            }
            "--package-only" => {
                let s = it.next().map(PathBuf::from);
                let o = it.next().map(PathBuf::from);
                if let (Some(s), Some(o)) = (s, o) {
                    child = Some((s, o));
                }
            }
            other => deb = Some(PathBuf::from(other)),
        }
    }
    let Some(deb) = deb else {
        eprintln!("usage: bench_package FAT.deb [--work DIR] [--archives zstd|none] [--compression KIND] [--level N] [--device-compression KIND] [--device-level N]");
        return ExitCode::from(2);
    };
    if let Some((split, out)) = child {
        return match package_only(&split, &out, &deb, &c) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("package: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let work = work.unwrap_or_else(|| std::env::temp_dir().join("rocm-kpack-bench-package"));
    let _ = fs::remove_dir_all(&work);
    if let Err(e) = fs::create_dir_all(&work) {
        eprintln!("{}: {e}", work.display());
        return ExitCode::FAILURE;
    }
    let extracted = work.join("extracted");
    let split = work.join("split");
    let out = work.join("out");
    let status = Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(&extracted)
        .status();
    if !status.is_ok_and(|s| s.success()) {
        eprintln!("dpkg-deb -x {} failed", deb.display());
        return ExitCode::FAILURE;
    }
    let split_s = match make_split(&extracted, &split, scheme) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("split: {e}");
            return ExitCode::FAILURE;
        }
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("current_exe: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut cmd = Command::new(exe);
    cmd.arg(&deb).arg("--package-only").arg(&split).arg(&out);
    cmd.arg("--compression")
        .arg(format!("{:?}", c.generic).to_lowercase());
    if let Some(d) = c.device {
        cmd.arg("--device-compression")
            .arg(format!("{d:?}").to_lowercase());
    }
    if let Some(l) = c.level {
        cmd.arg("--level").arg(l.to_string());
    }
    if let Some(l) = c.device_level {
        cmd.arg("--device-level").arg(l.to_string());
    }
    let o = match cmd.output() {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            eprintln!("{}", String::from_utf8_lossy(&o.stderr));
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("cannot run the packaging child: {e}");
            return ExitCode::FAILURE;
        }
    };
    let line = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let mut parts = line.split_whitespace();
    let wall: f64 = parts
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN);
    let rss: i64 = parts.next().and_then(|v| v.parse().ok()).unwrap_or(-1);
    let fat = fs::metadata(&deb).map(|m| m.len()).unwrap_or(0);
    println!("input            {}", deb.display());
    let lvl = |l: Option<u32>| l.map_or("default".to_string(), |l| l.to_string());
    println!("archives         {}", scheme.as_str());
    println!("generic          {:?} level {}", c.generic, lvl(c.level));
    match c.device {
        Some(d) => println!("device           {d:?} level {}", lvl(c.device_level)),
        None => println!("device           auto"),
    }
    println!("split wall       {split_s:.2} s");
    println!("package wall     {wall:.2} s");
    println!("package peak RSS {:.1} MiB", rss as f64 / 1024.0);
    println!("fat deb          {fat:>12} bytes");
    let mut debs: Vec<(String, u64)> = fs::read_dir(&out)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter_map(|e| {
                    Some((
                        e.file_name().to_string_lossy().into_owned(),
                        e.metadata().ok()?.len(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    debs.sort();
    let total: u64 = debs.iter().map(|d| d.1).sum();
    for (name, size) in &debs {
        println!("  {name:<48} {size:>12} bytes");
    }
    println!(
        "generic + device {total:>12} bytes ({:.1}% of the fat deb)",
        100.0 * total as f64 / fat.max(1) as f64
    );
    ExitCode::SUCCESS
}
