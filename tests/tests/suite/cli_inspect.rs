//! `rocm-kpack inspect` and `extract` on the reference vectors, the fixtures
//! and Debian's librocrand, checked against docs/formats.md section 6 and
//! against clang's own `clang-offload-bundler`.

use std::path::{Path, PathBuf};
use std::process::Command;

use rocm_kpack_test_support::{bins, bomb, clang, debian, fixtures};
use serde_json::Value;
use sha2::{Digest, Sha256};

fn vector(name: &str) -> PathBuf {
    fixtures::fixture(&format!("vectors/{name}"))
}

fn inspect_json(path: &Path) -> Value {
    let out = bins::command("rocm-kpack")
        .args(["inspect", "--json"])
        .arg(path)
        .output()
        .expect("run rocm-kpack inspect");
    assert!(
        out.status.success(),
        "inspect {} failed: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("inspect --json prints JSON")
}

fn bytes(prefix: &str, fill: u8, n: usize) -> Vec<u8> {
    let mut v = prefix.as_bytes().to_vec();
    v.extend(std::iter::repeat_n(fill, n));
    v
}

fn sha(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// (binary, arch, ordinal, content) as docs/formats.md section 6 lists them.
fn check_entries(report: &Value, expected: &[(&str, &str, u64, Vec<u8>)]) {
    let entries = report["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), expected.len(), "{report:#}");
    for (entry, (binary, arch, ordinal, content)) in entries.iter().zip(expected) {
        assert_eq!(entry["binary"], *binary);
        assert_eq!(entry["arch"], *arch);
        assert_eq!(entry["ordinal"], *ordinal);
        assert_eq!(
            entry["original_size"],
            content.len() as u64,
            "{binary} {arch}"
        );
        assert_eq!(
            entry["sha256"],
            sha(content),
            "{binary} {arch}: bytes differ"
        );
    }
}

#[test]
fn inspect_reports_the_noop_vector_exactly() {
    let r = inspect_json(&vector("test_noop.kpack"));
    assert_eq!(r["kind"], "archive");
    assert_eq!(r["file_size"], 903);
    assert_eq!(r["compression_scheme"], "none");
    assert_eq!(r["group_name"], "test");
    assert_eq!(r["gfx_arch_family"], "gfx900X");
    assert_eq!(r["gfx_arches"], serde_json::json!(["gfx900", "gfx906"]));
    check_entries(
        &r,
        &[
            (
                "lib/libtest.so#0",
                "gfx900",
                0,
                bytes("KERNEL1_GFX900_DATA", 0, 100),
            ),
            (
                "lib/libtest.so#0",
                "gfx906",
                1,
                bytes("KERNEL2_GFX906_DATA", 0, 200),
            ),
            (
                "bin/testapp#0",
                "gfx900",
                2,
                bytes("KERNEL3_APP_GFX900", 0xff, 150),
            ),
        ],
    );
}

#[test]
fn inspect_reports_the_zstd_vector_exactly() {
    let r = inspect_json(&vector("test_zstd.kpack"));
    assert_eq!(r["file_size"], 518);
    assert_eq!(r["compression_scheme"], "zstd-per-kernel");
    assert_eq!(r["gfx_arch_family"], "gfx110X");
    assert_eq!(r["gfx_arches"], serde_json::json!(["gfx1100", "gfx1101"]));
    let mut k1 = bytes("HIP_KERNEL_GFX1100_", b'A', 500);
    k1.extend(std::iter::repeat_n(b'B', 500));
    let mut k2 = bytes("HIP_KERNEL_GFX1101_", b'X', 300);
    k2.extend(std::iter::repeat_n(b'Y', 300));
    check_entries(
        &r,
        &[
            ("lib/libhip.so#0", "gfx1100", 0, k1),
            ("lib/libhip.so#0", "gfx1101", 1, k2),
            (
                "bin/hiptest#0",
                "gfx1100",
                2,
                bytes("TEST_APP_KERNEL___", 0x42, 1000),
            ),
        ],
    );
}

#[test]
fn extract_writes_one_code_object() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("k.co");
    let status = bins::command("rocm-kpack")
        .arg("extract")
        .arg(vector("test_zstd.kpack"))
        .args(["--binary", "bin/hiptest#0", "--target", "gfx1100", "-o"])
        .arg(&out)
        .status()
        .expect("run extract");
    assert!(status.success());
    assert_eq!(
        std::fs::read(&out).expect("read extracted"),
        bytes("TEST_APP_KERNEL___", 0x42, 1000)
    );
    // A missing kernel is an error that lists what the archive holds.
    let fail = bins::command("rocm-kpack")
        .arg("extract")
        .arg(vector("test_zstd.kpack"))
        .args(["--binary", "bin/hiptest#0", "--target", "gfx1101", "-o"])
        .arg(dir.path().join("none.co"))
        .output()
        .expect("run extract");
    assert_eq!(fail.status.code(), Some(1));
    let err = String::from_utf8_lossy(&fail.stderr);
    assert!(
        err.contains("gfx1101") && err.contains("lib/libhip.so#0"),
        "{err}"
    );
    assert!(!dir.path().join("none.co").exists());
}

/// A 140 KiB archive whose kernel decodes to 4 GiB of zeros (TOC and frame
/// agree): `extract` refuses it before allocating, so its peak RSS stays
/// far below what the kernel would take.
#[test]
fn extract_refuses_a_zstd_bomb_in_little_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let archive = dir.path().join("bomb.kpack");
    let bytes = bomb::zstd_bomb_archive(4 << 30);
    assert!(bytes.len() < 200 << 10, "{} bytes", bytes.len());
    std::fs::write(&archive, bytes).expect("write bomb");
    let rss = dir.path().join("rss");
    let out = Command::new("/usr/bin/time")
        .args(["-f", "%M", "-o"])
        .arg(&rss)
        .arg(bins::bin("rocm-kpack"))
        .arg("extract")
        .arg(&archive)
        .args([
            "--binary",
            bomb::BOMB_BINARY,
            "--target",
            bomb::BOMB_ARCH,
            "-o",
        ])
        .arg(dir.path().join("k.co"))
        .output()
        .expect("run /usr/bin/time rocm-kpack extract");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("limit"), "{err}");
    assert!(!dir.path().join("k.co").exists());
    // time writes "Command exited with non-zero status 1" first.
    let kib: u64 = std::fs::read_to_string(&rss)
        .expect("time -o")
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .expect("%M is KiB");
    assert!(kib < 256 << 10, "peak RSS {kib} KiB");
}

/// (target, size) of every device entry of every bundle in an inspect report.
fn bundle_targets(report: &Value) -> Vec<Vec<(String, u64)>> {
    report["hip_fatbin"]["bundles"]
        .as_array()
        .expect("bundles")
        .iter()
        .map(|b| {
            let mut v: Vec<(String, u64)> = b["entries"]
                .as_array()
                .expect("entries")
                .iter()
                .filter(|e| !e["target"].is_null())
                .map(|e| {
                    (
                        e["target"].as_str().expect("target").to_owned(),
                        e["size"].as_u64().expect("size"),
                    )
                })
                .collect();
            v.sort();
            v
        })
        .collect()
}

/// What clang-offload-bundler says one bundle file holds:
/// (target, size of the unbundled code object), sorted.
fn bundler_view(bundle: &Path, work: &Path) -> Vec<(String, u64)> {
    let triples: Vec<String> = clang::bundler_list(bundle)
        .into_iter()
        .filter(|t| !t.is_empty() && !t.starts_with("host-"))
        .collect();
    let refs: Vec<&str> = triples.iter().map(String::as_str).collect();
    let data = clang::bundler_unbundle(bundle, &refs, work);
    let mut out: Vec<(String, u64)> = triples
        .iter()
        .zip(data)
        .map(|(t, d)| {
            (
                t.rsplit("--").next().unwrap_or(t).to_owned(),
                d.len() as u64,
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn inspect_lists_librocrand_like_clang_offload_bundler() {
    let so = debian::librocrand_so().expect("librocrand (scripts/test.sh fetches it)");
    let r = inspect_json(&so);
    assert_eq!(r["kind"], "elf");
    assert_eq!(r["state"], "fat binary");
    let bundles = bundle_targets(&r);
    assert_eq!(bundles.len(), 1);
    let targets: Vec<&str> = bundles[0].iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        targets,
        [
            "gfx1030",
            "gfx803",
            "gfx900:xnack-",
            "gfx906:xnack-",
            "gfx908:xnack-",
            "gfx90a:xnack+",
            "gfx90a:xnack-"
        ]
    );
    let work = tempfile::tempdir().expect("tempdir");
    let section = work.path().join("hip_fatbin.bin");
    let status = Command::new("objcopy")
        .args(["-O", "binary", "--only-section=.hip_fatbin"])
        .arg(&so)
        .arg(&section)
        .status()
        .expect("objcopy");
    assert!(status.success());
    assert_eq!(bundler_view(&section, work.path()), bundles[0]);
    assert_eq!(r["wrappers"].as_array().map(Vec::len), Some(1));
    assert_eq!(r["wrappers"][0]["magic"], "HIPF");
    assert_eq!(r["wrappers"][0]["co_index"], 0);
}

#[test]
fn inspect_lists_every_fixture_bundle_and_wrapper() {
    for fixture in fixtures::all_fat() {
        let r = inspect_json(&fixture.path);
        let bundles = bundle_targets(&r);
        assert_eq!(
            bundles.len(),
            fixture.binary.bundles,
            "{}",
            fixture.path.display()
        );
        for (i, b) in r["hip_fatbin"]["bundles"]
            .as_array()
            .expect("bundles")
            .iter()
            .enumerate()
        {
            assert_eq!(
                b["compressed"],
                fixture.compressed,
                "{} bundle {i}",
                fixture.path.display()
            );
            let targets: Vec<&str> = bundles[i].iter().map(|(t, _)| t.as_str()).collect();
            let mut want: Vec<&str> = fixture.arches().to_vec();
            want.sort();
            assert_eq!(targets, want, "{} bundle {i}", fixture.path.display());
        }
        let wrappers = r["wrappers"].as_array().expect("wrappers");
        assert_eq!(
            wrappers.len(),
            fixture.binary.wrappers,
            "{}",
            fixture.path.display()
        );
        for w in wrappers {
            assert_eq!(w["magic"], "HIPF");
            let co = w["co_index"].as_u64().expect("co_index resolved");
            assert!((co as usize) < fixture.binary.bundles);
        }
        // Uncompressed clang-15 bundles: sizes agree with clang's own tool.
        if fixture.set == "clang15" && fixture.binary.bundles == 1 {
            let work = tempfile::tempdir().expect("tempdir");
            let section = work.path().join("s.bin");
            let status = Command::new("objcopy")
                .args(["-O", "binary", "--only-section=.hip_fatbin"])
                .arg(&fixture.path)
                .arg(&section)
                .status()
                .expect("objcopy");
            assert!(status.success());
            assert_eq!(bundler_view(&section, work.path()), bundles[0]);
        }
    }
}

#[test]
fn inspect_shows_the_marker_of_a_split_binary() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = fixtures::fixture("clang19/libmulti.so");
    let status = bins::command("rocm-kpack")
        .arg("split-binary")
        .arg(&input)
        .arg("--out")
        .arg(dir.path())
        .status()
        .expect("split-binary");
    assert!(status.success());
    let r = inspect_json(&dir.path().join("libmulti.so"));
    assert!(r["hip_fatbin"].is_null(), "{r:#}");
    assert_eq!(r["marker"]["kernel_name"], "libmulti.so");
    assert_eq!(
        r["marker"]["kpack_search_paths"],
        serde_json::json!([".kpack/libmulti.kpm", ".kpack/libmulti_@GFXARCH@.kpack"])
    );
    let mut co: Vec<u64> = r["wrappers"]
        .as_array()
        .expect("wrappers")
        .iter()
        .map(|w| {
            assert_eq!(w["magic"], "HIPK");
            assert_eq!(w["binary"], r["marker"]["address"]);
            w["co_index"].as_u64().expect("co_index")
        })
        .collect();
    co.sort();
    assert_eq!(co, [0, 1, 2]);
    let kpm = inspect_json(&dir.path().join(".kpack/libmulti.kpm"));
    assert_eq!(kpm["kind"], "manifest");
    assert_eq!(kpm["component"], "libmulti");
    for f in kpm["kpack_files"].as_array().expect("files") {
        let archive = dir
            .path()
            .join(".kpack")
            .join(f["filename"].as_str().expect("name"));
        assert_eq!(
            std::fs::metadata(&archive).expect("archive").len(),
            f["size"].as_u64().expect("size")
        );
        assert_eq!(
            debian::sha256_file(&archive).expect("hash"),
            f["sha256"].as_str().expect("sha")
        );
    }
}

#[test]
fn inspect_rejects_what_it_cannot_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let junk = dir.path().join("junk.bin");
    std::fs::write(&junk, b"not a format we know").expect("write");
    let mut truncated = std::fs::read(vector("test_zstd.kpack")).expect("vector");
    truncated.truncate(300);
    let cut = dir.path().join("cut.kpack");
    std::fs::write(&cut, &truncated).expect("write");
    for (path, needle) in [
        (junk, "not a .kpack archive"),
        (cut, "cut.kpack"),
        (dir.path().join("missing"), "missing"),
    ] {
        let out = bins::command("rocm-kpack")
            .arg("inspect")
            .arg(&path)
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(1), "{}", path.display());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{err}");
    }
}
