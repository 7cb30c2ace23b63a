//! Debian trixie's real rocBLAS (`librocblas0` 5.5.1+dfsg-7: a fat library
//! plus the Tensile kernel database, 2.26 GB installed) end to end: the
//! fat deb is split into packages, the kpack store published and served on
//! 127.0.0.1, the generic deb unpacked into a root, and for the sysfs
//! fixtures `mi210` (gfx90a) and `rx7900xtx` (gfx1100):
//! - before the fetch `status` exits non-zero and names the missing
//!   Tensile files;
//! - `install --auto` fetches; afterwards every file the fat deb installs
//!   is present and byte-identical except the split host library (files
//!   that serve no target and the detected processor's database files),
//!   no other processor's database file is there, `status` says complete
//!   and `verify` passes.
//!
//! The split and the store (the expensive part) are built once, at a low
//! zstd/xz level (the point here is the flow; `bench_download` measures the
//! release level), and kept under `target/tmp/` keyed by the deb's sha256,
//! the split and publish settings, and the sources of the crates that write
//! them ([`code_key`]), so a rerun reuses them until one of those changes.
#![cfg(unix)]
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use rocm_kpack_package::compress::Compression;
use rocm_kpack_package::container::EntryType;
use rocm_kpack_package::deb::DebReader;
use rocm_kpack_publish::{publish, PublishOptions};
use rocm_kpack_splitter::split::output::ArchiveOutput;
use rocm_kpack_splitter::split_package::{split_package, SplitPackageOptions};
use rocm_kpack_test_support::packages::{chain, ok, LIBDIR};
use rocm_kpack_test_support::{bins, debian, fixtures, http};

const PACKAGE: &str = "librocblas0";
/// The host library the split rewrites (its `.hip_fatbin` moved out).
const HOST_LIBRARY: &str = "librocblas.so.0.1";
/// The Tensile database directory, below the library directory.
const TENSILE_DIR: &str = "rocblas/2.47.0/library";

/// The split's generic deb and the published store.
struct Base {
    generic_deb: PathBuf,
    repo: PathBuf,
}

/// Builds the base into a temporary sibling and renames it into place, so a
/// concurrent run never sees half of one; older bases are removed.
fn base() -> &'static Base {
    static B: OnceLock<Base> = OnceLock::new();
    B.get_or_init(|| {
        let deb = debian::package(PACKAGE).unwrap();
        let pin = debian::pinned(PACKAGE).unwrap();
        let parent = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rocblas_databases");
        let key = format!("{}-{}", &pin.sha256[..16], &code_key()[..16]);
        let dir = parent.join(&key);
        let found = |dir: &Path| Base {
            generic_deb: dir.join(format!("{PACKAGE}_{}_amd64.deb", pin.version)),
            repo: dir.join("repo"),
        };
        if dir.join("repo/index.json").is_file() {
            return found(&dir);
        }
        fs::create_dir_all(&parent).unwrap();
        for e in fs::read_dir(&parent).unwrap().flatten() {
            if e.file_name() != key.as_str() {
                let _ = fs::remove_dir_all(e.path());
            }
        }
        let tmp = tempfile::Builder::new()
            .prefix(".build-")
            .tempdir_in(&parent)
            .unwrap();
        let pkgs = tmp.path().join("pkgs");
        let report = split_package(
            &deb,
            &pkgs,
            &SplitPackageOptions {
                output: ArchiveOutput {
                    zstd_level: 3,
                    ..ArchiveOutput::release()
                },
                package_compression: Compression::Xz,
                package_level: Some(0),
                ..SplitPackageOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("split-package: {}", chain(&e)));
        // No device package is larger than the fat one, even at xz -0.
        let fat_len = fs::metadata(&deb).unwrap().len();
        for p in &report.packages {
            let len = fs::metadata(&p.path).unwrap().len();
            assert!(
                len <= fat_len,
                "{} is {len} B, the fat deb {fat_len} B",
                p.name
            );
        }
        publish(
            &pkgs,
            &tmp.path().join("repo"),
            &PublishOptions {
                kpack_store: true,
                store_zstd_level: 3,
                ..PublishOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("publish: {}", chain(&e)));
        let generic = report.packages.iter().find(|p| p.name == PACKAGE).unwrap();
        let b = found(tmp.path());
        fs::rename(&generic.path, &b.generic_deb).unwrap();
        // The device packages are not needed here: only the store is served.
        fs::remove_dir_all(&pkgs).unwrap();
        let kept = tmp.keep();
        match fs::rename(&kept, &dir) {
            Ok(()) => {}
            Err(_) if dir.join("repo/index.json").is_file() => {
                let _ = fs::remove_dir_all(&kept);
            }
            Err(e) => panic!("rename {} -> {}: {e}", kept.display(), dir.display()),
        }
        found(&dir)
    })
}

/// The settings of the base (change the tag with them) and every source
/// file of the crates that split and publish, hashed: the base is reused
/// only when it would be rebuilt byte for byte.
fn code_key() -> String {
    use sha2::{Digest, Sha256};
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut h = Sha256::new();
    h.update(b"split zstd 3, xz 0; store zstd 3\0");
    let mut sources = vec![workspace.join("Cargo.lock"), workspace.join("Cargo.toml")];
    for dir in ["splitter", "runtime/format", "pkgspec"] {
        sources.extend(
            files(&workspace.join(dir))
                .into_iter()
                .filter(|p| {
                    p.extension().is_some_and(|x| x == "rs" || x == "toml")
                        && !p.starts_with("tests")
                })
                .map(|p| workspace.join(dir).join(p)),
        );
    }
    sources.sort();
    for p in sources {
        h.update(p.to_string_lossy().as_bytes());
        h.update(fs::read(&p).unwrap());
    }
    hex::encode(h.finalize())
}

fn fetch(root: &Path, machine: &str, args: &[&str]) -> (i32, String, String) {
    let mut cmd = bins::command("rocm-kpack-fetch");
    bins::isolate_fetcher(&mut cmd);
    cmd.args(args).arg("--root").arg(root);
    // `verify` checks what is installed, whatever the GPUs.
    if args.first() != Some(&"verify") {
        cmd.arg("--sysfs-root").arg(fixtures::machine(machine));
    }
    let o = cmd.output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The processor a file name is for (`TensileLibrary_gfx90a.co`,
/// `Kernels.so-000-gfx90a-xnack+.hsaco` -> `gfx90a`), read from the name
/// itself, not from the split's manifest.
fn processor_in_name(name: &str) -> Option<String> {
    let at = name.find("gfx")?;
    let digits: String = name[at + 3..]
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .collect();
    (!digits.is_empty()).then(|| format!("gfx{digits}"))
}

/// Files and symlinks below `dir`, relative.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let t = e.file_type().unwrap();
            if t.is_dir() && e.file_name() != "target" {
                stack.push(e.path());
            } else {
                out.push(e.path().strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

fn install_auto_restores_the_fat_package(machine: &str, processor: &str) {
    let base = base();
    let server = http::serve_dir(&base.repo).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    fs::create_dir(&root).unwrap();
    ok(Command::new("dpkg-deb")
        .arg("-x")
        .arg(&base.generic_deb)
        .arg(&root));
    let library = Path::new(LIBDIR).join(TENSILE_DIR);
    let tensile = format!("TensileLibrary_{processor}.co");
    assert!(
        !root.join(&library).join(&tensile).exists(),
        "{tensile} in the generic deb"
    );

    // Before: incomplete, and it says what is missing.
    let (code, stdout, stderr) = fetch(&root, machine, &["status"]);
    assert_ne!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("missing") && stdout.contains(&tensile),
        "{stdout}{stderr}"
    );
    assert!(!stdout.contains("complete ("), "{stdout}");

    let (code, stdout, stderr) = fetch(
        &root,
        machine,
        &[
            "install",
            "--auto",
            "--jobs",
            "2",
            "--allow-http",
            "--source",
            server.root_url(),
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");

    // Every file the fat deb installs for this processor or for none is
    // there, byte for byte; the host library is there (split); no other
    // processor's database file is. The fat deb is read as a stream, not
    // extracted: its 2.3 GB would be CI disk for nothing.
    let fat = DebReader::open(&debian::package(PACKAGE).unwrap()).unwrap();
    let mut checked = 0;
    fat.for_each_entry(|entry, data| {
        let got = root.join(&entry.path);
        let name = got.file_name().unwrap().to_string_lossy().into_owned();
        match entry.kind {
            EntryType::Dir => return Ok(()),
            EntryType::Symlink => {
                let link = fs::read_link(&got).ok();
                assert_eq!(
                    link.as_deref().and_then(Path::to_str),
                    entry.link.as_deref(),
                    "{}",
                    entry.path
                );
                return Ok(());
            }
            EntryType::File => {}
        }
        if name == HOST_LIBRARY {
            assert!(got.is_file(), "{} missing", entry.path);
            return Ok(());
        }
        match processor_in_name(&name) {
            Some(p) if p != processor => {
                assert!(!got.exists(), "{} installed for {machine}", entry.path)
            }
            _ => {
                assert!(
                    got.is_file(),
                    "{} missing after install --auto on {machine}",
                    entry.path
                );
                assert!(
                    fs::metadata(&got).unwrap().len() == entry.size
                        && debian::sha256_file(&got).unwrap()
                            == debian::sha256_reader(data).unwrap(),
                    "{} differs from the fat deb's",
                    entry.path
                );
                checked += 1;
            }
        }
        Ok(())
    })
    .unwrap();
    // TensileLibrary.dat, the processor's .co and at least one .hsaco, docs.
    assert!(checked >= 4, "{checked}");
    let fetched: Vec<String> = files(&root.join(&library))
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .filter(|n| n.contains(processor))
        .collect();
    assert!(fetched.contains(&tensile), "{fetched:?}");
    assert!(fetched.iter().any(|n| n.ends_with(".hsaco")), "{fetched:?}");

    let (code, stdout, stderr) = fetch(&root, machine, &["status"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("complete"), "{stdout}");
    let (code, stdout, stderr) = fetch(&root, machine, &["verify"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    // A rerun downloads nothing.
    let before = server.requests().len();
    let (code, stdout, stderr) = fetch(
        &root,
        machine,
        &[
            "install",
            "--auto",
            "--allow-http",
            "--source",
            server.root_url(),
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        server.requests()[before..]
            .iter()
            .all(|r| !r.path.contains("/by-hash/")),
        "{:?}",
        &server.requests()[before..]
    );
}

#[test]
fn rocblas_mi210_install_auto_fetches_the_gfx90a_tensile_database() {
    install_auto_restores_the_fat_package("mi210", "gfx90a");
}

#[test]
fn rocblas_rx7900xtx_install_auto_fetches_the_gfx1100_tensile_database() {
    install_auto_restores_the_fat_package("rx7900xtx", "gfx1100");
}
