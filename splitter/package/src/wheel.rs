//! Wheels (PEP 427 / the binary distribution format): writing with a
//! `WHEEL`, `METADATA` (core metadata 2.1+) and an exact `RECORD`, and
//! reading with RECORD verification.
//!
//! Entries: the payload's files in path order, then the `.dist-info/`
//! files in name order with `RECORD` last. Every entry carries the DOS time
//! of SOURCE_DATE_EPOCH (clamped to 1980) and 0644/0755 permissions.
//! Files are streamed into the zip and hashed on the way (one read).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};

use base64::Engine;
use sha2::{Digest, Sha256};

use crate::container::ZipWriter;
use crate::tree::{check_relative_path, EntryKind, Payload};
use crate::PackageError;
use rocm_kpack_pkgspec::fields::FieldKind;
use rocm_kpack_pkgspec::pep508::WheelFileName;

/// Generator line written into `WHEEL`.
pub const GENERATOR: &str = concat!("rocm-kpack ", env!("CARGO_PKG_VERSION"));

/// PEP 503 normalized project name (`Foo_Bar.baz` -> `foo-bar-baz`).
pub fn normalize_project(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut sep = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            sep = true;
        } else {
            if sep && !out.is_empty() {
                out.push('-');
            }
            sep = false;
            out.extend(c.to_lowercase());
        }
    }
    out
}

/// The distribution name as it appears in wheel and `.dist-info` file
/// names (normalized, `-` -> `_`).
pub fn escape_dist(name: &str) -> String {
    normalize_project(name).replace('-', "_")
}

/// `<dist>-<version>.dist-info`.
pub fn dist_info_dir(dist: &str, version: &str) -> String {
    format!(
        "{}-{}.dist-info",
        escape_dist(dist),
        version.replace('-', "_")
    )
}

/// Compresses tags into the file-name form (`py3-none-linux_x86_64`;
/// several tags become dotted sets per component).
pub fn tag_triple(tags: &[String]) -> Result<String, PackageError> {
    let mut parts: [BTreeSet<&str>; 3] = Default::default();
    let mut order: [Vec<&str>; 3] = Default::default();
    for t in tags {
        let pieces: Vec<&str> = t.split('-').collect();
        if pieces.len() != 3 {
            return Err(PackageError::Invalid(format!(
                "wheel tag {t:?}: expected python-abi-platform"
            )));
        }
        for (i, p) in pieces.iter().enumerate() {
            for sub in p.split('.') {
                if let (Some(set), Some(ord)) = (parts.get_mut(i), order.get_mut(i)) {
                    if set.insert(sub) {
                        ord.push(sub);
                    }
                }
            }
        }
    }
    if tags.is_empty() {
        return Err(PackageError::Invalid("no wheel tags".into()));
    }
    Ok(order
        .iter()
        .map(|o| o.join("."))
        .collect::<Vec<_>>()
        .join("-"))
}

/// `<dist>-<version>-<tags>.whl`.
pub fn wheel_file_name(dist: &str, version: &str, tags: &[String]) -> Result<String, PackageError> {
    Ok(format!(
        "{}-{}-{}.whl",
        escape_dist(dist),
        version.replace('-', "_"),
        tag_triple(tags)?
    ))
}

/// Core metadata (`METADATA`) or `WHEEL`: RFC 822 style headers in order
/// plus an optional body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CoreMetadata {
    /// Headers in order (continuation lines joined with `\n`).
    pub headers: Vec<(String, String)>,
    /// Text after the blank line (the long description), if any.
    pub body: String,
}

impl CoreMetadata {
    /// Parses headers and body.
    pub fn parse(text: &str) -> CoreMetadata {
        let mut headers: Vec<(String, String)> = Vec::new();
        let mut lines = text.split_inclusive('\n');
        let mut body = String::new();
        for line in lines.by_ref() {
            let l = line.trim_end_matches(['\n', '\r']);
            if l.is_empty() {
                break;
            }
            if l.starts_with(' ') || l.starts_with('\t') {
                if let Some(last) = headers.last_mut() {
                    last.1.push('\n');
                    last.1.push_str(l);
                }
                continue;
            }
            if let Some((k, v)) = l.split_once(':') {
                headers.push((k.trim().to_string(), v.trim().to_string()));
            }
        }
        for line in lines {
            body.push_str(line);
        }
        CoreMetadata { headers, body }
    }

    /// First value of a header (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// All values of a header.
    pub fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Replaces the first header of that name (or appends).
    pub fn set(&mut self, name: &str, value: &str) {
        match self
            .headers
            .iter_mut()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
        {
            Some(slot) => slot.1 = value.to_string(),
            None => self.headers.push((name.to_string(), value.to_string())),
        }
    }

    /// Appends a header.
    pub fn push(&mut self, name: &str, value: &str) {
        self.headers.push((name.to_string(), value.to_string()));
    }

    /// Renders headers, a blank line and the body (if any).
    pub fn render(&self) -> String {
        let mut s = String::new();
        for (k, v) in &self.headers {
            s.push_str(k);
            s.push_str(": ");
            s.push_str(v);
            s.push('\n');
        }
        if !self.body.is_empty() {
            s.push('\n');
            s.push_str(&self.body);
        }
        s
    }
}

/// Whether `a` is at least metadata version `b` (`2.1` style).
fn version_at_least(a: &str, b: (u32, u32)) -> bool {
    let mut it = a.split('.').map(|x| x.parse::<u32>().unwrap_or(0));
    let major = it.next().unwrap_or(0);
    let minor = it.next().unwrap_or(0);
    (major, minor) >= b
}

/// For every (extra, device distribution) pair adds `Provides-Extra:
/// <extra>` and `Requires-Dist: <device dist>==<version>; extra ==
/// "<extra>"`, plus a `device-all` extra requiring all of them. Existing
/// `device-*` extras are replaced; Metadata-Version is raised to 2.1.
pub fn add_device_extras(meta: &mut CoreMetadata, version: &str, devices: &[(String, String)]) {
    if !meta
        .get("Metadata-Version")
        .is_some_and(|v| version_at_least(v, (2, 1)))
    {
        meta.set("Metadata-Version", "2.1");
    }
    meta.headers.retain(|(k, v)| {
        let is_device = v.contains("extra == \"device-") || v.starts_with("device-");
        !((k.eq_ignore_ascii_case("Provides-Extra") || k.eq_ignore_ascii_case("Requires-Dist"))
            && is_device)
    });
    for (extra, dev) in devices {
        meta.push("Provides-Extra", extra);
        meta.push(
            "Requires-Dist",
            &format!("{dev}=={version}; extra == \"{extra}\""),
        );
    }
    if !devices.is_empty() {
        meta.push("Provides-Extra", "device-all");
        for (_, dev) in devices {
            meta.push(
                "Requires-Dist",
                &format!("{dev}=={version}; extra == \"device-all\""),
            );
        }
    }
}

/// For every (extra, device distributions) pair adds `Provides-Extra:
/// <extra>` and one `Requires-Dist: <device dist>==<version>; extra ==
/// "<extra>"` per distribution: an older family's extra served by the
/// device wheels that now carry its processors. Call after
/// [`add_device_extras`], which drops every `device-*` extra.
pub fn add_transitional_extras(
    meta: &mut CoreMetadata,
    version: &str,
    extras: &[(String, Vec<String>)],
) {
    for (extra, devs) in extras {
        meta.push("Provides-Extra", extra);
        for dev in devs {
            meta.push(
                "Requires-Dist",
                &format!("{dev}=={version}; extra == \"{extra}\""),
            );
        }
    }
}

/// `WHEEL` content.
pub fn wheel_file(tags: &[String], original: Option<&CoreMetadata>) -> String {
    let mut w = CoreMetadata::default();
    w.push("Wheel-Version", "1.0");
    w.push("Generator", GENERATOR);
    w.push("Root-Is-Purelib", "false");
    for t in tags {
        w.push("Tag", t);
    }
    if let Some(o) = original {
        if let Some(b) = o.get("Build") {
            w.push("Build", b);
        }
    }
    w.render()
}

/// urlsafe base64 without padding, as RECORD wants.
pub fn record_hash(sha: &[u8; 32]) -> String {
    format!(
        "sha256={}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha)
    )
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// What [`write_wheel`] writes.
pub struct WheelSpec<'a> {
    /// The `.dist-info` directory name.
    pub dist_info: String,
    /// Files of the `.dist-info` directory other than RECORD
    /// (METADATA, WHEEL, entry_points.txt, ...).
    pub dist_info_files: BTreeMap<String, Vec<u8>>,
    /// Files outside `.dist-info` (symlinks are errors, directories skipped).
    pub payload: &'a Payload,
    /// Timestamp (clamped to 1980).
    pub mtime: u64,
}

/// Writes a wheel to `out`.
pub fn write_wheel<W: Write + Seek>(out: W, spec: &WheelSpec<'_>) -> Result<W, PackageError> {
    let err = |e: io::Error| PackageError::io("cannot write", Path::new("<wheel>"), e);
    let mut zip = ZipWriter::new(out, spec.mtime);
    let mut record = String::new();
    let prefix = format!("{}/", spec.dist_info);
    for e in spec.payload.iter() {
        match &e.kind {
            EntryKind::Dir => continue,
            EntryKind::Symlink { .. } => {
                return Err(PackageError::Invalid(format!(
                    "{}: wheels cannot carry symlinks",
                    e.path
                )))
            }
            EntryKind::File { size, .. } => {
                if e.path.starts_with(&prefix) {
                    return Err(PackageError::Invalid(format!(
                        "{}: payload overlaps the generated .dist-info",
                        e.path
                    )));
                }
                let mut r = spec.payload.open_written(e)?;
                let sha = zip.add_file(&e.path, e.mode, *size, &mut r).map_err(|er| {
                    PackageError::io("cannot read", Path::new(&e.source_display()), er)
                })?;
                record.push_str(&format!(
                    "{},{},{}\n",
                    csv_field(&e.path),
                    record_hash(&sha),
                    size
                ));
            }
        }
    }
    for (name, data) in &spec.dist_info_files {
        if name == "RECORD" {
            continue;
        }
        check_relative_path(name)
            .map_err(|why| PackageError::Invalid(format!("dist-info file {name:?}: {why}")))?;
        let path = format!("{prefix}{name}");
        let sha = zip.add_bytes(&path, 0o644, data).map_err(err)?;
        record.push_str(&format!(
            "{},{},{}\n",
            csv_field(&path),
            record_hash(&sha),
            data.len()
        ));
    }
    let record_path = format!("{prefix}RECORD");
    record.push_str(&format!("{},,\n", csv_field(&record_path)));
    zip.add_bytes(&record_path, 0o644, record.as_bytes())
        .map_err(err)?;
    zip.finish().map_err(err)
}

// ---------------------------------------------------------------- reading

/// One RECORD row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordRow {
    /// Path inside the wheel.
    pub path: String,
    /// `sha256=...` or empty.
    pub hash: String,
    /// Size or None.
    pub size: Option<u64>,
}

/// Parses RECORD (CSV: path,hash,size).
pub fn parse_record(text: &str) -> Result<Vec<RecordRow>, String> {
    let mut rows = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let fields = split_csv(line).ok_or_else(|| format!("line {}: bad CSV", n + 1))?;
        let [path, hash, size] = fields.as_slice() else {
            return Err(format!("line {}: expected 3 fields", n + 1));
        };
        let size = if size.is_empty() {
            None
        } else {
            Some(
                size.parse()
                    .map_err(|_| format!("line {}: bad size {size:?}", n + 1))?,
            )
        };
        rows.push(RecordRow {
            path: path.clone(),
            hash: hash.clone(),
            size,
        });
    }
    Ok(rows)
}

fn split_csv(line: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                cur.push('"');
            }
            (true, '"') => quoted = false,
            (false, '"') if cur.is_empty() => quoted = true,
            (false, ',') => out.push(std::mem::take(&mut cur)),
            (_, c) => cur.push(c),
        }
    }
    if quoted {
        return None;
    }
    out.push(cur);
    Some(out)
}

/// A wheel opened for reading.
#[derive(Debug, Clone)]
pub struct WheelReader {
    /// The file.
    pub path: PathBuf,
    /// Distribution name from the file name.
    pub file_dist: String,
    /// Version from the file name.
    pub file_version: String,
    /// Tags expanded from the file name.
    pub tags: Vec<String>,
    /// The `.dist-info` directory.
    pub dist_info: String,
    /// METADATA, parsed.
    pub metadata: CoreMetadata,
    /// METADATA bytes as stored.
    pub metadata_bytes: Vec<u8>,
    /// WHEEL, parsed.
    pub wheel: CoreMetadata,
    /// RECORD rows.
    pub record: Vec<RecordRow>,
    /// Member names in archive order.
    pub members: Vec<String>,
}

/// Checks a wheel member name (relative, no `..`, no backslash or drive).
pub fn check_member_name(name: &str) -> Result<(), String> {
    if name.contains('\\') {
        return Err("backslash in name".into());
    }
    if name.as_bytes().get(1) == Some(&b':') {
        return Err("drive letter in name".into());
    }
    let trimmed = name.trim_end_matches('/');
    check_relative_path(trimmed)
}

impl WheelReader {
    /// Opens a wheel: file name, member names (hostile ones refused),
    /// `.dist-info` with METADATA, WHEEL and RECORD.
    pub fn open(path: &Path) -> Result<WheelReader, PackageError> {
        let fname = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| PackageError::corrupt(path, "no file name"))?;
        if !fname.ends_with(".whl") {
            return Err(PackageError::corrupt(path, "not a .whl file name"));
        }
        let file_name = WheelFileName::parse(fname).ok_or_else(|| {
            PackageError::corrupt(
                path,
                "wheel file name is not name-version-[build-]py-abi-platform.whl",
            )
        })?;
        let (dist, version, triple) = (file_name.dist, file_name.version, &file_name.triple);
        PackageError::check_name(path, "file name (distribution)", FieldKind::WheelName, dist)?;
        PackageError::check_name(
            path,
            "file name (version)",
            FieldKind::WheelVersion,
            version,
        )?;
        for part in triple.split(['-', '.']) {
            PackageError::check_name(path, "file name (tag)", FieldKind::WheelTag, part)?;
        }
        let f = File::open(path).map_err(|e| PackageError::io("cannot open", path, e))?;
        let mut zip = zip::ZipArchive::new(f)
            .map_err(|e| PackageError::corrupt(path, format!("not a valid zip: {e}")))?;
        let mut members = Vec::with_capacity(zip.len());
        for i in 0..zip.len() {
            let entry = zip
                .by_index_raw(i)
                .map_err(|e| PackageError::corrupt(path, format!("zip entry {i}: {e}")))?;
            let name = entry
                .name()
                .map_err(|e| PackageError::corrupt(path, format!("zip entry {i}: {e}")))?
                .into_owned();
            check_member_name(&name).map_err(|why| PackageError::unsafe_path(path, &name, why))?;
            if entry.is_symlink() {
                return Err(PackageError::unsafe_path(path, &name, "symlink in a wheel"));
            }
            members.push(name);
        }
        let expected = format!("{}-{}.dist-info", dist, version);
        let dist_infos: BTreeSet<&str> = members
            .iter()
            .filter_map(|m| m.split('/').next())
            .filter(|d| d.ends_with(".dist-info"))
            .collect();
        let dist_info = if dist_infos.contains(expected.as_str()) {
            expected
        } else if dist_infos.len() == 1 {
            dist_infos
                .iter()
                .next()
                .map(|s| (*s).to_string())
                .unwrap_or_default()
        } else {
            return Err(PackageError::corrupt(
                path,
                format!(
                    "expected one .dist-info directory ({expected}), found {}",
                    dist_infos.len()
                ),
            ));
        };
        let mut read_member = |name: &str| -> Result<Vec<u8>, PackageError> {
            let mut e = zip
                .by_name(name)
                .map_err(|_| PackageError::corrupt(path, format!("missing {name}")))?;
            const LIMIT: u64 = 64 << 20;
            let mut v = Vec::new();
            (&mut e)
                .take(LIMIT + 1)
                .read_to_end(&mut v)
                .map_err(|er| PackageError::corrupt(path, format!("{name}: {er}")))?;
            if v.len() as u64 > LIMIT {
                return Err(PackageError::corrupt(path, format!("{name} too large")));
            }
            Ok(v)
        };
        let metadata_bytes = read_member(&format!("{dist_info}/METADATA"))?;
        let wheel_bytes = read_member(&format!("{dist_info}/WHEEL"))?;
        let record_bytes = read_member(&format!("{dist_info}/RECORD"))?;
        let text = |b: &[u8], what: &str| {
            String::from_utf8(b.to_vec())
                .map_err(|_| PackageError::corrupt(path, format!("{what} is not UTF-8")))
        };
        let metadata = CoreMetadata::parse(&text(&metadata_bytes, "METADATA")?);
        let wheel = CoreMetadata::parse(&text(&wheel_bytes, "WHEEL")?);
        let record =
            parse_record(&text(&record_bytes, "RECORD")?).map_err(|d| PackageError::Record {
                path: path.to_path_buf(),
                detail: d,
            })?;
        for (field, kind) in [
            ("Name", FieldKind::WheelName),
            ("Version", FieldKind::WheelVersion),
        ] {
            let value = metadata
                .get(field)
                .ok_or_else(|| PackageError::corrupt(path, "METADATA lacks Name or Version"))?;
            let field = if field == "Name" {
                "METADATA Name"
            } else {
                "METADATA Version"
            };
            PackageError::check_name(path, field, kind, value)?;
        }
        Ok(WheelReader {
            path: path.to_path_buf(),
            file_dist: dist.to_string(),
            file_version: version.to_string(),
            tags: file_name.tags(),
            dist_info,
            metadata,
            metadata_bytes,
            wheel,
            record,
            members,
        })
    }

    /// Name from METADATA.
    pub fn name(&self) -> &str {
        self.metadata.get("Name").unwrap_or(&self.file_dist)
    }

    /// Version from METADATA.
    pub fn version(&self) -> &str {
        self.metadata.get("Version").unwrap_or(&self.file_version)
    }

    /// Calls `f` for every file member (not directories) with its data.
    pub fn for_each_file<F>(&self, mut f: F) -> Result<(), PackageError>
    where
        F: FnMut(&str, u32, u64, &mut dyn Read) -> Result<(), PackageError>,
    {
        let path = &self.path;
        let file = File::open(path).map_err(|e| PackageError::io("cannot open", path, e))?;
        let mut zip = zip::ZipArchive::new(file)
            .map_err(|e| PackageError::corrupt(path, format!("not a valid zip: {e}")))?;
        for i in 0..zip.len() {
            let mut e = zip
                .by_index(i)
                .map_err(|er| PackageError::corrupt(path, format!("zip entry {i}: {er}")))?;
            if e.is_dir() {
                continue;
            }
            let name = self.members.get(i).cloned().unwrap_or_default();
            let mode = e.unix_mode().map_or(0o644, |m| m & 0o7777);
            let size = e.size();
            f(&name, mode, size, &mut e)?;
        }
        Ok(())
    }

    /// Extracts every file into `dest` (existing, empty); member names were
    /// checked when the wheel was opened.
    pub fn extract(&self, dest: &Path) -> Result<(), PackageError> {
        let mut x = crate::extract::Extractor::new(dest, &self.path)?;
        self.for_each_file(|name, mode, size, data| {
            let mode = if mode & 0o111 != 0 { 0o755 } else { 0o644 };
            x.file(name, mode, size, data)
        })
    }

    /// Checks RECORD against the members: every file listed once with the
    /// right sha256 and size (RECORD itself and signature files may have
    /// empty fields), nothing listed that is missing.
    pub fn verify_record(&self) -> Result<(), PackageError> {
        let path = &self.path;
        let mut rows: BTreeMap<&str, &RecordRow> = BTreeMap::new();
        for r in &self.record {
            if rows.insert(r.path.as_str(), r).is_some() {
                return Err(PackageError::Record {
                    path: path.clone(),
                    detail: format!("{} listed twice", r.path),
                });
            }
        }
        let exempt = |n: &str| {
            n == format!("{}/RECORD", self.dist_info)
                || n == format!("{}/RECORD.jws", self.dist_info)
                || n == format!("{}/RECORD.p7s", self.dist_info)
        };
        let mut seen = BTreeSet::new();
        self.for_each_file(|name, _, size, data| {
            seen.insert(name.to_string());
            if exempt(name) {
                return Ok(());
            }
            let row = rows.get(name).ok_or_else(|| PackageError::Record {
                path: path.clone(),
                detail: format!("{name} is not listed"),
            })?;
            let mut h = crate::digest::DigestWriter(Sha256::new());
            let n = io::copy(data, &mut h)
                .map_err(|e| PackageError::corrupt(path, format!("{name}: {e}")))?;
            let sha: [u8; 32] = h.0.finalize().into();
            if row.hash != record_hash(&sha) {
                return Err(PackageError::Record {
                    path: path.clone(),
                    detail: format!("{name}: hash {} does not match the file", row.hash),
                });
            }
            if row.size != Some(n) || n != size {
                return Err(PackageError::Record {
                    path: path.clone(),
                    detail: format!("{name}: size {:?} listed, {n} stored", row.size),
                });
            }
            Ok(())
        })?;
        for r in &self.record {
            if !seen.contains(&r.path) {
                return Err(PackageError::Record {
                    path: path.clone(),
                    detail: format!("{} is listed but not in the wheel", r.path),
                });
            }
        }
        Ok(())
    }
}
