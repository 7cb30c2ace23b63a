//! status, list, verify, remove, gc and doctor on an installed tree.

use std::fs;

use crate::{make_archive, ok, run, Env, Server};

/// A root with rocrand's gfx90X archive installed by the fetcher and its
/// gfx110X archive "installed by a package" (just present).
fn installed_env() -> (Env, Vec<crate::Archive>) {
    let env = Env::new();
    let archives = env.rocrand(50_000);
    let server = Server::start();
    for a in &archives {
        server.add(&a.by_hash(), a.bytes.clone());
    }
    ok(env.install("gfx90a", &[server.url()], &[]));
    fs::write(
        env.kpack.join(&archives[1].file.filename),
        &archives[1].bytes,
    )
    .expect("write");
    (env, archives)
}

#[test]
fn list_tells_fetched_from_package_owned_and_absent() {
    let (env, _) = installed_env();
    let text = ok(env.sub("list", &[]));
    let row = |words: &[&str]| {
        text.lines().any(|l| {
            l.split_whitespace()
                .take(words.len())
                .eq(words.iter().copied())
        })
    };
    // The group as its packages name it (`rocrand-gfx90x`), not as the
    // manifest spells it.
    assert!(
        row(&["fetched", "rocrand_gfx90X.kpack", "gfx90x"]),
        "{text}"
    );
    assert!(row(&["present", "rocrand_gfx110X.kpack"]), "{text}");
    assert!(row(&["absent", "rocrand_gfx94X.kpack"]), "{text}");
    // The columns line up: every row's arch list starts in one column.
    let starts: std::collections::BTreeSet<Option<usize>> = text
        .lines()
        .filter(|l| l.starts_with("    "))
        .map(|l| l.find('['))
        .collect();
    assert_eq!(starts.len(), 1, "ragged columns:\n{text}");
    let json: serde_json::Value =
        serde_json::from_str(&ok(env.sub("list", &["--json"]))).expect("json");
    let archives = &json["kpack_dirs"][0]["components"][0]["archives"];
    assert_eq!(archives[0]["status"], "fetched");
    assert!(archives[0]["source"]
        .as_str()
        .is_some_and(|s| s.starts_with("http://127.0.0.1:")));
    assert_eq!(archives[1]["status"], "present");
    assert_eq!(archives[2]["status"], "absent");
}

#[test]
fn verify_rehashes_and_reports_damage_and_loss() {
    let (env, archives) = installed_env();
    let text = ok(env.sub("verify", &[]));
    assert!(
        text.contains("verified 2 archives: 0 problems; 1 listed archive not installed"),
        "{text}"
    );

    // Same size, one byte changed: only a re-hash notices.
    let path = env.kpack.join(&archives[0].file.filename);
    let mut bytes = fs::read(&path).expect("read");
    bytes[1000] ^= 1;
    fs::write(&path, &bytes).expect("write");
    let (code, stdout, _) = run(env.sub("verify", &[]));
    assert_eq!(code, 4, "{stdout}");
    assert!(
        stdout.contains("DAMAGED")
            && stdout.contains(&format!("manifest says {}", archives[0].hex())),
        "{stdout}"
    );

    // install notices too, and replaces it.
    let server = Server::start();
    server.add(&archives[0].by_hash(), archives[0].bytes.clone());
    let out = ok(env.install("gfx90a", &[server.url()], &[]));
    assert!(out.contains("1 installed"), "{out}");
    ok(env.sub("verify", &[]));

    fs::remove_file(&path).expect("rm");
    let json: serde_json::Value = {
        let (code, stdout, _) = run(env.sub("verify", &["--json"]));
        assert_eq!(code, 4);
        serde_json::from_str(&stdout).expect("json")
    };
    assert_eq!(json["problems"], 1);
    let missing: Vec<&serde_json::Value> = json["archives"]
        .as_array()
        .expect("archives")
        .iter()
        .filter(|a| a["verdict"] == "missing")
        .collect();
    assert_eq!(missing.len(), 1, "{json}");
}

#[test]
fn remove_takes_only_what_the_fetcher_installed() {
    let (env, archives) = installed_env();
    let (code, _, stderr) = run(env.sub("remove", &[&archives[1].file.filename]));
    assert_eq!(code, 1);
    assert!(
        stderr.contains("not installed by rocm-kpack-fetch (a package owns it?)"),
        "{stderr}"
    );
    assert!(env.kpack.join(&archives[1].file.filename).exists());

    // A dry run unless --yes, like gc.
    let out = ok(env.sub("remove", &["rocrand"]));
    assert!(
        out.contains("would remove ") && out.contains("pass --yes"),
        "{out}"
    );
    assert!(
        env.kpack.join(&archives[0].file.filename).exists(),
        "dry run by default"
    );
    let out = ok(env.sub("remove", &["rocrand", "--yes"]));
    assert!(
        out.contains("removed ") && out.contains("rocrand_gfx90X.kpack"),
        "{out}"
    );
    assert!(!env.kpack.join(&archives[0].file.filename).exists());
    assert!(
        env.kpack.join(&archives[1].file.filename).exists(),
        "package file kept"
    );
    assert_eq!(env.state()["archives"], serde_json::json!({}));
}

#[test]
fn gc_lists_by_default_and_removes_with_yes() {
    let (env, archives) = installed_env();
    // Still needed for gfx90a: nothing to collect.
    let out = ok(env.sub("gc", &["--target", "gfx90a"]));
    assert!(out.contains("nothing to collect"), "{out}");
    // The MI210 was swapped for an RX 7900: the gfx90X archive is unneeded.
    let out = ok(env.sub("gc", &["--target", "gfx1100"]));
    assert!(
        out.contains("would remove") && out.contains("no local target (gfx1100) may load it"),
        "{out}"
    );
    assert!(
        env.kpack.join(&archives[0].file.filename).exists(),
        "dry run by default"
    );
    let out = ok(env.sub("gc", &["--target", "gfx1100", "--yes"]));
    assert!(out.contains("removed "), "{out}");
    assert!(!env.kpack.join(&archives[0].file.filename).exists());
    assert!(
        env.kpack.join(&archives[1].file.filename).exists(),
        "never a package's file"
    );

    // An archive whose manifest is gone (package removed) is collected too.
    let server = Server::start();
    server.add(&archives[0].by_hash(), archives[0].bytes.clone());
    ok(env.install("gfx90a", &[server.url()], &[]));
    fs::remove_file(env.kpack.join("rocrand.kpm")).expect("rm kpm");
    let out = ok(env.sub("gc", &["--target", "gfx90a", "--json"]));
    let json: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        json["candidates"][0]["reason"],
        "no installed manifest lists it"
    );
    assert_eq!(json["dry_run"], true);
}

/// With the package's `.kpm` gone, `status` names the archive left behind
/// (exit 4) and the `gc` that removes it, with the options it was given;
/// `gc --yes` then leaves nothing of ours in the `.kpack` directory.
#[test]
fn status_reports_orphans_and_gc_leaves_no_trace() {
    let env = Env::new();
    let archives = env.rocrand(20_000);
    let server = Server::start();
    server.add(&archives[0].by_hash(), archives[0].bytes.clone());
    ok(env.install("gfx90a", &[server.url()], &[]));
    fs::remove_file(env.kpack.join("rocrand.kpm")).expect("rm kpm");
    let root = env.root.to_string_lossy().into_owned();
    let (code, out, stderr) = run(env.sub("status", &["--target", "gfx90a"]));
    assert_eq!(code, 4, "{out}{stderr}");
    let orphan = env.kpack.join(&archives[0].file.filename);
    assert!(
        out.contains(&format!("orphan {}", orphan.display()))
            && out.contains(&format!(
                "`rocm-kpack-fetch gc --yes --target gfx90a --root {root}` removes it"
            )),
        "{out}"
    );
    assert!(!out.contains("no installed .kpm manifests found"), "{out}");
    let (code, json, _) = run(env.sub("status", &["--target", "gfx90a", "--json"]));
    assert_eq!(code, 4);
    let json: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(
        json["orphans"][0]["path"],
        orphan.to_string_lossy().as_ref()
    );

    ok(env.sub("gc", &["--target", "gfx90a", "--yes"]));
    assert_eq!(
        env.kpack_files(),
        Vec::<String>::new(),
        "lock and state gone"
    );
    let out = ok(env.sub("status", &["--target", "gfx90a"]));
    assert!(
        out.contains("no installed .kpm manifests found (searched "),
        "{out}"
    );
}

/// A failed install (a source without the archive: the network's advice)
/// that installed nothing leaves neither a lock nor a state file; once
/// the package and its manifest are gone, nothing of ours is left.
#[test]
fn a_failed_install_leaves_nothing_once_its_package_is_gone() {
    let env = Env::new();
    env.rocrand(20_000);
    let server = Server::start();
    let (code, _, stderr) = run(env.install("gfx90a", &[server.url()], &["--retries", "0"]));
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("rocm-kpack-fetch: hint: check the network"),
        "a source failed: {stderr}"
    );
    assert_eq!(env.kpack_files(), ["rocrand.kpm"]);
    fs::remove_file(env.kpack.join("rocrand.kpm")).expect("rm kpm");
    let out = ok(env.install("gfx90a", &[server.url()], &[]));
    assert!(
        out.starts_with("nothing to install: no .kpm manifest found (searched "),
        "{out}"
    );
    assert_eq!(
        env.kpack_files(),
        Vec::<String>::new(),
        "lock and state gone"
    );
}

#[test]
fn status_and_doctor_report_coverage() {
    let (env, archives) = installed_env();
    let out = ok(env.sub("status", &["--target", "gfx90a,gfx1100"]));
    assert!(out.contains("complete (2 archives present)"), "{out}");
    assert!(!out.contains("  present: "), "{out}");
    // -v names them, and why each is needed.
    let out = ok(env.sub("status", &["--target", "gfx90a,gfx1100", "-v"]));
    assert!(
        out.contains("  present: rocrand_gfx90X.kpack (gfx90a may load gfx90a, gfx90a:xnack+)"),
        "{out}"
    );
    // Archives missing: exit 4, as the table says for problems found.
    let (code, out, _) = run(env.sub("status", &["--target", "gfx942:sramecc+,gfx803"]));
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("1 of 1 archive missing"), "{out}");
    // The advice installs for what was reported, below the same root.
    let root = env.root.to_string_lossy().into_owned();
    assert!(
        out.contains(&format!(
            "run `rocm-kpack-fetch install --target gfx942:sramecc+,gfx803 --root {root}`"
        )),
        "{out}"
    );
    assert!(
        out.contains("warning: rocrand publishes no device code for gfx803"),
        "{out}"
    );

    let out = ok(env.sub("doctor", &["--target", "gfx90a"]));
    assert!(out.contains("ok       coverage rocrand gfx90a"), "{out}");
    let (code, out, _) = run(env.sub("doctor", &["--target", "gfx942", "--json"]));
    assert_eq!(code, 4, "{out}");
    let json: serde_json::Value = serde_json::from_str(&out).expect("json");
    let coverage = json["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["check"] == "coverage rocrand gfx942")
        .expect("coverage check");
    assert_eq!(coverage["outcome"], "problem");
    assert!(coverage["detail"]
        .as_str()
        .is_some_and(|d| d.contains(&archives[2].file.filename)));

    // No GPU and no --target: exit 3, the hardware checks fail.
    let sysfs = env.tmp.path().join("empty");
    fs::create_dir_all(&sysfs).expect("mkdir");
    let s = sysfs.to_string_lossy().into_owned();
    let (code, out, _) = run(env.sub("doctor", &["--sysfs-root", &s]));
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("PROBLEM  driver: amdgpu is not loaded"),
        "{out}"
    );
}

#[test]
fn doctor_on_a_fixture_mi210_sees_the_gpu_and_kfd() {
    let env = Env::new();
    let a = make_archive("rocrand", "gfx90X", &["gfx90a", "gfx90a:xnack+"], 5_000, 41);
    env.manifest(&env.kpack, "rocrand", &[&a]);
    let sysfs =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../splitter/demo/machines/mi210");
    let s = sysfs.to_string_lossy().into_owned();
    let (code, out, _) = run(env.sub("doctor", &["--sysfs-root", &s]));
    assert!(out.contains("ok       gpus: detected gfx90a"), "{out}");
    assert!(out.contains("PROBLEM  coverage rocrand gfx90a"), "{out}");
    assert_eq!(code, 4);
    // install --auto from the same fixture fetches the gfx90X archive.
    let server = Server::start();
    server.add(&a.by_hash(), a.bytes.clone());
    let root = env.root.to_string_lossy().into_owned();
    let cache = env.cache.to_string_lossy().into_owned();
    let url = server.url();
    ok(env.cmd(&[
        "install",
        "--auto",
        "--sysfs-root",
        &s,
        "--root",
        &root,
        "--cache-dir",
        &cache,
        "--source",
        &url,
        "--allow-http",
    ]));
    crate::assert_installed(&env.kpack.join(&a.file.filename), &a);
}

/// gfx1100 loads gfx11-generic code (the loader's rule, falling through to
/// the generic ISA's archive for a kernel the native one lacks): neither
/// `gc` nor `prune` takes the generic archive from a gfx1100 machine,
/// and `prune` without it says so.
#[test]
fn prune_and_gc_keep_the_generic_isa_a_local_target_loads() {
    let env = Env::new();
    let native = make_archive("libmulti", "gfx1100", &["gfx1100"], 20_000, 41);
    let generic = make_archive("libmulti", "gfx11-generic", &["gfx11-generic"], 20_000, 42);
    let other = make_archive("libmulti", "gfx90a", &["gfx90a"], 20_000, 43);
    env.manifest(&env.kpack, "libmulti", &[&native, &generic, &other]);
    let server = Server::start();
    for a in [&native, &generic, &other] {
        server.add(&a.by_hash(), a.bytes.clone());
    }
    ok(env.install("gfx1100,gfx90a", &[server.url()], &[]));
    for sub in ["gc", "prune"] {
        let out = ok(env.sub(sub, &["--target", "gfx1100"]));
        assert!(
            !out.contains(&generic.file.filename) && out.contains(&other.file.filename),
            "{sub}: {out}"
        );
    }
    let out = ok(env.sub("prune", &["--target", "gfx1100", "--keep", "gfx90a"]));
    assert!(out.contains("nothing to prune"), "{out}");
}
