//! The program header table rule (docs/formats.md, "Where the program
//! header table lives"), read with the `object` crate, independently of the
//! splitter's own check: what Linux before 5.18 and qemu-user need to start
//! a binary, and what elfutils needs to keep its table.

use std::fs;
use std::path::Path;

use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
use object::{elf, LittleEndian as LE};

/// Panics unless the program header table of the ELF file at `path` is
/// 8-aligned and mapped, by a PT_LOAD whose `p_vaddr - p_offset` is the
/// first PT_LOAD's, at `first bias + e_phoff`, with PT_PHDR (if any)
/// saying so.
pub fn assert_table_findable(path: &Path) {
    let data = fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file = ElfFile64::<LE>::parse(&*data).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let header = file.elf_header();
    let phoff = header.e_phoff.get(LE);
    let len = u64::from(header.e_phnum(LE)) * 56;
    let phdrs = file.elf_program_headers();
    let bias = |p: &elf::ProgramHeader64<LE>| p.p_vaddr(LE).wrapping_sub(p.p_offset(LE));
    let mut loads = phdrs.iter().filter(|p| p.p_type(LE) == elf::PT_LOAD);
    let first_bias = bias(
        loads
            .next()
            .unwrap_or_else(|| panic!("{}: no PT_LOAD", path.display())),
    );
    assert_eq!(
        phoff % 8,
        0,
        "{}: e_phoff {phoff:#x} is not 8-aligned",
        path.display()
    );
    assert!(
        phdrs.iter().any(|p| p.p_type(LE) == elf::PT_LOAD
            && bias(p) == first_bias
            && p.p_offset(LE) <= phoff
            && phoff + len <= p.p_offset(LE) + p.p_filesz(LE)),
        "{}: no PT_LOAD with the first one's bias maps the table at {phoff:#x}",
        path.display()
    );
    for p in phdrs.iter().filter(|p| p.p_type(LE) == elf::PT_PHDR) {
        assert_eq!(
            p.p_vaddr(LE),
            first_bias.wrapping_add(phoff),
            "{}: PT_PHDR says the table is elsewhere",
            path.display()
        );
    }
}
