//! Kernel databases end to end on a fixture-sized package: a fat deb
//! holding the split fixture library plus one database file per built-in
//! rule (hipBLASLt/Tensile, MIOpen's find database, MIOpen's composable
//! kernel solver library, AOTriton) for gfx90a and gfx1100 is split, the
//! manifest lists the database files, the device debs carrying them are xz
//! (release level), the store keeps them zstd-encoded, and
//! `rocm-kpack-fetch` on a root holding only the generic deb fetches, for
//! gfx90a, exactly the files the fat deb installs for gfx90a,
//! byte-identical; `status` exits 4 before and 0 after, `verify` passes.
//! `install --via apt` installs the family deb carrying the gfx90a
//! database files in a dpkg root, after which `status` is complete.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod package_common;

use std::fs;
use std::path::Path;
use std::process::Command;

use package_common::databases::{self, content};
use package_common::{apt_dirs, apt_opts, chain, dpkg_root, ok};
use rocm_kpack_format::manifest::Manifest;
use rocm_kpack_package::publish::{publish, PublishOptions};
use rocm_kpack_splitter::split_package::SplitPackageReport;
use rocm_kpack_test_support::bins;

/// (path below opt/rocm, the rule that must move it, target).
const DATABASES: [(&str, &str, &str); 8] = [
    ("lib/hipblaslt/library/TensileLibrary_lazy_gfx90a.dat", "tensile", "gfx90a"),
    ("lib/hipblaslt/library/Kernels.so-000-gfx1100.hsaco", "tensile", "gfx1100"),
    ("share/miopen/db/gfx90a68.kdb", "miopen-db", "gfx90a"),
    ("share/miopen/db/gfx1100_48.HIP.fdb.txt", "miopen-db", "gfx1100"),
    ("lib/libMIOpenCK_fwd_gfx90a.so.1", "miopen-ck", "gfx90a"),
    ("lib/libMIOpenCK_fwd_gfx1100.so.1", "miopen-ck", "gfx1100"),
    ("lib/aotriton/kernels/gfx90a/attn_fwd.hsaco", "aotriton", "gfx90a"),
    ("lib/aotriton/kernels/gfx1100/attn_fwd.hsaco", "aotriton", "gfx1100"),
];

fn fetch(root: &Path, args: &[&str]) -> (i32, String, String) {
    let mut cmd = bins::command("rocm-kpack-fetch");
    bins::isolate_fetcher(&mut cmd);
    cmd.args(args).arg("--root").arg(root);
    let o = cmd.output().unwrap();
    (
        o.status.code().unwrap(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The fixture's fat deb with a database file per rule, written in `dir`,
/// and its split (xz -0) into `dir/pkgs`.
fn split_fixture(dir: &Path) -> SplitPackageReport {
    let rels: Vec<&str> = DATABASES.iter().map(|(rel, _, _)| *rel).collect();
    let fat = databases::fat_deb(dir, "libdbfixture1", &rels);
    databases::split(&fat, &dir.join("pkgs"), None)
}

#[test]
fn database_rules_split_publish_fetch_verify() {
    let tmp = tempfile::tempdir().unwrap();
    // Split: every database file is listed in the manifest, with the rule's
    // arch and the group's family.
    let report = split_fixture(tmp.path());
    let out = tmp.path().join("pkgs");
    let generic = report.packages.iter().find(|p| p.name == "libdbfixture1").unwrap();
    let root = tmp.path().join("root");
    fs::create_dir_all(&root).unwrap();
    ok(Command::new("dpkg-deb").arg("-x").arg(&generic.path).arg(&root));
    let kpm = Manifest::read(&root.join("opt/rocm/.kpack/libfixture.kpm")).unwrap();
    let mut listed: Vec<(String, Vec<String>)> =
        kpm.database_files.iter().map(|f| (f.path.clone(), f.architectures.clone())).collect();
    listed.sort();
    let mut want: Vec<(String, Vec<String>)> =
        DATABASES.iter().map(|(p, _, t)| (p.to_string(), vec![t.to_string()])).collect();
    want.sort();
    assert_eq!(listed, want);
    for (rel, _, _) in DATABASES {
        assert!(!root.join("opt/rocm").join(rel).exists(), "{rel} left in the generic package");
    }

    // A device deb carrying database files is xz, not gzip level 1.
    let dev90 = report.packages.iter().find(|p| p.name == "libdbfixture1-gfx90a").unwrap();
    let members = ok(Command::new("ar").arg("t").arg(&dev90.path));
    assert!(members.contains("data.tar.xz"), "{members}");

    // The store keeps database files zstd-encoded, by hash.
    let repo = tmp.path().join("repo");
    publish(&out, &repo, &PublishOptions {
        kpack_store: true,
        store_zstd_level: 3,
        ..PublishOptions::default()
    })
    .unwrap_or_else(|e| panic!("publish: {}", chain(&e)));
    let index: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(repo.join("index.json")).unwrap()).unwrap();
    let dbs = index["database_files"].as_array().unwrap();
    assert_eq!(dbs.len(), DATABASES.len(), "{index}");
    for d in dbs {
        assert_eq!(d["encoding"], "zstd");
        let object = fs::read(repo.join(d["path"].as_str().unwrap())).unwrap();
        assert_eq!(object.len() as u64, d["stored_size"].as_u64().unwrap());
        assert!(object.len() * 10 < d["size"].as_u64().unwrap() as usize, "{d}");
    }
    assert!(index["archives"].as_array().unwrap().iter().all(|a| a["encoding"] == "identity"));

    // Before the fetch: incomplete, names the missing files.
    let (code, stdout, _) = fetch(&root, &["status", "--target", "gfx90a"]);
    assert_eq!(code, 4, "{stdout}");
    assert!(stdout.contains("missing: lib/hipblaslt/library/TensileLibrary_lazy_gfx90a.dat"), "{stdout}");
    let source = format!("file://{}", repo.display());
    let (code, stdout, stderr) = fetch(&root, &["install", "--target", "gfx90a", "--source", &source]);
    assert_eq!(code, 0, "{stdout}{stderr}");

    // Every file the fat deb installs for gfx90a is there, byte for byte,
    // except the split host library; nothing for gfx1100 is.
    for (rel, _, target) in DATABASES {
        let got = root.join("opt/rocm").join(rel);
        if target == "gfx90a" {
            assert_eq!(fs::read(&got).unwrap(), content(rel), "{rel}");
        } else {
            assert!(!got.exists(), "{rel} fetched for gfx90a");
        }
    }
    assert_eq!(fs::read(root.join("opt/rocm/share/doc/README")).unwrap(), b"generic\n");
    let (code, stdout, _) = fetch(&root, &["status", "--target", "gfx90a"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("complete"), "{stdout}");
    let (code, stdout, _) = fetch(&root, &["verify"]);
    assert_eq!(code, 0, "{stdout}");
}

/// `install --via apt` with database files: the family deb carries them at
/// the fat deb's paths, apt installs it, and `status` is then complete
/// (the package's files count as present: same bytes, verified).
#[test]
fn via_apt_installs_the_family_deb_with_its_database_files_and_status_is_complete() {
    let tmp = tempfile::tempdir().unwrap();
    let report = split_fixture(tmp.path());
    let repo = tmp.path().join("repo");
    publish(&tmp.path().join("pkgs"), &repo, &PublishOptions {
        apt: true,
        ..PublishOptions::default()
    })
    .unwrap_or_else(|e| panic!("publish: {}", chain(&e)));
    let server = rocm_kpack_test_support::http::serve_dir(&repo).unwrap();
    let root = tmp.path().join("root");
    dpkg_root(&root);
    apt_dirs(&root);
    let generic = report.packages.iter().find(|p| p.name == "libdbfixture1").unwrap();
    ok(Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .args(["--force-not-root", "--force-script-chrootless", "--force-depends", "-i"])
        .arg(&generic.path));
    fs::write(
        root.join("etc/apt/sources.list"),
        format!("deb [trusted=yes] {} stable main\n", server.root_url()),
    )
    .unwrap();
    ok(Command::new("apt-get").args(apt_opts(&root)).arg("update"));

    let (code, stdout, _) = fetch(&root, &["status", "--target", "gfx90a"]);
    assert_eq!(code, 4, "{stdout}");
    let (code, stdout, stderr) = fetch(&root, &["install", "--via", "apt", "--target", "gfx90a", "--dry-run"]);
    assert_eq!((code, stdout.as_str()), (0, "apt-get install libdbfixture1-gfx90a\n"), "{stderr}");
    let (code, stdout, stderr) = fetch(&root, &["install", "--via", "apt", "--target", "gfx90a"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    for (rel, _, target) in DATABASES {
        let got = root.join("opt/rocm").join(rel);
        if target == "gfx90a" {
            assert_eq!(fs::read(&got).unwrap(), content(rel), "{rel}");
            let owner = ok(Command::new("dpkg")
                .arg(format!("--root={}", root.display()))
                .arg("-S")
                .arg(format!("/opt/rocm/{rel}")));
            assert!(owner.starts_with("libdbfixture1-gfx90a:"), "{owner}");
        } else {
            assert!(!got.exists(), "{rel} installed for gfx90a");
        }
    }
    let (code, stdout, stderr) = fetch(&root, &["status", "--target", "gfx90a"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("complete"), "{stdout}");
}
