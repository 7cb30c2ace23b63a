//! Plan and write the host-only ELF: `.hip_fatbin` becomes NOBITS and its
//! pages leave the file, `.rocm_kpack_ref` arrives in a new read-only
//! PT_LOAD after every other, and every wrapper in `.hipFatBinSegment`
//! becomes a HIPK wrapper pointing at the marker, in the file and in its
//! dynamic relocation. The program header table, a few entries longer,
//! stays right after the ELF header (docs/formats.md, "Where the program
//! header table lives"); the sections it grows over move into the new
//! PT_LOAD ([`Room`]).
//!
//! New file layout (offsets in the output):
//! ```text
//! [0, fo)                      unchanged, but for the longer program header table
//!                              and the sections that made room for it (zeroed)
//! [fo, fo+fill)                zeros: the part of .hip_fatbin that cannot leave
//! [fo+fill, K-delta)           unchanged content after .hip_fatbin, shifted by -delta
//! [N0, ...)                    new PT_LOAD: the moved sections, the marker
//! [...)                        non-loaded sections that followed all segments (+ grown .shstrtab)
//! [...)                        section header table (one more entry)
//! ```
//! The segment that held `.hip_fatbin` becomes the part before it, a
//! segment of its zeros with no file bytes (whole pages), and the part
//! after it.
//! `delta` is a multiple of every moved segment's `p_align`, so each moved
//! segment keeps `p_offset == p_vaddr (mod p_align)`; virtual addresses of
//! existing content never change, but for the sections that made room for
//! the table, which only program headers and dynamic entries find (they
//! follow them).
//!
//! The headers are read as `object::elf` types ([`super::read`]) and
//! written back through them ([`Phdr::to_raw`], [`Shdr::to_raw`],
//! [`Elf::header_bytes`]). The layout itself is planned here, not by
//! `object::build::elf::Builder`: the builder lays every section out anew
//! (new offsets, merged string tables, its own padding), so the kept bytes
//! would move, and it writes the whole output into one buffer, while the
//! split keeps every byte before `.hip_fatbin` at its offset, keeps each
//! moved segment congruent to its alignment, and streams the output over
//! the input ([`Image`]) without holding the host code.

use std::collections::BTreeMap;

use rocm_kpack_format::wrapper::FatbinWrapper;

use super::read::*;
use super::room::Room;
use super::{ElfError, Result};
use crate::image::Image;

/// x86-64 page size: the granularity at which ld.so maps file pages.
const PAGE: u64 = 4096;
pub use rocm_kpack_format::wrapper::{HIPF_MAGIC, HIPK_MAGIC};
/// Size of one `__CudaFatBinaryWrapper`.
pub const WRAPPER_SIZE: u64 = rocm_kpack_format::wrapper::WRAPPER_SIZE as u64;
/// The name of the marker section.
pub const MARKER_SECTION: &str = rocm_kpack_format::marker::ELF_SECTION;
pub const FATBIN_SECTION: &str = ".hip_fatbin";
pub const WRAPPER_SECTION: &str = ".hipFatBinSegment";

/// What kind of binary the input is.
#[derive(Debug)]
pub enum Classification<'a> {
    /// No `.hip_fatbin`: nothing to split.
    HostOnly,
    /// Already split (marker section or HIPK wrappers); the reason says which.
    AlreadySplit(String),
    /// A fat binary this module can split.
    Fat(FatElf<'a>),
}

/// A parsed fat binary: where its device code and wrappers are.
#[derive(Debug)]
pub struct FatElf<'a> {
    pub elf: Elf<'a>,
    /// Section index of `.hip_fatbin`.
    pub fatbin: usize,
    /// Section index of `.hipFatBinSegment`.
    pub wrappers: usize,
    /// Program header index of the PT_LOAD holding `.hip_fatbin`.
    pub load: usize,
}

impl<'a> FatElf<'a> {
    /// The `.hip_fatbin` bytes (the offload bundles).
    pub fn fatbin_bytes(&self) -> Result<&'a [u8]> {
        self.elf.section_data(self.fatbin)
    }

    /// File offset and size of `.hip_fatbin`.
    pub fn fatbin_file_range(&self) -> (u64, u64) {
        let s = &self.elf.shdrs[self.fatbin.min(self.elf.shdrs.len().saturating_sub(1))];
        (s.sh_offset, s.sh_size)
    }
}

/// One fat binary wrapper of the input and what it became.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WrapperInfo {
    /// Position in `.hipFatBinSegment`.
    pub index: usize,
    /// Address of the wrapper.
    pub vaddr: u64,
    /// Where its `binary` pointer pointed (inside `.hip_fatbin`).
    pub original_pointer: u64,
    /// Index of that bundle in the section's bundle sequence.
    pub co_index: u32,
    /// How the pointer is set at load time (`RELA R_X86_64_RELATIVE`, `in place`, ...).
    pub relocation: String,
}

/// The rewritten host-only binary.
#[derive(Debug)]
pub struct Rewritten<'a> {
    /// Its bytes, described over the input ([`Image::write_to`] streams
    /// them; nothing of the size of the host code is held).
    pub image: Image<'a>,
    pub wrappers: Vec<WrapperInfo>,
    /// Address of `.rocm_kpack_ref`.
    pub marker_vaddr: u64,
    /// Bytes of `.hip_fatbin` that left the file.
    pub removed: u64,
}

/// Classifies `data`: host-only, already split, or a splittable fat binary.
/// Errors for non-ELF, unsupported or malformed input.
pub fn classify(data: &[u8]) -> Result<Classification<'_>> {
    let elf = Elf::parse(data)?;
    if elf.find_section(MARKER_SECTION)?.is_some() {
        return Ok(Classification::AlreadySplit(format!(
            "has a {MARKER_SECTION} section"
        )));
    }
    let fatbin = elf.find_section(FATBIN_SECTION)?;
    let wrappers = elf.find_section(WRAPPER_SECTION)?;
    if let Some(w) = wrappers {
        let magics = wrapper_magics(&elf, w)?;
        let hipk = magics.iter().filter(|&&m| m == HIPK_MAGIC).count();
        if hipk > 0 && hipk == magics.len() {
            return Ok(Classification::AlreadySplit(format!(
                "its {} wrapper(s) already carry the HIPK magic",
                magics.len()
            )));
        }
        if let Some((i, m)) = magics.iter().enumerate().find(|(_, &m)| m != HIPF_MAGIC) {
            return Err(ElfError::Malformed(format!(
                "wrapper {i} in {WRAPPER_SECTION} has magic {m:#010x} (expected HIPF {HIPF_MAGIC:#010x})"
            )));
        }
    }
    let (fatbin, wrappers) = match (fatbin, wrappers) {
        (None, None) => return Ok(Classification::HostOnly),
        (None, Some(_)) => {
            return Err(ElfError::Malformed(format!(
                "{WRAPPER_SECTION} holds HIPF wrappers but there is no {FATBIN_SECTION} section"
            )))
        }
        (Some(_), None) => {
            return Err(ElfError::Malformed(format!(
                "{FATBIN_SECTION} is present but there is no {WRAPPER_SECTION} section (no wrapper refers to the device code)"
            )))
        }
        (Some(f), Some(w)) => (f, w),
    };
    let sh = elf.shdrs[fatbin];
    if sh.sh_type != SHT_PROGBITS {
        return Err(ElfError::Malformed(format!(
            "{FATBIN_SECTION} has section type {} (expected PROGBITS)",
            sh.sh_type
        )));
    }
    elf.section_data(fatbin)?;
    let load = elf
        .phdrs
        .iter()
        .position(|p| {
            p.p_type == PT_LOAD
                && sh.is_alloc()
                && p.contains_file_vaddr(sh.sh_addr, sh.sh_size)
                && sh.sh_offset.checked_sub(p.p_offset) == sh.sh_addr.checked_sub(p.p_vaddr)
        })
        .ok_or_else(|| {
            ElfError::Unsupported(format!(
                "{FATBIN_SECTION} is not loaded by a PT_LOAD segment"
            ))
        })?;
    Ok(Classification::Fat(FatElf {
        elf,
        fatbin,
        wrappers,
        load,
    }))
}

fn wrapper_magics(elf: &Elf<'_>, w: usize) -> Result<Vec<u32>> {
    let sh = elf.shdrs[w];
    if sh.sh_type != SHT_PROGBITS
        || !sh.sh_size.is_multiple_of(WRAPPER_SIZE)
        || sh.sh_size == 0
        || sh.sh_addr.checked_add(sh.sh_size).is_none()
    {
        return Err(ElfError::Malformed(format!(
            "{WRAPPER_SECTION}: type {} size {} is not an array of 24-byte wrappers",
            sh.sh_type, sh.sh_size
        )));
    }
    let d = elf.section_data(w)?;
    Ok(FatbinWrapper::parse_all(d)?
        .into_iter()
        .map(|w| w.magic)
        .collect())
}

fn reloc_name(r: &DynReloc) -> String {
    let t = match r.r_type {
        R_X86_64_64 => "R_X86_64_64".to_string(),
        R_X86_64_GLOB_DAT => "R_X86_64_GLOB_DAT".to_string(),
        R_X86_64_JUMP_SLOT => "R_X86_64_JUMP_SLOT".to_string(),
        R_X86_64_RELATIVE => "R_X86_64_RELATIVE".to_string(),
        R_X86_64_IRELATIVE => "R_X86_64_IRELATIVE".to_string(),
        t => format!("type {}", t.0),
    };
    let table = match r.table {
        RelocTable::Rela => "RELA",
        RelocTable::Rel => "REL",
        RelocTable::JmpRela => "JMPREL(RELA)",
        RelocTable::JmpRel => "JMPREL(REL)",
        RelocTable::Relr => "RELR",
    };
    format!("{table} {t}")
}

/// Dynamic symbols, read once and looked up by index.
struct Symbols<'e, 'a> {
    elf: &'e Elf<'a>,
    table: Vec<DynSym>,
}

impl Symbols<'_, '_> {
    fn get(&self, index: u32) -> Result<DynSym> {
        match self.table.get(index as usize) {
            Some(s) => Ok(*s),
            None => self.elf.dynamic_symbol(index),
        }
    }
}

/// The address a dynamic relocation stores, when it is an address in this
/// file (None for symbols defined elsewhere and for TLS offsets).
fn reloc_target(elf: &Elf<'_>, syms: &Symbols<'_, '_>, r: &DynReloc) -> Result<Option<u64>> {
    let in_place = || elf.u64_at_vaddr(r.r_offset).ok();
    let addend = |r: &DynReloc| -> Option<u64> {
        match r.addend {
            Some(a) => Some(a as u64),
            None => in_place(),
        }
    };
    Ok(match r.r_type {
        R_X86_64_RELATIVE | R_X86_64_IRELATIVE => addend(r),
        R_X86_64_64 | R_X86_64_GLOB_DAT | R_X86_64_JUMP_SLOT => {
            let s = syms.get(r.r_sym)?;
            if r.r_sym == 0 || !s.in_section() {
                None
            } else {
                let a = if r.r_type == R_X86_64_64 {
                    addend(r).unwrap_or(0)
                } else {
                    r.addend.map_or(0, |a| a as u64)
                };
                Some(s.value.wrapping_add(a))
            }
        }
        _ => None,
    })
}

/// How a wrapper's `binary` slot is set: the relocation (if any) and the
/// resulting pointer.
pub(crate) fn slot_pointer(
    elf: &Elf<'_>,
    relocs: &[DynReloc],
    by_offset: &BTreeMap<u64, Vec<usize>>,
    slot: u64,
) -> Result<(u64, Option<usize>)> {
    let syms = Symbols {
        elf,
        table: Vec::new(),
    };
    slot_pointer_with(elf, &syms, relocs, by_offset, slot)
}

fn slot_pointer_with(
    elf: &Elf<'_>,
    syms: &Symbols<'_, '_>,
    relocs: &[DynReloc],
    by_offset: &BTreeMap<u64, Vec<usize>>,
    slot: u64,
) -> Result<(u64, Option<usize>)> {
    let here: &[usize] = by_offset.get(&slot).map_or(&[], Vec::as_slice);
    match here {
        [] => Ok((elf.u64_at_vaddr(slot)?, None)),
        [i] => {
            let r = relocs
                .get(*i)
                .ok_or_else(|| ElfError::Malformed("relocation index out of range".into()))?;
            match r.r_type {
                R_X86_64_RELATIVE | R_X86_64_64 => {}
                _ => {
                    return Err(ElfError::Unsupported(format!(
                        "wrapper pointer at {slot:#x} is set by a {} relocation",
                        reloc_name(r)
                    )))
                }
            }
            if r.r_type == R_X86_64_64 {
                let s = syms.get(r.r_sym)?;
                if !s.is_defined() {
                    return Err(ElfError::Refused(format!(
                        "wrapper pointer at {slot:#x} refers to an undefined symbol (index {})",
                        r.r_sym
                    )));
                }
            }
            let p = reloc_target(elf, syms, r)?.ok_or_else(|| {
                ElfError::Malformed(format!(
                    "cannot compute the value of the {} relocation at {slot:#x}",
                    reloc_name(r)
                ))
            })?;
            Ok((p, Some(*i)))
        }
        _ => Err(ElfError::Malformed(format!(
            "{} dynamic relocations write the wrapper pointer at {slot:#x}",
            here.len()
        ))),
    }
}

fn align_up(x: u64, a: u64) -> Result<u64> {
    if a <= 1 {
        return Ok(x);
    }
    x.checked_add(a - 1)
        .map(|v| v / a * a)
        .ok_or_else(|| ElfError::Malformed("offset overflow".into()))
}

fn check_align(a: u64, what: &str) -> Result<u64> {
    if a > 1 && !a.is_power_of_two() {
        return Err(ElfError::Malformed(format!(
            "{what}: p_align {a:#x} is not a power of two"
        )));
    }
    Ok(a.max(1))
}

fn overlaps(a0: u64, a1: u64, b0: u64, b1: u64) -> bool {
    a0 < b1 && b0 < a1
}

/// Rewrites a fat binary into its host-only form.
///
/// `bundle_offsets` are the offsets (within `.hip_fatbin`) of the bundles in
/// section order: a wrapper's `co_index` is the position of the bundle its
/// original pointer targets. `marker` is the `.rocm_kpack_ref` content.
/// Rewrites a fat binary into its host-only form.
///
/// `bundle_offsets` are the offsets (within `.hip_fatbin`) of the bundles in
/// section order: a wrapper's `co_index` is the position of the bundle its
/// original pointer targets. `marker` is the `.rocm_kpack_ref` content.
///
/// The phases, in order: [`Cut::locate`] the device code, [`read_wrappers`]
/// and [`check_device_code_untouched`], [`plan_hole`] and [`plan_sections`]
/// (what leaves the file, what stays, what goes to the tail),
/// [`split_segment`] and [`plan_table`] (the new program headers),
/// [`copy_kept`] and [`zero_replaced`], [`place_segment`],
/// [`program_headers`] and [`write_segment`], [`write_tail`],
/// [`section_headers`] and [`write_section_headers`], [`follow_moved`],
/// the ELF header, then [`patch_wrappers`].
pub fn rewrite<'a>(
    fat: &FatElf<'a>,
    marker: &[u8],
    bundle_offsets: &[u64],
) -> Result<Rewritten<'a>> {
    let elf = &fat.elf;
    let data = elf.data;
    let file_len = data.len() as u64;
    let (cut, wsh, load) = Cut::locate(fat)?;

    let relocs = elf.dynamic_relocations()?;
    let syms = Symbols {
        elf,
        table: elf.dynamic_symbols()?,
    };
    let (wrappers, wrapper_relocs) = read_wrappers(fat, &cut, wsh, &relocs, &syms, bundle_offsets)?;
    check_device_code_untouched(elf, &cut, &relocs, &syms, &wrapper_relocs)?;

    let hole = plan_hole(fat, &cut, load, wrappers.len())?;
    let sections = plan_sections(fat, &cut, hole.seg_file_end)?;
    let layout = Layout {
        cut,
        delta: hole.delta,
        fill: hole.fill,
        keep_end: sections.keep_end,
    };
    let pieces = split_segment(load, &cut, hole.delta)?;
    let table = plan_table(elf, cut.fo, &pieces)?;

    let mut out = Image::new(data);
    copy_kept(&mut out, data, &layout)?;
    zero_replaced(&mut out, elf, &layout, &table, sections.shstr_in_tail)?;
    let seg = place_segment(out.len() as u64, &table, &hole, marker.len() as u64)?;
    let phdrs = program_headers(fat, &layout, &pieces, &table, &seg)?;
    write_segment(&mut out, data, &table, &seg, &phdrs, marker)?;
    let tail = write_tail(&mut out, elf, &sections)?;
    let shdrs = section_headers(fat, &layout, &table, &seg, &tail, marker.len() as u64)?;
    let (shoff, new_shnum) = write_section_headers(&mut out, &shdrs)?;
    follow_moved(&mut out, elf, &layout, &table, &seg, &tail)?;

    let header = elf.header_bytes(seg.phoff, table.new_phnum_u16, shoff, new_shnum);
    out.patch(0, &header)
        .ok_or_else(|| ElfError::Malformed("output shorter than an ELF header".into()))?;

    patch_wrappers(
        &mut out,
        &layout,
        wsh,
        &wrappers,
        &wrapper_relocs,
        &relocs,
        &syms,
        seg.marker_vaddr,
    )?;

    let removed = file_len.saturating_sub(out.len() as u64);
    Ok(Rewritten {
        image: out,
        wrappers,
        marker_vaddr: seg.marker_vaddr,
        removed,
    })
}

/// Where `.hip_fatbin` lies: file offset `fo`, size `fs`, address `fa`.
#[derive(Debug, Clone, Copy)]
struct Cut {
    fo: u64,
    fs: u64,
    fa: u64,
    /// File end of `.hip_fatbin`.
    cut_end: u64,
    /// Address end of `.hip_fatbin`.
    fa_end: u64,
}

impl Cut {
    /// The cut of `fat`, its wrapper section and the segment holding it.
    fn locate(fat: &FatElf<'_>) -> Result<(Cut, Shdr, Phdr)> {
        let elf = &fat.elf;
        let fsh = *elf
            .shdrs
            .get(fat.fatbin)
            .ok_or_else(|| ElfError::Malformed("fatbin section index".into()))?;
        let wsh = *elf
            .shdrs
            .get(fat.wrappers)
            .ok_or_else(|| ElfError::Malformed("wrapper section index".into()))?;
        let load = *elf
            .phdrs
            .get(fat.load)
            .ok_or_else(|| ElfError::Malformed("segment index".into()))?;
        let (fo, fs, fa) = (fsh.sh_offset, fsh.sh_size, fsh.sh_addr);
        let cut_end = fo + fs; // in file: classify checked it
        if fo < EHDR_SIZE as u64 {
            return Err(ElfError::Malformed(format!(
                "{FATBIN_SECTION} overlaps the ELF header"
            )));
        }
        let cut = Cut {
            fo,
            fs,
            fa,
            cut_end,
            fa_end: fa + fs,
        };
        Ok((cut, wsh, load))
    }

    /// Whether the address `v` is in `.hip_fatbin`.
    fn holds(&self, v: u64) -> bool {
        v >= self.fa && v < self.fa_end
    }
}

/// Reads every wrapper of `.hipFatBinSegment`: where its `binary` pointer
/// points (a bundle start of `.hip_fatbin`), and which relocation (index
/// into `relocs`) sets it, mapped to the wrapper's index.
fn read_wrappers(
    fat: &FatElf<'_>,
    cut: &Cut,
    wsh: Shdr,
    relocs: &[DynReloc],
    syms: &Symbols<'_, '_>,
    bundle_offsets: &[u64],
) -> Result<(Vec<WrapperInfo>, BTreeMap<usize, usize>)> {
    let elf = &fat.elf;
    let (fa, fa_end) = (cut.fa, cut.fa_end);
    let mut by_offset: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, r) in relocs.iter().enumerate() {
        by_offset.entry(r.r_offset).or_default().push(i);
    }
    let wdata = elf.section_data(fat.wrappers)?;
    let nwrap = wdata.len() / WRAPPER_SIZE as usize;
    let mut wrappers = Vec::with_capacity(nwrap);
    let mut wrapper_relocs: BTreeMap<usize, usize> = BTreeMap::new(); // reloc index -> wrapper
    for i in 0..nwrap {
        let w = wsh.sh_addr + (i as u64) * WRAPPER_SIZE;
        // Only the `binary` field may carry a relocation.
        for (&off, list) in by_offset.range(w..w + WRAPPER_SIZE) {
            if off != w + 8 {
                let r = &relocs[list[0]];
                return Err(ElfError::Unsupported(format!(
                    "wrapper {i}: a {} relocation writes offset {} of the wrapper (only `binary` at +8 is expected)",
                    reloc_name(r),
                    off - w
                )));
            }
        }
        let (ptr, ri) = slot_pointer_with(elf, syms, relocs, &by_offset, w + 8)?;
        if !cut.holds(ptr) {
            return Err(ElfError::Malformed(format!(
                "wrapper {i} at {w:#x} points at {ptr:#x}, outside {FATBIN_SECTION} [{fa:#x}, {fa_end:#x})"
            )));
        }
        let boff = ptr - fa;
        let co_index = bundle_offsets.binary_search(&boff).map_err(|_| {
            ElfError::Malformed(format!(
                "wrapper {i} at {w:#x} points at offset {boff:#x} of {FATBIN_SECTION}, which is not the start of a bundle"
            ))
        })?;
        let co_index =
            u32::try_from(co_index).map_err(|_| ElfError::Malformed("too many bundles".into()))?;
        let relocation = match ri {
            Some(ri) => {
                wrapper_relocs.insert(ri, i);
                reloc_name(&relocs[ri])
            }
            None => "in place".to_string(),
        };
        wrappers.push(WrapperInfo {
            index: i,
            vaddr: w,
            original_pointer: ptr,
            co_index,
            relocation,
        });
    }
    Ok((wrappers, wrapper_relocs))
}

/// Nothing but the wrappers may point at or write into the device code
/// (an exported symbol into it is only a warning: it will read zeros).
fn check_device_code_untouched(
    elf: &Elf<'_>,
    cut: &Cut,
    relocs: &[DynReloc],
    syms: &Symbols<'_, '_>,
    wrapper_relocs: &BTreeMap<usize, usize>,
) -> Result<()> {
    for (i, r) in relocs.iter().enumerate() {
        if wrapper_relocs.contains_key(&i) {
            continue;
        }
        if cut.holds(r.r_offset) {
            return Err(ElfError::Refused(format!(
                "the {} dynamic relocation at {:#x} writes into {FATBIN_SECTION}",
                reloc_name(r),
                r.r_offset
            )));
        }
        if let Some(t) = reloc_target(elf, syms, r)? {
            if cut.holds(t) {
                return Err(ElfError::Refused(format!(
                    "the {} dynamic relocation at {:#x} points into {FATBIN_SECTION} ({t:#x}) and is not a fat binary wrapper",
                    reloc_name(r),
                    r.r_offset
                )));
            }
        }
    }
    for (i, s) in syms.table.iter().enumerate() {
        if s.in_section() && cut.holds(s.value) && s.info >> 4 != 0 {
            tracing::warn!(
                symbol_index = i,
                value = s.value,
                "an exported dynamic symbol points into {FATBIN_SECTION}; it will point at zeros (NOBITS)"
            );
        }
    }
    Ok(())
}

/// How much of `.hip_fatbin` leaves the file, and the segment figures the
/// new layout needs.
#[derive(Debug)]
struct Hole {
    /// Bytes that leave the file (a multiple of every moved segment's
    /// alignment).
    delta: u64,
    /// Bytes of `.hip_fatbin` that stay, as zeros.
    fill: u64,
    /// Alignment of the new PT_LOAD.
    new_align: u64,
    /// End of the highest PT_LOAD in memory.
    max_vend: u64,
    /// End of the last segment's file bytes (at least `.hip_fatbin`'s).
    seg_file_end: u64,
}

fn plan_hole(fat: &FatElf<'_>, cut: &Cut, load: Phdr, nwrappers: usize) -> Result<Hole> {
    let elf = &fat.elf;
    let file_len = elf.data.len() as u64;
    let (fo, fs, cut_end) = (cut.fo, cut.fs, cut.cut_end);
    let mut cut_align = check_align(load.p_align, "PT_LOAD")?;
    let mut new_align = PAGE;
    let mut max_vend = 0u64;
    let mut seg_file_end = cut_end;
    for (i, p) in elf.phdrs.iter().enumerate() {
        if p.p_filesz > 0 {
            let end = p
                .p_offset
                .checked_add(p.p_filesz)
                .filter(|&e| e <= file_len)
                .ok_or_else(|| {
                    ElfError::Truncated(format!("segment {i} extends past the end of the file"))
                })?;
            seg_file_end = seg_file_end.max(end);
        }
        if p.p_type != PT_LOAD {
            continue;
        }
        let a = check_align(p.p_align, "PT_LOAD")?;
        new_align = new_align.max(a);
        max_vend = max_vend.max(
            p.p_vaddr
                .checked_add(p.p_memsz)
                .ok_or_else(|| ElfError::Malformed(format!("segment {i}: address overflow")))?,
        );
        if i != fat.load && p.p_offset >= fo {
            cut_align = cut_align.max(a);
        }
    }
    // Bytes of the last page of .hip_fatbin that share a page with what
    // follows stay in the file (as zeros) so that page maps cleanly.
    let r = cut_end % PAGE;
    let delta = if fs >= r {
        (fs - r) / cut_align * cut_align
    } else {
        0
    };
    let fill = fs - delta;
    tracing::debug!(
        fatbin_offset = fo,
        fatbin_size = fs,
        removed = delta,
        zero_fill = fill,
        alignment = cut_align,
        wrappers = nwrappers,
        "planned the host-only layout"
    );
    Ok(Hole {
        delta,
        fill,
        new_align,
        max_vend,
        seg_file_end,
    })
}

/// Which sections stay in place and which move to the tail.
#[derive(Debug)]
struct Sections<'a> {
    /// End of the kept part of the input.
    keep_end: u64,
    /// Non-loaded sections after every segment, in file order.
    tail: Vec<usize>,
    shstrndx: usize,
    shstr_in_tail: bool,
    old_shstrtab: &'a [u8],
}

fn plan_sections<'a>(fat: &FatElf<'a>, cut: &Cut, seg_file_end: u64) -> Result<Sections<'a>> {
    let elf = &fat.elf;
    let file_len = elf.data.len() as u64;
    let shstrndx = elf.shstrndx();
    let mut order: Vec<usize> = (1..elf.shdrs.len())
        .filter(|&i| {
            let s = &elf.shdrs[i];
            s.sh_type != SHT_NOBITS && s.sh_size > 0 && i != fat.fatbin
        })
        .collect();
    order.sort_by_key(|&i| (elf.shdrs[i].sh_offset, i));
    let mut keep_end = seg_file_end;
    let mut tail: Vec<usize> = Vec::new();
    for &i in &order {
        let s = &elf.shdrs[i];
        let end = s
            .sh_offset
            .checked_add(s.sh_size)
            .filter(|&e| e <= file_len)
            .ok_or_else(|| {
                ElfError::Truncated(format!("section {i} extends past the end of the file"))
            })?;
        if s.sh_offset < keep_end {
            if overlaps(s.sh_offset, end, cut.fo, cut.cut_end) {
                return Err(ElfError::Unsupported(format!(
                    "section {} overlaps {FATBIN_SECTION} in the file",
                    elf.section_name(i)?
                )));
            }
            keep_end = keep_end.max(end);
        } else {
            tail.push(i);
        }
    }
    let shstr_in_tail = tail.contains(&shstrndx);
    let old_shstrtab = elf.shstrtab()?;
    Ok(Sections {
        keep_end,
        tail,
        shstrndx,
        shstr_in_tail,
        old_shstrtab,
    })
}

/// The kept part of the output: `[0, fo)`, `fill` zeros, then
/// `[cut_end, keep_end)` shifted down by `delta`.
#[derive(Debug, Clone, Copy)]
struct Layout {
    cut: Cut,
    delta: u64,
    fill: u64,
    keep_end: u64,
}

impl Layout {
    /// Where input offset `x` of the kept part is in the output.
    fn map_off(&self, x: u64) -> Option<u64> {
        if x <= self.cut.fo {
            Some(x)
        } else if x >= self.cut.cut_end && x <= self.keep_end {
            Some(x - self.delta)
        } else {
            None
        }
    }

    /// Length of the kept part in the output.
    fn kept_len(&self) -> u64 {
        self.keep_end - self.delta
    }
}

/// The segment that held `.hip_fatbin`, in three.
#[derive(Debug, Clone, Copy)]
struct Pieces {
    a: Phdr,
    zeros: Option<Phdr>,
    b: Option<Phdr>,
}

/// The fatbin's segment becomes piece A (before the hole), the hole's
/// zeros as a segment of their own with no file bytes (on whole pages: a
/// segment whose memory goes on past its file bytes must not end them
/// inside a read-only page, which qemu-user zeroes by hand and faults on)
/// and piece B (after the hole).
fn split_segment(load: Phdr, cut: &Cut, delta: u64) -> Result<Pieces> {
    let (fo, fa, cut_end, fa_end) = (cut.fo, cut.fa, cut.cut_end, cut.fa_end);
    let a_filesz = fo - load.p_offset;
    let load_file_end = load.p_offset + load.p_filesz;
    let load_mem_end = load
        .p_vaddr
        .checked_add(load.p_memsz)
        .ok_or_else(|| ElfError::Malformed("segment address overflow".into()))?;
    let b_filesz = load_file_end - cut_end;
    let b_memsz = load_mem_end
        .checked_sub(fa_end)
        .ok_or_else(|| ElfError::Malformed(format!("{FATBIN_SECTION} extends past its segment")))?;
    let hole_mem_end = if b_filesz > 0 { fa_end } else { load_mem_end };
    let zeros_vaddr = align_up(fa, PAGE)?;
    let a = Phdr {
        p_filesz: a_filesz,
        p_memsz: zeros_vaddr.min(hole_mem_end) - load.p_vaddr,
        ..load
    };
    let zeros = (zeros_vaddr < hole_mem_end).then(|| Phdr {
        p_offset: zeros_vaddr.wrapping_sub(load.p_vaddr.wrapping_sub(load.p_offset)),
        p_vaddr: zeros_vaddr,
        p_paddr: load.p_paddr.wrapping_add(zeros_vaddr - load.p_vaddr),
        p_filesz: 0,
        p_memsz: hole_mem_end - zeros_vaddr,
        ..load
    });
    let b = (b_filesz > 0).then(|| Phdr {
        p_offset: cut_end - delta,
        p_vaddr: fa_end,
        p_paddr: load.p_paddr.wrapping_add(fa_end - load.p_vaddr),
        p_filesz: b_filesz,
        p_memsz: b_memsz,
        ..load
    });
    Ok(Pieces { a, zeros, b })
}

/// The new program header table: its length, and where it goes.
#[derive(Debug)]
struct Table {
    /// Offset of the input's table.
    phoff: u64,
    new_phnum: usize,
    new_phnum_u16: u16,
    /// Its bytes.
    pht_size: u64,
    /// `p_vaddr - p_offset` of the first PT_LOAD.
    first_bias: u64,
    /// Some when the table stays where it is, with the sections that move
    /// out of its way ([`Room`]).
    in_place: Option<Option<Room>>,
    /// Those sections.
    room: Option<Room>,
}

/// The table gets the pieces of the fatbin's segment and the new PT_LOAD
/// (the marker, and the sections the longer table pushes out of its way)
/// after every other.
fn plan_table(elf: &Elf<'_>, fo: u64, pieces: &Pieces) -> Result<Table> {
    let new_phnum =
        elf.phdrs.len() + 1 + usize::from(pieces.zeros.is_some()) + usize::from(pieces.b.is_some());
    let new_phnum_u16 = u16::try_from(new_phnum)
        .ok()
        .filter(|&n| n < 0xffff)
        .ok_or_else(|| ElfError::Unsupported("too many program headers".into()))?;
    let pht_size = new_phnum as u64 * PHDR_SIZE as u64;
    let first = elf.phdrs.iter().find(|p| p.p_type == PT_LOAD);
    let first_bias = first.map_or(0, |p| p.p_vaddr.wrapping_sub(p.p_offset));
    // Where the table goes: where it is (docs/formats.md, "Where the
    // program header table lives"), or, when what follows it cannot move,
    // after everything, at an address `first bias + offset`.
    let in_place = match Room::needed(elf, elf.phoff(), new_phnum) {
        Ok(room) if elf.phoff() < fo => Some(room),
        Ok(_) => None,
        Err(why) => {
            tracing::warn!(
                "the program header table cannot grow where it is ({why}): it goes after every \
                 segment, and the file keeps zeros up to it"
            );
            None
        }
    };
    let room = in_place.clone().flatten();
    Ok(Table {
        phoff: elf.phoff(),
        new_phnum,
        new_phnum_u16,
        pht_size,
        first_bias,
        in_place,
        room,
    })
}

/// Appends `len` input bytes at `off` to `out`.
fn copy<'a>(out: &mut Image<'a>, data: &'a [u8], off: u64, len: u64, what: &str) -> Result<()> {
    get(data, off, len, what)?;
    out.copy(off as usize, len as usize)
        .ok_or_else(|| ElfError::Malformed(format!("{what} out of range")))
}

/// The kept part: everything before `.hip_fatbin`, its zeros, what follows.
fn copy_kept<'a>(out: &mut Image<'a>, data: &'a [u8], layout: &Layout) -> Result<()> {
    let cut = &layout.cut;
    copy(out, data, 0, cut.fo, "file")?;
    out.pad_to(out.len() + layout.fill as usize);
    copy(
        out,
        data,
        cut.cut_end,
        layout.keep_end - cut.cut_end,
        "file",
    )?;
    debug_assert_eq!(out.len() as u64, layout.kept_len());
    Ok(())
}

/// Zeroes what the new layout replaces (no stale copies): the old program
/// header table, the sections that make room for the new one, an in-place
/// .shstrtab and section header table.
fn zero_replaced(
    out: &mut Image<'_>,
    elf: &Elf<'_>,
    layout: &Layout,
    table: &Table,
    shstr_in_tail: bool,
) -> Result<()> {
    let mut zero = |from: u64, len: u64, what: &str| -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        match (
            layout.map_off(from),
            from.checked_add(len).and_then(|x| layout.map_off(x)),
        ) {
            (Some(a), Some(b)) if b >= a => out
                .zero(a as usize, (b - a) as usize)
                .ok_or_else(|| ElfError::Malformed(format!("{what} out of range"))),
            _ if from >= layout.keep_end => Ok(()), // in the dropped tail anyway
            _ => Err(ElfError::Unsupported(format!(
                "{what} overlaps {FATBIN_SECTION}"
            ))),
        }
    };
    zero(
        elf.phoff(),
        elf.phdrs.len() as u64 * PHDR_SIZE as u64,
        "program header table",
    )?;
    if let Some(room) = &table.room {
        zero(
            room.start,
            room.len(),
            "sections making room for the program header table",
        )?;
    }
    if !shstr_in_tail {
        let s = elf.shdrs[elf.shstrndx()];
        zero(s.sh_offset, s.sh_size, "section name table")?;
    }
    if elf.shoff() != 0 {
        zero(
            elf.shoff(),
            elf.shdrs.len() as u64 * SHDR_SIZE as u64,
            "section header table",
        )?;
    }
    Ok(())
}

/// The new PT_LOAD and what is in it.
#[derive(Debug)]
struct NewSegment {
    /// Its file offset.
    n0: u64,
    /// Offset of the program header table.
    phoff: u64,
    marker_off: u64,
    marker_vaddr: u64,
    /// How far the moved sections go up in memory.
    room_delta: u64,
    load: Phdr,
    /// Address of the program header table (PT_PHDR).
    phdr_vaddr: u64,
}

/// Places the new segment after the kept part (`kept_len` bytes): the
/// moved sections (at an offset with their remainder modulo their
/// alignment), or the table when it cannot stay, then the marker.
fn place_segment(kept_len: u64, table: &Table, hole: &Hole, marker_len: u64) -> Result<NewSegment> {
    let (new_align, max_vend, first_bias) = (hole.new_align, hole.max_vend, table.first_bias);
    let n0 = align_up(kept_len, 8)?;
    let (n0, v0) = match (&table.in_place, &table.room) {
        (Some(_), Some(room)) => {
            let n0 = n0 + (room.start.wrapping_sub(n0) % room.align);
            (n0, align_up(max_vend, new_align)? + n0 % new_align)
        }
        (Some(_), None) => (n0, align_up(max_vend, new_align)? + n0 % new_align),
        (None, _) => {
            let floor = align_up(max_vend, new_align)?
                .checked_sub(first_bias)
                .ok_or_else(|| ElfError::Malformed("address overflow".into()))?;
            let n0 = n0.max(floor);
            (n0, n0.wrapping_add(first_bias))
        }
    };
    let (phoff, marker_off) = match (&table.in_place, &table.room) {
        (Some(_), Some(room)) => (table.phoff, n0 + room.len()),
        (Some(_), None) => (table.phoff, n0),
        (None, _) => (n0, align_up(n0 + table.pht_size, 8)?),
    };
    let room_delta = table
        .room
        .as_ref()
        .map_or(0, |r| v0.wrapping_sub(r.start.wrapping_add(first_bias)));
    let seg_end = marker_off + marker_len;
    let marker_vaddr = v0 + (marker_off - n0);
    let load = Phdr {
        p_type: PT_LOAD,
        p_flags: PF_R,
        p_offset: n0,
        p_vaddr: v0,
        p_paddr: v0,
        p_filesz: seg_end - n0,
        p_memsz: seg_end - n0,
        p_align: new_align,
    };
    let phdr_vaddr = if table.in_place.is_some() {
        phoff.wrapping_add(first_bias)
    } else {
        v0
    };
    Ok(NewSegment {
        n0,
        phoff,
        marker_off,
        marker_vaddr,
        room_delta,
        load,
        phdr_vaddr,
    })
}

/// Every program header of the output: the fatbin's segment in its pieces,
/// PT_PHDR at the table, segments in the moved sections moved with them,
/// the others at their kept offsets, and the new PT_LOAD after the loads.
fn program_headers(
    fat: &FatElf<'_>,
    layout: &Layout,
    pieces: &Pieces,
    table: &Table,
    seg: &NewSegment,
) -> Result<Vec<Phdr>> {
    let elf = &fat.elf;
    let (fo, cut_end) = (layout.cut.fo, layout.cut.cut_end);
    let mut phdrs: Vec<Phdr> = Vec::with_capacity(table.new_phnum);
    for (i, p) in elf.phdrs.iter().enumerate() {
        if i == fat.load {
            phdrs.push(pieces.a);
            phdrs.extend(pieces.zeros);
            phdrs.extend(pieces.b);
            continue;
        }
        if p.p_type == PT_PHDR {
            phdrs.push(Phdr {
                p_offset: seg.phoff,
                p_vaddr: seg.phdr_vaddr,
                p_paddr: seg.phdr_vaddr,
                p_filesz: table.pht_size,
                p_memsz: table.pht_size,
                ..*p
            });
            continue;
        }
        if let Some(room) = table
            .room
            .as_ref()
            .filter(|r| r.holds(p.p_offset) && p.p_filesz > 0)
        {
            phdrs.push(room.moved_phdr(p, seg.room_delta, seg.n0));
            continue;
        }
        let mut q = *p;
        if p.p_filesz == 0 {
            q.p_offset = layout.map_off(p.p_offset).unwrap_or(fo);
        } else {
            let end = p.p_offset + p.p_filesz;
            if overlaps(p.p_offset, end, fo, cut_end) {
                return Err(ElfError::Unsupported(format!(
                    "program header {i} (type {:#x}) overlaps {FATBIN_SECTION}",
                    p.p_type
                )));
            }
            q.p_offset = layout.map_off(p.p_offset).ok_or_else(|| {
                ElfError::Malformed(format!("program header {i} offset out of range"))
            })?;
        }
        phdrs.push(q);
    }
    super::phdr::insert_after_loads(&mut phdrs, seg.load);
    debug_assert_eq!(phdrs.len(), table.new_phnum);
    Ok(phdrs)
}

/// Writes the new segment: the moved sections and the table patched in
/// place, or the table appended, then the marker.
fn write_segment<'a>(
    out: &mut Image<'a>,
    data: &'a [u8],
    table: &Table,
    seg: &NewSegment,
    phdrs: &[Phdr],
    marker: &[u8],
) -> Result<()> {
    let bytes: Vec<u8> = phdrs.iter().flat_map(|p| p.to_bytes()).collect();
    out.pad_to(seg.n0 as usize);
    if table.in_place.is_some() {
        if let Some(room) = &table.room {
            copy(out, data, room.start, room.len(), "moved sections")?;
        }
        out.patch(seg.phoff as usize, &bytes)
            .ok_or_else(|| ElfError::Malformed("program header table out of range".into()))?;
    } else {
        out.extend_from_slice(&bytes);
    }
    out.pad_to(seg.marker_off as usize);
    out.extend_from_slice(marker);
    Ok(())
}

/// Where the tail put its sections.
#[derive(Debug)]
struct Tail {
    /// Section index -> output offset.
    new_offsets: BTreeMap<usize, u64>,
    shstrndx: usize,
    /// Length of the grown .shstrtab.
    shstrtab_len: u64,
    /// Offset of the marker's name in it.
    marker_name: u32,
}

/// Tail: non-loaded sections that followed every segment, then .shstrtab
/// (grown by the marker's name) if it was not among them.
fn write_tail<'a>(out: &mut Image<'a>, elf: &Elf<'a>, sections: &Sections<'_>) -> Result<Tail> {
    let shstrndx = sections.shstrndx;
    let marker_name = sections.old_shstrtab.len() as u32;
    let mut new_shstrtab = sections.old_shstrtab.to_vec();
    new_shstrtab.extend_from_slice(MARKER_SECTION.as_bytes());
    new_shstrtab.push(0);
    let mut tail_order = sections.tail.clone();
    if !sections.shstr_in_tail {
        tail_order.push(shstrndx);
    }
    let mut new_offsets: BTreeMap<usize, u64> = BTreeMap::new();
    for &i in &tail_order {
        let s = &elf.shdrs[i];
        let a = s.sh_addralign.clamp(1, PAGE);
        let pos = align_up(out.len() as u64, if a.is_power_of_two() { a } else { 1 })?;
        out.pad_to(pos as usize);
        if i == shstrndx {
            out.extend_from_slice(&new_shstrtab);
        } else {
            copy(out, elf.data, s.sh_offset, s.sh_size, "section")?;
        }
        new_offsets.insert(i, pos);
    }
    Ok(Tail {
        new_offsets,
        shstrndx,
        shstrtab_len: new_shstrtab.len() as u64,
        marker_name,
    })
}

/// Every section header of the output, the marker's last.
fn section_headers(
    fat: &FatElf<'_>,
    layout: &Layout,
    table: &Table,
    seg: &NewSegment,
    tail: &Tail,
    marker_len: u64,
) -> Result<Vec<Shdr>> {
    let elf = &fat.elf;
    let fo = layout.cut.fo;
    let mut shdrs: Vec<Shdr> = Vec::with_capacity(elf.shdrs.len() + 1);
    for (i, s) in elf.shdrs.iter().enumerate() {
        let mut t = *s;
        if i == 0 {
            shdrs.push(t);
            continue;
        }
        if i == fat.fatbin {
            t.sh_type = SHT_NOBITS;
            t.sh_offset = fo;
        } else if let Some(room) = table.room.as_ref().filter(|r| r.sections.contains(&i)) {
            t.sh_addr = s.sh_addr.wrapping_add(seg.room_delta);
            t.sh_offset = seg.n0 + (s.sh_offset - room.start);
        } else if let Some(&o) = tail.new_offsets.get(&i) {
            t.sh_offset = o;
            if i == tail.shstrndx {
                t.sh_size = tail.shstrtab_len;
            }
        } else if s.sh_type == SHT_NOBITS || s.sh_size == 0 {
            t.sh_offset = layout
                .map_off(s.sh_offset)
                .unwrap_or(if s.sh_offset > layout.keep_end {
                    layout.kept_len()
                } else {
                    fo
                });
        } else {
            t.sh_offset = layout
                .map_off(s.sh_offset)
                .ok_or_else(|| ElfError::Malformed(format!("section {i} offset out of range")))?;
        }
        shdrs.push(t);
    }
    shdrs.push(Shdr {
        sh_name: tail.marker_name,
        sh_type: SHT_PROGBITS,
        sh_flags: SHF_ALLOC,
        sh_addr: seg.marker_vaddr,
        sh_offset: seg.marker_off,
        sh_size: marker_len,
        sh_link: 0,
        sh_info: 0,
        sh_addralign: 1,
        sh_entsize: 0,
    });
    Ok(shdrs)
}

/// Appends the section header table; returns its offset and entry count.
fn write_section_headers(out: &mut Image<'_>, shdrs: &[Shdr]) -> Result<(u64, u16)> {
    let new_shnum = u16::try_from(shdrs.len())
        .ok()
        .filter(|&n| n < 0xff00)
        .ok_or_else(|| ElfError::Unsupported("too many sections".into()))?;
    let shoff = align_up(out.len() as u64, 8)?;
    out.pad_to(shoff as usize);
    out.extend_from_slice(&shdrs.iter().flat_map(|s| s.to_bytes()).collect::<Vec<u8>>());
    Ok((shoff, new_shnum))
}

/// Dynamic entries and symbols that follow the moved sections, wherever
/// their bytes now are (kept, moved, or in the tail).
fn follow_moved(
    out: &mut Image<'_>,
    elf: &Elf<'_>,
    layout: &Layout,
    table: &Table,
    seg: &NewSegment,
    tail: &Tail,
) -> Result<()> {
    let Some(room) = &table.room else {
        return Ok(());
    };
    for (at, bytes) in room.follow(elf, seg.room_delta)? {
        let to = if room.holds(at) {
            Some(seg.n0 + (at - room.start))
        } else if let Some((&i, &o)) = tail.new_offsets.iter().find(|(&i, _)| {
            (elf.shdrs[i].sh_offset..elf.shdrs[i].sh_offset + elf.shdrs[i].sh_size).contains(&at)
        }) {
            Some(o + (at - elf.shdrs[i].sh_offset))
        } else {
            layout.map_off(at)
        };
        let to = to.ok_or_else(|| {
            ElfError::Malformed(format!(
                "cannot place the edit at {at:#x} of a moved section"
            ))
        })?;
        out.patch(to as usize, &bytes)
            .ok_or_else(|| ElfError::Malformed("edit out of range".into()))?;
    }
    Ok(())
}

/// Wrappers: HIPK, marker address, co_index; and their relocations.
#[allow(clippy::too_many_arguments)]
fn patch_wrappers(
    out: &mut Image<'_>,
    layout: &Layout,
    wsh: Shdr,
    wrappers: &[WrapperInfo],
    wrapper_relocs: &BTreeMap<usize, usize>,
    relocs: &[DynReloc],
    syms: &Symbols<'_, '_>,
    marker_vaddr: u64,
) -> Result<()> {
    let wfile = layout.map_off(wsh.sh_offset).ok_or_else(|| {
        ElfError::Unsupported(format!(
            "{WRAPPER_SECTION} is not in the kept part of the file"
        ))
    })?;
    for w in wrappers {
        let o = (wfile + w.index as u64 * WRAPPER_SIZE) as usize;
        let range = || ElfError::Malformed("wrapper out of range".into());
        out.patch(o, &HIPK_MAGIC.to_le_bytes()).ok_or_else(range)?;
        out.patch(o + 8, &marker_vaddr.to_le_bytes())
            .ok_or_else(range)?;
        out.patch(o + 16, &u64::from(w.co_index).to_le_bytes())
            .ok_or_else(range)?;
    }
    for (&ri, &wi) in wrapper_relocs {
        let r = &relocs[ri];
        let value = if r.r_type == R_X86_64_64 {
            marker_vaddr.wrapping_sub(syms.get(r.r_sym)?.value)
        } else {
            marker_vaddr
        };
        match (r.table.has_addend(), r.entry_offset) {
            (true, Some(e)) => {
                let o = layout.map_off(e + 16).ok_or_else(|| {
                    ElfError::Unsupported("relocation table overlaps the device code".into())
                })? as usize;
                out.patch(o, &value.to_le_bytes())
                    .ok_or_else(|| ElfError::Malformed("relocation out of range".into()))?;
            }
            _ => {
                // REL and RELR keep the addend in place: the slot.
                let o = (wfile + wrappers[wi].index as u64 * WRAPPER_SIZE + 8) as usize;
                out.patch(o, &value.to_le_bytes())
                    .ok_or_else(|| ElfError::Malformed("wrapper out of range".into()))?;
            }
        }
    }
    Ok(())
}
