//! Helpers of the packaging, publishing and install tests: split
//! directories built from real fat binaries (the committed fixtures,
//! Debian's librocrand) with the runtime's archive writer, packaging with
//! defaults that keep the tests fast, package-manager roots (dpkg, apt) and
//! command helpers.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::BufWriter;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::{debian, fixtures, gfxarch};
use object::{Object, ObjectSection};
use rocm_kpack_format::archive::{transport, Archive, ArchiveWriter, CompressionScheme};
use rocm_kpack_format::layout;
use rocm_kpack_format::manifest::{Manifest, ManifestFile};
use rocm_kpack_format::target::TargetId;
use rocm_kpack_package::compress::Compression;
use rocm_kpack_package::deb::DebReader;
use rocm_kpack_package::meta::PackageMeta;
use rocm_kpack_package::{package, BuiltPackage, Format, PackageOptions, PackageReport};
use rocm_kpack_pkgspec::Spec;
use rocm_kpack_publish::{publish, PublishOptions, PublishReport};
use sha2::{Digest, Sha256};

/// Debian's multiarch library directory.
pub const LIBDIR: &str = "usr/lib/x86_64-linux-gnu";

/// Runs a command, returning its output; panics with stderr when it
/// cannot be started.
pub fn run(cmd: &mut Command) -> Output {
    let dbg = format!("{cmd:?}");
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {dbg}: {e}"))
}

/// A command's exit status, stdout and stderr, for a failed assertion.
pub fn shown_output(o: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs a command that must succeed; returns stdout.
pub fn ok(cmd: &mut Command) -> String {
    let dbg = format!("{cmd:?}");
    let o = run(cmd);
    assert!(o.status.success(), "{dbg} failed: {}", shown_output(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// sha256 hex of a file.
pub fn sha256(path: &Path) -> String {
    hex::encode(Sha256::digest(fs::read(path).expect("read")))
}

/// Copies a tree, keeping symlinks as symlinks; `skip` names relative
/// paths not copied.
pub fn copy_tree(src: &Path, dst: &Path, skip: &[&str]) {
    fn walk(src: &Path, dst: &Path, rel: &Path, skip: &[&str]) {
        fs::create_dir_all(dst.join(rel)).expect("mkdir");
        let mut items: Vec<_> = fs::read_dir(src.join(rel))
            .expect("read_dir")
            .map(|e| e.expect("entry"))
            .collect();
        items.sort_by_key(|e| e.file_name());
        for e in items {
            let r = rel.join(e.file_name());
            if skip.iter().any(|s| Path::new(s) == r) {
                continue;
            }
            let ft = e.file_type().expect("file type");
            if ft.is_symlink() {
                symlink(fs::read_link(e.path()).expect("readlink"), dst.join(&r)).expect("symlink");
            } else if ft.is_dir() {
                walk(src, dst, &r, skip);
            } else {
                fs::copy(e.path(), dst.join(&r)).expect("copy");
            }
        }
    }
    walk(src, dst, Path::new(""), skip);
}

/// Writes the device code of the fat ELF `fat` as archives into a split
/// directory laid out as `split` writes it (docs/packaging.md, input 2):
/// `split/<tree>/<rel_dir>/.kpack/<component>_<unit>.kpack`, placed by the
/// default spec ([`Spec::placement`]): one archive per processor (all its
/// feature variants) in its family's tree, one per generic ISA in a tree
/// of that name, and the manifest
/// `split/generic/<rel_dir>/.kpack/<component>.kpm` listing them with
/// their tree as family. Returns the device trees, sorted.
pub fn write_archives(fat: &Path, rel_dir: &str, component: &str, split: &Path) -> Vec<String> {
    let spec = Spec::default_families();
    let key_base = fat
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    // (tree, unit) -> (binary key, arch, code object)
    type Kernels = Vec<(String, String, Vec<u8>)>;
    let mut per_unit: BTreeMap<(String, String), Kernels> = BTreeMap::new();
    for ((i, target), data) in code_objects(fat) {
        let placement = spec.placement(&target).expect("placement");
        per_unit
            .entry((placement.tree, placement.unit))
            .or_default()
            .push((format!("{key_base}#{i}"), target, data));
    }
    let mut files = Vec::new();
    for ((tree, unit), kernels) in &per_unit {
        let dir = split.join(tree).join(rel_dir).join(layout::KPACK_DIR);
        fs::create_dir_all(&dir).expect("mkdir");
        let name = layout::archive_file_name(component, unit);
        let path = dir.join(&name);
        let out = BufWriter::new(File::create(&path).expect("create"));
        let mut w = ArchiveWriter::new(out, component, tree, CompressionScheme::ZstdPerKernel, 3)
            .expect("writer");
        let mut arches: Vec<String> = kernels.iter().map(|k| k.1.clone()).collect();
        arches.sort();
        arches.dedup();
        w.set_gfx_arches(arches.clone());
        for (key, arch, data) in kernels {
            w.add_kernel(key, arch, data.clone()).expect("add");
        }
        w.finish().expect("finish");
        let content = fs::read(&path).expect("read archive");
        files.push(ManifestFile {
            filename: name,
            family: tree.clone(),
            architectures: arches,
            size: content.len() as u64,
            sha256: Some(Sha256::digest(&content).into()),
            transport: Some(
                transport::manifest_transport(&Archive::open(&path).expect("open"), Some(3))
                    .expect("transport"),
            ),
        });
    }
    let kpm_dir = split.join("generic").join(rel_dir).join(layout::KPACK_DIR);
    fs::create_dir_all(&kpm_dir).expect("mkdir");
    let m = Manifest {
        component: component.to_string(),
        kpack_files: files,
        database_files: Vec::new(),
        prefix_path: None,
    };
    fs::write(
        kpm_dir.join(layout::manifest_file_name(component)),
        m.to_msgpack().expect("kpm"),
    )
    .expect("write kpm");
    let trees: BTreeSet<String> = per_unit.keys().map(|(tree, _)| tree.clone()).collect();
    trees.into_iter().collect()
}

/// A split directory of Debian's librocrand1: the extracted package as
/// the generic tree (library kept as is: the packager does not care
/// whether it was rewritten), its device code as per-family archives.
pub fn rocrand_split(dir: &Path) -> (PathBuf, Vec<String>) {
    let root = debian::extracted("librocrand1").expect("librocrand1");
    let split = dir.join("split");
    copy_tree(&root, &split.join("generic"), &[]);
    let fat = root.join(LIBDIR).join("librocrand.so.1.1");
    let groups = write_archives(&fat, LIBDIR, "librocrand", &split);
    (split, groups)
}

/// The original librocrand1 .deb.
pub fn rocrand_deb() -> PathBuf {
    debian::package("librocrand1").expect("librocrand1 deb")
}

/// Package options from the original librocrand1 control, fast xz.
pub fn rocrand_options(formats: &[Format]) -> PackageOptions {
    let r = DebReader::open(&rocrand_deb()).expect("read original deb");
    let mut meta = PackageMeta::from_control(&r.control, r.control_files.clone());
    meta.license = Some("MIT".into());
    let mut o = PackageOptions::new(meta);
    o.formats = formats.to_vec();
    o.compression = Compression::Xz;
    o.level = Some(0);
    o
}

/// Options that build a fat package as the distribution ships it: the
/// input's version unchanged (`[version] suffix = ""`), for tests that need
/// the distribution's package in a format Debian does not ship.
pub fn distribution_options(formats: &[Format]) -> PackageOptions {
    let mut o = rocrand_options(formats);
    o.spec.version.suffix.clear();
    o
}

/// A fat rpm of Debian's librocrand1 (its extracted tree as the only,
/// generic, tree), written below `dir`.
pub fn rocrand_fat_rpm(dir: &Path) -> PathBuf {
    let split = dir.join("fat");
    copy_tree(
        &debian::extracted("librocrand1").expect("extracted"),
        &split.join("generic"),
        &[],
    );
    let made = package(
        &split,
        &dir.join("fatpkg"),
        &distribution_options(&[Format::Rpm]),
    )
    .expect("fat rpm");
    made.packages.first().expect("rpm").path.clone()
}

/// A small split directory from the clang19 `libfixture.so` in a
/// Debian-style layout (`usr/lib/x86_64-linux-gnu`, symlink chain, doc dir).
pub fn fixture_split(dir: &Path) -> (PathBuf, Vec<String>) {
    let split = dir.join("fsplit");
    let lib = split.join("generic").join(LIBDIR);
    fs::create_dir_all(&lib).expect("mkdir");
    let fat = fixtures::fixture("clang19/libfixture.so");
    fs::copy(&fat, lib.join("libfixture.so.1.0")).expect("copy");
    symlink("libfixture.so.1.0", lib.join("libfixture.so.1")).expect("symlink");
    let doc = split.join("generic/usr/share/doc/libfixture1");
    fs::create_dir_all(&doc).expect("mkdir");
    fs::write(doc.join("copyright"), "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\nUpstream-Name: fixture\n\nFiles: *\nCopyright: none\nLicense: MIT\n").expect("write");
    let groups = write_archives(&fat, LIBDIR, "libfixture", &split);
    (split, groups)
}

/// Package metadata for the fixture library.
pub fn fixture_options(formats: &[Format]) -> PackageOptions {
    let mut meta = PackageMeta::default();
    meta.apply_toml(
        r#"
name = "libfixture1"
version = "1.0-1"
maintainer = "Test <test@example.org>"
summary = "test fixture library"
description = "A HIP library built from the rocm-kpack fixtures."
license = "MIT"
section = "libs"
[deb]
fields = { "Multi-Arch" = "same", "Depends" = "libc6 (>= 2.17)" }
"#,
    )
    .expect("metadata");
    let mut o = PackageOptions::new(meta);
    o.formats = formats.to_vec();
    o.compression = Compression::Xz;
    o.level = Some(0);
    o
}

/// Packages `split` into `out`.
pub fn build(split: &Path, out: &Path, opts: &PackageOptions) -> PackageReport {
    package(split, out, opts).unwrap_or_else(|e| panic!("package failed: {}", chain(&e)))
}

/// An error's full source chain, as the CLI prints it.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

/// Every file under `dir` (relative path -> bytes), symlinks as "-> target".
pub fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).expect("read_dir") {
            let e = e.expect("entry");
            let p = e.path();
            let rel = p
                .strip_prefix(dir)
                .expect("prefix")
                .to_string_lossy()
                .into_owned();
            let ft = e.file_type().expect("type");
            if ft.is_symlink() {
                out.insert(
                    rel,
                    format!("-> {}", fs::read_link(&p).expect("link").display()).into_bytes(),
                );
            } else if ft.is_dir() {
                stack.push(p);
            } else {
                out.insert(rel, fs::read(&p).expect("read"));
            }
        }
    }
    out
}

/// Creates an empty dpkg database under `root`.
pub fn dpkg_root(root: &Path) {
    for d in [
        "var/lib/dpkg/updates",
        "var/lib/dpkg/info",
        "var/lib/dpkg/triggers",
    ] {
        fs::create_dir_all(root.join(d)).expect("mkdir");
    }
    fs::write(root.join("var/lib/dpkg/status"), "").expect("status");
    fs::write(root.join("var/lib/dpkg/available"), "").expect("available");
}

/// `dpkg -i` of `debs` into the dpkg database below `root` (a
/// [`dpkg_root`]), as root or not, without maintainer scripts' chroot and
/// dependencies.
pub fn dpkg_install(root: &Path, debs: &[&Path]) {
    ok(Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .args([
            "--force-not-root",
            "--force-script-chrootless",
            "--force-depends",
            "-i",
        ])
        .args(debs));
}

/// apt's own directories in a throwaway root (docs/packaging.md, "Testing with
/// the real clients").
pub fn apt_dirs(root: &Path) {
    for d in [
        "etc/apt/sources.list.d",
        "etc/apt/apt.conf.d",
        "etc/apt/preferences.d",
        "var/lib/apt/lists/partial",
        "var/cache/apt/archives/partial",
        "var/log/apt",
    ] {
        fs::create_dir_all(root.join(d)).expect("mkdir");
    }
}

/// Options that point apt-get (and the dpkg it runs) at a throwaway root.
pub fn apt_opts(root: &Path) -> Vec<String> {
    let r = root.display();
    vec![
        format!("-o=Dir={r}"),
        format!("-o=Dir::State::status={r}/var/lib/dpkg/status"),
        format!("-o=DPkg::Options::=--root={r}"),
        "-o=DPkg::Options::=--force-not-root".into(),
        "-o=Debug::NoLocking=1".into(),
        "-o=APT::Sandbox::User=root".into(),
    ]
}

/// `E:` tags lintian reports for a package (tag names, sorted, unique).
pub fn lintian_errors(deb: &Path) -> Vec<String> {
    let o = run(Command::new("lintian").arg("--no-cfg").arg(deb));
    let text = String::from_utf8_lossy(&o.stdout);
    let mut tags: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with("E: "))
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
        .collect();
    tags.sort();
    tags.dedup();
    tags
}

/// Inputs for the command-line tests, below `dir`: `tree/lib/<lib>` (an
/// install tree holding the clang19 fixture `lib`, `libfixture.so` or
/// `libmulti.so`), `keep.toml` (a spec that keeps the version as it is,
/// as a distribution's fat package has it) and a fat deb `kfat` 1.0 of
/// `libfixture.so.1`, made by `rocm-kpack package` of a split directory
/// with a generic tree only; returns the deb.
pub fn cli_inputs(dir: &Path, lib: &str) -> PathBuf {
    fs::create_dir_all(dir.join("tree/lib")).expect("mkdir");
    fs::copy(
        fixtures::fixture(&format!("clang19/{lib}")),
        dir.join("tree/lib").join(lib),
    )
    .expect("copy");
    fs::create_dir_all(dir.join("fat/generic/usr/lib")).expect("mkdir");
    fs::copy(
        fixtures::fixture("clang19/libfixture.so"),
        dir.join("fat/generic/usr/lib/libfixture.so.1"),
    )
    .expect("copy");
    fs::write(dir.join("keep.toml"), "[version]\nsuffix = \"\"\n").expect("write");
    ok(crate::bins::command("rocm-kpack")
        .args(["package", "fat", "--out", "fatpkg", "--name", "kfat"])
        .args(["--version", "1.0", "--spec", "keep.toml", "-q"])
        .current_dir(dir));
    dir.join("fatpkg/kfat_1.0_amd64.deb")
}

/// A directory of archives for `rocm-kpack-fetch install --offline`: the
/// archives of the device trees `targets` of the split `split` (each
/// `split/<target>/.kpack/*.kpack`), copied into `store`.
pub fn offline_store(split: &Path, targets: &[&str], store: &Path) {
    fs::create_dir_all(store).expect("mkdir store");
    for t in targets {
        let kpack = split.join(t).join(layout::KPACK_DIR);
        for entry in fs::read_dir(&kpack).unwrap_or_else(|e| panic!("{}: {e}", kpack.display())) {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|x| x == "kpack") {
                let name = path.file_name().expect("a file name");
                fs::copy(&path, store.join(name)).expect("copy archive");
            }
        }
    }
}

/// A wheel-shaped split directory built by hand from the clang19
/// `libfixture.so`: generic `kpkg/` (module, fat library, `.kpack/kpkg.kpm`)
/// and `kpkg-1.0.dist-info/`; device trees as [`write_archives`] lays them
/// out under `kpkg/`, and for gfx110X-dgpu a kernel-database style
/// `kpkg/hsa/gfx1100/fixture.co`.
pub fn wheel_split(dir: &Path) -> (PathBuf, Vec<String>) {
    let split = dir.join("wsplit");
    let pkg = split.join("generic/kpkg");
    fs::create_dir_all(pkg.join("lib")).expect("mkdir");
    fs::write(
        pkg.join("__init__.py"),
        "from pathlib import Path\nKPACK_DIR = Path(__file__).parent / '.kpack'\n",
    )
    .expect("write");
    let fat = fixtures::fixture("clang19/libfixture.so");
    fs::copy(&fat, pkg.join("lib/libfixture.so")).expect("copy");
    let di = split.join("generic/kpkg-1.0.dist-info");
    fs::create_dir_all(&di).expect("mkdir");
    fs::write(
        di.join("METADATA"),
        "Metadata-Version: 2.1\nName: kpkg\nVersion: 1.0\nSummary: Fixture package with a HIP library\nRequires-Python: >=3.8\n\nLong description.\n",
    )
    .expect("write");
    fs::write(
        di.join("WHEEL"),
        "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n",
    )
    .expect("write");
    fs::write(di.join("top_level.txt"), "kpkg\n").expect("write");
    let groups = write_archives(&fat, "kpkg", "kpkg", &split);
    // A per-arch database file, as `pkg/hsa/<gfx>/*.co` trees carry.
    let co = code_objects(&fat)
        .remove(&(0, "gfx1100".to_string()))
        .expect("gfx1100 code object");
    let db = split.join("gfx110X-dgpu/kpkg/hsa/gfx1100");
    fs::create_dir_all(&db).expect("mkdir");
    fs::write(db.join("fixture.co"), co).expect("write");
    (split, groups)
}

/// Options for the wheel split (name and version come from its METADATA).
pub fn wheel_options() -> PackageOptions {
    let mut o = PackageOptions::new(PackageMeta::default());
    o.formats = vec![Format::Wheel];
    o
}

/// Code objects of a fat ELF: (bundle index, target id) -> bytes.
pub fn code_objects(fat: &Path) -> BTreeMap<(u32, String), Vec<u8>> {
    let bytes = fs::read(fat).expect("read fat binary");
    let elf = object::File::parse(&*bytes).expect("parse ELF");
    let section = elf
        .section_by_name(".hip_fatbin")
        .expect(".hip_fatbin")
        .data()
        .expect("data");
    let mut out = BTreeMap::new();
    for (i, b) in rocm_kpack_format::bundle::parse_fatbin(section)
        .expect("bundles")
        .iter()
        .enumerate()
    {
        for (target, data) in b.code_objects() {
            out.insert((i as u32, target.to_string()), data.to_vec());
        }
    }
    out
}

/// AMD's lookup (`rocm_kpack_test_support::gfxarch`: `@GFXARCH@` expanded
/// with the target id, then the processor; then the same for its generic
/// ISA) finds, beside the split binary `lib`, the regular file `expected`
/// (no alias symlink) for a `device`, and the code objects it returns are
/// the fat original `fat`'s, byte for byte.
pub fn assert_gfxarch_finds(lib: &Path, fat: &Path, device: &str, expected: &str) {
    let pattern = gfxarch::pattern_of(lib).expect("marker");
    let device_id = TargetId::parse(device).expect("target id");
    let found = gfxarch::lookup(&pattern.pattern, &device_id)
        .unwrap_or_else(|| panic!("no archive for {device} beside {}", lib.display()));
    let path = &found.archive;
    assert_eq!(
        path.file_name().and_then(|n| n.to_str()),
        Some(expected),
        "{device}"
    );
    let md = fs::symlink_metadata(path).expect("lstat");
    assert!(
        md.file_type().is_file(),
        "{} is not a regular file",
        path.display()
    );
    let archive = Archive::open(path).expect("archive");
    let mut checked = 0;
    for ((i, t), data) in code_objects(fat) {
        if t != found.key {
            continue;
        }
        let key = format!("{}#{i}", pattern.marker.kernel_name);
        let got = archive
            .kernel(&key, &t)
            .unwrap_or_else(|e| panic!("{}: {key} {t}: {e}", path.display()));
        assert!(
            got == data,
            "{}: {key} {t} differs from the fat original",
            path.display()
        );
        checked += 1;
    }
    assert!(
        checked > 0,
        "{} holds no {} code object of {}",
        path.display(),
        found.key,
        fat.display()
    );
}

/// Whether AMD's lookup finds any archive for `device` beside `lib`.
pub fn gfxarch_finds_any(lib: &Path, device: &str) -> bool {
    let pattern = gfxarch::pattern_of(lib).expect("marker");
    gfxarch::lookup(
        &pattern.pattern,
        &TargetId::parse(device).expect("target id"),
    )
    .is_some()
}

/// A package's payload as the format's own tool lists it (`dpkg-deb -c`,
/// `rpm -qlvp`; for a wheel, its zip entries): one line per entry, starting
/// with the `ls -l` type letter and ending with the path (`-> target` for
/// symlinks).
fn tool_listing(pkg: &Path) -> String {
    let name = pkg.to_string_lossy();
    if name.ends_with(".deb") {
        ok(Command::new("dpkg-deb").arg("-c").arg(pkg))
    } else if name.ends_with(".rpm") {
        ok(Command::new("rpm").arg("-qlvp").arg(pkg))
    } else {
        let py = "import sys, zipfile\nfor i in zipfile.ZipFile(sys.argv[1]).infolist():\n    link = (i.external_attr >> 16) & 0o170000 == 0o120000\n    print('l' if link else '-', i.filename)\n";
        ok(Command::new("python3").arg("-c").arg(py).arg(pkg))
    }
}

/// Install paths (no leading `./` or `/`) of the entries of one type
/// (`l`, `-`) in [`tool_listing`].
fn listed(pkg: &Path, kind: char) -> Vec<String> {
    tool_listing(pkg)
        .lines()
        .filter(|l| l.starts_with(kind))
        .filter_map(|l| l.split(" -> ").next()?.split_whitespace().last())
        .map(|p| {
            p.trim_start_matches("./")
                .trim_start_matches('/')
                .to_string()
        })
        .collect()
}

/// Symlinks in a package's payload, as the format's tool lists them.
pub fn payload_symlinks(pkg: &Path) -> Vec<String> {
    listed(pkg, 'l')
}

/// File names of the `.kpack` archives a package ships as regular files,
/// as the format's tool lists them, in path order.
pub fn payload_archives(pkg: &Path) -> Vec<String> {
    listed(pkg, '-')
        .into_iter()
        .filter(|p| layout::is_archive_path(p))
        .filter_map(|p| p.rsplit('/').next().map(str::to_string))
        .collect()
}

/// `pip uninstall -y` of `dists`.
pub fn pip_uninstall(pip: &Path, dists: &[&str]) {
    ok(Command::new(pip)
        .args(["uninstall", "-y", "--disable-pip-version-check"])
        .args(dists));
}

/// No alias symlinks (docs/packaging.md, "Package naming"): no symlink in a
/// `.kpack/` directory of any package, and none at all in a device package
/// but a deb's `usr/share/doc/<name>` link to the generic package's doc
/// directory (Debian policy 12.5).
pub fn assert_no_alias_symlinks(p: &BuiltPackage) {
    let links = payload_symlinks(&p.path);
    let in_kpack: Vec<&String> = links
        .iter()
        .filter(|l| l.split('/').any(|c| c == layout::KPACK_DIR))
        .collect();
    assert!(
        in_kpack.is_empty(),
        "{}: symlinks in .kpack/: {in_kpack:?}",
        p.name
    );
    if p.group.is_some() {
        let doc = format!("usr/share/doc/{}", p.name);
        let other: Vec<&String> = links.iter().filter(|l| **l != doc).collect();
        assert!(
            other.is_empty(),
            "{}: device package carries symlinks {other:?}",
            p.name
        );
    }
}

/// Writes a wheel with python's zipfile: `files` (name, bytes) plus a
/// dist-info; `record_override` replaces the computed RECORD.
pub fn write_wheel(
    path: &Path,
    files: &[(String, Vec<u8>)],
    dist_info: &str,
    record_override: Option<&str>,
) {
    let stage = path.with_extension("stage");
    fs::create_dir_all(&stage).expect("stage");
    let mut list = String::new();
    for (i, (name, data)) in files.iter().enumerate() {
        let f = stage.join(format!("{i}"));
        fs::write(&f, data).expect("write");
        list.push_str(&format!("{}\t{}\n", name, f.display()));
    }
    fs::write(stage.join("list"), &list).expect("list");
    if let Some(r) = record_override {
        fs::write(stage.join("record"), r).expect("record");
    }
    let script = r#"
import base64, hashlib, sys, zipfile, os
out, stage, di = sys.argv[1], sys.argv[2], sys.argv[3]
rows = []
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for line in open(os.path.join(stage, "list")):
        name, src = line.rstrip("\n").split("\t")
        data = open(src, "rb").read()
        info = zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0))
        info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
        z.writestr(info, data, zipfile.ZIP_DEFLATED)
        h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{name},sha256={h},{len(data)}")
    rows.append(f"{di}/RECORD,,")
    rec = os.path.join(stage, "record")
    text = open(rec).read() if os.path.exists(rec) else "\n".join(rows) + "\n"
    z.writestr(zipfile.ZipInfo(f"{di}/RECORD", (2024, 1, 1, 0, 0, 0)), text)
"#;
    ok(Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(path)
        .arg(&stage)
        .arg(dist_info));
    fs::remove_dir_all(&stage).expect("cleanup");
}

/// A pure-Python wheel `name` `version` in `dir`: `payload` (path, bytes)
/// and a dist-info whose METADATA adds `meta` lines; with `pep658`, its
/// METADATA beside it as `<wheel>.metadata` too (PEP 658). Returns the
/// wheel's file name.
pub fn pure_wheel(
    dir: &Path,
    name: &str,
    version: &str,
    payload: Vec<(String, Vec<u8>)>,
    meta: &[String],
    pep658: bool,
) -> String {
    let under = name.replace('-', "_");
    let di = format!("{under}-{version}.dist-info");
    let mut metadata = format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n");
    for line in meta {
        metadata.push_str(line);
        metadata.push('\n');
    }
    let mut all = payload;
    all.push((format!("{di}/METADATA"), metadata.clone().into_bytes()));
    all.push((
        format!("{di}/WHEEL"),
        b"Wheel-Version: 1.0\nGenerator: rocm-kpack tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
            .to_vec(),
    ));
    let file = format!("{under}-{version}-py3-none-any.whl");
    write_wheel(&dir.join(&file), &all, &di, None);
    if pep658 {
        fs::write(dir.join(format!("{file}.metadata")), metadata).expect("metadata");
    }
    file
}

/// PEP 503 pages below `root/simple` for `projects` (project, file name in
/// `root/files`), each link with the file's sha256; a `<file>.metadata`
/// beside a file is announced with PEP 658's and PEP 714's attributes.
pub fn simple_pages(root: &Path, projects: &[(String, String)]) {
    let mut names: Vec<&String> = projects.iter().map(|(p, _)| p).collect();
    names.sort();
    names.dedup();
    let mut top = String::from("<!DOCTYPE html>\n<html><body>\n");
    for project in names {
        let mut links = String::new();
        for (_, file) in projects.iter().filter(|(p, _)| p == project) {
            let bytes = fs::read(root.join("files").join(file)).expect("file");
            let sha = hex::encode(Sha256::digest(&bytes));
            let meta = match fs::read(root.join("files").join(format!("{file}.metadata"))) {
                Ok(m) => {
                    let h = hex::encode(Sha256::digest(&m));
                    format!(
                        " data-dist-info-metadata=\"sha256={h}\" data-core-metadata=\"sha256={h}\""
                    )
                }
                Err(_) => String::new(),
            };
            links.push_str(&format!(
                "<a href=\"../../files/{file}#sha256={sha}\"{meta}>{file}</a>\n"
            ));
        }
        let page = root.join("simple").join(project);
        fs::create_dir_all(&page).expect("mkdir");
        fs::write(
            page.join("index.html"),
            format!("<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n"),
        )
        .expect("page");
        top.push_str(&format!("<a href=\"{project}/\">{project}</a>\n"));
    }
    top.push_str("</body></html>\n");
    fs::write(root.join("simple/index.html"), top).expect("index");
}

/// A binary rpm's header for test inputs: x86_64, no dependencies, xz -0,
/// a fixed build time; callers override what they test.
#[allow(dead_code)] // not every test binary that includes this module builds rpms
pub fn rpm_spec(name: &str, version: &str, summary: &str) -> rocm_kpack_package::rpm::RpmSpec {
    rocm_kpack_package::rpm::RpmSpec {
        name: name.into(),
        epoch: None,
        version: version.into(),
        release: "1".into(),
        arch: "x86_64".into(),
        summary: summary.into(),
        description: format!("{summary}."),
        license: "MIT".into(),
        group: "System Environment/Libraries".into(),
        url: None,
        packager: None,
        source_rpm: format!("{name}-{version}-1.src.rpm"),
        provides: Vec::new(),
        requires: Vec::new(),
        conflicts: Vec::new(),
        obsoletes: Vec::new(),
        recommends: Vec::new(),
        scripts: Default::default(),
        config_files: Vec::new(),
        file_triggers: Vec::new(),
        build_time: 1_704_067_200,
        changelog: None,
        compression: Compression::Xz,
        level: Some(0),
    }
}

/// uv from PyPI, installed by scripts/test.sh into `target/tools/uv`.
pub fn uv() -> PathBuf {
    let uv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/uv/bin/uv");
    assert!(
        uv.is_file(),
        "{} is missing: scripts/test.sh installs it (pip install --target target/tools/uv uv)",
        uv.display()
    );
    uv
}

/// A fresh virtual environment at `venv`; returns its Python.
pub fn venv(venv: &Path) -> PathBuf {
    ok(Command::new("python3").args(["-m", "venv"]).arg(venv));
    venv.join("bin/python")
}

/// `pip install --index-url INDEX ARGS...` into `python`'s environment,
/// straight (not through the fetcher), with neither the machine's pip
/// configuration nor a cache. Returns pip's output.
pub fn pip_install(python: &Path, index_url: &str, args: &[&str]) -> String {
    ok(Command::new(python)
        .args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-cache-dir",
            "--index-url",
            index_url,
        ])
        .args(args)
        .env("PIP_CONFIG_FILE", "/dev/null"))
}

/// The distributions installed in `python`'s environment (`pip list`),
/// by PEP 503 normalized name.
pub fn pip_installed(python: &Path) -> BTreeSet<String> {
    let out = ok(Command::new(python).args([
        "-m",
        "pip",
        "list",
        "--disable-pip-version-check",
        "--format=json",
    ]));
    let list: serde_json::Value = serde_json::from_str(&out).expect("pip list json");
    list.as_array()
        .expect("pip list: an array")
        .iter()
        .map(|d| {
            d["name"]
                .as_str()
                .expect("name")
                .to_lowercase()
                .replace(['_', '.'], "-")
        })
        .collect()
}

/// The kpack store's encoded objects, shared by every test that publishes
/// a store (`publish --cache`, kept in `target/tmp/store-cache`): the same
/// packages published again, by this process or another, copy the objects
/// encoded at the release level instead of encoding them again (most of a
/// publish's time). Entries are checked before use and written atomically,
/// so concurrent tests share it safely; the stores written are the same
/// with or without it (splitter/publish/src/cache.rs).
pub fn store_cache() -> PathBuf {
    crate::bins::profile_dir()
        .parent()
        .expect("target/<profile> has a parent")
        .join("tmp/store-cache")
}

/// `rocm-kpack publish` of `pkgs` as a pip index (PEP 503, nothing else)
/// into `repo`.
pub fn publish_pip(pkgs: &Path, repo: &Path) -> PublishReport {
    publish(
        pkgs,
        repo,
        &PublishOptions {
            pip: true,
            ..PublishOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("publish: {}", chain(&e)))
}
