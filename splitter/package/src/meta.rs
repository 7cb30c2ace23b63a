//! Package metadata: one plain struct with one documented field per
//! piece of metadata ([`PackageMeta`]), filled from an original deb's
//! control (`--control-from`), a TOML file (`--metadata`), or flags, and
//! rendered per format by the writers.
//!
//! Metadata TOML (every key optional except where the command needs it;
//! unknown keys are errors):
//!
//! ```toml
//! name = "librocrand1"
//! version = "5.3.3-4"            # the input's; packages add the spec's suffix (rocm_kpack_pkgspec::version)
//! architecture = "amd64"         # Debian spelling; rpm maps it (x86_64)
//! maintainer = "ROCm Team <rocm@example.org>"
//! summary = "one line"
//! description = "long text; blank lines separate paragraphs"
//! homepage = "https://..."
//! license = "MIT"                # rpm License, wheel License
//! section = "libs"
//! priority = "optional"
//! source = "rocrand"             # deb Source
//! [deb]
//! fields = { Depends = "libc6 (>= 2.29)", "Multi-Arch" = "same" }
//! [rpm]
//! release = "1"
//! epoch = 0
//! group = "System Environment/Libraries"
//! requires = ["glibc"]
//! [wheel]
//! dist = "pkg"
//! tags = ["py3-none-linux_x86_64"]
//! requires_python = ">=3.8"
//! requires_dist = ["numpy>=1.20"]
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::PackageError;
use rocm_kpack_format::layout::names;
use rocm_kpack_pkgspec::fields::{self, FieldKind};

/// The deb822 paragraph, parsed and rendered by the format crate (the
/// fetcher reads `apt-cache show` output with the same parser).
pub use rocm_kpack_deb822::ControlFields;

/// Appends `item` to a comma-separated relation field value unless a
/// relation on the same package is already there.
pub fn add_relation(existing: Option<&str>, item: &str) -> String {
    let name = item.split_whitespace().next().unwrap_or(item);
    match existing {
        Some(v) if !v.trim().is_empty() => {
            let present = v.split(',').any(|r| {
                r.split('|')
                    .any(|alt| alt.split_whitespace().next() == Some(name))
            });
            if present {
                v.to_string()
            } else {
                format!("{}, {item}", v.trim_end())
            }
        }
        _ => item.to_string(),
    }
}

/// A file of an original deb's control archive carried over to the
/// generic package (maintainer scripts, shlibs, symbols, triggers,
/// conffiles, templates).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlFile {
    /// Member name (`postinst`, `shlibs`, ...).
    pub name: String,
    /// Permission bits (scripts 0755, others 0644).
    pub mode: u32,
    /// Content.
    pub data: Vec<u8>,
}

/// Deb-specific metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DebMeta {
    /// The original control paragraph (from `--control-from`); the generic
    /// deb keeps every field of it (Depends, Pre-Depends, Breaks, ...), with
    /// Package, Version and Installed-Size updated and `rocm-kpack-fetch`
    /// added to Recommends.
    pub control: ControlFields,
    /// Extra fields for both the generic deb (when `control` is empty) and
    /// settings like `Multi-Arch` that device debs copy.
    pub fields: BTreeMap<String, String>,
    /// Control archive files carried to the generic deb.
    pub control_files: Vec<ControlFile>,
}

/// Rpm-specific metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RpmMeta {
    /// Release. Default: the part of the version after its last `-`
    /// (Debian revision), else `1`.
    pub release: Option<String>,
    /// Epoch. Default: the Debian epoch (`N:` prefix of the version), if any.
    pub epoch: Option<u32>,
    /// Group tag (default `Unspecified`).
    pub group: Option<String>,
    /// Requires of the generic rpm (`name [op version]`).
    pub requires: Vec<String>,
    /// Provides, Conflicts, Obsoletes of the generic rpm (from an input rpm).
    pub provides: Vec<crate::rpm::Dep>,
    /// Conflicts.
    pub conflicts: Vec<crate::rpm::Dep>,
    /// Obsoletes.
    pub obsoletes: Vec<crate::rpm::Dep>,
    /// Recommends.
    pub recommends: Vec<crate::rpm::Dep>,
    /// Scriptlets of the generic rpm: script tag -> (interpreter, body).
    pub scripts: BTreeMap<u32, (String, String)>,
    /// %config files of the generic rpm (relative install paths).
    pub config_files: Vec<String>,
}

/// Wheel-specific metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WheelMeta {
    /// Distribution name (default: the package name).
    pub dist: Option<String>,
    /// Compatibility tags (`py3-none-linux_x86_64`). Default: the `Tag`
    /// lines of the generic tree's `*.dist-info/WHEEL`, else
    /// `py3-none-linux_x86_64`.
    pub tags: Vec<String>,
    /// Requires-Python.
    pub requires_python: Option<String>,
    /// Requires-Dist of the generic wheel when no METADATA is in the tree.
    pub requires_dist: Vec<String>,
}

/// Everything the writers need to know about the original package.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackageMeta {
    /// Package name (deb/rpm), the generic package's name.
    pub name: String,
    /// Version of the input package (the packages written get the spec's
    /// suffix, rocm_kpack_pkgspec::version).
    pub version: String,
    /// Debian architecture (`amd64`, `arm64`, `all`).
    pub architecture: String,
    /// Maintainer (`Name <mail>`); rpm Packager.
    pub maintainer: String,
    /// One-line summary.
    pub summary: String,
    /// Long description (paragraphs separated by blank lines).
    pub description: String,
    /// Upstream URL.
    pub homepage: Option<String>,
    /// License (rpm `License`, wheel `License`).
    pub license: Option<String>,
    /// deb Section.
    pub section: Option<String>,
    /// deb Priority.
    pub priority: Option<String>,
    /// deb Source (`name` or `name (version)`).
    pub source: Option<String>,
    /// deb details.
    pub deb: DebMeta,
    /// rpm details.
    pub rpm: RpmMeta,
    /// wheel details.
    pub wheel: WheelMeta,
}

/// Default maintainer when nothing says otherwise.
pub const DEFAULT_MAINTAINER: &str = "rocm-kpack <rocm-kpack@localhost>";

impl PackageMeta {
    /// Metadata from a deb control paragraph (+ control archive files).
    pub fn from_control(control: &ControlFields, files: Vec<ControlFile>) -> PackageMeta {
        let (summary, description) = split_description(control.get("Description").unwrap_or(""));
        let mut fields = BTreeMap::new();
        if let Some(ma) = control.get("Multi-Arch") {
            fields.insert("Multi-Arch".to_string(), ma.to_string());
        }
        PackageMeta {
            name: control.get("Package").unwrap_or_default().to_string(),
            version: control.get("Version").unwrap_or_default().to_string(),
            architecture: control.get("Architecture").unwrap_or("amd64").to_string(),
            maintainer: control
                .get("Maintainer")
                .unwrap_or(DEFAULT_MAINTAINER)
                .to_string(),
            summary,
            description,
            homepage: control.get("Homepage").map(str::to_string),
            license: None,
            section: control.get("Section").map(str::to_string),
            priority: control.get("Priority").map(str::to_string),
            source: control.get("Source").map(str::to_string),
            deb: DebMeta {
                control: control.clone(),
                fields,
                control_files: files,
            },
            rpm: RpmMeta::default(),
            wheel: WheelMeta::default(),
        }
    }

    /// Metadata from an rpm header (split-package of an rpm): name,
    /// `V-R` as the version (release also kept separately), epoch,
    /// summary, description, license, URL, group, packager, dependencies
    /// (rpmlib() and self-provides dropped), scriptlets and %config files.
    pub fn from_rpm(r: &crate::rpm::RpmReader) -> PackageMeta {
        use crate::rpm::tag;
        let h = &r.header;
        let s = |t: u32| h.string(t).map(str::to_string);
        let dep_text = |d: &crate::rpm::Dep| match d.repo_flags() {
            None => d.name.clone(),
            Some(f) => {
                let op = match f {
                    "EQ" => "=",
                    "LT" => "<",
                    "GT" => ">",
                    "LE" => "<=",
                    _ => ">=",
                };
                format!("{} {op} {}", d.name, d.version)
            }
        };
        let keep = |d: &crate::rpm::Dep| !d.name.starts_with("rpmlib(");
        let own = r.name().to_string();
        let own_isa = format!("{own}(");
        let self_provide = |d: &crate::rpm::Dep| d.name == own || d.name.starts_with(&own_isa);
        let arch = match r.arch() {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "noarch" => "all",
            "ppc64le" => "ppc64el",
            "i686" => "i386",
            other => other,
        };
        PackageMeta {
            name: r.name().to_string(),
            version: format!("{}-{}", r.version(), r.release()),
            architecture: arch.to_string(),
            maintainer: s(tag::PACKAGER).unwrap_or_else(|| DEFAULT_MAINTAINER.to_string()),
            summary: s(tag::SUMMARY).unwrap_or_default(),
            description: s(tag::DESCRIPTION).unwrap_or_default(),
            homepage: s(tag::URL),
            license: s(tag::LICENSE),
            section: None,
            priority: None,
            source: s(tag::SOURCERPM).map(|src| {
                src.trim_end_matches(".src.rpm")
                    .rsplitn(3, '-')
                    .last()
                    .unwrap_or_default()
                    .to_string()
            }),
            deb: DebMeta::default(),
            rpm: RpmMeta {
                release: Some(r.release().to_string()),
                epoch: h.int(tag::EPOCH).and_then(|e| u32::try_from(e).ok()),
                group: s(tag::GROUP),
                requires: r
                    .requires()
                    .iter()
                    .filter(|d| keep(d))
                    .map(dep_text)
                    .collect(),
                provides: r
                    .provides()
                    .into_iter()
                    .filter(|d| !self_provide(d))
                    .collect(),
                conflicts: r.conflicts(),
                obsoletes: r.obsoletes(),
                recommends: r.recommends(),
                scripts: r.scripts(),
                config_files: r.config_files(),
            },
            wheel: WheelMeta::default(),
        }
    }

    /// Applies a metadata TOML file over this metadata.
    pub fn apply_toml_file(&mut self, path: &Path) -> Result<(), PackageError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| PackageError::io("cannot read", path, e))?;
        self.apply_toml(&text)
            .map_err(|e| PackageError::Invalid(format!("{}: {e}", path.display())))
    }

    /// Applies metadata TOML text over this metadata.
    pub fn apply_toml(&mut self, text: &str) -> Result<(), String> {
        let t: MetaToml = toml::from_str(text).map_err(|e| e.to_string())?;
        let set = |slot: &mut String, v: Option<String>| {
            if let Some(v) = v {
                *slot = v;
            }
        };
        set(&mut self.name, t.name);
        set(&mut self.version, t.version);
        set(&mut self.architecture, t.architecture);
        set(&mut self.maintainer, t.maintainer);
        set(&mut self.summary, t.summary);
        set(&mut self.description, t.description);
        let opt = |slot: &mut Option<String>, v: Option<String>| {
            if v.is_some() {
                *slot = v;
            }
        };
        opt(&mut self.homepage, t.homepage);
        opt(&mut self.license, t.license);
        opt(&mut self.section, t.section);
        opt(&mut self.priority, t.priority);
        opt(&mut self.source, t.source);
        if let Some(d) = t.deb {
            for (k, v) in d.fields {
                if !self.deb.control.is_empty() {
                    self.deb.control.set(&k, v.clone());
                }
                self.deb.fields.insert(k, v);
            }
        }
        if let Some(r) = t.rpm {
            opt(&mut self.rpm.release, r.release);
            if r.epoch.is_some() {
                self.rpm.epoch = r.epoch;
            }
            opt(&mut self.rpm.group, r.group);
            if let Some(req) = r.requires {
                self.rpm.requires = req;
            }
        }
        if let Some(w) = t.wheel {
            opt(&mut self.wheel.dist, w.dist);
            if let Some(tags) = w.tags {
                self.wheel.tags = tags;
            }
            opt(&mut self.wheel.requires_python, w.requires_python);
            if let Some(rd) = w.requires_dist {
                self.wheel.requires_dist = rd;
            }
        }
        Ok(())
    }

    /// Checks the fields every format needs.
    pub fn validate(&self) -> Result<(), PackageError> {
        if self.name.is_empty() {
            return Err(PackageError::Invalid(
                "no package name: pass --name, --control-from or a metadata file with `name`"
                    .into(),
            ));
        }
        if self.version.is_empty() {
            return Err(PackageError::Invalid(
                "no version: pass --version, --control-from or a metadata file with `version`"
                    .into(),
            ));
        }
        let bad_name = |s: &str| {
            s.is_empty()
                || !s
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '-' | '_'))
        };
        if bad_name(&self.name) {
            return Err(PackageError::Invalid(format!(
                "package name {:?}: only letters, digits, `.`, `+`, `-`, `_` allowed",
                self.name
            )));
        }
        // The name becomes file names in every format: the common grammar.
        fields::check(FieldKind::RpmName, &self.name)
            .map_err(|e| PackageError::Invalid(format!("package name: {e}")))?;
        if self.version.contains("..")
            || self.version.starts_with(['.', '-'])
            || self.version.len() > names::MAX_NAME
        {
            return Err(PackageError::Invalid(format!(
                "version {}: no `..`, no leading `.` or `-`, at most {} bytes",
                names::shown(&self.version),
                names::MAX_NAME
            )));
        }
        // The union of the formats' version characters (`!`: a PEP 440
        // epoch, `^`: rpm's caret); each format's own grammar
        // (`rocm_kpack_pkgspec::fields`) then refuses what it cannot carry.
        if !self.version.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '-' | '~' | ':' | '_' | '!' | '^')
        }) {
            return Err(PackageError::Invalid(format!(
                "version {:?}: only letters, digits and `.+-~:_!^` allowed",
                self.version
            )));
        }
        for (what, v) in [
            ("summary", &self.summary),
            ("maintainer", &self.maintainer),
            ("architecture", &self.architecture),
        ] {
            if v.contains('\n') {
                return Err(PackageError::Invalid(format!("{what} must be one line")));
            }
        }
        Ok(())
    }

    /// The summary, or a default naming the package.
    pub fn summary_or_default(&self) -> String {
        if self.summary.trim().is_empty() {
            format!("{} (host code)", self.name)
        } else {
            self.summary.trim().to_string()
        }
    }
}

/// Splits a deb Description value into synopsis and long text (leading
/// space removed from each line, ` .` lines become blank).
pub fn split_description(value: &str) -> (String, String) {
    let mut lines = value.split('\n');
    let summary = lines.next().unwrap_or("").trim().to_string();
    let long: Vec<String> = lines
        .map(|l| {
            let l = l.strip_prefix(' ').unwrap_or(l);
            if l.trim() == "." {
                String::new()
            } else {
                l.to_string()
            }
        })
        .collect();
    (summary, long.join("\n"))
}

/// Renders a Description value: synopsis, then the long text with each
/// line prefixed by a space and blank lines as ` .`.
pub fn render_description(summary: &str, long: &str) -> String {
    let mut s = summary.to_string();
    for line in long.lines() {
        s.push('\n');
        if line.trim().is_empty() {
            s.push_str(" .");
        } else {
            s.push(' ');
            s.push_str(line);
        }
    }
    s
}

/// Wraps text at `width` columns (words kept whole).
pub fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            out.push_str(&line);
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(&line);
    out
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MetaToml {
    name: Option<String>,
    version: Option<String>,
    architecture: Option<String>,
    maintainer: Option<String>,
    summary: Option<String>,
    description: Option<String>,
    homepage: Option<String>,
    license: Option<String>,
    section: Option<String>,
    priority: Option<String>,
    source: Option<String>,
    deb: Option<DebToml>,
    rpm: Option<RpmToml>,
    wheel: Option<WheelToml>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DebToml {
    #[serde(default)]
    fields: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RpmToml {
    release: Option<String>,
    epoch: Option<u32>,
    group: Option<String>,
    requires: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WheelToml {
    dist: Option<String>,
    tags: Option<Vec<String>>,
    requires_python: Option<String>,
    requires_dist: Option<Vec<String>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn description_splits_and_renders_back() {
        let value = "short\n long one\n .\n more";
        let (s, l) = split_description(value);
        assert_eq!(s, "short");
        assert_eq!(l, "long one\n\nmore");
        assert_eq!(render_description(&s, &l), value);
    }

    #[test]
    fn relations() {
        assert_eq!(add_relation(None, "x"), "x");
        assert_eq!(add_relation(Some("a, b"), "x"), "a, b, x");
        assert_eq!(add_relation(Some("a, x (>= 1)"), "x"), "a, x (>= 1)");
    }

    #[test]
    fn toml_unknown_key() {
        let mut m = PackageMeta::default();
        assert!(m.apply_toml("nmae = \"x\"").is_err());
        m.apply_toml("name = \"x\"\n[rpm]\nrelease = \"3\"")
            .expect("toml");
        assert_eq!(m.name, "x");
        assert_eq!(m.rpm.release.as_deref(), Some("3"));
    }
}
