//! Progress on a terminal: `rocm-kpack split` of Debian's librocsparse
//! (1.3 GB of device code) under a pseudo-terminal draws an indicatif bar
//! per input file with the running count of code objects; `-q` draws
//! none; the text report ends with the one-line summary either way. The
//! pseudo-terminal is util-linux `script`, which records what the program
//! wrote to it.

use std::fs;
use std::path::Path;
use std::process::Command;

use rocm_kpack_test_support::{bins, debian};

/// Runs `rocm-kpack ARGS` on a pseudo-terminal; returns what it drew.
fn on_a_terminal(args: &[&str], dir: &Path) -> String {
    let log = dir.join("typescript");
    let mut line = bins::bin("rocm-kpack").display().to_string();
    for a in args {
        line.push(' ');
        line.push_str(a);
    }
    let status = Command::new("script")
        .args(["--quiet", "--return", "--command", &line])
        .arg(&log)
        .env("COLUMNS", "120")
        .env_remove("NO_COLOR")
        .status()
        .expect("run script(1)");
    let text = String::from_utf8_lossy(&fs::read(&log).expect("typescript")).into_owned();
    assert!(status.success(), "{line}:\n{text}");
    text
}

#[test]
fn split_of_librocsparse_shows_a_bar_on_a_terminal_and_a_summary() {
    let lib = debian::librocsparse_so()
        .expect("Debian's librocsparse (tests/scripts/fetch-debian-testdata.sh)");
    let dir = tempfile::tempdir().expect("tempdir");
    let tree = dir.path().join("tree");
    fs::create_dir_all(tree.join("lib")).expect("mkdir");
    fs::copy(&lib, tree.join("lib/librocsparse.so.0.1")).expect("copy");
    fs::write(tree.join("lib/README"), "not a binary\n").expect("write");
    let tree_arg = tree.to_str().expect("UTF-8");
    // The fastest level: the point is the display, not the archive size.
    let out = dir.path().join("out").to_str().expect("UTF-8").to_owned();
    let drawn = on_a_terminal(
        &["split", tree_arg, "--out", &out, "--level", "1"],
        dir.path(),
    );
    assert!(
        drawn.contains("split [") && drawn.contains("/2"),
        "no bar:\n{drawn}"
    );
    assert!(
        drawn.contains("code objects;"),
        "no code-object count:\n{drawn}"
    );
    assert!(
        drawn.contains("split 2 files, 777 code objects moved in "),
        "no summary:\n{drawn}"
    );

    let quiet_out = dir.path().join("quiet").to_str().expect("UTF-8").to_owned();
    let quiet = on_a_terminal(
        &["-q", "split", tree_arg, "--out", &quiet_out, "--level", "1"],
        dir.path(),
    );
    assert!(!quiet.contains("split ["), "a bar with -q:\n{quiet}");
    assert!(
        quiet.contains("split 2 files, 777 code objects moved in "),
        "{quiet}"
    );

    // Off a terminal: no bar, no escape codes, the same summary on stdout.
    let piped = bins::command("rocm-kpack")
        .args(["split", tree_arg, "--out"])
        .arg(dir.path().join("piped"))
        .args(["--level", "1"])
        .output()
        .expect("run rocm-kpack");
    assert!(piped.status.success());
    let stdout = String::from_utf8_lossy(&piped.stdout);
    assert!(
        stdout.contains("split 2 files, 777 code objects moved in "),
        "{stdout}"
    );
    assert!(!piped.stderr.contains(&0x1b) && !piped.stdout.contains(&0x1b));
}
