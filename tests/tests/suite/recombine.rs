//! `recombine` (the reduce step) on shards that are the split outputs of
//! separate builds: the fixture sources compiled here with Debian's clang-19
//! for disjoint target sets, the way family builds differ.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use rocm_kpack_format::archive::Archive;
use rocm_kpack_format::manifest::Manifest;
use rocm_kpack_loader::loader::{Cache, LoaderConfig};
use rocm_kpack_pkgspec::Spec;
use rocm_kpack_splitter::split::artifact::{split_artifact, MANIFEST_TXT};
use rocm_kpack_splitter::split::engine::SplitOptions;
use rocm_kpack_splitter::split::recombine::{recombine, RecombineOptions, RecombineReport};
use rocm_kpack_splitter::split::tree::split_tree;
use rocm_kpack_splitter::split::verify::{verify_tree, VerifyOptions};
use rocm_kpack_test_support::layouts::{check_pattern_finds, fat_code_objects};
use rocm_kpack_test_support::tree::{chain, listing, overlay, Node};
use rocm_kpack_test_support::{fixtures, gfxarch};

/// Compiles the fixture library and app for `arches` (build.sh's flags)
/// into `dir/lib/libfixture.so` and `dir/bin/app_pie`, plus one Tensile-style
/// database file per processor.
fn build_shard_tree(dir: &Path, arches: &[&str]) {
    let src = fixtures::fixtures_dir();
    let work = dir.join(".obj");
    fs::create_dir_all(&work).unwrap();
    fs::create_dir_all(dir.join("lib/rocblas/library")).unwrap();
    fs::create_dir_all(dir.join("bin")).unwrap();
    let offload: Vec<String> = arches
        .iter()
        .map(|a| format!("--offload-arch={a}"))
        .collect();
    let compile = |file: &str, pic: &str, cuid: &str, obj: &Path| {
        let out = Command::new("clang-19")
            .current_dir(&src)
            .args([
                "-x",
                "hip",
                "-nogpuinc",
                "-nogpulib",
                "-O2",
                "-fno-ident",
                "-mcode-object-version=6",
            ])
            .arg(format!("-ffile-prefix-map={}=.", src.display()))
            .args(&offload)
            .arg(pic)
            .arg(format!("-cuid={cuid}"))
            .args(["-c", file, "-o"])
            .arg(obj)
            .output()
            .expect("clang-19 (apt-get install clang-19 lld-19)");
        assert!(
            out.status.success(),
            "clang-19: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let link = |args: &[&str], objs: &[&Path], out_file: &Path| {
        let out = Command::new("clang-19")
            .args(["-fuse-ld=lld", "-Wl,--build-id=sha1"])
            .args(args)
            .args(objs)
            .arg(format!("-L{}", fixtures::stub_lib_dir().display()))
            .arg("-lamdhip64")
            .arg("-o")
            .arg(out_file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "link: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let lib_o = work.join("lib.o");
    compile("src/lib.hip", "-fPIC", "lib", &lib_o);
    link(
        &["-shared", "-Wl,-soname,libfixture.so"],
        &[&lib_o],
        &dir.join("lib/libfixture.so"),
    );
    let app_o = work.join("app.o");
    compile("src/app.hip", "-fPIE", "app", &app_o);
    link(&["-pie"], &[&app_o], &dir.join("bin/app_pie"));
    fs::remove_dir_all(&work).unwrap();
    for a in arches {
        let p = a.split(':').next().unwrap();
        if !p.ends_with("-generic") {
            fs::write(
                dir.join(format!("lib/rocblas/library/TensileLibrary_lazy_{p}.dat")),
                format!("{p}\n"),
            )
            .unwrap();
        }
    }
    fs::write(
        dir.join("lib/rocblas/library/TensileManifest.txt"),
        "shared\n",
    )
    .unwrap();
}

const SHARD_A: [&str; 3] = ["gfx1100", "gfx1101", "gfx11-generic"];
const SHARD_B: [&str; 3] = ["gfx90a:xnack+", "gfx90a:xnack-", "gfx1030"];
const SHARD_C: [&str; 2] = ["gfx1151", "gfx11-generic"];

/// Splits a shard tree built for `arches` into `out` (default spec).
fn shard(d: &Path, name: &str, arches: &[&str]) -> PathBuf {
    let tree = d.join(format!("{name}-tree"));
    build_shard_tree(&tree, arches);
    let out = d.join(name);
    split_tree(&tree, &out, &SplitOptions::default()).unwrap();
    out
}

fn spec(text: &str) -> Spec {
    Spec::from_toml_str(text).unwrap()
}

fn run(shards: &[&Path], out: &Path, spec: Spec) -> Result<RecombineReport, String> {
    let shards: Vec<PathBuf> = shards.iter().map(|p| p.to_path_buf()).collect();
    recombine(
        &shards,
        out,
        &RecombineOptions {
            spec,
            ..RecombineOptions::default()
        },
    )
    .map_err(|e| chain(&e))
}

/// The built-in default, spelled out.
const LENIENT: &str = "[validation]\ngeneric_must_match = false\n";

fn verify(root: &Path, targets: &[&str]) -> rocm_kpack_splitter::split::verify::VerifyReport {
    verify_tree(
        root,
        &VerifyOptions {
            targets: Some(targets.iter().map(|t| t.to_string()).collect()),
        },
    )
    .unwrap()
}

#[test]
fn two_family_builds_become_one_generic_and_every_group() {
    let d = tempfile::tempdir().unwrap();
    let a = shard(d.path(), "a", &SHARD_A);
    let b = shard(d.path(), "b", &SHARD_B);
    let out = d.path().join("out");
    let r = run(&[&a, &b], &out, spec(LENIENT)).unwrap();
    assert_eq!(
        r.outputs,
        [
            "generic",
            "gfx1030",
            "gfx11-generic",
            "gfx1100",
            "gfx1101",
            "gfx90a"
        ]
    );
    // The two builds' host-only binaries differ (layout follows the device
    // code size): reported, first shard's generic used.
    assert!(
        r.warnings.iter().any(|w| w.contains("contents differ")),
        "{:?}",
        r.warnings
    );
    // Every archive maps 1:1 onto an output archive: copied unchanged.
    assert_eq!(r.archives.len(), 10);
    assert!(r.archives.iter().all(|x| x.copied_from.is_some()));
    for component in ["libfixture", "app_pie"] {
        let m = Manifest::read(&out.join(format!("generic/.kpack/{component}.kpm"))).unwrap();
        let files: Vec<(&str, &str)> = m
            .kpack_files
            .iter()
            .map(|f| (f.filename.as_str(), f.family.as_str()))
            .collect();
        assert_eq!(
            files,
            [
                (format!("{component}_gfx1030.kpack").as_str(), "gfx1030"),
                (
                    format!("{component}_gfx11-generic.kpack").as_str(),
                    "gfx11-generic"
                ),
                (format!("{component}_gfx1100.kpack").as_str(), "gfx1100"),
                (format!("{component}_gfx1101.kpack").as_str(), "gfx1101"),
                (format!("{component}_gfx90a.kpack").as_str(), "gfx90a"),
            ]
        );
    }
    // Databases of both shards, in their groups; generic from shard a.
    assert!(out
        .join("gfx90a/lib/rocblas/library/TensileLibrary_lazy_gfx90a.dat")
        .is_file());
    assert!(out
        .join("gfx1100/lib/rocblas/library/TensileLibrary_lazy_gfx1100.dat")
        .is_file());
    assert_eq!(
        fs::read(out.join("generic/lib/libfixture.so")).unwrap(),
        fs::read(a.join("generic/lib/libfixture.so")).unwrap()
    );
    // Each group with the generic host code works for its targets, even
    // for device code that came from the other build.
    for (group, targets) in [
        (
            "gfx90a",
            &["gfx90a:sramecc+:xnack-", "gfx90a:sramecc-:xnack+"][..],
        ),
        ("gfx1030", &["gfx1030"][..]),
        ("gfx1100", &["gfx1100"][..]),
        ("gfx1101", &["gfx1101"][..]),
        ("gfx11-generic", &["gfx1151", "gfx1150", "gfx1103"][..]),
    ] {
        let o = d.path().join(format!("o-{group}"));
        overlay(&[&out.join("generic"), &out.join(group)], &o).unwrap();
        let v = verify(&o, targets);
        assert!(v.ok(), "{group}: {v}");
        let status = Command::new(o.join("bin/app_pie"))
            .env("LD_LIBRARY_PATH", fixtures::stub_lib_dir())
            .status()
            .unwrap();
        assert!(status.success());
    }
    let all = d.path().join("o-all");
    let trees: Vec<PathBuf> = r.outputs.iter().map(|n| out.join(n)).collect();
    overlay(
        &trees.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
        &all,
    )
    .unwrap();
    let v = verify_tree(&all, &VerifyOptions::default()).unwrap();
    assert!(v.ok(), "{v}");
}

/// Shard outputs overlaid without `recombine`, in either order: the last
/// shard's `.kpm` lists only its own archives, yet every target of both
/// builds loads (the marker's `@GFXARCH@` pattern reaches per-processor
/// archives) and `verify` passes.
#[test]
fn overlaid_shards_load_and_verify_in_either_order() {
    let d = tempfile::tempdir().unwrap();
    let a = shard(d.path(), "a", &SHARD_A);
    let b = shard(d.path(), "b", &SHARD_B);
    let trees = |s: &Path| -> Vec<PathBuf> {
        let mut t: Vec<PathBuf> = fs::read_dir(s)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        t.sort();
        t
    };
    let targets: Vec<&str> = SHARD_A.iter().chain(&SHARD_B).copied().collect();
    for (name, first, second) in [("ab", &a, &b), ("ba", &b, &a)] {
        let o = d.path().join(format!("overlay-{name}"));
        let all: Vec<PathBuf> = trees(first).into_iter().chain(trees(second)).collect();
        overlay(&all.iter().map(PathBuf::as_path).collect::<Vec<_>>(), &o).unwrap();
        // The manifest is the second shard's alone.
        let kpm = ".kpack/libfixture.kpm";
        assert_eq!(
            fs::read(o.join(kpm)).unwrap(),
            fs::read(second.join("generic").join(kpm)).unwrap(),
            "{name}"
        );
        for t in [None, Some(&targets[..])] {
            let v = verify_tree(
                &o,
                &VerifyOptions {
                    targets: t.map(|t| t.iter().map(|s| s.to_string()).collect()),
                },
            )
            .unwrap();
            assert!(v.ok(), "{name}: {v}");
            assert_eq!(
                v.binaries.iter().map(|b| b.resolved).sum::<usize>(),
                2 * targets.len(),
                "{name}"
            );
        }
        // Devices as a runtime reports them.
        assert!(
            verify(&o, &["gfx90a:sramecc+:xnack-", "gfx1103", "gfx1151"]).ok(),
            "{name}"
        );
        // Every code object, through our loader and through AMD's lookup,
        // is the one its own build compiled.
        let cache = Cache::with_config(LoaderConfig::default());
        for bin in ["lib/libfixture.so", "bin/app_pie"] {
            let host = o.join(bin);
            let marker = gfxarch::pattern_of(&host).unwrap().marker;
            for (shard_tree, arches) in [("a-tree", &SHARD_A[..]), ("b-tree", &SHARD_B[..])] {
                let fat = d.path().join(shard_tree).join(bin);
                let want = fat_code_objects(&fat).unwrap();
                for t in arches {
                    let got = cache.load_code_object(&marker, &host, 0, &[*t]).unwrap();
                    assert_eq!(
                        Some(&got.data),
                        want.get(&(0, t.to_string())),
                        "{name}: {bin} {t}"
                    );
                }
                assert_eq!(
                    check_pattern_finds(&host, &fat, arches),
                    Ok(arches.len()),
                    "{name}: {bin}"
                );
            }
        }
    }
}

#[test]
fn differing_generic_fails_when_the_spec_says_so() {
    let d = tempfile::tempdir().unwrap();
    let a = shard(d.path(), "a", &SHARD_A);
    let b = shard(d.path(), "b", &SHARD_B);
    let out = d.path().join("out");
    let e = run(
        &[&a, &b],
        &out,
        spec("[validation]\ngeneric_must_match = true\n"),
    )
    .unwrap_err();
    assert!(
        e.contains("bin/app_pie: contents differ") && e.contains("generic_must_match"),
        "{e}"
    );
    assert!(!out.exists(), "output left behind");
}

#[test]
fn duplicate_device_code_fails_or_warns() {
    let d = tempfile::tempdir().unwrap();
    let a = shard(d.path(), "a", &SHARD_A);
    let a2 = d.path().join("a2");
    split_tree(&d.path().join("a-tree"), &a2, &SplitOptions::default()).unwrap();
    let out = d.path().join("out");
    let e = run(&[&a, &a2], &out, Spec::builtin()).unwrap_err();
    // Database files are compared first.
    assert!(
        e.contains("duplicate device code") && e.contains("TensileLibrary_lazy_gfx110"),
        "{e}"
    );
    assert!(
        e.contains(&a.display().to_string()) && e.contains(&a2.display().to_string()),
        "{e}"
    );
    assert!(!out.exists());
    let e = run(
        &[&a, &a2],
        &out,
        spec("[validation]\nduplicate_device_code = \"warn\"\n"),
    )
    .unwrap();
    assert!(
        e.warnings
            .iter()
            .any(|w| w.contains("TensileLibrary_lazy_gfx1100.dat")),
        "{:?}",
        e.warnings
    );
    assert!(e
        .warnings
        .iter()
        .any(|w| w.contains("app_pie#0 for gfx1100")));
    // Kept the first: the output is shard a again.
    let same = |x: &Path, y: &Path| {
        assert_eq!(
            fs::read(x).unwrap(),
            fs::read(y).unwrap(),
            "{}",
            x.display()
        )
    };
    same(
        &out.join("gfx1100/.kpack/libfixture_gfx1100.kpack"),
        &a.join("gfx1100/.kpack/libfixture_gfx1100.kpack"),
    );

    // Identical generic-ISA code from two family builds is not a duplicate.
    let c = shard(d.path(), "c", &SHARD_C);
    let out2 = d.path().join("out2");
    let r = run(&[&a, &c], &out2, spec(LENIENT)).unwrap();
    assert!(
        !r.warnings.iter().any(|w| w.contains("duplicate")),
        "{:?}",
        r.warnings
    );
    let g = Archive::open(&out2.join("gfx1151/.kpack/libfixture_gfx1151.kpack")).unwrap();
    assert_eq!(g.gfx_arches(), ["gfx1151"]);
    // ... the generic ISA's archive is the first shard's, and every archive
    // is still a whole shard archive, copied unchanged.
    assert!(
        r.archives.iter().all(|x| x.copied_from.is_some()),
        "{:?}",
        r.archives
    );
    let from = |path: &str| {
        r.archives
            .iter()
            .find(|x| x.archive.path == std::path::Path::new(path))
            .and_then(|x| x.copied_from.clone())
            .unwrap()
    };
    assert!(from("gfx1151/.kpack/libfixture_gfx1151.kpack").starts_with(&c));
    assert!(from("gfx11-generic/.kpack/libfixture_gfx11-generic.kpack").starts_with(&a));
}

#[test]
fn shards_are_regrouped_into_the_specs_groups() {
    let d = tempfile::tempdir().unwrap();
    let a = shard(d.path(), "a", &SHARD_A);
    let b = shard(d.path(), "b", &SHARD_B);
    let out = d.path().join("out");
    let custom = "[validation]\ngeneric_must_match = false\nmissing_device_code = \"error\"\n\
        [[groups]]\nname = \"navi3\"\ntargets = [\"gfx1100\", \"gfx1101\"]\ngeneric_isas = [\"gfx11-generic\"]\n\
        [[groups]]\nname = \"dc\"\ntargets = [\"gfx90a\", \"gfx1030\"]\n";
    let r = run(&[&a, &b], &out, spec(custom)).unwrap();
    assert_eq!(r.outputs, ["dc", "generic", "gfx11-generic", "navi3"]);
    // Processor archives move to other trees (dc, navi3): rewritten,
    // their family relabelled; the generic ISA keeps its own tree: copied.
    for x in &r.archives {
        let generic_isa = x.archive.unit == "gfx11-generic";
        assert_eq!(x.copied_from.is_some(), generic_isa, "{x:?}");
    }
    let dc = Archive::open(&out.join("dc/.kpack/libfixture_gfx90a.kpack")).unwrap();
    assert_eq!(dc.gfx_arch_family(), "dc");
    assert_eq!(dc.gfx_arches(), ["gfx90a:xnack+", "gfx90a:xnack-"]);
    assert_eq!(
        Archive::open(&out.join("dc/.kpack/libfixture_gfx1030.kpack"))
            .unwrap()
            .gfx_arch_family(),
        "dc"
    );
    // Code objects are the shards' own bytes.
    let src = Archive::open(&b.join("gfx90a/.kpack/libfixture_gfx90a.kpack")).unwrap();
    assert_eq!(
        dc.kernel("lib/libfixture.so#0", "gfx90a:xnack-").unwrap(),
        src.kernel("lib/libfixture.so#0", "gfx90a:xnack-").unwrap()
    );
    assert!(out
        .join("dc/lib/rocblas/library/TensileLibrary_lazy_gfx1030.dat")
        .is_file());
    let o = d.path().join("o");
    overlay(&[&out.join("generic"), &out.join("dc")], &o).unwrap();
    assert!(verify(&o, &["gfx1030", "gfx90a:sramecc+:xnack+"]).ok());

    // A spec target no shard has code for, with missing_device_code = "error".
    let strict = format!("{custom}[[groups]]\nname = \"gfx94X\"\ntargets = [\"gfx942\"]\n");
    let e = run(&[&a, &b], &d.path().join("out2"), spec(&strict)).unwrap_err();
    assert!(
        e.contains("gfx942") && e.contains("missing_device_code"),
        "{e}"
    );
    // A shard target the spec does not cover.
    let narrow = "[validation]\ngeneric_must_match = false\n[[groups]]\nname = \"gfx110X\"\ntargets = [\"gfx1100\", \"gfx1101\"]\ngeneric_isas = [\"gfx11-generic\"]\n";
    let e = run(&[&a, &b], &d.path().join("out3"), spec(narrow)).unwrap_err();
    assert!(e.contains("gfx1030") || e.contains("gfx90a"), "{e}");
}

#[test]
fn one_shard_recombines_to_itself() {
    let d = tempfile::tempdir().unwrap();
    let a = shard(d.path(), "a", &SHARD_A);
    let out = d.path().join("out");
    let r = run(&[&a], &out, Spec::builtin()).unwrap();
    assert!(r.archives.iter().all(|x| x.copied_from.is_some()));
    let strip = |l: BTreeMap<String, Node>| -> BTreeMap<String, Node> {
        l.into_iter()
            .map(|(k, n)| match n {
                Node::File {
                    mode,
                    mtime,
                    sha256,
                    ..
                } => (
                    k,
                    Node::File {
                        mode,
                        mtime,
                        sha256,
                        inode: 0,
                    },
                ),
                other => (k, other),
            })
            .collect()
    };
    assert_eq!(strip(listing(&out).unwrap()), strip(listing(&a).unwrap()));
}

#[test]
fn artifact_shards() {
    let d = tempfile::tempdir().unwrap();
    let mut shards = Vec::new();
    for (name, arches, suffix) in [
        ("sa", &SHARD_A[..], "gfx1100"),
        ("sb", &SHARD_B[..], "gfx90a"),
    ] {
        let tree = d.path().join(format!("{name}-tree"));
        build_shard_tree(&tree, arches);
        let art = d.path().join(format!("{name}-in/fix_lib_{suffix}"));
        fs::create_dir_all(art.join("core/fix")).unwrap();
        fs::rename(&tree, art.join("core/fix/stage")).unwrap();
        fs::write(art.join(MANIFEST_TXT), "core/fix/stage\n").unwrap();
        let out = d.path().join(name);
        split_artifact(&art, &out, &SplitOptions::default()).unwrap();
        shards.push(out);
    }
    let out = d.path().join("out");
    let refs: Vec<&Path> = shards.iter().map(PathBuf::as_path).collect();
    let r = run(&refs, &out, spec(LENIENT)).unwrap();
    assert_eq!(
        r.outputs,
        [
            "fix_lib_generic",
            "fix_lib_gfx1030",
            "fix_lib_gfx11-generic",
            "fix_lib_gfx1100",
            "fix_lib_gfx1101",
            "fix_lib_gfx90a"
        ]
    );
    for n in &r.outputs {
        assert_eq!(
            fs::read_to_string(out.join(n).join(MANIFEST_TXT)).unwrap(),
            "core/fix/stage\n",
            "{n}"
        );
    }
    let m = Manifest::read(&out.join("fix_lib_generic/core/fix/stage/.kpack/fix_lib.kpm")).unwrap();
    assert_eq!(m.kpack_files.len(), 5);
    let o = d.path().join("o");
    overlay(
        &[&out.join("fix_lib_generic"), &out.join("fix_lib_gfx90a")],
        &o,
    )
    .unwrap();
    let v = verify(&o, &["gfx90a:sramecc+:xnack-"]);
    assert!(v.ok(), "{v}");
}
