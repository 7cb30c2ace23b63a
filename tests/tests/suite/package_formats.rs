//! `rocm-kpack package`: debs, rpms and wheels built from split
//! directories of real inputs (Debian's librocrand1, the committed
//! fixtures), checked with the ecosystems' own tools (dpkg-deb, dpkg,
//! lintian, rpm, rpmlint, rpmbuild for the rpmlint baseline) and read back
//! with the package readers; determinism; refusal of hostile and corrupt
//! inputs.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;

use rocm_kpack_format::archive::Archive;
use rocm_kpack_format::manifest::Manifest;
use rocm_kpack_package::compress::Compression;
use rocm_kpack_package::container::{ArWriter, EntryType, TarWriter, ZipWriter};
use rocm_kpack_package::deb::DebReader;
use rocm_kpack_package::rpm::RpmReader;
use rocm_kpack_package::wheel::{CoreMetadata, WheelReader};
use rocm_kpack_package::{package, Format, PackageError, PackageReport};
use rocm_kpack_test_support::packages::*;

fn by_name(report: &PackageReport, format: Format) -> BTreeMap<String, std::path::PathBuf> {
    report
        .packages
        .iter()
        .filter(|p| p.format == format)
        .map(|p| (p.name.clone(), p.path.clone()))
        .collect()
}

/// Installed size as dpkg-gencontrol computes it, from an extracted tree.
fn dpkg_installed_size(root: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        total += 1;
        for e in fs::read_dir(&d).expect("read_dir") {
            let e = e.expect("entry");
            let md = fs::symlink_metadata(e.path()).expect("lstat");
            if md.is_dir() {
                stack.push(e.path());
            } else {
                total += md.len().div_ceil(1024);
            }
        }
    }
    total
}

#[test]
fn librocrand_debs_keep_the_metadata_pass_lintian_and_install() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (split, groups) = rocrand_split(tmp.path());
    assert_eq!(
        groups,
        [
            "gfx103X-dgpu",
            "gfx803",
            "gfx900",
            "gfx906",
            "gfx908",
            "gfx90a"
        ]
    );
    let out = tmp.path().join("out");
    let report = build(&split, &out, &rocrand_options(&[Format::Deb]));
    let debs = by_name(&report, Format::Deb);
    let names: Vec<&str> = debs.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "librocrand1",
            "librocrand1-gfx103x",
            "librocrand1-gfx103x-dgpu",
            "librocrand1-gfx803",
            "librocrand1-gfx80x",
            "librocrand1-gfx900",
            "librocrand1-gfx906",
            "librocrand1-gfx908",
            "librocrand1-gfx90a",
            "librocrand1-gfx90x"
        ]
    );
    let original = DebReader::open(&rocrand_deb()).expect("original");

    // Generic: the original's fields, files and scripts.
    let generic = DebReader::open(&debs["librocrand1"]).expect("generic");
    for field in [
        "Depends",
        "Section",
        "Maintainer",
        "Description",
        "Homepage",
    ] {
        assert_eq!(
            generic.control.get(field),
            original.control.get(field),
            "{field}"
        );
    }
    // Newer than Debian's in dpkg's own ordering (so apt prefers it and
    // upgrades the fat package to it), older than Debian's next revision;
    // the source version stays Debian's, as a binNMU says it.
    assert_eq!(generic.control.get("Version"), Some("5.3.3-4+kpack1"));
    assert_eq!(generic.control.get("Source"), Some("rocrand (5.3.3-4)"));
    let newer = |a: &str, b: &str| {
        Command::new("dpkg")
            .args(["--compare-versions", a, "gt", b])
            .status()
            .expect("dpkg")
            .success()
    };
    assert!(newer(
        "5.3.3-4+kpack1",
        original.control.get("Version").expect("version")
    ));
    assert!(newer("5.3.3-5", "5.3.3-4+kpack1"));
    assert_eq!(generic.control.get("Recommends"), Some("rocm-kpack-fetch"));
    for name in ["shlibs", "symbols", "triggers"] {
        let a = original
            .control_files
            .iter()
            .find(|f| f.name == name)
            .expect("original file");
        let b = generic
            .control_files
            .iter()
            .find(|f| f.name == name)
            .expect("generic file");
        assert_eq!(a.data, b.data, "{name}");
    }

    // Device packages: relations, targets, one archive per processor
    // under the name `@GFXARCH@` expands to, no alias symlinks.
    let expected_targets = [
        ("librocrand1-gfx803", "gfx803"),
        ("librocrand1-gfx900", "gfx900"),
        ("librocrand1-gfx906", "gfx906"),
        ("librocrand1-gfx908", "gfx908"),
        ("librocrand1-gfx90a", "gfx90a"),
        ("librocrand1-gfx103x-dgpu", "gfx1030"),
    ];
    for (name, targets) in expected_targets {
        let d = DebReader::open(&debs[name]).expect("device deb");
        assert_eq!(
            d.control.get("Depends"),
            Some("librocrand1 (= 5.3.3-4+kpack1)")
        );
        assert_eq!(d.control.get("Provides"), Some("librocrand1-device-code"));
        assert_eq!(d.control.get("X-Kpack-Gfx"), Some(targets));
        assert_eq!(d.control.get("Version"), Some("5.3.3-4+kpack1"));
        let expected: Vec<String> = targets
            .split(' ')
            .map(|t| format!("librocrand_{t}.kpack"))
            .collect();
        assert_eq!(payload_archives(&debs[name]), expected, "{name}");
        ok(Command::new("dpkg-deb").arg("-I").arg(&debs[name]));
    }
    for p in &report.packages {
        assert_no_alias_symlinks(p);
    }

    // Installed-Size as dpkg computes it, for every package.
    for (name, path) in &debs {
        let x = tmp.path().join(format!("x-{name}"));
        ok(Command::new("dpkg-deb").arg("-x").arg(path).arg(&x));
        let d = DebReader::open(path).expect("deb");
        assert_eq!(
            d.control.get("Installed-Size").map(str::to_string),
            Some(dpkg_installed_size(&x).to_string()),
            "{name}"
        );
    }

    // lintian: no error tag the original does not have.
    let baseline: BTreeSet<String> = lintian_errors(&rocrand_deb()).into_iter().collect();
    for (name, path) in &debs {
        let extra: Vec<String> = lintian_errors(path)
            .into_iter()
            .filter(|t| !baseline.contains(t))
            .collect();
        assert!(extra.is_empty(), "lintian errors in {name}: {extra:?}");
    }

    // dpkg installs generic + one device package; every file owned once.
    let root = tmp.path().join("root");
    dpkg_root(&root);
    ok(Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .args(["--force-not-root", "--force-depends", "-i"])
        .arg(&debs["librocrand1"])
        .arg(&debs["librocrand1-gfx90a"]));
    let status = fs::read_to_string(root.join("var/lib/dpkg/status")).expect("status");
    for pkg in ["librocrand1", "librocrand1-gfx90a"] {
        assert!(
            status.contains(&format!("Package: {pkg}\nStatus: install ok installed")),
            "{pkg} not installed:\n{status}"
        );
    }
    ok(Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .arg("--verify"));
    let mut owners: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for pkg in ["librocrand1", "librocrand1-gfx90a"] {
        let list = ok(Command::new("dpkg")
            .arg(format!("--root={}", root.display()))
            .args(["-L", pkg]));
        for f in list.lines() {
            let p = root.join(f.trim_start_matches('/'));
            if !fs::symlink_metadata(&p).expect("lstat").is_dir() {
                owners
                    .entry(f.to_string())
                    .or_default()
                    .push(pkg.to_string());
            }
        }
    }
    for (f, pkgs) in &owners {
        assert_eq!(pkgs.len(), 1, "{f} owned by {pkgs:?}");
    }
    let mut on_disk = Vec::new();
    let mut stack = vec![root.join("usr")];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            if fs::symlink_metadata(&p).expect("lstat").is_dir() {
                stack.push(p);
            } else {
                on_disk.push(format!(
                    "/{}",
                    p.strip_prefix(&root).expect("prefix").display()
                ));
            }
        }
    }
    assert!(on_disk.len() > 5);
    for f in &on_disk {
        assert!(owners.contains_key(f), "{f} is not owned by any package");
        let o = ok(Command::new("dpkg")
            .arg(format!("--root={}", root.display()))
            .args(["-S", f]));
        assert!(o.starts_with("librocrand1"), "{f}: {o}");
    }

    // The installed tree resolves like a runtime would: the manifest
    // names the very file a pattern-only runtime opens for gfx90a:xnack-
    // (`@GFXARCH@` = `gfx90a:xnack-`, then `gfx90a`), a regular file.
    let kdir = root.join(LIBDIR).join(".kpack");
    let m = Manifest::read(&kdir.join("librocrand.kpm")).expect("manifest");
    let entry = m
        .file_for_arch("gfx90a:xnack-")
        .expect("gfx90a:xnack- in manifest");
    assert_eq!(entry.filename, "librocrand_gfx90a.kpack");
    assert_eq!(entry.family, "gfx90a");
    assert!(!kdir.join("librocrand_gfx90a:xnack-.kpack").exists());
    let path = kdir.join("librocrand_gfx90a.kpack");
    assert!(fs::symlink_metadata(&path)
        .expect("lstat")
        .file_type()
        .is_file());
    let archive = Archive::open(&path).expect("archive");
    assert_eq!(archive.gfx_arch_family(), "gfx90a");
    let key = "librocrand.so.1.1#0";
    let fat = split.join("generic").join(LIBDIR).join("librocrand.so.1.1");
    assert_eq!(
        archive.kernel(key, "gfx90a:xnack-").expect("kernel"),
        code_objects(&fat)[&(0, "gfx90a:xnack-".to_string())]
    );
    assert!(!kdir.join("librocrand_gfx1030.kpack").exists());

    // The device package alone does not install: it needs the generic one.
    let root2 = tmp.path().join("root2");
    dpkg_root(&root2);
    let o = run(Command::new("dpkg")
        .arg(format!("--root={}", root2.display()))
        .args(["--force-not-root", "-i"])
        .arg(&debs["librocrand1-gfx803"]));
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("depends on librocrand1 (= 5.3.3-4+kpack1)")
    );
}

/// rpmlint's E: tags for a package.
fn rpmlint_errors(rpm: &Path) -> BTreeSet<String> {
    let o = run(Command::new("rpmlint").arg(rpm));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let (_, rest) = l.split_once(": E: ")?;
            rest.split_whitespace().next().map(str::to_string)
        })
        .collect()
}

/// rpmlint errors of an ordinary unsigned package built by rpmbuild.
fn rpmbuild_baseline(dir: &Path) -> BTreeSet<String> {
    let top = dir.join("rpmbuild");
    fs::create_dir_all(top.join("SPECS")).expect("mkdir");
    let spec = top.join("SPECS/base.spec");
    fs::write(
        &spec,
        "Name: baseline\nVersion: 1.0\nRelease: 1\nSummary: Baseline package\nLicense: MIT\nGroup: System Environment/Libraries\nBuildArch: noarch\n\
%description\nA baseline package for rpmlint.\n%install\nmkdir -p %{buildroot}/usr/share/baseline\necho hi > %{buildroot}/usr/share/baseline/hello.txt\n\
%files\n/usr/share/baseline/hello.txt\n%changelog\n* Mon Jan 01 2024 Test <test@example.org> - 1.0-1\n- Baseline.\n",
    )
    .expect("spec");
    ok(Command::new("rpmbuild")
        .arg("--define")
        .arg(format!("_topdir {}", top.display()))
        .args(["--quiet", "-bb"])
        .arg(&spec));
    let rpm = top.join("RPMS/noarch/baseline-1.0-1.noarch.rpm");
    rpmlint_errors(&rpm)
}

#[test]
fn librocrand_rpms_pass_rpm_checks_and_rpmlint() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (split, _) = rocrand_split(tmp.path());
    let out = tmp.path().join("out");
    let report = build(&split, &out, &rocrand_options(&[Format::Rpm]));
    let rpms = by_name(&report, Format::Rpm);
    assert_eq!(
        rpms.values()
            .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
            .collect::<Vec<_>>(),
        [
            "librocrand1-5.3.3-4.kpack1.x86_64.rpm",
            "librocrand1-gfx103x-5.3.3-4.kpack1.noarch.rpm",
            "librocrand1-gfx103x-dgpu-5.3.3-4.kpack1.noarch.rpm",
            "librocrand1-gfx803-5.3.3-4.kpack1.noarch.rpm",
            "librocrand1-gfx80x-5.3.3-4.kpack1.noarch.rpm",
            "librocrand1-gfx900-5.3.3-4.kpack1.noarch.rpm",
            "librocrand1-gfx906-5.3.3-4.kpack1.noarch.rpm",
            "librocrand1-gfx908-5.3.3-4.kpack1.noarch.rpm",
            "librocrand1-gfx90a-5.3.3-4.kpack1.noarch.rpm",
            "librocrand1-gfx90x-5.3.3-4.kpack1.noarch.rpm",
        ]
    );
    let baseline = rpmbuild_baseline(tmp.path());
    for (name, path) in &rpms {
        let k = ok(Command::new("rpm").arg("-K").arg(path));
        assert!(k.trim_end().ends_with("digests OK"), "{name}: {k}");
        let info = ok(Command::new("rpm").arg("-qip").arg(path));
        assert!(info.contains(&format!("Name        : {name}\n")), "{info}");
        assert!(
            info.contains("Version     : 5.3.3\nRelease     : 4.kpack1\n"),
            "{info}"
        );
        let extra: Vec<String> = rpmlint_errors(path)
            .difference(&baseline)
            .cloned()
            .collect();
        assert!(
            extra.is_empty(),
            "rpmlint errors in {name} beyond an rpmbuild package's: {extra:?}"
        );
    }
    // The release suffix is newer in rpm's own ordering than the fat
    // package's release, older than the next one.
    let vercmp = |a: &str, b: &str| {
        ok(Command::new("rpm").args([
            "--eval",
            &format!("%{{lua: print(rpm.vercmp(\"{a}\", \"{b}\"))}}"),
        ]))
        .trim()
        .to_string()
    };
    assert_eq!(vercmp("5.3.3-4.kpack1", "5.3.3-4"), "1");
    assert_eq!(vercmp("5.3.3-4.kpack1", "5.3.3-5"), "-1");
    let dev = &rpms["librocrand1-gfx90a"];
    let req = ok(Command::new("rpm").args(["-qp", "--requires"]).arg(dev));
    assert!(
        req.lines().any(|l| l == "librocrand1 = 5.3.3-4.kpack1"),
        "{req}"
    );
    let prov = ok(Command::new("rpm").args(["-qp", "--provides"]).arg(dev));
    for p in [
        "librocrand1-device-code",
        "rocm-kpack(gfx90a)",
        "librocrand1-gfx90a = 5.3.3-4.kpack1",
    ] {
        assert!(prov.lines().any(|l| l == p), "missing provide {p}: {prov}");
    }
    let obs = ok(Command::new("rpm").args(["-qp", "--obsoletes"]).arg(dev));
    assert_eq!(obs.trim(), "librocrand1-gfx90x < 5.3.3-4.kpack1", "{obs}");
    assert_eq!(payload_archives(dev), ["librocrand_gfx90a.kpack"]);
    let transitional = &rpms["librocrand1-gfx90x"];
    let req = ok(Command::new("rpm")
        .args(["-qp", "--requires"])
        .arg(transitional));
    for r in [
        "librocrand1 = 5.3.3-4.kpack1",
        "librocrand1-gfx900 = 5.3.3-4.kpack1",
        "librocrand1-gfx90a = 5.3.3-4.kpack1",
    ] {
        assert!(req.lines().any(|l| l == r), "missing {r}: {req}");
    }
    assert!(payload_archives(transitional).is_empty());
    for p in &report.packages {
        assert_no_alias_symlinks(p);
    }

    // The generic rpm recommends the fetcher, as the generic deb does (rpm
    // reads the weak dependency back; our reader too).
    let rec = ok(Command::new("rpm")
        .args(["-qp", "--recommends"])
        .arg(&rpms["librocrand1"]));
    assert_eq!(rec.trim(), "rocm-kpack-fetch");
    // Read back: the generic payload is the generic tree, byte for byte.
    let generic = RpmReader::open(&rpms["librocrand1"]).expect("open");
    assert_eq!(
        generic
            .recommends()
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>(),
        ["rocm-kpack-fetch"]
    );
    let mut seen = BTreeMap::new();
    generic
        .for_each_entry(|path, mode, size, data| {
            let mut v = Vec::new();
            data.read_to_end(&mut v).expect("read");
            assert_eq!(v.len() as u64, size);
            seen.insert(path.to_string(), (mode, v));
            Ok(())
        })
        .expect("payload");
    let lib = format!("{LIBDIR}/librocrand.so.1.1");
    assert_eq!(
        seen[&lib].1,
        fs::read(split.join("generic").join(&lib)).expect("read")
    );
    assert_eq!(
        seen[&format!("{LIBDIR}/librocrand.so.1")].1,
        b"librocrand.so.1.1"
    );
    let files = generic.files();
    assert_eq!(files.len(), seen.len());
}

#[test]
fn wheels_carry_extras_device_files_and_exact_records() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (split, groups) = wheel_split(tmp.path());
    // gfx11-generic code has a tree (and a package) of its own.
    assert_eq!(
        groups,
        [
            "gfx103X-dgpu",
            "gfx11-generic",
            "gfx110X-dgpu",
            "gfx90a",
            "gfx94X"
        ]
    );
    let out = tmp.path().join("out");
    let report = build(&split, &out, &wheel_options());
    let mut files: Vec<String> = report
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
    assert_eq!(
        files,
        [
            "kpkg-1.0+kpack1-py3-none-linux_x86_64.whl",
            "kpkg_device_gfx103x_dgpu-1.0+kpack1-py3-none-linux_x86_64.whl",
            "kpkg_device_gfx110x_dgpu-1.0+kpack1-py3-none-linux_x86_64.whl",
            "kpkg_device_gfx11_generic-1.0+kpack1-py3-none-linux_x86_64.whl",
            "kpkg_device_gfx90a-1.0+kpack1-py3-none-linux_x86_64.whl",
            "kpkg_device_gfx94x-1.0+kpack1-py3-none-linux_x86_64.whl",
        ]
    );
    for p in &report.packages {
        assert_no_alias_symlinks(p);
    }
    for f in &files {
        let w = WheelReader::open(&out.join(f)).expect("open wheel");
        w.verify_record().expect("RECORD matches");
        assert_eq!(w.wheel.get("Root-Is-Purelib"), Some("false"));
        assert_eq!(w.wheel.get("Wheel-Version"), Some("1.0"));
        assert_eq!(
            w.wheel.get_all("Tag").collect::<Vec<_>>(),
            ["py3-none-linux_x86_64"]
        );
        let record_last = w.members.last().expect("members");
        assert!(record_last.ends_with(".dist-info/RECORD"), "{record_last}");
    }
    let base =
        WheelReader::open(&out.join("kpkg-1.0+kpack1-py3-none-linux_x86_64.whl")).expect("base");
    let md = &base.metadata;
    assert_eq!(md.get("Requires-Python"), Some(">=3.8"));
    let extras: Vec<&str> = md.get_all("Provides-Extra").collect();
    assert_eq!(
        extras,
        [
            "device-gfx103x-dgpu",
            "device-gfx11-generic",
            "device-gfx110x-dgpu",
            "device-gfx90a",
            "device-gfx94x",
            "device-all",
            // The 2025 families' extras, served by the wheels now carrying them.
            "device-gfx90x",
            "device-gfx103x",
            "device-gfx110x"
        ]
    );
    let reqs: Vec<&str> = md.get_all("Requires-Dist").collect();
    assert!(
        reqs.contains(&"kpkg-device-gfx110x-dgpu==1.0+kpack1; extra == \"device-gfx110x-dgpu\""),
        "{reqs:?}"
    );
    assert!(
        reqs.contains(&"kpkg-device-gfx110x-dgpu==1.0+kpack1; extra == \"device-all\""),
        "{reqs:?}"
    );
    assert!(
        reqs.contains(&"kpkg-device-gfx110x-dgpu==1.0+kpack1; extra == \"device-gfx110x\""),
        "{reqs:?}"
    );
    assert!(
        reqs.contains(&"kpkg-device-gfx90a==1.0+kpack1; extra == \"device-gfx90x\""),
        "{reqs:?}"
    );
    assert!(base.members.contains(&"kpkg/.kpack/kpkg.kpm".to_string()));
    assert!(base
        .members
        .contains(&"kpkg-1.0+kpack1.dist-info/top_level.txt".to_string()));
    assert!(!base
        .members
        .iter()
        .any(|m| m.ends_with(".kpack") && m.contains("_gfx")));

    let dev = WheelReader::open(
        &out.join("kpkg_device_gfx110x_dgpu-1.0+kpack1-py3-none-linux_x86_64.whl"),
    )
    .expect("device");
    assert_eq!(dev.name(), "kpkg-device-gfx110x-dgpu");
    // The family carries gfx11-generic, whose code is in its own wheel.
    assert_eq!(
        dev.metadata.get_all("Requires-Dist").collect::<Vec<_>>(),
        ["kpkg==1.0+kpack1", "kpkg-device-gfx11-generic==1.0+kpack1"]
    );
    // Members outside the dist-info directory.
    let payload = |w: &WheelReader| -> Vec<String> {
        w.members
            .iter()
            .filter(|m| !m.contains(".dist-info/"))
            .cloned()
            .collect()
    };
    assert_eq!(
        payload(&dev),
        [
            "kpkg/.kpack/kpkg_gfx1100.kpack",
            "kpkg/.kpack/kpkg_gfx1101.kpack",
            "kpkg/hsa/gfx1100/fixture.co"
        ]
    );
    let mut archive_bytes = Vec::new();
    dev.for_each_file(|name, _, _, data| {
        if name.ends_with("kpkg_gfx1101.kpack") {
            data.read_to_end(&mut archive_bytes).expect("read");
        }
        Ok(())
    })
    .expect("files");
    assert_eq!(
        archive_bytes,
        fs::read(split.join("gfx110X-dgpu/kpkg/.kpack/kpkg_gfx1101.kpack")).expect("read")
    );
    let isa = WheelReader::open(
        &out.join("kpkg_device_gfx11_generic-1.0+kpack1-py3-none-linux_x86_64.whl"),
    )
    .expect("generic-ISA wheel");
    assert_eq!(isa.name(), "kpkg-device-gfx11-generic");
    assert_eq!(
        isa.metadata.get_all("Requires-Dist").collect::<Vec<_>>(),
        ["kpkg==1.0+kpack1"]
    );
    assert_eq!(payload(&isa), ["kpkg/.kpack/kpkg_gfx11-generic.kpack"]);
    // Families without a generic-ISA tree depend on the base wheel only.
    let dev94 =
        WheelReader::open(&out.join("kpkg_device_gfx94x-1.0+kpack1-py3-none-linux_x86_64.whl"))
            .expect("gfx94x");
    assert_eq!(
        dev94.metadata.get_all("Requires-Dist").collect::<Vec<_>>(),
        ["kpkg==1.0+kpack1"]
    );
    // Python's zipfile agrees on every entry and its date.
    let py = "import zipfile,sys\nz=zipfile.ZipFile(sys.argv[1])\nassert z.testzip() is None\nprint(sorted(set(i.date_time for i in z.infolist())))";
    let dates = ok(Command::new("python3")
        .arg("-c")
        .arg(py)
        .arg(out.join(&files[0])));
    assert_eq!(dates.trim(), "[(2024, 1, 1, 0, 0, 0)]");
}

#[test]
fn packaging_is_deterministic() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (split, _) = fixture_split(tmp.path());
    let opts = fixture_options(&[Format::Deb, Format::Rpm]);
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    build(&split, &a, &opts);
    build(&split, &b, &opts);
    let (wsplit, _) = wheel_split(tmp.path());
    build(&wsplit, &a, &wheel_options());
    build(&wsplit, &b, &wheel_options());
    let sa = snapshot(&a);
    // debs and rpms: generic, 5 device packages, and the transitional ones
    // of the 2025 families gfx90X, gfx103X, gfx110X; wheels: no transitional ones.
    assert_eq!(sa.len(), 9 + 9 + 6, "{:?}", sa.keys().collect::<Vec<_>>());
    assert!(sa == snapshot(&b), "two runs differ");
    // Rerun into the same directory: refused (the overwrite rule) unless
    // replacing, and then the same bytes.
    assert!(rocm_kpack_package::package(&split, &a, &opts).is_err());
    assert!(sa == snapshot(&a));
    let mut again = opts.clone();
    again.replace_existing = true;
    build(&split, &a, &again);
    assert!(sa == snapshot(&a));
    // The timestamp is SOURCE_DATE_EPOCH's: another value, other bytes.
    let mut later = opts.clone();
    later.source_date_epoch += 86_400;
    let c = tmp.path().join("c");
    build(&split, &c, &later);
    let sc = snapshot(&c);
    let deb = "libfixture1_1.0-1+kpack1_amd64.deb";
    assert_ne!(sa[deb], sc[deb]);
    // Other compressions work and are deterministic too.
    for comp in [Compression::Gzip, Compression::Zstd, Compression::None] {
        let mut o = opts.clone();
        o.compression = comp;
        o.level = None;
        o.device_compression = Some(comp);
        o.device_level = None;
        let d1 = tmp.path().join(format!("{comp:?}1"));
        let d2 = tmp.path().join(format!("{comp:?}2"));
        build(&split, &d1, &o);
        build(&split, &d2, &o);
        assert!(snapshot(&d1) == snapshot(&d2), "{comp:?}");
        let x = tmp.path().join(format!("x{comp:?}"));
        ok(Command::new("dpkg-deb").arg("-x").arg(d1.join(deb)).arg(&x));
        let k = ok(Command::new("rpm")
            .arg("-K")
            .arg(d1.join("libfixture1-1.0-1.kpack1.x86_64.rpm")));
        assert!(k.contains("digests OK"), "{comp:?}: {k}");
    }
}

fn expect_err(r: Result<PackageReport, PackageError>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => chain(&e),
    }
}

fn no_packages(dir: &Path) {
    if dir.exists() {
        let left: Vec<_> = fs::read_dir(dir).expect("read_dir").collect();
        assert!(
            left.is_empty(),
            "{} holds {} entries",
            dir.display(),
            left.len()
        );
    }
}

#[test]
fn hostile_and_corrupt_split_dirs_are_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let opts = fixture_options(&[Format::Deb, Format::Rpm]);

    // A symlink escaping the root.
    let (split, _) = fixture_split(&tmp.path().join("s1"));
    symlink(
        "../../../../../etc/passwd",
        split.join("generic").join(LIBDIR).join("evil"),
    )
    .expect("symlink");
    let out = tmp.path().join("out1");
    let e = expect_err(package(&split, &out, &opts));
    assert!(e.contains("evil") && e.contains("escapes the root"), "{e}");
    no_packages(&out);

    // Output inside the split directory.
    let (split, _) = fixture_split(&tmp.path().join("s2"));
    let e = expect_err(package(&split, &split.join("generic/out"), &opts));
    assert!(e.contains("inside the split directory"), "{e}");
    assert!(
        !split.join("generic/out").exists(),
        "output created inside the split directory"
    );

    // A corrupt archive in a device tree.
    let (split, _) = fixture_split(&tmp.path().join("s3"));
    let bad = split
        .join("gfx110X-dgpu")
        .join(LIBDIR)
        .join(".kpack/libfixture_gfx1100.kpack");
    let mut bytes = fs::read(&bad).expect("read");
    bytes.truncate(40);
    fs::write(&bad, bytes).expect("write");
    let out = tmp.path().join("out3");
    let e = expect_err(package(&split, &out, &opts));
    assert!(e.contains("libfixture_gfx1100.kpack"), "{e}");
    no_packages(&out);

    // A manifest that does not match the device tree's archive.
    let (split, _) = fixture_split(&tmp.path().join("s4"));
    let arch = split
        .join("gfx90a")
        .join(LIBDIR)
        .join(".kpack/libfixture_gfx90a.kpack");
    // Replace the archive with another valid one: not what the .kpm lists.
    let other = fs::read(
        split
            .join("gfx103X-dgpu")
            .join(LIBDIR)
            .join(".kpack/libfixture_gfx1030.kpack"),
    )
    .expect("read");
    fs::write(&arch, other).expect("write");
    let out = tmp.path().join("out4");
    let e = expect_err(package(&split, &out, &opts));
    assert!(
        e.contains("libfixture.kpm") && e.contains("does not match"),
        "{e}"
    );
    no_packages(&out);

    // A device group directory whose name cannot be a package name.
    let (split, _) = fixture_split(&tmp.path().join("s5"));
    fs::create_dir_all(split.join("gfx 1")).expect("mkdir");
    let e = expect_err(package(&split, &tmp.path().join("out5"), &opts));
    assert!(e.contains("gfx 1"), "{e}");

    // Missing metadata.
    let (split, _) = fixture_split(&tmp.path().join("s6"));
    let mut o = opts.clone();
    o.meta.version.clear();
    let e = expect_err(package(&split, &tmp.path().join("out6"), &o));
    assert!(e.contains("no version"), "{e}");
}

/// A deb whose data archive holds the given (name, type, link, data).
/// Names go into the header bytes as given: `tar::Header::set_path` (and
/// so the product's `TarWriter`) refuses the `..` these tests need.
fn craft_deb(path: &Path, entries: &[(&str, EntryType, &str, &[u8])]) {
    let mut tar = tar::Builder::new(Vec::new());
    for (name, kind, link, data) in entries {
        let mut h = tar::Header::new_gnu();
        h.as_old_mut()
            .name
            .get_mut(..name.len())
            .expect("short name")
            .copy_from_slice(name.as_bytes());
        h.set_entry_type(match kind {
            EntryType::File => tar::EntryType::Regular,
            EntryType::Dir => tar::EntryType::Directory,
            EntryType::Symlink => tar::EntryType::Symlink,
        });
        if !link.is_empty() {
            h.set_link_name(link).expect("link");
        }
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        h.set_cksum();
        tar.append(&h, *data).expect("tar");
    }
    let data = tar.into_inner().expect("tar");
    let mut ctl = TarWriter::new(Vec::new(), 0);
    let control =
        b"Package: evil\nVersion: 1\nArchitecture: all\nMaintainer: x <x@x>\nDescription: x\n";
    let mut r: &[u8] = control;
    ctl.append(
        "./control",
        EntryType::File,
        0o644,
        control.len() as u64,
        "",
        Some(&mut r),
    )
    .expect("ctl");
    let ctl = ctl.finish().expect("ctl");
    let f = fs::File::create(path).expect("create");
    let mut ar = ArWriter::new(f, 0);
    ar.add_bytes("debian-binary", b"2.0\n").expect("ar");
    ar.add_bytes("control.tar", &ctl).expect("ar");
    ar.add_bytes("data.tar", &data).expect("ar");
    ar.finish().expect("ar");
}

#[test]
fn corrupt_and_hostile_packages_are_refused_by_the_readers() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (split, _) = fixture_split(tmp.path());
    let out = tmp.path().join("out");
    build(&split, &out, &fixture_options(&[Format::Deb, Format::Rpm]));
    let deb = out.join("libfixture1_1.0-1+kpack1_amd64.deb");
    let rpm = out.join("libfixture1-1.0-1.kpack1.x86_64.rpm");

    // Truncated deb, garbage deb.
    let t = tmp.path().join("trunc.deb");
    let bytes = fs::read(&deb).expect("read");
    fs::write(&t, &bytes[..bytes.len() / 2]).expect("write");
    let e = chain(&DebReader::open(&t).expect_err("truncated deb"));
    assert!(e.contains("trunc.deb") && e.contains("past the end"), "{e}");
    fs::write(&t, b"not a package at all").expect("write");
    let e = chain(&DebReader::open(&t).expect_err("garbage"));
    assert!(e.contains("not an ar archive"), "{e}");

    // A corrupt data member: the reader fails while streaming.
    let mut bytes = fs::read(&deb).expect("read");
    let n = bytes.len();
    for b in &mut bytes[n - 2000..n - 1000] {
        *b ^= 0x5a;
    }
    fs::write(&t, &bytes).expect("write");
    let r = DebReader::open(&t).expect("control still readable");
    let e = r.for_each_entry(|_, d| {
        std::io::copy(d, &mut std::io::sink()).map_err(|e| PackageError::Invalid(e.to_string()))?;
        Ok(())
    });
    assert!(e.is_err(), "corrupt xz data accepted");

    // rpm: a flipped header byte fails the header digest; a flipped payload
    // byte fails the payload digest.
    let r = RpmReader::open(&rpm).expect("rpm");
    let mut bytes = fs::read(&rpm).expect("read");
    // A byte in the header's string data: still parses, digest differs.
    let hpos = r.header.end as usize - 40;
    bytes[hpos] ^= 1;
    let t = tmp.path().join("bad.rpm");
    fs::write(&t, &bytes).expect("write");
    let e = chain(&RpmReader::open(&t).expect_err("header digest"));
    assert!(
        e.contains("bad.rpm") && e.contains("header SHA256 digest mismatch"),
        "{e}"
    );
    let mut bytes = fs::read(&rpm).expect("read");
    let last = bytes.len() - 100;
    bytes[last] ^= 1;
    fs::write(&t, &bytes).expect("write");
    let r = RpmReader::open(&t).expect("header intact");
    let e = chain(&r.verify_payload().expect_err("payload digest"));
    assert!(e.contains("payload SHA256 digest mismatch"), "{e}");
    fs::write(&t, &fs::read(&rpm).expect("read")[..300]).expect("write");
    assert!(RpmReader::open(&t).is_err());

    // Hostile deb members: `..`, a path below a symlink to /etc.
    let h = tmp.path().join("dotdot.deb");
    craft_deb(&h, &[("./usr/../../escape", EntryType::File, "", b"x")]);
    let dest = tmp.path().join("x1");
    fs::create_dir_all(&dest).expect("mkdir");
    let e = chain(
        &DebReader::open(&h)
            .expect("open")
            .extract(&dest)
            .expect_err("dotdot"),
    );
    assert!(e.contains("`..` path component"), "{e}");
    assert!(!tmp.path().join("escape").exists());
    let h = tmp.path().join("link.deb");
    let outside = tmp.path().join("outside");
    fs::create_dir_all(&outside).expect("mkdir");
    craft_deb(
        &h,
        &[
            ("./usr/", EntryType::Dir, "", b""),
            (
                "./usr/lib",
                EntryType::Symlink,
                outside.to_str().expect("utf8"),
                b"",
            ),
            ("./usr/lib/passwd", EntryType::File, "", b"pwned"),
        ],
    );
    let dest = tmp.path().join("x2");
    fs::create_dir_all(&dest).expect("mkdir");
    let e = chain(
        &DebReader::open(&h)
            .expect("open")
            .extract(&dest)
            .expect_err("below symlink"),
    );
    assert!(e.contains("below a symlink"), "{e}");
    assert!(!outside.join("passwd").exists());
    let h = tmp.path().join("rel.deb");
    craft_deb(&h, &[("./a", EntryType::Symlink, "../../etc", b"")]);
    let dest = tmp.path().join("x3");
    fs::create_dir_all(&dest).expect("mkdir");
    let e = chain(
        &DebReader::open(&h)
            .expect("open")
            .extract(&dest)
            .expect_err("escaping link"),
    );
    assert!(e.contains("escapes the root"), "{e}");
    // A good deb extracts to the payload it was built from.
    let dest = tmp.path().join("x4");
    fs::create_dir_all(&dest).expect("mkdir");
    DebReader::open(&deb)
        .expect("open")
        .extract(&dest)
        .expect("extract");
    let lib = format!("{LIBDIR}/libfixture.so.1.0");
    assert_eq!(
        fs::read(dest.join(&lib)).expect("read"),
        fs::read(split.join("generic").join(&lib)).expect("read")
    );
    assert_eq!(
        fs::read_link(dest.join(LIBDIR).join("libfixture.so.1")).expect("link"),
        Path::new("libfixture.so.1.0")
    );

    // rpm and wheel extraction reproduce their payloads.
    let dest = tmp.path().join("x5");
    fs::create_dir_all(&dest).expect("mkdir");
    RpmReader::open(&rpm)
        .expect("open")
        .extract(&dest)
        .expect("extract rpm");
    assert_eq!(
        fs::read(dest.join(&lib)).expect("read"),
        fs::read(split.join("generic").join(&lib)).expect("read")
    );
    assert_eq!(
        fs::read_link(dest.join(LIBDIR).join("libfixture.so.1")).expect("link"),
        Path::new("libfixture.so.1.0")
    );
    let (wsplit, _) = wheel_split(tmp.path());
    let wout = tmp.path().join("wout");
    build(&wsplit, &wout, &wheel_options());
    let dest = tmp.path().join("x6");
    fs::create_dir_all(&dest).expect("mkdir");
    WheelReader::open(&wout.join("kpkg_device_gfx110x_dgpu-1.0+kpack1-py3-none-linux_x86_64.whl"))
        .expect("open")
        .extract(&dest)
        .expect("extract wheel");
    assert_eq!(
        fs::read(dest.join("kpkg/hsa/gfx1100/fixture.co")).expect("read"),
        fs::read(wsplit.join("gfx110X-dgpu/kpkg/hsa/gfx1100/fixture.co")).expect("read")
    );
    let e = chain(
        &DebReader::open(&deb)
            .expect("open")
            .extract(&dest)
            .expect_err("not empty"),
    );
    assert!(e.contains("not empty"), "{e}");

    // Wheels: RECORD mismatch, hostile member name.
    let w = tmp.path().join("w-1.0-py3-none-any.whl");
    let mut z = ZipWriter::new(fs::File::create(&w).expect("create"), 0);
    z.add_bytes("w/__init__.py", 0o644, b"x = 1\n")
        .expect("zip");
    z.add_bytes(
        "w-1.0.dist-info/METADATA",
        0o644,
        b"Metadata-Version: 2.1\nName: w\nVersion: 1.0\n",
    )
    .expect("zip");
    z.add_bytes(
        "w-1.0.dist-info/WHEEL",
        0o644,
        b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    )
    .expect("zip");
    z.add_bytes(
        "w-1.0.dist-info/RECORD",
        0o644,
        b"w/__init__.py,sha256=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA,6\nw-1.0.dist-info/METADATA,,\nw-1.0.dist-info/WHEEL,,\nw-1.0.dist-info/RECORD,,\n",
    )
    .expect("zip");
    z.finish().expect("zip");
    let e = chain(
        &WheelReader::open(&w)
            .expect("open")
            .verify_record()
            .expect_err("record"),
    );
    assert!(
        e.contains("RECORD mismatch") && e.contains("w/__init__.py"),
        "{e}"
    );
    let w2 = tmp.path().join("h-1.0-py3-none-any.whl");
    let mut z = ZipWriter::new(fs::File::create(&w2).expect("create"), 0);
    z.add_bytes("../evil.py", 0o644, b"x").expect("zip");
    z.finish().expect("zip");
    let e = chain(&WheelReader::open(&w2).expect_err("hostile"));
    assert!(e.contains("../evil.py"), "{e}");
    let parsed = CoreMetadata::parse("Name: a\nRequires-Dist: b\nRequires-Dist: c\n\nbody\n");
    assert_eq!(parsed.get_all("Requires-Dist").count(), 2);
}

/// rpm's caret (rpm >= 4.15: `1.0^git1` sorts after `1.0`, before
/// `1.0.1`) is packaged: rpm reads the version back, and the device rpm
/// pins it.
#[test]
fn rpm_caret_version_is_built_and_queried() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (split, _) = fixture_split(tmp.path());
    let mut opts = fixture_options(&[Format::Rpm]);
    opts.meta.version = "1.0^git1-1".into();
    let report = build(&split, &tmp.path().join("out"), &opts);
    let rpms = by_name(&report, Format::Rpm);
    let evr = ok(Command::new("rpm")
        .args(["-qp", "--qf", "%{VERSION}-%{RELEASE}"])
        .arg(&rpms["libfixture1"]));
    assert_eq!(evr, "1.0^git1-1.kpack1");
    let req = ok(Command::new("rpm")
        .args(["-qp", "--requires"])
        .arg(&rpms["libfixture1-gfx90a"]));
    assert!(
        req.lines().any(|l| l == "libfixture1 = 1.0^git1-1.kpack1"),
        "{req}"
    );
}

#[test]
fn spec_naming_defaults_and_fetch_source_are_honoured() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (split, _) = fixture_split(tmp.path());
    let mut opts = fixture_options(&[Format::Deb, Format::Rpm]);
    opts.meta.maintainer.clear();
    opts.spec = rocm_kpack_pkgspec::Spec::from_toml_str(
        r#"
[naming]
deb_device = "{name}-kpack-{group_lower}"
rpm_device = "{name}-kpack-{group_lower}"
[package]
maintainer = "Spec Maintainer <spec@example.org>"
[fetch]
source_url = "https://example.org/kpack/"
[version]
suffix = "site.2"
"#,
    )
    .expect("spec");
    let out = tmp.path().join("out");
    let report = build(&split, &out, &opts);
    let debs = by_name(&report, Format::Deb);
    assert!(
        debs.contains_key("libfixture1-kpack-gfx110x-dgpu"),
        "{:?}",
        debs.keys()
    );
    let dev = DebReader::open(&debs["libfixture1-kpack-gfx110x-dgpu"]).expect("deb");
    // The generic-ISA package the family depends on follows the template too.
    assert_eq!(
        dev.control.get("Depends"),
        Some("libfixture1 (= 1.0-1+site.2), libfixture1-kpack-gfx11-generic (= 1.0-1+site.2)")
    );
    assert!(
        debs.contains_key("libfixture1-kpack-gfx11-generic"),
        "{:?}",
        debs.keys()
    );
    assert_eq!(
        dev.control.get("Maintainer"),
        Some("Spec Maintainer <spec@example.org>")
    );
    let rpms = by_name(&report, Format::Rpm);
    assert!(
        rpms.contains_key("libfixture1-kpack-gfx90a"),
        "{:?}",
        rpms.keys()
    );
    // The spec's version suffix: rpm's release, which the device rpm pins.
    let rel = ok(Command::new("rpm")
        .args(["-qp", "--qf", "%{RELEASE}"])
        .arg(&rpms["libfixture1"]));
    assert_eq!(rel, "1.site.2");
    let req = ok(Command::new("rpm")
        .args(["-qp", "--requires"])
        .arg(&rpms["libfixture1-kpack-gfx90a"]));
    assert!(
        req.lines().any(|l| l == "libfixture1 = 1.0-1.site.2"),
        "{req}"
    );
    // The generic packages tell the fetcher where the archives are.
    let x = tmp.path().join("x");
    ok(Command::new("dpkg-deb")
        .arg("-x")
        .arg(&debs["libfixture1"])
        .arg(&x));
    let sources =
        fs::read_to_string(x.join(LIBDIR).join(".kpack/libfixture.sources.toml")).expect("sources");
    assert_eq!(
        sources,
        "# Where rocm-kpack-fetch finds the device archives of libfixture.\n[[source]]\nurl = \"https://example.org/kpack/\"\ncomponents = [\"libfixture\"]\n"
    );
    let list = ok(Command::new("rpm").arg("-qlp").arg(&rpms["libfixture1"]));
    assert!(list.contains("/.kpack/libfixture.sources.toml"), "{list}");

    // Wheels follow the wheel templates.
    let (wsplit, _) = wheel_split(tmp.path());
    let mut wopts = wheel_options();
    wopts.spec = rocm_kpack_pkgspec::Spec::from_toml_str(
        "[naming]\nwheel_device = \"{name}-gpu-{group_lower}\"\nwheel_extra = \"gpu-{group_lower}\"\n",
    )
    .expect("spec");
    let wout = tmp.path().join("wout");
    build(&wsplit, &wout, &wopts);
    let base =
        WheelReader::open(&wout.join("kpkg-1.0+kpack1-py3-none-linux_x86_64.whl")).expect("wheel");
    let reqs: Vec<&str> = base.metadata.get_all("Requires-Dist").collect();
    assert!(
        reqs.contains(&"kpkg-gpu-gfx110x-dgpu==1.0+kpack1; extra == \"gpu-gfx110x-dgpu\""),
        "{reqs:?}"
    );
    assert!(wout
        .join("kpkg_gpu_gfx110x_dgpu-1.0+kpack1-py3-none-linux_x86_64.whl")
        .is_file());
}

/// The file of the package `name` among `built`.
fn package_path(built: &[rocm_kpack_package::BuiltPackage], name: &str) -> std::path::PathBuf {
    built
        .iter()
        .find(|p| p.name == name)
        .map(|p| p.path.clone())
        .unwrap_or_else(|| panic!("no {name}"))
}

/// The `Window_Descriptor` of the zstd frame at the start of `bytes`, as
/// the window size it declares (RFC 8878 section 3.1.1.1.2), or None for a
/// single-segment frame (its window is its content size).
fn zstd_window(bytes: &[u8]) -> Option<u64> {
    assert_eq!(
        bytes.get(..4),
        Some(&[0x28, 0xb5, 0x2f, 0xfd][..]),
        "not zstd"
    );
    let fhd = bytes[4];
    if fhd & 0x20 != 0 {
        return None;
    }
    let wd = bytes[5];
    let base = 1u64 << (10 + (wd >> 3));
    Some(base + (base / 8) * u64::from(wd & 7))
}

/// `[package] device_payload = "solid"`: split-package stores the device
/// packages' archives uncompressed in a long-window zstd payload (generic
/// packages and wheels as before); dpkg and rpm install them for real and
/// both the runtime's reader and AMD's `@GFXARCH@` lookup read the
/// installed archives, every code object the fat original's.
#[test]
fn solid_device_payloads_install_with_dpkg_and_rpm_and_load() {
    use rocm_kpack_format::archive::CompressionScheme;
    use rocm_kpack_pkgspec::DevicePayload;
    use rocm_kpack_splitter::split_package::{split_package, SplitPackageOptions};
    use rocm_kpack_test_support::debian;

    let tmp = tempfile::tempdir().expect("tmp");
    let mut spec = rocm_kpack_pkgspec::Spec::builtin();
    spec.package.device_payload = Some(DevicePayload::Solid);
    let opts = SplitPackageOptions {
        spec,
        package_compression: Compression::Xz,
        package_level: Some(0),
        // The payload's level follows the split's; a fast one keeps the
        // test quick (the window, not the level, is what is checked).
        output: rocm_kpack_splitter::split::output::ArchiveOutput {
            zstd_level: 3,
            ..rocm_kpack_splitter::split::output::ArchiveOutput::release()
        },
        ..SplitPackageOptions::default()
    };
    let fat = debian::extracted("librocrand1")
        .expect("extracted")
        .join(LIBDIR)
        .join("librocrand.so.1.1");
    let archive = format!("{LIBDIR}/.kpack/librocrand_gfx90a.kpack");

    // deb: a fat deb from Debian.
    let deb = debian::package("librocrand1").expect("librocrand1 deb");
    let out = tmp.path().join("deb");
    let r = split_package(&deb, &out, &opts).unwrap_or_else(|e| panic!("{}", chain(&e)));
    let path_of = |name: &str| package_path(&r.packages, name);
    let members = ok(Command::new("ar")
        .arg("t")
        .arg(path_of("librocrand1-gfx90a")));
    assert!(members.lines().any(|m| m == "data.tar.zst"), "{members}");
    let raw = run(Command::new("ar")
        .arg("p")
        .arg(path_of("librocrand1-gfx90a"))
        .arg("data.tar.zst"))
    .stdout;
    // The archive (over 1 MiB stored) needs more than a small window: the
    // frame declares the long one.
    assert_eq!(zstd_window(&raw), Some(1 << 27));
    let generic_members = ok(Command::new("ar").arg("t").arg(path_of("librocrand1")));
    assert!(
        generic_members.lines().any(|m| m == "data.tar.xz"),
        "the generic deb keeps the package compression: {generic_members}"
    );
    let root = tmp.path().join("dpkg-root");
    dpkg_root(&root);
    dpkg_install(
        &root,
        &[&path_of("librocrand1"), &path_of("librocrand1-gfx90a")],
    );
    ok(Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .arg("--verify"));
    let installed = Archive::open(&root.join(&archive)).expect("installed archive");
    assert_eq!(installed.scheme(), CompressionScheme::None);
    let lib = root.join(LIBDIR).join("librocrand.so.1.1");
    assert_gfxarch_finds(&lib, &fat, "gfx90a:xnack-", "librocrand_gfx90a.kpack");
    assert_gfxarch_finds(&lib, &fat, "gfx90a:xnack+", "librocrand_gfx90a.kpack");

    // rpm: the same tree as a fat rpm.
    let fat_rpm = rocrand_fat_rpm(tmp.path());
    let out = tmp.path().join("rpm");
    let r = split_package(&fat_rpm, &out, &opts).unwrap_or_else(|e| panic!("{}", chain(&e)));
    let rpm_of = |name: &str| package_path(&r.packages, name);
    let comp = ok(Command::new("rpm")
        .args(["-qp", "--qf", "%{PAYLOADCOMPRESSOR}"])
        .arg(rpm_of("librocrand1-gfx90a")));
    assert_eq!(comp.trim(), "zstd");
    let root = tmp.path().join("rpm-root");
    fs::create_dir_all(&root).expect("mkdir");
    ok(Command::new("rpm").arg("--root").arg(&root).arg("--initdb"));
    ok(Command::new("rpm")
        .arg("--root")
        .arg(&root)
        .args(["-i", "--nodeps", "--noscripts"])
        .arg(rpm_of("librocrand1"))
        .arg(rpm_of("librocrand1-gfx90a")));
    ok(Command::new("rpm")
        .arg("--root")
        .arg(&root)
        .args(["-V", "librocrand1-gfx90a"]));
    let installed = Archive::open(&root.join(&archive)).expect("installed archive");
    assert_eq!(installed.scheme(), CompressionScheme::None);
    let lib = root.join(LIBDIR).join("librocrand.so.1.1");
    assert_gfxarch_finds(&lib, &fat, "gfx90a:xnack-", "librocrand_gfx90a.kpack");
}
