//! A fixture-sized fat package with kernel-database files beside the
//! split fixture library (`clang19/libfixture.so`), in each format the
//! package managers install: a deb and an rpm with the library under
//! `opt/rocm`, a wheel with it under `kpkg/`. The database files sit at
//! the same paths below that prefix in all three, so one list of
//! expectations serves apt, dnf and pip.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::fixtures;
use rocm_kpack_package::{package, Format};
use rocm_kpack_pkgspec::Spec;
use rocm_kpack_splitter::split_package::{split_package, SplitPackageOptions, SplitPackageReport};

use crate::packages::{chain, fixture_options, ok, write_wheel};

/// Where the deb and rpm install the library and its databases.
pub const ROCM_PREFIX: &str = "opt/rocm";

/// A Tensile-style kernel database (the layout rocBLAS installs):
/// (path below the prefix, the processor it serves). The database rule
/// moves these out of the generic package.
/// gfx1201 has database files only: the fixture library has no code for it.
pub const TENSILE: [(&str, &str); 5] = [
    ("lib/rocblas/library/TensileLibrary_gfx90a.co", "gfx90a"),
    (
        "lib/rocblas/library/Kernels.so-000-gfx90a-xnack-.hsaco",
        "gfx90a",
    ),
    ("lib/rocblas/library/TensileLibrary_gfx1100.co", "gfx1100"),
    ("lib/rocblas/library/TensileLibrary_gfx1101.co", "gfx1101"),
    ("lib/rocblas/library/TensileLibrary_gfx1201.co", "gfx1201"),
];

/// The all-target index of the database: stays in the generic package.
pub const TENSILE_DAT: &str = "lib/rocblas/library/TensileLibrary.dat";

/// The database files `manifest` lists, as (path, architectures), sorted.
pub fn listed(manifest: &rocm_kpack_format::manifest::Manifest) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = manifest
        .database_files
        .iter()
        .map(|f| (f.path.clone(), f.architectures.clone()))
        .collect();
    out.sort();
    out
}

/// Code-object-sized, compressible content naming its path.
pub fn content(path: &str) -> Vec<u8> {
    path.bytes()
        .cycle()
        .take(40_000 + path.len() * 100)
        .collect()
}

/// Writes the fat payload below `prefix` (a directory): the fixture
/// library as `lib/libfixture.so`, each of `databases` (paths below the
/// prefix) with [`content`], [`TENSILE_DAT`] and a doc file.
pub fn write_fat_payload(prefix: &Path, databases: &[&str]) {
    fs::create_dir_all(prefix.join("lib")).expect("mkdir");
    fs::copy(
        fixtures::fixture("clang19/libfixture.so"),
        prefix.join("lib/libfixture.so"),
    )
    .expect("copy");
    write_databases(prefix, databases);
    write_databases(prefix, &[TENSILE_DAT]);
    fs::create_dir_all(prefix.join("share/doc")).expect("mkdir");
    fs::write(prefix.join("share/doc/README"), "generic\n").expect("write");
}

/// The fat deb `<package>_1.0-1_amd64.deb` in `dir/src`, as a
/// distribution builds it (dpkg-deb, no dependencies).
pub fn fat_deb(dir: &Path, package: &str, databases: &[&str]) -> PathBuf {
    let tree = dir.join("fat-deb");
    write_fat_payload(&tree.join(ROCM_PREFIX), databases);
    deb_from_tree(dir, &tree, package, "fixture with kernel databases")
}

/// Each of `databases` (paths below `base`) with its [`content`].
pub fn write_databases(base: &Path, databases: &[&str]) {
    for rel in databases {
        let p = base.join(rel);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(&p, content(rel)).expect("write");
    }
}

/// `tree` (a package's files) built by dpkg-deb as the fat deb
/// `<package>_1.0-1_amd64.deb` in `dir/src`, no dependencies.
pub fn deb_from_tree(dir: &Path, tree: &Path, package: &str, description: &str) -> PathBuf {
    fs::create_dir_all(tree.join("DEBIAN")).expect("mkdir");
    fs::write(
        tree.join("DEBIAN/control"),
        format!("Package: {package}\nVersion: 1.0-1\nArchitecture: amd64\nMaintainer: T <t@example.org>\nDescription: {description}\n test\n"),
    )
    .expect("control");
    let src = dir.join("src");
    fs::create_dir_all(&src).expect("mkdir");
    let fat = src.join(format!("{package}_1.0-1_amd64.deb"));
    ok(Command::new("dpkg-deb")
        .args(["--root-owner-group", "-Zxz", "--build"])
        .arg(tree)
        .arg(&fat));
    fat
}

/// The fat rpm `libfixture1` of the same payload, built by our packager
/// with the input's version unchanged and no dependencies.
pub fn fat_rpm(dir: &Path, databases: &[&str]) -> PathBuf {
    let split = dir.join("fat-rpm");
    write_fat_payload(&split.join("generic").join(ROCM_PREFIX), databases);
    let mut o = fixture_options(&[Format::Rpm]);
    o.meta.deb.fields.remove("Depends");
    o.spec.version.suffix.clear();
    let made =
        package(&split, &dir.join("src"), &o).unwrap_or_else(|e| panic!("fat rpm: {}", chain(&e)));
    assert_eq!(made.packages.len(), 1, "one fat rpm");
    made.packages[0].path.clone()
}

/// The fat wheel `kpkg-1.0`: a module, the payload below `kpkg/`.
pub fn fat_wheel(dir: &Path, databases: &[&str]) -> PathBuf {
    let stage = dir.join("fat-wheel");
    write_fat_payload(&stage.join("kpkg"), databases);
    let mut files: Vec<(String, Vec<u8>)> = crate::packages::snapshot(&stage).into_iter().collect();
    files.sort();
    let di = "kpkg-1.0.dist-info";
    files.push((
        "kpkg/__init__.py".into(),
        b"from pathlib import Path\nKPACK_DIR = Path(__file__).parent / '.kpack'\n".to_vec(),
    ));
    files.push((
        format!("{di}/METADATA"),
        b"Metadata-Version: 2.1\nName: kpkg\nVersion: 1.0\nSummary: Fixture package with a HIP library\nRequires-Python: >=3.8\n\nLong description.\n".to_vec(),
    ));
    files.push((
        format!("{di}/WHEEL"),
        b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n".to_vec(),
    ));
    files.push((format!("{di}/top_level.txt"), b"kpkg\n".to_vec()));
    let src = dir.join("src");
    fs::create_dir_all(&src).expect("mkdir");
    let whl = src.join("kpkg-1.0-py3-none-linux_x86_64.whl");
    write_wheel(&whl, &files, di, None);
    fs::remove_dir_all(&stage).expect("cleanup");
    whl
}

/// `granularity = "per-target"` over every processor of the fixture
/// library and of [`TENSILE`]: one device package per processor (and per
/// generic ISA).
pub fn per_target_spec() -> Spec {
    let targets = fixtures::ARCHES_CLANG19
        .iter()
        .chain(&["gfx1201"])
        .map(|t| format!("\"{t}\""))
        .collect::<Vec<_>>()
        .join(", ");
    Spec::from_toml_str(&format!(
        "granularity = \"per-target\"\ntargets = [{targets}]\nreplaces = []\n"
    ))
    .expect("per-target spec")
}

/// Splits `fat` into `out` with `spec` (None: the built-in families),
/// device packages xz -0 so that the tests stay fast.
pub fn split(fat: &Path, out: &Path, spec: Option<Spec>) -> SplitPackageReport {
    let mut opts = SplitPackageOptions {
        package_compression: rocm_kpack_package::compress::Compression::Xz,
        package_level: Some(0),
        ..SplitPackageOptions::default()
    };
    if let Some(spec) = spec {
        opts.spec = spec;
    }
    split_package(fat, out, &opts)
        .unwrap_or_else(|e| panic!("split-package {}: {}", fat.display(), chain(&e)))
}
