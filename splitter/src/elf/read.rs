//! Bounds-checked reading of ELF64 little-endian x86-64 headers, sections,
//! dynamic entries, dynamic relocations and dynamic symbols.

use super::{ElfError, Result};

/// `e_machine` of x86-64.
pub const EM_X86_64: u16 = 62;
/// Relocatable object.
pub const ET_REL: u16 = 1;
/// Executable (non-PIE).
pub const ET_EXEC: u16 = 2;
/// Shared object or PIE.
pub const ET_DYN: u16 = 3;

/// Loadable segment.
pub const PT_LOAD: u32 = 1;
/// Dynamic linking table.
pub const PT_DYNAMIC: u32 = 2;
/// Program interpreter path.
pub const PT_INTERP: u32 = 3;
/// The program header table itself.
pub const PT_PHDR: u32 = 6;
/// Segment is readable.
pub const PF_R: u32 = 4;

/// Section with file content.
pub const SHT_PROGBITS: u32 = 1;
/// String table.
pub const SHT_STRTAB: u32 = 3;
/// Section occupying memory only (like .bss).
pub const SHT_NOBITS: u32 = 8;
/// Dynamic symbol table.
pub const SHT_DYNSYM: u32 = 11;
/// Section occupies memory at run time.
pub const SHF_ALLOC: u64 = 2;

/// End of the dynamic table.
pub const DT_NULL: i64 = 0;
/// Size of the PLT relocations.
/// Type of the PLT relocations (DT_REL or DT_RELA).
pub const DT_PLTRELSZ: i64 = 2;
/// Address of the dynamic symbol table.
pub const DT_SYMTAB: i64 = 6;
/// Address of the RELA relocations.
/// Address of the REL relocations.
pub const DT_RELA: i64 = 7;
/// Size of the RELA relocations.
pub const DT_RELASZ: i64 = 8;
/// Size of one RELA entry.
pub const DT_RELAENT: i64 = 9;
/// Size of one symbol.
pub const DT_SYMENT: i64 = 11;
pub const DT_REL: i64 = 17;
/// Size of the REL relocations.
pub const DT_RELSZ: i64 = 18;
/// Size of one REL entry.
pub const DT_RELENT: i64 = 19;
pub const DT_PLTREL: i64 = 20;
/// Address of the PLT relocations.
pub const DT_JMPREL: i64 = 23;
/// Size of the RELR relocations.
/// Address of the RELR (packed relative) relocations.
pub const DT_RELRSZ: i64 = 35;
pub const DT_RELR: i64 = 36;
/// Size of one RELR entry.
pub const DT_RELRENT: i64 = 37;

/// Absolute 64-bit: S + A.
pub const R_X86_64_64: u32 = 1;
/// GOT entry: S.
pub const R_X86_64_GLOB_DAT: u32 = 6;
/// PLT slot: S.
pub const R_X86_64_JUMP_SLOT: u32 = 7;
/// Base-relative: B + A.
pub const R_X86_64_RELATIVE: u32 = 8;
/// Indirect function resolver: call (B + A).
pub const R_X86_64_IRELATIVE: u32 = 37;

/// Size of the ELF64 file header.
pub const EHDR_SIZE: usize = 64;
/// Size of one ELF64 program header.
pub const PHDR_SIZE: usize = 56;
/// Size of one ELF64 section header.
pub const SHDR_SIZE: usize = 64;
const SYM_SIZE: u64 = 24;

pub(crate) fn get<'a>(data: &'a [u8], off: u64, len: u64, what: &str) -> Result<&'a [u8]> {
    let start = usize::try_from(off).map_err(|_| trunc(what, off, len, data.len()))?;
    let n = usize::try_from(len).map_err(|_| trunc(what, off, len, data.len()))?;
    start
        .checked_add(n)
        .and_then(|end| data.get(start..end))
        .ok_or_else(|| trunc(what, off, len, data.len()))
}

fn trunc(what: &str, off: u64, len: u64, file_len: usize) -> ElfError {
    ElfError::Truncated(format!(
        "{what} at offset {off:#x} ({len} bytes) extends past the end of the file ({file_len} bytes)"
    ))
}

pub(crate) fn u16_at(d: &[u8], off: usize) -> u16 {
    // Callers pass slices whose length they checked; out of range reads as 0.
    d.get(off..off + 2)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u16::from_le_bytes)
}
pub(crate) fn u32_at(d: &[u8], off: usize) -> u32 {
    d.get(off..off + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}
pub(crate) fn u64_at(d: &[u8], off: usize) -> u64 {
    d.get(off..off + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// The ELF file header fields this tool uses (64-bit form).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub ident: [u8; 16],
    pub e_type: u16,
    pub e_machine: u16,
    pub e_version: u32,
    pub e_entry: u64,
    pub e_phoff: u64,
    pub e_shoff: u64,
    pub e_flags: u32,
    pub e_ehsize: u16,
    pub e_phentsize: u16,
    pub e_phnum: u16,
    pub e_shentsize: u16,
    pub e_shnum: u16,
    pub e_shstrndx: u16,
}

impl Header {
    /// Serializes the header (64 bytes).
    pub fn to_bytes(&self) -> [u8; EHDR_SIZE] {
        let mut b = [0u8; EHDR_SIZE];
        b[..16].copy_from_slice(&self.ident);
        b[16..18].copy_from_slice(&self.e_type.to_le_bytes());
        b[18..20].copy_from_slice(&self.e_machine.to_le_bytes());
        b[20..24].copy_from_slice(&self.e_version.to_le_bytes());
        b[24..32].copy_from_slice(&self.e_entry.to_le_bytes());
        b[32..40].copy_from_slice(&self.e_phoff.to_le_bytes());
        b[40..48].copy_from_slice(&self.e_shoff.to_le_bytes());
        b[48..52].copy_from_slice(&self.e_flags.to_le_bytes());
        b[52..54].copy_from_slice(&self.e_ehsize.to_le_bytes());
        b[54..56].copy_from_slice(&self.e_phentsize.to_le_bytes());
        b[56..58].copy_from_slice(&self.e_phnum.to_le_bytes());
        b[58..60].copy_from_slice(&self.e_shentsize.to_le_bytes());
        b[60..62].copy_from_slice(&self.e_shnum.to_le_bytes());
        b[62..64].copy_from_slice(&self.e_shstrndx.to_le_bytes());
        b
    }
}

/// A program header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phdr {
    pub p_type: u32,
    pub p_flags: u32,
    pub p_offset: u64,
    pub p_vaddr: u64,
    pub p_paddr: u64,
    pub p_filesz: u64,
    pub p_memsz: u64,
    pub p_align: u64,
}

impl Phdr {
    fn parse(d: &[u8]) -> Phdr {
        Phdr {
            p_type: u32_at(d, 0),
            p_flags: u32_at(d, 4),
            p_offset: u64_at(d, 8),
            p_vaddr: u64_at(d, 16),
            p_paddr: u64_at(d, 24),
            p_filesz: u64_at(d, 32),
            p_memsz: u64_at(d, 40),
            p_align: u64_at(d, 48),
        }
    }

    /// Serializes the program header (56 bytes).
    pub fn to_bytes(&self) -> [u8; PHDR_SIZE] {
        let mut b = [0u8; PHDR_SIZE];
        b[0..4].copy_from_slice(&self.p_type.to_le_bytes());
        b[4..8].copy_from_slice(&self.p_flags.to_le_bytes());
        b[8..16].copy_from_slice(&self.p_offset.to_le_bytes());
        b[16..24].copy_from_slice(&self.p_vaddr.to_le_bytes());
        b[24..32].copy_from_slice(&self.p_paddr.to_le_bytes());
        b[32..40].copy_from_slice(&self.p_filesz.to_le_bytes());
        b[40..48].copy_from_slice(&self.p_memsz.to_le_bytes());
        b[48..56].copy_from_slice(&self.p_align.to_le_bytes());
        b
    }

    /// Whether `[vaddr, vaddr+len)` lies in this segment's file-backed part.
    pub fn contains_file_vaddr(&self, vaddr: u64, len: u64) -> bool {
        vaddr >= self.p_vaddr
            && vaddr
                .checked_add(len)
                .zip(self.p_vaddr.checked_add(self.p_filesz))
                .is_some_and(|(end, seg_end)| end <= seg_end)
    }
}

/// A section header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shdr {
    pub sh_name: u32,
    pub sh_type: u32,
    pub sh_flags: u64,
    pub sh_addr: u64,
    pub sh_offset: u64,
    pub sh_size: u64,
    pub sh_link: u32,
    pub sh_info: u32,
    pub sh_addralign: u64,
    pub sh_entsize: u64,
}

impl Shdr {
    fn parse(d: &[u8]) -> Shdr {
        Shdr {
            sh_name: u32_at(d, 0),
            sh_type: u32_at(d, 4),
            sh_flags: u64_at(d, 8),
            sh_addr: u64_at(d, 16),
            sh_offset: u64_at(d, 24),
            sh_size: u64_at(d, 32),
            sh_link: u32_at(d, 40),
            sh_info: u32_at(d, 44),
            sh_addralign: u64_at(d, 48),
            sh_entsize: u64_at(d, 56),
        }
    }

    /// Serializes the section header (64 bytes).
    pub fn to_bytes(&self) -> [u8; SHDR_SIZE] {
        let mut b = [0u8; SHDR_SIZE];
        b[0..4].copy_from_slice(&self.sh_name.to_le_bytes());
        b[4..8].copy_from_slice(&self.sh_type.to_le_bytes());
        b[8..16].copy_from_slice(&self.sh_flags.to_le_bytes());
        b[16..24].copy_from_slice(&self.sh_addr.to_le_bytes());
        b[24..32].copy_from_slice(&self.sh_offset.to_le_bytes());
        b[32..40].copy_from_slice(&self.sh_size.to_le_bytes());
        b[40..44].copy_from_slice(&self.sh_link.to_le_bytes());
        b[44..48].copy_from_slice(&self.sh_info.to_le_bytes());
        b[48..56].copy_from_slice(&self.sh_addralign.to_le_bytes());
        b[56..64].copy_from_slice(&self.sh_entsize.to_le_bytes());
        b
    }

    /// Bytes this section occupies in the file (0 for NOBITS).
    pub fn file_size(&self) -> u64 {
        if self.sh_type == SHT_NOBITS {
            0
        } else {
            self.sh_size
        }
    }
}

/// Which dynamic relocation table an entry came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelocTable {
    /// `DT_RELA` (`.rela.dyn`).
    Rela,
    /// `DT_REL` (`.rel.dyn`).
    Rel,
    /// `DT_JMPREL` in RELA form (`.rela.plt`).
    JmpRela,
    /// `DT_JMPREL` in REL form.
    JmpRel,
    /// `DT_RELR` packed relative relocations.
    Relr,
}

impl RelocTable {
    /// Whether entries carry an explicit addend.
    pub fn has_addend(self) -> bool {
        matches!(self, RelocTable::Rela | RelocTable::JmpRela)
    }
}

/// One dynamic relocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DynReloc {
    pub table: RelocTable,
    /// File offset of the relocation entry itself (None for RELR, whose
    /// entries are bitmaps).
    pub entry_offset: Option<u64>,
    /// The address written by the relocation.
    pub r_offset: u64,
    pub r_type: u32,
    pub r_sym: u32,
    /// RELA addend; REL and RELR keep the addend in place.
    pub addend: Option<i64>,
}

/// A dynamic symbol's value and section index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DynSym {
    pub value: u64,
    pub shndx: u16,
    pub info: u8,
    pub other: u8,
}

impl DynSym {
    /// Defined in this file (not `SHN_UNDEF`).
    pub fn is_defined(&self) -> bool {
        self.shndx != 0
    }
}

/// A parsed ELF64 x86-64 file over borrowed bytes.
#[derive(Debug)]
pub struct Elf<'a> {
    pub data: &'a [u8],
    pub header: Header,
    pub phdrs: Vec<Phdr>,
    pub shdrs: Vec<Shdr>,
}

impl<'a> Elf<'a> {
    /// Parses and checks the file header, program headers and section
    /// headers. Only x86-64 ELF64 little-endian executables and shared
    /// objects are accepted.
    pub fn parse(data: &'a [u8]) -> Result<Elf<'a>> {
        if data.len() < 4 || data.get(..4) != Some(b"\x7fELF".as_slice()) {
            return Err(ElfError::NotElf);
        }
        if data.len() < 6 {
            return Err(ElfError::Truncated(format!(
                "file is {} bytes, shorter than the ELF identification",
                data.len()
            )));
        }
        match data.get(4) {
            Some(2) => {}
            Some(1) => {
                return Err(ElfError::Unsupported(
                    "32-bit ELF (ELFCLASS32); only x86-64 ELF64 is supported".into(),
                ))
            }
            other => {
                return Err(ElfError::Unsupported(format!(
                    "unknown ELF class {}",
                    other.copied().unwrap_or(0)
                )))
            }
        }
        if data.get(5) != Some(&1) {
            return Err(ElfError::Unsupported(
                "big-endian ELF; only little-endian x86-64 is supported".into(),
            ));
        }
        let h = get(data, 0, EHDR_SIZE as u64, "ELF header")?;
        let mut ident = [0u8; 16];
        ident.copy_from_slice(h.get(..16).unwrap_or(&[0u8; 16]));
        let header = Header {
            ident,
            e_type: u16_at(h, 16),
            e_machine: u16_at(h, 18),
            e_version: u32_at(h, 20),
            e_entry: u64_at(h, 24),
            e_phoff: u64_at(h, 32),
            e_shoff: u64_at(h, 40),
            e_flags: u32_at(h, 48),
            e_ehsize: u16_at(h, 52),
            e_phentsize: u16_at(h, 54),
            e_phnum: u16_at(h, 56),
            e_shentsize: u16_at(h, 58),
            e_shnum: u16_at(h, 60),
            e_shstrndx: u16_at(h, 62),
        };
        if header.e_machine != EM_X86_64 {
            return Err(ElfError::Unsupported(format!(
                "machine {} ({}); only x86-64 (62) is supported",
                header.e_machine,
                machine_name(header.e_machine)
            )));
        }
        match header.e_type {
            ET_EXEC | ET_DYN => {}
            ET_REL => {
                return Err(ElfError::Unsupported(
                    "relocatable object file; split the linked binary instead".into(),
                ))
            }
            t => {
                return Err(ElfError::Unsupported(format!(
                    "ELF type {t}; only executables and shared objects are supported"
                )))
            }
        }
        if usize::from(header.e_ehsize) != EHDR_SIZE {
            return Err(ElfError::Malformed(format!(
                "e_ehsize {} (expected 64)",
                header.e_ehsize
            )));
        }
        if header.e_phnum == 0xffff {
            return Err(ElfError::Unsupported(
                "extended program header numbering (PN_XNUM)".into(),
            ));
        }
        let mut phdrs = Vec::new();
        if header.e_phnum > 0 {
            if usize::from(header.e_phentsize) != PHDR_SIZE {
                return Err(ElfError::Malformed(format!(
                    "e_phentsize {} (expected 56)",
                    header.e_phentsize
                )));
            }
            let len = u64::from(header.e_phnum) * PHDR_SIZE as u64;
            let table = get(data, header.e_phoff, len, "program header table")?;
            phdrs = table.chunks_exact(PHDR_SIZE).map(Phdr::parse).collect();
        }
        let mut shdrs = Vec::new();
        if header.e_shoff != 0 {
            if usize::from(header.e_shentsize) != SHDR_SIZE {
                return Err(ElfError::Malformed(format!(
                    "e_shentsize {} (expected 64)",
                    header.e_shentsize
                )));
            }
            if header.e_shnum == 0 {
                return Err(ElfError::Unsupported(
                    "extended section numbering (e_shnum = 0)".into(),
                ));
            }
            let len = u64::from(header.e_shnum) * SHDR_SIZE as u64;
            let table = get(data, header.e_shoff, len, "section header table")?;
            shdrs = table.chunks_exact(SHDR_SIZE).map(Shdr::parse).collect();
            if header.e_shstrndx == 0xffff {
                return Err(ElfError::Unsupported(
                    "extended section name table index (SHN_XINDEX)".into(),
                ));
            }
            if usize::from(header.e_shstrndx) >= shdrs.len() {
                return Err(ElfError::Malformed(format!(
                    "e_shstrndx {} out of range ({} sections)",
                    header.e_shstrndx,
                    shdrs.len()
                )));
            }
        }
        Ok(Elf {
            data,
            header,
            phdrs,
            shdrs,
        })
    }

    /// The section name string table's bytes.
    pub fn shstrtab(&self) -> Result<&'a [u8]> {
        let i = usize::from(self.header.e_shstrndx);
        let sh = self
            .shdrs
            .get(i)
            .ok_or_else(|| ElfError::Malformed("no section name string table".into()))?;
        if i == 0 || sh.sh_type != SHT_STRTAB {
            return Err(ElfError::Malformed(
                "e_shstrndx does not name a string table".into(),
            ));
        }
        get(
            self.data,
            sh.sh_offset,
            sh.sh_size,
            "section name string table",
        )
    }

    /// The name of section `i` (lossy for non-UTF-8 names).
    pub fn section_name(&self, i: usize) -> Result<String> {
        let sh = self
            .shdrs
            .get(i)
            .ok_or_else(|| ElfError::Malformed(format!("section index {i} out of range")))?;
        let tab = self.shstrtab()?;
        let start = usize::try_from(sh.sh_name).unwrap_or(usize::MAX);
        let rest = tab.get(start..).ok_or_else(|| {
            ElfError::Malformed(format!(
                "section {i}: name offset {} out of range",
                sh.sh_name
            ))
        })?;
        let end = rest.iter().position(|&b| b == 0).ok_or_else(|| {
            ElfError::Malformed(format!("section {i}: name is not NUL-terminated"))
        })?;
        Ok(String::from_utf8_lossy(rest.get(..end).unwrap_or_default()).into_owned())
    }

    /// Index of the first section called `name`.
    pub fn find_section(&self, name: &str) -> Result<Option<usize>> {
        if self.shdrs.is_empty() {
            return Ok(None);
        }
        for i in 1..self.shdrs.len() {
            if self.section_name(i)? == name {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    /// A section's bytes in the file (empty for NOBITS).
    pub fn section_data(&self, i: usize) -> Result<&'a [u8]> {
        let sh = self
            .shdrs
            .get(i)
            .ok_or_else(|| ElfError::Malformed(format!("section index {i} out of range")))?;
        get(self.data, sh.sh_offset, sh.file_size(), "section contents")
    }

    /// File offset of `[vaddr, vaddr+len)`, when a PT_LOAD maps it from the file.
    pub fn vaddr_to_offset(&self, vaddr: u64, len: u64) -> Option<u64> {
        self.phdrs
            .iter()
            .filter(|p| p.p_type == PT_LOAD)
            .find(|p| p.contains_file_vaddr(vaddr, len))
            .and_then(|p| p.p_offset.checked_add(vaddr - p.p_vaddr))
    }

    fn bytes_at_vaddr(&self, vaddr: u64, len: u64, what: &str) -> Result<(u64, &'a [u8])> {
        let off = self.vaddr_to_offset(vaddr, len).ok_or_else(|| {
            ElfError::Malformed(format!(
                "{what} at address {vaddr:#x} ({len} bytes) is not in the file part of any PT_LOAD"
            ))
        })?;
        Ok((off, get(self.data, off, len, what)?))
    }

    /// The 8-byte little-endian value stored at `vaddr` in the file.
    pub fn u64_at_vaddr(&self, vaddr: u64) -> Result<u64> {
        let (_, b) = self.bytes_at_vaddr(vaddr, 8, "8-byte value")?;
        Ok(u64_at(b, 0))
    }

    /// The `PT_DYNAMIC` entries up to `DT_NULL` (empty for static files).
    pub fn dynamic(&self) -> Result<Vec<(i64, u64)>> {
        let Some(dynp) = self.phdrs.iter().find(|p| p.p_type == PT_DYNAMIC) else {
            return Ok(Vec::new());
        };
        let d = get(self.data, dynp.p_offset, dynp.p_filesz, "dynamic section")?;
        let mut out = Vec::with_capacity(d.len() / 16);
        for e in d.chunks_exact(16) {
            let tag = u64_at(e, 0) as i64;
            if tag == DT_NULL {
                break;
            }
            out.push((tag, u64_at(e, 8)));
        }
        Ok(out)
    }

    /// Every dynamic relocation: `DT_RELA`, `DT_REL`, `DT_JMPREL` and
    /// `DT_RELR` (decoded).
    pub fn dynamic_relocations(&self) -> Result<Vec<DynReloc>> {
        let dynamic = self.dynamic()?;
        let tag = |t: i64| dynamic.iter().find(|(k, _)| *k == t).map(|(_, v)| *v);
        let mut out = Vec::new();
        if let Some(addr) = tag(DT_RELA) {
            let size = tag(DT_RELASZ).unwrap_or(0);
            let ent = tag(DT_RELAENT).unwrap_or(24);
            self.read_rel_table(addr, size, ent, RelocTable::Rela, &mut out)?;
        }
        if let Some(addr) = tag(DT_REL) {
            let size = tag(DT_RELSZ).unwrap_or(0);
            let ent = tag(DT_RELENT).unwrap_or(16);
            self.read_rel_table(addr, size, ent, RelocTable::Rel, &mut out)?;
        }
        if let Some(addr) = tag(DT_JMPREL) {
            let size = tag(DT_PLTRELSZ).unwrap_or(0);
            let table = if tag(DT_PLTREL) == Some(DT_REL as u64) {
                RelocTable::JmpRel
            } else {
                RelocTable::JmpRela
            };
            let ent = if table == RelocTable::JmpRel { 16 } else { 24 };
            self.read_rel_table(addr, size, ent, table, &mut out)?;
        }
        if let Some(addr) = tag(DT_RELR) {
            let size = tag(DT_RELRSZ).unwrap_or(0);
            if let Some(ent) = tag(DT_RELRENT) {
                if ent != 8 {
                    return Err(ElfError::Malformed(format!(
                        "DT_RELRENT {ent} (expected 8)"
                    )));
                }
            }
            let (_, d) = self.bytes_at_vaddr(addr, size, "RELR relocation table")?;
            decode_relr(d, &mut out)?;
        }
        Ok(out)
    }

    fn read_rel_table(
        &self,
        addr: u64,
        size: u64,
        ent: u64,
        table: RelocTable,
        out: &mut Vec<DynReloc>,
    ) -> Result<()> {
        let expected = if table.has_addend() { 24 } else { 16 };
        if ent != expected {
            return Err(ElfError::Malformed(format!(
                "{table:?} relocation entry size {ent} (expected {expected})"
            )));
        }
        if size == 0 {
            return Ok(());
        }
        let (off, d) = self.bytes_at_vaddr(addr, size, "relocation table")?;
        let n = d.len() / expected as usize;
        out.reserve(n);
        for (i, e) in d.chunks_exact(expected as usize).enumerate() {
            let info = u64_at(e, 8);
            out.push(DynReloc {
                table,
                entry_offset: Some(off + (i as u64) * expected),
                r_offset: u64_at(e, 0),
                r_type: (info & 0xffff_ffff) as u32,
                r_sym: (info >> 32) as u32,
                addend: table.has_addend().then(|| u64_at(e, 16) as i64),
            });
        }
        Ok(())
    }

    /// Dynamic symbol `index` (through `DT_SYMTAB`, bounded by `.dynsym`).
    pub fn dynamic_symbol(&self, index: u32) -> Result<DynSym> {
        let dynamic = self.dynamic()?;
        let symtab = dynamic
            .iter()
            .find(|(k, _)| *k == DT_SYMTAB)
            .map(|(_, v)| *v)
            .ok_or_else(|| {
                ElfError::Malformed("relocation names a symbol but there is no DT_SYMTAB".into())
            })?;
        let syment = dynamic
            .iter()
            .find(|(k, _)| *k == DT_SYMENT)
            .map_or(SYM_SIZE, |(_, v)| *v);
        if syment != SYM_SIZE {
            return Err(ElfError::Malformed(format!(
                "DT_SYMENT {syment} (expected 24)"
            )));
        }
        if let Some(dynsym) = self
            .shdrs
            .iter()
            .find(|s| s.sh_type == SHT_DYNSYM && s.sh_addr == symtab)
        {
            if u64::from(index) >= dynsym.sh_size / SYM_SIZE {
                return Err(ElfError::Malformed(format!(
                    "dynamic symbol index {index} out of range"
                )));
            }
        }
        let addr = u64::from(index)
            .checked_mul(SYM_SIZE)
            .and_then(|o| o.checked_add(symtab))
            .ok_or_else(|| {
                ElfError::Malformed(format!("dynamic symbol index {index} out of range"))
            })?;
        let (_, s) = self.bytes_at_vaddr(addr, SYM_SIZE, "dynamic symbol")?;
        Ok(DynSym {
            info: s.get(4).copied().unwrap_or(0),
            other: s.get(5).copied().unwrap_or(0),
            shndx: u16_at(s, 6),
            value: u64_at(s, 8),
        })
    }

    /// Every dynamic symbol (through the `.dynsym` section).
    pub fn dynamic_symbols(&self) -> Result<Vec<DynSym>> {
        let Some(i) = self.shdrs.iter().position(|s| s.sh_type == SHT_DYNSYM) else {
            return Ok(Vec::new());
        };
        let d = self.section_data(i)?;
        Ok(d.chunks_exact(SYM_SIZE as usize)
            .map(|s| DynSym {
                info: s.get(4).copied().unwrap_or(0),
                other: s.get(5).copied().unwrap_or(0),
                shndx: u16_at(s, 6),
                value: u64_at(s, 8),
            })
            .collect())
    }
}

/// Decodes `DT_RELR` (address entries and 63-bit bitmaps, 8-byte words).
fn decode_relr(d: &[u8], out: &mut Vec<DynReloc>) -> Result<()> {
    let mut base: Option<u64> = None;
    for w in d.chunks_exact(8) {
        let entry = u64_at(w, 0);
        if entry & 1 == 0 {
            out.push(relr(entry));
            base = Some(entry.wrapping_add(8));
        } else {
            let start = base.ok_or_else(|| {
                ElfError::Malformed("RELR table starts with a bitmap entry".into())
            })?;
            let mut bits = entry >> 1;
            let mut i = 0u64;
            while bits != 0 {
                if bits & 1 != 0 {
                    out.push(relr(start.wrapping_add(i * 8)));
                }
                bits >>= 1;
                i += 1;
            }
            base = Some(start.wrapping_add(63 * 8));
        }
    }
    Ok(())
}

fn relr(r_offset: u64) -> DynReloc {
    DynReloc {
        table: RelocTable::Relr,
        entry_offset: None,
        r_offset,
        r_type: R_X86_64_RELATIVE,
        r_sym: 0,
        addend: None,
    }
}

fn machine_name(m: u16) -> &'static str {
    match m {
        3 => "i386",
        40 => "ARM",
        62 => "x86-64",
        183 => "AArch64",
        243 => "RISC-V",
        224 => "AMDGPU",
        21 => "PowerPC64",
        22 => "s390",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relr_decoding() {
        // Address 0x1000, then bitmap with bits for 0x1008 and 0x1010 (bits 1,2 => value 0b111).
        let mut d = Vec::new();
        d.extend_from_slice(&0x1000u64.to_le_bytes());
        d.extend_from_slice(&0b111u64.to_le_bytes());
        // Next bitmap covers from 0x1008 + 63*8.
        d.extend_from_slice(&0b11u64.to_le_bytes());
        let mut out = Vec::new();
        decode_relr(&d, &mut out).expect("valid RELR");
        let offs: Vec<u64> = out.iter().map(|r| r.r_offset).collect();
        assert_eq!(offs, [0x1000, 0x1008, 0x1010, 0x1008 + 63 * 8]);
        let mut out = Vec::new();
        assert!(decode_relr(&0b11u64.to_le_bytes(), &mut out).is_err());
    }

    #[test]
    fn rejects_non_elf_and_unsupported() {
        assert!(matches!(Elf::parse(b"hello world"), Err(ElfError::NotElf)));
        assert!(matches!(
            Elf::parse(b"\x7fELF\x02\x01"),
            Err(ElfError::Truncated(_))
        ));
        assert!(matches!(
            Elf::parse(b"\x7fELF\x01\x01\x01"),
            Err(ElfError::Unsupported(_))
        ));
        assert!(matches!(
            Elf::parse(b"\x7fELF\x02\x02\x01"),
            Err(ElfError::Unsupported(_))
        ));
    }
}
