//! Locating (and building, once per test process) the workspace's binaries
//! and C artifacts, so tests run the same executables a user would.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// `target/<profile>/` of the running test binary (`target/debug/deps/x` -> `target/debug`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary has a parent directory");
    deps.parent().expect("deps has a parent").to_path_buf()
}

/// Builds every workspace binary and library (including the C libraries
/// `librocm_kpack.so`, `librocm_kpack.a` and `librocm_kpack_preload.so`) once for this test
/// process, in the test's profile, and returns `target/<profile>/`.
pub fn built() -> &'static PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = profile_dir();
        let profile = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("debug")
            .to_owned();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        // The same features as `cargo test --workspace` and scripts/test.sh's
        // `cargo build --workspace --all-targets`, so this build finds what
        // they left. Cargo unifies features over the packages a build
        // selects, so the whole workspace, not a `-p` list; and it unifies
        // dev-dependencies' features only when the build includes a target
        // that uses them, so `--examples` (cheap, and built already): with
        // `--bins --lib` alone, 21 crates are built a second time with
        // other features (minutes on a cold CI machine, 800 MB), and each
        // test process relinks the C libraries over the other's.
        cmd.args(["build", "--workspace", "--bins", "--lib", "--examples"]);
        if profile == "release" {
            cmd.arg("--release");
        }
        // `cargo test` gives this process the test package's variables
        // (CARGO_MANIFEST_DIR, CARGO_PKG_NAME, ..., and OUT_DIR when the
        // package has a build script, as rocm-kpack-capi does). Build
        // scripts that declare `rerun-if-env-changed` on them (ring does,
        // OUT_DIR included) would see them change between `cargo test` and
        // this build and rebuild each time, with everything above them:
        // minutes of every test run.
        for (key, _) in std::env::vars_os() {
            let key = key.to_string_lossy();
            if [
                "CARGO_PKG_",
                "CARGO_MANIFEST_",
                "CARGO_CRATE_",
                "CARGO_BIN_",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "OUT_DIR",
            ]
            .iter()
            .any(|p| key.starts_with(p))
            {
                cmd.env_remove(key.as_ref());
            }
        }
        let status = cmd
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("running cargo build");
        assert!(
            status.success(),
            "cargo build of the workspace binaries failed"
        );
        dir
    })
}

/// Path of a workspace binary (`rocm-kpack`, `rocm-kpack-fetch`), built if needed.
pub fn bin(name: &str) -> PathBuf {
    let path = built().join(name);
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// Path of a workspace shared library by file name
/// (`librocm_kpack_preload.so`, `librocm_kpack.so`), built if needed.
pub fn lib(file_name: &str) -> PathBuf {
    let path = built().join(file_name);
    assert!(path.is_file(), "{} was not built", path.display());
    path
}

/// Clears what would change a `rocm-kpack-fetch` run behind a test's back:
/// the target overrides, `RUST_LOG`, proxies (`NO_PROXY=*`), and the
/// Python site-packages scan (`ROCM_KPACK_PYTHON` empty).
pub fn isolate_fetcher(cmd: &mut Command) -> &mut Command {
    cmd.env_remove("ROCM_KPACK_ARCH_OVERRIDE")
        .env_remove("HSA_OVERRIDE_GFX_VERSION")
        .env_remove("RUST_LOG")
        .env("ROCM_KPACK_PYTHON", "")
        .env("NO_PROXY", "*");
    for var in [
        "http_proxy",
        "https_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "all_proxy",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// A `Command` for a workspace binary.
pub fn command(name: &str) -> Command {
    Command::new(bin(name))
}

/// Runs a shell command as `nobody` (the unprivileged attacker of the
/// hostile tests), failing the test when it fails.
pub fn as_nobody(script: &str) {
    let out = nobody_shell(script).output().expect("setpriv");
    assert!(
        out.status.success(),
        "as nobody: {script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `sh -c script` as `nobody`, not yet started.
pub fn nobody_shell(script: &str) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid=nobody",
        "--regid=nogroup",
        "--clear-groups",
        "--",
        "sh",
        "-c",
        script,
    ]);
    cmd
}

/// Runs `rocm-kpack-fetch ARGS --root ROOT`, isolated ([`isolate_fetcher`]):
/// its exit code, stdout and stderr.
pub fn fetch(root: &Path, args: &[&str]) -> (i32, String, String) {
    let mut cmd = command("rocm-kpack-fetch");
    isolate_fetcher(&mut cmd);
    cmd.args(args).arg("--root").arg(root);
    let o = cmd.output().expect("run rocm-kpack-fetch");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}
