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
use rocm_kpack_test_support::bins;
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
        let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new()), component, unit, CompressionScheme::None, 0)
            .expect("archive writer");
        let data: Vec<u8> = (0..size).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
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
    Value::Str(x.into())
}

/// A v1 manifest written as raw msgpack, so any name can be in it.
fn write_manifest(kpack: &Path, file: &str, component: &str, entries: &[(&str, &Archive)]) {
    let files = entries
        .iter()
        .map(|(name, a)| {
            Value::Map(vec![
                (s("filename"), s(name)),
                (s("family"), s("gfx90a")),
                (s("architectures"), Value::Array(vec![s("gfx90a")])),
                (s("size"), Value::UInt(a.bytes.len() as u64)),
                (s("sha256"), Value::Bin(a.sha().to_vec())),
            ])
        })
        .collect();
    let v = Value::Map(vec![
        (s("format_version"), Value::UInt(1)),
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
        for d in [&top, &root, &root.join("opt"), &root.join("opt/rocm"), &kpack, &victim] {
            fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap();
        }
        Env { cache: top.join("cache"), _tmp: tmp, top, root, kpack, victim }
    }

    fn fetch(&self, args: &[&str]) -> Command {
        let mut cmd = bins::command("rocm-kpack-fetch");
        cmd.args(args).args(["--root", self.root.to_str().unwrap()]);
        bins::isolate_fetcher(&mut cmd);
        cmd
    }

    fn install(&self, sources: &[String], extra: &[&str]) -> Command {
        let mut args = vec![
            "install", "--target", "gfx90a", "--allow-http", "--retry-base-ms", "10",
            "--cache-dir", self.cache.to_str().unwrap(),
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
        assert!(outside.is_empty(), "{what}: changed outside the prefix and cache: {outside:?}\n{diff}");
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
    let components = ["../x", "/etc", "%2e%2e", "http:x", "x\ny", "a".repeat(300).leak() as &str];
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
        assert_eq!(code, 1, "{what}: a refused manifest fails the run\n{stdout}{stderr}");
        assert!(stderr.contains("refusing manifest") && stderr.contains("unsafe"), "{what}: {stderr}");
        assert!(stderr.contains("manifest(s) refused"), "{what}: {stderr}");
        assert!(server.requests().is_empty(), "{what}: requested {:?}", server.requests());
        env.assert_confined(&before, &what);
        assert_eq!(env.kpack_files(), ["x.kpm"], "{what}");
    }
    assert_eq!(fs::read(env.victim.join("victim.kpack")).unwrap(), b"precious");
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
        server.set_fault(&format!("/{}", good.name), Fault::Redirect(location.clone()));
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
    server.set_fault(&good.by_hash(), Fault::Redirect(format!("{}/elsewhere", server.url())));
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
    for shape in ["drop-then-gone", "drop-then-5xx", "partial-from-an-earlier-run"] {
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
                fs::write(partial.join(format!("{}.part", hex::encode(good.sha()))), &wrong[..half]).unwrap();
                vec![good_mirror.url()]
            }
        };
        let before = env.snap();
        let (code, _, stderr) = run(env.install(&sources, &["--retries", "1"]));
        assert_eq!(code, 0, "{shape}: {stderr}");
        assert_eq!(fs::read(env.kpack.join(&good.name)).unwrap(), good.bytes, "{shape}");
        assert!(stderr.contains("starting over from byte 0"), "{shape}: {stderr}");
        // The good mirror was asked for the rest, then for everything.
        let asked: Vec<Option<String>> =
            good_mirror.requests_for(&good.by_hash()).into_iter().map(|r| r.range).collect();
        assert_eq!(asked.first().cloned().flatten(), Some(format!("bytes={half}-")), "{shape}: {asked:?}");
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
    let (code, _, stderr) = run(env.fetch(&[
        "install", "--target", "gfx90a", "--offline", offline.to_str().unwrap(),
        "--cache-dir", env.cache.to_str().unwrap(),
    ]));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(fs::read(env.kpack.join(&a.name)).unwrap(), a.bytes);
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
    let abs = env.victim.join("victim.kpack").to_string_lossy().into_owned();
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
        fs::write(env.kpack.join(STATE), serde_json::to_vec_pretty(&hostile).unwrap()).unwrap();
        let before = env.snap();
        for (code, stdout, stderr) in remove_and_gc(&env) {
            let _ = code;
            assert!(
                stderr.contains("not a valid rocm-kpack-fetch state file") && stderr.contains("archives["),
                "{key:?}: {stdout}{stderr}"
            );
        }
        let diff = before.diff(&env.snap());
        assert!(diff.is_empty(), "{key:?}: something changed:\n{diff}");
    }
    // A forged component or manifest name is refused the same way.
    for (field, value) in [("component", "../x"), ("manifest", "../../x.kpm"), ("manifest", "/etc/x.kpm")] {
        let mut hostile = state.clone();
        hostile["archives"][&a.name][field] = serde_json::json!(value);
        fs::write(env.kpack.join(STATE), serde_json::to_vec_pretty(&hostile).unwrap()).unwrap();
        let before = env.snap();
        for (_, _, stderr) in remove_and_gc(&env) {
            assert!(stderr.contains(&format!(".{field}")), "{field}: {stderr}");
        }
        assert!(before.diff(&env.snap()).is_empty(), "{field}={value}");
    }
    state["archives"][&a.name] = entry;
    fs::write(env.kpack.join(STATE), serde_json::to_vec_pretty(&state).unwrap()).unwrap();
    assert_eq!(fs::read(env.victim.join("victim.kpack")).unwrap(), b"precious");
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
            assert!(diff.outside(&[&kpack.join(STATE), &kpack.join(LOCK)]).is_empty(), "{what} [{i}]:\n{diff}");
        }
        assert!(fs::symlink_metadata(&archive).is_ok(), "{what}");
    }
    assert_eq!(fs::read(&victim).unwrap(), a.bytes, "the symlink's target is untouched");
}

/// Runs a shell command as `nobody` (the unprivileged attacker).
fn as_nobody(script: &str) {
    let out = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--", "sh", "-c", script])
        .output()
        .expect("setpriv");
    assert!(out.status.success(), "as nobody: {script}: {}", String::from_utf8_lossy(&out.stderr));
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
            "install", "--target", "gfx90a", "--offline", offline.to_str().unwrap(),
            "--cache-dir", env.cache.to_str().unwrap(),
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
        format!("ln -s {} {k}/{}", env.victim.join("victim.kpack").display(), a.name),
    ];
    for plant in &plants {
        as_nobody(plant);
        for (label, extra) in [("default", &[][..]), ("--unsafe-permissions", &["--unsafe-permissions"][..])] {
            let before = env.snap();
            let (code, stdout, stderr) = run(install(extra));
            let what = format!("{plant} [{label}]");
            let diff = before.diff(&env.snap());
            let victim = env.victim.strip_prefix(&env.top).unwrap();
            assert!(!diff.paths().any(|p| p.starts_with(victim)), "{what}: victim touched:\n{diff}");
            assert!(!created.exists(), "{what}");
            assert_eq!(fs::read(env.victim.join("victim.kpack")).unwrap(), b"precious", "{what}");
            if label == "default" {
                assert_ne!(code, 0, "{what}: {stdout}{stderr}");
                assert!(stderr.contains("other users may write"), "{what}: {stderr}");
                assert!(diff.is_empty(), "{what}: a refused prefix is not touched:\n{diff}");
            } else if plant.contains(LOCK) || plant.contains(STATE) {
                assert_ne!(code, 0, "{what}: {stdout}{stderr}");
                assert!(stderr.contains("symlink"), "{what}: {stderr}");
            } else {
                // The archive symlink is replaced by the verified file (a
                // rename never follows it).
                assert_eq!(code, 0, "{what}: {stderr}");
                assert_eq!(fs::read(env.kpack.join(&a.name)).unwrap(), a.bytes, "{what}");
                assert!(fs::symlink_metadata(env.kpack.join(&a.name)).unwrap().is_file(), "{what}");
            }
            for sub in [&["remove", "x", "--yes"][..], &["gc", "--yes", "--target", "gfx1100"][..]] {
                let mut args = sub.to_vec();
                args.extend(extra);
                let before = env.snap();
                let (_, _, stderr) = run(env.fetch(&args));
                let diff = before.diff(&env.snap());
                assert!(!diff.paths().any(|p| p.starts_with(victim)), "{what} {sub:?}: {stderr}\n{diff}");
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
    Command::new("chown").arg("nobody").arg(&prefix).status().unwrap();
    as_nobody(&format!(
        "mv {k} {k}.real && ln -s {} {k}",
        env.victim.display()
    ));
    fs::write(env.victim.join("x.kpm"), fs::read(prefix.join(".kpack.real/x.kpm")).unwrap()).unwrap();
    let before = env.snap();
    let (code, _, stderr) = run(install(&[]));
    assert_ne!(code, 0, "{stderr}");
    assert!(stderr.contains("not a .kpack directory") || stderr.contains("owned by uid"), "{stderr}");
    let diff = before.diff(&env.snap());
    assert!(diff.is_empty(), "swapped .kpack:\n{diff}");
}
