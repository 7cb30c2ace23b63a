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

use crate::defaults::KNOWN_PROCESSORS;
use crate::GENERIC_ISAS;
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
        }
    }
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
        for r in &self.rules {
            if !r.include.is_match(rel_path) || r.exclude.is_match(rel_path) {
                continue;
            }
            for src in &r.arch {
                if let Some(arch) = self.arch_from(*src, rel_path) {
                    return Some(DatabaseMatch {
                        rule: r.name.clone(),
                        arch,
                    });
                }
            }
        }
        None
    }

    /// [`DatabaseClassifier::classify`], and the anchors ([`glob_anchor`])
    /// of the deciding rule's include globs that match `rel_path`.
    fn classify_anchored(&self, rel_path: &str) -> Option<(DatabaseMatch, Vec<&str>)> {
        for r in &self.rules {
            if !r.include.is_match(rel_path) || r.exclude.is_match(rel_path) {
                continue;
            }
            let Some(arch) = r.arch.iter().find_map(|src| self.arch_from(*src, rel_path)) else {
                continue;
            };
            let anchors = r
                .include
                .matches(rel_path)
                .into_iter()
                .filter_map(|i| r.anchors.get(i).and_then(Option::as_deref))
                .collect();
            let m = DatabaseMatch {
                rule: r.name.clone(),
                arch,
            };
            return Some((m, anchors));
        }
        None
    }

    /// Reads a target id from `rel_path` the way `source` says.
    pub fn arch_from(&self, source: ArchSource, rel_path: &str) -> Option<String> {
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
                .find_map(|c| self.whole_token(c).or_else(|| family_generic_isa(c))),
            ArchSource::FileNamePrefix => {
                let t = self.token_at(name)?;
                Some(t.to_string())
            }
            ArchSource::FileName => self.token_in_name(name, false),
            ArchSource::FileNameSuffix => self.token_in_name(name, true),
        }
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
        let (features, used) = parse_features(c.get(t.len()..)?);
        (used == c.len() - t.len()).then(|| with_features(t, &features))
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
            let after = rest.get(t.len()..)?;
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
                want("aotriton", Some("aotriton/kernels/")),
                want("aotriton-images", Some("aotriton.images/")),
                want("miopen-db", Some("share/miopen/db/")),
                want("miopen-ck", None),
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
}
