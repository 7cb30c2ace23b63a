//! Write the host-only PE image: `.hip_fat` keeps its place in memory
//! (VirtualSize, RVA) but loses its file bytes (SizeOfRawData 0, the loader
//! zero-fills it), `.kpackrf` is appended after the last section, and every
//! wrapper in `.hipFatB` becomes a HIPK wrapper pointing at the marker.
//!
//! New file layout (old offsets on the left):
//! ```text
//! [0, SizeOfHeaders)        headers (+H zero bytes when the section table must grow)
//! [SizeOfHeaders, fat)      raw data before .hip_fat, shifted by +H
//! [fat, fat + raw)          .hip_fat raw data: removed
//! [fat + raw, end)          raw data after .hip_fat, shifted by H - raw
//! (new)                     .kpackrf raw data (FileAlignment-padded)
//! [end, EOF)                trailing data (COFF string table, ...) minus
//!                           the certificate table of a signed input
//! ```
//! The wrappers' base relocations stay valid: they patch the same fields,
//! which now hold `ImageBase + RVA(.kpackrf)`. Nothing else may point into
//! `.hip_fat`; that is checked before anything is written.
//!
//! The section table is written through `object::pe::ImageSectionHeader`
//! ([`Section::to_raw`]) and the header fields at offsets taken from
//! `object::pe`'s structures. `object::write::pe::Writer` is not used: it
//! builds an image from scratch (its own header layout, no overlay or
//! trailing data, `CheckSum` left 0) into one buffer, while this rewrite
//! keeps every other byte of the input, recomputes the checksum the
//! loader and signing tools check, and streams the output ([`Image`]).

use std::io;

use super::read::*;
use super::{PeError, Result};
use crate::elf::WrapperInfo;
use crate::image::Image;
use rocm_kpack_format::wrapper::FatbinWrapper;

/// The rewritten host-only image.
#[derive(Debug)]
pub struct Rewritten<'a> {
    /// Its bytes, described over the input ([`Image::write_to`] streams
    /// them), so the rewrite's memory does not grow with the image.
    pub image: Image<'a>,
    pub wrappers: Vec<WrapperInfo>,
    /// RVA of `.kpackrf`.
    pub marker_rva: u32,
    /// `ImageBase + marker_rva`, what the wrappers hold.
    pub marker_va: u64,
    /// File bytes of `.hip_fat` that left the file.
    pub removed: u64,
    /// The input's Authenticode signature was dropped (it no longer matches).
    pub signature_removed: bool,
}

fn align_up(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}

fn put(out: &mut Image<'_>, at: usize, bytes: &[u8]) -> Result<()> {
    out.patch(at, bytes)
        .ok_or_else(|| PeError::Malformed(format!("field at {at:#x} is outside the image")))
}

fn put_u32(out: &mut Image<'_>, at: usize, v: u32) -> Result<()> {
    put(out, at, &v.to_le_bytes())
}

fn get_u32(out: &Image<'_>, at: usize) -> Result<u32> {
    let mut b = [0u8; 4];
    out.read(at, &mut b)
        .ok_or_else(|| PeError::Malformed(format!("field at {at:#x} is outside the image")))?;
    Ok(u32::from_le_bytes(b))
}

/// The PE checksum (the `CheckSumMappedFile` algorithm), fed the file's
/// bytes in order so that a streamed image need not be built: a 16-bit
/// one's complement style sum of the file with the checksum field taken
/// as 0, plus the file length.
#[derive(Debug, Clone)]
pub struct PeChecksum {
    checksum_offset: usize,
    /// Bytes fed so far.
    len: usize,
    sum: u64,
    /// The first byte of a word split between two writes.
    pending: Option<u8>,
}

impl PeChecksum {
    pub fn new(checksum_offset: usize) -> Self {
        PeChecksum {
            checksum_offset,
            len: 0,
            sum: 0,
            pending: None,
        }
    }

    fn word(&mut self, at: usize, word: u16) {
        if at >= self.checksum_offset && at < self.checksum_offset + 4 {
            return;
        }
        self.sum += u64::from(word);
        self.sum = (self.sum & 0xffff) + (self.sum >> 16);
    }

    pub fn update(&mut self, mut bytes: &[u8]) {
        if let (Some(lo), Some((&hi, rest))) = (self.pending, bytes.split_first()) {
            self.pending = None;
            self.word(self.len - 1, u16::from_le_bytes([lo, hi]));
            self.len += 1;
            bytes = rest;
        }
        let mut pairs = bytes.chunks_exact(2);
        for pair in &mut pairs {
            self.word(self.len, u16::from_le_bytes([pair[0], pair[1]]));
            self.len += 2;
        }
        if let [last] = pairs.remainder() {
            self.pending = Some(*last);
            self.len += 1;
        }
    }

    /// The checksum of everything fed (an odd last byte counts as a word).
    pub fn finish(mut self) -> u32 {
        if let Some(lo) = self.pending.take() {
            self.word(self.len - 1, u16::from(lo));
        }
        let sum = (self.sum & 0xffff) + (self.sum >> 16);
        (sum as u32).wrapping_add(self.len as u32)
    }
}

impl io::Write for PeChecksum {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// [`PeChecksum`] of bytes in memory.
pub fn pe_checksum(data: &[u8], checksum_offset: usize) -> u32 {
    let mut sum = PeChecksum::new(checksum_offset);
    sum.update(data);
    sum.finish()
}

/// Maps input file offsets to output file offsets.
struct OffsetMap {
    headers: u64,
    grow: u64,
    fat_start: u64,
    fat_end: u64,
    raw_end: u64,
    marker_raw: u64,
    cert: Option<(u64, u64)>,
}

impl OffsetMap {
    fn map(&self, o: u64) -> Option<u64> {
        if o < self.headers {
            Some(o)
        } else if o < self.fat_start {
            Some(o + self.grow)
        } else if o < self.fat_end {
            None
        } else if o < self.raw_end {
            Some(o + self.grow - (self.fat_end - self.fat_start))
        } else {
            let base = o + self.grow - (self.fat_end - self.fat_start) + self.marker_raw;
            match self.cert {
                Some((start, end)) if o >= start && o < end => None,
                Some((start, end)) if o >= end => Some(base - (end - start)),
                _ => Some(base),
            }
        }
    }
}

/// Rewrites a fat image: `marker` goes into `.kpackrf`, each wrapper gets
/// the co_index of the bundle it pointed at (`bundle_offsets` are the
/// bundles' offsets in `.hip_fat`).
///
/// The phases, in order: [`wrapper_infos`], [`check_fat_unreferenced`],
/// [`plan_layout`] (what leaves the file, where the marker goes, room for
/// its section header), [`assemble`] the output, [`write_section_table`],
/// [`patch_headers`], [`patch_debug_directory`], [`patch_wrappers`], then
/// the checksum.
pub fn rewrite<'a>(
    fat: &FatPe<'a>,
    marker: &[u8],
    bundle_offsets: &[u64],
) -> Result<Rewritten<'a>> {
    let pe = &fat.pe;
    let wrappers = wrapper_infos(fat, bundle_offsets)?;
    check_fat_unreferenced(fat)?;
    let plan = plan_layout(fat, marker.len() as u64)?;

    let mut out = Image::new(pe.data);
    assemble(&mut out, &plan, marker)?;
    let new_sections = write_section_table(&mut out, fat, &plan, marker.len() as u64)?;
    patch_headers(&mut out, fat, &plan, new_sections.len())?;
    patch_debug_directory(&mut out, pe, &new_sections, &plan.map)?;
    patch_wrappers(&mut out, fat, &wrappers, &new_sections, plan.marker_va)?;

    // One pass over the image, through the write buffer only.
    let opt = pe.opt_offset;
    let mut checksum = PeChecksum::new(opt + OPT_CHECKSUM);
    out.write_to(&mut checksum)
        .map_err(|e| PeError::Malformed(format!("image: {e}")))?;
    put_u32(&mut out, opt + OPT_CHECKSUM, checksum.finish())?;

    Ok(Rewritten {
        removed: plan.fat_raw,
        image: out,
        wrappers,
        marker_rva: plan.marker_rva,
        marker_va: plan.marker_va,
        signature_removed: plan.map.cert.is_some(),
    })
}

/// The co_index of every wrapper: the bundle its pointer targets.
fn wrapper_infos(fat: &FatPe<'_>, bundle_offsets: &[u64]) -> Result<Vec<WrapperInfo>> {
    let pe = &fat.pe;
    let fs = pe.sections[fat.fatbin];
    let mut wrappers = Vec::with_capacity(fat.slots.len());
    for slot in &fat.slots {
        let off = u64::from(slot.target_rva - fs.rva);
        let co_index = bundle_offsets.binary_search(&off).map_err(|_| {
            PeError::Malformed(format!(
                "wrapper {} points at offset {off:#x} of {FATBIN_SECTION}, which is not the start of a bundle",
                slot.index
            ))
        })?;
        wrappers.push(WrapperInfo {
            index: slot.index,
            vaddr: pe.va(slot.rva)?,
            original_pointer: slot.wrapper.binary,
            co_index: co_index as u32,
            relocation: if slot.relocated {
                "base relocation DIR64".into()
            } else {
                "none (image not relocatable)".into()
            },
        });
    }
    Ok(wrappers)
}

/// Nothing but the wrappers may refer to .hip_fat: no base relocation, no
/// relocated pointer, no data directory.
fn check_fat_unreferenced(fat: &FatPe<'_>) -> Result<()> {
    let pe = &fat.pe;
    let data = pe.data;
    let fs = pe.sections[fat.fatbin];
    let fat_va_end = u64::from(fs.rva) + u64::from(fs.virtual_extent().max(fs.raw_size));
    let in_fat = |rva: u64| rva >= u64::from(fs.rva) && rva < fat_va_end;
    let wrapper_fields: std::collections::HashSet<u32> =
        fat.slots.iter().map(|s| s.rva + 8).collect();
    for r in &fat.relocs {
        if in_fat(u64::from(r.rva)) {
            return Err(PeError::Refused(format!(
                "a base relocation patches RVA {:#x}, inside {FATBIN_SECTION}, whose bytes are reclaimed",
                r.rva
            )));
        }
        if wrapper_fields.contains(&r.rva) {
            continue;
        }
        let value = match r.kind {
            REL_DIR64 => pe
                .rva_to_offset(r.rva, 8)
                .map(|o| u64_at(data, o, "relocated pointer"))
                .transpose()?,
            REL_HIGHLOW => pe
                .rva_to_offset(r.rva, 4)
                .map(|o| u32_at(data, o, "relocated pointer").map(u64::from))
                .transpose()?,
            other => {
                return Err(PeError::Unsupported(format!(
                    "base relocation type {other} at RVA {:#x} (x86-64 images use DIR64)",
                    r.rva
                )))
            }
        };
        // Relocations of zero-filled memory (.bss) hold nothing yet.
        let Some(value) = value else { continue };
        if let Some(rva) = value.checked_sub(pe.image_base) {
            if in_fat(rva) {
                return Err(PeError::Refused(format!(
                    "the pointer at RVA {:#x} points into {FATBIN_SECTION} (RVA {rva:#x}); only the fat binary \
                     wrappers may refer to device code",
                    r.rva
                )));
            }
        }
    }
    for (i, &(rva, size)) in pe.dirs.iter().enumerate() {
        if i != DIR_SECURITY
            && size != 0
            && (in_fat(u64::from(rva)) || in_fat(u64::from(rva) + u64::from(size) - 1))
        {
            return Err(PeError::Refused(format!(
                "data directory {i} (RVA {rva:#x}, {size:#x} bytes) lies inside {FATBIN_SECTION}"
            )));
        }
    }
    Ok(())
}

/// The output's layout.
struct Plan {
    map: OffsetMap,
    /// File bytes of `.hip_fat`.
    fat_raw: u64,
    file_len: u64,
    marker_rva: u32,
    marker_raw_ptr: u64,
    marker_va: u64,
    new_size_of_image: u64,
}

fn plan_layout(fat: &FatPe<'_>, marker_len: u64) -> Result<Plan> {
    let pe = &fat.pe;
    let fs = pe.sections[fat.fatbin];
    let fa = u64::from(pe.file_alignment);
    let sa = u64::from(pe.section_alignment);
    let fat_start = u64::from(fs.raw_ptr);
    let fat_raw = u64::from(fs.raw_size);
    if fat_start % fa != 0 || fat_raw % fa != 0 {
        return Err(PeError::Malformed(format!(
            "{FATBIN_SECTION} raw data [{fat_start:#x}, +{fat_raw:#x}) is not FileAlignment ({fa:#x}) aligned"
        )));
    }
    let fat_end = fat_start + fat_raw;
    for s in &pe.sections {
        if s.index != fat.fatbin && s.raw_size > 0 {
            let (a, b) = (
                u64::from(s.raw_ptr),
                u64::from(s.raw_ptr) + u64::from(s.raw_size),
            );
            if a < fat_end && b > fat_start {
                return Err(PeError::Malformed(format!(
                    "section {} raw data overlaps {FATBIN_SECTION}'s",
                    s.name()
                )));
            }
        }
    }
    let raw_end = pe
        .sections
        .iter()
        .filter(|s| s.raw_size > 0)
        .map(|s| u64::from(s.raw_ptr) + u64::from(s.raw_size))
        .max()
        .unwrap_or(u64::from(pe.size_of_headers));
    let headers = u64::from(pe.size_of_headers);
    let file_len = pe.data.len() as u64;
    let cert = match pe.dir(DIR_SECURITY) {
        // The security directory holds a file offset, not an RVA.
        Some((off, size)) => {
            let (start, end) = (u64::from(off), u64::from(off) + u64::from(size));
            if start < raw_end || end > file_len {
                return Err(PeError::Malformed(format!(
                    "certificate table [{start:#x}, {end:#x}) is not after the section data (ends {raw_end:#x}) within the file"
                )));
            }
            Some((start, end))
        }
        None => None,
    };
    let grow = header_room(pe, headers)?;
    let marker_raw = align_up(marker_len, fa);
    let map = OffsetMap {
        headers,
        grow,
        fat_start,
        fat_end,
        raw_end,
        marker_raw,
        cert,
    };
    let va_end = pe.sections_end();
    let marker_rva = u32::try_from(align_up(va_end, sa))
        .map_err(|_| PeError::Refused("the image has no address space left for .kpackrf".into()))?;
    let marker_raw_ptr = raw_end + grow - fat_raw;
    let new_size_of_image = align_up(u64::from(marker_rva) + marker_len, sa);
    let marker_va = pe.va(marker_rva)?;
    Ok(Plan {
        map,
        fat_raw,
        file_len,
        marker_rva,
        marker_raw_ptr,
        marker_va,
        new_size_of_image,
    })
}

/// Room for one more section header: how many bytes the headers grow
/// (0 when the padding after the section table is free).
fn header_room(pe: &Pe<'_>, headers: u64) -> Result<u64> {
    let data = pe.data;
    let fa = u64::from(pe.file_alignment);
    let sa = u64::from(pe.section_alignment);
    let table_end = pe.section_table + pe.sections.len() * SECTION_HEADER_SIZE;
    let new_table_end = (table_end + SECTION_HEADER_SIZE) as u64;
    let first_rva = pe
        .sections
        .iter()
        .map(|s| u64::from(s.rva))
        .min()
        .unwrap_or(sa);
    let grow = if new_table_end <= headers {
        0
    } else {
        align_up(new_table_end - headers, fa)
    };
    if headers + grow > first_rva {
        return Err(PeError::Refused(format!(
            "no room for a {MARKER_SECTION} section header: the headers would grow past the first section (RVA {first_rva:#x})"
        )));
    }
    // When the headers grow there is no padding to reuse.
    let slack_end = (headers as usize).min(table_end + SECTION_HEADER_SIZE);
    let slack = match slack_end.checked_sub(table_end) {
        Some(n) if n > 0 => bytes_at(
            data,
            table_end as u64,
            n as u64,
            "header padding after the section table",
        )?,
        _ => &[],
    };
    if slack.iter().any(|&b| b != 0) {
        return Err(PeError::Refused(format!(
            "the bytes after the section table (offset {table_end:#x}) are in use; no room for a {MARKER_SECTION} header"
        )));
    }
    for (i, &(rva, size)) in pe.dirs.iter().enumerate() {
        // Bound imports may live in the header padding.
        if i != DIR_SECURITY
            && size != 0
            && u64::from(rva) < new_table_end
            && u64::from(rva) + u64::from(size) > table_end as u64
        {
            return Err(PeError::Refused(format!(
                "data directory {i} occupies the header bytes a {MARKER_SECTION} header needs"
            )));
        }
    }
    Ok(grow)
}

/// Assembles the output: runs of the input around the reclaimed bytes.
fn assemble(out: &mut Image<'_>, plan: &Plan, marker: &[u8]) -> Result<()> {
    let m = &plan.map;
    let copy = |out: &mut Image<'_>, from: u64, to: u64, what: &str| -> Result<()> {
        let len = to.checked_sub(from).ok_or_else(|| {
            PeError::Malformed(format!("{what} [{from:#x}, {to:#x}) is reversed"))
        })?;
        out.copy(from as usize, len as usize).ok_or_else(|| {
            PeError::Malformed(format!("{what} [{from:#x}, {to:#x}) is outside the file"))
        })
    };
    copy(out, 0, m.headers, "headers")?;
    out.pad_to((m.headers + m.grow) as usize);
    copy(out, m.headers, m.fat_start, "raw data before .hip_fat")?;
    copy(out, m.fat_end, m.raw_end, "raw data after .hip_fat")?;
    debug_assert_eq!(out.len() as u64, plan.marker_raw_ptr);
    out.extend_from_slice(marker);
    out.pad_to((plan.marker_raw_ptr + m.marker_raw) as usize);
    match m.cert {
        Some((start, end)) => {
            copy(out, m.raw_end, start, "data before the certificate table")?;
            copy(out, end, plan.file_len, "data after the certificate table")?;
        }
        None => copy(out, m.raw_end, plan.file_len, "trailing data")?,
    }
    Ok(())
}

/// The section table: `.hip_fat` without file bytes, the others at their
/// new offsets, `.kpackrf` appended. Returns the new sections.
fn write_section_table(
    out: &mut Image<'_>,
    fat: &FatPe<'_>,
    plan: &Plan,
    marker_len: u64,
) -> Result<Vec<Section>> {
    let pe = &fat.pe;
    let mut new_sections = pe.sections.clone();
    for s in &mut new_sections {
        if s.index == fat.fatbin {
            s.raw_ptr = 0;
            s.raw_size = 0;
        } else if s.raw_size > 0 {
            let mapped = plan
                .map
                .map(u64::from(s.raw_ptr))
                .and_then(|o| u32::try_from(o).ok());
            s.raw_ptr = mapped
                .ok_or_else(|| PeError::Malformed(format!("section {} raw data", s.name())))?;
        }
    }
    let mut name = [0u8; 8];
    name.copy_from_slice(MARKER_SECTION.as_bytes());
    new_sections.push(Section {
        index: pe.sections.len(),
        name,
        virtual_size: marker_len as u32,
        rva: plan.marker_rva,
        raw_size: plan.map.marker_raw as u32,
        raw_ptr: plan.marker_raw_ptr as u32,
        characteristics: SCN_INITIALIZED_DATA | SCN_MEM_READ,
    });
    for s in &new_sections {
        let at = pe.section_table + s.index * SECTION_HEADER_SIZE;
        // Keep the relocation/line-number fields the input had (zero in
        // images, but not ours to change).
        let raw = match pe.section_headers.get(s.index) {
            Some(orig) => s.to_raw(orig),
            None => s.to_raw(&Default::default()),
        };
        put(out, at, object::pod::bytes_of(&raw))?;
    }
    Ok(new_sections)
}

/// The file header (section count, symbol table) and the optional header
/// (sizes; the certificate directory of a signed input cleared).
fn patch_headers(out: &mut Image<'_>, fat: &FatPe<'_>, plan: &Plan, sections: usize) -> Result<()> {
    let pe = &fat.pe;
    let fs = pe.sections[fat.fatbin];
    let m = &plan.map;
    let count =
        u16::try_from(sections).map_err(|_| PeError::Refused("too many sections".into()))?;
    put(
        out,
        pe.nt_offset + NT_NUMBER_OF_SECTIONS,
        &count.to_le_bytes(),
    )?;
    if pe.pointer_to_symbol_table != 0 {
        let mapped = m
            .map(u64::from(pe.pointer_to_symbol_table))
            .and_then(|o| u32::try_from(o).ok())
            .ok_or_else(|| {
                PeError::Refused("the COFF symbol table lies in reclaimed bytes".into())
            })?;
        put_u32(out, pe.nt_offset + NT_POINTER_TO_SYMBOL_TABLE, mapped)?;
    }

    let opt = pe.opt_offset;
    let mut init = u64::from(pe.size_of_initialized_data);
    if fs.characteristics & SCN_INITIALIZED_DATA != 0 {
        init = init.saturating_sub(plan.fat_raw);
    }
    init += m.marker_raw;
    put_u32(
        out,
        opt + OPT_SIZE_OF_INITIALIZED_DATA,
        u32::try_from(init).unwrap_or(u32::MAX),
    )?;
    put_u32(
        out,
        opt + OPT_SIZE_OF_IMAGE,
        u32::try_from(plan.new_size_of_image).unwrap_or(u32::MAX),
    )?;
    put_u32(out, opt + OPT_SIZE_OF_HEADERS, (m.headers + m.grow) as u32)?;
    if m.cert.is_some() {
        let at = pe.dirs_offset + 8 * DIR_SECURITY;
        put_u32(out, at, 0)?;
        put_u32(out, at + 4, 0)?;
    }
    Ok(())
}

/// Output file offset of `len` initialised bytes at `rva`.
fn out_offset(sections: &[Section], rva: u32, len: u32) -> Option<usize> {
    let s = sections.iter().find(|s| s.contains_rva(rva))?;
    let within = rva - s.rva;
    (u64::from(within) + u64::from(len) <= u64::from(s.raw_size.min(s.virtual_extent())))
        .then(|| s.raw_ptr as usize + within as usize)
}

/// Debug directory entries hold file offsets: moved with their data.
fn patch_debug_directory(
    out: &mut Image<'_>,
    pe: &Pe<'_>,
    sections: &[Section],
    map: &OffsetMap,
) -> Result<()> {
    let Some((rva, size)) = pe.dir(DIR_DEBUG) else {
        return Ok(());
    };
    let at = out_offset(sections, rva, size).ok_or_else(|| {
        PeError::Malformed(format!(
            "debug directory at RVA {rva:#x} is not in the file"
        ))
    })?;
    for e in 0..size as usize / DEBUG_ENTRY_SIZE {
        let field = at + e * DEBUG_ENTRY_SIZE + DEBUG_POINTER_TO_RAW_DATA;
        let ptr = get_u32(out, field)?;
        if ptr != 0 {
            let mapped = map
                .map(u64::from(ptr))
                .and_then(|o| u32::try_from(o).ok())
                .ok_or_else(|| {
                    PeError::Refused(format!(
                        "debug directory entry {e} points into reclaimed bytes ({ptr:#x})"
                    ))
                })?;
            put_u32(out, field, mapped)?;
        }
    }
    Ok(())
}

/// Every wrapper becomes a HIPK wrapper pointing at the marker.
fn patch_wrappers(
    out: &mut Image<'_>,
    fat: &FatPe<'_>,
    wrappers: &[WrapperInfo],
    sections: &[Section],
    marker_va: u64,
) -> Result<()> {
    for (slot, info) in fat.slots.iter().zip(wrappers) {
        let at = out_offset(
            sections,
            slot.rva,
            rocm_kpack_format::wrapper::WRAPPER_SIZE as u32,
        )
        .ok_or_else(|| PeError::Malformed(format!("wrapper {} is not in the file", slot.index)))?;
        let mut w = FatbinWrapper::hipk(marker_va, info.co_index);
        w.version = slot.wrapper.version;
        put(out, at, &w.to_bytes())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_matches_what_lld_link_stored() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/windows");
        for f in ["clang19/kpfix.dll", "clang19/kpapp.exe", "amdhip64.dll"] {
            let data = std::fs::read(dir.join(f)).expect("fixture");
            let pe = Pe::parse(&data).expect("parse");
            if pe.checksum != 0 {
                assert_eq!(
                    pe_checksum(&data, pe.opt_offset + OPT_CHECKSUM),
                    pe.checksum,
                    "{f}"
                );
            }
        }
        // Odd length: the last byte counts as a word.
        assert_eq!(pe_checksum(&[1, 0, 2], 100), 1 + 2 + 3);
    }

    /// Fed in pieces of any size (odd splits included), the checksum is
    /// the one of the whole buffer.
    #[test]
    fn checksum_streams() {
        let data: Vec<u8> = (0..70_001u32).map(|i| (i * 31 + i / 7) as u8).collect();
        let whole = pe_checksum(&data, 0x58);
        for step in [1, 2, 3, 7, 4096, 65_537] {
            let mut sum = PeChecksum::new(0x58);
            for piece in data.chunks(step) {
                sum.update(piece);
            }
            assert_eq!(sum.finish(), whole, "step {step}");
        }
    }

    #[test]
    fn offsets_move_around_the_removed_and_inserted_ranges() {
        let m = OffsetMap {
            headers: 0x400,
            grow: 0x200,
            fat_start: 0x1000,
            fat_end: 0x3000,
            raw_end: 0x4000,
            marker_raw: 0x200,
            cert: Some((0x4100, 0x4500)),
        };
        assert_eq!(m.map(0x10), Some(0x10));
        assert_eq!(m.map(0x400), Some(0x600));
        assert_eq!(m.map(0x1000), None);
        assert_eq!(m.map(0x2fff), None);
        assert_eq!(m.map(0x3000), Some(0x1200));
        assert_eq!(m.map(0x4000), Some(0x2400));
        assert_eq!(m.map(0x4200), None, "inside the dropped certificate");
        assert_eq!(m.map(0x4500), Some(0x2500));
        assert_eq!(align_up(1, 0x200), 0x200);
    }
}
