//! Consistency checks of a [`Spec`]. Each problem names the key it is about
//! ([`Loc`]); for specs read from a file, [`crate::schema`] maps that key to
//! its line and column.

use std::collections::BTreeMap;
use std::ops::Range;

use crate::defaults::KNOWN_PROCESSORS;
use crate::naming::NameKind;
use crate::GENERIC_ISAS;
use crate::{is_generic_isa, Spec};

/// The place in a spec a problem is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loc {
    /// The `groups` (or `targets`) key as a whole.
    Groups,
    /// `groups[i].name`.
    GroupName(usize),
    /// `groups[i].targets[j]`.
    GroupTarget(usize, usize),
    /// `groups[i].generic_isas[j]`.
    GroupGeneric(usize, usize),
    /// `naming.<kind>`.
    Naming(NameKind),
    /// `kernel_databases[i].name`.
    RuleName(usize),
    /// `kernel_databases[i].include[j]`.
    RuleInclude(usize, usize),
    /// `kernel_databases[i].exclude[j]`.
    RuleExclude(usize, usize),
    /// `fetch.source_url`.
    FetchUrl,
    /// `version.suffix`.
    VersionSuffix,
}

/// One problem: what is wrong and where (byte range in the file, if known).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Byte range in the spec file.
    pub span: Option<Range<usize>>,
    /// What is wrong.
    pub message: String,
}

/// Checks `spec`; `locate` maps a key to its byte range in the file (or
/// None). Returns the first problem found:
/// - at least one group; names non-empty, unique, safe in file, artifact
///   and package names (letters, digits, `-`, `.`);
/// - every group carries a target or a generic ISA; a group named after a
///   generic ISA carries only that ISA (it shares the ISA's tree);
/// - targets are known processors without feature flags, each in exactly
///   one group; generic ISAs are LLVM's;
/// - naming templates are well formed ([`crate::naming::check_template`]);
/// - database rules have a unique name, include globs that compile, and
///   at least one arch source;
/// - the fetch URL is `http://`, `https://` or `file://`;
/// - the version suffix is well formed ([`crate::version::check_suffix`]).
pub fn check(spec: &Spec, locate: &dyn Fn(Loc) -> Option<Range<usize>>) -> Result<(), Problem> {
    let fail = |loc: Loc, message: String| Problem {
        span: locate(loc),
        message,
    };
    if spec.groups.is_empty() {
        return Err(fail(
            Loc::Groups,
            "the spec declares no device group".into(),
        ));
    }
    let mut owner: BTreeMap<&str, &str> = BTreeMap::new();
    let mut names: BTreeMap<&str, ()> = BTreeMap::new();
    for (i, g) in spec.groups.iter().enumerate() {
        check_group_name(&g.name).map_err(|m| fail(Loc::GroupName(i), m))?;
        if names.insert(&g.name, ()).is_some() {
            return Err(fail(
                Loc::GroupName(i),
                format!("group {:?} is declared twice", g.name),
            ));
        }
        if g.targets.is_empty() && g.generic_isas.is_empty() {
            return Err(fail(
                Loc::GroupName(i),
                format!("group {:?} has no targets", g.name),
            ));
        }
        for (j, t) in g.targets.iter().enumerate() {
            let at = Loc::GroupTarget(i, j);
            if is_generic_isa(t) {
                return Err(fail(
                    at,
                    format!(
                        "group {:?}: {t:?} is a generic ISA; list it under generic_isas",
                        g.name
                    ),
                ));
            }
            if t.contains(':') {
                return Err(fail(
                    at,
                    format!(
                        "group {:?}: target {t:?} has feature flags; write the processor ({})",
                        g.name,
                        crate::processor_of(t)
                    ),
                ));
            }
            if !KNOWN_PROCESSORS.contains(&t.as_str()) {
                return Err(fail(
                    at,
                    format!(
                        "group {:?}: unknown target {t:?} (not an AMDGPU processor LLVM knows, e.g. gfx90a, gfx1100)",
                        g.name
                    ),
                ));
            }
            if let Some(other) = owner.insert(t, &g.name) {
                return Err(fail(
                    at,
                    format!(
                        "target {t:?} belongs to two groups: {other:?} and {:?}",
                        g.name
                    ),
                ));
            }
        }
        // A generic ISA's archives go to a tree named after it
        // (`Spec::placement`): a group of that name may carry only it.
        let own_tree = std::slice::from_ref(&g.name);
        if GENERIC_ISAS.iter().any(|x| x.name == g.name)
            && (!g.targets.is_empty() || g.generic_isas != own_tree)
        {
            return Err(fail(
                Loc::GroupName(i),
                format!(
                    "group {:?} is named after a generic ISA, whose code has a tree of that name; \
                     it may carry only generic_isas = [{:?}]",
                    g.name, g.name
                ),
            ));
        }
        for (j, gi) in g.generic_isas.iter().enumerate() {
            if !GENERIC_ISAS.iter().any(|g| g.name == gi) {
                let known: Vec<&str> = GENERIC_ISAS.iter().map(|g| g.name).collect();
                return Err(fail(
                    Loc::GroupGeneric(i, j),
                    format!(
                        "group {:?}: unknown generic ISA {gi:?} (known: {})",
                        g.name,
                        known.join(", ")
                    ),
                ));
            }
        }
    }
    for old in &spec.replaces {
        check_group_name(&old.name).map_err(|m| fail(Loc::Groups, format!("replaces: {m}")))?;
        if let Some(t) = old
            .targets
            .iter()
            .find(|t| !KNOWN_PROCESSORS.contains(&t.as_str()))
        {
            return Err(fail(
                Loc::Groups,
                format!("replaces: group {:?}: unknown target {t:?}", old.name),
            ));
        }
    }
    for kind in NameKind::ALL {
        crate::naming::check_template(spec.naming.template(kind), kind)
            .map_err(|m| fail(Loc::Naming(kind), format!("naming.{}: {m}", kind.key())))?;
    }
    let mut rule_names: BTreeMap<&str, ()> = BTreeMap::new();
    for (i, r) in spec.kernel_databases.iter().enumerate() {
        if r.name.is_empty() {
            return Err(fail(
                Loc::RuleName(i),
                "kernel database rule without a name".into(),
            ));
        }
        if rule_names.insert(&r.name, ()).is_some() {
            return Err(fail(
                Loc::RuleName(i),
                format!("kernel database rule {:?} is declared twice", r.name),
            ));
        }
        if r.include.is_empty() {
            return Err(fail(
                Loc::RuleName(i),
                format!("kernel database rule {:?} has no include globs", r.name),
            ));
        }
        if r.arch.is_empty() {
            return Err(fail(
                Loc::RuleName(i),
                format!(
                    "kernel database rule {:?} has no arch source ({})",
                    r.name,
                    crate::databases::ArchSource::ALL
                        .map(crate::databases::ArchSource::as_str)
                        .join(", ")
                ),
            ));
        }
        for (j, p) in r.include.iter().enumerate() {
            crate::databases::compile_glob(&r.name, p)
                .map_err(|m| fail(Loc::RuleInclude(i, j), m))?;
        }
        for (j, p) in r.exclude.iter().enumerate() {
            crate::databases::compile_glob(&r.name, p)
                .map_err(|m| fail(Loc::RuleExclude(i, j), m))?;
        }
    }
    if let Some(url) = &spec.fetch.source_url {
        let ok = ["http://", "https://", "file://"]
            .iter()
            .any(|s| url.starts_with(s) && url.len() > s.len());
        if !ok || url.chars().any(char::is_whitespace) {
            return Err(fail(
                Loc::FetchUrl,
                format!("fetch.source_url {url:?} must be an http://, https:// or file:// URL"),
            ));
        }
    }
    spec.version
        .check()
        .map_err(|m| fail(Loc::VersionSuffix, m))?;
    Ok(())
}

/// Group names end up in file names (`<component>_<group>.kpack`) and
/// package names: keep them to a safe alphabet.
pub fn check_group_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
        && !name.starts_with(['.', '-'])
        // The generic tree's name: a group of that name would share it.
        && name != "generic";
    if ok {
        Ok(())
    } else {
        Err(format!(
            "group name {name:?} must be ASCII letters, digits, '-' or '.', starting with a letter or digit \
             (no ':' or '/'; no '_', which separates the group from the component in artifact names), \
             and not `generic`, the name of the host code's tree"
        ))
    }
}
