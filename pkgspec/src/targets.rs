//! Checking GPU targets a user typed (`--target gfx942:sramecc+`) against
//! the processors the family table knows, with a hint for near misses.
//!
//! Both command lines take targets through [`check_target`], so
//! `rocm-kpack verify`, `rocm-kpack-fetch detect` and `spec check` agree on
//! what a target is: a known processor (or one of LLVM's generic ISAs)
//! followed by `:feature±` settings of the features that processor has.

use rocm_kpack_format::target::{generic_isa, TargetId};

use crate::defaults::KNOWN_PROCESSORS;
use crate::GENERIC_ISAS;

/// The target features a processor has (LLVM's AMDGPUUsage processor
/// table): `sramecc` on the data-centre parts, `xnack` on GFX8/GFX9/GFX10.1.
pub fn features_of(processor: &str) -> &'static [&'static str] {
    if let Some(generic) = generic_isa(processor) {
        return generic.features;
    }
    match processor {
        "gfx906" | "gfx908" | "gfx90a" | "gfx940" | "gfx941" | "gfx942" | "gfx950" => {
            &["sramecc", "xnack"]
        }
        "gfx801" | "gfx810" | "gfx900" | "gfx902" | "gfx904" | "gfx909" | "gfx90c" | "gfx1010"
        | "gfx1011" | "gfx1012" | "gfx1013" => &["xnack"],
        _ => &[],
    }
}

/// A target the family table does not know, with what the user may have
/// meant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem}{}", hint.as_deref().map(|h| format!("; did you mean `{h}`?")).unwrap_or_default())]
pub struct TargetError {
    /// What is wrong with the target.
    pub problem: String,
    /// The closest valid spelling, if one is close.
    pub hint: Option<String>,
}

/// Parses and checks one target: syntax ([`TargetId::parse`]), a processor
/// of the family table or a generic ISA, and only features that processor
/// has. Returns the canonical spelling's id.
pub fn check_target(text: &str) -> Result<TargetId, TargetError> {
    let text = text.trim();
    let processor = text.split(':').next().unwrap_or_default();
    let processor = processor
        .strip_prefix("amdgcn-amd-amdhsa--")
        .unwrap_or(processor);
    let known = KNOWN_PROCESSORS.contains(&processor) || generic_isa(processor).is_some();
    if !known {
        let lower = processor.to_ascii_lowercase();
        let hint = if lower != processor && is_known(&lower) {
            Some(text.replacen(processor, &lower, 1))
        } else {
            closest_processor(&lower).map(|p| text.replacen(processor, p, 1))
        };
        return Err(TargetError {
            problem: format!(
                "{processor:?} is not a GPU processor rocm-kpack knows (see `rocm-kpack spec show`)"
            ),
            hint,
        });
    }
    let id = TargetId::parse(text).map_err(|e| TargetError {
        problem: e.to_string(),
        hint: feature_hint(text, processor),
    })?;
    let allowed = features_of(processor);
    if let Some(bad) = id
        .features()
        .iter()
        .find(|f| !allowed.contains(&f.name.as_str()))
    {
        let has = if allowed.is_empty() {
            "no target features".to_string()
        } else {
            format!("only {}", allowed.join(" and "))
        };
        return Err(TargetError {
            problem: format!("{processor} has {has}, not {:?}", bad.name),
            hint: Some(processor.to_string()),
        });
    }
    Ok(id)
}

fn is_known(processor: &str) -> bool {
    KNOWN_PROCESSORS.contains(&processor) || generic_isa(processor).is_some()
}

/// `gfx90a:xnack` (no sign) -> `gfx90a:xnack+`: the first feature missing
/// its sign gets `+`.
fn feature_hint(text: &str, processor: &str) -> Option<String> {
    let allowed = features_of(processor);
    let mut parts = vec![processor.to_string()];
    for part in text.split(':').skip(1) {
        let name = part.trim_end_matches(['+', '-']);
        if !allowed.contains(&name) {
            return None;
        }
        let sign = if part.ends_with('-') { '-' } else { '+' };
        parts.push(format!("{name}{sign}"));
    }
    Some(parts.join(":"))
}

/// The known processor or generic ISA nearest to `name` by edit distance,
/// if it is one edit away (a typo, not another GPU: `gfx9999` is two
/// edits from `gfx909`, too far to guess).
fn closest_processor(name: &str) -> Option<&'static str> {
    KNOWN_PROCESSORS
        .iter()
        .copied()
        .chain(GENERIC_ISAS.iter().map(|g| g.name))
        .map(|p| (edit_distance(name, p), p))
        .filter(|(d, _)| *d <= 1)
        // Ties go to the longer common prefix: `gfx1110` is `gfx1100`
        // mistyped more likely than `gfx1010`.
        .min_by_key(|(d, p)| (*d, std::cmp::Reverse(common_prefix(name, p))))
        .map(|(_, p)| p)
}

fn common_prefix(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

/// Levenshtein distance over bytes (names are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

/// For a target that covers none of `code_objects` only because it leaves
/// features unset that they specify (`gfx942` against
/// `gfx942:sramecc+` code), the spelling that would: the target with those
/// features as the code objects have them.
pub fn feature_completion(target: &TargetId, code_objects: &[TargetId]) -> Option<String> {
    code_objects
        .iter()
        .filter(|co| co.processor() == target.processor())
        .find_map(|co| {
            let mut completed = target.clone();
            for f in co.features() {
                if target.feature(&f.name).is_none() {
                    completed = completed.with_feature(&f.name, f.enabled).ok()?;
                }
            }
            completed.supports(co).then(|| completed.to_string())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hint(text: &str) -> Option<String> {
        check_target(text).expect_err(text).hint
    }

    #[test]
    fn known_targets_pass_in_canonical_form() {
        for t in [
            "gfx942",
            "gfx942:sramecc+",
            "gfx90a:xnack-:sramecc+",
            "gfx11-generic",
            "gfx1100",
        ] {
            check_target(t).expect(t);
        }
        assert_eq!(
            check_target("gfx90a:xnack-:sramecc+")
                .expect("valid")
                .to_string(),
            "gfx90a:sramecc+:xnack-"
        );
    }

    #[test]
    fn near_misses_get_a_hint_and_strangers_do_not() {
        assert_eq!(hint("gfx9999"), None);
        assert_eq!(hint("gfx1110").as_deref(), Some("gfx1100"));
        assert_eq!(hint("GFX942").as_deref(), Some("gfx942"));
        assert_eq!(hint("gfx942:sramecc").as_deref(), Some("gfx942:sramecc+"));
        assert_eq!(hint("gfx1100:xnack+").as_deref(), Some("gfx1100"));
        assert_eq!(hint("gfx90a:bogus+").as_deref(), Some("gfx90a"));
        let err = check_target("gfx9999").expect_err("unknown");
        assert!(err.to_string().contains("not a GPU processor"), "{err}");
        assert!(check_target("gfx1110")
            .expect_err("typo")
            .to_string()
            .ends_with("did you mean `gfx1100`?"));
    }

    #[test]
    fn completion_adds_the_features_the_code_specifies() {
        let target = check_target("gfx942").expect("valid");
        let code = [TargetId::parse("gfx942:sramecc+").expect("valid")];
        assert_eq!(
            feature_completion(&target, &code).as_deref(),
            Some("gfx942:sramecc+")
        );
        let other = [TargetId::parse("gfx90a").expect("valid")];
        assert_eq!(feature_completion(&target, &other), None);
    }
}
