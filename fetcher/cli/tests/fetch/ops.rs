//! The library calls behind `install`, `remove`, `gc` and `trigger`,
//! driven directly (no process, no argument parsing) on a temporary root
//! with real archives and manifests: each command's work is one call, and
//! the lock wait and permission policy are arguments of that call.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rocm_kpack_fetcher::client::ClientOptions;
use rocm_kpack_fetcher::detect::{local_targets, LocalTargets};
use rocm_kpack_fetcher::download::Cache;
use rocm_kpack_fetcher::execute::ExecOptions;
use rocm_kpack_fetcher::install::{lock_kpack_dir, LockOptions, PermissionPolicy};
use rocm_kpack_fetcher::ops::gc::GcRequest;
use rocm_kpack_fetcher::ops::install::{InstallOutcome, InstallRequest, SourcesRequest};
use rocm_kpack_fetcher::ops::remove::RemoveRequest;
use rocm_kpack_fetcher::ops::trigger::TriggerRequest;
use rocm_kpack_fetcher::ops::{self};
use rocm_kpack_fetcher::progress::Silent;
use rocm_kpack_fetcher::resolve::ScanConfig;
use rocm_kpack_loader::detect::DetectOptions;

use crate::{assert_installed, list_dir, Archive, Env};

const LOCK: LockOptions = LockOptions {
    wait: Duration::from_secs(30),
    permissions: PermissionPolicy::Strict,
};

fn scan(env: &Env) -> ScanConfig {
    ScanConfig {
        root: env.root.clone(),
        prefixes: Vec::new(),
        default_prefixes: true,
        python: None,
    }
}

/// `--target LIST` over an empty sysfs.
fn targets(env: &Env, list: &str) -> LocalTargets {
    let sysfs = env.tmp.path().join("sysfs");
    fs::create_dir_all(&sysfs).expect("mkdir");
    let opts = DetectOptions::from_env_values(Some(list), None).expect("targets");
    local_targets(&sysfs, &opts).expect("detect")
}

/// A directory holding the archives by name (`--offline`).
fn mirror(env: &Env, archives: &[Archive]) -> PathBuf {
    let dir = env.tmp.path().join("mirror");
    fs::create_dir_all(&dir).expect("mkdir");
    for a in archives {
        fs::write(dir.join(&a.file.filename), &a.bytes).expect("write");
    }
    dir
}

fn install(env: &Env, mirror: &Path, target: &str, lock: LockOptions) -> InstallOutcome {
    ops::install::run(InstallRequest {
        scan: scan(env),
        targets: targets(env, target).ids,
        sources: SourcesRequest {
            offline: Some(mirror.to_path_buf()),
            ..SourcesRequest::default()
        },
        dry_run: false,
        exec: ExecOptions {
            client: ClientOptions::default(),
            jobs: 2,
            cache: Cache::new(env.cache.clone()),
            lock,
            transport: Some(Default::default()),
        },
        reporter: Arc::new(Silent),
    })
    .expect("install")
}

#[test]
fn install_is_one_call_and_waits_for_a_lock_only_as_long_as_asked() {
    let env = Env::new();
    let archives = env.rocrand(20_000);
    let mirror = mirror(&env, &archives);
    // Another run holds the directory; a zero wait gives up on it at once
    // (the archive fails, naming the holder), it does not hang.
    let held = lock_kpack_dir(&env.kpack, LOCK).expect("lock");
    let zero = LockOptions {
        wait: Duration::ZERO,
        ..LOCK
    };
    let blocked = install(&env, &mirror, "gfx1100", zero);
    assert!(blocked.report.installed.is_empty());
    assert_eq!(blocked.report.failed.len(), 1, "{:?}", blocked.report);
    assert!(
        blocked.report.failed[0].error.contains("is held by"),
        "{:?}",
        blocked.report.failed
    );
    drop(held);
    let done = install(&env, &mirror, "gfx1100", LOCK);
    assert_eq!(done.report.installed.len(), 1, "{:?}", done.report);
    assert_installed(&env.kpack.join("rocrand_gfx110X.kpack"), &archives[1]);
    assert_eq!(done.plan.summary().present, 0);
}

#[test]
fn remove_is_one_call() {
    let env = Env::new();
    let archives = env.rocrand(20_000);
    let mirror = mirror(&env, &archives);
    install(&env, &mirror, "gfx90a", LOCK);
    let archive = env.kpack.join("rocrand_gfx90X.kpack");
    assert!(archive.is_file());
    let request = RemoveRequest {
        scan: scan(&env),
        names: vec!["rocrand_gfx90X.kpack".into()],
        apply: false,
        lock: LOCK,
    };
    let listed = ops::remove::run(&request).expect("dry run");
    assert_eq!(listed.removed, std::slice::from_ref(&archive));
    assert!(archive.is_file(), "a dry run removes nothing");
    let done = ops::remove::run(&RemoveRequest {
        apply: true,
        ..request
    })
    .expect("remove");
    assert!(done.applied && done.problems.is_empty(), "{done:?}");
    assert!(!archive.exists());
}

#[test]
fn gc_is_one_call() {
    let env = Env::new();
    let archives = env.rocrand(20_000);
    let mirror = mirror(&env, &archives);
    install(&env, &mirror, "gfx90a,gfx1100", LOCK);
    // The gfx90a GPU is gone: its archive goes, gfx1100's stays.
    let out = ops::gc::run(&GcRequest {
        local: targets(&env, "gfx1100"),
        scan: scan(&env),
        apply: true,
        lock: LOCK,
    })
    .expect("gc");
    assert_eq!(out.removed, [env.kpack.join("rocrand_gfx90X.kpack")]);
    assert!(env.kpack.join("rocrand_gfx110X.kpack").is_file());
}

#[test]
fn trigger_is_one_call_and_removes_what_a_removed_package_left() {
    let env = Env::new();
    let archives = env.rocrand(20_000);
    let mirror = mirror(&env, &archives);
    install(&env, &mirror, "gfx90a", LOCK);
    // The package that owned the manifest was removed.
    fs::remove_file(env.kpack.join("rocrand.kpm")).expect("rm kpm");
    let report = ops::trigger::run(&TriggerRequest {
        paths: vec![env.kpack.clone()],
        removed_only: true,
        no_systemd: true,
        timeout: Duration::from_secs(10),
        lock: LOCK,
        exe: None,
        sysfs_root: None,
        allow_http: false,
        quiet_child_logs: true,
        python_env: "ROCM_KPACK_PYTHON",
    });
    assert_eq!(report.removed, 1, "{report:?}");
    assert_eq!(
        report.parts,
        ["removed 1 archive of removed packages".to_string()]
    );
    // Nothing of the fetcher is left: the archive, state and lock went,
    // and with them the directory.
    assert!(
        list_dir(&env.kpack).is_empty(),
        "{:?}",
        list_dir(&env.kpack)
    );
    assert!(!env.kpack.exists());
}
