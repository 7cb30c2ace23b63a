//! Kernel-database rules: which data files shipped next to host libraries
//! are per-arch device code, and how each one's arch is read from its path.
//!
//! A rule selects paths with globs (`include`, minus `exclude`; `**`
//! crosses directories, `{a,b}` alternates) and then tries its arch sources
//! in order. The first rule that both matches and finds an arch decides; a
//! path no rule decides stays generic (docs/packaging.md).

use std::collections::BTreeSet;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use serde::{Deserialize, Serialize};

use crate::defaults::{KNOWN_PROCESSORS, TRANSLATION_DOMAINS};
use crate::{is_generic_isa, GENERIC_ISAS};
use crate::{Spec, SpecError};

/// Where a rule reads the arch from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ArchSource {
    /// A target token anywhere in the file name between separators
    /// (`_`, `-`, `.`): `TensileLibrary_lazy_gfx1100.dat`,
    /// `Kernels.so-000-gfx90a-xnack+.hsaco`, `libMIOpenCK_gfx942.so`.
    FileName,
    /// A target token ending the file name's stem after `_`:
    /// `foo_gfx942.co`, `foo_gfx90a_xnack+.co`.
    FileNameSuffix,
    /// The file name starts with a processor, anything may follow
    /// (MIOpen's `gfx90a68.kdb`, `gfx1030_36.HIP.fdb.txt`).
    FileNamePrefix,
    /// A directory component that is exactly a target token
    /// (`library/gfx942/`, `aotriton/kernels/gfx942/`); the deepest wins.
    Directory,
    /// A directory component `amd-<target>` (`aotriton.images/amd-gfx942/`)
    /// or `amd-<family>`, a processor prefix padded with `x`
    /// (`amd-gfx11xx`, `amd-gfx120x`): the family's files serve every
    /// processor with that prefix, so they go to the generic ISA that
    /// serves all of them (`gfx11-generic`); a family no single generic
    /// ISA covers is not read (the file stays generic). The deepest wins.
    AmdDirectory,
    /// The shallowest directory below the rule's anchor ([`glob_anchor`]
    /// of the include glob that matched) that is a target token or a
    /// family, as `amd-directory` reads them without the `amd-`
    /// (`engines/arch_content/hip-kernel-provider/gfx942/`,
    /// `rocblas/library/gfx11xx/`).
    AnchorDirectory,
    /// The CMake-sanitized target id (`:` and `-` as `_`, `+` as `p`)
    /// that ends the file's stem, from its first `_gfx`:
    /// `libdevice_conv_operations_gfx950_xnackp.a`,
    /// `_gfx942_srameccp_xnack_`, `_gfx1250_strict`. The processor only:
    /// such per-target builds are linked by a build for that processor,
    /// not chosen by a process's feature settings, so every variant serves
    /// it (as AMD's splitter files them).
    SanitizedSuffix,
    /// The shallowest directory below the rule's anchor that is a
    /// translation domain rocjitsu names ([`TRANSLATION_DOMAINS`]:
    /// `gfx1250-b0-a0`), read as the processor it serves. Only listed
    /// domains: a new profile is never taken for a processor because its
    /// name starts like one.
    TranslationDomain,
}

impl ArchSource {
    /// The spelling used in spec files.
    pub fn as_str(self) -> &'static str {
        match self {
            ArchSource::FileName => "file-name",
            ArchSource::FileNameSuffix => "file-name-suffix",
            ArchSource::FileNamePrefix => "file-name-prefix",
            ArchSource::Directory => "directory",
            ArchSource::AmdDirectory => "amd-directory",
            ArchSource::AnchorDirectory => "anchor-directory",
            ArchSource::SanitizedSuffix => "sanitized-suffix",
            ArchSource::TranslationDomain => "translation-domain",
        }
    }

    /// Every source, in the order the docs list them.
    pub const ALL: [ArchSource; 8] = [
        ArchSource::FileName,
        ArchSource::FileNameSuffix,
        ArchSource::FileNamePrefix,
        ArchSource::Directory,
        ArchSource::AmdDirectory,
        ArchSource::AnchorDirectory,
        ArchSource::SanitizedSuffix,
        ArchSource::TranslationDomain,
    ];
}

/// One kernel-database rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseRule {
    /// Short name shown in reports (`tensile`, `aotriton`).
    pub name: String,
    /// Globs over the path relative to the install prefix.
    pub include: Vec<String>,
    /// Globs that veto a match.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// Arch sources, tried in order.
    pub arch: Vec<ArchSource>,
}

/// A path a rule classified as a kernel database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseMatch {
    /// The deciding rule's name.
    pub rule: String,
    /// The target id read from the path, feature flags kept
    /// (`gfx90a:xnack+`).
    pub arch: String,
}

struct CompiledRule {
    name: String,
    include: GlobSet,
    /// The anchor of each include glob ([`glob_anchor`]), by index.
    anchors: Vec<Option<String>>,
    exclude: GlobSet,
    arch: Vec<ArchSource>,
}

/// The database rules of a spec, compiled for matching many paths.
pub struct DatabaseClassifier {
    rules: Vec<CompiledRule>,
    /// Known target tokens, longest first (so `gfx1100` wins over a
    /// shorter prefix and `gfx9-4-generic` over nothing).
    tokens: Vec<String>,
}

impl std::fmt::Debug for DatabaseClassifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseClassifier")
            .field(
                "rules",
                &self
                    .rules
                    .iter()
                    .map(|r| r.name.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Compiles one glob; errors name the rule and the pattern.
pub(crate) fn compile_glob(rule: &str, pattern: &str) -> Result<globset::Glob, String> {
    if pattern.is_empty() {
        return Err(format!("kernel database rule {rule:?}: empty glob"));
    }
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map_err(|e| {
            format!(
                "kernel database rule {rule:?}: bad glob {pattern:?}: {}",
                e.kind()
            )
        })
}

fn compile_set(rule: &str, patterns: &[String]) -> Result<GlobSet, String> {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        b.add(compile_glob(rule, p)?);
    }
    b.build()
        .map_err(|e| format!("kernel database rule {rule:?}: {e}"))
}

impl DatabaseClassifier {
    /// Compiles the rules of `spec`. Known target tokens are LLVM's
    /// processors, the generic ISAs and every target the spec lists.
    pub fn new(spec: &Spec) -> Result<Self, SpecError> {
        let mut rules = Vec::with_capacity(spec.kernel_databases.len());
        for r in &spec.kernel_databases {
            rules.push(CompiledRule {
                name: r.name.clone(),
                include: compile_set(&r.name, &r.include).map_err(SpecError::Invalid)?,
                anchors: r.include.iter().map(|g| glob_anchor(g)).collect(),
                exclude: compile_set(&r.name, &r.exclude).map_err(SpecError::Invalid)?,
                arch: r.arch.clone(),
            });
        }
        let mut tokens: BTreeSet<String> = KNOWN_PROCESSORS.iter().map(|s| s.to_string()).collect();
        tokens.extend(GENERIC_ISAS.iter().map(|g| g.name.to_string()));
        for g in &spec.groups {
            tokens.extend(g.targets.iter().cloned());
            tokens.extend(g.generic_isas.iter().cloned());
        }
        let mut tokens: Vec<String> = tokens.into_iter().collect();
        tokens.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        Ok(DatabaseClassifier { rules, tokens })
    }

    /// Classifies `rel_path` (relative to the install prefix, `/`-separated):
    /// the first rule that matches it and reads an arch from it decides.
    pub fn classify(&self, rel_path: &str) -> Option<DatabaseMatch> {
        self.classify_anchored(rel_path).map(|(m, _)| m)
    }

    /// [`DatabaseClassifier::classify`], and the anchors ([`glob_anchor`])
    /// of the deciding rule's include globs that match `rel_path`.
    fn classify_anchored(&self, rel_path: &str) -> Option<(DatabaseMatch, Vec<&str>)> {
        for r in &self.rules {
            if !r.include.is_match(rel_path) || r.exclude.is_match(rel_path) {
                continue;
            }
            let anchors: Vec<&str> = r
                .include
                .matches(rel_path)
                .into_iter()
                .filter_map(|i| r.anchors.get(i).and_then(Option::as_deref))
                .collect();
            let Some(arch) = r
                .arch
                .iter()
                .find_map(|src| self.arch_from(*src, rel_path, &anchors))
            else {
                continue;
            };
            let m = DatabaseMatch {
                rule: r.name.clone(),
                arch,
            };
            return Some((m, anchors));
        }
        None
    }

    /// Reads a target id from `rel_path` the way `source` says; `anchors`
    /// are those of the rule's include globs that match it (the
    /// anchor-relative sources read below the first of them found in the
    /// path).
    fn arch_from(&self, source: ArchSource, rel_path: &str, anchors: &[&str]) -> Option<String> {
        let (dirs, name) = match rel_path.rsplit_once('/') {
            Some((d, n)) => (d, n),
            None => ("", rel_path),
        };
        match source {
            ArchSource::Directory => dirs.split('/').rev().find_map(|c| self.whole_token(c)),
            ArchSource::AmdDirectory => dirs
                .split('/')
                .rev()
                .filter_map(|c| c.strip_prefix("amd-"))
                .find_map(|c| self.target_or_family(c)),
            ArchSource::AnchorDirectory => {
                below_anchor(dirs, anchors).find_map(|c| self.target_or_family(c))
            }
            ArchSource::TranslationDomain => below_anchor(dirs, anchors).find_map(|c| {
                TRANSLATION_DOMAINS
                    .iter()
                    .find(|(domain, _)| *domain == c)
                    .map(|(_, processor)| (*processor).to_string())
            }),
            ArchSource::FileNamePrefix => {
                let t = self.token_at(name)?;
                Some(t.to_string())
            }
            ArchSource::FileName => self.token_in_name(name, false),
            ArchSource::FileNameSuffix => self.token_in_name(name, true),
            ArchSource::SanitizedSuffix => self.sanitized_suffix(name),
        }
    }

    /// `c` as a whole target id ([`Self::whole_token`]), else as a family
    /// padded with `x` read as the generic ISA serving all of it
    /// (`gfx11xx` -> `gfx11-generic`).
    fn target_or_family(&self, c: &str) -> Option<String> {
        self.whole_token(c).or_else(|| family_generic_isa(c))
    }

    /// The processor of a CMake-sanitized target id ending the stem of
    /// `name`, read from the stem's first `_gfx` ([`ArchSource::SanitizedSuffix`]).
    fn sanitized_suffix(&self, name: &str) -> Option<String> {
        let stem = name.rsplit_once('.').map_or(name, |(s, _)| s);
        let (at, _) = stem.match_indices("_gfx").next()?;
        let id = stem.get(at + 1..)?;
        self.tokens.iter().find_map(|t| {
            let sanitized = t.replace('-', "_");
            let mut rest = id.strip_prefix(sanitized.as_str())?;
            if !is_generic_isa(t) {
                rest = rest.strip_prefix("_strict").unwrap_or(rest);
            }
            sanitized_features_only(rest).then(|| t.clone())
        })
    }

    /// The longest known token `s` starts with.
    fn token_at<'t>(&'t self, s: &str) -> Option<&'t str> {
        self.tokens
            .iter()
            .find(|t| s.starts_with(t.as_str()))
            .map(String::as_str)
    }

    /// `c` is exactly a target id: a token plus feature flags written with
    /// `:`, `_` or `-` (`gfx942`, `gfx90a:xnack+`, `gfx90a_xnack-`).
    fn whole_token(&self, c: &str) -> Option<String> {
        let t = self.token_at(c)?;
        let rest = without_strict(t, c.get(t.len()..)?);
        let (features, used) = parse_features(rest);
        (used == rest.len()).then(|| with_features(t, &features))
    }

    /// A token inside a file name, at separator boundaries. With
    /// `suffix_only`, the token must follow `_` and end the stem (followed
    /// by `.` or the end of the name).
    fn token_in_name(&self, name: &str, suffix_only: bool) -> Option<String> {
        let bytes = name.as_bytes();
        let mut found = None;
        for (i, _) in name.match_indices("gfx") {
            let before_ok = match i.checked_sub(1).and_then(|p| bytes.get(p)) {
                None => !suffix_only,
                Some(b'_') => true,
                Some(b'-' | b'.') => !suffix_only,
                Some(_) => false,
            };
            if !before_ok {
                continue;
            }
            let rest = name.get(i..)?;
            let Some(t) = self.token_at(rest) else {
                continue;
            };
            let after = without_strict(t, rest.get(t.len()..)?);
            let (features, used) = parse_features(after);
            let tail = after.get(used..)?;
            let end_ok = if suffix_only {
                tail.is_empty() || tail.starts_with('.')
            } else {
                tail.is_empty() || tail.starts_with(['.', '_', '-'])
            };
            if end_ok {
                // The last match wins: names put the arch near the end.
                found = Some(with_features(t, &features));
            }
        }
        found
    }
}

/// The directory a rule's include glob names literally, its *anchor*: the
/// glob's leading directory components (after a leading `**/`) up to the
/// first one with a wildcard, with a trailing `/` (`library/` for
/// `**/library/**/*.co`, `share/miopen/db/` for
/// `**/share/miopen/db/gfx*.kdb`); `None` when it names none
/// (`**/*.{co,hsaco}`, `**/libMIOpenCK*_gfx*.so*`).
pub fn glob_anchor(pattern: &str) -> Option<String> {
    let rest = pattern.strip_prefix("**/").unwrap_or(pattern);
    let comps: Vec<&str> = rest.split('/').collect();
    let dirs = comps.split_last().map_or(&[][..], |(_, d)| d);
    let literal: Vec<&str> = dirs
        .iter()
        .take_while(|c| !c.is_empty() && !c.contains(['*', '?', '[', ']', '{', '}', '\\']))
        .copied()
        .collect();
    (!literal.is_empty()).then(|| format!("{}/", literal.join("/")))
}

/// Why the fetcher may not install a database file a manifest lists
/// ([`check_fetchable`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unfetchable {
    /// No built-in rule classifies the path as a kernel database.
    #[error("no built-in kernel-database rule matches it and reads an architecture from it")]
    NoRule,
    /// The rule reads an arch the manifest does not list for the file.
    #[error("kernel-database rule {rule:?} reads the architecture {arch} from it, which the manifest does not list for it ({listed:?})")]
    OtherArch {
        /// The deciding rule.
        rule: String,
        /// What it read.
        arch: String,
        /// What the manifest lists.
        listed: Vec<String>,
    },
    /// Above the prefix, by a rule that names no directory of its own.
    #[error("it lies above the manifest's prefix, and kernel-database rule {rule:?} that matches it names no directory files above a prefix could be confined to")]
    NoAnchor {
        /// The deciding rule.
        rule: String,
    },
    /// Above the prefix, but not in the rule's directory right in the
    /// directory it shares with the prefix.
    #[error("it lies above the manifest's prefix, but not in the directory kernel-database rule {rule:?} names ({anchors}) right in the directory {base:?} the prefix shares with it")]
    OffAnchor {
        /// The deciding rule.
        rule: String,
        /// The rule's directories.
        anchors: String,
        /// The directory the path climbs to, relative to the install root
        /// (empty: the install root).
        base: String,
    },
    /// Above the prefix in no directory the prefix shares with it below
    /// the install root.
    #[error("it lies above the manifest's prefix and shares no directory with it below the install root")]
    AtRoot,
    /// Not a database path at all (climbs too far, names the prefix).
    #[error("it is not a database path below the install root the prefix names")]
    Invalid,
}

/// Whether the fetcher may install the database file at `path` with the
/// `architectures` a manifest lists for it: relative to the manifest's
/// prefix, or with a `prefix_path` (version 3) to the install root that
/// the prefix lies `prefix_path` below. Returns the name of the rule that
/// allows it.
///
/// The rule, whatever rules the spec that split the package used: a
/// built-in kernel-database rule ([`crate::defaults::database_rules`]) must
/// classify the path (below the directory it climbs to, see
/// [`rocm_kpack_format::layout::database_key`]) with an architecture the
/// manifest lists for it. Below the prefix, that is all. Above the prefix,
/// the rule must name a directory (its anchor, [`glob_anchor`]), the path
/// below the directory it climbs to must begin with that anchor, and that
/// directory must lie below the install root (the path and `prefix_path`
/// share their first component): Debian's `usr/share/miopen/db/` for a
/// prefix `usr/lib/x86_64-linux-gnu`, never `etc/cron.d/` nor anything
/// right in the install root.
pub fn check_fetchable(
    prefix_path: Option<&str>,
    path: &str,
    architectures: &[String],
) -> Result<String, Unfetchable> {
    let key =
        rocm_kpack_format::layout::database_key(prefix_path, path).ok_or(Unfetchable::Invalid)?;
    let (up, rel) =
        rocm_kpack_format::layout::split_database_key(&key).ok_or(Unfetchable::Invalid)?;
    let (m, anchors) = builtin_classifier()
        .and_then(|c| c.classify_anchored(rel))
        .ok_or(Unfetchable::NoRule)?;
    if !architectures.contains(&m.arch) {
        return Err(Unfetchable::OtherArch {
            rule: m.rule,
            arch: m.arch,
            listed: architectures.to_vec(),
        });
    }
    if up == 0 {
        return Ok(m.rule);
    }
    let mut prefix: Vec<&str> = prefix_path.unwrap_or_default().split('/').collect();
    let Some(kept) = prefix.len().checked_sub(up).filter(|&k| k > 0) else {
        return Err(Unfetchable::AtRoot);
    };
    if anchors.is_empty() {
        return Err(Unfetchable::NoAnchor { rule: m.rule });
    }
    if !anchors.iter().any(|a| rel.starts_with(a)) {
        return Err(Unfetchable::OffAnchor {
            rule: m.rule,
            anchors: anchors.join(", "),
            base: {
                prefix.truncate(kept);
                prefix.join("/")
            },
        });
    }
    Ok(m.rule)
}

/// The built-in rules, compiled once.
fn builtin_classifier() -> Option<&'static DatabaseClassifier> {
    static CLASSIFIER: std::sync::OnceLock<Option<DatabaseClassifier>> = std::sync::OnceLock::new();
    CLASSIFIER
        .get_or_init(|| DatabaseClassifier::new(&Spec::builtin()).ok())
        .as_ref()
}

/// The generic ISA serving every known processor of a family spelled as a
/// processor prefix padded with `x` (`gfx11xx` -> `gfx11-generic`), if one
/// generic ISA serves them all.
fn family_generic_isa(family: &str) -> Option<String> {
    let prefix = family.trim_end_matches(['x', 'X']);
    if prefix.len() == family.len() || prefix.len() <= "gfx".len() || !prefix.starts_with("gfx") {
        return None;
    }
    let members: Vec<&str> = KNOWN_PROCESSORS
        .iter()
        .copied()
        .filter(|p| p.starts_with(prefix) && p.len() == family.len())
        .collect();
    if members.is_empty() {
        return None;
    }
    let mut serving = GENERIC_ISAS
        .iter()
        .filter(|g| members.iter().all(|m| g.processors.contains(m)));
    match (serving.next(), serving.next()) {
        (Some(g), None) => Some(g.name.to_string()),
        _ => None,
    }
}

/// The components of `dirs` below the first of `anchors` found in it (as
/// whole components), shallowest first; none when no anchor is there.
fn below_anchor<'d>(dirs: &'d str, anchors: &[&str]) -> impl Iterator<Item = &'d str> {
    let comps: Vec<&str> = dirs.split('/').collect();
    let start = anchors.iter().find_map(|a| {
        let a: Vec<&str> = a.trim_end_matches('/').split('/').collect();
        comps
            .windows(a.len())
            .position(|w| w == a.as_slice())
            .map(|i| i + a.len())
    });
    comps.into_iter().skip(start.unwrap_or(usize::MAX))
}

/// `rest` (what follows target token `token`) without a leading
/// `-strict` or `_strict`: AMD's spelling of a processor's strict variant
/// (`gfx1250-strict`, an early stepping that KFD reports with the
/// processor's own `gfx_target_version`), which the processor's device
/// group serves, as AMD's device packages do
/// ([`crate::amd::device_target_of`]). Generic ISAs have no strict variant.
fn without_strict<'s>(token: &str, rest: &'s str) -> &'s str {
    if is_generic_isa(token) {
        return rest;
    }
    ["-strict", "_strict"]
        .iter()
        .find_map(|s| rest.strip_prefix(s))
        .unwrap_or(rest)
}

/// Whether `s` is nothing but sanitized feature flags, each
/// `_(xnack|sramecc)(p|_)` (`_xnackp` is `xnack+`, `_xnack_` `xnack-`).
fn sanitized_features_only(mut s: &str) -> bool {
    while !s.is_empty() {
        let Some(body) = s.strip_prefix('_') else {
            return false;
        };
        let Some(after) = ["xnack", "sramecc"]
            .iter()
            .find_map(|f| body.strip_prefix(f))
        else {
            return false;
        };
        let Some(next) = after.strip_prefix(['p', '_']) else {
            return false;
        };
        s = next;
    }
    true
}

/// Feature flags at the start of `s`, each `[_:-](xnack|sramecc)[+-]`;
/// returns them and how many bytes they took.
fn parse_features(s: &str) -> (Vec<String>, usize) {
    let mut out = Vec::new();
    let mut used = 0;
    while let Some(rest) = s.get(used..) {
        let mut chars = rest.chars();
        if !matches!(chars.next(), Some('_' | ':' | '-')) {
            break;
        }
        let body = chars.as_str();
        let Some(feat) = ["xnack", "sramecc"].iter().find(|f| body.starts_with(**f)) else {
            break;
        };
        let sign = body.get(feat.len()..).and_then(|r| r.chars().next());
        let Some(sign @ ('+' | '-')) = sign else {
            break;
        };
        out.push(format!("{feat}{sign}"));
        used += 1 + feat.len() + 1;
    }
    (out, used)
}

fn with_features(token: &str, features: &[String]) -> String {
    let mut s = token.to_string();
    for f in features {
        s.push(':');
        s.push_str(f);
    }
    s
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn classify(path: &str) -> Option<(String, String)> {
        let c = DatabaseClassifier::new(&Spec::builtin()).unwrap();
        c.classify(path).map(|m| (m.rule, m.arch))
    }

    #[test]
    fn catch_all_rule_is_opt_in() {
        let mut spec = Spec::builtin();
        spec.kernel_databases
            .push(crate::defaults::target_token_rule());
        let c = DatabaseClassifier::new(&spec).unwrap();
        let got = |p: &str| c.classify(p).map(|m| (m.rule, m.arch));
        assert_eq!(
            got("share/ck/fmha_fwd_known_fails_gfx90a.txt"),
            m("target-token", "gfx90a")
        );
        assert_eq!(
            got("pkg/kernels_gfx11-generic.bin"),
            m("target-token", "gfx11-generic")
        );
        assert_eq!(got("torch/hsa/gfx1100/k.co"), m("code-objects", "gfx1100"));
    }

    #[test]
    fn anchors_of_the_builtin_rules() {
        let anchors: Vec<(String, Option<String>)> = crate::defaults::database_rules()
            .iter()
            .flat_map(|r| r.include.iter().map(|g| (r.name.clone(), glob_anchor(g))))
            .collect();
        let want = |n: &str, a: Option<&str>| (n.to_string(), a.map(str::to_string));
        assert_eq!(
            anchors,
            [
                want("tensile", Some("library/")),
                want("tensile-arch-dir", Some("rocblas/library/")),
                want("tensile-arch-dir", Some("hipblaslt/library/")),
                want("tensile-arch-dir", Some("hipsparselt/library/")),
                want("aotriton", Some("aotriton/kernels/")),
                want("aotriton-images", Some("aotriton.images/")),
                want("miopen-db", Some("share/miopen/db/")),
                want("miopen-ck", None),
                want("miopen-ck", None),
                want("composable-kernel", None),
                want("hip-kernel-provider", Some("engines/arch_content/")),
                want("hip-kernel-provider", Some("engines/test_arch_content/")),
                want("rocjitsu", Some("share/rocjitsu/translations/")),
                want("code-objects", None),
            ]
        );
    }

    #[test]
    fn what_the_fetcher_may_install() {
        let a = |s: &str| vec![s.to_string()];
        let multiarch = Some("usr/lib/x86_64-linux-gnu");
        // Below the prefix: any built-in rule, with the listed arch.
        assert_eq!(
            check_fetchable(
                None,
                "rocblas/library/TensileLibrary_gfx90a.co",
                &a("gfx90a")
            ),
            Ok("tensile".into())
        );
        assert_eq!(
            check_fetchable(None, "k/x_gfx90a.co", &a("gfx90a")),
            Ok("code-objects".into())
        );
        assert!(matches!(
            check_fetchable(None, "k/x_gfx90a.co", &a("gfx1100")),
            Err(Unfetchable::OtherArch { .. })
        ));
        assert_eq!(
            check_fetchable(None, "etc/sudoers.d/x", &a("gfx90a")),
            Err(Unfetchable::NoRule)
        );
        // The kinds of AMD's newer handlers, below the prefix.
        let digest = "ab".repeat(32);
        for (path, arch, rule) in [
            (
                "lib/hipdnn_plugins/engines/arch_content/p/gfx942/k.kpack".to_string(),
                "gfx942",
                "hip-kernel-provider",
            ),
            (
                "lib/libdevice_conv_operations_gfx942_xnackp.a".into(),
                "gfx942",
                "composable-kernel",
            ),
            (
                "lib/rocblas/library/gfx942/TensileManifest.txt".into(),
                "gfx942",
                "tensile-arch-dir",
            ),
            (
                format!("share/rocjitsu/translations/gfx1250-b0-a0/v1/{digest}.obj"),
                "gfx1250",
                "rocjitsu",
            ),
        ] {
            assert_eq!(
                check_fetchable(None, &path, &a(arch)),
                Ok(rule.into()),
                "{path}"
            );
        }
        // Above the prefix: rocjitsu names its directory, CK does not.
        assert_eq!(
            check_fetchable(
                multiarch,
                &format!("usr/share/rocjitsu/translations/gfx1250-b0-a0/v1/{digest}.man"),
                &a("gfx1250")
            ),
            Ok("rocjitsu".into())
        );
        assert_eq!(
            check_fetchable(
                multiarch,
                "usr/libdevice_conv_operations_gfx90a.a",
                &a("gfx90a")
            ),
            Err(Unfetchable::NoAnchor {
                rule: "composable-kernel".into()
            })
        );
        // Debian's multiarch MIOpen: above the prefix, in the rule's
        // directory right in `usr/`.
        assert_eq!(
            check_fetchable(multiarch, "usr/share/miopen/db/gfx90a68.kdb", &a("gfx90a")),
            Ok("miopen-db".into())
        );
        assert_eq!(
            check_fetchable(
                multiarch,
                "usr/lib/x86_64-linux-gnu/rocblas/library/T_gfx90a.co",
                &a("gfx90a")
            ),
            Ok("tensile".into())
        );
        for (path, want) in [
            ("etc/cron.d/x", Unfetchable::NoRule),
            ("etc/sudoers.d/x", Unfetchable::NoRule),
            ("etc/ld.so.preload", Unfetchable::NoRule),
            ("root/.ssh/authorized_keys", Unfetchable::NoRule),
            ("etc/cron.d/x_gfx90a.co", Unfetchable::AtRoot),
            ("share/miopen/db/gfx90a68.kdb", Unfetchable::AtRoot),
            (
                "usr/x_gfx90a.co",
                Unfetchable::NoAnchor {
                    rule: "code-objects".into(),
                },
            ),
            (
                "usr/cron.d/library/x_gfx90a.co",
                Unfetchable::OffAnchor {
                    rule: "tensile".into(),
                    anchors: "library/".into(),
                    base: "usr".into(),
                },
            ),
        ] {
            assert_eq!(
                check_fetchable(multiarch, path, &a("gfx90a")),
                Err(want),
                "{path}"
            );
        }
    }

    fn m(rule: &str, arch: &str) -> Option<(String, String)> {
        Some((rule.to_string(), arch.to_string()))
    }

    #[test]
    fn builtin_rules() {
        assert_eq!(
            classify("lib/rocblas/library/TensileLibrary_lazy_gfx1100.dat"),
            m("tensile", "gfx1100")
        );
        assert_eq!(
            classify("lib/rocblas/library/TensileLibrary_Type_HH_gfx90a_xnack+.co"),
            m("tensile", "gfx90a:xnack+")
        );
        assert_eq!(
            classify("lib/rocblas/library/Kernels.so-000-gfx90a-xnack-.hsaco"),
            m("tensile", "gfx90a:xnack-")
        );
        assert_eq!(
            classify("lib/hipblaslt/library/gfx942/extop.co"),
            m("tensile", "gfx942")
        );
        assert_eq!(classify("lib/rocblas/library/TensileManifest.txt"), None);
        assert_eq!(
            classify("lib/aotriton/kernels/gfx942/attn/fwd.hsaco"),
            m("aotriton", "gfx942")
        );
        assert_eq!(
            classify("share/miopen/db/gfx90a68.kdb"),
            m("miopen-db", "gfx90a")
        );
        assert_eq!(
            classify("share/miopen/db/gfx1030_36.HIP.fdb.txt"),
            m("miopen-db", "gfx1030")
        );
        assert_eq!(
            classify("share/miopen/db/gfx942130.db.txt"),
            m("miopen-db", "gfx942")
        );
        assert_eq!(
            classify("lib/libMIOpenCK_fwd_gfx942.so.1"),
            m("miopen-ck", "gfx942")
        );
        // Code objects anywhere, by directory or file-name suffix.
        assert_eq!(
            classify("torch/hsa/gfx1100/k.co"),
            m("code-objects", "gfx1100")
        );
        assert_eq!(
            classify("pkg/kernels_gfx11-generic.hsaco"),
            m("code-objects", "gfx11-generic")
        );
        assert_eq!(
            classify("pkg/gfx90a:xnack+/k.co"),
            m("code-objects", "gfx90a:xnack+")
        );
        // AOTriton as torch wheels ship it: per processor, and per family
        // (every processor of the family: its generic ISA).
        assert_eq!(
            classify("torch/lib/aotriton.images/amd-gfx942/flash/attn_fwd/FONLY__^bf16@16,128,False,True,False,False,0,0___MI300X.aks2"),
            m("aotriton-images", "gfx942")
        );
        assert_eq!(
            classify("torch/lib/aotriton.images/amd-gfx11xx/flash/bwd_kernel_dk_dv/x.aks2"),
            m("aotriton-images", "gfx11-generic")
        );
        assert_eq!(
            classify("torch/lib/aotriton.images/amd-gfx120x/flash/x.aks2"),
            m("aotriton-images", "gfx12-generic")
        );
        // A family no single generic ISA serves stays generic.
        assert_eq!(
            classify("torch/lib/aotriton.images/amd-gfx9xx/flash/x.aks2"),
            None
        );
        assert_eq!(
            classify("torch/lib/aotriton.images/amd-gfx1xxx/x.aks2"),
            None
        );
        // Files that merely mention a target are not kernels without the
        // opt-in catch-all rule.
        assert_eq!(classify("share/ck/fmha_fwd_known_fails_gfx90a.txt"), None);
        assert_eq!(classify("pkg/kernels_gfx11-generic.bin"), None);
        assert_eq!(classify("pkg/gfx1100/README"), None);
        // Not targets: headers, unknown processors, tokens inside words.
        assert_eq!(classify("include/amd_gfx9.h"), None);
        assert_eq!(classify("include/gfx1100x/notes.txt"), None);
        assert_eq!(classify("lib/libfoo.so.1.2"), None);
        assert_eq!(classify("share/doc/mygfx1100.txt"), None);
        assert_eq!(
            classify("lib/rocblas/library/TensileLibrary_gfx9999.dat"),
            None
        );
        // A real processor no family covers is still read (the caller
        // reports it as uncovered).
        assert_eq!(
            classify("lib/rocblas/library/TensileLibrary_gfx700.dat"),
            m("tensile", "gfx700")
        );
    }

    /// Expects `rule` to read `arch` from each path (`None`: the path stays
    /// generic).
    fn expect(cases: &[(&str, Option<(&str, &str)>)]) {
        for (path, want) in cases {
            assert_eq!(
                classify(path),
                want.map(|(r, a)| (r.to_string(), a.to_string())),
                "{path}"
            );
        }
    }

    // The cases below are those of the handler tests of AMD's splitter
    // (rocm-systems, `shared/kpack`: its database handlers and strict
    // identity tests), each with what our rules read; where we read
    // differently on purpose, the comment says why (docs/packaging.md,
    // "Kernel databases").

    #[test]
    fn hipsparselt_and_the_tensile_layouts() {
        let co = |a| Some(("tensile", a));
        let dir = |a| Some(("tensile-arch-dir", a));
        expect(&[
            // hipSPARSELt, flat.
            ("lib/hipsparselt/library/extop_gfx942.co", co("gfx942")),
            (
                "lib/hipsparselt/library/Kernels.so-000-gfx950.hsaco",
                co("gfx950"),
            ),
            (
                "lib/hipsparselt/library/TensileLibrary_BB_BB_A_gfx942.dat",
                co("gfx942"),
            ),
            ("lib/hipsparselt/library/something_gfx942.so", None),
            // Per-arch subdirectories: code objects and catalogues by the
            // tensile rule, every other file below `library/<arch>/` too.
            (
                "lib/hipsparselt/library/gfx950/TensileLibrary_BB_BB_A_fallback.dat",
                co("gfx950"),
            ),
            (
                "lib/rocblas/library/gfx942/TensileLibrary_Type_HH_gfx942.co",
                co("gfx942"),
            ),
            (
                "lib/rocblas/library/gfx1100/TensileLibrary_Type_HH_fallback.dat",
                co("gfx1100"),
            ),
            (
                "lib/rocblas/library/gfx90a/TensileManifest.txt",
                dir("gfx90a"),
            ),
            (
                "lib/hipblaslt/library/gfx1100/TensileManifest.txt",
                dir("gfx1100"),
            ),
            ("lib/hipsparselt/library/gfx942/sub/x.yaml", dir("gfx942")),
            (
                "lib/rocblas/library/gfx942-xnack+/TensileLibrary.co",
                co("gfx942:xnack+"),
            ),
            (
                "lib/rocblas/library/gfx942-xnack+/TensileManifest.txt",
                dir("gfx942:xnack+"),
            ),
            // A family directory serves every processor of the family.
            (
                "lib/rocblas/library/gfx11xx/TensileManifest.txt",
                dir("gfx11-generic"),
            ),
            (
                "lib/rocblas/library/gfx11-generic/TensileManifest.txt",
                dir("gfx11-generic"),
            ),
            // Flat, xnack spelt with `-`.
            (
                "lib/rocblas/library/TensileLibrary_lazy_gfx90a-xnack+.hsaco",
                co("gfx90a:xnack+"),
            ),
            (
                "lib/hipblaslt/library/Kernels.so-000-gfx942-xnack-.hsaco",
                co("gfx942:xnack-"),
            ),
            // Stays generic: no arch, an arch-less extension in the flat
            // layout, a fallback catalogue in the flat layout.
            ("lib/rocblas/library/TensileLibrary.dat", None),
            ("lib/hipblaslt/library/generic.dat", None),
            ("lib/rocblas/library/TensileLibrary_gfx1100.txt", None),
            ("lib/hipblaslt/library/TensileLibrary_gfx1100.json", None),
            (
                "lib/rocblas/library/TensileLibrary_Type_HH_fallback.dat",
                None,
            ),
            ("lib/rocblas/library/TensileManifest.txt", None),
            // Any file only in these libraries' `library/`; code objects and
            // catalogues in any `library/` (the tensile rule predates
            // AMD's per-library handlers; AMD leaves `lib/other/library/`
            // generic).
            ("lib/other/library/gfx942/TensileManifest.txt", None),
            (
                "lib/other/library/TensileLibrary_gfx1100.dat",
                co("gfx1100"),
            ),
            ("lib/myrocblas/library/gfx942/TensileManifest.txt", None),
        ]);
    }

    #[test]
    fn composable_kernel_static_libraries() {
        let ck = |a| Some(("composable-kernel", a));
        expect(&[
            ("lib/libdevice_conv_operations_gfx942.a", ck("gfx942")),
            (
                "lib/libdevice_conv_operations_gfx950_xnackp.a",
                ck("gfx950"),
            ),
            (
                "lib/libdevice_conv_operations_gfx90a_xnack_.a",
                ck("gfx90a"),
            ),
            (
                "lib/libdevice_conv_operations_gfx942_srameccp_xnack_.a",
                ck("gfx942"),
            ),
            ("lib/libdevice_conv_operations_gfx1100.a", ck("gfx1100")),
            // Windows: no `lib`, `.lib`.
            ("lib/device_conv_operations_gfx942.lib", ck("gfx942")),
            // The strict variant goes to its processor's group (AMD keeps
            // `gfx1250-strict` a target of its own; see `without_strict`).
            (
                "lib/libdevice_conv_operations_gfx1250_strict.a",
                ck("gfx1250"),
            ),
            (
                "lib/libdevice_conv_operations_gfx1250_strict_xnackp.a",
                ck("gfx1250"),
            ),
            (
                "lib/device_conv_operations_gfx1250_strict.lib",
                ck("gfx1250"),
            ),
            // A generic ISA is a target like any other here (AMD's pattern
            // does not read it, and leaves the file generic).
            (
                "lib/libdevice_conv_operations_gfx11_generic.a",
                ck("gfx11-generic"),
            ),
            (
                "lib/libdevice_conv_operations_gfx9_4_generic.a",
                ck("gfx9-4-generic"),
            ),
            // Stays generic.
            ("lib/libdevice_conv_operations.a", None),
            ("lib/libdevice_conv_operations_foo.a", None),
            ("lib/libdevice_conv_operations_xnack.a", None),
            ("lib/libdevice_conv_operations_gfx942_bogus.a", None),
            ("lib/libdevice_conv_operations_gfx942_gfx90a.a", None),
            ("lib/libdevice_conv_operations_gfx9999.a", None),
            ("lib/libdevice_gemm_operations_gfx942.a", None),
            ("lib/libdevice_conv_operations_gfx942.so", None),
            ("lib/libdevice_conv_operations_gfx942.a.bak", None),
            ("lib/libdevice_conv_operations_gfx942.lib.a", None),
            ("lib/xlibdevice_conv_operations_gfx942.a", None),
            ("lib/libMIOpen.a", None),
        ]);
    }

    #[test]
    fn hip_kernel_provider_content() {
        let hkp = |a| Some(("hip-kernel-provider", a));
        let engines = "lib/hipdnn_plugins/engines";
        let p = |rel: &str| format!("{engines}/{rel}");
        let cases: Vec<(String, Option<(&str, &str)>)> = vec![
            (
                p("arch_content/some-producer/gfx942/kernels_gfx942.kpack"),
                hkp("gfx942"),
            ),
            (
                p("arch_content/some-producer/gfx942/kernels_gfx942.json"),
                hkp("gfx942"),
            ),
            (
                p("arch_content/some-producer/gfx942/sub/extra/blob.bin"),
                hkp("gfx942"),
            ),
            (
                p("arch_content/some-producer/gfx1151/kernels_gfx1151.kpack"),
                hkp("gfx1151"),
            ),
            (p("arch_content/aiter/gfx942/kernels.kpack"), hkp("gfx942")),
            (p("arch_content/gfx942/kernels.kpack"), hkp("gfx942")),
            (p("test_arch_content/gfx1101/kernels.kpack"), hkp("gfx1101")),
            (
                p("arch_content/hip-kernel-provider/rocke/gfx942/kernels.kpack"),
                hkp("gfx942"),
            ),
            (
                p("test_arch_content/hip-kernel-provider/unit/shared/gfx1101/kernels.kpack"),
                hkp("gfx1101"),
            ),
            (
                p("test_arch_content/some-producer/unit/shared/gfx1201/descriptor.json"),
                hkp("gfx1201"),
            ),
            // The first target directory below the container decides.
            (p("arch_content/p/gfx942/gfx90a/x.bin"), hkp("gfx942")),
            // xnack kept, as everywhere (`gfx942-xnack+` in AMD's key).
            (
                p("arch_content/p/gfx942-xnack+/kernels_gfx942-xnack+.kpack"),
                hkp("gfx942:xnack+"),
            ),
            // Family directories serve every processor of the family (AMD
            // reads neither, and leaves the content generic), and feature
            // settings are part of the target as in every rule.
            (
                p("arch_content/p/gfx11-generic/kernels.kpack"),
                hkp("gfx11-generic"),
            ),
            (
                p("arch_content/p/gfx10-3-generic/kernels.kpack"),
                hkp("gfx10-3-generic"),
            ),
            (
                p("arch_content/p/gfx11xx/kernels.kpack"),
                hkp("gfx11-generic"),
            ),
            (
                p("arch_content/p/gfx950:sramecc+:xnack-/k.kpack"),
                hkp("gfx950:sramecc+:xnack-"),
            ),
            // Stays generic.
            (p("arch_content/p/gfx1250-b0-a0/kernels.kpack"), None),
            (p("arch_content/p/config/settings.json"), None),
            (p("arch_content/p/common/shared.json"), None),
            (p("arch_content/p/gfx942"), None),
            (
                p("test_arch_content/p/test_kpack_binary/test_zstd.kpack"),
                None,
            ),
            (p("other/gfx942/blob.bin"), None),
            (
                "bin/hip_kernel_provider/rocke/instances/gfx942/wmma_gemm.py".into(),
                None,
            ),
            (
                "share/some_component/arch_content/gfx942/data.bin".into(),
                None,
            ),
            (
                "share/some_component/test_arch_content/gfx942/data.bin".into(),
                None,
            ),
            ("lib/arch_content/gfx942/kernels_gfx942.kpack".into(), None),
            // A target above the container is not read.
            (
                "lib/gfx942/engines/arch_content/p/common/x.json".into(),
                None,
            ),
        ];
        for (path, want) in &cases {
            expect(&[(path.as_str(), *want)]);
        }
    }

    #[test]
    fn rocjitsu_translations() {
        let digest = "0123456789abcdef".repeat(4);
        let tr = |rest: &str| format!("share/rocjitsu/translations/{rest}");
        for ext in ["obj", "man"] {
            let path = tr(&format!("gfx1250-b0-a0/v1/{digest}.{ext}"));
            expect(&[(path.as_str(), Some(("rocjitsu", "gfx1250")))]);
            // Below an install prefix.
            let path = format!("opt/rocm/{path}");
            expect(&[(path.as_str(), Some(("rocjitsu", "gfx1250")))]);
        }
        let a64 = "a".repeat(64);
        for path in [
            tr(&format!("gfx1250-b0-a0/v2/{a64}.obj")),
            tr(&format!("gfx1250-b0-a1/v1/{a64}.obj")),
            tr(&format!("gfx1250/v1/{a64}.obj")),
            tr("gfx1250-b0-a0/v1/not-a-digest.obj"),
            tr(&format!("gfx1250-b0-a0/v1/{}.obj", "A".repeat(64))),
            tr(&format!("gfx1250-b0-a0/v1/{}.obj", "a".repeat(63))),
            tr(&format!("gfx1250-b0-a0/v1/{a64}.txt")),
            tr(&format!("gfx1250-b0-a0/v1/nested/{a64}.obj")),
            format!("share/other/translations/gfx1250-b0-a0/v1/{a64}.obj"),
        ] {
            expect(&[(path.as_str(), None)]);
        }
    }

    #[test]
    fn strict_spellings_are_their_processors() {
        expect(&[
            (
                "lib/rocblas/library/TensileLibrary_gfx1250-strict.dat",
                Some(("tensile", "gfx1250")),
            ),
            (
                "lib/rocblas/library/TensileLibrary_gfx1250.dat",
                Some(("tensile", "gfx1250")),
            ),
            (
                "lib/hipblaslt/library/gfx1250-strict/TensileManifest.txt",
                Some(("tensile-arch-dir", "gfx1250")),
            ),
            (
                "share/miopen/db/gfx1250-strict_256.db.txt",
                Some(("miopen-db", "gfx1250")),
            ),
            (
                "share/miopen/db/gfx1250-strict256.HIP.fdb.txt",
                Some(("miopen-db", "gfx1250")),
            ),
            (
                "lib/libMIOpenCKGroupedConv_gfx1250-strict.so",
                Some(("miopen-ck", "gfx1250")),
            ),
            ("k/x_gfx1250_strict.co", Some(("code-objects", "gfx1250"))),
            ("k/gfx1250-strict/x.co", Some(("code-objects", "gfx1250"))),
            (
                "torch/lib/aotriton.images/amd-gfx1250-strict/x.aks2",
                Some(("aotriton-images", "gfx1250")),
            ),
            // Not a strict spelling, and generic ISAs have none.
            ("k/gfx1250-strictly/x.co", None),
            ("k/x_gfx11-generic-strict.co", None),
        ]);
    }

    #[test]
    fn miopen_ck_on_windows_and_amds_miopen_cases() {
        let ck = |a| Some(("miopen-ck", a));
        let db = |a| Some(("miopen-db", a));
        expect(&[
            ("lib/libMIOpenCKGroupedConv_gfx942.so", ck("gfx942")),
            (
                "lib/libMIOpenCKGroupedConv_gfx942-xnack+.so",
                ck("gfx942:xnack+"),
            ),
            ("lib/MIOpenCKGroupedConv_gfx942.dll", ck("gfx942")),
            (
                "lib/MIOpenCKGroupedConv_gfx942-xnack+.dll",
                ck("gfx942:xnack+"),
            ),
            ("lib/libMIOpenCKGroupedConv.so", None),
            ("lib/libMIOpen.so", None),
            ("lib/MIOpen.dll", None),
            ("share/miopen/db/gfx942.kdb", db("gfx942")),
            ("share/miopen/db/gfx908.tn.model", db("gfx908")),
            (
                "share/miopen/db/gfx942_ConvHipIgemmGroupFwdXdlops_decoder.ktn.model",
                db("gfx942"),
            ),
            ("share/miopen/db/gfx90878.db.txt", db("gfx908")),
            ("share/miopen/db/gfx90a6e.HIP.fdb.txt", db("gfx90a")),
            ("share/miopen/db/gfx942e4.db.txt", db("gfx942")),
            ("share/miopen/db/gfx900_56.OpenCL.fdb.txt", db("gfx900")),
            ("share/miopen/db/gfx908.json", None),
            ("share/miopen/db/generic.tn.model", None),
            ("share/other/db/gfx908.tn.model", None),
        ]);
    }

    #[test]
    fn every_arch_source_has_its_spelling() {
        for src in ArchSource::ALL {
            let text = format!("\"{}\"", src.as_str());
            let back: ArchSource = serde_json::from_str(&text).unwrap();
            assert_eq!(back, src);
        }
    }
}
