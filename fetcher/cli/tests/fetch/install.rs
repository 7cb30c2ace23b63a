//! Installing: the happy path, layouts and source configuration, plan
//! output, refusals.

use std::fs;
use std::path::Path;

use rocm_kpack_format::archive::Archive as KpackArchive;

use crate::{assert_installed, list_dir, make_archive, ok, run, Env, Server};

#[test]
fn installs_exactly_the_needed_archive_verifies_and_second_run_downloads_nothing() {
    let env = Env::new();
    let archives = env.rocrand(200_000);
    let server = Server::start();
    for a in &archives {
        server.add(&a.by_hash(), a.bytes.clone());
    }
    let gfx90x = &archives[0];

    let stdout = ok(env.install("gfx90a:xnack-", &[server.url()], &[]));
    assert!(stdout.contains("1 installed"), "{stdout}");
    let installed = env.kpack.join("rocrand_gfx90X.kpack");
    assert_installed(&installed, gfx90x);
    assert_eq!(
        env.kpack_files(),
        [
            ".rocm-kpack-fetch-state.json",
            ".rocm-kpack-fetch.lock",
            "rocrand.kpm",
            "rocrand_gfx90X.kpack"
        ]
    );
    // Only the gfx90X archive was asked for, once, by hash.
    let asked: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(asked, [gfx90x.by_hash()]);

    // The installed file is a real archive holding the xnack- device's code.
    let opened = KpackArchive::open(&installed).expect("open installed archive");
    assert!(opened.has_arch("gfx90a"));
    assert_eq!(opened.group_name(), "rocrand");
    opened.verify().expect("archive verifies");
    let mode = fs::metadata(&installed).expect("meta").permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o644
    );

    // State: what, from where, why.
    let state = env.state();
    let entry = &state["archives"]["rocrand_gfx90X.kpack"];
    assert_eq!(state["format_version"], 1);
    assert_eq!(entry["component"], "rocrand");
    assert_eq!(entry["manifest"], "rocrand.kpm");
    assert_eq!(entry["sha256"], gfx90x.hex());
    assert_eq!(entry["size"], gfx90x.bytes.len() as u64);
    assert_eq!(
        entry["source"],
        format!("{}{}", server.url(), gfx90x.by_hash())
    );
    assert_eq!(entry["targets"], serde_json::json!(["gfx90a:xnack-"]));
    assert_eq!(
        entry["reason"],
        "gfx90a:xnack- may load gfx90a, gfx90a:xnack+"
    );
    assert!(entry["file"]["inode"].is_u64());
    assert!(
        env.partials().is_empty(),
        "cache keeps no partial: {:?}",
        env.partials()
    );

    let verify = ok(env.sub("verify", &[]));
    assert!(
        verify.contains("ok         ") && verify.contains("0 problems"),
        "{verify}"
    );

    let before = server.requests().len();
    let again = ok(env.install("gfx90a:xnack-", &[server.url()], &[]));
    assert!(
        again.contains("0 installed") && again.contains("1 already present"),
        "{again}"
    );
    assert_eq!(
        server.requests().len(),
        before,
        "second run must not download"
    );
}

#[test]
fn generic_isa_archives_and_every_local_target_are_fetched() {
    let env = Env::new();
    let a11 = make_archive("blas", "gfx110X", &["gfx1100", "gfx1101"], 50_000, 7);
    let generic = make_archive("blas", "gfx11-generic", &["gfx11-generic"], 50_000, 8);
    let a94 = make_archive(
        "blas",
        "gfx94X",
        &["gfx942:sramecc+", "gfx942:sramecc-"],
        50_000,
        9,
    );
    env.manifest(&env.kpack, "blas", &[&a11, &generic, &a94]);
    let server = Server::start();
    for a in [&a11, &generic, &a94] {
        server.add(&a.by_name(), a.bytes.clone());
    }
    // gfx1151 (Strix Halo) has only the generic ISA; gfx942 with sramecc+.
    let stdout = ok(env.install("gfx1151,gfx942:sramecc+", &[server.url()], &["--jobs", "2"]));
    assert!(stdout.contains("2 installed"), "{stdout}");
    assert_installed(&env.kpack.join("blas_gfx11-generic.kpack"), &generic);
    assert_installed(&env.kpack.join("blas_gfx94X.kpack"), &a94);
    assert!(!env.kpack.join("blas_gfx110X.kpack").exists());
    // By-hash was tried first, then the plain name.
    let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    assert!(
        paths.contains(&generic.by_hash()) && paths.contains(&generic.by_name()),
        "{paths:?}"
    );
}

#[test]
fn one_download_serves_two_prefixes() {
    let env = Env::new();
    let a = make_archive("rocrand", "gfx90X", &["gfx90a"], 100_000, 4);
    let other = env.root.join("usr/lib/x86_64-linux-gnu/.kpack");
    env.manifest(&env.kpack, "rocrand", &[&a]);
    env.manifest(&other, "rocrand", &[&a]);
    let server = Server::start();
    server.add(&a.by_hash(), a.bytes.clone());
    let stdout = ok(env.install("gfx90a", &[server.url()], &[]));
    assert!(stdout.contains("2 installed"), "{stdout}");
    assert_installed(&env.kpack.join("rocrand_gfx90X.kpack"), &a);
    assert_installed(&other.join("rocrand_gfx90X.kpack"), &a);
    assert_eq!(server.requests().len(), 1, "downloaded once");
}

#[test]
fn sources_from_sources_d_and_from_the_generic_package() {
    let env = Env::new();
    let a = make_archive("rocrand", "gfx90X", &["gfx90a"], 40_000, 5);
    let b = make_archive("rocsparse", "gfx90X", &["gfx90a"], 40_000, 6);
    env.manifest(&env.kpack, "rocrand", &[&a]);
    env.manifest(&env.kpack, "rocsparse", &[&b]);
    let admin = Server::start();
    admin.add(&a.by_hash(), a.bytes.clone());
    let shipped = Server::start();
    shipped.add(&b.by_hash(), b.bytes.clone());
    let d = env.root.join("etc/rocm-kpack/sources.d");
    fs::create_dir_all(&d).expect("mkdir");
    fs::write(
        d.join("50-site.toml"),
        format!(
            "[[source]]\nurl = \"{}/\"\ncomponents = [\"rocrand\"]\n",
            admin.url()
        ),
    )
    .expect("write");
    fs::write(
        env.kpack.join("rocsparse.sources.toml"),
        format!("[[source]]\nurl = \"{}\"\n", shipped.url()),
    )
    .expect("write");
    ok(env.install("gfx90a", &[], &[]));
    assert_installed(&env.kpack.join("rocrand_gfx90X.kpack"), &a);
    assert_installed(&env.kpack.join("rocsparse_gfx90X.kpack"), &b);
    // Component scoping: each server was asked only for its component.
    assert!(admin.requests().iter().all(|r| r.path == a.by_hash()));
    assert!(shipped.requests().iter().all(|r| r.path == b.by_hash()));
}

#[test]
fn quiet_install_prints_nothing_but_errors_and_the_document() {
    let env = Env::new();
    let archives = env.rocrand(50_000);
    let server = Server::start();
    for a in &archives {
        server.add(&a.by_hash(), a.bytes.clone());
    }
    // Without -q a pipe gets one line per transfer and the targets.
    let (code, stdout, stderr) = run(env.install("gfx90a", &[server.url()], &[]));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("targets: gfx90a") && stderr.contains("fetching "),
        "{stderr}"
    );
    // Each of an archive's sizes says which it is: as published, as
    // transferred, on disk.
    assert!(
        stderr.contains(" published) from ") && stderr.contains(" transferred in "),
        "{stderr}"
    );
    assert!(
        stdout.contains(" on disk) from ") && stdout.contains(" transferred)"),
        "{stdout}"
    );
    let env = Env::new();
    env.rocrand(50_000);
    let (code, stdout, stderr) = run(env.install("gfx90a", &[server.url()], &["-q"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.is_empty(), "-q stderr:\n{stderr}");
    assert!(stdout.is_empty(), "-q stdout:\n{stdout}");
    assert_installed(&env.kpack.join("rocrand_gfx90X.kpack"), &archives[0]);
    // -v adds what was there already, and why it is needed.
    let (code, stdout, _) = run(env.install("gfx90a", &[server.url()], &["-v"]));
    assert_eq!(code, 0);
    assert!(
        stdout.contains(&format!(
            "present {} (gfx90a may load ",
            env.kpack.join("rocrand_gfx90X.kpack").display()
        )),
        "{stdout}"
    );
    let (_, plain, _) = run(env.install("gfx90a", &[server.url()], &[]));
    assert!(!plain.contains("present "), "{plain}");
    // -q --json: the document alone.
    let env = Env::new();
    env.rocrand(50_000);
    let (code, stdout, stderr) = run(env.install("gfx90a", &[server.url()], &["-q", "--json"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.is_empty(), "-q stderr:\n{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("the document");
    assert_eq!(doc["schema"], 1);
    assert_eq!(doc["installed"].as_array().map(Vec::len), Some(1), "{doc}");
}

#[test]
fn offline_directory_and_file_urls_need_no_network() {
    let env = Env::new();
    let archives = env.rocrand(30_000);
    let mirror = env.tmp.path().join("mirror");
    fs::create_dir_all(&mirror).expect("mkdir");
    for a in &archives {
        fs::write(mirror.join(&a.file.filename), &a.bytes).expect("write");
    }
    let m = mirror.to_string_lossy().into_owned();
    ok(env.install("gfx1100", &[], &["--offline", &m]));
    assert_installed(&env.kpack.join("rocrand_gfx110X.kpack"), &archives[1]);
    // A file:// --source works the same way.
    ok(env.install("gfx942", &[format!("file://{m}")], &[]));
    assert_installed(&env.kpack.join("rocrand_gfx94X.kpack"), &archives[2]);
    // A relative path is a directory below the current one, not a URL
    // without a base.
    ok(env
        .install("gfx90a", &["mirror".to_string()], &[])
        .current_dir(env.tmp.path()));
    assert_installed(&env.kpack.join("rocrand_gfx90X.kpack"), &archives[0]);
}

#[test]
fn a_missing_source_is_reported_once_before_any_transfer() {
    let env = Env::new();
    env.rocrand(1000);
    let (code, stdout, stderr) = run(env.install("gfx90a,gfx1100", &[], &[]));
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert_eq!(
        stderr.matches("no source serves rocrand").count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("pass --source URL"), "{stderr}");
    assert_eq!(
        stderr.lines().count(),
        2,
        "targets line + one error line:\n{stderr}"
    );
    assert!(env.partials().is_empty() && !env.kpack.join("rocrand_gfx90X.kpack").exists());
    // A --source directory that does not exist is a usage error, up front.
    let (code, _, stderr) = run(env.install("gfx90a", &["no-such-mirror".to_string()], &[]));
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("no-such-mirror") && stderr.contains("not a directory"),
        "{stderr}"
    );
}

#[test]
fn finds_manifests_in_python_site_packages_below_the_root() {
    let env = Env::new();
    let out = std::process::Command::new("python3")
        .args(["-c", "import site; print(site.getsitepackages()[0])"])
        .output()
        .expect("python3 runs");
    let site = String::from_utf8(out.stdout).expect("utf-8");
    let site = site.trim().trim_start_matches('/');
    let kpack = env.root.join(site).join("torch/lib/.kpack");
    let a = make_archive("torch", "gfx110X", &["gfx1100"], 10_000, 11);
    env.manifest(&kpack, "torch", &[&a]);
    let mut cmd = env.install("gfx1100", &[], &["--dry-run", "--json"]);
    cmd.env("ROCM_KPACK_PYTHON", "python3");
    let stdout = ok(cmd);
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    let manifest = json["plan"]["components"][0]["manifest"]
        .as_str()
        .expect("manifest path");
    assert!(
        manifest.ends_with("torch/lib/.kpack/torch.kpm"),
        "{manifest}"
    );
}

#[test]
fn dry_run_json_has_the_plan_and_touches_nothing() {
    let env = Env::new();
    let archives = env.rocrand(20_000);
    let server = Server::start();
    let (code, stdout, stderr) =
        run(env.install("gfx90a,gfx803", &[server.url()], &["--dry-run", "--json"]));
    assert_eq!(code, 0, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(json["dry_run"], true);
    assert_eq!(
        json["plan"]["targets"],
        serde_json::json!(["gfx803", "gfx90a"])
    );
    let c = &json["plan"]["components"][0];
    assert_eq!(c["component"], "rocrand");
    assert_eq!(c["no_device_code"], serde_json::json!(["gfx803"]));
    let a = &c["archives"][0];
    assert_eq!(a["filename"], "rocrand_gfx90X.kpack");
    assert_eq!(a["action"], "fetch");
    assert_eq!(a["family"], "gfx90X");
    assert_eq!(a["sha256"], archives[0].hex());
    assert_eq!(a["size"], archives[0].bytes.len() as u64);
    assert_eq!(a["targets"], serde_json::json!(["gfx90a"]));
    assert_eq!(a["arches"], serde_json::json!(["gfx90a", "gfx90a:xnack+"]));
    assert_eq!(
        a["path"],
        env.kpack
            .join("rocrand_gfx90X.kpack")
            .to_string_lossy()
            .as_ref()
    );
    assert_eq!(c["archives"].as_array().map(Vec::len), Some(1));
    assert_eq!(json["summary"]["to_fetch"], 1);
    assert_eq!(json["summary"]["no_device_code"], 1);
    assert_eq!(json["installed"], serde_json::json!([]));
    assert_eq!(json["failed"], serde_json::json!([]));
    let warnings = json["warnings"].as_array().expect("warnings");
    assert!(
        warnings.iter().any(|w| w
            .as_str()
            .is_some_and(|w| w.contains("rocrand publishes no device code for gfx803"))),
        "{warnings:?}"
    );
    assert!(server.requests().is_empty());
    assert_eq!(
        env.kpack_files(),
        ["rocrand.kpm"],
        "a dry run writes nothing"
    );

    // The text plan says the same for people.
    let text = ok(env.install("gfx90a,gfx803", &[server.url()], &["--dry-run"]));
    assert!(text.contains("fetch    rocrand_gfx90X.kpack"), "{text}");
    assert!(
        text.contains("warning: rocrand publishes no device code for gfx803"),
        "{text}"
    );
    // --strict turns the missing device code into exit 4.
    let (code, _, _) =
        run(env.install("gfx90a,gfx803", &[server.url()], &["--dry-run", "--strict"]));
    assert_eq!(code, 4);
}

#[test]
fn manifest_with_parent_or_slash_in_a_filename_is_refused() {
    let env = Env::new();
    let a = make_archive("evil", "gfx90X", &["gfx90a"], 10_000, 12);
    env.manifest(&env.kpack, "evil", &[&a]);
    // Rewrite the (msgpack) name in place: same length, hostile.
    let path = env.kpack.join("evil.kpm");
    let bytes = fs::read(&path).expect("read");
    for hostile in ["../a_gfx90X.kpack", "/tmp/gfx90X.kpack"] {
        let safe = a.file.filename.as_bytes();
        assert_eq!(safe.len(), hostile.len());
        let at = bytes
            .windows(safe.len())
            .position(|w| w == safe)
            .expect("name");
        let mut evil = bytes.clone();
        evil.splice(at..at + safe.len(), hostile.bytes());
        fs::write(&path, &evil).expect("write");
        let server = Server::start();
        server.add(&a.by_hash(), a.bytes.clone());
        // A refused manifest fails the run (exit 1), with or without --strict.
        let (code, stdout, stderr) = run(env.install("gfx90a", &[server.url()], &[]));
        assert_eq!(code, 1, "{stderr}");
        assert!(
            stderr.contains("refusing manifest") && stderr.contains("unsafe archive filename"),
            "{stderr}"
        );
        assert!(stderr.contains("1 manifest refused"), "{stderr}");
        assert!(stdout.contains("0 installed"), "{stdout}");
        assert!(
            server.requests().is_empty(),
            "nothing fetched for a refused manifest"
        );
        let (code, _, _) = run(env.install("gfx90a", &[server.url()], &["--strict"]));
        assert_eq!(code, 1);
        let (code, stdout, _) = run(env.sub("verify", &[]));
        assert_eq!(code, 4, "{stdout}");
        assert!(stdout.contains("REFUSED"), "{stdout}");
    }
    assert!(!env.root.join("opt/rocm/a_gfx90X.kpack").exists());
    assert!(!Path::new("/tmp/gfx90X.kpack").exists());
    assert_eq!(list_dir(&env.kpack), ["evil.kpm"]);
}

#[test]
fn http_is_refused_without_allow_http() {
    let env = Env::new();
    env.rocrand(1000);
    let server = Server::start();
    let root = env.root.to_string_lossy().into_owned();
    let (code, _, stderr) = run(env.cmd(&[
        "install",
        "--target",
        "gfx90a",
        "--root",
        &root,
        "--source",
        &server.url(),
    ]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("http:// needs --allow-http"), "{stderr}");
    assert!(server.requests().is_empty());
}

#[test]
fn install_needs_auto_or_arch_and_exits_3_without_a_gpu() {
    let env = Env::new();
    env.rocrand(1000);
    let (code, _, stderr) = run(env.sub("install", &[]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--auto"), "{stderr}");
    let sysfs = env.tmp.path().join("empty-sysfs");
    fs::create_dir_all(&sysfs).expect("mkdir");
    let s = sysfs.to_string_lossy().into_owned();
    let (code, _, stderr) = run(env.sub("install", &["--auto", "--sysfs-root", &s]));
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("no AMD GPU found"), "{stderr}");
}

/// An overlay beside the full archive (AMD's torch wheels ship
/// `torch_gfx90a:xnack-.kpack` beside `torch_gfx90a.kpack`; here the
/// overlay is `sramecc+`, which every MI210 process runs with, so it comes
/// first for every setting): the loader falls through from the overlay to
/// the base for every kernel the overlay lacks, so the fetcher installs
/// both, and nothing of another processor. `status` is 4 before, 0 after.
#[test]
fn an_mi210_gets_the_overlay_and_its_base() {
    let env = Env::new();
    let overlay = make_archive("torch", "gfx90a:sramecc+", &["gfx90a:sramecc+"], 20_000, 11);
    let base = make_archive("torch", "gfx90a", &["gfx90a"], 60_000, 12);
    let other = make_archive("torch", "gfx942", &["gfx942"], 60_000, 13);
    env.manifest(&env.kpack, "torch", &[&overlay, &base, &other]);
    let server = Server::start();
    for a in [&overlay, &base, &other] {
        server.add(&a.by_name(), a.bytes.clone());
    }
    let machine = rocm_kpack_test_support::fixtures::machine("mi210");
    let sysfs = machine.to_string_lossy().into_owned();
    let (code, before, _) = run(env.sub("status", &["--sysfs-root", &sysfs]));
    assert_eq!(code, 4, "{before}");
    let root = env.root.to_string_lossy().into_owned();
    let cache = env.cache.to_string_lossy().into_owned();
    let url = server.url();
    let stdout = ok(env.cmd(&[
        "install",
        "--auto",
        "--root",
        &root,
        "--sysfs-root",
        &sysfs,
        "--allow-http",
        "--cache-dir",
        &cache,
        "--source",
        &url,
    ]));
    assert!(stdout.contains("2 installed"), "{stdout}");
    assert_installed(&env.kpack.join("torch_gfx90a:sramecc+.kpack"), &overlay);
    assert_installed(&env.kpack.join("torch_gfx90a.kpack"), &base);
    assert!(!env.kpack.join("torch_gfx942.kpack").exists());
    let (code, after, _) = run(env.sub("status", &["--sysfs-root", &sysfs]));
    assert_eq!(code, 0, "{after}");
}
