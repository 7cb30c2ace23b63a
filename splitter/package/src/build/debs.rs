//! The debs of a split: generic, one per device group, transitional and
//! meta packages (docs/packaging.md).

use std::path::Path;

use rocm_kpack_pkgspec::{NameKind, Versioning};

use super::plan::{
    add_fetch_sources, built, built_meta, built_transitional, device_compression,
    device_long_description, device_summary, generic_isa_packages, meta_description, meta_summary,
    replaced_packages, transitional_description, transitional_summary, transitions,
    version_for_file,
};
use super::{write_package, BuiltPackage, Job, PendingPackages};
use crate::compress::Compression;
use crate::deb;
use crate::device::DeviceGroup;
use crate::meta::{self, add_relation, render_description, ControlFields, PackageMeta};
use crate::naming;
use crate::tree::{Entry, EntryKind, Payload};
use crate::{Format, PackageError, PackageOptions};

/// The metadata of the split debs: the version with the spec's suffix
/// (pkgspec `version`), and `Source: <name> (<input version>)` when that
/// differs from the binary version, as binNMUs say it, so the source
/// version stays the input's.
fn deb_meta(meta: &PackageMeta, versioning: &Versioning) -> Result<PackageMeta, PackageError> {
    let version = versioning
        .deb(&meta.version)
        .map_err(PackageError::Invalid)?;
    let mut out = meta.clone();
    if version != meta.version {
        let source = meta.source.as_deref().unwrap_or(&meta.name).trim();
        if !source.contains('(') {
            out.source = Some(format!("{source} ({})", meta.version));
        }
    }
    out.version = version;
    Ok(out)
}

fn generic_deb_control(
    meta: &PackageMeta,
    name: &str,
    payload: &Payload,
) -> (ControlFields, Vec<meta::ControlFile>) {
    let mut c = if meta.deb.control.is_empty() {
        let mut c = ControlFields::default();
        c.set("Package", name.to_string());
        if let Some(s) = &meta.source {
            c.set("Source", s.clone());
        }
        c.set("Version", meta.version.clone());
        c.set("Architecture", meta.architecture.clone());
        c.set("Maintainer", meta.maintainer.clone());
        for (k, v) in &meta.deb.fields {
            c.set(k, v.clone());
        }
        if let Some(s) = &meta.section {
            c.set("Section", s.clone());
        }
        c.set(
            "Priority",
            meta.priority.clone().unwrap_or_else(|| "optional".into()),
        );
        if let Some(h) = &meta.homepage {
            c.set("Homepage", h.clone());
        }
        c.set(
            "Description",
            render_description(&meta.summary_or_default(), &meta.description),
        );
        c
    } else {
        let mut c = meta.deb.control.clone();
        c.set("Package", name.to_string());
        if let Some(s) = &meta.source {
            c.set_before("Source", s.clone(), "Version");
        }
        c.set("Version", meta.version.clone());
        c
    };
    c.remove("Installed-Size");
    let rec = add_relation(c.get("Recommends"), naming::FETCH_PACKAGE);
    c.set_before("Recommends", rec, "Section");
    if c.get("Description").is_none() {
        c.set(
            "Description",
            render_description(&meta.summary_or_default(), &meta.description),
        );
    }
    // conffiles may only name files the generic package still ships.
    let files = meta
        .deb
        .control_files
        .iter()
        .filter_map(|f| {
            if f.name != "conffiles" {
                return Some(f.clone());
            }
            let text = String::from_utf8_lossy(&f.data);
            let kept: String = text
                .lines()
                .filter(|l| {
                    let p = l
                        .trim()
                        .trim_start_matches("remove-on-upgrade ")
                        .trim_start_matches('/');
                    !p.is_empty() && payload.contains(p)
                })
                .map(|l| format!("{l}\n"))
                .collect();
            (!kept.is_empty()).then(|| meta::ControlFile {
                name: f.name.clone(),
                mode: f.mode,
                data: kept.into_bytes(),
            })
        })
        .collect();
    (c, files)
}

/// The fields every deb of a split but the generic one starts with: name,
/// the input's source, version, architecture and maintainer, and `Depends`
/// on each of `members` at exactly this version.
fn split_deb_control(meta: &PackageMeta, name: &str, members: &[&str]) -> ControlFields {
    let mut c = ControlFields::default();
    c.set("Package", name.to_string());
    c.set(
        "Source",
        meta.source.clone().unwrap_or_else(|| meta.name.clone()),
    );
    c.set("Version", meta.version.clone());
    c.set("Architecture", meta.architecture.clone());
    c.set("Maintainer", meta.maintainer.clone());
    let depends: Vec<String> = members
        .iter()
        .map(|p| format!("{p} (= {})", meta.version))
        .collect();
    c.set("Depends", depends.join(", "));
    c
}

fn device_deb_control(
    meta: &PackageMeta,
    g: &DeviceGroup,
    name: &str,
    generic: &str,
    generic_isas: &[String],
    replaced: &[String],
) -> ControlFields {
    let members: Vec<&str> = std::iter::once(generic)
        .chain(generic_isas.iter().map(String::as_str))
        .collect();
    let mut c = split_deb_control(meta, name, &members);
    c.set("Provides", naming::device_code_provide(generic));
    if !replaced.is_empty() {
        // Files move here from an older family's package: dpkg lets this
        // package overwrite them (Replaces), and apt upgrades or removes
        // the older package first (Breaks).
        let older: Vec<String> = replaced
            .iter()
            .map(|p| format!("{p} (<< {})", meta.version))
            .collect();
        c.set("Replaces", older.join(", "));
        c.set("Breaks", older.join(", "));
    }
    c.set(
        "Section",
        meta.section.clone().unwrap_or_else(|| "libs".into()),
    );
    c.set(
        "Priority",
        meta.priority.clone().unwrap_or_else(|| "optional".into()),
    );
    if let Some(ma) = meta.deb.fields.get("Multi-Arch") {
        c.set("Multi-Arch", ma.clone());
    }
    if let Some(h) = &meta.homepage {
        c.set("Homepage", h.clone());
    }
    if !g.targets.is_empty() {
        c.set("X-Kpack-Gfx", g.targets.join(" "));
    }
    c.set(
        "Description",
        render_description(
            &device_summary(meta, &g.name),
            &device_long_description(meta, g),
        ),
    );
    c
}

pub(super) fn build_debs(job: &Job<'_>, pending: &mut PendingPackages) -> Result<(), PackageError> {
    let (split, meta, opts, out_dir) = (job.split, job.meta, job.opts, job.out_dir);
    let meta = &deb_meta(meta, &opts.spec.version)?;
    let arch = &meta.architecture;
    let ver = version_for_file(&meta.version);
    let deb_name_ok = |n: &str| {
        n.len() >= 2
            && n.chars()
                .next()
                .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            && n.chars().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '+' | '-' | '.')
            })
    };
    let naming_t = &opts.spec.naming;
    let gname = naming::generic(naming_t, NameKind::DebGeneric, &meta.name);
    let mut names = vec![gname.clone()];
    names.extend(
        split
            .groups
            .iter()
            .map(|g| naming::device(naming_t, NameKind::DebDevice, &meta.name, &g.name)),
    );
    let meta_name = (!naming_t.deb_meta.is_empty())
        .then(|| naming::generic(naming_t, NameKind::DebMeta, &meta.name));
    if let Some(bad) = names.iter().chain(&meta_name).find(|n| !deb_name_ok(n)) {
        return Err(PackageError::Invalid(format!(
            "{bad:?} is not a valid Debian package name (lowercase letters, digits, `+-.`)"
        )));
    }
    let mut payload = split.generic.clone();
    add_fetch_sources(&mut payload, &opts.spec)?;
    let generic_doc = format!("usr/share/doc/{gname}");
    if gname != meta.name && !payload.contains(&generic_doc) {
        // A template that renames the generic package (amd-native's
        // `amdrocm-fft-host8.2`) moves its doc directory along: Debian
        // wants the copyright file at usr/share/doc/<package>/.
        move_tree(
            &mut payload,
            &format!("usr/share/doc/{}", meta.name),
            &generic_doc,
        )?;
    }
    payload.add_parent_dirs();
    let (control, files) = generic_deb_control(meta, &gname, &payload);
    let built_deb = built(Format::Deb, &gname, &meta.version, None, payload.len());
    let deb_file = DebFile {
        control,
        control_files: &files,
        payload: &payload,
        compression: (opts.compression, opts.level),
    };
    write_deb_pending(
        deb_file,
        format!("{gname}_{ver}_{arch}.deb"),
        built_deb,
        opts,
        out_dir,
        pending,
    )?;
    let has_doc = payload
        .get(&generic_doc)
        .is_some_and(|e| matches!(e.kind, EntryKind::Dir));
    for g in &split.groups {
        let name = naming::device(naming_t, NameKind::DebDevice, &meta.name, &g.name);
        let mut payload = g.payload.clone();
        // The device package's doc directory points at the generic one
        // (same source, and it depends on it): copyright and changelog
        // are shipped once.
        let doc = format!("usr/share/doc/{name}");
        if has_doc && !payload.contains(&doc) {
            payload.insert(Entry::symlink(&doc, &gname))?;
        }
        payload.add_parent_dirs();
        let isa_pkgs = generic_isa_packages(opts, NameKind::DebDevice, &meta.name, g);
        let replaced = replaced_packages(opts, NameKind::DebDevice, &meta.name, g);
        let control = device_deb_control(meta, g, &name, &gname, &isa_pkgs, &replaced);
        let built_deb = built(Format::Deb, &name, &meta.version, Some(g), payload.len());
        let deb_file = DebFile {
            control,
            control_files: &[],
            payload: &payload,
            compression: device_compression(opts, g),
        };
        write_deb_pending(
            deb_file,
            format!("{name}_{ver}_{arch}.deb"),
            built_deb,
            opts,
            out_dir,
            pending,
        )?;
    }
    let relay = |name: &str, members: &[String], section: &str, description: String| RelayDeb {
        name: name.to_string(),
        members: members.to_vec(),
        section: section.to_string(),
        description,
        doc_link: has_doc.then(|| gname.clone()),
    };
    for (old, successors) in transitions(split, opts) {
        let name = naming::device(naming_t, NameKind::DebDevice, &meta.name, old);
        if !deb_name_ok(&name) {
            return Err(PackageError::Invalid(format!(
                "{name:?} is not a valid Debian package name (lowercase letters, digits, `+-.`)"
            )));
        }
        let succ: Vec<String> = successors
            .iter()
            .map(|g| naming::device(naming_t, NameKind::DebDevice, &meta.name, &g.name))
            .collect();
        let members: Vec<String> = std::iter::once(gname.clone())
            .chain(succ.iter().cloned())
            .collect();
        let description = render_description(
            &transitional_summary(meta, old),
            &transitional_description(meta, old, &succ),
        );
        // Debian's section for transitional packages (policy 2.4).
        let deb = relay(&name, &members, "oldlibs", description);
        let entry = |entries| built_transitional(Format::Deb, &name, &meta.version, old, entries);
        write_relay_deb(&deb, meta, entry, opts, out_dir, pending)?;
    }
    if let Some(name) = meta_name {
        // names: the generic package, then every device package.
        let description = render_description(&meta_summary(meta), &meta_description(meta, &names));
        // Debian's section for packages that only pull in others.
        let deb = relay(&name, &names, "metapackages", description);
        let entry = |entries| built_meta(Format::Deb, &name, &meta.version, entries);
        write_relay_deb(&deb, meta, entry, opts, out_dir, pending)?;
    }
    Ok(())
}

/// Moves the entries at and below `from` to `to` (nothing when `from` is
/// absent).
fn move_tree(payload: &mut Payload, from: &str, to: &str) -> Result<(), PackageError> {
    let moved: Vec<(Entry, String)> = payload
        .iter()
        .filter_map(|e| {
            let rest = e.path.strip_prefix(from)?;
            (rest.is_empty() || rest.starts_with('/')).then(|| (e.clone(), format!("{to}{rest}")))
        })
        .collect();
    for (mut e, path) in moved {
        payload.remove(&e.path);
        e.path = path;
        payload.insert(e)?;
    }
    Ok(())
}

/// A deb with no files of its own (a doc-directory symlink at most) that
/// depends on `members` at exactly the split's version: transitional and
/// meta packages.
struct RelayDeb {
    name: String,
    members: Vec<String>,
    section: String,
    /// The rendered Description field.
    description: String,
    /// The generic package whose doc directory `usr/share/doc/<name>`
    /// links to, when it has one.
    doc_link: Option<String>,
}

fn write_relay_deb(
    deb: &RelayDeb,
    meta: &PackageMeta,
    entry: impl FnOnce(usize) -> BuiltPackage,
    opts: &PackageOptions,
    out_dir: &Path,
    pending: &mut PendingPackages,
) -> Result<(), PackageError> {
    let name = &deb.name;
    let mut payload = Payload::new();
    if let Some(generic) = &deb.doc_link {
        payload.insert(Entry::symlink(&format!("usr/share/doc/{name}"), generic))?;
    }
    payload.add_parent_dirs();
    let members: Vec<&str> = deb.members.iter().map(String::as_str).collect();
    let mut c = split_deb_control(meta, name, &members);
    c.set("Section", deb.section.clone());
    c.set("Priority", "optional".to_string());
    if let Some(ma) = meta.deb.fields.get("Multi-Arch") {
        c.set("Multi-Arch", ma.clone());
    }
    c.set("Description", deb.description.clone());
    let built_deb = entry(payload.len());
    let deb_file = DebFile {
        control: c,
        control_files: &[],
        payload: &payload,
        compression: (opts.compression, opts.level),
    };
    let ver = version_for_file(&meta.version);
    write_deb_pending(
        deb_file,
        format!("{name}_{ver}_{}.deb", meta.architecture),
        built_deb,
        opts,
        out_dir,
        pending,
    )
}

/// One deb of a split: what differs between the generic, device and
/// transitional debs (the rest comes from the options).
struct DebFile<'a> {
    control: ControlFields,
    control_files: &'a [meta::ControlFile],
    payload: &'a Payload,
    compression: (Compression, Option<u32>),
}

/// Writes `file` as `out_dir/file_name` (pending until the whole set is
/// written), every entry at SOURCE_DATE_EPOCH.
fn write_deb_pending(
    file: DebFile<'_>,
    file_name: String,
    built: BuiltPackage,
    opts: &PackageOptions,
    out_dir: &Path,
    pending: &mut PendingPackages,
) -> Result<(), PackageError> {
    let spec = deb::DebSpec {
        control: file.control,
        control_files: file.control_files,
        payload: file.payload,
        compression: file.compression.0,
        level: file.compression.1,
        mtime: opts.source_date_epoch,
    };
    write_package(out_dir, file_name, built, pending, |w| {
        deb::write_deb(w, &spec)
    })
}
