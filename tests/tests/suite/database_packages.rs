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

use std::fs;
use std::path::Path;
use std::process::Command;

use rocm_kpack_format::manifest::Manifest;
use rocm_kpack_publish::{publish, PublishOptions};
use rocm_kpack_splitter::split_package::SplitPackageReport;
use rocm_kpack_test_support::bins::{self, fetch};
use rocm_kpack_test_support::databases::{self, content};
use rocm_kpack_test_support::fixtures;
use rocm_kpack_test_support::packages::{apt_dirs, apt_opts, chain, dpkg_install, dpkg_root, ok};

/// (path below opt/rocm, the rule that must move it, target).
const DATABASES: [(&str, &str, &str); 8] = [
    (
        "lib/hipblaslt/library/TensileLibrary_lazy_gfx90a.dat",
        "tensile",
        "gfx90a",
    ),
    (
        "lib/hipblaslt/library/Kernels.so-000-gfx1100.hsaco",
        "tensile",
        "gfx1100",
    ),
    ("share/miopen/db/gfx90a68.kdb", "miopen-db", "gfx90a"),
    (
        "share/miopen/db/gfx1100_48.HIP.fdb.txt",
        "miopen-db",
        "gfx1100",
    ),
    ("lib/libMIOpenCK_fwd_gfx90a.so.1", "miopen-ck", "gfx90a"),
    ("lib/libMIOpenCK_fwd_gfx1100.so.1", "miopen-ck", "gfx1100"),
    (
        "lib/aotriton/kernels/gfx90a/attn_fwd.hsaco",
        "aotriton",
        "gfx90a",
    ),
    (
        "lib/aotriton/kernels/gfx1100/attn_fwd.hsaco",
        "aotriton",
        "gfx1100",
    ),
];

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
    let generic = report
        .packages
        .iter()
        .find(|p| p.name == "libdbfixture1")
        .unwrap();
    let root = tmp.path().join("root");
    fs::create_dir_all(&root).unwrap();
    ok(Command::new("dpkg-deb")
        .arg("-x")
        .arg(&generic.path)
        .arg(&root));
    let kpm = Manifest::read(&root.join("opt/rocm/.kpack/libfixture.kpm")).unwrap();
    let listed = databases::listed(&kpm);
    let mut want: Vec<(String, Vec<String>)> = DATABASES
        .iter()
        .map(|(p, _, t)| (p.to_string(), vec![t.to_string()]))
        .collect();
    want.sort();
    assert_eq!(listed, want);
    for (rel, _, _) in DATABASES {
        assert!(
            !root.join("opt/rocm").join(rel).exists(),
            "{rel} left in the generic package"
        );
    }

    // A device deb carrying database files is xz, not gzip level 1.
    let dev90 = report
        .packages
        .iter()
        .find(|p| p.name == "libdbfixture1-gfx90a")
        .unwrap();
    let members = ok(Command::new("ar").arg("t").arg(&dev90.path));
    assert!(members.contains("data.tar.xz"), "{members}");

    // The store keeps database files zstd-encoded, by hash.
    let repo = tmp.path().join("repo");
    publish(
        &out,
        &repo,
        &PublishOptions {
            kpack_store: true,
            store_zstd_level: 3,
            ..PublishOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("publish: {}", chain(&e)));
    let index: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(repo.join("index.json")).unwrap()).unwrap();
    let dbs = index["database_files"].as_array().unwrap();
    assert_eq!(dbs.len(), DATABASES.len(), "{index}");
    for d in dbs {
        assert_eq!(d["encoding"], "zstd");
        let object = fs::read(repo.join(d["path"].as_str().unwrap())).unwrap();
        assert_eq!(object.len() as u64, d["stored_size"].as_u64().unwrap());
        assert!(
            object.len() * 10 < d["size"].as_u64().unwrap() as usize,
            "{d}"
        );
    }
    assert!(index["archives"]
        .as_array()
        .unwrap()
        .iter()
        .all(|a| a["encoding"] == "identity"));

    // Before the fetch: incomplete, names the missing files.
    let (code, stdout, _) = fetch(&root, &["status", "--target", "gfx90a"]);
    assert_eq!(code, 4, "{stdout}");
    assert!(
        stdout.contains("missing: lib/hipblaslt/library/TensileLibrary_lazy_gfx90a.dat"),
        "{stdout}"
    );
    let source = format!("file://{}", repo.display());
    let (code, stdout, stderr) = fetch(
        &root,
        &["install", "--target", "gfx90a", "--source", &source],
    );
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
    assert_eq!(
        fs::read(root.join("opt/rocm/share/doc/README")).unwrap(),
        b"generic\n"
    );
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
    publish(
        &tmp.path().join("pkgs"),
        &repo,
        &PublishOptions {
            apt: true,
            ..PublishOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("publish: {}", chain(&e)));
    let server = rocm_kpack_test_support::http::serve_dir(&repo).unwrap();
    let root = tmp.path().join("root");
    dpkg_root(&root);
    apt_dirs(&root);
    let generic = report
        .packages
        .iter()
        .find(|p| p.name == "libdbfixture1")
        .unwrap();
    dpkg_install(&root, &[&generic.path]);
    fs::write(
        root.join("etc/apt/sources.list"),
        format!("deb [trusted=yes] {} stable main\n", server.root_url()),
    )
    .unwrap();
    ok(Command::new("apt-get").args(apt_opts(&root)).arg("update"));

    let (code, stdout, _) = fetch(&root, &["status", "--target", "gfx90a"]);
    assert_eq!(code, 4, "{stdout}");
    let (code, stdout, stderr) = fetch(
        &root,
        &["install", "--via", "apt", "--target", "gfx90a", "--dry-run"],
    );
    assert_eq!(
        (code, stdout.as_str()),
        (0, "apt-get install libdbfixture1-gfx90a\n"),
        "{stderr}"
    );
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

/// Debian's multiarch MIOpen layout: the library in
/// `usr/lib/x86_64-linux-gnu/`, its databases in `usr/share/miopen/db/`,
/// outside the library's prefix. (path, target).
const MULTIARCH_DBS: [(&str, &str); 4] = [
    ("usr/share/miopen/db/gfx90a68.kdb", "gfx90a"),
    ("usr/share/miopen/db/gfx90a68.HIP.fdb.txt", "gfx90a"),
    ("usr/share/miopen/db/gfx1100_48.kdb", "gfx1100"),
    ("usr/share/miopen/db/gfx1100_48.HIP.fdb.txt", "gfx1100"),
];

/// The library's directory: the manifest's prefix.
const MULTIARCH_LIB: &str = "usr/lib/x86_64-linux-gnu";

/// A fat deb in Debian's multiarch MIOpen layout (the fixture library as
/// `libMIOpen.so.1`), written in `dir`, and its split (xz -0) into
/// `dir/pkgs`.
fn split_multiarch_fixture(dir: &Path) -> SplitPackageReport {
    let tree = dir.join("tree");
    fs::create_dir_all(tree.join(MULTIARCH_LIB)).unwrap();
    fs::copy(
        fixtures::fixture("clang19/libfixture.so"),
        tree.join(MULTIARCH_LIB).join("libMIOpen.so.1"),
    )
    .unwrap();
    let rels: Vec<&str> = MULTIARCH_DBS.iter().map(|(rel, _)| *rel).collect();
    databases::write_databases(&tree, &rels);
    fs::create_dir_all(tree.join("usr/share/doc/libmiopen-fixture1")).unwrap();
    fs::write(
        tree.join("usr/share/doc/libmiopen-fixture1/README"),
        "generic\n",
    )
    .unwrap();
    let fat = databases::deb_from_tree(
        dir,
        &tree,
        "libmiopen-fixture1",
        "fixture in the multiarch MIOpen layout",
    );
    databases::split(&fat, &dir.join("pkgs"), None)
}

/// `dir/pkgs` published as a kpack store (zstd -3) in `dir/repo`.
fn publish_store(dir: &Path) -> std::path::PathBuf {
    let repo = dir.join("repo");
    publish(
        &dir.join("pkgs"),
        &repo,
        &PublishOptions {
            kpack_store: true,
            store_zstd_level: 3,
            ..PublishOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("publish: {}", chain(&e)));
    repo
}

/// The one manifest in the multiarch prefix below `root`.
fn multiarch_kpm(root: &Path) -> std::path::PathBuf {
    let dir = root
        .join(MULTIARCH_LIB)
        .join(rocm_kpack_format::layout::KPACK_DIR);
    let kpms: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension()
                .is_some_and(|x| x == rocm_kpack_format::layout::MANIFEST_EXT)
        })
        .collect();
    assert_eq!(kpms.len(), 1, "{kpms:?}");
    kpms.into_iter().next().unwrap()
}

/// Database files outside the manifest's prefix: the splitter moves them
/// like any database file (device debs at their original paths), the
/// manifest (version 3) declares the prefix's path below the install root
/// and lists them from there; `install --auto` on an MI210 fetches the
/// gfx90a ones from the store on 127.0.0.1 to their original paths,
/// byte-identical, and none for gfx1100; `status` is 4 before and 0 after,
/// `verify` passes, and `remove` takes the files and the directories it
/// made away, leaving the package's own directories.
#[test]
fn multiarch_miopen_databases_outside_the_prefix_split_fetch_verify_remove() {
    let tmp = tempfile::tempdir().unwrap();
    let report = split_multiarch_fixture(tmp.path());
    let warnings = &report.split.as_ref().unwrap().warnings;
    assert!(
        !warnings.iter().any(|w| w.contains("miopen")),
        "{warnings:?}"
    );
    let generic = report
        .packages
        .iter()
        .find(|p| p.name == "libmiopen-fixture1")
        .unwrap();
    let root = tmp.path().join("root");
    fs::create_dir_all(&root).unwrap();
    ok(Command::new("dpkg-deb")
        .arg("-x")
        .arg(&generic.path)
        .arg(&root));
    let kpm_path = multiarch_kpm(&root);
    let kpm = Manifest::read(&kpm_path).unwrap();
    assert_eq!(kpm.format_version(), 3);
    assert_eq!(kpm.prefix_path.as_deref(), Some(MULTIARCH_LIB));
    let listed = databases::listed(&kpm);
    let mut want: Vec<(String, Vec<String>)> = MULTIARCH_DBS
        .iter()
        .map(|(p, t)| (p.to_string(), vec![t.to_string()]))
        .collect();
    want.sort();
    assert_eq!(listed, want);
    for (rel, _) in MULTIARCH_DBS {
        assert!(
            !root.join(rel).exists(),
            "{rel} left in the generic package"
        );
    }
    // The device deb carries them at the fat deb's paths.
    let dev90 = report
        .packages
        .iter()
        .find(|p| p.name == "libmiopen-fixture1-gfx90a")
        .unwrap();
    let contents = ok(Command::new("dpkg-deb").arg("-c").arg(&dev90.path));
    for (rel, target) in MULTIARCH_DBS {
        assert_eq!(
            contents.contains(&format!(" {rel}\n")),
            target == "gfx90a",
            "{rel}: {contents}"
        );
    }

    let repo = publish_store(tmp.path());
    let index: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(repo.join("index.json")).unwrap()).unwrap();
    assert_eq!(
        index["database_files"].as_array().unwrap().len(),
        MULTIARCH_DBS.len(),
        "{index}"
    );
    let server = rocm_kpack_test_support::http::serve_dir(&repo).unwrap();
    let url = server.root_url();
    let mi210 = fixtures::machine("mi210");
    let mi210 = mi210.to_str().unwrap();

    let (code, stdout, _) = fetch(&root, &["status", "--sysfs-root", mi210]);
    assert_eq!(code, 4, "{stdout}");
    assert!(
        stdout.contains("../../share/miopen/db/gfx90a68.kdb"),
        "{stdout}"
    );
    let (code, stdout, stderr) = fetch(
        &root,
        &[
            "install",
            "--auto",
            "--sysfs-root",
            mi210,
            "--source",
            url,
            "--allow-http",
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    for (rel, target) in MULTIARCH_DBS {
        let got = root.join(rel);
        if target == "gfx90a" {
            assert_eq!(fs::read(&got).unwrap(), content(rel), "{rel}");
        } else {
            assert!(!got.exists(), "{rel} fetched for an MI210");
        }
    }
    assert!(
        !root.join(MULTIARCH_LIB).join("share").exists(),
        "nothing below the prefix"
    );
    let state = fs::read_to_string(
        root.join(MULTIARCH_LIB)
            .join(rocm_kpack_format::layout::KPACK_DIR)
            .join(rocm_kpack_fetcher::config::STATE_FILE),
    )
    .unwrap();
    assert!(
        state.contains("\"../../share/miopen/db/gfx90a68.kdb\""),
        "{state}"
    );
    assert!(state.contains("\"../../share/miopen\""), "{state}");
    let (code, stdout, _) = fetch(&root, &["status", "--sysfs-root", mi210]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("complete"), "{stdout}");
    let (code, stdout, stderr) = fetch(&root, &["verify"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let (code, stdout, _) = fetch(&root, &["list"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("gfx90a68.kdb"), "{stdout}");

    // `remove` takes the fetched files and the directories it made; the
    // package's `usr/share` stays.
    let (code, stdout, stderr) = fetch(&root, &["remove", &kpm.component, "--yes"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    for (rel, _) in MULTIARCH_DBS {
        assert!(!root.join(rel).exists(), "{rel} left by remove");
    }
    assert!(
        !root.join("usr/share/miopen").exists(),
        "directories made for the files stay"
    );
    assert!(root
        .join("usr/share/doc/libmiopen-fixture1/README")
        .is_file());
    let (code, stdout, _) = fetch(&root, &["status", "--sysfs-root", mi210]);
    assert_eq!(code, 4, "{stdout}");

    // Fetched again, then the generic package goes (its manifest with it):
    // the package trigger takes the files above the prefix away too.
    let (code, stdout, stderr) = fetch(
        &root,
        &[
            "install",
            "--auto",
            "--sysfs-root",
            mi210,
            "--source",
            url,
            "--allow-http",
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(root.join(MULTIARCH_DBS[0].0).is_file());
    fs::remove_file(&kpm_path).unwrap();
    let mut trigger = bins::command("rocm-kpack-fetch");
    bins::isolate_fetcher(&mut trigger);
    let o = trigger
        .arg("trigger")
        .arg("--removed")
        .arg(kpm_path.parent().unwrap())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    for (rel, _) in MULTIARCH_DBS {
        assert!(
            !root.join(rel).exists(),
            "{rel} left after the package went"
        );
    }
    assert!(
        !root.join("usr/share/miopen").exists(),
        "directories made for the files stay"
    );
    assert!(root
        .join("usr/share/doc/libmiopen-fixture1/README")
        .is_file());
}

/// A manifest whose database root is not where it claims (the prefix does
/// not end in its `prefix_path`, here after the tree was moved), or lies
/// above `--root`, is refused whole; a symlinked directory on the way to a
/// database file is not followed: nothing is written through it.
#[test]
fn multiarch_database_root_is_checked_and_symlinks_are_not_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let report = split_multiarch_fixture(tmp.path());
    let generic = report
        .packages
        .iter()
        .find(|p| p.name == "libmiopen-fixture1")
        .unwrap();
    let repo = publish_store(tmp.path());
    let source = format!("file://{}", repo.display());
    let unpack = |name: &str| {
        let root = tmp.path().join(name);
        fs::create_dir_all(&root).unwrap();
        ok(Command::new("dpkg-deb")
            .arg("-x")
            .arg(&generic.path)
            .arg(&root));
        root
    };

    // Moved: the library directory is now opt/moved/lib.
    let root = unpack("moved");
    let moved = root.join("opt/moved/lib");
    fs::create_dir_all(moved.parent().unwrap()).unwrap();
    fs::rename(root.join(MULTIARCH_LIB), &moved).unwrap();
    let prefix = moved.to_str().unwrap();
    let (code, stdout, stderr) = fetch(
        &root,
        &[
            "install",
            "--target",
            "gfx90a",
            "--no-default-prefixes",
            "--prefix",
            prefix,
            "--source",
            &source,
        ],
    );
    assert_ne!(code, 0, "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!("{MULTIARCH_LIB:?}"))
            || stdout.contains(&format!("{MULTIARCH_LIB:?}")),
        "{stdout}{stderr}"
    );
    assert!(!root.join("usr/share/miopen").exists() && !root.join("opt/share").exists());

    // Above --root: the prefix given, the root below the install root.
    let root = unpack("above");
    let prefix = root.join(MULTIARCH_LIB);
    let (code, stdout, stderr) = fetch(
        &root.join("usr/lib"),
        &[
            "install",
            "--target",
            "gfx90a",
            "--no-default-prefixes",
            "--prefix",
            prefix.to_str().unwrap(),
            "--source",
            &source,
        ],
    );
    assert_ne!(code, 0, "{stdout}{stderr}");
    assert!(
        format!("{stdout}{stderr}").contains("not below the root"),
        "{stdout}{stderr}"
    );
    assert!(!root.join("usr/share/miopen").exists());

    // A symlinked directory on the way: refused, the target untouched.
    let root = unpack("symlinked");
    let elsewhere = tmp.path().join("elsewhere");
    fs::create_dir_all(&elsewhere).unwrap();
    fs::create_dir_all(root.join("usr/share/miopen")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, root.join("usr/share/miopen/db")).unwrap();
    let (code, stdout, stderr) = fetch(
        &root,
        &["install", "--target", "gfx90a", "--source", &source],
    );
    assert_ne!(code, 0, "{stdout}{stderr}");
    assert!(
        format!("{stdout}{stderr}").contains("symlink"),
        "{stdout}{stderr}"
    );
    assert_eq!(
        fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "written through the symlink"
    );
}

/// The Tensile-only family's file (gfx1201: the fixture library has no
/// code for it, its kernel database has).
const GFX1201_DB: &str = "lib/rocblas/library/TensileLibrary_gfx1201.co";

/// The fat deb of [`databases::TENSILE`] in `dir` (the gfx1201 file's
/// bytes replaced by `gfx1201` when given: a new release), split, its
/// generic package unpacked over `root`, published as a kpack store (zstd
/// -3) and served on 127.0.0.1.
fn tensile_release(
    dir: &Path,
    root: &Path,
    gfx1201: Option<&[u8]>,
) -> rocm_kpack_test_support::http::Server {
    let tree = dir.join("tree");
    let prefix = tree.join(databases::ROCM_PREFIX);
    let rels: Vec<&str> = databases::TENSILE.iter().map(|(rel, _)| *rel).collect();
    databases::write_fat_payload(&prefix, &rels);
    if let Some(bytes) = gfx1201 {
        fs::write(prefix.join(GFX1201_DB), bytes).unwrap();
    }
    let fat = databases::deb_from_tree(dir, &tree, "libfixture1", "Tensile fixture");
    let report = databases::split(&fat, &dir.join("pkgs"), None);
    let generic = report
        .packages
        .iter()
        .find(|p| p.name == "libfixture1")
        .unwrap();
    fs::create_dir_all(root).unwrap();
    ok(Command::new("dpkg-deb")
        .arg("-x")
        .arg(&generic.path)
        .arg(root));
    rocm_kpack_test_support::http::serve_dir(publish_store(dir)).unwrap()
}

/// A machine whose only device code in a manifest is kernel-database files
/// (an RX 9070 XT, gfx1201: a Tensile-only family) installs them from the
/// store on 127.0.0.1 like any device code, updates them when a new
/// release changes the file, and loses them to `remove`, `gc` and the
/// package trigger after the package went. (The `.kpack` directory used to
/// be locked only for manifests with archives to fetch, so every such file
/// failed with "… is not locked".)
#[test]
fn database_only_device_code_installs_updates_and_goes() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let server = tensile_release(&tmp.path().join("r1"), &root, None);
    let url = server.root_url();
    let navi48 = fixtures::machine("rx9070xt");
    let navi48 = navi48.to_str().unwrap();
    let mi210 = fixtures::machine("mi210");
    let mi210 = mi210.to_str().unwrap();
    let installed = root.join(databases::ROCM_PREFIX).join(GFX1201_DB);
    let kpack = root
        .join(databases::ROCM_PREFIX)
        .join(rocm_kpack_format::layout::KPACK_DIR);
    let install = |url: &str| {
        let (code, stdout, stderr) = fetch(
            &root,
            &[
                "install",
                "--auto",
                "--sysfs-root",
                navi48,
                "--source",
                url,
                "--allow-http",
            ],
        );
        assert_eq!(code, 0, "{stdout}{stderr}");
    };

    let (code, stdout, _) = fetch(&root, &["status", "--sysfs-root", navi48]);
    assert_eq!(code, 4, "{stdout}");
    install(url);
    assert_eq!(fs::read(&installed).unwrap(), content(GFX1201_DB));
    for (rel, target) in databases::TENSILE {
        let got = root.join(databases::ROCM_PREFIX).join(rel);
        assert_eq!(got.exists(), target == "gfx1201", "{rel}");
    }
    let (code, stdout, _) = fetch(&root, &["status", "--sysfs-root", navi48]);
    assert_eq!(code, 0, "{stdout}");

    // A new release changes the file: the update replaces it.
    let new_bytes: Vec<u8> = content(GFX1201_DB).iter().map(|b| b ^ 0x5a).collect();
    let server2 = tensile_release(&tmp.path().join("r2"), &root, Some(&new_bytes));
    install(server2.root_url());
    assert_eq!(fs::read(&installed).unwrap(), new_bytes);

    // `remove` takes it; the generic package's index stays.
    let (code, stdout, stderr) = fetch(&root, &["remove", "libfixture", "--yes"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(!installed.exists(), "{stdout}");
    let dat = root
        .join(databases::ROCM_PREFIX)
        .join(databases::TENSILE_DAT);
    assert!(dat.is_file());

    // `gc` on a machine no file serves takes it.
    install(server2.root_url());
    let (code, stdout, stderr) = fetch(&root, &["gc", "--sysfs-root", mi210, "--yes"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(!installed.exists(), "{stdout}");

    // The package goes (its manifest with it): the trigger takes the file
    // and the fetcher's bookkeeping.
    install(server2.root_url());
    assert!(installed.is_file());
    for e in fs::read_dir(&kpack).unwrap() {
        let p = e.unwrap().path();
        if p.extension()
            .is_some_and(|x| x == rocm_kpack_format::layout::MANIFEST_EXT)
        {
            fs::remove_file(p).unwrap();
        }
    }
    let mut trigger = bins::command("rocm-kpack-fetch");
    bins::isolate_fetcher(&mut trigger);
    let o = trigger
        .arg("trigger")
        .arg("--removed")
        .arg(&kpack)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(!installed.exists(), "{o:?}");
    assert!(dat.is_file());
    assert!(
        !kpack.join(rocm_kpack_fetcher::config::STATE_FILE).exists(),
        "{o:?}"
    );
}

/// The generic and gfx90a debs of [`split_multiarch_fixture`].
struct MultiarchDebs {
    generic: std::path::PathBuf,
    gfx90a: std::path::PathBuf,
}

/// [`split_multiarch_fixture`] in `dir`, published by [`publish_store`];
/// its debs and the store's `file://` URL.
fn multiarch_store(dir: &Path) -> (MultiarchDebs, String) {
    let report = split_multiarch_fixture(dir);
    let deb = |name: &str| {
        report
            .packages
            .iter()
            .find(|p| p.name == name)
            .unwrap()
            .path
            .clone()
    };
    let debs = MultiarchDebs {
        generic: deb("libmiopen-fixture1"),
        gfx90a: deb("libmiopen-fixture1-gfx90a"),
    };
    let repo = publish_store(dir);
    (debs, format!("file://{}/", repo.display()))
}

/// The generic deb of [`split_multiarch_fixture`] unpacked in `root`, its
/// manifest rewritten by the format crate's writer to say `prefix_path`
/// and to list each of `paths` with the bytes of the store's
/// `gfx90a68.kdb`, and a `<component>.sources.toml` beside it naming
/// `source`, as a generic package ships it. Returns the `.kpack`
/// directory.
fn hostile_generic(
    generic: &Path,
    root: &Path,
    prefix_path: Option<&str>,
    paths: &[&str],
    source: &str,
) -> std::path::PathBuf {
    fs::create_dir_all(root).unwrap();
    ok(Command::new("dpkg-deb").arg("-x").arg(generic).arg(root));
    let kpm_path = multiarch_kpm(root);
    let mut kpm = Manifest::read(&kpm_path).unwrap();
    let real = kpm
        .database_files
        .iter()
        .find(|f| f.path.ends_with("gfx90a68.kdb"))
        .unwrap()
        .clone();
    kpm.prefix_path = prefix_path.map(str::to_string);
    kpm.database_files = paths
        .iter()
        .map(|p| rocm_kpack_format::manifest::DatabaseFile {
            path: p.to_string(),
            ..real.clone()
        })
        .collect();
    fs::write(&kpm_path, kpm.to_msgpack().unwrap()).unwrap();
    let kpack = kpm_path.parent().unwrap().to_path_buf();
    fs::write(
        kpack.join(rocm_kpack_format::layout::fetch::component_sources_file_name(&kpm.component)),
        format!("[[source]]\nurl = \"{source}\"\n"),
    )
    .unwrap();
    kpack
}

/// `rocm-kpack-fetch trigger` as dpkg runs it for a `.kpack` directory
/// (root `/`, GPUs of an MI210, the fetch run here); its one line.
fn trigger_as_dpkg(kpack: &Path) -> String {
    let mut trigger = bins::command("rocm-kpack-fetch");
    bins::isolate_fetcher(&mut trigger);
    let o = trigger
        .arg("trigger")
        .arg("--no-systemd")
        .arg(kpack)
        .env("ROCM_KPACK_SYSFS_ROOT", fixtures::machine("mi210"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A manifest's database paths stay in the directories the built-in
/// kernel-database rules name (docs/formats.md section 3): a version-3
/// manifest listing system files, or a code object above its prefix, with
/// bytes the store has, is refused whole by `install` and by the trigger
/// dpkg runs, naming why, and nothing is written; so is a `prefix_path`
/// that is the prefix's whole absolute path (its install root `/`, above
/// `--root`, or above the prefix's own tree).
#[test]
fn database_paths_never_leave_their_rules_directories() {
    let tmp = tempfile::tempdir().unwrap();
    let (debs, source) = multiarch_store(tmp.path());
    let generic = debs.generic;
    let hostile = [
        ("etc/cron.d/x", "no built-in kernel-database rule"),
        ("etc/sudoers.d/x", "no built-in kernel-database rule"),
        ("etc/ld.so.preload", "no built-in kernel-database rule"),
        (
            "root/.ssh/authorized_keys",
            "no built-in kernel-database rule",
        ),
        ("etc/cron.d/x_gfx90a.co", "shares no directory with it"),
        ("usr/x_gfx90a.co", "rule \"code-objects\""),
        ("usr/cron.d/library/x_gfx90a.co", "rule \"tensile\""),
    ];
    for (n, (path, why)) in hostile.iter().enumerate() {
        // `install`, told the root.
        let root = tmp.path().join(format!("install{n}"));
        hostile_generic(&generic, &root, Some(MULTIARCH_LIB), &[path], &source);
        let (code, stdout, stderr) = fetch(&root, &["install", "--target", "gfx90a"]);
        assert_eq!(code, 1, "{path}: {stdout}{stderr}");
        assert!(
            stderr.contains(&format!("database file {path:?}")) && stderr.contains(why),
            "{path}: {stderr}"
        );
        assert!(!root.join(path).exists(), "{path} written by install");
        // The trigger, as dpkg runs it after installing the package.
        let root = tmp.path().join(format!("trigger{n}"));
        let kpack = hostile_generic(&generic, &root, Some(MULTIARCH_LIB), &[path], &source);
        let line = trigger_as_dpkg(&kpack);
        assert!(line.contains("refused"), "{path}: {line}");
        assert!(!root.join(path).exists(), "{path} written by the trigger");
    }

    // The prefix's whole absolute path as `prefix_path`: below `--root`
    // nothing can be relative to `/`, and for the trigger (root `/`) the
    // paths still have to stay in a rule's directory below the tree.
    let root = tmp.path().join("absolute");
    let abs = root.join(MULTIARCH_LIB);
    let abs = abs.to_str().unwrap().trim_start_matches('/');
    let cron = format!(
        "{}/etc/cron.d/x_gfx90a.co",
        root.to_str().unwrap().trim_start_matches('/')
    );
    let kpack = hostile_generic(&generic, &root, Some(abs), &[&cron], &source);
    let (code, stdout, stderr) = fetch(
        &root,
        &[
            "install",
            "--target",
            "gfx90a",
            "--no-default-prefixes",
            "--prefix",
            kpack.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("not below the root"), "{stderr}");
    let line = trigger_as_dpkg(&kpack);
    assert!(line.contains("refused"), "{line}");
    assert!(
        !root.join("etc").exists(),
        "written below the absolute prefix_path"
    );

    // The real layout still installs, by install and by the trigger.
    let root = tmp.path().join("real");
    let real = "usr/share/miopen/db/gfx90a68.kdb";
    let kpack = hostile_generic(&generic, &root, Some(MULTIARCH_LIB), &[real], &source);
    let line = trigger_as_dpkg(&kpack);
    assert!(line.contains("installed"), "{line}");
    assert_eq!(fs::read(root.join(real)).unwrap(), content(real));
}

/// A database path an installed package owns is the package manager's:
/// where dpkg lists it but the file is missing, `install` does not create
/// it; where the fetcher installed it and a package (a device deb of
/// another version) now owns it with other bytes, `install` does not
/// replace it. Both are reported, naming the package, and the run
/// succeeds.
#[test]
fn package_owned_database_files_are_never_written() {
    let tmp = tempfile::tempdir().unwrap();
    let (debs, source) = multiarch_store(tmp.path());
    let (generic, dev90) = (debs.generic, debs.gfx90a);
    let kdb = "usr/share/miopen/db/gfx90a68.kdb";
    let install = |root: &Path| {
        fetch(
            root,
            &["install", "--target", "gfx90a", "--source", &source],
        )
    };

    // Listed by dpkg, missing on disk: not created.
    let root = tmp.path().join("missing");
    dpkg_root(&root);
    dpkg_install(&root, &[&generic, &dev90]);
    fs::remove_file(root.join(kdb)).unwrap();
    let (code, stdout, stderr) = install(&root);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stderr.contains("libmiopen-fixture1-gfx90a owns it"),
        "{stderr}"
    );
    assert!(!root.join(kdb).exists(), "a package's missing file created");

    // Fetched and recorded, then a package owns it with other bytes.
    let root = tmp.path().join("recorded");
    dpkg_root(&root);
    dpkg_install(&root, &[&generic]);
    let (code, stdout, stderr) = install(&root);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(fs::read(root.join(kdb)).unwrap(), content(kdb));
    dpkg_install(&root, &[&dev90]);
    fs::write(root.join(kdb), b"the package's other version").unwrap();
    let (code, stdout, stderr) = install(&root);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stderr.contains("libmiopen-fixture1-gfx90a owns it"),
        "{stderr}"
    );
    assert_eq!(
        fs::read(root.join(kdb)).unwrap(),
        b"the package's other version",
        "a package's file replaced"
    );
}

/// A directory on a database path that another user controls: one owned
/// by `nobody` is refused up front (naming it and its owner), and in a
/// root-owned sticky world-writable directory (as `/tmp`) `nobody` swaps
/// a directory of its own for a symlink to a root-only directory a
/// thousand times while root installs again and again: nothing is ever
/// written outside, every write lands in a directory root made.
#[test]
fn database_directories_another_user_controls_are_refused_and_races_lose() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let tmp = tempfile::tempdir().unwrap();
    let (debs, source) = multiarch_store(tmp.path());
    let generic = debs.generic;
    let kdb = "usr/share/miopen/db/gfx90a68.kdb";
    let root = tmp.path().join("root");
    hostile_generic(&generic, &root, Some(MULTIARCH_LIB), &[kdb], &source);
    let rootonly = tmp.path().join("rootonly");
    fs::create_dir(&rootonly).unwrap();
    fs::set_permissions(&rootonly, fs::Permissions::from_mode(0o700)).unwrap();
    for d in [
        tmp.path(),
        &root,
        &root.join("usr"),
        &root.join("usr/share"),
    ] {
        fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let miopen = root.join("usr/share/miopen");
    fs::create_dir(&miopen).unwrap();
    let install = || {
        fetch(
            &root,
            &[
                "install",
                "--target",
                "gfx90a",
                "--cache-dir",
                tmp.path().join("cache").to_str().unwrap(),
            ],
        )
    };

    // Owned by nobody: refused, nothing written.
    fs::set_permissions(&miopen, fs::Permissions::from_mode(0o777)).unwrap();
    bins::as_nobody(&format!("mkdir {}/db", miopen.display()));
    fs::set_permissions(&miopen, fs::Permissions::from_mode(0o755)).unwrap();
    let (code, stdout, stderr) = install();
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!("{}/db is owned by uid 65534", miopen.display())),
        "{stderr}"
    );
    assert_eq!(fs::read_dir(miopen.join("db")).unwrap().count(), 0);

    // The race, in a sticky world-writable directory.
    fs::remove_dir(miopen.join("db")).unwrap();
    fs::set_permissions(&miopen, fs::Permissions::from_mode(0o1777)).unwrap();
    let script = format!(
        "cd {} && i=0; while [ $i -lt 1000 ]; do \
           mkdir -p db 2>/dev/null; mv db own 2>/dev/null; ln -s {} db 2>/dev/null; \
           rm -f db 2>/dev/null; mv own db 2>/dev/null; i=$((i+1)); done",
        miopen.display(),
        rootonly.display()
    );
    let mut swapper = bins::nobody_shell(&script).spawn().unwrap();
    let started = std::time::Instant::now();
    let (mut runs, mut refused, mut installed) = (0, 0, 0);
    while swapper.try_wait().unwrap().is_none() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(300),
            "the race did not end"
        );
        let (code, stdout, stderr) = install();
        runs += 1;
        assert_eq!(
            fs::read_dir(&rootonly).unwrap().count(),
            0,
            "written into the root-only directory: {stdout}{stderr}"
        );
        let db = miopen.join("db");
        if code == 0 {
            installed += 1;
            let meta = fs::symlink_metadata(&db).unwrap();
            assert!(meta.is_dir() && meta.uid() == 0, "{stdout}{stderr}");
            // Root's own directory: nobody cannot swap it (sticky); take it
            // away to race again.
            fs::remove_dir_all(&db).unwrap();
        } else {
            refused += 1;
        }
    }
    assert!(swapper.wait().unwrap().success());
    assert_eq!(fs::read_dir(&rootonly).unwrap().count(), 0);
    assert!(runs > 0 && refused + installed == runs, "{runs} runs");
    eprintln!(
        "race: {runs} runs, {refused} refused, {installed} installed in root's own directory"
    );
}

/// `split-package --device-compression zstd-long --device-level N` (the
/// release engineer's choice for packages of database files, a fraction of
/// xz -6's CPU): the device debs carrying database files are one zstd
/// stream that dpkg-deb reads back byte for byte, the generic package keeps
/// its xz, and an unknown compressor is refused before anything is written.
#[test]
fn split_package_device_compression_is_the_release_engineers_choice() {
    let tmp = tempfile::tempdir().unwrap();
    let rels: Vec<&str> = DATABASES.iter().map(|(rel, _, _)| *rel).collect();
    let fat = databases::fat_deb(tmp.path(), "libdbfixture1", &rels);
    let out = tmp.path().join("pkgs");
    ok(bins::command("rocm-kpack")
        .arg("split-package")
        .arg(&fat)
        .arg("--out")
        .arg(&out)
        .args(["-q", "--level", "3", "--device-compression", "zstd-long"])
        .args(["--device-level", "15"]));
    let deb = |name: &str| {
        fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                let f = p.file_name().unwrap().to_string_lossy();
                f.starts_with(&format!("{name}_")) && f.ends_with(".deb")
            })
            .unwrap_or_else(|| panic!("no {name} deb in {}", out.display()))
    };
    let members = ok(Command::new("ar").arg("t").arg(deb("libdbfixture1-gfx90a")));
    assert!(members.contains("data.tar.zst"), "{members}");
    let members = ok(Command::new("ar").arg("t").arg(deb("libdbfixture1")));
    assert!(members.contains("data.tar.xz"), "{members}");
    let root = tmp.path().join("root");
    ok(Command::new("dpkg-deb")
        .arg("-x")
        .arg(deb("libdbfixture1-gfx90a"))
        .arg(&root));
    for (rel, _, target) in DATABASES {
        let got = root.join(databases::ROCM_PREFIX).join(rel);
        if target == "gfx90a" {
            assert_eq!(fs::read(&got).unwrap(), content(rel), "{rel}");
        } else {
            assert!(!got.exists(), "{rel} in the gfx90a deb");
        }
    }

    let refused = tmp.path().join("refused");
    let o = bins::command("rocm-kpack")
        .arg("split-package")
        .arg(&fat)
        .arg("--out")
        .arg(&refused)
        .args(["-q", "--device-compression", "lz4"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("unknown device compression \"lz4\""), "{err}");
    assert!(!refused.exists(), "{} was created", refused.display());
}
