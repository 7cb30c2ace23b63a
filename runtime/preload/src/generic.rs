//! Generic ISA fallbacks: a device that finds no native code object can run
//! one built for its generic family (LLVM's `gfx*-generic` targets). The
//! table follows LLVM's AMDGPU processor list.

use rocm_kpack::target::TargetId;

/// (generic processor, features it can carry, members).
const FAMILIES: &[(&str, &[&str], &[&str])] = &[
    ("gfx9-generic", &["xnack"], &["gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"]),
    ("gfx9-4-generic", &["sramecc", "xnack"], &["gfx940", "gfx941", "gfx942", "gfx950"]),
    ("gfx10-1-generic", &["xnack"], &["gfx1010", "gfx1011", "gfx1012", "gfx1013"]),
    (
        "gfx10-3-generic",
        &[],
        &["gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036"],
    ),
    (
        "gfx11-generic",
        &[],
        &["gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"],
    ),
    ("gfx12-generic", &[], &["gfx1200", "gfx1201"]),
];

/// The generic target id a device may fall back to, keeping the device's
/// settings of the features the generic family supports.
pub fn generic_for(target: &str) -> Option<String> {
    let id = TargetId::parse(target).ok()?;
    if id.is_generic() {
        return None;
    }
    let (generic, features, _) = FAMILIES
        .iter()
        .find(|(_, _, members)| members.contains(&id.processor()))?;
    let mut out = (*generic).to_owned();
    for f in id.features() {
        if features.contains(&f.name.as_str()) {
            out.push(':');
            out.push_str(&f.name);
            out.push(if f.enabled { '+' } else { '-' });
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_devices_to_generic_families() {
        assert_eq!(generic_for("gfx1100").as_deref(), Some("gfx11-generic"));
        assert_eq!(generic_for("gfx942:sramecc+:xnack-").as_deref(), Some("gfx9-4-generic:sramecc+:xnack-"));
        assert_eq!(generic_for("gfx90a:xnack+"), None);
        assert_eq!(generic_for("gfx11-generic"), None);
        assert_eq!(generic_for("nonsense"), None);
    }
}
