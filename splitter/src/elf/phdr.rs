//! Where the program header table lives (docs/formats.md, "Where the
//! program header table lives"): Linux before 5.18, and qemu-user, hand
//! ld.so `AT_PHDR = (first PT_LOAD's p_vaddr - p_offset) + e_phoff` instead
//! of the address the segment covering the table maps it at. An
//! executable whose table is mapped anywhere else does not start there
//! (ld.so asserts, or faults); a library is unaffected at run time, but the
//! rule is the same for every ELF this project writes.
//!
//! [`check`] says whether a file keeps the rule; [`repair`] makes one that
//! does not keep it, moving nothing that code or data refers to.

use super::read::*;
use super::room::Room;
use super::{ElfError, Result};
use crate::image::Image;

/// x86-64 page size.
const PAGE: u64 = 4096;

/// Why a file's program header table is not where such kernels look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Misplaced {
    /// `e_phoff`.
    pub table_offset: u64,
    /// Where the kernel says the table is: first bias + `e_phoff`.
    pub expected_vaddr: u64,
    /// Where a segment maps it, if one does.
    pub mapped_vaddr: Option<u64>,
}

impl std::fmt::Display for Misplaced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.mapped_vaddr {
            Some(v) => write!(
                f,
                "the program header table (file offset {:#x}) is mapped at {v:#x}, but Linux before 5.18 \
                 and qemu-user look for it at {:#x} (first PT_LOAD's p_vaddr - p_offset + e_phoff): \
                 the program does not start there",
                self.table_offset, self.expected_vaddr
            ),
            None => write!(
                f,
                "the program header table (file offset {:#x}) is not mapped by any PT_LOAD; Linux before \
                 5.18 and qemu-user look for it at {:#x}",
                self.table_offset, self.expected_vaddr
            ),
        }
    }
}

/// Makes PT_PHDR (if any) describe a table of `len` bytes at file offset
/// `offset`, mapped at `vaddr`.
fn point_pt_phdr(phdrs: &mut [Phdr], offset: u64, vaddr: u64, len: u64) {
    for q in phdrs.iter_mut().filter(|q| q.p_type == PT_PHDR) {
        q.p_offset = offset;
        q.p_vaddr = vaddr;
        q.p_paddr = vaddr;
        q.p_filesz = len;
        q.p_memsz = len;
    }
}

/// Inserts `load` after the last PT_LOAD of `phdrs` (PT_LOADs are sorted
/// by address, and a new segment goes above every other).
pub(super) fn insert_after_loads(phdrs: &mut Vec<Phdr>, load: Phdr) {
    let at = phdrs
        .iter()
        .rposition(|q| q.p_type == PT_LOAD)
        .map_or(phdrs.len(), |i| i + 1);
    phdrs.insert(at, load);
}

fn loads<'e>(elf: &'e Elf<'_>) -> impl Iterator<Item = &'e Phdr> {
    elf.phdrs.iter().filter(|p| p.p_type == PT_LOAD)
}

fn bias(p: &Phdr) -> u64 {
    p.p_vaddr.wrapping_sub(p.p_offset)
}

fn table_len(elf: &Elf<'_>) -> u64 {
    elf.phdrs.len() as u64 * PHDR_SIZE as u64
}

/// Whether the program header table of `elf` is mapped where every
/// supported kernel looks for it: inside a PT_LOAD whose `p_vaddr -
/// p_offset` is the first PT_LOAD's, with PT_PHDR (if any) saying so.
/// Files with no PT_LOAD keep the rule trivially.
pub fn check(elf: &Elf<'_>) -> Result<(), Misplaced> {
    let Some(first) = loads(elf).next() else {
        return Ok(());
    };
    let (phoff, len) = (elf.phoff(), table_len(elf));
    let expected_vaddr = bias(first).wrapping_add(phoff);
    let covering = loads(elf).find(|p| {
        p.p_offset <= phoff
            && phoff
                .checked_add(len)
                .is_some_and(|end| end <= p.p_offset.saturating_add(p.p_filesz))
    });
    let mapped_vaddr = covering.map(|p| p.p_vaddr.wrapping_add(phoff - p.p_offset));
    let phdr_agrees = elf
        .phdrs
        .iter()
        .filter(|p| p.p_type == PT_PHDR)
        .all(|p| p.p_vaddr == expected_vaddr && p.p_offset == phoff);
    if mapped_vaddr == Some(expected_vaddr) && phdr_agrees {
        Ok(())
    } else {
        Err(Misplaced {
            table_offset: phoff,
            expected_vaddr,
            mapped_vaddr,
        })
    }
}

/// How [`repair`] placed the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Repair {
    /// The table is back after the ELF header, where the splitter keeps it;
    /// the sections in its way moved to a new segment after every other.
    Moved,
    /// What follows the ELF header cannot move: a copy of the table went
    /// after everything, at an address past every segment (the file grew
    /// by the zeros up to it).
    Appended,
}

/// A repaired file.
#[derive(Debug)]
pub struct Repaired<'a> {
    pub image: Image<'a>,
    pub how: Repair,
    /// Bytes the file grew by.
    pub grown: u64,
}

/// Places the table of `elf` (which [`check`] refuses) where every kernel
/// and tool finds it, without changing any section's content or any
/// address code or data refers to: right after the ELF header, growing
/// over the sections that follow it, which move to a new segment after
/// every other ([`Room`]). Read-only segments whose memory goes on past
/// their file bytes (which qemu-user cannot load once `strip` ends those
/// bytes inside a page) end on their file bytes, and their zeros become a
/// segment of their own.
/// When what follows the ELF header cannot move, a copy of the table goes
/// at the end instead, at an address past every segment (the file grows).
pub fn repair<'a>(elf: &Elf<'a>) -> Result<Repaired<'a>> {
    let first = loads(elf)
        .next()
        .copied()
        .ok_or_else(|| ElfError::Unsupported("no PT_LOAD segment".into()))?;
    let first_bias = bias(&first);
    let range = || ElfError::Malformed("file out of range".into());
    let file_len = elf.data.len() as u64;

    // Read-only segments whose memory goes on past their file bytes: qemu
    // zeroes the rest of their last page by hand, and faults, whenever the
    // file bytes do not end on a page, which `strip` makes them do. They
    // end on their file bytes, their zeros from the next page in a segment
    // of their own.
    let mut phdrs: Vec<Phdr> = Vec::with_capacity(elf.phdrs.len() + 4);
    for p in &elf.phdrs {
        let file_end = p.p_vaddr.saturating_add(p.p_filesz);
        let mem_end = p.p_vaddr.saturating_add(p.p_memsz);
        let zeros = file_end.div_ceil(PAGE) * PAGE;
        let cut = p.p_type == PT_LOAD
            && !p.p_flags.intersects(PF_W)
            && mem_end > file_end
            && !elf.shdrs.iter().skip(1).any(|s| {
                s.is_alloc()
                    && s.sh_size > 0
                    && s.sh_addr < zeros
                    && s.sh_addr.saturating_add(s.sh_size) > file_end
            });
        if !cut {
            phdrs.push(*p);
            continue;
        }
        phdrs.push(Phdr {
            p_memsz: p.p_filesz,
            ..*p
        });
        if zeros < mem_end {
            phdrs.push(Phdr {
                p_offset: zeros.wrapping_sub(bias(p)),
                p_vaddr: zeros,
                p_paddr: p.p_paddr.wrapping_add(zeros - p.p_vaddr),
                p_filesz: 0,
                p_memsz: mem_end - zeros,
                ..*p
            });
        }
    }

    let at = EHDR_SIZE as u64;
    let room = match Room::needed(elf, at, phdrs.len() + 1) {
        Ok(room) => room,
        Err(why) => {
            tracing::debug!("the table cannot go back after the ELF header: {why}");
            return append(elf, phdrs, first_bias);
        }
    };
    let max_align = loads(elf).map(|p| p.p_align.max(PAGE)).fold(PAGE, u64::max);
    let max_vend = loads(elf)
        .map(|p| p.p_vaddr.saturating_add(p.p_memsz))
        .max()
        .unwrap_or(0);
    // The moved sections go after the last segment's file bytes; what
    // follows them (sections no segment loads, the section headers) moves
    // down by `insert` bytes.
    let loaded_end = loads(elf)
        .filter(|p| p.p_filesz > 0)
        .map(|p| p.p_offset.saturating_add(p.p_filesz))
        .max()
        .unwrap_or(0)
        .min(file_len);
    let (n0, v0, insert) = match &room {
        Some(room) => {
            let n0 = loaded_end.div_ceil(8) * 8;
            let n0 = n0 + (room.start.wrapping_sub(n0) % room.align);
            let v0 = max_vend.div_ceil(max_align) * max_align + n0 % max_align;
            let tail_align = elf
                .shdrs
                .iter()
                .filter(|s| s.sh_offset >= loaded_end && s.sh_addralign.is_power_of_two())
                .map(|s| s.sh_addralign)
                .fold(8, u64::max)
                .min(PAGE);
            let need = n0 + room.len() - loaded_end;
            (n0, v0, need.div_ceil(tail_align) * tail_align)
        }
        None => (0, 0, 0),
    };
    let moved = |off: u64| if off >= loaded_end { off + insert } else { off };
    let delta = room
        .as_ref()
        .map_or(0, |r| v0.wrapping_sub(r.start.wrapping_add(first_bias)));

    // Program headers: the table's own, the moved ones, the new segment.
    for q in phdrs.iter_mut() {
        if q.p_type == PT_PHDR {
            continue;
        }
        if let Some(room) = &room {
            let was = *q;
            *q = room.moved_phdr(&was, delta, n0);
            if *q != was {
                continue;
            }
        }
        if !(q.p_type == PT_LOAD && q.p_filesz == 0) {
            q.p_offset = moved(q.p_offset);
        }
    }
    if let Some(room) = &room {
        insert_after_loads(
            &mut phdrs,
            Phdr {
                p_type: PT_LOAD,
                p_flags: PF_R,
                p_offset: n0,
                p_vaddr: v0,
                p_paddr: v0,
                p_filesz: room.len(),
                p_memsz: room.len(),
                p_align: max_align,
            },
        );
    }
    let len = phdrs.len() as u64 * PHDR_SIZE as u64;
    point_pt_phdr(&mut phdrs, at, at.wrapping_add(first_bias), len);
    let (Ok(phnum), Ok(shnum)) = (u16::try_from(phdrs.len()), u16::try_from(elf.shdrs.len()))
    else {
        return Err(ElfError::Unsupported("too many program headers".into()));
    };

    let mut image = Image::new(elf.data);
    let split = usize::try_from(loaded_end).map_err(|_| range())?;
    image.copy(0, split).ok_or_else(range)?;
    if let Some(room) = &room {
        image.pad_to(n0 as usize);
        image
            .copy(room.start as usize, room.len() as usize)
            .ok_or_else(range)?;
        image.pad_to(split + insert as usize);
        image
            .zero(room.start as usize, room.len() as usize)
            .ok_or_else(range)?;
    }
    image
        .copy(split, elf.data.len() - split)
        .ok_or_else(range)?;
    // The old table's bytes, unless it was past the end of the file.
    if elf.phoff() < file_len {
        image
            .zero(moved(elf.phoff()) as usize, elf.phdrs.len() * PHDR_SIZE)
            .ok_or_else(range)?;
    }
    let table: Vec<u8> = phdrs.iter().flat_map(|q| q.to_bytes()).collect();
    image.patch(moved(at) as usize, &table).ok_or_else(range)?;
    // Section headers: the moved sections' addresses and offsets, and the
    // offsets of what moved down.
    let shdrs: Vec<u8> = elf
        .shdrs
        .iter()
        .enumerate()
        .flat_map(|(i, sh)| {
            let mut t = *sh;
            match &room {
                Some(room) if room.sections.contains(&i) => {
                    t.sh_addr = t.sh_addr.wrapping_add(delta);
                    t.sh_offset = n0 + (t.sh_offset - room.start);
                }
                _ if i != 0 => t.sh_offset = moved(t.sh_offset),
                _ => {}
            }
            t.to_bytes()
        })
        .collect();
    let shoff = moved(elf.shoff());
    if elf.shoff() != 0 {
        image.patch(shoff as usize, &shdrs).ok_or_else(range)?;
    }
    if let Some(room) = &room {
        for (off, bytes) in room.follow(elf, delta)? {
            let to = if room.holds(off) {
                n0 + (off - room.start)
            } else {
                moved(off)
            };
            image.patch(to as usize, &bytes).ok_or_else(range)?;
        }
    }
    let header = elf.header_bytes(at, phnum, shoff, shnum);
    image.patch(0, &header).ok_or_else(range)?;
    Ok(Repaired {
        grown: insert,
        image,
        how: Repair::Moved,
    })
}

/// The last resort of [`repair`]: `phdrs` written at the end of the file,
/// at an offset whose address (first bias + offset) is past every segment,
/// in a PT_LOAD of their own.
fn append<'a>(elf: &Elf<'a>, mut phdrs: Vec<Phdr>, first_bias: u64) -> Result<Repaired<'a>> {
    let first_align = loads(elf).next().map_or(PAGE, |p| p.p_align.max(PAGE));
    let max_end = loads(elf)
        .map(|p| p.p_vaddr.saturating_add(p.p_memsz))
        .max()
        .unwrap_or(0);
    let file_len = elf.data.len() as u64;
    let ceiling = max_end
        .div_ceil(first_align)
        .checked_mul(first_align)
        .and_then(|c| c.checked_sub(first_bias))
        .ok_or_else(|| ElfError::Malformed("address overflow".into()))?;
    let offset = file_len.div_ceil(8).saturating_mul(8).max(ceiling);
    let new_len = (phdrs.len() + 1) as u64 * PHDR_SIZE as u64;
    let vaddr = offset.wrapping_add(first_bias);
    point_pt_phdr(&mut phdrs, offset, vaddr, new_len);
    insert_after_loads(
        &mut phdrs,
        Phdr {
            p_type: PT_LOAD,
            p_flags: PF_R,
            p_offset: offset,
            p_vaddr: vaddr,
            p_paddr: vaddr,
            p_filesz: new_len,
            p_memsz: new_len,
            p_align: first_align,
        },
    );
    let phnum = u16::try_from(phdrs.len())
        .ok()
        .filter(|&n| n < 0xffff)
        .ok_or_else(|| ElfError::Unsupported("too many program headers".into()))?;
    let shnum = u16::try_from(elf.shdrs.len())
        .map_err(|_| ElfError::Unsupported("too many sections".into()))?;
    let mut image = Image::new(elf.data);
    image
        .copy(0, elf.data.len())
        .ok_or_else(|| ElfError::Malformed("file out of range".into()))?;
    image.pad_to(offset as usize);
    image.extend_from_slice(&phdrs.iter().flat_map(|q| q.to_bytes()).collect::<Vec<u8>>());
    let header = elf.header_bytes(offset, phnum, elf.shoff(), shnum);
    image
        .patch(0, &header)
        .ok_or_else(|| ElfError::Malformed("file shorter than an ELF header".into()))?;
    Ok(Repaired {
        grown: image.len() as u64 - file_len,
        image,
        how: Repair::Appended,
    })
}
