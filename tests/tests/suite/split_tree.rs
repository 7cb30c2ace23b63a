//! `split` of install trees and artifact directories on real inputs: the
//! fixture tree (built from the committed fat fixtures) and Debian's
//! librocrand, both as a Debian tree and laid out as a build artifact.
//! Outputs are checked the way they are used: overlay generic + one group
//! with `cp -a`, compare with the input, and resolve every code object
//! through the runtime loader (`verify`).
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use rocm_kpack_format::archive::{Archive, DEFAULT_ZSTD_LEVEL, RELEASE_ZSTD_LEVEL};
use rocm_kpack_format::manifest::Manifest;
use rocm_kpack_pkgspec::Spec;
use rocm_kpack_splitter::elf::inspect::inspect_elf;
use rocm_kpack_splitter::elf::{classify, Classification};
use rocm_kpack_splitter::split::artifact::{split_artifact, MANIFEST_TXT};
use rocm_kpack_splitter::split::batch::split_batch;
use rocm_kpack_splitter::split::engine::{SplitOptions, SplitReport};
use rocm_kpack_splitter::split::output::ArchiveOutput;
use rocm_kpack_splitter::split::tree::split_tree;
use rocm_kpack_splitter::split::verify::{verify_tree, VerifyOptions};
use rocm_kpack_test_support::layouts::check_pattern_finds;
use rocm_kpack_test_support::tree::{self, chain, listing, overlay, Node};
use rocm_kpack_test_support::{debian, fixtures};

fn split(input: &Path, out: &Path, opts: &SplitOptions) -> SplitReport {
    match split_tree(input, out, opts) {
        Ok(r) => r,
        Err(e) => panic!("split {}: {}", input.display(), chain(&e)),
    }
}

fn verify(root: &Path, targets: &[&str]) -> rocm_kpack_splitter::split::verify::VerifyReport {
    let opts = VerifyOptions {
        targets: Some(targets.iter().map(|t| t.to_string()).collect()),
    };
    verify_tree(root, &opts).unwrap()
}

fn is_split_binary(path: &Path) -> bool {
    let data = fs::read(path).unwrap();
    matches!(classify(&data).unwrap(), Classification::AlreadySplit(_))
}

/// Device trees of the fixture tree overlaid together, the targets (as a
/// GPU reports them) they must serve, and one they must not.
const GROUP_TARGETS: [(&[&str], &[&str], &str); 8] = [
    (&["gfx1030"], &["gfx1030"], "gfx1100"),
    (&["gfx1100"], &["gfx1100"], "gfx1101"),
    (&["gfx1100", "gfx1101"], &["gfx1100", "gfx1101"], "gfx1030"),
    // gfx1102 has no native code: the generic ISA's tree serves it.
    (
        &["gfx1100", "gfx1101", "gfx11-generic"],
        &["gfx1100", "gfx1101", "gfx1102"],
        "gfx1030",
    ),
    (
        &["gfx1101", "gfx11-generic"],
        &["gfx1101", "gfx1102"],
        "gfx1030",
    ),
    (&["gfx11-generic"], &["gfx1151", "gfx1100"], "gfx1030"),
    (
        &["gfx90a"],
        &["gfx90a:sramecc+:xnack+", "gfx90a:sramecc-:xnack-"],
        "gfx942:sramecc+:xnack-",
    ),
    (
        &["gfx942"],
        &["gfx942:sramecc+:xnack-"],
        "gfx90a:sramecc+:xnack-",
    ),
];

#[test]
fn fixture_tree_splits_and_each_group_overlays_into_a_working_install() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("in");
    tree::build(&input).unwrap();
    let before = listing(&input).unwrap();
    let out = d.path().join("out");
    let report = split(&input, &out, &SplitOptions::default());

    // Output trees: generic + the five processors the fixtures have code
    // for, one group each + the generic ISA's own tree.
    let mut names: Vec<String> = fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "generic",
            "gfx1030",
            "gfx11-generic",
            "gfx1100",
            "gfx1101",
            "gfx90a",
            "gfx942"
        ]
    );
    assert_eq!(listing(&input).unwrap(), before, "the input was modified");
    assert_eq!(report.binaries.len(), tree::BINARIES.len());
    assert_eq!(report.databases.len(), tree::DATABASES.len());
    assert_eq!(report.hard_links, 2);
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);

    // Files are disjoint across trees (directories may repeat).
    let mut owner: BTreeMap<String, String> = BTreeMap::new();
    for n in &names {
        for (rel, node) in listing(&out.join(n)).unwrap() {
            if matches!(node, Node::Dir { .. }) {
                continue;
            }
            if let Some(prev) = owner.insert(rel.clone(), n.clone()) {
                panic!("{rel} is in both {prev} and {n}");
            }
        }
    }
    // Databases are in their group only; directories that held only
    // databases are not in generic.
    for (rel, group, _) in tree::DATABASES {
        assert_eq!(owner.get(rel).map(String::as_str), Some(group), "{rel}");
    }
    assert_eq!(
        owner.get(tree::DATABASE_SYMLINK.0).map(String::as_str),
        Some(tree::DATABASE_SYMLINK.2)
    );
    assert!(!out.join("generic/lib/aotriton").exists());
    assert!(
        out.join("generic").join(tree::EMPTY_DIR).is_dir(),
        "empty directory dropped"
    );
    // Manifests in generic, archives in the groups, all at the tree root's .kpack/.
    for (rel, _) in tree::BINARIES {
        let file = rel.rsplit('/').next().unwrap();
        let component = file.split('.').next().unwrap();
        let kpm = Manifest::read(&out.join(format!("generic/.kpack/{component}.kpm"))).unwrap();
        assert_eq!(kpm.component, component);
        for f in &kpm.kpack_files {
            let a = Archive::open(&out.join(&f.family).join(".kpack").join(&f.filename)).unwrap();
            assert!(
                a.binaries().contains(&format!("{rel}#0").as_str()),
                "{rel} in {}",
                f.filename
            );
        }
        // Markers point from bin/ and lib/ one level up.
        let host = fs::read(out.join("generic").join(rel)).unwrap();
        let m = inspect_elf(&host).unwrap().marker.unwrap();
        assert_eq!(m.kernel_name, rel);
        assert_eq!(
            m.kpack_search_paths,
            [
                format!("../.kpack/{component}.kpm"),
                format!("../.kpack/{component}_@GFXARCH@.kpack")
            ]
        );
    }
    // Every moved database file is listed, once, in a manifest of the
    // prefix above it (here the tree root), with the size and sha256 of the
    // bytes in its device tree, its family and the arch it serves. The
    // database symlink moves with its group but is not a file to fetch.
    let mut listed: BTreeMap<String, (String, Vec<String>, u64, [u8; 32])> = BTreeMap::new();
    for kpm in &report.manifests {
        for f in Manifest::read(&out.join(kpm)).unwrap().database_files {
            let prev = listed.insert(
                f.path.clone(),
                (f.family, f.architectures, f.size, f.sha256),
            );
            assert!(prev.is_none(), "{} listed twice", f.path);
        }
    }
    let want: BTreeMap<String, (String, Vec<String>, u64, [u8; 32])> = tree::DATABASES
        .iter()
        .map(|(rel, group, arch)| {
            let bytes = fs::read(out.join(group).join(rel)).unwrap();
            let sha: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(&bytes).into();
            (
                rel.to_string(),
                (
                    group.to_string(),
                    vec![arch.to_string()],
                    bytes.len() as u64,
                    sha,
                ),
            )
        })
        .collect();
    assert_eq!(listed, want);
    assert!(!listed.contains_key(tree::DATABASE_SYMLINK.0));

    // Hard links stay hard links; symlinks stay symlinks.
    let g = listing(&out.join("generic")).unwrap();
    let inode = |l: &BTreeMap<String, Node>, p: &str| match l.get(p) {
        Some(Node::File { inode, .. }) => *inode,
        other => panic!("{p}: {other:?}"),
    };
    assert_eq!(
        inode(&g, tree::FAT_HARD_LINK.0),
        inode(&g, tree::FAT_HARD_LINK.1)
    );
    assert_eq!(
        inode(&g, tree::PLAIN_HARD_LINK.0),
        inode(&g, tree::PLAIN_HARD_LINK.1)
    );
    for (link, target) in tree::SYMLINKS {
        assert_eq!(g.get(link), Some(&Node::Symlink(target.to_string())));
    }

    // Every group: generic + group reconstitutes the input for its targets.
    for (trees, targets, lacking) in GROUP_TARGETS {
        let group = trees.join("+");
        let o = d.path().join(format!("overlay-{group}"));
        let mut dirs = vec![out.join("generic")];
        dirs.extend(trees.iter().map(|t| out.join(t)));
        overlay(&dirs.iter().map(PathBuf::as_path).collect::<Vec<_>>(), &o).unwrap();
        let after = listing(&o).unwrap();
        for (rel, node) in &before {
            let db_group = tree::DATABASES
                .iter()
                .find(|(p, _, _)| p == rel)
                .map(|(_, g, _)| *g)
                .or((rel == tree::DATABASE_SYMLINK.0).then_some(tree::DATABASE_SYMLINK.2));
            let is_binary =
                tree::BINARIES.iter().any(|(p, _)| p == rel) || rel == tree::FAT_HARD_LINK.0;
            match (db_group, is_binary) {
                (Some(g), _) if !trees.contains(&g) => {
                    assert!(!after.contains_key(rel), "{group}: {rel} of {g} present")
                }
                (_, true) => {
                    assert!(
                        is_split_binary(&o.join(rel)),
                        "{group}: {rel} not host-only"
                    );
                    match (node, after.get(rel)) {
                        (
                            Node::File { mode, mtime, .. },
                            Some(Node::File {
                                mode: m2,
                                mtime: t2,
                                ..
                            }),
                        ) => {
                            assert_eq!((mode, mtime), (m2, t2), "{rel}")
                        }
                        other => panic!("{rel}: {other:?}"),
                    }
                }
                _ => match (node, after.get(rel)) {
                    (
                        Node::File {
                            mode,
                            mtime,
                            sha256,
                            ..
                        },
                        Some(Node::File {
                            mode: m2,
                            mtime: t2,
                            sha256: s2,
                            ..
                        }),
                    ) => {
                        assert_eq!((mode, mtime, sha256), (m2, t2, s2), "{group}: {rel}")
                    }
                    // Directories that only held other groups' databases
                    // exist only in those groups' trees.
                    (Node::Dir { .. }, Some(Node::Dir { .. }) | None) => {}
                    (a, b) => assert_eq!(Some(a), b, "{group}: {rel}"),
                },
            }
        }
        let extra: Vec<&String> = after
            .keys()
            .filter(|k| !before.contains_key(*k) && !k.starts_with(".kpack"))
            .collect();
        assert!(extra.is_empty(), "{group}: unexpected {extra:?}");

        let ok = verify(&o, targets);
        assert!(ok.ok(), "{group} for {targets:?}:\n{ok}");
        // AMD's loader reads no `.kpm`: expanding each binary's `@GFXARCH@`
        // pattern with a target id, then its processor, finds every code
        // object these trees carry.
        let carried: Vec<&str> = fixtures::ARCHES_CLANG19
            .into_iter()
            .filter(|t| trees.contains(&Spec::builtin().placement(t).unwrap().tree.as_str()))
            .collect();
        for (rel, fixture) in tree::BINARIES {
            let bundles = fixtures::BINARIES
                .iter()
                .find(|b| fixture.rsplit('/').next() == Some(b.name))
                .unwrap()
                .bundles;
            let found = check_pattern_finds(&o.join(rel), &fixtures::fixture(fixture), &carried);
            assert_eq!(found, Ok(bundles * carried.len()), "{group}: {rel}");
        }
        let resolved: usize = ok.binaries.iter().map(|b| b.resolved).sum();
        // 6 names (app_pie twice); libmulti has 3 code objects, app_rdc 2 wrappers of one.
        assert_eq!(resolved, targets.len() * 8, "{group}");
        let bad = verify(&o, &[lacking]);
        assert!(!bad.ok(), "{group} verified for {lacking}");
        assert_eq!(bad.problems.len(), 8, "{group}: {bad}");
        for p in &bad.problems {
            assert!(
                p.message.contains(lacking) && p.message.contains('#'),
                "{p:?}"
            );
        }
        assert!(bad.problems.iter().any(|p| p.path == "lib/libmulti.so.1.2"));

        // The host-only executable runs in place (stand-in HIP runtime).
        let status = Command::new(o.join("bin/app_pie"))
            .env("LD_LIBRARY_PATH", fixtures::stub_lib_dir())
            .status()
            .unwrap();
        assert!(status.success(), "{group}: bin/app_pie {status}");
    }

    // Everything overlaid: every arch every binary carries resolves, every
    // archive entry has its binary, every manifest entry matches.
    let all = d.path().join("overlay-all");
    let trees: Vec<PathBuf> = names.iter().map(|n| out.join(n)).collect();
    let refs: Vec<&Path> = trees.iter().map(PathBuf::as_path).collect();
    overlay(&refs, &all).unwrap();
    let full = verify_tree(&all, &VerifyOptions::default()).unwrap();
    assert!(full.ok(), "{full}");
    assert!(full.not_installed.is_empty());
    // 5 components x (gfx1030, gfx11-generic, gfx1100, gfx1101, gfx90a, gfx942).
    assert_eq!(full.archives.len(), 30);
    // Tampering is noticed: a manifest entry no longer matches its archive.
    let victim = all.join(".kpack/libmulti_gfx1100.kpack");
    let mut bytes = fs::read(&victim).unwrap();
    bytes.push(0);
    fs::write(&victim, bytes).unwrap();
    let bad = verify_tree(&all, &VerifyOptions::default()).unwrap();
    assert!(
        bad.problems
            .iter()
            .any(|p| p.path == ".kpack/libmulti.kpm" && p.message.contains("size")),
        "{bad}"
    );
}

/// The release level (the default of tree splits) only makes archives
/// smaller: the same input split at the fast and at the release level
/// loads byte-identical code objects, the fat binary's.
#[test]
fn compression_level_changes_sizes_never_code_objects() {
    assert_eq!(
        SplitOptions::default().output.zstd_level,
        RELEASE_ZSTD_LEVEL
    );
    let root = debian::extracted("librocrand1").unwrap();
    let lib = "usr/lib/x86_64-linux-gnu/librocrand.so.1.1";
    let d = tempfile::tempdir().unwrap();
    let mut sizes = Vec::new();
    for level in [DEFAULT_ZSTD_LEVEL, RELEASE_ZSTD_LEVEL] {
        let out = d.path().join(format!("split-{level}"));
        let r = split(
            &root,
            &out,
            &SplitOptions {
                output: ArchiveOutput {
                    zstd_level: level,
                    ..ArchiveOutput::release()
                },
                ..SplitOptions::default()
            },
        );
        let mut names: Vec<&str> = r
            .archives
            .iter()
            .map(|a| a.path.to_str().unwrap())
            .collect();
        names.sort_unstable();
        sizes.push((
            names.join(" "),
            r.archives.iter().map(|a| a.size).sum::<u64>(),
        ));
        let all = d.path().join(format!("all-{level}"));
        let trees: Vec<PathBuf> = r.outputs.iter().map(|o| out.join(&o.name)).collect();
        overlay(
            &trees.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
            &all,
        )
        .unwrap();
        let arches: Vec<&str> = r
            .archives
            .iter()
            .flat_map(|a| a.architectures.iter().map(String::as_str))
            .collect();
        assert_eq!(
            check_pattern_finds(&all.join(lib), &root.join(lib), &arches),
            Ok(7),
            "level {level}"
        );
        let v = verify(&all, &arches);
        assert!(v.ok(), "level {level}: {v}");
    }
    let ((fast_names, fast), (release_names, release)) = (&sizes[0], &sizes[1]);
    assert_eq!(fast_names, release_names);
    assert!(
        release < fast,
        "level {RELEASE_ZSTD_LEVEL}: {release} bytes, level {DEFAULT_ZSTD_LEVEL}: {fast}"
    );
}

#[test]
fn split_is_deterministic_and_independent_of_threads() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    tree::build(&a).unwrap();
    tree::build(&b).unwrap();
    let one = SplitOptions {
        output: ArchiveOutput {
            jobs: Some(1),
            ..ArchiveOutput::release()
        },
        ..SplitOptions::default()
    };
    let two = SplitOptions {
        output: ArchiveOutput {
            jobs: Some(2),
            ..ArchiveOutput::release()
        },
        ..SplitOptions::default()
    };
    split(&a, &d.path().join("out1"), &one);
    split(&b, &d.path().join("out2"), &two);
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
    let l1 = strip(listing(&d.path().join("out1")).unwrap());
    let l2 = strip(listing(&d.path().join("out2")).unwrap());
    assert_eq!(l1, l2);
}

#[test]
fn one_component_for_the_whole_tree() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("in");
    tree::build(&input).unwrap();
    let out = d.path().join("out");
    let opts = SplitOptions {
        component: Some("fixture_lib".into()),
        ..SplitOptions::default()
    };
    let r = split(&input, &out, &opts);
    assert_eq!(r.archives.len(), 6);
    let kpm = Manifest::read(&out.join("generic/.kpack/fixture_lib.kpm")).unwrap();
    assert_eq!(kpm.kpack_files.len(), 6);
    let a = Archive::open(&out.join("gfx1100/.kpack/fixture_lib_gfx1100.kpack")).unwrap();
    assert_eq!(
        a.binaries(),
        [
            "bin/app_nopie#0",
            "bin/app_pie#0",
            "bin/app_rdc#0",
            "lib/libfixture.so.1.2#0",
            "lib/libmulti.so.1.2#0",
            "lib/libmulti.so.1.2#1",
            "lib/libmulti.so.1.2#2"
        ]
    );
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
    let v = verify(&o, &["gfx1100", "gfx1103"]);
    assert!(v.ok(), "{v}");
}

/// Debian's librocrand as packaged: multiarch directory, symlink, docs.
#[test]
fn debian_multiarch_tree() {
    let root = debian::extracted("librocrand1").unwrap();
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out");
    let r = split(&root, &out, &SplitOptions::default());
    assert_eq!(r.binaries.len(), 1);
    let groups: Vec<&str> = r.outputs.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(
        groups,
        ["generic", "gfx900", "gfx906", "gfx908", "gfx90a", "gfx1030", "gfx803"]
    );
    let lib = "usr/lib/x86_64-linux-gnu";
    let kpm = Manifest::read(&out.join(format!("generic/{lib}/.kpack/librocrand.kpm"))).unwrap();
    // gfx803 gfx900 gfx906 gfx908 gfx90a gfx1030.
    assert_eq!(kpm.kpack_files.len(), 6);
    let host = fs::read(out.join(format!("generic/{lib}/librocrand.so.1.1"))).unwrap();
    let m = inspect_elf(&host).unwrap().marker.unwrap();
    assert_eq!(m.kernel_name, "librocrand.so.1.1");
    assert_eq!(m.kpack_search_paths[0], ".kpack/librocrand.kpm");
    assert_eq!(
        fs::read_link(out.join(format!("generic/{lib}/librocrand.so.1"))).unwrap(),
        Path::new("librocrand.so.1.1")
    );
    let o = d.path().join("o");
    overlay(&[&out.join("generic"), &out.join("gfx90a")], &o).unwrap();
    let v = verify(&o, &["gfx90a:sramecc+:xnack-"]);
    assert!(v.ok(), "{v}");
    let v = verify(&o, &["gfx906:sramecc+:xnack-"]);
    assert!(!v.ok() && v.to_string().contains("gfx906"), "{v}");
    let v = verify(&o, &["gfx803"]);
    assert!(!v.ok() && v.to_string().contains("gfx803"), "{v}");
}

/// `<dir>/rand_lib_gfx90X/` with `math-libs/rocRAND/stage/` holding Debian's
/// librocrand (library, symlink, docs).
fn rocrand_artifact(dir: &Path) -> PathBuf {
    let src = debian::extracted("librocrand1").unwrap();
    let art = dir.join("rand_lib_gfx90X");
    let stage = art.join("math-libs/rocRAND/stage");
    fs::create_dir_all(stage.join("lib")).unwrap();
    fs::create_dir_all(stage.join("share/doc/rocrand")).unwrap();
    let lib = src.join("usr/lib/x86_64-linux-gnu");
    fs::copy(
        lib.join("librocrand.so.1.1"),
        stage.join("lib/librocrand.so.1.1"),
    )
    .unwrap();
    std::os::unix::fs::symlink("librocrand.so.1.1", stage.join("lib/librocrand.so.1")).unwrap();
    std::os::unix::fs::symlink("librocrand.so.1", stage.join("lib/librocrand.so")).unwrap();
    fs::copy(
        src.join("usr/share/doc/librocrand1/copyright"),
        stage.join("share/doc/rocrand/copyright"),
    )
    .unwrap();
    fs::write(art.join(MANIFEST_TXT), "math-libs/rocRAND/stage\n").unwrap();
    art
}

#[test]
fn debian_rocrand_as_a_build_artifact() {
    let d = tempfile::tempdir().unwrap();
    let art = rocrand_artifact(d.path());
    let out = d.path().join("out");
    let r = split_artifact(&art, &out, &SplitOptions::default()).unwrap();
    let names: Vec<&str> = r.outputs.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "rand_lib_generic",
            "rand_lib_gfx900",
            "rand_lib_gfx906",
            "rand_lib_gfx908",
            "rand_lib_gfx90a",
            "rand_lib_gfx1030",
            "rand_lib_gfx803"
        ]
    );
    let stage = "math-libs/rocRAND/stage";
    for n in &names {
        assert_eq!(
            fs::read_to_string(out.join(n).join(MANIFEST_TXT)).unwrap(),
            format!("{stage}\n"),
            "{n}"
        );
    }
    let kpm =
        Manifest::read(&out.join(format!("rand_lib_generic/{stage}/.kpack/rand_lib.kpm"))).unwrap();
    assert_eq!(kpm.component, "rand_lib");
    let files: Vec<(&str, &str)> = kpm
        .kpack_files
        .iter()
        .map(|f| (f.filename.as_str(), f.family.as_str()))
        .collect();
    assert_eq!(
        files,
        [
            ("rand_lib_gfx1030.kpack", "gfx1030"),
            ("rand_lib_gfx803.kpack", "gfx803"),
            ("rand_lib_gfx900.kpack", "gfx900"),
            ("rand_lib_gfx906.kpack", "gfx906"),
            ("rand_lib_gfx908.kpack", "gfx908"),
            ("rand_lib_gfx90a.kpack", "gfx90a")
        ]
    );
    let a = Archive::open(&out.join(format!(
        "rand_lib_gfx90a/{stage}/.kpack/rand_lib_gfx90a.kpack"
    )))
    .unwrap();
    assert_eq!(
        (a.group_name(), a.gfx_arch_family()),
        ("rand_lib", "gfx90a")
    );
    assert_eq!(a.binaries(), [format!("{stage}/lib/librocrand.so.1.1#0")]);
    let host =
        fs::read(out.join(format!("rand_lib_generic/{stage}/lib/librocrand.so.1.1"))).unwrap();
    let m = inspect_elf(&host).unwrap().marker.unwrap();
    assert_eq!(m.kpack_search_paths[0], "../.kpack/rand_lib.kpm");
    assert_eq!(m.kernel_name, format!("{stage}/lib/librocrand.so.1.1"));
    // Overlay generic + gfx90a, as the build system's bootstrap does.
    let o = d.path().join("o");
    overlay(
        &[&out.join("rand_lib_generic"), &out.join("rand_lib_gfx90a")],
        &o,
    )
    .unwrap();
    let v = verify(&o, &["gfx90a:sramecc+:xnack-"]);
    assert!(v.ok(), "{v}");
    assert!(!verify(&o, &["gfx1030"]).ok());

    // Per-target spec: one artifact per target.
    let spec = Spec::from_toml_str(
        "granularity = \"per-target\"\ntargets = [\"gfx803\", \"gfx900\", \"gfx906\", \"gfx908\", \"gfx90a\", \"gfx1030\"]\n",
    )
    .unwrap();
    let out2 = d.path().join("out2");
    let r = split_artifact(
        &art,
        &out2,
        &SplitOptions {
            spec,
            ..SplitOptions::default()
        },
    )
    .unwrap();
    let names: Vec<&str> = r.outputs.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "rand_lib_generic",
            "rand_lib_gfx803",
            "rand_lib_gfx900",
            "rand_lib_gfx906",
            "rand_lib_gfx908",
            "rand_lib_gfx90a",
            "rand_lib_gfx1030"
        ]
    );
    let a = Archive::open(&out2.join(format!(
        "rand_lib_gfx90a/{stage}/.kpack/rand_lib_gfx90a.kpack"
    )))
    .unwrap();
    assert_eq!(a.gfx_arch_family(), "gfx90a");
    assert_eq!(a.gfx_arches(), ["gfx90a:xnack+", "gfx90a:xnack-"]);
}

#[test]
fn batch_splits_every_device_artifact_and_skips_generic_ones() {
    let d = tempfile::tempdir().unwrap();
    let parent = d.path().join("shard");
    fs::create_dir_all(&parent).unwrap();
    rocrand_artifact(&parent);
    // A second artifact: the fixture library in a two-prefix artifact.
    let fix = parent.join("fixture_lib_gfx110X");
    for p in ["core/fixture/stage/lib", "core/extra/stage/share"] {
        fs::create_dir_all(fix.join(p)).unwrap();
    }
    fs::copy(
        fixtures::fixture("clang19/libfixture.so"),
        fix.join("core/fixture/stage/lib/libfixture.so"),
    )
    .unwrap();
    fs::write(
        fix.join("core/extra/stage/share/notes.txt"),
        "extra prefix\n",
    )
    .unwrap();
    fs::write(
        fix.join(MANIFEST_TXT),
        "core/fixture/stage\ncore/extra/stage\n",
    )
    .unwrap();
    let generic = parent.join("base_lib_generic");
    fs::create_dir_all(generic.join("base/stage")).unwrap();
    fs::write(generic.join(MANIFEST_TXT), "base/stage\n").unwrap();

    let out = d.path().join("out");
    let r = split_batch(&parent, &out, &SplitOptions::default()).unwrap();
    assert!(
        r.warnings.iter().any(|w| w.contains("base_lib_generic")),
        "{:?}",
        r.warnings
    );
    let mut names: Vec<String> = fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "fixture_lib_generic",
            "fixture_lib_gfx1030",
            "fixture_lib_gfx11-generic",
            "fixture_lib_gfx1100",
            "fixture_lib_gfx1101",
            "fixture_lib_gfx90a",
            "fixture_lib_gfx942",
            "rand_lib_generic",
            "rand_lib_gfx1030",
            "rand_lib_gfx803",
            "rand_lib_gfx900",
            "rand_lib_gfx906",
            "rand_lib_gfx908",
            "rand_lib_gfx90a"
        ]
    );
    assert_eq!(
        fs::read_to_string(out.join("fixture_lib_generic").join(MANIFEST_TXT)).unwrap(),
        "core/fixture/stage\ncore/extra/stage\n"
    );
    assert_eq!(
        fs::read_to_string(out.join("fixture_lib_gfx1100").join(MANIFEST_TXT)).unwrap(),
        "core/fixture/stage\n"
    );
    assert!(out
        .join("fixture_lib_generic/core/extra/stage/share/notes.txt")
        .is_file());
    let o = d.path().join("o");
    overlay(
        &[
            &out.join("fixture_lib_generic"),
            &out.join("fixture_lib_gfx1100"),
            &out.join("fixture_lib_gfx11-generic"),
        ],
        &o,
    )
    .unwrap();
    assert!(verify(&o, &["gfx1100", "gfx1102"]).ok());
}

#[test]
fn errors_name_the_problem_and_leave_nothing_behind() {
    let d = tempfile::tempdir().unwrap();
    let opts = SplitOptions::default();
    let err = |input: &Path, out: &Path| -> String {
        let e = split_tree(input, out, &opts).map(|_| ()).unwrap_err();
        let msg = chain(&e);
        assert!(
            !out.exists() || fs::read_dir(out).unwrap().next().is_none(),
            "{} left behind: {msg}",
            out.display()
        );
        msg
    };

    // Input missing.
    let e = err(&d.path().join("nope"), &d.path().join("o1"));
    assert!(e.contains("nope") && e.contains("cannot be read"), "{e}");

    let input = d.path().join("in");
    tree::build(&input).unwrap();
    // Output inside the input.
    let e = err(&input, &input.join("lib/out"));
    assert!(e.contains("inside the input"), "{e}");
    assert!(!input.join("lib/out").exists());

    // A database file whose arch no group covers.
    let spec = Spec::from_toml_str(
        "[[groups]]\nname = \"gfx110X\"\ntargets = [\"gfx1100\", \"gfx1101\"]\ngeneric_isas = [\"gfx11-generic\"]\n",
    )
    .unwrap();
    let small = d.path().join("small");
    fs::create_dir_all(small.join("lib/rocblas/library")).unwrap();
    fs::write(
        small.join("lib/rocblas/library/TensileLibrary_lazy_gfx1100.dat"),
        "ok",
    )
    .unwrap();
    fs::write(
        small.join("lib/rocblas/library/TensileLibrary_lazy_gfx942.dat"),
        "x",
    )
    .unwrap();
    let e = split_tree(
        &small,
        &d.path().join("o2"),
        &SplitOptions {
            spec: spec.clone(),
            ..SplitOptions::default()
        },
    )
    .map(|_| ())
    .unwrap_err();
    let msg = chain(&e);
    assert!(
        msg.contains("TensileLibrary_lazy_gfx942.dat")
            && msg.contains("gfx942")
            && msg.contains("no device group"),
        "{msg}"
    );
    assert!(!d.path().join("o2").exists());

    // A fat binary with a target no group covers names the file and target.
    let e = split_tree(
        &input,
        &d.path().join("o3"),
        &SplitOptions {
            spec,
            ..SplitOptions::default()
        },
    )
    .map(|_| ())
    .unwrap_err();
    let msg = chain(&e);
    assert!(
        msg.contains("not covered") || msg.contains("no device group"),
        "{msg}"
    );
    assert!(!d.path().join("o3").exists());

    // A FIFO is not something an install tree holds.
    let fifo_tree = d.path().join("fifo");
    fs::create_dir_all(&fifo_tree).unwrap();
    assert!(Command::new("mkfifo")
        .arg(fifo_tree.join("pipe"))
        .status()
        .unwrap()
        .success());
    let e = err(&fifo_tree, &d.path().join("o4"));
    assert!(e.contains("pipe") && e.contains("FIFO"), "{e}");

    // The output names must be free.
    let out = d.path().join("o5");
    fs::create_dir_all(out.join("generic")).unwrap();
    let e = split_tree(&input, &out, &opts).map(|_| ()).unwrap_err();
    assert!(chain(&e).contains("already exists"), "{}", chain(&e));
    assert_eq!(fs::read_dir(&out).unwrap().count(), 1);
}

#[test]
fn symlink_leaving_the_tree_is_kept_verbatim_not_followed() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("in");
    fs::create_dir_all(input.join("lib")).unwrap();
    // Points at a fat binary outside the tree: following it would split it.
    let outside = fixtures::fixture("clang19/libfixture.so");
    std::os::unix::fs::symlink(&outside, input.join("lib/libext.so")).unwrap();
    std::os::unix::fs::symlink("../../elsewhere/x", input.join("lib/rel")).unwrap();
    fs::write(input.join("lib/plain.txt"), "x").unwrap();
    let out = d.path().join("out");
    let r = split(&input, &out, &SplitOptions::default());
    assert_eq!(r.binaries.len(), 0);
    assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
    assert!(r.warnings[0].contains("lib/libext.so") && r.warnings[0].contains("outside"));
    assert_eq!(
        fs::read_link(out.join("generic/lib/libext.so")).unwrap(),
        outside
    );
    assert_eq!(
        fs::read_link(out.join("generic/lib/rel")).unwrap(),
        Path::new("../../elsewhere/x")
    );
    let names: Vec<_> = fs::read_dir(&out).unwrap().collect();
    assert_eq!(names.len(), 1, "only generic/");
}

/// Runs as an unprivileged user (root reads anything): an unreadable file
/// is an error naming it, and nothing is written.
#[test]
fn unreadable_file_is_an_error() {
    if std::env::var_os("KPACK_UNREADABLE_CHILD").is_some() {
        let input = PathBuf::from(std::env::var_os("KPACK_IN").unwrap());
        let out = PathBuf::from(std::env::var_os("KPACK_OUT").unwrap());
        let e = split_tree(&input, &out, &SplitOptions::default())
            .map(|_| ())
            .unwrap_err();
        println!("CHILD-ERROR: {}", chain(&e));
        return;
    }
    let d = tempfile::tempdir().unwrap();
    fs::set_permissions(
        d.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let input = d.path().join("in");
    fs::create_dir_all(input.join("share")).unwrap();
    fs::write(input.join("share/ok.txt"), "ok").unwrap();
    fs::write(input.join("share/secret.txt"), "no").unwrap();
    fs::set_permissions(
        input.join("share/secret.txt"),
        std::os::unix::fs::PermissionsExt::from_mode(0o000),
    )
    .unwrap();
    let out = d.path().join("out");
    let me = std::env::current_exe().unwrap();
    let mut cmd = if rustix_is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&me);
        c
    } else {
        Command::new(&me)
    };
    let output = cmd
        .args([
            "--exact",
            "split_tree::unreadable_file_is_an_error",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("KPACK_UNREADABLE_CHILD", "1")
        .env("KPACK_IN", &input)
        .env("KPACK_OUT", &out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = stdout
        .lines()
        .find(|l| l.contains("CHILD-ERROR:"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        line.contains("secret.txt") && line.contains("ermission denied"),
        "{line}"
    );
    assert!(!out.exists(), "output left behind");
}

fn rustix_is_root() -> bool {
    fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}
