//! Crashes, concurrency and full disks: the fetcher as a child process.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::{assert_installed, list_dir, make_archive, ok, run, Env, Fault, Gate, Server};

/// Polls `cond` every 20 ms for up to `limit`.
fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    cond()
}

fn no_partial_kpack(dir: &Path) {
    for name in list_dir(dir) {
        assert!(
            !name.starts_with(".rocm-kpack-fetch.") || name == ".rocm-kpack-fetch.lock",
            "leftover temp file {name}"
        );
    }
}

#[test]
fn kill_9_mid_download_then_rerun_completes_without_partials_in_the_prefix() {
    let env = Env::new();
    let archives = env.rocrand(4_000_000);
    let a = &archives[0];
    let server = Server::start();
    server.add(&a.by_hash(), a.bytes.clone());
    server.push_fault(
        &a.by_hash(),
        Fault::StallAfter(2_500_000, Duration::from_secs(30)),
    );
    let mut child = env
        .install("gfx90a", &[server.url()], &[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    // The first megabyte-sized buffers reach the partial file, then the
    // server stalls: kill the process mid-transfer.
    let partial = env.cache.join("partial").join(format!("{}.part", a.hex()));
    let reached = wait_until(Duration::from_secs(60), || {
        fs::metadata(&partial).is_ok_and(|m| m.len() >= 2_000_000)
    });
    assert!(reached, "download did not start");
    child.kill().expect("SIGKILL");
    let status = child.wait().expect("wait");
    assert!(!status.success());

    assert!(
        !env.kpack.join("rocrand_gfx90X.kpack").exists(),
        "no partial .kpack visible"
    );
    no_partial_kpack(&env.kpack);
    let kept = fs::metadata(&partial).expect("partial kept").len();
    assert!(kept > 0 && kept < a.bytes.len() as u64);

    let stdout = ok(env.install("gfx90a", &[server.url()], &[]));
    assert!(stdout.contains("1 installed"), "{stdout}");
    assert_installed(&env.kpack.join("rocrand_gfx90X.kpack"), a);
    let last = server.requests_for(&a.by_hash()).pop().expect("request");
    assert_eq!(
        last.range,
        Some(format!("bytes={kept}-")),
        "resumed from the kept partial"
    );
    assert!(!partial.exists());
    no_partial_kpack(&env.kpack);
    ok(env.sub("verify", &[]));
}

#[test]
fn two_concurrent_installs_on_one_prefix_both_succeed_one_waits() {
    let env = Env::new();
    let archives = env.rocrand(500_000);
    let a = &archives[0];
    let server = Server::start();
    server.add(&a.by_hash(), a.bytes.clone());
    let gate = Gate::new();
    server.push_fault(&a.by_hash(), Fault::Gate(gate.clone()));

    let first = env
        .install("gfx90a", &[server.url()], &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn first");
    assert!(
        server.wait_for_requests(1, Duration::from_secs(20)),
        "first never asked"
    );
    // The first holds the prefix lock while its body is held at the gate.
    let mut second = env
        .install("gfx90a", &[server.url()], &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn second");
    let (tx, rx) = mpsc::channel();
    let err = second.stderr.take().expect("stderr");
    let reader = thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if line.contains("waiting for another rocm-kpack-fetch") {
                let _ = tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(20)).is_ok(),
        "second run did not wait for the lock"
    );
    gate.open();

    let out1 = first.wait_with_output().expect("first");
    let out2 = second.wait_with_output().expect("second");
    let err2 = reader.join().expect("reader");
    assert!(
        out1.status.success(),
        "first: {}",
        String::from_utf8_lossy(&out1.stderr)
    );
    assert!(out2.status.success(), "second: {err2}");
    assert!(String::from_utf8_lossy(&out1.stdout).contains("1 installed"));
    let s2 = String::from_utf8_lossy(&out2.stdout);
    assert!(
        s2.contains("0 installed") && s2.contains("1 already present"),
        "{s2}"
    );
    assert_eq!(
        server.requests_for(&a.by_hash()).len(),
        1,
        "downloaded once"
    );
    assert_installed(&env.kpack.join("rocrand_gfx90X.kpack"), a);
}

/// A 1 MiB tmpfs, unmounted on drop; `None` when mounting is not permitted.
struct SmallFs(PathBuf);

impl SmallFs {
    fn mount(at: &Path) -> Option<SmallFs> {
        fs::create_dir_all(at).expect("mkdir");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(at)
            .stderr(Stdio::null())
            .status()
            .ok()?;
        status.success().then(|| SmallFs(at.to_path_buf()))
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Runs `cmd` limited to files of at most 1 MiB (RLIMIT_FSIZE; SIGXFSZ
/// ignored so writes fail with EFBIG instead of killing the process).
fn with_file_size_limit(cmd: &mut Command) -> &mut Command {
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit {
                rlim_cur: 1 << 20,
                rlim_max: 1 << 20,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

#[test]
fn a_full_disk_leaves_installed_archives_untouched_and_says_why() {
    let env = Env::new();
    let small = make_archive("rocrand", "gfx110X", &["gfx1100"], 200_000, 31);
    let big = make_archive("rocrand", "gfx90X", &["gfx90a"], 2_000_000, 32);
    let server = Server::start();
    for x in [&small, &big] {
        server.add(&x.by_hash(), x.bytes.clone());
    }
    let mnt = env.tmp.path().join("small");
    let mounted = SmallFs::mount(&mnt);
    let prefix = if mounted.is_some() {
        mnt.join("prefix")
    } else {
        env.tmp.path().join("prefix")
    };
    let kpack = prefix.join(".kpack");
    env.manifest(&kpack, "rocrand", &[&small, &big]);
    let p = prefix.to_string_lossy().into_owned();
    let base = ["--prefix", p.as_str(), "--no-default-prefixes"];
    ok(env.install("gfx1100", &[server.url()], &base));
    assert_installed(&kpack.join("rocrand_gfx110X.kpack"), &small);

    // Case 1: the cache is on a big filesystem; the copy into the prefix
    // runs out of space. Case 2: the cache is on the full filesystem too;
    // the download itself runs out of space.
    let caches = [env.tmp.path().join("cache-big"), prefix.join("cache")];
    for cache in &caches {
        let c = cache.to_string_lossy().into_owned();
        let mut args = base.to_vec();
        args.extend(["--cache-dir", c.as_str()]);
        let mut cmd = env.install("gfx1100,gfx90a", &[server.url()], &args);
        let expected = if mounted.is_some() {
            "No space left on device"
        } else {
            with_file_size_limit(&mut cmd);
            "File too large"
        };
        let (code, _, stderr) = run(cmd);
        assert_eq!(code, 1, "{stderr}");
        assert!(stderr.contains(expected), "{}: {stderr}", cache.display());
        assert!(
            stderr.contains("rocrand_gfx90X.kpack"),
            "names the archive: {stderr}"
        );
        // A local failure: no advice about the network or the sources.
        assert!(!stderr.contains("check the network"), "{stderr}");
        if mounted.is_some() {
            let hint = stderr
                .lines()
                .find(|l| l.starts_with("rocm-kpack-fetch: hint: "))
                .unwrap_or_else(|| panic!("no hint: {stderr}"));
            assert!(
                hint.contains(&format!(
                    "the file system mounted at {} is full",
                    mnt.display()
                )) && hint.contains("free space there"),
                "{hint}"
            );
            // The cache on the full file system can be moved.
            assert_eq!(
                hint.contains("--cache-dir"),
                cache.starts_with(&mnt),
                "{hint}"
            );
        }
        assert_installed(&kpack.join("rocrand_gfx110X.kpack"), &small);
        assert!(!kpack.join("rocrand_gfx90X.kpack").exists());
        no_partial_kpack(&kpack);
    }
    let state = fs::read_to_string(kpack.join(".rocm-kpack-fetch-state.json")).expect("state");
    let state: serde_json::Value = serde_json::from_str(&state).expect("json");
    let names: Vec<&String> = state["archives"].as_object().expect("map").keys().collect();
    assert_eq!(
        names,
        ["rocrand_gfx110X.kpack"],
        "the failed archive is not recorded"
    );
    let verify = ok(env.cmd(&["verify", "--prefix", &p, "--no-default-prefixes"]));
    assert!(verify.contains("0 problems"), "{verify}");
    if mounted.is_none() {
        eprintln!("note: mounting a tmpfs is not permitted here; used RLIMIT_FSIZE instead");
    }
    drop(mounted);
}
