//! Room for a longer program header table where it is: right after the
//! ELF header, in the first PT_LOAD (docs/formats.md, "Where the program
//! header table lives"). That is the one place every reader agrees on:
//! Linux before 5.18 and qemu-user compute `AT_PHDR` as the first
//! PT_LOAD's bias plus `e_phoff`; binutils (`strip`, `objcopy`) lays a file
//! out again with the table after the ELF header; elfutils (`eu-strip`,
//! rpm's `find-debuginfo`) rewrites the bytes between sections as zeros,
//! so a table anywhere else is lost.
//!
//! A table that grows needs the bytes after it, which hold the sections a
//! linker puts first: `.interp`, notes, the dynamic symbol and string
//! tables, hashes, versions, dynamic relocations. Those are found only
//! through program headers and dynamic entries, so they can move: the
//! run of them the table needs ([`Room`]) is copied elsewhere (a caller's
//! new segment), and [`Room::follow`] says which program headers, dynamic
//! entries and symbols follow them there.

use object::elf::{
    DT_STRTAB, PT_NULL, SHF_EXECINSTR, SHF_WRITE, SHT_DYNSYM, SHT_GNU_HASH, SHT_GNU_VERDEF,
    SHT_GNU_VERNEED, SHT_GNU_VERSYM, SHT_HASH, SHT_NOTE, SHT_REL, SHT_RELA, SHT_RELR, SHT_SYMTAB,
};

use super::read::*;
use super::{ElfError, Result};

/// A run of sections (file offsets `[start, end)` of the first PT_LOAD)
/// that moves out of the program header table's way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Room {
    pub start: u64,
    pub end: u64,
    /// The largest alignment among its sections: where it goes must keep
    /// the same remainder modulo this.
    pub align: u64,
    /// Indices of the sections in it.
    pub sections: Vec<usize>,
}

/// Tags whose value is an address (the gABI's `d_ptr`, and the GNU range
/// of address tags).
fn is_pointer_tag(tag: DynamicTag) -> bool {
    tag.is_address()
        || matches!(tag.0, 3..=7 | 12 | 13 | 17 | 21 | 23 | 25 | 26 | 32 | 36)
        || matches!(tag.0, 0x6fff_fff0 | 0x6fff_fffc | 0x6fff_fffe)
}

impl Room {
    /// The sections that must leave for a table of `phnum` entries at
    /// file offset `phoff`; `None` when it fits as things are. Errors when
    /// something in the way cannot move (code, data, a section only code
    /// refers to).
    pub fn needed(elf: &Elf<'_>, phoff: u64, phnum: usize) -> Result<Option<Room>> {
        let table_end = phoff
            .checked_add(phnum as u64 * PHDR_SIZE as u64)
            .ok_or_else(|| ElfError::Malformed("program header table size overflow".into()))?;
        let first = elf
            .phdrs
            .iter()
            .find(|p| p.p_type == PT_LOAD)
            .copied()
            .ok_or_else(|| ElfError::Unsupported("no PT_LOAD segment".into()))?;
        let bias = first.p_vaddr.wrapping_sub(first.p_offset);
        if first.p_offset > phoff || table_end > first.p_offset.saturating_add(first.p_filesz) {
            return Err(ElfError::Unsupported(format!(
                "the program header table (offset {phoff:#x}, {phnum} entries) does not fit in the first PT_LOAD"
            )));
        }
        let in_file = |i: usize| {
            let s = &elf.shdrs[i];
            s.sh_type != SHT_NOBITS && s.sh_size > 0 && s.sh_offset >= phoff
        };
        let ends = |i: usize| elf.shdrs[i].sh_offset.saturating_add(elf.shdrs[i].sh_size);
        let mut sections: Vec<usize> = (1..elf.shdrs.len())
            .filter(|&i| in_file(i) && elf.shdrs[i].sh_offset < table_end)
            .collect();
        if sections.is_empty() {
            return Ok(None);
        }
        let mut start = sections
            .iter()
            .map(|&i| elf.shdrs[i].sh_offset)
            .min()
            .unwrap_or(phoff);
        let mut end = sections.iter().map(|&i| ends(i)).max().unwrap_or(phoff);
        // Whole sections and whole segments (a PT_NOTE of several notes
        // stays one run) until nothing more is cut.
        loop {
            let mut grown = false;
            for i in 1..elf.shdrs.len() {
                if in_file(i)
                    && !sections.contains(&i)
                    && elf.shdrs[i].sh_offset < end
                    && ends(i) > start
                {
                    sections.push(i);
                    start = start.min(elf.shdrs[i].sh_offset);
                    end = end.max(ends(i));
                    grown = true;
                }
            }
            for p in elf
                .phdrs
                .iter()
                .filter(|p| p.p_type != PT_LOAD && p.p_type != PT_PHDR)
            {
                let (a, b) = (p.p_offset, p.p_offset.saturating_add(p.p_filesz));
                if p.p_filesz > 0 && a < end && b > start && (a < start || b > end) {
                    start = start.min(a);
                    end = end.max(b);
                    grown = true;
                }
            }
            if !grown {
                break;
            }
        }
        sections.sort_by_key(|&i| (elf.shdrs[i].sh_offset, i));
        if start < phoff || end > first.p_offset.saturating_add(first.p_filesz) {
            return Err(ElfError::Unsupported(
                "the sections after the program header table run past the first PT_LOAD".into(),
            ));
        }
        let dynamic = elf.dynamic()?;
        let referenced =
            |tag: DynamicTag, addr: u64| dynamic.iter().any(|&(t, v)| t == tag && v == addr);
        for &i in &sections {
            let s = elf.shdrs[i];
            let name = elf.section_name(i)?;
            let addr = s.sh_offset.wrapping_add(bias);
            let movable = !s.sh_flags.intersects(SHF_WRITE | SHF_EXECINSTR)
                && s.is_alloc()
                && s.sh_addr == addr
                && match s.sh_type {
                    SHT_NOTE | SHT_DYNSYM | SHT_HASH | SHT_GNU_HASH | SHT_GNU_VERSYM
                    | SHT_GNU_VERNEED | SHT_GNU_VERDEF => true,
                    SHT_STRTAB => referenced(DT_STRTAB, addr),
                    SHT_RELA => referenced(DT_RELA, addr) || referenced(DT_JMPREL, addr),
                    SHT_REL => referenced(DT_REL, addr) || referenced(DT_JMPREL, addr),
                    SHT_RELR => referenced(DT_RELR, addr),
                    SHT_PROGBITS => name == ".interp",
                    _ => false,
                };
            if !movable {
                return Err(ElfError::Unsupported(format!(
                    "section {name} follows the program header table and cannot move to make room for it"
                )));
            }
        }
        let (lo, hi) = (start.wrapping_add(bias), end.wrapping_add(bias));
        for r in elf.dynamic_relocations()? {
            let points_in = r.r_type == R_X86_64_RELATIVE
                && r.addend.is_some_and(|a| (lo..hi).contains(&(a as u64)));
            if (lo..hi).contains(&r.r_offset) || points_in {
                return Err(ElfError::Unsupported(format!(
                    "a dynamic relocation refers to {:#x}, among the sections after the program header table",
                    r.r_offset
                )));
            }
        }
        let align = sections
            .iter()
            .map(|&i| elf.shdrs[i].sh_addralign)
            .filter(|a| a.is_power_of_two())
            .fold(8, u64::max)
            .min(4096);
        Ok(Some(Room {
            start,
            end,
            align,
            sections,
        }))
    }

    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    /// Whether input file offset `off` is in the run.
    pub fn holds(&self, off: u64) -> bool {
        (self.start..self.end).contains(&off)
    }

    /// The program header `p` (not a PT_LOAD) after the run moved by
    /// `delta` in memory and to file offset `new_start`; others as they are.
    pub fn moved_phdr(&self, p: &Phdr, delta: u64, new_start: u64) -> Phdr {
        if p.p_type == PT_LOAD || p.p_type == PT_PHDR || p.p_type == PT_NULL || p.p_filesz == 0 {
            return *p;
        }
        if !self.holds(p.p_offset) {
            return *p;
        }
        Phdr {
            p_offset: new_start + (p.p_offset - self.start),
            p_vaddr: p.p_vaddr.wrapping_add(delta),
            p_paddr: p.p_paddr.wrapping_add(delta),
            ..*p
        }
    }

    /// Byte edits (input file offsets, new bytes) that make the dynamic
    /// entries and the symbols of the run's sections follow it `delta`
    /// bytes up in memory.
    pub fn follow(&self, elf: &Elf<'_>, delta: u64) -> Result<Vec<(u64, Vec<u8>)>> {
        let bias = elf
            .phdrs
            .iter()
            .find(|p| p.p_type == PT_LOAD)
            .map_or(0, |p| p.p_vaddr.wrapping_sub(p.p_offset));
        let (lo, hi) = (self.start.wrapping_add(bias), self.end.wrapping_add(bias));
        let mut edits = Vec::new();
        if let Some(dynp) = elf.phdrs.iter().find(|p| p.p_type == PT_DYNAMIC) {
            for (k, (tag, value)) in elf.dynamic()?.into_iter().enumerate() {
                if is_pointer_tag(tag) && (lo..hi).contains(&value) {
                    let at = dynp.p_offset + k as u64 * 16 + 8;
                    edits.push((at, value.wrapping_add(delta).to_le_bytes().to_vec()));
                }
            }
        }
        for (i, s) in elf.shdrs.iter().enumerate() {
            if !matches!(s.sh_type, SHT_SYMTAB | SHT_DYNSYM) || s.sh_entsize != 24 {
                continue;
            }
            let data = elf.section_data(i)?;
            for (k, sym) in data.chunks_exact(24).enumerate() {
                let shndx = u16::from_le_bytes([sym[6], sym[7]]);
                let value = u64::from_le_bytes(sym[8..16].try_into().unwrap_or([0; 8]));
                if self.sections.contains(&usize::from(shndx)) && (lo..hi).contains(&value) {
                    let at = s.sh_offset + k as u64 * 24 + 8;
                    edits.push((at, value.wrapping_add(delta).to_le_bytes().to_vec()));
                }
            }
        }
        Ok(edits)
    }
}
