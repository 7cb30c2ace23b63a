//! Kernel-database files (manifest version 2): planned, fetched from the
//! store zstd-encoded, decoded while streaming, verified and installed at
//! their path below the manifest's prefix; `status` complete only when they
//! are there; hostile manifests and transfers refused with nothing lost.

use std::fs;
use std::path::PathBuf;

use rocm_kpack_format::manifest::{DatabaseFile, Manifest};
use sha2::{Digest, Sha256};

use crate::{make_archive, noise, ok, run, Env, Fault, Server};

/// A database file: manifest entry, installed bytes, encoded object.
pub(crate) struct Db {
    pub(crate) file: DatabaseFile,
    pub(crate) bytes: Vec<u8>,
    pub(crate) object: Vec<u8>,
}

impl Db {
    fn new(path: &str, arch: &str, family: &str, bytes: Vec<u8>) -> Db {
        let object = zstd::encode_all(bytes.as_slice(), 3).expect("zstd");
        Db {
            file: DatabaseFile {
                path: path.into(),
                family: family.into(),
                architectures: vec![arch.into()],
                size: bytes.len() as u64,
                sha256: Sha256::digest(&bytes).into(),
            },
            bytes,
            object,
        }
    }
    pub(crate) fn url_path(&self) -> String {
        format!("/by-hash/sha256/{}.zst", hex::encode(self.file.sha256))
    }
}

/// Code-object-like bytes: repetitive enough to compress like real ones.
fn code(len: usize, seed: u64) -> Vec<u8> {
    let unit = noise(4096, seed);
    unit.iter().cycle().take(len).copied().collect()
}

pub(crate) struct Blas {
    pub(crate) env: Env,
    pub(crate) server: Server,
    archive: crate::Archive,
    pub(crate) dbs: Vec<Db>,
}

/// rocblas: a gfx90X archive, and Tensile files for gfx90a (both xnack
/// variants of the hsaco) and gfx1100, all served by the store.
pub(crate) fn blas() -> Blas {
    let env = Env::new();
    let archive = make_archive("rocblas", "gfx90X", &["gfx90a"], 20_000, 5);
    let dbs = vec![
        Db::new(
            "rocblas/library/TensileLibrary_gfx90a.co",
            "gfx90a",
            "gfx90X",
            code(300_000, 1),
        ),
        Db::new(
            "rocblas/library/Kernels.so-000-gfx90a-xnack+.hsaco",
            "gfx90a:xnack+",
            "gfx90X",
            code(60_000, 2),
        ),
        Db::new(
            "rocblas/library/Kernels.so-000-gfx90a-xnack-.hsaco",
            "gfx90a:xnack-",
            "gfx90X",
            code(60_000, 3),
        ),
        Db::new(
            "rocblas/library/TensileLibrary_gfx1100.co",
            "gfx1100",
            "gfx110X",
            code(100_000, 4),
        ),
    ];
    let server = Server::start();
    server.add(&archive.by_hash(), archive.bytes.clone());
    for d in &dbs {
        server.add(&d.url_path(), d.object.clone());
    }
    let b = Blas {
        env,
        server,
        archive,
        dbs,
    };
    b.write_manifest();
    b
}

impl Blas {
    fn write_manifest(&self) {
        let m = Manifest {
            component: "rocblas".into(),
            kpack_files: vec![self.archive.file.clone()],
            database_files: self.dbs.iter().map(|d| d.file.clone()).collect(),
            prefix_path: None,
        };
        // `gc --yes` removes a `.kpack` directory it leaves empty.
        fs::create_dir_all(&self.env.kpack).expect("mkdir");
        fs::write(
            self.env.kpack.join("rocblas.kpm"),
            m.to_msgpack().expect("encode"),
        )
        .expect("write kpm");
    }
    fn prefix(&self) -> PathBuf {
        self.env.kpack.parent().expect("prefix").to_path_buf()
    }
    pub(crate) fn installed(&self, i: usize) -> PathBuf {
        self.prefix().join(&self.dbs[i].file.path)
    }
    /// gfx90a's three files are in place, byte for byte.
    pub(crate) fn assert_gfx90a_files_installed(&self) {
        for i in 0..3 {
            assert_eq!(
                fs::read(self.installed(i)).expect("installed"),
                self.dbs[i].bytes,
                "{}",
                self.dbs[i].file.path
            );
        }
    }
}

#[test]
fn database_files_are_fetched_decoded_and_make_status_complete() {
    let b = blas();
    let env = &b.env;
    // Before: status names every missing file and exits 4.
    let (code, stdout, _) = run(env.sub("status", &["--target", "gfx90a"]));
    assert_eq!(code, 4, "{stdout}");
    assert!(
        stdout.contains("4 of 4 archives and database files missing"),
        "{stdout}"
    );
    for i in 0..3 {
        assert!(
            stdout.contains(&format!("missing: {}", b.dbs[i].file.path)),
            "{stdout}"
        );
    }
    assert!(!stdout.contains("gfx1100.co"), "{stdout}");

    let doctor = |env: &Env| -> serde_json::Value {
        let (_, stdout, _) = run(env.sub("doctor", &["--target", "gfx90a", "--json"]));
        let report: serde_json::Value = serde_json::from_str(&stdout).expect("doctor json");
        report["checks"]
            .as_array()
            .expect("checks")
            .iter()
            .find(|c| c["check"] == "databases rocblas gfx90a")
            .cloned()
            .expect("database check")
    };
    let check = doctor(env);
    assert_eq!(check["outcome"], "problem", "{check}");
    assert!(
        check["detail"]
            .as_str()
            .expect("detail")
            .contains("TensileLibrary_gfx90a.co"),
        "{check}"
    );

    let json: serde_json::Value =
        serde_json::from_str(&ok(env.install("gfx90a", &[b.server.url()], &["--json"])))
            .expect("json");
    let installed = json["installed"].as_array().expect("installed");
    assert_eq!(installed.len(), 4, "{json}");
    // Bytes on the wire: the encoded object for a database file.
    for d in &b.dbs[..3] {
        let item = installed
            .iter()
            .find(|i| i["filename"] == d.file.path.as_str())
            .expect("item");
        assert_eq!(item["transferred"], d.object.len() as u64, "{item}");
        assert_eq!(item["size"], d.bytes.len() as u64);
        assert!(
            d.object.len() * 4 < d.bytes.len(),
            "the test data compresses"
        );
    }
    b.assert_gfx90a_files_installed();
    assert!(
        !b.installed(3).exists(),
        "gfx1100's database is not fetched for gfx90a"
    );
    let asked: Vec<String> = b.server.requests().into_iter().map(|r| r.path).collect();
    assert!(!asked.contains(&b.dbs[3].url_path()), "{asked:?}");

    let state = env.state();
    let entry = &state["databases"]["rocblas/library/TensileLibrary_gfx90a.co"];
    assert_eq!(entry["sha256"], hex::encode(b.dbs[0].file.sha256));
    assert_eq!(entry["component"], "rocblas");
    assert!(entry["file"]["inode"].is_u64());

    let stdout = ok(env.sub("status", &["--target", "gfx90a"]));
    assert!(
        stdout.contains("complete (4 archives and database files present)"),
        "{stdout}"
    );
    assert_eq!(doctor(env)["outcome"], "ok");
    let text = ok(env.sub("list", &[]));
    assert!(
        text.lines().any(|l| l.split_whitespace().take(3).eq([
            "fetched",
            "rocblas/library/TensileLibrary_gfx90a.co",
            "gfx90x"
        ])),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.split_whitespace().take(3).eq([
            "absent",
            "rocblas/library/TensileLibrary_gfx1100.co",
            "gfx110x"
        ])),
        "{text}"
    );

    // Changed on disk: status notices again.
    let mut bytes = b.dbs[1].bytes.clone();
    bytes[100] ^= 1;
    fs::write(b.installed(1), &bytes).expect("write");
    let (code, stdout, _) = run(env.sub("status", &["--target", "gfx90a"]));
    assert_eq!(code, 4, "{stdout}");
    assert!(
        stdout.contains("missing: rocblas/library/Kernels.so-000-gfx90a-xnack+.hsaco"),
        "{stdout}"
    );
    // ... and install replaces the file it installed.
    ok(env.install("gfx90a", &[b.server.url()], &[]));
    assert_eq!(fs::read(b.installed(1)).expect("read"), b.dbs[1].bytes);
}

#[test]
fn a_bad_transfer_installs_nothing_and_keeps_the_older_file() {
    let mut b = blas();
    ok(b.env.install("gfx90a:xnack+", &[b.server.url()], &[]));
    let old = b.dbs[0].bytes.clone();
    // A new release of the library: a new TensileLibrary_gfx90a.co.
    b.dbs[0] = Db::new(
        "rocblas/library/TensileLibrary_gfx90a.co",
        "gfx90a",
        "gfx90X",
        code(300_000, 9),
    );
    b.write_manifest();
    let new = &b.dbs[0];
    let longer = zstd::encode_all(code(300_001, 9).as_slice(), 3).expect("zstd");
    let mut other = code(300_000, 9);
    other[5] ^= 1;
    let wrong = zstd::encode_all(other.as_slice(), 3).expect("zstd");
    let raw = new.bytes.clone();
    let mut cut = new.object.clone();
    cut.truncate(cut.len() / 2);
    for (what, object, says) in [
        (
            "decodes past the manifest's size",
            longer,
            "more data than the manifest",
        ),
        ("decodes to other bytes", wrong, "sha256"),
        ("is not zstd", raw, "unknown encoding"),
        ("ends early", cut, "mid-file"),
    ] {
        b.server.add(&new.url_path(), object);
        let (code, stdout, stderr) =
            run(b
                .env
                .install("gfx90a:xnack+", &[b.server.url()], &["--retries", "0"]));
        assert_eq!(code, 1, "{what}: {stdout}{stderr}");
        assert!(stderr.contains(says), "{what}: {stderr}");
        assert_eq!(
            fs::read(b.installed(0)).expect("old file"),
            old,
            "{what}: the older file stays"
        );
        let state = b.env.state();
        assert_eq!(
            state["databases"]["rocblas/library/TensileLibrary_gfx90a.co"]["sha256"],
            hex::encode(Sha256::digest(&old)),
            "{what}: the state still records the older file"
        );
    }
    // A transfer cut off once starts again at byte 0 and succeeds.
    b.server.add(&new.url_path(), new.object.clone());
    b.server
        .push_fault(&new.url_path(), Fault::DropAfter(new.object.len() / 3));
    let stdout = ok(b.env.install("gfx90a:xnack+", &[b.server.url()], &[]));
    assert!(stdout.contains("1 installed"), "{stdout}");
    assert_eq!(fs::read(b.installed(0)).expect("new file"), new.bytes);
    let tries = b.server.requests_for(&new.url_path());
    assert!(tries.len() >= 2, "{tries:?}");
    assert!(
        tries.iter().all(|r| r.range.is_none()),
        "an encoded object is never resumed by range: {tries:?}"
    );
}

#[test]
fn hostile_database_paths_and_prefixes_are_refused() {
    // A symlinked directory in the prefix: nothing is written through it.
    let b = blas();
    let elsewhere = b.env.tmp.path().join("elsewhere");
    fs::create_dir_all(&elsewhere).expect("mkdir");
    std::os::unix::fs::symlink(&elsewhere, b.prefix().join("rocblas")).expect("symlink");
    let (code, _, stderr) = run(b.env.install("gfx90a:xnack+", &[b.server.url()], &[]));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("is a symlink"), "{stderr}");
    assert!(
        crate::list_dir(&elsewhere).is_empty(),
        "wrote through the symlink"
    );
    assert!(crate::list_dir(&elsewhere.join("library")).is_empty());

    // `..`, an absolute path, a path into .kpack/: the manifest is refused
    // whole, nothing is fetched.
    for path in [
        "../../etc/evil.co",
        "/etc/evil.co",
        ".kpack/rocblas_gfx90a.kpack",
    ] {
        let b = blas();
        let m = Manifest {
            component: "rocblas".into(),
            kpack_files: vec![b.archive.file.clone()],
            database_files: vec![b.dbs[0].file.clone()],
            prefix_path: None,
        };
        let mut v = rocm_kpack_format::msgpack::decode::<rocm_kpack_format::msgpack::Value>(
            &m.to_msgpack().expect("encode"),
        )
        .expect("decode");
        let rocm_kpack_format::msgpack::Value::Map(top) = &mut v else {
            panic!()
        };
        let rocm_kpack_format::msgpack::Value::Array(dbs) = &mut top[3].1 else {
            panic!()
        };
        let rocm_kpack_format::msgpack::Value::Map(d) = &mut dbs[0] else {
            panic!()
        };
        d[0].1 = rocm_kpack_format::msgpack::Value::String(path.into());
        fs::write(
            b.env.kpack.join("rocblas.kpm"),
            rocm_kpack_format::msgpack::encode(&v).expect("encode"),
        )
        .expect("write");
        let (code, stdout, stderr) = run(b.env.install("gfx90a", &[b.server.url()], &[]));
        assert_eq!(code, 1, "{path}: {stdout}{stderr}");
        assert!(stderr.contains("database path"), "{path}: {stderr}");
        assert!(
            b.server.requests().is_empty(),
            "{path}: fetched from a refused manifest"
        );
        let (code, stdout, _) = run(b.env.sub("status", &["--target", "gfx90a"]));
        assert_eq!(code, 4, "{path}: {stdout}");
    }

    // Another component's file: two manifests of one prefix claim a path.
    let b = blas();
    let other = Manifest {
        component: "rocsolver".into(),
        kpack_files: vec![],
        database_files: vec![b.dbs[0].file.clone()],
        prefix_path: None,
    };
    fs::write(
        b.env.kpack.join("rocsolver.kpm"),
        other.to_msgpack().expect("encode"),
    )
    .expect("write");
    let (code, stdout, stderr) = run(b.env.install("gfx90a:xnack+", &[b.server.url()], &[]));
    assert!(!b.installed(0).exists(), "{stdout}{stderr}");
    assert!(
        stderr.contains("two components claim") || stdout.contains("two components claim"),
        "{stdout}{stderr}"
    );
    assert_ne!(code, 0);
    let (code, stdout, _) = run(b.env.sub("status", &["--target", "gfx90a:xnack+"]));
    assert_eq!(code, 4, "{stdout}");

    // A file at the path that the fetcher did not install (a package's)
    // and that differs is never replaced.
    let b = blas();
    fs::create_dir_all(b.installed(0).parent().expect("dir")).expect("mkdir");
    fs::write(b.installed(0), b"a package's own version").expect("write");
    let (_, stdout, stderr) = run(b.env.install("gfx90a:xnack+", &[b.server.url()], &[]));
    assert_eq!(
        fs::read(b.installed(0)).expect("read"),
        b"a package's own version",
        "{stdout}{stderr}"
    );
    assert!(stderr.contains("did not install it"), "{stdout}{stderr}");
}

#[test]
fn verify_remove_and_gc_handle_database_files_and_spare_package_owned_ones() {
    let b = blas();
    let env = &b.env;
    ok(env.install("gfx90a", &[b.server.url()], &[]));
    let text = ok(env.sub("verify", &[]));
    assert!(text.contains("verified 4 archives: 0 problems"), "{text}");
    // Damage is found by re-hashing.
    let mut bytes = b.dbs[0].bytes.clone();
    bytes[7] ^= 1;
    fs::write(b.installed(0), &bytes).expect("write");
    let (code, stdout, _) = run(env.sub("verify", &[]));
    assert_eq!(code, 4, "{stdout}");
    assert!(
        stdout.contains("DAMAGED") && stdout.contains("TensileLibrary_gfx90a.co"),
        "{stdout}"
    );
    ok(env.install("gfx90a", &[b.server.url()], &[]));

    // `remove COMPONENT` takes the database files it installed too.
    let out = ok(env.sub("remove", &["rocblas", "--yes"]));
    for i in 0..3 {
        assert!(!b.installed(i).exists(), "{out}");
    }
    assert!(
        env.state().get("databases").is_none(),
        "records dropped: {}",
        env.state()
    );

    // The package is removed (its manifest goes): gc and the trigger's
    // orphan pass take its database files.
    ok(env.install("gfx90a", &[b.server.url()], &[]));
    fs::remove_file(env.kpack.join("rocblas.kpm")).expect("rm kpm");
    let out = ok(env.sub("gc", &["--target", "gfx90a", "--yes"]));
    for i in 0..3 {
        assert!(!b.installed(i).exists(), "{out}");
    }

    // A file a package now owns (the user installed the family's device
    // package after the fetch: dpkg wrote the same bytes over ours) is
    // never deleted by the fetcher, even though its state records it.
    b.write_manifest();
    ok(env.install("gfx90a", &[b.server.url()], &[]));
    let admin = env.root.join("var/lib/dpkg");
    fs::create_dir_all(admin.join("info")).expect("mkdir");
    fs::write(
        admin.join("status"),
        "Package: librocblas0-gfx90x\nStatus: install ok installed\nVersion: 1\nArchitecture: amd64\nMaintainer: x <x@x>\nDescription: x\n\n",
    )
    .expect("status");
    let owned = format!("/opt/rocm/{}", b.dbs[0].file.path);
    fs::write(
        admin.join("info/librocblas0-gfx90x.list"),
        format!("/opt\n/opt/rocm\n{owned}\n"),
    )
    .expect("list");
    fs::remove_file(env.kpack.join("rocblas.kpm")).expect("rm kpm");
    let (code, stdout, stderr) = run(env.sub("gc", &["--target", "gfx90a", "--yes"]));
    assert_ne!(code, 0, "{stdout}{stderr}");
    assert!(
        stderr.contains("the installed package librocblas0-gfx90x owns it"),
        "{stdout}{stderr}"
    );
    assert_eq!(
        fs::read(b.installed(0)).expect("package's file stays"),
        b.dbs[0].bytes
    );
    assert!(
        !b.installed(1).exists() && !b.installed(2).exists(),
        "the others go"
    );
}

#[test]
fn directories_made_for_database_files_go_with_them_and_no_others() {
    let b = blas();
    let env = &b.env;
    let prefix = b.prefix();
    assert!(!prefix.join("rocblas").exists());
    // The install makes rocblas/ and rocblas/library/ and records them.
    ok(env.install("gfx90a", &[b.server.url()], &[]));
    assert!(b.installed(0).is_file());
    assert_eq!(
        env.state()["created_dirs"],
        serde_json::json!(["rocblas", "rocblas/library"])
    );
    let out = ok(env.sub("remove", &["rocblas", "--yes"]));
    assert!(
        !prefix.join("rocblas").exists(),
        "the directories it made are gone: {out}"
    );
    assert!(env.state().get("created_dirs").is_none(), "{}", env.state());

    // A directory that was there before (a package's, the user's) stays,
    // and so does one the fetcher made that holds a file not its own.
    fs::create_dir(prefix.join("rocblas")).expect("mkdir");
    ok(env.install("gfx90a", &[b.server.url()], &[]));
    assert_eq!(
        env.state()["created_dirs"],
        serde_json::json!(["rocblas/library"])
    );
    let notes = prefix.join("rocblas/library/notes.txt");
    fs::write(&notes, "the user's\n").expect("write");
    ok(env.sub("remove", &["rocblas", "--yes"]));
    assert!(!b.installed(0).exists());
    assert_eq!(
        fs::read_to_string(&notes).expect("user's file stays"),
        "the user's\n"
    );
    assert_eq!(
        env.state()["created_dirs"],
        serde_json::json!(["rocblas/library"]),
        "kept while not empty"
    );
    fs::remove_file(&notes).expect("rm");
    ok(env.install("gfx90a", &[b.server.url()], &[]));
    ok(env.sub("remove", &["rocblas", "--yes"]));
    assert!(!prefix.join("rocblas/library").exists());
    assert!(
        prefix.join("rocblas").is_dir(),
        "not made by the fetcher: kept"
    );
}

/// `trigger --removed ROOT/opt/rocm/.kpack`, the package hook after a
/// removal (it works on absolute paths, not below `--root`).
fn trigger_removed(env: &Env, kpack: &std::path::Path) -> String {
    let kpack = kpack.to_string_lossy().into_owned();
    ok(env.cmd(&["trigger", "--removed", &kpack]))
}

/// After the package went, the trigger removes the database files the
/// fetcher installed and the directories it recorded making, and no other
/// directory even when empty: here a version-3 manifest's files outside the
/// prefix (`opt/rocm`, climbing to `opt`) land in directories the system
/// had (`opt/share/miopen/db`, `opt/aotriton/kernels`) and in ones the
/// fetcher made (`opt/aotriton/kernels/gfx90a`, `opt/library/made`).
#[test]
fn orphan_removal_takes_only_directories_the_fetcher_made() {
    let env = Env::new();
    let dbs = [
        Db::new(
            "opt/share/miopen/db/gfx90a68.kdb",
            "gfx90a",
            "gfx90X",
            code(50_000, 11),
        ),
        Db::new(
            "opt/aotriton/kernels/gfx90a/attn.hsaco",
            "gfx90a",
            "gfx90X",
            code(40_000, 12),
        ),
        Db::new(
            "opt/library/made/TensileLibrary_gfx90a.co",
            "gfx90a",
            "gfx90X",
            code(30_000, 13),
        ),
    ];
    let server = Server::start();
    for d in &dbs {
        server.add(&d.url_path(), d.object.clone());
    }
    let m = Manifest {
        component: "blas".into(),
        kpack_files: Vec::new(),
        database_files: dbs.iter().map(|d| d.file.clone()).collect(),
        prefix_path: Some("opt/rocm".into()),
    };
    let kpm = env.kpack.join("blas.kpm");
    fs::write(&kpm, m.to_msgpack().expect("encode")).expect("write kpm");
    let system = ["opt/share/miopen/db", "opt/aotriton/kernels"];
    for dir in system {
        fs::create_dir_all(env.root.join(dir)).expect("mkdir");
    }
    ok(env.install("gfx90a", &[server.url()], &[]));
    for d in &dbs {
        assert_eq!(
            fs::read(env.root.join(&d.file.path)).expect("installed"),
            d.bytes
        );
    }
    let made = env.state()["created_dirs"].clone();
    assert_eq!(
        made,
        serde_json::json!([
            "../aotriton/kernels/gfx90a",
            "../library",
            "../library/made"
        ]),
    );

    fs::remove_file(&kpm).expect("rm kpm");
    let out = trigger_removed(&env, &env.kpack);
    for d in &dbs {
        assert!(!env.root.join(&d.file.path).exists(), "{out}");
    }
    for gone in ["opt/library", "opt/aotriton/kernels/gfx90a"] {
        assert!(
            !env.root.join(gone).exists(),
            "{gone}: made by the fetcher, gone ({out})"
        );
    }
    for dir in system {
        assert!(
            env.root.join(dir).is_dir(),
            "{dir}: empty, but not the fetcher's to remove ({out})"
        );
    }
}

/// Two nested prefixes whose manifests list the same file
/// (`/opt/rocm/.kpack` lists `lib/x.co`, `/opt/rocm/lib/.kpack` lists
/// `x.co`): removing one package, or `remove`/`gc` for one component,
/// never deletes the file the other still lists; the output names it.
/// Once the other is gone too, the file goes.
#[test]
fn a_file_two_nested_prefixes_list_is_not_deleted_for_one_of_them() {
    let env = Env::new();
    let db = Db::new(
        "lib/rocblas/TensileLibrary_gfx90a.co",
        "gfx90a",
        "gfx90X",
        code(50_000, 21),
    );
    let server = Server::start();
    server.add(&db.url_path(), db.object.clone());
    let outer = Manifest {
        component: "rocblas".into(),
        kpack_files: Vec::new(),
        database_files: vec![db.file.clone()],
        prefix_path: None,
    };
    let outer_kpm = env.kpack.join("rocblas.kpm");
    let inner_kpack = env.root.join("opt/rocm/lib/.kpack");
    let inner_kpm = inner_kpack.join("hipblas.kpm");
    let inner = Manifest {
        component: "hipblas".into(),
        kpack_files: Vec::new(),
        database_files: vec![DatabaseFile {
            path: "rocblas/TensileLibrary_gfx90a.co".into(),
            ..db.file.clone()
        }],
        prefix_path: None,
    };
    let installed = env.root.join("opt/rocm").join(&db.file.path);
    let write = |path: &std::path::Path, m: &Manifest| {
        fs::create_dir_all(path.parent().expect("dir")).expect("mkdir");
        fs::write(path, m.to_msgpack().expect("encode")).expect("write kpm");
    };
    // Installed while only the outer package lists it; then the inner
    // package arrives listing the same file.
    write(&outer_kpm, &outer);
    ok(env.install("gfx90a", &[server.url()], &[]));
    assert_eq!(fs::read(&installed).expect("installed"), db.bytes);
    write(&inner_kpm, &inner);
    // Planned now, each is refused for the other's claim.
    let (_, stdout, stderr) = run(env.install("gfx90a", &[server.url()], &["--dry-run"]));
    assert!(
        format!("{stdout}{stderr}").contains("two components claim"),
        "{stdout}{stderr}"
    );

    // `remove` and `gc` for the outer component keep it, naming the other.
    let out = ok(env.sub("remove", &["rocblas", "--yes"]));
    assert!(installed.is_file(), "{out}");
    assert!(
        out.contains("kept") && out.contains(&inner_kpm.display().to_string()),
        "{out}"
    );
    let out = ok(env.sub("gc", &["--target", "gfx1100", "--yes"]));
    assert!(installed.is_file(), "{out}");
    assert!(out.contains("kept"), "{out}");

    // The outer package goes: its trigger keeps the file the inner lists.
    fs::remove_file(&outer_kpm).expect("rm kpm");
    let out = trigger_removed(&env, &env.kpack);
    assert_eq!(fs::read(&installed).expect("kept"), db.bytes, "{out}");

    // The inner one goes too: now nobody lists it, and it goes.
    fs::remove_file(&inner_kpm).expect("rm kpm");
    let out = ok(env.sub("gc", &["--target", "gfx90a", "--yes"]));
    assert!(!installed.exists(), "{out}");
}
