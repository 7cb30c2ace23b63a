//! Trees in the archive layouts of earlier writers still load and verify:
//! the family layout this project wrote before archives became
//! per-processor (`layouts/family/`), and the reference layout of the
//! public rocm-kpack tool (`layouts/reference/`: per-target-id archives, a
//! marker holding only the `@GFXARCH@` pattern, no `.kpm`). Both are
//! committed fixtures of `clang19/libfixture.so` (tests/fixtures/README.md);
//! every code object must come back byte-identical to the fat binary's.
//! The family tree's host binary is as the earlier splitter wrote it, its
//! program header table where Linux before 5.18 does not look, so `verify`
//! names it until `rocm-kpack repair-phdr` has rewritten it, as a user of
//! such a tree would.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use rocm_kpack_format::archive::Archive;
use rocm_kpack_format::manifest::Manifest;
use rocm_kpack_loader::loader::{Cache, LoaderConfig};
use rocm_kpack_splitter::split::recombine::{recombine, RecombineOptions};
use rocm_kpack_splitter::split::repair::{repair_phdr, RepairOptions};
use rocm_kpack_splitter::split::verify::{verify_tree, VerifyOptions, VerifyReport};
use rocm_kpack_test_support::layouts::{
    check_pattern_finds, fat_code_objects, write_reference_layout,
};
use rocm_kpack_test_support::tree::{chain, listing, overlay, Node};
use rocm_kpack_test_support::{bins, fixtures, gfxarch};

const FAT: &str = "clang19/libfixture.so";
const BINARY: &str = "lib/libfixture.so";

/// The family trees of `layouts/family/` and the target ids each serves
/// (gfx115X holds only the generic ISA's copy).
const FAMILIES: [(&str, &[&str]); 5] = [
    ("gfx103X", &["gfx1030"]),
    ("gfx110X", &["gfx1100", "gfx1101", "gfx11-generic"]),
    ("gfx115X", &["gfx11-generic"]),
    ("gfx90X", &["gfx90a:xnack+", "gfx90a:xnack-"]),
    ("gfx94X", &["gfx942:sramecc+"]),
];

fn verify(root: &Path, targets: Option<&[&str]>) -> VerifyReport {
    let opts = VerifyOptions {
        targets: targets.map(|t| t.iter().map(|s| s.to_string()).collect()),
    };
    verify_tree(root, &opts).unwrap()
}

/// Every code object of the fixture for `targets`, loaded through our
/// loader from the tree at `root`, equals the fat binary's.
fn assert_loads(root: &Path, targets: &[&str]) {
    let binary = root.join(BINARY);
    let marker = gfxarch::pattern_of(&binary).unwrap().marker;
    let cache = Cache::with_config(LoaderConfig::default());
    let fat = fat_code_objects(&fixtures::fixture(FAT)).unwrap();
    for t in targets {
        let want = fat
            .get(&(0, t.to_string()))
            .unwrap_or_else(|| panic!("fixture has no {t}"));
        let got = cache
            .load_code_object(&marker, &binary, 0, &[*t])
            .unwrap_or_else(|e| panic!("{}: {t}: {e}", root.display()));
        assert_eq!(&got.data, want, "{}: {t}", root.display());
        assert_eq!(got.arch, *t);
    }
}

/// `repair-phdr --yes` on a copy of an earlier family tree, which it
/// must find wrong exactly in the host binary.
fn repair(root: &Path) {
    let r = repair_phdr(&[root.to_path_buf()], RepairOptions { apply: true }).unwrap();
    let repaired: Vec<PathBuf> = r.files.iter().map(|f| f.path.clone()).collect();
    assert_eq!(repaired, [root.join(BINARY)], "{r}");
}

fn family_dir() -> PathBuf {
    fixtures::fixture("layouts/family")
}

fn reference_dir() -> PathBuf {
    fixtures::fixture("layouts/reference")
}

#[test]
fn family_layout_loads_and_verifies_family_by_family() {
    let d = tempfile::tempdir().unwrap();
    for (family, targets) in FAMILIES {
        let o = d.path().join(family);
        overlay(
            &[&family_dir().join("generic"), &family_dir().join(family)],
            &o,
        )
        .unwrap();
        assert!(
            !verify(&o, Some(targets)).ok(),
            "{family}: the old table is not named"
        );
        repair(&o);
        let v = verify(&o, Some(targets));
        assert!(v.ok(), "{family}: {v}");
        assert_eq!(v.not_installed.len(), FAMILIES.len() - 1, "{family}: {v}");
        assert_loads(&o, targets);
    }
    let all = d.path().join("all");
    let mut trees = vec![family_dir().join("generic")];
    trees.extend(FAMILIES.iter().map(|(f, _)| family_dir().join(f)));
    overlay(
        &trees.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
        &all,
    )
    .unwrap();
    repair(&all);
    let v = verify(&all, None);
    assert!(v.ok(), "{v}");
    assert_eq!(v.binaries[0].targets.len(), fixtures::ARCHES_CLANG19.len());
    assert_loads(&all, &fixtures::ARCHES_CLANG19);
}

/// docs/formats.md 2.4: `rocm-kpack recombine OLD_TREE --out NEW` moves a
/// family-layout tree to per-processor archives.
#[test]
fn family_layout_moves_to_per_processor_archives_with_recombine() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("new");
    let r = recombine(&[family_dir()], &out, &RecombineOptions::default())
        .map_err(|e| chain(&e))
        .unwrap();
    assert_eq!(
        r.outputs,
        [
            "generic",
            "gfx1030",
            "gfx11-generic",
            "gfx1100",
            "gfx1101",
            "gfx90a",
            "gfx942"
        ]
    );
    // Every family archive is cut into processors: nothing is copied as is.
    assert!(
        r.archives.iter().all(|a| a.copied_from.is_none()),
        "{:?}",
        r.archives
    );
    let kpm = Manifest::read(&out.join("generic/.kpack/libfixture.kpm")).unwrap();
    let files: Vec<(&str, &str, Vec<&str>)> = kpm
        .kpack_files
        .iter()
        .map(|f| {
            (
                f.filename.as_str(),
                f.family.as_str(),
                f.architectures.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(
        files,
        [
            ("libfixture_gfx1030.kpack", "gfx1030", vec!["gfx1030"]),
            (
                "libfixture_gfx11-generic.kpack",
                "gfx11-generic",
                vec!["gfx11-generic"]
            ),
            ("libfixture_gfx1100.kpack", "gfx1100", vec!["gfx1100"]),
            ("libfixture_gfx1101.kpack", "gfx1101", vec!["gfx1101"]),
            (
                "libfixture_gfx90a.kpack",
                "gfx90a",
                vec!["gfx90a:xnack+", "gfx90a:xnack-"]
            ),
            ("libfixture_gfx942.kpack", "gfx942", vec!["gfx942:sramecc+"]),
        ]
    );
    // The host binary is the old one: markers never named the layout.
    assert_eq!(
        fs::read(out.join("generic").join(BINARY)).unwrap(),
        fs::read(family_dir().join("generic").join(BINARY)).unwrap()
    );
    let all = d.path().join("all");
    let trees: Vec<PathBuf> = r.outputs.iter().map(|n| out.join(n)).collect();
    overlay(
        &trees.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
        &all,
    )
    .unwrap();
    repair(&all);
    let v = verify(&all, Some(&fixtures::ARCHES_CLANG19[..]));
    assert!(v.ok(), "{v}");
    assert_loads(&all, &fixtures::ARCHES_CLANG19);
    let n = check_pattern_finds(
        &all.join(BINARY),
        &fixtures::fixture(FAT),
        &fixtures::ARCHES_CLANG19,
    )
    .unwrap();
    assert_eq!(n, fixtures::ARCHES_CLANG19.len());
}

/// Contents of a tree, for byte comparison: relative path -> file bytes
/// and mode (directories omitted).
fn files(root: &Path) -> BTreeMap<String, (Vec<u8>, u32)> {
    listing(root)
        .unwrap()
        .into_iter()
        .filter_map(|(rel, node)| match node {
            Node::File { mode, .. } => {
                Some((rel.clone(), (fs::read(root.join(&rel)).unwrap(), mode)))
            }
            Node::Symlink(t) => panic!("{rel}: symlink to {t}"),
            Node::Dir { .. } => None,
        })
        .collect()
}

/// The committed reference tree is what `write_reference_layout` makes of
/// the fat fixture; `KPACK_WRITE_FIXTURES=1` rewrites it in place.
#[test]
fn reference_layout_fixture_is_what_the_generator_writes() {
    if std::env::var_os("KPACK_WRITE_FIXTURES").is_some() {
        let _ = fs::remove_dir_all(reference_dir());
        write_reference_layout(&fixtures::fixture(FAT), &reference_dir()).unwrap();
    }
    let d = tempfile::tempdir().unwrap();
    write_reference_layout(&fixtures::fixture(FAT), d.path()).unwrap();
    let made = files(d.path());
    let names: Vec<&str> = made.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            ".kpack/libfixture_gfx1030.kpack",
            ".kpack/libfixture_gfx11-generic.kpack",
            ".kpack/libfixture_gfx1100.kpack",
            ".kpack/libfixture_gfx1101.kpack",
            ".kpack/libfixture_gfx90a:xnack+.kpack",
            ".kpack/libfixture_gfx90a:xnack-.kpack",
            ".kpack/libfixture_gfx942:sramecc+.kpack",
            "lib/libfixture.so",
        ]
    );
    assert_eq!(
        files(&reference_dir()),
        made,
        "regenerate with KPACK_WRITE_FIXTURES=1"
    );
    let a = Archive::open(&reference_dir().join(".kpack/libfixture_gfx90a:xnack-.kpack")).unwrap();
    assert_eq!(
        (a.group_name(), a.gfx_arch_family()),
        ("libfixture", "gfx90a:xnack-")
    );
    assert_eq!(a.gfx_arches(), ["gfx90a:xnack-"]);
    let m = gfxarch::pattern_of(&reference_dir().join(BINARY))
        .unwrap()
        .marker;
    assert_eq!(
        m.kpack_search_paths,
        ["../.kpack/libfixture_@GFXARCH@.kpack"]
    );
}

#[test]
fn reference_layout_loads_and_verifies() {
    let root = reference_dir();
    assert!(!root.join(".kpack/libfixture.kpm").exists());
    for targets in [None, Some(&fixtures::ARCHES_CLANG19[..])] {
        let v = verify(&root, targets);
        assert!(v.ok(), "{v}");
        assert_eq!(v.archives.len(), 7);
        assert_eq!(v.binaries[0].resolved, 7);
    }
    // Devices as a runtime reports them reach the per-target-id archives.
    let v = verify(
        &root,
        Some(
            &[
                "gfx90a:sramecc+:xnack-",
                "gfx942:sramecc+:xnack+",
                "gfx1151",
            ][..],
        ),
    );
    assert!(v.ok(), "{v}");
    assert_loads(&root, &fixtures::ARCHES_CLANG19);
    let n = check_pattern_finds(
        &root.join(BINARY),
        &fixtures::fixture(FAT),
        &fixtures::ARCHES_CLANG19,
    )
    .unwrap();
    assert_eq!(n, 7);
    // The command exits 0 (it used to say "listed in no .kpm manifest").
    let out = bins::command("rocm-kpack")
        .arg("verify")
        .arg(&root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // An archive named for one target that holds another is caught, as a
    // manifest mismatch would be for a listed one.
    let d = tempfile::tempdir().unwrap();
    overlay(&[&root], d.path()).unwrap();
    let k = d.path().join(".kpack");
    fs::copy(
        k.join("libfixture_gfx90a:xnack+.kpack"),
        k.join("libfixture_gfx90a:xnack-.kpack"),
    )
    .unwrap();
    fs::copy(
        k.join("libfixture_gfx1030.kpack"),
        k.join("libfixture_gfx1101.kpack"),
    )
    .unwrap();
    let v = verify(d.path(), None);
    let has = |path: &str, needle: &str| {
        v.problems
            .iter()
            .any(|p| p.path == path && p.message.contains(needle))
    };
    assert!(
        has(
            ".kpack/libfixture_gfx90a:xnack-.kpack",
            "holds [gfx90a:xnack+]"
        ),
        "{v}"
    );
    assert!(
        has(".kpack/libfixture_gfx1101.kpack", "holds [gfx1030]"),
        "{v}"
    );
    // A name no loader expands to (a family) needs a manifest.
    fs::rename(
        k.join("libfixture_gfx1030.kpack"),
        k.join("libfixture_gfx103X.kpack"),
    )
    .unwrap();
    let v = verify(d.path(), None);
    assert!(
        v.problems
            .iter()
            .any(|p| p.path == ".kpack/libfixture_gfx103X.kpack" && p.message.contains("no .kpm")),
        "{v}"
    );
}
