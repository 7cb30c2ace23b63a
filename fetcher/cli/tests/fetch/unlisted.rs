//! status, doctor and verify on a tree without a `.kpm`: the committed
//! reference layout (`tests/fixtures/layouts/reference`: per-target-id
//! archives, a host library whose marker holds only a `@GFXARCH@` pattern)
//! installed below a test root, on the sysfs fixture machines. What the
//! commands say is found is checked against AMD's lookup
//! (`rocm_kpack_test_support::gfxarch`, written from the reference
//! library's rule, not from ours); then the archives for the machine's GPU
//! are removed, and all three report each one and exit 4. With a real dpkg
//! database (packages built by dpkg-deb, installed by dpkg --root), the
//! device package is named: the owner of a lost archive, or our naming
//! rule once the device package is gone.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use rocm_kpack_format::archive::Archive;
use rocm_kpack_format::layout::{archive_file_name, GFXARCH_PLACEHOLDER, KPACK_DIR};
use rocm_kpack_format::target::TargetId;
use rocm_kpack_loader::select::may_load;
use rocm_kpack_pkgspec::{NameKind, Spec};
use rocm_kpack_test_support::{fixtures, gfxarch};
use serde_json::Value;

use crate::{list_dir, run, Env};

/// The install prefix below the test root (a default scan location).
const PREFIX: &str = "opt/rocm";
const LIB: &str = "lib/libfixture.so";

/// An [`Env`] whose `opt/rocm` holds the reference layout, and beside the
/// library what a hostile or broken tree may hold: a symlink to a device,
/// a FIFO, an ELF file cut short (a warning; nothing hangs or fails).
fn reference_env() -> Env {
    let env = Env::new();
    let src = fixtures::fixture("layouts/reference");
    let prefix = env.root.join(PREFIX);
    fs::create_dir_all(prefix.join("lib")).expect("mkdir lib");
    fs::copy(src.join(LIB), prefix.join(LIB)).expect("copy host library");
    for name in list_dir(&src.join(KPACK_DIR)) {
        fs::copy(src.join(KPACK_DIR).join(&name), env.kpack.join(&name)).expect("copy archive");
    }
    let bytes = fs::read(src.join(LIB)).expect("read");
    fs::write(prefix.join("lib/libcut.so"), &bytes[..4096]).expect("write");
    std::os::unix::fs::symlink("/dev/zero", prefix.join("lib/libzero.so")).expect("symlink");
    let fifo = std::ffi::CString::new(
        prefix
            .join("lib/libfifo.so")
            .into_os_string()
            .into_encoded_bytes(),
    )
    .expect("path");
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0, "mkfifo");
    env
}

fn sysfs(machine: &str) -> String {
    fixtures::machine(machine).to_string_lossy().into_owned()
}

/// `SUB --root ROOT --sysfs-root MACHINE EXTRA --json`: (exit code, JSON).
fn json(env: &Env, sub: &str, machine: &str, extra: &[&str]) -> (i32, Value) {
    let sysfs = sysfs(machine);
    let mut args = vec!["--sysfs-root", sysfs.as_str(), "--json"];
    args.extend(extra);
    let (code, stdout, stderr) = run(env.sub(sub, &args));
    let value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{sub} --json: {e}\n{stdout}\n{stderr}"));
    (code, value)
}

fn target(v: &Value) -> TargetId {
    TargetId::parse(v.as_str().expect("target string")).expect("target id")
}

/// For each ISA a process may present on `machine`, the archive AMD's
/// lookup opens through the installed library's marker (`None` where its
/// narrower name expansion finds nothing: it tries `gfx90a:sramecc+:xnack-`
/// and `gfx90a`, not the `gfx90a:xnack-` our loader also accepts).
fn amd_lookup(env: &Env, machine: &str) -> BTreeMap<String, Option<gfxarch::Found>> {
    let binary = env.root.join(PREFIX).join(LIB);
    let pattern = gfxarch::pattern_of(&binary).expect("marker").pattern;
    gfxarch::process_devices(machine)
        .into_iter()
        .map(|device| (device.to_string(), gfxarch::lookup(&pattern, &device)))
        .collect()
}

fn same_file(a: &Path, b: &Path) -> bool {
    fs::canonicalize(a).expect("canonicalize") == fs::canonicalize(b).expect("canonicalize")
}

/// Per machine: complete, each process ISA served by the archive AMD's
/// lookup opens; without those archives, each one missing, exit 4 from
/// status, doctor and verify, in JSON and in text.
#[test]
fn reference_tree_status_follows_the_markers() {
    // gfx90a:sramecc+ (xnack either way; served by the gfx90a:xnack±
    // archives, which AMD's loader reaches since it expands the pattern
    // with every compatible variant), gfx1100, and gfx1102 (served only by
    // the gfx11-generic archive).
    for (machine, amd_finds) in [("mi210", true), ("rx7900xtx", true), ("w7500", true)] {
        let env = reference_env();
        let amd = amd_lookup(&env, machine);

        let (code, out) = json(&env, "status", machine, &[]);
        assert_eq!(code, 0, "{machine}: {out:#}");
        let warnings = out["warnings"].to_string();
        assert!(
            warnings.contains("libcut.so") && warnings.contains("past the end"),
            "{machine}: {out:#}"
        );
        assert!(
            !warnings.contains("libfifo.so") && !warnings.contains("libzero.so"),
            "{machine}: {out:#}"
        );
        let unlisted = out["unlisted"].as_array().expect("unlisted");
        assert_eq!(unlisted.len(), 1, "{machine}: {out:#}");
        let b = &unlisted[0];
        assert!(same_file(
            Path::new(b["binary"].as_str().expect("binary")),
            &env.root.join(PREFIX).join(LIB)
        ));
        assert_eq!(b["complete"], true, "{machine}: {b:#}");
        assert_eq!(b["missing"].as_array().expect("missing").len(), 0);
        let found = b["found"].as_array().expect("found");
        assert_eq!(
            found.len(),
            amd.len(),
            "{machine}: one per process ISA: {b:#}"
        );
        let mut removed: Vec<PathBuf> = Vec::new();
        for f in found {
            let t = target(&f["target"]).to_string();
            let archive = PathBuf::from(f["archive"].as_str().expect("archive"));
            let arch = f["arch"].as_str().expect("arch");
            let want = amd
                .get(&t)
                .unwrap_or_else(|| panic!("{machine}: {t} is not a process ISA of AMD's: {amd:?}"));
            if let Some(want) = want {
                assert!(
                    same_file(&archive, &want.archive),
                    "{machine} {t}: {f:#} vs {want:?}"
                );
                assert_eq!(arch, want.key, "{machine} {t}");
            }
            let opened = Archive::open(&archive).expect("open the archive found");
            assert!(opened.has_arch(arch), "{machine} {t}: {f:#}");
            assert!(
                TargetId::parse(&t).is_ok_and(|local| may_load(&local, arch)),
                "{machine} {t}: {arch}"
            );
            if !removed.contains(&archive) {
                removed.push(archive);
            }
        }
        assert_eq!(
            amd.values().all(Option::is_some),
            amd_finds,
            "{machine}: {amd:?}"
        );

        // Remove what the GPU loads, then what it falls back to (a
        // generic ISA), until every process ISA misses.
        let mut rounds = 0;
        let (code, out) = loop {
            for path in &removed {
                let _ = fs::remove_file(path);
            }
            let (code, out) = json(&env, "status", machine, &[]);
            let found = out["unlisted"][0]["found"].as_array().expect("found");
            if found.is_empty() {
                break (code, out);
            }
            rounds += 1;
            assert!(rounds < 4, "{machine}: {out:#}");
            removed.extend(
                found
                    .iter()
                    .map(|f| PathBuf::from(f["archive"].as_str().expect("archive"))),
            );
        };
        assert_eq!(code, 4, "{machine}: {out:#}");
        let b = &out["unlisted"][0];
        assert_eq!(b["complete"], false);
        let missing = b["missing"].as_array().expect("missing");
        assert_eq!(missing.len(), amd.len(), "{machine}: {b:#}");
        for m in missing {
            let t = target(&m["target"]).to_string();
            let searched: Vec<&str> = m["searched"]
                .as_array()
                .expect("searched")
                .iter()
                .map(|s| s.as_str().expect("path"))
                .collect();
            assert!(
                removed.iter().any(|gone| searched
                    .iter()
                    .any(|s| Path::new(s).file_name() == gone.file_name())),
                "{machine} {t}: the search names a removed archive ({removed:?}): {searched:?}"
            );
            let pattern = env
                .root
                .join(PREFIX)
                .join(KPACK_DIR)
                .join(archive_file_name("libfixture", GFXARCH_PLACEHOLDER));
            let candidates = gfxarch::candidates(&pattern.to_string_lossy(), &target(&m["target"]));
            for c in candidates {
                assert!(
                    searched
                        .iter()
                        .any(|s| Path::new(s).file_name() == Path::new(&c).file_name()),
                    "{machine} {t}: AMD's lookup tries {c}; the report lists {searched:?}"
                );
            }
            // No package database below the root: nobody to name.
            assert!(m["provided_by"].is_null(), "{m:#}");
        }
        let (code, text, _) = run(env.sub("status", &["--sysfs-root", &sysfs(machine)]));
        assert_eq!(code, 4, "{text}");
        assert!(
            text.contains("(no .kpm)") && text.contains("missing for "),
            "{text}"
        );
        for path in &removed {
            let name = path.file_name().expect("name").to_string_lossy();
            assert!(
                text.contains(&*name),
                "{machine}: {name} not named:\n{text}"
            );
        }

        let (code, out) = json(&env, "doctor", machine, &[]);
        assert_eq!(code, 4, "{out:#}");
        let problems: Vec<&Value> = out["checks"]
            .as_array()
            .expect("checks")
            .iter()
            .filter(|c| {
                c["outcome"] == "problem"
                    && c["check"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("coverage "))
            })
            .collect();
        assert_eq!(problems.len(), amd.len(), "{machine}: {out:#}");

        let (code, out) = json(&env, "verify", machine, &[]);
        assert_eq!(code, 4, "{out:#}");
        assert_eq!(out["problems"].as_u64(), Some(amd.len() as u64), "{out:#}");
        // Another GPU's archives are all there: verify --target passes.
        let (code, out) = json(&env, "verify", machine, &["--target", "gfx1030"]);
        assert_eq!(code, 0, "{out:#}");
        assert_eq!(out["unlisted"][0]["complete"], true, "{out:#}");
    }
}

/// A `.deb` named `name` holding `files` (path below the root -> source),
/// built by dpkg-deb.
fn deb(dir: &Path, name: &str, files: &[(String, PathBuf)]) -> PathBuf {
    let tree = dir.join(format!("{name}.tree"));
    fs::create_dir_all(tree.join("DEBIAN")).expect("mkdir");
    fs::write(
        tree.join("DEBIAN/control"),
        format!("Package: {name}\nVersion: 1.0\nArchitecture: all\nMaintainer: Test <t@example.org>\nDescription: status test\n"),
    )
    .expect("control");
    for (dest, src) in files {
        let path = tree.join(dest);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::copy(src, &path).expect("copy");
    }
    let out = dir.join(format!("{name}.deb"));
    let status = Command::new("dpkg-deb")
        .args(["--root-owner-group", "--build"])
        .arg(&tree)
        .arg(&out)
        .status()
        .expect("dpkg-deb");
    assert!(status.success());
    out
}

fn dpkg(root: &Path, args: &[&str]) {
    let status = Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .args(["--force-not-root", "--force-script-chrootless"])
        .args(args)
        .status()
        .expect("dpkg");
    assert!(status.success(), "dpkg {args:?}");
}

/// The device package comes from dpkg's database while it is installed
/// (an archive it owns was lost: reinstall it), from the naming rule once
/// it is removed.
#[test]
fn reference_tree_status_names_the_device_package() {
    let env = Env::new();
    let src = fixtures::fixture("layouts/reference");
    let root = &env.root;
    for d in [
        "var/lib/dpkg/updates",
        "var/lib/dpkg/info",
        "var/lib/dpkg/triggers",
    ] {
        fs::create_dir_all(root.join(d)).expect("mkdir");
    }
    fs::write(root.join("var/lib/dpkg/status"), "").expect("status");
    fs::write(root.join("var/lib/dpkg/available"), "").expect("available");
    let group = Spec::builtin().group_for("gfx90a").expect("group")[0]
        .name
        .clone();
    let device_name =
        Spec::builtin()
            .naming
            .render(NameKind::DebDevice, "libfixture", Some(&group));
    let archives: Vec<String> = list_dir(&src.join(KPACK_DIR))
        .into_iter()
        .filter(|n| n.contains("gfx90a"))
        .collect();
    assert_eq!(archives.len(), 2, "{archives:?}");
    let work = env.tmp.path().join("debs");
    fs::create_dir_all(&work).expect("mkdir");
    let host = deb(
        &work,
        "libfixture",
        &[(format!("{PREFIX}/{LIB}"), src.join(LIB))],
    );
    let device = deb(
        &work,
        &device_name,
        &archives
            .iter()
            .map(|n| {
                (
                    format!("{PREFIX}/{KPACK_DIR}/{n}"),
                    src.join(KPACK_DIR).join(n),
                )
            })
            .collect::<Vec<_>>(),
    );
    dpkg(
        root,
        &[
            "-i",
            host.to_str().expect("utf-8"),
            device.to_str().expect("utf-8"),
        ],
    );

    let (code, out) = json(&env, "status", "mi210", &[]);
    assert_eq!(code, 0, "{out:#}");
    assert_eq!(out["unlisted"][0]["package"], "libfixture", "{out:#}");

    // Lost from disk, still in dpkg's database.
    let lost = archives
        .iter()
        .find(|n| n.contains("xnack-"))
        .expect("xnack- archive");
    fs::remove_file(env.kpack.join(lost)).expect("rm");
    let (code, out) = json(&env, "status", "mi210", &[]);
    assert_eq!(code, 4, "{out:#}");
    let missing = out["unlisted"][0]["missing"].as_array().expect("missing");
    assert_eq!(missing.len(), 1, "{out:#}");
    assert_eq!(
        missing[0]["provided_by"]["package"],
        device_name.as_str(),
        "{out:#}"
    );
    assert_eq!(missing[0]["provided_by"]["source"], "dpkg", "{out:#}");
    let (_, text, _) = run(env.sub("status", &["--sysfs-root", &sysfs("mi210")]));
    assert!(text.contains(&format!("reinstall {device_name}")), "{text}");

    // Removed package: the naming rule tells.
    dpkg(root, &["-r", &device_name]);
    let (code, out) = json(&env, "status", "mi210", &[]);
    assert_eq!(code, 4, "{out:#}");
    let missing = out["unlisted"][0]["missing"].as_array().expect("missing");
    assert_eq!(missing.len(), 2, "{out:#}");
    for m in missing {
        assert_eq!(m["provided_by"]["package"], device_name.as_str(), "{m:#}");
        assert_eq!(m["provided_by"]["source"], "naming-rule", "{m:#}");
    }
    let (code, text, _) = run(env.sub("doctor", &["--sysfs-root", &sysfs("mi210")]));
    assert_eq!(code, 4, "{text}");
    assert!(text.contains(&device_name), "{text}");
}
