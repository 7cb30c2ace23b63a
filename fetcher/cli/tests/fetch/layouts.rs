//! Archive layouts on real inputs: the clang-19 fixture library split by
//! `rocm-kpack split` (per-processor archives), and the same library in
//! the family-named layout kept in `tests/fixtures/layouts/family/`,
//! installed with `install --auto` on the sysfs fixture machines from a
//! real HTTP server.
//! - Per processor: for every device of the machine, AMD's `@GFXARCH@`
//!   lookup (`rocm_kpack_test_support::gfxarch`, which never reads the
//!   `.kpm`) finds an installed archive holding the device's original code
//!   object; our loader decides the same; nothing else was installed.
//! - Family-named: still installed and loaded, through the `.kpm`.
//! - Upgrade from one to the other: the next `install --auto` fetches the
//!   processor's archive and removes the family archive it had installed.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use rocm_kpack_format::archive::Archive;
use rocm_kpack_format::layout::{self, archive_file_name, GFXARCH_PLACEHOLDER, KPACK_DIR};
use rocm_kpack_format::target::TargetId;
use rocm_kpack_loader::loader::{Cache, LoaderConfig};
use rocm_kpack_loader::select::device_arch_list;
use rocm_kpack_test_support::{bins, fixtures, gfxarch, http, tree};

use crate::{list_dir, ok, Env};

const COMPONENT: &str = "libfixture";
/// Where the generic tree puts the library, below the install prefix.
const LIB: &str = "lib/libfixture.so";
/// The install prefix below the test root.
const PREFIX: &str = "opt/rocm";
/// The fat library both layouts were split from.
const FAT: &str = "clang19/libfixture.so";

/// A split library: its generic tree, and one directory holding every
/// device archive (what a mirror serves by name).
struct Split {
    generic: PathBuf,
    mirror: PathBuf,
}

/// Collects the device trees' archives of a split output `out` into
/// `mirror`; `out/generic` is the generic tree.
fn collect(out: &Path, mirror: &Path) -> Split {
    let _ = fs::remove_dir_all(mirror);
    fs::create_dir_all(mirror).expect("mkdir mirror");
    for tree in list_dir(out).into_iter().filter(|t| t != "generic") {
        let kpack = out.join(&tree).join(KPACK_DIR);
        for name in list_dir(&kpack)
            .into_iter()
            .filter(|n| layout::is_archive_path(n))
        {
            let dest = mirror.join(&name);
            assert!(!dest.exists(), "{name} is in two device trees");
            fs::copy(kpack.join(&name), dest).expect("copy archive");
        }
    }
    Split {
        generic: out.join("generic"),
        mirror: mirror.to_path_buf(),
    }
}

fn scratch(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// `rocm-kpack split` of an install tree holding the fat library, made
/// once per test process.
fn per_processor() -> &'static Split {
    static S: OnceLock<Split> = OnceLock::new();
    S.get_or_init(|| {
        let base = scratch("fetch_layouts_processor");
        let _ = fs::remove_dir_all(&base);
        let install = base.join("install");
        fs::create_dir_all(install.join("lib")).expect("mkdir");
        fs::copy(fixtures::fixture(FAT), install.join(LIB)).expect("copy fat library");
        let out = base.join("split");
        let mut split = bins::command("rocm-kpack");
        split.arg("split").arg(&install).arg("--out").arg(&out);
        run_ok(&mut split);
        let s = collect(&out, &base.join("mirror"));
        // The layout under test: one archive per processor or generic ISA.
        for name in list_dir(&s.mirror) {
            let unit = layout::archive_unit(COMPONENT, &name).unwrap_or_else(|| panic!("{name}"));
            let id = TargetId::parse(unit)
                .unwrap_or_else(|e| panic!("{name}: not a processor name: {e}"));
            assert!(id.features().is_empty(), "{name}: not a processor name");
        }
        s
    })
}

/// The committed family-named layout (`tests/fixtures/layouts/family/`).
fn family() -> &'static Split {
    static S: OnceLock<Split> = OnceLock::new();
    S.get_or_init(|| {
        collect(
            &fixtures::fixture("layouts/family"),
            &scratch("fetch_layouts_family"),
        )
    })
}

fn run_ok(c: &mut Command) -> String {
    let out = c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"));
    assert!(
        out.status.success(),
        "{c:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Copies the generic tree over `<root>/opt/rocm` (a package install or
/// upgrade: files replaced, others kept).
fn install_generic(env: &Env, split: &Split) {
    let prefix = env.root.join(PREFIX);
    run_ok(
        Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", split.generic.display()))
            .arg(&prefix),
    );
}

/// `install --auto` (extra args appended) for the machine of sysfs fixture
/// `machine` from a server on 127.0.0.1 serving `split`'s archives by name.
/// Returns stdout and the names downloaded.
fn install_auto(
    env: &Env,
    split: &Split,
    machine: &str,
    extra: &[&str],
) -> (String, BTreeSet<String>) {
    let server = http::serve_dir(&split.mirror).expect("serve");
    let root = env.root.to_string_lossy().into_owned();
    let cache = env.cache.to_string_lossy().into_owned();
    let sysfs = fixtures::machine(machine).to_string_lossy().into_owned();
    let mut args = vec![
        "install",
        "--auto",
        "--jobs",
        "2",
        "--root",
        &root,
        "--cache-dir",
        &cache,
        "--sysfs-root",
        &sysfs,
        "--source",
        server.root_url(),
        "--allow-http",
    ];
    args.extend(extra);
    let stdout = ok(env.cmd(&args));
    let fetched = server
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.status == 200)
        .map(|r| r.path.trim_start_matches('/').to_owned())
        .collect();
    (stdout, fetched)
}

/// The archives in the test root's `.kpack` directory.
fn installed(env: &Env) -> BTreeSet<String> {
    env.kpack_files()
        .into_iter()
        .filter(|n| layout::is_archive_path(n))
        .collect()
}

/// The fat library's code objects by target id.
fn originals() -> BTreeMap<String, Vec<u8>> {
    tree::code_objects(&fixtures::fixture(FAT))
        .expect("code objects")
        .into_iter()
        .map(|(k, v)| {
            (
                k.rsplit_once("--").map_or(k.clone(), |(_, t)| t.to_owned()),
                v,
            )
        })
        .collect()
}

fn name_of(p: &Path) -> String {
    p.file_name()
        .expect("file name")
        .to_string_lossy()
        .into_owned()
}

/// Checks the per-processor install of `machine` in `env` and returns the
/// archive names AMD's lookup finds: for each device, the lookup in the
/// installed tree finds exactly what it finds among every archive of the
/// split, with the original code object, and our loader (marker: `.kpm`,
/// then the pattern) loads the same; the installed archives are exactly
/// those found.
fn check_gfxarch(env: &Env, split: &Split, machine: &str) -> BTreeSet<String> {
    let lib = env.root.join(PREFIX).join(LIB);
    let p = gfxarch::pattern_of(&lib).expect("marker");
    let everything = split
        .mirror
        .join(archive_file_name(COMPONENT, GFXARCH_PLACEHOLDER))
        .to_string_lossy()
        .into_owned();
    let originals = originals();
    let cache = Cache::with_config(LoaderConfig::default());
    let key = format!("{}#0", p.marker.kernel_name);
    let mut found = BTreeSet::new();
    for device in gfxarch::process_devices(machine) {
        let what = format!("{machine}: {device}");
        let want = gfxarch::lookup(&everything, &device);
        let got = gfxarch::lookup(&p.pattern, &device);
        assert_eq!(
            got.as_ref().map(|f| (name_of(&f.archive), &f.key)),
            want.as_ref().map(|f| (name_of(&f.archive), &f.key)),
            "{what}: @GFXARCH@ lookup in the install vs in the whole split"
        );
        let loaded = cache.load_code_object(&p.marker, &lib, 0, &device_arch_list(&device));
        let Some(got) = got else {
            assert!(
                loaded.is_err(),
                "{what}: the loader found code AMD's lookup does not"
            );
            continue;
        };
        let data = Archive::open(&got.archive)
            .expect("open")
            .kernel(&key, &got.key)
            .expect("kernel");
        assert!(
            data == originals[&got.key],
            "{what}: {} differs from the fat library's",
            got.key
        );
        let co = loaded.unwrap_or_else(|e| panic!("{what}: loader: {e}"));
        assert_eq!(
            (name_of(&co.archive_path), &co.arch),
            (name_of(&got.archive), &got.key),
            "{what}"
        );
        // The fetcher installs every archive the loader may fall through to.
        found.extend(
            gfxarch::choices(&p.pattern, &device)
                .iter()
                .map(|f| name_of(&f.archive)),
        );
        assert_eq!(
            gfxarch::choices(&p.pattern, &device)
                .iter()
                .map(|f| (name_of(&f.archive), f.key.clone()))
                .collect::<Vec<_>>(),
            gfxarch::choices(&everything, &device)
                .iter()
                .map(|f| (name_of(&f.archive), f.key.clone()))
                .collect::<Vec<_>>(),
            "{what}: every choice of the whole split is installed"
        );
    }
    assert_eq!(
        installed(env),
        found,
        "{machine}: installed vs found by @GFXARCH@"
    );
    found
}

fn names(units: &[&str]) -> BTreeSet<String> {
    units
        .iter()
        .map(|u| archive_file_name(COMPONENT, u))
        .collect()
}

#[test]
fn install_auto_installs_what_gfxarch_expansion_finds_on_every_machine() {
    let split = per_processor();
    // Machine -> the archives its GPUs may load from: native code, and the
    // generic ISA's archive the loader falls through to for a kernel the
    // native one lacks. The library has gfx90a (xnack+/-), gfx942:sramecc+,
    // gfx1030, gfx1100, gfx1101 and gfx11-generic.
    let cases: [(&str, &[&str]); 8] = [
        ("mi210", &["gfx90a"]),
        ("mi300x", &["gfx942"]),
        ("rx7900xtx", &["gfx1100", "gfx11-generic"]),
        // gfx1102 and gfx1151: no native code, the generic ISA's archive.
        ("w7500", &["gfx11-generic"]),
        ("strix-halo", &["gfx11-generic"]),
        // gfx1100 natively, the gfx1103 APU through the generic ISA.
        ("apu-plus-dgpu", &["gfx1100", "gfx11-generic"]),
        // gfx1030 natively; gfx908 has no code and no generic ISA.
        ("old-kernel", &["gfx1030"]),
        // gfx1201: nothing.
        ("rx9070xt", &[]),
    ];
    for (machine, units) in cases {
        let env = Env::new();
        install_generic(&env, split);
        let (stdout, fetched) = install_auto(&env, split, machine, &[]);
        let want = names(units);
        assert!(
            stdout.contains(&format!("{} installed", want.len())),
            "{machine}: {stdout}"
        );
        assert_eq!(fetched, want, "{machine}: downloaded");
        assert_eq!(check_gfxarch(&env, split, machine), want, "{machine}");
        ok(env.sub("verify", &[]));
    }
}

#[test]
fn family_named_trees_still_install_and_load_through_their_manifest() {
    let split = family();
    let originals = originals();
    // gfx1151: every archive listing gfx11-generic, in manifest order (the
    // first loads; the loader falls through to the next for a kernel it
    // lacks).
    for (machine, units) in [
        ("mi210", &["gfx90X"][..]),
        ("strix-halo", &["gfx110X", "gfx115X"][..]),
    ] {
        let unit = units[0];
        let env = Env::new();
        install_generic(&env, split);
        let (_, fetched) = install_auto(&env, split, machine, &[]);
        assert_eq!(fetched, names(units), "{machine}");
        assert_eq!(installed(&env), names(units), "{machine}");
        ok(env.sub("verify", &[]));

        let lib = env.root.join(PREFIX).join(LIB);
        let p = gfxarch::pattern_of(&lib).expect("marker");
        let cache = Cache::with_config(LoaderConfig::default());
        for device in gfxarch::process_devices(machine) {
            // AMD's lookup cannot find family names; our loader reads the .kpm.
            assert_eq!(
                gfxarch::lookup(&p.pattern, &device),
                None,
                "{machine}: {device}"
            );
            let co = cache
                .load_code_object(&p.marker, &lib, 0, &device_arch_list(&device))
                .unwrap_or_else(|e| panic!("{machine}: {device}: {e}"));
            assert_eq!(
                name_of(&co.archive_path),
                archive_file_name(COMPONENT, unit)
            );
            assert!(
                co.data == originals[&co.arch],
                "{machine}: {device}: {} differs",
                co.arch
            );
        }
    }
}

#[test]
fn upgrading_a_family_named_tree_fetches_the_processor_archive_and_removes_the_family_one() {
    let env = Env::new();
    install_generic(&env, family());
    install_auto(&env, family(), "mi210", &[]);
    assert_eq!(installed(&env), names(&["gfx90X"]));

    // The generic package is upgraded: new library and manifest.
    install_generic(&env, per_processor());
    let (plan, fetched) = install_auto(&env, per_processor(), "mi210", &["--dry-run"]);
    assert!(fetched.is_empty(), "{fetched:?}");
    assert!(plan.contains("fetch    libfixture_gfx90a.kpack"), "{plan}");
    assert!(
        plan.contains("remove   libfixture_gfx90X.kpack  (installed for an earlier libfixture.kpm, which no longer lists it)"),
        "{plan}"
    );
    let (stdout, fetched) = install_auto(&env, per_processor(), "mi210", &[]);
    assert_eq!(fetched, names(&["gfx90a"]));
    let old = env.kpack.join(archive_file_name(COMPONENT, "gfx90X"));
    assert!(
        stdout.contains(&format!(
            "removed {} (its manifest no longer lists it)",
            old.display()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("1 installed") && stdout.contains("1 superseded removed"),
        "{stdout}"
    );
    assert_eq!(
        check_gfxarch(&env, per_processor(), "mi210"),
        names(&["gfx90a"])
    );
    let state = env.state();
    let recorded: Vec<&String> = state["archives"]
        .as_object()
        .expect("archives")
        .keys()
        .collect();
    assert_eq!(recorded, [&archive_file_name(COMPONENT, "gfx90a")]);
    ok(env.sub("verify", &[]));

    // Nothing left to do.
    let (again, fetched) = install_auto(&env, per_processor(), "mi210", &[]);
    assert!(
        fetched.is_empty() && again.contains("0 installed") && !again.contains("removed"),
        "{again}"
    );
}
