//! clang's own `clang-offload-bundler` (Debian's clang-tools-19), the
//! reference that our bundle parser and `inspect` are checked against.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Debian's clang-offload-bundler from LLVM 19.
pub const BUNDLER: &str = "/usr/lib/llvm-19/bin/clang-offload-bundler";

/// `clang-offload-bundler --list` on one bundle (plain or CCOB).
pub fn bundler_list(bundle_file: &Path) -> Vec<String> {
    let out = Command::new(BUNDLER)
        .args(["--list", "--type=o"])
        .arg(format!("--input={}", bundle_file.display()))
        .output()
        .expect("run clang-offload-bundler (apt-get install clang-tools-19)");
    assert!(
        out.status.success(),
        "bundler --list: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

/// `clang-offload-bundler --unbundle` of the given triples; returns their
/// bytes in the same order.
pub fn bundler_unbundle(bundle_file: &Path, triples: &[&str], dir: &Path) -> Vec<Vec<u8>> {
    let outputs: Vec<PathBuf> = (0..triples.len())
        .map(|i| dir.join(format!("co{i}")))
        .collect();
    let mut cmd = Command::new(BUNDLER);
    cmd.args(["--unbundle", "--type=o"])
        .arg(format!("--input={}", bundle_file.display()))
        .arg(format!("--targets={}", triples.join(",")));
    for o in &outputs {
        cmd.arg(format!("--output={}", o.display()));
    }
    let out = cmd.output().expect("run clang-offload-bundler");
    assert!(
        out.status.success(),
        "bundler --unbundle: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    outputs
        .iter()
        .map(|o| std::fs::read(o).expect("unbundled"))
        .collect()
}
