//! `rocm-kpack-fetch detect` run as a process: the JSON output against the
//! golden of every sysfs tree (tests/fixtures/detect-golden/, shared with the
//! runtime's tests), the text output, exit codes, overrides, and this
//! machine's real `/`.

use std::borrow::BorrowMut;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The binary, run from the workspace root with no override variables, so
/// fixture roots can be passed as the relative paths the goldens record.
fn fetch(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rocm-kpack-fetch"));
    cmd.current_dir(workspace())
        .args(args)
        .env_remove("ROCM_KPACK_ARCH_OVERRIDE")
        .env_remove("HSA_OVERRIDE_GFX_VERSION")
        .env_remove("RUST_LOG");
    cmd
}

/// Runs to completion: (exit code, stdout, stderr). Takes `Command` or
/// `&mut Command`.
fn output(mut cmd: impl BorrowMut<Command>) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.borrow_mut().output().expect("run rocm-kpack-fetch");
    (
        status.code().expect("exit code"),
        String::from_utf8(stdout).expect("utf-8 stdout"),
        String::from_utf8(stderr).expect("utf-8 stderr"),
    )
}

/// The two homes of sysfs trees: the demo's machines (product data) and
/// the detection tests' own trees.
const TREE_DIRS: [&str; 2] = ["splitter/demo/machines", "tests/fixtures/sysfs"];

/// Tree `name` as the workspace-relative path its golden records.
fn fixture_arg(name: &str) -> String {
    let dir = TREE_DIRS
        .iter()
        .find(|dir| workspace().join(dir).join(name).is_dir())
        .unwrap_or_else(|| panic!("no sysfs tree {name} in {TREE_DIRS:?}"));
    format!("{dir}/{name}")
}

#[test]
fn json_matches_the_golden_of_every_fixture() {
    let mut names: Vec<String> = TREE_DIRS
        .iter()
        .flat_map(|dir| std::fs::read_dir(workspace().join(dir)).expect("sysfs trees"))
        .map(|e| e.expect("entry"))
        .filter(|e| e.file_type().expect("type").is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.len() >= 17, "fixtures missing: {names:?}");
    for name in names {
        let golden = workspace()
            .join("tests/fixtures/detect-golden")
            .join(format!("{name}.json"));
        let expected = std::fs::read_to_string(&golden)
            .unwrap_or_else(|e| panic!("{name}: {}: {e}", golden.display()));
        let root = fixture_arg(&name);
        let (code, stdout, stderr) = output(fetch(&["detect", "--json", "--sysfs-root", &root]));
        assert_eq!(
            stdout,
            expected,
            "{name}: --json output differs from {}\n--- stderr\n{stderr}",
            golden.display()
        );
        assert_eq!(stderr, "", "{name}: JSON mode keeps warnings in the JSON");
        let json: serde_json::Value = serde_json::from_str(&stdout).expect("valid JSON");
        let has_targets = !json["targets"]
            .as_array()
            .expect("targets array")
            .is_empty();
        assert_eq!(code, if has_targets { 0 } else { 3 }, "{name}: exit code");
    }
}

#[test]
fn text_lists_each_gpu_node_then_the_union() {
    let (code, stdout, stderr) = output(fetch(&[
        "detect",
        "--sysfs-root",
        &fixture_arg("apu-plus-dgpu"),
    ]));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout,
        "sysfs root: splitter/demo/machines/apu-plus-dgpu\n\
         KFD topology /sys/class/kfd/kfd/topology (generation 1): 1 CPU node, 2 GPU nodes\n\
         node 1: gfx1103, 12 CUs, device 0x15bf, PCI 0000:c4:00.0, /dev/dri/renderD129 usable\n\
         node 2: gfx1100, 96 CUs, device 0x744c, PCI 0000:03:00.0, /dev/dri/renderD128 usable\n\
         targets: gfx1100, gfx1103\n"
    );
    assert_eq!(stderr, "");

    let (code, stdout, _) = output(fetch(&["detect", "--sysfs-root", &fixture_arg("mi300x")]));
    assert_eq!(code, 0);
    assert_eq!(
        stdout
            .matches(": gfx942:sramecc+, 304 CUs, device 0x74a1, ")
            .count(),
        8,
        "{stdout}"
    );
    assert!(stdout.ends_with("targets: gfx942:sramecc+\n"), "{stdout}");
}

#[test]
fn text_reports_unusable_render_nodes_and_warnings() {
    let (code, stdout, _) = output(fetch(&[
        "detect",
        "--sysfs-root",
        &fixture_arg("container-one-of-two"),
    ]));
    assert_eq!(code, 0);
    assert!(
        stdout.contains("node 1: gfx1100, 96 CUs, device 0x744c, PCI 0000:03:00.0, /dev/dri/renderD128 not usable: No such file"),
        "{stdout}"
    );
    assert!(stdout.contains("/dev/dri/renderD129 usable"), "{stdout}");
    assert!(
        stdout.contains("container: /.dockerenv (sysfs shows every GPU"),
        "{stdout}"
    );

    let (code, stdout, stderr) = output(fetch(&[
        "detect",
        "--sysfs-root",
        &fixture_arg("unreadable-node"),
    ]));
    assert_eq!(code, 0);
    assert!(stdout.ends_with("targets: gfx1100\n"), "{stdout}");
    let warnings: Vec<&str> = stderr.lines().collect();
    assert_eq!(warnings.len(), 2, "{stderr}");
    assert!(
        warnings[0].starts_with("rocm-kpack-fetch: warning: node 2: "),
        "{stderr}"
    );
    assert!(
        warnings[1].starts_with("rocm-kpack-fetch: warning: node 3: "),
        "{stderr}"
    );
}

#[test]
fn no_gpu_fixtures_exit_3_with_a_reason() {
    let cases = [
        ("no-driver", "no AMD GPU found: the amdgpu driver is not loaded and there is no KFD topology (/sys/class/kfd/kfd/topology)\n"),
        ("cpu-only", "no AMD GPU found: KFD lists 1 CPU node and no GPU node\n"),
    ];
    for (name, reason) in cases {
        let (code, stdout, stderr) = output(fetch(&["detect", "--sysfs-root", &fixture_arg(name)]));
        assert_eq!(code, 3, "{name}: {stdout}{stderr}");
        assert!(stdout.contains(reason), "{name}: {stdout}");
        assert!(
            stdout.contains("--target TARGET or set ROCM_KPACK_ARCH_OVERRIDE"),
            "{stdout}"
        );
    }
}

/// This machine as it is. The lead's machine has no GPU, so this asserts the
/// plain "no GPU" message and exit 3; on a machine with KFD it asserts the
/// exit code agrees with the targets found instead.
#[test]
fn real_root_of_this_machine() {
    let (code, stdout, stderr) = output(fetch(&["detect"]));
    let (json_code, json, _) = output(fetch(&["detect", "--json"]));
    assert_eq!(code, json_code, "text and JSON modes agree");
    let json: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert_eq!(json["root"], "/");
    let kfd = Path::new("/sys/class/kfd/kfd/topology").is_dir()
        || Path::new("/sys/devices/virtual/kfd/kfd/topology").is_dir();
    if kfd {
        let has_targets = !json["targets"].as_array().expect("targets").is_empty();
        assert_eq!(code, if has_targets { 0 } else { 3 }, "{stdout}{stderr}");
    } else {
        assert_eq!(code, 3, "{stdout}{stderr}");
        assert!(stdout.contains("no AMD GPU found: "), "{stdout}");
        assert!(
            stdout.contains("there is no KFD topology (/sys/class/kfd/kfd/topology)"),
            "{stdout}"
        );
        assert_eq!(json["topology"], serde_json::Value::Null);
        assert_eq!(json["gpu_nodes"], serde_json::json!([]));
    }
}

#[test]
fn arch_override_from_option_and_environment() {
    let (code, stdout, _) = output(fetch(&[
        "detect",
        "--sysfs-root",
        &fixture_arg("no-driver"),
        "--target",
        "gfx90a, gfx1100",
    ]));
    assert_eq!(code, 0);
    assert!(
        stdout.ends_with(
            "targets: gfx1100, gfx90a (from --target, replacing detection, which found nothing)\n"
        ),
        "{stdout}"
    );

    let (code, stdout, _) = output(
        fetch(&[
            "detect",
            "--json",
            "--sysfs-root",
            &fixture_arg("rx7900xtx"),
        ])
        .env("ROCM_KPACK_ARCH_OVERRIDE", "gfx1151"),
    );
    assert_eq!(code, 0);
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(json["arch_override"]["source"], "ROCM_KPACK_ARCH_OVERRIDE");
    assert_eq!(json["targets"], serde_json::json!(["gfx1151"]));
    assert_eq!(json["detected_targets"], serde_json::json!(["gfx1100"]));

    // --target wins; the variable it replaces is not even parsed.
    let (code, stdout, stderr) = output(
        fetch(&[
            "detect",
            "--sysfs-root",
            &fixture_arg("no-driver"),
            "--target",
            "gfx942",
        ])
        .env("ROCM_KPACK_ARCH_OVERRIDE", ","),
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("targets: gfx942 (from --target"),
        "{stdout}"
    );
}

#[test]
fn hsa_override_is_applied_and_said() {
    let (code, stdout, _) = output(
        fetch(&["detect", "--sysfs-root", &fixture_arg("780m")])
            .env("HSA_OVERRIDE_GFX_VERSION", "11.0.0"),
    );
    assert_eq!(code, 0);
    assert!(
        stdout.contains("node 1: gfx1100 (sysfs: gfx1103), 12 CUs"),
        "{stdout}"
    );
    assert!(
        stdout.contains("HSA_OVERRIDE_GFX_VERSION=11.0.0 is set: every GPU is treated as gfx1100"),
        "{stdout}"
    );
    assert!(stdout.ends_with("targets: gfx1100\n"), "{stdout}");
}

#[test]
fn usage_errors_exit_2_and_print_once() {
    let root = fixture_arg("rx7900xtx");
    type Case<'a> = (Vec<&'a str>, Option<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (
            vec!["detect", "--sysfs-root", &root, "--target", " , "],
            None,
            "--target",
        ),
        (
            vec!["detect", "--sysfs-root", &root, "--target", "gfx1100;x"],
            None,
            "--target",
        ),
        (vec!["detect", "--bogus"], None, "--bogus"),
        (vec![], None, "Usage"),
        (
            vec!["detect", "--sysfs-root", &root],
            Some(("ROCM_KPACK_ARCH_OVERRIDE", ",")),
            "ROCM_KPACK_ARCH_OVERRIDE",
        ),
        (
            vec!["detect", "--sysfs-root", &root],
            Some(("HSA_OVERRIDE_GFX_VERSION", "11.0")),
            "HSA_OVERRIDE_GFX_VERSION",
        ),
    ];
    for (args, env, needle) in cases {
        let mut cmd = fetch(&args);
        if let Some((k, v)) = env {
            cmd.env(k, v);
        }
        let (code, stdout, stderr) = output(&mut cmd);
        assert_eq!(code, 2, "{args:?} {env:?}: {stdout}{stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(
            stderr.matches("error:").count() <= 1,
            "error printed once: {stderr}"
        );
    }
}

#[test]
fn missing_root_is_a_usage_error() {
    // A --sysfs-root that does not exist is a typo: exit 2, before detection.
    let (code, stdout, stderr) = output(fetch(&[
        "detect",
        "--sysfs-root",
        "/nonexistent/kpack-root",
    ]));
    assert_eq!(code, 2);
    assert_eq!(stdout, "");
    assert!(
        stderr.contains("/nonexistent/kpack-root: no such directory"),
        "{stderr}"
    );
}

#[test]
fn help_documents_exit_codes() {
    for args in [&["--help"][..], &["detect", "--help"][..]] {
        let (code, stdout, _) = output(fetch(args));
        assert_eq!(code, 0);
        for needle in [
            "Exit status:",
            "0  success",
            "2  usage error",
            "3  no AMD GPU found",
            "ROCM_KPACK_ARCH_OVERRIDE",
            "HSA_OVERRIDE_GFX_VERSION",
        ] {
            assert!(
                stdout.contains(needle),
                "{args:?} lacks {needle:?}:\n{stdout}"
            );
        }
    }
}
