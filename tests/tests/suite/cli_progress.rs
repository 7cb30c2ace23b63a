//! Progress on a terminal: `rocm-kpack split` of Debian's librocsparse
//! (1.3 GB of device code) under a pseudo-terminal draws an indicatif bar
//! per input file with the running count of code objects; `-q` draws
//! none; the text report ends with the one-line summary either way; and
//! `split-package` of Debian's librocrand1, most of whose time is the
//! compression of its packages, shows the total and names the package in
//! work, never a nameless spinner for more than a second. The
//! pseudo-terminal is util-linux `script`, which records what the program
//! wrote to it; its size is set with stty (without a row count, indicatif
//! takes 80 columns).

use std::fs;
use std::path::Path;
use std::process::Command;

use rocm_kpack_test_support::{bins, debian};

/// Runs `rocm-kpack ARGS` on a pseudo-terminal; returns what it drew.
fn on_a_terminal(args: &[&str], dir: &Path) -> String {
    let log = dir.join("typescript");
    let mut line = format!(
        "stty rows 40 cols 120; {}",
        bins::bin("rocm-kpack").display()
    );
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
        drawn.contains(" code objects"),
        "no code-object count:\n{drawn}"
    );
    assert!(
        drawn.contains("2 files split, 777 code objects moved in "),
        "no summary:\n{drawn}"
    );

    let quiet_out = dir.path().join("quiet").to_str().expect("UTF-8").to_owned();
    let quiet = on_a_terminal(
        &["-q", "split", tree_arg, "--out", &quiet_out, "--level", "1"],
        dir.path(),
    );
    assert!(!quiet.contains("split ["), "a bar with -q:\n{quiet}");
    // -q: nothing at all but errors.
    assert!(!quiet.contains("code objects moved"), "{quiet}");

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
        stdout.contains("2 files split, 777 code objects moved in "),
        "{stdout}"
    );
    assert!(!piped.stderr.contains(&0x1b) && !piped.stdout.contains(&0x1b));
}

/// The frames a bar drew: the lines between carriage returns, without the
/// erase-line escape.
fn frames(drawn: &str) -> Vec<String> {
    drawn
        .replace("\x1b[2K", "\r")
        .split(['\r', '\n'])
        .map(|f| f.trim_end().to_owned())
        .filter(|f| !f.is_empty())
        .collect()
}

/// The elapsed seconds a frame ends with when it names nothing after them
/// (`... 0/11 packages 12s`), else `None`.
fn nameless_seconds(frame: &str) -> Option<u64> {
    let last = frame.split_whitespace().last()?;
    last.strip_suffix('s')?.parse().ok()
}

#[test]
fn split_package_of_librocrand_names_the_package_in_work() {
    let deb = rocm_kpack_test_support::packages::rocrand_deb();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("pkgs").to_str().expect("UTF-8").to_owned();
    let drawn = on_a_terminal(
        &[
            "split-package",
            deb.to_str().expect("UTF-8"),
            "--out",
            &out,
            "--level",
            "1",
        ],
        dir.path(),
    );
    let written = fs::read_dir(&out).expect("out").count();
    let frames = frames(&drawn);
    let package_frames: Vec<&String> = frames.iter().filter(|f| f.contains(" package [")).collect();
    assert!(!package_frames.is_empty(), "no package bar:\n{drawn}");
    for stage in [" split [", " package ["] {
        let nameless: Vec<u64> = frames
            .iter()
            .filter(|f| f.contains(stage))
            .filter_map(|f| nameless_seconds(f))
            .collect();
        if let (Some(first), Some(last)) = (nameless.iter().min(), nameless.iter().max()) {
            assert!(
                last - first <= 1,
                "{stage}: a spinner without a name from {first}s to {last}s:\n{drawn}"
            );
        }
    }
    let total = format!("/{written} packages");
    for f in &package_frames {
        assert!(
            f.contains(&total),
            "the total ({written}) in every frame: {f:?}"
        );
    }
    assert!(
        package_frames
            .iter()
            .any(|f| f.contains("librocrand1_5.3.3-4+kpack1_amd64.deb")),
        "the generic package, the longest to write, is named:\n{drawn}"
    );
    assert!(
        drawn.contains(&format!("{written} packages built")),
        "summary:\n{drawn}"
    );
}
