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

mod read;
mod tags;
mod write;

use std::collections::BTreeMap;

use crate::compress::Compression;

pub use read::{Header, RpmFile, RpmReader, TagValue, DECODE_BUDGET_PER_BYTE};
pub use tags::{sense, tag, SCRIPT_TAGS};
pub use write::write_rpm;

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
