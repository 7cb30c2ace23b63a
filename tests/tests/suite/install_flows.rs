//! The install flows end to end, with the real clients and nothing
//! configured by hand: `rocm-kpack publish` writes the repositories (with
//! the rocm-kpack-fetch packages and the store's URL), a server on
//! 127.0.0.1 serves them, and
//!
//! - apt-get and plain `dpkg -i` in a throwaway Debian root (mmdebstrap,
//!   built once and cached under `target/install-flows/`) install Debian's
//!   librocrand1 split: the fetcher deb's dpkg file trigger fetches the
//!   archive the GPU needs; `apt-get remove` takes it away. The root keeps
//!   Debian's own sources beside ours, as users have it: the split package
//!   (`5.3.3-4+kpack1`) wins over Debian's fat `5.3.3-4`, a machine with the
//!   fat one upgrades to it, and without our repository a downgrade gives
//!   the fat one back;
//! - dnf in the same kind of root does the same with the rpms and their
//!   file triggers;
//! - pip and uv install a base wheel and its family's device wheels in one
//!   command from the index URL `rocm-kpack-fetch pip-index-url` prints.
//!
//! The README's apt, dnf and pip blocks (` ```sh apt `, ...) are run as
//! written; `tests/tests/suite/readme.rs` runs only the plain `sh` blocks.
//!
//! GPUs come from the demo's machines, KFD sysfs trees (`ROCM_KPACK_SYSFS_ROOT` reaches the
//! hooks through the package manager's environment; `ROCM_KPACK_ALLOW_HTTP`
//! lets them use the test server's http:// store).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

use rocm_kpack_format::archive::{transport, Archive};
use rocm_kpack_package::Format;
use rocm_kpack_publish::fetcher::FetcherOptions;
use rocm_kpack_publish::{publish, PublishOptions};
use rocm_kpack_test_support::http::{self, Fault, Server};
use rocm_kpack_test_support::packages::*;
use rocm_kpack_test_support::{bins, debian, fixtures, packages};

/// Where the split binary and its archives are installed.
const KPACK_DIR: &str = "usr/lib/x86_64-linux-gnu/.kpack";

/// The cached Debian root (bookworm, apt, and librocrand1's runtime
/// dependencies; dnf for the README's dnf block), built once by mmdebstrap
/// from the machine's apt sources, which it keeps, with their package
/// lists fetched once (each test's `apt-get update` then only revalidates).
/// Built under a file lock: the module's tests run in two processes at
/// once (tests/scripts/parallel-tests.sh), which share the cache.
fn cached_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let dir = bins::profile_dir().join("../install-flows");
        fs::create_dir_all(&dir).expect("mkdir");
        let lock = fs::File::create(dir.join("bookworm-apt.lock")).expect("lock file");
        lock.lock().expect("lock the cached root");
        let root = dir.join("bookworm-apt");
        let has_lists = |root: &Path| {
            fs::read_dir(root.join("var/lib/apt/lists")).is_ok_and(|rd| {
                rd.flatten()
                    .any(|e| e.file_name().to_string_lossy().ends_with("_Packages"))
            })
        };
        if root.join("usr/bin/apt-get").is_file() && root.join("usr/bin/dnf").is_file() {
            if !has_lists(&root) {
                ok(chroot(&root, "cpu-only").args(["apt-get", "update", "-q"]));
            }
            return root;
        }
        let part = dir.join("bookworm-apt.part");
        let _ = fs::remove_dir_all(&part);
        let sources = [
            "/etc/apt/sources.list.d/debian.sources",
            "/etc/apt/sources.list",
        ]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .expect("this machine's apt sources");
        ok(Command::new("mmdebstrap")
            .args([
                "--variant=apt",
                "--include=libamdhip64-5,ca-certificates,dnf",
                "--mode=root",
                "bookworm",
            ])
            .arg(&part)
            .arg(sources));
        ok(chroot(&part, "cpu-only").args(["apt-get", "update", "-q"]));
        let _ = fs::remove_dir_all(&root);
        fs::rename(&part, &root).expect("rename");
        root
    })
}

/// A fresh copy of the cached root with Debian's sources and, given
/// `repo_url`, ours beside them, with the demo's machines (KFD sysfs trees)
/// at /srv/sysfs/.
fn debian_root(tmp: &Path, repo_url: Option<&str>) -> PathBuf {
    let root = tmp.join("root");
    ok(Command::new("cp").arg("-a").arg(cached_root()).arg(&root));
    if let Some(url) = repo_url {
        add_apt_repo(&root, url);
    }
    ok(Command::new("cp")
        .arg("-a")
        .arg(fixtures::demo_machines_dir())
        .arg(root.join("srv/sysfs")));
    root
}

/// Our repository as an apt source of the root (`remove_apt_repo` undoes it).
fn add_apt_repo(root: &Path, url: &str) {
    fs::write(
        root.join("etc/apt/sources.list.d/kpack.list"),
        format!("deb [trusted=yes] {url} stable main\n"),
    )
    .expect("sources");
}

fn remove_apt_repo(root: &Path) {
    fs::remove_file(root.join("etc/apt/sources.list.d/kpack.list")).expect("rm kpack.list");
}

/// The installed version of a package in the root.
fn installed_version(root: &Path, package: &str) -> String {
    ok(chroot(root, "cpu-only").args(["dpkg-query", "-W", "-f=${Version}", package]))
}

/// `chroot ROOT ARGS...` with the machine given to the hooks.
fn chroot(root: &Path, machine: &str) -> Command {
    let mut c = Command::new("chroot");
    c.arg(root)
        .env("ROCM_KPACK_SYSFS_ROOT", format!("/srv/sysfs/{machine}"))
        .env("ROCM_KPACK_ALLOW_HTTP", "1")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env_remove("ROCM_KPACK_FETCH_SKIP")
        .env_remove("ROCM_KPACK_ARCH_OVERRIDE")
        .env_remove("HSA_OVERRIDE_GFX_VERSION");
    c
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The fetcher binary, stripped (packaging 170 MB of debug info is slow).
fn fetcher_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tmp").keep();
        let bin = dir.join("rocm-kpack-fetch");
        ok(Command::new("strip")
            .arg("-o")
            .arg(&bin)
            .arg(bins::bin("rocm-kpack-fetch")));
        bin
    })
}

/// `rocm-kpack split-package` of Debian's librocrand1, once.
fn rocrand_debs() -> &'static Path {
    static PKGS: OnceLock<PathBuf> = OnceLock::new();
    PKGS.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tmp").keep().join("pkgs");
        ok(bins::command("rocm-kpack")
            .args(["split-package", "-q", "--out"])
            .arg(&dir)
            .arg(debian::package("librocrand1").expect("librocrand1")));
        dir
    })
}

/// A server on 127.0.0.1 and the repository `rocm-kpack publish` wrote
/// into its directory from `pkgs`, with the server's URL as store URL.
fn publish_served(tmp: &Path, pkgs: &Path, kinds: &[&str]) -> Server {
    let repo = tmp.join("repo");
    fs::create_dir_all(&repo).expect("mkdir");
    let server = http::serve_dir(&repo).expect("serve");
    let out = ok(bins::command("rocm-kpack")
        .arg("publish")
        .arg(pkgs)
        .arg("--out")
        .arg(&repo)
        .args(kinds)
        .args([
            "--kpack-store",
            "--store-url",
            server.root_url(),
            "--fetcher-bin",
        ])
        .arg(fetcher_bin())
        .arg("--cache")
        .arg(store_cache()));
    assert!(out.contains("published"), "{out}");
    server
}

/// Archives (`*.kpack`) anywhere below `dir`.
fn archives_below(dir: &Path) -> Vec<PathBuf> {
    files_below(dir, |p| p.extension().is_some_and(|x| x == "kpack"))
}

/// Every non-directory below `dir` that `keep` accepts (none when `dir`
/// is missing), sorted.
fn files_below(dir: &Path, keep: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            let ft = e.file_type().expect("type");
            if ft.is_dir() {
                stack.push(p);
            } else if keep(&p) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The MI210's archive is installed, verified by the fetcher in the root,
/// and AMD's lookup finds the original code objects through it.
fn assert_mi210_device_code(root: &Path) {
    let kdir = root.join(KPACK_DIR);
    assert_eq!(
        archives_below(&root.join("usr")),
        [kdir.join("librocrand_gfx90a.kpack")]
    );
    assert!(Archive::open(&kdir.join("librocrand_gfx90a.kpack"))
        .expect("archive")
        .has_arch("gfx90a:xnack-"));
    let o = chroot(root, "mi210")
        .args(["rocm-kpack-fetch", "verify"])
        .output()
        .expect("verify");
    assert!(o.status.success(), "{}", text(&o));
    let fat = debian::extracted("librocrand1")
        .expect("extracted")
        .join("usr/lib/x86_64-linux-gnu/librocrand.so.1.1");
    assert_gfxarch_finds(
        &root.join("usr/lib/x86_64-linux-gnu/librocrand.so.1.1"),
        &fat,
        "gfx90a:sramecc+:xnack-",
        "librocrand_gfx90a.kpack",
    );
}

/// Chroot tests copy a 400 MB root: two at a time are plenty on CI.
fn heavy() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The README's command block with info string `sh <name>`.
fn readme_block(name: &str) -> String {
    let readme = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
        .expect("README");
    let fence = format!("```sh {name}\n");
    let start = readme
        .find(&fence)
        .unwrap_or_else(|| panic!("no `sh {name}` block in README.md"))
        + fence.len();
    let len = readme[start..].find("```").expect("closing fence");
    readme[start..start + len].to_string()
}

/// Runs a README block in the root, as root, with `REPO` set.
fn run_block(root: &Path, machine: &str, name: &str, repo: &str) -> String {
    let block = readme_block(name);
    let o = chroot(root, machine)
        .args(["bash", "-euo", "pipefail", "-c", &block])
        .env("REPO", repo)
        .output()
        .expect("bash");
    let out = text(&o);
    assert!(
        o.status.success(),
        "README block `sh {name}` failed:\n{block}\n---\n{out}"
    );
    out
}

#[test]
fn apt_get_install_fetches_the_device_code_and_remove_takes_it_away() {
    let _g = heavy();
    let tmp = tempfile::tempdir().expect("tmp");
    let server = publish_served(tmp.path(), rocrand_debs(), &["--apt"]);
    let root = debian_root(tmp.path(), None);
    // The README's commands: add the repository, install the generic
    // package; it recommends rocm-kpack-fetch, so one command brings both,
    // and the fetcher's trigger fetches from the store publish named.
    let out = run_block(&root, "mi210", "apt", server.root_url());
    assert!(
        out.contains("rocm-kpack-fetch: device code for gfx90a:sramecc+: 1 archive installed"),
        "{out}"
    );
    assert_mi210_device_code(&root);
    // Debian's fat 5.3.3-4 was a candidate too (its sources stay
    // configured); ours is newer, so apt took ours.
    let policy = ok(chroot(&root, "mi210").args(["apt-cache", "policy", "librocrand1"]));
    assert!(
        policy.contains("5.3.3-4 500") && policy.contains("deb.debian.org"),
        "{policy}"
    );
    assert_eq!(
        installed_version(&root, "librocrand1"),
        "5.3.3-4+kpack1",
        "{policy}"
    );
    let sources =
        fs::read_to_string(root.join("etc/rocm-kpack/sources.d/50-rocm-kpack-publish.toml"))
            .expect("sources");
    assert!(
        sources.contains(&format!("url = \"{}\"", server.root_url())),
        "{sources}"
    );
    // Only the gfx90a archive was downloaded, by content.
    let fetched: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with("/by-hash/"))
        .collect();
    assert_eq!(fetched.len(), 1, "{fetched:?}");

    // Removal: the trigger removes what the fetcher installed, and its
    // bookkeeping; nothing of rocm-kpack is left in the library directory.
    let out = run_block(&root, "mi210", "apt-remove", server.root_url());
    assert!(
        out.contains("removed 1 archive of removed packages"),
        "{out}"
    );
    assert_eq!(archives_below(&root.join("usr")), Vec::<PathBuf>::new());
    assert!(!root.join(KPACK_DIR).exists(), "{out}");
}

/// Every regular file and symlink of Debian's fat librocrand1 is in the
/// root, byte for byte (symlinks: same target).
fn assert_debian_fat_files(root: &Path) {
    let fat = debian::extracted("librocrand1").expect("extracted");
    let mut stack = vec![fat.clone()];
    let mut files = 0;
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            let rel = p.strip_prefix(&fat).expect("rel");
            let ft = e.file_type().expect("type");
            let mine = root.join(rel);
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_symlink() {
                assert_eq!(
                    fs::read_link(&mine).ok(),
                    fs::read_link(&p).ok(),
                    "{}",
                    rel.display()
                );
            } else {
                assert!(
                    fs::read(&mine).ok() == fs::read(&p).ok(),
                    "{} differs from Debian's",
                    rel.display()
                );
                files += 1;
            }
        }
    }
    assert!(files > 3, "{files} files");
}

#[test]
fn debians_fat_package_upgrades_to_the_split_one_and_back() {
    let _g = heavy();
    let tmp = tempfile::tempdir().expect("tmp");
    let server = publish_served(tmp.path(), rocrand_debs(), &["--apt"]);
    // Debian's fat librocrand1, from Debian's archive.
    let root = debian_root(tmp.path(), None);
    let out = apt_install(&root, "mi210");
    assert_eq!(installed_version(&root, "librocrand1"), "5.3.3-4", "{out}");
    assert_debian_fat_files(&root);

    // Our repository added. The split package is the upgrade candidate;
    // it brings a new package (its Recommends: rocm-kpack-fetch), which
    // `apt-get upgrade` never installs, so it keeps the fat one back rather
    // than leave the library without device code ...
    add_apt_repo(&root, server.root_url());
    ok(chroot(&root, "mi210").args(["apt-get", "update", "-q"]));
    let out = ok(chroot(&root, "mi210").args(["apt-get", "upgrade", "-y", "-q"]));
    assert!(out.contains("kept back:\n  librocrand1"), "{out}");
    assert_eq!(installed_version(&root, "librocrand1"), "5.3.3-4");
    // ... and `apt upgrade` (apt-get upgrade --with-new-pkgs; likewise
    // dist-upgrade) moves to it with no file conflict (dpkg would stop on
    // one), bringing the fetcher, whose trigger fetches the device code.
    let o = chroot(&root, "mi210")
        .args(["apt", "upgrade", "-y", "-q"])
        .output()
        .expect("upgrade");
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("Unpacking librocrand1 (5.3.3-4+kpack1) over (5.3.3-4)"),
        "{out}"
    );
    assert_eq!(installed_version(&root, "librocrand1"), "5.3.3-4+kpack1");
    assert!(
        out.contains("rocm-kpack-fetch: device code for gfx90a:sramecc+: 1 archive installed"),
        "{out}"
    );
    let audit = ok(chroot(&root, "mi210").args(["dpkg", "--audit"]));
    assert_eq!(audit, "", "{audit}");
    assert_mi210_device_code(&root);

    // Our repository removed: a downgrade to Debian's version gives the
    // fat package back, its files Debian's, byte for byte; what the
    // fetcher installed for the split package goes with it.
    remove_apt_repo(&root);
    ok(chroot(&root, "mi210").args(["apt-get", "update", "-q"]));
    let o = chroot(&root, "mi210")
        .args([
            "apt-get",
            "install",
            "-y",
            "-q",
            "--allow-downgrades",
            "librocrand1=5.3.3-4",
        ])
        .output()
        .expect("downgrade");
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert_eq!(installed_version(&root, "librocrand1"), "5.3.3-4", "{out}");
    assert_debian_fat_files(&root);
    assert_eq!(
        archives_below(&root.join("usr")),
        Vec::<PathBuf>::new(),
        "{out}"
    );
    // And `--reinstall` of Debian's package works from Debian's archive alone.
    let o = chroot(&root, "mi210")
        .args([
            "apt-get",
            "install",
            "-y",
            "-q",
            "--reinstall",
            "librocrand1",
        ])
        .output()
        .expect("reinstall");
    assert!(o.status.success(), "{}", text(&o));
    assert_debian_fat_files(&root);
}

#[test]
fn dpkg_i_runs_the_trigger_too_and_purge_cleans_up() {
    let _g = heavy();
    let tmp = tempfile::tempdir().expect("tmp");
    let server = publish_served(tmp.path(), rocrand_debs(), &["--apt"]);
    let root = debian_root(tmp.path(), Some(server.root_url()));
    let repo = tmp.path().join("repo");
    let debs: Vec<PathBuf> = ["pool/main/r/rocm-kpack-fetch", "pool/main/r/rocrand"]
        .iter()
        .flat_map(|d| {
            fs::read_dir(repo.join(d))
                .expect("pool")
                .map(|e| e.expect("entry").path())
        })
        .filter(|p| {
            let n = p.file_name().expect("name").to_string_lossy().into_owned();
            n.starts_with("rocm-kpack-fetch_") || n.starts_with("librocrand1_")
        })
        .collect();
    assert_eq!(debs.len(), 2, "{debs:?}");
    for d in &debs {
        fs::copy(d, root.join("tmp").join(d.file_name().expect("name"))).expect("copy");
    }
    let name = |prefix: &str| {
        debs.iter()
            .map(|d| d.file_name().expect("name").to_string_lossy().into_owned())
            .find(|n| n.starts_with(prefix))
            .map(|n| format!("/tmp/{n}"))
            .expect("deb")
    };
    // The fetcher first, then the generic package on its own: plain dpkg,
    // no apt involved, and the file trigger still fires.
    let o = chroot(&root, "mi210")
        .args(["dpkg", "-i", &name("rocm-kpack-fetch_")])
        .output()
        .expect("dpkg");
    assert!(o.status.success(), "{}", text(&o));
    let o = chroot(&root, "mi210")
        .args(["dpkg", "-i", &name("librocrand1_")])
        .output()
        .expect("dpkg");
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("Processing triggers for rocm-kpack-fetch"),
        "{out}"
    );
    assert_mi210_device_code(&root);
    let o = chroot(&root, "mi210")
        .args(["dpkg", "--purge", "librocrand1"])
        .output()
        .expect("purge");
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(archives_below(&root.join("usr")), Vec::<PathBuf>::new());
}

/// `apt-get update` and `apt-get install librocrand1` in the root, which
/// must succeed; returns what they printed.
fn apt_install(root: &Path, machine: &str) -> String {
    ok(chroot(root, machine).args(["apt-get", "update", "-q"]));
    let o = chroot(root, machine)
        .args(["apt-get", "install", "-y", "-q", "librocrand1"])
        .output()
        .expect("apt-get");
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    out
}

#[test]
fn without_a_gpu_the_install_is_clean_and_fetches_nothing() {
    let _g = heavy();
    let tmp = tempfile::tempdir().expect("tmp");
    let server = publish_served(tmp.path(), rocrand_debs(), &["--apt"]);
    let root = debian_root(tmp.path(), Some(server.root_url()));
    let out = apt_install(&root, "cpu-only");
    let ours: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("rocm-kpack-fetch:"))
        .collect();
    assert_eq!(ours.len(), 1, "one line: {out}");
    assert!(ours[0].contains("no AMD GPU found"), "{out}");
    assert_eq!(archives_below(&root.join("usr")), Vec::<PathBuf>::new());
    assert!(!server
        .requests()
        .iter()
        .any(|r| r.path.starts_with("/by-hash/")));
}

#[test]
fn a_failing_store_does_not_fail_apt_and_install_auto_completes_later() {
    let _g = heavy();
    let tmp = tempfile::tempdir().expect("tmp");
    let server = publish_served(tmp.path(), rocrand_debs(), &["--apt"]);
    let index: serde_json::Value = serde_json::from_str(
        &fs::read_to_string(tmp.path().join("repo/index.json")).expect("index"),
    )
    .expect("json");
    for a in index["archives"].as_array().expect("archives") {
        // The archive and its transport form: the store fails both.
        for path in [&a["path"], &a["transport"]["path"]] {
            server.set_fault(
                &format!("/{}", path.as_str().expect("path")),
                Fault::Status(500, None),
            );
        }
    }
    let root = debian_root(tmp.path(), Some(server.root_url()));
    // A failing store must not fail apt.
    let out = apt_install(&root, "mi210");
    assert!(
        out.contains("rocm-kpack-fetch: device code not fetched"),
        "{out}"
    );
    assert!(
        out.contains("rocm-kpack-fetch install --auto"),
        "says how to retry: {out}"
    );
    assert_eq!(archives_below(&root.join("usr")), Vec::<PathBuf>::new());
    let status =
        ok(chroot(&root, "mi210").args(["dpkg-query", "-W", "-f=${Status}", "librocrand1"]));
    assert_eq!(status, "install ok installed");

    server.clear_faults();
    let o = chroot(&root, "mi210")
        .args([
            "rocm-kpack-fetch",
            "install",
            "--auto",
            "--allow-http",
            "--sysfs-root",
            "/srv/sysfs/mi210",
        ])
        .output()
        .expect("install --auto");
    assert!(o.status.success(), "{}", text(&o));
    assert_mi210_device_code(&root);
}

/// An upgrade to a version whose manifest lists other archives: the
/// trigger fetches the new ones and removes the stale ones. Version 1 is
/// the clang-19 build of our fixture library (gfx1100 and gfx11-generic
/// code), version 2 the clang-15 build (gfx1100 only, other bytes); the
/// machine has an RX 7900 XTX (gfx1100: native code) and a 780M (gfx1103:
/// the gfx11-generic code, which version 2 no longer has).
#[test]
fn apt_upgrade_fetches_new_archives_and_removes_stale_ones() {
    let _g = heavy();
    let tmp = tempfile::tempdir().expect("tmp");
    let t = tmp.path();
    let mut split_archives = Vec::new();
    for (version, fixture) in [
        ("1.0", "clang19/libfixture.so"),
        ("2.0", "clang15/libfixture.so"),
    ] {
        let work = t.join(format!("v{version}"));
        let lib = work.join("install/usr/lib/x86_64-linux-gnu");
        fs::create_dir_all(&lib).expect("mkdir");
        fs::copy(
            rocm_kpack_test_support::fixtures::fixture(fixture),
            lib.join("libfixture.so.1"),
        )
        .expect("copy");
        ok(bins::command("rocm-kpack")
            .arg("split")
            .arg(work.join("install"))
            .arg("--out")
            .arg(work.join("split"))
            .arg("-q"));
        ok(bins::command("rocm-kpack")
            .arg("package")
            .arg(work.join("split"))
            .args(["--name", "libfixture1", "--version", version, "-q", "--out"])
            .arg(work.join("pkgs")));
        split_archives.push(archives_below(&work.join("split")));
    }
    let repo = t.join("repo");
    fs::create_dir_all(&repo).expect("mkdir");
    let server = http::serve_dir(&repo).expect("serve");
    let publish_version = |version: &str, force: bool| {
        let mut c = bins::command("rocm-kpack");
        c.arg("publish")
            .arg(t.join(format!("v{version}/pkgs")))
            .arg("--out")
            .arg(&repo)
            .args([
                "--apt",
                "--kpack-store",
                "--store-url",
                server.root_url(),
                "-q",
                "--fetcher-bin",
            ])
            .arg(fetcher_bin())
            .arg("--cache")
            .arg(store_cache());
        if force {
            c.arg("--force");
        }
        ok(&mut c);
    };
    publish_version("1.0", false);
    let root = debian_root(t, Some(server.root_url()));
    let kdir = root.join(KPACK_DIR);
    ok(chroot(&root, "apu-plus-dgpu").args(["apt-get", "update", "-q"]));
    ok(chroot(&root, "apu-plus-dgpu").args(["apt-get", "install", "-y", "-q", "libfixture1"]));
    assert_eq!(
        archives_below(&root.join("usr")),
        [
            kdir.join("libfixture_gfx11-generic.kpack"),
            kdir.join("libfixture_gfx1100.kpack")
        ]
    );
    let v1 = fs::read(kdir.join("libfixture_gfx1100.kpack")).expect("v1 archive");

    // Version 2 republished over version 1 (`--force`), then upgraded.
    publish_version("2.0", true);
    ok(chroot(&root, "apu-plus-dgpu").args(["apt-get", "update", "-q"]));
    let out =
        ok(chroot(&root, "apu-plus-dgpu").args(["apt-get", "install", "-y", "-q", "libfixture1"]));
    assert!(out.contains("Unpacking libfixture1 (2.0+kpack1)"), "{out}");
    assert_eq!(
        archives_below(&root.join("usr")),
        [kdir.join("libfixture_gfx1100.kpack")],
        "{out}"
    );
    let v2 = fs::read(kdir.join("libfixture_gfx1100.kpack")).expect("v2 archive");
    let v2_split = split_archives[1]
        .iter()
        .find(|p| p.ends_with("libfixture_gfx1100.kpack"))
        .expect("v2 gfx1100 archive");
    // Rebuilt here from its transport form: the split's code objects in
    // frames of the fetcher's level, so compared by transport form.
    let content = |bytes: Vec<u8>| {
        transport::transport_summary(&Archive::from_bytes(bytes).expect("archive"))
            .expect("summary")
    };
    assert!(
        v2 != v1 && content(v2) == content(fs::read(v2_split).expect("split archive")),
        "the upgrade installed version 2's archive"
    );
    let o = chroot(&root, "apu-plus-dgpu")
        .args(["rocm-kpack-fetch", "verify"])
        .output()
        .expect("verify");
    assert!(o.status.success(), "{}", text(&o));
}

/// An rpm that provides what the fetcher rpm needs from the base system
/// (the Debian root's libc and /bin/sh, which no rpm owns there).
fn base_provides_rpm(dir: &Path) -> PathBuf {
    use rocm_kpack_package::rpm::{write_rpm, Dep, RpmSpec};
    use rocm_kpack_package::tree::Payload;
    let spec = RpmSpec {
        group: "System Environment/Base".into(),
        provides: vec![Dep::any("/bin/sh"), Dep::any("libc.so.6()(64bit)")],
        ..rpm_spec(
            "debian-base",
            "12",
            "The Debian base system of the test root",
        )
    };
    fs::create_dir_all(dir).expect("mkdir");
    let path = dir.join(spec.file_name());
    let f = fs::File::create(&path).expect("create");
    write_rpm(f, &spec, &Payload::new(), dir).expect("rpm");
    path
}

#[test]
fn dnf_fetches_through_the_rpm_file_triggers_and_removal_cleans_up() {
    let _g = heavy();
    let tmp = tempfile::tempdir().expect("tmp");
    let (split, _) = rocrand_split(tmp.path());
    let pkgs = tmp.path().join("pkgs");
    build(&split, &pkgs, &rocrand_options(&[Format::Rpm]));
    base_provides_rpm(&pkgs);
    let repo = tmp.path().join("repo");
    fs::create_dir_all(&repo).expect("mkdir");
    let server = http::serve_dir(&repo).expect("serve");
    let report = publish(
        &pkgs,
        &repo,
        &PublishOptions {
            yum: true,
            kpack_store: true,
            fetcher: Some(FetcherOptions {
                binary: fetcher_bin().to_path_buf(),
                store_url: Some(server.root_url().to_string()),
                level: Some(0),
            }),
            cache: Some(store_cache()),
            ..PublishOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("publish: {}", chain(&e)));
    assert_eq!(
        report.fetcher_packages,
        ["rocm-kpack-fetch-0.1.0-1.x86_64.rpm"]
    );
    let fetcher_rpm = repo.join("x86_64/rocm-kpack-fetch-0.1.0-1.x86_64.rpm");
    let triggers = ok(Command::new("rpm")
        .arg("-qp")
        .arg("--filetriggers")
        .arg(&fetcher_rpm));
    assert!(triggers.contains("transfiletriggerin scriptlet (using /bin/sh) -- /opt, /usr/lib, /usr/lib64, /usr/local"), "{triggers}");
    assert!(
        triggers.contains(
            "filetriggerpostun scriptlet (using /bin/sh) -- /opt, /usr/lib, /usr/lib64, /usr/local"
        ),
        "{triggers}"
    );

    // The README's dnf block, run by the dnf of a Debian root (its own
    // rpm database; debian-base from the repository provides the libc and
    // shell that no rpm owns there). dnf cannot guess a release version
    // outside Fedora, so the root names one (and has Fedora's repo dir).
    let root = debian_root(tmp.path(), None);
    fs::create_dir_all(root.join("etc/dnf/vars")).expect("mkdir");
    fs::write(root.join("etc/dnf/vars/releasever"), "1\n").expect("releasever");
    fs::create_dir_all(root.join("etc/yum.repos.d")).expect("mkdir");
    let out = run_block(&root, "mi210", "dnf", server.root_url());
    assert!(
        out.contains("rocm-kpack-fetch: device code for gfx90a:sramecc+: 1 archive installed"),
        "{out}"
    );
    assert!(
        out.contains("removed 1 archive of removed packages"),
        "{out}"
    );
    assert_eq!(archives_below(&root.join("usr")), Vec::<PathBuf>::new());
    assert!(!root.join(KPACK_DIR).exists(), "{out}");
    let fetched: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with("/by-hash/"))
        .collect();
    assert_eq!(fetched.len(), 1, "{fetched:?}");
}

/// dnf with the distribution's repository beside ours. A Debian root has no
/// Fedora repository: a second repository on 127.0.0.1 stands in for it,
/// holding the fat librocrand1 rpm (Debian's files, version 5.3.3-4, as a
/// distribution would ship it). The fat package installs from it, `dnf
/// upgrade` moves to ours (5.3.3-4.kpack1) with no file conflict, and
/// without our repository `dnf downgrade` gives the fat one back.
#[test]
fn dnf_upgrades_the_distributions_fat_rpm_to_the_split_one_and_back() {
    let _g = heavy();
    let tmp = tempfile::tempdir().expect("tmp");
    // The distribution's repository.
    let fat_tree = tmp.path().join("fat");
    copy_tree(
        &debian::extracted("librocrand1").expect("extracted"),
        &fat_tree.join("generic"),
        &[],
    );
    let distro_pkgs = tmp.path().join("distro-pkgs");
    build(
        &fat_tree,
        &distro_pkgs,
        &distribution_options(&[Format::Rpm]),
    );
    base_provides_rpm(&distro_pkgs);
    let distro_repo = tmp.path().join("distro-repo");
    fs::create_dir_all(&distro_repo).expect("mkdir");
    let distro = http::serve_dir(&distro_repo).expect("serve");
    publish(
        &distro_pkgs,
        &distro_repo,
        &PublishOptions {
            yum: true,
            ..PublishOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("publish: {}", chain(&e)));
    // Ours.
    let (split, _) = rocrand_split(tmp.path());
    let pkgs = tmp.path().join("pkgs");
    build(&split, &pkgs, &rocrand_options(&[Format::Rpm]));
    let repo = tmp.path().join("repo");
    fs::create_dir_all(&repo).expect("mkdir");
    let server = http::serve_dir(&repo).expect("serve");
    publish(
        &pkgs,
        &repo,
        &PublishOptions {
            yum: true,
            kpack_store: true,
            fetcher: Some(FetcherOptions {
                binary: fetcher_bin().to_path_buf(),
                store_url: Some(server.root_url().to_string()),
                level: Some(0),
            }),
            cache: Some(store_cache()),
            ..PublishOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("publish: {}", chain(&e)));

    let root = debian_root(tmp.path(), None);
    fs::create_dir_all(root.join("etc/dnf/vars")).expect("mkdir");
    fs::write(root.join("etc/dnf/vars/releasever"), "1\n").expect("releasever");
    fs::create_dir_all(root.join("etc/yum.repos.d")).expect("mkdir");
    let repo_file = |name: &str, url: &str| {
        fs::write(
            root.join(format!("etc/yum.repos.d/{name}.repo")),
            format!("[{name}]\nname={name}\nbaseurl={url}\ngpgcheck=0\nmetadata_expire=0\n"),
        )
        .expect("repo file");
    };
    let dnf = |args: &[&str]| {
        let o = chroot(&root, "mi210")
            .arg("dnf")
            .args(args)
            .output()
            .expect("dnf");
        let out = text(&o);
        assert!(o.status.success(), "dnf {args:?}:\n{out}");
        out
    };
    // The installed EVR (the root has dnf but no rpm command).
    let installed = || {
        let list =
            ok(chroot(&root, "mi210").args(["dnf", "-q", "list", "--installed", "librocrand1"]));
        let line = list
            .lines()
            .find(|l| l.starts_with("librocrand1.x86_64"))
            .unwrap_or_else(|| panic!("{list}"));
        line.split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_string()
    };
    repo_file("distro", distro.root_url());
    dnf(&["install", "-y", "librocrand1"]);
    assert_eq!(installed(), "5.3.3-4");
    assert_debian_fat_files(&root);

    // Ours beside it: ours is the newer EVR, for an install as for an
    // upgrade; the upgrade replaces the fat package's files with no
    // conflict, and the fetcher's file trigger fetches the device code.
    repo_file("rocm-kpack", server.root_url());
    let info = dnf(&["list", "--showduplicates", "librocrand1"]);
    assert!(
        info.contains("5.3.3-4.kpack1") && info.contains("rocm-kpack"),
        "{info}"
    );
    // The generic rpm recommends the fetcher, but `dnf upgrade` installs no
    // new weak dependency of an upgraded package (a fresh `dnf install`
    // does): the fetcher is installed by name here, as docs/packaging.md says.
    let out = dnf(&["upgrade", "-y"]);
    assert_eq!(installed(), "5.3.3-4.kpack1", "{out}");
    let out = dnf(&["install", "-y", "rocm-kpack-fetch"]);
    let o = chroot(&root, "mi210")
        .args([
            "rocm-kpack-fetch",
            "install",
            "--auto",
            "--allow-http",
            "--sysfs-root",
            "/srv/sysfs/mi210",
        ])
        .output()
        .expect("install --auto");
    assert!(o.status.success(), "{out}\n{}", text(&o));
    // (rocrand_split's generic tree keeps the fat library, so only the
    // fetched archive is checked here, not the loader's lookup.)
    let kdir = root.join(KPACK_DIR);
    assert_eq!(
        archives_below(&root.join("usr")),
        [kdir.join("librocrand_gfx90a.kpack")]
    );
    let o = chroot(&root, "mi210")
        .args(["rocm-kpack-fetch", "verify"])
        .output()
        .expect("verify");
    assert!(o.status.success(), "{}", text(&o));

    // Without our repository, `dnf downgrade` gives the fat package back,
    // Debian's files byte for byte.
    fs::remove_file(root.join("etc/yum.repos.d/rocm-kpack.repo")).expect("rm");
    let out = dnf(&["downgrade", "-y", "librocrand1"]);
    assert_eq!(installed(), "5.3.3-4", "{out}");
    assert_debian_fat_files(&root);
}

/// The fetcher packages `publish` builds: contents, the dpkg trigger and
/// postinst, the rpm file triggers, lintian and rpmlint clean; the wheel
/// installs with pip and runs.
#[test]
fn the_fetcher_packages_publish_builds_pass_lintian_rpmlint_and_pip() {
    use rocm_kpack_publish::fetcher::{build_fetcher_packages, Kinds};
    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("out");
    fs::create_dir_all(&out).expect("mkdir");
    let opts = FetcherOptions {
        binary: fetcher_bin().to_path_buf(),
        store_url: Some("https://repo.example.org/rocm/".into()),
        level: Some(0),
    };
    let kinds = Kinds {
        deb: true,
        rpm: true,
        wheel: true,
    };
    let paths = build_fetcher_packages(&opts, kinds, 1_704_067_200, &out).expect("build");
    let ver = env!("CARGO_PKG_VERSION");
    let names: Vec<String> = paths
        .iter()
        .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            format!("rocm-kpack-fetch_{ver}_amd64.deb"),
            format!("rocm-kpack-fetch-{ver}-1.x86_64.rpm"),
            format!("rocm_kpack_fetch-{ver}-py3-none-manylinux_2_28_x86_64.whl"),
        ]
    );
    let (deb, rpm, whl) = (&paths[0], &paths[1], &paths[2]);

    let contents = ok(Command::new("dpkg-deb").arg("-c").arg(deb));
    for f in [
        "usr/bin/rocm-kpack-fetch",
        "lib/systemd/system/rocm-kpack-fetch.service",
        "lib/systemd/system/rocm-kpack-fetch.timer",
        "usr/share/man/man1/rocm-kpack-fetch.1.gz",
        "usr/share/man/man1/rocm-kpack-fetch-install.1.gz",
        "usr/share/bash-completion/completions/rocm-kpack-fetch",
        "etc/rocm-kpack/sources.d/50-rocm-kpack-publish.toml",
    ] {
        // tar member names carry no `./` (tar::Header::set_path drops it).
        assert!(
            contents.lines().any(|l| l.ends_with(&format!(" {f}"))),
            "{f} missing:\n{contents}"
        );
    }
    assert!(
        !contents.contains("apt.conf.d"),
        "the apt hook is replaced by the dpkg trigger"
    );
    let ctl = tmp.path().join("control");
    ok(Command::new("dpkg-deb").arg("-e").arg(deb).arg(&ctl));
    let triggers = fs::read_to_string(ctl.join("triggers")).expect("triggers");
    assert!(
        triggers.contains("interest-noawait /usr/lib/x86_64-linux-gnu/.kpack\n"),
        "{triggers}"
    );
    assert!(fs::read_to_string(ctl.join("postinst"))
        .expect("postinst")
        .contains("triggered)"));
    assert_eq!(
        fs::read_to_string(ctl.join("conffiles")).expect("conffiles"),
        "/etc/rocm-kpack/sources.d/50-rocm-kpack-publish.toml\n"
    );
    assert_eq!(lintian_errors(deb), Vec::<String>::new());
    let sources = tmp.path().join("x");
    ok(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&sources));
    let text =
        fs::read_to_string(sources.join("etc/rocm-kpack/sources.d/50-rocm-kpack-publish.toml"))
            .expect("sources");
    assert!(
        text.contains("url = \"https://repo.example.org/rocm/\""),
        "{text}"
    );
    // The file the fetcher reads parses cleanly.
    let o = ok(bins::command("rocm-kpack-fetch")
        .args([
            "install",
            "--target",
            "gfx90a",
            "--dry-run",
            "--json",
            "--root",
        ])
        .arg(&sources)
        .env("ROCM_KPACK_PYTHON", ""));
    let json: serde_json::Value = serde_json::from_str(&o).expect("json");
    assert_eq!(json["warnings"], serde_json::json!([]));

    let triggers = ok(Command::new("rpm")
        .arg("-qp")
        .arg("--filetriggers")
        .arg(rpm));
    assert!(triggers.contains("transfiletriggerin scriptlet (using /bin/sh) -- /opt, /usr/lib, /usr/lib64, /usr/local"), "{triggers}");
    assert!(
        triggers.contains("/usr/bin/rocm-kpack-fetch trigger --stdin"),
        "{triggers}"
    );
    assert!(
        triggers.contains("filetriggerpostun scriptlet (using /bin/sh)"),
        "{triggers}"
    );
    ok(Command::new("rpm").arg("-K").arg(rpm));
    let ql = ok(Command::new("rpm").arg("-qlp").arg(rpm));
    assert!(
        ql.lines()
            .any(|l| l == "/usr/lib/systemd/system/rocm-kpack-fetch.service"),
        "{ql}"
    );
    assert!(
        ql.lines()
            .any(|l| l == "/usr/share/man/man1/rocm-kpack-fetch.1.gz"),
        "{ql}"
    );
    let qc = ok(Command::new("rpm").arg("-qcp").arg(rpm));
    assert_eq!(
        qc.trim(),
        "/etc/rocm-kpack/sources.d/50-rocm-kpack-publish.toml"
    );
    let lint = run(Command::new("rpmlint").arg(rpm));
    let errors: Vec<String> = String::from_utf8_lossy(&lint.stdout)
        .lines()
        .filter(|l| l.contains(": E: "))
        .map(str::to_string)
        .collect();
    // Unsigned, like any package rpmbuild writes without a key.
    assert!(
        errors.iter().all(|e| e.contains("E: no-signature")),
        "{errors:?}"
    );

    let venv = tmp.path().join("venv");
    ok(Command::new("python3").args(["-m", "venv"]).arg(&venv));
    ok(Command::new(venv.join("bin/pip"))
        .args(["install", "--disable-pip-version-check", "--no-index"])
        .arg(whl)
        .env("PIP_CONFIG_FILE", "/dev/null"));
    ok(Command::new(venv.join("bin/pip")).args(["check", "--disable-pip-version-check"]));
    let v = ok(Command::new(venv.join("bin/rocm-kpack-fetch")).arg("--version"));
    assert_eq!(v.trim(), format!("rocm-kpack-fetch {ver}"));
}

/// `publish` without `--store-url` says that installs will have no source.
#[test]
fn publish_without_a_store_url_warns() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (split, _) = fixture_split(tmp.path());
    let pkgs = tmp.path().join("pkgs");
    let mut o = fixture_options(&[Format::Deb]);
    o.meta.deb.fields.remove("Depends");
    build(&split, &pkgs, &o);
    let repo = tmp.path().join("repo");
    let out = bins::command("rocm-kpack")
        .arg("publish")
        .arg(&pkgs)
        .arg("--out")
        .arg(&repo)
        .args(["--apt", "--kpack-store", "--fetcher-bin"])
        .arg(fetcher_bin())
        .arg("--cache")
        .arg(store_cache())
        .output()
        .expect("publish");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("no --store-url") && err.contains("fetches no device code"),
        "{err}"
    );
    assert!(
        fs::read_dir(repo.join("pool/main/r/rocm-kpack-fetch"))
            .expect("fetcher in the pool")
            .count()
            == 1
    );
}

/// A venv with uv from PyPI, kept under target/ for later runs.
fn uv() -> &'static Path {
    static UV: OnceLock<PathBuf> = OnceLock::new();
    UV.get_or_init(|| {
        let venv = bins::profile_dir().join("../install-flows/uv-venv");
        let uv = venv.join("bin/uv");
        if !uv.is_file() {
            let _ = fs::remove_dir_all(&venv);
            ok(Command::new("python3").args(["-m", "venv"]).arg(&venv));
            ok(Command::new(venv.join("bin/pip"))
                .args(["install", "-q", "--disable-pip-version-check", "uv"])
                .env("PIP_CONFIG_FILE", "/dev/null"));
        }
        uv
    })
}

/// six from PyPI, the fixture wheel's upstream dependency: downloaded once
/// with pip into the test-data cache, pinned by sha256.
fn six_wheel() -> PathBuf {
    const FILE: &str = "six-1.17.0-py2.py3-none-any.whl";
    const SHA256: &str = "4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274";
    let dir = debian::cache_dir().join("pypi");
    let path = dir.join(FILE);
    if path.is_file() && sha256(&path) == SHA256 {
        return path;
    }
    fs::create_dir_all(&dir).expect("mkdir");
    let part = tempfile::tempdir_in(&dir).expect("tmp");
    ok(Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "--only-binary=:all:",
            "six==1.17.0",
            "-d",
        ])
        .arg(part.path())
        .env("PIP_CONFIG_FILE", "/dev/null"));
    assert_eq!(
        sha256(&part.path().join(FILE)),
        SHA256,
        "PyPI's {FILE} changed"
    );
    fs::rename(part.path().join(FILE), &path).expect("rename");
    path
}

/// The upstream index standing in for PyPI (PEP 503 simple pages under
/// `simple/`, files under `files/`): the fat fixture wheel, which depends
/// on six, and six.
fn upstream_index(dir: &Path, fat_wheel: &Path) -> Server {
    for whl in [fat_wheel.to_path_buf(), six_wheel()] {
        let name = whl
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let project = name.split('-').next().expect("project").to_string();
        fs::create_dir_all(dir.join("files")).expect("mkdir");
        fs::copy(&whl, dir.join("files").join(&name)).expect("copy");
        let page = dir.join("simple").join(&project);
        fs::create_dir_all(&page).expect("mkdir");
        fs::write(
            page.join("index.html"),
            format!("<!DOCTYPE html><html><body><a href=\"../../files/{name}#sha256={}\">{name}</a></body></html>\n", sha256(&whl)),
        )
        .expect("page");
    }
    http::serve_dir(dir).expect("serve")
}

/// pip and uv: one command, from the one index with the RX 7900 XTX's
/// `device-gfx1100` extra, installs the base wheel and its gfx1100 device
/// wheel (wheels split per target, as AMD's); with an upstream index too
/// (standing in for PyPI, holding the fat wheel and its dependency six),
/// ours win and six comes from upstream. The retired `pip-index-url` says
/// so and prints no URL.
#[test]
fn pip_and_uv_install_base_and_device_wheels_in_one_command() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (split, _) = wheel_split(tmp.path());
    // The fixture's upstream metadata depends on a real PyPI package.
    let metadata = split.join("generic/kpkg-1.0.dist-info/METADATA");
    let upstream_md = fs::read_to_string(&metadata).expect("METADATA");
    fs::write(
        &metadata,
        upstream_md.replace(
            "Requires-Python: >=3.8\n",
            "Requires-Python: >=3.8\nRequires-Dist: six>=1.16\n",
        ),
    )
    .expect("METADATA");
    // The fat wheel as upstream has it: everything in one wheel, version
    // 1.0 (the same tree packaged whole, without the suffix).
    // (wheel_split's generic tree holds the fat library; the archives
    // stay out, the database file goes in.)
    let fat_tree = tmp.path().join("fat");
    copy_tree(
        &split.join("generic"),
        &fat_tree.join("generic"),
        &["kpkg/.kpack"],
    );
    copy_tree(
        &split.join("gfx110X-dgpu"),
        &fat_tree.join("generic"),
        &["kpkg/.kpack"],
    );
    let mut fat_opts = wheel_options();
    fat_opts.spec.version.suffix.clear();
    let fat_out = tmp.path().join("fat-out");
    let fat_wheel = build(&fat_tree, &fat_out, &fat_opts).packages[0]
        .path
        .clone();
    assert!(
        fat_wheel.ends_with("kpkg-1.0-py3-none-linux_x86_64.whl"),
        "{}",
        fat_wheel.display()
    );
    let upstream = upstream_index(&tmp.path().join("upstream"), &fat_wheel);
    let upstream_url = format!("{}simple/", upstream.root_url());
    // The fat wheel split per target (the base wheel gets a
    // `device-<target>` extra per target).
    let pkgs = tmp.path().join("pkgs");
    {
        use rocm_kpack_splitter::split_package::{split_package, SplitPackageOptions};
        let targets: Vec<String> = fixtures::ARCHES_CLANG19
            .iter()
            .filter(|t| !t.contains("generic"))
            .map(|t| format!("\"{t}\""))
            .collect();
        let spec = rocm_kpack_pkgspec::Spec::from_toml_str(&format!(
            "granularity = \"per-target\"\ntargets = [{}]\nreplaces = []\n",
            targets.join(", ")
        ))
        .expect("spec");
        split_package(
            &fat_wheel,
            &pkgs,
            &SplitPackageOptions {
                spec,
                ..SplitPackageOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("split-package: {}", chain(&e)));
    }
    let repo = tmp.path().join("repo");
    fs::create_dir_all(&repo).expect("mkdir");
    let server = http::serve_dir(&repo).expect("serve");
    publish_pip(&pkgs, &repo);
    let sysfs = fixtures::machine("rx7900xtx");
    let o = bins::command("rocm-kpack-fetch")
        .args([
            "pip-index-url",
            "--allow-http",
            "--base",
            server.root_url(),
            "--sysfs-root",
        ])
        .arg(&sysfs)
        .output()
        .expect("pip-index-url");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(o.stdout.is_empty(), "retired: no URL printed");
    assert!(
        err.contains("retired") && err.contains("'PACKAGE[device-<target>]'"),
        "{err}"
    );
    let url = format!("{}simple/", server.root_url());
    // Views stay for the family URLs printed before, and the old family's
    // view brings the per-target device wheels of its processors; no view
    // is written for a per-target group.
    let view = fs::read_to_string(
        repo.join("families/gfx110x-dgpu/files/kpkg-1.0+kpack1-py3-none-linux_x86_64.whl.metadata"),
    )
    .expect("view metadata");
    assert!(
        view.lines()
            .any(|l| l == "Requires-Dist: kpkg-device-gfx1100==1.0+kpack1"),
        "{view}"
    );
    assert!(!repo.join("families/gfx1100").exists());

    let expect = |listed: &str| {
        for d in [
            "kpkg==1.0+kpack1",
            "kpkg-device-gfx1100==1.0+kpack1",
            "six==1.17.0",
        ] {
            assert!(listed.lines().any(|l| l == d), "{d} missing: {listed}");
        }
        assert!(!listed.contains("gfx90a"), "{listed}");
    };
    let venv = tmp.path().join("venv");
    let python = packages::venv(&venv);
    let pip = venv.join("bin/pip");
    // pip takes the highest version from all indexes: 1.0+kpack1 > 1.0.
    pip_install(
        &python,
        &upstream_url,
        &["--extra-index-url", &url, "kpkg[device-gfx1100]"],
    );
    ok(Command::new(&pip).args(["check", "--disable-pip-version-check"]));
    expect(&ok(Command::new(&pip).args([
        "list",
        "--disable-pip-version-check",
        "--format=freeze",
    ])));
    let out = ok(Command::new(venv.join("bin/python")).args([
        "-c",
        "import kpkg; print(sorted(p.name for p in kpkg.KPACK_DIR.iterdir()))",
    ]));
    assert_eq!(
        out.trim(),
        "['libfixture.kpm', 'libfixture_gfx11-generic.kpack', 'libfixture_gfx1100.kpack']"
    );
    // The documented uninstall leaves nothing.
    pip_uninstall(
        &pip,
        &["kpkg-device-gfx1100", "kpkg-device-gfx11-generic", "kpkg"],
    );
    let sp = rocm_kpack_test_support::site_packages(&venv);
    assert!(!fs::read_dir(&sp).expect("site-packages").any(|e| e
        .expect("e")
        .file_name()
        .to_string_lossy()
        .starts_with("kpkg")));

    // uv takes a package from the first index that has it (its default
    // first-index strategy): ours goes in `--index`, which comes before the
    // `--default-index`.
    let uv = uv();
    let venv2 = tmp.path().join("venv2");
    ok(Command::new(uv)
        .arg("venv")
        .arg(&venv2)
        .arg("--python")
        .arg("python3"));
    let py = venv2.join("bin/python");
    ok(Command::new(uv)
        .args(["pip", "install", "--no-cache", "--python"])
        .arg(&py)
        .args([
            "--index",
            &url,
            "--default-index",
            &upstream_url,
            "kpkg[device-gfx1100]",
        ])
        .env("UV_NO_CONFIG", "1"));
    ok(Command::new(uv).args(["pip", "check", "--python"]).arg(&py));
    expect(&ok(Command::new(uv)
        .args(["pip", "freeze", "--python"])
        .arg(&py)));
    // The other way round, uv takes upstream's fat wheel: the order matters.
    let venv3 = tmp.path().join("venv3");
    ok(Command::new(uv)
        .arg("venv")
        .arg(&venv3)
        .arg("--python")
        .arg("python3"));
    let py3 = venv3.join("bin/python");
    ok(Command::new(uv)
        .args(["pip", "install", "--no-cache", "--python"])
        .arg(&py3)
        .args(["--index", &upstream_url, "--default-index", &url, "kpkg"])
        .env("UV_NO_CONFIG", "1"));
    let frozen = ok(Command::new(uv)
        .args(["pip", "freeze", "--python"])
        .arg(&py3));
    assert!(
        frozen.lines().any(|l| l == "kpkg==1.0") && !frozen.contains("device"),
        "{frozen}"
    );

    // The README's pip block as written, from the repository root (it
    // builds its own kpkg from the fixtures and reads its index through a
    // file:// URL; six comes from the upstream index above).
    let block = readme_block("pip");
    let path = format!(
        "{}:{}:{}",
        bins::built().display(),
        uv.parent().expect("uv dir").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &block])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .env("REPO", server.root_url())
        .env("PYPI", &upstream_url)
        // The test's store is plain http on 127.0.0.1.
        .env("ROCM_KPACK_ALLOW_HTTP", "1")
        .env("ROCM_KPACK_ARCH_OVERRIDE", "gfx1100")
        .env("PATH", path)
        .env("PIP_CONFIG_FILE", "/dev/null")
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .env("UV_NO_CONFIG", "1")
        .output()
        .expect("bash");
    let out = text(&o);
    assert!(
        o.status.success(),
        "README block `sh pip` failed:\n{block}\n---\n{out}"
    );
    assert!(out.contains("kpkg-device-gfx1100-1.0+kpack1"), "{out}");
}

// ------------------------------ upgrades from the family tables to per target

/// Debian's librocrand1 split and packaged (debs and rpms) under `spec`:
/// an earlier family table (a file of `tests/fixtures/specs/`, version
/// 5.3.3-4: with `families-2025.toml` `librocrand1-gfx90x` carries gfx900,
/// gfx906, gfx908 and gfx90a; with `families.toml`,
/// `librocrand1-gfx103x-dgpu` carries gfx1030), or None: the built-in
/// per-target spec (the default suffix: 5.3.3-4+kpack1 and 5.3.3-4.kpack1,
/// sorting above; the old specs set `suffix = ""`); each with the
/// base-provides rpm. Made once per process and only read by the tests:
/// the apt and dnf upgrades of both tables start from the same packages.
fn rocrand_packages_under(spec: Option<&str>) -> PathBuf {
    static MADE: Mutex<Vec<(Option<String>, PathBuf)>> = Mutex::new(Vec::new());
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, pkgs)) = made.iter().find(|(s, _)| s.as_deref() == spec) {
        return pkgs.clone();
    }
    let spec_path = spec.map(|s| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/specs")
            .join(s)
    });
    let tree = debian::extracted("librocrand1").expect("extracted");
    let dir = tempfile::tempdir().expect("tmp").keep();
    let split = dir.join("split");
    let pkgs = dir.join("pkgs");
    let mut c = bins::command("rocm-kpack");
    c.arg("split").arg(&tree).arg("--out").arg(&split).arg("-q");
    spec_path.as_ref().map(|s| c.arg("--spec").arg(s));
    ok(&mut c);
    let mut c = bins::command("rocm-kpack");
    c.arg("package")
        .arg(&split)
        .args([
            "--name",
            "librocrand1",
            "--version",
            "5.3.3-4",
            "--format",
            "deb,rpm",
            "-q",
            "--out",
        ])
        .arg(&pkgs);
    spec_path.as_ref().map(|s| c.arg("--spec").arg(s));
    ok(&mut c);
    base_provides_rpm(&pkgs);
    made.push((spec.map(str::to_string), pkgs.clone()));
    pkgs
}

/// Publishes `pkgs` (apt, yum, kpack store) into `repo`, replacing what
/// is there.
fn publish_packages(pkgs: &Path, repo: &Path, server: &Server) {
    ok(bins::command("rocm-kpack")
        .arg("publish")
        .arg(pkgs)
        .arg("--out")
        .arg(repo)
        .args([
            "--apt",
            "--yum",
            "--kpack-store",
            "--force",
            "-q",
            "--store-url",
            server.root_url(),
            "--fetcher-bin",
        ])
        .arg(fetcher_bin())
        .arg("--cache")
        .arg(store_cache()));
}

/// The archives of librocrand1 for `units` installed below `root`.
fn rocrand_archives(root: &Path, units: &[&str]) -> Vec<PathBuf> {
    units
        .iter()
        .map(|u| root.join(KPACK_DIR).join(format!("librocrand_{u}.kpack")))
        .collect()
}

/// `Package Version` of the installed packages whose name starts with
/// librocrand1, sorted (dpkg's database, or rpm's with `rpm`).
fn installed_rocrand(root: &Path, rpm: bool) -> Vec<String> {
    let out: String = if rpm {
        // The root has dnf but no rpm command: dnf lists `NAME.ARCH EVR REPO`.
        ok(chroot(root, "mi210").args(["dnf", "-q", "list", "--installed", "librocrand1*"]))
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let name = f.next()?.rsplit_once('.')?.0;
                Some(format!("{name} {}\n", f.next()?))
            })
            .collect()
    } else {
        ok(chroot(root, "mi210").args([
            "dpkg-query",
            "-W",
            "-f",
            "${db:Status-Abbrev}${Package} ${Version}\\n",
        ]))
        .lines()
        .filter_map(|l| l.strip_prefix("ii "))
        .map(|l| format!("{l}\n"))
        .collect()
    };
    let mut v: Vec<String> = out
        .lines()
        .filter(|l| l.starts_with("librocrand1"))
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

/// Every archive below the root's /usr belongs to an installed package
/// (`owner` = `dpkg -S` or `rpm -qf`): none is orphaned.
fn assert_archives_owned(root: &Path, owner: &[&str]) -> Vec<String> {
    let mut owners = Vec::new();
    for a in archives_below(&root.join("usr")) {
        let inside = format!("/{}", a.strip_prefix(root).expect("below root").display());
        let o = chroot(root, "mi210")
            .args(owner)
            .arg(&inside)
            .output()
            .expect("owner");
        assert!(
            o.status.success() && !o.stdout.is_empty(),
            "{inside} belongs to no package: {}",
            text(&o)
        );
        owners.push(String::from_utf8_lossy(&o.stdout).trim().to_string());
    }
    owners
}

/// The packages of the family table `table` (rocrand_packages_under)
/// published into `t/repo` and served on 127.0.0.1.
fn served_family_packages(t: &Path, table: &str) -> (PathBuf, Server) {
    let repo = t.join("repo");
    fs::create_dir_all(&repo).expect("mkdir");
    let server = http::serve_dir(&repo).expect("serve");
    publish_packages(&rocrand_packages_under(Some(table)), &repo, &server);
    (repo, server)
}

/// `apt-get -q -y ARGS` in the root, for `machine`; returns its output.
fn apt_get(root: &Path, machine: &str, args: &[&str]) -> String {
    ok(chroot(root, machine)
        .args(["apt-get", "-q", "-y"])
        .args(args))
}

/// A machine that installed librocrand1 and the 2025 family package
/// librocrand1-gfx90x (MI210) moves to the per-target packages: `apt-get
/// upgrade` holds the transition back (it installs no new package) and
/// leaves a working install; `apt-get dist-upgrade` installs the
/// transitional librocrand1-gfx90x and the per-processor packages it
/// depends on, whose Replaces/Breaks take the archives over without a file
/// conflict; keeping the GPU's package and removing the transitional one
/// leaves exactly gfx90a's archive, owned by librocrand1-gfx90a.
#[test]
fn apt_moves_an_install_of_the_2025_families_to_the_per_target_packages() {
    let _g = heavy();
    let tmp = tempfile::tempdir().expect("tmp");
    let t = tmp.path();
    let (repo, server) = served_family_packages(t, "families-2025.toml");
    let root = debian_root(t, Some(server.root_url()));
    // The 2025 packages copied Debian's version (5.3.3-4), so with Debian's
    // sources beside ours apt could take Debian's fat librocrand1; the
    // machine being upgraded is one where ours were installed: pinned here
    // for the old install only (the new packages win on their version).
    let pin = root.join("etc/apt/preferences.d/rocm-kpack-2025");
    fs::write(
        &pin,
        "Package: *\nPin: release o=rocm-kpack\nPin-Priority: 600\n",
    )
    .expect("pin");
    let apt = |args: &[&str]| apt_get(&root, "mi210", args);
    apt(&["update"]);
    apt(&["install", "librocrand1", "librocrand1-gfx90x"]);
    let all = rocrand_archives(&root, &["gfx900", "gfx906", "gfx908", "gfx90a"]);
    assert_eq!(archives_below(&root.join("usr")), all);
    assert_eq!(
        installed_rocrand(&root, false),
        ["librocrand1 5.3.3-4", "librocrand1-gfx90x 5.3.3-4"]
    );

    fs::remove_file(&pin).expect("unpin");
    publish_packages(&rocrand_packages_under(None), &repo, &server);
    apt(&["update"]);
    let out = apt(&["upgrade"]);
    assert!(out.contains("kept back"), "{out}");
    assert_eq!(
        installed_rocrand(&root, false),
        ["librocrand1 5.3.3-4", "librocrand1-gfx90x 5.3.3-4"]
    );
    assert_mi210_loads(&root);

    let out = apt(&["dist-upgrade"]);
    assert!(!out.contains("trying to overwrite"), "{out}");
    assert_eq!(
        installed_rocrand(&root, false),
        [
            "librocrand1 5.3.3-4+kpack1",
            "librocrand1-gfx900 5.3.3-4+kpack1",
            "librocrand1-gfx906 5.3.3-4+kpack1",
            "librocrand1-gfx908 5.3.3-4+kpack1",
            "librocrand1-gfx90a 5.3.3-4+kpack1",
            "librocrand1-gfx90x 5.3.3-4+kpack1",
        ]
    );
    assert_eq!(archives_below(&root.join("usr")), all);
    let owners = assert_archives_owned(&root, &["dpkg", "-S"]);
    for (o, unit) in owners.iter().zip(["gfx900", "gfx906", "gfx908", "gfx90a"]) {
        assert!(o.starts_with(&format!("librocrand1-{unit}: ")), "{o}");
    }
    assert_mi210_loads(&root);

    // Keep the package this GPU needs, drop the transitional one and what
    // only it needed.
    apt(&["install", "librocrand1-gfx90a"]);
    apt(&[
        "remove",
        "--purge",
        "librocrand1-gfx90x",
        "librocrand1-gfx900",
        "librocrand1-gfx906",
        "librocrand1-gfx908",
    ]);
    assert_eq!(
        installed_rocrand(&root, false),
        [
            "librocrand1 5.3.3-4+kpack1",
            "librocrand1-gfx90a 5.3.3-4+kpack1"
        ]
    );
    assert_eq!(
        archives_below(&root.join("usr")),
        rocrand_archives(&root, &["gfx90a"])
    );
    assert_archives_owned(&root, &["dpkg", "-S"]);
    assert_mi210_loads(&root);
}

/// The same machine with dnf: `dnf upgrade` moves it to the per-target
/// packages (Obsoletes on the per-processor rpms, the transitional rpm's
/// Requires) without a file conflict, and every archive belongs to a
/// package.
#[test]
fn dnf_moves_an_install_of_the_2025_families_to_the_per_target_packages() {
    let _g = heavy();
    let tmp = tempfile::tempdir().expect("tmp");
    let t = tmp.path();
    let (repo, server) = served_family_packages(t, "families-2025.toml");
    let root = dnf_root(t, &server);
    let dnf = |args: &[&str]| ok(chroot(&root, "mi210").args(["dnf", "-y"]).args(args));
    dnf(&[
        "install",
        "rocm-kpack-fetch",
        "librocrand1",
        "librocrand1-gfx90x",
    ]);
    let all = rocrand_archives(&root, &["gfx900", "gfx906", "gfx908", "gfx90a"]);
    assert_eq!(archives_below(&root.join("usr")), all);
    assert_eq!(
        installed_rocrand(&root, true),
        ["librocrand1 5.3.3-4", "librocrand1-gfx90x 5.3.3-4"]
    );

    publish_packages(&rocrand_packages_under(None), &repo, &server);
    dnf(&["clean", "all"]);
    let out = dnf(&["upgrade", "--refresh"]);
    let installed = installed_rocrand(&root, true);
    assert!(
        installed.contains(&"librocrand1 5.3.3-4.kpack1".to_string()),
        "{installed:?}\n{out}"
    );
    assert!(
        installed.contains(&"librocrand1-gfx90a 5.3.3-4.kpack1".to_string()),
        "{installed:?}\n{out}"
    );
    assert!(
        !installed.contains(&"librocrand1-gfx90x 5.3.3-4".to_string()),
        "{installed:?}\n{out}"
    );
    assert_archives_owned(
        &root,
        &["dnf", "-q", "repoquery", "--installed", "--whatprovides"],
    );
    assert!(archives_below(&root.join("usr"))
        .contains(&root.join(KPACK_DIR).join("librocrand_gfx90a.kpack")));
    assert_mi210_loads(&root);
}

/// A machine that installed librocrand1 with the family table's packages
/// librocrand1-gfx90a and librocrand1-gfx103x-dgpu moves to the per-target
/// packages: `apt-get dist-upgrade` upgrades librocrand1-gfx90a in place
/// (the name lives on), turns librocrand1-gfx103x-dgpu into a transitional
/// package and installs librocrand1-gfx1030, whose Replaces/Breaks take its
/// archive over without a file conflict; removing the transitional package
/// leaves both archives, each owned by its processor's package.
#[test]
fn apt_moves_an_install_of_the_family_packages_to_the_per_target_ones() {
    let _g = heavy();
    let tmp = tempfile::tempdir().expect("tmp");
    let t = tmp.path();
    let (repo, server) = served_family_packages(t, "families.toml");
    let root = debian_root(t, Some(server.root_url()));
    // As for the 2025 table: the old packages have Debian's version.
    let pin = root.join("etc/apt/preferences.d/rocm-kpack-families");
    fs::write(
        &pin,
        "Package: *\nPin: release o=rocm-kpack\nPin-Priority: 600\n",
    )
    .expect("pin");
    let apt = |args: &[&str]| apt_get(&root, "mi210", args);
    apt(&["update"]);
    apt(&[
        "install",
        "librocrand1",
        "librocrand1-gfx90a",
        "librocrand1-gfx103x-dgpu",
    ]);
    let both = rocrand_archives(&root, &["gfx1030", "gfx90a"]);
    assert_eq!(archives_below(&root.join("usr")), both);
    assert_eq!(
        installed_rocrand(&root, false),
        [
            "librocrand1 5.3.3-4",
            "librocrand1-gfx103x-dgpu 5.3.3-4",
            "librocrand1-gfx90a 5.3.3-4"
        ]
    );

    fs::remove_file(&pin).expect("unpin");
    publish_packages(&rocrand_packages_under(None), &repo, &server);
    apt(&["update"]);
    let out = apt(&["dist-upgrade"]);
    assert!(!out.contains("trying to overwrite"), "{out}");
    assert_eq!(
        installed_rocrand(&root, false),
        [
            "librocrand1 5.3.3-4+kpack1",
            "librocrand1-gfx1030 5.3.3-4+kpack1",
            "librocrand1-gfx103x-dgpu 5.3.3-4+kpack1",
            "librocrand1-gfx90a 5.3.3-4+kpack1",
        ]
    );
    assert_eq!(archives_below(&root.join("usr")), both);
    let owners = assert_archives_owned(&root, &["dpkg", "-S"]);
    for (o, unit) in owners.iter().zip(["gfx1030", "gfx90a"]) {
        assert!(o.starts_with(&format!("librocrand1-{unit}: ")), "{o}");
    }
    assert_mi210_loads(&root);

    apt(&["install", "librocrand1-gfx1030"]);
    apt(&["remove", "--purge", "librocrand1-gfx103x-dgpu"]);
    assert_eq!(
        installed_rocrand(&root, false),
        [
            "librocrand1 5.3.3-4+kpack1",
            "librocrand1-gfx1030 5.3.3-4+kpack1",
            "librocrand1-gfx90a 5.3.3-4+kpack1",
        ]
    );
    assert_eq!(archives_below(&root.join("usr")), both);
    assert_archives_owned(&root, &["dpkg", "-S"]);
}

/// The same machine with dnf: `dnf upgrade` replaces
/// librocrand1-gfx103x-dgpu (Obsoletes on librocrand1-gfx1030, the
/// transitional rpm's Requires) without a file conflict, and every archive
/// belongs to a package.
#[test]
fn dnf_moves_an_install_of_the_family_packages_to_the_per_target_ones() {
    let _g = heavy();
    let tmp = tempfile::tempdir().expect("tmp");
    let t = tmp.path();
    let (repo, server) = served_family_packages(t, "families.toml");
    let root = dnf_root(t, &server);
    let dnf = |args: &[&str]| ok(chroot(&root, "mi210").args(["dnf", "-y"]).args(args));
    dnf(&[
        "install",
        "rocm-kpack-fetch",
        "librocrand1",
        "librocrand1-gfx90a",
        "librocrand1-gfx103x-dgpu",
    ]);
    let both = rocrand_archives(&root, &["gfx1030", "gfx90a"]);
    assert_eq!(archives_below(&root.join("usr")), both);

    publish_packages(&rocrand_packages_under(None), &repo, &server);
    dnf(&["clean", "all"]);
    let out = dnf(&["upgrade", "--refresh"]);
    let installed = installed_rocrand(&root, true);
    for p in [
        "librocrand1 5.3.3-4.kpack1",
        "librocrand1-gfx1030 5.3.3-4.kpack1",
        "librocrand1-gfx90a 5.3.3-4.kpack1",
    ] {
        assert!(installed.contains(&p.to_string()), "{installed:?}\n{out}");
    }
    assert!(
        !installed.contains(&"librocrand1-gfx103x-dgpu 5.3.3-4".to_string()),
        "{installed:?}\n{out}"
    );
    assert_archives_owned(
        &root,
        &["dnf", "-q", "repoquery", "--installed", "--whatprovides"],
    );
    assert_eq!(archives_below(&root.join("usr")), both);
    assert_mi210_loads(&root);
}

/// A Debian root with dnf configured for the repository `server` serves.
fn dnf_root(t: &Path, server: &Server) -> PathBuf {
    let root = debian_root(t, None);
    fs::create_dir_all(root.join("etc/dnf/vars")).expect("mkdir");
    fs::write(root.join("etc/dnf/vars/releasever"), "1\n").expect("releasever");
    fs::create_dir_all(root.join("etc/yum.repos.d")).expect("mkdir");
    fs::write(
        root.join("etc/yum.repos.d/rocm-kpack.repo"),
        format!(
            "[rocm-kpack]\nname=rocm-kpack\nbaseurl={}\ngpgcheck=0\nmetadata_expire=0\n",
            server.root_url()
        ),
    )
    .expect("repo");
    root
}

/// The MI210's code object is found in the installed tree by AMD's
/// lookup, and the fetcher's `verify` passes.
fn assert_mi210_loads(root: &Path) {
    let fat = debian::extracted("librocrand1")
        .expect("extracted")
        .join("usr/lib/x86_64-linux-gnu/librocrand.so.1.1");
    assert_gfxarch_finds(
        &root.join("usr/lib/x86_64-linux-gnu/librocrand.so.1.1"),
        &fat,
        "gfx90a:sramecc+:xnack-",
        "librocrand_gfx90a.kpack",
    );
    let o = chroot(root, "mi210")
        .args(["rocm-kpack-fetch", "verify"])
        .output()
        .expect("verify");
    assert!(o.status.success(), "{}", text(&o));
}

/// The library directory of the fixture-sized rocBLAS below.
const BLAS_LIBDIR: &str = "usr/lib/x86_64-linux-gnu";

/// Its Tensile-style kernel database, below [`BLAS_LIBDIR`], laid out as
/// Debian's librocblas0 has it: `TensileLibrary.dat` serves every target
/// and stays in the generic package, the others are one processor's.
const BLAS_DATABASE: [&str; 5] = [
    "kpackblas/1.0/library/TensileLibrary.dat",
    "kpackblas/1.0/library/TensileLibrary_gfx90a.co",
    "kpackblas/1.0/library/Kernels.so-000-gfx90a-xnack+.hsaco",
    "kpackblas/1.0/library/Kernels.so-000-gfx90a-xnack-.hsaco",
    "kpackblas/1.0/library/TensileLibrary_gfx1100.co",
];

/// Code-object-sized, compressible bytes naming their file.
fn blas_content(rel: &str) -> Vec<u8> {
    rel.bytes().cycle().take(60_000 + rel.len() * 100).collect()
}

/// Whether a database file of [`BLAS_DATABASE`] is the MI210's.
fn for_gfx90a(rel: &str) -> bool {
    rel.contains("gfx90a")
}

/// The name of the split's device package for gfx90a.
fn gfx90a_device(report: &rocm_kpack_splitter::split_package::SplitPackageReport) -> String {
    report
        .packages
        .iter()
        .find(|p| p.group.is_some() && p.targets.iter().any(|t| t.starts_with("gfx90a")))
        .expect("the gfx90a device package")
        .name
        .clone()
}

/// A fixture-sized rocBLAS as a distribution ships it, fat: the clang-19
/// fixture library (gfx90a, gfx1100, ... code) as `libkpackblas.so.0` and
/// the kernel database beside it; written as a deb (`Format::Deb`) or an
/// rpm and split by `split-package` into `pkgs`. Returns the split's report.
fn blas_split(
    dir: &Path,
    format: Format,
    pkgs: &Path,
) -> rocm_kpack_splitter::split_package::SplitPackageReport {
    use rocm_kpack_package::compress::Compression;
    use rocm_kpack_splitter::split_package::{split_package, SplitPackageOptions};
    let tree = dir.join("fat-tree");
    let lib = tree.join(BLAS_LIBDIR);
    fs::create_dir_all(&lib).expect("mkdir");
    fs::copy(
        rocm_kpack_test_support::fixtures::fixture("clang19/libfixture.so"),
        lib.join("libkpackblas.so.0"),
    )
    .expect("copy");
    for rel in BLAS_DATABASE {
        let p = lib.join(rel);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(&p, blas_content(rel)).expect("write");
    }
    let fat = match format {
        Format::Rpm => {
            use rocm_kpack_package::rpm::write_rpm;
            use rocm_kpack_package::tree::Payload;
            let spec = rpm_spec(
                "libkpackblas0",
                "1.0",
                "fixture-sized BLAS with a kernel database",
            );
            // The library's own directories only, as a distribution's rpm
            // owns them (not /usr/lib/x86_64-linux-gnu).
            let payload = Payload::scan(&tree).expect("scan");
            let out = dir.join(spec.file_name());
            write_rpm(
                fs::File::create(&out).expect("create"),
                &spec,
                &payload,
                dir,
            )
            .expect("rpm");
            out
        }
        _ => {
            fs::create_dir_all(tree.join("DEBIAN")).expect("mkdir");
            fs::write(
                tree.join("DEBIAN/control"),
                "Package: libkpackblas0\nVersion: 1.0-1\nArchitecture: amd64\nMaintainer: T <t@example.org>\n\
                 Description: fixture-sized BLAS with a kernel database\n test\n",
            )
            .expect("control");
            let out = dir.join("libkpackblas0_1.0-1_amd64.deb");
            ok(Command::new("dpkg-deb")
                .args(["--root-owner-group", "-Zxz", "-z0", "--build"])
                .arg(&tree)
                .arg(&out));
            out
        }
    };
    let report = split_package(
        &fat,
        pkgs,
        &SplitPackageOptions {
            package_compression: Compression::Xz,
            package_level: Some(0),
            ..SplitPackageOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("split-package: {}", chain(&e)));
    let _ = fs::remove_dir_all(&tree);
    report
}

/// Every file of the kernel database the MI210 needs is in the root, byte
/// for byte, the gfx1100 one is not; `status` is complete and `verify`
/// passes.
fn assert_blas_database_fetched(root: &Path) {
    let lib = root.join(BLAS_LIBDIR);
    for rel in BLAS_DATABASE {
        let p = lib.join(rel);
        if for_gfx90a(rel) || !rel.contains("gfx") {
            assert!(
                fs::read(&p).ok() == Some(blas_content(rel)),
                "{rel} missing or not the fat package's"
            );
        } else {
            assert!(!p.exists(), "{rel} installed on an MI210");
        }
    }
    assert!(lib.join(".kpack/libkpackblas_gfx90a.kpack").is_file());
    let o = chroot(root, "mi210")
        .args([
            "rocm-kpack-fetch",
            "status",
            "--sysfs-root",
            "/srv/sysfs/mi210",
        ])
        .output()
        .expect("status");
    assert!(
        o.status.success() && text(&o).contains("complete"),
        "{}",
        text(&o)
    );
    let o = chroot(root, "mi210")
        .args(["rocm-kpack-fetch", "verify"])
        .output()
        .expect("verify");
    assert!(o.status.success(), "{}", text(&o));
}

/// Nothing the fetcher installed for the fixture-sized rocBLAS is left:
/// no archive, no database file, no directory of the library's (the
/// package manager removed them, or left them to the trigger).
fn assert_blas_gone(root: &Path, out: &str) {
    assert_eq!(
        archives_below(&root.join("usr")),
        Vec::<PathBuf>::new(),
        "{out}"
    );
    let lib = root.join(BLAS_LIBDIR);
    // The package's own directories may stay behind, empty: the package
    // manager could not remove them while the fetched files were inside,
    // and the fetcher removes only directories it recorded creating
    // (docs/packaging.md). No file may stay.
    let left = files_below(&lib.join("kpackblas"), |_| true);
    assert!(left.is_empty(), "{left:?}\n{out}");
    assert!(!lib.join(".kpack").exists(), "{out}");
    assert!(!lib.join("libkpackblas.so.0").exists(), "{out}");
}

/// apt with kernel-database files: the dpkg trigger fetches the gfx90a
/// archive and database files; the family device package installed after
/// the fetch takes the files over (docs/packaging.md "Installing the
/// family device package after a fetch") and its removal leaves the
/// generic complete again; `apt-get remove` of the generic package leaves
/// none of it, and no file a package owns was touched (`dpkg --verify`).
#[test]
fn apt_fetches_database_files_through_the_trigger_and_remove_takes_them_away() {
    let _g = heavy();
    let tmp = tempfile::tempdir().expect("tmp");
    let pkgs = tmp.path().join("pkgs");
    let report = blas_split(tmp.path(), Format::Deb, &pkgs);
    let device = gfx90a_device(&report);
    let server = publish_served(tmp.path(), &pkgs, &["--apt"]);
    let root = debian_root(tmp.path(), Some(server.root_url()));
    ok(chroot(&root, "mi210").args(["apt-get", "update", "-q"]));
    let out = ok(chroot(&root, "mi210").args(["apt-get", "install", "-y", "-q", "libkpackblas0"]));
    assert!(
        out.contains("rocm-kpack-fetch: device code for gfx90a:sramecc+"),
        "{out}"
    );
    assert_blas_database_fetched(&root);
    let o = chroot(&root, "mi210")
        .args(["dpkg", "--verify"])
        .output()
        .expect("dpkg --verify");
    assert!(o.status.success() && o.stdout.is_empty(), "{}", text(&o));

    // The family device package after the fetch: the same bytes, now the
    // package's; still complete.
    let out = ok(chroot(&root, "mi210").args(["apt-get", "install", "-y", "-q", &device]));
    assert_blas_database_fetched(&root);
    let owner = ok(chroot(&root, "mi210").args([
        "dpkg-query",
        "-S",
        &format!("/{BLAS_LIBDIR}/{}", BLAS_DATABASE[1]),
    ]));
    assert!(owner.starts_with(&format!("{device}:")), "{owner}\n{out}");
    // Its removal takes its files; the trigger fetches them again.
    let out = ok(chroot(&root, "mi210").args(["apt-get", "remove", "-y", "-q", &device]));
    assert_blas_database_fetched(&root);
    let o = chroot(&root, "mi210")
        .args(["dpkg", "--verify"])
        .output()
        .expect("dpkg --verify");
    assert!(
        o.status.success() && o.stdout.is_empty(),
        "{}\n{out}",
        text(&o)
    );

    let out = ok(chroot(&root, "mi210").args(["apt-get", "remove", "-y", "-q", "libkpackblas0"]));
    assert!(out.contains("removed"), "{out}");
    assert_blas_gone(&root, &out);
    let o = chroot(&root, "mi210")
        .args(["dpkg", "--verify"])
        .output()
        .expect("dpkg --verify");
    assert!(o.status.success() && o.stdout.is_empty(), "{}", text(&o));
    let fetched: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with("/by-hash/"))
        .collect();
    assert!(!fetched.is_empty(), "{fetched:?}");
}

/// dnf with kernel-database files: the rpm file triggers fetch the gfx90a
/// archive and database files at `dnf install`, the family device rpm
/// installed after the fetch takes them over, and `dnf remove` of the
/// generic rpm (which takes the device rpm with it) leaves none of them;
/// `rpm -Va` finds no package file changed.
#[test]
fn dnf_fetches_database_files_through_the_rpm_triggers_and_remove_takes_them_away() {
    let _g = heavy();
    let tmp = tempfile::tempdir().expect("tmp");
    let pkgs = tmp.path().join("pkgs");
    let report = blas_split(tmp.path(), Format::Rpm, &pkgs);
    let device = gfx90a_device(&report);
    base_provides_rpm(&pkgs);
    let server = publish_served(tmp.path(), &pkgs, &["--yum"]);
    let root = debian_root(tmp.path(), None);
    fs::create_dir_all(root.join("etc/dnf/vars")).expect("mkdir");
    fs::write(root.join("etc/dnf/vars/releasever"), "1\n").expect("releasever");
    fs::create_dir_all(root.join("etc/yum.repos.d")).expect("mkdir");
    fs::write(
        root.join("etc/yum.repos.d/rocm-kpack.repo"),
        format!(
            "[rocm-kpack]\nname=rocm-kpack\nbaseurl={}\ngpgcheck=0\n",
            server.root_url()
        ),
    )
    .expect("repo");
    let dnf = |args: &[&str]| ok(chroot(&root, "mi210").args(["dnf", "-y"]).args(args));
    let out = dnf(&["install", "rocm-kpack-fetch", "libkpackblas0"]);
    assert!(
        out.contains("rocm-kpack-fetch: device code for gfx90a:sramecc+"),
        "{out}"
    );
    assert_blas_database_fetched(&root);

    let out = dnf(&["install", &device]);
    assert_blas_database_fetched(&root);
    // The root has dnf but no rpm command: this machine's rpm reads its
    // database.
    let rpm = |args: &[&str]| {
        Command::new("rpm")
            .arg("--root")
            .arg(&root)
            .args(args)
            .output()
            .expect("rpm")
    };
    let o = rpm(&[
        "-qf",
        "--qf",
        "%{NAME}\n",
        &format!("/{BLAS_LIBDIR}/{}", BLAS_DATABASE[1]),
    ]);
    assert_eq!(text(&o).trim(), device, "{out}");
    let o = rpm(&["-V", &device, "libkpackblas0"]);
    assert!(o.status.success() && o.stdout.is_empty(), "{}", text(&o));

    let out = dnf(&["remove", "libkpackblas0"]);
    assert!(out.contains("removed"), "{out}");
    assert_blas_gone(&root, &out);
    let installed = text(&rpm(&["-qa", "--qf", "%{NAME}\n"]));
    assert!(!installed.contains("libkpackblas0"), "{installed}");
    let o = rpm(&["-V", "rocm-kpack-fetch"]);
    assert!(o.status.success() && o.stdout.is_empty(), "{}", text(&o));
}

/// AMD's native scheme through apt (`rocm_kpack_test_support::amd_native`): the
/// Debian root with Debian's sources and a flat repository of host, device
/// and meta debs on 127.0.0.1.
mod amd_native_packages {
    use super::*;
    use rocm_kpack_test_support::amd_native::{self, device, HOST, META, TARGETS};
    use serde_json::Value;
    use std::collections::BTreeSet;

    /// `rocm-kpack-fetch ARGS --root ROOT --sysfs-root <machine>` from the
    /// host (apt-get/dpkg or dnf/rpm pointed at the root).
    fn fetch(root: &Path, machine: &str, args: &[&str]) -> Output {
        let mut c = bins::command("rocm-kpack-fetch");
        bins::isolate_fetcher(&mut c);
        c.args(args)
            .arg("--root")
            .arg(root)
            .arg("--sysfs-root")
            .arg(fixtures::machine(machine));
        run(&mut c)
    }

    fn json(o: &Output) -> Value {
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(o)))
    }

    fn names(v: &Value) -> Vec<String> {
        v.as_array()
            .unwrap_or_else(|| panic!("not an array: {v}"))
            .iter()
            .map(|p| p["name"].as_str().expect("name").to_string())
            .collect()
    }

    fn strings(v: &Value) -> Vec<String> {
        v.as_array()
            .unwrap_or_else(|| panic!("not an array: {v}"))
            .iter()
            .map(|p| p.as_str().expect("string").to_string())
            .collect()
    }

    /// The packages present in the root (dpkg's database, or rpm's).
    fn present(root: &Path, rpm: bool) -> BTreeSet<String> {
        let out = if rpm {
            ok(Command::new("rpm")
                .arg("--root")
                .arg(root)
                .args(["-qa", "--qf", "%{NAME}\n"]))
        } else {
            ok(Command::new("dpkg-query")
                .arg(format!(
                    "--admindir={}",
                    root.join("var/lib/dpkg").display()
                ))
                .args(["-W", "-f=${db:Status-Abbrev} ${Package}\n"]))
            .lines()
            .filter(|l| l.starts_with("ii"))
            .map(|l| l[4..].to_string())
            .collect::<Vec<_>>()
            .join("\n")
        };
        out.lines()
            .filter(|l| l.starts_with("amdrocm"))
            .map(str::to_string)
            .collect()
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    /// One flow for either client: install the host package, `install
    /// --auto --via` adds exactly gfx942's device package on an MI300X;
    /// `status` says what is missing (exit 4) and then nothing; with the
    /// meta package installed (every target), `prune` lists the device
    /// packages of the other targets and the meta package the package
    /// manager removes with them before it removes anything, and `--yes`
    /// leaves the host and gfx942's device package.
    fn flow(
        root: &Path,
        rpm: bool,
        native: &rocm_kpack_test_support::amd_native::NativeSet,
        client: &dyn Fn(&[&str]),
        pm_opts: &[String],
    ) {
        let via = if rpm { "dnf" } else { "apt" };
        let mut via_args: Vec<String> = vec!["--via".into(), via.into()];
        via_args.extend(pm_opts.iter().map(|o| format!("--pm-opt={o}")));
        let via_args: Vec<&str> = via_args.iter().map(String::as_str).collect();
        client(&["install", HOST]);
        assert_eq!(present(root, rpm), set(&[HOST]));

        // status: gfx942's device package is missing (exit 4).
        let o = fetch(root, "mi300x", &["status", "--json"]);
        assert_eq!(o.status.code(), Some(4), "{}", text(&o));
        let v = json(&o);
        assert_eq!(names(&v["native"]["missing"]), [device("gfx942")], "{v}");

        // --dry-run names exactly it and installs nothing.
        let mut args = vec!["install", "--auto", "--dry-run", "--json"];
        args.extend(&via_args);
        let o = fetch(root, "mi300x", &args);
        assert!(o.status.success(), "{}", text(&o));
        assert_eq!(names(&json(&o)["plan"]["packages"]), [device("gfx942")]);
        assert_eq!(present(root, rpm), set(&[HOST]));

        let mut args = vec!["install", "--auto"];
        args.extend(&via_args);
        let o = fetch(root, "mi300x", &args);
        assert!(o.status.success(), "{}", text(&o));
        assert_eq!(present(root, rpm), set(&[HOST, &device("gfx942")]));
        assert!(root
            .join(amd_native::device_file(native, "gfx942"))
            .is_file());
        let o = fetch(root, "mi300x", &["status"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));

        // An image built with every target: the meta package.
        client(&["install", META]);
        let all: BTreeSet<String> = [HOST.to_string(), META.to_string()]
            .into_iter()
            .chain(TARGETS.iter().map(|t| device(t)))
            .collect();
        assert_eq!(present(root, rpm), all);
        let o = fetch(root, "mi300x", &["doctor"]);
        let out = text(&o);
        assert!(
            out.contains(&format!("{} is installed for gfx90a", device("gfx90a"))),
            "{out}"
        );

        // prune without --yes (and with --dry-run): lists, changes nothing.
        let o = fetch(root, "mi300x", &["prune", "--json"]);
        assert!(o.status.success(), "{}", text(&o));
        let v = json(&o);
        let plan = v["backends"]
            .as_array()
            .expect("backends")
            .iter()
            .find(|b| b["backend"] == via)
            .unwrap_or_else(|| panic!("no {via} backend: {v}"))
            .clone();
        assert_eq!(
            names(&plan["items"]),
            [device("gfx1100"), device("gfx90a")],
            "{v}"
        );
        assert_eq!(strings(&plan["also_removed"]), [META], "{v}");
        // The bytes freed are the package database's sizes of the two.
        let sizes: Vec<u64> = plan["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| i["bytes"].as_u64().expect("bytes"))
            .collect();
        assert!(sizes.iter().all(|b| *b > 0), "{v}");
        assert_eq!(v["bytes"].as_u64(), Some(sizes.iter().sum()), "{v}");
        let o = fetch(root, "mi300x", &["prune", "--dry-run"]);
        let out = text(&o);
        assert!(o.status.success(), "{out}");
        assert!(
            out.contains(&format!("would remove ({via}) {}", device("gfx90a"))),
            "{out}"
        );
        assert_eq!(present(root, rpm), all);

        // --yes: the meta removal is said before the package manager acts.
        let mut args = vec!["prune", "--yes"];
        args.extend(&via_args);
        let o = fetch(root, "mi300x", &args);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(o.status.success(), "{}", text(&o));
        let said = out
            .find(&format!(
                "{via} will ALSO remove (they depend on the above): {META}"
            ))
            .unwrap_or_else(|| panic!("{out}"));
        let acted = out
            .find(&format!("Removing {META}"))
            .or_else(|| out.find("Removing:"))
            .unwrap_or_else(|| panic!("{out}"));
        assert!(said < acted, "{out}");
        assert_eq!(present(root, rpm), set(&[HOST, &device("gfx942")]));
        assert!(!root
            .join(amd_native::device_file(native, "gfx90a"))
            .exists());
        let o = fetch(root, "mi300x", &["status", "--json"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let v = json(&o);
        assert_eq!(v["native"]["unused"], serde_json::json!([]), "{v}");
    }

    #[test]
    fn apt_installs_and_prunes_amds_native_device_debs() {
        let _g = heavy();
        let tmp = tempfile::tempdir().expect("tmp");
        let (set, repo) = amd_native::apt_repo(&tmp.path().join("debs"));
        let server = http::serve_dir(&repo).expect("serve");
        let root = debian_root(tmp.path(), None);
        fs::write(
            root.join("etc/apt/sources.list.d/amd.list"),
            format!("deb [trusted=yes] {} ./\n", server.root_url()),
        )
        .expect("sources");
        ok(chroot(&root, "cpu-only").args(["apt-get", "update", "-q"]));
        let client = |args: &[&str]| {
            ok(chroot(&root, "cpu-only")
                .args(["apt-get", "-y", "-q"])
                .args(args));
        };
        flow(&root, false, &set, &client, &[]);
        // The host package stays wanted once the meta package is gone.
        let auto = ok(chroot(&root, "cpu-only").args(["apt-mark", "showauto"]));
        assert!(!auto.lines().any(|l| l == HOST), "{auto}");
    }

    #[test]
    fn dnf_installs_and_prunes_amds_native_device_rpms() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (set, repo) = amd_native::yum_repo(&tmp.path().join("rpms"));
        let server = http::serve_dir(&repo).expect("serve");
        let root = tmp.path().join("root");
        fs::create_dir_all(&root).expect("mkdir");
        let opts = vec![
            "--setopt=reposdir=/dev/null".to_string(),
            "--setopt=local.gpgcheck=0".to_string(),
            format!("--repofrompath=local,{}", server.root_url()),
        ];
        let client = |args: &[&str]| {
            ok(Command::new("dnf")
                .args(["-y", "-q"])
                .arg(format!("--installroot={}", root.display()))
                .arg("--releasever=1")
                .args(&opts)
                .args(args));
        };
        flow(&root, true, &set, &client, &opts);
    }
}
