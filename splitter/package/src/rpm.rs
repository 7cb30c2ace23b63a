//! RPM packages (v4 format), written natively and read back.
//!
//! Layout: 96-byte lead, signature header (sizes, MD5, SHA1, SHA256;
//! padded to 8 bytes), main header (immutable region: metadata, file
//! list, dependencies, payload digest), then the compressed `cpio` (newc)
//! payload with `./`-prefixed names.
//!
//! Streaming: pass 1 hashes every file (sha256 for FILEDIGESTS); the
//! payload is then compressed into a temporary file next to the output
//! while its sha256 is computed; the headers are built from those digests;
//! MD5 over header + payload re-reads the temporary file; finally lead,
//! headers and payload are written. No file is ever held in memory.
//! (The `rpm` crate was not used: it holds every file and the whole
//! payload in memory.)
//!
//! Directories: only `.kpack` directories are owned (shared by generic
//! and device packages with identical attributes, which rpm allows);
//! system directories such as `/usr/lib` are left unowned so the packages
//! never conflict with a distribution's `filesystem` package.

use rocm_kpack_format::layout;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use md5::Md5;
use sha1::Sha1;
use sha2::{Digest, Sha256};

use crate::compress::{decoder, Compression, Encoder};
use crate::container::{CpioReader, CpioWriter};
use crate::digest::{DigestWriter, HashingReader, HashingWriter};
use crate::tree::{EntryKind, Payload};
use crate::PackageError;
use rocm_kpack_pkgspec::fields::FieldKind;

// Tag value types.
const T_INT16: u32 = 3;
const T_INT32: u32 = 4;
const T_INT64: u32 = 5;
const T_STRING: u32 = 6;
const T_BIN: u32 = 7;
const T_STRING_ARRAY: u32 = 8;
const T_I18NSTRING: u32 = 9;

/// Header tags used here (rpmtag.h numbering).
#[allow(missing_docs)]
pub mod tag {
    pub const HEADERSIGNATURES: u32 = 62;
    pub const HEADERIMMUTABLE: u32 = 63;
    pub const HEADERI18NTABLE: u32 = 100;
    pub const SIG_SIZE: u32 = 1000;
    pub const SIG_MD5: u32 = 1004;
    pub const SIG_PAYLOADSIZE: u32 = 1007;
    pub const SIG_SHA1: u32 = 269;
    pub const SIG_SHA256: u32 = 273;
    pub const SIG_LONGSIZE: u32 = 270;
    pub const SIG_LONGARCHIVESIZE: u32 = 271;
    pub const NAME: u32 = 1000;
    pub const VERSION: u32 = 1001;
    pub const RELEASE: u32 = 1002;
    pub const EPOCH: u32 = 1003;
    pub const SUMMARY: u32 = 1004;
    pub const DESCRIPTION: u32 = 1005;
    pub const BUILDTIME: u32 = 1006;
    pub const BUILDHOST: u32 = 1007;
    pub const SIZE: u32 = 1009;
    pub const VENDOR: u32 = 1011;
    pub const LICENSE: u32 = 1014;
    pub const PACKAGER: u32 = 1015;
    pub const GROUP: u32 = 1016;
    pub const URL: u32 = 1020;
    pub const OS: u32 = 1021;
    pub const ARCH: u32 = 1022;
    pub const PREIN: u32 = 1023;
    pub const POSTIN: u32 = 1024;
    pub const PREUN: u32 = 1025;
    pub const POSTUN: u32 = 1026;
    pub const FILESIZES: u32 = 1028;
    pub const FILEMODES: u32 = 1030;
    pub const FILERDEVS: u32 = 1033;
    pub const FILEMTIMES: u32 = 1034;
    pub const FILEDIGESTS: u32 = 1035;
    pub const FILELINKTOS: u32 = 1036;
    pub const FILEFLAGS: u32 = 1037;
    pub const FILEUSERNAME: u32 = 1039;
    pub const FILEGROUPNAME: u32 = 1040;
    pub const SOURCERPM: u32 = 1044;
    pub const CHANGELOGTIME: u32 = 1080;
    pub const CHANGELOGNAME: u32 = 1081;
    pub const CHANGELOGTEXT: u32 = 1082;
    pub const FILEVERIFYFLAGS: u32 = 1045;
    pub const PROVIDENAME: u32 = 1047;
    pub const REQUIREFLAGS: u32 = 1048;
    pub const REQUIRENAME: u32 = 1049;
    pub const REQUIREVERSION: u32 = 1050;
    pub const CONFLICTFLAGS: u32 = 1053;
    pub const CONFLICTNAME: u32 = 1054;
    pub const CONFLICTVERSION: u32 = 1055;
    pub const RPMVERSION: u32 = 1064;
    pub const PREINPROG: u32 = 1085;
    pub const POSTINPROG: u32 = 1086;
    pub const PREUNPROG: u32 = 1087;
    pub const POSTUNPROG: u32 = 1088;
    pub const FILEDEVICES: u32 = 1095;
    pub const FILEINODES: u32 = 1096;
    pub const FILELANGS: u32 = 1097;
    pub const PROVIDEFLAGS: u32 = 1112;
    pub const PROVIDEVERSION: u32 = 1113;
    pub const OBSOLETENAME: u32 = 1090;
    pub const RECOMMENDNAME: u32 = 5046;
    pub const RECOMMENDVERSION: u32 = 5047;
    pub const RECOMMENDFLAGS: u32 = 5048;
    pub const OBSOLETEFLAGS: u32 = 1114;
    pub const OBSOLETEVERSION: u32 = 1115;
    pub const DIRINDEXES: u32 = 1116;
    pub const BASENAMES: u32 = 1117;
    pub const DIRNAMES: u32 = 1118;
    pub const PAYLOADFORMAT: u32 = 1124;
    pub const PAYLOADCOMPRESSOR: u32 = 1125;
    pub const PAYLOADFLAGS: u32 = 1126;
    pub const LONGFILESIZES: u32 = 5008;
    pub const LONGSIZE: u32 = 5009;
    pub const FILEDIGESTALGO: u32 = 5011;
    pub const ENCODING: u32 = 5062;
    pub const FILETRIGGERSCRIPTS: u32 = 5066;
    pub const FILETRIGGERSCRIPTPROG: u32 = 5067;
    pub const FILETRIGGERNAME: u32 = 5069;
    pub const FILETRIGGERINDEX: u32 = 5070;
    pub const FILETRIGGERVERSION: u32 = 5071;
    pub const FILETRIGGERFLAGS: u32 = 5072;
    pub const FILETRIGGERPRIORITIES: u32 = 5084;
    pub const TRANSFILETRIGGERSCRIPTS: u32 = 5076;
    pub const TRANSFILETRIGGERSCRIPTPROG: u32 = 5077;
    pub const TRANSFILETRIGGERNAME: u32 = 5079;
    pub const TRANSFILETRIGGERINDEX: u32 = 5080;
    pub const TRANSFILETRIGGERVERSION: u32 = 5081;
    pub const TRANSFILETRIGGERFLAGS: u32 = 5082;
    pub const TRANSFILETRIGGERPRIORITIES: u32 = 5085;
    pub const PAYLOADDIGEST: u32 = 5092;
    pub const PAYLOADDIGESTALGO: u32 = 5093;
}

/// Dependency sense flags.
pub mod sense {
    /// `<`
    pub const LESS: u32 = 1 << 1;
    /// `>`
    pub const GREATER: u32 = 1 << 2;
    /// `=`
    pub const EQUAL: u32 = 1 << 3;
    /// Requires(pre)
    pub const PREREQ: u32 = 1 << 6;
    /// Requires(pre)
    pub const SCRIPT_PRE: u32 = 1 << 9;
    /// Requires(post)
    pub const SCRIPT_POST: u32 = 1 << 10;
    /// rpmlib() dependency
    pub const RPMLIB: u32 = 1 << 24;
    /// A trigger that runs after the files are installed.
    pub const TRIGGERIN: u32 = 1 << 16;
    /// A trigger that runs before the files are removed.
    pub const TRIGGERUN: u32 = 1 << 17;
    /// A trigger that runs after the files are removed.
    pub const TRIGGERPOSTUN: u32 = 1 << 18;
}

/// rpm's default file-trigger priority (what rpmbuild writes).
const FILE_TRIGGER_PRIORITY: u32 = 1_000_000;

/// A file trigger (`%filetriggerin -p PROG -- PATHS`): runs when a
/// package installs (or removes) a file below one of `paths`, with the
/// matching file names on stdin; a transaction file trigger
/// (`%transfiletrigger*`) runs once per transaction instead of once per
/// package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileTrigger {
    /// `%transfiletrigger*` (once per transaction) rather than
    /// `%filetrigger*` (once per package).
    pub transaction: bool,
    /// [`sense::TRIGGERIN`], [`sense::TRIGGERUN`] or [`sense::TRIGGERPOSTUN`].
    pub when: u32,
    /// Path prefixes that activate it.
    pub paths: Vec<String>,
    /// The interpreter (one path: rpm passes no arguments to it but the
    /// script file).
    pub interpreter: String,
    /// The script.
    pub body: String,
}

const FILE_CONFIG: u32 = 1 << 0;
const FILE_DOC: u32 = 1 << 1;

/// Install scriptlets: (script tag, interpreter tag) pairs.
pub const SCRIPT_TAGS: [(u32, u32); 4] = [
    (tag::PREIN, tag::PREINPROG),
    (tag::POSTIN, tag::POSTINPROG),
    (tag::PREUN, tag::PREUNPROG),
    (tag::POSTUN, tag::POSTUNPROG),
];
const PGPHASHALGO_SHA256: u32 = 8;

/// A dependency: name, sense flags, version.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Dep {
    /// Name (`librocrand1`, `rocm-kpack(gfx1100)`).
    pub name: String,
    /// Sense flags ([`sense`]).
    pub flags: u32,
    /// `[E:]V[-R]` or empty.
    pub version: String,
}

impl Dep {
    /// An unversioned dependency.
    pub fn any(name: &str) -> Dep {
        Dep {
            name: name.to_string(),
            flags: 0,
            version: String::new(),
        }
    }

    /// `name = version`.
    pub fn eq(name: &str, version: &str) -> Dep {
        Dep {
            name: name.to_string(),
            flags: sense::EQUAL,
            version: version.to_string(),
        }
    }

    /// `name < version`.
    pub fn lt(name: &str, version: &str) -> Dep {
        Dep {
            name: name.to_string(),
            flags: sense::LESS,
            version: version.to_string(),
        }
    }

    /// Parses `name`, `name >= 1.0`, `name = 1:2-3`.
    pub fn parse(text: &str) -> Result<Dep, String> {
        let parts: Vec<&str> = text.split_whitespace().collect();
        match parts.as_slice() {
            [name] => Ok(Dep::any(name)),
            [name, op, ver] => {
                let flags = match *op {
                    "<" => sense::LESS,
                    "<=" => sense::LESS | sense::EQUAL,
                    "=" | "==" => sense::EQUAL,
                    ">=" => sense::GREATER | sense::EQUAL,
                    ">" => sense::GREATER,
                    _ => return Err(format!("{text:?}: unknown operator {op:?}")),
                };
                Ok(Dep {
                    name: (*name).to_string(),
                    flags,
                    version: (*ver).to_string(),
                })
            }
            _ => Err(format!("{text:?}: expected `name [op version]`")),
        }
    }

    /// Operator for repodata (`EQ`, `GE`, ...), None when unversioned.
    pub fn repo_flags(&self) -> Option<&'static str> {
        let f = self.flags & (sense::LESS | sense::GREATER | sense::EQUAL);
        match f {
            x if x == sense::EQUAL => Some("EQ"),
            x if x == sense::LESS => Some("LT"),
            x if x == sense::GREATER => Some("GT"),
            x if x == sense::LESS | sense::EQUAL => Some("LE"),
            x if x == sense::GREATER | sense::EQUAL => Some("GE"),
            _ => None,
        }
    }
}

/// Splits `[E:]V[-R]` into (epoch, version, release).
pub fn split_evr(evr: &str) -> (Option<&str>, &str, Option<&str>) {
    let (epoch, rest) = match evr.split_once(':') {
        Some((e, r)) if !e.is_empty() && e.chars().all(|c| c.is_ascii_digit()) => (Some(e), r),
        _ => (None, evr),
    };
    match rest.rsplit_once('-') {
        Some((v, r)) => (epoch, v, Some(r)),
        None => (epoch, rest, None),
    }
}

/// Maps a Debian architecture to rpm's (`amd64` -> `x86_64`).
pub fn rpm_arch(deb_arch: &str) -> &str {
    match deb_arch {
        "amd64" => "x86_64",
        "arm64" => "aarch64",
        "i386" => "i686",
        "ppc64el" => "ppc64le",
        "all" => "noarch",
        other => other,
    }
}

/// Everything an rpm header says about the package (not the files).
#[derive(Debug, Clone)]
pub struct RpmSpec {
    /// Name.
    pub name: String,
    /// Epoch.
    pub epoch: Option<u32>,
    /// Version (no `-`).
    pub version: String,
    /// Release.
    pub release: String,
    /// rpm arch (`x86_64`).
    pub arch: String,
    /// Summary.
    pub summary: String,
    /// Description.
    pub description: String,
    /// License.
    pub license: String,
    /// Group.
    pub group: String,
    /// URL.
    pub url: Option<String>,
    /// Packager.
    pub packager: Option<String>,
    /// Source rpm name.
    pub source_rpm: String,
    /// Extra provides (the self-provides are added by the writer).
    pub provides: Vec<Dep>,
    /// Requires (rpmlib() requirements are added by the writer).
    pub requires: Vec<Dep>,
    /// Conflicts.
    pub conflicts: Vec<Dep>,
    /// Obsoletes.
    pub obsoletes: Vec<Dep>,
    /// Recommends (weak dependencies: dnf installs them by default, and
    /// `--setopt=install_weak_deps=False` skips them).
    pub recommends: Vec<Dep>,
    /// Scriptlets: script tag ([`SCRIPT_TAGS`]) -> (interpreter, body).
    pub scripts: BTreeMap<u32, (String, String)>,
    /// Install paths (relative, as in the payload) marked %config.
    pub config_files: Vec<String>,
    /// File triggers (`%filetrigger*`, `%transfiletrigger*`).
    pub file_triggers: Vec<FileTrigger>,
    /// Build time (SOURCE_DATE_EPOCH).
    pub build_time: u64,
    /// One changelog entry (author line without the EVR, text); rpmlint
    /// wants a changelog.
    pub changelog: Option<(String, String)>,
    /// Payload compression (xz, zstd, gzip or none).
    pub compression: Compression,
    /// Compression level.
    pub level: Option<u32>,
}

impl RpmSpec {
    /// `[E:]V-R`.
    pub fn evr(&self) -> String {
        match self.epoch {
            Some(e) => format!("{e}:{}-{}", self.version, self.release),
            None => format!("{}-{}", self.version, self.release),
        }
    }

    /// The conventional file name `N-V-R.A.rpm`.
    pub fn file_name(&self) -> String {
        format!(
            "{}-{}-{}.{}.rpm",
            self.name, self.version, self.release, self.arch
        )
    }
}

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

/// The tags of one kind of file trigger: scripts, programs, names,
/// indexes, versions, flags, priorities.
type TriggerTags = [u32; 7];
const FILE_TRIGGER_TAGS: TriggerTags = [
    tag::FILETRIGGERSCRIPTS,
    tag::FILETRIGGERSCRIPTPROG,
    tag::FILETRIGGERNAME,
    tag::FILETRIGGERINDEX,
    tag::FILETRIGGERVERSION,
    tag::FILETRIGGERFLAGS,
    tag::FILETRIGGERPRIORITIES,
];
const TRANS_FILE_TRIGGER_TAGS: TriggerTags = [
    tag::TRANSFILETRIGGERSCRIPTS,
    tag::TRANSFILETRIGGERSCRIPTPROG,
    tag::TRANSFILETRIGGERNAME,
    tag::TRANSFILETRIGGERINDEX,
    tag::TRANSFILETRIGGERVERSION,
    tag::TRANSFILETRIGGERFLAGS,
    tag::TRANSFILETRIGGERPRIORITIES,
];

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
    // Pass 1: the file list with digests.
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
                let mut r = e.open()?;
                let mut h = DigestWriter(Sha256::new());
                let n = io::copy(&mut r, &mut h).map_err(|err| {
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
                    digest: hex::encode(h.0.finalize()),
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

    // Payload: cpio -> compressor -> sha256 -> temp file.
    let mut tmp = tempfile::Builder::new()
        .prefix(".rpm-payload-")
        .tempfile_in(tmp_dir)
        .map_err(tmp_err)?;
    let mtime = spec.build_time;
    let hashed = HashingWriter::new(BufWriter::with_capacity(1 << 20, tmp.as_file_mut()));
    let enc = Encoder::new(hashed, spec.compression, spec.level).map_err(tmp_err)?;
    let counting = CountingWriter {
        inner: enc,
        count: 0,
    };
    let mut cpio = CpioWriter::new(counting, mtime);
    for (i, row) in rows.iter().enumerate() {
        let ino = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let name = format!("./{}", row.path);
        let entry = payload.get(&row.path);
        match entry.map(|e| &e.kind) {
            Some(EntryKind::File { .. }) => {
                let e = entry.ok_or_else(|| PackageError::Invalid("payload changed".into()))?;
                let mut r = e.open()?;
                let mut hr = Sha256Reader {
                    inner: &mut r,
                    h: Sha256::new(),
                };
                cpio.append(&name, ino, u32::from(row.mode), row.size, Some(&mut hr))
                    .map_err(|err| {
                        PackageError::io("cannot read", Path::new(&e.source_display()), err)
                    })?;
                if hex::encode(hr.h.finalize()) != row.digest {
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
    let CountingWriter {
        inner: enc,
        count: archive_size,
    } = cpio.finish().map_err(tmp_err)?;
    let hashed = enc.finish().map_err(tmp_err)?;
    let (mut buf, payload_sha, payload_len) = hashed.finish();
    buf.flush().map_err(tmp_err)?;
    drop(buf);

    // Main header.
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
        for r in &rows {
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
        &mut h,
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
        Compression::Zstd => requires.push(rpmlib("PayloadIsZstd", "5.4.18-1")),
        _ => {}
    }
    deps_into(
        &mut h,
        &requires,
        tag::REQUIRENAME,
        tag::REQUIREFLAGS,
        tag::REQUIREVERSION,
    );
    deps_into(
        &mut h,
        &spec.conflicts,
        tag::CONFLICTNAME,
        tag::CONFLICTFLAGS,
        tag::CONFLICTVERSION,
    );
    deps_into(
        &mut h,
        &spec.obsoletes,
        tag::OBSOLETENAME,
        tag::OBSOLETEFLAGS,
        tag::OBSOLETEVERSION,
    );
    deps_into(
        &mut h,
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
    file_triggers_into(&mut h, &trans, TRANS_FILE_TRIGGER_TAGS);
    file_triggers_into(&mut h, &per_package, FILE_TRIGGER_TAGS);
    h.set(tag::PAYLOADFORMAT, Value::Str("cpio".into()));
    let (compressor, level) = match spec.compression {
        Compression::Xz => ("xz", spec.level.unwrap_or(6)),
        Compression::Zstd => ("zstd", spec.level.unwrap_or(19)),
        Compression::Gzip => ("gzip", spec.level.unwrap_or(9)),
        Compression::None => ("identity", 0),
    };
    h.set(tag::PAYLOADCOMPRESSOR, Value::Str(compressor.into()));
    h.set(tag::PAYLOADFLAGS, Value::Str(level.to_string()));
    h.set(tag::ENCODING, Value::Str("utf-8".into()));
    h.set(
        tag::PAYLOADDIGEST,
        Value::StrArray(vec![hex::encode(payload_sha)]),
    );
    h.set(
        tag::PAYLOADDIGESTALGO,
        Value::Int32(vec![PGPHASHALGO_SHA256]),
    );
    let header = h.build(tag::HEADERIMMUTABLE)?;

    // Signature header: MD5 over header + payload needs the payload again.
    let mut md5 = DigestWriter(Md5::new());
    md5.0.update(&header);
    let file = tmp.as_file_mut();
    file.seek(SeekFrom::Start(0)).map_err(tmp_err)?;
    io::copy(&mut BufReader::with_capacity(1 << 20, &mut *file), &mut md5).map_err(tmp_err)?;
    let signed_len = header.len() as u64 + payload_len;
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
    s.set(tag::SIG_MD5, Value::Bin(md5.0.finalize().to_vec()));
    s.set(
        tag::SIG_SHA1,
        Value::Str(hex::encode(Sha1::digest(&header))),
    );
    s.set(
        tag::SIG_SHA256,
        Value::Str(hex::encode(Sha256::digest(&header))),
    );
    let mut sig = s.build(tag::HEADERSIGNATURES)?;
    while sig.len() % 8 != 0 {
        sig.push(0);
    }

    let out_err = |e: io::Error| PackageError::io("cannot write", Path::new("<rpm>"), e);
    out.write_all(&lead(spec)).map_err(out_err)?;
    out.write_all(&sig).map_err(out_err)?;
    out.write_all(&header).map_err(out_err)?;
    file.seek(SeekFrom::Start(0)).map_err(tmp_err)?;
    let copied =
        io::copy(&mut BufReader::with_capacity(1 << 20, &mut *file), &mut out).map_err(out_err)?;
    if copied != payload_len {
        return Err(PackageError::Invalid(
            "temporary payload changed size".into(),
        ));
    }
    Ok(out)
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
    let n = nvr.len().min(65);
    l[10..10 + n].copy_from_slice(nvr.as_bytes().get(..n).unwrap_or_default());
    l[76..78].copy_from_slice(&1u16.to_be_bytes()); // os linux
    l[78..80].copy_from_slice(&5u16.to_be_bytes()); // header-style signature
    l
}

struct CountingWriter<W: Write> {
    inner: W,
    count: u64,
}

impl<W: Write> Write for CountingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.count += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

struct Sha256Reader<'a, R: Read + ?Sized> {
    inner: &'a mut R,
    h: Sha256,
}

impl<R: Read + ?Sized> Read for Sha256Reader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.h.update(buf.get(..n).unwrap_or_default());
        Ok(n)
    }
}

// ---------------------------------------------------------------- reading

/// A decoded header value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagValue {
    /// INT8/INT16/INT32/INT64/CHAR values widened.
    Ints(Vec<u64>),
    /// STRING, STRING_ARRAY, I18NSTRING.
    Strings(Vec<String>),
    /// BIN.
    Bin(Vec<u8>),
}

/// One parsed header: its tags and where it was in the file.
#[derive(Debug, Clone, Default)]
pub struct Header {
    tags: BTreeMap<u32, TagValue>,
    /// Offset of the header's magic in the file.
    pub start: u64,
    /// Offset just past the header.
    pub end: u64,
}

impl Header {
    /// The first string of a tag.
    pub fn string(&self, t: u32) -> Option<&str> {
        match self.tags.get(&t) {
            Some(TagValue::Strings(v)) => v.first().map(String::as_str),
            _ => None,
        }
    }
    /// All strings of a tag (empty if absent).
    pub fn strings(&self, t: u32) -> &[String] {
        match self.tags.get(&t) {
            Some(TagValue::Strings(v)) => v,
            _ => &[],
        }
    }
    /// Integers of a tag (empty if absent).
    pub fn ints(&self, t: u32) -> &[u64] {
        match self.tags.get(&t) {
            Some(TagValue::Ints(v)) => v,
            _ => &[],
        }
    }
    /// The first integer of a tag.
    pub fn int(&self, t: u32) -> Option<u64> {
        self.ints(t).first().copied()
    }
    /// Binary data of a tag.
    pub fn bin(&self, t: u32) -> Option<&[u8]> {
        match self.tags.get(&t) {
            Some(TagValue::Bin(b)) => Some(b),
            _ => None,
        }
    }
}

const MAX_INDEX: u32 = 0x10000;
const MAX_DATA: u32 = 256 << 20;

/// How many bytes of decoded tags (strings, widened integers, map entries)
/// one byte of an rpm file may produce, over all its headers: tags may
/// share and overlap their data, so without a budget a few megabytes of
/// header decode into gigabytes. Real headers decode to about 2-3x the
/// header's size, and a file is larger than its headers.
pub const DECODE_BUDGET_PER_BYTE: u64 = 4;

/// Memory one decoded map entry is charged (key, value and tree overhead).
const ENTRY_COST: u64 = 64;

/// Parses one header. `budget` is the decoded-memory allowance left for
/// the file (see [`DECODE_BUDGET_PER_BYTE`]); each tag's cost is taken
/// from it before the tag is decoded.
fn read_header<R: Read>(
    r: &mut R,
    start: u64,
    file_len: u64,
    path: &Path,
    budget: &mut u64,
) -> Result<(Header, Vec<u8>), PackageError> {
    let bad = |d: String| PackageError::corrupt(path, d);
    let mut intro = [0u8; 16];
    r.read_exact(&mut intro)
        .map_err(|_| bad(format!("truncated rpm header at offset {start}")))?;
    if intro[0..3] != [0x8e, 0xad, 0xe8] {
        return Err(bad(format!("bad rpm header magic at offset {start}")));
    }
    let il = u32::from_be_bytes([intro[8], intro[9], intro[10], intro[11]]);
    let dl = u32::from_be_bytes([intro[12], intro[13], intro[14], intro[15]]);
    if il == 0 || il > MAX_INDEX || dl > MAX_DATA {
        return Err(bad(format!(
            "implausible rpm header size ({il} entries, {dl} bytes)"
        )));
    }
    // Never allocate more than the file can hold.
    let need = u64::from(il) * 16 + u64::from(dl);
    if start + 16 + need > file_len {
        return Err(bad(format!(
            "rpm header at offset {start} claims {need} bytes, past the end of the file"
        )));
    }
    // One buffer, returned as the blob: the header is never copied.
    let mut blob = vec![0u8; 16 + il as usize * 16 + dl as usize];
    blob.get_mut(..16)
        .unwrap_or_default()
        .copy_from_slice(&intro);
    r.read_exact(blob.get_mut(16..).unwrap_or_default())
        .map_err(|_| bad(format!("truncated rpm header at offset {start}")))?;
    let (index, data) = blob
        .get(16..)
        .unwrap_or_default()
        .split_at(il as usize * 16);
    let mut tags = BTreeMap::new();
    let mut charge = |t: u32, cost: u64| -> Result<(), PackageError> {
        let cost = cost.saturating_add(ENTRY_COST);
        if cost > *budget {
            return Err(bad(format!(
                "rpm header at offset {start}: tag {t} would decode past {DECODE_BUDGET_PER_BYTE}x the file's size (overlapping or inflated tags)"
            )));
        }
        *budget -= cost;
        Ok(())
    };
    for e in index.chunks_exact(16) {
        let be = |i: usize| -> u32 {
            u32::from_be_bytes([
                e.get(i).copied().unwrap_or(0),
                e.get(i + 1).copied().unwrap_or(0),
                e.get(i + 2).copied().unwrap_or(0),
                e.get(i + 3).copied().unwrap_or(0),
            ])
        };
        let (t, ty, off, count) = (be(0), be(4), be(8) as i32, be(12));
        if t == tag::HEADERSIGNATURES || t == tag::HEADERIMMUTABLE || off < 0 {
            continue;
        }
        let off = off as usize;
        let tail = data
            .get(off..)
            .ok_or_else(|| bad(format!("tag {t}: offset {off} outside the data store")))?;
        let count = count as usize;
        let mut ints = |width: usize| -> Result<TagValue, PackageError> {
            let bytes = tail
                .get(..count.saturating_mul(width))
                .ok_or_else(|| bad(format!("tag {t}: {count} values run past the data store")))?;
            charge(t, (count as u64).saturating_mul(8))?;
            Ok(TagValue::Ints(
                bytes
                    .chunks_exact(width)
                    .map(|c| c.iter().fold(0u64, |a, &b| (a << 8) | u64::from(b)))
                    .collect(),
            ))
        };
        let v = match ty {
            1 | 2 => ints(1)?,
            T_INT16 => ints(2)?,
            T_INT32 => ints(4)?,
            T_INT64 => ints(8)?,
            T_STRING | T_STRING_ARRAY | T_I18NSTRING => {
                let n = if ty == T_STRING { 1 } else { count };
                if n > tail.len() {
                    return Err(bad(format!("tag {t}: {n} strings run past the data store")));
                }
                // Measure first, charge, then allocate.
                let mut pos = 0usize;
                for _ in 0..n {
                    let s = tail.get(pos..).unwrap_or_default();
                    let len = s
                        .iter()
                        .position(|&b| b == 0)
                        .ok_or_else(|| bad(format!("tag {t}: unterminated string")))?;
                    pos += len + 1;
                }
                let slots = (n as u64).saturating_mul(std::mem::size_of::<String>() as u64);
                charge(t, slots.saturating_add(pos as u64))?;
                let mut out = Vec::with_capacity(n);
                let mut pos = 0usize;
                for _ in 0..n {
                    let s = tail.get(pos..).unwrap_or_default();
                    let len = s.iter().position(|&b| b == 0).unwrap_or(s.len());
                    out.push(
                        String::from_utf8_lossy(s.get(..len).unwrap_or_default()).into_owned(),
                    );
                    pos += len + 1;
                }
                TagValue::Strings(out)
            }
            T_BIN => {
                let bytes = tail
                    .get(..count)
                    .ok_or_else(|| bad(format!("tag {t}: binary runs past the data store")))?;
                charge(t, count as u64)?;
                TagValue::Bin(bytes.to_vec())
            }
            _ => continue,
        };
        tags.insert(t, v);
    }
    let end = start + blob.len() as u64;
    Ok((Header { tags, start, end }, blob))
}

/// A file listed in an rpm header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpmFile {
    /// Absolute install path.
    pub path: String,
    /// Mode with type bits.
    pub mode: u32,
    /// Size.
    pub size: u64,
    /// Hex digest ("" for non-files).
    pub digest: String,
    /// Symlink target ("" otherwise).
    pub link: String,
}

/// An rpm opened for reading: both headers parsed and the header SHA256
/// (when present) verified.
#[derive(Debug, Clone)]
pub struct RpmReader {
    /// The file.
    pub path: PathBuf,
    /// Signature header.
    pub signature: Header,
    /// Main header (`start`/`end` give the repodata header-range).
    pub header: Header,
    /// File length.
    pub file_size: u64,
}

impl RpmReader {
    /// Opens and checks an rpm.
    pub fn open(path: &Path) -> Result<RpmReader, PackageError> {
        let f = File::open(path).map_err(|e| PackageError::io("cannot open", path, e))?;
        let file_size = f
            .metadata()
            .map_err(|e| PackageError::io("cannot stat", path, e))?
            .len();
        let mut r = BufReader::new(f);
        let mut lead = [0u8; 96];
        r.read_exact(&mut lead)
            .map_err(|_| PackageError::corrupt(path, "too short for an rpm"))?;
        if lead[0..4] != [0xed, 0xab, 0xee, 0xdb] {
            return Err(PackageError::corrupt(path, "not an rpm (bad lead magic)"));
        }
        let mut budget = file_size.saturating_mul(DECODE_BUDGET_PER_BYTE);
        let (signature, sig_blob) = read_header(&mut r, 96, file_size, path, &mut budget)?;
        let pad = (8 - sig_blob.len() % 8) % 8;
        let mut skip = [0u8; 8];
        r.read_exact(skip.get_mut(..pad).unwrap_or_default())
            .map_err(|_| PackageError::corrupt(path, "truncated after the signature header"))?;
        let start = 96 + sig_blob.len() as u64 + pad as u64;
        let (header, blob) = read_header(&mut r, start, file_size, path, &mut budget)?;
        if let Some(want) = signature.string(tag::SIG_SHA256) {
            let got = hex::encode(Sha256::digest(&blob));
            if !got.eq_ignore_ascii_case(want) {
                return Err(PackageError::corrupt(path, "header SHA256 digest mismatch"));
            }
        }
        if let Some(size) = signature
            .int(tag::SIG_SIZE)
            .or(signature.int(tag::SIG_LONGSIZE))
        {
            if header.start + size != file_size {
                return Err(PackageError::corrupt(
                    path,
                    format!(
                        "size mismatch: header + payload should be {size} bytes, file has {}",
                        file_size.saturating_sub(header.start)
                    ),
                ));
            }
        }
        for (field, t, kind) in [
            ("NAME", tag::NAME, FieldKind::RpmName),
            ("VERSION", tag::VERSION, FieldKind::RpmVersion),
            ("RELEASE", tag::RELEASE, FieldKind::RpmRelease),
            ("ARCH", tag::ARCH, FieldKind::RpmArch),
        ] {
            let value = header
                .string(t)
                .ok_or_else(|| PackageError::corrupt(path, format!("header has no {field}")))?;
            PackageError::check_name(path, field, kind, value)?;
        }
        Ok(RpmReader {
            path: path.to_path_buf(),
            signature,
            header,
            file_size,
        })
    }

    /// Name.
    pub fn name(&self) -> &str {
        self.header.string(tag::NAME).unwrap_or("")
    }
    /// Epoch (0 if absent).
    pub fn epoch(&self) -> u64 {
        self.header.int(tag::EPOCH).unwrap_or(0)
    }
    /// Version.
    pub fn version(&self) -> &str {
        self.header.string(tag::VERSION).unwrap_or("")
    }
    /// Release.
    pub fn release(&self) -> &str {
        self.header.string(tag::RELEASE).unwrap_or("")
    }
    /// Arch.
    pub fn arch(&self) -> &str {
        self.header.string(tag::ARCH).unwrap_or("")
    }

    fn deps(&self, n: u32, f: u32, v: u32) -> Vec<Dep> {
        let names = self.header.strings(n);
        let flags = self.header.ints(f);
        let vers = self.header.strings(v);
        names
            .iter()
            .enumerate()
            .map(|(i, name)| Dep {
                name: name.clone(),
                flags: flags.get(i).copied().unwrap_or(0) as u32,
                version: vers.get(i).cloned().unwrap_or_default(),
            })
            .collect()
    }
    /// Provides.
    pub fn provides(&self) -> Vec<Dep> {
        self.deps(tag::PROVIDENAME, tag::PROVIDEFLAGS, tag::PROVIDEVERSION)
    }
    /// Requires.
    pub fn requires(&self) -> Vec<Dep> {
        self.deps(tag::REQUIRENAME, tag::REQUIREFLAGS, tag::REQUIREVERSION)
    }
    /// Conflicts.
    pub fn conflicts(&self) -> Vec<Dep> {
        self.deps(tag::CONFLICTNAME, tag::CONFLICTFLAGS, tag::CONFLICTVERSION)
    }
    /// Obsoletes.
    pub fn obsoletes(&self) -> Vec<Dep> {
        self.deps(tag::OBSOLETENAME, tag::OBSOLETEFLAGS, tag::OBSOLETEVERSION)
    }
    /// Recommends.
    pub fn recommends(&self) -> Vec<Dep> {
        self.deps(
            tag::RECOMMENDNAME,
            tag::RECOMMENDFLAGS,
            tag::RECOMMENDVERSION,
        )
    }

    /// The file list.
    pub fn files(&self) -> Vec<RpmFile> {
        let h = &self.header;
        let dirs = h.strings(tag::DIRNAMES);
        let idx = h.ints(tag::DIRINDEXES);
        let sizes = if h.ints(tag::LONGFILESIZES).is_empty() {
            h.ints(tag::FILESIZES)
        } else {
            h.ints(tag::LONGFILESIZES)
        };
        h.strings(tag::BASENAMES)
            .iter()
            .enumerate()
            .map(|(i, base)| {
                let dir = idx
                    .get(i)
                    .and_then(|&d| dirs.get(d as usize))
                    .map(String::as_str)
                    .unwrap_or("/");
                RpmFile {
                    path: format!("{dir}{base}"),
                    mode: h.ints(tag::FILEMODES).get(i).copied().unwrap_or(0) as u32,
                    size: sizes.get(i).copied().unwrap_or(0),
                    digest: h
                        .strings(tag::FILEDIGESTS)
                        .get(i)
                        .cloned()
                        .unwrap_or_default(),
                    link: h
                        .strings(tag::FILELINKTOS)
                        .get(i)
                        .cloned()
                        .unwrap_or_default(),
                }
            })
            .collect()
    }

    /// Scriptlets: script tag -> (interpreter, body).
    pub fn scripts(&self) -> BTreeMap<u32, (String, String)> {
        let mut out = BTreeMap::new();
        for (script, prog) in SCRIPT_TAGS {
            if let Some(body) = self.header.string(script) {
                let interp = self.header.string(prog).unwrap_or("/bin/sh").to_string();
                out.insert(script, (interp, body.to_string()));
            }
        }
        out
    }

    /// Paths (relative) flagged %config.
    pub fn config_files(&self) -> Vec<String> {
        let flags = self.header.ints(tag::FILEFLAGS);
        self.files()
            .into_iter()
            .enumerate()
            .filter(|(i, _)| {
                flags
                    .get(*i)
                    .is_some_and(|f| f & u64::from(FILE_CONFIG) != 0)
            })
            .map(|(_, f)| f.path.trim_start_matches('/').to_string())
            .collect()
    }

    /// Installed size.
    pub fn installed_size(&self) -> u64 {
        self.header
            .int(tag::LONGSIZE)
            .or(self.header.int(tag::SIZE))
            .unwrap_or(0)
    }

    /// Uncompressed payload size from the signature.
    pub fn archive_size(&self) -> u64 {
        self.signature
            .int(tag::SIG_LONGARCHIVESIZE)
            .or(self.signature.int(tag::SIG_PAYLOADSIZE))
            .unwrap_or(0)
    }

    fn payload_compression(&self) -> Result<Compression, PackageError> {
        match self.header.string(tag::PAYLOADCOMPRESSOR).unwrap_or("gzip") {
            "gzip" => Ok(Compression::Gzip),
            "xz" => Ok(Compression::Xz),
            "zstd" => Ok(Compression::Zstd),
            "identity" => Ok(Compression::None),
            other => Err(PackageError::corrupt(
                &self.path,
                format!("unsupported payload compressor {other:?}"),
            )),
        }
    }

    /// Calls `f` for every payload entry (name normalized to a relative
    /// path) with a reader over its data, then checks the payload digest.
    pub fn for_each_entry<F>(&self, mut f: F) -> Result<(), PackageError>
    where
        F: FnMut(&str, u32, u64, &mut dyn Read) -> Result<(), PackageError>,
    {
        let path = &self.path;
        let mut file = File::open(path).map_err(|e| PackageError::io("cannot open", path, e))?;
        file.seek(SeekFrom::Start(self.header.end))
            .map_err(|e| PackageError::io("cannot read", path, e))?;
        let mut hashing = HashingReader::new(BufReader::with_capacity(1 << 20, file));
        {
            let dec = decoder(&mut hashing, self.payload_compression()?)
                .map_err(|e| PackageError::corrupt(path, e.to_string()))?;
            let mut cpio = CpioReader::new(dec);
            loop {
                let entry = cpio
                    .next_entry()
                    .map_err(|e| PackageError::corrupt(path, format!("payload: {e}")))?;
                let Some(entry) = entry else { break };
                let Some(rel) = crate::deb::normalize_member(&entry.name)
                    .map_err(|why| PackageError::unsafe_path(path, &entry.name, why))?
                else {
                    continue;
                };
                let mut data = cpio.data();
                f(&rel, entry.mode, entry.size, &mut data)?;
            }
            // Drain what the decoder did not need so the digest covers all.
        }
        io::copy(&mut hashing, &mut io::sink())
            .map_err(|e| PackageError::io("cannot read", path, e))?;
        let (sha, _) = hashing.finish();
        if let Some(want) = self.header.strings(tag::PAYLOADDIGEST).first() {
            if self.header.int(tag::PAYLOADDIGESTALGO) == Some(u64::from(PGPHASHALGO_SHA256))
                && !hex::encode(sha).eq_ignore_ascii_case(want)
            {
                return Err(PackageError::corrupt(
                    path,
                    "payload SHA256 digest mismatch",
                ));
            }
        }
        Ok(())
    }

    /// Extracts the payload into `dest` (existing, empty), refusing
    /// anything that would land outside it (see [`crate::extract`]), and
    /// checks the payload digest.
    pub fn extract(&self, dest: &Path) -> Result<(), PackageError> {
        let mut x = crate::extract::Extractor::new(dest, &self.path)?;
        self.for_each_entry(|path, mode, size, data| match mode & 0o170000 {
            0o040000 => x.dir(path, mode),
            0o120000 => {
                if size > 4096 {
                    return Err(PackageError::corrupt(
                        &self.path,
                        format!("{path}: symlink target too long"),
                    ));
                }
                let mut target = String::new();
                data.read_to_string(&mut target)
                    .map_err(|e| PackageError::corrupt(&self.path, format!("{path}: {e}")))?;
                x.symlink(path, &target)
            }
            0o100000 => x.file(path, mode, size, data),
            _ => Err(PackageError::unsafe_path(&self.path, path, "special file")),
        })
    }

    /// Verifies the payload digest by reading the whole payload.
    pub fn verify_payload(&self) -> Result<(), PackageError> {
        let path = &self.path;
        let Some(want) = self.header.strings(tag::PAYLOADDIGEST).first() else {
            return Ok(());
        };
        if self.header.int(tag::PAYLOADDIGESTALGO) != Some(u64::from(PGPHASHALGO_SHA256)) {
            return Ok(());
        }
        let mut file = File::open(path).map_err(|e| PackageError::io("cannot open", path, e))?;
        file.seek(SeekFrom::Start(self.header.end))
            .map_err(|e| PackageError::io("cannot read", path, e))?;
        let mut h = DigestWriter(Sha256::new());
        io::copy(&mut BufReader::with_capacity(1 << 20, file), &mut h)
            .map_err(|e| PackageError::io("cannot read", path, e))?;
        if !hex::encode(h.0.finalize()).eq_ignore_ascii_case(want) {
            return Err(PackageError::corrupt(
                path,
                "payload SHA256 digest mismatch",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evr_split() {
        assert_eq!(split_evr("5.3.3-4"), (None, "5.3.3", Some("4")));
        assert_eq!(split_evr("1:2.0"), (Some("1"), "2.0", None));
        assert_eq!(split_evr("1.2-3-4"), (None, "1.2-3", Some("4")));
    }

    #[test]
    fn dep_parse() {
        assert_eq!(Dep::parse("a >= 1").expect("dep").repo_flags(), Some("GE"));
        assert!(Dep::parse("a ~ 1").is_err());
    }
}
