//! rocm-kpack-fetch end to end on 127.0.0.1 with real packages: Debian's
//! librocrand1 split into generic + device debs, published as an apt
//! repository and a kpack store, served over loopback HTTP.
//! - file mode: the generic deb in a throwaway root, `install --auto` for an
//!   MI210 fetches exactly the gfx90a archive (not gfx900, gfx906, gfx908
//!   of the same build), for a gfx1030 + gfx908 machine exactly those two; after each,
//!   AMD's `@GFXARCH@` lookup finds every device's code object in what was
//!   installed and nothing else was installed; `verify` passes, the loader
//!   finds the gfx90a:xnack- code object, a rerun downloads nothing;
//! - `--via apt` plans and installs the family deb `librocrand1-gfx90a`
//!   with apt-get;
//! - `--python` installs the device extra of a wheel into a venv;
//! - the fetcher's own deb, rpm and wheel.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use rocm_kpack_format::archive::Archive;
use rocm_kpack_format::layout::{self, KPACK_DIR};
use rocm_kpack_format::manifest::Manifest;
use rocm_kpack_format::marker::Marker;
use rocm_kpack_loader::loader::{Cache, LoaderConfig};
use rocm_kpack_loader::select::device_arch_list;
use rocm_kpack_package::compress::Compression;
use rocm_kpack_publish::{publish, PublishOptions};
use rocm_kpack_splitter::elf::inspect::inspect_elf;
use rocm_kpack_splitter::split_package::{split_package, SplitPackageOptions};
use rocm_kpack_test_support::packages::*;
use rocm_kpack_test_support::{bins, debian, fixtures, gfxarch, http, packages};
use serde_json::Value;

/// Split librocrand1 packages and their published repository (apt + kpack
/// store), made once per test process.
struct Published {
    /// The split packages.
    pkgs: PathBuf,
    /// The published repository.
    repo: PathBuf,
    /// Every package extracted into one tree (every archive installed).
    full: PathBuf,
}

fn published() -> &'static Published {
    static P: OnceLock<Published> = OnceLock::new();
    P.get_or_init(|| {
        let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fetch_e2e");
        let _ = fs::remove_dir_all(&base);
        fs::create_dir_all(&base).expect("mkdir");
        let pkgs = base.join("pkgs");
        let opts = SplitPackageOptions {
            package_compression: Compression::Xz,
            package_level: Some(0),
            ..SplitPackageOptions::default()
        };
        split_package(&rocrand_deb(), &pkgs, &opts)
            .unwrap_or_else(|e| panic!("split-package: {}", chain(&e)));
        let repo = base.join("repo");
        publish(
            &pkgs,
            &repo,
            &PublishOptions {
                apt: true,
                kpack_store: true,
                cache: Some(store_cache()),
                ..PublishOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("publish: {}", chain(&e)));
        let full = base.join("full");
        for e in fs::read_dir(&pkgs).expect("pkgs") {
            let deb = e.expect("entry").path();
            if deb.extension().is_some_and(|x| x == "deb") {
                ok(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&full));
            }
        }
        Published { pkgs, repo, full }
    })
}

fn fetch() -> Command {
    let mut c = bins::command("rocm-kpack-fetch");
    // Manifests only from the throwaway roots, not this interpreter.
    c.env("ROCM_KPACK_PYTHON", "")
        .env_remove("ROCM_KPACK_ARCH_OVERRIDE")
        .env_remove("HSA_OVERRIDE_GFX_VERSION");
    c
}

/// A dpkg root with the generic librocrand1 installed (its dependencies,
/// which the repository does not carry, marked installed).
fn root_with_generic(root: &Path) {
    dpkg_root(root);
    let mut status = String::new();
    for dep in ["libamdhip64-5", "libc6", "libgcc-s1", "libstdc++6"] {
        status.push_str(&format!(
            "Package: {dep}\nStatus: install ok installed\nPriority: optional\nSection: libs\nMaintainer: Test <t@example.org>\nArchitecture: amd64\nMulti-Arch: same\nVersion: 99\nDescription: stand-in\n\n"
        ));
    }
    fs::write(root.join("var/lib/dpkg/status"), status).expect("status");
    ok(Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .args(["--force-not-root", "--force-script-chrootless", "-i"])
        .arg(
            published()
                .pkgs
                .join("librocrand1_5.3.3-4+kpack1_amd64.deb"),
        ));
}

/// (bundle index, bytes) of target `target` in the fat Debian library.
fn original(target: &str) -> (u32, Vec<u8>) {
    use object::{Object, ObjectSection};
    let fat = debian::extracted("librocrand1")
        .expect("extracted")
        .join(LIBDIR)
        .join("librocrand.so.1.1");
    let data = fs::read(fat).expect("read");
    let elf = object::File::parse(&*data).expect("ELF");
    let section = elf
        .section_by_name(".hip_fatbin")
        .expect("fatbin")
        .data()
        .expect("data");
    for (i, b) in rocm_kpack_format::bundle::parse_fatbin(section)
        .expect("bundles")
        .iter()
        .enumerate()
    {
        for (t, d) in b.code_objects() {
            if t == target || t.ends_with(&format!("--{target}")) {
                return (i as u32, d.to_vec());
            }
        }
    }
    panic!("no {target} in Debian's librocrand");
}

fn by_hash_requests(server: &http::Server) -> Vec<String> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/by-hash/") && r.method == "GET")
        .map(|r| r.path)
        .collect()
}

/// The generic librocrand1 installed in a fresh dpkg root, `install --auto`
/// run for the sysfs fixture `machine` from the kpack store on 127.0.0.1
/// with the options `extra`.
/// Returns the root, stdout and the by-hash paths downloaded.
fn install_auto(tmp: &Path, machine: &str, extra: &[&str]) -> (PathBuf, String, Vec<String>) {
    let server = http::serve_dir(&published().repo).expect("serve");
    let root = tmp.join(machine);
    root_with_generic(&root);
    let out = ok(fetch()
        .args(["install", "--auto", "--jobs", "2"])
        .args(extra)
        .arg("--root")
        .arg(&root)
        .arg("--sysfs-root")
        .arg(fixtures::machine(machine))
        .arg("--source")
        .arg(server.root_url())
        .arg("--allow-http"));
    (root, out, by_hash_requests(&server))
}

/// The archives in a `.kpack` directory.
fn kpack_names(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .expect("kpack dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| layout::is_archive_path(n))
        .collect()
}

fn name_of(p: &Path) -> String {
    p.file_name()
        .expect("file name")
        .to_string_lossy()
        .into_owned()
}

/// After `install --auto` for `machine` in `root`: for each device, AMD's
/// `@GFXARCH@` lookup (which never reads the `.kpm`) finds in the installed
/// tree what it finds with every device package extracted, and that
/// archive holds Debian's code object; our loader decides the same; the
/// archives installed are exactly those found. Returns their names.
fn check_gfxarch(root: &Path, machine: &str) -> BTreeSet<String> {
    let lib = root.join(LIBDIR).join("librocrand.so.1.1");
    let p = gfxarch::pattern_of(&lib).expect("marker");
    let everything = gfxarch::pattern_of(&published().full.join(LIBDIR).join("librocrand.so.1.1"))
        .expect("marker")
        .pattern;
    let cache = Cache::with_config(LoaderConfig::default());
    let mut found = BTreeSet::new();
    for device in gfxarch::process_devices(machine) {
        let what = format!("{machine}: {device}");
        let want = gfxarch::lookup(&everything, &device);
        let got = gfxarch::lookup(&p.pattern, &device);
        assert_eq!(
            got.as_ref().map(|f| (name_of(&f.archive), &f.key)),
            want.as_ref().map(|f| (name_of(&f.archive), &f.key)),
            "{what}: @GFXARCH@ lookup in the install vs with every device package"
        );
        let Some(got) = got else {
            continue;
        };
        let (index, original) = original(&got.key);
        let archive = Archive::open(&got.archive).expect("open");
        let data = archive
            .kernel(&format!("{}#{index}", p.marker.kernel_name), &got.key)
            .expect("kernel");
        assert!(
            data == original,
            "{what}: {} differs from Debian's",
            got.key
        );
        let co = cache
            .load_code_object(&p.marker, &lib, index, &device_arch_list(&device))
            .unwrap_or_else(|e| panic!("{what}: loader: {e}"));
        assert_eq!(
            (name_of(&co.archive_path), &co.arch),
            (name_of(&got.archive), &got.key),
            "{what}"
        );
        found.insert(name_of(&got.archive));
    }
    assert_eq!(
        kpack_names(&root.join(LIBDIR).join(KPACK_DIR)),
        found,
        "{machine}: installed vs found"
    );
    found
}

/// The by-hash paths `install` asks for to get the archives `names` of
/// the installed manifest: its transport form where the manifest lists
/// one, and the archive itself where the store (`published().repo`) has
/// no transport object for it (the fetcher falls back after the 404).
fn store_paths(root: &Path, names: &BTreeSet<String>) -> BTreeSet<String> {
    use rocm_kpack_format::manifest::ArchiveTransport;
    let kpm = root
        .join(LIBDIR)
        .join(KPACK_DIR)
        .join(layout::manifest_file_name("librocrand"));
    let m = Manifest::read(&kpm).expect("manifest");
    let mut paths = BTreeSet::new();
    for f in m.kpack_files.iter().filter(|f| names.contains(&f.filename)) {
        if let Some(ArchiveTransport::Solid { sha256, .. }) = &f.transport {
            let transport = layout::store::transport_object_path(sha256);
            let stored = published().repo.join(&transport).is_file();
            paths.insert(format!("/{transport}"));
            if stored {
                continue;
            }
        }
        paths.insert(format!(
            "/{}",
            layout::store::by_hash_path(&f.sha256.expect("sha256"))
        ));
    }
    paths
}

fn units(names: &[&str]) -> BTreeSet<String> {
    names
        .iter()
        .map(|u| layout::archive_file_name("librocrand", u))
        .collect()
}

#[test]
fn install_auto_installs_exactly_the_processor_archives_gfxarch_expansion_finds() {
    let tmp = tempfile::tempdir().expect("tmp");
    // MI210: gfx90a only, not the rest of its family (gfx900, gfx906,
    // gfx908); old-kernel: a gfx1030 and a gfx908 in two families.
    for (machine, want) in [
        ("mi210", units(&["gfx90a"])),
        ("old-kernel", units(&["gfx1030", "gfx908"])),
    ] {
        let (root, out, fetched) = install_auto(tmp.path(), machine, &[]);
        assert!(
            out.contains(&format!("{} installed", want.len())),
            "{machine}: {out}"
        );
        assert_eq!(check_gfxarch(&root, machine), want, "{machine}");
        let fetched: BTreeSet<String> = fetched.into_iter().collect();
        assert_eq!(fetched, store_paths(&root, &want), "{machine}: downloaded");
        let v = run_cmd(fetch().arg("verify").arg("--root").arg(&root));
        assert!(
            v.status.success(),
            "{machine}: verify: {}{}",
            s(&v.stdout),
            s(&v.stderr)
        );
    }
}

#[test]
fn install_auto_for_an_mi210_fetches_verifies_and_the_loader_finds_the_code_object() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (root, out, _) = install_auto(tmp.path(), "mi210", &[]);
    assert!(out.contains("1 installed"), "{out}");
    let kdir = root.join(LIBDIR).join(KPACK_DIR);
    let archive = kdir.join(layout::archive_file_name("librocrand", "gfx90a"));
    assert_eq!(kpack_names(&kdir), units(&["gfx90a"]));

    // The runtime, from the installed host-only library's marker.
    let lib = root.join(LIBDIR).join("librocrand.so.1.1");
    let report = inspect_elf(&fs::read(&lib).expect("lib")).expect("inspect");
    assert!(
        report.hip_fatbin.is_none(),
        "installed library is not host-only"
    );
    let m = report.marker.expect("marker");
    let marker = Marker {
        kpack_search_paths: m.kpack_search_paths,
        kernel_name: m.kernel_name,
    };
    let (index_co, want) = original("gfx90a:xnack-");
    let cache = Cache::with_config(LoaderConfig::default());
    let co = cache
        .load_code_object(&marker, &lib, index_co, &["gfx90a:xnack-"])
        .expect("loader finds gfx90a:xnack-");
    assert_eq!(co.arch, "gfx90a:xnack-");
    assert!(co.data == want, "code object differs from Debian's");
    assert_eq!(co.archive_path, archive);

    // A second run: nothing to download.
    let server = http::serve_dir(&published().repo).expect("serve");
    let out2 = ok(fetch()
        .args(["install", "--auto", "--root"])
        .arg(&root)
        .arg("--sysfs-root")
        .arg(fixtures::machine("mi210"))
        .arg("--source")
        .arg(server.root_url())
        .arg("--allow-http"));
    assert!(
        out2.contains("0 installed") && out2.contains("1 already present"),
        "{out2}"
    );
    assert!(
        server.requests().is_empty(),
        "second run made requests: {:?}",
        server.requests()
    );
}

/// `--frame-level release` installs the published archive byte for byte,
/// rebuilt from the store's transport form where it has one (checked
/// against the manifest's sha256), else fetched as it is.
#[test]
fn install_at_the_release_frame_level_gives_the_published_archive() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (root, out, fetched) = install_auto(tmp.path(), "mi210", &["--frame-level", "release"]);
    assert!(out.contains("1 installed"), "{out}");
    let name = layout::archive_file_name("librocrand", "gfx90a");
    let rel = Path::new(LIBDIR).join(KPACK_DIR).join(&name);
    assert!(
        fs::read(root.join(&rel)).expect("installed")
            == fs::read(published().full.join(&rel)).expect("published"),
        "{name} is not the published archive"
    );
    let fetched: BTreeSet<String> = fetched.into_iter().collect();
    assert_eq!(fetched, store_paths(&root, &units(&["gfx90a"])));
    let v = run_cmd(fetch().arg("verify").arg("--root").arg(&root));
    assert!(
        v.status.success(),
        "verify: {}{}",
        s(&v.stdout),
        s(&v.stderr)
    );
}

fn run_cmd(c: &mut Command) -> std::process::Output {
    run(c)
}

fn s(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn via_apt_plans_and_installs_the_device_package() {
    let p = published();
    let server = http::serve_dir(&p.repo).expect("serve");
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("root");
    apt_dirs(&root);
    root_with_generic(&root);
    fs::write(
        root.join("etc/apt/sources.list"),
        format!("deb [trusted=yes] {} stable main\n", server.root_url()),
    )
    .expect("sources");
    ok(Command::new("apt-get").args(apt_opts(&root)).arg("update"));

    let base = || {
        let mut c = fetch();
        c.args(["install", "--via", "apt", "--target", "gfx90a", "--root"])
            .arg(&root);
        c
    };
    let plan = ok(base().arg("--dry-run"));
    assert_eq!(plan, "apt-get install librocrand1-gfx90a\n");
    let json: Value =
        serde_json::from_str(&ok(base().args(["--dry-run", "--json"]))).expect("json");
    assert_eq!(json["plan"]["packages"][0]["group"], "gfx90a");
    assert_eq!(json["plan"]["packages"][0]["generic"], "librocrand1");
    assert!(by_hash_requests(&server).is_empty());

    // Inside a dpkg run: refused, nothing called.
    let inside = run(base().env("DPKG_RUNNING_VERSION", "1.21.22"));
    assert!(!inside.status.success());
    assert!(
        s(&inside.stderr).contains("file mode"),
        "{}",
        s(&inside.stderr)
    );

    ok(&mut base());
    // The family deb carries its processor's archive; dpkg owns it.
    let archive = format!(
        "/{LIBDIR}/{KPACK_DIR}/{}",
        layout::archive_file_name("librocrand", "gfx90a")
    );
    let owner = ok(Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .arg("-S")
        .arg(&archive));
    assert_eq!(owner.trim(), format!("librocrand1-gfx90a: {archive}"));
    let other = format!(
        "{}/{LIBDIR}/{KPACK_DIR}/{}",
        root.display(),
        layout::archive_file_name("librocrand", "gfx906")
    );
    assert!(!Path::new(&other).exists(), "{other}");
    assert!(server.requests().iter().any(|r| r
        .path
        .ends_with("librocrand1-gfx90a_5.3.3-4+kpack1_amd64.deb")
        && r.status == 200));
    // Installed: the plan is now empty of new work for apt (it is a no-op).
    let status = fs::read_to_string(root.join("var/lib/dpkg/status")).expect("status");
    assert!(!status.contains("Package: librocrand1-gfx103x"));
    assert!(!status.contains("Package: librocrand1-gfx90x"));
}

#[test]
fn python_installs_the_device_extra_into_a_venv() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (split, _) = wheel_split(tmp.path());
    let pkgs = tmp.path().join("pkgs");
    build(&split, &pkgs, &wheel_options());
    let repo = tmp.path().join("repo");
    publish_pip(&pkgs, &repo);
    let server = http::serve_dir(&repo).expect("serve");
    let index = format!("{}simple/", server.root_url());
    let venv = tmp.path().join("venv");
    let python = packages::venv(&venv);
    pip_install(&python, &index, &["kpkg"]);

    let empty = tmp.path().join("noprefix");
    fs::create_dir_all(&empty).expect("mkdir");
    let base = || {
        let mut c = fetch();
        c.args([
            "install",
            "--via",
            "pip",
            "--target",
            "gfx1101",
            "--no-default-prefixes",
            "--prefix",
        ])
        .arg(&empty)
        .arg("--python")
        .arg(&python)
        .arg("--index-url")
        .arg(&index)
        .env("PIP_CONFIG_FILE", "/dev/null")
        .env("PIP_NO_CACHE_DIR", "1");
        c
    };
    // gfx1101's group, plus any group holding a generic ISA the loader
    // falls back to (gfx11-generic), and nothing else.
    let plan = ok(base().arg("--dry-run"));
    let prefix = format!("{} -m pip install kpkg[", python.display());
    let extras: Vec<String> = plan
        .strip_prefix(&prefix)
        .and_then(|r| r.strip_suffix("]==1.0+kpack1\n"))
        .unwrap_or_else(|| panic!("unexpected plan: {plan}"))
        .split(',')
        .map(str::to_string)
        .collect();
    assert!(
        extras.contains(&"device-gfx110x-dgpu".to_string()),
        "{plan}"
    );
    assert!(
        extras.iter().all(|e| e.starts_with("device-gfx11")),
        "{plan}"
    );
    ok(&mut base());
    let listed = ok(Command::new(&python).args([
        "-m",
        "pip",
        "list",
        "--disable-pip-version-check",
        "--format=freeze",
    ]));
    for e in &extras {
        assert!(
            listed.contains(&format!("kpkg-{e}==1.0+kpack1")),
            "{e} not installed:\n{listed}"
        );
    }
    assert!(
        !listed.contains("gfx90a") && !listed.contains("gfx103x"),
        "{listed}"
    );
    // Installed: exactly the archives the manifest files under the device
    // distributions pip installed (the extras and what they depend on, such
    // as the generic-ISA package of the family).
    let out = ok(Command::new(&python).args(["-c", "import kpkg; print(kpkg.KPACK_DIR)"]));
    let kdir = PathBuf::from(out.trim());
    let manifest = Manifest::read(&kdir.join(layout::manifest_file_name("kpkg"))).expect("kpm");
    let want: BTreeSet<String> = manifest
        .kpack_files
        .iter()
        .filter(|f| {
            listed
                .lines()
                .any(|l| l == format!("kpkg-device-{}==1.0+kpack1", f.family.to_lowercase()))
        })
        .map(|f| f.filename.clone())
        .collect();
    assert!(
        want.contains(&layout::archive_file_name("kpkg", "gfx1101")),
        "{listed}"
    );
    assert_eq!(kpack_names(&kdir), want, "{listed}");
    ok(Command::new(&python).args(["-m", "pip", "check", "--disable-pip-version-check"]));
    // A rerun is harmless (pip finds the requirement satisfied).
    ok(&mut base());
}
