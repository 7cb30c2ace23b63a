//! The kernel-database kinds of AMD's newer splitter handlers end to end:
//! hipSPARSELt, Tensile's per-arch directories, Composable Kernel's
//! per-target static libraries, hip-kernel-provider content, rocjitsu's
//! translations and the `-strict` spellings, beside the fixture library in
//! one small install tree (a few 40 KB files per kind, written here). The
//! tree goes through the binaries as a release engineer runs them:
//! `rocm-kpack split`, `rocm-kpack package --format deb,rpm,wheel`,
//! `rocm-kpack publish --kpack-store`, once per test process. Then:
//! - every file of a new kind is in its processor's (or family's generic
//!   ISA's) tree and device packages and in none other, the files that serve
//!   no target stay generic, and the manifest lists the moved ones with
//!   their targets;
//! - for an MI300X (gfx942), an RX 7900 XTX (gfx1100, with the gfx11
//!   family's files) and a gfx1250 part, the generic deb unpacked into a
//!   root, `rocm-kpack-fetch install --auto` from the store on 127.0.0.1
//!   makes every file of the input tree for that machine byte-identical
//!   (the split host library aside) and fetches no other target's files;
//!   `status` is incomplete before and complete after, `verify` passes, and
//!   `remove` takes the fetched files again and leaves the generic ones.
#![cfg(unix)]
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use rocm_kpack_format::manifest::Manifest;
use rocm_kpack_test_support::databases::{self, ROCM_PREFIX, TENSILE_DAT};
use rocm_kpack_test_support::packages::{ok, snapshot};
use rocm_kpack_test_support::{bins, fixtures, http};

/// The generic package's name.
const PACKAGE: &str = "libdbkinds1";

/// A rocjitsu translation's name: the sha256 it is keyed by.
const DIGEST: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const OTHER_DIGEST: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

/// (path below the prefix, the device tree it goes to; `None`: stays
/// generic).
fn files() -> Vec<(String, Option<&'static str>)> {
    let rocjitsu = "share/rocjitsu/translations";
    let engines = "lib/hipdnn_plugins/engines";
    let mut out: Vec<(String, Option<&'static str>)> = [
        // hipSPARSELt, flat and per-arch.
        (
            "lib/hipsparselt/library/TensileLibrary_BB_BB_A_gfx942.dat",
            Some("gfx942"),
        ),
        (
            "lib/hipsparselt/library/Kernels.so-000-gfx1100.hsaco",
            Some("gfx1100"),
        ),
        (
            "lib/hipsparselt/library/gfx942/TensileLibrary_BB_BB_A_fallback.dat",
            Some("gfx942"),
        ),
        (
            "lib/hipsparselt/library/TensileLibrary_BB_BB_A_fallback.dat",
            None,
        ),
        // Tensile's per-arch directories: manifests and fallbacks too, a
        // family directory, a strict one.
        (
            "lib/rocblas/library/gfx942/TensileManifest.txt",
            Some("gfx942"),
        ),
        (
            "lib/rocblas/library/gfx942/TensileLibrary_Type_HH_fallback.dat",
            Some("gfx942"),
        ),
        (
            "lib/hipblaslt/library/gfx1100/TensileManifest.txt",
            Some("gfx1100"),
        ),
        (
            "lib/hipblaslt/library/gfx11xx/TensileManifest.txt",
            Some("gfx11-generic"),
        ),
        (
            "lib/rocblas/library/gfx1250-strict/TensileManifest.txt",
            Some("gfx1250"),
        ),
        (
            "lib/rocblas/library/TensileLibrary_gfx1250-strict.dat",
            Some("gfx1250"),
        ),
        // Composable Kernel's per-target static libraries (and a Windows
        // one); the all-target library stays.
        ("lib/libdevice_conv_operations_gfx942.a", Some("gfx942")),
        (
            "lib/libdevice_conv_operations_gfx942_srameccp_xnack_.a",
            Some("gfx942"),
        ),
        ("lib/libdevice_conv_operations_gfx1100.a", Some("gfx1100")),
        ("lib/libdevice_conv_operations_gfx1250.a", Some("gfx1250")),
        (
            "lib/libdevice_conv_operations_gfx1250_strict.a",
            Some("gfx1250"),
        ),
        ("lib/libdevice_conv_operations.a", None),
        ("bin/device_conv_operations_gfx942.lib", Some("gfx942")),
        // MIOpen's strict spellings.
        ("share/miopen/db/gfx1250-strict_256.db.txt", Some("gfx1250")),
        (
            "lib/libMIOpenCKGroupedConv_gfx1250-strict.so",
            Some("gfx1250"),
        ),
    ]
    .iter()
    .map(|(p, t)| (p.to_string(), *t))
    .collect();
    // hip-kernel-provider: per-target archives and manifests, test
    // content, a family's; configuration and arch-less test content stay.
    for (rel, tree) in [
        (
            "arch_content/hip-kernel-provider/gfx942/kernels_gfx942.kpack",
            Some("gfx942"),
        ),
        (
            "arch_content/hip-kernel-provider/gfx942/kernels_gfx942.json",
            Some("gfx942"),
        ),
        (
            "test_arch_content/hip-kernel-provider/unit/shared/gfx1100/kernels.kpack",
            Some("gfx1100"),
        ),
        (
            "arch_content/rocke/gfx11-generic/kernels.kpack",
            Some("gfx11-generic"),
        ),
        (
            "arch_content/hip-kernel-provider/config/settings.json",
            None,
        ),
        ("test_arch_content/test_kpack_binary/test_zstd.kpack", None),
    ] {
        out.push((format!("{engines}/{rel}"), tree));
    }
    // rocjitsu: the gfx1250 domain's entries; an unknown domain's stays.
    for ext in ["obj", "man"] {
        out.push((
            format!("{rocjitsu}/gfx1250-b0-a0/v1/{DIGEST}.{ext}"),
            Some("gfx1250"),
        ));
    }
    out.push((
        format!("{rocjitsu}/gfx1250-b0-a1/v1/{OTHER_DIGEST}.obj"),
        None,
    ));
    out
}

/// What the split, packaging and publishing made, once per process.
struct Base {
    /// The input install tree.
    tree: PathBuf,
    /// The split output (`generic/` and one tree per group).
    split: PathBuf,
    /// The packages.
    pkgs: PathBuf,
    /// The published kpack store.
    repo: PathBuf,
    /// The gfx1250 machine's sysfs tree.
    gfx1250: PathBuf,
}

fn base() -> &'static Base {
    static B: OnceLock<Base> = OnceLock::new();
    B.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("database_kinds");
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let tree = dir.join("tree");
        let rels: Vec<String> = files().into_iter().map(|(p, _)| p).collect();
        let rels: Vec<&str> = rels.iter().map(String::as_str).collect();
        databases::write_fat_payload(&tree.join(ROCM_PREFIX), &rels);
        let (split, pkgs, repo) = (dir.join("split"), dir.join("pkgs"), dir.join("repo"));
        let kpack = |args: &[&str]| {
            let mut c = bins::command("rocm-kpack");
            c.args(args).env("SOURCE_DATE_EPOCH", "1700000000");
            ok(&mut c)
        };
        let s = |p: &Path| p.to_str().unwrap().to_owned();
        kpack(&["split", &s(&tree), "--out", &s(&split)]);
        kpack(&[
            "package",
            &s(&split),
            "--out",
            &s(&pkgs),
            "--name",
            PACKAGE,
            "--version",
            "1.0",
            "--format",
            "deb,rpm,wheel",
            "--level",
            "0",
            "--device-compression",
            "xz",
            "--device-level",
            "0",
        ]);
        kpack(&[
            "publish",
            &s(&pkgs),
            "--out",
            &s(&repo),
            "--kpack-store",
            "--no-fetcher",
        ]);
        let gfx1250 = fixtures::machine_reporting("rx9070xt", 120500, &dir);
        Base {
            tree,
            split,
            pkgs,
            repo,
            gfx1250,
        }
    })
}

/// The one package file in `pkgs` whose name starts with `stem` and ends
/// with `ext` (`libdbkinds1-gfx942_`, `.deb`).
fn package(pkgs: &Path, stem: &str, ext: &str) -> PathBuf {
    let found: Vec<PathBuf> = fs::read_dir(pkgs)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with(stem) && n.ends_with(ext)
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "{stem}*{ext} in {}: {found:?}",
        pkgs.display()
    );
    found.into_iter().next().unwrap()
}

/// The paths an rpm installs, relative.
fn rpm_paths(pkg: &Path) -> Vec<String> {
    ok(Command::new("rpm").args(["-qlp", "--nosignature"]).arg(pkg))
        .lines()
        .map(|l| l.trim_start_matches('/').to_string())
        .collect()
}

/// The files a wheel holds.
fn wheel_paths(pkg: &Path) -> Vec<String> {
    rocm_kpack_package::wheel::WheelReader::open(pkg)
        .unwrap()
        .members
}

/// The paths a deb installs, relative.
fn deb_paths(pkg: &Path) -> Vec<String> {
    ok(Command::new("dpkg-deb").arg("-c").arg(pkg))
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(|p| p.trim_start_matches("./").trim_end_matches('/').to_string())
        .collect()
}

#[test]
fn new_kinds_split_into_their_targets_trees_and_packages() {
    let base = base();
    let generic = base.split.join("generic").join(ROCM_PREFIX);
    for (rel, tree) in files() {
        let in_generic = generic.join(&rel).exists();
        match tree {
            None => assert!(in_generic, "{rel} left the generic tree"),
            Some(t) => {
                assert!(!in_generic, "{rel} left in the generic tree");
                let got = base.split.join(t).join(ROCM_PREFIX).join(&rel);
                assert_eq!(
                    fs::read(&got).unwrap(),
                    databases::content(&rel),
                    "{rel} in {t}"
                );
            }
        }
        // In no other group's tree.
        for e in fs::read_dir(&base.split).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name != "generic" && Some(name.as_str()) != tree {
                assert!(
                    !e.path().join(ROCM_PREFIX).join(&rel).exists(),
                    "{rel} in {name}"
                );
            }
        }
    }

    // The manifest lists exactly the moved files, with their targets.
    let kpm = Manifest::read(&generic.join(".kpack/libfixture.kpm")).unwrap();
    let listed = databases::listed(&kpm);
    let mut want: Vec<(String, Vec<String>)> = files()
        .into_iter()
        .filter_map(|(p, t)| t.map(|t| (p, vec![t.to_string()])))
        .collect();
    want.sort();
    assert_eq!(listed, want);

    // Each target's deb, rpm and wheel carry its files at the input's
    // paths; the generic ones carry the files that stay.
    let pkgs = &base.pkgs;
    let mut packages: Vec<(String, Option<&str>, Vec<String>)> = Vec::new();
    for tree in ["gfx942", "gfx1100", "gfx1250", "gfx11-generic"] {
        let dist = format!("{PACKAGE}_device_{}-", tree.replace('-', "_"));
        for (kind, paths) in [
            (
                "deb",
                deb_paths(&package(pkgs, &format!("{PACKAGE}-{tree}_"), ".deb")),
            ),
            (
                "rpm",
                rpm_paths(&package(pkgs, &format!("{PACKAGE}-{tree}-"), ".rpm")),
            ),
            ("wheel", wheel_paths(&package(pkgs, &dist, ".whl"))),
        ] {
            packages.push((format!("the {tree} {kind}"), Some(tree), paths));
        }
    }
    for (kind, paths) in [
        (
            "deb",
            deb_paths(&package(pkgs, &format!("{PACKAGE}_"), ".deb")),
        ),
        (
            "rpm",
            rpm_paths(&package(pkgs, &format!("{PACKAGE}-1.0"), ".rpm")),
        ),
        (
            "wheel",
            wheel_paths(&package(pkgs, &format!("{PACKAGE}-1.0"), ".whl")),
        ),
    ] {
        packages.push((format!("the generic {kind}"), None, paths));
    }
    // The gfx11 family's files reach every gfx11 processor's packages.
    for processor in ["gfx1100", "gfx1101"] {
        let deb = package(pkgs, &format!("{PACKAGE}-{processor}_"), ".deb");
        let depends = ok(Command::new("dpkg-deb").arg("-f").arg(&deb).arg("Depends"));
        assert!(
            depends.contains(&format!("{PACKAGE}-gfx11-generic ")),
            "{processor}: {depends}"
        );
    }
    for (what, tree, paths) in &packages {
        for (rel, t) in files() {
            let path = format!("{ROCM_PREFIX}/{rel}");
            assert_eq!(paths.contains(&path), t == *tree, "{path} in {what}");
        }
    }
}

/// `rocm-kpack-fetch ARGS` on `root`, with the GPUs of `machine`.
fn fetch(root: &Path, machine: Option<&Path>, args: &[&str]) -> (i32, String, String) {
    let mut args: Vec<&str> = args.to_vec();
    if let Some(m) = machine {
        args.extend(["--sysfs-root", m.to_str().unwrap()]);
    }
    bins::fetch(root, &args)
}

/// The generic deb unpacked into a root, then `install --auto` on
/// `machine`, whose device trees are `trees`: the input tree's files for
/// it are back byte for byte, nothing for another target came; `status`
/// before and after, `verify`, `remove`.
fn install_auto_restores_the_tree(machine: &Path, trees: &[&str]) {
    let base = base();
    let server = http::serve_dir(&base.repo).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    fs::create_dir(&root).unwrap();
    let generic = package(&base.pkgs, &format!("{PACKAGE}_"), ".deb");
    ok(Command::new("dpkg-deb").arg("-x").arg(&generic).arg(&root));
    let mine: Vec<String> = files()
        .into_iter()
        .filter(|(_, t)| t.is_some_and(|t| trees.contains(&t)))
        .map(|(p, _)| p)
        .collect();
    assert!(!mine.is_empty());

    let (code, stdout, stderr) = fetch(&root, Some(machine), &["status"]);
    assert_eq!(code, 4, "{stdout}{stderr}");
    assert!(
        stdout.contains("missing") && stdout.contains(mine[0].as_str()),
        "{stdout}{stderr}"
    );
    let (code, stdout, stderr) = fetch(
        &root,
        Some(machine),
        &[
            "install",
            "--auto",
            "--allow-http",
            "--source",
            server.root_url(),
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");

    // Every file of the input tree is there, byte for byte, if it serves no
    // target or this machine's; the host library is there, split; no other
    // target's file is.
    let fat = base.tree.join(ROCM_PREFIX);
    let prefix = root.join(ROCM_PREFIX);
    let other: Vec<String> = files()
        .into_iter()
        .filter(|(_, t)| t.is_some_and(|t| !trees.contains(&t)))
        .map(|(p, _)| p)
        .collect();
    for (rel, bytes) in snapshot(&fat) {
        let got = prefix.join(&rel);
        if other.contains(&rel) {
            assert!(!got.exists(), "{rel} fetched for {trees:?}");
        } else if rel == "lib/libfixture.so" {
            assert!(got.is_file(), "{rel}");
        } else {
            assert_eq!(fs::read(&got).unwrap_or_default(), bytes, "{rel}");
        }
    }

    let (code, stdout, stderr) = fetch(&root, Some(machine), &["status"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("complete"), "{stdout}");
    let (code, stdout, stderr) = fetch(&root, None, &["verify"]);
    assert_eq!(code, 0, "{stdout}{stderr}");

    // `remove` takes what was fetched; the generic package's files stay.
    let (code, stdout, stderr) = fetch(&root, None, &["remove", "libfixture", "--yes"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    for rel in &mine {
        assert!(!prefix.join(rel).exists(), "{rel} after remove: {stdout}");
    }
    for (rel, t) in files() {
        if t.is_none() {
            assert!(prefix.join(&rel).is_file(), "{rel} after remove");
        }
    }
    assert!(prefix.join(TENSILE_DAT).is_file());
}

#[test]
fn mi300x_install_auto_fetches_the_gfx942_files() {
    install_auto_restores_the_tree(&fixtures::machine("mi300x"), &["gfx942", "gfx9-4-generic"]);
}

#[test]
fn rx7900xtx_install_auto_fetches_the_gfx1100_and_gfx11_family_files() {
    install_auto_restores_the_tree(
        &fixtures::machine("rx7900xtx"),
        &["gfx1100", "gfx11-generic"],
    );
}

#[test]
fn gfx1250_install_auto_fetches_its_strict_and_rocjitsu_files() {
    let base = base();
    // The simulated part is a gfx1250 to the fetcher.
    let mut detect = bins::command("rocm-kpack-fetch");
    bins::isolate_fetcher(&mut detect);
    let out = ok(detect.arg("detect").arg("--sysfs-root").arg(&base.gfx1250));
    assert!(out.contains("gfx1250"), "{out}");
    install_auto_restores_the_tree(&base.gfx1250, &["gfx1250"]);
}
