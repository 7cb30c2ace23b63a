//! Hostile input to rocm-kpack-fetch, each class with several spellings
//! (`..`, absolute, percent-encoded, scheme-prefixed, NUL and newline,
//! over-long), against real HTTP servers on 127.0.0.1 and real prefixes:
//!
//! - manifest archive names and components never become URLs or paths;
//! - redirects follow the source policy (https, or loopback http with
//!   --allow-http; never file: or other schemes);
//! - a bad mirror's partial never blocks a good mirror;
//! - the state file's names are validated before anything is deleted, and
//!   only unchanged regular files the fetcher wrote are deleted;
//! - symlinks an unprivileged user (`nobody`) plants in a prefix are never
//!   followed, and a prefix others may write is refused unless
//!   --unsafe-permissions;
//! - a refused manifest fails the run (exit 1).
//!
//! Every case snapshots the filesystem around the run and asserts nothing
//! changed outside the places the command was told to use.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rocm_kpack_format::archive::{ArchiveWriter, CompressionScheme};
use rocm_kpack_format::msgpack::{self, Value};
use rocm_kpack_test_support::bins::{self, as_nobody};
use rocm_kpack_test_support::http::{Fault, Server};
use rocm_kpack_test_support::snapshot::{snapshot, Snapshot};
use sha2::{Digest, Sha256};

const STATE: &str = ".rocm-kpack-fetch-state.json";
const LOCK: &str = ".rocm-kpack-fetch.lock";

/// A real archive and its manifest facts.
struct Archive {
    name: String,
    bytes: Vec<u8>,
}

impl Archive {
    fn new(component: &str, unit: &str, seed: u8, size: usize) -> Archive {
        let mut w = ArchiveWriter::new(
            std::io::Cursor::new(Vec::new()),
            component,
            unit,
            CompressionScheme::None,
            0,
        )
        .expect("archive writer");
        let data: Vec<u8> = (0..size)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect();
        w.add_kernel("lib/libx.so#0", unit, data).expect("kernel");
        Archive {
            name: format!("{component}_{unit}.kpack"),
            bytes: w.finish().expect("finish").into_inner(),
        }
    }
    fn sha(&self) -> [u8; 32] {
        Sha256::digest(&self.bytes).into()
    }
    fn by_hash(&self) -> String {
        format!("/by-hash/sha256/{}", hex::encode(self.sha()))
    }
}

fn s(x: &str) -> Value {
    Value::String(x.into())
}

/// A v1 manifest written as raw msgpack, so any name can be in it.
fn write_manifest(kpack: &Path, file: &str, component: &str, entries: &[(&str, &Archive)]) {
    let entries: Vec<(&str, &Archive, &str)> =
        entries.iter().map(|(n, a)| (*n, *a, "gfx90a")).collect();
    write_manifest_for(kpack, file, component, &entries);
}

/// [`write_manifest`] with each archive's one architecture (also its
/// family).
fn write_manifest_for(
    kpack: &Path,
    file: &str,
    component: &str,
    entries: &[(&str, &Archive, &str)],
) {
    let files = entries
        .iter()
        .map(|(name, a, arch)| {
            Value::Map(vec![
                (s("filename"), s(name)),
                (s("family"), s(arch)),
                (s("architectures"), Value::Array(vec![s(arch)])),
                (s("size"), Value::from(a.bytes.len() as u64)),
                (s("sha256"), Value::Binary(a.sha().to_vec())),
            ])
        })
        .collect();
    let v = Value::Map(vec![
        (s("format_version"), Value::from(1)),
        (s("component"), s(component)),
        (s("kpack_files"), Value::Array(files)),
    ]);
    fs::create_dir_all(kpack).unwrap();
    fs::write(kpack.join(file), msgpack::encode(&v).unwrap()).unwrap();
}

/// A root with `/opt/rocm/.kpack`, a cache and a victim directory outside.
struct Env {
    _tmp: tempfile::TempDir,
    top: PathBuf,
    root: PathBuf,
    kpack: PathBuf,
    cache: PathBuf,
    victim: PathBuf,
}

impl Env {
    fn new() -> Env {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().to_path_buf();
        let root = top.join("root");
        let kpack = root.join("opt/rocm/.kpack");
        fs::create_dir_all(&kpack).unwrap();
        let victim = top.join("victim");
        fs::create_dir_all(&victim).unwrap();
        fs::write(victim.join("victim.kpack"), b"precious").unwrap();
        fs::write(victim.join("secret"), b"root only").unwrap();
        // Others may traverse (the attacker tests need it); nothing else.
        for d in [
            &top,
            &root,
            &root.join("opt"),
            &root.join("opt/rocm"),
            &kpack,
            &victim,
        ] {
            fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap();
        }
        Env {
            cache: top.join("cache"),
            _tmp: tmp,
            top,
            root,
            kpack,
            victim,
        }
    }

    fn fetch(&self, args: &[&str]) -> Command {
        let mut cmd = bins::command("rocm-kpack-fetch");
        cmd.args(args).args(["--root", self.root.to_str().unwrap()]);
        bins::isolate_fetcher(&mut cmd);
        cmd
    }

    fn install(&self, sources: &[String], extra: &[&str]) -> Command {
        let mut args = vec![
            "install",
            "--target",
            "gfx90a",
            "--allow-http",
            "--retry-base-ms",
            "10",
            "--cache-dir",
            self.cache.to_str().unwrap(),
        ];
        for src in sources {
            args.extend(["--source", src.as_str()]);
        }
        args.extend(extra);
        self.fetch(&args)
    }

    fn snap(&self) -> Snapshot {
        snapshot(&self.top)
    }

    /// Changes since `before` outside the cache and the `.kpack` directory.
    fn assert_confined(&self, before: &Snapshot, what: &str) {
        let diff = before.diff(&self.snap());
        let cache = self.cache.strip_prefix(&self.top).unwrap();
        let kpack = self.kpack.strip_prefix(&self.top).unwrap();
        let outside = diff.outside(&[cache, kpack]);
        assert!(
            outside.is_empty(),
            "{what}: changed outside the prefix and cache: {outside:?}\n{diff}"
        );
    }

    /// Names in the `.kpack` directory other than the fetcher's own files.
    fn kpack_files(&self) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(&self.kpack)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != STATE && n != LOCK)
            .collect();
        v.sort();
        v
    }
}

fn run(mut cmd: Command) -> (i32, String, String) {
    let out: Output = cmd.output().expect("run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn long_name() -> String {
    format!("{}_gfx90a.kpack", "a".repeat(300))
}

#[test]
fn hostile_manifest_names_never_become_urls_or_paths() {
    let long = long_name();
    let names: Vec<&str> = vec![
        "../escaped_gfx90a.kpack",
        "../../../victim/victim.kpack",
        "/tmp/abs_gfx90a.kpack",
        "%2e%2e%2fescaped.kpack",
        "..%2Fescaped.kpack",
        "http:127.0.0.1/x.kpack",
        "http:host",
        "file:%2F..%2Fvictim%2Fsecret.kpack",
        "//127.0.0.1/x.kpack",
        "x\n.kpack",
        "x\0.kpack",
        long.as_str(),
    ];
    let components = [
        "../x",
        "/etc",
        "%2e%2e",
        "http:x",
        "x\ny",
        "a".repeat(300).leak() as &str,
    ];
    let env = Env::new();
    let good = Archive::new("x", "gfx90a", 1, 20_000);
    let server = Server::start();
    // Whatever a hostile name could turn into, the server has bytes for it.
    server.add(&good.by_hash(), good.bytes.clone());
    let cases = names
        .iter()
        .map(|n| (*n, "x"))
        .chain(components.iter().map(|c| ("x_gfx90a.kpack", *c)));
    for (name, component) in cases {
        let _ = fs::remove_file(env.kpack.join("x.kpm"));
        write_manifest(&env.kpack, "x.kpm", component, &[(name, &good)]);
        let before = env.snap();
        let (code, stdout, stderr) = run(env.install(&[server.url()], &[]));
        let what = format!("name {name:?} component {component:?}");
        assert_eq!(
            code, 1,
            "{what}: a refused manifest fails the run\n{stdout}{stderr}"
        );
        assert!(
            stderr.contains("refusing manifest") && stderr.contains("unsafe"),
            "{what}: {stderr}"
        );
        assert!(
            stderr.contains("refused (see warnings)"),
            "{what}: {stderr}"
        );
        assert!(
            server.requests().is_empty(),
            "{what}: requested {:?}",
            server.requests()
        );
        env.assert_confined(&before, &what);
        assert_eq!(env.kpack_files(), ["x.kpm"], "{what}");
    }
    assert_eq!(
        fs::read(env.victim.join("victim.kpack")).unwrap(),
        b"precious"
    );
}

#[test]
fn redirects_follow_the_source_policy() {
    let env = Env::new();
    let good = Archive::new("x", "gfx90a", 2, 20_000);
    write_manifest(&env.kpack, "x.kpm", "x", &[(&good.name, &good)]);
    let server = Server::start();
    for location in [
        "file:///etc/passwd".to_string(),
        format!("file://{}", env.victim.join("secret").display()),
        "ftp://127.0.0.1/x".to_string(),
        "http://10.255.255.1/by-hash/x".to_string(),
        "gopher://127.0.0.1:70/x".to_string(),
    ] {
        server.clear_faults();
        server.set_fault(&good.by_hash(), Fault::Redirect(location.clone()));
        server.set_fault(
            &format!("/{}", good.name),
            Fault::Redirect(location.clone()),
        );
        let before = env.snap();
        let (code, _, stderr) = run(env.install(&[server.url()], &[]));
        assert_ne!(code, 0, "{location}: {stderr}");
        assert!(stderr.contains("refusing redirect"), "{location}: {stderr}");
        env.assert_confined(&before, &location);
        assert_eq!(env.kpack_files(), ["x.kpm"], "{location}");
    }
    // The same archive through an allowed (loopback) redirect installs.
    server.clear_faults();
    server.add("/elsewhere", good.bytes.clone());
    server.set_fault(
        &good.by_hash(),
        Fault::Redirect(format!("{}/elsewhere", server.url())),
    );
    let (code, _, stderr) = run(env.install(&[server.url()], &[]));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(fs::read(env.kpack.join(&good.name)).unwrap(), good.bytes);
}

#[test]
fn a_bad_mirror_never_blocks_a_good_one() {
    let env = Env::new();
    let good = Archive::new("x", "gfx90a", 3, 200_000);
    write_manifest(&env.kpack, "x.kpm", "x", &[(&good.name, &good)]);
    let half = good.bytes.len() / 2;
    let wrong: Vec<u8> = good.bytes.iter().map(|b| b ^ 0x5a).collect();
    for shape in [
        "drop-then-gone",
        "drop-then-5xx",
        "partial-from-an-earlier-run",
    ] {
        let _ = fs::remove_dir_all(&env.cache);
        let bad = Server::start();
        let good_mirror = Server::start();
        bad.add(&good.by_hash(), wrong.clone());
        good_mirror.add(&good.by_hash(), good.bytes.clone());
        let sources = match shape {
            "drop-then-gone" => {
                // Half the wrong bytes, then the bad mirror has nothing.
                bad.push_fault(&good.by_hash(), Fault::DropAfter(half));
                for _ in 0..8 {
                    bad.push_fault(&good.by_hash(), Fault::NotFound);
                }
                vec![bad.url(), good_mirror.url()]
            }
            "drop-then-5xx" => {
                bad.push_fault(&good.by_hash(), Fault::DropAfter(half));
                bad.set_fault(&good.by_hash(), Fault::Status(500, None));
                bad.set_fault(&format!("/{}", good.name), Fault::Status(500, None));
                vec![bad.url(), good_mirror.url()]
            }
            _ => {
                // An earlier run left half the bad mirror's bytes behind.
                let partial = env.cache.join("partial");
                fs::create_dir_all(&partial).unwrap();
                fs::write(
                    partial.join(format!("{}.part", hex::encode(good.sha()))),
                    &wrong[..half],
                )
                .unwrap();
                vec![good_mirror.url()]
            }
        };
        let before = env.snap();
        let (code, _, stderr) = run(env.install(&sources, &["--retries", "1"]));
        assert_eq!(code, 0, "{shape}: {stderr}");
        assert_eq!(
            fs::read(env.kpack.join(&good.name)).unwrap(),
            good.bytes,
            "{shape}"
        );
        assert!(
            stderr.contains("starting over from byte 0"),
            "{shape}: {stderr}"
        );
        // The good mirror was asked for the rest, then for everything.
        let asked: Vec<Option<String>> = good_mirror
            .requests_for(&good.by_hash())
            .into_iter()
            .map(|r| r.range)
            .collect();
        assert_eq!(
            asked.first().cloned().flatten(),
            Some(format!("bytes={half}-")),
            "{shape}: {asked:?}"
        );
        assert_eq!(asked.last().cloned().flatten(), None, "{shape}: {asked:?}");
        env.assert_confined(&before, shape);
        fs::remove_file(env.kpack.join(&good.name)).unwrap();
        fs::remove_file(env.kpack.join(STATE)).unwrap();
    }
}

/// Installs `a` from an offline directory (a real state record).
fn install_offline(env: &Env, a: &Archive) {
    let offline = env.top.join("offline");
    fs::create_dir_all(&offline).unwrap();
    fs::write(offline.join(&a.name), &a.bytes).unwrap();
    let (code, _, stderr) = run(offline_install(env));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(fs::read(env.kpack.join(&a.name)).unwrap(), a.bytes);
}

/// `install` from the offline directory of [`install_offline`].
fn offline_install(env: &Env) -> Command {
    let offline = env.top.join("offline");
    env.fetch(&[
        "install",
        "--target",
        "gfx90a",
        "--offline",
        offline.to_str().unwrap(),
        "--cache-dir",
        env.cache.to_str().unwrap(),
    ])
}

/// `remove` (of the component: a hostile key may not even be an argument)
/// and `gc`, both for real.
fn remove_and_gc(env: &Env) -> Vec<(i32, String, String)> {
    vec![
        run(env.fetch(&["remove", "x", "--yes"])),
        run(env.fetch(&["gc", "--yes", "--target", "gfx1100"])),
    ]
}

#[test]
fn hostile_state_entries_delete_nothing() {
    let env = Env::new();
    let a = Archive::new("x", "gfx90a", 4, 10_000);
    write_manifest(&env.kpack, "x.kpm", "x", &[(&a.name, &a)]);
    install_offline(&env, &a);
    let state_text = fs::read_to_string(env.kpack.join(STATE)).unwrap();
    let mut state: serde_json::Value = serde_json::from_str(&state_text).unwrap();
    let entry = state["archives"][&a.name].clone();
    // Records that point at the victim, with its true size and hash, so
    // only the name check stands between gc/remove and the victim.
    let victim = fs::read(env.victim.join("victim.kpack")).unwrap();
    let mut forged = entry.clone();
    forged["size"] = serde_json::json!(victim.len());
    forged["sha256"] = serde_json::json!(hex::encode(Sha256::digest(&victim)));
    forged["file"] = serde_json::Value::Null;
    let abs = env
        .victim
        .join("victim.kpack")
        .to_string_lossy()
        .into_owned();
    let long = long_name();
    for key in [
        "../../../victim/victim.kpack",
        abs.as_str(),
        "..%2F..%2F..%2Fvictim%2Fvictim.kpack",
        "file:victim.kpack",
        "x\n.kpack",
        "x\0.kpack",
        long.as_str(),
    ] {
        let mut hostile = state.clone();
        hostile["archives"][key] = forged.clone();
        fs::write(
            env.kpack.join(STATE),
            serde_json::to_vec_pretty(&hostile).unwrap(),
        )
        .unwrap();
        let before = env.snap();
        for (code, stdout, stderr) in remove_and_gc(&env) {
            let _ = code;
            assert!(
                stderr.contains("not a valid rocm-kpack-fetch state file")
                    && stderr.contains("archives["),
                "{key:?}: {stdout}{stderr}"
            );
        }
        let diff = before.diff(&env.snap());
        assert!(diff.is_empty(), "{key:?}: something changed:\n{diff}");
    }
    // A forged component or manifest name is refused the same way.
    for (field, value) in [
        ("component", "../x"),
        ("manifest", "../../x.kpm"),
        ("manifest", "/etc/x.kpm"),
    ] {
        let mut hostile = state.clone();
        hostile["archives"][&a.name][field] = serde_json::json!(value);
        fs::write(
            env.kpack.join(STATE),
            serde_json::to_vec_pretty(&hostile).unwrap(),
        )
        .unwrap();
        let before = env.snap();
        for (_, _, stderr) in remove_and_gc(&env) {
            assert!(stderr.contains(&format!(".{field}")), "{field}: {stderr}");
        }
        assert!(before.diff(&env.snap()).is_empty(), "{field}={value}");
    }
    state["archives"][&a.name] = entry;
    fs::write(
        env.kpack.join(STATE),
        serde_json::to_vec_pretty(&state).unwrap(),
    )
    .unwrap();
    assert_eq!(
        fs::read(env.victim.join("victim.kpack")).unwrap(),
        b"precious"
    );
}

#[test]
fn only_unchanged_regular_files_are_deleted() {
    let env = Env::new();
    let a = Archive::new("x", "gfx90a", 5, 10_000);
    write_manifest(&env.kpack, "x.kpm", "x", &[(&a.name, &a)]);
    let archive = env.kpack.join(&a.name);
    let victim = env.victim.join("victim.kpack");
    let cases: [(&str, &dyn Fn()); 3] = [
        ("changed content", &|| {
            let mut b = a.bytes.clone();
            b[100] ^= 1;
            fs::write(&archive, b).unwrap();
        }),
        ("changed size", &|| fs::write(&archive, b"short").unwrap()),
        ("replaced by a symlink", &|| {
            fs::write(&victim, &a.bytes).unwrap();
            fs::remove_file(&archive).unwrap();
            std::os::unix::fs::symlink(&victim, &archive).unwrap();
        }),
    ];
    for (what, tamper) in cases {
        let _ = fs::remove_file(&archive);
        install_offline(&env, &a);
        tamper();
        for (i, cmd) in [
            env.fetch(&["remove", "x", "--yes"]),
            env.fetch(&["gc", "--yes", "--target", "gfx1100"]),
        ]
        .into_iter()
        .enumerate()
        {
            let before = env.snap();
            let (code, stdout, stderr) = run(cmd);
            assert_ne!(code, 0, "{what} [{i}]: {stdout}{stderr}");
            assert!(stderr.contains("not removing"), "{what} [{i}]: {stderr}");
            let diff = before.diff(&env.snap());
            // Only the state may be rewritten; the tampered file stays.
            let kpack = env.kpack.strip_prefix(&env.top).unwrap();
            assert!(
                diff.outside(&[&kpack.join(STATE), &kpack.join(LOCK)])
                    .is_empty(),
                "{what} [{i}]:\n{diff}"
            );
        }
        assert!(fs::symlink_metadata(&archive).is_ok(), "{what}");
    }
    assert_eq!(
        fs::read(&victim).unwrap(),
        a.bytes,
        "the symlink's target is untouched"
    );
}

#[test]
fn symlinks_planted_by_an_unprivileged_user_are_never_followed() {
    let env = Env::new();
    let a = Archive::new("x", "gfx90a", 6, 10_000);
    write_manifest(&env.kpack, "x.kpm", "x", &[(&a.name, &a)]);
    let offline = env.top.join("offline");
    fs::create_dir_all(&offline).unwrap();
    fs::write(offline.join(&a.name), &a.bytes).unwrap();
    fs::set_permissions(&offline, fs::Permissions::from_mode(0o755)).unwrap();
    let install = |extra: &[&str]| {
        let mut args = vec![
            "install",
            "--target",
            "gfx90a",
            "--offline",
            offline.to_str().unwrap(),
            "--cache-dir",
            env.cache.to_str().unwrap(),
        ];
        args.extend(extra);
        env.fetch(&args)
    };
    // The prefix's .kpack is writable by everyone (a careless chmod).
    fs::set_permissions(&env.kpack, fs::Permissions::from_mode(0o1777)).unwrap();
    let created = env.victim.join("created-by-root");
    let k = env.kpack.display().to_string();
    let plants = [
        // The lock: root would create (and keep open) a file anywhere.
        format!("ln -s {} {k}/{LOCK}", created.display()),
        // The state: root would read, rename and rewrite elsewhere.
        format!("ln -s {} {k}/{STATE}", env.victim.join("secret").display()),
        // The archive name itself: root would write through it.
        format!(
            "ln -s {} {k}/{}",
            env.victim.join("victim.kpack").display(),
            a.name
        ),
    ];
    for plant in &plants {
        as_nobody(plant);
        for (label, extra) in [
            ("default", &[][..]),
            ("--unsafe-permissions", &["--unsafe-permissions"][..]),
        ] {
            let before = env.snap();
            let (code, stdout, stderr) = run(install(extra));
            let what = format!("{plant} [{label}]");
            let diff = before.diff(&env.snap());
            let victim = env.victim.strip_prefix(&env.top).unwrap();
            assert!(
                !diff.paths().any(|p| p.starts_with(victim)),
                "{what}: victim touched:\n{diff}"
            );
            assert!(!created.exists(), "{what}");
            assert_eq!(
                fs::read(env.victim.join("victim.kpack")).unwrap(),
                b"precious",
                "{what}"
            );
            if label == "default" {
                assert_ne!(code, 0, "{what}: {stdout}{stderr}");
                assert!(stderr.contains("other users may write"), "{what}: {stderr}");
                assert!(
                    diff.is_empty(),
                    "{what}: a refused prefix is not touched:\n{diff}"
                );
            } else if plant.contains(LOCK) || plant.contains(STATE) {
                assert_ne!(code, 0, "{what}: {stdout}{stderr}");
                assert!(stderr.contains("symlink"), "{what}: {stderr}");
            } else {
                // The archive symlink is replaced by the verified file (a
                // rename never follows it).
                assert_eq!(code, 0, "{what}: {stderr}");
                assert_eq!(
                    fs::read(env.kpack.join(&a.name)).unwrap(),
                    a.bytes,
                    "{what}"
                );
                assert!(
                    fs::symlink_metadata(env.kpack.join(&a.name))
                        .unwrap()
                        .is_file(),
                    "{what}"
                );
            }
            for sub in [
                &["remove", "x", "--yes"][..],
                &["gc", "--yes", "--target", "gfx1100"][..],
            ] {
                let mut args = sub.to_vec();
                args.extend(extra);
                let before = env.snap();
                let (_, _, stderr) = run(env.fetch(&args));
                let diff = before.diff(&env.snap());
                assert!(
                    !diff.paths().any(|p| p.starts_with(victim)),
                    "{what} {sub:?}: {stderr}\n{diff}"
                );
                assert!(!created.exists(), "{what} {sub:?}");
            }
        }
        // Clean up as root for the next plant.
        for name in [LOCK, STATE, a.name.as_str()] {
            let _ = fs::remove_file(env.kpack.join(name));
        }
    }

    // nobody owns the prefix: swaps .kpack for a symlink to the victim.
    fs::set_permissions(&env.kpack, fs::Permissions::from_mode(0o755)).unwrap();
    let prefix = env.kpack.parent().unwrap().to_path_buf();
    Command::new("chown")
        .arg("nobody")
        .arg(&prefix)
        .status()
        .unwrap();
    as_nobody(&format!(
        "mv {k} {k}.real && ln -s {} {k}",
        env.victim.display()
    ));
    fs::write(
        env.victim.join("x.kpm"),
        fs::read(prefix.join(".kpack.real/x.kpm")).unwrap(),
    )
    .unwrap();
    let before = env.snap();
    let (code, _, stderr) = run(install(&[]));
    assert_ne!(code, 0, "{stderr}");
    assert!(
        stderr.contains("not a .kpack directory") || stderr.contains("owned by uid"),
        "{stderr}"
    );
    let diff = before.diff(&env.snap());
    assert!(diff.is_empty(), "swapped .kpack:\n{diff}");
}

// ---------------------------------------------------------------------------
// A local user or a slow store must not stall, steer or bloat the fetcher:
// locks, the trigger's clean-up, special and oversized files, slow mirrors,
// rpm's file list, exit codes (docs/formats.md "Input size limits",
// docs/runtime.md for the bounds).

use std::io::{BufRead, BufReader, Write as _};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// The trigger waits this long for a lock (fetcher `trigger::LOCK_WAIT`).
const TRIGGER_LOCK_WAIT: Duration = Duration::from_secs(5);

/// A process holding `flock(LOCK_EX)` on `path` until killed, started as
/// `nobody` (the attacker) or as root (another rocm-kpack-fetch).
struct Holder(Child);

impl Holder {
    fn start(path: &Path, as_nobody: bool) -> Holder {
        let script = "import fcntl, sys, time\n\
                      f = open(sys.argv[1], 'rb')\n\
                      fcntl.flock(f, fcntl.LOCK_EX)\n\
                      print('held', flush=True)\n\
                      time.sleep(600)\n";
        let mut cmd = if as_nobody {
            let mut c = Command::new("setpriv");
            c.args([
                "--reuid=nobody",
                "--regid=nogroup",
                "--clear-groups",
                "--",
                "/usr/bin/python3",
                "-c",
                script,
            ]);
            c
        } else {
            let mut c = Command::new("/usr/bin/python3");
            c.args(["-c", script]);
            c
        };
        let mut child = cmd
            .arg(path)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(
            line.trim(),
            "held",
            "the holder could not lock {}",
            path.display()
        );
        Holder(child)
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `cmd` (stdin from `input`), failing the test if it is still running
/// after `bound`: nothing another user controls may stall a root command.
fn run_bounded(mut cmd: Command, input: &[u8], bound: Duration) -> (i32, String, String, Duration) {
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > bound {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{cmd:?} still running after {bound:?}\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = writer.join();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        started.elapsed(),
    )
}

/// Generous: the machine is shared; the point is "not forever".
const BOUND: Duration = Duration::from_secs(120);

/// An installed archive whose package was then removed (the manifest is
/// gone): what `trigger --removed` and `gc` clean up.
fn orphaned_install(env: &Env, a: &Archive) {
    write_manifest(&env.kpack, "x.kpm", "x", &[(&a.name, a)]);
    install_offline(env, a);
    fs::remove_file(env.kpack.join("x.kpm")).unwrap();
}

#[test]
fn a_lock_held_by_another_user_stalls_nothing() {
    let env = Env::new();
    let a = Archive::new("x", "gfx90a", 7, 10_000);
    let manifest = env.kpack.join("x.kpm");
    let lock = env.kpack.join(LOCK);
    let commands: Vec<(&str, Vec<String>, Vec<u8>)> = vec![
        (
            "trigger (dpkg)",
            vec![
                "trigger".into(),
                "--removed".into(),
                env.kpack.display().to_string(),
            ],
            vec![],
        ),
        (
            "trigger (rpm)",
            vec!["trigger".into(), "--removed".into(), "--stdin".into()],
            format!("{}\n", manifest.display()).into_bytes(),
        ),
        (
            "gc",
            vec![
                "gc".into(),
                "--yes".into(),
                "--target".into(),
                "gfx90a".into(),
            ],
            vec![],
        ),
        (
            "remove",
            vec!["remove".into(), "x".into(), "--yes".into()],
            vec![],
        ),
    ];
    for (what, args, input) in commands {
        if what == "remove" {
            // remove names an installed component: keep its manifest.
            write_manifest(&env.kpack, "x.kpm", "x", &[(&a.name, &a)]);
            install_offline(&env, &a);
        } else {
            orphaned_install(&env, &a);
        }
        // An older rocm-kpack-fetch created the lock 0644: nobody can open it.
        fs::set_permissions(&lock, fs::Permissions::from_mode(0o644)).unwrap();
        let holder = Holder::start(&lock, true);
        let before = env.snap();
        let mut cmd = bins::command("rocm-kpack-fetch");
        cmd.args(&args);
        if !what.starts_with("trigger") {
            cmd.args(["--root", env.root.to_str().unwrap()]);
        }
        bins::isolate_fetcher(&mut cmd);
        let (code, stdout, stderr, _) = run_bounded(cmd, &input, BOUND);
        assert_eq!(code, 0, "{what}: {stdout}{stderr}");
        assert!(
            !env.kpack.join(&a.name).exists(),
            "{what}: the archive is removed\n{stdout}{stderr}"
        );
        env.assert_confined(&before, what);
        let meta = fs::metadata(&lock);
        if let Ok(m) = meta {
            use std::os::unix::fs::MetadataExt;
            assert_eq!(
                (m.mode() & 0o777, m.uid()),
                (0o600, 0),
                "{what}: the lock is root's and 0600 now"
            );
        }
        drop(holder);
        let _ = fs::remove_file(env.kpack.join(STATE));
    }
    // install too: the hostile holder is not waited for.
    write_manifest(&env.kpack, "x.kpm", "x", &[(&a.name, &a)]);
    fs::write(&lock, b"").unwrap();
    fs::set_permissions(&lock, fs::Permissions::from_mode(0o644)).unwrap();
    let _holder = Holder::start(&lock, true);
    let (code, _, stderr, _) = run_bounded(offline_install(&env), b"", BOUND);
    assert_eq!(code, 0, "install: {stderr}");
    assert_eq!(fs::read(env.kpack.join(&a.name)).unwrap(), a.bytes);
}

#[test]
fn a_busy_lock_is_waited_for_within_bounds() {
    let env = Env::new();
    let a = Archive::new("x", "gfx90a", 8, 10_000);
    orphaned_install(&env, &a);
    // Another root rocm-kpack-fetch (same user) holds the lock: waited for,
    // within the bound, then the trigger leaves the work for later.
    let holder = Holder::start(&env.kpack.join(LOCK), false);
    let before = env.snap();
    let mut cmd = bins::command("rocm-kpack-fetch");
    cmd.args(["trigger", "--removed", env.kpack.to_str().unwrap()]);
    bins::isolate_fetcher(&mut cmd);
    let (code, stdout, stderr, took) = run_bounded(cmd, b"", BOUND);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(stdout.lines().count(), 1, "one line: {stdout}");
    assert!(
        stdout.contains("install --auto") && stdout.contains(&format!("pid {}", holder.pid())),
        "{stdout}"
    );
    assert!(
        took >= TRIGGER_LOCK_WAIT,
        "it did wait the documented {TRIGGER_LOCK_WAIT:?}: {took:?}"
    );
    assert!(env.kpack.join(&a.name).exists());
    assert!(
        before.diff(&env.snap()).is_empty(),
        "nothing changed while another run held the lock"
    );
    // Interactive commands say who holds it and give up after --wait.
    let (code, _, stderr, _) = run_bounded(
        env.fetch(&["gc", "--yes", "--target", "gfx90a", "--wait", "1"]),
        b"",
        BOUND,
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!("pid {}", holder.pid())) && stderr.contains("--wait"),
        "{stderr}"
    );
    drop(holder);
    let (code, _, stderr, _) = run_bounded(
        env.fetch(&["gc", "--yes", "--target", "gfx90a", "--wait", "1"]),
        b"",
        BOUND,
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(!env.kpack.join(&a.name).exists());
}

#[test]
fn the_trigger_never_follows_a_symlinked_kpack_directory() {
    let env = Env::new();
    let app = env.root.join("opt/app");
    fs::create_dir_all(&app).unwrap();
    Command::new("chown")
        .arg("nobody")
        .arg(&app)
        .status()
        .unwrap();
    // Root-owned directories the attacker points at: an empty one, and a
    // `.kpack` holding only an empty state (what the tidy-up removes).
    let empty = env.top.join("rootdir/empty");
    let other = env.top.join("rootdir/other/.kpack");
    fs::create_dir_all(&empty).unwrap();
    fs::create_dir_all(&other).unwrap();
    fs::write(
        other.join(STATE),
        b"{\"format_version\": 1, \"archives\": {}}\n",
    )
    .unwrap();
    for d in [
        env.top.join("rootdir"),
        env.top.join("rootdir/other"),
        empty.clone(),
        other.clone(),
    ] {
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
    }
    for target in [&empty, &other] {
        as_nobody(&format!(
            "rm -f {0}/.kpack; ln -s {1} {0}/.kpack",
            app.display(),
            target.display()
        ));
        let link = app.join(".kpack");
        for (args, input) in [
            (
                vec![
                    "trigger".to_string(),
                    "--removed".into(),
                    app.display().to_string(),
                ],
                Vec::new(),
            ),
            (
                vec![
                    "trigger".to_string(),
                    "--removed".into(),
                    link.display().to_string(),
                ],
                Vec::new(),
            ),
            (
                vec!["trigger".to_string(), "--removed".into(), "--stdin".into()],
                format!("{}/x.kpm\n", link.display()).into_bytes(),
            ),
        ] {
            let before = env.snap();
            let mut cmd = bins::command("rocm-kpack-fetch");
            cmd.args(&args);
            bins::isolate_fetcher(&mut cmd);
            let (code, stdout, stderr, _) = run_bounded(cmd, &input, BOUND);
            assert_eq!(code, 0, "{args:?}: {stdout}{stderr}");
            let diff = before.diff(&env.snap());
            assert!(diff.is_empty(), "{target:?} {args:?}: changed:\n{diff}");
        }
    }
}

#[test]
fn fifos_and_sparse_files_stall_and_bloat_nothing() {
    let env = Env::new();
    let a = Archive::new("x", "gfx90a", 9, 10_000);
    write_manifest(&env.kpack, "x.kpm", "x", &[(&a.name, &a)]);
    install_offline(&env, &a);
    let state = env.kpack.join(STATE);
    let offline = env.top.join("offline");
    // The attacker may write the .kpack directory (a careless chmod);
    // the commands run with --unsafe-permissions where they take it.
    fs::set_permissions(&env.kpack, fs::Permissions::from_mode(0o1777)).unwrap();
    let commands = |extra: &[&str]| -> Vec<Command> {
        let with = |args: &[&str]| {
            let mut v = args.to_vec();
            v.extend(extra);
            env.fetch(&v)
        };
        let mut trigger = bins::command("rocm-kpack-fetch");
        trigger.args(["trigger", "--removed", env.kpack.to_str().unwrap()]);
        bins::isolate_fetcher(&mut trigger);
        vec![
            trigger,
            with(&["gc", "--target", "gfx90a", "--unsafe-permissions"]),
            with(&["list"]),
            with(&["status", "--target", "gfx90a"]),
            with(&["verify"]),
            with(&[
                "install",
                "--target",
                "gfx90a",
                "--unsafe-permissions",
                "--offline",
                offline.to_str().unwrap(),
                "--cache-dir",
                env.cache.to_str().unwrap(),
            ]),
        ]
    };
    fs::remove_file(&state).unwrap();
    as_nobody(&format!("mkfifo {}", state.display()));
    for cmd in commands(&[]) {
        let what = format!("{:?}", cmd.get_args().next());
        let before = env.snap();
        let (_, stdout, stderr, _) = run_bounded(cmd, b"", BOUND);
        use std::os::unix::fs::FileTypeExt;
        assert!(
            fs::symlink_metadata(&state).unwrap().file_type().is_fifo(),
            "{what}: the FIFO stays"
        );
        assert!(
            stdout.contains("FIFO") || stderr.contains("FIFO") || what.contains("trigger"),
            "{what}: the FIFO is named: {stdout}{stderr}"
        );
        env.assert_confined(&before, &what);
    }
    fs::remove_file(&state).unwrap();
    // A 3 GiB state file and a 2 GiB manifest that use no disk.
    as_nobody(&format!("truncate -s 3G {}", state.display()));
    let kpm = env.kpack.join("big.kpm");
    as_nobody(&format!("truncate -s 2G {}", kpm.display()));
    for cmd in commands(&[]) {
        let what = format!("{:?}", cmd.get_args().next());
        let before = env.snap_light();
        let (_, stdout, stderr, _) = run_bounded(cmd, b"", BOUND);
        assert!(
            stdout.contains("limit") || stderr.contains("limit") || what.contains("trigger"),
            "{what}: the size limit is named: {stdout}{stderr}"
        );
        assert_eq!(before, env.snap_light(), "{what}");
    }
    fs::set_permissions(&env.kpack, fs::Permissions::from_mode(0o755)).unwrap();
}

impl Env {
    /// Names and sizes only (hashing a 3 GiB hole would read it).
    fn snap_light(&self) -> Vec<(PathBuf, u64)> {
        let mut v: Vec<(PathBuf, u64)> = Vec::new();
        let mut stack = vec![self.top.clone()];
        while let Some(d) = stack.pop() {
            if d == self.cache {
                continue;
            }
            for e in fs::read_dir(&d).unwrap() {
                let e = e.unwrap();
                let m = fs::symlink_metadata(e.path()).unwrap();
                if m.is_dir() {
                    stack.push(e.path());
                }
                v.push((e.path(), m.len()));
            }
        }
        v.sort();
        v
    }
}

#[test]
fn a_slow_drip_store_is_abandoned_for_the_good_mirror() {
    let env = Env::new();
    let good = Archive::new("x", "gfx90a", 10, 50_000);
    write_manifest(&env.kpack, "x.kpm", "x", &[(&good.name, &good)]);
    let slow = Server::start();
    let mirror = Server::start();
    slow.add(&good.by_hash(), good.bytes.clone());
    slow.set_fault(&good.by_hash(), Fault::Drip(Duration::from_secs(2)));
    mirror.add(&good.by_hash(), good.bytes.clone());
    // Floor 1000 B/s over 3 s: the drip's 1 byte per 2 s gives up after
    // one window (documented bound: --speed-time, plus connecting).
    let before = env.snap();
    let (code, _, stderr, took) = run_bounded(
        env.install(
            &[slow.url(), mirror.url()],
            &[
                "--speed-limit",
                "1000",
                "--speed-time",
                "3",
                "--retries",
                "0",
            ],
        ),
        b"",
        BOUND,
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("too slow"), "{stderr}");
    assert_eq!(fs::read(env.kpack.join(&good.name)).unwrap(), good.bytes);
    let asked: Vec<Option<String>> = mirror
        .requests_for(&good.by_hash())
        .into_iter()
        .map(|r| r.range)
        .collect();
    assert_eq!(asked, vec![None], "the good mirror is asked from byte 0");
    assert!(
        took < Duration::from_secs(60),
        "gave up on the drip within its window: {took:?}"
    );
    eprintln!("slow drip: whole install took {took:?} (window 3 s)");
    env.assert_confined(&before, "slow drip");
}

#[test]
fn rpm_file_lists_are_read_path_by_path() {
    let env = Env::new();
    let a = Archive::new("x", "gfx90a", 11, 10_000);
    orphaned_install(&env, &a);
    let mut input = b"/usr/lib/\xff\xfe/.kpack/other.kpm\n".to_vec();
    input.extend_from_slice(format!("{}/x.kpm\n", env.kpack.display()).as_bytes());
    input.extend_from_slice(b"/opt/\x80/lib.so\n");
    let mut cmd = bins::command("rocm-kpack-fetch");
    cmd.args(["trigger", "--removed", "--stdin"]);
    bins::isolate_fetcher(&mut cmd);
    let before = env.snap();
    let (code, stdout, stderr, _) = run_bounded(cmd, &input, BOUND);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        !env.kpack.join(&a.name).exists(),
        "the orphan is removed: {stdout}{stderr}"
    );
    assert!(stdout.contains("removed 1 archive"), "{stdout}");
    env.assert_confined(&before, "rpm stdin");
}

#[test]
fn the_trigger_exits_0_on_every_input() {
    for args in [
        &["trigger", "--", ""][..],
        &["trigger", "--bogus"],
        &["trigger", "--timeout", "x"],
        &["-v", "trigger", "--no-such-flag"],
    ] {
        let mut cmd = bins::command("rocm-kpack-fetch");
        cmd.args(args).env("ROCM_KPACK_FETCH_SKIP", "1");
        bins::isolate_fetcher(&mut cmd);
        let (code, stdout, stderr, _) = run_bounded(cmd, b"", BOUND);
        assert_eq!(code, 0, "{args:?}: {stdout}{stderr}");
        assert_eq!(stdout.lines().count(), 1, "{args:?}: one line: {stdout}");
    }
    // Not the trigger: usage errors stay exit 2.
    let mut gc = bins::command("rocm-kpack-fetch");
    gc.args(["gc", "--bogus"]);
    assert_eq!(run(gc).0, 2);
}

#[test]
fn inspect_refuses_a_fifo() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("x.kpack");
    let status = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success());
    let mut cmd = bins::command("rocm-kpack");
    cmd.arg("inspect").arg(&fifo);
    let (code, _, stderr, _) = run_bounded(cmd, b"", BOUND);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("FIFO"), "{stderr}");
}

/// The retired `pip-index-url` reads none of its arguments: whatever they
/// are (a hostile base, credentials, `--help`), it says first that it is
/// retired, exits 2, prints nothing on stdout and echoes nothing given.
#[test]
fn pip_index_url_is_retired_whatever_its_arguments() {
    for args in [
        &["--base", ""][..],
        &["--base", "javascript:alert(1)"],
        &["--base", "https://h.example/x\ny"],
        &[
            "--base",
            "http://user:hunter2@127.0.0.1:9/idx",
            "--allow-http",
        ],
        &["--target", "gfx9999", "--help"],
        &[],
    ] {
        let mut cmd = bins::command("rocm-kpack-fetch");
        cmd.arg("pip-index-url").args(args);
        bins::isolate_fetcher(&mut cmd);
        let (code, stdout, stderr) = run(cmd);
        assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
        assert!(stdout.is_empty(), "{args:?}: nothing printed: {stdout}");
        assert!(
            stderr.starts_with("rocm-kpack-fetch: error: pip-index-url is retired: ")
                && stderr.contains("'PACKAGE[device-<target>]'"),
            "{args:?}: {stderr}"
        );
        assert!(
            !stderr.contains("hunter2") && !stderr.contains("gfx9999"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn a_skipped_configured_source_is_named() {
    let env = Env::new();
    let a = Archive::new("x", "gfx90a", 12, 10_000);
    write_manifest(&env.kpack, "x.kpm", "x", &[(&a.name, &a)]);
    let sources_d = env.root.join("etc/rocm-kpack/sources.d");
    fs::create_dir_all(&sources_d).unwrap();
    let file = sources_d.join("50-rocm-kpack-publish.toml");
    fs::write(
        &file,
        "[[source]]\nurl = \"http://user:hunter2@127.0.0.1:9/store/\"\n",
    )
    .unwrap();
    let (code, _, stderr) = run(env.fetch(&[
        "install",
        "--target",
        "gfx90a",
        "--cache-dir",
        env.cache.to_str().unwrap(),
    ]));
    assert_eq!(code, 1, "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.contains("no source serves"), "{stderr}");
    assert!(
        last.contains(&file.display().to_string()),
        "names the file: {last}"
    );
    assert!(
        last.contains("****@127.0.0.1:9") && !stderr.contains("hunter2"),
        "masked URL: {last}"
    );
    assert!(last.contains("--allow-http"), "says why: {last}");
    // `status` and `doctor` say so too, in the same words.
    for args in [
        &["status", "--target", "gfx90a"][..],
        &["doctor", "--target", "gfx90a"],
    ] {
        let (_, stdout, stderr) = run(env.fetch(args));
        let both = format!("{stdout}{stderr}");
        let line = both
            .lines()
            .find(|l| l.contains("configured but skipped"))
            .unwrap_or_else(|| panic!("{args:?}: no skipped source named: {both}"));
        assert!(
            line.contains(&file.display().to_string())
                && line.contains("****@127.0.0.1:9")
                && line.contains("--allow-http"),
            "{args:?}: {line}"
        );
        assert!(!both.contains("hunter2"), "{args:?}: {both}");
    }
}

#[test]
fn publishing_an_http_store_warns_even_when_quiet() {
    let dir = tempfile::tempdir().unwrap();
    let pkgs = dir.path().join("pkgs");
    fs::create_dir_all(&pkgs).unwrap();
    let mut cmd = bins::command("rocm-kpack");
    cmd.args(["-q", "publish"])
        .arg(&pkgs)
        .arg("--out")
        .arg(dir.path().join("out"));
    cmd.args([
        "--kpack-store",
        "--store-url",
        "http://user:hunter2@127.0.0.1:9/store/",
    ]);
    cmd.arg("--fetcher-bin").arg(bins::bin("rocm-kpack-fetch"));
    let (_, _, stderr) = run(cmd);
    assert!(
        stderr.contains("warning: --store-url") && stderr.contains("--allow-http"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

/// Root runs the fetcher from any directory, one another user may own:
/// no command starts a Python that imports modules from there (the
/// site-packages query, the distribution listing of `--via pip`), and the
/// isolated interpreter still names a venv's site-packages.
#[test]
fn python_never_imports_from_the_working_directory() {
    use rocm_kpack_test_support::{site_packages, HostilePythonDir};
    let env = Env::new();
    let a = Archive::new("x", "gfx90a", 13, 1_000);
    write_manifest(&env.kpack, "x.kpm", "x", &[(&a.name, &a)]);
    let hostile = HostilePythonDir::plant(&env.top.join("hostile"));
    // A venv whose site-packages (as seen below --root) holds a manifest.
    let venv = env.top.join("venv");
    let status = Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .expect("python3 -m venv");
    assert!(status.success());
    let site = site_packages(&venv);
    let below_root = env.root.join(site.strip_prefix("/").unwrap());
    write_manifest(
        &below_root.join("venvpkg/.kpack"),
        "y.kpm",
        "y",
        &[(&a.name, &a)],
    );
    let offline = env.top.join("offline");
    fs::create_dir_all(&offline).unwrap();
    let python = venv.join("bin/python");
    for args in [
        &["status", "--target", "gfx90a"][..],
        &["list", "--json"],
        &["verify"],
        &["gc", "--target", "gfx90a"],
        &["doctor", "--target", "gfx90a"],
        &[
            "install",
            "--dry-run",
            "--target",
            "gfx90a",
            "--offline",
            offline.to_str().unwrap(),
        ],
        &["install", "--dry-run", "--target", "gfx90a", "--via", "pip"],
    ] {
        let mut cmd = env.fetch(args);
        cmd.env("ROCM_KPACK_PYTHON", &python)
            .current_dir(&hostile.dir);
        let (_, stdout, stderr, _) = run_bounded(cmd, b"", BOUND);
        assert_eq!(
            hostile.ran(),
            Vec::<String>::new(),
            "{args:?}: code from the working directory ran\n{stdout}{stderr}"
        );
        if args[0] == "list" {
            let list: serde_json::Value = serde_json::from_str(&stdout).expect("list --json");
            assert!(
                list.to_string().contains("venvpkg"),
                "the venv's site-packages is scanned: {stdout}"
            );
        }
    }
}

/// A database file for [`write_manifest_with_database`]: its installed
/// path below the prefix, size and sha256.
struct Database {
    path: &'static str,
    size: u64,
    sha256: [u8; 32],
}

/// A v2 manifest: `archives` plus one database file, for gfx90a.
fn write_manifest_with_database(
    kpack: &Path,
    component: &str,
    archives: &[&Archive],
    db: &Database,
) {
    use rocm_kpack_format::manifest::{DatabaseFile, Manifest, ManifestFile};
    let m = Manifest {
        component: component.into(),
        prefix_path: None,
        kpack_files: archives
            .iter()
            .map(|a| ManifestFile {
                filename: a.name.clone(),
                family: "gfx90a".into(),
                architectures: vec!["gfx90a".into()],
                size: a.bytes.len() as u64,
                sha256: Some(a.sha()),
                transport: None,
            })
            .collect(),
        database_files: vec![DatabaseFile {
            path: db.path.into(),
            family: "gfx90a".into(),
            architectures: vec!["gfx90a".into()],
            size: db.size,
            sha256: db.sha256,
        }],
    };
    fs::create_dir_all(kpack).unwrap();
    fs::write(
        kpack.join(format!("{component}.kpm")),
        m.to_msgpack().unwrap(),
    )
    .unwrap();
}

/// Bytes the cache directory takes on disk, and its partial files.
fn cache_usage(cache: &Path) -> (u64, Vec<PathBuf>) {
    use std::os::unix::fs::MetadataExt;
    let mut bytes = 0;
    let mut partials = Vec::new();
    let mut stack = vec![cache.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let e = e.unwrap();
            let m = fs::symlink_metadata(e.path()).unwrap();
            bytes += m.blocks() * 512;
            if m.is_dir() {
                stack.push(e.path());
            } else if e.path().extension().is_some_and(|x| x == "part") {
                partials.push(e.path());
            }
        }
    }
    (bytes, partials)
}

/// A FIFO where a local store (`--offline DIR`, a `file://` or directory
/// `--source`) has an archive or a database object fails that file, named,
/// at once; the other component's archive still installs.
#[test]
fn a_fifo_in_a_local_store_fails_that_file_without_stalling() {
    let env = Env::new();
    let stuck = Archive::new("x", "gfx90a", 14, 5_000);
    let fine = Archive::new("y", "gfx90a", 15, 5_000);
    let db = Database {
        path: "lib/rocblas/library/TensileLibrary_gfx90a.co",
        size: 100,
        sha256: [7; 32],
    };
    write_manifest_with_database(&env.kpack, "x", &[&stuck], &db);
    write_manifest(&env.kpack, "y.kpm", "y", &[(&fine.name, &fine)]);
    let store = env.top.join("store");
    let by_hash = store.join("by-hash/sha256");
    fs::create_dir_all(&by_hash).unwrap();
    fs::write(store.join(&fine.name), &fine.bytes).unwrap();
    let db_object = store.join(rocm_kpack_format::layout::store::database_object_path(
        &db.sha256,
    ));
    for fifo in [store.join(&stuck.name), db_object] {
        assert!(Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
    }
    let store_url = format!("file://{}/", store.display());
    for how in [
        vec!["--offline", store.to_str().unwrap()],
        vec!["--source", store_url.as_str()],
        vec!["--source", store.to_str().unwrap()],
    ] {
        let mut args = vec![
            "install",
            "--target",
            "gfx90a",
            "--retries",
            "0",
            "--cache-dir",
            env.cache.to_str().unwrap(),
        ];
        args.extend(&how);
        let (code, stdout, stderr, took) = run_bounded(env.fetch(&args), b"", BOUND);
        assert_eq!(code, 1, "{how:?}: {stdout}{stderr}");
        assert!(
            took < Duration::from_secs(60),
            "{how:?}: took {took:?}\n{stderr}"
        );
        assert!(
            stderr.contains("not a regular file (a FIFO)"),
            "{how:?}: the FIFO is named: {stderr}"
        );
        assert_eq!(
            fs::read(env.kpack.join(&fine.name)).unwrap(),
            fine.bytes,
            "{how:?}: the other archive installs"
        );
        assert!(!env.kpack.join(&stuck.name).exists(), "{how:?}");
        assert!(!env.root.join("opt/rocm").join(db.path).exists(), "{how:?}");
        fs::remove_file(env.kpack.join(&fine.name)).unwrap();
        let _ = fs::remove_file(env.kpack.join(STATE));
    }
}

/// A hostile manifest and store: a database object of a few KiB that
/// decodes to far more, or to less, than the manifest's size. Decoding
/// stops at the size; the run fails naming why; no partial is kept (an
/// encoded download never resumes) and the cache stays small.
#[test]
fn a_zstd_bomb_leaves_nothing_in_the_cache() {
    use std::io::Read as _;
    const SIZE: u64 = 32 << 20;
    let env = Env::new();
    for (shape, decoded, says) in [
        ("decodes short", SIZE / 2, "decodes to"),
        ("decodes long", SIZE * 8, "more data than the manifest's"),
    ] {
        let _ = fs::remove_dir_all(&env.cache);
        let object = zstd::encode_all(std::io::repeat(0).take(decoded), 3).unwrap();
        assert!(object.len() < 1 << 20, "{shape}: {} bytes", object.len());
        let db = Database {
            path: "lib/rocblas/library/TensileLibrary_gfx90a.co",
            size: SIZE,
            sha256: [9; 32],
        };
        let a = Archive::new("x", "gfx90a", 16, 1_000);
        write_manifest_with_database(&env.kpack, "x", &[&a], &db);
        let server = Server::start();
        server.add(&a.by_hash(), a.bytes.clone());
        server.add(
            &format!(
                "/{}",
                rocm_kpack_format::layout::store::database_object_path(&db.sha256)
            ),
            object,
        );
        let before = env.snap();
        let (code, stdout, stderr, _) = run_bounded(
            env.install(&[server.url()], &["--retries", "1"]),
            b"",
            BOUND,
        );
        assert_eq!(code, 1, "{shape}: {stdout}{stderr}");
        assert!(stderr.contains(says), "{shape}: {stderr}");
        let (bytes, partials) = cache_usage(&env.cache);
        assert_eq!(partials, Vec::<PathBuf>::new(), "{shape}: no partial kept");
        assert!(bytes < 1 << 20, "{shape}: the cache holds {bytes} bytes");
        assert!(!env.root.join("opt/rocm").join(db.path).exists(), "{shape}");
        env.assert_confined(&before, shape);
        let _ = fs::remove_file(env.kpack.join(&a.name));
        let _ = fs::remove_file(env.kpack.join(STATE));
    }
}

/// `prune` removes the archives the fetcher installed that no kept target
/// (present, or `--keep`) may load, and only with `--yes`; a generic-ISA
/// archive a kept target loads stays; archives a package installed (no
/// state record) are never touched; without a target to keep it refuses.
#[test]
fn prune_removes_only_recorded_archives_no_kept_target_loads() {
    let env = Env::new();
    let own = Archive::new("x", "gfx90a", 1, 10_000);
    let generic = Archive::new("x", "gfx9-4-generic", 2, 20_000);
    let packaged = Archive::new("y", "gfx1100", 3, 5_000);
    write_manifest_for(
        &env.kpack,
        "x.kpm",
        "x",
        &[
            (&own.name, &own, "gfx90a"),
            (&generic.name, &generic, "gfx9-4-generic"),
        ],
    );
    write_manifest_for(
        &env.kpack,
        "y.kpm",
        "y",
        &[(&packaged.name, &packaged, "gfx1100")],
    );
    // As if a package installed it: present, not recorded.
    fs::write(env.kpack.join(&packaged.name), &packaged.bytes).unwrap();
    let offline = env.top.join("offline");
    fs::create_dir_all(&offline).unwrap();
    for a in [&own, &generic] {
        fs::write(offline.join(&a.name), &a.bytes).unwrap();
    }
    let (code, _, stderr) = run(env.fetch(&[
        "install",
        "--target",
        "gfx90a,gfx950",
        "--offline",
        offline.to_str().unwrap(),
        "--cache-dir",
        env.cache.to_str().unwrap(),
    ]));
    assert_eq!(code, 0, "{stderr}");
    let kpacks = || -> Vec<String> {
        env.kpack_files()
            .into_iter()
            .filter(|n| n.ends_with(".kpack"))
            .collect()
    };
    let all = vec![
        generic.name.clone(),
        own.name.clone(),
        packaged.name.clone(),
    ];
    assert_eq!(kpacks(), all);

    // No GPU, nothing kept: refused, exit 3.
    let cpu_only = rocm_kpack_test_support::fixtures::machine("cpu-only");
    let (code, _, stderr) =
        run(env.fetch(&["prune", "--yes", "--sysfs-root", cpu_only.to_str().unwrap()]));
    assert_eq!(code, 3, "{stderr}");
    // A gfx950 here: gfx90a's archive goes, the generic one gfx950 loads
    // stays. Listed only, with the bytes freed.
    let (code, stdout, stderr) = run(env.fetch(&["prune", "--target", "gfx950", "--json"]));
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["applied"], false, "{v}");
    let items = v["backends"][0]["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{v}");
    assert!(
        items[0]["name"].as_str().unwrap().ends_with(&own.name),
        "{v}"
    );
    assert_eq!(v["bytes"].as_u64(), Some(own.bytes.len() as u64), "{v}");
    let (code, _, stderr) = run(env.fetch(&["prune", "--target", "gfx950", "--yes", "--dry-run"]));
    assert_eq!(code, 2, "--yes and --dry-run conflict: {stderr}");
    assert_eq!(kpacks(), all);
    // --keep gfx90a keeps everything.
    let (code, stdout, stderr) =
        run(env.fetch(&["prune", "--target", "gfx950", "--keep", "gfx90a", "--yes"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("nothing to prune"), "{stdout}");
    assert_eq!(kpacks(), all);
    let (code, stdout, stderr) = run(env.fetch(&["prune", "--target", "gfx950", "--yes"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(&format!("removed {}", env.kpack.join(&own.name).display())),
        "{stdout}"
    );
    assert_eq!(kpacks(), [generic.name.clone(), packaged.name.clone()]);
}
