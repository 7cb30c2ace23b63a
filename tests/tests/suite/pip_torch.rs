//! `rocm-kpack-fetch pip install torch` and `uv pip install torch` on an
//! index with PyTorch's real metadata shape (issue 43): `torch` requires
//! `rocm[libraries,device-all]==V` unconditionally (PyTorch's
//! `PYTORCH_EXTRA_INSTALL_REQUIREMENTS`) and has `device-<t>` extras that
//! bring `amd-torch-device-<t>`; `rocm` has `libraries`, `device-<t>` and
//! `device-all` extras; `rocm-sdk-core`, `rocm-sdk-libraries`,
//! `rocm-sdk-device-<t>` (1 MiB of incompressible bytes each) and
//! `amd-torch-device-<t>` (which requires `rocm-sdk-device-<t>`). Seven
//! targets; a PEP 658 `.metadata` file beside every wheel, announced with
//! both PEP 658's and PEP 714's attributes. The server on 127.0.0.1 logs
//! every request, so the tests see what each client fetched.
//!
//! Also the red team's findings that need a real client: indexes the
//! query must not ask (1), a dry run that must build nothing (3), an
//! interpreter another user owns (6), uv in a directory another user owns
//! (7), and overrides checked against the family table (8).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use rocm_kpack_test_support::packages::{self, ok, run, uv};
use rocm_kpack_test_support::{bins, fixtures, http};
use sha2::{Digest, Sha256};

const V: &str = "7.14";
const TARGETS: &[&str] = &[
    "gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1100", "gfx1101", "gfx1201",
];
const DEVICE_BYTES: usize = 1 << 20;

/// A wheel and its PEP 658 metadata file in `files`; returns (project,
/// file name).
fn wheel(
    files: &Path,
    name: &str,
    version: &str,
    payload: Vec<(String, Vec<u8>)>,
    meta: &[String],
) -> (String, String) {
    (
        name.to_string(),
        packages::pure_wheel(files, name, version, payload, meta, true),
    )
}

/// The PyTorch-shaped index, built once per process.
fn torch_index() -> &'static Path {
    static INDEX: OnceLock<PathBuf> = OnceLock::new();
    INDEX.get_or_init(|| {
        let root = packages::store_cache().join("pip-torch-index-v2");
        if root.join("simple/index.html").is_file() {
            return root;
        }
        let build = root.with_extension("build");
        let _ = fs::remove_dir_all(&build);
        let files = build.join("files");
        fs::create_dir_all(&files).expect("mkdir");
        let mut projects = Vec::new();
        let mut torch = Vec::new();
        for t in TARGETS {
            torch.push(format!("Provides-Extra: device-{t}"));
            torch.push(format!(
                "Requires-Dist: amd-torch-device-{t}=={V}; extra == \"device-{t}\""
            ));
        }
        torch.push(format!("Requires-Dist: rocm[libraries,device-all]=={V}"));
        projects.push(wheel(
            &files,
            "torch",
            V,
            vec![("torch/__init__.py".into(), b"".to_vec())],
            &torch,
        ));
        let mut rocm = vec![
            "Provides-Extra: libraries".to_string(),
            "Provides-Extra: device-all".to_string(),
            format!("Requires-Dist: rocm-sdk-core=={V}"),
            format!("Requires-Dist: rocm-sdk-libraries=={V}; extra == \"libraries\""),
        ];
        for t in TARGETS {
            rocm.push(format!("Provides-Extra: device-{t}"));
            rocm.push(format!(
                "Requires-Dist: rocm-sdk-device-{t}=={V}; extra == \"device-{t}\""
            ));
            rocm.push(format!(
                "Requires-Dist: rocm-sdk-device-{t}=={V}; extra == \"device-all\""
            ));
        }
        projects.push(wheel(
            &files,
            "rocm",
            V,
            vec![("rocm/__init__.py".into(), b"".to_vec())],
            &rocm,
        ));
        for base in ["rocm-sdk-core", "rocm-sdk-libraries"] {
            let m = base.replace('-', "_");
            projects.push(wheel(
                &files,
                base,
                V,
                vec![(format!("{m}/__init__.py"), b"".to_vec())],
                &[],
            ));
        }
        for t in TARGETS {
            // Incompressible: a SHA-256 chain seeded with the target.
            let mut data = Vec::with_capacity(DEVICE_BYTES);
            let mut block = Sha256::digest(t.as_bytes());
            while data.len() < DEVICE_BYTES {
                block = Sha256::digest(block);
                data.extend_from_slice(&block);
            }
            let sdk = format!("rocm-sdk-device-{t}");
            let m = sdk.replace('-', "_");
            projects.push(wheel(
                &files,
                &sdk,
                V,
                vec![(format!("{m}/kernels.bin"), data)],
                &[],
            ));
            let amd = format!("amd-torch-device-{t}");
            let m = amd.replace('-', "_");
            projects.push(wheel(
                &files,
                &amd,
                V,
                vec![(format!("{m}/__init__.py"), b"".to_vec())],
                &[format!("Requires-Dist: rocm-sdk-device-{t}=={V}")],
            ));
        }
        packages::simple_pages(&build, &projects);
        let _ = fs::remove_dir_all(&root);
        fs::rename(&build, &root).expect("rename");
        root
    })
}

fn text(o: &Output) -> String {
    packages::shown_output(o)
}

struct Case {
    tmp: tempfile::TempDir,
    server: http::Server,
    venv: PathBuf,
}

impl Case {
    fn new(client: &str) -> Case {
        let tmp = tempfile::tempdir().expect("tmp");
        let server = http::serve_dir(torch_index()).expect("serve");
        let venv = tmp.path().join("venv");
        if client == "uv" {
            ok(Command::new(uv())
                .args(["venv", "-q"])
                .arg(&venv)
                .env("UV_NO_CONFIG", "1"));
        } else {
            packages::venv(&venv);
        }
        Case { tmp, server, venv }
    }

    fn python(&self) -> String {
        self.venv.join("bin/python").display().to_string()
    }

    fn index(&self) -> String {
        format!("{}simple/", self.server.root_url())
    }

    fn env(&self, c: &mut Command) {
        c.env("PIP_CONFIG_FILE", "/dev/null")
            .env("PIP_NO_CACHE_DIR", "1")
            .env("UV_CACHE_DIR", self.tmp.path().join("uv-cache"))
            .env("UV_NO_CONFIG", "1")
            .env_remove("ROCM_BOOTSTRAP_FORCE_GFX_ARCH")
            .env_remove("ROCM_BOOTSTRAP_DISABLE_DETECTION")
            .env_remove("UV_AMD_GPU_ARCHITECTURE")
            .env_remove("CONDA_OVERRIDE_AMDGPU_ARCH");
    }

    /// Plain `python -m pip install -q ARGS` into the venv (not through
    /// the fetcher).
    fn pip_install(&self, args: &[&str]) {
        let mut c = Command::new(self.python());
        c.args(["-m", "pip", "install", "-q", "--disable-pip-version-check"])
            .args(args);
        self.env(&mut c);
        ok(&mut c);
    }

    /// `rocm-kpack-fetch <client> [ours] install ARGS` on the MI300X.
    fn wrapper(&self, client: &str, ours: &[&str], args: &[&str]) -> Output {
        let mut c = bins::command("rocm-kpack-fetch");
        bins::isolate_fetcher(&mut c);
        self.env(&mut c);
        let sysfs = fixtures::machine("mi300x");
        c.arg(client).arg("--sysfs-root").arg(&sysfs).args(ours);
        if client == "uv" {
            c.arg("--uv-exe")
                .arg(uv())
                .args(["pip", "install", "--python", &self.python()]);
        } else {
            c.args(["--python", &self.python(), "install"]);
        }
        c.args(args);
        run(&mut c)
    }

    /// Installed distributions (PEP 503 names, without pip and setuptools).
    fn installed(&self) -> BTreeSet<String> {
        let o = ok(Command::new(uv())
            .args([
                "pip",
                "list",
                "--format",
                "freeze",
                "--python",
                &self.python(),
            ])
            .env("UV_NO_CONFIG", "1"));
        o.lines()
            .filter_map(|l| l.split("==").next())
            .map(str::to_string)
            .filter(|n| n != "pip" && n != "setuptools")
            .collect()
    }

    fn check(&self, client: &str) {
        if client == "uv" {
            ok(Command::new(uv())
                .args(["pip", "check", "--python", &self.python()])
                .env("UV_NO_CONFIG", "1"));
        } else {
            ok(Command::new(self.python()).args([
                "-m",
                "pip",
                "check",
                "--disable-pip-version-check",
            ]));
        }
    }

    /// Wheels fetched (GET /files/*.whl), and the bytes of the device
    /// wheels among them.
    fn fetched(&self) -> (Vec<String>, u64) {
        let mut wheels = Vec::new();
        let mut bytes = 0;
        for r in self.server.requests() {
            let Some(file) = r.path.strip_prefix("/files/") else {
                continue;
            };
            if !file.ends_with(".whl") || r.method != "GET" {
                continue;
            }
            if file.starts_with("rocm_sdk_device_") {
                bytes +=
                    fs::metadata(torch_index().join("files").join(file)).map_or(0, |m| m.len());
            }
            wheels.push(file.to_string());
        }
        (wheels, bytes)
    }
}

fn device_set(targets: &[&str]) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = ["torch", "rocm", "rocm-sdk-core", "rocm-sdk-libraries"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for t in targets {
        out.insert(format!("rocm-sdk-device-{t}"));
        out.insert(format!("amd-torch-device-{t}"));
    }
    out
}

/// The issue's measurement: on an MI300X, `rocm-kpack-fetch pip install
/// torch` and `uv pip install torch` install exactly gfx942's device set;
/// the server's log shows no wheel of another target requested, by the
/// resolution or by the install, and the device bytes downloaded are one
/// target's, against seven for plain pip on the same index; `pip check`
/// (and `uv pip check`) are clean; `--dry-run` lists the set and what was
/// left out and installs nothing.
#[test]
fn torch_installs_one_targets_device_code() {
    for client in ["pip", "uv"] {
        let case = Case::new(client);
        let index = case.index();
        let device_wheel = |t: &str| {
            torch_index()
                .join("files")
                .join(format!("rocm_sdk_device_{t}-{V}-py3-none-any.whl"))
        };
        let others: u64 = TARGETS
            .iter()
            .filter(|t| **t != "gfx942")
            .map(|t| fs::metadata(device_wheel(t)).expect("wheel").len())
            .sum();
        let o = case.wrapper(client, &["--dry-run"], &["--index-url", &index, "torch"]);
        assert!(o.status.success(), "{client}: {}", text(&o));
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            stdout.contains(&format!(
                "the plain command would also download the {} left out: {} more",
                TARGETS.len() - 1,
                rocm_kpack_cli::iec_size(others)
            )),
            "{client}: {}",
            text(&o)
        );
        assert!(
            stdout.contains(&format!("would install torch[device-gfx942]=={V}")),
            "{client}: {}",
            text(&o)
        );
        assert!(
            stdout.contains(&format!(
                "left out rocm-sdk-device-gfx90a=={V} (required by rocm[device-all]"
            )),
            "{client}: {}",
            text(&o)
        );
        assert!(
            case.installed().is_empty(),
            "{client}: --dry-run installed {:?}",
            case.installed()
        );
        // Beside its own bytes, the dry run says what the plain command
        // would download: each left-out wheel's size, looked up without
        // fetching it (index pages and HEAD only).
        let o = case.wrapper(
            client,
            &["--dry-run", "--json"],
            &["--index-url", &index, "torch"],
        );
        assert!(o.status.success(), "{client}: {}", text(&o));
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        let plan = &doc["plan"];
        let left_out = plan["left_out"].as_array().expect("left_out");
        assert_eq!(left_out.len(), TARGETS.len() - 1, "{client}: {plan}");
        let mut expected = 0;
        for l in left_out {
            let req = l["requirement"].as_str().expect("requirement");
            let t = req
                .strip_prefix("rocm-sdk-device-")
                .and_then(|r| r.strip_suffix(&format!("=={V}")))
                .expect("a device requirement");
            let size = fs::metadata(device_wheel(t)).expect("wheel").len();
            assert_eq!(l["bytes"].as_u64(), Some(size), "{client}: {req}");
            expected += size;
        }
        assert_eq!(expected, others, "{client}: {plan}");
        assert_eq!(
            plan["left_out_bytes"].as_u64(),
            Some(others),
            "{client}: {plan}"
        );
        assert!(
            plan["bytes"].as_u64().expect("bytes") < expected,
            "{client}: {plan}"
        );
        let (wheels, _) = case.fetched();
        for w in &wheels {
            assert!(
                !TARGETS
                    .iter()
                    .any(|t| *t != "gfx942" && w.contains(&format!("_{t}-"))),
                "{client}: the dry run fetched {w}"
            );
        }
        let metadata: Vec<String> = case
            .server
            .requests()
            .into_iter()
            .filter(|r| r.method == "GET" && r.path.ends_with(".metadata"))
            .map(|r| r.path)
            .filter(|p| {
                TARGETS
                    .iter()
                    .any(|t| *t != "gfx942" && p.contains(&format!("_{t}-")))
            })
            .collect();
        assert!(metadata.is_empty(), "{client}: fetched {metadata:?}");

        let o = case.wrapper(client, &[], &["--index-url", &index, "torch"]);
        assert!(o.status.success(), "{client}: {}", text(&o));
        assert_eq!(
            case.installed(),
            device_set(&["gfx942"]),
            "{client}: {}",
            text(&o)
        );
        case.check(client);
        let (wheels, bytes) = case.fetched();
        for w in &wheels {
            let other = TARGETS
                .iter()
                .any(|t| *t != "gfx942" && w.contains(&format!("_{t}-")));
            assert!(!other, "{client}: fetched {w}: {wheels:?}");
        }
        // The two dry runs and the install each fetched gfx942's device wheel
        // at most once (uv's cache serves the second).
        assert!(
            bytes >= DEVICE_BYTES as u64 && bytes <= 4 * DEVICE_BYTES as u64,
            "{client}: {bytes}"
        );
        eprintln!("{client} through the wrapper: {bytes} device bytes fetched ({wheels:?})");
    }

    // Plain pip on the same index, for the figure beside ours.
    let case = Case::new("pip");
    case.pip_install(&["--index-url", &case.index(), "torch"]);
    let (_, bytes) = case.fetched();
    assert!(bytes >= (TARGETS.len() * DEVICE_BYTES) as u64, "{bytes}");
    eprintln!("plain pip: {bytes} device bytes fetched");
}

/// The dry run sizes the left-out wheels through the user's own options,
/// here a local `--no-index --find-links DIR` (pip's finder reads the
/// directory; uv's lock names `file://` URLs), and installs nothing.
#[test]
fn dry_run_sizes_what_find_links_would_add() {
    let files = torch_index().join("files");
    let others: u64 = TARGETS
        .iter()
        .filter(|t| **t != "gfx942")
        .map(|t| {
            fs::metadata(files.join(format!("rocm_sdk_device_{t}-{V}-py3-none-any.whl")))
                .expect("wheel")
                .len()
        })
        .sum();
    for client in ["pip", "uv"] {
        let case = Case::new(client);
        let dir = files.display().to_string();
        let o = case.wrapper(
            client,
            &["--dry-run", "--json"],
            &["--no-index", "--find-links", &dir, "torch"],
        );
        assert!(o.status.success(), "{client}: {}", text(&o));
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        let plan = &doc["plan"];
        assert_eq!(
            plan["left_out_bytes"].as_u64(),
            Some(others),
            "{client}: {plan}"
        );
        for l in plan["left_out"].as_array().expect("left_out") {
            assert!(l["bytes"].as_u64().is_some(), "{client}: {l}");
        }
        assert!(case.installed().is_empty(), "{client}: installed");
        assert!(
            case.server.requests().is_empty(),
            "{client}: asked the index"
        );
    }
}

/// `--target gfx90a,gfx942` with no GPU named brings both targets' device
/// sets (an image build for two machines).
#[test]
fn named_targets_bring_each_their_device_set() {
    let case = Case::new("pip");
    let index = case.index();
    let o = case.wrapper(
        "pip",
        &["--target", "gfx90a,gfx942"],
        &["--index-url", &index, "torch"],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        case.installed(),
        device_set(&["gfx90a", "gfx942"]),
        "{}",
        text(&o)
    );
    case.check("pip");
    // The unmarked dependencies: only torch was asked for by name.
    let site = rocm_kpack_test_support::site_packages(&case.venv);
    assert!(site
        .join(format!("torch-{V}.dist-info/REQUESTED"))
        .is_file());
    assert!(!site
        .join(format!("rocm_sdk_device_gfx90a-{V}.dist-info/REQUESTED"))
        .exists());
}

/// A second index with a higher-versioned sdist whose build backend
/// writes a marker file.
fn confusion_index(dir: &Path, marker: &Path) -> PathBuf {
    let root = dir.join("other");
    let files = root.join("files");
    fs::create_dir_all(&files).expect("mkdir");
    let setup = format!(
        "open({:?}, 'w').write('built')\nfrom setuptools import setup\nsetup(name='torch', version='99.0')\n",
        marker.display().to_string()
    );
    let script = r#"
import io, sys, tarfile
out, setup = sys.argv[1], sys.argv[2]
with tarfile.open(out, 'w:gz') as t:
    for name, data in [('torch-99.0/setup.py', setup), ('torch-99.0/PKG-INFO', 'Metadata-Version: 2.1\nName: torch\nVersion: 99.0\n')]:
        b = data.encode()
        info = tarfile.TarInfo(name)
        info.size = len(b)
        t.addfile(info, io.BytesIO(b))
"#;
    ok(Command::new("python3")
        .args(["-c", script])
        .arg(files.join("torch-99.0.tar.gz"))
        .arg(&setup));
    packages::simple_pages(&root, &[("torch".into(), "torch-99.0.tar.gz".into())]);
    root
}

/// Findings 1 and 3: the metadata query asked an index the install would
/// not use (pip's `--index-u`, `-iURL`; uv's `--index` before its
/// `--default-index`) and ran a higher-versioned sdist's build backend as
/// root there, even in a dry run. Now every round sees the client's own
/// index options with the client's semantics and builds nothing.
#[test]
fn resolution_asks_only_the_indexes_the_client_uses_and_builds_nothing() {
    for client in ["pip", "uv"] {
        let case = Case::new(client);
        let marker = case.tmp.path().join("built-as-root");
        let other = http::serve_dir(confusion_index(case.tmp.path(), &marker)).expect("serve");
        let ours = case.index();
        let theirs = format!("{}simple/", other.root_url());
        let attempts: Vec<Vec<String>> = if client == "pip" {
            vec![
                vec!["--index-u".into(), ours.clone(), "torch".into()],
                vec![format!("-i{ours}"), "torch".into()],
            ]
        } else {
            vec![vec![
                "--index".into(),
                ours.clone(),
                "--default-index".into(),
                theirs.clone(),
                "torch".into(),
            ]]
        };
        for args in attempts {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let mut c = bins::command("rocm-kpack-fetch");
            bins::isolate_fetcher(&mut c);
            case.env(&mut c);
            // pip's default index is the other one, as PyPI would be.
            c.env("PIP_INDEX_URL", &theirs);
            let sysfs = fixtures::machine("mi300x");
            c.arg(client)
                .arg("--sysfs-root")
                .arg(&sysfs)
                .arg("--dry-run");
            if client == "uv" {
                c.arg("--uv-exe")
                    .arg(uv())
                    .args(["pip", "install", "--python", &case.python()]);
            } else {
                c.args(["--python", &case.python(), "install"]);
            }
            let o = run(c.args(&args));
            assert!(o.status.success(), "{client} {args:?}: {}", text(&o));
            assert!(!marker.exists(), "{client} {args:?}: an sdist was built");
            assert!(
                String::from_utf8_lossy(&o.stdout)
                    .contains(&format!("would install torch[device-gfx942]=={V}")),
                "{}",
                text(&o)
            );
        }
        if client == "pip" {
            assert!(
                other.requests().is_empty(),
                "pip asked the other index: {:?}",
                other.requests()
            );
        }
        // The other index alone: only an sdist, which a dry run must not build.
        let o = case.wrapper(client, &["--dry-run"], &["--index-url", &theirs, "torch"]);
        assert!(!o.status.success(), "{client}: {}", text(&o));
        assert!(!marker.exists(), "{client}: the dry run built an sdist");
    }
}

/// Finding 6: `status`, `prune` and `install --dry-run` pointed at a venv
/// another user owns ran that user's `.pth` as root. Now the interpreter is
/// refused before it starts, read-only commands included, unless
/// `--unsafe-permissions`.
#[test]
fn an_interpreter_another_user_owns_is_refused() {
    let case = Case::new("pip");
    let site = rocm_kpack_test_support::site_packages(&case.venv);
    let marker = case.tmp.path().join("pth-ran");
    fs::write(
        site.join("zz-evil.pth"),
        format!(
            "import os; open({:?}, 'w').close()\n",
            marker.display().to_string()
        ),
    )
    .expect("pth");
    ok(Command::new("chown")
        .args(["-R", "12345:12345"])
        .arg(&case.venv));
    let sysfs = fixtures::machine("mi300x").display().to_string();
    let python = case.python();
    for args in [
        vec!["status", "--sysfs-root", &sysfs, "--no-default-prefixes"],
        vec![
            "prune",
            "--via",
            "pip",
            "--python",
            &python,
            "--sysfs-root",
            &sysfs,
            "--no-default-prefixes",
        ],
        vec![
            "install",
            "--auto",
            "--via",
            "pip",
            "--dry-run",
            "--python",
            &python,
            "--sysfs-root",
            &sysfs,
            "--no-default-prefixes",
        ],
    ] {
        let mut c = bins::command("rocm-kpack-fetch");
        bins::isolate_fetcher(&mut c);
        case.env(&mut c);
        c.env("ROCM_KPACK_PYTHON", &python).args(&args);
        let o = run(&mut c);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("refusing the Python interpreter"),
            "{args:?}: {}",
            text(&o)
        );
        assert!(!marker.exists(), "{args:?}: the other user's .pth ran");
    }
    let mut c = bins::command("rocm-kpack-fetch");
    bins::isolate_fetcher(&mut c);
    case.env(&mut c);
    c.env("ROCM_KPACK_PYTHON", &python).args([
        "status",
        "--sysfs-root",
        &sysfs,
        "--no-default-prefixes",
        "--unsafe-permissions",
    ]);
    let o = run(&mut c);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// Finding 7: uv, run by root in a directory another user owns, ran that
/// user's `./.venv/bin/python`. Now uv runs from `/` with an explicit
/// `--python`.
#[test]
fn uv_never_runs_the_interpreter_of_the_working_directory() {
    let case = Case::new("uv");
    let hostile = case.tmp.path().join("hostile");
    let marker = case.tmp.path().join("their-python-ran");
    fs::create_dir_all(hostile.join(".venv/bin")).expect("mkdir");
    let fake = hostile.join(".venv/bin/python");
    fs::write(
        &fake,
        format!("#!/bin/sh\ntouch {}\nexit 1\n", marker.display()),
    )
    .expect("fake");
    ok(Command::new("chmod").arg("755").arg(&fake));
    ok(Command::new("chown")
        .args(["-R", "12345:12345"])
        .arg(&hostile));
    let mut c = bins::command("rocm-kpack-fetch");
    bins::isolate_fetcher(&mut c);
    case.env(&mut c);
    let sysfs = fixtures::machine("mi300x");
    c.current_dir(&hostile)
        .env("ROCM_KPACK_PYTHON", case.python())
        .arg("uv")
        .arg("--sysfs-root")
        .arg(&sysfs)
        .arg("--dry-run")
        .arg("--uv-exe")
        .arg(uv())
        .args(["pip", "install", "--index-url", &case.index(), "torch"]);
    let o = run(&mut c);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!marker.exists(), "uv ran ./.venv/bin/python");
}

/// Finding 8 and issue 43's overrides: `gfxdead` is refused from every
/// variable as from `--target` (exit 2); `UV_AMD_GPU_ARCHITECTURE` and
/// `CONDA_OVERRIDE_AMDGPU_ARCH` choose the targets below rocm-bootstrap's
/// variable.
#[test]
fn override_variables_are_checked_and_ordered() {
    let sysfs = fixtures::machine("mi300x").display().to_string();
    let detect = |env: &[(&str, &str)]| {
        let mut c = bins::command("rocm-kpack-fetch");
        bins::isolate_fetcher(&mut c);
        for v in [
            "ROCM_KPACK_ARCH_OVERRIDE",
            "ROCM_BOOTSTRAP_FORCE_GFX_ARCH",
            "ROCM_BOOTSTRAP_DISABLE_DETECTION",
            "UV_AMD_GPU_ARCHITECTURE",
            "CONDA_OVERRIDE_AMDGPU_ARCH",
        ] {
            c.env_remove(v);
        }
        c.args(["detect", "--json", "--sysfs-root", &sysfs])
            .envs(env.iter().copied());
        run(&mut c)
    };
    for var in [
        "ROCM_KPACK_ARCH_OVERRIDE",
        "ROCM_BOOTSTRAP_FORCE_GFX_ARCH",
        "UV_AMD_GPU_ARCHITECTURE",
    ] {
        let o = detect(&[(var, "gfxdead")]);
        assert_eq!(o.status.code(), Some(2), "{var}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(var),
            "{var}: {}",
            text(&o)
        );
    }
    let targets = |o: &Output| -> serde_json::Value {
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        v["targets"].clone()
    };
    let o = detect(&[
        ("UV_AMD_GPU_ARCHITECTURE", "gfx1100"),
        ("CONDA_OVERRIDE_AMDGPU_ARCH", "9.0.10"),
    ]);
    assert_eq!(targets(&o), serde_json::json!(["gfx1100"]), "{}", text(&o));
    let o = detect(&[("CONDA_OVERRIDE_AMDGPU_ARCH", "9.0.10")]);
    assert_eq!(targets(&o), serde_json::json!(["gfx90a"]), "{}", text(&o));
    let o = detect(&[
        ("ROCM_BOOTSTRAP_FORCE_GFX_ARCH", "gfx942"),
        ("UV_AMD_GPU_ARCHITECTURE", "gfx1100"),
    ]);
    assert_eq!(targets(&o), serde_json::json!(["gfx942"]), "{}", text(&o));
}

/// The rows of a RECORD (paths, as written).
fn record_rows(record: &Path) -> Vec<String> {
    fs::read_to_string(record)
        .unwrap_or_else(|e| panic!("{}: {e}", record.display()))
        .lines()
        .filter_map(|l| l.split(',').next())
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// Issue 43, "prune frees what it says": a venv laid out the way TheRock's
/// `rocm-sdk init` leaves it. `rocm` with four targets' device wheels and
/// `rocm-sdk-devel`, installed by pip; each device file hard-linked under
/// `_rocm_sdk_devel/`, the link appended to a RECORD without hash or size
/// as rocm-sdk init does: gfx90a's and gfx942's to `rocm-sdk-devel`'s RECORD
/// (the tree's first expansion), gfx950's to its own wheel's (the later
/// reconciliation), and gfx1100's file linked once more where no RECORD
/// looks (as uv's cache links it). On the MI300X `prune --via pip`
/// reports gfx90a's and gfx950's device bytes as freed and not gfx1100's
/// (a note says they stay), lists gfx90a's link with the distribution
/// that records it, and `--yes` removes that link and drops its row, so
/// the files really go; gfx942's link and the cache's stay, every row
/// `rocm-sdk-devel` still records exists, and `pip check` is clean.
#[test]
fn prune_frees_what_it_says_with_rocm_sdk_init_links() {
    let case = Case::new("pip");
    let targets = ["gfx90a", "gfx942", "gfx950", "gfx1100"];
    let extras: Vec<String> = targets.iter().map(|t| format!("device-{t}")).collect();
    let rocm = format!("rocm[libraries,{}]=={V}", extras.join(","));
    case.pip_install(&["--index-url", &case.index(), &rocm]);
    let devel_dir = case.tmp.path().join("devel");
    fs::create_dir_all(&devel_dir).expect("mkdir");
    let (_, devel) = wheel(
        &devel_dir,
        "rocm-sdk-devel",
        V,
        vec![("rocm_sdk_devel/__init__.py".into(), b"".to_vec())],
        &[],
    );
    let devel = devel_dir.join(devel).display().to_string();
    case.pip_install(&["--no-index", &devel]);

    // rocm-sdk init's links.
    let site = rocm_kpack_test_support::site_packages(&case.venv);
    let record_of =
        |dist: &str| site.join(format!("{}-{V}.dist-info/RECORD", dist.replace('-', "_")));
    let devel_record = record_of("rocm-sdk-devel");
    let link_row = |t: &str| format!("_rocm_sdk_devel/lib/{t}/kernels.bin");
    let device_file = |t: &str| site.join(format!("rocm_sdk_device_{t}/kernels.bin"));
    let cache = case.tmp.path().join("cache-gfx1100.bin");
    for t in targets {
        let recorder = match t {
            "gfx950" => Some(record_of(&format!("rocm-sdk-device-{t}"))),
            "gfx1100" => None,
            _ => Some(devel_record.clone()),
        };
        let link = site.join(link_row(t));
        fs::create_dir_all(link.parent().expect("parent")).expect("mkdir");
        fs::hard_link(device_file(t), &link).expect("link");
        match recorder {
            Some(record) => {
                let mut text = fs::read_to_string(&record).expect("RECORD");
                text.push_str(&format!("{},,\n", link_row(t)));
                fs::write(&record, text).expect("RECORD");
            }
            None => {
                fs::remove_file(&link).expect("rm");
                fs::hard_link(device_file(t), &cache).expect("link");
            }
        }
    }

    let prune = |more: &[&str]| {
        let mut c = bins::command("rocm-kpack-fetch");
        bins::isolate_fetcher(&mut c);
        case.env(&mut c);
        c.args(["prune", "--via", "pip", "--no-default-prefixes", "--python"])
            .arg(case.python())
            .arg("--sysfs-root")
            .arg(fixtures::machine("mi300x"))
            .args(more);
        run(&mut c)
    };
    let json = |o: &Output| -> serde_json::Value {
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(o)))
    };
    let items = |v: &serde_json::Value| -> Vec<serde_json::Value> {
        v["backends"]
            .as_array()
            .expect("backends")
            .iter()
            .find(|b| b["backend"] == "pip")
            .expect("pip backend")["items"]
            .as_array()
            .expect("items")
            .clone()
    };
    let mib = DEVICE_BYTES as u64;

    let o = prune(&["--dry-run", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v = json(&o);
    let planned: Vec<(String, u64)> = items(&v)
        .iter()
        .map(|i| {
            (
                i["name"].as_str().expect("name").to_string(),
                i["bytes"].as_u64().expect("bytes"),
            )
        })
        .collect();
    let names: BTreeSet<&str> = planned.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "rocm-sdk-device-gfx1100",
            "rocm-sdk-device-gfx90a",
            "rocm-sdk-device-gfx950"
        ]),
        "{v}"
    );
    for (name, bytes) in &planned {
        let freed = *bytes >= mib && *bytes < mib + 64 * 1024;
        assert_eq!(
            freed,
            name != "rocm-sdk-device-gfx1100",
            "{name}: {bytes}: {v}"
        );
    }
    assert_eq!(
        v["bytes"].as_u64(),
        Some(planned.iter().map(|(_, b)| b).sum()),
        "{v}"
    );
    let gfx90a = items(&v)
        .into_iter()
        .find(|i| i["name"] == "rocm-sdk-device-gfx90a")
        .expect("gfx90a");
    assert_eq!(
        gfx90a["links"],
        serde_json::json!([{
            "path": site.join(link_row("gfx90a")).display().to_string(),
            "recorded_by": "rocm-sdk-devel",
        }]),
        "{v}"
    );
    assert!(
        v["warnings"]
            .to_string()
            .contains("rocm-sdk-device-gfx1100: 1.0 MiB of its files stay on disk"),
        "{v}"
    );
    let o = prune(&[]);
    assert!(
        String::from_utf8_lossy(&o.stdout)
            .contains("and 1 hard link to its files that rocm-sdk-devel records"),
        "{}",
        text(&o)
    );
    assert!(
        site.join(link_row("gfx90a")).is_file(),
        "the dry run removed"
    );

    let o = prune(&["--yes", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v = json(&o);
    assert!(
        v["removed"].to_string().contains(&link_row("gfx90a")),
        "{v}"
    );
    for t in ["gfx90a", "gfx950"] {
        let link = site.join(link_row(t));
        assert!(!link.exists(), "{t}'s link stayed");
        assert!(
            !link.parent().expect("dir").exists(),
            "{t}'s emptied directory stayed"
        );
        assert!(!device_file(t).exists(), "{t}'s file stayed");
    }
    assert!(site.join(link_row("gfx942")).is_file());
    assert_eq!(fs::metadata(&cache).expect("cache").len(), mib);
    let rows = record_rows(&devel_record);
    assert!(!rows.contains(&link_row("gfx90a")), "{rows:?}");
    assert!(rows.contains(&link_row("gfx942")), "{rows:?}");
    for row in &rows {
        assert!(
            site.join(row).exists(),
            "rocm-sdk-devel records {row}, which is gone"
        );
    }
    case.check("pip");
    let mut want = BTreeSet::from([
        "rocm".to_string(),
        "rocm-sdk-core".into(),
        "rocm-sdk-libraries".into(),
        "rocm-sdk-devel".into(),
    ]);
    want.insert("rocm-sdk-device-gfx942".into());
    assert_eq!(case.installed(), want);
}
