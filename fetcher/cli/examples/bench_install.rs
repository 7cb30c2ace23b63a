//! Benchmark: `install` throughput from a loopback HTTP server with
//! `--jobs 1` and `--jobs 4`, next to `curl -s -o` + `sha256sum` of the same
//! files one after the other, measured in the same run.
//!
//! ```text
//! cargo build --release -p rocm-kpack-fetch --bins --examples
//! target/release/examples/bench_install [DIR] [--rounds N]
//! ```
//! DIR: a directory of real `.kpack` archives; a manifest per component is
//! made from them. `--librocsparse [DEB]`: split Debian's librocsparse0
//! (default: the cached .deb) into one archive per target processor here
//! (`--per-family`: per default family), from the code objects of every
//! `.hip_fatbin` bundle, zstd per kernel, and serve those. Otherwise: seven archives of
//! random kernels, about 180 MB in total.
//! Each figure is the best of `--rounds` (default 3).

use std::collections::BTreeMap;
use std::fs;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use rocm_kpack_format::archive::{Archive, ArchiveWriter, CompressionScheme};
use rocm_kpack_format::layout;
use rocm_kpack_format::manifest::{Manifest, ManifestFile};
use sha2::{Digest, Sha256};

struct Item {
    component: String,
    file: ManifestFile,
    bytes: Vec<u8>,
}

fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn generated() -> anyhow::Result<Vec<Item>> {
    // Seven families, 8..48 MB, 180 MB in all, incompressible kernels.
    let families = [
        ("gfx90X", "gfx90a", 8),
        ("gfx94X", "gfx942", 12),
        ("gfx103X", "gfx1030", 18),
        ("gfx110X", "gfx1100", 24),
        ("gfx115X", "gfx1151", 30),
        ("gfx120X", "gfx1201", 40),
        ("gfx101X", "gfx1010", 48),
    ];
    let mut items = Vec::new();
    for (i, (family, arch, mb)) in families.iter().enumerate() {
        let mut w = ArchiveWriter::new(
            Cursor::new(Vec::new()),
            "rocsparse",
            family,
            CompressionScheme::None,
            0,
        )?;
        // Kernels of 1 MB, as libraries have many.
        for k in 0..*mb {
            w.add_kernel(
                &format!("lib/librocsparse.so#{k}"),
                arch,
                noise(1 << 20, (i * 1000 + k) as u64),
            )?;
        }
        let bytes = w.finish()?.into_inner();
        items.push(item("rocsparse", family, vec![arch.to_string()], bytes));
    }
    Ok(items)
}

fn item(component: &str, family: &str, architectures: Vec<String>, bytes: Vec<u8>) -> Item {
    Item {
        component: component.to_string(),
        file: ManifestFile {
            filename: layout::archive_file_name(component, family),
            family: family.to_string(),
            architectures,
            size: bytes.len() as u64,
            sha256: Some(Sha256::digest(&bytes).into()),
            transport: None,
        },
        bytes,
    }
}

fn from_dir(dir: &Path) -> anyhow::Result<Vec<Item>> {
    let mut items = Vec::new();
    let mut paths: Vec<PathBuf> = fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "kpack"))
        .collect();
    paths.sort();
    for path in paths {
        let archive = Archive::open(&path).with_context(|| path.display().to_string())?;
        let bytes = fs::read(&path)?;
        let mut it = item(
            archive.group_name(),
            archive.gfx_arch_family(),
            archive.gfx_arches().to_vec(),
            bytes,
        );
        it.file.filename = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        items.push(it);
    }
    if items.is_empty() {
        bail!("no .kpack files in {}", dir.display());
    }
    Ok(items)
}

/// Where Debian's librocsparse0 is cached (see tests/support/src/debian.rs).
const ROCSPARSE_DEB: &str = "/var/cache/rocm-kpack-debs/librocsparse0_5.3.0+dfsg-2_amd64.deb";

/// Splits librocsparse from `deb` into one archive per default family.
fn librocsparse(deb: &Path, scratch: &Path, per_family: bool) -> anyhow::Result<Vec<Item>> {
    use object::{Object, ObjectSection};
    let tree = scratch.join("deb");
    let st = Command::new("dpkg-deb")
        .arg("-x")
        .arg(deb)
        .arg(&tree)
        .status()?;
    if !st.success() {
        bail!("dpkg-deb -x {} failed", deb.display());
    }
    let so = tree.join("usr/lib/x86_64-linux-gnu/librocsparse.so.0.1");
    let data = fs::read(&so).with_context(|| so.display().to_string())?;
    let elf = object::File::parse(&*data)?;
    let section = elf
        .section_by_name(".hip_fatbin")
        .context("no .hip_fatbin")?;
    let bytes = section.data()?;
    let bundles = rocm_kpack_format::bundle::parse_fatbin(bytes)?;
    let spec = if per_family {
        rocm_kpack_pkgspec::Spec::default_families()
    } else {
        let mut processors: Vec<String> = bundles
            .iter()
            .flat_map(|b| {
                b.code_objects()
                    .map(|(t, _)| rocm_kpack_pkgspec::processor_of(t).to_string())
            })
            .collect();
        processors.sort();
        processors.dedup();
        rocm_kpack_pkgspec::Spec::per_target(&processors)?
    };
    let mut writers: BTreeMap<String, ArchiveWriter<Cursor<Vec<u8>>>> = BTreeMap::new();
    for (i, bundle) in bundles.iter().enumerate() {
        for (target, code) in bundle.code_objects() {
            for group in spec.group_for(target)? {
                let w = match writers.entry(group.name.clone()) {
                    std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::btree_map::Entry::Vacant(e) => e.insert(ArchiveWriter::new(
                        Cursor::new(Vec::new()),
                        "librocsparse",
                        &group.name,
                        CompressionScheme::ZstdPerKernel,
                        rocm_kpack_format::archive::DEFAULT_ZSTD_LEVEL,
                    )?),
                };
                w.add_kernel(&format!("librocsparse.so.0.1#{i}"), target, code.to_vec())?;
            }
        }
    }
    let mut items = Vec::new();
    for (family, w) in writers {
        let bytes = w.finish()?.into_inner();
        let archive = Archive::from_bytes(bytes.clone())?;
        items.push(item(
            "librocsparse",
            &family,
            archive.gfx_arches().to_vec(),
            bytes,
        ));
    }
    let _ = fs::remove_dir_all(&tree);
    Ok(items)
}

#[derive(Parser)]
struct Args {
    /// Directory of .kpack archives to serve (default: generate).
    dir: Option<PathBuf>,
    /// Split Debian's librocsparse0 .deb and serve its archives.
    #[arg(long, value_name = "DEB", num_args = 0..=1, default_missing_value = ROCSPARSE_DEB,
          conflicts_with = "dir")]
    librocsparse: Option<PathBuf>,
    /// With --librocsparse: one archive per family instead of per target.
    #[arg(long)]
    per_family: bool,
    /// Rounds per measurement; the best is reported.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
}

fn best(rounds: u32, mut f: impl FnMut() -> anyhow::Result<Duration>) -> anyhow::Result<Duration> {
    let mut best = Duration::MAX;
    for _ in 0..rounds.max(1) {
        best = best.min(f()?);
    }
    Ok(best)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let tmp = tempfile::tempdir()?;
    let items = match (&args.dir, &args.librocsparse) {
        (Some(d), _) => from_dir(d)?,
        (None, Some(deb)) => {
            let start = Instant::now();
            let items = librocsparse(deb, tmp.path(), args.per_family)?;
            println!(
                "split librocsparse into {} archives in {:.1}s",
                items.len(),
                start.elapsed().as_secs_f64()
            );
            items
        }
        (None, None) => generated()?,
    };
    let total: u64 = items.iter().map(|i| i.file.size).sum();
    let prefix = tmp.path().join("prefix");
    let kpack = prefix.join(".kpack");
    fs::create_dir_all(&kpack)?;
    let mut by_component: BTreeMap<&str, Vec<ManifestFile>> = BTreeMap::new();
    let mut arches: Vec<String> = Vec::new();
    let server = rocm_kpack_test_support::http::Server::start();
    for it in &items {
        by_component
            .entry(&it.component)
            .or_default()
            .push(it.file.clone());
        for a in &it.file.architectures {
            // Install for every processor so that every archive is needed.
            let processor = a.split(':').next().unwrap_or(a).to_string();
            if !processor.ends_with("-generic") && !arches.contains(&processor) {
                arches.push(processor);
            }
        }
        let by_hash = layout::store::by_hash_path(&Sha256::digest(&it.bytes).into());
        server.add(&format!("/{by_hash}"), it.bytes.clone());
    }
    for (component, files) in &by_component {
        let m = Manifest {
            component: component.to_string(),
            kpack_files: files.clone(),
            database_files: Vec::new(),
            prefix_path: None,
        };
        fs::write(
            kpack.join(layout::manifest_file_name(component)),
            m.to_msgpack()?,
        )?;
    }
    let url = server.url();
    // The binary next to this example's directory (cargo build --release
    // builds both), or BENCH_FETCH_BIN.
    let fetch_bin = match std::env::var_os("BENCH_FETCH_BIN") {
        Some(p) => PathBuf::from(p),
        None => std::env::current_exe()?
            .parent()
            .and_then(Path::parent)
            .map(|d| d.join("rocm-kpack-fetch"))
            .context("locating rocm-kpack-fetch")?,
    };
    if !fetch_bin.is_file() {
        bail!(
            "{} not found: cargo build --release -p rocm-kpack-fetch",
            fetch_bin.display()
        );
    }
    let cache = tmp.path().join("cache");
    println!(
        "{} archives, {:.1} MB, from {url} (best of {} rounds)",
        items.len(),
        total as f64 / 1e6,
        args.rounds
    );

    let clean = || -> anyhow::Result<()> {
        for it in &items {
            let _ = fs::remove_file(kpack.join(&it.file.filename));
        }
        let _ = fs::remove_file(kpack.join(".rocm-kpack-fetch-state.json"));
        let _ = fs::remove_dir_all(&cache);
        Ok(())
    };
    let install = |jobs: u32| -> anyhow::Result<Duration> {
        clean()?;
        let arch = arches.join(",");
        let j = jobs.to_string();
        let start = Instant::now();
        let st = Command::new(&fetch_bin)
            .args(["install", "--target", &arch, "--prefix"])
            .arg(&prefix)
            .args(["--no-default-prefixes", "--cache-dir"])
            .arg(&cache)
            .args(["--source", &url, "--allow-http", "--jobs", &j])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        let took = start.elapsed();
        if !st.success() {
            bail!("install exited with {st}");
        }
        for it in &items {
            if fs::metadata(kpack.join(&it.file.filename))?.len() != it.file.size {
                bail!("{} not installed", it.file.filename);
            }
        }
        Ok(took)
    };
    let out = tmp.path().join("curl");
    fs::create_dir_all(&out)?;
    let curl_files: Vec<(String, PathBuf)> = items
        .iter()
        .map(|it| {
            let by_hash = layout::store::by_hash_path(&Sha256::digest(&it.bytes).into());
            (format!("{url}/{by_hash}"), out.join(&it.file.filename))
        })
        .collect();
    let mut curl_only = Duration::MAX;
    let mut sha_only = Duration::MAX;
    let curl_sha = best(args.rounds, || {
        for (_, path) in &curl_files {
            let _ = fs::remove_file(path);
        }
        let start = Instant::now();
        for (u, path) in &curl_files {
            let st = Command::new("curl")
                .args(["-s", "-o"])
                .arg(path)
                .arg(u)
                .status()?;
            if !st.success() {
                bail!("curl {u} failed");
            }
        }
        let mid = Instant::now();
        for (_, path) in &curl_files {
            let o = Command::new("sha256sum").arg(path).output()?;
            if !o.status.success() {
                bail!("sha256sum failed");
            }
        }
        let end = Instant::now();
        curl_only = curl_only.min(mid - start);
        sha_only = sha_only.min(end - mid);
        Ok(end - start)
    })?;
    let jobs1 = best(args.rounds, || install(1))?;
    let jobs4 = best(args.rounds, || install(4))?;

    let mbs = |d: Duration| total as f64 / 1e6 / d.as_secs_f64();
    println!();
    println!("{:<36} {:>9} {:>10}", "", "seconds", "MB/s");
    for (name, d) in [
        ("curl -s -o, one after the other", curl_only),
        ("sha256sum, one after the other", sha_only),
        ("curl + sha256sum (baseline)", curl_sha),
        ("rocm-kpack-fetch install --jobs 1", jobs1),
        ("rocm-kpack-fetch install --jobs 4", jobs4),
    ] {
        println!("{name:<36} {:>9.3} {:>10.1}", d.as_secs_f64(), mbs(d));
    }
    println!();
    println!(
        "--jobs 1 vs curl + sha256sum: {:.2}x the throughput ({})",
        curl_sha.as_secs_f64() / jobs1.as_secs_f64(),
        if jobs1 <= curl_sha {
            "target met"
        } else {
            "TARGET MISSED"
        }
    );
    println!(
        "--jobs 4 vs --jobs 1: {:.2}x",
        jobs1.as_secs_f64() / jobs4.as_secs_f64()
    );
    Ok(())
}
