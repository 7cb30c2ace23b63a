//! What an ELF file carries for `rocm-kpack inspect`: its offload bundles
//! (fat binary), its marker (split binary), and each fat binary wrapper with
//! the pointer it holds (through its dynamic relocation) and its co_index.

use std::collections::BTreeMap;

use rocm_kpack_format::marker::Marker;
use rocm_kpack_format::wrapper::{FatbinWrapper, HIPF_MAGIC, HIPK_MAGIC, WRAPPER_SIZE};
use serde::Serialize;

use super::read::{Elf, ET_DYN, ET_EXEC, PT_INTERP};
use super::rewrite::{slot_pointer, FATBIN_SECTION, MARKER_SECTION, WRAPPER_SECTION};
use super::Result;
use crate::inspect::{bundle_section_report, BundleSectionReport};

/// Report on one ELF file.
#[derive(Debug, Serialize)]
pub struct ElfReport {
    /// `executable`, `PIE executable` or `shared object`.
    pub elf_type: String,
    /// `fat binary`, `split (host-only, kpack marker)` or `host-only (no device code)`.
    pub state: String,
    /// The bundles of `.hip_fatbin`, when it has content.
    pub hip_fatbin: Option<BundleSectionReport>,
    /// The `.rocm_kpack_ref` marker of a split binary.
    pub marker: Option<MarkerReport>,
    /// Every wrapper of `.hipFatBinSegment`.
    pub wrappers: Vec<WrapperReport>,
}

/// A decoded `.rocm_kpack_ref`.
#[derive(Debug, Serialize)]
pub struct MarkerReport {
    /// Address of the marker section.
    pub address: u64,
    pub kernel_name: String,
    pub kpack_search_paths: Vec<String>,
}

/// One `__CudaFatBinaryWrapper`.
#[derive(Debug, Serialize)]
pub struct WrapperReport {
    pub index: usize,
    /// `HIPF`, `HIPK`, or the magic in hex.
    pub magic: String,
    /// The `binary` pointer as the loader sets it (relocation applied).
    pub binary: u64,
    /// HIPK: from `reserved1`; HIPF: the index of the bundle it points at.
    pub co_index: Option<u32>,
}

impl WrapperReport {
    /// A wrapper whose `binary` pointer (relocation applied) is `binary`:
    /// HIPK carries its co_index in `reserved1`, HIPF points at a bundle of
    /// the device code section (at `fat_range` = (address, size), bundles at
    /// `bundle_offsets`).
    pub fn new(
        index: usize,
        magic: u32,
        binary: u64,
        reserved1: u64,
        fat_range: Option<(u64, u64)>,
        bundle_offsets: &[u64],
    ) -> WrapperReport {
        let (magic, co_index) = match magic {
            HIPK_MAGIC => ("HIPK".to_string(), Some((reserved1 & 0xffff_ffff) as u32)),
            HIPF_MAGIC => {
                let co = fat_range.and_then(|(addr, size)| {
                    let off = binary.checked_sub(addr).filter(|&o| o < size)?;
                    u32::try_from(bundle_offsets.binary_search(&off).ok()?).ok()
                });
                ("HIPF".to_string(), co)
            }
            other => (format!("{other:#010x}"), None),
        };
        WrapperReport {
            index,
            magic,
            binary,
            co_index,
        }
    }
}

/// The `state` line of an ELF or PE report.
pub fn binary_state(has_marker: bool, has_device_code: bool) -> String {
    if has_marker {
        "split (host-only, kpack marker)"
    } else if has_device_code {
        "fat binary"
    } else {
        "host-only (no device code)"
    }
    .to_string()
}

/// Inspects an ELF file's fat binary parts.
pub fn inspect_elf(data: &[u8]) -> Result<ElfReport> {
    let elf = Elf::parse(data)?;
    let elf_type = match elf.file_type() {
        ET_EXEC => "executable",
        ET_DYN if elf.phdrs.iter().any(|p| p.p_type == PT_INTERP) => "PIE executable",
        ET_DYN => "shared object",
        _ => "other",
    }
    .to_string();

    let fatbin = elf.find_section(FATBIN_SECTION)?;
    let mut bundle_offsets = Vec::new();
    let mut fatbin_range = None;
    let hip_fatbin = match fatbin {
        Some(i) if elf.shdrs[i].sh_type != super::read::SHT_NOBITS => {
            let sh = elf.shdrs[i];
            let section = elf.section_data(i)?;
            let report = bundle_section_report(section)?;
            bundle_offsets = rocm_kpack_format::bundle::parse_fatbin(section)?
                .iter()
                .map(|b| b.offset)
                .collect();
            fatbin_range = Some((sh.sh_addr, sh.sh_size));
            Some(report)
        }
        _ => None,
    };

    let marker = match elf.find_section(MARKER_SECTION)? {
        Some(i) => {
            let m = Marker::parse(elf.section_data(i)?)?;
            Some(MarkerReport {
                address: elf.shdrs[i].sh_addr,
                kernel_name: m.kernel_name,
                kpack_search_paths: m.kpack_search_paths,
            })
        }
        None => None,
    };

    let mut wrappers = Vec::new();
    if let Some(wi) = elf.find_section(WRAPPER_SECTION)? {
        let ws = elf.shdrs[wi];
        let wdata = elf.section_data(wi)?;
        let relocs = elf.dynamic_relocations()?;
        let mut by_offset: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for (i, r) in relocs.iter().enumerate() {
            by_offset.entry(r.r_offset).or_default().push(i);
        }
        for (index, w) in wdata.chunks_exact(WRAPPER_SIZE).enumerate() {
            let w = FatbinWrapper::parse(w)?;
            let slot = ws.sh_addr.wrapping_add((index * WRAPPER_SIZE) as u64 + 8);
            let binary = slot_pointer(&elf, &relocs, &by_offset, slot)
                .map(|(p, _)| p)
                .unwrap_or(w.binary);
            wrappers.push(WrapperReport::new(
                index,
                w.magic,
                binary,
                w.reserved1,
                fatbin_range,
                &bundle_offsets,
            ));
        }
    }

    let state = binary_state(marker.is_some(), hip_fatbin.is_some());
    Ok(ElfReport {
        elf_type,
        state,
        hip_fatbin,
        marker,
        wrappers,
    })
}
