//! The fetcher and pip (and uv) on distributions it did not split: wheels
//! that follow AMD's multi-arch metadata, with no `.kpm`. A base `torch`
//! declares `device-gfx942`, `device-gfx90a`, `device-gfx1100` and
//! `device-all` extras; each per-target extra requires
//! `amd-torch-device-<target>` (a prefix that is not the base's name),
//! `device-all` requires all three. The wheels are built here (python's
//! zipfile, [`rocm_kpack_test_support::packages::write_wheel`]) and served as a PEP 503 index
//! on 127.0.0.1; every client is real and runs in a fresh venv. The
//! machine is the MI300X sysfs tree (gfx942).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rocm_kpack_test_support::packages::{self, ok, pip_install, pip_installed, run, write_wheel};
use rocm_kpack_test_support::{bins, fixtures, http, HostilePythonDir};
use serde_json::Value;
use sha2::{Digest, Sha256};

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
    let under = name.replace('-', "_");
    let di = format!("{under}-{VERSION}.dist-info");
    let mut metadata = format!("Metadata-Version: 2.1\nName: {name}\nVersion: {VERSION}\n");
    for line in extra {
        metadata.push_str(line);
        metadata.push('\n');
    }
    let wheel_file = "Wheel-Version: 1.0\nGenerator: pip_native test\nRoot-Is-Purelib: true\nTag: py3-none-any\n";
    let mut all = payload;
    all.push((format!("{di}/METADATA"), metadata.into_bytes()));
    all.push((format!("{di}/WHEEL"), wheel_file.as_bytes().to_vec()));
    let file = format!("{under}-{VERSION}-py3-none-any.whl");
    write_wheel(&files.join(&file), &all, &di, None);
    file
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
    let mut top = String::from("<!DOCTYPE html>\n<html><body>\n");
    for (project, file) in &projects {
        let bytes = fs::read(files.join(file)).expect("wheel");
        let sha = hex::encode(Sha256::digest(&bytes));
        let page = root.join("simple").join(project);
        fs::create_dir_all(&page).expect("mkdir");
        fs::write(
            page.join("index.html"),
            format!(
                "<!DOCTYPE html>\n<html><body>\n<a href=\"../../files/{file}#sha256={sha}\">{file}</a>\n</body></html>\n"
            ),
        )
        .expect("page");
        top.push_str(&format!("<a href=\"{project}/\">{project}</a>\n"));
    }
    top.push_str("</body></html>\n");
    fs::write(root.join("simple/index.html"), top).expect("index");
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
        let root = build_index(tmp.path());
        let server = http::serve_dir(&root).expect("serve");
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
            "--python-exe",
            python.as_str(),
            "--index-url",
            url.as_str(),
            "--no-default-prefixes",
        ];
        args.extend(more);
        self.fetch(&args, env)
    }
}

fn text(o: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
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

/// uv from PyPI, installed by scripts/test.sh into target/tools.
fn uv() -> PathBuf {
    let uv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tools/uv/bin/uv");
    assert!(
        uv.is_file(),
        "{} is missing: scripts/test.sh installs it (pip install --target target/tools/uv uv)",
        uv.display()
    );
    uv
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
            "--python-exe",
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

    let sysfs = fixtures::machine("mi300x").display().to_string();
    let prune = |more: &[&str]| {
        let mut args = vec![
            "prune",
            "--via",
            "pip",
            "--sysfs-root",
            sysfs.as_str(),
            "--no-default-prefixes",
        ];
        args.extend(more);
        case.fetch(&args, &[])
    };
    let items = |o: &Output| -> (BTreeSet<String>, u64) {
        let v: Value = serde_json::from_slice(&o.stdout).expect("json");
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
    };
    let gone = |ts: &[&str]| -> BTreeSet<String> { ts.iter().map(|t| device_dist(t)).collect() };

    // --keep keeps a target's distribution; --dry-run lists and changes nothing.
    let o = prune(&["--keep", "gfx90a", "--dry-run", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(items(&o).0, gone(&["gfx1100"]));
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
    let (names, bytes) = items(&o);
    assert_eq!(names, gone(&["gfx90a", "gfx1100"]));
    assert!(bytes >= 2 * DEVICE_BYTES as u64, "{bytes}");
    assert_eq!(
        case.installed(),
        Case::names(&["torch", "amd-torch-device-gfx942"])
    );
    ok(Command::new(case.python()).args(["-m", "pip", "check", "--disable-pip-version-check"]));
    let o = prune(&["--dry-run", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(items(&o).0.is_empty(), "{}", text(&o));
}
