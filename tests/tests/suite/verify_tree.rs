//! `verify` on split trees: what a runtime would hit is reported, each
//! problem naming the file.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::fs;
use std::path::{Path, PathBuf};

use rocm_kpack_format::manifest::Manifest;
use rocm_kpack_splitter::split::engine::SplitOptions;
use rocm_kpack_splitter::split::tree::split_tree;
use rocm_kpack_splitter::split::verify::{arch_list, verify_tree, VerifyOptions, VerifyReport};
use rocm_kpack_test_support::fixtures;
use rocm_kpack_test_support::tree::{self, overlay};

/// The fixture tree split and every output overlaid: (tempdir, overlay).
fn installed() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("in");
    tree::build(&input).unwrap();
    let out = d.path().join("out");
    split_tree(&input, &out, &SplitOptions::default()).unwrap();
    let mut trees: Vec<PathBuf> = fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    trees.sort();
    let all = d.path().join("all");
    overlay(
        &trees.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
        &all,
    )
    .unwrap();
    (d, all)
}

fn check(root: &Path, targets: Option<&[&str]>) -> VerifyReport {
    verify_tree(
        root,
        &VerifyOptions {
            targets: targets.map(|t| t.iter().map(|s| s.to_string()).collect()),
        },
    )
    .unwrap()
}

fn has(r: &VerifyReport, path: &str, needle: &str) -> bool {
    r.problems
        .iter()
        .any(|p| p.path == path && p.message.contains(needle))
}

#[test]
fn a_complete_install_verifies() {
    let (_d, all) = installed();
    let r = check(&all, None);
    assert!(r.ok(), "{r}");
    assert_eq!(r.binaries.len(), 6);
    assert_eq!(r.manifests.len(), 5);
    // Default targets: every arch the reachable archives carry.
    let libmulti = r
        .binaries
        .iter()
        .find(|b| b.path == "lib/libmulti.so.1.2")
        .unwrap();
    assert_eq!(libmulti.co_indices, [0, 1, 2]);
    assert_eq!(libmulti.targets.len(), fixtures::ARCHES_CLANG19.len());
    assert_eq!(libmulti.resolved, 3 * fixtures::ARCHES_CLANG19.len());
    let json: serde_json::Value = serde_json::to_value(&r).unwrap();
    assert_eq!(json["problems"].as_array().unwrap().len(), 0);
    assert_eq!(arch_list("gfx1101"), ["gfx1101", "gfx11-generic"]);
    assert_eq!(
        arch_list("gfx942:sramecc+:xnack-"),
        ["gfx942:sramecc+:xnack-", "gfx9-4-generic:sramecc+:xnack-"]
    );
    assert_eq!(arch_list("gfx90a:xnack-"), ["gfx90a:xnack-"]);
}

#[test]
fn missing_archive_names_binary_wrapper_and_target() {
    let (_d, all) = installed();
    fs::remove_file(all.join(".kpack/libmulti_gfx90a.kpack")).unwrap();
    let r = check(&all, Some(&["gfx90a:sramecc+:xnack-", "gfx1100"]));
    assert_eq!(r.problems.len(), 3, "{r}");
    for co in 0..3 {
        assert!(
            has(
                &r,
                "lib/libmulti.so.1.2",
                &format!("no code object for gfx90a:sramecc+:xnack- (lib/libmulti.so.1.2#{co})")
            ),
            "{r}"
        );
    }
    assert!(r
        .not_installed
        .contains(&".kpack/libmulti_gfx90a.kpack".to_string()));
}

#[test]
fn orphans_unlisted_archives_and_bad_manifests() {
    let (_d, all) = installed();
    // The binary is gone: its archive entries belong to nobody.
    fs::remove_file(all.join("bin/app_nopie")).unwrap();
    // An archive no manifest lists and no marker's pattern reaches.
    fs::copy(
        all.join(".kpack/app_pie_gfx942.kpack"),
        all.join(".kpack/stray_gfx942.kpack"),
    )
    .unwrap();
    // A manifest entry that does not match its archive (another archive's bytes).
    fs::copy(
        all.join(".kpack/app_rdc_gfx1030.kpack"),
        all.join(".kpack/app_rdc_gfx90a.kpack"),
    )
    .unwrap();
    // A manifest that is not one.
    fs::write(all.join(".kpack/libfixture.kpm"), b"\x92garbage").unwrap();
    let r = check(&all, None);
    assert!(
        has(&r, ".kpack/app_nopie_gfx1100.kpack", "bin/app_nopie#0"),
        "{r}"
    );
    assert!(
        has(
            &r,
            ".kpack/app_nopie_gfx1100.kpack",
            "belongs to no split binary"
        ),
        "{r}"
    );
    assert!(
        has(&r, ".kpack/stray_gfx942.kpack", "listed in no .kpm"),
        "{r}"
    );
    assert!(
        has(&r, ".kpack/app_rdc.kpm", "app_rdc_gfx90a.kpack: sha256"),
        "{r}"
    );
    assert!(
        has(&r, ".kpack/app_rdc.kpm", "archive family \"gfx1030\""),
        "{r}"
    );
    assert!(
        has(&r, ".kpack/libfixture.kpm", "unreadable manifest"),
        "{r}"
    );
    assert!(has(&r, ".kpack/stray_gfx942.kpack", "bin/app_pie#0"), "{r}");
    // Without its manifest, the marker's pattern still finds every
    // per-processor archive: the binary resolves and its archives, though
    // unlisted, are accepted.
    assert!(
        !r.problems
            .iter()
            .any(|p| p.path.contains("libfixture") && p.path != ".kpack/libfixture.kpm"),
        "{r}"
    );
    let libfixture = r
        .binaries
        .iter()
        .find(|b| b.path == "lib/libfixture.so.1.2")
        .unwrap();
    assert_eq!(libfixture.resolved, fixtures::ARCHES_CLANG19.len());
    let text = r.to_string();
    assert!(text.contains("problem(s):"), "{text}");
}

#[test]
fn fat_binaries_are_noted_not_faulted_and_bad_roots_are_errors() {
    let d = tempfile::tempdir().unwrap();
    fs::create_dir_all(d.path().join("lib")).unwrap();
    fs::copy(
        fixtures::fixture("clang19/libfixture.so"),
        d.path().join("lib/libfixture.so"),
    )
    .unwrap();
    let r = check(d.path(), Some(&["gfx1100"]));
    assert!(r.ok(), "{r}");
    assert_eq!(r.fat_binaries, ["lib/libfixture.so"]);
    assert!(verify_tree(
        &d.path().join("lib/libfixture.so"),
        &VerifyOptions::default()
    )
    .is_err());
    assert!(verify_tree(&d.path().join("missing"), &VerifyOptions::default()).is_err());
    // A manifest in a tree without archives: entries noted as not installed.
    let (_d2, all) = installed();
    let m = Manifest::read(&all.join(".kpack/app_pie.kpm")).unwrap();
    assert_eq!(m.kpack_files.len(), 6);
}

/// The command line: `split`, `verify` (exit status), `spec check` (line
/// numbers), `spec show` round trip, `split --dry-run` writes nothing.
#[test]
fn command_line() {
    use rocm_kpack_test_support::bins;
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("in");
    tree::build(&input).unwrap();
    let out = d.path().join("out");
    let dry = bins::command("rocm-kpack")
        .arg("split")
        .arg(&input)
        .arg("--out")
        .arg(&out)
        .arg("--dry-run")
        .output()
        .unwrap();
    assert!(
        dry.status.success(),
        "{}",
        String::from_utf8_lossy(&dry.stderr)
    );
    let text = String::from_utf8_lossy(&dry.stdout);
    assert!(
        text.contains("split    lib/libmulti.so.1.2 -> generic/lib/libmulti.so.1.2"),
        "{text}"
    );
    assert!(
        text.contains("lib/aotriton/kernels/gfx942/attn_fwd.hsaco -> gfx942/"),
        "{text}"
    );
    assert!(!out.exists());
    let s = bins::command("rocm-kpack")
        .arg("split")
        .arg(&input)
        .arg("--out")
        .arg(&out)
        .args(["--jobs", "2", "--json"])
        .output()
        .unwrap();
    assert!(s.status.success(), "{}", String::from_utf8_lossy(&s.stderr));
    let report: serde_json::Value = serde_json::from_slice(&s.stdout).unwrap();
    assert_eq!(report["binaries"].as_array().unwrap().len(), 5);
    let o = d.path().join("o");
    overlay(
        &[
            &out.join("generic"),
            &out.join("gfx1100"),
            &out.join("gfx11-generic"),
        ],
        &o,
    )
    .unwrap();
    let ok = bins::command("rocm-kpack")
        .arg("verify")
        .arg(&o)
        .args(["--target", "gfx1100", "--target", "gfx1102"])
        .status()
        .unwrap();
    assert!(ok.success());
    // Problems in the tree: exit 4 (the shared table), not 1.
    let bad = bins::command("rocm-kpack")
        .arg("verify")
        .arg(&o)
        .args(["--target", "gfx1030", "--json"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(4));
    let v: serde_json::Value = serde_json::from_slice(&bad.stdout).unwrap();
    assert_eq!(v["problems"].as_array().unwrap().len(), 8);

    // A bare processor means what its agents present, as for the fetcher:
    // gfx942's code here is gfx942:sramecc+, which an sramecc+ agent loads.
    let o942 = d.path().join("o942");
    overlay(&[&out.join("generic"), &out.join("gfx942")], &o942).unwrap();
    let bare = bins::command("rocm-kpack")
        .arg("verify")
        .arg(&o942)
        .args(["--target", "gfx942", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        bare.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&bare.stdout)
    );
    let v: serde_json::Value = serde_json::from_slice(&bare.stdout).unwrap();
    assert_eq!(
        v["binaries"][0]["resolved"], 2,
        "both xnack settings of the sramecc+ agent"
    );
    // A target that leaves unset a feature the code specifies gets the
    // spelling that would match.
    let hint = bins::command("rocm-kpack")
        .arg("verify")
        .arg(&o942)
        .args(["--target", "gfx942:xnack-"])
        .output()
        .unwrap();
    assert_eq!(hint.status.code(), Some(4));
    let text = String::from_utf8_lossy(&hint.stdout);
    assert!(text.contains("did you mean `gfx942:sramecc+"), "{text}");
    // A tree that cannot be read is a failure (1), not a problem list.
    let missing = bins::command("rocm-kpack")
        .arg("verify")
        .arg(d.path().join("nowhere"))
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));

    let spec = d.path().join("spec.toml");
    fs::write(&spec, "[[groups]]\nname = \"a\"\ntargets = [\"gfx1100\"]\n[[groups]]\nname = \"b\"\ntargets = [\"gfx1100\"]\n").unwrap();
    let c = bins::command("rocm-kpack")
        .args(["spec", "check"])
        .arg(&spec)
        .output()
        .unwrap();
    assert_eq!(c.status.code(), Some(1));
    let err = String::from_utf8_lossy(&c.stderr);
    assert!(
        err.contains("line 6, column 12") && err.contains("two groups"),
        "{err}"
    );
    let shown = bins::command("rocm-kpack")
        .args(["spec", "show"])
        .output()
        .unwrap();
    assert!(shown.status.success());
    fs::write(&spec, &shown.stdout).unwrap();
    let c = bins::command("rocm-kpack")
        .args(["spec", "check"])
        .arg(&spec)
        .output()
        .unwrap();
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stderr));
    assert!(
        String::from_utf8_lossy(&c.stdout).contains(&format!(
            "{} device groups",
            rocm_kpack_pkgspec::Spec::builtin().groups.len()
        )),
        "{}",
        String::from_utf8_lossy(&c.stdout)
    );
}
