//! The TOML schema of a spec file. Every table rejects unknown keys; every
//! key is optional and falls back to the built-in spec.
//!
//! ```toml
//! # Device groups: one per processor (the default: AMD's device targets
//! # and the other processors distributions build) ...
//! granularity = "per-target"
//! # ... or only these targets ...
//! # targets = ["gfx90a", "gfx942", "gfx1100"]
//! # ... or the family table (`gfx110X-dgpu`) ...
//! # granularity = "family"
//! # ... or custom groups (no `granularity`):
//! [[groups]]
//! name = "gfx110X-dgpu"
//! targets = ["gfx1100", "gfx1101", "gfx1102"]
//! generic_isas = ["gfx11-generic"]
//!
//! # Groups of an earlier spec whose device packages these replace
//! # (default: both family tables, the 2025 one and `granularity = "family"`'s;
//! # with `granularity = "family"`, the 2025 one; `replaces = []` for none): their
//! # packages get a transitional successor and Replaces/Breaks (deb),
//! # Obsoletes (rpm); docs/packaging.md "Upgrades from the previous family table".
//! [[replaces]]
//! name = "gfx90X"
//! targets = ["gfx900", "gfx906", "gfx908", "gfx90a", "gfx90c"]
//!
//! # Extra kernel-database rules, tried before the built-in ones
//! # (`builtin_kernel_databases = false` drops those;
//! # `catch_all_databases = true` adds the `target-token` catch-all last).
//! [[kernel_databases]]
//! name = "mylib"
//! include = ["**/mylib/kernels/*.hsaco"]
//! exclude = []
//! arch = ["file-name", "directory"]   # also file-name-suffix, file-name-prefix, amd-directory,
//!                                      # anchor-directory, sanitized-suffix, translation-domain
//!
//! [naming]            # placeholders {name}, {deb_name}, {group}, {group_lower}, {version}
//! profile = "kpack"   # or "amd-native": AMD's host/device/meta names
//! deb_device = "{name}-{group_lower}"
//! deb_meta = ""       # a meta package on the generic and every device package
//!
//! [package]
//! maintainer = "ROCm packaging <rocm@example.org>"
//! section = "libs"
//! license = "MIT"
//! homepage = "https://example.org"
//! device_payload = "frames"   # or "solid": archives uncompressed in a zstd -19 --long=27 payload
//!
//! [fetch]
//! source_url = "https://example.org/kpack"
//!
//! [version]           # split packages are newer than their input
//! suffix = "kpack1"   # deb 5.3.3-4+kpack1, rpm release 4.kpack1, wheel 1.0+kpack1
//!
//! [validation]
//! duplicate_device_code = "error"     # or "warn"
//! missing_device_code = "warn"        # or "error", "ignore"
//! generic_must_match = false         # true: shards' generic outputs must be identical
//! ```

use std::ops::Range;
use std::path::Path;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::databases::{ArchSource, DatabaseRule};
use crate::naming::{NameKind, Naming, Profile};
use crate::validate::{self, Loc};
use crate::{
    defaults, per_target_groups, Fetch, Group, OnDuplicate, OnMissing, PackageDefaults, Spec,
    SpecError, Validation, Versioning,
};

/// How a spec file chooses its groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Granularity {
    /// The family table.
    Family,
    /// One group per target listed in `targets`, or without `targets`
    /// per processor of the built-in list (the default).
    PerTarget,
}

/// A spec file as written (see the module docs), with the position of
/// every value that validation may complain about.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpecFile {
    /// `family` or `per-target`; absent with `groups` = custom groups,
    /// absent without = `per-target`.
    #[serde(default)]
    pub granularity: Option<Spanned<Granularity>>,
    /// Targets for `per-target`.
    #[serde(default)]
    pub targets: Option<Spanned<Vec<Spanned<String>>>>,
    /// Custom groups.
    #[serde(default)]
    pub groups: Option<Spanned<Vec<GroupFile>>>,
    /// Groups of an earlier spec whose device packages this spec's replace
    /// (default: both family tables, or the 2025 one with
    /// `granularity = "family"`; `replaces = []` for none).
    #[serde(default)]
    pub replaces: Option<Vec<ReplacedFile>>,
    /// Keep the built-in database rules after this file's (default true).
    #[serde(default)]
    pub builtin_kernel_databases: Option<bool>,
    /// Extra database rules.
    #[serde(default)]
    pub kernel_databases: Vec<RuleFile>,
    /// Append the catch-all `target-token` rule (default false): any file
    /// whose path names a target becomes device data.
    #[serde(default)]
    pub catch_all_databases: Option<bool>,
    /// Naming templates (missing keys: built-in).
    #[serde(default)]
    pub naming: Option<NamingFile>,
    /// Package metadata defaults (missing keys: built-in).
    #[serde(default)]
    pub package: Option<PackageDefaults>,
    /// Fetcher source.
    #[serde(default)]
    pub fetch: Option<FetchFile>,
    /// Validation switches (missing keys: built-in).
    #[serde(default)]
    pub validation: Option<ValidationFile>,
    /// The version suffix (missing: built-in).
    #[serde(default)]
    pub version: Option<VersionFile>,
}

/// `[[groups]]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupFile {
    pub name: Spanned<String>,
    #[serde(default)]
    pub targets: Vec<Spanned<String>>,
    #[serde(default)]
    pub generic_isas: Vec<Spanned<String>>,
}

/// `[[replaces]]` as written: an earlier group's name and processors.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplacedFile {
    pub name: String,
    pub targets: Vec<String>,
}

/// `[[kernel_databases]]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleFile {
    pub name: Spanned<String>,
    pub include: Vec<Spanned<String>>,
    #[serde(default)]
    pub exclude: Vec<Spanned<String>>,
    pub arch: Vec<ArchSource>,
}

/// `[naming]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamingFile {
    pub profile: Option<Spanned<String>>,
    pub deb_generic: Option<Spanned<String>>,
    pub deb_device: Option<Spanned<String>>,
    pub rpm_generic: Option<Spanned<String>>,
    pub rpm_device: Option<Spanned<String>>,
    pub wheel_generic: Option<Spanned<String>>,
    pub wheel_device: Option<Spanned<String>>,
    pub wheel_extra: Option<Spanned<String>>,
    pub deb_meta: Option<Spanned<String>>,
    pub rpm_meta: Option<Spanned<String>>,
}

impl NamingFile {
    fn get(&self, kind: NameKind) -> Option<&Spanned<String>> {
        match kind {
            NameKind::DebGeneric => self.deb_generic.as_ref(),
            NameKind::DebDevice => self.deb_device.as_ref(),
            NameKind::RpmGeneric => self.rpm_generic.as_ref(),
            NameKind::RpmDevice => self.rpm_device.as_ref(),
            NameKind::WheelGeneric => self.wheel_generic.as_ref(),
            NameKind::WheelDevice => self.wheel_device.as_ref(),
            NameKind::WheelExtra => self.wheel_extra.as_ref(),
            NameKind::DebMeta => self.deb_meta.as_ref(),
            NameKind::RpmMeta => self.rpm_meta.as_ref(),
        }
    }
}

/// `[fetch]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FetchFile {
    pub source_url: Option<Spanned<String>>,
}

/// `[version]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VersionFile {
    pub suffix: Option<Spanned<String>>,
}

/// `[validation]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValidationFile {
    pub duplicate_device_code: Option<OnDuplicate>,
    pub missing_device_code: Option<OnMissing>,
    pub generic_must_match: Option<bool>,
}

/// An error and the byte range it is about.
type Located = (Option<Range<usize>>, String);

/// Byte ranges of the values a [`Loc`] names.
#[derive(Debug, Default)]
struct Spans {
    groups: Option<Range<usize>>,
    group_names: Vec<Range<usize>>,
    group_targets: Vec<Vec<Range<usize>>>,
    group_generics: Vec<Vec<Range<usize>>>,
    naming: Vec<(NameKind, Range<usize>)>,
    rule_names: Vec<Range<usize>>,
    rule_includes: Vec<Vec<Range<usize>>>,
    rule_excludes: Vec<Vec<Range<usize>>>,
    fetch_url: Option<Range<usize>>,
    version_suffix: Option<Range<usize>>,
}

impl Spans {
    fn locate(&self, loc: Loc) -> Option<Range<usize>> {
        let nested = |v: &Vec<Vec<Range<usize>>>, i: usize, j: usize| {
            v.get(i).and_then(|x| x.get(j)).cloned()
        };
        match loc {
            Loc::Groups => self.groups.clone(),
            Loc::GroupName(i) => self.group_names.get(i).cloned(),
            Loc::GroupTarget(i, j) => {
                nested(&self.group_targets, i, j).or_else(|| self.group_names.get(i).cloned())
            }
            Loc::GroupGeneric(i, j) => {
                nested(&self.group_generics, i, j).or_else(|| self.group_names.get(i).cloned())
            }
            Loc::Naming(k) => self
                .naming
                .iter()
                .find(|(kind, _)| *kind == k)
                .map(|(_, r)| r.clone()),
            Loc::RuleName(i) => self.rule_names.get(i).cloned(),
            Loc::RuleInclude(i, j) => nested(&self.rule_includes, i, j),
            Loc::RuleExclude(i, j) => nested(&self.rule_excludes, i, j),
            Loc::FetchUrl => self.fetch_url.clone(),
            Loc::VersionSuffix => self.version_suffix.clone(),
        }
    }
}

fn strings(v: &[Spanned<String>]) -> Vec<String> {
    v.iter().map(|s| s.get_ref().clone()).collect()
}

impl SpecFile {
    /// Builds the spec and the spans validation reports against; the
    /// error of an inconsistent combination carries its span too.
    fn build(self) -> Result<(Spec, Spans), Located> {
        let mut spans = Spans::default();
        let granularity = self.granularity.as_ref().map(|g| (*g.get_ref(), g.span()));
        let families = matches!(granularity, Some((Granularity::Family, _)));
        let groups = match (granularity, self.targets, self.groups) {
            (Some((_, at)), _, Some(_)) => {
                return Err((
                    Some(at),
                    "`granularity` and `[[groups]]` are mutually exclusive (custom groups need no granularity)"
                        .into(),
                ))
            }
            (Some((Granularity::PerTarget, _)), Some(t), None) => {
                spans.groups = Some(t.span());
                let list = t.into_inner();
                let groups = per_target_groups(&strings(&list));
                // Point each group's errors at the target that created it.
                for g in &groups {
                    let at = list
                        .iter()
                        .find(|s| crate::processor_of(s.get_ref()) == g.name)
                        .map(Spanned::span)
                        .unwrap_or_default();
                    spans.group_names.push(at.clone());
                    spans.group_targets.push(vec![at.clone(); g.targets.len()]);
                    spans.group_generics.push(vec![at; g.generic_isas.len()]);
                }
                groups
            }
            (_, Some(t), _) => {
                return Err((
                    Some(t.span()),
                    "`targets` is only valid with granularity = \"per-target\"".into(),
                ))
            }
            (None, None, Some(groups)) => {
                spans.groups = Some(groups.span());
                groups
                    .into_inner()
                    .into_iter()
                    .map(|g| {
                        spans.group_names.push(g.name.span());
                        spans.group_targets.push(spans_of(&g.targets));
                        spans.group_generics.push(spans_of(&g.generic_isas));
                        Group {
                            name: g.name.into_inner(),
                            targets: strings(&g.targets),
                            generic_isas: strings(&g.generic_isas),
                        }
                    })
                    .collect()
            }
            (Some((Granularity::Family, _)), None, None) => defaults::family_groups(),
            (Some((Granularity::PerTarget, _)), None, None) | (None, None, None) => {
                defaults::per_target_default_groups()
            }
        };

        let replaces = match self.replaces {
            None if families => defaults::family_groups_2025(),
            None => defaults::family_groups_replaced_by_per_target(),
            Some(list) => list
                .into_iter()
                .map(|r| Group {
                    generic_isas: defaults::generic_isas_of(
                        &r.targets.iter().map(String::as_str).collect::<Vec<_>>(),
                    ),
                    name: r.name,
                    targets: r.targets,
                })
                .collect(),
        };

        let mut kernel_databases = Vec::new();
        for r in self.kernel_databases {
            spans.rule_names.push(r.name.span());
            spans.rule_includes.push(spans_of(&r.include));
            spans.rule_excludes.push(spans_of(&r.exclude));
            kernel_databases.push(DatabaseRule {
                name: r.name.into_inner(),
                include: strings(&r.include),
                exclude: strings(&r.exclude),
                arch: r.arch,
            });
        }
        if self.builtin_kernel_databases.unwrap_or(true) {
            kernel_databases.extend(defaults::database_rules());
        }
        if self.catch_all_databases.unwrap_or(false) {
            kernel_databases.push(defaults::target_token_rule());
        }

        let mut naming = defaults::naming();
        if let Some(n) = &self.naming {
            if let Some(p) = &n.profile {
                let profile = Profile::from_key(p.get_ref()).ok_or_else(|| {
                    let known: Vec<&str> = Profile::ALL.iter().map(|p| p.key()).collect();
                    (
                        Some(p.span()),
                        format!(
                            "naming.profile: unknown profile {:?} (known: {})",
                            p.get_ref(),
                            known.join(", ")
                        ),
                    )
                })?;
                naming = profile.naming();
            }
            for kind in NameKind::ALL {
                if let Some(v) = n.get(kind) {
                    spans.naming.push((kind, v.span()));
                    *naming.template_mut(kind) = v.get_ref().clone();
                }
            }
        }

        let mut package = defaults::package_defaults();
        if let Some(p) = self.package {
            package.maintainer = p.maintainer.or(package.maintainer);
            package.section = p.section.or(package.section);
            package.license = p.license.or(package.license);
            package.homepage = p.homepage.or(package.homepage);
            package.device_payload = p.device_payload.or(package.device_payload);
        }

        let mut fetch = Fetch::default();
        if let Some(url) = self.fetch.and_then(|f| f.source_url) {
            spans.fetch_url = Some(url.span());
            fetch.source_url = Some(url.into_inner());
        }

        let mut validation = Validation::default();
        if let Some(v) = self.validation {
            validation.duplicate_device_code = v
                .duplicate_device_code
                .unwrap_or(validation.duplicate_device_code);
            validation.missing_device_code = v
                .missing_device_code
                .unwrap_or(validation.missing_device_code);
            validation.generic_must_match = v
                .generic_must_match
                .unwrap_or(validation.generic_must_match);
        }

        let mut version = Versioning::default();
        if let Some(suffix) = self.version.and_then(|v| v.suffix) {
            spans.version_suffix = Some(suffix.span());
            version.suffix = suffix.into_inner();
        }

        Ok((
            Spec {
                groups,
                replaces,
                kernel_databases,
                naming,
                package,
                fetch,
                validation,
                version,
            },
            spans,
        ))
    }

    /// Turns the parsed file into a validated [`Spec`] (errors without
    /// line numbers; [`Spec::from_toml_str`] gives them).
    pub fn into_spec(self) -> Result<Spec, SpecError> {
        let (spec, _) = self.build().map_err(|(_, m)| SpecError::Invalid(m))?;
        spec.validate()?;
        Ok(spec)
    }
}

fn spans_of(v: &[Spanned<String>]) -> Vec<Range<usize>> {
    v.iter().map(Spanned::span).collect()
}

/// `line N, column M` (1-based, columns in characters) of a byte offset.
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let col = before
        .rsplit_once('\n')
        .map_or(before, |(_, l)| l)
        .chars()
        .count()
        + 1;
    (line, col)
}

fn located(
    text: &str,
    path: Option<&Path>,
    span: Option<Range<usize>>,
    message: &str,
) -> SpecError {
    let message = match span {
        Some(r) => {
            let (l, c) = line_column(text, r.start);
            format!("line {l}, column {c}: {message}")
        }
        None => message.to_string(),
    };
    SpecError::Parse {
        path: path.map(Path::to_path_buf),
        message,
    }
}

/// Parses and validates spec text; every error names the line and column.
pub fn parse(text: &str, path: Option<&Path>) -> Result<Spec, SpecError> {
    let file: SpecFile =
        toml::from_str(text).map_err(|e| located(text, path, e.span(), e.message().trim_end()))?;
    let (spec, spans) = file
        .build()
        .map_err(|(span, m)| located(text, path, span, &m))?;
    validate::check(&spec, &|loc| spans.locate(loc))
        .map_err(|p| located(text, path, p.span, &p.message))?;
    Ok(spec)
}

/// The effective spec as a document in the file schema: explicit groups and
/// the full rule list (`builtin_kernel_databases = false`), so reading it
/// back gives the same spec.
#[derive(Debug, Serialize)]
pub struct SpecDocument<'a> {
    pub builtin_kernel_databases: bool,
    pub groups: &'a [Group],
    pub replaces: Vec<ReplacedDoc<'a>>,
    pub kernel_databases: &'a [DatabaseRule],
    pub naming: &'a Naming,
    pub package: &'a PackageDefaults,
    pub fetch: &'a Fetch,
    pub validation: &'a Validation,
    pub version: &'a Versioning,
}

/// One `[[replaces]]` entry of a [`SpecDocument`].
#[derive(Debug, Serialize)]
pub struct ReplacedDoc<'a> {
    pub name: &'a str,
    pub targets: &'a [String],
}

impl<'a> From<&'a Spec> for SpecDocument<'a> {
    fn from(s: &'a Spec) -> Self {
        SpecDocument {
            builtin_kernel_databases: false,
            groups: &s.groups,
            replaces: s
                .replaces
                .iter()
                .map(|g| ReplacedDoc {
                    name: &g.name,
                    targets: &g.targets,
                })
                .collect(),
            kernel_databases: &s.kernel_databases,
            naming: &s.naming,
            package: &s.package,
            fetch: &s.fetch,
            validation: &s.validation,
            version: &s.version,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        Spec::from_toml_str(text).unwrap_err().to_string()
    }

    #[test]
    fn group_choices() {
        let s =
            Spec::from_toml_str("granularity = \"per-target\"\ntargets = [\"gfx1100\"]\n").unwrap();
        assert_eq!(s.groups.len(), 1);
        let s = Spec::from_toml_str(
            "[[groups]]\nname = \"gfx110X-dgpu\"\ntargets = [\"gfx1100\", \"gfx1101\", \"gfx1102\"]\n\
             generic_isas = [\"gfx11-generic\"]\n\
             [[groups]]\nname = \"gfx94X-dcgpu\"\ntargets = [\"gfx942\"]\n\
             [[groups]]\nname = \"gfx120X-all\"\ntargets = [\"gfx1200\", \"gfx1201\"]\n",
        )
        .unwrap();
        assert_eq!(s.group_for("gfx1102").unwrap()[0].name, "gfx110X-dgpu");
        assert_eq!(
            s.group_for("gfx942:xnack-").unwrap()[0].name,
            "gfx94X-dcgpu"
        );
        assert!(s.group_for("gfx1103").is_err());
        assert_eq!(Spec::from_toml_str("").unwrap(), Spec::builtin());
        assert_eq!(
            Spec::from_toml_str("granularity = \"per-target\"\n").unwrap(),
            Spec::builtin()
        );
        assert_eq!(
            Spec::from_toml_str("granularity = \"family\"\n").unwrap(),
            Spec::default_families()
        );
        assert_ne!(Spec::default_families(), Spec::builtin());
        // Custom groups replace what the default does.
        assert_eq!(
            Spec::from_toml_str("[[groups]]\nname = \"a\"\ntargets = [\"gfx1100\"]\n")
                .unwrap()
                .replaces,
            Spec::builtin().replaces
        );
    }

    #[test]
    fn errors_point_at_the_line() {
        let e = err("# c\nbogus = 1\n");
        assert!(e.contains("line 2, column 1") && e.contains("bogus"), "{e}");
        let e = err("[validation]\nduplicate_device_code = \"maybe\"\n");
        assert!(e.contains("line 2") && e.contains("maybe"), "{e}");
        let e = err(
            "[[groups]]\nname = \"a\"\ntargets = [\"gfx1100\"]\n[[groups]]\nname = \"b\"\ntargets = [\"gfx1101\", \"gfx1100\"]\n",
        );
        assert!(
            e.contains("line 6, column 23") && e.contains("two groups"),
            "{e}"
        );
        let e = err("[[groups]]\nname = \"a\"\n");
        assert!(
            e.contains("line 2, column 8") && e.contains("no targets"),
            "{e}"
        );
        let e = err("[[groups]]\nname = \"a\"\ntargets = [\"gfx1199\"]\n");
        assert!(
            e.contains("line 3") && e.contains("unknown target \"gfx1199\""),
            "{e}"
        );
        let e = err("[[groups]]\nname = \"a:b\"\ntargets = [\"gfx1100\"]\n");
        assert!(e.contains("line 2") && e.contains("group name"), "{e}");
        let e = err("[[groups]]\nname = \"a\"\ntargets = [\"gfx90a:xnack+\"]\n");
        assert!(e.contains("feature flags"), "{e}");
        let e = err("[naming]\ndeb_device = \"{name}-dev\"\n");
        assert!(
            e.contains("line 2, column 14") && e.contains("naming.deb_device"),
            "{e}"
        );
        let e = err("[naming]\nprofile = \"amd\"\n");
        assert!(
            e.contains("line 2, column 11")
                && e.contains("unknown profile")
                && e.contains("amd-native"),
            "{e}"
        );
        let s = crate::Spec::from_toml_str("[naming]\nprofile = \"amd-native\"\nrpm_meta = \"\"\n")
            .expect("amd-native");
        assert_eq!(s.naming.deb_meta, "{deb_name}{version}");
        assert_eq!(s.naming.rpm_generic, "{name}-host{version}");
        assert!(
            s.naming.rpm_meta.is_empty(),
            "a key beside the profile overrides it"
        );
        let e = err("[naming]\nrpm_device = \"{name}-{gruop}\"\n");
        assert!(e.contains("unknown placeholder {gruop}"), "{e}");
        let e = err(
            "[[kernel_databases]]\nname = \"x\"\ninclude = [\"a/[b\"]\narch = [\"directory\"]\n",
        );
        assert!(e.contains("line 3") && e.contains("bad glob"), "{e}");
        let e =
            err("[[kernel_databases]]\nname = \"x\"\ninclude = [\"**\"]\narch = [\"somewhere\"]\n");
        assert!(e.contains("line 4") && e.contains("somewhere"), "{e}");
        let e = err("granularity = \"per-target\"\ntargets = [\"gfx1100\", \"gfx7777\"]\n");
        assert!(e.contains("line 2") && e.contains("gfx7777"), "{e}");
        let e = err("[fetch]\nsource_url = \"ftp://x\"\n");
        assert!(e.contains("line 2") && e.contains("source_url"), "{e}");
        let e = err("[fetch]\nsource_url = \"https://x\"\n[version]\nsuffix = \"KPACK\"\n");
        assert!(
            e.contains("line 4, column 10") && e.contains("version.suffix"),
            "{e}"
        );
        let e =
            err("granularity = \"family\"\n[[groups]]\nname = \"a\"\ntargets = [\"gfx1100\"]\n");
        assert!(
            e.contains("line 1") && e.contains("mutually exclusive"),
            "{e}"
        );
    }

    #[test]
    fn device_payload_is_frames_unless_the_spec_says_solid() {
        use crate::DevicePayload;
        assert_eq!(Spec::builtin().package.device_payload, None);
        let s = Spec::from_toml_str("[package]\ndevice_payload = \"solid\"\n").unwrap();
        assert_eq!(s.package.device_payload, Some(DevicePayload::Solid));
        assert_eq!(s.package.section.as_deref(), Some("libs"));
        let text = s.to_toml().unwrap();
        assert_eq!(Spec::from_toml_str(&text).unwrap(), s, "{text}");
        let e = err("[package]\ndevice_payload = \"xz\"\n");
        assert!(
            e.contains("device_payload") || e.contains("unknown variant"),
            "{e}"
        );
    }

    #[test]
    fn settings_and_round_trip() {
        let s = Spec::from_toml_str(
            "builtin_kernel_databases = false\n\
             [[kernel_databases]]\nname = \"mine\"\ninclude = [\"**/k/*.co\"]\narch = [\"file-name\"]\n\
             [package]\nmaintainer = \"A <a@example.org>\"\n\
             [fetch]\nsource_url = \"https://example.org/kpack\"\n\
             [validation]\nduplicate_device_code = \"warn\"\nmissing_device_code = \"ignore\"\ngeneric_must_match = true\n\
             [version]\nsuffix = \"site.2\"\n",
        )
        .unwrap();
        assert_eq!(s.version.suffix, "site.2");
        assert_eq!(Spec::builtin().version.suffix, "kpack1");
        assert_eq!(
            Spec::from_toml_str("[version]\nsuffix = \"\"\n")
                .unwrap()
                .version
                .deb("1.0-1")
                .unwrap(),
            "1.0-1"
        );
        assert_eq!(s.kernel_databases.len(), 1);
        assert_eq!(s.package.maintainer.as_deref(), Some("A <a@example.org>"));
        assert_eq!(s.package.section.as_deref(), Some("libs"));
        assert_eq!(s.validation.duplicate_device_code, OnDuplicate::Warn);
        assert_eq!(s.validation.missing_device_code, OnMissing::Ignore);
        assert!(s.validation.generic_must_match);
        assert!(!Spec::builtin().validation.generic_must_match);
        for spec in [
            s,
            Spec::builtin(),
            Spec::default_families(),
            Spec::per_target(&["gfx1100", "gfx90a"]).unwrap(),
        ] {
            let text = spec.to_toml().unwrap();
            assert_eq!(Spec::from_toml_str(&text).unwrap(), spec, "{text}");
            let json: serde_json::Value = serde_json::from_str(&spec.to_json().unwrap()).unwrap();
            assert!(json["groups"].is_array());
        }
        let extra = Spec::from_toml_str(
            "[[kernel_databases]]\nname = \"mine\"\ninclude = [\"**/k/*.co\"]\narch = [\"file-name\"]\n",
        )
        .unwrap();
        assert_eq!(
            extra.kernel_databases.len(),
            1 + Spec::builtin().kernel_databases.len()
        );
        assert_eq!(extra.kernel_databases[0].name, "mine");
    }
}
