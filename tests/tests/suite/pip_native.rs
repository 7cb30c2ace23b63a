//! The fetcher and pip (and uv) on distributions it did not split: wheels
//! that follow AMD's multi-arch metadata, with no `.kpm`. A base `torch`
//! declares `device-gfx942`, `device-gfx90a`, `device-gfx1100` and
//! `device-all` extras; each per-target extra requires
//! `amd-torch-device-<target>` (a prefix that is not the base's name),
//! `device-all` requires all three. The wheels are built here (python's
//! zipfile, [`rocm_kpack_test_support::packages::pure_wheel`]) and served as a PEP 503 index
//! on 127.0.0.1; every client is real and runs in a fresh venv. The
//! machine is the MI300X sysfs tree (gfx942).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use rocm_kpack_test_support::packages::{self, ok, pip_install, pip_installed, run, uv};
use rocm_kpack_test_support::{bins, fixtures, http, HostilePythonDir};
use serde_json::Value;

const VERSION: &str = "2.9.0";
const TARGETS: &[&str] = &["gfx942", "gfx90a", "gfx1100"];
/// Bytes of each device wheel's one data file.
const DEVICE_BYTES: usize = 256 * 1024;

fn device_dist(target: &str) -> String {
    format!("amd-torch-device-{target}")
}

/// A wheel of `name` with `payload` (path, bytes) and METADATA `extra`
/// lines; returns its file name.
fn wheel(files: &Path, name: &str, payload: Vec<(String, Vec<u8>)>, extra: &[String]) -> String {
    packages::pure_wheel(files, name, VERSION, payload, extra, false)
}

/// Builds the wheels and their PEP 503 pages below `dir`; returns the
/// served directory.
fn build_index(dir: &Path) -> PathBuf {
    let root = dir.join("index");
    let files = root.join("files");
    fs::create_dir_all(&files).expect("mkdir");
    let mut projects: Vec<(String, String)> = Vec::new();
    let mut meta = Vec::new();
    for t in TARGETS {
        meta.push(format!("Provides-Extra: device-{t}"));
    }
    meta.push("Provides-Extra: device-all".into());
    for t in TARGETS {
        meta.push(format!(
            "Requires-Dist: {}=={VERSION}; extra == \"device-{t}\"",
            device_dist(t)
        ));
        meta.push(format!(
            "Requires-Dist: {}=={VERSION}; extra == \"device-all\"",
            device_dist(t)
        ));
    }
    let base = wheel(
        &files,
        "torch",
        vec![("torch/__init__.py".into(), b"VERSION = '2.9.0'\n".to_vec())],
        &meta,
    );
    projects.push(("torch".into(), base));
    for t in TARGETS {
        let name = device_dist(t);
        let data: Vec<u8> = t.bytes().cycle().take(DEVICE_BYTES).collect();
        let module = name.replace('-', "_");
        let file = wheel(
            &files,
            &name,
            vec![(format!("{module}/kernels.bin"), data)],
            &[],
        );
        projects.push((name, file));
    }
    // Third-party shapes (findings 4 and 5 of issue 43): `vendorlib`'s
    // `device-gfx90a` extra names `commonlib`, an ordinary dependency
    // `app` requires too; `x` requires its generic-ISA wheel through a
    // Poetry-style marker that names two extras.
    let dep = |n: &str| format!("Requires-Dist: {n}=={VERSION}");
    let plain: [(&str, Vec<String>); 7] = [
        ("commonlib", vec![]),
        ("app", vec![dep("commonlib")]),
        (
            "vendorlib",
            vec![
                "Provides-Extra: device-gfx90a".into(),
                format!("{}; extra == \"device-gfx90a\"", dep("commonlib")),
            ],
        ),
        (
            "x",
            vec![
                "Provides-Extra: device-gfx1100".into(),
                "Provides-Extra: device-gfx1101".into(),
                format!("{}; extra == \"device-gfx1100\"", dep("x-device-gfx1100")),
                format!("{}; extra == \"device-gfx1101\"", dep("x-device-gfx1101")),
                format!(
                    "{}; extra == \"device-gfx1100\" or extra == \"device-gfx1101\"",
                    dep("x-device-gfx11-generic")
                ),
            ],
        ),
        ("x-device-gfx1100", vec![]),
        ("x-device-gfx1101", vec![]),
        ("x-device-gfx11-generic", vec![]),
    ];
    for (name, meta) in plain {
        let module = name.replace('-', "_");
        let file = wheel(
            &files,
            name,
            vec![(format!("{module}/__init__.py"), b"".to_vec())],
            &meta,
        );
        projects.push((name.to_string(), file));
    }
    packages::simple_pages(&root, &projects);
    root
}

/// The index, built once per process (every case serves it read-only).
fn index() -> &'static Path {
    static INDEX: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, root) = INDEX.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tmp");
        let root = build_index(dir.path());
        (dir, root)
    });
    root
}

/// A fresh venv and the index, served.
struct Case {
    tmp: tempfile::TempDir,
    server: http::Server,
    venv: PathBuf,
    /// The fetcher runs from here (modules a Python importing from its
    /// working directory would run).
    hostile: HostilePythonDir,
}

impl Case {
    fn new() -> Case {
        let tmp = tempfile::tempdir().expect("tmp");
        let server = http::serve_dir(index()).expect("serve");
        let venv = tmp.path().join("venv");
        packages::venv(&venv);
        Case {
            hostile: HostilePythonDir::plant(&tmp.path().join("hostile")),
            tmp,
            server,
            venv,
        }
    }

    fn python(&self) -> PathBuf {
        self.venv.join("bin/python")
    }

    fn index_url(&self) -> String {
        format!("{}simple/", self.server.root_url())
    }

    /// `pip install` of `reqs` from the index, straight (not through the
    /// fetcher).
    fn pip_install(&self, reqs: &[&str]) {
        pip_install(&self.python(), &self.index_url(), reqs);
    }

    /// Installed distributions (PEP 503 names), pip and setuptools left out.
    fn installed(&self) -> BTreeSet<String> {
        pip_installed(&self.python())
            .into_iter()
            .filter(|n| n != "pip" && n != "setuptools")
            .collect()
    }

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    /// `rocm-kpack-fetch <args>` with this venv's interpreter, from the
    /// hostile directory, with `env` set.
    fn fetch(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = bins::command("rocm-kpack-fetch");
        bins::isolate_fetcher(&mut c);
        c.args(args)
            .current_dir(&self.hostile.dir)
            .env("ROCM_KPACK_PYTHON", self.python())
            .env("PIP_CONFIG_FILE", "/dev/null")
            .env("PIP_NO_CACHE_DIR", "1")
            .env_remove("ROCM_BOOTSTRAP_FORCE_GFX_ARCH")
            .env_remove("ROCM_BOOTSTRAP_DISABLE_DETECTION")
            .env("UV_CACHE_DIR", self.tmp.path().join("uv-cache"))
            .env("UV_NO_CONFIG", "1");
        c.envs(env.iter().copied());
        run(&mut c)
    }

    /// `status` or `doctor` (`command`) on `machine`, this venv's
    /// site-packages only.
    fn status(&self, machine: &str, command: &str) -> Output {
        let sysfs = fixtures::machine(machine).display().to_string();
        self.fetch(
            &[
                command,
                "--sysfs-root",
                sysfs.as_str(),
                "--no-default-prefixes",
            ],
            &[],
        )
    }

    /// `prune --via pip` on the MI300X plus `more`.
    fn prune(&self, more: &[&str]) -> Output {
        let sysfs = fixtures::machine("mi300x").display().to_string();
        let mut args = vec![
            "prune",
            "--via",
            "pip",
            "--sysfs-root",
            sysfs.as_str(),
            "--no-default-prefixes",
        ];
        args.extend(more);
        self.fetch(&args, &[])
    }

    /// `python -m pip check`, which must pass.
    fn pip_check(&self) {
        ok(Command::new(self.python()).args(["-m", "pip", "check", "--disable-pip-version-check"]));
    }

    /// `install --auto --via pip` plus `more`.
    fn install(&self, machine: &str, more: &[&str]) -> Output {
        self.install_env(machine, more, &[])
    }

    /// [`Case::install`] with `env` set.
    fn install_env(&self, machine: &str, more: &[&str], env: &[(&str, &str)]) -> Output {
        let sysfs = fixtures::machine(machine).display().to_string();
        let python = self.python().display().to_string();
        let url = self.index_url();
        let mut args = vec![
            "install",
            "--auto",
            "--via",
            "pip",
            "--sysfs-root",
            sysfs.as_str(),
            "--python",
            python.as_str(),
            "--index-url",
            url.as_str(),
            "--no-default-prefixes",
        ];
        args.extend(more);
        self.fetch(&args, env)
    }
}

/// The pip backend's items of a `prune --json` (names) and the bytes the
/// report says are freed.
fn prune_items(o: &Output) -> (BTreeSet<String>, u64) {
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(o)));
    let pip = v["backends"]
        .as_array()
        .expect("backends")
        .iter()
        .find(|b| b["backend"] == "pip")
        .expect("pip backend")
        .clone();
    let names = pip["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["name"].as_str().map(str::to_string))
        .collect();
    (names, v["bytes"].as_u64().expect("bytes"))
}

fn text(o: &Output) -> String {
    packages::shown_output(o)
}

/// On an MI300X, `install --auto --via pip` on a `torch` without `.kpm`
/// installs exactly `torch[device-gfx942]`, which brings
/// `amd-torch-device-gfx942` and nothing for another processor;
/// `--dry-run` (text and JSON) names it and changes nothing.
#[test]
fn install_via_pip_adds_the_local_device_extra_of_a_distribution_without_kpm() {
    let case = Case::new();
    case.pip_install(&["torch"]);
    assert_eq!(case.installed(), Case::names(&["torch"]));
    let o = case.status("mi300x", "status");
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout)
            .contains("pip: amd-torch-device-gfx942 (torch[device-gfx942]) missing for gfx942"),
        "{}",
        text(&o)
    );
    let o = case.status("mi300x", "doctor");
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout)
            .contains("amd-torch-device-gfx942 (torch[device-gfx942]) is not installed"),
        "{}",
        text(&o)
    );

    let o = case.install("mi300x", &["--dry-run"]);
    assert!(o.status.success(), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains(&format!("install torch[device-gfx942]=={VERSION}")),
        "{}",
        text(&o)
    );
    let o = case.install("mi300x", &["--dry-run", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    let names: Vec<&str> = v["plan"]["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(names, [format!("torch[device-gfx942]=={VERSION}")]);
    assert_eq!(v["plan"]["packages"][0]["group"], "gfx942");
    assert_eq!(
        case.installed(),
        Case::names(&["torch"]),
        "--dry-run installed"
    );

    let o = case.install("mi300x", &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        case.installed(),
        Case::names(&["torch", "amd-torch-device-gfx942"])
    );
    ok(Command::new(case.python()).args(["-m", "pip", "check", "--disable-pip-version-check"]));
    let o = case.status("mi300x", "status");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // A processor the base has no extra for is named in a warning.
    let o = case.install("rx9070xt", &["--dry-run"]);
    assert!(o.status.success(), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(
            "torch publishes no device code for gfx1201 (it declares no extra device-gfx1201)"
        ),
        "{}",
        text(&o)
    );
}

/// `rocm-kpack-fetch pip install torch` (and `uv pip install torch`) in a
/// fresh venv on an MI300X: one install that brings `torch` and exactly
/// its gfx942 device wheel; `--dry-run` prints the command and installs
/// nothing.
#[test]
fn pip_install_wrapper_brings_exactly_the_local_device_wheel() {
    for client in ["pip", "uv"] {
        let case = Case::new();
        let sysfs = fixtures::machine("mi300x").display().to_string();
        let python = case.python().display().to_string();
        let url = case.index_url();
        let uv = uv().display().to_string();
        let mut args: Vec<&str> = vec![
            client,
            "--sysfs-root",
            sysfs.as_str(),
            "--python",
            python.as_str(),
        ];
        if client == "uv" {
            args.extend([
                "--uv-exe",
                uv.as_str(),
                "pip",
                "install",
                "--python",
                python.as_str(),
            ]);
        } else {
            args.extend(["install", "--disable-pip-version-check"]);
        }
        args.extend(["--index-url", url.as_str(), "torch"]);

        let mut dry = args.clone();
        dry.insert(1, "--dry-run");
        let o = case.fetch(&dry, &[]);
        assert!(o.status.success(), "{client}: {}", text(&o));
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            stdout.contains(&format!("would install torch[device-gfx942]=={VERSION} ")),
            "{client}: {}",
            text(&o)
        );
        assert!(case.installed().is_empty(), "{client}: --dry-run installed");

        let o = case.fetch(&args, &[]);
        assert!(o.status.success(), "{client}: {}", text(&o));
        assert_eq!(
            case.installed(),
            Case::names(&["torch", "amd-torch-device-gfx942"]),
            "{client}: {}",
            text(&o)
        );
        ok(Command::new(case.python()).args(["-m", "pip", "check", "--disable-pip-version-check"]));
    }
}

/// AMD's detector variables: `ROCM_BOOTSTRAP_FORCE_GFX_ARCH` replaces the
/// MI300X's gfx942; `ROCM_BOOTSTRAP_DISABLE_DETECTION=1` leaves no targets
/// (exit 3) and wins over the force list; `--target` wins over both.
#[test]
fn rocm_bootstrap_variables_choose_the_targets() {
    let case = Case::new();
    case.pip_install(&["torch"]);
    let o = case.install_env(
        "mi300x",
        &["--dry-run"],
        &[("ROCM_BOOTSTRAP_FORCE_GFX_ARCH", "gfx90a,gfx1100")],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(&format!(
            "install torch[device-gfx1100,device-gfx90a]=={VERSION}"
        )),
        "{}",
        text(&o)
    );
    let both = [
        ("ROCM_BOOTSTRAP_FORCE_GFX_ARCH", "gfx90a"),
        ("ROCM_BOOTSTRAP_DISABLE_DETECTION", "1"),
    ];
    let o = case.install_env("mi300x", &["--dry-run"], &both);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("detection is disabled (ROCM_BOOTSTRAP_DISABLE_DETECTION=1)"),
        "{}",
        text(&o)
    );
    let sysfs = fixtures::machine("mi300x").display().to_string();
    let o = case.fetch(
        &[
            "detect",
            "--sysfs-root",
            sysfs.as_str(),
            "--target",
            "gfx1100",
            "--json",
        ],
        &both,
    );
    assert!(o.status.success(), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["targets"], serde_json::json!(["gfx1100"]));
}

/// A `device-all` install on an MI300X: `status` names the two device
/// distributions no GPU here needs (exit 0: nothing is missing);
/// `prune --via pip --yes` removes exactly them, keeps gfx942, reports the
/// bytes their RECORDs list, and leaves `pip check` clean; `--keep` keeps
/// a target's distribution, `--dry-run` removes nothing.
#[test]
fn prune_removes_the_device_distributions_no_local_gpu_needs() {
    let case = Case::new();
    case.pip_install(&["torch[device-all]"]);
    let all: Vec<String> = TARGETS.iter().map(|t| device_dist(t)).collect();
    let mut want: Vec<&str> = all.iter().map(String::as_str).collect();
    want.push("torch");
    assert_eq!(case.installed(), Case::names(&want));

    let o = case.status("mi300x", "status");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    for t in ["gfx90a", "gfx1100"] {
        assert!(
            stdout.contains(&format!(
                "pip: amd-torch-device-{t} installed for no GPU here"
            )),
            "{}",
            text(&o)
        );
    }

    let prune = |more: &[&str]| case.prune(more);
    let gone = |ts: &[&str]| -> BTreeSet<String> { ts.iter().map(|t| device_dist(t)).collect() };

    // --keep keeps a target's distribution; --dry-run lists and changes nothing.
    let o = prune(&["--keep", "gfx90a", "--dry-run", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(prune_items(&o).0, gone(&["gfx1100"]));
    let o = prune(&["--dry-run"]);
    assert!(o.status.success(), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    for t in ["gfx90a", "gfx1100"] {
        assert!(
            stdout.contains(&format!("would remove (pip) amd-torch-device-{t} ")),
            "{}",
            text(&o)
        );
    }
    assert!(!stdout.contains("amd-torch-device-gfx942"), "{}", text(&o));
    assert_eq!(case.installed(), Case::names(&want), "--dry-run removed");

    let o = prune(&["--yes", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let (names, bytes) = prune_items(&o);
    assert_eq!(names, gone(&["gfx90a", "gfx1100"]));
    assert!(bytes >= 2 * DEVICE_BYTES as u64, "{bytes}");
    assert_eq!(
        case.installed(),
        Case::names(&["torch", "amd-torch-device-gfx942"])
    );
    case.pip_check();
    let o = prune(&["--dry-run", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(prune_items(&o).0.is_empty(), "{}", text(&o));
}

/// Issue 43, finding 4: `vendorlib`'s `device-gfx90a` extra names
/// `commonlib`, which `app` requires; and `amd-torch-device-gfx1100` was
/// asked for by name (pip wrote `REQUESTED`). On the MI300X, `prune --yes`
/// removes only gfx90a's torch device wheel: `commonlib` stays for `app`,
/// gfx1100's wheel stays for the user, each with a note, and `pip check`
/// stays clean.
#[test]
fn prune_keeps_what_another_distribution_requires_or_the_user_asked_for() {
    let case = Case::new();
    case.pip_install(&[
        "app",
        "vendorlib[device-gfx90a]",
        "torch[device-all]",
        &device_dist("gfx1100"),
    ]);
    let o = case.prune(&["--yes", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        prune_items(&o).0,
        BTreeSet::from([device_dist("gfx90a")]),
        "{}",
        text(&o)
    );
    let installed = case.installed();
    for kept in ["app", "commonlib", "vendorlib", "torch"] {
        assert!(installed.contains(kept), "{kept}: {installed:?}");
    }
    assert!(installed.contains(&device_dist("gfx1100")), "{installed:?}");
    assert!(!installed.contains(&device_dist("gfx90a")), "{installed:?}");
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    let warnings = v["warnings"].to_string();
    assert!(
        warnings.contains("keeping commonlib: app requires it"),
        "{warnings}"
    );
    assert!(
        warnings.contains("keeping amd-torch-device-gfx1100: it was asked for by name"),
        "{warnings}"
    );
    case.pip_check();
}

/// Issue 43, finding 5: `x-device-gfx11-generic; extra == "device-gfx1100"
/// or extra == "device-gfx1101"` serves both extras (PEP 508 markers are
/// evaluated for every extra). `prune --keep gfx1101 --yes` on the MI300X
/// removes gfx1100's wheel and keeps the generic-ISA wheel gfx1101 needs.
#[test]
fn prune_reads_every_extra_a_marker_names() {
    let case = Case::new();
    case.pip_install(&["x[device-gfx1100,device-gfx1101]"]);
    let o = case.prune(&["--keep", "gfx1101", "--yes", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        prune_items(&o).0,
        BTreeSet::from(["x-device-gfx1100".to_string()]),
        "{}",
        text(&o)
    );
    assert_eq!(
        case.installed(),
        Case::names(&["x", "x-device-gfx1101", "x-device-gfx11-generic"])
    );
    case.pip_check();
}

/// The distributions whose `.dist-info` is in the venv's own site-packages
/// (PEP 503 names), pip and setuptools left out.
fn site_dists(case: &Case) -> BTreeSet<String> {
    fs::read_dir(rocm_kpack_test_support::site_packages(&case.venv))
        .expect("site-packages")
        .filter_map(|e| {
            let name = e.expect("entry").file_name().to_string_lossy().into_owned();
            let stem = name.strip_suffix(".dist-info")?;
            let (dist, _) = stem.rsplit_once('-')?;
            Some(dist.to_lowercase().replace(['_', '.'], "-"))
        })
        .filter(|n| n != "pip" && n != "setuptools")
        .collect()
}

/// Issue 43, finding 2: root's venv has one directory another user owns on
/// `sys.path`, as `pip install -e ~user/proj` leaves it (a root-owned
/// `.pth` naming it). There that user planted modules (`sitecustomize.py`
/// runs at every interpreter start, `-I` or not) and distributions whose
/// `Name` is an option (`--index-url=<their index>#`), whose `Version`
/// carries one (`1.0 --no-deps`), and whose `device-gfx942` extra requires
/// their own wheel by URL (a `.pth` in it would run as root at every
/// start). `install --auto --via pip` refuses the interpreter before any
/// of it runs; with `--unsafe-permissions` (their modules removed) it
/// ignores the three distributions, which are outside site-packages: their
/// index is never asked, their wheel never installed, and torch gets
/// exactly its gfx942 wheel.
#[test]
fn a_directory_another_user_owns_on_sys_path_is_refused_and_its_distributions_ignored() {
    let case = Case::new();
    case.pip_install(&["torch"]);
    let theirs = case.tmp.path().join("theirs");
    fs::create_dir_all(theirs.join("simple")).expect("mkdir");
    let their_index = http::serve_dir(&theirs).expect("serve");
    let home = case.tmp.path().join("home-user");
    let proj = home.join("proj");
    let modules = HostilePythonDir::plant(&proj);
    let marker = case.tmp.path().join("their-pth-ran");
    let payload = proj.join("payload-1.0-py3-none-any.whl");
    packages::pure_wheel(
        &proj,
        "payload",
        "1.0",
        vec![(
            "payload.pth".into(),
            format!(
                "import os; open({:?}, 'w').close()\n",
                marker.display().to_string()
            )
            .into_bytes(),
        )],
        &[],
        false,
    );
    let planted = [
        (
            "attack-1.0.dist-info",
            format!("Name: --index-url={}simple/#\nVersion: 1.0\n", their_index.root_url()),
        ),
        ("evil-1.0.dist-info", "Name: evil\nVersion: 1.0 --no-deps\n".to_string()),
        (
            "planted-1.0.dist-info",
            format!(
                "Name: planted\nVersion: 1.0\nRequires-Dist: payload @ file://{} ; extra == \"device-gfx942\"\n",
                payload.display()
            ),
        ),
    ];
    for (dir, head) in &planted {
        let di = proj.join(dir);
        fs::create_dir_all(&di).expect("mkdir");
        fs::write(
            di.join("METADATA"),
            format!("Metadata-Version: 2.1\n{head}Provides-Extra: device-gfx942\n"),
        )
        .expect("METADATA");
    }
    ok(Command::new("chown").args(["-R", "12345:12345"]).arg(&home));
    let site = rocm_kpack_test_support::site_packages(&case.venv);
    fs::write(
        site.join("__editable__.proj-1.0.pth"),
        format!("{}\n", proj.display()),
    )
    .expect("pth");

    let o = case.install("mi300x", &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("refusing the Python interpreter")
            && stderr.contains("__editable__.proj-1.0.pth puts"),
        "{}",
        text(&o)
    );
    assert_eq!(modules.ran(), Vec::<String>::new(), "their modules ran");
    assert_eq!(site_dists(&case), Case::names(&["torch"]));

    modules.remove_modules();
    let o = case.install("mi300x", &["--unsafe-permissions"]);
    assert!(o.status.success(), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    for name in ["--index-url=", "evil", "planted"] {
        assert!(
            stderr.contains(&format!("ignoring \"{name}"))
                && stderr.contains("not in the interpreter's site-packages"),
            "{name}: {}",
            text(&o)
        );
    }
    assert_eq!(
        site_dists(&case),
        Case::names(&["torch", "amd-torch-device-gfx942"])
    );
    assert!(
        their_index.requests().is_empty(),
        "their index was asked: {:?}",
        their_index.requests()
    );
    ok(Command::new(case.python()).args(["-I", "-c", "pass"]));
    assert!(
        !marker.exists(),
        "their wheel was installed and its .pth ran"
    );
    assert_eq!(modules.ran(), Vec::<String>::new(), "their modules ran");
}
