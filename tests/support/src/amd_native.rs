//! Packages in AMD's native multi-arch scheme (host, device, meta), as
//! AMD's release builds name and relate them (docs/packaging.md "AMD's
//! multi-arch packages"), written with this project's deb and rpm writers.
//!
//! The names are spelled out here on purpose, independently of the
//! splitter's `amd-native` naming profile, so tests can compare the two.
//! For base `amdrocm-fft`, version `8.2.0-1` and target `gfx1100`:
//! - host `amdrocm-fft-host8.2` (host code, no dependency on device code);
//! - device `amdrocm-fft8.2-gfx1100` (Depends/Requires the host package,
//!   unversioned, as AMD writes it);
//! - meta `amdrocm-fft8.2` (Depends/Requires the host package and every
//!   device package at exactly this version).

use rocm_kpack_package::compress::Compression;
use rocm_kpack_package::meta::{render_description, ControlFields};
use rocm_kpack_package::rpm::{self, Dep, RpmSpec};
use rocm_kpack_package::tree::{Entry, Payload};
use rocm_kpack_package::{deb, DEFAULT_SOURCE_DATE_EPOCH};
use std::collections::BTreeMap;
use std::fs;
use std::process::Command;

use crate::packages::ok;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

/// One written package.
#[derive(Debug, Clone)]
pub struct NativePackage {
    /// Package name.
    pub name: String,
    /// The deb file.
    pub deb: PathBuf,
    /// The rpm file.
    pub rpm: PathBuf,
    /// The payload's one file (install path relative to `/`), None for the
    /// meta package.
    pub file: Option<String>,
}

/// A host/device/meta set.
#[derive(Debug, Clone)]
pub struct NativeSet {
    /// `<base>-host<major.minor>`.
    pub host: NativePackage,
    /// `<base><major.minor>-<target>`, in the order of the targets given.
    pub devices: Vec<(String, NativePackage)>,
    /// `<base><major.minor>`.
    pub meta: NativePackage,
    /// The deb version (`8.2.0-1`); rpm: version `8.2.0`, release `1`.
    pub version: String,
}

impl NativeSet {
    /// Every deb (host, devices, meta).
    pub fn debs(&self) -> Vec<PathBuf> {
        self.all().map(|p| p.deb.clone()).collect()
    }

    /// Every rpm (host, devices, meta).
    pub fn rpms(&self) -> Vec<PathBuf> {
        self.all().map(|p| p.rpm.clone()).collect()
    }

    fn all(&self) -> impl Iterator<Item = &NativePackage> {
        std::iter::once(&self.host)
            .chain(self.devices.iter().map(|(_, p)| p))
            .chain(std::iter::once(&self.meta))
    }
}

/// `major.minor` of a version, AMD's rule: the leading digits of the first
/// two dot-separated parts (`8.2.0-1` -> `8.2`).
pub fn major_minor(version: &str) -> String {
    let mut parts = version.split('.');
    let digits = |p: Option<&str>| -> String {
        p.expect("version has major.minor")
            .chars()
            .take_while(char::is_ascii_digit)
            .collect()
    };
    let major = digits(parts.next());
    let minor = digits(parts.next());
    assert!(!major.is_empty() && !minor.is_empty(), "{version}");
    format!("{major}.{minor}")
}

/// Writes the debs and rpms of `base` (`amdrocm-fft`) at `version`
/// (`8.2.0-1`: upstream version and revision, no epoch) for `targets`
/// (`gfx1100`) into `dir` (created). Host and device debs are amd64 /
/// x86_64 rpms; the meta package is amd64 / noarch.
pub fn write_native_set(dir: &Path, base: &str, version: &str, targets: &[&str]) -> NativeSet {
    std::fs::create_dir_all(dir).expect("create output directory");
    let mm = major_minor(version);
    let (upstream, release) = version.split_once('-').unwrap_or((version, "1"));
    let host_name = format!("{base}-host{mm}");
    let host_file = format!("opt/rocm/lib/lib{}.so.{upstream}", lib_stem(base));
    let host = write_pair(
        dir,
        &PackageDef {
            name: &host_name,
            version,
            upstream,
            release,
            summary: format!("{base} host code"),
            depends: Vec::new(),
            file: Some((&host_file, format!("host code of {base} {version}\n"))),
            noarch: false,
        },
    );
    let mut devices = Vec::new();
    for t in targets {
        let name = format!("{base}{mm}-{t}");
        let file = format!("opt/rocm/lib/{}/{t}.kpack", lib_stem(base));
        let pkg = write_pair(
            dir,
            &PackageDef {
                name: &name,
                version,
                upstream,
                release,
                summary: format!("{base} device code for {t}"),
                depends: vec![(host_name.clone(), None)],
                file: Some((&file, format!("{t} device code of {base} {version}\n"))),
                noarch: false,
            },
        );
        devices.push((t.to_string(), pkg));
    }
    let meta_name = format!("{base}{mm}");
    let meta_deps = std::iter::once(host_name.clone())
        .chain(devices.iter().map(|(_, p)| p.name.clone()))
        .map(|n| (n, Some(())))
        .collect();
    let meta = write_pair(
        dir,
        &PackageDef {
            name: &meta_name,
            version,
            upstream,
            release,
            summary: format!("{base} for every GPU target"),
            depends: meta_deps,
            file: None,
            noarch: true,
        },
    );
    NativeSet {
        host,
        devices,
        meta,
        version: version.to_string(),
    }
}

/// An ordinary application `name` at `version` (`1.0-1`) that depends,
/// unversioned, on each of `depends` (a user's package built on AMD's
/// device packages), as a deb and an rpm with one file in `dir`.
pub fn write_app(dir: &Path, name: &str, version: &str, depends: &[&str]) -> NativePackage {
    let (upstream, release) = version.split_once('-').unwrap_or((version, "1"));
    let file = format!("usr/bin/{name}");
    write_pair(
        dir,
        &PackageDef {
            name,
            version,
            upstream,
            release,
            summary: format!("{name}, an application"),
            depends: depends.iter().map(|d| (d.to_string(), None)).collect(),
            file: Some((&file, format!("{name} {version}\n"))),
            noarch: false,
        },
    )
}

fn lib_stem(base: &str) -> String {
    base.trim_start_matches("amdrocm-").replace('-', "_")
}

struct PackageDef<'a> {
    name: &'a str,
    version: &'a str,
    upstream: &'a str,
    release: &'a str,
    summary: String,
    /// (name, Some(()) = at exactly this version).
    depends: Vec<(String, Option<()>)>,
    file: Option<(&'a str, String)>,
    noarch: bool,
}

fn write_pair(dir: &Path, d: &PackageDef<'_>) -> NativePackage {
    let mut payload = Payload::new();
    if let Some((path, text)) = &d.file {
        payload
            .insert(Entry::bytes(path, 0o644, text.clone().into_bytes()))
            .expect("payload entry");
    }
    payload.add_parent_dirs();

    let mut c = ControlFields::default();
    c.set("Package", d.name.to_string());
    c.set("Version", d.version.to_string());
    c.set("Architecture", "amd64".to_string());
    c.set(
        "Maintainer",
        "ROCm Dev Support <rocm-dev.support@amd.com>".to_string(),
    );
    if !d.depends.is_empty() {
        let deps: Vec<String> = d
            .depends
            .iter()
            .map(|(n, exact)| match exact {
                Some(()) => format!("{n} (= {})", d.version),
                None => n.clone(),
            })
            .collect();
        c.set("Depends", deps.join(", "));
    }
    c.set("Section", "devel".to_string());
    c.set("Priority", "optional".to_string());
    c.set(
        "Description",
        render_description(&d.summary, &format!("{}.", d.summary)),
    );
    let deb_path = dir.join(format!("{}_{}_amd64.deb", d.name, d.version));
    let f = File::create(&deb_path).expect("create deb");
    deb::write_deb(
        BufWriter::new(f),
        &deb::DebSpec {
            control: c,
            control_files: &[],
            payload: &payload,
            compression: Compression::Gzip,
            level: Some(1),
            mtime: DEFAULT_SOURCE_DATE_EPOCH,
        },
    )
    .expect("write deb")
    .into_inner()
    .expect("flush deb");

    let evr = format!("{}-{}", d.upstream, d.release);
    let spec = RpmSpec {
        name: d.name.to_string(),
        epoch: None,
        version: d.upstream.to_string(),
        release: d.release.to_string(),
        arch: if d.noarch { "noarch" } else { "x86_64" }.to_string(),
        summary: d.summary.clone(),
        description: format!("{}.", d.summary),
        license: "MIT".into(),
        group: "unknown".into(),
        url: Some("https://github.com/ROCm/TheRock".into()),
        packager: Some("ROCm Dev Support <rocm-dev.support@amd.com>".into()),
        source_rpm: format!("{}-{}.src.rpm", d.name, evr),
        provides: Vec::new(),
        requires: d
            .depends
            .iter()
            .map(|(n, exact)| match exact {
                Some(()) => Dep::eq(n, &evr),
                None => Dep::any(n),
            })
            .collect(),
        conflicts: Vec::new(),
        obsoletes: Vec::new(),
        recommends: Vec::new(),
        scripts: BTreeMap::new(),
        config_files: Vec::new(),
        file_triggers: Vec::new(),
        build_time: DEFAULT_SOURCE_DATE_EPOCH,
        changelog: Some((
            "ROCm Dev Support <rocm-dev.support@amd.com>".into(),
            "- Test fixture in AMD's native package scheme.".into(),
        )),
        compression: Compression::Gzip,
        level: Some(1),
    };
    let rpm_path = dir.join(spec.file_name());
    let f = File::create(&rpm_path).expect("create rpm");
    rpm::write_rpm(BufWriter::new(f), &spec, &payload, dir)
        .expect("write rpm")
        .into_inner()
        .expect("flush rpm");
    NativePackage {
        name: d.name.to_string(),
        deb: deb_path,
        rpm: rpm_path,
        file: d.file.as_ref().map(|(p, _)| p.to_string()),
    }
}

// One example set (base `amdrocm-fft`) as repositories, without any
// `.kpm`: indexed as a flat apt repository (dpkg-scanpackages) or a yum
// repository (createrepo_c).

/// `{base}` of the scheme.
pub const BASE: &str = "amdrocm-fft";
/// The packages' version (`{version}` is its major.minor).
pub const VERSION: &str = "8.2.0-1";
/// The host package.
pub const HOST: &str = "amdrocm-fft-host8.2";
/// The meta package.
pub const META: &str = "amdrocm-fft8.2";
/// The targets with a device package.
pub const TARGETS: &[&str] = &["gfx90a", "gfx942", "gfx1100"];

/// A device package's name.
pub fn device(target: &str) -> String {
    format!("{META}-{target}")
}

fn native_set(dir: &Path) -> NativeSet {
    let set = write_native_set(&dir.join("pkgs"), BASE, VERSION, TARGETS);
    assert_eq!(set.host.name, HOST);
    assert_eq!(set.meta.name, META);
    set
}

/// The one file of `target`'s device package, relative to the root.
pub fn device_file(set: &NativeSet, target: &str) -> String {
    set.devices
        .iter()
        .find(|(t, _)| t == target)
        .and_then(|(_, p)| p.file.clone())
        .unwrap_or_else(|| panic!("no device package for {target}"))
}

/// The debs in `dir/repo` with a flat repository's `Packages` index
/// (`deb [trusted=yes] <url> ./`). Returns the set and the repository.
pub fn apt_repo(dir: &Path) -> (NativeSet, PathBuf) {
    let set = native_set(dir);
    let repo = dir.join("repo");
    fs::create_dir_all(&repo).expect("mkdir");
    for deb in set.debs() {
        fs::copy(&deb, repo.join(deb.file_name().expect("name"))).expect("copy");
    }
    let index = ok(Command::new("dpkg-scanpackages")
        .args(["-m", "."])
        .current_dir(&repo));
    fs::write(repo.join("Packages"), index).expect("Packages");
    (set, repo)
}

/// The rpms in `dir/repo` with createrepo_c's metadata. Returns the set
/// and the repository.
pub fn yum_repo(dir: &Path) -> (NativeSet, PathBuf) {
    let set = native_set(dir);
    let repo = dir.join("repo");
    fs::create_dir_all(&repo).expect("mkdir");
    for rpm in set.rpms() {
        fs::copy(&rpm, repo.join(rpm.file_name().expect("name"))).expect("copy");
    }
    ok(Command::new("createrepo_c").arg("-q").arg(&repo));
    (set, repo)
}
