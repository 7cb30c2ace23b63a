//! The wheels of a split: the generic wheel with one `device-<group>`
//! extra per group, and one device wheel per group (docs/packaging.md).

use std::collections::BTreeMap;
use std::path::Path;

use rocm_kpack_pkgspec::NameKind;

use super::plan::{
    add_fetch_sources, built, device_long_description, device_summary, generic_isa_packages,
    transitions,
};
use super::{write_package, Job, PendingPackages};
use crate::device::DeviceGroup;
use crate::naming;
use crate::tree::{EntryKind, Payload};
use crate::wheel;
use crate::{Format, PackageError, PackageOptions};

/// What the generic tree says about the wheel it came from.
#[derive(Debug, Clone, Default)]
pub(super) struct WheelSource {
    /// `*.dist-info` directory in the generic tree.
    dist_info: Option<String>,
    /// Its METADATA.
    pub(super) metadata: Option<wheel::CoreMetadata>,
    /// Its WHEEL.
    wheel: Option<wheel::CoreMetadata>,
    /// Its other files (kept), by name relative to the dist-info dir.
    extra: BTreeMap<String, Vec<u8>>,
}

/// dist-info files that describe an installation, not a wheel.
const INSTALL_ONLY: [&str; 4] = ["RECORD", "INSTALLER", "REQUESTED", "direct_url.json"];

impl WheelSource {
    pub(super) fn from_generic(payload: &Payload) -> Result<WheelSource, PackageError> {
        let dist_infos: Vec<&str> = payload
            .iter()
            .filter(|e| !e.path.contains('/') && e.path.ends_with(".dist-info"))
            .map(|e| e.path.as_str())
            .collect();
        let dir = match dist_infos.as_slice() {
            [] => return Ok(WheelSource::default()),
            [one] => (*one).to_string(),
            _ => {
                return Err(PackageError::Invalid(format!(
                    "generic tree holds several .dist-info directories: {}",
                    dist_infos.join(", ")
                )))
            }
        };
        let prefix = format!("{dir}/");
        let mut src = WheelSource {
            dist_info: Some(dir.clone()),
            ..Default::default()
        };
        for e in payload.iter() {
            let Some(rel) = e.path.strip_prefix(&prefix) else {
                continue;
            };
            if !matches!(e.kind, EntryKind::File { .. }) {
                continue;
            }
            if e.size() > 64 << 20 {
                return Err(PackageError::Invalid(format!(
                    "{}: too large for metadata",
                    e.path
                )));
            }
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut e.open()?, &mut data).map_err(|er| {
                PackageError::io("cannot read", Path::new(&e.source_display()), er)
            })?;
            let text = || String::from_utf8_lossy(&data).into_owned();
            match rel {
                "METADATA" => src.metadata = Some(wheel::CoreMetadata::parse(&text())),
                "WHEEL" => src.wheel = Some(wheel::CoreMetadata::parse(&text())),
                r if INSTALL_ONLY.contains(&r) => {}
                r => {
                    src.extra.insert(r.to_string(), data);
                }
            }
        }
        Ok(src)
    }
}

pub(super) fn build_wheels(
    job: &Job<'_>,
    src: &WheelSource,
    pending: &mut PendingPackages,
) -> Result<(), PackageError> {
    let (split, meta, opts, out_dir) = (job.split, job.meta, job.opts, job.out_dir);
    let base = meta.wheel.dist.clone().unwrap_or_else(|| {
        src.metadata
            .as_ref()
            .and_then(|m| m.get("Name"))
            .unwrap_or(&meta.name)
            .to_string()
    });
    let naming_t = &opts.spec.naming;
    let dist = naming::generic(naming_t, NameKind::WheelGeneric, &base);
    let version = opts
        .spec
        .version
        .wheel(&meta.version)
        .map_err(PackageError::Invalid)?;
    let tags: Vec<String> = if !meta.wheel.tags.is_empty() {
        meta.wheel.tags.clone()
    } else if let Some(w) = &src.wheel {
        w.get_all("Tag").map(str::to_string).collect()
    } else {
        vec!["py3-none-linux_x86_64".to_string()]
    };
    if tags.is_empty() {
        return Err(PackageError::Invalid(
            "the tree's WHEEL has no Tag lines; pass wheel tags in the metadata".into(),
        ));
    }
    let requires_python = meta.wheel.requires_python.clone().or_else(|| {
        src.metadata
            .as_ref()
            .and_then(|m| m.get("Requires-Python"))
            .map(str::to_string)
    });
    // Generic wheel.
    let mut payload = Payload::new();
    payload.set_progress(opts.progress.clone());
    let skip_prefix = src.dist_info.as_ref().map(|d| format!("{d}/"));
    for e in split.generic.iter() {
        if let Some(d) = &src.dist_info {
            if e.path == *d {
                continue;
            }
        }
        if skip_prefix
            .as_ref()
            .is_some_and(|p| e.path.starts_with(p.as_str()))
        {
            continue;
        }
        payload.replace(e.clone());
    }
    add_fetch_sources(&mut payload, &opts.spec)?;
    let mut md = src.metadata.clone().unwrap_or_else(|| {
        let mut m = wheel::CoreMetadata::default();
        m.push("Metadata-Version", "2.1");
        m.push("Name", &dist);
        m.push("Version", &version);
        m.push("Summary", &meta.summary_or_default());
        if let Some(h) = &meta.homepage {
            m.push("Home-page", h);
        }
        if let Some(l) = &meta.license {
            m.push("License", l);
        }
        if let Some(rp) = &requires_python {
            m.push("Requires-Python", rp);
        }
        for r in &meta.wheel.requires_dist {
            m.push("Requires-Dist", r);
        }
        if !meta.description.is_empty() {
            m.body = format!("{}\n", meta.description);
        }
        m
    });
    md.set("Name", &dist);
    md.set("Version", &version);
    let devices: Vec<(String, String)> = split
        .groups
        .iter()
        .map(|g| {
            (
                naming::wheel_extra(naming_t, &g.name),
                naming::device(naming_t, NameKind::WheelDevice, &base, &g.name),
            )
        })
        .collect();
    wheel::add_device_extras(&mut md, &version, &devices);
    // An older family's extra (`device-gfx90x`) keeps working: it asks for
    // the device wheels of the families that now carry its processors.
    let older: Vec<(String, Vec<String>)> = transitions(split, opts)
        .into_iter()
        .map(|(old, successors)| {
            (
                naming::wheel_extra(naming_t, old),
                successors
                    .iter()
                    .map(|g| naming::device(naming_t, NameKind::WheelDevice, &base, &g.name))
                    .collect(),
            )
        })
        .collect();
    wheel::add_transitional_extras(&mut md, &version, &older);
    let mut files = src.extra.clone();
    files.insert("METADATA".into(), md.render().into_bytes());
    files.insert(
        "WHEEL".into(),
        wheel::wheel_file(&tags, src.wheel.as_ref()).into_bytes(),
    );
    let dist_info = wheel::dist_info_dir(&dist, &version);
    write_wheel_pending(
        &dist, &version, &tags, dist_info, files, &payload, None, opts, out_dir, pending,
    )?;
    for g in &split.groups {
        let dev = naming::device(naming_t, NameKind::WheelDevice, &base, &g.name);
        let mut m = wheel::CoreMetadata::default();
        m.push("Metadata-Version", "2.1");
        m.push("Name", &dev);
        m.push("Version", &version);
        m.push("Summary", &device_summary(meta, &g.name));
        if let Some(rp) = &requires_python {
            m.push("Requires-Python", rp);
        }
        m.push("Requires-Dist", &format!("{dist}=={version}"));
        for isa in generic_isa_packages(opts, NameKind::WheelDevice, &base, g) {
            m.push("Requires-Dist", &format!("{isa}=={version}"));
        }
        m.body = format!("{}\n", device_long_description(meta, g));
        let mut files = BTreeMap::new();
        files.insert("METADATA".to_string(), m.render().into_bytes());
        files.insert(
            "WHEEL".to_string(),
            wheel::wheel_file(&tags, None).into_bytes(),
        );
        write_wheel_pending(
            &dev,
            &version,
            &tags,
            wheel::dist_info_dir(&dev, &version),
            files,
            &g.payload,
            Some(g),
            opts,
            out_dir,
            pending,
        )?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn write_wheel_pending(
    dist: &str,
    version: &str,
    tags: &[String],
    dist_info: String,
    files: BTreeMap<String, Vec<u8>>,
    payload: &Payload,
    group: Option<&DeviceGroup>,
    opts: &PackageOptions,
    out_dir: &Path,
    pending: &mut PendingPackages,
) -> Result<(), PackageError> {
    let spec = wheel::WheelSpec {
        dist_info,
        dist_info_files: files,
        payload,
        mtime: opts.source_date_epoch,
    };
    write_package(
        out_dir,
        wheel::wheel_file_name(dist, version, tags)?,
        built(Format::Wheel, dist, version, group, payload.len()),
        pending,
        |w| wheel::write_wheel(w, &spec),
    )
}
