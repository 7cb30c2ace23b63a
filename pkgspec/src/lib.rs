//! The package spec: how device code is grouped and packaged.
//!
//! A [`Spec`] declares the device [`Group`]s code objects are sorted into
//! (each names the processors it carries, `gfx1100`, feature variants such
//! as `gfx90a:xnack+` going to their processor's group, and the generic ISAs
//! it also carries, `gfx11-generic`, so every group's archive is
//! self-sufficient), the kernel-database rules ([`databases`]), package
//! naming templates ([`naming`]), package metadata defaults, the kpack
//! source generic packages advertise, validation switches, and the version
//! suffix that makes split packages newer than their input ([`version`]).
//!
//! [`Spec::builtin`] is one group per processor with the built-in rules
//! ([`defaults`]); [`Spec::default_families`] is docs/packaging.md's family
//! table instead; [`Spec::per_target`] builds one group per listed target; a TOML
//! file ([`schema`]) can declare anything else, and errors in it point at
//! the line.
//!
//! Flow: [`schema`] (TOML with spans) -> [`Spec`] -> [`validate`] (errors
//! that name the key and, for files, the line).

pub mod amd;
pub mod databases;
pub mod defaults;
pub mod fields;
pub mod naming;
pub mod pep508;
pub mod schema;
pub mod targets;
pub mod validate;
pub mod version;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use databases::{
    check_fetchable, ArchSource, DatabaseClassifier, DatabaseMatch, DatabaseRule, Unfetchable,
};
pub use defaults::KNOWN_PROCESSORS;
pub use naming::{NameKind, Naming};
/// LLVM's generic ISA table, owned by the runtime crate (target ids).
pub use rocm_kpack_format::target::{processor_of, GenericIsa, GENERIC_ISAS};
pub use schema::{Granularity, SpecFile};
pub use version::Versioning;

/// Everything that can be wrong with a spec or a lookup in it.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// A code object's target is carried by no group of the spec.
    #[error("target {target:?} is not covered by any device group of the spec (groups: {})", groups.join(", "))]
    UncoveredTarget { target: String, groups: Vec<String> },
    /// Several targets are carried by no group of the spec.
    #[error("targets {} are not covered by any device group of the spec (groups: {})", targets.join(", "), groups.join(", "))]
    UncoveredTargets {
        targets: Vec<String>,
        groups: Vec<String>,
    },
    /// The spec itself is inconsistent.
    #[error("invalid spec: {0}")]
    Invalid(String),
    /// The spec file could not be read.
    // Not transparent: the PathError stays in the source chain, where
    // rocm_kpack_cli::hint_for finds the path of a full file system.
    #[error("{0}")]
    Io(#[from] rocm_kpack_fs::PathError),
    /// The spec file is not valid TOML for this schema or is inconsistent;
    /// the message starts with `line N, column M:`.
    #[error("{}: {message}", path.as_deref().map_or_else(|| "spec".to_string(), |p| p.display().to_string()))]
    Parse {
        path: Option<PathBuf>,
        message: String,
    },
}

/// One device group: the unit of one archive / one device package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Group {
    /// Group name, used in file and package names (`gfx110X`, `gfx90a`,
    /// `gfx110X-dgpu`); never contains `:` or path separators.
    pub name: String,
    /// Processors (without feature flags) whose code objects go here.
    #[serde(default)]
    pub targets: Vec<String>,
    /// Generic ISAs (`gfx11-generic`) whose code objects are copied here too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub generic_isas: Vec<String>,
}

/// Metadata for generated packages when the input does not provide it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackageDefaults {
    /// `Maintainer:` / `Packager:` (`Name <email>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintainer: Option<String>,
    /// deb `Section:` (rpm `Group:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section: Option<String>,
    /// License (SPDX expression).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    /// Homepage URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub homepage: Option<String>,
    /// How device debs and rpms carry their archives (None: [`DevicePayload::Frames`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_payload: Option<DevicePayload>,
}

/// The transport form of a device deb or rpm (`[package] device_payload`).
/// dpkg and rpm install files as they are, so this trades disk against
/// download: docs/packaging.md "Transport form: device packages".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DevicePayload {
    /// Archives compressed per code object (what the runtime reads fastest,
    /// smallest on disk); the payload is not recompressed at the release
    /// level (gzip -1 when it holds only such archives).
    #[default]
    Frames,
    /// Archives stored uncompressed, the whole payload one zstd stream at
    /// the release level with a 2^27 window (`zstd -19 --long=27`): the
    /// redundancy between code objects is compressed away on the wire.
    Solid,
}

/// What generic packages tell the fetcher.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fetch {
    /// Base URL of the kpack store (`http(s)://` or `file://`) that generic
    /// packages advertise in their `sources.d` entry; none by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_url: Option<String>,
}

/// What to do about duplicate device code (the same target of the same
/// binary from two inputs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnDuplicate {
    /// Fail, naming the binary and target.
    #[default]
    Error,
    /// Warn and keep the first input's code object.
    Warn,
}

/// What to do about a spec target for which a binary has no device code.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnMissing {
    /// Fail, naming the targets and binaries.
    Error,
    /// Warn.
    #[default]
    Warn,
    /// Say nothing.
    Ignore,
}

/// Validation switches, enforced by `recombine`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Validation {
    /// Same target of the same binary from two shards.
    #[serde(default)]
    pub duplicate_device_code: OnDuplicate,
    /// A spec target some binary has no code object for.
    #[serde(default)]
    pub missing_device_code: OnMissing,
    /// Every shard's generic files must equal the first shard's, byte for
    /// byte; otherwise the first shard's generic is used and differences
    /// are warnings. Off by default: host-only binaries of builds for
    /// different targets differ (file offsets follow the removed device
    /// code), while their markers and wrappers, all the generic side holds
    /// of the device code, are the same.
    #[serde(default)]
    pub generic_must_match: bool,
}

impl Default for Validation {
    fn default() -> Self {
        Validation {
            duplicate_device_code: OnDuplicate::Error,
            missing_device_code: OnMissing::Warn,
            generic_must_match: false,
        }
    }
}

/// A package spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// Device groups, in declaration order.
    pub groups: Vec<Group>,
    /// Groups of an earlier spec (by default both family tables,
    /// [`defaults::family_groups_replaced_by_per_target`]; the family spec
    /// replaces [`defaults::FAMILIES_2025`]) whose device packages this spec's
    /// packages replace: see [`Spec::replacements`].
    pub replaces: Vec<Group>,
    /// Kernel-database rules, tried in order (the spec file's own rules,
    /// then the built-in ones unless it turned them off).
    pub kernel_databases: Vec<DatabaseRule>,
    /// Package naming templates.
    pub naming: Naming,
    /// Package metadata defaults.
    pub package: PackageDefaults,
    /// What generic packages advertise to the fetcher.
    pub fetch: Fetch,
    /// Validation switches.
    pub validation: Validation,
    /// The suffix that makes split packages newer than their input
    /// ([`version`]).
    pub version: Versioning,
}

/// One group of [`Spec::replaces`] and what replaces its packages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replacement<'a> {
    /// The replaced group's name (`gfx90X`).
    pub old: &'a str,
    /// The current groups carrying some of its processors, in declaration
    /// order (`gfx900`, `gfx906`, ...).
    pub successors: Vec<&'a str>,
    /// True when no current group has the old name: a transitional
    /// package of that name depends on the successors' packages.
    pub transitional: bool,
}

/// Where the code objects of one target id go (see [`Spec::placement`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Placement {
    /// The archive unit, `<component>_<unit>.kpack`: the processor with its
    /// features stripped (`gfx90a`), or the generic ISA (`gfx11-generic`).
    /// These are the names a loader expanding `@GFXARCH@` tries, so no alias
    /// is ever needed (docs/formats.md 2.4).
    pub unit: String,
    /// The device tree (and device package) that ships the unit's archive:
    /// the group carrying the processor, or, for a generic ISA, a tree of
    /// its own named after it, so no two groups ever ship the same file.
    pub tree: String,
}

/// Whether a processor name is a generic ISA (`gfx11-generic`).
pub fn is_generic_isa(processor: &str) -> bool {
    processor.ends_with("-generic")
}

/// The generic ISAs that serve `processor` (LLVM's table).
pub fn generic_isas_serving(processor: &str) -> Vec<&'static str> {
    rocm_kpack_format::target::generic_isa_for(processor)
        .into_iter()
        .collect()
}

/// The processors a generic ISA serves (empty for unknown names).
pub fn processors_served_by(generic_isa: &str) -> &'static [&'static str] {
    rocm_kpack_format::target::processors_served_by(generic_isa)
}

impl Default for Spec {
    fn default() -> Self {
        Self::builtin()
    }
}

impl Spec {
    /// The built-in spec: one group per processor (AMD's device targets,
    /// then the other processors distributions build,
    /// [`defaults::per_target_processors`]), replacing the groups of both
    /// family tables, with the built-in database rules, naming and switches.
    pub fn builtin() -> Spec {
        defaults::builtin()
    }

    /// The built-in spec with the family table's groups instead
    /// (`granularity = "family"`), replacing the 2025 table's.
    pub fn default_families() -> Spec {
        defaults::families()
    }

    /// The built-in spec with one group per target, named after it.
    /// Feature flags are dropped (`gfx90a:xnack+` and `gfx90a:xnack-`
    /// share group `gfx90a`); duplicates collapse. A processor's group also
    /// carries the generic ISAs that serve it; a generic ISA listed itself
    /// gets a group of its own.
    pub fn per_target<S: AsRef<str>>(targets: &[S]) -> Result<Spec, SpecError> {
        let spec = Spec {
            groups: per_target_groups(targets),
            ..Self::builtin()
        };
        spec.validate()?;
        Ok(spec)
    }

    /// Parses a spec from TOML text (see [`schema`]) and validates it.
    pub fn from_toml_str(text: &str) -> Result<Spec, SpecError> {
        schema::parse(text, None)
    }

    /// Reads, parses and validates a TOML spec file.
    pub fn from_file(path: &Path) -> Result<Spec, SpecError> {
        let text = std::fs::read_to_string(path).map_err(|source| {
            SpecError::Io(rocm_kpack_fs::PathError::new("cannot read", path, source))
        })?;
        schema::parse(&text, Some(path))
    }

    /// Checks the spec (see [`validate`]).
    pub fn validate(&self) -> Result<(), SpecError> {
        validate::check(self, &|_| None).map_err(|e| SpecError::Invalid(e.message))
    }

    /// The groups a code object for `target_id` goes to: its processor's
    /// group, or for a generic ISA every group that carries it. A target no
    /// group covers is an error naming it.
    pub fn group_for(&self, target_id: &str) -> Result<Vec<&Group>, SpecError> {
        let p = processor_of(target_id);
        let found: Vec<&Group> = if is_generic_isa(p) {
            self.groups
                .iter()
                .filter(|g| g.generic_isas.iter().any(|x| x == p))
                .collect()
        } else {
            self.groups
                .iter()
                .filter(|g| g.targets.iter().any(|x| x == p))
                .take(1)
                .collect()
        };
        if found.is_empty() {
            return Err(SpecError::UncoveredTarget {
                target: target_id.to_string(),
                groups: self.group_names(),
            });
        }
        Ok(found)
    }

    /// Where code for `target_id` goes: its archive unit and the device
    /// tree that ships it (see [`Placement`]). A target no group carries is
    /// an error naming it, as for [`Spec::group_for`].
    pub fn placement(&self, target_id: &str) -> Result<Placement, SpecError> {
        let unit = processor_of(target_id);
        let groups = self.group_for(target_id)?;
        let tree = if is_generic_isa(unit) {
            unit
        } else {
            groups.first().map_or(unit, |g| g.name.as_str())
        };
        Ok(Placement {
            unit: unit.to_string(),
            tree: tree.to_string(),
        })
    }

    /// Every device tree a split can write, in order: the groups in
    /// declaration order, then each generic ISA some group carries (first
    /// appearance), each name once.
    pub fn trees(&self) -> Vec<String> {
        let mut out: Vec<String> = self.group_names();
        for g in &self.groups {
            for isa in &g.generic_isas {
                if !out.contains(isa) {
                    out.push(isa.clone());
                }
            }
        }
        out
    }

    /// Checks that every target id has a group; the error lists every
    /// uncovered target (sorted, once each).
    pub fn check_covered<'t>(
        &self,
        targets: impl IntoIterator<Item = &'t str>,
    ) -> Result<(), SpecError> {
        let uncovered: std::collections::BTreeSet<&str> = targets
            .into_iter()
            .filter(|t| self.group_for(t).is_err())
            .collect();
        let mut it = uncovered.iter();
        match (it.next(), uncovered.len()) {
            (None, _) => Ok(()),
            (Some(t), 1) => Err(SpecError::UncoveredTarget {
                target: (*t).to_string(),
                groups: self.group_names(),
            }),
            _ => Err(SpecError::UncoveredTargets {
                targets: uncovered.into_iter().map(str::to_string).collect(),
                groups: self.group_names(),
            }),
        }
    }

    /// The group with this name.
    pub fn group(&self, name: &str) -> Option<&Group> {
        self.groups.iter().find(|g| g.name == name)
    }

    /// The group with this name, or else the replaced group of that name
    /// ([`Spec::replaces`]): what an archive of an older layout, whose
    /// family is `gfx110X`, serves.
    pub fn group_or_replaced(&self, name: &str) -> Option<&Group> {
        self.group(name)
            .or_else(|| self.replaces.iter().find(|g| g.name == name))
    }

    /// Group names in declaration order.
    pub fn group_names(&self) -> Vec<String> {
        self.groups.iter().map(|g| g.name.clone()).collect()
    }

    /// How this spec's device packages take over from those of the
    /// groups in [`Spec::replaces`], one entry per replaced group that
    /// does not live on unchanged (same name, same processors).
    pub fn replacements(&self) -> Vec<Replacement<'_>> {
        self.replaces
            .iter()
            .filter(|old| {
                self.group(&old.name)
                    .is_none_or(|g| g.targets != old.targets)
            })
            .map(|old| Replacement {
                old: &old.name,
                successors: self
                    .groups
                    .iter()
                    .filter(|g| g.targets.iter().any(|t| old.targets.contains(t)))
                    .map(|g| g.name.as_str())
                    .collect(),
                transitional: self.group(&old.name).is_none(),
            })
            .collect()
    }

    /// The replaced groups whose packages the package of `group` takes
    /// files from: those sharing a processor with it, under another name.
    pub fn replaced_by(&self, group: &str) -> Vec<&str> {
        self.replacements()
            .into_iter()
            .filter(|r| r.old != group && r.successors.contains(&group))
            .map(|r| r.old)
            .collect()
    }

    /// Every processor some group carries, in declaration order.
    pub fn targets(&self) -> Vec<&str> {
        self.groups
            .iter()
            .flat_map(|g| g.targets.iter().map(String::as_str))
            .collect()
    }

    /// The processors a group serves: its targets, plus those its generic
    /// ISAs serve when it has no targets of its own.
    pub fn served_by(&self, group: &Group) -> Vec<String> {
        if !group.targets.is_empty() {
            return group.targets.clone();
        }
        let mut out: Vec<String> = Vec::new();
        for g in &group.generic_isas {
            for p in processors_served_by(g) {
                if !out.iter().any(|x| x == p) {
                    out.push((*p).to_string());
                }
            }
        }
        out
    }

    /// The effective spec as TOML: explicit groups and rules, so that
    /// [`Spec::from_toml_str`] of the text gives this spec back.
    pub fn to_toml(&self) -> Result<String, SpecError> {
        toml::to_string(&schema::SpecDocument::from(self))
            .map_err(|e| SpecError::Invalid(format!("cannot render the spec as TOML: {e}")))
    }

    /// The effective spec as pretty JSON (same structure as [`Spec::to_toml`]).
    pub fn to_json(&self) -> Result<String, SpecError> {
        serde_json::to_string_pretty(&schema::SpecDocument::from(self))
            .map_err(|e| SpecError::Invalid(format!("cannot render the spec as JSON: {e}")))
    }
}

/// One group per target (see [`Spec::per_target`]).
pub fn per_target_groups<S: AsRef<str>>(targets: &[S]) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for t in targets {
        let p = processor_of(t.as_ref());
        if groups.iter().any(|g| g.name == p) {
            continue;
        }
        groups.push(if is_generic_isa(p) {
            Group {
                name: p.to_string(),
                targets: Vec::new(),
                generic_isas: vec![p.to_string()],
            }
        } else {
            Group {
                name: p.to_string(),
                targets: vec![p.to_string()],
                generic_isas: generic_isas_serving(p)
                    .into_iter()
                    .map(str::to_string)
                    .collect(),
            }
        });
    }
    groups
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn names(v: Vec<&Group>) -> Vec<&str> {
        v.into_iter().map(|g| g.name.as_str()).collect()
    }

    #[test]
    fn default_families_match_the_table() {
        let s = Spec::default_families();
        s.validate().unwrap();
        assert_eq!(names(s.group_for("gfx90a:xnack+").unwrap()), ["gfx90a"]);
        assert_eq!(names(s.group_for("gfx906").unwrap()), ["gfx906"]);
        assert_eq!(
            names(s.group_for("amdgcn-amd-amdhsa--gfx1030").unwrap()),
            ["gfx103X-dgpu"]
        );
        assert_eq!(names(s.group_for("gfx1035").unwrap()), ["gfx103X-igpu"]);
        assert_eq!(names(s.group_for("gfx1102").unwrap()), ["gfx110X-dgpu"]);
        assert_eq!(names(s.group_for("gfx1103").unwrap()), ["gfx110X-igpu"]);
        assert_eq!(
            names(s.group_for("gfx942:sramecc+:xnack-").unwrap()),
            ["gfx94X"]
        );
        // Outside AMD's table: a family of its own.
        assert_eq!(names(s.group_for("gfx803").unwrap()), ["gfx803"]);
        assert_eq!(names(s.group_for("gfx940").unwrap()), ["gfx940"]);
        assert_eq!(names(s.group_for("gfx1013").unwrap()), ["gfx1013"]);
        assert_eq!(
            names(s.group_for("gfx11-generic").unwrap()),
            ["gfx110X-dgpu", "gfx110X-igpu", "gfx115X"]
        );
        assert_eq!(
            names(s.group_for("gfx9-4-generic").unwrap()),
            ["gfx94X", "gfx950", "gfx940", "gfx941"]
        );
        // gfx9-generic does not serve gfx908 and gfx90a (LLVM's table).
        assert_eq!(
            names(s.group_for("gfx9-generic").unwrap()),
            ["gfx900", "gfx906", "gfx90c", "gfx902", "gfx904", "gfx909"]
        );
        assert!(s.group("gfx90a").unwrap().generic_isas.is_empty());
        assert!(s.group("gfx125X").unwrap().generic_isas.is_empty());
        // Every processor LLVM knows from gfx801 on has exactly one family.
        for p in KNOWN_PROCESSORS
            .iter()
            .filter(|p| !p.starts_with("gfx6") && !p.starts_with("gfx7"))
        {
            assert_eq!(s.group_for(p).unwrap().len(), 1, "{p}");
        }
        let e = s.group_for("gfx700").unwrap_err().to_string();
        assert!(e.contains("gfx700"), "{e}");
    }

    #[test]
    fn the_builtin_spec_is_per_target() {
        let s = Spec::builtin();
        s.validate().unwrap();
        // AMD's device targets first, each a group of its own name.
        let n = s.group_names();
        assert_eq!(&n[..amd::DEVICE_TARGETS.len()], amd::DEVICE_TARGETS);
        assert_eq!(names(s.group_for("gfx1102").unwrap()), ["gfx1102"]);
        assert_eq!(names(s.group_for("gfx942:sramecc+").unwrap()), ["gfx942"]);
        // The processors outside AMD's table that the family table gives a
        // family of its own keep a group: the two granularities cover the
        // same processors, and what neither covers stays an error naming it.
        let families = Spec::default_families();
        for p in KNOWN_PROCESSORS {
            assert_eq!(s.group_for(p).is_ok(), families.group_for(p).is_ok(), "{p}");
        }
        assert_eq!(names(s.group_for("gfx803").unwrap()), ["gfx803"]);
        let e = s.group_for("gfx700").unwrap_err().to_string();
        assert!(e.contains("gfx700"), "{e}");
        // Generic-ISA code reaches every processor it serves.
        assert_eq!(
            names(s.group_for("gfx11-generic").unwrap()),
            [
                "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152",
                "gfx1153"
            ]
        );
        assert!(s.group("gfx90a").unwrap().generic_isas.is_empty());
    }

    #[test]
    fn the_per_target_spec_replaces_both_family_tables() {
        let s = Spec::builtin();
        let r = s.replacements();
        let find = |old: &str| r.iter().find(|r| r.old == old).unwrap();
        // The current table's multi-processor families.
        let dgpu = find("gfx110X-dgpu");
        assert!(dgpu.transitional);
        assert_eq!(dgpu.successors, ["gfx1100", "gfx1101", "gfx1102"]);
        assert_eq!(find("gfx110X-igpu").successors, ["gfx1103"]);
        assert_eq!(
            find("gfx115X").successors,
            ["gfx1150", "gfx1151", "gfx1152", "gfx1153"]
        );
        // A name of both tables serves the processors of either.
        assert_eq!(find("gfx94X").successors, ["gfx942", "gfx940", "gfx941"]);
        assert_eq!(find("gfx125X").successors, ["gfx1250", "gfx1251"]);
        // The 2025 table's.
        assert_eq!(
            find("gfx110X").successors,
            ["gfx1100", "gfx1101", "gfx1102", "gfx1103"]
        );
        assert_eq!(
            find("gfx90X").successors,
            ["gfx900", "gfx906", "gfx908", "gfx90a", "gfx90c", "gfx902", "gfx904", "gfx909"]
        );
        // Single-processor families already had the per-target name.
        assert!(r
            .iter()
            .all(|r| r.old != "gfx90a" && r.old != "gfx950" && r.old != "gfx803"));
        assert_eq!(s.replaced_by("gfx1100"), ["gfx110X", "gfx110X-dgpu"]);
        assert_eq!(s.replaced_by("gfx942"), ["gfx94X"]);
        assert_eq!(s.replaced_by("gfx90a"), ["gfx90X"]);
        assert!(s.replaced_by("gfx803").contains(&"gfx80X"));
    }

    #[test]
    fn the_2025_families_are_replaced() {
        let s = Spec::default_families();
        let r = s.replacements();
        let gfx90x = r.iter().find(|r| r.old == "gfx90X").unwrap();
        assert!(gfx90x.transitional);
        assert_eq!(
            gfx90x.successors,
            ["gfx900", "gfx906", "gfx908", "gfx90a", "gfx90c", "gfx902", "gfx904", "gfx909"]
        );
        let gfx110x = r.iter().find(|r| r.old == "gfx110X").unwrap();
        assert_eq!(gfx110x.successors, ["gfx110X-dgpu", "gfx110X-igpu"]);
        // gfx94X keeps its name (no transitional package) but loses gfx940
        // and gfx941 to families of their own, which take over its files.
        let gfx94x = r.iter().find(|r| r.old == "gfx94X").unwrap();
        assert!(!gfx94x.transitional);
        assert_eq!(s.replaced_by("gfx940"), ["gfx94X"]);
        assert!(s.replaced_by("gfx94X").is_empty());
        // Unchanged families need nothing.
        assert!(r
            .iter()
            .all(|r| r.old != "gfx950" && r.old != "gfx115X" && r.old != "gfx120X"));
        assert_eq!(s.replaced_by("gfx90a"), ["gfx90X"]);
        // The 2025 table as a spec replaces nothing.
        let old = Spec::from_file(
            &Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/fixtures/specs/families-2025.toml"),
        )
        .unwrap();
        assert_eq!(old.groups, defaults::family_groups_2025());
        assert!(old.replacements().is_empty());
    }

    #[test]
    fn per_target_groups_and_coverage() {
        let s =
            Spec::per_target(&["gfx90a:xnack+", "gfx90a:xnack-", "gfx1100", "gfx1030"]).unwrap();
        let n: Vec<&str> = s.groups.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(n, ["gfx90a", "gfx1100", "gfx1030"]);
        assert_eq!(names(s.group_for("gfx90a:xnack-").unwrap()), ["gfx90a"]);
        assert_eq!(names(s.group_for("gfx11-generic").unwrap()), ["gfx1100"]);
        assert!(s.group_for("gfx1101").is_err());
        assert!(s.check_covered(["gfx1100", "gfx90a:xnack+"]).is_ok());
        let e = s
            .check_covered(["gfx1101", "gfx700", "gfx1101"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("gfx1101, gfx700"), "{e}");
        let e = s.check_covered(["gfx700"]).unwrap_err().to_string();
        assert!(e.contains("\"gfx700\" is not covered"), "{e}");
        let g = Spec::per_target(&["gfx11-generic"]).unwrap();
        assert_eq!(g.served_by(&g.groups[0]).len(), 8);
    }

    fn placed(s: &Spec, target: &str) -> (String, String) {
        let p = s.placement(target).unwrap();
        (p.unit, p.tree)
    }

    #[test]
    fn placement_is_one_processor_in_its_groups_tree() {
        let pair = |u: &str, t: &str| (u.to_string(), t.to_string());
        let s = Spec::default_families();
        assert_eq!(placed(&s, "gfx90a:xnack+"), pair("gfx90a", "gfx90a"));
        assert_eq!(placed(&s, "gfx90a:xnack-"), pair("gfx90a", "gfx90a"));
        assert_eq!(
            placed(&s, "amdgcn-amd-amdhsa--gfx1030"),
            pair("gfx1030", "gfx103X-dgpu")
        );
        assert_eq!(
            placed(&s, "gfx942:sramecc+:xnack-"),
            pair("gfx942", "gfx94X")
        );
        // A generic ISA two families carry gets one tree of its own.
        assert_eq!(
            placed(&s, "gfx11-generic"),
            pair("gfx11-generic", "gfx11-generic")
        );
        assert_eq!(
            placed(&s, "gfx9-4-generic:xnack-"),
            pair("gfx9-4-generic", "gfx9-4-generic")
        );
        let e = s.placement("gfx700").unwrap_err().to_string();
        assert!(e.contains("gfx700") && e.contains("not covered"), "{e}");
        let trees = s.trees();
        assert_eq!(trees.first().map(String::as_str), Some("gfx900"));
        assert!(
            trees.ends_with(
                &[
                    "gfx9-generic",
                    "gfx9-4-generic",
                    "gfx10-1-generic",
                    "gfx10-3-generic",
                    "gfx11-generic",
                    "gfx12-generic"
                ]
                .map(String::from)
            ),
            "{trees:?}"
        );

        // The built-in spec: the processor's own tree; generic ISAs keep
        // their trees.
        let b = Spec::builtin();
        assert_eq!(placed(&b, "gfx90a:xnack+"), pair("gfx90a", "gfx90a"));
        assert_eq!(placed(&b, "gfx1030"), pair("gfx1030", "gfx1030"));
        assert_eq!(
            placed(&b, "gfx11-generic"),
            pair("gfx11-generic", "gfx11-generic")
        );
        assert!(b.trees().ends_with(&trees[trees.len() - 6..]));

        // per-target: the processor's own tree; a generic ISA listed as a
        // target is its group and its tree, named once.
        let p = Spec::from_toml_str("granularity = \"per-target\"\ntargets = [\"gfx90a\", \"gfx1100\", \"gfx11-generic\"]\n").unwrap();
        assert_eq!(placed(&p, "gfx90a:xnack-"), pair("gfx90a", "gfx90a"));
        assert_eq!(
            placed(&p, "gfx11-generic"),
            pair("gfx11-generic", "gfx11-generic")
        );
        assert_eq!(p.trees(), ["gfx90a", "gfx1100", "gfx11-generic"]);
        // A generic ISA no group carries is not covered.
        assert!(p.placement("gfx9-generic").is_err());
        // A group may not take a generic ISA's tree name for other code.
        let e =
            Spec::from_toml_str("[[groups]]\nname = \"gfx11-generic\"\ntargets = [\"gfx1100\"]\n")
                .unwrap_err()
                .to_string();
        assert!(e.contains("named after a generic ISA"), "{e}");
    }
}
