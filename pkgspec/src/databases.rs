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
