//! The pip index: `files/` (wheels + PEP 658 `.metadata`), PEP 503 HTML
//! and PEP 691 JSON (API 1.1).
//!
//! Layout: `simple/index.html` + `simple/index.json`,
//! `simple/<project>/index.html` + `simple/<project>/index.json`. A static
//! server serves `index.html` for directory URLs; to offer the JSON form,
//! it serves `index.json` with type `application/vnd.pypi.simple.v1+json`
//! when the request's Accept header asks for it (`serve::Dir` does).
//! Links are relative (`../../files/<wheel>`), so the tree can be hosted
//! under any prefix.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::json;
use sha2::{Digest, Sha256};

use super::{copy_file, write_file, xml_escape, PublishError};
use crate::deb::hash_file;
use crate::wheel::{normalize_project, WheelReader};

struct WheelFile {
    file_name: String,
    sha256: String,
    size: u64,
    version: String,
    requires_python: Option<String>,
    metadata_sha256: String,
}

/// Writes `files/` and `simple/` into `root`; returns how many wheels the
/// index holds. Every wheel's RECORD is verified first.
pub fn write_pip(wheels: &[PathBuf], root: &Path) -> Result<usize, PublishError> {
    let mut projects: BTreeMap<String, BTreeMap<String, WheelFile>> = BTreeMap::new();
    let mut count = 0;
    for path in wheels {
        let w = WheelReader::open(path)?;
        w.verify_record()?;
        let file_name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| PublishError::Invalid(format!("{}: bad file name", path.display())))?
            .to_string();
        let (sha, _, size) = hash_file(path)?;
        let sha_hex = hex::encode(sha);
        let project = normalize_project(w.name());
        let entries = projects.entry(project).or_default();
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
        entries.insert(
            file_name.clone(),
            WheelFile {
                file_name,
                sha256: sha_hex,
                size,
                version: w.version().to_string(),
                requires_python: w.metadata.get("Requires-Python").map(str::to_string),
                metadata_sha256: hex::encode(Sha256::digest(&w.metadata_bytes)),
            },
        );
        count += 1;
    }
    let simple = root.join("simple");
    let mut index = String::from(
        "<!DOCTYPE html>\n<html>\n  <head>\n    <meta name=\"pypi:repository-version\" content=\"1.1\">\n    <title>Simple index</title>\n  </head>\n  <body>\n",
    );
    for project in projects.keys() {
        let _ = writeln!(index, "    <a href=\"{p}/\">{p}</a><br/>", p = xml_escape(project));
    }
    index.push_str("  </body>\n</html>\n");
    write_file(&simple.join("index.html"), index.as_bytes())?;
    let root_json = json!({
        "meta": {"api-version": "1.1"},
        "projects": projects.keys().map(|p| json!({"name": p})).collect::<Vec<_>>(),
    });
    write_json(&simple.join("index.json"), &root_json)?;
    for (project, files) in &projects {
        let mut html = format!(
            "<!DOCTYPE html>\n<html>\n  <head>\n    <meta name=\"pypi:repository-version\" content=\"1.1\">\n    <title>Links for {p}</title>\n  </head>\n  <body>\n    <h1>Links for {p}</h1>\n",
            p = xml_escape(project)
        );
        let mut jfiles = Vec::new();
        let mut versions: Vec<String> = Vec::new();
        for f in files.values() {
            let url = format!("../../files/{}", f.file_name);
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
    Ok(count)
}

fn write_json(path: &Path, v: &serde_json::Value) -> Result<(), PublishError> {
    let mut text = serde_json::to_string_pretty(v)
        .map_err(|e| PublishError::Invalid(format!("cannot serialize {}: {e}", path.display())))?;
    text.push('\n');
    write_file(path, text.as_bytes())
}
