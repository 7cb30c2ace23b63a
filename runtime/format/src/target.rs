//! AMD GPU target ids (`gfx942:sramecc+:xnack-`) and the order in which the
//! loader tries code objects for a device (docs/runtime.md).
//!
//! A target id is a processor followed by feature settings. A code object
//! built without a feature runs with either setting of it; one built with a
//! feature requires exactly that setting. So for a device the usable code
//! objects are the subsets of its features, tried most specific first.

use std::fmt;
use std::str::FromStr;

use crate::{Error, Result};

/// Prefix clang and HIP put in front of target ids in triples and arch lists.
pub const AMDHSA_PREFIX: &str = "amdgcn-amd-amdhsa--";

/// More features than any real target has; bounds `compatible_variants` (2^n).
const MAX_FEATURES: usize = 8;
/// Longer than any real target id; keeps hostile strings out.
const MAX_LEN: usize = 256;

/// One feature setting of a target id, e.g. `xnack-`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Feature {
    /// Feature name (`sramecc`, `xnack`).
    pub name: String,
    /// `true` for `+`, `false` for `-`.
    pub enabled: bool,
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.name, if self.enabled { '+' } else { '-' })
    }
}

/// A parsed target id. Features are kept sorted by name (clang's canonical
/// form), so `Display` prints the canonical spelling.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TargetId {
    processor: String,
    features: Vec<Feature>,
}

impl TargetId {
    /// Parses `gfx90a`, `gfx942:sramecc+:xnack-`, `gfx11-generic`,
    /// optionally prefixed by `amdgcn-amd-amdhsa--`. Features may come in any
    /// order; each may appear once.
    pub fn parse(s: &str) -> Result<TargetId> {
        let bad = |detail: String| Error::InvalidArgument(format!("target id {s:?}: {detail}"));
        if s.len() > MAX_LEN {
            return Err(bad(format!("longer than {MAX_LEN} bytes")));
        }
        let body = s.strip_prefix(AMDHSA_PREFIX).unwrap_or(s);
        let mut parts = body.split(':');
        let processor = parts.next().unwrap_or_default();
        if !valid_processor(processor) {
            return Err(bad(format!(
                "{processor:?} is not a gfx processor (gfxNNN or gfxN[-M]-generic)"
            )));
        }
        let mut features: Vec<Feature> = Vec::new();
        for part in parts {
            let (name, enabled) = if let Some(n) = part.strip_suffix('+') {
                (n, true)
            } else if let Some(n) = part.strip_suffix('-') {
                (n, false)
            } else {
                return Err(bad(format!("feature {part:?} does not end in + or -")));
            };
            if !valid_feature_name(name) {
                return Err(bad(format!("bad feature name {name:?}")));
            }
            if features.iter().any(|f| f.name == name) {
                return Err(bad(format!("feature {name:?} given twice")));
            }
            if features.len() == MAX_FEATURES {
                return Err(bad(format!("more than {MAX_FEATURES} features")));
            }
            features.push(Feature {
                name: name.to_string(),
                enabled,
            });
        }
        features.sort();
        Ok(TargetId {
            processor: processor.to_string(),
            features,
        })
    }

    /// The processor without features (`gfx942`, `gfx11-generic`).
    pub fn processor(&self) -> &str {
        &self.processor
    }

    /// Feature settings, sorted by name.
    pub fn features(&self) -> &[Feature] {
        &self.features
    }

    /// The setting of feature `name`, if the target id specifies it.
    pub fn feature(&self, name: &str) -> Option<bool> {
        self.features
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.enabled)
    }

    /// This target id with feature `name` set to `enabled` (added, or
    /// replacing its current setting), in canonical order:
    /// `gfx90a:sramecc+` with `xnack` off is `gfx90a:sramecc+:xnack-`.
    pub fn with_feature(&self, name: &str, enabled: bool) -> Result<TargetId> {
        if !valid_feature_name(name) {
            return Err(Error::InvalidArgument(format!("bad feature name {name:?}")));
        }
        let mut features = self.features.clone();
        let full = features.len() == MAX_FEATURES;
        match features.iter_mut().find(|f| f.name == name) {
            Some(f) => f.enabled = enabled,
            None if full => {
                return Err(Error::InvalidArgument(format!(
                    "target id {self}: more than {MAX_FEATURES} features"
                )))
            }
            None => features.push(Feature {
                name: name.to_owned(),
                enabled,
            }),
        }
        features.sort();
        Ok(TargetId {
            processor: self.processor.clone(),
            features,
        })
    }

    /// True for generic ISAs such as `gfx11-generic` or `gfx9-4-generic`.
    pub fn is_generic(&self) -> bool {
        self.processor.ends_with("-generic")
    }

    /// Whether a code object built for `code_object` runs on a device whose
    /// target id is `self`: same processor, and every feature the code object
    /// specifies has the same setting on the device.
    pub fn supports(&self, code_object: &TargetId) -> bool {
        self.processor == code_object.processor
            && code_object
                .features
                .iter()
                .all(|f| self.feature(&f.name) == Some(f.enabled))
    }

    /// The generic target id this device can fall back to when no native
    /// code object exists: its generic ISA, keeping the device's settings of
    /// the features that ISA supports (`gfx942:sramecc+:xnack-` ->
    /// `gfx9-4-generic:sramecc+:xnack-`, `gfx906:sramecc+:xnack-` ->
    /// `gfx9-generic:xnack-`). `None` for generic ids and processors without
    /// a generic ISA.
    pub fn generic_fallback(&self) -> Option<TargetId> {
        if self.is_generic() {
            return None;
        }
        let generic = GENERIC_ISAS
            .iter()
            .find(|g| g.processors.contains(&self.processor.as_str()))?;
        Some(TargetId {
            processor: generic.name.to_owned(),
            features: self
                .features
                .iter()
                .filter(|f| generic.features.contains(&f.name.as_str()))
                .cloned()
                .collect(),
        })
    }

    /// Whether a code object for `code_object` runs on this device, natively
    /// ([`Self::supports`]) or through the device's generic ISA (a code
    /// object for it may only specify features the ISA supports, each with
    /// the device's setting).
    pub fn accepts(&self, code_object: &TargetId) -> bool {
        self.supports(code_object)
            || self
                .generic_fallback()
                .is_some_and(|g| g.supports(code_object))
    }

    /// The target ids of code objects usable on this device, most specific
    /// first: every subset of the features, larger subsets first; among
    /// subsets of one size, those keeping features further left (in canonical
    /// order) come first, i.e. features are dropped from the right first.
    /// `gfx942:sramecc+:xnack-` gives `gfx942:sramecc+:xnack-`,
    /// `gfx942:sramecc+`, `gfx942:xnack-`, `gfx942`.
    pub fn compatible_variants(&self) -> Vec<String> {
        self.compatible_variant_ids()
            .iter()
            .map(TargetId::to_string)
            .collect()
    }

    /// [`Self::compatible_variants`] as parsed ids.
    pub fn compatible_variant_ids(&self) -> Vec<TargetId> {
        let n = self.features.len();
        // Bit i of a mask (counting from the most significant of n bits)
        // keeps feature i. For a fixed subset size, descending masks keep
        // left features longest.
        let mut masks: Vec<u32> = (0..(1u32 << n)).collect();
        masks.sort_by(|a, b| b.count_ones().cmp(&a.count_ones()).then(b.cmp(a)));
        masks
            .into_iter()
            .map(|mask| TargetId {
                processor: self.processor.clone(),
                features: self
                    .features
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mask & (1 << (n - 1 - i)) != 0)
                    .map(|(_, f)| f.clone())
                    .collect(),
            })
            .collect()
    }
}

/// The processor part of a target id, without parsing it:
/// `amdgcn-amd-amdhsa--gfx90a:xnack+` and `gfx90a:xnack+` both give
/// `gfx90a`.
pub fn processor_of(target_id: &str) -> &str {
    let t = target_id.rsplit("--").next().unwrap_or(target_id);
    t.split(':').next().unwrap_or(t)
}

/// One of LLVM's generic ISAs (AMDGPUUsage, "Generic processors"): code
/// built for it runs on every processor it serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenericIsa {
    /// The generic processor name, e.g. `gfx11-generic`.
    pub name: &'static str,
    /// Target features a code object for it may specify, in canonical order.
    pub features: &'static [&'static str],
    /// The processors it serves.
    pub processors: &'static [&'static str],
}

/// LLVM's generic ISA table: the one copy in the workspace.
pub const GENERIC_ISAS: &[GenericIsa] = &[
    GenericIsa {
        name: "gfx9-generic",
        features: &["xnack"],
        processors: &["gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"],
    },
    GenericIsa {
        name: "gfx9-4-generic",
        features: &["sramecc", "xnack"],
        processors: &["gfx940", "gfx941", "gfx942", "gfx950"],
    },
    GenericIsa {
        name: "gfx10-1-generic",
        features: &["xnack"],
        processors: &["gfx1010", "gfx1011", "gfx1012", "gfx1013"],
    },
    GenericIsa {
        name: "gfx10-3-generic",
        features: &[],
        processors: &[
            "gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036",
        ],
    },
    GenericIsa {
        name: "gfx11-generic",
        features: &[],
        processors: &[
            "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153",
        ],
    },
    GenericIsa {
        name: "gfx12-generic",
        features: &[],
        processors: &["gfx1200", "gfx1201"],
    },
];

/// The [`GenericIsa`] named `generic` (`gfx11-generic`), if LLVM has it.
pub fn generic_isa(generic: &str) -> Option<&'static GenericIsa> {
    GENERIC_ISAS.iter().find(|g| g.name == generic)
}

/// The generic ISA serving `processor` (`gfx1101` -> `gfx11-generic`); a
/// processor belongs to at most one. `None` for processors without one
/// (`gfx90a`, `gfx908`, `gfx803`) and for generic names themselves.
pub fn generic_isa_for(processor: &str) -> Option<&'static str> {
    GENERIC_ISAS
        .iter()
        .find(|g| g.processors.contains(&processor))
        .map(|g| g.name)
}

/// The processors a generic ISA serves; empty for unknown names.
pub fn processors_served_by(generic: &str) -> &'static [&'static str] {
    generic_isa(generic).map_or(&[], |g| g.processors)
}

fn valid_feature_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// `gfx` followed by hex digits (`gfx90a`, `gfx1100`), or a generic ISA
/// `gfx<major>[-<minor>]-generic` (`gfx11-generic`, `gfx9-4-generic`).
fn valid_processor(p: &str) -> bool {
    let Some(rest) = p.strip_prefix("gfx") else {
        return false;
    };
    if let Some(version) = rest.strip_suffix("-generic") {
        !version.is_empty()
            && version
                .split('-')
                .all(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()))
    } else {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    }
}

impl fmt::Display for TargetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.processor)?;
        for feature in &self.features {
            write!(f, ":{feature}")?;
        }
        Ok(())
    }
}

impl FromStr for TargetId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        TargetId::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> TargetId {
        match TargetId::parse(s) {
            Ok(t) => t,
            Err(e) => panic!("{s}: {e}"),
        }
    }

    #[test]
    fn parses_processor_and_features() {
        let id = t("amdgcn-amd-amdhsa--gfx942:xnack-:sramecc+");
        assert_eq!(id.processor(), "gfx942");
        assert_eq!(id.to_string(), "gfx942:sramecc+:xnack-");
        assert_eq!(id.feature("xnack"), Some(false));
        assert_eq!(id.feature("sramecc"), Some(true));
        assert_eq!(id.feature("tgsplit"), None);
        assert!(!id.is_generic());
        assert_eq!(t("gfx1100").features(), &[]);
        assert_eq!(t("gfx90a:xnack+").to_string(), "gfx90a:xnack+");
    }

    #[test]
    fn generic_isas() {
        for s in [
            "gfx11-generic",
            "gfx9-4-generic",
            "gfx10-1-generic",
            "gfx12-generic",
        ] {
            let id = t(s);
            assert!(id.is_generic(), "{s}");
            assert_eq!(id.processor(), s);
            assert_eq!(id.compatible_variants(), vec![s.to_string()]);
        }
        assert!(t("gfx9-generic:xnack+").is_generic());
    }

    #[test]
    fn rejects_malformed() {
        for s in [
            "",
            "gfx",
            "sm_80",
            "GFX90A",
            "gfx90a:",
            "gfx90a:xnack",
            "gfx90a:xnack+:xnack-",
            "gfx90a:+",
            "gfx90a:XNACK+",
            "gfx-generic",
            "gfx11--generic",
            "gfx11-x-generic",
            "amdgcn-amd-amdhsa--",
            "gfx90a:a+:b+:c+:d+:e+:f+:g+:h+:i+",
            "gfx90a xnack+",
        ] {
            assert!(TargetId::parse(s).is_err(), "{s:?} accepted");
        }
        assert!(TargetId::parse(&format!("gfx{}", "0".repeat(300))).is_err());
    }

    #[test]
    fn variants_in_runtime_order() {
        assert_eq!(
            t("gfx942:sramecc+:xnack-").compatible_variants(),
            [
                "gfx942:sramecc+:xnack-",
                "gfx942:sramecc+",
                "gfx942:xnack-",
                "gfx942"
            ]
        );
        assert_eq!(
            t("gfx90a:xnack+").compatible_variants(),
            ["gfx90a:xnack+", "gfx90a"]
        );
        assert_eq!(t("gfx1100").compatible_variants(), ["gfx1100"]);
        // Three features: all of them, then pairs keeping left ones longest,
        // then singles, then the bare processor.
        assert_eq!(
            t("gfx999:a+:b-:c+").compatible_variants(),
            [
                "gfx999:a+:b-:c+",
                "gfx999:a+:b-",
                "gfx999:a+:c+",
                "gfx999:b-:c+",
                "gfx999:a+",
                "gfx999:b-",
                "gfx999:c+",
                "gfx999",
            ]
        );
    }

    #[test]
    fn every_variant_is_supported_and_nothing_else() {
        let device = t("gfx942:sramecc+:xnack-");
        for v in device.compatible_variant_ids() {
            assert!(device.supports(&v), "{v}");
        }
        assert!(!device.supports(&t("gfx942:xnack+")));
        assert!(!device.supports(&t("gfx942:sramecc-")));
        assert!(!device.supports(&t("gfx90a")));
        assert!(!t("gfx942").supports(&t("gfx942:xnack-")));
    }

    #[test]
    fn with_feature_keeps_canonical_order() {
        let id = t("gfx90a:sramecc+");
        assert_eq!(
            id.with_feature("xnack", false)
                .map(|t| t.to_string())
                .ok()
                .as_deref(),
            Some("gfx90a:sramecc+:xnack-")
        );
        let id = t("gfx942:xnack-");
        assert_eq!(
            id.with_feature("sramecc", true)
                .map(|t| t.to_string())
                .ok()
                .as_deref(),
            Some("gfx942:sramecc+:xnack-")
        );
        assert_eq!(
            id.with_feature("xnack", true)
                .map(|t| t.to_string())
                .ok()
                .as_deref(),
            Some("gfx942:xnack+")
        );
        assert!(id.with_feature("XNACK", true).is_err());
        assert!(id.with_feature("", true).is_err());
    }

    #[test]
    fn generic_table_is_llvms() {
        assert_eq!(generic_isa_for("gfx1101"), Some("gfx11-generic"));
        assert_eq!(generic_isa_for("gfx1153"), Some("gfx11-generic"));
        assert_eq!(generic_isa_for("gfx90c"), Some("gfx9-generic"));
        assert_eq!(generic_isa_for("gfx950"), Some("gfx9-4-generic"));
        assert_eq!(generic_isa_for("gfx1013"), Some("gfx10-1-generic"));
        assert_eq!(generic_isa_for("gfx1036"), Some("gfx10-3-generic"));
        assert_eq!(generic_isa_for("gfx1201"), Some("gfx12-generic"));
        for none in ["gfx90a", "gfx908", "gfx803", "gfx1250", "gfx11-generic", ""] {
            assert_eq!(generic_isa_for(none), None, "{none}");
        }
        assert_eq!(
            processors_served_by("gfx9-4-generic"),
            ["gfx940", "gfx941", "gfx942", "gfx950"]
        );
        assert_eq!(
            processors_served_by("gfx12-generic"),
            ["gfx1200", "gfx1201"]
        );
        assert!(processors_served_by("gfx13-generic").is_empty());
        assert_eq!(
            generic_isa("gfx10-1-generic").map(|g| g.features),
            Some(&["xnack"][..])
        );
        // Each processor has at most one generic ISA, and every name parses
        // as a generic target id.
        let mut seen = std::collections::HashSet::new();
        for g in GENERIC_ISAS {
            assert!(t(g.name).is_generic(), "{}", g.name);
            for p in g.processors {
                assert!(seen.insert(*p), "{p} in two generic ISAs");
                assert!(!t(p).is_generic());
            }
        }
    }

    #[test]
    fn generic_fallback_keeps_supported_features() {
        let fb = |s: &str| t(s).generic_fallback().map(|g| g.to_string());
        assert_eq!(fb("gfx1100").as_deref(), Some("gfx11-generic"));
        assert_eq!(
            fb("gfx942:sramecc+:xnack-").as_deref(),
            Some("gfx9-4-generic:sramecc+:xnack-")
        );
        // gfx9-generic has no sramecc: a gfx9-generic object runs either way.
        assert_eq!(
            fb("gfx906:sramecc+:xnack-").as_deref(),
            Some("gfx9-generic:xnack-")
        );
        assert_eq!(
            fb("gfx1010:xnack+").as_deref(),
            Some("gfx10-1-generic:xnack+")
        );
        assert_eq!(fb("gfx90a:xnack+"), None);
        assert_eq!(fb("gfx11-generic"), None);
    }

    #[test]
    fn accepts_native_and_generic_code_objects() {
        let mi300 = t("gfx942:sramecc+:xnack-");
        assert!(mi300.accepts(&t("gfx942")));
        assert!(mi300.accepts(&t("gfx9-4-generic")));
        assert!(mi300.accepts(&t("gfx9-4-generic:xnack-")));
        assert!(!mi300.accepts(&t("gfx9-4-generic:xnack+")));
        assert!(!mi300.accepts(&t("gfx9-generic")));
        assert!(!mi300.accepts(&t("gfx90a")));
        let vega20 = t("gfx906:sramecc-:xnack-");
        assert!(vega20.accepts(&t("gfx9-generic")));
        // gfx9-generic cannot carry sramecc, so no such object serves gfx906.
        assert!(!vega20.accepts(&t("gfx9-generic:sramecc-")));
        assert!(!t("gfx90a").accepts(&t("gfx9-generic")));
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "gfx803",
            "gfx900:xnack-",
            "gfx90a:xnack+",
            "gfx942:sramecc+:xnack-",
            "gfx11-generic",
        ] {
            assert_eq!(t(s).to_string(), s);
            assert_eq!(s.parse::<TargetId>().ok(), Some(t(s)));
        }
    }
}
