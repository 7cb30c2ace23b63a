//! Hostile package metadata: names read from debs (control fields), rpms
//! (NAME, VERSION, RELEASE, ARCH) and wheels (file name, METADATA) never
//! become paths. `split-package` and `publish` refuse them with an error
//! naming the field and the file, and write nothing; the filesystem around
//! each run is snapshotted to prove it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rocm_kpack_package::compress::Compression;
use rocm_kpack_package::rpm::{write_rpm, RpmSpec};
use rocm_kpack_package::tree::Payload;
use rocm_kpack_test_support::bins;
use rocm_kpack_test_support::snapshot::snapshot;

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("run")
}

fn ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn kpack(args: &[&str]) -> Command {
    let mut c = bins::command("rocm-kpack");
    c.args(args)
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .env_remove("RUST_LOG");
    c
}

/// The over-long spelling: longer than any file name may be.
fn long() -> String {
    format!("a{}", "b".repeat(300))
}

/// A deb built by dpkg-deb (`--nocheck`: dpkg-deb itself would refuse
/// these control files, a hostile builder does not run it).
fn hostile_deb(dir: &Path, name: &str, control: &str) -> PathBuf {
    let tree = dir.join(format!("{name}.tree"));
    fs::create_dir_all(tree.join("DEBIAN")).unwrap();
    fs::create_dir_all(tree.join("usr/share/doc/x")).unwrap();
    fs::write(tree.join("DEBIAN/control"), control).unwrap();
    fs::write(tree.join("usr/share/doc/x/README"), "hello\n").unwrap();
    let deb = dir.join(format!("{name}.deb"));
    ok(Command::new("dpkg-deb")
        .args(["--nocheck", "--root-owner-group", "-Zgzip", "--build"])
        .arg(&tree)
        .arg(&deb));
    fs::remove_dir_all(&tree).unwrap();
    deb
}

fn control(package: &str, version: &str, arch: &str, source: Option<&str>) -> String {
    let source = source.map(|s| format!("Source: {s}\n")).unwrap_or_default();
    format!(
        "Package: {package}\n{source}Version: {version}\nArchitecture: {arch}\nMaintainer: T <t@example.org>\nDescription: x\n x\n"
    )
}

/// Runs `args` in `top` and checks: it failed, stderr names `field` and
/// says it refused, and nothing changed under `top` except below `out`
/// (which holds no file).
fn assert_refused(top: &Path, out: &Path, args: &[&str], field: &str, what: &str) {
    let before = snapshot(top);
    let res = run(&mut kpack(args));
    let stderr = String::from_utf8_lossy(&res.stderr);
    assert!(!res.status.success(), "{what}: {args:?} succeeded");
    assert!(
        stderr.contains("refusing") && stderr.contains(field),
        "{what}: {stderr}"
    );
    let diff = before.diff(&snapshot(top));
    let rel_out = out.strip_prefix(top).unwrap();
    assert!(
        diff.outside(&[rel_out]).is_empty(),
        "{what}: wrote outside {}:\n{diff}",
        out.display()
    );
    let files: Vec<_> = snapshot(out)
        .nodes
        .into_iter()
        .filter(|(_, n)| !matches!(n, rocm_kpack_test_support::snapshot::Node::Dir { .. }))
        .collect();
    assert!(files.is_empty(), "{what}: {files:?} written");
}

/// `split-package PKG --out <case>/out` and `publish <PKG's dir> --out
/// <case>/repo KIND --kpack-store` both refuse `pkg` for `field`.
fn refused_by_split_and_publish(
    top: &Path,
    case: &Path,
    pkg: &Path,
    kind: &str,
    field: &str,
    what: &str,
) {
    let out = case.join("out");
    let split = [
        "split-package",
        pkg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    assert_refused(top, &out, &split, field, what);
    let repo = case.join("repo");
    let pkgs = pkg.parent().unwrap().to_str().unwrap();
    let publish = [
        "publish",
        pkgs,
        "--out",
        repo.to_str().unwrap(),
        kind,
        "--kpack-store",
        "--no-fetcher",
    ];
    assert_refused(top, &repo, &publish, field, what);
}

#[test]
fn hostile_deb_control_fields_are_refused_by_split_package_and_publish() {
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path();
    let long = long();
    let cases: Vec<(&str, String)> = vec![
        // Package: .., absolute, encoded, scheme, over-long, upper case.
        ("Package", control("../../escaped", "1.0-1", "amd64", None)),
        ("Package", control("/tmp/abs", "1.0-1", "amd64", None)),
        ("Package", control("x%2f..%2fy", "1.0-1", "amd64", None)),
        ("Package", control("http:host", "1.0-1", "amd64", None)),
        ("Package", control(&long, "1.0-1", "amd64", None)),
        // Version and Architecture.
        (
            "Version",
            control("xx", "1/../../../escaped", "amd64", None),
        ),
        ("Version", control("xx", "1:%2e%2e", "amd64", None)),
        ("Version", control("xx", &format!("1{long}"), "amd64", None)),
        ("Architecture", control("xx", "1.0", "../../escaped", None)),
        ("Architecture", control("xx", "1.0", "amd64/..", None)),
        ("Architecture", control("xx", "1.0", "file:x", None)),
        // Source, with and without a version.
        (
            "Source",
            control("xx", "1.0", "amd64", Some("../../escaped")),
        ),
        ("Source", control("xx", "1.0", "amd64", Some("/abs"))),
        (
            "Source",
            control("xx", "1.0", "amd64", Some("ok (1/../..)")),
        ),
    ];
    for (i, (field, text)) in cases.iter().enumerate() {
        let case = top.join(format!("case{i}"));
        let pkgs = case.join("pkgs");
        fs::create_dir_all(&pkgs).unwrap();
        let deb = hostile_deb(&pkgs, "hostile", text);
        refused_by_split_and_publish(
            top,
            &case,
            &deb,
            "--apt",
            field,
            &format!("{field} in {text:?}"),
        );
    }
}

fn rpm_spec(name: &str, version: &str, release: &str, arch: &str) -> RpmSpec {
    RpmSpec {
        name: name.into(),
        epoch: None,
        version: version.into(),
        release: release.into(),
        arch: arch.into(),
        summary: "hostile".into(),
        description: "hostile".into(),
        license: "MIT".into(),
        group: "Unspecified".into(),
        url: None,
        packager: None,
        source_rpm: "x-1-1.src.rpm".into(),
        provides: Vec::new(),
        requires: Vec::new(),
        conflicts: Vec::new(),
        obsoletes: Vec::new(),
        recommends: Vec::new(),
        scripts: Default::default(),
        config_files: Vec::new(),
        file_triggers: Vec::new(),
        build_time: 1_700_000_000,
        changelog: None,
        compression: Compression::Gzip,
        level: Some(1),
    }
}

#[test]
fn hostile_rpm_tags_are_refused_by_split_package_and_publish() {
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path();
    let long = long();
    let cases = [
        ("NAME", rpm_spec("../../escaped", "1", "1", "x86_64")),
        ("NAME", rpm_spec("/tmp/abs", "1", "1", "x86_64")),
        ("NAME", rpm_spec("a%2F..", "1", "1", "x86_64")),
        ("NAME", rpm_spec(&long, "1", "1", "x86_64")),
        ("VERSION", rpm_spec("x", "1/../../..", "1", "x86_64")),
        ("VERSION", rpm_spec("x", "..", "1", "x86_64")),
        ("RELEASE", rpm_spec("x", "1", "1\n2", "x86_64")),
        ("RELEASE", rpm_spec("x", "1", "../x", "x86_64")),
        ("ARCH", rpm_spec("x", "1", "1", "../../escaped")),
        ("ARCH", rpm_spec("x", "1", "1", "http:host")),
        ("ARCH", rpm_spec("x", "1", "1", "%2e%2e")),
    ];
    for (i, (field, spec)) in cases.iter().enumerate() {
        let case = top.join(format!("case{i}"));
        let pkgs = case.join("pkgs");
        fs::create_dir_all(&pkgs).unwrap();
        let rpm = pkgs.join("hostile.rpm");
        write_rpm(
            fs::File::create(&rpm).unwrap(),
            spec,
            &Payload::new(),
            &case,
        )
        .expect("write rpm");
        let what = format!(
            "{field} {:?}/{:?}/{:?}/{:?}",
            spec.name, spec.version, spec.release, spec.arch
        );
        refused_by_split_and_publish(top, &case, &rpm, "--yum", field, &what);
    }
}

/// A wheel written by Python's zipfile with this METADATA.
fn wheel(path: &Path, dist_info: &str, name: &str, version: &str) {
    let script = r#"
import sys, zipfile
out, di, name, version = sys.argv[1:5]
with zipfile.ZipFile(out, "w") as z:
    z.writestr(f"{di}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    z.writestr(f"{di}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr(f"{di}/RECORD", "")
"#;
    ok(Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(path)
        .args([dist_info, name, version]));
}

#[test]
fn hostile_wheel_names_are_refused_by_split_package() {
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path();
    let long = long();
    // (file name, METADATA Name, METADATA Version, field)
    let cases = [
        ("x%2F..-1.0-py3-none-any.whl", "x", "1.0", "distribution"),
        ("http:host-1.0-py3-none-any.whl", "x", "1.0", "distribution"),
        ("x-..-py3-none-any.whl", "x", "1.0", "version"),
        ("x-1.0-py3-none-..%2F.whl", "x", "1.0", "tag"),
        (
            "x-1.0-py3-none-any.whl",
            "../../escaped",
            "1.0",
            "METADATA Name",
        ),
        (
            "x-1.0-py3-none-any.whl",
            "x",
            "1.0/../../..",
            "METADATA Version",
        ),
        ("x-1.0-py3-none-any.whl", &long, "1.0", "METADATA Name"),
    ];
    for (i, (file, name, version, field)) in cases.iter().enumerate() {
        let case = top.join(format!("case{i}"));
        fs::create_dir_all(&case).unwrap();
        let whl = case.join(file);
        wheel(&whl, "x-1.0.dist-info", name, version);
        let out = case.join("out");
        assert_refused(
            top,
            &out,
            &[
                "split-package",
                whl.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ],
            field,
            &format!("{file} {name:?} {version:?}"),
        );
    }
}
