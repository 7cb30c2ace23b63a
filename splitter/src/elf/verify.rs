//! Structural checks of a rewritten host-only ELF, run before it is written:
//! the `object` crate must parse it, and our own checks cover what loaders
//! and binutils rely on (segment order and congruence, overlaps, PHDR
//! coverage, string tables, section placement) plus the split itself (marker
//! content, every wrapper HIPK and pointing at the marker through its
//! relocation).

use std::collections::BTreeMap;

use object::read::elf::{ElfFile64, ProgramHeader as _};
use object::{LittleEndian, Object, ObjectSection};
use rocm_kpack_format::wrapper::FatbinWrapper;

use super::read::*;
use super::rewrite::{slot_pointer, HIPK_MAGIC, MARKER_SECTION, WRAPPER_SECTION, WRAPPER_SIZE};
use super::{ElfError, Result};

/// What the rewritten file must contain.
#[derive(Debug)]
pub struct Expected<'a> {
    /// `.rocm_kpack_ref` content.
    pub marker: &'a [u8],
    /// Address of the marker.
    pub marker_vaddr: u64,
    /// co_index of each wrapper, in section order.
    pub co_indices: &'a [u32],
}

fn fail(msg: impl Into<String>) -> ElfError {
    ElfError::Verify(msg.into())
}

/// Checks `bytes` (a rewritten host-only binary) against `expected`.
pub fn verify(bytes: &[u8], expected: &Expected<'_>) -> Result<()> {
    verify_with_object(bytes, expected)?;
    let elf = Elf::parse(bytes).map_err(|e| fail(format!("does not parse: {e}")))?;
    check_structure(&elf)?;
    check_split(&elf, expected)
}

/// Independent parse with the `object` crate: headers, sections, names,
/// segments, the marker section.
fn verify_with_object(bytes: &[u8], expected: &Expected<'_>) -> Result<()> {
    let file = ElfFile64::<LittleEndian>::parse(bytes)
        .map_err(|e| fail(format!("object crate cannot parse the output: {e}")))?;
    for section in file.sections() {
        section
            .name()
            .map_err(|e| fail(format!("section {}: bad name: {e}", section.index().0)))?;
        if section.kind() != object::SectionKind::UninitializedData {
            section
                .data()
                .map_err(|e| fail(format!("section {}: bad data: {e}", section.index().0)))?;
        }
    }
    for ph in file.elf_program_headers() {
        ph.data(file.endian(), file.data())
            .map_err(|_| fail("a program header's data is out of range"))?;
    }
    let marker = file
        .section_by_name(MARKER_SECTION)
        .ok_or_else(|| fail(format!("object crate finds no {MARKER_SECTION}")))?;
    if marker.address() != expected.marker_vaddr || marker.data().ok() != Some(expected.marker) {
        return Err(fail(format!(
            "{MARKER_SECTION} seen by the object crate differs from the marker written"
        )));
    }
    Ok(())
}

/// Generic ELF structure checks.
pub fn check_structure(elf: &Elf<'_>) -> Result<()> {
    let len = elf.data.len() as u64;
    let (phoff, shoff) = (elf.phoff(), elf.shoff());
    let pht = (phoff, phoff + elf.phdrs.len() as u64 * PHDR_SIZE as u64);
    let sht = (shoff, shoff + elf.shdrs.len() as u64 * SHDR_SIZE as u64);

    // Segments.
    let loads: Vec<&Phdr> = elf.phdrs.iter().filter(|p| p.p_type == PT_LOAD).collect();
    let first_load = elf.phdrs.iter().position(|p| p.p_type == PT_LOAD);
    for (i, p) in elf.phdrs.iter().enumerate() {
        if p.p_filesz > 0 && p.p_offset.checked_add(p.p_filesz).is_none_or(|e| e > len) {
            return Err(fail(format!(
                "program header {i} extends past the end of the file"
            )));
        }
        if matches!(p.p_type, PT_PHDR | PT_INTERP) && first_load.is_some_and(|f| i > f) {
            return Err(fail(format!(
                "program header {i} (PT_PHDR/PT_INTERP) follows a PT_LOAD"
            )));
        }
        if p.p_type != PT_LOAD {
            continue;
        }
        if p.p_align > 1 && !p.p_align.is_power_of_two() {
            return Err(fail(format!(
                "PT_LOAD {i}: p_align {:#x} not a power of two",
                p.p_align
            )));
        }
        if p.p_align > 1 && p.p_offset % p.p_align != p.p_vaddr % p.p_align {
            return Err(fail(format!(
                "PT_LOAD {i}: p_offset {:#x} and p_vaddr {:#x} are not congruent modulo {:#x}",
                p.p_offset, p.p_vaddr, p.p_align
            )));
        }
        if p.p_filesz > p.p_memsz {
            return Err(fail(format!("PT_LOAD {i}: p_filesz > p_memsz")));
        }
    }
    for w in loads.windows(2) {
        if let [a, b] = w {
            if b.p_vaddr < a.p_vaddr.saturating_add(a.p_memsz) {
                return Err(fail(format!(
                    "PT_LOAD at {:#x} is not sorted after / overlaps the one at {:#x}",
                    b.p_vaddr, a.p_vaddr
                )));
            }
        }
    }
    let mut by_off: Vec<&&Phdr> = loads.iter().filter(|p| p.p_filesz > 0).collect();
    by_off.sort_by_key(|p| p.p_offset);
    for w in by_off.windows(2) {
        if let [a, b] = w {
            if b.p_offset < a.p_offset + a.p_filesz {
                return Err(fail(format!(
                    "PT_LOADs at file offsets {:#x} and {:#x} share file bytes",
                    a.p_offset, b.p_offset
                )));
            }
        }
    }
    // The program header table must be loaded (PT_PHDR, ld.so's l_phdr).
    let covering = loads
        .iter()
        .find(|p| p.p_filesz > 0 && pht.0 >= p.p_offset && pht.1 <= p.p_offset + p.p_filesz);
    let Some(covering) = covering else {
        return Err(fail("the program header table is not covered by a PT_LOAD"));
    };
    let pht_vaddr = covering.p_vaddr.wrapping_add(pht.0 - covering.p_offset);
    let phdr_segs: Vec<&Phdr> = elf.phdrs.iter().filter(|p| p.p_type == PT_PHDR).collect();
    if phdr_segs.len() > 1 {
        return Err(fail("more than one PT_PHDR"));
    }
    if let Some(p) = phdr_segs.first() {
        if p.p_offset != pht.0 || p.p_filesz != pht.1 - pht.0 || p.p_vaddr != pht_vaddr {
            return Err(fail(format!(
                "PT_PHDR ({:#x}, {:#x}, {:#x} bytes) does not describe the program header table ({:#x}, {pht_vaddr:#x}, {} bytes)",
                p.p_offset, p.p_vaddr, p.p_filesz, pht.0, pht.1 - pht.0
            )));
        }
    }
    if pht.1 > len || sht.1 > len {
        return Err(fail("a header table extends past the end of the file"));
    }
    super::phdr::check(elf).map_err(|m| fail(m.to_string()))?;

    // Sections.
    let mut ranges: Vec<(u64, u64, String)> = vec![
        (0, EHDR_SIZE as u64, "ELF header".into()),
        (pht.0, pht.1, "program header table".into()),
        (sht.0, sht.1, "section header table".into()),
    ];
    for (i, s) in elf.shdrs.iter().enumerate().skip(1) {
        let name = elf
            .section_name(i)
            .map_err(|e| fail(format!("section {i}: {e}")))?;
        let fsize = s.file_size();
        let end = s
            .sh_offset
            .checked_add(fsize)
            .filter(|&e| e <= len)
            .ok_or_else(|| fail(format!("section {name} extends past the end of the file")))?;
        if fsize > 0 {
            ranges.push((s.sh_offset, end, name.clone()));
        }
        if s.sh_type == SHT_STRTAB && s.sh_size > 0 {
            let d = elf.section_data(i).map_err(|e| fail(e.to_string()))?;
            if d.first() != Some(&0) || d.last() != Some(&0) {
                return Err(fail(format!(
                    "string table {name} does not start and end with NUL"
                )));
            }
        }
        if s.is_alloc() && s.sh_size > 0 {
            let inside = loads.iter().any(|p| {
                let in_mem = s.sh_addr >= p.p_vaddr
                    && s.sh_addr.saturating_add(s.sh_size) <= p.p_vaddr.saturating_add(p.p_memsz);
                if s.sh_type == SHT_NOBITS {
                    in_mem
                } else {
                    in_mem
                        && p.contains_file_vaddr(s.sh_addr, s.sh_size)
                        && s.sh_offset.checked_sub(p.p_offset) == s.sh_addr.checked_sub(p.p_vaddr)
                }
            });
            if !inside {
                return Err(fail(format!(
                    "allocated section {name} is not placed consistently inside a PT_LOAD"
                )));
            }
        }
    }
    if elf.shdrs.is_empty() {
        return Err(fail("no section headers"));
    }
    let shstr = elf.shstrtab().map_err(|e| fail(e.to_string()))?;
    if shstr.first() != Some(&0) || shstr.last() != Some(&0) {
        return Err(fail("section name table does not start and end with NUL"));
    }
    ranges.sort();
    for w in ranges.windows(2) {
        if let [a, b] = w {
            if b.0 < a.1 {
                return Err(fail(format!("{} and {} overlap in the file", a.2, b.2)));
            }
        }
    }
    Ok(())
}

/// The split itself: marker, wrappers, relocations.
fn check_split(elf: &Elf<'_>, expected: &Expected<'_>) -> Result<()> {
    let mi = elf
        .find_section(MARKER_SECTION)
        .map_err(|e| fail(e.to_string()))?
        .ok_or_else(|| fail(format!("no {MARKER_SECTION} section")))?;
    let ms = &elf.shdrs[mi];
    if !ms.is_alloc() || ms.sh_addr != expected.marker_vaddr {
        return Err(fail(format!(
            "{MARKER_SECTION} is not allocated at the marker address"
        )));
    }
    let at_vaddr = elf
        .vaddr_to_offset(expected.marker_vaddr, expected.marker.len() as u64)
        .and_then(|o| get(elf.data, o, expected.marker.len() as u64, "marker").ok());
    if at_vaddr != Some(expected.marker) {
        return Err(fail("the marker address does not map to the marker bytes"));
    }
    if let Some(seg) = elf
        .phdrs
        .iter()
        .find(|p| p.p_type == PT_LOAD && p.contains_file_vaddr(expected.marker_vaddr, 1))
    {
        if seg.p_flags.intersects(PF_W) {
            return Err(fail("the marker is in a writable segment"));
        }
    }
    let wi = elf
        .find_section(WRAPPER_SECTION)
        .map_err(|e| fail(e.to_string()))?
        .ok_or_else(|| fail(format!("no {WRAPPER_SECTION} section")))?;
    let ws = elf.shdrs[wi];
    let wdata = elf.section_data(wi).map_err(|e| fail(e.to_string()))?;
    if wdata.len() as u64 != expected.co_indices.len() as u64 * WRAPPER_SIZE {
        return Err(fail("wrapper count changed"));
    }
    let relocs = elf.dynamic_relocations().map_err(|e| fail(e.to_string()))?;
    let mut by_offset: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, r) in relocs.iter().enumerate() {
        by_offset.entry(r.r_offset).or_default().push(i);
    }
    for (i, (w, &co)) in wdata
        .chunks_exact(WRAPPER_SIZE as usize)
        .zip(expected.co_indices)
        .enumerate()
    {
        let w = FatbinWrapper::parse(w).map_err(|e| fail(format!("wrapper {i}: {e}")))?;
        if w.magic != HIPK_MAGIC {
            return Err(fail(format!("wrapper {i} is not a HIPK wrapper")));
        }
        if w.reserved1 & 0xffff_ffff != u64::from(co) {
            return Err(fail(format!("wrapper {i} carries the wrong co_index")));
        }
        let slot = ws.sh_addr.wrapping_add(i as u64 * WRAPPER_SIZE + 8);
        let (p, ri) = slot_pointer(elf, &relocs, &by_offset, slot)
            .map_err(|e| fail(format!("wrapper {i}: {e}")))?;
        // The file holds the marker address too, except where a REL
        // R_X86_64_64 keeps `marker - S` in place as its addend.
        let symbolic_rel = ri.and_then(|r| relocs.get(r)).is_some_and(|r| {
            !r.table.has_addend() && r.table != RelocTable::Relr && r.r_type == R_X86_64_64
        });
        if !symbolic_rel && w.binary != expected.marker_vaddr {
            return Err(fail(format!(
                "wrapper {i}: the in-file pointer is not the marker address"
            )));
        }
        if p != expected.marker_vaddr {
            return Err(fail(format!(
                "wrapper {i}: its relocation yields {p:#x}, not the marker address"
            )));
        }
    }
    Ok(())
}
