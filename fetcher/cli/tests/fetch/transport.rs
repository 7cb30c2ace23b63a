//! Archives downloaded in their transport form (one solid zstd stream of
//! the uncompressed entries) and rebuilt here, against a real HTTP server
//! on 127.0.0.1: the round trip keeps every code object (and, at the
//! release level, every byte); a damaged, truncated, bombed or mis-sized
//! transport installs nothing from it and falls back to the archive itself,
//! the older archive staying when that fails too; an interrupted transfer
//! starts again and succeeds; a transport format this fetcher does not
//! know is ignored; `verify` checks a rebuilt archive's every frame.

use std::fs;

use rocm_kpack_format::archive::transport::write_transport;
use rocm_kpack_format::archive::{Archive as Reader, CompressionScheme};
use rocm_kpack_format::layout::store::transport_object_path;
use rocm_kpack_format::manifest::{ArchiveTransport, ManifestFile};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::*;

/// The frame level of the published test archives.
const RELEASE_LEVEL: i32 = 9;

/// A published archive and its transport form.
struct Published {
    archive: Archive,
    /// The decoded transport stream.
    flat: Vec<u8>,
    /// The store object: `flat` as one zstd frame.
    object: Vec<u8>,
}

impl Published {
    /// Server path of the transport object.
    fn transport_path(&self) -> String {
        format!("/{}", transport_object_path(&solid(&self.archive.file).1))
    }
}

/// (size, sha256) of the manifest entry's transport.
fn solid(file: &ManifestFile) -> (u64, [u8; 32]) {
    match &file.transport {
        Some(ArchiveTransport::Solid { size, sha256, .. }) => (*size, *sha256),
        other => panic!("not a solid transport: {other:?}"),
    }
}

/// Code objects alike enough that one stream compresses them better than
/// one frame each: every kernel is a variant of the same base.
fn kernel(base: &[u8], variant: u64) -> Vec<u8> {
    let mut k = base.to_vec();
    let patch = noise(k.len() / 16, variant);
    for (i, b) in patch.iter().enumerate() {
        let at = (i * 16) % k.len();
        k[at] ^= b;
    }
    k
}

/// A real zstd-per-kernel archive of `component`/`family` (three
/// libraries, each under two names with identical code, so blobs are
/// shared), at [`RELEASE_LEVEL`], with its manifest entry (transport
/// included) and transport object. `toc_order`: the code objects are
/// added binary by binary, as the splitter does.
fn published_in(
    component: &str,
    family: &str,
    arches: &[&str],
    seed: u64,
    toc_order: bool,
) -> Published {
    let mut w = writer(
        component,
        family,
        CompressionScheme::ZstdPerKernel,
        RELEASE_LEVEL,
    );
    // Text-like, compressible code.
    let base: Vec<u8> = noise(40_000, seed)
        .iter()
        .map(|b| b"ACGT s_mov v_add"[usize::from(*b) % 16])
        .collect();
    let code = |lib: u64, i: usize| kernel(&base, seed * 100 + lib * 10 + i as u64);
    let mut add = |binary: String, arch: &str, code: Vec<u8>| {
        w.add_kernel(&binary, arch, code).expect("add kernel")
    };
    if toc_order {
        // As the splitter writes: binary by binary, so blobs are numbered
        // in order of first reference in the TOC.
        for lib in 0..3u64 {
            for so in ["so", "so.1"] {
                for (i, arch) in arches.iter().enumerate() {
                    add(format!("lib/lib{lib}.{so}#0"), arch, code(lib, i));
                }
            }
        }
    } else {
        // Arch by arch: the blobs of one binary are not adjacent.
        for (i, arch) in arches.iter().enumerate() {
            for lib in 0..3u64 {
                for so in ["so", "so.1"] {
                    add(format!("lib/lib{lib}.{so}#0"), arch, code(lib, i));
                }
            }
        }
    }
    let bytes = w.finish().expect("finish").into_inner();
    let reader = Reader::from_bytes(bytes.clone()).expect("open");
    let mut flat = Vec::new();
    let summary = write_transport(&reader, &mut flat).expect("transport");
    assert_eq!(summary.size, flat.len() as u64);
    let object = zstd::encode_all(flat.as_slice(), 19).expect("zstd");
    let file = ManifestFile {
        transport: Some(ArchiveTransport::Solid {
            size: summary.size,
            sha256: summary.sha256,
            level: Some(RELEASE_LEVEL),
        }),
        ..manifest_entry(component, family, arches, &bytes)
    };
    Published {
        archive: Archive { file, bytes },
        flat,
        object,
    }
}

/// [`published_in`] in TOC order.
fn published(component: &str, family: &str, arches: &[&str], seed: u64) -> Published {
    published_in(component, family, arches, seed, true)
}

/// A root listing one published gfx90X archive of rocrand, served with
/// its transport form.
fn setup() -> (Env, Published, Server) {
    let env = Env::new();
    let p = published("rocrand", "gfx90X", &["gfx90a", "gfx90a:xnack+"], 1);
    env.manifest(&env.kpack, "rocrand", &[&p.archive]);
    let server = Server::start();
    server.add(&p.archive.by_hash(), p.archive.bytes.clone());
    server.add(&p.transport_path(), p.object.clone());
    (env, p, server)
}

fn installed(env: &Env, p: &Published) -> std::path::PathBuf {
    env.kpack.join(&p.archive.file.filename)
}

/// Every code object of the archive at `path` equals the published one's,
/// under the same TOC keys.
#[track_caller]
fn assert_same_code(path: &std::path::Path, p: &Published) {
    let got = Reader::open(path).expect("open rebuilt");
    let want = Reader::from_bytes(p.archive.bytes.clone()).expect("open published");
    let keys = |a: &Reader| {
        let mut k: Vec<(String, String)> = a
            .entries()
            .map(|(b, arch, _)| (b.to_string(), arch.to_string()))
            .collect();
        k.sort();
        k
    };
    assert_eq!(keys(&got), keys(&want), "TOC keys");
    assert!(!keys(&want).is_empty());
    for (b, arch) in keys(&want) {
        assert!(
            got.kernel(&b, &arch).expect("rebuilt kernel")
                == want.kernel(&b, &arch).expect("published kernel"),
            "{b} {arch} differs"
        );
    }
}

fn gets(server: &Server, path: &str) -> usize {
    server
        .requests_for(path)
        .iter()
        .filter(|r| r.method == "GET")
        .count()
}

fn verify_json(env: &Env) -> (i32, Value) {
    let (code, stdout, stderr) = run(env.sub("verify", &["--json"]));
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    (code, v)
}

#[test]
fn a_transport_form_is_rebuilt_with_every_code_object_and_verified() {
    let (env, p, server) = setup();
    let (code, stdout, stderr) = run(env.install("gfx90a", &[server.url()], &["--json"]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let path = installed(&env, &p);
    assert_same_code(&path, &p);
    assert_eq!(gets(&server, &p.transport_path()), 1);
    assert_eq!(
        gets(&server, &p.archive.by_hash()),
        0,
        "the archive itself is not downloaded"
    );
    // Recorded as rebuilt: the file's own size and sha256, the transport's
    // sha256 and the level.
    let bytes = fs::read(&path).expect("read");
    let e = &env.state()["archives"][&p.archive.file.filename];
    assert_eq!(e["sha256"], hex::encode(Sha256::digest(&bytes)));
    assert_eq!(e["size"], bytes.len() as u64);
    assert_eq!(
        e["rebuilt"]["transport_sha256"],
        hex::encode(solid(&p.archive.file).1)
    );
    assert_eq!(
        e["rebuilt"]["level"],
        rocm_kpack_fetcher::execute::FrameLevel::DEFAULT
    );
    // The decoded stream is not kept.
    assert_eq!(env.partials(), Vec::<(String, u64)>::new());
    // Current for install, status and doctor-style checks: nothing to do.
    let again = ok(env.install("gfx90a", &[server.url()], &[]));
    assert!(again.contains("1 already present"), "{again}");
    assert_eq!(gets(&server, &p.transport_path()), 1, "nothing downloaded");
    let (_, status, _) = run(env.sub("status", &["--target", "gfx90a", "--json"]));
    let status: Value = serde_json::from_str(&status).expect("status json");
    assert_eq!(status["components"][0]["complete"], true, "{status}");
    // verify recomputes the transport from the file.
    let (code, v) = verify_json(&env);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["archives"][0]["verdict"], "rebuilt", "{v}");
    assert!(
        v["archives"][0]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("transport sha256")),
        "{v}"
    );
    // remove deletes it (the state's size and sha256 are the file's).
    let (code, stdout, stderr) = run(env.sub("remove", &["--yes", "rocrand"]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(!path.exists(), "{stdout}{stderr}");
}

#[test]
fn at_the_release_level_the_rebuilt_archive_is_the_published_one() {
    let (env, p, server) = setup();
    let (code, stdout, stderr) =
        run(env.install("gfx90a", &[server.url()], &["--frame-level", "release"]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_installed(&installed(&env, &p), &p.archive);
    assert_eq!(gets(&server, &p.transport_path()), 1);
    assert_eq!(gets(&server, &p.archive.by_hash()), 0, "{stderr}");
    let (code, v) = verify_json(&env);
    assert_eq!(
        (code, &v["archives"][0]["verdict"]),
        (0, &Value::from("ok"))
    );
}

/// An archive whose blobs are not numbered in TOC order (another writer's)
/// cannot be reproduced from its transport form: at the release level the
/// result fails the manifest's sha256, nothing of it is installed, and the
/// archive itself is.
#[test]
fn a_release_rebuild_that_is_not_the_published_archive_falls_back() {
    let env = Env::new();
    let p = published_in("rocrand", "gfx90X", &["gfx90a", "gfx90a:xnack+"], 5, false);
    env.manifest(&env.kpack, "rocrand", &[&p.archive]);
    let server = Server::start();
    server.add(&p.archive.by_hash(), p.archive.bytes.clone());
    server.add(&p.transport_path(), p.object.clone());
    let (code, stdout, stderr) =
        run(env.install("gfx90a", &[server.url()], &["--frame-level", "release"]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stderr.contains("rebuilding it from its transport form failed"),
        "{stderr}"
    );
    assert_installed(&installed(&env, &p), &p.archive);
    assert_eq!(gets(&server, &p.transport_path()), 1);
    assert_eq!(gets(&server, &p.archive.by_hash()), 1);
    assert_eq!(env.partials(), Vec::<(String, u64)>::new());
    // At a local level the same transport rebuilds fine: every code object
    // is the published one.
    let env = Env::new();
    env.manifest(&env.kpack, "rocrand", &[&p.archive]);
    ok(env.install("gfx90a", &[server.url()], &[]));
    assert_same_code(&installed(&env, &p), &p);
}

#[test]
fn no_transport_fetches_the_archive_itself() {
    let (env, p, server) = setup();
    ok(env.install("gfx90a", &[server.url()], &["--no-transport"]));
    assert_installed(&installed(&env, &p), &p.archive);
    assert_eq!(gets(&server, &p.transport_path()), 0);
}

#[test]
fn a_bad_transport_installs_nothing_from_it_and_falls_back() {
    let (env, p, server) = setup();
    // The older release is installed.
    let old = published("rocrand", "gfx90X", &["gfx90a", "gfx90a:xnack+"], 7);
    env.manifest(&env.kpack, "rocrand", &[&old.archive]);
    server.add(&old.archive.by_hash(), old.archive.bytes.clone());
    ok(env.install("gfx90a", &[server.url()], &["--no-transport"]));
    env.manifest(&env.kpack, "rocrand", &[&p.archive]);

    let (size, sha256) = solid(&p.archive.file);
    let transport = |size: u64, sha256: [u8; 32]| ArchiveTransport::Solid {
        size,
        sha256,
        level: Some(RELEASE_LEVEL),
    };
    let mut flipped = p.object.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x40;
    let mut cut = p.object.clone();
    cut.truncate(cut.len() / 2);
    // Far more than the manifest's size, from a small object.
    let bomb = rocm_kpack_test_support::bomb::zero_frame(size * 64);
    // A stream the manifest vouches for (size and sha256 match) that ends
    // inside a blob: the rebuild refuses it.
    let mut short = p.flat.clone();
    short.truncate(short.len() - 1000);
    let short_object = zstd::encode_all(short.as_slice(), 3).expect("zstd");
    let downloading = "its transport form could not be downloaded";
    let cases: Vec<(&str, Vec<u8>, ArchiveTransport, [&str; 2])> = vec![
        (
            "bit-flipped",
            flipped,
            transport(size, sha256),
            [downloading, "sha256 mismatch"],
        ),
        (
            "truncated",
            cut,
            transport(size, sha256),
            [downloading, "mid-file"],
        ),
        (
            "a zstd bomb",
            bomb,
            transport(size, sha256),
            [downloading, "more bytes than the manifest says"],
        ),
        (
            "a size claim too small",
            p.object.clone(),
            transport(size - 1, sha256),
            [downloading, "more bytes than the manifest says"],
        ),
        (
            "a size claim too large",
            p.object.clone(),
            transport(size + 1, sha256),
            [downloading, "decodes to"],
        ),
        (
            "a stream that does not rebuild",
            short_object,
            transport(short.len() as u64, Sha256::digest(&short).into()),
            ["rebuilding it from its transport form failed", "truncated"],
        ),
    ];
    let older = installed(&env, &p);
    for (what, object, transport, says) in cases {
        let mut file = p.archive.file.clone();
        file.transport = Some(transport.clone());
        let a = Archive {
            file,
            bytes: p.archive.bytes.clone(),
        };
        env.manifest(&env.kpack, "rocrand", &[&a]);
        server.add(
            &format!("/{}", transport_object_path(&solid(&a.file).1)),
            object,
        );
        // The archive itself is missing too: the run fails, the older
        // archive and its record stay, nothing is left behind.
        server.set_fault(&a.by_hash(), Fault::NotFound);
        let (code, stdout, stderr) =
            run(env.install("gfx90a", &[server.url()], &["--retries", "0"]));
        assert_eq!(code, 1, "{what}: {stdout}{stderr}");
        for words in says.iter().chain(&["fetching the archive itself"]) {
            assert!(stderr.contains(words), "{what}: {words:?} in {stderr}");
        }
        assert_installed(&older, &old.archive);
        assert_eq!(
            env.state()["archives"][&a.file.filename]["sha256"],
            old.archive.hex(),
            "{what}: the state still records the older archive"
        );
        assert_eq!(
            env.kpack_files(),
            [
                ".rocm-kpack-fetch-state.json",
                ".rocm-kpack-fetch.lock",
                "rocrand.kpm",
                a.file.filename.as_str(),
            ],
            "{what}: no temporary file left"
        );
        assert_eq!(env.partials(), Vec::<(String, u64)>::new(), "{what}");
        // With the archive itself served: installed from it, as published.
        server.clear_faults();
        let (code, stdout, stderr) =
            run(env.install("gfx90a", &[server.url()], &["--retries", "0"]));
        assert_eq!(code, 0, "{what}: {stdout}{stderr}");
        assert_installed(&older, &p.archive);
        let e = &env.state()["archives"][&a.file.filename];
        assert_eq!(e["sha256"], p.archive.hex(), "{what}");
        assert!(e.get("rebuilt").is_none(), "{what}: {e}");
        // Back to the older release for the next case.
        env.manifest(&env.kpack, "rocrand", &[&old.archive]);
        ok(env.install("gfx90a", &[server.url()], &["--no-transport"]));
        assert_installed(&older, &old.archive);
    }
}

#[test]
fn an_interrupted_transport_transfer_starts_again_and_succeeds() {
    let (env, p, server) = setup();
    server.push_fault(&p.transport_path(), Fault::DropAfter(p.object.len() / 3));
    ok(env.install("gfx90a", &[server.url()], &["--retries", "1"]));
    assert_same_code(&installed(&env, &p), &p);
    let tries = server.requests_for(&p.transport_path());
    assert_eq!(tries.len(), 2, "{tries:?}");
    assert_eq!(gets(&server, &p.archive.by_hash()), 0);
}

/// An older fetcher against a newer store: a manifest whose transport
/// has a format this fetcher does not read (written as raw MessagePack:
/// the writer only writes formats it knows).
#[test]
fn an_unknown_transport_format_is_ignored_for_the_archive_itself() {
    use rocm_kpack_format::msgpack::{self, Value as Mp};
    let env = Env::new();
    let p = published("rocrand", "gfx90X", &["gfx90a"], 3);
    env.manifest(&env.kpack, "rocrand", &[&p.archive]);
    let kpm = env.kpack.join("rocrand.kpm");
    let mut v: Mp = msgpack::decode(&fs::read(&kpm).expect("read")).expect("decode");
    /// The value at `key` of a map.
    fn at<'a>(v: &'a mut Mp, key: &str) -> &'a mut Mp {
        match v {
            Mp::Map(m) => m
                .iter_mut()
                .find(|(k, _)| k.as_str() == Some(key))
                .map(|(_, v)| v)
                .unwrap_or_else(|| panic!("no {key}")),
            _ => panic!("not a map"),
        }
    }
    let file = match at(&mut v, "kpack_files") {
        Mp::Array(files) => files.first_mut().expect("one file"),
        _ => panic!("kpack_files is not an array"),
    };
    let transport = at(file, "transport");
    *at(transport, "format") = Mp::from(2);
    if let Mp::Map(m) = transport {
        m.push((Mp::from("window"), Mp::from("a key only format 2 has")));
    }
    fs::write(&kpm, msgpack::encode(&v).expect("encode")).expect("write");
    let server = Server::start();
    server.add(&p.archive.by_hash(), p.archive.bytes.clone());
    server.add(&p.transport_path(), p.object.clone());
    let (code, stdout, stderr) = run(env.install("gfx90a", &[server.url()], &[]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stderr.contains("has format 2"), "{stderr}");
    assert_installed(&installed(&env, &p), &p.archive);
    assert_eq!(gets(&server, &p.transport_path()), 0);
    let (code, v) = verify_json(&env);
    assert_eq!(
        (code, &v["archives"][0]["verdict"]),
        (0, &Value::from("ok"))
    );
}

#[test]
fn verify_finds_a_flipped_byte_in_a_rebuilt_archives_frames() {
    let (env, p, server) = setup();
    ok(env.install("gfx90a", &[server.url()], &[]));
    let path = installed(&env, &p);
    let intact = fs::read(&path).expect("read");
    let (code, v) = verify_json(&env);
    assert_eq!(
        (code, &v["archives"][0]["verdict"]),
        (0, &Value::from("rebuilt"))
    );
    // A byte in the middle of the frames (the TOC is at the end).
    let reader = Reader::open(&path).expect("open");
    let toc = usize::try_from(reader.toc_offset()).expect("offset");
    drop(reader);
    let mut bad = intact.clone();
    bad[toc / 2] ^= 0x01;
    fs::write(&path, &bad).expect("write");
    let (code, v) = verify_json(&env);
    assert_eq!(code, 4, "{v}");
    assert_eq!(v["archives"][0]["verdict"], "damaged", "{v}");
    // And the plan replaces it.
    let again = ok(env.install("gfx90a", &[server.url()], &[]));
    assert!(again.contains("1 installed"), "{again}");
    assert_same_code(&path, &p);
}
