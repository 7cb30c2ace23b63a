//! Target ids as clang writes them in the committed fixtures' bundles: every
//! one parses, prints back unchanged (clang writes the canonical form), and
//! its compatible variants follow docs/runtime.md.

use std::path::PathBuf;

use object::{Object, ObjectSection};
use rocm_kpack_format::bundle::parse_fatbin;
use rocm_kpack_format::target::{TargetId, AMDHSA_PREFIX};

fn fixture_targets(rel: &str) -> Vec<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file = object::File::parse(&*bytes).expect("ELF");
    let data = file
        .section_by_name(".hip_fatbin")
        .and_then(|s| s.data().ok())
        .expect(".hip_fatbin");
    let mut out = Vec::new();
    for b in parse_fatbin(data).expect("parse") {
        for e in &b.entries {
            if !e.is_host() {
                // The triple minus the offload kind is what HIP passes around.
                let (_, rest) = e.triple.split_once('-').expect("kind");
                assert!(rest.starts_with(AMDHSA_PREFIX), "{}", e.triple);
                out.push(rest.to_string());
            }
        }
    }
    out
}

#[test]
fn clang_target_ids_parse_and_print_canonically() {
    for rel in [
        "clang15/libmulti.so",
        "clang19/libmulti.so",
        "clang19-compressed/app_pie",
    ] {
        let ids = fixture_targets(rel);
        assert!(!ids.is_empty());
        for full in ids {
            let id = TargetId::parse(&full).unwrap_or_else(|e| panic!("{full}: {e}"));
            let bare = &full[AMDHSA_PREFIX.len()..];
            assert_eq!(id.to_string(), bare, "{rel}");
            let variants = id.compatible_variants();
            assert_eq!(variants.first().map(String::as_str), Some(bare));
            assert_eq!(variants.last().map(String::as_str), Some(id.processor()));
            assert_eq!(variants.len(), 1 << id.features().len());
            assert_eq!(id.is_generic(), bare == "gfx11-generic");
        }
    }
}

#[test]
fn device_variants_select_the_right_fixture_code_objects() {
    // For a gfx90a device with xnack on, the clang-15 fixture offers
    // gfx90a:xnack+ (usable) and gfx90a:xnack- (not); the first variant that
    // exists wins.
    let available: Vec<String> = fixture_targets("clang15/app_pie")
        .iter()
        .map(|t| t[AMDHSA_PREFIX.len()..].to_string())
        .collect();
    let pick = |device: &str| {
        let dev = TargetId::parse(device).expect("device");
        dev.compatible_variants()
            .into_iter()
            .find(|v| available.contains(v))
    };
    assert_eq!(
        pick("gfx90a:sramecc+:xnack+").as_deref(),
        Some("gfx90a:xnack+")
    );
    assert_eq!(
        pick("gfx90a:sramecc-:xnack-").as_deref(),
        Some("gfx90a:xnack-")
    );
    assert_eq!(
        pick("amdgcn-amd-amdhsa--gfx1100").as_deref(),
        Some("gfx1100")
    );
    assert_eq!(pick("gfx942:sramecc+:xnack-"), None);
}
