//! `rocm-kpack demo`: the whole product on built-in inputs, on a machine
//! without a GPU, in a temporary directory that is reported and removed
//! (`--keep` keeps it). Every step prints what it did and how long it took;
//! a failing step stops the demo with the error and a command that
//! reproduces it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context as _};
use include_dir::{include_dir, Dir};
use rocm_kpack::detect::{self, DetectOptions};
use rocm_kpack::loader::{Cache, LoaderConfig};
use rocm_kpack::marker::Marker;
use rocm_kpack_splitter::elf::inspect::inspect_elf;
use rocm_kpack_splitter::split_binary::{split_binary, SplitBinaryOptions};
use sha2::{Digest, Sha256};

/// Fat fixtures compiled from `tests/fixtures/src` by Debian's clang-19
/// (seven targets, CCOB-compressed and plain), embedded so the demo needs
/// nothing but this binary.
const FAT_FIXTURES: &[(&str, &[u8])] = &[
    (
        "app_pie",
        include_bytes!("../../../tests/fixtures/clang19/app_pie"),
    ),
    (
        "libmulti.so",
        include_bytes!("../../../tests/fixtures/clang19/libmulti.so"),
    ),
    (
        "libfixture.so",
        include_bytes!("../../../tests/fixtures/clang19-compressed/libfixture.so"),
    ),
];

/// GPUs `--gpu` can simulate: name, description, and the KFD sysfs tree of
/// that real machine (golden fixtures of the detection tests).
const GPUS: &[(&str, &str, Dir<'static>)] = &[
    ("rx7900xtx", "RX 7900 XTX (gfx1100)", include_dir!("$CARGO_MANIFEST_DIR/../tests/fixtures/sysfs/rx7900xtx")),
    ("mi300x", "Instinct MI300X (gfx942)", include_dir!("$CARGO_MANIFEST_DIR/../tests/fixtures/sysfs/mi300x")),
    ("mi210", "Instinct MI210 (gfx90a)", include_dir!("$CARGO_MANIFEST_DIR/../tests/fixtures/sysfs/mi210")),
    ("w7500", "Radeon Pro W7500 (gfx1102)", include_dir!("$CARGO_MANIFEST_DIR/../tests/fixtures/sysfs/w7500")),
    ("rx9070xt", "RX 9070 XT (gfx1201)", include_dir!("$CARGO_MANIFEST_DIR/../tests/fixtures/sysfs/rx9070xt")),
    ("strix-halo", "Strix Halo APU (gfx1151)", include_dir!("$CARGO_MANIFEST_DIR/../tests/fixtures/sysfs/strix-halo")),
    ("780m", "Radeon 780M APU (gfx1103)", include_dir!("$CARGO_MANIFEST_DIR/../tests/fixtures/sysfs/780m")),
    ("apu-plus-dgpu", "780M APU + RX 7900 XTX", include_dir!("$CARGO_MANIFEST_DIR/../tests/fixtures/sysfs/apu-plus-dgpu")),
    ("cpu-only", "a machine without an AMD GPU", include_dir!("$CARGO_MANIFEST_DIR/../tests/fixtures/sysfs/cpu-only")),
];

/// Run the whole pipeline on built-in fat binaries: split them into
/// host-only binaries plus per-GPU-family archives, detect a simulated GPU
/// from a KFD sysfs tree, load its code objects through the runtime loader,
/// and check every byte against the original fat binary. Needs no GPU.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which GPU to simulate (a KFD sysfs fixture of a real machine).
    #[arg(long, default_value = "rx7900xtx", value_parser = gpu_names())]
    pub gpu: String,
    /// Keep the working directory instead of removing it.
    #[arg(long)]
    pub keep: bool,
    /// Work in this directory (created; kept) instead of a temporary one.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

fn gpu_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(
        GPUS.iter()
            .map(|(name, about, _)| clap::builder::PossibleValue::new(*name).help(*about)),
    )
}

/// Timings and facts gathered for the closing report.
#[derive(Default)]
struct Report {
    steps: Vec<(String, f64)>,
    lines: Vec<String>,
}

impl Report {
    /// Runs one step, timing it; on failure adds what to run to reproduce.
    fn step<T>(
        &mut self,
        name: &str,
        reproduce: &str,
        f: impl FnOnce(&mut Vec<String>) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        println!("==> {name}");
        let start = Instant::now();
        let mut lines = Vec::new();
        let result = f(&mut lines);
        for line in &lines {
            println!("    {line}");
        }
        let secs = start.elapsed().as_secs_f64();
        self.steps.push((name.to_owned(), secs));
        result.with_context(|| format!("step '{name}' failed; to reproduce: {reproduce}"))
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (work, _guard) = match &args.dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating {}", dir.display()))?;
            (dir.clone(), None)
        }
        None => {
            let tmp = tempfile::Builder::new().prefix("rocm-kpack-demo-").tempdir()?;
            let path = tmp.path().to_owned();
            (path, if args.keep { None } else { Some(tmp) })
        }
    };
    if args.keep || args.dir.is_some() {
        // Keep what the demo made: drop the guard without deleting.
        println!("working directory: {} (kept)", work.display());
    } else {
        println!("working directory: {} (removed at the end; --keep keeps it)", work.display());
    }
    let mut report = Report::default();
    let result = run_steps(&args, &work, &mut report);
    if let Some(guard) = _guard {
        if args.keep {
            let _ = guard.keep();
        }
    }
    result?;
    println!();
    println!("rocm-kpack demo: report");
    for line in &report.lines {
        println!("  {line}");
    }
    println!("  time per step:");
    for (name, secs) in &report.steps {
        println!("    {secs:>7.3} s  {name}");
    }
    Ok(ExitCode::SUCCESS)
}

fn run_steps(args: &Args, work: &Path, report: &mut Report) -> anyhow::Result<()> {
    let fat_dir = work.join("fat");
    let split_dir = work.join("split");
    let sysfs_root = work.join("sysfs").join(&args.gpu);

    report.step(
        "write the built-in fat binaries and the GPU's KFD sysfs tree",
        "rocm-kpack demo --keep",
        |out| {
            std::fs::create_dir_all(&fat_dir)?;
            for (name, bytes) in FAT_FIXTURES {
                let path = fat_dir.join(name);
                std::fs::write(&path, bytes)
                    .with_context(|| format!("writing {}", path.display()))?;
                out.push(format!("{} ({} bytes)", path.display(), bytes.len()));
            }
            let (_, _, tree) = GPUS
                .iter()
                .find(|(name, _, _)| *name == args.gpu)
                .with_context(|| format!("no built-in sysfs tree for {}", args.gpu))?;
            extract_dir(tree, &sysfs_root)?;
            out.push(format!("KFD sysfs of {}: {}", args.gpu, sysfs_root.display()));
            Ok(())
        },
    )?;

    let targets = report.step(
        "detect the GPU from KFD sysfs",
        &format!(
            "rocm-kpack-fetch detect --sysfs-root {}",
            sysfs_root.display()
        ),
        |out| {
            let detection = detect::detect(&sysfs_root, &DetectOptions::default())?;
            for node in &detection.gpu_nodes {
                out.push(format!("node {}: {}", node.node_id, node.target));
            }
            Ok(detection.targets.clone())
        },
    )?;
    if targets.is_empty() {
        println!();
        println!(
            "No AMD GPU in the simulated machine ({}): nothing needs device code.\n\
             On such a machine the generic (host-only) packages install and run their\n\
             CPU paths; rocm-kpack-fetch installs nothing and `detect` exits 3.\n\
             Try `rocm-kpack demo --gpu rx7900xtx` to see device code being fetched and loaded.",
            args.gpu
        );
        report.lines.push(format!("{}: no GPU, nothing to install", args.gpu));
        return Ok(());
    }

    let splits = report.step(
        "split each fat binary into a host-only binary + per-family .kpack archives",
        &format!(
            "rocm-kpack split-binary {}/app_pie --out {}",
            fat_dir.display(),
            split_dir.display()
        ),
        |out| {
            std::fs::create_dir_all(&split_dir)?;
            let mut reports = Vec::new();
            for (name, _) in FAT_FIXTURES {
                let r = split_binary(&fat_dir.join(name), &split_dir, &SplitBinaryOptions::default())?;
                out.push(format!(
                    "{name}: {} -> {} bytes host-only; {} bundles, {} code objects -> {} archives",
                    r.input_size,
                    r.output_size,
                    r.bundles,
                    r.code_objects,
                    r.archives.len()
                ));
                reports.push(r);
            }
            Ok(reports)
        },
    )?;

    report.step(
        "load every code object for the GPU through the runtime loader and compare with the original",
        &format!(
            "ROCM_KPACK_DEBUG=1 rocm-kpack verify {} --targets {}",
            split_dir.display(),
            targets.join(",")
        ),
        |out| {
            let cache = Cache::with_config(LoaderConfig::default());
            let mut loaded = 0usize;
            let mut families = BTreeMap::new();
            for (name, _) in FAT_FIXTURES {
                let original = std::fs::read(fat_dir.join(name))?;
                let host_path = split_dir.join(name);
                let host = std::fs::read(&host_path)?;
                let elf = inspect_elf(&host)?;
                let marker = elf
                    .marker
                    .as_ref()
                    .with_context(|| format!("{name}: no marker after split"))?;
                let marker = Marker {
                    kpack_search_paths: marker.kpack_search_paths.clone(),
                    kernel_name: marker.kernel_name.clone(),
                };
                let originals = original_code_objects(&original)?;
                for wrapper in &elf.wrappers {
                    let co_index = wrapper
                        .co_index
                        .with_context(|| format!("{name}: wrapper {} has no co_index", wrapper.index))?;
                    for target in &targets {
                        let co = cache
                            .load_code_object(&marker, &host_path, co_index, &[target.as_str()])
                            .with_context(|| format!("{name}#{co_index} for {target}"))?;
                        let want = originals
                            .get(&(co_index as usize, co.arch.clone()))
                            .with_context(|| {
                                format!("{name}#{co_index}: the fat binary has no {} code object", co.arch)
                            })?;
                        let (got, want) = (sha256_hex(&co.data), sha256_hex(want));
                        if got != want {
                            bail!("{name}#{co_index} {}: sha256 {got}, original {want}", co.arch);
                        }
                        let archive = co
                            .archive_path
                            .file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default();
                        out.push(format!(
                            "{name}#{co_index} for {target}: {} from {archive}, {} bytes, sha256 {}… = original",
                            co.arch,
                            co.data.len(),
                            &got[..16]
                        ));
                        families.insert(co.archive_path.clone(), ());
                        loaded += 1;
                    }
                }
            }
            report_sizes(&splits, &families.into_keys().collect::<Vec<_>>(), out, loaded)
        },
    )
    .map(|lines| report.lines.extend(lines))?;
    Ok(())
}

/// The code objects of a fat binary keyed by (bundle index, target id).
fn original_code_objects(data: &[u8]) -> anyhow::Result<BTreeMap<(usize, String), Vec<u8>>> {
    use object::{Object as _, ObjectSection as _};
    let file = object::File::parse(data)?;
    let section = file
        .section_by_name(".hip_fatbin")
        .context("no .hip_fatbin section")?;
    let mut out = BTreeMap::new();
    for (index, bundle) in rocm_kpack::bundle::parse_fatbin(section.data()?)?.iter().enumerate() {
        for (target, code) in bundle.code_objects() {
            out.insert((index, target.to_owned()), code.to_vec());
        }
    }
    Ok(out)
}

fn report_sizes(
    splits: &[rocm_kpack_splitter::split_binary::SplitBinaryReport],
    used_archives: &[PathBuf],
    out: &mut Vec<String>,
    loaded: usize,
) -> anyhow::Result<Vec<String>> {
    let fat: u64 = splits.iter().map(|r| r.input_size).sum();
    let host: u64 = splits.iter().map(|r| r.output_size).sum();
    let all_archives: u64 = splits.iter().flat_map(|r| &r.archives).map(|a| a.size).sum();
    let mut needed = 0u64;
    for path in used_archives {
        needed += std::fs::metadata(path)?.len();
    }
    let mut lines = Vec::new();
    lines.push(format!(
        "code objects loaded and equal (sha256) to the originals: {loaded}"
    ));
    let mut s = String::new();
    let _ = write!(
        s,
        "bytes for this user: {fat} fat -> {} ({host} host-only + {needed} for the family they need) = {:.1}% of fat",
        host + needed,
        100.0 * (host + needed) as f64 / fat.max(1) as f64
    );
    lines.push(s);
    lines.push(format!(
        "all families' archives together: {all_archives} bytes (zstd), vs {} bytes of device code in the fat binaries",
        splits.iter().map(|r| r.fatbin_size).sum::<u64>()
    ));
    out.extend(lines.iter().cloned());
    Ok(lines)
}

fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// Writes an embedded directory tree to `dest`.
fn extract_dir(dir: &Dir<'_>, dest: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dest)?;
    for entry in dir.entries() {
        let path = dest.join(entry.path());
        match entry {
            include_dir::DirEntry::Dir(d) => extract_dir(d, dest)?,
            include_dir::DirEntry::File(f) => {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::write(&path, f.contents())?;
            }
        }
    }
    Ok(())
}
