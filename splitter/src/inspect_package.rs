//! `inspect` of a package (.deb, .rpm, .whl; ours or AMD's): which GPU
//! targets it carries and how. Its payload is read once, as a stream:
//! fat binaries give the targets of their offload bundles, `.kpack`
//! archives their arches, `.kpm` manifests the archives a generic package
//! expects; a device package's declared targets come from its metadata
//! (`X-Kpack-Gfx`, `Provides: rocm-kpack(<target>)`), and the device
//! packages a generic package expects from the naming of the spec (or of
//! AMD's native scheme, for a host package named that way), or, for a
//! wheel, from its `device-<target>` extras.

use std::collections::BTreeSet;
use std::io::{self, Read, Write as _};
use std::path::Path;

use rocm_kpack_format::archive::Archive;
use rocm_kpack_format::layout;
use rocm_kpack_format::manifest::Manifest;
use rocm_kpack_package::any::{AnyPackage, PackageKind};
use rocm_kpack_package::device::{is_kpack_archive_path, is_kpm_path};
use rocm_kpack_package::naming;
use rocm_kpack_package::PackageError;
use rocm_kpack_pkgspec::naming::{name_version, NameKind, Profile};
use rocm_kpack_pkgspec::{amd, Naming, Spec};
use serde::Serialize;

use crate::inspect::{manifest_report, BundleSectionReport, ManifestFileReport};

/// What a package is, judged by its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PackageRole {
    /// It holds fat binaries: device code inside host binaries
    /// (`split-package` input).
    Fat,
    /// Split host code: `.kpm` manifests or binaries with a kpack marker,
    /// whose device code is in other packages.
    Generic,
    /// Device code: `.kpack` archives (or only declared targets).
    Device,
    /// None of these: no device code and nothing that refers to any.
    Host,
}

/// A package's report.
#[derive(Debug, Serialize)]
pub struct PackageReport {
    /// deb, rpm or wheel.
    pub format: PackageKind,
    pub name: String,
    pub version: String,
    pub role: PackageRole,
    /// GPU targets whose device code the package carries (fat binaries'
    /// bundles, archives' arches), sorted.
    pub targets: Vec<String>,
    /// Targets the package's metadata declares (`X-Kpack-Gfx`,
    /// `rocm-kpack(<target>)` provides).
    pub declared_targets: Vec<String>,
    /// Fat binaries and their targets.
    pub fat_binaries: Vec<FatBinary>,
    /// Host binaries with a kpack marker (`.rocm_kpack_ref`, `.kpackrf`).
    pub split_binaries: Vec<String>,
    /// `.kpack` archives in the payload.
    pub archives: Vec<PackageArchive>,
    /// `.kpm` manifests in the payload.
    pub manifests: Vec<PackageManifest>,
    /// Device packages a generic (or AMD host) package expects, one per
    /// device group or target.
    pub expects: Vec<ExpectedPackage>,
}

/// A fat binary in a package.
#[derive(Debug, Serialize)]
pub struct FatBinary {
    pub path: String,
    /// Targets of its offload bundles, sorted.
    pub targets: Vec<String>,
}

/// A `.kpack` archive in a package.
#[derive(Debug, Serialize)]
pub struct PackageArchive {
    pub path: String,
    pub size: u64,
    /// The archive's `gfx_arch_family`: the tree (group or generic ISA)
    /// that ships it.
    pub group: String,
    pub arches: Vec<String>,
}

/// A `.kpm` manifest in a package.
#[derive(Debug, Serialize)]
pub struct PackageManifest {
    pub path: String,
    pub component: String,
    pub kpack_files: Vec<ManifestFileReport>,
}

/// A device package a generic package expects.
#[derive(Debug, Serialize)]
pub struct ExpectedPackage {
    pub name: String,
    /// The device group or target it is named after.
    pub group: String,
    /// The wheel extra that brings it (wheels only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra: Option<String>,
}

/// Why a package could not be inspected.
#[derive(Debug, thiserror::Error)]
pub enum InspectPackageError {
    /// Reading the package failed or it is malformed.
    #[error(transparent)]
    Package(#[from] PackageError),
    /// A member could not be read as what it looks like.
    #[error("{}: {member}: {detail}", path.display())]
    Member {
        path: std::path::PathBuf,
        member: String,
        detail: String,
    },
}

/// Inspects the package at `path`; `spec` names the device packages a
/// generic deb or rpm expects.
pub fn inspect_package(path: &Path, spec: &Spec) -> Result<PackageReport, InspectPackageError> {
    let pkg = AnyPackage::open(path)?;
    let mut report = PackageReport {
        format: pkg.kind(),
        name: pkg.name(),
        version: pkg.version(),
        role: PackageRole::Host,
        targets: Vec::new(),
        declared_targets: declared_targets(&pkg),
        fat_binaries: Vec::new(),
        split_binaries: Vec::new(),
        archives: Vec::new(),
        manifests: Vec::new(),
        expects: Vec::new(),
    };
    let mut failure: Option<InspectPackageError> = None;
    let scan = pkg.for_each_file(|member, size, data| {
        read_member(path, member, size, data, &mut report).map_err(|e| {
            failure = Some(e);
            PackageError::Invalid(String::new())
        })
    });
    if let Some(e) = failure {
        return Err(e);
    }
    scan?;
    let mut targets: BTreeSet<String> = BTreeSet::new();
    targets.extend(report.fat_binaries.iter().flat_map(|f| f.targets.clone()));
    targets.extend(report.archives.iter().flat_map(|a| a.arches.clone()));
    report.targets = targets.into_iter().collect();
    if report.fat_binaries.is_empty() {
        report.expects = expected_packages(&pkg, &report, spec);
    }
    report.role = if !report.fat_binaries.is_empty() {
        PackageRole::Fat
    } else if !report.manifests.is_empty()
        || !report.split_binaries.is_empty()
        || !report.expects.is_empty()
    {
        PackageRole::Generic
    } else if !report.archives.is_empty() || !report.declared_targets.is_empty() {
        PackageRole::Device
    } else {
        PackageRole::Host
    };
    Ok(report)
}

/// The targets a device package's metadata declares.
fn declared_targets(pkg: &AnyPackage) -> Vec<String> {
    match pkg {
        AnyPackage::Deb(r) => r
            .control
            .get("X-Kpack-Gfx")
            .map(|v| v.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default(),
        AnyPackage::Rpm(r) => r
            .provides()
            .iter()
            .filter_map(|d| {
                let target = d.name.strip_prefix("rocm-kpack(")?.strip_suffix(')')?;
                (naming::rpm_target_provide(target) == d.name).then(|| target.to_owned())
            })
            .collect(),
        AnyPackage::Wheel(_) => Vec::new(),
    }
}

/// Reads one payload file into `report`: a manifest, an archive, or an
/// ELF or PE binary (fat or split); anything else is skipped unread.
fn read_member(
    pkg: &Path,
    member: &str,
    size: u64,
    data: &mut dyn Read,
    report: &mut PackageReport,
) -> Result<(), InspectPackageError> {
    let bad = |detail: String| InspectPackageError::Member {
        path: pkg.to_path_buf(),
        member: member.to_owned(),
        detail,
    };
    if is_kpm_path(member) {
        if size > layout::MAX_MANIFEST_FILE {
            return Err(bad(format!(
                "{size} bytes, more than a manifest may have ({})",
                layout::MAX_MANIFEST_FILE
            )));
        }
        let mut bytes = Vec::new();
        data.take(size)
            .read_to_end(&mut bytes)
            .map_err(|e| bad(e.to_string()))?;
        let m = Manifest::parse(&bytes).map_err(|e| bad(e.to_string()))?;
        let r = manifest_report(&m);
        report.manifests.push(PackageManifest {
            path: member.to_owned(),
            component: r.component,
            kpack_files: r.kpack_files,
        });
        return Ok(());
    }
    let mut head = [0u8; 4];
    let n = read_up_to(data, &mut head).map_err(|e| bad(e.to_string()))?;
    let head = head.get(..n).unwrap_or_default();
    let archive = is_kpack_archive_path(member);
    let binary = head == b"\x7fELF" || head.starts_with(b"MZ");
    if !archive && !binary {
        return Ok(());
    }
    // Archives are opened and binaries mapped from a private temporary
    // copy, one member at a time.
    let mut tmp = tempfile::NamedTempFile::new().map_err(|e| bad(e.to_string()))?;
    tmp.write_all(head)
        .and_then(|()| io::copy(data, tmp.as_file_mut()).map(drop))
        .and_then(|()| tmp.as_file_mut().flush())
        .map_err(|e| bad(format!("cannot copy to a temporary file: {e}")))?;
    if archive {
        let a = Archive::open(tmp.path()).map_err(|e| bad(e.to_string()))?;
        report.archives.push(PackageArchive {
            path: member.to_owned(),
            size,
            group: a.gfx_arch_family().to_owned(),
            arches: a.gfx_arches().to_vec(),
        });
        return Ok(());
    }
    // SAFETY: the file is our private temporary copy; nothing else maps
    // or changes it while the map lives.
    let map = unsafe { memmap2::Mmap::map(tmp.as_file()) }.map_err(|e| bad(e.to_string()))?;
    let (bundles, marker) = if head == b"\x7fELF" {
        match crate::elf::inspect::inspect_elf(&map) {
            Ok(r) => (r.hip_fatbin, r.marker.is_some()),
            // Not every ELF is one we read (objects of other machines).
            Err(_) => return Ok(()),
        }
    } else if crate::coff::is_pe(&map) {
        match crate::coff::inspect::inspect_pe(&map) {
            Ok(r) => (r.hip_fat, r.marker.is_some()),
            Err(_) => return Ok(()),
        }
    } else {
        return Ok(());
    };
    if let Some(targets) = bundles
        .as_ref()
        .map(bundle_targets)
        .filter(|t| !t.is_empty())
    {
        report.fat_binaries.push(FatBinary {
            path: member.to_owned(),
            targets,
        });
    } else if marker {
        report.split_binaries.push(member.to_owned());
    }
    Ok(())
}

/// Reads until `buf` is full or the stream ends; returns the bytes read.
fn read_up_to(data: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while let Some(rest) = buf.get_mut(n..).filter(|r| !r.is_empty()) {
        match data.read(rest) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The device targets of a section's bundles, sorted, once each.
fn bundle_targets(section: &BundleSectionReport) -> Vec<String> {
    let set: BTreeSet<String> = section
        .bundles
        .iter()
        .flat_map(|b| b.entries.iter().filter_map(|e| e.target.clone()))
        .collect();
    set.into_iter().collect()
}

/// The device packages a generic package expects: a wheel's
/// `device-<target>` extras; for a deb or rpm, one package per device
/// tree its manifests list, named by the spec's templates (or AMD's
/// native ones, when the package is named as AMD's host packages are; a
/// host package without a manifest expects one per AMD device target).
fn expected_packages(
    pkg: &AnyPackage,
    report: &PackageReport,
    spec: &Spec,
) -> Vec<ExpectedPackage> {
    let (generic_kind, device_kind) = match pkg {
        AnyPackage::Wheel(w) => {
            return wheel_extras(&w.metadata.get_all("Requires-Dist").collect::<Vec<_>>())
        }
        AnyPackage::Deb(_) => (NameKind::DebGeneric, NameKind::DebDevice),
        AnyPackage::Rpm(_) => (NameKind::RpmGeneric, NameKind::RpmDevice),
    };
    let Some((naming, base)) = naming_of(&report.name, &report.version, generic_kind, spec) else {
        return Vec::new();
    };
    let groups: Vec<String> = if !report.manifests.is_empty() {
        report
            .manifests
            .iter()
            .flat_map(|m| m.kpack_files.iter().map(|f| f.family.clone()))
            .collect()
    } else if base != report.name && report.archives.is_empty() {
        // Named as AMD's host packages are, and no manifest to say more:
        // AMD ships one device package per target of its table.
        amd::DEVICE_TARGETS
            .iter()
            .map(|t| (*t).to_owned())
            .collect()
    } else {
        Vec::new()
    };
    let mut seen = BTreeSet::new();
    groups
        .into_iter()
        .filter(|g| seen.insert(g.clone()))
        .map(|group| ExpectedPackage {
            name: naming::device(&naming, device_kind, &base, &group),
            group,
            extra: None,
        })
        .collect()
}

/// The naming templates (with `{version}` filled in) and the `{name}`
/// under which `name` is the generic package: the spec's, else AMD's
/// native scheme's (`amdrocm-fft-host8.2` is `amdrocm-fft`'s host package).
fn naming_of(name: &str, version: &str, kind: NameKind, spec: &Spec) -> Option<(Naming, String)> {
    let mm = name_version(version).ok();
    let namings: Vec<Naming> = [spec.naming.clone(), Profile::AmdNative.naming()]
        .into_iter()
        .filter_map(|n| match (&mm, n.uses_version()) {
            (Some(v), true) => n.with_version(v).ok(),
            (None, true) => None,
            (_, false) => Some(n),
        })
        .collect();
    // A name in AMD's host form is read as that first: under the plain
    // templates it would be a generic package of its own name.
    let bases = [
        mm.as_ref()
            .and_then(|v| name.strip_suffix(&format!("-host{v}")).map(str::to_owned)),
        Some(name.to_owned()),
    ];
    bases.into_iter().flatten().find_map(|base| {
        namings
            .iter()
            .find(|n| naming::generic(n, kind, &base) == name)
            .map(|n| (n.clone(), base.clone()))
    })
}

/// The device wheels a wheel's `Requires-Dist` lines bring with
/// `device-<target>` extras (`amd-torch-device-gfx942; extra ==
/// "device-gfx942"`).
fn wheel_extras(requires: &[&str]) -> Vec<ExpectedPackage> {
    let mut out = Vec::new();
    for line in requires {
        let Some((requirement, marker)) = line.split_once(';') else {
            continue;
        };
        let name: String = requirement
            .trim()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            .collect();
        let Some(extra) = marker_extra(marker) else {
            continue;
        };
        if let Some(target) = amd::target_of_extra(&extra) {
            out.push(ExpectedPackage {
                name,
                group: target.to_owned(),
                extra: Some(extra.clone()),
            });
        }
    }
    out
}

/// The extra of an environment marker `extra == "x"` (either quote).
fn marker_extra(marker: &str) -> Option<String> {
    let rest = marker.split("extra").nth(1)?.trim_start();
    let rest = rest.strip_prefix("==")?.trim_start();
    let quote = rest.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let value = rest.get(1..)?.split(quote).next()?;
    Some(value.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wheel_extras_name_the_device_wheels() {
        let got = wheel_extras(&[
            "amd-torch-device-gfx942 ==2.9.1 ; extra == \"device-gfx942\"",
            "six",
            "kpkg-device-gfx1100; extra == 'device-gfx1100'",
            "kpkg-device-gfx1100; extra == \"device-all\"",
        ]);
        let names: Vec<(&str, &str)> = got
            .iter()
            .map(|e| (e.name.as_str(), e.group.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("amd-torch-device-gfx942", "gfx942"),
                ("kpkg-device-gfx1100", "gfx1100")
            ]
        );
    }

    #[test]
    fn amd_host_packages_are_recognised_by_their_name() {
        let spec = Spec::builtin();
        let (naming, base) = naming_of(
            "amdrocm-fft-host8.2",
            "8.2.0-1",
            NameKind::DebGeneric,
            &spec,
        )
        .expect("AMD");
        assert_eq!(base, "amdrocm-fft");
        assert_eq!(
            naming::device(&naming, NameKind::DebDevice, &base, "gfx942"),
            "amdrocm-fft8.2-gfx942"
        );
        let (naming, base) =
            naming_of("librocrand1", "5.3.3-4+kpack1", NameKind::DebGeneric, &spec).expect("ours");
        assert_eq!(
            naming::device(&naming, NameKind::DebDevice, &base, "gfx90a"),
            "librocrand1-gfx90a"
        );
    }
}
