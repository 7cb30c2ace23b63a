//! rocm-kpack-fetch end to end on 127.0.0.1 with real packages: Debian's
//! librocrand1 split into generic + device debs, published as an apt
//! repository and a kpack store, served over loopback HTTP.
//! - file mode: the generic deb in a throwaway root, `install --auto` for an
//!   MI210 fetches exactly the gfx90X archive, `verify` passes, the loader
//!   finds the gfx90a:xnack- code object, a rerun downloads nothing;
//! - `--via apt` plans and installs `librocrand1-gfx90x` with apt-get;
//! - `--python` installs the device extra of a wheel into a venv;
//! - the fetcher's own deb, rpm and wheel.

mod package_common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use package_common::*;
use rocm_kpack::loader::{Cache, LoaderConfig};
use rocm_kpack_format::marker::Marker;
use rocm_kpack_splitter::elf::inspect::inspect_elf;
use rocm_kpack_package::archive_io::Compression;
use rocm_kpack_package::publish::{publish, PublishOptions};
use rocm_kpack_splitter::split_package::{split_package, SplitPackageOptions};
use rocm_kpack_test_support::{bins, debian, fixtures, http};
use serde_json::Value;

/// Split librocrand1 packages and their published repository (apt + kpack
/// store), made once per test process.
struct Published {
    /// The split packages.
    pkgs: PathBuf,
    /// The published repository.
    repo: PathBuf,
}

fn published() -> &'static Published {
    static P: OnceLock<Published> = OnceLock::new();
    P.get_or_init(|| {
        let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fetch_e2e");
        let _ = fs::remove_dir_all(&base);
        fs::create_dir_all(&base).expect("mkdir");
        let pkgs = base.join("pkgs");
        let opts = SplitPackageOptions {
            package_compression: Compression::Xz,
            package_level: Some(0),
            ..SplitPackageOptions::default()
        };
        split_package(&rocrand_deb(), &pkgs, &opts).unwrap_or_else(|e| panic!("split-package: {}", chain(&e)));
        let repo = base.join("repo");
        publish(
            &pkgs,
            &repo,
            &PublishOptions {
                apt: true,
                kpack_store: true,
                ..PublishOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("publish: {}", chain(&e)));
        Published { pkgs, repo }
    })
}

fn fetch() -> Command {
    let mut c = bins::command("rocm-kpack-fetch");
    // Manifests only from the throwaway roots, not this interpreter.
    c.env("ROCM_KPACK_PYTHON", "").env_remove("ROCM_KPACK_ARCH_OVERRIDE").env_remove("HSA_OVERRIDE_GFX_VERSION");
    c
}

/// A dpkg root with the generic librocrand1 installed (its dependencies,
/// which the repository does not carry, marked installed).
fn root_with_generic(root: &Path) {
    dpkg_root(root);
    let mut status = String::new();
    for dep in ["libamdhip64-5", "libc6", "libgcc-s1", "libstdc++6"] {
        status.push_str(&format!(
            "Package: {dep}\nStatus: install ok installed\nPriority: optional\nSection: libs\nMaintainer: Test <t@example.org>\nArchitecture: amd64\nMulti-Arch: same\nVersion: 99\nDescription: stand-in\n\n"
        ));
    }
    fs::write(root.join("var/lib/dpkg/status"), status).expect("status");
    ok(Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .args(["--force-not-root", "--force-script-chrootless", "-i"])
        .arg(published().pkgs.join("librocrand1_5.3.3-4_amd64.deb")));
}

fn mi210() -> PathBuf {
    fixtures::fixture("sysfs/mi210")
}

/// (bundle index, bytes) of target `target` in the fat Debian library.
fn original(target: &str) -> (u32, Vec<u8>) {
    use object::{Object, ObjectSection};
    let fat = debian::extracted("librocrand1").expect("extracted").join(LIBDIR).join("librocrand.so.1.1");
    let data = fs::read(fat).expect("read");
    let elf = object::File::parse(&*data).expect("ELF");
    let section = elf.section_by_name(".hip_fatbin").expect("fatbin").data().expect("data");
    for (i, b) in rocm_kpack_format::bundle::parse_fatbin(section).expect("bundles").iter().enumerate() {
        for (t, d) in b.code_objects() {
            if t == target || t.ends_with(&format!("--{target}")) {
                return (i as u32, d.to_vec());
            }
        }
    }
    panic!("no {target} in Debian's librocrand");
}

fn by_hash_requests(server: &http::Server) -> Vec<String> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/by-hash/") && r.method == "GET")
        .map(|r| r.path)
        .collect()
}

#[test]
fn install_auto_for_an_mi210_fetches_verifies_and_the_loader_finds_the_code_object() {
    let p = published();
    let index: Value = serde_json::from_str(&fs::read_to_string(p.repo.join("index.json")).expect("index")).expect("json");
    let gfx90x = index["archives"]
        .as_array()
        .expect("archives")
        .iter()
        .find(|a| a["component"] == "librocrand" && a["group"] == "gfx90X")
        .expect("gfx90X in the store")
        .clone();
    let server = http::serve_dir(&p.repo).expect("serve");
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("root");
    root_with_generic(&root);
    let kdir = root.join(LIBDIR).join(".kpack");
    assert!(!kdir.join("librocrand_gfx90X.kpack").exists());

    let run = || {
        ok(fetch()
            .args(["install", "--auto", "--jobs", "2"])
            .arg("--root")
            .arg(&root)
            .arg("--sysfs-root")
            .arg(mi210())
            .arg("--source")
            .arg(server.root_url())
            .arg("--allow-http"))
    };
    let out = run();
    assert!(out.contains("1 installed"), "{out}");
    let fetched = by_hash_requests(&server);
    assert_eq!(
        fetched,
        [format!("/{}", gfx90x["path"].as_str().expect("path"))],
        "exactly the gfx90X archive"
    );
    let archive = kdir.join("librocrand_gfx90X.kpack");
    assert_eq!(sha256(&archive), gfx90x["sha256"].as_str().expect("sha"));
    let kpacks: Vec<String> = fs::read_dir(&kdir)
        .expect("kpack dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".kpack"))
        .collect();
    assert_eq!(kpacks, ["librocrand_gfx90X.kpack"]);

    let v = run_cmd(fetch().arg("verify").arg("--root").arg(&root));
    assert!(v.status.success(), "verify: {}{}", s(&v.stdout), s(&v.stderr));

    // The runtime, from the installed host-only library's marker.
    let lib = root.join(LIBDIR).join("librocrand.so.1.1");
    let report = inspect_elf(&fs::read(&lib).expect("lib")).expect("inspect");
    assert!(report.hip_fatbin.is_none(), "installed library is not host-only");
    let m = report.marker.expect("marker");
    let marker = Marker {
        kpack_search_paths: m.kpack_search_paths,
        kernel_name: m.kernel_name,
    };
    let (index_co, want) = original("gfx90a:xnack-");
    let cache = Cache::with_config(LoaderConfig::default());
    let co = cache
        .load_code_object(&marker, &lib, index_co, &["gfx90a:xnack-"])
        .expect("loader finds gfx90a:xnack-");
    assert_eq!(co.arch, "gfx90a:xnack-");
    assert!(co.data == want, "code object differs from Debian's");
    assert_eq!(co.archive_path.file_name().expect("name"), "librocrand_gfx90X.kpack");

    // A second run: nothing to download.
    let before = server.requests().len();
    let out2 = run();
    assert!(out2.contains("0 installed") && out2.contains("1 already present"), "{out2}");
    let again: Vec<_> = server.requests().into_iter().skip(before).collect();
    assert!(again.is_empty(), "second run made requests: {again:?}");
}

fn run_cmd(c: &mut Command) -> std::process::Output {
    run(c)
}

fn s(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn via_apt_plans_and_installs_the_device_package() {
    let p = published();
    let server = http::serve_dir(&p.repo).expect("serve");
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("root");
    apt_dirs(&root);
    root_with_generic(&root);
    fs::write(
        root.join("etc/apt/sources.list"),
        format!("deb [trusted=yes] {} stable main\n", server.root_url()),
    )
    .expect("sources");
    ok(Command::new("apt-get").args(apt_opts(&root)).arg("update"));

    let base = || {
        let mut c = fetch();
        c.args(["install", "--via", "apt", "--arch", "gfx90a", "--root"]).arg(&root);
        c
    };
    let plan = ok(base().arg("--dry-run"));
    assert_eq!(plan, "apt-get install librocrand1-gfx90x\n");
    let json: Value = serde_json::from_str(&ok(base().args(["--dry-run", "--json"]))).expect("json");
    assert_eq!(json["plan"]["packages"][0]["group"], "gfx90X");
    assert_eq!(json["plan"]["packages"][0]["generic"], "librocrand1");
    assert!(by_hash_requests(&server).is_empty());

    // Inside a dpkg run: refused, nothing called.
    let inside = run(base().env("DPKG_RUNNING_VERSION", "1.21.22"));
    assert!(!inside.status.success());
    assert!(s(&inside.stderr).contains("file mode"), "{}", s(&inside.stderr));

    ok(&mut base());
    let archive = format!("/{LIBDIR}/.kpack/librocrand_gfx90X.kpack");
    let owner = ok(Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .arg("-S")
        .arg(&archive));
    assert_eq!(owner.trim(), format!("librocrand1-gfx90x: {archive}"));
    assert!(server.requests().iter().any(|r| r.path.ends_with("librocrand1-gfx90x_5.3.3-4_amd64.deb") && r.status == 200));
    // Installed: the plan is now empty of new work for apt (it is a no-op).
    let status = fs::read_to_string(root.join("var/lib/dpkg/status")).expect("status");
    assert!(!status.contains("Package: librocrand1-gfx103x"));
}

#[test]
fn python_installs_the_device_extra_into_a_venv() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (split, _) = wheel_split(tmp.path());
    let pkgs = tmp.path().join("pkgs");
    build(&split, &pkgs, &wheel_options());
    let repo = tmp.path().join("repo");
    publish(
        &pkgs,
        &repo,
        &PublishOptions {
            pip: true,
            ..PublishOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("publish: {}", chain(&e)));
    let server = http::serve_dir(&repo).expect("serve");
    let index = format!("{}simple/", server.root_url());
    let venv = tmp.path().join("venv");
    ok(Command::new("python3").args(["-m", "venv"]).arg(&venv));
    let python = venv.join("bin/python");
    ok(Command::new(&python)
        .args(["-m", "pip", "install", "--disable-pip-version-check", "--no-cache-dir", "--index-url"])
        .arg(&index)
        .arg("kpkg")
        .env("PIP_CONFIG_FILE", "/dev/null"));

    let empty = tmp.path().join("noprefix");
    fs::create_dir_all(&empty).expect("mkdir");
    let base = || {
        let mut c = fetch();
        c.args(["install", "--python", "--arch", "gfx1101", "--no-default-prefixes", "--prefix"])
            .arg(&empty)
            .arg("--python-exe")
            .arg(&python)
            .arg("--index-url")
            .arg(&index)
            .env("PIP_CONFIG_FILE", "/dev/null")
            .env("PIP_NO_CACHE_DIR", "1");
        c
    };
    // gfx1101's group, plus any group holding a generic ISA the loader
    // falls back to (gfx11-generic), and nothing else.
    let plan = ok(base().arg("--dry-run"));
    let prefix = format!("{} -m pip install kpkg[", python.display());
    let extras: Vec<String> = plan
        .strip_prefix(&prefix)
        .and_then(|r| r.strip_suffix("]==1.0\n"))
        .unwrap_or_else(|| panic!("unexpected plan: {plan}"))
        .split(',')
        .map(str::to_string)
        .collect();
    assert!(extras.contains(&"device-gfx110x".to_string()), "{plan}");
    assert!(extras.iter().all(|e| e.starts_with("device-gfx11")), "{plan}");
    ok(&mut base());
    let listed = ok(Command::new(&python).args(["-m", "pip", "list", "--disable-pip-version-check", "--format=freeze"]));
    for e in &extras {
        assert!(listed.contains(&format!("kpkg-{e}==1.0")), "{e} not installed:\n{listed}");
    }
    assert!(!listed.contains("gfx90x") && !listed.contains("gfx103x"), "{listed}");
    let out = ok(Command::new(&python)
        .args(["-c", "import kpkg; print(sorted(p.name for p in kpkg.KPACK_DIR.iterdir()))"]));
    assert!(out.contains("'kpkg_gfx110X.kpack'"), "{out}");
    assert_eq!(out.matches(".kpack'").count(), extras.len(), "{out}");
    ok(Command::new(&python).args(["-m", "pip", "check", "--disable-pip-version-check"]));
    // A rerun is harmless (pip finds the requirement satisfied).
    ok(&mut base());
}

/// Builds the fetcher's own packages with `splitter/examples/package_fetcher.rs`
/// (stripped binary), returns (deb, rpm, wheel).
fn fetcher_packages(out: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let dir = bins::profile_dir();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build.args(["build", "-p", "rocm-kpack-splitter", "--example", "package_fetcher"]);
    if dir.ends_with("release") {
        build.arg("--release");
    }
    ok(&mut build);
    let bin = out.join("rocm-kpack-fetch");
    fs::create_dir_all(out).expect("mkdir");
    fs::copy(bins::bin("rocm-kpack-fetch"), &bin).expect("copy");
    ok(Command::new("strip").arg(&bin));
    let templates = Path::new(env!("CARGO_MANIFEST_DIR")).join("../repo-templates/fetch");
    let pkgs = out.join("pkgs");
    let listed = ok(Command::new(dir.join("examples/package_fetcher"))
        .arg(&bin)
        .arg(&templates)
        .arg(env!("CARGO_PKG_VERSION"))
        .arg(&pkgs)
        .arg("0"));
    let paths: Vec<PathBuf> = listed.lines().map(PathBuf::from).collect();
    assert_eq!(paths.len(), 3, "{listed}");
    (paths[0].clone(), paths[1].clone(), paths[2].clone())
}

#[test]
fn the_fetcher_is_packaged_as_deb_rpm_and_wheel() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (deb, rpm, whl) = fetcher_packages(tmp.path());
    let ver = env!("CARGO_PKG_VERSION");
    assert_eq!(deb.file_name().expect("name").to_string_lossy(), format!("rocm-kpack-fetch_{ver}_amd64.deb"));
    assert_eq!(
        whl.file_name().expect("name").to_string_lossy(),
        format!("rocm_kpack_fetch-{ver}-py3-none-manylinux_2_28_x86_64.whl")
    );

    // deb: control, contents, lintian, installs into a root and runs.
    let info = ok(Command::new("dpkg-deb").arg("-I").arg(&deb));
    assert!(info.contains("Package: rocm-kpack-fetch") && info.contains(&format!("Version: {ver}")), "{info}");
    let contents = ok(Command::new("dpkg-deb").arg("-c").arg(&deb));
    for f in [
        "./usr/bin/rocm-kpack-fetch",
        "./etc/apt/apt.conf.d/99rocm-kpack-fetch",
        "./lib/systemd/system/rocm-kpack-fetch.service",
        "./lib/systemd/system/rocm-kpack-fetch.timer",
    ] {
        assert!(contents.contains(f), "{f} missing:\n{contents}");
    }
    assert_eq!(lintian_errors(&deb), Vec::<String>::new());
    let root = tmp.path().join("root");
    dpkg_root(&root);
    ok(Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .args(["--force-not-root", "--force-script-chrootless", "--force-depends", "-i"])
        .arg(&deb));
    assert_eq!(
        fs::read(root.join("etc/apt/apt.conf.d/99rocm-kpack-fetch")).expect("hook"),
        fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../repo-templates/fetch/apt/99rocm-kpack-fetch")).expect("template")
    );
    let v = ok(Command::new(root.join("usr/bin/rocm-kpack-fetch")).arg("--version"));
    assert_eq!(v.trim(), format!("rocm-kpack-fetch {ver}"));

    // rpm: header, digests, file list.
    let qi = ok(Command::new("rpm").arg("-qip").arg(&rpm));
    assert!(qi.contains("Name        : rocm-kpack-fetch") && qi.contains("License     : MIT"), "{qi}");
    ok(Command::new("rpm").arg("-K").arg(&rpm));
    let ql = ok(Command::new("rpm").arg("-qlp").arg(&rpm));
    assert!(ql.lines().any(|l| l == "/usr/bin/rocm-kpack-fetch"), "{ql}");
    assert!(ql.lines().any(|l| l == "/usr/lib/systemd/system/rocm-kpack-fetch.service"), "{ql}");

    // wheel: pip installs it; the script is the binary and runs.
    let venv = tmp.path().join("venv");
    ok(Command::new("python3").args(["-m", "venv"]).arg(&venv));
    ok(Command::new(venv.join("bin/pip"))
        .args(["install", "--disable-pip-version-check", "--no-index"])
        .arg(&whl)
        .env("PIP_CONFIG_FILE", "/dev/null"));
    ok(Command::new(venv.join("bin/pip")).args(["check", "--disable-pip-version-check"]));
    let v = ok(Command::new(venv.join("bin/rocm-kpack-fetch")).arg("--version"));
    assert_eq!(v.trim(), format!("rocm-kpack-fetch {ver}"));
}
