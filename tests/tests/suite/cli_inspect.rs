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
    assert_eq!(targets, debian::LIBROCRAND_TARGETS);
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

/// The names in a `package`/`split-package` JSON report of the device
/// packages (not the generic, transitional or meta ones) of one format.
fn device_packages(report: &Value, format: &str) -> Vec<String> {
    let mut v: Vec<String> = report["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter(|p| p["format"] == format && !p["group"].is_null())
        .filter(|p| p.get("transitional").is_none() && p.get("meta").is_none())
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    v.sort();
    v
}

fn expected(report: &Value) -> Vec<String> {
    let mut v: Vec<String> = report["expects"]
        .as_array()
        .expect("expects")
        .iter()
        .filter_map(|e| e["name"].as_str().map(str::to_owned))
        .collect();
    v.sort();
    v
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .expect("list")
        .iter()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

/// `inspect` on packages, ours and AMD's, of every kind: the targets a
/// package carries and how (fat binaries, archives, declared targets),
/// and for a generic package the device packages it expects, named as
/// the packages written (or as AMD names its own).
#[test]
fn inspect_names_the_targets_and_device_packages_of_packages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let w = dir.path();
    rocm_kpack_test_support::packages::cli_inputs(w, "libmulti.so");
    let rocm_kpack = |args: &[&str]| -> Value {
        let out = bins::command("rocm-kpack")
            .args(args)
            .current_dir(w)
            .output()
            .expect("run rocm-kpack");
        assert!(
            out.status.success(),
            "rocm-kpack {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    rocm_kpack(&["split", "tree", "--out", "split", "--json"]);
    let built = rocm_kpack(&[
        "package",
        "split",
        "--out",
        "pkgs",
        "--name",
        "libmulti1",
        "--version",
        "1.0",
        "--format",
        "deb,rpm,wheel",
        "--json",
    ]);
    let path_of = |format: &str, name: &str| -> String {
        built["packages"]
            .as_array()
            .expect("packages")
            .iter()
            .find(|p| p["format"] == format && p["name"] == name)
            .and_then(|p| p["path"].as_str())
            .unwrap_or_else(|| panic!("no {format} {name}"))
            .to_owned()
    };
    // Generic packages expect exactly the device packages written.
    for format in ["deb", "rpm"] {
        let r = rocm_kpack(&["inspect", "--json", &path_of(format, "libmulti1")]);
        assert_eq!(r["kind"], "package");
        assert_eq!(r["format"], format);
        assert_eq!(r["role"], "generic", "{r:#}");
        assert_eq!(expected(&r), device_packages(&built, format), "{format}");
        assert_eq!(strings(&r["split_binaries"]), ["lib/libmulti.so"]);
    }
    // The generic wheel: its device-<target> extras (the generic ISA's
    // wheel comes with the others, not as an extra).
    let r = rocm_kpack(&["inspect", "--json", &path_of("wheel", "libmulti1")]);
    assert_eq!(r["role"], "generic");
    let wheels: Vec<String> = device_packages(&built, "wheel")
        .into_iter()
        .filter(|n| !n.ends_with("-generic"))
        .collect();
    assert_eq!(expected(&r), wheels);
    // Device packages: their archives and targets.
    for (format, name) in [
        ("deb", "libmulti1-gfx90a"),
        ("rpm", "libmulti1-gfx90a"),
        ("wheel", "libmulti1-device-gfx90a"),
    ] {
        let r = rocm_kpack(&["inspect", "--json", &path_of(format, name)]);
        assert_eq!(r["role"], "device", "{format}: {r:#}");
        assert_eq!(strings(&r["targets"]), ["gfx90a:xnack+", "gfx90a:xnack-"]);
        assert_eq!(r["archives"][0]["group"], "gfx90a");
        let declared = if format == "wheel" {
            vec![]
        } else {
            vec!["gfx90a".to_owned()]
        };
        assert_eq!(strings(&r["declared_targets"]), declared, "{format}");
    }
    // A fat package: its fat binary's targets (Debian's librocrand).
    let deb = rocm_kpack_test_support::packages::rocrand_deb();
    let r = rocm_kpack(&["inspect", "--json", deb.to_str().expect("UTF-8")]);
    assert_eq!(r["role"], "fat");
    assert_eq!(strings(&r["targets"]), debian::LIBROCRAND_TARGETS);
    assert_eq!(
        r["fat_binaries"][0]["path"],
        "usr/lib/x86_64-linux-gnu/librocrand.so.1.1"
    );
    // AMD's native host packages (no manifest): one device package per
    // target of AMD's table, named as AMD names them.
    let set = rocm_kpack_test_support::amd_native::write_native_set(
        &w.join("amd"),
        "amdrocm-fft",
        "8.2.0-1",
        &["gfx942", "gfx1100"],
    );
    for host in [&set.host.deb, &set.host.rpm] {
        let r = rocm_kpack(&["inspect", "--json", host.to_str().expect("UTF-8")]);
        assert_eq!(r["role"], "generic", "{r:#}");
        let names = expected(&r);
        assert_eq!(names.len(), rocm_kpack_pkgspec::amd::DEVICE_TARGETS.len());
        for (_, device) in &set.devices {
            assert!(names.contains(&device.name), "{} in {names:?}", device.name);
        }
    }
    // AMD's wheels: the device-<target> extras of the base.
    let whl = w.join("torch-2.9.1-py3-none-any.whl");
    let metadata = "Metadata-Version: 2.1\nName: torch\nVersion: 2.9.1\n\
        Provides-Extra: device-gfx942\nProvides-Extra: device-gfx1100\nProvides-Extra: device-all\n\
        Requires-Dist: amd-torch-device-gfx942==2.9.1; extra == \"device-gfx942\"\n\
        Requires-Dist: amd-torch-device-gfx1100==2.9.1; extra == \"device-gfx1100\"\n\
        Requires-Dist: amd-torch-device-gfx942==2.9.1; extra == \"device-all\"\n\
        Requires-Dist: filelock\n";
    rocm_kpack_test_support::packages::write_wheel(
        &whl,
        &[
            ("torch/__init__.py".into(), b"\n".to_vec()),
            (
                "torch-2.9.1.dist-info/METADATA".into(),
                metadata.as_bytes().to_vec(),
            ),
            (
                "torch-2.9.1.dist-info/WHEEL".into(),
                b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n".to_vec(),
            ),
        ],
        "torch-2.9.1.dist-info",
        None,
    );
    let r = rocm_kpack(&["inspect", "--json", whl.to_str().expect("UTF-8")]);
    assert_eq!(r["role"], "generic");
    assert_eq!(
        expected(&r),
        ["amd-torch-device-gfx1100", "amd-torch-device-gfx942"]
    );
    // The text says the same.
    let out = bins::command("rocm-kpack")
        .arg("inspect")
        .arg(path_of("deb", "libmulti1"))
        .current_dir(w)
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && text.contains("expects 6 device packages")
            && text.contains("libmulti1-gfx90a "),
        "{text}"
    );
}
