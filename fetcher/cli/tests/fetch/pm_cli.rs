//! `install --via` / `--python` without a repository: refusal inside a
//! dpkg transaction, manifests no package owns, distributions without
//! device extras. (The real clients against published repositories are
//! exercised in tests/tests/suite/fetch_e2e.rs.)

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use rocm_kpack_format::manifest::{Manifest, ManifestFile};

fn fetch() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rocm-kpack-fetch"));
    c.env("ROCM_KPACK_PYTHON", "")
        .env_remove("ROCM_KPACK_ARCH_OVERRIDE")
        .env_remove("HSA_OVERRIDE_GFX_VERSION");
    c
}

fn run(c: &mut Command) -> Output {
    c.output().expect("run rocm-kpack-fetch")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A root with an empty dpkg database and one manifest that no package owns.
fn root_with_unowned_manifest(root: &Path) {
    for d in ["var/lib/dpkg/info", "var/lib/dpkg/updates"] {
        fs::create_dir_all(root.join(d)).expect("mkdir");
    }
    fs::write(root.join("var/lib/dpkg/status"), "").expect("status");
    let kdir = root.join("usr/lib/x86_64-linux-gnu/.kpack");
    fs::create_dir_all(&kdir).expect("mkdir");
    let m = Manifest {
        component: "libdemo".into(),
        kpack_files: vec![ManifestFile {
            filename: "libdemo_gfx90X.kpack".into(),
            family: "gfx90X".into(),
            architectures: vec!["gfx90a:xnack-".into(), "gfx906".into()],
            size: 10,
            sha256: Some([7; 32]),
            transport: None,
        }],
        database_files: Vec::new(),
        prefix_path: None,
    };
    fs::write(kdir.join("libdemo.kpm"), m.to_msgpack().expect("kpm")).expect("write");
}

#[test]
fn via_apt_refuses_inside_a_dpkg_transaction() {
    let tmp = tempfile::tempdir().expect("tmp");
    root_with_unowned_manifest(tmp.path());
    let o = run(fetch()
        .args(["install", "--via", "apt", "--target", "gfx90a", "--root"])
        .arg(tmp.path())
        .env("DPKG_RUNNING_VERSION", "1.21.22"));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains("refusing to run apt-get from inside a dpkg"),
        "{err}"
    );
    assert!(err.contains("file mode"), "{err}");
    // The plan alone is fine inside a transaction.
    let o = run(fetch()
        .args([
            "install",
            "--via",
            "apt",
            "--dry-run",
            "--target",
            "gfx90a",
            "--root",
        ])
        .arg(tmp.path())
        .env("DPKG_RUNNING_VERSION", "1.21.22"));
    assert!(o.status.success(), "{}", text(&o.stderr));
}

#[test]
fn via_apt_names_a_manifest_no_package_owns() {
    let tmp = tempfile::tempdir().expect("tmp");
    root_with_unowned_manifest(tmp.path());
    let o = run(fetch()
        .args([
            "install",
            "--via",
            "apt",
            "--dry-run",
            "--target",
            "gfx90a",
            "--root",
        ])
        .arg(tmp.path()));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains("no installed package owns") && err.contains("libdemo.kpm"),
        "{err}"
    );
    assert!(
        text(&o.stdout).starts_with("nothing to install"),
        "{}",
        text(&o.stdout)
    );
    // --json carries the same.
    let o = run(fetch()
        .args([
            "install",
            "--via",
            "apt",
            "--dry-run",
            "--json",
            "--target",
            "gfx90a",
            "--root",
        ])
        .arg(tmp.path()));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["plan"]["packages"], serde_json::json!([]));
    assert!(v["command"].is_null());
}

/// `--python PATH` names the interpreter (as uv's does); `--via pip` is
/// what the old `--python` switch did, and `--python-exe`, the old name of
/// the interpreter option, is a hidden alias for one release.
#[test]
fn python_with_no_device_extras_installs_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    for python in ["--python", "--python-exe"] {
        let o = run(fetch()
            .args([
                "install",
                "--via",
                "pip",
                "--dry-run",
                "--target",
                "gfx1100",
                "--no-default-prefixes",
                "--prefix",
            ])
            .arg(tmp.path())
            .args([python, "python3"]));
        assert!(o.status.success(), "{python}: {}", text(&o.stderr));
        assert!(
            text(&o.stdout).starts_with("nothing to install"),
            "{}",
            text(&o.stdout)
        );
    }
    let o = run(fetch()
        .args(["install", "--via", "pip", "--target", "gfx1100", "--python"])
        .arg(tmp.path().join("no-such-python")));
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("no Python interpreter")
            && text(&o.stderr).contains("no-such-python"),
        "{}",
        text(&o.stderr)
    );
    // One spelling in the help of every command that reads a Python
    // environment.
    for sub in [
        "install", "status", "prune", "list", "verify", "gc", "doctor", "pip", "uv",
    ] {
        let o = run(fetch().args([sub, "--help"]));
        let help = text(&o.stdout);
        assert!(help.contains("--python <PATH>"), "{sub}: {help}");
        assert!(!help.contains("--python-exe"), "{sub}: {help}");
    }
}
