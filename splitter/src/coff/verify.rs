//! Structural checks of a rewritten PE image, as written (mapped back): the
//! `object` crate must accept it, every section other than the three the
//! split touches must be byte-identical to the input's, the wrappers must be
//! HIPK wrappers pointing at the marker with the expected co_index, the base
//! relocations must be unchanged and none may patch `.hip_fat`, and the size
//! and checksum fields must be consistent.

use object::read::pe::PeFile64;
use rocm_kpack_format::wrapper::{FatbinWrapper, WRAPPER_SIZE};

use super::read::*;
use super::rewrite::pe_checksum;
use super::{PeError, Result};

/// What the rewrite promised.
pub struct Expected<'a> {
    pub marker: &'a [u8],
    pub marker_rva: u32,
    /// co_index per wrapper, in wrapper order.
    pub co_indices: &'a [u32],
}

fn fail(msg: String) -> PeError {
    PeError::Verify(msg)
}

/// Checks `bytes` (the rewrite of `input`).
pub fn verify(input: &FatPe<'_>, bytes: &[u8], exp: &Expected<'_>) -> Result<()> {
    PeFile64::parse(bytes).map_err(|e| fail(format!("object cannot parse the result: {e}")))?;
    let out = Pe::parse(bytes).map_err(|e| fail(e.to_string()))?;
    let inp = &input.pe;
    if out.sections.len() != inp.sections.len() + 1 {
        return Err(fail("section count".into()));
    }
    let Some(ms) = out.sections.last() else {
        return Err(fail("no sections".into()));
    };
    if ms.name() != MARKER_SECTION || ms.rva != exp.marker_rva {
        return Err(fail(format!(
            "last section is {} at {:#x}",
            ms.name(),
            ms.rva
        )));
    }
    if out
        .section_data(ms.index)
        .map_err(|e| fail(e.to_string()))?
        != exp.marker
    {
        return Err(fail("marker bytes differ".into()));
    }
    for (a, b) in inp.sections.iter().zip(&out.sections) {
        if a.name != b.name
            || a.rva != b.rva
            || a.virtual_size != b.virtual_size
            || a.characteristics != b.characteristics
        {
            return Err(fail(format!("section {} header changed", a.name())));
        }
        if a.index == input.fatbin {
            if b.raw_size != 0 {
                return Err(fail(format!("{FATBIN_SECTION} still has raw data")));
            }
            continue;
        }
        if a.raw_size != b.raw_size {
            return Err(fail(format!("section {} raw size changed", a.name())));
        }
        let (da, db) = (raw(inp, a)?, raw(&out, b)?);
        if a.index == input.wrappers {
            check_wrappers(input, &out, da, db, exp)?;
        } else if da != db && !only_debug_offsets_differ(inp, a, da, db) {
            return Err(fail(format!("section {} content changed", a.name())));
        }
    }
    // Raw data ranges must not overlap.
    let mut ranges: Vec<(u64, u64)> = out
        .sections
        .iter()
        .filter(|s| s.raw_size > 0)
        .map(|s| {
            (
                u64::from(s.raw_ptr),
                u64::from(s.raw_ptr) + u64::from(s.raw_size),
            )
        })
        .collect();
    ranges.sort_unstable();
    if ranges.windows(2).any(|w| w[0].1 > w[1].0) {
        return Err(fail("section raw data overlaps".into()));
    }
    if out.base_relocations().map_err(|e| fail(e.to_string()))? != input.relocs {
        return Err(fail("base relocations changed".into()));
    }
    let fs = out.sections[input.fatbin];
    if let Some(r) = input.relocs.iter().find(|r| fs.contains_rva(r.rva)) {
        return Err(fail(format!(
            "base relocation at {:#x} patches {FATBIN_SECTION}",
            r.rva
        )));
    }
    let sa = u64::from(out.section_alignment);
    let end = out.sections_end();
    if u64::from(out.size_of_image) != end.div_ceil(sa) * sa {
        return Err(fail(format!(
            "SizeOfImage {:#x} for sections ending at {end:#x}",
            out.size_of_image
        )));
    }
    if out.checksum != pe_checksum(bytes, out.opt_offset + OPT_CHECKSUM) {
        return Err(fail("checksum".into()));
    }
    if out.signed() {
        return Err(fail("the certificate table is still referenced".into()));
    }
    Ok(())
}

fn raw<'a>(pe: &Pe<'a>, s: &Section) -> Result<&'a [u8]> {
    pe.data
        .get(s.raw_ptr as usize..(s.raw_ptr as usize + s.raw_size as usize))
        .ok_or_else(|| fail(format!("section {} raw data outside the file", s.name())))
}

/// The debug directory's entries carry file offsets (`PointerToRawData`),
/// which move with the data: `a` and `b` may differ there and nowhere else.
fn only_debug_offsets_differ(pe: &Pe<'_>, s: &Section, a: &[u8], b: &[u8]) -> bool {
    let Some((rva, size)) = pe.dir(DIR_DEBUG).filter(|&(rva, _)| s.contains_rva(rva)) else {
        return false;
    };
    let mut expected = a.to_vec();
    let start = (rva - s.rva) as usize;
    for e in 0..size as usize / DEBUG_ENTRY_SIZE {
        let at = start + e * DEBUG_ENTRY_SIZE + DEBUG_POINTER_TO_RAW_DATA;
        if let (Some(dst), Some(src)) = (expected.get_mut(at..at + 4), b.get(at..at + 4)) {
            dst.copy_from_slice(src);
        }
    }
    expected == b
}

fn check_wrappers(
    input: &FatPe<'_>,
    out: &Pe<'_>,
    a: &[u8],
    b: &[u8],
    exp: &Expected<'_>,
) -> Result<()> {
    let base = input.pe.sections[input.wrappers].rva;
    let mut expected = a.to_vec();
    for (slot, &co) in input.slots.iter().zip(exp.co_indices) {
        let at = (slot.rva - base) as usize;
        let slot_bytes = b.get(at..).ok_or_else(|| {
            fail(format!(
                "wrapper {} at {at:#x} lies past the end of the section ({} bytes)",
                slot.index,
                b.len()
            ))
        })?;
        let w = FatbinWrapper::parse(slot_bytes).map_err(|e| fail(e.to_string()))?;
        if !w.is_hipk() || w.co_index() != co || Some(w.binary) != out.va(exp.marker_rva).ok() {
            return Err(fail(format!("wrapper {} is {w:?}", slot.index)));
        }
        if let Some(dst) = expected.get_mut(at..at + WRAPPER_SIZE) {
            dst.copy_from_slice(&w.to_bytes());
        }
    }
    if expected != b {
        return Err(fail(format!(
            "{WRAPPER_SECTION} changed outside the wrappers"
        )));
    }
    Ok(())
}
