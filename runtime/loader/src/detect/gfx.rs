//! Naming a GPU from KFD numbers: `gfx_target_version` -> processor name, and
//! the `capability` bit that decides `sramecc+`.

/// `HSA_CAP_SRAM_EDCSUPPORTED` in a node's `capability`. (0x80000 is a
/// reserved bit and means nothing.)
pub const CAP_SRAM_EDC_SUPPORTED: u32 = 0x0400_0000;

/// Processors whose target ids carry the `sramecc` feature.
pub const SRAMECC_PROCESSORS: [&str; 7] = [
    "gfx906", "gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx950",
];

/// Processors whose ISA carries the xnack feature: a process runs them
/// with xnack on or off, and the HIP runtime names the device's ISA with
/// that setting (`gfx90a:sramecc+:xnack-`). GFX10 and later never do.
pub const XNACK_PROCESSORS: [&str; 14] = [
    "gfx801", "gfx810", "gfx900", "gfx902", "gfx904", "gfx906", "gfx908", "gfx909", "gfx90a",
    "gfx90c", "gfx940", "gfx941", "gfx942", "gfx950",
];

/// Names a `gfx_target_version` (major*10000 + minor*100 + stepping): `gfx`,
/// then major in decimal, then minor and stepping as one lowercase hex digit
/// each, so 90010 -> `gfx90a` and 110501 -> `gfx1151`.
///
/// `None` when the value cannot be named: major 0, or minor or stepping above
/// 15 (they would not fit one hex digit).
pub fn processor_name(gfx_target_version: u32) -> Option<String> {
    let major = gfx_target_version / 10_000;
    let minor = (gfx_target_version / 100) % 100;
    let stepping = gfx_target_version % 100;
    if major == 0 || minor > 15 || stepping > 15 {
        return None;
    }
    Some(format!("gfx{major}{minor:x}{stepping:x}"))
}

/// The target id of a node: the processor plus `:sramecc+` / `:sramecc-` on
/// processors that have the feature (from the SRAM_EDC capability bit;
/// gfx908 is always `sramecc+`). xnack is a per-process mode that sysfs does
/// not show, so it is never part of the result.
pub fn target_id(processor: &str, capability: u32) -> String {
    if !SRAMECC_PROCESSORS.contains(&processor) {
        return processor.to_string();
    }
    let on = processor == "gfx908" || capability & CAP_SRAM_EDC_SUPPORTED != 0;
    format!("{processor}:sramecc{}", if on { '+' } else { '-' })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_md_table_decodes() {
        let table: &[(u32, &str)] = &[
            (80003, "gfx803"),
            (90000, "gfx900"),
            (90006, "gfx906"),
            (90008, "gfx908"),
            (90010, "gfx90a"),
            (90012, "gfx90c"),
            (90400, "gfx940"),
            (90401, "gfx941"),
            (90402, "gfx942"),
            (90500, "gfx950"),
            (100100, "gfx1010"),
            (100101, "gfx1011"),
            (100102, "gfx1012"),
            (100300, "gfx1030"),
            (100306, "gfx1036"),
            (110000, "gfx1100"),
            (110003, "gfx1103"),
            (110500, "gfx1150"),
            (110501, "gfx1151"),
            (110503, "gfx1153"),
            (120000, "gfx1200"),
            (120001, "gfx1201"),
            (120500, "gfx1250"),
        ];
        for &(value, name) in table {
            assert_eq!(processor_name(value).as_deref(), Some(name), "{value}");
        }
    }

    #[test]
    fn undecodable_values() {
        assert_eq!(processor_name(0), None);
        assert_eq!(processor_name(9999), None, "major 0");
        assert_eq!(processor_name(90016), None, "stepping 16");
        assert_eq!(processor_name(91600), None, "minor 16");
        assert_eq!(processor_name(90015).as_deref(), Some("gfx90f"));
        assert_eq!(processor_name(u32::MAX).as_deref(), None);
    }

    #[test]
    fn sramecc_rules() {
        assert_eq!(target_id("gfx942", 746_037_888), "gfx942:sramecc+");
        assert_eq!(target_id("gfx90a", 0), "gfx90a:sramecc-");
        assert_eq!(target_id("gfx908", 0), "gfx908:sramecc+");
        assert_eq!(target_id("gfx1100", 671_588_992), "gfx1100");
        // The SRAM_EDC bit means nothing on a processor without sramecc.
        assert_eq!(target_id("gfx1100", CAP_SRAM_EDC_SUPPORTED), "gfx1100");
        // 0x80000 is reserved, not SRAM_EDC.
        assert_eq!(target_id("gfx90a", 0x80000), "gfx90a:sramecc-");
    }
}
