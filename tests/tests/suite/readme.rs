//! The README's copy-paste command blocks, executed: every fenced block
//! whose info string is `sh` runs under `bash -euo pipefail` from the
//! repository root, with the workspace's binaries first on PATH. Blocks
//! marked `sh setup` (the two set-up commands, one of which is this test
//! suite itself) are not run here; CI runs them.

use std::path::Path;
use std::process::Command;

use rocm_kpack_test_support::bins;

/// (line number, info string, body) of each fenced code block.
fn code_blocks(markdown: &str) -> Vec<(usize, String, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String, String)> = None;
    for (i, line) in markdown.lines().enumerate() {
        match (&mut current, line.strip_prefix("```")) {
            (None, Some(info)) => current = Some((i + 1, info.trim().to_owned(), String::new())),
            (Some(_), Some(_)) => blocks.extend(current.take()),
            (Some((_, _, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    blocks
}

#[test]
fn readme_command_blocks_run() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root");
    let readme = std::fs::read_to_string(repo.join("README.md")).expect("README.md");
    let blocks = code_blocks(&readme);
    let setup = blocks
        .iter()
        .filter(|(_, info, _)| info == "sh setup")
        .count();
    assert_eq!(setup, 2, "the README has exactly two set-up commands");
    let runnable: Vec<_> = blocks.iter().filter(|(_, info, _)| info == "sh").collect();
    assert!(runnable.len() >= 4, "one block per kind of user at least");
    // The Install block's `cargo install` goes to a throwaway root whose bin/
    // comes first on PATH for every later block, so the flows run with the
    // installed commands. Its own target directory keeps the release build
    // between runs and off the lock `cargo test` holds on target/. That
    // build is at opt-level 1: the block's point is that `cargo install`
    // of each crate succeeds and installs working commands, not their
    // speed, and on a fresh machine (CI) this test's longest step is that
    // build of some 300 crates, most of whose time is LLVM optimising at
    // opt-level 3.
    let install_root = tempfile::tempdir().expect("tempdir");
    // The blocks' `mktemp -d` directories (split packages, published
    // repositories) go below a directory this test removes, not into /tmp
    // for good: CI's disk is the suite's to share.
    let scratch = tempfile::tempdir().expect("tempdir");
    let path = format!(
        "{}:{}:{}",
        install_root.path().join("bin").display(),
        bins::built().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (line, _, body) in runnable {
        let out = Command::new("bash")
            .args(["-euo", "pipefail", "-c", body])
            .current_dir(repo)
            .env("PATH", &path)
            .env("CARGO_INSTALL_ROOT", install_root.path())
            .env("TMPDIR", scratch.path())
            .env("CARGO_TARGET_DIR", repo.join("target/readme-install"))
            .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "1")
            .output()
            .expect("run bash");
        assert!(
            out.status.success(),
            "README.md block at line {line} failed ({:?}):\n--- block ---\n{body}--- stdout ---\n{}--- stderr ---\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
