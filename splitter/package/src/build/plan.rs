//! What every format's build shares: the metadata resolved from the input
//! and the spec, the relations between the generic, device, transitional
//! and meta packages, their descriptions, and each group's compression.

use std::path::PathBuf;

use rocm_kpack_format::layout;
use rocm_kpack_pkgspec::{DevicePayload, NameKind, Spec};

use super::wheels::WheelSource;
use super::BuiltPackage;
use crate::compress::Compression;
use crate::device::{self, DeviceGroup, SplitDir};
use crate::meta::{self, wrap, PackageMeta};
use crate::naming;
use crate::tree::{self, Entry, EntryKind, Payload};
use crate::{Format, PackageError, PackageOptions};

/// The metadata every format starts from: the options' metadata, what the
/// generic tree's wheel METADATA says where that is empty, then the spec's
/// defaults for what neither says.
pub(super) fn resolve_meta(
    opts: &PackageOptions,
    wheel: Option<&WheelSource>,
) -> Result<PackageMeta, PackageError> {
    let mut meta = opts.meta.clone();
    if let Some(m) = wheel.and_then(|w| w.metadata.as_ref()) {
        let fill = |field: &mut String, key: &str| {
            if field.is_empty() {
                *field = m.get(key).unwrap_or_default().to_string();
            }
        };
        fill(&mut meta.name, "Name");
        fill(&mut meta.version, "Version");
        fill(&mut meta.summary, "Summary");
    }
    meta.validate()?;
    if meta.architecture.is_empty() {
        meta.architecture = "amd64".into();
    }
    // The spec's metadata defaults fill what the input does not say.
    let defaults = &opts.spec.package;
    if meta.maintainer.is_empty() {
        meta.maintainer = defaults
            .maintainer
            .clone()
            .unwrap_or_else(|| meta::DEFAULT_MAINTAINER.into());
    }
    if meta.section.is_none() {
        meta.section = defaults.section.clone();
    }
    if meta.license.is_none() {
        meta.license = defaults.license.clone();
    }
    if meta.homepage.is_none() {
        meta.homepage = defaults.homepage.clone();
    }

    Ok(meta)
}

/// When the spec names a kpack store (`[fetch] source_url`), the generic
/// package ships `<dir>/<component>.sources.toml` next to each `.kpm`
/// (the per-component sources file rocm-kpack-fetch reads), unless the
/// tree already has one.
pub(super) fn add_fetch_sources(payload: &mut Payload, spec: &Spec) -> Result<(), PackageError> {
    let Some(url) = &spec.fetch.source_url else {
        return Ok(());
    };
    let kpms: Vec<String> = payload
        .iter()
        .filter(|e| device::is_kpm_path(&e.path) && matches!(e.kind, EntryKind::File { .. }))
        .map(|e| e.path.clone())
        .collect();
    for kpm in kpms {
        let dir = tree::parent_of(&kpm);
        let Some(component) = kpm.rsplit('/').next().and_then(layout::manifest_component) else {
            continue;
        };
        let path = format!(
            "{dir}/{}",
            layout::fetch::component_sources_file_name(component)
        );
        if payload.contains(&path) {
            continue;
        }
        let quote = |s: &str| toml::Value::String(s.to_string()).to_string();
        let text = format!(
            "# Where rocm-kpack-fetch finds the device archives of {component}.\n[[source]]\nurl = {}\ncomponents = [{}]\n",
            quote(url),
            quote(component)
        );
        payload.insert(Entry::bytes(&path, 0o644, text.into_bytes()))?;
    }
    Ok(())
}

/// The compression of one group's device package (see
/// [`PackageOptions::device_compression`]).
pub(super) fn device_compression(
    opts: &PackageOptions,
    g: &DeviceGroup,
) -> (Compression, Option<u32>) {
    // The whole payload counts: database files beside the archives are
    // uncompressed code objects, most of the bytes in real libraries.
    let only_compressed_archives = !g.archives.is_empty()
        && g.archives.iter().all(|a| a.compressed)
        && g.payload.iter().all(|e| {
            !matches!(e.kind, crate::tree::EntryKind::File { .. })
                || crate::device::is_kpack_archive_path(&e.path)
        });
    let solid = opts.spec.package.device_payload == Some(DevicePayload::Solid);
    match opts.device_compression {
        Some(c) => (c, opts.device_level),
        // One stream across the code objects: the level is the release
        // level whatever the generic package's compression.
        None if solid => (Compression::ZstdLong, opts.device_level),
        None if only_compressed_archives => (Compression::Gzip, Some(1)),
        None => (opts.compression, opts.level),
    }
}

pub(super) fn built(
    format: Format,
    name: &str,
    version: &str,
    group: Option<&DeviceGroup>,
    entries: usize,
) -> BuiltPackage {
    BuiltPackage {
        format,
        name: name.to_string(),
        version: version.to_string(),
        group: group.map(|g| g.name.clone()),
        targets: group.map(|g| g.targets.clone()).unwrap_or_default(),
        path: PathBuf::new(),
        size: 0,
        entries,
        meta: false,
        transitional: false,
    }
}

/// A meta package's [`BuiltPackage`] entry.
pub(super) fn built_meta(
    format: Format,
    name: &str,
    version: &str,
    entries: usize,
) -> BuiltPackage {
    BuiltPackage {
        meta: true,
        ..built(format, name, version, None, entries)
    }
}

pub(super) fn meta_summary(meta: &PackageMeta) -> String {
    format!(
        "{} - host code and device code for every GPU target",
        meta.name
    )
}

pub(super) fn meta_description(meta: &PackageMeta, members: &[String]) -> String {
    wrap(
        &format!(
            "This package installs {} with the device code of every GPU target it was \
             built for: {}.",
            meta.name,
            members.join(", ")
        ),
        72,
    )
}

/// The version without its Debian epoch, as in file names.
pub(super) fn version_for_file(version: &str) -> &str {
    match version.split_once(':') {
        Some((e, rest)) if e.chars().all(|c| c.is_ascii_digit()) => rest,
        _ => version,
    }
}

pub(super) fn device_summary(meta: &PackageMeta, group: &str) -> String {
    let base = meta.summary_or_default();
    let s = format!("{base} - {group} device code");
    if s.len() <= 80 {
        s
    } else {
        format!("{} - {group} device code", meta.name)
    }
}

pub(super) fn device_long_description(meta: &PackageMeta, g: &DeviceGroup) -> String {
    let targets = if g.targets.is_empty() {
        "(none recorded)".to_string()
    } else {
        g.targets.join(" ")
    };
    let what = if g.generic_isa {
        format!(
            "built for the AMD generic ISA {}, which serves the targets {targets} \
             that have no code object of their own",
            g.name
        )
    } else {
        format!(
            "for the AMD {} device group, serving the targets {targets}",
            g.name
        )
    };
    wrap(
        &format!(
            "GPU device code (kernel archives) of {} {what}. The host code is in {}; \
             the rocm-kpack runtime loads these archives on demand.",
            meta.name, meta.name
        ),
        72,
    )
}

/// The device packages a group's package depends on besides the generic
/// one: the generic-ISA packages of the ISAs it carries (see
/// [`DeviceGroup::requires`]), named with `kind`'s template.
pub(super) fn generic_isa_packages(
    opts: &PackageOptions,
    kind: NameKind,
    name: &str,
    g: &DeviceGroup,
) -> Vec<String> {
    g.requires
        .iter()
        .map(|isa| naming::device(&opts.spec.naming, kind, name, isa))
        .collect()
}

/// The packages of earlier groups (the spec's `replaces`) that `g`'s
/// package takes files over from, named with `kind`'s template: deb
/// `Replaces`/`Breaks`, rpm `Obsoletes` (docs/packaging.md "Upgrades from
/// the previous family table").
pub(super) fn replaced_packages(
    opts: &PackageOptions,
    kind: NameKind,
    name: &str,
    g: &DeviceGroup,
) -> Vec<String> {
    if g.generic_isa {
        return Vec::new();
    }
    opts.spec
        .replaced_by(&g.name)
        .into_iter()
        .map(|old| naming::device(&opts.spec.naming, kind, name, old))
        .collect()
}

/// The transitional packages to write: each replaced group whose name no
/// current group has, with the device groups of this split that succeed
/// it (none: no package, the split has no code for it).
pub(super) fn transitions<'a>(
    split: &'a SplitDir,
    opts: &'a PackageOptions,
) -> Vec<(&'a str, Vec<&'a DeviceGroup>)> {
    opts.spec
        .replacements()
        .into_iter()
        .filter(|r| r.transitional && split.groups.iter().all(|g| g.name != r.old))
        .filter_map(|r| {
            let successors: Vec<&DeviceGroup> = split
                .groups
                .iter()
                .filter(|g| r.successors.contains(&g.name.as_str()))
                .collect();
            (!successors.is_empty()).then_some((r.old, successors))
        })
        .collect()
}

pub(super) fn transitional_summary(meta: &PackageMeta, old: &str) -> String {
    format!("{} - {old} device code (transitional package)", meta.name)
}

pub(super) fn transitional_description(
    meta: &PackageMeta,
    old: &str,
    successors: &[String],
) -> String {
    wrap(
        &format!(
            "This transitional package moves installations of the {old} device code of {} \
             to the packages of the GPU families that now carry it: {}. \
             It can be removed once they are installed.",
            meta.name,
            successors.join(", ")
        ),
        72,
    )
}

/// A transitional package's [`BuiltPackage`] entry: the replaced group,
/// no archives of its own.
pub(super) fn built_transitional(
    format: Format,
    name: &str,
    version: &str,
    old: &str,
    entries: usize,
) -> BuiltPackage {
    BuiltPackage {
        group: Some(old.to_string()),
        transitional: true,
        ..built(format, name, version, None, entries)
    }
}
