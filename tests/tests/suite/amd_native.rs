//! AMD's native package scheme (docs/packaging.md "AMD's multi-arch
//! packages"): the `amd-native` naming profile gives a split package AMD's
//! host, device and meta names, and installing the meta package with apt or
//! dnf brings the host package and every device package. The fixture set of
//! `rocm_kpack_test_support::amd_native` (AMD's names spelled out by hand)
//! is the reference the splitter's names are compared with, and installs
//! the same way.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use rocm_kpack_package::{package, BuiltPackage, Format};
use rocm_kpack_pkgspec::Spec;
use rocm_kpack_publish::{publish, PublishOptions};
use rocm_kpack_splitter::split_package::{split_package, SplitPackageOptions};
use rocm_kpack_test_support::amd_native::{self, NativeSet};
use rocm_kpack_test_support::packages::*;
use rocm_kpack_test_support::{bins, fixtures, http};

const SPEC_PROFILE: &str = "[naming]\nprofile = \"amd-native\"\n";

/// A per-target spec for the clang19 fixture's targets with the
/// amd-native naming profile.
fn amd_native_spec() -> Spec {
    let targets: Vec<String> = fixtures::ARCHES_CLANG19
        .iter()
        .filter(|t| !t.contains("generic"))
        .map(|t| format!("\"{t}\""))
        .collect();
    Spec::from_toml_str(&format!(
        "granularity = \"per-target\"\ntargets = [{}]\nreplaces = []\n{SPEC_PROFILE}",
        targets.join(", ")
    ))
    .unwrap_or_else(|e| panic!("spec: {e}"))
}

/// A fat deb or rpm `amdrocm-fft` 8.2.0-1 holding the clang19 fixture
/// library (no dependencies, so it installs into an empty root).
fn fat_amdrocm_fft(dir: &Path, format: Format) -> PathBuf {
    let split = dir.join("fat");
    let lib = split.join("generic").join(LIBDIR);
    fs::create_dir_all(&lib).expect("mkdir");
    fs::copy(
        fixtures::fixture("clang19/libfixture.so"),
        lib.join("librocfft.so.0.1"),
    )
    .expect("copy");
    let doc = split.join("generic/usr/share/doc/amdrocm-fft");
    fs::create_dir_all(&doc).expect("mkdir");
    fs::write(doc.join("copyright"), "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\nUpstream-Name: fixture\n\nFiles: *\nCopyright: none\nLicense: MIT\n").expect("write");
    let mut o = fixture_options(&[format]);
    o.meta.name = "amdrocm-fft".into();
    o.meta.version = "8.2.0-1".into();
    o.meta.deb.fields.remove("Depends");
    o.spec.version.suffix.clear();
    let made = package(&split, &dir.join("fatpkg"), &o)
        .unwrap_or_else(|e| panic!("fat package: {}", chain(&e)));
    made.packages[0].path.clone()
}

fn split_amd_native(input: &Path, out: &Path) -> Vec<BuiltPackage> {
    let opts = SplitPackageOptions {
        spec: amd_native_spec(),
        package_compression: rocm_kpack_package::compress::Compression::Xz,
        package_level: Some(0),
        ..SplitPackageOptions::default()
    };
    split_package(input, out, &opts)
        .unwrap_or_else(|e| panic!("split-package: {}", chain(&e)))
        .packages
}

/// The device targets the split produced packages for, from the packages'
/// groups.
fn groups(packages: &[BuiltPackage]) -> Vec<String> {
    let mut g: Vec<String> = packages.iter().filter_map(|p| p.group.clone()).collect();
    g.sort();
    g.dedup();
    g
}

fn names(packages: &[BuiltPackage]) -> BTreeSet<String> {
    packages.iter().map(|p| p.name.clone()).collect()
}

fn reference_names(set: &NativeSet) -> BTreeSet<String> {
    std::iter::once(set.host.name.clone())
        .chain(set.devices.iter().map(|(_, p)| p.name.clone()))
        .chain(std::iter::once(set.meta.name.clone()))
        .collect()
}

fn publish_dir(pkgs: &Path, repo: &Path, apt: bool) -> http::Server {
    publish(
        pkgs,
        repo,
        &PublishOptions {
            apt,
            yum: !apt,
            ..PublishOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("publish: {}", chain(&e)));
    http::serve_dir(repo).expect("serve")
}

/// `apt-get install PACKAGES` from the repository at `url` into a fresh
/// root (`tmp/aptroot`); returns the installed package names.
fn apt_install(tmp: &Path, url: &str, packages: &[&str]) -> BTreeSet<String> {
    let root = tmp.join("aptroot");
    apt_dirs(&root);
    dpkg_root(&root);
    fs::write(
        root.join("etc/apt/sources.list"),
        format!("deb [trusted=yes] {url} stable main\n"),
    )
    .expect("sources");
    let opts = apt_opts(&root);
    ok(Command::new("apt-get").args(&opts).arg("update"));
    ok(Command::new("apt-get")
        .args(&opts)
        .args(["install", "-y", "--no-install-recommends"])
        .args(packages));
    dpkg_installed(&root)
}

/// The packages dpkg says are installed in `root`.
fn dpkg_installed(root: &Path) -> BTreeSet<String> {
    let q = ok(Command::new("dpkg-query")
        .arg(format!("--admindir={}/var/lib/dpkg", root.display()))
        .args(["-W", "-f=${Package} ${db:Status-Status}\n"]));
    q.lines()
        .filter(|l| l.ends_with(" installed"))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// `dnf install PACKAGE` from the repository at `url` into a fresh root;
/// returns the installed package names.
fn dnf_install(tmp: &Path, url: &str, package: &str) -> BTreeSet<String> {
    let root = tmp.join("dnfroot");
    fs::create_dir_all(&root).expect("mkdir");
    ok(Command::new("dnf")
        .arg("-y")
        .arg(format!("--installroot={}", root.display()))
        .args([
            "--releasever=1",
            "--setopt=reposdir=/dev/null",
            "--setopt=local.gpgcheck=0",
            "--setopt=install_weak_deps=False",
        ])
        .arg(format!("--repofrompath=local,{url}"))
        .args(["install", package]));
    let q = ok(Command::new("rpm")
        .arg("--root")
        .arg(&root)
        .args(["-qa", "--qf", "%{NAME}\n"]));
    q.lines().map(str::to_string).collect()
}

/// The reference set: the meta package brings the host and every device
/// package, with apt and with dnf.
#[test]
fn the_reference_set_meta_package_installs_host_and_every_device_package() {
    let tmp = tempfile::tempdir().expect("tmp");
    let pkgs = tmp.path().join("pkgs");
    let set = amd_native::write_native_set(&pkgs, "amdrocm-fft", "8.2.0-1", &["gfx1100", "gfx942"]);
    assert_eq!(set.host.name, "amdrocm-fft-host8.2");
    assert_eq!(set.meta.name, "amdrocm-fft8.2");
    assert_eq!(set.devices[0].1.name, "amdrocm-fft8.2-gfx1100");
    let want = reference_names(&set);

    let server = publish_dir(&pkgs, &tmp.path().join("apt"), true);
    let got = apt_install(tmp.path(), server.root_url(), &["amdrocm-fft8.2"]);
    assert_eq!(got, want);
    let server = publish_dir(&pkgs, &tmp.path().join("yum"), false);
    let got = dnf_install(tmp.path(), server.root_url(), "amdrocm-fft8.2");
    assert_eq!(got, want);
}

/// `split-package` of a fat `amdrocm-fft` 8.2.0-1 deb under the amd-native
/// profile: host, per-target device and meta packages named exactly as the
/// reference set, lintian finds no error the input does not have, and
/// `apt-get install amdrocm-fft8.2` installs all of them.
#[test]
fn amd_native_profile_splits_a_deb_into_amds_host_device_and_meta_packages() {
    let tmp = tempfile::tempdir().expect("tmp");
    let fat = fat_amdrocm_fft(tmp.path(), Format::Deb);
    let out = tmp.path().join("out");
    let packages = split_amd_native(&fat, &out);
    let targets = groups(&packages);
    assert!(targets.contains(&"gfx1100".to_string()), "{targets:?}");
    let t: Vec<&str> = targets.iter().map(String::as_str).collect();
    let reference =
        amd_native::write_native_set(&tmp.path().join("ref"), "amdrocm-fft", "8.2.0-1", &t);
    assert_eq!(names(&packages), reference_names(&reference));
    let meta: Vec<&BuiltPackage> = packages.iter().filter(|p| p.meta).collect();
    assert_eq!(meta.len(), 1);
    assert_eq!(meta[0].name, "amdrocm-fft8.2");
    let d = rocm_kpack_package::deb::DebReader::open(&meta[0].path).expect("meta deb");
    let depends = d.control.get("Depends").unwrap_or_default().to_string();
    for n in reference_names(&reference) {
        if n != "amdrocm-fft8.2" {
            assert!(
                depends.contains(&format!("{n} (= 8.2.0-1+kpack1)")),
                "{n}: {depends}"
            );
        }
    }

    let baseline = lintian_errors(&fat);
    for p in &packages {
        let extra: Vec<String> = lintian_errors(&p.path)
            .into_iter()
            .filter(|t| !baseline.contains(t))
            .collect();
        assert!(extra.is_empty(), "{}: lintian errors {extra:?}", p.name);
    }

    let server = publish_dir(&out, &tmp.path().join("apt"), true);
    let got = apt_install(tmp.path(), server.root_url(), &["amdrocm-fft8.2"]);
    assert_eq!(got, names(&packages));
}

/// The same with a fat rpm: rpm names, Requires of the meta rpm, rpmlint
/// and `dnf install amdrocm-fft8.2`.
#[test]
fn amd_native_profile_splits_an_rpm_into_amds_host_device_and_meta_packages() {
    let tmp = tempfile::tempdir().expect("tmp");
    let fat = fat_amdrocm_fft(tmp.path(), Format::Rpm);
    let out = tmp.path().join("out");
    let packages = split_amd_native(&fat, &out);
    let targets = groups(&packages);
    let t: Vec<&str> = targets.iter().map(String::as_str).collect();
    let reference =
        amd_native::write_native_set(&tmp.path().join("ref"), "amdrocm-fft", "8.2.0-1", &t);
    assert_eq!(names(&packages), reference_names(&reference));
    let meta = packages.iter().find(|p| p.meta).expect("meta rpm");
    let r = rocm_kpack_package::rpm::RpmReader::open(&meta.path).expect("meta rpm");
    let requires: BTreeSet<String> = r
        .requires()
        .into_iter()
        .filter(|d| !d.name.starts_with("rpmlib("))
        .map(|d| format!("{} {}", d.name, d.version))
        .collect();
    let want: BTreeSet<String> = reference_names(&reference)
        .into_iter()
        .filter(|n| n != "amdrocm-fft8.2")
        .map(|n| format!("{n} 8.2.0-1.kpack1"))
        .collect();
    assert_eq!(requires, want);

    for p in &packages {
        let lint = run(Command::new("rpmlint").arg(&p.path));
        let errors: Vec<String> = String::from_utf8_lossy(&lint.stdout)
            .lines()
            .filter(|l| l.contains(": E: ") && !l.contains("E: no-signature"))
            .map(str::to_string)
            .collect();
        assert!(errors.is_empty(), "{}: {errors:?}", p.name);
    }

    let server = publish_dir(&out, &tmp.path().join("yum"), false);
    let got = dnf_install(tmp.path(), server.root_url(), "amdrocm-fft8.2");
    assert_eq!(got, names(&packages));
}

/// Issue 43, finding 10: `myapp`, an ordinary application, depends on
/// `amdrocm-fft8.2-gfx90a`. On an MI300X, `prune --yes` would have apt
/// remove it along with gfx90a's device package: it refuses and removes
/// nothing, the dry run names `myapp` apart from AMD's meta package, and
/// only `--allow-dependents` lets apt remove it.
#[test]
fn prune_refuses_to_remove_an_application_that_depends_on_a_device_package() {
    let tmp = tempfile::tempdir().expect("tmp");
    let pkgs = tmp.path().join("pkgs");
    let set = amd_native::write_native_set(&pkgs, "amdrocm-fft", "8.2.0-1", &["gfx90a", "gfx942"]);
    let app = amd_native::write_app(&pkgs, "myapp", "1.0-1", &["amdrocm-fft8.2-gfx90a"]);
    let server = publish_dir(&pkgs, &tmp.path().join("apt"), true);
    let mut all = reference_names(&set);
    all.insert(app.name.clone());
    assert_eq!(
        apt_install(tmp.path(), server.root_url(), &["amdrocm-fft8.2", "myapp"]),
        all
    );
    let root = tmp.path().join("aptroot");
    let prune = |more: &[&str]| {
        let mut c = bins::command("rocm-kpack-fetch");
        bins::isolate_fetcher(&mut c);
        c.args(["prune", "--via", "apt", "--root"])
            .arg(&root)
            .arg("--sysfs-root")
            .arg(fixtures::machine("mi300x"))
            .args(more);
        run(&mut c)
    };
    let text = |o: &std::process::Output| {
        format!(
            "{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };

    let o = prune(&["--dry-run", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let apt = v["backends"]
        .as_array()
        .expect("backends")
        .iter()
        .find(|b| b["backend"] == "apt")
        .unwrap_or_else(|| panic!("no apt backend: {v}"))
        .clone();
    assert_eq!(apt["items"][0]["name"], "amdrocm-fft8.2-gfx90a", "{v}");
    assert_eq!(
        apt["also_removed"],
        serde_json::json!(["amdrocm-fft8.2", "myapp"]),
        "{v}"
    );
    assert_eq!(apt["dependents"], serde_json::json!(["myapp"]), "{v}");

    let o = prune(&["--yes"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("not pruning anything")
            && stderr.contains("myapp")
            && stderr.contains("--allow-dependents"),
        "{}",
        text(&o)
    );
    assert_eq!(dpkg_installed(&root), all, "something was removed");

    let o = prune(&["--yes", "--allow-dependents"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        dpkg_installed(&root),
        BTreeSet::from([set.host.name.clone(), "amdrocm-fft8.2-gfx942".to_string()])
    );
}
