//! The rpms of a split: generic, one per device group, transitional and
//! meta packages (docs/packaging.md).

use std::path::Path;

use rocm_kpack_pkgspec::{NameKind, Versioning};

use super::plan::{
    add_fetch_sources, built, built_meta, built_transitional, device_compression,
    device_long_description, device_summary, generic_isa_packages, meta_description, meta_summary,
    replaced_packages, transitional_description, transitional_summary, transitions,
};
use super::{write_package, BuiltPackage, Job, PendingPackages};
use crate::device::DeviceGroup;
use crate::meta::PackageMeta;
use crate::naming;
use crate::rpm;
use crate::tree::Payload;
use crate::{Format, PackageError, PackageOptions};

/// rpm (epoch, version, release) of the split packages: the Debian epoch
/// and revision become rpm's unless the metadata sets them; `-` left in
/// the upstream version becomes `_`; the release gets the spec's suffix
/// (pkgspec `version`: `4` -> `4.kpack1`, newer in rpm's ordering).
pub fn rpm_evr(
    meta: &PackageMeta,
    versioning: &Versioning,
) -> Result<(Option<u32>, String, String), PackageError> {
    let (epoch, version, revision) = rpm::split_evr(&meta.version);
    let epoch = meta
        .rpm
        .epoch
        .or_else(|| epoch.and_then(|e| e.parse().ok()));
    let release = meta
        .rpm
        .release
        .clone()
        .or_else(|| revision.map(str::to_string))
        .unwrap_or_else(|| "1".into());
    let release = versioning
        .rpm_release(&release.replace('-', "_"))
        .map_err(PackageError::Invalid)?;
    Ok((epoch, version.replace('-', "_"), release))
}

fn base_rpm_spec(meta: &PackageMeta, opts: &PackageOptions) -> Result<rpm::RpmSpec, PackageError> {
    let (epoch, version, release) = rpm_evr(meta, &opts.spec.version)?;
    let source = meta
        .source
        .as_deref()
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or(&meta.name);
    let requires = meta
        .rpm
        .requires
        .iter()
        .map(|r| rpm::Dep::parse(r).map_err(PackageError::Invalid))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rpm::RpmSpec {
        name: meta.name.clone(),
        epoch,
        source_rpm: format!("{source}-{version}-{release}.src.rpm"),
        version,
        release,
        arch: rpm::rpm_arch(&meta.architecture).to_string(),
        summary: meta.summary_or_default(),
        description: if meta.description.trim().is_empty() {
            meta.summary_or_default()
        } else {
            meta.description.clone()
        },
        license: meta.license.clone().unwrap_or_else(|| "Unknown".into()),
        group: meta
            .rpm
            .group
            .clone()
            .unwrap_or_else(|| "System Environment/Libraries".into()),
        url: meta.homepage.clone(),
        packager: Some(meta.maintainer.clone()),
        provides: meta.rpm.provides.clone(),
        requires,
        conflicts: meta.rpm.conflicts.clone(),
        obsoletes: meta.rpm.obsoletes.clone(),
        recommends: Vec::new(),
        scripts: meta.rpm.scripts.clone(),
        config_files: meta.rpm.config_files.clone(),
        file_triggers: Vec::new(),
        build_time: opts.source_date_epoch,
        changelog: Some((
            meta.maintainer.clone(),
            "- Repackaged by rocm-kpack: host code and GPU device code in separate packages."
                .into(),
        )),
        compression: opts.compression,
        level: opts.level,
    })
}

pub(super) fn build_rpms(job: &Job<'_>, pending: &mut PendingPackages) -> Result<(), PackageError> {
    let (split, meta, opts, out_dir) = (job.split, job.meta, job.opts, job.out_dir);
    let naming_t = &opts.spec.naming;
    let mut generic = base_rpm_spec(meta, opts)?;
    generic.name = naming::generic(naming_t, NameKind::RpmGeneric, &meta.name);
    // As the generic deb's Recommends: dnf installs the fetcher with the
    // generic package, and its file trigger fetches the device code.
    generic.recommends = meta.rpm.recommends.clone();
    if !generic
        .recommends
        .iter()
        .any(|d| d.name == naming::FETCH_PACKAGE)
    {
        generic
            .recommends
            .push(rpm::Dep::any(naming::FETCH_PACKAGE));
    }
    let mut payload = split.generic.clone();
    add_fetch_sources(&mut payload, &opts.spec)?;
    payload.add_parent_dirs();
    write_rpm_pending(&generic, &payload, None, out_dir, pending)?;
    for g in &split.groups {
        let mut spec = base_rpm_spec(meta, opts)?;
        spec.name = naming::device(naming_t, NameKind::RpmDevice, &meta.name, &g.name);
        // The payload holds no CPU code (GPU archives and database files).
        spec.arch = "noarch".into();
        spec.summary = device_summary(meta, &g.name);
        spec.description = device_long_description(meta, g);
        spec.requires = std::iter::once(generic.name.clone())
            .chain(generic_isa_packages(
                opts,
                NameKind::RpmDevice,
                &meta.name,
                g,
            ))
            .map(|p| rpm::Dep::eq(&p, &generic.evr()))
            .collect();
        spec.conflicts.clear();
        // Takes files over from an older family's package: obsoleting its
        // older versions lets rpm replace them in one transaction.
        spec.obsoletes = replaced_packages(opts, NameKind::RpmDevice, &meta.name, g)
            .iter()
            .map(|p| rpm::Dep::lt(p, &generic.evr()))
            .collect();
        spec.scripts.clear();
        spec.config_files.clear();
        (spec.compression, spec.level) = device_compression(opts, g);
        spec.provides = std::iter::once(rpm::Dep::any(&naming::device_code_provide(&generic.name)))
            .chain(
                g.targets
                    .iter()
                    .map(|t| rpm::Dep::any(&naming::rpm_target_provide(t))),
            )
            .collect();
        let mut payload = g.payload.clone();
        payload.add_parent_dirs();
        write_rpm_pending(&spec, &payload, Some(g), out_dir, pending)?;
    }
    for (old, successors) in transitions(split, opts) {
        let succ: Vec<String> = successors
            .iter()
            .map(|g| naming::device(naming_t, NameKind::RpmDevice, &meta.name, &g.name))
            .collect();
        let members: Vec<String> = std::iter::once(generic.name.clone())
            .chain(succ.iter().cloned())
            .collect();
        let spec = empty_rpm_spec(
            base_rpm_spec(meta, opts)?,
            naming::device(naming_t, NameKind::RpmDevice, &meta.name, old),
            transitional_summary(meta, old),
            transitional_description(meta, old, &succ),
            &members,
            &generic.evr(),
        );
        write_empty_rpm(&spec, out_dir, pending, |n| {
            built_transitional(Format::Rpm, &spec.name, &spec.evr(), old, n)
        })?;
    }
    if !naming_t.rpm_meta.is_empty() {
        let members: Vec<String> = std::iter::once(generic.name.clone())
            .chain(
                split
                    .groups
                    .iter()
                    .map(|g| naming::device(naming_t, NameKind::RpmDevice, &meta.name, &g.name)),
            )
            .collect();
        let spec = empty_rpm_spec(
            base_rpm_spec(meta, opts)?,
            naming::generic(naming_t, NameKind::RpmMeta, &meta.name),
            meta_summary(meta),
            meta_description(meta, &members),
            &members,
            &generic.evr(),
        );
        write_empty_rpm(&spec, out_dir, pending, |n| {
            built_meta(Format::Rpm, &spec.name, &spec.evr(), n)
        })?;
    }
    Ok(())
}

/// Writes a file-less rpm (transitional or meta) made by [`empty_rpm_spec`];
/// `entry` describes it from its payload's entry count.
fn write_empty_rpm(
    spec: &rpm::RpmSpec,
    out_dir: &Path,
    pending: &mut PendingPackages,
    entry: impl FnOnce(usize) -> BuiltPackage,
) -> Result<(), PackageError> {
    let payload = Payload::new();
    write_package(
        out_dir,
        spec.file_name(),
        entry(payload.len()),
        pending,
        |w| rpm::write_rpm(w, spec, &payload, out_dir),
    )
}

/// A file-less noarch rpm named `name` that requires each of `members` at
/// exactly `evr` (transitional and meta packages), from the split's base
/// spec without its provides, conflicts, obsoletes, scripts or config files.
fn empty_rpm_spec(
    mut spec: rpm::RpmSpec,
    name: String,
    summary: String,
    description: String,
    members: &[String],
    evr: &str,
) -> rpm::RpmSpec {
    spec.name = name;
    spec.arch = "noarch".into();
    spec.summary = summary;
    spec.description = description;
    spec.requires = members.iter().map(|p| rpm::Dep::eq(p, evr)).collect();
    spec.provides.clear();
    spec.conflicts.clear();
    spec.obsoletes.clear();
    spec.scripts.clear();
    spec.config_files.clear();
    spec
}

fn write_rpm_pending(
    spec: &rpm::RpmSpec,
    payload: &Payload,
    group: Option<&DeviceGroup>,
    out_dir: &Path,
    pending: &mut PendingPackages,
) -> Result<(), PackageError> {
    write_package(
        out_dir,
        spec.file_name(),
        built(Format::Rpm, &spec.name, &spec.evr(), group, payload.len()),
        pending,
        |w| rpm::write_rpm(w, spec, payload, out_dir),
    )
}
