//! `rocm-kpack-fetch install --via apt|dnf|pip` with the real clients, for
//! per-family packages (the built-in families: `libfixture1-gfx110x-dgpu`,
//! extra `device-gfx110x-dgpu`) and for per-target ones (`granularity =
//! "per-target"`: `libfixture1-gfx1100`, extra `device-gfx1100`, AMD's
//! naming), each carrying a Tensile-style kernel database beside the
//! fixture library.
//!
//! Each case: a fat deb / rpm / wheel (rocm_kpack_test_support::databases) is split
//! and published (apt repository, yum repository, PEP 503 index) on
//! 127.0.0.1; the client installs the generic package into a throwaway
//! root (apt-get with `Dir=`/`dpkg --root`, `dnf --installroot`, a venv);
//! for the RX 7900 XTX sysfs fixture (gfx1100) `status` exits 4 naming the
//! missing database file; `--dry-run` and `--json` name the device
//! packages; `install --via X` installs exactly them through the client;
//! the archives hold the fat library's code objects and the database files
//! are the fat package's bytes; nothing for another processor is
//! installed; `status` is complete (exit 0) counting the package-owned
//! database files as present, which dpkg / rpm / pip name the device
//! package as owning. A third case per client, the RX 9070 XT (gfx1201),
//! needs a family whose only device code is a database file.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rocm_kpack_format::layout;
use rocm_kpack_publish::{publish, PublishOptions};
use rocm_kpack_test_support::databases::{self, content, ROCM_PREFIX, TENSILE, TENSILE_DAT};
use rocm_kpack_test_support::packages::{
    apt_dirs, apt_opts, assert_gfxarch_finds, chain, dpkg_root, ok, pip_install, pip_installed,
    run, venv,
};
use rocm_kpack_test_support::{bins, fixtures, http, site_packages, HostilePythonDir};
use serde_json::Value;

/// The package manager under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pm {
    Apt,
    Dnf,
    Pip,
}

/// How the device code is packaged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Granularity {
    /// The built-in families.
    Family,
    /// `granularity = "per-target"`.
    PerTarget,
}

/// What a machine needs under a granularity: the device groups (package
/// name suffixes, extras without `device-`) the plan names (the loader
/// finds gfx1100's own code, so not the generic ISA), the generic-ISA
/// packages they depend on, and the archive units and database processors
/// those packages install.
struct Expect {
    /// The sysfs fixture.
    machine: &'static str,
    /// Its one processor.
    target: &'static str,
    groups: &'static [&'static str],
    dependencies: &'static [&'static str],
    units: &'static [&'static str],
    database_targets: &'static [&'static str],
}

/// An RX 7900 XTX (gfx1100).
fn rx7900xtx(g: Granularity) -> Expect {
    match g {
        // The family package carries its sibling gfx1101 too; the generic
        // ISA's package is named as well, the loader falling through to it
        // for a kernel the native archive lacks.
        Granularity::Family => Expect {
            machine: "rx7900xtx",
            target: "gfx1100",
            groups: &["gfx11-generic", "gfx110x-dgpu"],
            dependencies: &["gfx11-generic"],
            units: &["gfx1100", "gfx1101", "gfx11-generic"],
            database_targets: &["gfx1100", "gfx1101"],
        },
        Granularity::PerTarget => Expect {
            machine: "rx7900xtx",
            target: "gfx1100",
            groups: &["gfx11-generic", "gfx1100"],
            dependencies: &["gfx11-generic"],
            units: &["gfx1100", "gfx11-generic"],
            database_targets: &["gfx1100"],
        },
    }
}

/// An RX 9070 XT (gfx1201): the library has no code for it, the kernel
/// database has, so its family package carries database files only.
fn rx9070xt() -> Expect {
    Expect {
        machine: "rx9070xt",
        target: "gfx1201",
        groups: &["gfx120x"],
        dependencies: &[],
        units: &[],
        database_targets: &["gfx1201"],
    }
}

/// A generic package installed by its client from a repository on
/// 127.0.0.1.
struct Case {
    pm: Pm,
    _tmp: tempfile::TempDir,
    server: http::Server,
    /// The throwaway root (apt, dnf) or the venv (pip).
    root: PathBuf,
    /// Where the library and its databases are installed.
    prefix: PathBuf,
    /// pip: the fetcher runs from here, a directory whose `json.py`,
    /// `pip.py`, ... a Python that imports from its working directory
    /// would run.
    hostile: HostilePythonDir,
}

impl Case {
    /// Splits the fat package of `pm`'s format with `g`, publishes it, and
    /// installs the generic package through the client.
    fn new(pm: Pm, g: Granularity) -> Case {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path();
        let rels: Vec<&str> = TENSILE.iter().map(|(rel, _)| *rel).collect();
        let fat = match pm {
            Pm::Apt => databases::fat_deb(dir, "libfixture1", &rels),
            Pm::Dnf => databases::fat_rpm(dir, &rels),
            Pm::Pip => databases::fat_wheel(dir, &rels),
        };
        let spec = Some(match g {
            Granularity::PerTarget => databases::per_target_spec(),
            Granularity::Family => rocm_kpack_pkgspec::Spec::default_families(),
        });
        let pkgs = dir.join("pkgs");
        databases::split(&fat, &pkgs, spec);
        let repo = dir.join("repo");
        let opts = PublishOptions {
            apt: pm == Pm::Apt,
            yum: pm == Pm::Dnf,
            pip: pm == Pm::Pip,
            ..PublishOptions::default()
        };
        publish(&pkgs, &repo, &opts).unwrap_or_else(|e| panic!("publish: {}", chain(&e)));
        let server = http::serve_dir(&repo).expect("serve");
        let root = dir.join("root");
        let mut case = Case {
            pm,
            hostile: HostilePythonDir::plant(&dir.join("hostile")),
            prefix: root.join(ROCM_PREFIX),
            root,
            server,
            _tmp: tmp,
        };
        match pm {
            Pm::Apt => {
                apt_dirs(&case.root);
                dpkg_root(&case.root);
                fs::write(
                    case.root.join("etc/apt/sources.list"),
                    format!("deb [trusted=yes] {} stable main\n", case.server.root_url()),
                )
                .expect("sources");
                ok(Command::new("apt-get")
                    .args(apt_opts(&case.root))
                    .arg("update"));
                ok(Command::new("apt-get")
                    .args(apt_opts(&case.root))
                    .args(case.pm_opts())
                    .args(["-y", "--no-install-recommends", "install", "libfixture1"]));
            }
            Pm::Dnf => {
                fs::create_dir_all(&case.root).expect("mkdir");
                ok(Command::new("dnf")
                    .arg("-y")
                    .arg(format!("--installroot={}", case.root.display()))
                    .arg("--releasever=1")
                    .args(case.pm_opts())
                    .args(["install", "libfixture1"]));
            }
            Pm::Pip => {
                venv(&case.root);
                pip_install(&case.python(), &case.index_url(), &["kpkg"]);
                case.prefix = site_packages(&case.root).join("kpkg");
            }
        }
        case
    }

    fn python(&self) -> PathBuf {
        self.root.join("bin/python")
    }

    fn index_url(&self) -> String {
        format!("{}simple/", self.server.root_url())
    }

    /// Client options for our repository (as a user passes them with
    /// `--pm-opt`): dnf's repository on 127.0.0.1; dpkg running the
    /// maintainer scripts outside the throwaway root, which has no shell.
    fn pm_opts(&self) -> Vec<String> {
        match self.pm {
            Pm::Apt => vec!["-o=DPkg::Options::=--force-script-chrootless".into()],
            Pm::Dnf => vec![
                "--setopt=reposdir=/dev/null".into(),
                "--setopt=local.gpgcheck=0".into(),
                "--setopt=install_weak_deps=False".into(),
                format!("--repofrompath=local,{}", self.server.root_url()),
            ],
            Pm::Pip => Vec::new(),
        }
    }

    /// `rocm-kpack-fetch <args>` for this case's root or interpreter, on
    /// the sysfs fixture `machine`. pip: the venv's site-packages is the
    /// only prefix scanned, not the machine's.
    fn fetch(&self, machine: &str, args: &[&str]) -> Output {
        let mut c = bins::command("rocm-kpack-fetch");
        bins::isolate_fetcher(&mut c);
        c.args(args)
            .arg("--sysfs-root")
            .arg(fixtures::machine(machine));
        match self.pm {
            Pm::Apt | Pm::Dnf => {
                c.arg("--root").arg(&self.root);
            }
            Pm::Pip => {
                c.env("ROCM_KPACK_PYTHON", self.python())
                    .current_dir(&self.hostile.dir)
                    .env("PIP_CONFIG_FILE", "/dev/null")
                    .env("PIP_NO_CACHE_DIR", "1")
                    .args(["--no-default-prefixes", "--prefix"])
                    .arg(site_packages(&self.root));
            }
        }
        run(&mut c)
    }

    /// `install --via X` (plus `more`), with the client's options.
    fn install(&self, machine: &str, more: &[&str]) -> Output {
        let mut args: Vec<String> = vec!["install".into(), "--auto".into(), "--via".into()];
        args.push(format!("{:?}", self.pm).to_lowercase());
        for o in self.pm_opts() {
            args.push(format!("--pm-opt={o}"));
        }
        if self.pm == Pm::Pip {
            args.extend(["--python".into(), self.python().display().to_string()]);
            args.extend(["--index-url".into(), self.index_url()]);
        }
        args.extend(more.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.fetch(machine, &args)
    }

    /// The device package (apt, dnf) or extra (pip) of one group.
    fn device_name(&self, group: &str) -> String {
        match self.pm {
            Pm::Apt | Pm::Dnf => format!("libfixture1-{group}"),
            Pm::Pip => format!("device-{group}"),
        }
    }

    /// The installed distribution of one group's device code.
    fn device_package(&self, group: &str) -> String {
        match self.pm {
            Pm::Apt | Pm::Dnf => format!("libfixture1-{group}"),
            Pm::Pip => format!("kpkg-device-{group}"),
        }
    }

    /// The packages the client says are installed (pip: normalized names).
    fn installed(&self) -> BTreeSet<String> {
        match self.pm {
            Pm::Apt => ok(Command::new("dpkg-query")
                .arg(format!(
                    "--admindir={}",
                    self.root.join("var/lib/dpkg").display()
                ))
                .args(["-W", "-f=${db:Status-Abbrev} ${Package}\n"]))
            .lines()
            .filter_map(|l| l.strip_prefix("ii  ").map(str::to_string))
            .collect(),
            Pm::Dnf => ok(Command::new("rpm").arg("--root").arg(&self.root).args([
                "-qa",
                "--qf",
                "%{NAME}\n",
            ]))
            .lines()
            .map(str::to_string)
            .collect(),
            Pm::Pip => pip_installed(&self.python())
                .into_iter()
                .filter(|n| n.starts_with("kpkg"))
                .collect(),
        }
    }
}

impl Case {
    /// The installed package that owns `rel` (below the prefix), as the
    /// client's database says (`dpkg -S`, `rpm -qf`, the RECORD of a pip
    /// distribution; pip names normalized).
    fn owner(&self, rel: &str) -> String {
        match self.pm {
            Pm::Apt => {
                let out = ok(Command::new("dpkg-query")
                    .arg(format!(
                        "--admindir={}",
                        self.root.join("var/lib/dpkg").display()
                    ))
                    .arg("-S")
                    .arg(format!("/{ROCM_PREFIX}/{rel}")));
                out.split(':').next().unwrap_or_default().trim().to_string()
            }
            Pm::Dnf => ok(Command::new("rpm")
                .arg("--root")
                .arg(&self.root)
                .args(["-qf", "--qf", "%{NAME}\n"])
                .arg(format!("/{ROCM_PREFIX}/{rel}")))
            .trim()
            .to_string(),
            Pm::Pip => {
                let script = "import sys\nfrom importlib import metadata\nfor d in metadata.distributions():\n    if any(str(f) == sys.argv[1] for f in (d.files or [])):\n        print(d.metadata['Name'])\n";
                ok(Command::new(self.python())
                    .args(["-I", "-c", script])
                    .arg(format!("kpkg/{rel}")))
                .trim()
                .to_lowercase()
                .replace(['_', '.'], "-")
            }
        }
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// File names of the archives installed anywhere below `dir`.
fn archives_below(dir: &Path) -> BTreeSet<String> {
    rocm_kpack_test_support::packages::snapshot(dir)
        .into_keys()
        .filter(|p| layout::is_archive_path(p))
        .filter_map(|p| p.rsplit('/').next().map(str::to_string))
        .collect()
}

fn via(pm: Pm, g: Granularity, want: Expect) {
    let case = Case::new(pm, g);
    let generic = match pm {
        Pm::Apt | Pm::Dnf => "libfixture1",
        Pm::Pip => "kpkg",
    };
    assert_eq!(
        case.installed(),
        BTreeSet::from([generic.to_string()]),
        "only the generic package"
    );

    // Before: incomplete, naming the missing database file.
    let before = case.fetch(want.machine, &["status"]);
    assert_eq!(
        before.status.code(),
        Some(4),
        "{}{}",
        text(&before.stdout),
        text(&before.stderr)
    );
    assert!(
        text(&before.stdout).contains(&format!(
            "missing: lib/rocblas/library/TensileLibrary_{}.co",
            want.target
        )),
        "{}",
        text(&before.stdout)
    );

    // The plan names the device packages (extras) chosen, as the command
    // line a user would type and in --json.
    let names: Vec<String> = want.groups.iter().map(|g| case.device_name(g)).collect();
    let dry = case.install(want.machine, &["--dry-run"]);
    assert!(dry.status.success(), "{}", text(&dry.stderr));
    let line = match pm {
        Pm::Apt => format!("apt-get install {}\n", names.join(" ")),
        Pm::Dnf => format!("dnf install {}\n", names.join(" ")),
        Pm::Pip => format!(
            "{} -m pip install kpkg[{}]==1.0+kpack1\n",
            case.python().display(),
            names.join(",")
        ),
    };
    assert_eq!(text(&dry.stdout), line, "{}", text(&dry.stderr));
    let json = case.install(want.machine, &["--dry-run", "--json"]);
    assert!(json.status.success(), "{}", text(&json.stderr));
    let json: Value = serde_json::from_slice(&json.stdout).expect("json");
    assert_eq!(json["dry_run"], true);
    assert_eq!(json["targets"], serde_json::json!([want.target]));
    assert_eq!(
        json["command"].as_str().map(|c| format!("{c}\n")),
        Some(line.clone())
    );
    assert_eq!(json["warnings"], serde_json::json!([]), "{json}");
    let planned: Vec<(String, String, String)> = json["plan"]["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            let s = |k: &str| {
                p[k].as_str()
                    .unwrap_or_else(|| panic!("{k} in {p}"))
                    .to_string()
            };
            (s("name"), s("generic"), s("group").to_lowercase())
        })
        .collect();
    let wanted: Vec<(String, String, String)> = want
        .groups
        .iter()
        .map(|g| {
            let name = match pm {
                Pm::Pip => format!("kpkg[{}]==1.0+kpack1", names.join(",")),
                _ => case.device_name(g),
            };
            (name, generic.to_string(), g.to_string())
        })
        .collect();
    assert_eq!(planned, wanted, "{json}");
    assert_eq!(
        case.installed(),
        BTreeSet::from([generic.to_string()]),
        "--dry-run installed something"
    );

    // Installed through the client: exactly the device packages named.
    let out = case.install(want.machine, &[]);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let mut packages: BTreeSet<String> = want
        .groups
        .iter()
        .chain(want.dependencies)
        .map(|g| case.device_package(g))
        .collect();
    packages.insert(generic.to_string());
    assert_eq!(case.installed(), packages);

    // The archives: exactly the packages' units, holding the fat
    // library's code objects where AMD's lookup looks.
    let units: BTreeSet<String> = want
        .units
        .iter()
        .map(|u| layout::archive_file_name("libfixture", u))
        .collect();
    assert_eq!(archives_below(&case.prefix), units);
    let lib = case.prefix.join("lib/libfixture.so");
    let fat_lib = fixtures::fixture("clang19/libfixture.so");
    for unit in want.units.iter().filter(|u| !u.contains("generic")) {
        assert_gfxarch_finds(
            &lib,
            &fat_lib,
            unit,
            &layout::archive_file_name("libfixture", unit),
        );
    }
    // The database files: the fat package's bytes for the processors the
    // packages serve, owned by the device package, nothing for the others.
    for (rel, target) in TENSILE {
        let got = case.prefix.join(rel);
        if want.database_targets.contains(&target) {
            assert_eq!(
                fs::read(&got).unwrap_or_else(|e| panic!("{rel}: {e}")),
                content(rel),
                "{rel}"
            );
            assert_eq!(
                case.owner(rel),
                case.device_package(want.groups.last().expect("a group")),
                "{rel}"
            );
        } else {
            assert!(!got.exists(), "{rel} installed for {}", want.target);
        }
    }
    assert_eq!(
        fs::read(case.prefix.join(TENSILE_DAT)).expect("dat"),
        content(TENSILE_DAT)
    );

    // Complete, counting the package-owned database files as present.
    let after = case.fetch(want.machine, &["status"]);
    assert_eq!(
        after.status.code(),
        Some(0),
        "{}{}",
        text(&after.stdout),
        text(&after.stderr)
    );
    assert!(
        text(&after.stdout).contains("complete"),
        "{}",
        text(&after.stdout)
    );
    let report = case.fetch(want.machine, &["status", "--json"]);
    let report: Value = serde_json::from_slice(&report.stdout).expect("status json");
    let comps = report["components"].as_array().expect("components");
    assert_eq!(comps.len(), 1, "{report}");
    let c = &comps[0];
    assert_eq!(c["complete"], true, "{report}");
    // Needed: the processor's own; the sibling's files a family package
    // brings are not needed here.
    let databases_needed = TENSILE.iter().filter(|(_, t)| *t == want.target).count();
    assert_eq!(c["databases_needed"], databases_needed as u64, "{report}");
    assert_eq!(c["present"], c["needed"], "{report}");
    assert_eq!(c["missing"], serde_json::json!([]), "{report}");

    // A second run installs nothing new.
    let again = case.install(want.machine, &[]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert_eq!(case.installed(), packages);
    // No request for another processor's device package.
    let other = case.device_package("gfx90a").replace('-', "_");
    let requested: Vec<String> = case.server.requests().into_iter().map(|r| r.path).collect();
    assert!(
        !requested
            .iter()
            .any(|p| p.replace('-', "_").contains(&other)),
        "{requested:?}"
    );
    // pip ran from a directory another user may own without importing
    // anything from it.
    assert_eq!(case.hostile.ran(), Vec::<String>::new());
}

#[test]
fn via_apt_per_family() {
    via(Pm::Apt, Granularity::Family, rx7900xtx(Granularity::Family));
}

#[test]
fn via_apt_per_target() {
    via(
        Pm::Apt,
        Granularity::PerTarget,
        rx7900xtx(Granularity::PerTarget),
    );
}

#[test]
fn via_dnf_per_family() {
    via(Pm::Dnf, Granularity::Family, rx7900xtx(Granularity::Family));
}

#[test]
fn via_dnf_per_target() {
    via(
        Pm::Dnf,
        Granularity::PerTarget,
        rx7900xtx(Granularity::PerTarget),
    );
}

#[test]
fn via_pip_per_family() {
    via(Pm::Pip, Granularity::Family, rx7900xtx(Granularity::Family));
}

#[test]
fn via_pip_per_target() {
    via(
        Pm::Pip,
        Granularity::PerTarget,
        rx7900xtx(Granularity::PerTarget),
    );
}

/// A family whose device code is only kernel-database files (gfx1201: the
/// library has no code object for it) is planned and installed as well.
#[test]
fn via_apt_database_only_family() {
    via(Pm::Apt, Granularity::Family, rx9070xt());
}

#[test]
fn via_dnf_database_only_family() {
    via(Pm::Dnf, Granularity::Family, rx9070xt());
}

#[test]
fn via_pip_database_only_family() {
    via(Pm::Pip, Granularity::Family, rx9070xt());
}
