//! Database sets: a processor's kernel-database files as one stream that
//! the store's `index.json` lists (`rocm_kpack_format::database_set`). A
//! component that needs every member downloads the set (one request
//! instead of one per file) and installs each member as if fetched alone;
//! a damaged or missing set falls back to the per-file objects with
//! nothing partial left; `--no-transport` and a store without sets fetch
//! file by file.

use std::io::Read;

use rocm_kpack_format::database_set::{write_set, SetMember};
use sha2::{Digest, Sha256};

use crate::databases::{blas, Blas, Db};
use crate::{ok, run, Fault};

/// The decoded set stream of `dbs`.
fn stream(dbs: &[Db]) -> Vec<u8> {
    let list: Vec<SetMember> = dbs.iter().map(|d| SetMember::from(&d.file)).collect();
    let bytes: Vec<(String, Vec<u8>)> = dbs
        .iter()
        .map(|d| (d.file.path.clone(), d.bytes.clone()))
        .collect();
    let mut open = |m: &SetMember| -> std::io::Result<Box<dyn Read>> {
        let (_, b) = bytes.iter().find(|(p, _)| *p == m.path).expect("a member");
        Ok(Box::new(std::io::Cursor::new(b.clone())))
    };
    let mut out = Vec::new();
    write_set(&list, &mut open, &mut out).expect("write set");
    out
}

/// The rocblas store of the database tests, and the decoded set of
/// gfx90a's three files.
struct Sets {
    b: Blas,
    set: Vec<u8>,
}

fn blas_with_set() -> Sets {
    let b = blas();
    let set = stream(&b.dbs[..3]);
    Sets { b, set }
}

impl std::ops::Deref for Sets {
    type Target = Blas;
    fn deref(&self) -> &Blas {
        &self.b
    }
}

impl Sets {
    fn set_path(&self) -> String {
        format!(
            "/by-hash/sha256/{}.zst",
            hex::encode(Sha256::digest(&self.set))
        )
    }

    /// Serves `index.json` listing the set whose decoded stream is
    /// `decoded` (sha256 and size), as `publish` writes it, and `object`
    /// at that stream's path.
    fn serve_set(&self, decoded: &[u8], object: Vec<u8>) {
        let sha = hex::encode(Sha256::digest(decoded));
        let members: Vec<serde_json::Value> = self.dbs[..3]
            .iter()
            .map(|d| {
                serde_json::json!({
                    "install_path": d.file.path,
                    "size": d.file.size,
                    "sha256": hex::encode(d.file.sha256),
                })
            })
            .collect();
        let index = serde_json::json!({
            "format_version": 2,
            "archives": [],
            "database_files": [],
            "database_sets": [{
                "component": "rocblas",
                "processor": "gfx90a",
                "version": "1.0",
                "format": 1,
                "size": decoded.len(),
                "sha256": sha,
                "encoding": "zstd",
                "stored_size": object.len(),
                "path": format!("by-hash/sha256/{sha}.zst"),
                "members": members,
            }],
        });
        self.server
            .add("/index.json", serde_json::to_vec(&index).expect("json"));
        self.server
            .add(&format!("/by-hash/sha256/{sha}.zst"), object);
    }

    fn asked(&self) -> Vec<String> {
        self.server.requests().into_iter().map(|r| r.path).collect()
    }

    fn assert_all_installed(&self) {
        self.assert_gfx90a_files_installed();
        assert!(!self.installed(3).exists(), "gfx1100's file is not needed");
        let stdout = ok(self.env.sub("status", &["--target", "gfx90a"]));
        assert!(stdout.contains("complete"), "{stdout}");
        assert!(self.env.partials().is_empty(), "{:?}", self.env.partials());
    }
}

fn encoded(decoded: &[u8]) -> Vec<u8> {
    zstd::encode_all(decoded, 3).expect("zstd")
}

#[test]
fn a_set_is_one_download_and_installs_every_member() {
    let b = blas_with_set();
    let object = encoded(&b.set);
    b.serve_set(&b.set, object.clone());
    let json: serde_json::Value =
        serde_json::from_str(&ok(b.env.install("gfx90a", &[b.server.url()], &["--json"])))
            .expect("json");
    let asked = b.asked();
    assert_eq!(
        asked.iter().filter(|p| **p == b.set_path()).count(),
        1,
        "{asked:?}"
    );
    for d in &b.dbs {
        assert!(!asked.contains(&d.url_path()), "{asked:?}");
    }
    b.assert_all_installed();
    // The set's bytes on the wire are counted once.
    let installed = json["installed"].as_array().expect("installed");
    let wire: u64 = installed
        .iter()
        .filter(|i| {
            i["filename"]
                .as_str()
                .is_some_and(|f| f.contains("library/"))
        })
        .map(|i| i["transferred"].as_u64().expect("transferred"))
        .sum();
    assert_eq!(wire, object.len() as u64, "{json}");
    // Recorded as single files are: a second run has nothing to do.
    let state = b.env.state();
    for d in &b.dbs[..3] {
        let entry = &state["databases"][d.file.path.as_str()];
        assert_eq!(entry["sha256"], hex::encode(d.file.sha256), "{state}");
        assert!(entry["file"]["inode"].is_u64(), "{state}");
    }
    let before = b.asked().len();
    ok(b.env.install("gfx90a", &[b.server.url()], &[]));
    assert!(
        !b.asked()[before..].contains(&b.set_path()),
        "{:?}",
        b.asked()
    );
}

#[test]
fn no_transport_and_stores_without_sets_fetch_file_by_file() {
    // --no-transport: the index is not even asked for.
    let b = blas_with_set();
    b.serve_set(&b.set, encoded(&b.set));
    ok(b.env
        .install("gfx90a", &[b.server.url()], &["--no-transport"]));
    let asked = b.asked();
    assert!(!asked.iter().any(|p| p == "/index.json"), "{asked:?}");
    assert!(!asked.contains(&b.set_path()), "{asked:?}");
    b.assert_all_installed();

    // An index of an older publish (no database_sets), and none at all.
    for index in [
        Some(br#"{"format_version": 2, "archives": []}"#.to_vec()),
        None,
    ] {
        let b = blas_with_set();
        if let Some(i) = index {
            b.server.add("/index.json", i);
        }
        ok(b.env.install("gfx90a", &[b.server.url()], &[]));
        let asked = b.asked();
        for d in &b.dbs[..3] {
            assert!(asked.contains(&d.url_path()), "{asked:?}");
        }
        b.assert_all_installed();
    }
}

#[test]
fn a_damaged_or_missing_set_falls_back_to_the_files() {
    // A flipped bit in the stored object.
    let mut flipped = encoded(&blas_with_set().set);
    let at = flipped.len() / 2;
    flipped[at] ^= 0x40;
    // A consistent object and index whose member bytes are not the TOC's
    // (the set's own sha256 holds, its member's does not).
    let mut forged = blas_with_set().set;
    let last = forged.len() - 1;
    forged[last] ^= 1;
    // A stream of another format.
    let mut newer = blas_with_set().set;
    newer[4] = 2;
    // (what, the decoded stream the index names and the object served).
    type Served = Option<(Vec<u8>, Vec<u8>)>;
    let cases: Vec<(&str, Served)> = vec![
        ("flipped bit", Some((blas_with_set().set, flipped))),
        ("member bytes", Some((forged.clone(), encoded(&forged)))),
        ("format", Some((newer.clone(), encoded(&newer)))),
        ("404", None),
    ];
    for (what, served) in cases {
        let b = blas_with_set();
        match served {
            Some((decoded, object)) => b.serve_set(&decoded, object),
            None => {
                // Listed, but not on the store.
                b.serve_set(&b.set, Vec::new());
                b.server.set_fault(&b.set_path(), Fault::NotFound);
            }
        }
        let (code, stdout, stderr) = run(b.env.install("gfx90a", &[b.server.url()], &[]));
        assert_eq!(code, 0, "{what}: {stdout}\n{stderr}");
        assert!(
            stderr.contains("fetching its files one by one"),
            "{what}: {stderr}"
        );
        let asked = b.asked();
        for d in &b.dbs[..3] {
            assert!(asked.contains(&d.url_path()), "{what}: {asked:?}");
        }
        b.assert_all_installed();
    }
}
