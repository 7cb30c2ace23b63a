//! Debian packages: writing (`ar` with `debian-binary`, `control.tar.*`,
//! `data.tar.*`) and reading (control fields, control files, streamed data
//! entries, safe extraction).
//!
//! Writing reads every file twice: once for `md5sums` (the control
//! archive precedes the data archive), once into `data.tar`; the second
//! read re-hashes and fails if a file changed in between. Nothing is held
//! in memory but the control archive.

use std::fs::File;
use std::io::{self, BufWriter, Read, Seek, Write};
use std::path::{Path, PathBuf};

use md5::Md5;
use sha2::Digest;

use crate::compress::{decoder, Compression, Encoder};
use crate::container::{read_ar_members, ArMember, ArWriter, EntryType, TarWriter};
use crate::digest::{DigestWriter, HashingReader};
use crate::extract::Extractor;
use crate::meta::{ControlFields, ControlFile};
use crate::tree::{normalize_member, EntryKind, Payload};
use crate::PackageError;
use rocm_kpack_pkgspec::fields::FieldKind;

/// Control-archive members a generic deb regenerates rather than copies.
const REGENERATED: [&str; 2] = ["control", "md5sums"];

/// Maintainer scripts (mode 0755 in the control archive).
pub const SCRIPTS: [&str; 5] = ["preinst", "postinst", "prerm", "postrm", "config"];

/// What [`write_deb`] writes.
pub struct DebSpec<'a> {
    /// The control paragraph (Installed-Size is set by the writer).
    pub control: ControlFields,
    /// Extra control files (`shlibs`, `triggers`, scripts...).
    pub control_files: &'a [ControlFile],
    /// The data (with parent directories; the writer adds `./`).
    pub payload: &'a Payload,
    /// Compression of both tar members.
    pub compression: Compression,
    /// Compression level (None = default).
    pub level: Option<u32>,
    /// mtime of every entry (SOURCE_DATE_EPOCH).
    pub mtime: u64,
}

fn md5_entry(e: &crate::tree::Entry) -> Result<[u8; 16], PackageError> {
    let mut r = e.open()?;
    let mut h = DigestWriter(Md5::new());
    let n = io::copy(&mut r, &mut h)
        .map_err(|err| PackageError::io("cannot read", Path::new(&e.source_display()), err))?;
    if n != e.size() {
        return Err(PackageError::corrupt(
            Path::new(&e.source_display()),
            format!("size changed while packaging ({} -> {n})", e.size()),
        ));
    }
    Ok(h.0.finalize().into())
}

/// Writes a .deb to `out` (an open, seekable file) and returns `out`.
pub fn write_deb<W: Write + Seek>(out: W, spec: &DebSpec<'_>) -> Result<W, PackageError> {
    let out_err = |e: io::Error| PackageError::io("cannot write", Path::new("<deb>"), e);
    // Pass 1: md5 of every file.
    let mut sums = Vec::new();
    for e in spec.payload.iter() {
        if matches!(e.kind, EntryKind::File { .. }) {
            sums.push((e.path.clone(), md5_entry(e)?));
        }
    }
    let mut md5sums = String::new();
    for (p, h) in &sums {
        md5sums.push_str(&hex::encode(h));
        md5sums.push_str("  ");
        md5sums.push_str(p);
        md5sums.push('\n');
    }
    let mut control = spec.control.clone();
    control.set_before(
        "Installed-Size",
        spec.payload.installed_size_kib().to_string(),
        "Depends",
    );
    let control_text = control.render();

    // Control archive, in memory (small).
    let mut ctl_members: Vec<(String, u32, Vec<u8>)> =
        vec![("control".into(), 0o644, control_text.into_bytes())];
    if !md5sums.is_empty() {
        ctl_members.push(("md5sums".into(), 0o644, md5sums.into_bytes()));
    }
    for f in spec.control_files {
        if REGENERATED.contains(&f.name.as_str()) {
            continue;
        }
        ctl_members.push((f.name.clone(), f.mode, f.data.clone()));
    }
    ctl_members.sort_by(|a, b| a.0.cmp(&b.0));
    let mut ctl = TarWriter::new(
        Encoder::new(Vec::new(), spec.compression, spec.level).map_err(out_err)?,
        spec.mtime,
    );
    ctl.append("./", EntryType::Dir, 0o755, 0, "", None)
        .map_err(out_err)?;
    for (name, mode, data) in &ctl_members {
        let mut r: &[u8] = data;
        ctl.append(
            name,
            EntryType::File,
            *mode,
            data.len() as u64,
            "",
            Some(&mut r),
        )
        .map_err(out_err)?;
    }
    let ctl_bytes = ctl.finish().and_then(Encoder::finish).map_err(out_err)?;

    // Pass 2: data archive, md5 re-checked. `ar` wants a member's size
    // before its data, so the compressed archive is spooled to an unnamed
    // temporary file (TMPDIR), then copied in.
    let spool_err = |e: io::Error| PackageError::io("cannot write", &std::env::temp_dir(), e);
    let spool = tempfile::tempfile().map_err(spool_err)?;
    let mut failure: Option<PackageError> = None;
    let (mut spool, data_size) = write_data_tar(spool, spec, &sums, &mut failure)
        .map_err(|e| failure.take().unwrap_or_else(|| spool_err(e)))?;
    spool.rewind().map_err(spool_err)?;

    let mut ar = ArWriter::new(out, spec.mtime);
    ar.add_bytes("debian-binary", b"2.0\n").map_err(out_err)?;
    ar.add_bytes(
        &format!("control.tar{}", spec.compression.suffix()),
        &ctl_bytes,
    )
    .map_err(out_err)?;
    ar.add_reader(
        &format!("data.tar{}", spec.compression.suffix()),
        data_size,
        io::BufReader::with_capacity(1 << 20, spool),
    )
    .map_err(out_err)?;
    ar.finish().map_err(out_err)
}

/// Writes the compressed data archive of `spec` to `file`; returns it and
/// the compressed size. Each file's md5 must match `sums` (pass 1); a
/// source error or mismatch is left in `failure`.
fn write_data_tar(
    file: File,
    spec: &DebSpec<'_>,
    sums: &[(String, [u8; 16])],
    failure: &mut Option<PackageError>,
) -> io::Result<(File, u64)> {
    let mut sum_iter = sums.iter();
    let enc = Encoder::new(
        BufWriter::with_capacity(1 << 20, file),
        spec.compression,
        spec.level,
    )?;
    let mut tar = TarWriter::new(enc, spec.mtime);
    tar.append("./", EntryType::Dir, 0o755, 0, "", None)?;
    for e in spec.payload.iter() {
        match &e.kind {
            EntryKind::Dir => {
                tar.append(&format!("{}/", e.path), EntryType::Dir, e.mode, 0, "", None)?
            }
            EntryKind::Symlink { target } => {
                tar.append(&e.path, EntryType::Symlink, 0o777, 0, target, None)?
            }
            EntryKind::File { size, .. } => {
                let src = match spec.payload.open_written(e) {
                    Ok(s) => s,
                    Err(err) => {
                        *failure = Some(err);
                        return Err(io::Error::other("source unreadable"));
                    }
                };
                let mut hr = HashingReader::with_digest(src, Md5::new());
                tar.append(&e.path, EntryType::File, e.mode, *size, "", Some(&mut hr))?;
                let got: [u8; 16] = hr.finish_digest().0.into();
                if sum_iter.next().map(|(_, h)| *h) != Some(got) {
                    *failure = Some(PackageError::corrupt(
                        Path::new(&e.source_display()),
                        "file changed while packaging (md5 differs between passes)",
                    ));
                    return Err(io::Error::other("file changed"));
                }
            }
        }
    }
    let mut file = tar
        .finish()?
        .finish()?
        .into_inner()
        .map_err(io::IntoInnerError::into_error)?;
    let size = file.stream_position()?;
    Ok((file, size))
}

// ---------------------------------------------------------------- reading

/// A data-archive entry as read from a package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberInfo {
    /// Normalized install path (`usr/lib/x`; no `./`, no trailing `/`).
    pub path: String,
    /// Kind.
    pub kind: EntryType,
    /// Permission bits.
    pub mode: u32,
    /// Data size (files).
    pub size: u64,
    /// Symlink target.
    pub link: Option<String>,
}

/// A .deb opened for reading: control data in memory, data archive located.
#[derive(Debug, Clone)]
pub struct DebReader {
    /// The file.
    pub path: PathBuf,
    /// The control paragraph.
    pub control: ControlFields,
    /// Other control-archive files (md5sums included).
    pub control_files: Vec<ControlFile>,
    data: ArMember,
    data_compression: Compression,
}

fn member_compression(path: &Path, name: &str, base: &str) -> Result<Compression, PackageError> {
    let suffix = name.strip_prefix(base).unwrap_or("");
    match suffix {
        "" => Ok(Compression::None),
        ".gz" => Ok(Compression::Gzip),
        ".xz" => Ok(Compression::Xz),
        ".zst" => Ok(Compression::Zstd),
        other => Err(PackageError::corrupt(
            path,
            format!("unsupported {base} compression {other:?}"),
        )),
    }
}

impl DebReader {
    /// Opens a .deb: checks the `ar` layout and `debian-binary`, reads the
    /// control archive. Anything malformed is [`PackageError::Corrupt`].
    pub fn open(path: &Path) -> Result<DebReader, PackageError> {
        let mut f = File::open(path).map_err(|e| PackageError::io("cannot open", path, e))?;
        let len = f
            .metadata()
            .map_err(|e| PackageError::io("cannot stat", path, e))?
            .len();
        let members = read_ar_members(&mut f, len).map_err(|d| PackageError::corrupt(path, d))?;
        let first = members
            .first()
            .ok_or_else(|| PackageError::corrupt(path, "empty ar archive"))?;
        if first.name != "debian-binary" {
            return Err(PackageError::corrupt(
                path,
                format!("first member is {:?}, not debian-binary", first.name),
            ));
        }
        let mut version = vec![0u8; first.size.min(64) as usize];
        f.seek(io::SeekFrom::Start(first.offset))
            .and_then(|_| f.read_exact(&mut version))
            .map_err(|e| PackageError::io("cannot read", path, e))?;
        if !version.starts_with(b"2.") {
            return Err(PackageError::corrupt(
                path,
                "unsupported deb format version",
            ));
        }
        let ctl = members
            .iter()
            .find(|m| m.name.starts_with("control.tar"))
            .ok_or_else(|| PackageError::corrupt(path, "no control.tar member"))?;
        let data = members
            .iter()
            .find(|m| m.name.starts_with("data.tar"))
            .ok_or_else(|| PackageError::corrupt(path, "no data.tar member"))?
            .clone();
        let ctl_comp = member_compression(path, &ctl.name, "control.tar")?;
        let data_compression = member_compression(path, &data.name, "data.tar")?;
        f.seek(io::SeekFrom::Start(ctl.offset))
            .map_err(|e| PackageError::io("cannot read", path, e))?;
        let limited = (&mut f).take(ctl.size);
        let dec =
            decoder(limited, ctl_comp).map_err(|e| PackageError::corrupt(path, e.to_string()))?;
        let mut control = None;
        let mut control_files = Vec::new();
        let mut archive = tar::Archive::new(dec);
        let entries = archive
            .entries()
            .map_err(|e| PackageError::corrupt(path, format!("control.tar: {e}")))?;
        for entry in entries {
            let mut entry =
                entry.map_err(|e| PackageError::corrupt(path, format!("control.tar: {e}")))?;
            if entry.header().entry_type() != tar::EntryType::Regular {
                continue;
            }
            let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            let Some(name) = normalize_member(&name)
                .map_err(|why| PackageError::unsafe_path(path, &name, why))?
            else {
                continue;
            };
            if name.contains('/') {
                continue;
            }
            // Control files are small; refuse absurd sizes.
            const LIMIT: u64 = 64 << 20;
            let mut data = Vec::new();
            (&mut entry)
                .take(LIMIT + 1)
                .read_to_end(&mut data)
                .map_err(|e| PackageError::corrupt(path, format!("control.tar: {e}")))?;
            if data.len() as u64 > LIMIT {
                return Err(PackageError::corrupt(
                    path,
                    format!("control member {name} too large"),
                ));
            }
            if name == "control" {
                let text = String::from_utf8(data)
                    .map_err(|_| PackageError::corrupt(path, "control is not UTF-8"))?;
                control = Some(
                    ControlFields::parse(&text)
                        .map_err(|d| PackageError::corrupt(path, format!("control: {d}")))?,
                );
            } else {
                let mode = if SCRIPTS.contains(&name.as_str()) {
                    0o755
                } else {
                    0o644
                };
                control_files.push(ControlFile { name, mode, data });
            }
        }
        let control = control.ok_or_else(|| PackageError::corrupt(path, "no control file"))?;
        for (field, kind) in [
            ("Package", FieldKind::DebPackage),
            ("Version", FieldKind::DebVersion),
            ("Architecture", FieldKind::DebArchitecture),
        ] {
            let value = control
                .get(field)
                .ok_or_else(|| PackageError::corrupt(path, format!("control has no {field}")))?;
            PackageError::check_name(path, field, kind, value)?;
        }
        if let Some(source) = control.get("Source") {
            // `Source: name (version)`: both parts may name files.
            let mut words = source.split_whitespace();
            let name = words.next().unwrap_or_default();
            PackageError::check_name(path, "Source", FieldKind::DebSource, name)?;
            if let Some(v) = words.next() {
                let v = v
                    .strip_prefix('(')
                    .and_then(|v| v.strip_suffix(')'))
                    .unwrap_or(v);
                PackageError::check_name(path, "Source", FieldKind::DebVersion, v)?;
            }
        }
        Ok(DebReader {
            path: path.to_path_buf(),
            control,
            control_files,
            data,
            data_compression,
        })
    }

    /// Calls `f` for every data-archive entry in order with a reader over
    /// its data (files only; others get an empty reader). Paths are
    /// normalized; unsafe names are errors.
    pub fn for_each_entry<F>(&self, mut f: F) -> Result<(), PackageError>
    where
        F: FnMut(&MemberInfo, &mut dyn Read) -> Result<(), PackageError>,
    {
        let path = &self.path;
        let mut file = File::open(path).map_err(|e| PackageError::io("cannot open", path, e))?;
        file.seek(io::SeekFrom::Start(self.data.offset))
            .map_err(|e| PackageError::io("cannot read", path, e))?;
        let limited = io::BufReader::with_capacity(1 << 20, file).take(self.data.size);
        let dec = decoder(limited, self.data_compression)
            .map_err(|e| PackageError::corrupt(path, e.to_string()))?;
        let mut archive = tar::Archive::new(dec);
        let entries = archive
            .entries()
            .map_err(|e| PackageError::corrupt(path, format!("data.tar: {e}")))?;
        for entry in entries {
            let mut entry =
                entry.map_err(|e| PackageError::corrupt(path, format!("data.tar: {e}")))?;
            let raw = String::from_utf8(entry.path_bytes().into_owned())
                .map_err(|_| PackageError::corrupt(path, "non-UTF-8 member name"))?;
            let Some(name) =
                normalize_member(&raw).map_err(|why| PackageError::unsafe_path(path, &raw, why))?
            else {
                continue;
            };
            let h = entry.header();
            let mode = h.mode().unwrap_or(0o644) & 0o7777;
            let (kind, link) = match h.entry_type() {
                tar::EntryType::Regular | tar::EntryType::Continuous => (EntryType::File, None),
                tar::EntryType::Directory => (EntryType::Dir, None),
                tar::EntryType::Symlink => {
                    let l = entry
                        .link_name_bytes()
                        .map(|b| String::from_utf8_lossy(&b).into_owned())
                        .unwrap_or_default();
                    (EntryType::Symlink, Some(l))
                }
                tar::EntryType::Link => {
                    return Err(PackageError::corrupt(
                        path,
                        format!("{name}: hard links are not supported"),
                    ))
                }
                other => {
                    return Err(PackageError::unsafe_path(
                        path,
                        &name,
                        format!("unsupported member type {other:?}"),
                    ))
                }
            };
            let size = if kind == EntryType::File {
                entry.size()
            } else {
                0
            };
            let info = MemberInfo {
                path: name,
                kind,
                mode,
                size,
                link,
            };
            f(&info, &mut entry)?;
        }
        Ok(())
    }

    /// Extracts the data archive into `dest` (which must exist and be
    /// empty). Refuses `..`, absolute names, symlinks whose targets leave
    /// the root, entries below a symlink and duplicates, so nothing is
    /// written outside `dest`.
    pub fn extract(&self, dest: &Path) -> Result<(), PackageError> {
        let mut x = Extractor::new(dest, &self.path)?;
        self.for_each_entry(|m, data| match m.kind {
            EntryType::Dir => x.dir(&m.path, m.mode),
            EntryType::Symlink => x.symlink(&m.path, m.link.as_deref().unwrap_or("")),
            EntryType::File => x.file(&m.path, m.mode, m.size, data),
        })
    }

    /// The control archive's md5sums, if present.
    pub fn md5sums(&self) -> Option<&[u8]> {
        self.control_files
            .iter()
            .find(|f| f.name == "md5sums")
            .map(|f| f.data.as_slice())
    }
}
