//! The pip index: `files/` (wheels + PEP 658 `.metadata`), PEP 503 HTML
//! and PEP 691 JSON (API 1.1).
//!
//! Layout: `simple/index.html` + `simple/index.json`,
//! `simple/<project>/index.html` + `simple/<project>/index.json`. A static
//! server serves `index.html` for directory URLs; to offer the JSON form,
//! it serves `index.json` with type `application/vnd.pypi.simple.v1+json`
//! when the request's Accept header asks for it (`rocm_kpack_serve::Dir` does).
//! Links are relative (`../../files/<wheel>`), so the tree can be hosted
//! under any prefix.
//!
//! One index, extras choose: a base wheel's `device-<target>` extras
//! (`pip install 'kpkg[device-gfx1100]'`) bring its device wheels, as in
//! AMD's wheels (docs/packaging.md "pip: one index, extras choose").
//!
//! Family views ([`write_views`]), kept for URLs already in use only: beside
//! the flat index, one PEP 503 index per family of the family table and of
//! the table before it (the spec's `replaces`, `gfx90x`) at
//! `families/<family>/`, which `rocm-kpack-fetch pip-index-url` printed
//! before it was retired. In a family's view, every base distribution that
//! declares `device-*` extras is served as a rewritten wheel
//! (`families/<family>/files/`, same file name) whose METADATA requires,
//! unconditionally, what its `device-<family>` extra requires; without
//! that extra, what the per-target extras of the family's processors
//! require (wheels split per target) and the extras of the generic ISAs
//! serving them; for an older family, what the families now carrying its
//! processors would require. Every other distribution links to the flat
//! `files/`. No view is written for other groups: new installs use the
//! extras.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::{copy_file, write_file, xml_escape, PublishError};
use rocm_kpack_format::layout;
use rocm_kpack_fs::sha256_file;
use rocm_kpack_package::tree::{Entry, Payload};
use rocm_kpack_package::wheel::{
    normalize_project, write_wheel, CoreMetadata, WheelReader, WheelSpec,
};
use rocm_kpack_pkgspec::{generic_isas_serving, Spec};

/// The extra that selects a group's device wheels (`device-<group>`).
const DEVICE_EXTRA_PREFIX: &str = "device-";

#[derive(Clone)]
struct WheelFile {
    file_name: String,
    /// Link from the project page.
    url: String,
    sha256: String,
    size: u64,
    version: String,
    requires_python: Option<String>,
    metadata_sha256: String,
}

/// A wheel of the index with what the views need.
struct Indexed {
    path: PathBuf,
    file: WheelFile,
    metadata: CoreMetadata,
    dist_info: String,
}

/// Writes `files/`, `simple/` and the family views into `root`; returns
/// how many wheels the index holds. Every wheel's RECORD is verified first.
pub fn write_pip(
    wheels: &[PathBuf],
    root: &Path,
    source_date_epoch: u64,
) -> Result<usize, PublishError> {
    let mut projects: BTreeMap<String, BTreeMap<String, WheelFile>> = BTreeMap::new();
    let mut indexed: BTreeMap<String, Vec<Indexed>> = BTreeMap::new();
    let mut count = 0;
    for path in wheels {
        let w = WheelReader::open(path)?;
        w.verify_record()?;
        let file_name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| PublishError::Invalid(format!("{}: bad file name", path.display())))?
            .to_string();
        let (size, sha) = sha256_file(path)?;
        let sha_hex = hex::encode(sha);
        let project = normalize_project(w.name());
        let entries = projects.entry(project.clone()).or_default();
        if let Some(prev) = entries.get(&file_name) {
            if prev.sha256 == sha_hex {
                continue;
            }
            return Err(PublishError::Invalid(format!(
                "two different wheels named {file_name} (second: {})",
                path.display()
            )));
        }
        copy_file(path, &root.join("files").join(&file_name))?;
        write_file(
            &root.join("files").join(format!("{file_name}.metadata")),
            &w.metadata_bytes,
        )?;
        let file = WheelFile {
            url: format!("../../files/{file_name}"),
            file_name: file_name.clone(),
            sha256: sha_hex,
            size,
            version: w.version().to_string(),
            requires_python: w.metadata.get("Requires-Python").map(str::to_string),
            metadata_sha256: hex::encode(Sha256::digest(&w.metadata_bytes)),
        };
        indexed.entry(project).or_default().push(Indexed {
            path: path.clone(),
            file: file.clone(),
            metadata: w.metadata.clone(),
            dist_info: w.dist_info.clone(),
        });
        entries.insert(file_name, file);
        count += 1;
    }
    write_index(&root.join("simple"), &projects)?;
    write_views(&indexed, root, source_date_epoch)?;
    Ok(count)
}

/// Writes a PEP 503 + PEP 691 index of `projects` into `simple`.
fn write_index(
    simple: &Path,
    projects: &BTreeMap<String, BTreeMap<String, WheelFile>>,
) -> Result<(), PublishError> {
    let mut index = String::from(
        "<!DOCTYPE html>\n<html>\n  <head>\n    <meta name=\"pypi:repository-version\" content=\"1.1\">\n    <title>Simple index</title>\n  </head>\n  <body>\n",
    );
    for project in projects.keys() {
        let _ = writeln!(
            index,
            "    <a href=\"{p}/\">{p}</a><br/>",
            p = xml_escape(project)
        );
    }
    index.push_str("  </body>\n</html>\n");
    write_file(&simple.join("index.html"), index.as_bytes())?;
    let root_json = json!({
        "meta": {"api-version": "1.1"},
        "projects": projects.keys().map(|p| json!({"name": p})).collect::<Vec<_>>(),
    });
    write_json(&simple.join("index.json"), &root_json)?;
    for (project, files) in projects {
        let mut html = format!(
            "<!DOCTYPE html>\n<html>\n  <head>\n    <meta name=\"pypi:repository-version\" content=\"1.1\">\n    <title>Links for {p}</title>\n  </head>\n  <body>\n    <h1>Links for {p}</h1>\n",
            p = xml_escape(project)
        );
        let mut jfiles = Vec::new();
        let mut versions: Vec<String> = Vec::new();
        for f in files.values() {
            let url = f.url.clone();
            let rp = f
                .requires_python
                .as_ref()
                .map(|r| format!(" data-requires-python=\"{}\"", xml_escape(r)))
                .unwrap_or_default();
            let _ = writeln!(
                html,
                "    <a href=\"{u}#sha256={h}\"{rp} data-dist-info-metadata=\"sha256={m}\" data-core-metadata=\"sha256={m}\">{n}</a><br/>",
                u = xml_escape(&url),
                h = f.sha256,
                m = f.metadata_sha256,
                n = xml_escape(&f.file_name)
            );
            let mut jf = json!({
                "filename": f.file_name,
                "url": url,
                "hashes": {"sha256": f.sha256},
                "size": f.size,
                "core-metadata": {"sha256": f.metadata_sha256},
                "dist-info-metadata": {"sha256": f.metadata_sha256},
            });
            if let (Some(rp), Some(obj)) = (&f.requires_python, jf.as_object_mut()) {
                obj.insert("requires-python".into(), json!(rp));
            }
            jfiles.push(jf);
            if !versions.contains(&f.version) {
                versions.push(f.version.clone());
            }
        }
        versions.sort();
        html.push_str("  </body>\n</html>\n");
        let dir = simple.join(project);
        write_file(&dir.join("index.html"), html.as_bytes())?;
        write_json(
            &dir.join("index.json"),
            &json!({
                "meta": {"api-version": "1.1"},
                "name": project,
                "versions": versions,
                "files": jfiles,
            }),
        )?;
    }
    Ok(())
}

/// `(extra, requirement without its marker)` for every `Requires-Dist` of
/// `meta` conditioned on a `device-*` extra.
fn device_requirements(meta: &CoreMetadata) -> Vec<(String, String)> {
    meta.get_all("Requires-Dist")
        .filter_map(|r| {
            let (req, marker) = r.split_once(';')?;
            let marker = marker.trim();
            let extra = marker
                .strip_prefix("extra ==")
                .map(|x| x.trim().trim_matches(['"', '\'']))?;
            extra
                .starts_with(DEVICE_EXTRA_PREFIX)
                .then(|| (extra.to_string(), req.trim().to_string()))
        })
        .collect()
}

/// What a family's view adds to a base distribution: the requirements of
/// its `device-<family>` extra, else those of the per-target extras of the
/// family's processors and of the generic ISAs serving them.
fn view_requirements(reqs: &[(String, String)], family: &str, spec: &Spec) -> Vec<String> {
    let of = |extra: &str| -> Vec<String> {
        reqs.iter()
            .filter(|(e, _)| e == extra)
            .map(|(_, r)| r.clone())
            .collect()
    };
    let own = of(&format!("{DEVICE_EXTRA_PREFIX}{family}"));
    if !own.is_empty() {
        return own;
    }
    // An older family's view (`families/gfx90x/`, the spec's `replaces`):
    // the extras of the families that now carry its processors.
    if let Some(r) = spec
        .replacements()
        .into_iter()
        .find(|r| r.transitional && r.old.to_ascii_lowercase() == family)
    {
        let mut out: Vec<String> = Vec::new();
        for successor in r.successors {
            for req in view_requirements(reqs, &successor.to_ascii_lowercase(), spec) {
                if !out.contains(&req) {
                    out.push(req);
                }
            }
        }
        return out;
    }
    let Some(group) = spec
        .groups
        .iter()
        .find(|g| g.name.to_ascii_lowercase() == family)
    else {
        return Vec::new();
    };
    let isas: BTreeSet<&str> = group
        .targets
        .iter()
        .flat_map(|t| generic_isas_serving(t))
        .collect();
    let units = group.targets.iter().map(String::as_str).chain(isas);
    let mut out = Vec::new();
    for unit in units {
        for r in of(&format!("{DEVICE_EXTRA_PREFIX}{unit}")) {
            if !out.contains(&r) {
                out.push(r);
            }
        }
    }
    out
}

/// Writes `families/<family>/` for every family of the family table and
/// of the table before it (see the module docs).
fn write_views(
    indexed: &BTreeMap<String, Vec<Indexed>>,
    root: &Path,
    source_date_epoch: u64,
) -> Result<(), PublishError> {
    let spec = Spec::default_families();
    // The older table's families too, so a URL printed before keeps working.
    let families: BTreeSet<String> = spec
        .groups
        .iter()
        .chain(&spec.replaces)
        .map(|g| g.name.to_ascii_lowercase())
        .collect();
    for family in &families {
        let dir = root.join(layout::pip::view_path(family));
        let mut projects: BTreeMap<String, BTreeMap<String, WheelFile>> = BTreeMap::new();
        for (project, wheels) in indexed {
            let files = projects.entry(project.clone()).or_default();
            for w in wheels {
                let adds = view_requirements(&device_requirements(&w.metadata), family, &spec);
                let file = if adds.is_empty() {
                    WheelFile {
                        url: format!("../../../files/{}", w.file.file_name),
                        ..w.file.clone()
                    }
                } else {
                    rewrite_wheel(w, &adds, &dir.join("files"), source_date_epoch)?
                };
                files.insert(file.file_name.clone(), file);
            }
        }
        write_index(&dir, &projects)?;
    }
    Ok(())
}

/// Writes `w` into `files_dir` with `adds` appended to its METADATA as
/// unconditional `Requires-Dist` (RECORD regenerated), plus its PEP 658
/// `.metadata`.
fn rewrite_wheel(
    w: &Indexed,
    adds: &[String],
    files_dir: &Path,
    source_date_epoch: u64,
) -> Result<WheelFile, PublishError> {
    let mut meta = w.metadata.clone();
    for r in adds {
        meta.push("Requires-Dist", r);
    }
    let metadata = meta.render().into_bytes();
    let reader = WheelReader::open(&w.path)?;
    let prefix = format!("{}/", w.dist_info);
    let mut payload = Payload::new();
    let mut dist_info_files = BTreeMap::new();
    reader.for_each_file(|name, mode, _, data| {
        let mut bytes = Vec::new();
        data.read_to_end(&mut bytes)
            .map_err(|e| rocm_kpack_package::PackageError::io("cannot read", &w.path, e))?;
        match name.strip_prefix(&prefix) {
            Some("RECORD") => {}
            Some("METADATA") => {
                dist_info_files.insert("METADATA".to_string(), metadata.clone());
            }
            Some(rest) => {
                dist_info_files.insert(rest.to_string(), bytes);
            }
            None => payload.insert(Entry::bytes(
                name,
                if mode & 0o111 != 0 { 0o755 } else { 0o644 },
                bytes,
            ))?,
        }
        Ok(())
    })?;
    std::fs::create_dir_all(files_dir)
        .map_err(|e| PublishError::io("cannot create", files_dir, e))?;
    let dest = files_dir.join(&w.file.file_name);
    let out =
        std::fs::File::create(&dest).map_err(|e| PublishError::io("cannot create", &dest, e))?;
    let mut out = write_wheel(
        std::io::BufWriter::new(out),
        &WheelSpec {
            dist_info: w.dist_info.clone(),
            dist_info_files,
            payload: &payload,
            mtime: source_date_epoch,
        },
    )?;
    std::io::Write::flush(&mut out).map_err(|e| PublishError::io("cannot write", &dest, e))?;
    drop(out);
    write_file(
        &files_dir.join(format!("{}.metadata", w.file.file_name)),
        &metadata,
    )?;
    let (size, sha) = sha256_file(&dest)?;
    Ok(WheelFile {
        url: format!("../files/{}", w.file.file_name),
        file_name: w.file.file_name.clone(),
        sha256: hex::encode(sha),
        size,
        version: w.file.version.clone(),
        requires_python: w.file.requires_python.clone(),
        metadata_sha256: hex::encode(Sha256::digest(&metadata)),
    })
}

fn write_json(path: &Path, v: &serde_json::Value) -> Result<(), PublishError> {
    let mut text = serde_json::to_string_pretty(v)
        .map_err(|e| PublishError::Invalid(format!("cannot serialize {}: {e}", path.display())))?;
    text.push('\n');
    write_file(path, text.as_bytes())
}
