//! The rpm writer: lead, signature header, main header and the cpio
//! payload, streamed through a temporary file (see the module docs of
//! [`crate::rpm`]).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Seek, SeekFrom, Write};
use std::path::Path;

use md5::Md5;
use rocm_kpack_format::layout;
use rocm_kpack_fs::{for_each_block, sha256_reader, HashingReader, HashingWriter};
use sha1::Sha1;
use sha2::{Digest, Sha256};

use super::tags::{
    sense, tag, TriggerTags, FILE_CONFIG, FILE_DOC, FILE_TRIGGER_PRIORITY, FILE_TRIGGER_TAGS,
    PGPHASHALGO_SHA256, SCRIPT_TAGS, TRANS_FILE_TRIGGER_TAGS, T_BIN, T_I18NSTRING, T_INT16,
    T_INT32, T_INT64, T_STRING, T_STRING_ARRAY,
};
use super::{Dep, FileTrigger, RpmSpec};
use crate::compress::{Compression, Encoder};
use crate::container::CpioWriter;
use crate::tree::{EntryKind, Payload};
use crate::PackageError;

#[derive(Debug, Clone)]
enum Value {
    Int16(Vec<u16>),
    Int32(Vec<u32>),
    Int64(Vec<u64>),
    Str(String),
    StrArray(Vec<String>),
    I18n(String),
    Bin(Vec<u8>),
}

/// Builds a header blob (magic, index, data store with region trailer).
#[derive(Debug, Default)]
struct HeaderBuilder {
    tags: BTreeMap<u32, Value>,
}

impl HeaderBuilder {
    fn set(&mut self, tag: u32, v: Value) {
        self.tags.insert(tag, v);
    }

    fn build(&self, region: u32) -> Result<Vec<u8>, PackageError> {
        let mut index: Vec<[u8; 16]> = Vec::new();
        let mut data: Vec<u8> = Vec::new();
        let ent = |tag: u32, ty: u32, off: i32, count: u32| {
            let mut e = [0u8; 16];
            e[0..4].copy_from_slice(&tag.to_be_bytes());
            e[4..8].copy_from_slice(&ty.to_be_bytes());
            e[8..12].copy_from_slice(&off.to_be_bytes());
            e[12..16].copy_from_slice(&count.to_be_bytes());
            e
        };
        let too_big = || PackageError::Invalid("rpm header larger than 2 GiB".into());
        for (&t, v) in &self.tags {
            let align = match v {
                Value::Int16(_) => 2,
                Value::Int32(_) => 4,
                Value::Int64(_) => 8,
                _ => 1,
            };
            while !data.len().is_multiple_of(align) {
                data.push(0);
            }
            let off = i32::try_from(data.len()).map_err(|_| too_big())?;
            let (ty, count) = match v {
                Value::Int16(xs) => {
                    xs.iter()
                        .for_each(|x| data.extend_from_slice(&x.to_be_bytes()));
                    (T_INT16, xs.len())
                }
                Value::Int32(xs) => {
                    xs.iter()
                        .for_each(|x| data.extend_from_slice(&x.to_be_bytes()));
                    (T_INT32, xs.len())
                }
                Value::Int64(xs) => {
                    xs.iter()
                        .for_each(|x| data.extend_from_slice(&x.to_be_bytes()));
                    (T_INT64, xs.len())
                }
                Value::Str(s) => {
                    data.extend_from_slice(s.as_bytes());
                    data.push(0);
                    (T_STRING, 1)
                }
                Value::I18n(s) => {
                    data.extend_from_slice(s.as_bytes());
                    data.push(0);
                    (T_I18NSTRING, 1)
                }
                Value::StrArray(xs) => {
                    for s in xs {
                        data.extend_from_slice(s.as_bytes());
                        data.push(0);
                    }
                    (T_STRING_ARRAY, xs.len())
                }
                Value::Bin(b) => {
                    data.extend_from_slice(b);
                    (T_BIN, b.len())
                }
            };
            let count = u32::try_from(count).map_err(|_| too_big())?;
            index.push(ent(t, ty, off, count));
        }
        let n = index.len() + 1;
        let trailer_off = i32::try_from(data.len()).map_err(|_| too_big())?;
        let neg = -(i32::try_from(n * 16).map_err(|_| too_big())?);
        data.extend_from_slice(&ent(region, T_BIN, neg, 16));
        let mut out = Vec::with_capacity(16 + n * 16 + data.len());
        out.extend_from_slice(&[0x8e, 0xad, 0xe8, 0x01, 0, 0, 0, 0]);
        out.extend_from_slice(&(n as u32).to_be_bytes());
        out.extend_from_slice(
            &u32::try_from(data.len())
                .map_err(|_| too_big())?
                .to_be_bytes(),
        );
        out.extend_from_slice(&ent(region, T_BIN, trailer_off, 16));
        for e in &index {
            out.extend_from_slice(e);
        }
        out.extend_from_slice(&data);
        Ok(out)
    }
}

fn deps_into(h: &mut HeaderBuilder, deps: &[Dep], name: u32, flags: u32, version: u32) {
    if deps.is_empty() {
        return;
    }
    h.set(
        name,
        Value::StrArray(deps.iter().map(|d| d.name.clone()).collect()),
    );
    h.set(flags, Value::Int32(deps.iter().map(|d| d.flags).collect()));
    h.set(
        version,
        Value::StrArray(deps.iter().map(|d| d.version.clone()).collect()),
    );
}

/// The (TRANS)FILETRIGGER* tags as rpmbuild writes them: one script,
/// program and priority per trigger; one (name, index, version, flags)
/// row per path, sorted by path.
fn file_triggers_into(h: &mut HeaderBuilder, triggers: &[FileTrigger], tags: TriggerTags) {
    let [scripts, progs, names, indexes, versions, flags, priorities] = tags;
    if triggers.is_empty() {
        return;
    }
    let mut rows: Vec<(&str, u32, u32)> = Vec::new();
    for (i, t) in triggers.iter().enumerate() {
        let index = u32::try_from(i).unwrap_or(u32::MAX);
        rows.extend(t.paths.iter().map(|p| (p.as_str(), index, t.when)));
    }
    rows.sort();
    h.set(
        scripts,
        Value::StrArray(triggers.iter().map(|t| t.body.clone()).collect()),
    );
    h.set(
        progs,
        Value::StrArray(triggers.iter().map(|t| t.interpreter.clone()).collect()),
    );
    h.set(
        names,
        Value::StrArray(rows.iter().map(|r| r.0.to_string()).collect()),
    );
    h.set(indexes, Value::Int32(rows.iter().map(|r| r.1).collect()));
    h.set(versions, Value::StrArray(vec![String::new(); rows.len()]));
    h.set(flags, Value::Int32(rows.iter().map(|r| r.2).collect()));
    h.set(
        priorities,
        Value::Int32(vec![FILE_TRIGGER_PRIORITY; triggers.len()]),
    );
}

fn rpmlib(name: &str, version: &str) -> Dep {
    Dep {
        name: format!("rpmlib({name})"),
        flags: sense::RPMLIB | sense::LESS | sense::EQUAL,
        version: version.to_string(),
    }
}

/// Whether an rpm owns this directory (see the module docs).
fn owns_dir(path: &str) -> bool {
    path.rsplit('/').next() == Some(layout::KPACK_DIR)
}

struct FileRow {
    path: String,
    mode: u16,
    size: u64,
    digest: String,
    link: String,
    flags: u32,
}

/// Writes an rpm for `payload` to `out`, using a temporary file in
/// `tmp_dir` for the compressed payload.
pub fn write_rpm<W: Write>(
    mut out: W,
    spec: &RpmSpec,
    payload: &Payload,
    tmp_dir: &Path,
) -> Result<W, PackageError> {
    let tmp_err = |e: io::Error| PackageError::io("cannot write temporary payload in", tmp_dir, e);
    let rows = file_rows(spec, payload)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".rpm-payload-")
        .tempfile_in(tmp_dir)
        .map_err(tmp_err)?;
    let sums = write_payload(tmp.as_file_mut(), spec, payload, &rows, tmp_dir)?;
    let header = main_header(spec, &rows, &sums)?;
    let file = tmp.as_file_mut();
    let sig = signature_header(&header, file, &sums, tmp_dir)?;

    let out_err = |e: io::Error| PackageError::io("cannot write", Path::new("<rpm>"), e);
    out.write_all(&lead(spec)).map_err(out_err)?;
    out.write_all(&sig).map_err(out_err)?;
    out.write_all(&header).map_err(out_err)?;
    file.seek(SeekFrom::Start(0)).map_err(tmp_err)?;
    let copied =
        io::copy(&mut BufReader::with_capacity(1 << 20, &mut *file), &mut out).map_err(out_err)?;
    if copied != sums.len {
        return Err(PackageError::Invalid(
            "temporary payload changed size".into(),
        ));
    }
    Ok(out)
}

/// Pass 1: the file list with each file's sha256 (FILEDIGESTS must be in
/// the header, which precedes the payload).
fn file_rows(spec: &RpmSpec, payload: &Payload) -> Result<Vec<FileRow>, PackageError> {
    let mut rows = Vec::new();
    for e in payload.iter() {
        let row = match &e.kind {
            EntryKind::Dir if owns_dir(&e.path) => FileRow {
                path: e.path.clone(),
                mode: 0o040755,
                size: 0,
                digest: String::new(),
                link: String::new(),
                flags: 0,
            },
            EntryKind::Dir => continue,
            EntryKind::Symlink { target } => FileRow {
                path: e.path.clone(),
                mode: 0o120777,
                size: target.len() as u64,
                digest: String::new(),
                link: target.clone(),
                flags: 0,
            },
            EntryKind::File { size, .. } => {
                let (n, sha) = sha256_reader(e.open()?).map_err(|err| {
                    PackageError::io("cannot read", Path::new(&e.source_display()), err)
                })?;
                if n != *size {
                    return Err(PackageError::corrupt(
                        Path::new(&e.source_display()),
                        "size changed while packaging",
                    ));
                }
                if *size > u64::from(u32::MAX) {
                    return Err(PackageError::Invalid(format!(
                        "{}: files of 4 GiB or more are not supported in rpm payloads",
                        e.path
                    )));
                }
                FileRow {
                    path: e.path.clone(),
                    mode: (0o100000 | (e.mode & 0o7777)) as u16,
                    size: *size,
                    digest: hex::encode(sha),
                    link: String::new(),
                    flags: if spec.config_files.contains(&e.path) {
                        FILE_CONFIG
                    } else if e.path.starts_with("usr/share/doc/")
                        || e.path.starts_with("usr/share/man/")
                    {
                        FILE_DOC
                    } else {
                        0
                    },
                }
            }
        };
        rows.push(row);
    }
    Ok(rows)
}

/// What writing the payload measured.
struct PayloadSums {
    /// SHA-256 of the compressed payload (PAYLOADDIGEST).
    sha256: [u8; 32],
    /// Compressed length.
    len: u64,
    /// Uncompressed cpio length (the signature's PAYLOADSIZE).
    archive_size: u64,
}

/// Pass 2: cpio -> compressor -> sha256 -> `file`. Each file is hashed
/// again on its way in; a digest that differs from pass 1 means the file
/// changed while it was being packaged.
fn write_payload(
    file: &mut File,
    spec: &RpmSpec,
    payload: &Payload,
    rows: &[FileRow],
    tmp_dir: &Path,
) -> Result<PayloadSums, PackageError> {
    let tmp_err = |e: io::Error| PackageError::io("cannot write temporary payload in", tmp_dir, e);
    let hashed = HashingWriter::new(BufWriter::with_capacity(1 << 20, file));
    let enc = Encoder::new(hashed, spec.compression, spec.level).map_err(tmp_err)?;
    let mut cpio = CpioWriter::new(enc, spec.build_time);
    for (i, row) in rows.iter().enumerate() {
        let ino = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let name = format!("./{}", row.path);
        let entry = payload.get(&row.path);
        match entry.map(|e| &e.kind) {
            Some(EntryKind::File { .. }) => {
                let e = entry.ok_or_else(|| PackageError::Invalid("payload changed".into()))?;
                let mut hr = HashingReader::new(payload.open_written(e)?);
                cpio.append(&name, ino, u32::from(row.mode), row.size, Some(&mut hr))
                    .map_err(|err| {
                        PackageError::io("cannot read", Path::new(&e.source_display()), err)
                    })?;
                let (sha, _) = hr.finish();
                if hex::encode(sha) != row.digest {
                    return Err(PackageError::corrupt(
                        Path::new(&e.source_display()),
                        "file changed while packaging (digest differs between passes)",
                    ));
                }
            }
            Some(EntryKind::Symlink { target }) => {
                let mut r = target.as_bytes();
                cpio.append(&name, ino, u32::from(row.mode), row.size, Some(&mut r))
                    .map_err(tmp_err)?;
            }
            _ => cpio
                .append(&name, ino, u32::from(row.mode), 0, None)
                .map_err(tmp_err)?,
        }
    }
    let (enc, archive_size) = cpio.finish().map_err(tmp_err)?;
    let hashed = enc.finish().map_err(tmp_err)?;
    let (mut buf, sha256, len) = hashed.finish();
    buf.flush().map_err(tmp_err)?;
    Ok(PayloadSums {
        sha256,
        len,
        archive_size,
    })
}

/// The main header (the immutable region): metadata, file list,
/// dependencies, scriptlets, triggers and the payload's digest.
fn main_header(
    spec: &RpmSpec,
    rows: &[FileRow],
    sums: &PayloadSums,
) -> Result<Vec<u8>, PackageError> {
    let mut h = HeaderBuilder::default();
    h.set(tag::HEADERI18NTABLE, Value::StrArray(vec!["C".into()]));
    h.set(tag::NAME, Value::Str(spec.name.clone()));
    h.set(tag::VERSION, Value::Str(spec.version.clone()));
    h.set(tag::RELEASE, Value::Str(spec.release.clone()));
    if let Some(e) = spec.epoch {
        h.set(tag::EPOCH, Value::Int32(vec![e]));
    }
    h.set(tag::SUMMARY, Value::I18n(spec.summary.clone()));
    h.set(tag::DESCRIPTION, Value::I18n(spec.description.clone()));
    h.set(
        tag::BUILDTIME,
        Value::Int32(vec![u32::try_from(spec.build_time).unwrap_or(u32::MAX)]),
    );
    h.set(tag::BUILDHOST, Value::Str("localhost".into()));
    let total: u64 = rows.iter().map(|r| r.size).sum();
    let large = total > u64::from(u32::MAX);
    if large {
        h.set(tag::LONGSIZE, Value::Int64(vec![total]));
    } else {
        h.set(tag::SIZE, Value::Int32(vec![total as u32]));
    }
    h.set(tag::LICENSE, Value::Str(spec.license.clone()));
    if let Some(p) = &spec.packager {
        h.set(tag::PACKAGER, Value::Str(p.clone()));
    }
    h.set(tag::GROUP, Value::I18n(spec.group.clone()));
    if let Some(u) = &spec.url {
        h.set(tag::URL, Value::Str(u.clone()));
    }
    h.set(tag::OS, Value::Str("linux".into()));
    h.set(tag::ARCH, Value::Str(spec.arch.clone()));
    h.set(tag::SOURCERPM, Value::Str(spec.source_rpm.clone()));
    h.set(tag::RPMVERSION, Value::Str("4.18.0".into()));
    if let Some((who, text)) = &spec.changelog {
        // Changelog dates are whole days.
        let day = spec.build_time / 86_400 * 86_400;
        h.set(
            tag::CHANGELOGTIME,
            Value::Int32(vec![u32::try_from(day).unwrap_or(u32::MAX)]),
        );
        h.set(
            tag::CHANGELOGNAME,
            Value::StrArray(vec![format!("{who} - {}", spec.evr())]),
        );
        h.set(tag::CHANGELOGTEXT, Value::StrArray(vec![text.clone()]));
    }
    if !rows.is_empty() {
        file_list_into(&mut h, rows, spec.build_time);
    }
    relations_into(&mut h, spec);
    h.set(tag::PAYLOADFORMAT, Value::Str("cpio".into()));
    let (compressor, level) = match spec.compression {
        Compression::Xz => ("xz", spec.level.unwrap_or(6)),
        Compression::Zstd | Compression::ZstdLong => ("zstd", spec.level.unwrap_or(19)),
        Compression::Gzip => ("gzip", spec.level.unwrap_or(9)),
        Compression::None => ("identity", 0),
    };
    h.set(tag::PAYLOADCOMPRESSOR, Value::Str(compressor.into()));
    h.set(tag::PAYLOADFLAGS, Value::Str(level.to_string()));
    h.set(tag::ENCODING, Value::Str("utf-8".into()));
    h.set(
        tag::PAYLOADDIGEST,
        Value::StrArray(vec![hex::encode(sums.sha256)]),
    );
    h.set(
        tag::PAYLOADDIGESTALGO,
        Value::Int32(vec![PGPHASHALGO_SHA256]),
    );
    h.build(tag::HEADERIMMUTABLE)
}

/// The file-list tags (sizes, modes, digests, owners, dir/base names).
fn file_list_into(h: &mut HeaderBuilder, rows: &[FileRow], mtime: u64) {
    if rows.iter().any(|r| r.size > u64::from(u32::MAX)) {
        h.set(
            tag::LONGFILESIZES,
            Value::Int64(rows.iter().map(|r| r.size).collect()),
        );
    } else {
        h.set(
            tag::FILESIZES,
            Value::Int32(rows.iter().map(|r| r.size as u32).collect()),
        );
    }
    h.set(
        tag::FILEMODES,
        Value::Int16(rows.iter().map(|r| r.mode).collect()),
    );
    h.set(tag::FILERDEVS, Value::Int16(vec![0; rows.len()]));
    let mt = u32::try_from(mtime).unwrap_or(u32::MAX);
    h.set(tag::FILEMTIMES, Value::Int32(vec![mt; rows.len()]));
    h.set(
        tag::FILEDIGESTS,
        Value::StrArray(rows.iter().map(|r| r.digest.clone()).collect()),
    );
    h.set(
        tag::FILELINKTOS,
        Value::StrArray(rows.iter().map(|r| r.link.clone()).collect()),
    );
    h.set(
        tag::FILEFLAGS,
        Value::Int32(rows.iter().map(|r| r.flags).collect()),
    );
    h.set(
        tag::FILEUSERNAME,
        Value::StrArray(vec!["root".into(); rows.len()]),
    );
    h.set(
        tag::FILEGROUPNAME,
        Value::StrArray(vec!["root".into(); rows.len()]),
    );
    h.set(
        tag::FILEVERIFYFLAGS,
        Value::Int32(vec![u32::MAX; rows.len()]),
    );
    h.set(tag::FILEDEVICES, Value::Int32(vec![1; rows.len()]));
    h.set(
        tag::FILEINODES,
        Value::Int32(
            (1..=rows.len())
                .map(|i| u32::try_from(i).unwrap_or(u32::MAX))
                .collect(),
        ),
    );
    h.set(
        tag::FILELANGS,
        Value::StrArray(vec![String::new(); rows.len()]),
    );
    let mut dirnames: Vec<String> = Vec::new();
    let mut dirindexes = Vec::new();
    let mut basenames = Vec::new();
    for r in rows {
        let (dir, base) = match r.path.rsplit_once('/') {
            Some((d, b)) => (format!("/{d}/"), b.to_string()),
            None => ("/".to_string(), r.path.clone()),
        };
        let idx = match dirnames.iter().position(|d| *d == dir) {
            Some(i) => i,
            None => {
                dirnames.push(dir);
                dirnames.len() - 1
            }
        };
        dirindexes.push(u32::try_from(idx).unwrap_or(u32::MAX));
        basenames.push(base);
    }
    h.set(tag::DIRINDEXES, Value::Int32(dirindexes));
    h.set(tag::BASENAMES, Value::StrArray(basenames));
    h.set(tag::DIRNAMES, Value::StrArray(dirnames));
    h.set(tag::FILEDIGESTALGO, Value::Int32(vec![PGPHASHALGO_SHA256]));
}

/// Provides (with the self-provides), requires (with the rpmlib()
/// features the payload uses), conflicts, obsoletes, recommends,
/// scriptlets and file triggers.
fn relations_into(h: &mut HeaderBuilder, spec: &RpmSpec) {
    let evr = spec.evr();
    let mut provides = vec![
        Dep::eq(&spec.name, &evr),
        Dep::eq(&format!("{}({})", spec.name, isa_suffix(&spec.arch)), &evr),
    ];
    if spec.arch == "noarch" {
        provides.truncate(1);
    }
    for p in &spec.provides {
        if !provides.contains(p) {
            provides.push(p.clone());
        }
    }
    deps_into(
        h,
        &provides,
        tag::PROVIDENAME,
        tag::PROVIDEFLAGS,
        tag::PROVIDEVERSION,
    );
    let mut requires = spec.requires.clone();
    requires.push(rpmlib("CompressedFileNames", "3.0.4-1"));
    requires.push(rpmlib("FileDigests", "4.6.0-1"));
    requires.push(rpmlib("PayloadFilesHavePrefix", "4.0-1"));
    match spec.compression {
        Compression::Xz => requires.push(rpmlib("PayloadIsXz", "5.2-1")),
        Compression::Zstd | Compression::ZstdLong => {
            requires.push(rpmlib("PayloadIsZstd", "5.4.18-1"))
        }
        _ => {}
    }
    deps_into(
        h,
        &requires,
        tag::REQUIRENAME,
        tag::REQUIREFLAGS,
        tag::REQUIREVERSION,
    );
    deps_into(
        h,
        &spec.conflicts,
        tag::CONFLICTNAME,
        tag::CONFLICTFLAGS,
        tag::CONFLICTVERSION,
    );
    deps_into(
        h,
        &spec.obsoletes,
        tag::OBSOLETENAME,
        tag::OBSOLETEFLAGS,
        tag::OBSOLETEVERSION,
    );
    deps_into(
        h,
        &spec.recommends,
        tag::RECOMMENDNAME,
        tag::RECOMMENDFLAGS,
        tag::RECOMMENDVERSION,
    );
    for (script, prog) in SCRIPT_TAGS {
        if let Some((interp, body)) = spec.scripts.get(&script) {
            h.set(script, Value::Str(body.clone()));
            h.set(prog, Value::Str(interp.clone()));
        }
    }
    let (trans, per_package): (Vec<FileTrigger>, Vec<FileTrigger>) = spec
        .file_triggers
        .iter()
        .cloned()
        .partition(|t| t.transaction);
    file_triggers_into(h, &trans, TRANS_FILE_TRIGGER_TAGS);
    file_triggers_into(h, &per_package, FILE_TRIGGER_TAGS);
}

/// The signature header, padded to 8 bytes: sizes, and digests of the
/// main header; its MD5 covers header and payload, so the payload in
/// `file` is read once more.
fn signature_header(
    header: &[u8],
    file: &mut File,
    sums: &PayloadSums,
    tmp_dir: &Path,
) -> Result<Vec<u8>, PackageError> {
    let tmp_err = |e: io::Error| PackageError::io("cannot read temporary payload in", tmp_dir, e);
    let mut md5 = Md5::new();
    md5.update(header);
    file.seek(SeekFrom::Start(0)).map_err(tmp_err)?;
    for_each_block(BufReader::with_capacity(1 << 20, &mut *file), |b| {
        md5.update(b)
    })
    .map_err(tmp_err)?;
    let signed_len = header.len() as u64 + sums.len;
    let archive_size = sums.archive_size;
    let mut s = HeaderBuilder::default();
    if signed_len > u64::from(u32::MAX) || archive_size > u64::from(u32::MAX) {
        s.set(tag::SIG_LONGSIZE, Value::Int64(vec![signed_len]));
        s.set(tag::SIG_LONGARCHIVESIZE, Value::Int64(vec![archive_size]));
    } else {
        s.set(tag::SIG_SIZE, Value::Int32(vec![signed_len as u32]));
        s.set(
            tag::SIG_PAYLOADSIZE,
            Value::Int32(vec![archive_size as u32]),
        );
    }
    s.set(tag::SIG_MD5, Value::Bin(md5.finalize().to_vec()));
    s.set(tag::SIG_SHA1, Value::Str(hex::encode(Sha1::digest(header))));
    s.set(
        tag::SIG_SHA256,
        Value::Str(hex::encode(Sha256::digest(header))),
    );
    let mut sig = s.build(tag::HEADERSIGNATURES)?;
    while sig.len() % 8 != 0 {
        sig.push(0);
    }
    Ok(sig)
}

fn isa_suffix(arch: &str) -> &str {
    match arch {
        "x86_64" => "x86-64",
        "aarch64" => "aarch-64",
        "ppc64le" => "ppc-64",
        "i686" => "x86-32",
        other => other,
    }
}

fn lead(spec: &RpmSpec) -> [u8; 96] {
    let mut l = [0u8; 96];
    l[0..4].copy_from_slice(&[0xed, 0xab, 0xee, 0xdb]);
    l[4] = 3;
    l[5] = 0;
    // type 0 = binary; archnum 1 (x86 family; rpm ignores it).
    l[8..10].copy_from_slice(&1u16.to_be_bytes());
    let nvr = format!("{}-{}-{}", spec.name, spec.version, spec.release);
    // The name field is 66 bytes, NUL-terminated: at most 65 of the name.
    for (dst, src) in l[10..75].iter_mut().zip(nvr.as_bytes()) {
        *dst = *src;
    }
    l[76..78].copy_from_slice(&1u16.to_be_bytes()); // os linux
    l[78..80].copy_from_slice(&5u16.to_be_bytes()); // header-style signature
    l
}
