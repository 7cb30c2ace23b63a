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

use rocm_kpack_test_support::packages::{self, ok, run, write_wheel};
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
        b"Wheel-Version: 1.0\nGenerator: pip_torch test\nRoot-Is-Purelib: true\nTag: py3-none-any\n".to_vec(),
    ));
    let file = format!("{under}-{version}-py3-none-any.whl");
    write_wheel(&files.join(&file), &all, &di, None);
    fs::write(files.join(format!("{file}.metadata")), metadata).expect("metadata");
    (name.to_string(), file)
}

/// Writes the PEP 503 pages of `projects` (project -> files) below `root`.
fn pages(root: &Path, projects: &[(String, String)]) {
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

/// The PyTorch-shaped index, built once per process.
fn torch_index() -> &'static Path {
    static INDEX: OnceLock<PathBuf> = OnceLock::new();
    INDEX.get_or_init(|| {
        let root = packages::store_cache().join("pip-torch-index-v1");
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
        pages(&build, &projects);
        let _ = fs::remove_dir_all(&root);
        fs::rename(&build, &root).expect("rename");
        root
    })
}

fn uv() -> PathBuf {
    let uv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tools/uv/bin/uv");
    assert!(
        uv.is_file(),
        "{} is missing: scripts/test.sh installs it",
        uv.display()
    );
    uv
}

fn text(o: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
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
            c.args(["--python-exe", &self.python(), "install"]);
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
        let o = case.wrapper(client, &["--dry-run"], &["--index-url", &index, "torch"]);
        assert!(o.status.success(), "{client}: {}", text(&o));
        let stdout = String::from_utf8_lossy(&o.stdout);
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
        // The dry run and the install each fetched gfx942's device wheel
        // at most once (uv's cache serves the second).
        assert!(
            bytes >= DEVICE_BYTES as u64 && bytes <= 4 * DEVICE_BYTES as u64,
            "{client}: {bytes}"
        );
        eprintln!("{client} through the wrapper: {bytes} device bytes fetched ({wheels:?})");
    }

    // Plain pip on the same index, for the figure beside ours.
    let case = Case::new("pip");
    let mut c = Command::new(case.python());
    c.args([
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
        "--index-url",
        &case.index(),
        "torch",
    ]);
    case.env(&mut c);
    ok(&mut c);
    let (_, bytes) = case.fetched();
    assert!(bytes >= (TARGETS.len() * DEVICE_BYTES) as u64, "{bytes}");
    eprintln!("plain pip: {bytes} device bytes fetched");
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
    pages(&root, &[("torch".into(), "torch-99.0.tar.gz".into())]);
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
                c.args(["--python-exe", &case.python(), "install"]);
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
            "--python-exe",
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
            "--python-exe",
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
