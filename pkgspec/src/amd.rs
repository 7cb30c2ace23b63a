//! AMD's multi-arch release scheme: the processors AMD ships one device
//! package per target for, and how a detected processor maps to the target
//! name in those packages' names (`device-gfx942`, `amdrocm-fft8.2-gfx1100`).
//!
//! The splitter's default per-target spec, the naming profile that
//! reproduces AMD's native package names, and the fetcher's planning for
//! packages it did not split all read this one table
//! (docs/packaging.md "AMD's multi-arch packages").

/// The processors of AMD's device-extras table (`rocm[device-<target>]`),
/// plus gfx1250 and gfx1251, which AMD has announced: one device package
/// each.
pub const DEVICE_TARGETS: &[&str] = &[
    "gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx950", "gfx1010", "gfx1011", "gfx1012",
    "gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036", "gfx1100",
    "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153", "gfx1200",
    "gfx1201", "gfx1250", "gfx1251",
];

/// The extra that installs every target's device package.
pub const DEVICE_ALL_EXTRA: &str = "device-all";

/// The prefix of a per-target extra (`device-gfx942`).
pub const DEVICE_EXTRA_PREFIX: &str = "device-";

/// The device-package target serving a detected processor, as AMD's
/// detector `rocm-bootstrap` maps it: target features (`:sramecc+`) are
/// dropped, and a `-strict` variant (`gfx1250-strict`) is served by its
/// base processor's package. `None` when the text is not a known
/// processor ([`crate::KNOWN_PROCESSORS`]): a package named `vm1-gfxdead`
/// is not a device package, whatever its `gfx` and hex digits suggest.
pub fn device_target_of(detected: &str) -> Option<&str> {
    let processor = detected.split(':').next()?.trim();
    let processor = processor.strip_suffix("-strict").unwrap_or(processor);
    crate::KNOWN_PROCESSORS
        .contains(&processor)
        .then_some(processor)
}

/// The `device-<target>` extra for a target.
pub fn device_extra(target: &str) -> String {
    format!("{DEVICE_EXTRA_PREFIX}{target}")
}

/// The target a `device-<target>` extra names (`None` for `device-all`
/// and for extras that are not device extras). Extras are compared in
/// their PEP 685 normal form, which lower-cases them.
pub fn target_of_extra(extra: &str) -> Option<&str> {
    let target = extra.strip_prefix(DEVICE_EXTRA_PREFIX)?;
    if extra == DEVICE_ALL_EXTRA {
        return None;
    }
    device_target_of(target).filter(|t| *t == target)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn detected_processors_map_to_device_targets() {
        assert_eq!(device_target_of("gfx942:sramecc+:xnack-"), Some("gfx942"));
        assert_eq!(device_target_of("gfx1250-strict"), Some("gfx1250"));
        assert_eq!(device_target_of("gfx90a"), Some("gfx90a"));
        assert_eq!(device_target_of("../etc"), None);
        assert_eq!(device_target_of("gfx"), None);
        assert_eq!(device_target_of("gfx9/0"), None);
        assert_eq!(device_target_of("gfxdead"), None);
        assert_eq!(device_target_of("gfx9999"), None);
        assert_eq!(target_of_extra("device-gfx1100"), Some("gfx1100"));
        assert_eq!(target_of_extra("device-all"), None);
        assert_eq!(target_of_extra("device-gfx1250-strict"), None);
        assert_eq!(target_of_extra("cuda"), None);
        assert_eq!(device_extra("gfx942"), "device-gfx942");
        for t in DEVICE_TARGETS {
            assert!(crate::KNOWN_PROCESSORS.contains(t), "{t}");
            assert_eq!(device_target_of(t), Some(*t));
        }
    }
}
