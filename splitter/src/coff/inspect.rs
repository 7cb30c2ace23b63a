//! What a PE image carries for `rocm-kpack inspect`: its offload bundles
//! (`.hip_fat`), its marker (`.kpackrf`), each wrapper of `.hipFatB` with
//! the pointer it holds and its co_index, and whether it is signed.

use rocm_kpack_format::bundle::parse_fatbin;
use rocm_kpack_format::marker::Marker;
use rocm_kpack_format::wrapper::{FatbinWrapper, WRAPPER_SIZE};
use serde::Serialize;

use super::read::{Pe, FATBIN_SECTION, MARKER_SECTION, WRAPPER_SECTION};
use super::Result;
use crate::elf::inspect::{binary_state, MarkerReport, WrapperReport};
use crate::inspect::{bundle_section_report, BundleSectionReport};

/// Report on one PE image.
#[derive(Debug, Serialize)]
pub struct PeReport {
    /// `PE32+ DLL`, `PE32 EXE`, ...
    pub image_type: String,
    /// `x86-64`, `ARM64`, `i386`, ...
    pub machine: String,
    /// `fat binary`, `split (host-only, kpack marker)` or `host-only (no device code)`.
    pub state: String,
    /// Carries an Authenticode certificate table.
    pub signed: bool,
    /// The bundles of `.hip_fat`, when it has file content.
    pub hip_fat: Option<BundleSectionReport>,
    /// The `.kpackrf` marker of a split image.
    pub marker: Option<MarkerReport>,
    /// Every wrapper of `.hipFatB` (`binary` is the in-file address, which
    /// base relocations shift if the image is loaded elsewhere).
    pub wrappers: Vec<WrapperReport>,
}

/// Inspects a PE image's fat binary parts.
pub fn inspect_pe(data: &[u8]) -> Result<PeReport> {
    let pe = Pe::parse(data)?;
    let image_type = format!(
        "{} {}",
        if pe.pe32_plus { "PE32+" } else { "PE32" },
        pe.kind()
    );

    let mut bundle_offsets = Vec::new();
    let mut fat_range = None;
    let hip_fat = match pe.find_section(FATBIN_SECTION)? {
        Some(i) if pe.sections[i].raw_size > 0 => {
            let section = pe.section_data(i)?;
            let report = bundle_section_report(section)?;
            bundle_offsets = parse_fatbin(section)?.iter().map(|b| b.offset).collect();
            let s = pe.sections[i];
            fat_range = Some((pe.va(s.rva)?, u64::from(s.virtual_extent())));
            Some(report)
        }
        _ => None,
    };
    let marker = match pe.find_section(MARKER_SECTION)? {
        Some(i) => {
            let m = Marker::parse(pe.section_data(i)?)?;
            Some(MarkerReport {
                address: pe.va(pe.sections[i].rva)?,
                kernel_name: m.kernel_name,
                kpack_search_paths: m.kpack_search_paths,
            })
        }
        None => None,
    };
    let mut wrappers = Vec::new();
    if let Some(wi) = pe.find_section(WRAPPER_SECTION)? {
        let s = pe.sections[wi];
        let data = pe.section_data(wi)?;
        let used = data
            .get(..(s.virtual_size as usize).min(data.len()))
            .unwrap_or(data);
        for (index, w) in used.chunks_exact(WRAPPER_SIZE).enumerate() {
            if w.iter().all(|&b| b == 0) {
                continue; // linker padding
            }
            let wrapper = FatbinWrapper::parse(w)?;
            wrappers.push(WrapperReport::new(
                index,
                wrapper.magic,
                wrapper.binary,
                wrapper.reserved1,
                fat_range,
                &bundle_offsets,
            ));
        }
    }
    let state = binary_state(marker.is_some(), hip_fat.is_some());
    Ok(PeReport {
        image_type,
        machine: pe.machine_name(),
        state,
        signed: pe.signed(),
        hip_fat,
        marker,
        wrappers,
    })
}
