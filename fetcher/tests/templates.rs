//! The package-manager integration templates in repo-templates/fetch/,
//! checked with the real tools: apt's own configuration parser, systemd's
//! unit verifier, rpmspec; the hook commands run with this build's binary.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn templates() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../repo-templates/fetch")
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_rocm-kpack-fetch")
}

/// Runs a hook's shell text with the installed-binary path replaced by this
/// build and no systemd, so the inline branch runs; targets come from the
/// override variable and nothing below / is touched (no manifests there).
fn run_hook(script: &str, stdin: &str, skip: bool) -> (i32, String) {
    let script = script
        .replace("/usr/bin/rocm-kpack-fetch", bin())
        .replace("/run/systemd/system", "/nonexistent/systemd");
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &script])
        .env("ROCM_KPACK_ARCH_OVERRIDE", "gfx90a")
        .env("ROCM_KPACK_PYTHON", "")
        .env_remove("HSA_OVERRIDE_GFX_VERSION")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if skip {
        cmd.env("ROCM_KPACK_FETCH_SKIP", "1");
    } else {
        cmd.env_remove("ROCM_KPACK_FETCH_SKIP");
    }
    let mut child = cmd.spawn().expect("sh");
    {
        use std::io::Write;
        let mut input = child.stdin.take().expect("stdin");
        input.write_all(stdin.as_bytes()).expect("write stdin");
    }
    let out = child.wait_with_output().expect("wait");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().expect("exit code"), text)
}

#[test]
fn apt_hook_parses_and_runs_file_mode_only() {
    let hook = templates().join("apt/99rocm-kpack-fetch");
    let out = Command::new("apt-config")
        .arg("-c")
        .arg(&hook)
        .arg("dump")
        .output()
        .expect("apt-config (apt is part of Debian)");
    assert!(out.status.success());
    let dump = String::from_utf8(out.stdout).expect("utf-8");
    let ours: Vec<&str> = dump
        .lines()
        .filter(|l| l.starts_with("DPkg::Post-Invoke::") && l.contains("rocm-kpack-fetch"))
        .collect();
    assert_eq!(ours.len(), 1, "exactly one hook entry:\n{dump}");
    let line = ours[0];
    let script = line
        .strip_prefix("DPkg::Post-Invoke:: \"")
        .and_then(|l| l.strip_suffix("\";"))
        .unwrap_or_else(|| panic!("not a DPkg::Post-Invoke entry: {line}"));
    // File mode only: never apt, apt-get or dpkg from inside dpkg.
    for forbidden in ["apt-get", "apt ", "dpkg", "--via"] {
        assert!(!script.contains(forbidden), "{forbidden:?} in {script}");
    }
    let (code, text) = run_hook(script, "", false);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("targets: gfx90a (from ROCM_KPACK_ARCH_OVERRIDE)"), "ran install --auto: {text}");
    let (code, text) = run_hook(script, "", true);
    assert_eq!((code, text.as_str()), (0, ""), "ROCM_KPACK_FETCH_SKIP=1 skips");
}

#[test]
fn rpm_file_trigger_parses_and_fires_only_for_manifests() {
    let snippet = fs::read_to_string(templates().join("rpm/rocm-kpack-fetch.filetrigger.spec")).expect("read");
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = dir.path().join("t.spec");
    fs::write(
        &spec,
        format!(
            "Name: rocm-kpack-fetch\nVersion: 0.1.0\nRelease: 1\nSummary: t\nLicense: MIT\nBuildArch: noarch\n\n\
             %description\nt\n\n%files\n\n{snippet}"
        ),
    )
    .expect("write spec");
    let out = Command::new("rpmspec").arg("-P").arg(&spec).output().expect("rpmspec (rpm is installed)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let parsed = String::from_utf8(out.stdout).expect("utf-8");
    assert!(parsed.contains("%transfiletriggerin -- /opt /usr/lib /usr/lib64 /usr/local"), "{parsed}");

    let body: String = snippet
        .lines()
        .skip_while(|l| !l.starts_with("%transfiletriggerin"))
        .skip(1)
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(!body.contains("dnf") && !body.contains("yum") && !body.contains("rpm "), "{body}");
    let (code, text) = run_hook(&body, "/opt/rocm/.kpack/rocrand.kpm\n/opt/rocm/lib/x.so\n", false);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("targets: gfx90a"), "a manifest triggers a run: {text}");
    let (code, text) = run_hook(&body, "/opt/rocm/lib/librocrand.so.1\n", false);
    assert_eq!((code, text.as_str()), (0, ""), "no manifest, no run");
}

#[test]
fn systemd_units_verify() {
    let root = tempfile::tempdir().expect("tempdir");
    let r = root.path();
    fs::create_dir_all(r.join("usr/bin")).expect("mkdir");
    fs::create_dir_all(r.join("etc/systemd/system")).expect("mkdir");
    fs::copy(bin(), r.join("usr/bin/rocm-kpack-fetch")).expect("copy binary");
    // The verifier resolves dependencies such as sysinit.target below --root.
    fs::create_dir_all(r.join("usr/lib/systemd")).expect("mkdir");
    let st = Command::new("cp")
        .args(["-r", "/usr/lib/systemd/system"])
        .arg(r.join("usr/lib/systemd/"))
        .status()
        .expect("cp");
    assert!(st.success());
    let mut units = Vec::new();
    for name in ["rocm-kpack-fetch.service", "rocm-kpack-fetch.timer"] {
        let dest = r.join("etc/systemd/system").join(name);
        fs::copy(templates().join("systemd").join(name), &dest).expect("copy unit");
        units.push(dest);
    }
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--root={}", r.display()))
        .args(&units)
        .output()
        .expect("systemd-analyze");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let service = fs::read_to_string(&units[0]).expect("read");
    assert!(service.contains("ExecStart=/usr/bin/rocm-kpack-fetch install --auto"));
    assert!(service.contains("SuccessExitStatus=3"), "no GPU is not a failure");
}

#[test]
fn example_sources_file_is_valid() {
    let root = tempfile::tempdir().expect("tempdir");
    let d = root.path().join("etc/rocm-kpack/sources.d");
    fs::create_dir_all(&d).expect("mkdir");
    fs::copy(templates().join("sources.d/50-example.toml"), d.join("50-example.toml")).expect("copy");
    let out = Command::new(bin())
        .args(["install", "--arch", "gfx90a", "--dry-run", "--json", "--root"])
        .arg(root.path())
        .env("ROCM_KPACK_PYTHON", "")
        .output()
        .expect("run");
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(json["warnings"], serde_json::json!([]), "the example parses cleanly");
}
