//! `split-package` on real packages: Debian's fat librocrand1 .deb (and
//! the same tree as an rpm), a fat wheel built from the fixtures, and the
//! error cases (no device code, corrupt inputs, RECORD mismatch, hostile
//! member paths). Installed results are looked up both through the loader
//! and the way AMD's loader does, by `@GFXARCH@` expansion alone.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use rocm_kpack_format::archive::{Archive, RELEASE_ZSTD_LEVEL};
use rocm_kpack_loader::loader::{Cache, LoaderConfig};
use rocm_kpack_package::compress::Compression;
use rocm_kpack_package::deb::DebReader;
use rocm_kpack_package::rpm::RpmReader;
use rocm_kpack_package::wheel::WheelReader;
use rocm_kpack_package::{package, BuiltPackage, Format, PackageError};
use rocm_kpack_splitter::elf::inspect::inspect_elf;
use rocm_kpack_splitter::split_package::{
    split_package, PackageKind, SplitPackageError, SplitPackageOptions, SplitPackageReport,
};
use rocm_kpack_test_support::packages::*;
use rocm_kpack_test_support::{debian, fixtures, gfxarch, http, packages};

/// Fast options: xz level 0 for the generic packages.
fn opts() -> SplitPackageOptions {
    SplitPackageOptions {
        package_compression: Compression::Xz,
        package_level: Some(0),
        ..SplitPackageOptions::default()
    }
}

fn split_ok(input: &Path, out: &Path) -> SplitPackageReport {
    split_package(input, out, &opts())
        .unwrap_or_else(|e| panic!("split-package {}: {}", input.display(), chain(&e)))
}

/// The packages of Debian's librocrand1 under the built-in per-target
/// spec: the generic, one per processor the build has code for, and the
/// transitional packages of the 2025 families (gfx80x, gfx90x, gfx103x) and
/// of the family table (gfx103x-dgpu).
const ROCRAND_PACKAGES: [&str; 11] = [
    "librocrand1",
    "librocrand1-gfx1030",
    "librocrand1-gfx803",
    "librocrand1-gfx900",
    "librocrand1-gfx906",
    "librocrand1-gfx908",
    "librocrand1-gfx90a",
    "librocrand1-gfx80x",
    "librocrand1-gfx90x",
    "librocrand1-gfx103x",
    "librocrand1-gfx103x-dgpu",
];

fn names(r: &SplitPackageReport) -> Vec<String> {
    r.packages.iter().map(|p| p.name.clone()).collect()
}

fn by_name<'a>(r: &'a SplitPackageReport, name: &str) -> &'a BuiltPackage {
    r.packages
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no package {name} in {:?}", names(r)))
}

/// Names of the entries of `dir` (sorted).
fn ls(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The loader finds every code object of `targets` for the installed,
/// host-only `lib`, byte-identical to the fat original's.
fn assert_loader_finds(lib: &Path, fat: &Path, targets: &[&str]) {
    let marker = gfxarch::pattern_of(lib).expect("marker").marker;
    let cache = Cache::with_config(LoaderConfig::default());
    let originals = code_objects(fat);
    let mut found = 0;
    for target in targets {
        for ((i, t), data) in &originals {
            if !t.ends_with(&format!("--{target}")) && t != target {
                continue;
            }
            let co = cache
                .load_code_object(&marker, lib, *i, &[*target])
                .unwrap_or_else(|e| panic!("loader: bundle {i} {target}: {e}"));
            assert_eq!(co.arch, *target);
            assert!(co.data == *data, "bundle {i} {target}: code object differs");
            found += 1;
        }
    }
    assert!(found >= targets.len(), "only {found} code objects checked");
}

#[test]
fn librocrand_deb_splits_installs_and_loads() {
    let tmp = tempfile::tempdir().expect("tmp");
    let deb = debian::package("librocrand1").expect("librocrand1 deb");
    let out = tmp.path().join("out");
    let r = split_ok(&deb, &out);
    assert_eq!(r.kind, PackageKind::Deb);
    assert!(!r.passed_through);
    assert_eq!(names(&r), ROCRAND_PACKAGES);
    // Nothing but the packages in --out (work directory gone).
    let mut files: Vec<String> = r
        .packages
        .iter()
        .map(|p| {
            p.path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    files.sort();
    assert_eq!(ls(&out), files);
    // The split packages are newer than Debian's (docs/packaging.md "Versions").
    assert!(files.contains(&"librocrand1_5.3.3-4+kpack1_amd64.deb".to_string()));

    // Generic: the version with the suffix, the source version Debian's
    // (as a binNMU says it), same Depends, original description.
    let orig = DebReader::open(&deb).expect("original");
    let generic = DebReader::open(&by_name(&r, "librocrand1").path).expect("generic");
    for f in [
        "Package",
        "Depends",
        "Description",
        "Maintainer",
        "Multi-Arch",
    ] {
        assert_eq!(generic.control.get(f), orig.control.get(f), "{f}");
    }
    assert_eq!(generic.control.get("Version"), Some("5.3.3-4+kpack1"));
    assert_eq!(generic.control.get("Source"), Some("rocrand (5.3.3-4)"));
    for g in ["gfx803", "gfx900", "gfx906", "gfx908", "gfx90a", "gfx1030"] {
        let d = DebReader::open(&by_name(&r, &format!("librocrand1-{g}")).path).expect("device");
        // Debian's build has no generic-ISA code: nothing else to depend on.
        assert_eq!(
            d.control.get("Depends"),
            Some("librocrand1 (= 5.3.3-4+kpack1)")
        );
        assert_eq!(d.control.get("Version"), Some("5.3.3-4+kpack1"));
        assert_eq!(d.control.get("Source"), Some("rocrand (5.3.3-4)"));
    }
    // Packages of the 2025 families: files move over (Replaces, Breaks),
    // and a transitional package of the old name pulls in the new ones.
    let d = DebReader::open(&by_name(&r, "librocrand1-gfx90a").path).expect("device");
    assert_eq!(
        d.control.get("Replaces"),
        Some("librocrand1-gfx90x (<< 5.3.3-4+kpack1)")
    );
    assert_eq!(
        d.control.get("Breaks"),
        Some("librocrand1-gfx90x (<< 5.3.3-4+kpack1)")
    );
    let t = DebReader::open(&by_name(&r, "librocrand1-gfx90x").path).expect("transitional");
    assert_eq!(
        t.control.get("Depends"),
        Some(
            "librocrand1 (= 5.3.3-4+kpack1), librocrand1-gfx900 (= 5.3.3-4+kpack1), librocrand1-gfx906 (= 5.3.3-4+kpack1), \
             librocrand1-gfx908 (= 5.3.3-4+kpack1), librocrand1-gfx90a (= 5.3.3-4+kpack1)"
        )
    );
    assert_eq!(t.control.get("Section"), Some("oldlibs"));
    assert!(payload_archives(&by_name(&r, "librocrand1-gfx90x").path).is_empty());
    let t = DebReader::open(&by_name(&r, "librocrand1-gfx103x").path).expect("transitional");
    assert_eq!(
        t.control.get("Depends"),
        Some("librocrand1 (= 5.3.3-4+kpack1), librocrand1-gfx1030 (= 5.3.3-4+kpack1)")
    );
    // The family table's package: gfx1030 takes its files over.
    let t = DebReader::open(&by_name(&r, "librocrand1-gfx103x-dgpu").path).expect("transitional");
    assert_eq!(
        t.control.get("Depends"),
        Some("librocrand1 (= 5.3.3-4+kpack1), librocrand1-gfx1030 (= 5.3.3-4+kpack1)")
    );
    let d = DebReader::open(&by_name(&r, "librocrand1-gfx1030").path).expect("device");
    assert_eq!(
        d.control.get("Replaces"),
        Some(
            "librocrand1-gfx103x (<< 5.3.3-4+kpack1), librocrand1-gfx103x-dgpu (<< 5.3.3-4+kpack1)"
        )
    );
    // Each family deb ships one archive per processor, no alias symlinks.
    for p in &r.packages {
        assert_no_alias_symlinks(p);
    }
    assert_eq!(
        payload_archives(&by_name(&r, "librocrand1-gfx90a").path),
        ["librocrand_gfx90a.kpack"]
    );

    // `dpkg -x` of the generic and the gfx90a and gfx906 debs: AMD's
    // loader, expanding `@GFXARCH@` only, finds each processor's archive.
    let fat = debian::extracted("librocrand1")
        .expect("extracted")
        .join(LIBDIR)
        .join("librocrand.so.1.1");
    let x = tmp.path().join("x");
    for name in ["librocrand1", "librocrand1-gfx90a", "librocrand1-gfx906"] {
        ok(Command::new("dpkg-deb")
            .arg("-x")
            .arg(&by_name(&r, name).path)
            .arg(&x));
    }
    let xlib = x.join(LIBDIR).join("librocrand.so.1.1");
    assert_gfxarch_finds(&xlib, &fat, "gfx90a:xnack-", "librocrand_gfx90a.kpack");
    assert_gfxarch_finds(&xlib, &fat, "gfx90a:xnack+", "librocrand_gfx90a.kpack");
    assert_gfxarch_finds(&xlib, &fat, "gfx906:xnack-", "librocrand_gfx906.kpack");
    assert!(
        !gfxarch_finds_any(&xlib, "gfx1030"),
        "gfx103x was not extracted"
    );
    let a = Archive::open(&x.join(LIBDIR).join(".kpack/librocrand_gfx90a.kpack")).expect("archive");
    assert_eq!(a.gfx_arch_family(), "gfx90a");
    assert_eq!(a.gfx_arches(), ["gfx90a:xnack+", "gfx90a:xnack-"]);

    // lintian: no errors beyond the input's.
    let baseline = lintian_errors(&deb);
    for p in &r.packages {
        let extra: Vec<String> = lintian_errors(&p.path)
            .into_iter()
            .filter(|t| !baseline.contains(t))
            .collect();
        assert!(
            extra.is_empty(),
            "{}: lintian errors {extra:?} (input: {baseline:?})",
            p.name
        );
    }

    // dpkg installs generic + gfx90a + gfx906; dpkg -S owns every file.
    let root = tmp.path().join("root");
    dpkg_root(&root);
    dpkg_install(
        &root,
        &[
            &by_name(&r, "librocrand1").path,
            &by_name(&r, "librocrand1-gfx90a").path,
            &by_name(&r, "librocrand1-gfx906").path,
        ],
    );
    let mut installed = Vec::new();
    for e in walk(&root) {
        let rel = e.strip_prefix(&root).expect("prefix");
        if rel.starts_with("var/lib/dpkg") {
            continue;
        }
        if !fs::symlink_metadata(&e).expect("stat").is_dir() {
            installed.push(format!("/{}", rel.display()));
        }
    }
    assert!(installed.len() > 3, "{installed:?}");
    let owners = ok(Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .arg("-S")
        .args(&installed));
    for f in &installed {
        assert!(
            owners.lines().any(|l| l.ends_with(&format!(": {f}"))),
            "{f} not owned:\n{owners}"
        );
    }
    let lib = root.join(LIBDIR).join("librocrand.so.1.1");
    let kpack = root.join(LIBDIR).join(".kpack");
    assert_eq!(
        ls(&kpack).iter().filter(|n| n.ends_with(".kpm")).count(),
        1,
        "{:?}",
        ls(&kpack)
    );
    assert_loader_finds(&lib, &fat, &["gfx90a:xnack-", "gfx906:xnack-"]);

    // Rerun: byte-identical packages.
    let out2 = tmp.path().join("out2");
    let r2 = split_ok(&deb, &out2);
    assert_eq!(names(&r2), names(&r));
    for p in &r.packages {
        let name = p.path.file_name().expect("name");
        assert_eq!(
            sha256(&p.path),
            sha256(&out2.join(name)),
            "{} differs on rerun",
            name.to_string_lossy()
        );
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            let md = fs::symlink_metadata(&p).expect("stat");
            if md.is_dir() {
                stack.push(p.clone());
            }
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn librocrand_rpm_round_trip() {
    let tmp = tempfile::tempdir().expect("tmp");
    // A fat rpm: the extracted Debian tree as the only (generic) tree.
    let split = tmp.path().join("fat");
    copy_tree(
        &debian::extracted("librocrand1").expect("extracted"),
        &split.join("generic"),
        &[],
    );
    let fat_dir = tmp.path().join("fatpkg");
    let made = package(&split, &fat_dir, &distribution_options(&[Format::Rpm])).expect("fat rpm");
    let fat_rpm = made.packages.first().expect("rpm").path.clone();
    let out = tmp.path().join("out");
    let r = split_ok(&fat_rpm, &out);
    assert_eq!(r.kind, PackageKind::Rpm);
    assert_eq!(names(&r), ROCRAND_PACKAGES);
    let orig = RpmReader::open(&fat_rpm).expect("fat");
    let g = RpmReader::open(&by_name(&r, "librocrand1").path).expect("generic");
    assert_eq!((g.version(), g.release()), (orig.version(), "4.kpack1"));
    assert_eq!(orig.release(), "4");
    let dep_names = |r: &RpmReader| {
        let mut v: Vec<String> = r
            .requires()
            .iter()
            .map(|d| d.name.clone())
            .filter(|n| !n.starts_with("rpmlib("))
            .collect();
        v.sort();
        v
    };
    assert_eq!(dep_names(&g), dep_names(&orig));
    for p in &r.packages {
        ok(Command::new("rpm")
            .arg("-K")
            .arg("--nosignature")
            .arg(&p.path));
        assert_no_alias_symlinks(p);
    }
    let d = RpmReader::open(&by_name(&r, "librocrand1-gfx90a").path).expect("device");
    let provides: Vec<String> = d.provides().iter().map(|p| p.name.clone()).collect();
    assert!(
        provides.contains(&"rocm-kpack(gfx90a)".to_string()),
        "{provides:?}"
    );
    let obsoletes: Vec<String> = d
        .obsoletes()
        .iter()
        .map(|p| format!("{} {}", p.name, p.version))
        .collect();
    assert_eq!(
        obsoletes,
        [format!(
            "librocrand1-gfx90x {}-{}",
            g.version(),
            g.release()
        )]
    );
    let t = RpmReader::open(&by_name(&r, "librocrand1-gfx90x").path).expect("transitional");
    let mut requires: Vec<String> = t
        .requires()
        .iter()
        .map(|d| d.name.clone())
        .filter(|n| !n.starts_with("rpmlib("))
        .collect();
    requires.sort();
    assert_eq!(
        requires,
        [
            "librocrand1",
            "librocrand1-gfx900",
            "librocrand1-gfx906",
            "librocrand1-gfx908",
            "librocrand1-gfx90a"
        ]
    );
    assert!(t.files().is_empty(), "{:?}", t.files());
    let archive = format!("/{LIBDIR}/.kpack/librocrand_gfx90a.kpack");
    let files = d.files();
    let f = files
        .iter()
        .find(|f| f.path == archive)
        .expect("per-processor archive");
    assert_eq!(
        f.mode & 0o170000,
        0o100000,
        "{archive} is not a regular file"
    );
    // The generic rpm's library is host-only.
    let x = tmp.path().join("x");
    fs::create_dir(&x).expect("mkdir");
    g.extract(&x).expect("extract");
    let host = fs::read(x.join(LIBDIR).join("librocrand.so.1.1")).expect("lib");
    let rep = inspect_elf(&host).expect("inspect");
    assert!(
        rep.hip_fatbin.is_none() && rep.marker.is_some(),
        "{}",
        rep.state
    );
}

// ------------------------------------------------------------- wheels

fn gfx_code_object(target: &str) -> Vec<u8> {
    code_objects(&fixtures::fixture("clang19/libfixture.so"))
        .into_iter()
        .find(|((_, t), _)| t.ends_with(target) || t.contains(&format!("{target}:")))
        .map(|(_, d)| d)
        .unwrap_or_else(|| panic!("no {target} code object in the fixture"))
}

/// The fat `kpkg` wheel: module, fat library, per-arch kernel files.
fn kpkg_files() -> Vec<(String, Vec<u8>)> {
    let di = "kpkg-1.0.dist-info";
    vec![
        (
            "kpkg/__init__.py".into(),
            b"from pathlib import Path\nKPACK_DIR = Path(__file__).parent / '.kpack'\n".to_vec(),
        ),
        (
            "kpkg/libfixture.so".into(),
            fs::read(fixtures::fixture("clang19/libfixture.so")).expect("fixture"),
        ),
        ("kpkg/hsa/gfx1100/k.co".into(), gfx_code_object("gfx1100")),
        ("kpkg/hsa/gfx90a/k.co".into(), gfx_code_object("gfx90a")),
        (
            format!("{di}/METADATA"),
            b"Metadata-Version: 2.1\nName: kpkg\nVersion: 1.0\nSummary: Fixture package with a HIP library\nRequires-Python: >=3.8\n\nLong description.\n".to_vec(),
        ),
        (
            format!("{di}/WHEEL"),
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n".to_vec(),
        ),
        (format!("{di}/top_level.txt"), b"kpkg\n".to_vec()),
    ]
}

const KPKG_WHL: &str = "kpkg-1.0-py3-none-linux_x86_64.whl";
/// What KPKG_WHL's split wheels are versioned (the PEP 440 local suffix).
const KPKG_SPLIT_VERSION: &str = "1.0+kpack1";

#[test]
fn fat_wheel_splits_and_pip_installs_the_extra() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = tmp.path().join("src");
    fs::create_dir(&src).expect("mkdir");
    let whl = src.join(KPKG_WHL);
    write_wheel(&whl, &kpkg_files(), "kpkg-1.0.dist-info", None);
    WheelReader::open(&whl)
        .expect("input wheel")
        .verify_record()
        .expect("input RECORD");

    let out = tmp.path().join("out");
    let r = split_ok(&whl, &out);
    assert_eq!(r.kind, PackageKind::Wheel);
    let mut n = names(&r);
    n.sort();
    // One wheel per processor, and one for the generic ISA the fixture's
    // code was also built for.
    assert_eq!(
        n,
        [
            "kpkg",
            "kpkg-device-gfx1030",
            "kpkg-device-gfx11-generic",
            "kpkg-device-gfx1100",
            "kpkg-device-gfx1101",
            "kpkg-device-gfx90a",
            "kpkg-device-gfx942"
        ]
    );
    for p in &r.packages {
        WheelReader::open(&p.path)
            .expect("wheel")
            .verify_record()
            .expect("RECORD");
        assert_no_alias_symlinks(p);
    }
    let base = WheelReader::open(&by_name(&r, "kpkg").path).expect("base");
    assert!(
        base.members
            .iter()
            .any(|m| m == "kpkg/.kpack/libfixture.kpm"),
        "{:?}",
        base.members
    );
    assert!(
        !base.members.iter().any(|m| m.starts_with("kpkg/hsa/")),
        "{:?}",
        base.members
    );
    assert_eq!(
        base.metadata.get("Summary"),
        Some("Fixture package with a HIP library")
    );
    assert!(base
        .metadata
        .get_all("Provides-Extra")
        .any(|e| e == "device-gfx1100"));
    for extra in ["device-gfx11-generic", "device-all"] {
        assert!(base.metadata.get_all("Provides-Extra").any(|e| e == extra));
    }
    // The 2025 family's extra and the family table's ask for the wheels
    // that now carry them.
    for old in ["device-gfx110x", "device-gfx110x-dgpu"] {
        let reqs: Vec<&str> = base
            .metadata
            .get_all("Requires-Dist")
            .filter(|r| r.ends_with(&format!("extra == \"{old}\"")))
            .collect();
        assert_eq!(
            reqs,
            [
                format!("kpkg-device-gfx1100==1.0+kpack1; extra == \"{old}\""),
                format!("kpkg-device-gfx1101==1.0+kpack1; extra == \"{old}\""),
            ]
        );
    }
    let dev = WheelReader::open(&by_name(&r, "kpkg-device-gfx1100").path).expect("device");
    assert!(
        dev.members.iter().any(|m| m == "kpkg/hsa/gfx1100/k.co"),
        "{:?}",
        dev.members
    );
    let m = "kpkg/.kpack/libfixture_gfx1100.kpack".to_string();
    assert!(dev.members.contains(&m), "{m} not in {:?}", dev.members);
    // The processor's wheel pulls in the generic-ISA wheel it carries.
    assert_eq!(
        dev.metadata.get_all("Requires-Dist").collect::<Vec<_>>(),
        ["kpkg==1.0+kpack1", "kpkg-device-gfx11-generic==1.0+kpack1"]
    );
    let generic_isa =
        WheelReader::open(&by_name(&r, "kpkg-device-gfx11-generic").path).expect("device");
    assert!(
        generic_isa
            .members
            .iter()
            .any(|m| m == "kpkg/.kpack/libfixture_gfx11-generic.kpack"),
        "{:?}",
        generic_isa.members
    );
    let dev90 = WheelReader::open(&by_name(&r, "kpkg-device-gfx90a").path).expect("device");
    assert!(
        dev90.members.iter().any(|m| m == "kpkg/hsa/gfx90a/k.co"),
        "{:?}",
        dev90.members
    );

    // Rerun: byte-identical.
    let out2 = tmp.path().join("out2");
    split_ok(&whl, &out2);
    for p in &r.packages {
        let name = p.path.file_name().expect("name");
        assert_eq!(
            sha256(&p.path),
            sha256(&out2.join(name)),
            "{}",
            name.to_string_lossy()
        );
    }

    // pip from a published index; the 2025 family's extra keeps working.
    let (venv, pip, listed) = pip_install_published(&out, tmp.path(), "kpkg[device-gfx110x]");
    let v = KPKG_SPLIT_VERSION;
    assert!(
        listed.contains(&format!("kpkg=={v}"))
            && listed.contains(&format!("kpkg-device-gfx1100=={v}"))
            && listed.contains(&format!("kpkg-device-gfx1101=={v}")),
        "{listed}"
    );
    assert!(
        listed.contains(&format!("kpkg-device-gfx11-generic=={v}")),
        "{listed}"
    );
    assert!(!listed.contains("gfx90a"), "{listed}");
    let printed = ok(Command::new(venv.join("bin/python")).args([
        "-c",
        "import kpkg; print(sorted(p.name for p in kpkg.KPACK_DIR.iterdir()))",
    ]));
    assert_eq!(
        printed.trim(),
        "['libfixture.kpm', 'libfixture_gfx11-generic.kpack', 'libfixture_gfx1100.kpack', 'libfixture_gfx1101.kpack']"
    );
    let sp = rocm_kpack_test_support::site_packages(&venv);
    assert_eq!(
        fs::read(sp.join("kpkg/hsa/gfx1100/k.co")).expect("database file"),
        gfx_code_object("gfx1100")
    );
    assert!(!sp.join("kpkg/hsa/gfx90a").exists());
    // The installed host library resolves the gfx1100 code object, and
    // `@GFXARCH@` expansion alone finds each installed archive: a
    // processor's own, or, for one without code of its own, the generic
    // ISA's (a runtime asks for the target, then its generic ISA).
    let lib = sp.join("kpkg/libfixture.so");
    let fat = fixtures::fixture("clang19/libfixture.so");
    assert_loader_finds(&lib, &fat, &["gfx1100"]);
    assert_gfxarch_finds(&lib, &fat, "gfx1101", "libfixture_gfx1101.kpack");
    assert_gfxarch_finds(&lib, &fat, "gfx1102", "libfixture_gfx11-generic.kpack");
    assert!(
        !gfxarch_finds_any(&lib, "gfx90a:xnack-"),
        "device-gfx90a was not installed"
    );
    pip_uninstall(
        &pip,
        &[
            "kpkg-device-gfx1100",
            "kpkg-device-gfx1101",
            "kpkg-device-gfx11-generic",
            "kpkg",
        ],
    );
    let left: Vec<PathBuf> = walk(&sp)
        .into_iter()
        .filter(|p| {
            p.strip_prefix(&sp)
                .is_ok_and(|r| r.to_string_lossy().starts_with("kpkg"))
        })
        .filter(|p| !fs::symlink_metadata(p).expect("stat").is_dir())
        .collect();
    assert!(left.is_empty(), "left after uninstall: {left:?}");
}

/// A venv with the family table's wheels of kpkg (`tests/fixtures/specs/
/// families.toml`, version 1.0: `kpkg[device-gfx110x-dgpu]`) moves to the
/// per-target wheels with pip's own upgrade: the generic wheel's
/// `device-gfx110x-dgpu` extra now asks for `kpkg-device-gfx1100` and
/// `kpkg-device-gfx1101`, which pip installs, and the installed library
/// finds their archives; `pip check` stays clean.
#[test]
fn pip_moves_an_install_of_the_family_wheels_to_the_per_target_ones() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = tmp.path().join("src");
    fs::create_dir(&src).expect("mkdir");
    let whl = src.join(KPKG_WHL);
    write_wheel(&whl, &kpkg_files(), "kpkg-1.0.dist-info", None);
    let families = rocm_kpack_pkgspec::Spec::from_file(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/specs/families.toml"),
    )
    .expect("spec");
    let old = tmp.path().join("old");
    split_package(
        &whl,
        &old,
        &SplitPackageOptions {
            spec: families,
            ..opts()
        },
    )
    .unwrap_or_else(|e| panic!("{}", chain(&e)));
    let new = tmp.path().join("new");
    split_ok(&whl, &new);

    let venv = tmp.path().join("venv");
    ok(Command::new("python3").args(["-m", "venv"]).arg(&venv));
    let pip = venv.join("bin/pip");
    let install = |links: &Path, upgrade: bool| {
        let mut c = Command::new(&pip);
        c.args(["install", "--disable-pip-version-check", "--no-cache-dir"]);
        if upgrade {
            c.arg("--upgrade");
        }
        ok(c.args(["--no-index", "--find-links"])
            .arg(links)
            .arg("kpkg[device-gfx110x-dgpu]")
            .env("PIP_CONFIG_FILE", "/dev/null"))
    };
    let freeze = || {
        let mut v: Vec<String> =
            ok(Command::new(&pip).args(["list", "--disable-pip-version-check", "--format=freeze"]))
                .lines()
                .filter(|l| l.starts_with("kpkg"))
                .map(str::to_string)
                .collect();
        v.sort();
        v
    };
    install(&old, false);
    assert_eq!(
        freeze(),
        [
            "kpkg-device-gfx11-generic==1.0",
            "kpkg-device-gfx110x-dgpu==1.0",
            "kpkg==1.0"
        ]
    );

    let out = install(&new, true);
    let v = KPKG_SPLIT_VERSION;
    let now = freeze();
    for d in [
        format!("kpkg=={v}"),
        format!("kpkg-device-gfx1100=={v}"),
        format!("kpkg-device-gfx1101=={v}"),
        format!("kpkg-device-gfx11-generic=={v}"),
    ] {
        assert!(now.contains(&d), "{d} missing: {now:?}\n{out}");
    }
    assert!(!now.iter().any(|d| d.contains("gfx90a")), "{now:?}");
    ok(Command::new(&pip).args(["check", "--disable-pip-version-check"]));
    let sp = rocm_kpack_test_support::site_packages(&venv);
    let lib = sp.join("kpkg/libfixture.so");
    let fat = fixtures::fixture("clang19/libfixture.so");
    assert_gfxarch_finds(&lib, &fat, "gfx1100", "libfixture_gfx1100.kpack");
    assert_gfxarch_finds(&lib, &fat, "gfx1101", "libfixture_gfx1101.kpack");
    assert_eq!(
        fs::read(sp.join("kpkg/hsa/gfx1100/k.co")).expect("database file"),
        gfx_code_object("gfx1100")
    );

    // pip has no Replaces: the old family wheel's RECORD still lists the
    // archives, so uninstalling it takes them away (docs/packaging.md
    // "Upgrades from the previous family table"), and reinstalling the
    // per-target wheels puts them back.
    let archive = sp.join("kpkg/.kpack/libfixture_gfx1100.kpack");
    pip_uninstall(&pip, &["kpkg-device-gfx110x-dgpu"]);
    assert!(!archive.exists());
    ok(Command::new(&pip)
        .args([
            "install",
            "--disable-pip-version-check",
            "--no-cache-dir",
            "--force-reinstall",
            "--no-deps",
            "--no-index",
            "--find-links",
        ])
        .arg(&new)
        .args(["kpkg-device-gfx1100", "kpkg-device-gfx1101"])
        .env("PIP_CONFIG_FILE", "/dev/null"));
    ok(Command::new(&pip).args(["check", "--disable-pip-version-check"]));
    assert_gfxarch_finds(&lib, &fat, "gfx1100", "libfixture_gfx1100.kpack");
}

/// Publishes the packages in `out` as a pip index, serves it, installs
/// `requirement` from it into a fresh venv under `tmp` and checks it;
/// returns the venv, its pip and `pip list --format=freeze`.
fn pip_install_published(out: &Path, tmp: &Path, requirement: &str) -> (PathBuf, PathBuf, String) {
    let repo = tmp.join("repo");
    publish_pip(out, &repo);
    let server = http::serve_dir(&repo).expect("serve");
    let venv = tmp.join("venv");
    let python = packages::venv(&venv);
    let pip = venv.join("bin/pip");
    pip_install(
        &python,
        &format!("{}simple/", server.root_url()),
        &[requirement],
    );
    ok(Command::new(&pip).args(["check", "--disable-pip-version-check"]));
    let listed =
        ok(Command::new(&pip).args(["list", "--disable-pip-version-check", "--format=freeze"]));
    (venv, pip, listed)
}

/// The kpkg wheel at `version`: its module, the fat library and METADATA.
fn versioned_kpkg_wheel(dir: &Path, version: &str) -> PathBuf {
    let di = format!("kpkg-{version}.dist-info");
    let files = vec![
        ("kpkg/__init__.py".to_string(), Vec::new()),
        (
            "kpkg/libfixture.so".into(),
            fs::read(fixtures::fixture("clang19/libfixture.so")).expect("fixture"),
        ),
        (
            format!("{di}/METADATA"),
            format!("Metadata-Version: 2.1\nName: kpkg\nVersion: {version}\nSummary: kpkg\n\n")
                .into_bytes(),
        ),
        (
            format!("{di}/WHEEL"),
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n".to_vec(),
        ),
    ];
    let whl = dir.join(format!("kpkg-{version}-py3-none-linux_x86_64.whl"));
    write_wheel(&whl, &files, &di, None);
    whl
}

/// A PEP 440 epoch (`1!2.0`) splits to `1!2.0+kpack1` wheels pip installs;
/// a wheel already at `1.0+kpack1` is refused, as debs and rpms ending in
/// the suffix are, instead of becoming `1.0+kpack1.kpack1`.
#[test]
fn wheel_versions_with_an_epoch_split_and_split_ones_are_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let whl = versioned_kpkg_wheel(tmp.path(), "1!2.0");
    let out = tmp.path().join("out");
    let r = split_ok(&whl, &out);
    assert!(names(&r).contains(&"kpkg-device-gfx1100".to_string()));
    let (_, _, listed) = pip_install_published(&out, tmp.path(), "kpkg[device-gfx1100]");
    assert!(
        listed.contains("kpkg==1!2.0+kpack1")
            && listed.contains("kpkg-device-gfx1100==1!2.0+kpack1"),
        "{listed}"
    );

    let split_dir = tmp.path().join("again");
    fs::create_dir(&split_dir).expect("mkdir");
    let whl = versioned_kpkg_wheel(&split_dir, "1.0+kpack1");
    let e = chain(&split_err(&whl, &split_dir));
    assert!(e.contains("already ends in"), "{e}");
}

// ------------------------------------------------------------- errors

/// Runs split-package on `input`, expecting failure; checks nothing but
/// no --out remains (it did not exist before) and `tmp` gained nothing.
fn split_err(input: &Path, tmp: &Path) -> SplitPackageError {
    let out = tmp.join("err-out");
    let before = ls(tmp);
    let e = split_package(input, &out, &opts()).expect_err("split-package should fail");
    assert!(!out.exists(), "--out left behind: {:?}", ls(&out));
    assert_eq!(ls(tmp), before, "files appeared next to --out");
    e
}

#[test]
fn package_without_device_code_passes_through() {
    let tmp = tempfile::tempdir().expect("tmp");
    let tree = tmp.path().join("tree");
    fs::create_dir_all(tree.join("DEBIAN")).expect("mkdir");
    fs::create_dir_all(tree.join("usr/share/doc/hostonly")).expect("mkdir");
    fs::write(
        tree.join("DEBIAN/control"),
        "Package: hostonly\nVersion: 1.0-1\nArchitecture: all\nMaintainer: T <t@example.org>\nDescription: host only\n nothing for GPUs\n",
    )
    .expect("control");
    fs::write(tree.join("usr/share/doc/hostonly/README"), "hello\n").expect("readme");
    let src = tmp.path().join("src");
    fs::create_dir(&src).expect("mkdir");
    let deb = src.join("hostonly_1.0-1_all.deb");
    ok(Command::new("dpkg-deb")
        .args(["--root-owner-group", "-Zgzip", "--build"])
        .arg(&tree)
        .arg(&deb));
    let out = tmp.path().join("out");
    let r = split_ok(&deb, &out);
    assert!(r.passed_through);
    assert!(
        r.notes.iter().any(|n| n.contains("no device code")),
        "{:?}",
        r.notes
    );
    assert_eq!(ls(&out), ["hostonly_1.0-1_all.deb"]);
    assert_eq!(
        fs::read(out.join("hostonly_1.0-1_all.deb")).expect("copy"),
        fs::read(&deb).expect("deb")
    );

    // A wheel without device code too.
    let whl = src.join("pure-1.0-py3-none-any.whl");
    write_wheel(
        &whl,
        &[
            ("pure/__init__.py".into(), b"x = 1\n".to_vec()),
            (
                "pure-1.0.dist-info/METADATA".into(),
                b"Metadata-Version: 2.1\nName: pure\nVersion: 1.0\n".to_vec(),
            ),
            (
                "pure-1.0.dist-info/WHEEL".into(),
                b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n".to_vec(),
            ),
        ],
        "pure-1.0.dist-info",
        None,
    );
    let r = split_ok(&whl, &out);
    assert!(r.passed_through);
    assert_eq!(
        fs::read(out.join("pure-1.0-py3-none-any.whl")).expect("copy"),
        fs::read(&whl).expect("whl")
    );
}

#[test]
fn corrupt_and_hostile_packages_are_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = tmp.path().join("src");
    fs::create_dir(&src).expect("mkdir");
    let work = tmp.path().join("work");
    fs::create_dir(&work).expect("mkdir");

    // Truncated deb.
    let deb = debian::package("librocrand1").expect("deb");
    let bytes = fs::read(&deb).expect("read");
    let cut = src.join("cut.deb");
    fs::write(&cut, bytes.get(..bytes.len() / 2).expect("half")).expect("write");
    let e = split_err(&cut, &work);
    assert!(matches!(e, SplitPackageError::Package(_)), "{}", chain(&e));

    // rpm lead followed by garbage.
    let rpm = src.join("bad.rpm");
    let mut junk = vec![0xed, 0xab, 0xee, 0xdb, 3, 0];
    junk.extend(std::iter::repeat_n(0x41u8, 200));
    fs::write(&rpm, junk).expect("write");
    let e = split_err(&rpm, &work);
    assert!(
        matches!(e, SplitPackageError::Package(PackageError::Corrupt { .. })),
        "{}",
        chain(&e)
    );

    // zip magic, then garbage.
    let whl = src.join("bad-1.0-py3-none-any.whl");
    fs::write(&whl, b"PK\x03\x04 this is not a zip archive").expect("write");
    let e = split_err(&whl, &work);
    assert!(
        matches!(e, SplitPackageError::Package(PackageError::Corrupt { .. })),
        "{}",
        chain(&e)
    );

    // Not a package at all.
    let txt = src.join("readme.deb");
    fs::write(&txt, "hello").expect("write");
    let e = split_err(&txt, &work);
    assert!(e.to_string().contains("not a .deb"), "{e}");

    // RECORD that does not match the files.
    let rec = src.join(KPKG_WHL);
    let bad_record = "kpkg/__init__.py,sha256=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA,10\n";
    write_wheel(&rec, &kpkg_files(), "kpkg-1.0.dist-info", Some(bad_record));
    let e = split_err(&rec, &work);
    assert!(
        matches!(e, SplitPackageError::Package(PackageError::Record { .. })),
        "{}",
        chain(&e)
    );

    // Hostile wheel member.
    let hw = src.join("evil-1.0-py3-none-any.whl");
    write_wheel(
        &hw,
        &[
            ("../../evil.py".into(), b"boom\n".to_vec()),
            (
                "evil-1.0.dist-info/METADATA".into(),
                b"Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n".to_vec(),
            ),
            (
                "evil-1.0.dist-info/WHEEL".into(),
                b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n".to_vec(),
            ),
        ],
        "evil-1.0.dist-info",
        None,
    );
    let e = split_err(&hw, &work);
    assert!(
        matches!(
            e,
            SplitPackageError::Package(PackageError::UnsafePath { .. })
        ),
        "{}",
        chain(&e)
    );

    // Hostile debs: `../` member, absolute member, symlink escape then a
    // file through it.
    let script = r#"
import io, os, sys, tarfile, subprocess
out, kind = sys.argv[1], sys.argv[2]
d = out + ".d"
os.makedirs(d, exist_ok=True)
def tgz(path, members):
    with tarfile.open(path, "w:gz", format=tarfile.GNU_FORMAT) as t:
        for name, data, link in members:
            info = tarfile.TarInfo(name)
            info.mtime = 0
            if link is not None:
                info.type = tarfile.SYMTYPE
                info.linkname = link
                t.addfile(info)
            else:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
tgz(os.path.join(d, "control.tar.gz"), [("./control", b"Package: evil\nVersion: 1\nArchitecture: all\nMaintainer: x <x@x>\nDescription: x\n x\n", None)])
members = {
    "dotdot": [("./../../evil", b"boom\n", None)],
    "absolute": [("/tmp/evil-abs", b"boom\n", None)],
    "symlink": [("./usr/", b"", "../../.."), ("./usr/evil", b"boom\n", None)],
}[kind]
tgz(os.path.join(d, "data.tar.gz"), members)
open(os.path.join(d, "debian-binary"), "w").write("2.0\n")
subprocess.check_call(["ar", "rc", out, "debian-binary", "control.tar.gz", "data.tar.gz"], cwd=d)
"#;
    // An absolute member name is read relative to the root, as dpkg
    // does: it lands inside the work directory, never at `/tmp/...`.
    let abs = src.join("evil-absolute.deb");
    ok(Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&abs)
        .arg("absolute"));
    let abs_out = tmp.path().join("abs-out");
    let r = split_ok(&abs, &abs_out);
    assert!(r.passed_through);
    assert!(!Path::new("/tmp/evil-abs").exists());
    assert_eq!(ls(&abs_out), ["evil-absolute.deb"]);
    for kind in ["dotdot", "symlink"] {
        let path = src.join(format!("evil-{kind}.deb"));
        ok(Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(&path)
            .arg(kind));
        let e = split_err(&path, &work);
        assert!(
            matches!(
                e,
                SplitPackageError::Package(PackageError::UnsafePath { .. })
            ),
            "{kind}: {}",
            chain(&e)
        );
    }
    assert!(!tmp.path().join("evil").exists() && !Path::new("/tmp/evil-abs").exists());
    assert!(!tmp.path().parent().expect("parent").join("evil").exists());

    // --out equal to the input's directory is refused (outputs keep names).
    let e = split_package(&deb_copy(&src), &src, &opts()).expect_err("same dir");
    assert!(e.to_string().contains("choose another --out"), "{e}");
}

fn deb_copy(dir: &Path) -> PathBuf {
    let p = dir.join("librocrand1_5.3.3-4_amd64.deb");
    fs::copy(debian::package("librocrand1").expect("deb"), &p).expect("copy");
    p
}

#[test]
fn cli_splits_a_wheel_and_reports_errors() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = tmp.path().join("src");
    fs::create_dir(&src).expect("mkdir");
    let whl = src.join(KPKG_WHL);
    write_wheel(&whl, &kpkg_files(), "kpkg-1.0.dist-info", None);
    let out = tmp.path().join("out");
    let o = run(rocm_kpack_test_support::bins::command("rocm-kpack")
        .env_remove("SOURCE_DATE_EPOCH")
        .arg("split-package")
        .arg(&whl)
        .arg("--out")
        .arg(&out)
        .arg("--json"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(report["kind"], "wheel");
    assert_eq!(report["passed_through"], false);
    let mut written: Vec<String> = report["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| p["name"].as_str().expect("name").to_string())
        .collect();
    written.sort();
    assert_eq!(written.first().map(String::as_str), Some("kpkg"));
    assert!(written.len() >= 3, "{written:?}");
    assert_eq!(ls(&out).len(), written.len());

    // Archives are release outputs: the default level is the release
    // level (the CLI's output equals the library's at its default), and
    // --level overrides it.
    assert_eq!(
        SplitPackageOptions::default().output.zstd_level,
        RELEASE_ZSTD_LEVEL
    );
    let lib_out = tmp.path().join("lib-out");
    split_package(&whl, &lib_out, &SplitPackageOptions::default())
        .unwrap_or_else(|e| panic!("{}", chain(&e)));
    let dev = "kpkg_device_gfx1100-1.0+kpack1-py3-none-linux_x86_64.whl";
    assert_eq!(sha256(&out.join(dev)), sha256(&lib_out.join(dev)));
    let fast = tmp.path().join("fast");
    let o = run(rocm_kpack_test_support::bins::command("rocm-kpack")
        .env_remove("SOURCE_DATE_EPOCH")
        .arg("split-package")
        .arg(&whl)
        .args(["--level", "1", "--out"])
        .arg(&fast));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_ne!(
        sha256(&fast.join(dev)),
        sha256(&out.join(dev)),
        "--level 1 wrote the same archives"
    );

    // A corrupt input: exit 1, a message naming it, nothing in --out.
    let bad = src.join("bad-1.0-py3-none-any.whl");
    fs::write(&bad, b"PK\x03\x04garbage").expect("write");
    let out2 = tmp.path().join("out2");
    let o = run(rocm_kpack_test_support::bins::command("rocm-kpack")
        .arg("split-package")
        .arg(&bad)
        .arg("--out")
        .arg(&out2));
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("bad-1.0-py3-none-any.whl") && err.contains("zip"),
        "{err}"
    );
    assert!(ls(&out2).is_empty());
}

/// `granularity = "per-target"` gives AMD's per-target packages: one deb
/// and one rpm per processor (`librocrand1-gfx90a`, like AMD's
/// `amdrocm-blas<ver>-gfx1100`), and per-target extras on the generic wheel
/// (`kpkg[device-gfx942]`, like AMD's `rocm[device-gfx942]`).
#[test]
fn per_target_specs_give_amds_per_target_packages_and_extras() {
    let tmp = tempfile::tempdir().expect("tmp");
    let per_target = |targets: &str| SplitPackageOptions {
        spec: rocm_kpack_pkgspec::Spec::from_toml_str(&format!(
            "granularity = \"per-target\"\ntargets = [{targets}]\nreplaces = []\n"
        ))
        .expect("spec"),
        ..opts()
    };
    let rocrand =
        per_target("\"gfx803\", \"gfx900\", \"gfx906\", \"gfx908\", \"gfx90a\", \"gfx1030\"");
    let units = ["gfx1030", "gfx803", "gfx900", "gfx906", "gfx908", "gfx90a"];

    // deb
    let out = tmp.path().join("deb");
    let r = split_package(
        &debian::package("librocrand1").expect("deb"),
        &out,
        &rocrand,
    )
    .unwrap_or_else(|e| panic!("{}", chain(&e)));
    let mut n = names(&r);
    n.sort();
    let want: Vec<String> = std::iter::once("librocrand1".to_string())
        .chain(units.iter().map(|u| format!("librocrand1-{u}")))
        .collect();
    assert_eq!(n, want);
    for u in units {
        let p = by_name(&r, &format!("librocrand1-{u}"));
        let d = DebReader::open(&p.path).expect("deb");
        assert_eq!(d.control.get("X-Kpack-Gfx"), Some(u));
        assert_eq!(payload_archives(&p.path), [format!("librocrand_{u}.kpack")]);
    }

    // rpm, from the same tree as a fat rpm
    let fat_rpm = rocrand_fat_rpm(tmp.path());
    let out = tmp.path().join("rpm");
    let r = split_package(&fat_rpm, &out, &rocrand).unwrap_or_else(|e| panic!("{}", chain(&e)));
    let mut n = names(&r);
    n.sort();
    assert_eq!(n, want);
    let d = RpmReader::open(&by_name(&r, "librocrand1-gfx90a").path).expect("rpm");
    let provides: Vec<String> = d.provides().iter().map(|p| p.name.clone()).collect();
    assert!(
        provides.contains(&"rocm-kpack(gfx90a)".to_string()),
        "{provides:?}"
    );
    assert!(
        !provides
            .iter()
            .any(|p| p.starts_with("rocm-kpack(gfx90") && p != "rocm-kpack(gfx90a)"),
        "{provides:?}"
    );
    assert_eq!(
        payload_archives(&by_name(&r, "librocrand1-gfx90a").path),
        ["librocrand_gfx90a.kpack"]
    );

    // wheel
    let src = tmp.path().join("src");
    fs::create_dir(&src).expect("mkdir");
    let whl = src.join(KPKG_WHL);
    write_wheel(&whl, &kpkg_files(), "kpkg-1.0.dist-info", None);
    let out = tmp.path().join("whl");
    let targets = fixtures::ARCHES_CLANG19
        .iter()
        .map(|t| format!("\"{t}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let r = split_package(&whl, &out, &per_target(&targets))
        .unwrap_or_else(|e| panic!("{}", chain(&e)));
    let base = WheelReader::open(&by_name(&r, "kpkg").path).expect("base");
    let extras: Vec<&str> = base.metadata.get_all("Provides-Extra").collect();
    for e in [
        "device-gfx90a",
        "device-gfx942",
        "device-gfx1030",
        "device-gfx1100",
        "device-gfx1101",
        "device-gfx11-generic",
    ] {
        assert!(extras.contains(&e), "{e} not in {extras:?}");
    }
    assert!(
        !extras.iter().any(|e| e.ends_with('x') || e.contains("gpu")),
        "{extras:?}"
    );
    let dev = WheelReader::open(&by_name(&r, "kpkg-device-gfx1100").path).expect("device");
    assert!(
        dev.members
            .contains(&"kpkg/.kpack/libfixture_gfx1100.kpack".to_string()),
        "{:?}",
        dev.members
    );
    assert!(
        !dev.members
            .iter()
            .any(|m| m.ends_with("libfixture_gfx1101.kpack")),
        "{:?}",
        dev.members
    );
    // The processor's wheel pulls in the generic ISA serving it.
    assert_eq!(
        dev.metadata.get_all("Requires-Dist").collect::<Vec<_>>(),
        ["kpkg==1.0+kpack1", "kpkg-device-gfx11-generic==1.0+kpack1"]
    );
}

/// A wheel carrying a Tensile-style kernel database (the layout rocBLAS
/// wheels use, `<pkg>/lib/rocblas/library/`): the base wheel keeps the
/// all-target `TensileLibrary.dat` and lists the per-processor files in its
/// manifest, relative to the manifest's prefix; each device wheel keeps
/// its processors' files at the fat wheel's paths, and pip installs them
/// there byte-identical.
#[test]
fn wheel_device_packages_keep_tensile_database_files_at_their_paths() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = tmp.path().join("src");
    fs::create_dir(&src).expect("mkdir");
    let lib = "kpkg/lib/rocblas/library";
    let dbs = [
        (
            format!("{lib}/TensileLibrary_gfx90a.co"),
            "gfx90a",
            gfx_code_object("gfx90a"),
        ),
        (
            format!("{lib}/Kernels.so-000-gfx90a-xnack-.hsaco"),
            "gfx90a:xnack-",
            gfx_code_object("gfx90a"),
        ),
        (
            format!("{lib}/TensileLibrary_gfx1100.co"),
            "gfx1100",
            gfx_code_object("gfx1100"),
        ),
    ];
    let dat = (
        format!("{lib}/TensileLibrary.dat"),
        b"all targets\n".to_vec(),
    );
    let mut files: Vec<(String, Vec<u8>)> = kpkg_files()
        .into_iter()
        .filter(|(n, _)| !n.starts_with("kpkg/hsa/"))
        .collect();
    files.extend(dbs.iter().map(|(p, _, b)| (p.clone(), b.clone())));
    files.push(dat.clone());
    let whl = src.join(KPKG_WHL);
    write_wheel(&whl, &files, "kpkg-1.0.dist-info", None);
    let out = tmp.path().join("out");
    let r = split_ok(&whl, &out);

    let base = WheelReader::open(&by_name(&r, "kpkg").path).expect("base");
    assert!(base.members.contains(&dat.0), "{:?}", base.members);
    let unpacked = tmp.path().join("base");
    ok(Command::new("python3")
        .args(["-m", "zipfile", "-e"])
        .arg(&by_name(&r, "kpkg").path)
        .arg(&unpacked));
    let kpm =
        rocm_kpack_format::manifest::Manifest::read(&unpacked.join("kpkg/.kpack/libfixture.kpm"))
            .expect("kpm");
    let listed = rocm_kpack_test_support::databases::listed(&kpm);
    let mut want: Vec<(String, Vec<String>)> = dbs
        .iter()
        .map(|(p, a, _)| {
            (
                p.strip_prefix("kpkg/").expect("prefix").to_string(),
                vec![a.to_string()],
            )
        })
        .collect();
    want.sort();
    assert_eq!(listed, want);
    for (p, _, _) in &dbs {
        assert!(!base.members.contains(p), "{p} in the base wheel");
    }
    let dev90 = WheelReader::open(&by_name(&r, "kpkg-device-gfx90a").path).expect("device");
    let dev110 = WheelReader::open(&by_name(&r, "kpkg-device-gfx1100").path).expect("device");
    for (p, a, _) in &dbs {
        let (has, hasnt) = if a.starts_with("gfx90a") {
            (&dev90, &dev110)
        } else {
            (&dev110, &dev90)
        };
        assert!(has.members.contains(p) && !hasnt.members.contains(p), "{p}");
    }

    // pip: base + the gfx90a extra puts the gfx90a files where the fat
    // wheel had them, and nothing for gfx1100.
    let (venv, _, _) = pip_install_published(&out, tmp.path(), "kpkg[device-gfx90a]");
    let sp = rocm_kpack_test_support::site_packages(&venv);
    for (p, a, bytes) in &dbs {
        if a.starts_with("gfx90a") {
            assert_eq!(&fs::read(sp.join(p)).expect("database file"), bytes, "{p}");
        } else {
            assert!(!sp.join(p).exists(), "{p}");
        }
    }
    assert_eq!(fs::read(sp.join(&dat.0)).expect("dat"), dat.1);
}

/// Debian's librocsparse0 split with the built-in (per-target) spec: one
/// device deb per processor the deb carries, named `librocsparse0-<target>`,
/// and what an MI210 (gfx90a) downloads through apt (the generic deb, the
/// gfx90a deb and the device debs it depends on) stays at or below 46% of
/// the fat deb, as under the family table (docs/packaging.md "Benchmark:
/// `bench-download`").
#[test]
fn librocsparse_splits_per_target_and_an_mi210_downloads_under_half() {
    let tmp = tempfile::tempdir().expect("tmp");
    let deb = debian::package("librocsparse0").expect("librocsparse0 deb");
    let out = tmp.path().join("out");
    // The generic deb at the compressor's default level, as released.
    let o = SplitPackageOptions {
        package_level: None,
        ..opts()
    };
    let r = split_package(&deb, &out, &o).unwrap_or_else(|e| panic!("{}", chain(&e)));
    let mut device: Vec<String> = names(&r)
        .into_iter()
        .filter_map(|n| n.strip_prefix("librocsparse0-").map(str::to_string))
        .collect();
    device.sort();
    // The transitional packages of both family tables, then the processors.
    for t in [
        "gfx80x",
        "gfx90x",
        "gfx103x",
        "gfx103x-dgpu",
        "gfx110x",
        "gfx110x-dgpu",
    ] {
        if let Some(p) = device.iter().position(|d| d == t) {
            let t = DebReader::open(&by_name(&r, &format!("librocsparse0-{t}")).path)
                .expect("transitional");
            assert_eq!(t.control.get("Section"), Some("oldlibs"));
            device.remove(p);
        }
    }
    assert!(
        device.iter().all(|d| {
            let p = by_name(&r, &format!("librocsparse0-{d}"));
            DebReader::open(&p.path)
                .expect("device deb")
                .control
                .get("X-Kpack-Gfx")
                == Some(d.as_str())
                || d.ends_with("-generic")
        }),
        "{device:?}"
    );
    // Debian builds librocsparse0 5.3.0 for gfx803, gfx900, gfx906, gfx908,
    // gfx90a and gfx1030.
    for t in ["gfx803", "gfx90a", "gfx1030"] {
        assert!(device.contains(&t.to_string()), "{device:?}");
    }

    let size = |p: &Path| fs::metadata(p).expect("size").len();
    let fat = size(&deb);
    let gfx90a = by_name(&r, "librocsparse0-gfx90a");
    let d = DebReader::open(&gfx90a.path).expect("gfx90a deb");
    let mut apt = vec![
        "librocsparse0".to_string(),
        "librocsparse0-gfx90a".to_string(),
    ];
    for dep in d.control.get("Depends").expect("Depends").split(',') {
        let name = dep.split_whitespace().next().expect("name").to_string();
        if !apt.contains(&name) {
            apt.push(name);
        }
    }
    let bytes: u64 = apt.iter().map(|n| size(&by_name(&r, n).path)).sum();
    let share = bytes as f64 / fat as f64;
    eprintln!(
        "librocsparse0: fat deb {fat} B; MI210 through apt {bytes} B ({:.1}%): {apt:?}; device debs {device:?}",
        share * 100.0
    );
    // 46% as measured under the family table, rounded to a whole percent.
    assert!(share < 0.465, "{:.2}% of the fat deb", share * 100.0);
}
