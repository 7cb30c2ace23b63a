//! The package-manager integration templates in splitter/publish/templates/,
//! checked with the real tools (sh, systemd's unit verifier), and the
//! `trigger` command the hooks run, with this build's binary. The hooks
//! inside real packages and package managers: tests/tests/suite/install_flows.rs.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn templates() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../splitter/publish/templates")
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_rocm-kpack-fetch")
}

/// The dpkg trigger declarations: one `interest-noawait` per line, on
/// absolute directories (dpkg would refuse anything else at unpack).
#[test]
fn deb_triggers_declare_noawait_interest_in_kpack_directories() {
    let text = fs::read_to_string(templates().join("deb/triggers")).expect("read");
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect();
    assert!(lines.len() >= 5, "{text}");
    for l in &lines {
        let path = l
            .strip_prefix("interest-noawait /")
            .unwrap_or_else(|| panic!("not a noawait interest: {l}"));
        assert!(!path.contains(' ') && !path.ends_with('/'), "{l}");
    }
    assert!(
        lines.contains(&"interest-noawait /usr/lib/x86_64-linux-gnu/.kpack"),
        "{text}"
    );
    assert!(lines.contains(&"interest-noawait /opt"), "{text}");
}

/// The postinst and the rpm trigger scripts parse, call only the fetcher
/// (never apt, dpkg, rpm or dnf, whose locks are held), and end with
/// exit 0 whatever the fetcher does.
#[test]
fn hook_scripts_parse_and_run_file_mode_only() {
    for name in [
        "deb/postinst",
        "rpm/transfiletriggerin.sh",
        "rpm/filetriggerpostun.sh",
    ] {
        let script = fs::read_to_string(templates().join(name)).expect("read");
        let o = Command::new("sh")
            .arg("-n")
            .arg(templates().join(name))
            .output()
            .expect("sh");
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let code: String = script
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n");
        for forbidden in ["apt-get", "apt ", "dpkg ", "rpm ", "dnf", "--via"] {
            assert!(!code.contains(forbidden), "{name}: {forbidden:?} in {code}");
        }
        assert!(code.contains("rocm-kpack-fetch trigger"), "{name}");
    }
    // The postinst with a fetcher that fails still succeeds.
    let dir = tempfile::tempdir().expect("tmp");
    let fake = dir.path().join("rocm-kpack-fetch");
    fs::write(&fake, "#!/bin/sh\necho \"called: $*\"\nexit 7\n").expect("write");
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).expect("chmod");
    for args in [
        &["configure", "0.0"][..],
        &["triggered", "/usr/lib/x86_64-linux-gnu/.kpack /opt"][..],
    ] {
        let o = Command::new("sh")
            .arg(templates().join("deb/postinst"))
            .args(args)
            .env("PATH", format!("{}:/usr/bin:/bin", dir.path().display()))
            .output()
            .expect("postinst");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{args:?}: {out}");
        assert!(out.starts_with("called: trigger"), "{out}");
        if args[0] == "triggered" {
            assert_eq!(
                out.trim(),
                "called: trigger -- /usr/lib/x86_64-linux-gnu/.kpack /opt"
            );
        }
    }
}

/// `rocm-kpack-fetch trigger` itself: always exit 0 with one line; silent
/// when rpm's file list names no manifest; `ROCM_KPACK_FETCH_SKIP=1`
/// skips; no GPU is one line, not a failure.
#[test]
fn trigger_never_fails_and_says_one_line() {
    let run = |args: &[&str], stdin: &str, env: &[(&str, &str)]| {
        let mut cmd = Command::new(bin());
        cmd.arg("trigger")
            .args(args)
            .env("ROCM_KPACK_PYTHON", "")
            .env_remove("ROCM_KPACK_FETCH_SKIP")
            .env_remove("ROCM_KPACK_ARCH_OVERRIDE")
            .env_remove("HSA_OVERRIDE_GFX_VERSION")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn");
        {
            use std::io::Write;
            let mut input = child.stdin.take().expect("stdin");
            input.write_all(stdin.as_bytes()).expect("write stdin");
        }
        let out = child.wait_with_output().expect("wait");
        (
            out.status.code().expect("exit code"),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, out) = run(&["--stdin"], "/opt/rocm/lib/librocrand.so.1\n", &[]);
    assert_eq!((code, out.as_str()), (0, ""), "no manifest, nothing done");
    let (code, out) = run(&[], "", &[("ROCM_KPACK_FETCH_SKIP", "1")]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("rocm-kpack-fetch: ROCM_KPACK_FETCH_SKIP=1"),
        "{out}"
    );
    // A prefix with a manifest, on a machine without GPU.
    let dir = tempfile::tempdir().expect("tmp");
    let kdir = dir.path().join(".kpack");
    fs::create_dir_all(&kdir).expect("mkdir");
    let sysfs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../splitter/demo/machines/cpu-only");
    let sysfs = sysfs.to_str().expect("utf-8");
    let (code, out) = run(
        &["--no-systemd", kdir.to_str().expect("utf-8")],
        "",
        &[("ROCM_KPACK_SYSFS_ROOT", sysfs)],
    );
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.contains("no AMD GPU found"), "{out}");
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
    assert!(
        service.contains("SuccessExitStatus=3"),
        "no GPU is not a failure"
    );
}

#[test]
fn example_sources_file_is_valid() {
    let root = tempfile::tempdir().expect("tempdir");
    let d = root.path().join("etc/rocm-kpack/sources.d");
    fs::create_dir_all(&d).expect("mkdir");
    fs::copy(
        templates().join("sources.d/50-example.toml"),
        d.join("50-example.toml"),
    )
    .expect("copy");
    let out = Command::new(bin())
        .args([
            "install",
            "--target",
            "gfx90a",
            "--dry-run",
            "--json",
            "--root",
        ])
        .arg(root.path())
        .env("ROCM_KPACK_PYTHON", "")
        .output()
        .expect("run");
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        json["warnings"],
        serde_json::json!([]),
        "the example parses cleanly"
    );
}
