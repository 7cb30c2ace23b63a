//! Bounds-checked reading of ELF64 little-endian x86-64 headers, sections,
//! dynamic entries, dynamic relocations and dynamic symbols, over `object`'s
//! raw ELF types (`object::elf`): every table is a `Pod` slice read with
//! [`ReadRef`], and a read past the end is a [`ElfError::Truncated`] naming
//! what, where and how much, never a value.

use object::elf::{
    Dyn64, FileHeader64, ProgramHeader64, Rel64, Rela64, Relr64, SectionHeader64, Sym64,
};
use object::pod::{bytes_of, Pod};
use object::read::elf::{FileHeader, RelrIterator};
use object::read::ReadRef;
use object::{LittleEndian as LE, U32, U64};

pub use object::elf::{
    DynamicTag, FileType, Machine, ProgramFlags, ProgramType, RelocationType, SectionFlags,
    SectionType, DT_JMPREL, DT_NULL, DT_PLTREL, DT_PLTRELSZ, DT_REL, DT_RELA, DT_RELAENT,
    DT_RELASZ, DT_RELENT, DT_RELR, DT_RELRENT, DT_RELRSZ, DT_RELSZ, DT_SYMENT, DT_SYMTAB,
    ELFCLASS32, ELFCLASS64, ELFDATA2LSB, EM_X86_64, ET_DYN, ET_EXEC, ET_REL, PF_R, PF_W,
    PT_DYNAMIC, PT_INTERP, PT_LOAD, PT_PHDR, R_X86_64_64, R_X86_64_GLOB_DAT, R_X86_64_IRELATIVE,
    R_X86_64_JUMP_SLOT, R_X86_64_RELATIVE, SHF_ALLOC, SHT_DYNSYM, SHT_NOBITS, SHT_PROGBITS,
    SHT_STRTAB,
};

use super::{ElfError, Result};

/// Size of the ELF64 file header.
pub const EHDR_SIZE: usize = std::mem::size_of::<FileHeader64<LE>>();
/// Size of one ELF64 program header.
pub const PHDR_SIZE: usize = std::mem::size_of::<ProgramHeader64<LE>>();
/// Size of one ELF64 section header.
pub const SHDR_SIZE: usize = std::mem::size_of::<SectionHeader64<LE>>();
const SYM_SIZE: u64 = std::mem::size_of::<Sym64<LE>>() as u64;
const DYN_SIZE: usize = std::mem::size_of::<Dyn64<LE>>();
const RELA_SIZE: u64 = std::mem::size_of::<Rela64<LE>>() as u64;
const REL_SIZE: u64 = std::mem::size_of::<Rel64<LE>>() as u64;
const RELR_SIZE: u64 = std::mem::size_of::<Relr64<LE>>() as u64;
/// First reserved section index (`SHN_LORESERVE`): symbols with a section
/// index at or above it are absolute, common or extended.
pub const SHN_LORESERVE: u16 = 0xff00;

/// `len` bytes at file offset `off`, or a [`ElfError::Truncated`] naming `what`.
pub(crate) fn get<'a>(data: &'a [u8], off: u64, len: u64, what: &str) -> Result<&'a [u8]> {
    data.read_bytes_at(off, len)
        .map_err(|()| trunc(what, off, len, data.len()))
}

/// One `T` at file offset `off`.
pub(crate) fn pod_at<'a, T: Pod>(data: &'a [u8], off: u64, what: &str) -> Result<&'a T> {
    data.read_at::<T>(off)
        .map_err(|()| trunc(what, off, std::mem::size_of::<T>() as u64, data.len()))
}

/// `count` `T`s at file offset `off`.
pub(crate) fn pods_at<'a, T: Pod>(
    data: &'a [u8],
    off: u64,
    count: usize,
    what: &str,
) -> Result<&'a [T]> {
    data.read_slice_at::<T>(off, count).map_err(|()| {
        let len = (count as u64).saturating_mul(std::mem::size_of::<T>() as u64);
        trunc(what, off, len, data.len())
    })
}

fn trunc(what: &str, off: u64, len: u64, file_len: usize) -> ElfError {
    ElfError::Truncated(format!(
        "{what} at offset {off:#x} ({len} bytes) extends past the end of the file ({file_len} bytes)"
    ))
}

/// A program header, decoded from [`ProgramHeader64`] (the rewrite edits
/// these values and encodes them back with [`Phdr::to_bytes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phdr {
    pub p_type: ProgramType,
    pub p_flags: ProgramFlags,
    pub p_offset: u64,
    pub p_vaddr: u64,
    pub p_paddr: u64,
    pub p_filesz: u64,
    pub p_memsz: u64,
    pub p_align: u64,
}

impl From<&ProgramHeader64<LE>> for Phdr {
    fn from(p: &ProgramHeader64<LE>) -> Phdr {
        Phdr {
            p_type: p.p_type.get(LE),
            p_flags: p.p_flags.get(LE),
            p_offset: p.p_offset.get(LE),
            p_vaddr: p.p_vaddr.get(LE),
            p_paddr: p.p_paddr.get(LE),
            p_filesz: p.p_filesz.get(LE),
            p_memsz: p.p_memsz.get(LE),
            p_align: p.p_align.get(LE),
        }
    }
}

impl Phdr {
    /// The on-disk [`ProgramHeader64`].
    pub fn to_raw(&self) -> ProgramHeader64<LE> {
        ProgramHeader64 {
            p_type: U32::new(LE, self.p_type),
            p_flags: U32::new(LE, self.p_flags),
            p_offset: U64::new(LE, self.p_offset),
            p_vaddr: U64::new(LE, self.p_vaddr),
            p_paddr: U64::new(LE, self.p_paddr),
            p_filesz: U64::new(LE, self.p_filesz),
            p_memsz: U64::new(LE, self.p_memsz),
            p_align: U64::new(LE, self.p_align),
        }
    }

    /// Serializes the program header (56 bytes).
    pub fn to_bytes(&self) -> [u8; PHDR_SIZE] {
        let mut b = [0u8; PHDR_SIZE];
        b.copy_from_slice(bytes_of(&self.to_raw()));
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

/// A section header, decoded from [`SectionHeader64`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shdr {
    pub sh_name: u32,
    pub sh_type: SectionType,
    pub sh_flags: SectionFlags,
    pub sh_addr: u64,
    pub sh_offset: u64,
    pub sh_size: u64,
    pub sh_link: u32,
    pub sh_info: u32,
    pub sh_addralign: u64,
    pub sh_entsize: u64,
}

impl From<&SectionHeader64<LE>> for Shdr {
    fn from(s: &SectionHeader64<LE>) -> Shdr {
        Shdr {
            sh_name: s.sh_name.get(LE),
            sh_type: s.sh_type.get(LE),
            sh_flags: s.sh_flags.get(LE),
            sh_addr: s.sh_addr.get(LE),
            sh_offset: s.sh_offset.get(LE),
            sh_size: s.sh_size.get(LE),
            sh_link: s.sh_link.get(LE),
            sh_info: s.sh_info.get(LE),
            sh_addralign: s.sh_addralign.get(LE),
            sh_entsize: s.sh_entsize.get(LE),
        }
    }
}

impl Shdr {
    /// The on-disk [`SectionHeader64`].
    pub fn to_raw(&self) -> SectionHeader64<LE> {
        SectionHeader64 {
            sh_name: U32::new(LE, self.sh_name),
            sh_type: U32::new(LE, self.sh_type),
            sh_flags: U64::new(LE, self.sh_flags),
            sh_addr: U64::new(LE, self.sh_addr),
            sh_offset: U64::new(LE, self.sh_offset),
            sh_size: U64::new(LE, self.sh_size),
            sh_link: U32::new(LE, self.sh_link),
            sh_info: U32::new(LE, self.sh_info),
            sh_addralign: U64::new(LE, self.sh_addralign),
            sh_entsize: U64::new(LE, self.sh_entsize),
        }
    }

    /// Serializes the section header (64 bytes).
    pub fn to_bytes(&self) -> [u8; SHDR_SIZE] {
        let mut b = [0u8; SHDR_SIZE];
        b.copy_from_slice(bytes_of(&self.to_raw()));
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

    /// Whether the section occupies memory at run time.
    pub fn is_alloc(&self) -> bool {
        self.sh_flags.intersects(SHF_ALLOC)
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
    pub r_type: RelocationType,
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

impl From<&Sym64<LE>> for DynSym {
    fn from(s: &Sym64<LE>) -> DynSym {
        DynSym {
            value: s.st_value.get(LE),
            shndx: s.st_shndx.get(LE).0,
            info: s.st_info.0,
            other: s.st_other.0,
        }
    }
}

impl DynSym {
    /// Defined in this file (not `SHN_UNDEF`).
    pub fn is_defined(&self) -> bool {
        self.shndx != 0
    }

    /// Defined relative to a section of this file (not undefined, absolute,
    /// common or an extended index).
    pub fn in_section(&self) -> bool {
        self.is_defined() && self.shndx < SHN_LORESERVE
    }
}

/// A parsed ELF64 x86-64 file over borrowed bytes.
#[derive(Debug)]
pub struct Elf<'a> {
    pub data: &'a [u8],
    /// The file header as stored (copied: the rewrite edits a copy).
    pub header: FileHeader64<LE>,
    pub phdrs: Vec<Phdr>,
    pub shdrs: Vec<Shdr>,
}

impl<'a> Elf<'a> {
    /// Parses and checks the file header, program headers and section
    /// headers. Only x86-64 ELF64 little-endian executables and shared
    /// objects are accepted.
    ///
    /// The header and both tables are read by `object`'s checked parsing
    /// ([`FileHeader::parse`], [`FileHeader::program_headers`],
    /// [`FileHeader::section_headers`]: magic, class, encoding, version,
    /// entry sizes, bounds); its errors are turned into ours with the
    /// offset and the expectation. The identification is looked at first
    /// only to say which of its checks failed.
    pub fn parse(data: &'a [u8]) -> Result<Elf<'a>> {
        check_ident(data)?;
        let header = *FileHeader64::<LE>::parse(data)
            .map_err(|e| table_error("ELF header", 0, EHDR_SIZE as u64, data.len(), e))?;
        let machine = header.e_machine.get(LE);
        if machine != EM_X86_64 {
            return Err(ElfError::Unsupported(format!(
                "machine {} ({}); only x86-64 (62) is supported",
                machine.0,
                machine_name(machine)
            )));
        }
        match header.e_type.get(LE) {
            ET_EXEC | ET_DYN => {}
            ET_REL => {
                return Err(ElfError::Unsupported(
                    "relocatable object file; split the linked binary instead".into(),
                ))
            }
            t => {
                return Err(ElfError::Unsupported(format!(
                    "ELF type {}; only executables and shared objects are supported",
                    t.0
                )))
            }
        }
        // `object` leaves e_ehsize unchecked; the rewrite copies the header
        // as one EHDR_SIZE block.
        let ehsize = header.e_ehsize.get(LE);
        if usize::from(ehsize) != EHDR_SIZE {
            return Err(ElfError::Malformed(format!(
                "e_ehsize {ehsize} (expected {EHDR_SIZE})"
            )));
        }
        // `object` follows extended numbering into section 0; the rewrite
        // writes the counts and the name-table index back into the 16-bit
        // header fields, so such files are refused here instead.
        let phnum = header.e_phnum.get(LE);
        let shoff = header.e_shoff.get(LE);
        if phnum == object::elf::PN_XNUM {
            return Err(ElfError::Unsupported(
                "extended program header numbering (PN_XNUM)".into(),
            ));
        }
        if shoff != 0 && header.e_shnum.get(LE) == 0 {
            return Err(ElfError::Unsupported(
                "extended section numbering (e_shnum = 0)".into(),
            ));
        }
        let phdrs = header.program_headers(LE, data).map_err(|e| {
            entry_size_error("e_phentsize", header.e_phentsize.get(LE), PHDR_SIZE).unwrap_or_else(
                || {
                    let len = u64::from(phnum) * PHDR_SIZE as u64;
                    table_error(
                        "program header table",
                        header.e_phoff.get(LE),
                        len,
                        data.len(),
                        e,
                    )
                },
            )
        })?;
        let shdrs = header.section_headers(LE, data).map_err(|e| {
            entry_size_error("e_shentsize", header.e_shentsize.get(LE), SHDR_SIZE).unwrap_or_else(
                || {
                    let len = u64::from(header.e_shnum.get(LE)) * SHDR_SIZE as u64;
                    table_error("section header table", shoff, len, data.len(), e)
                },
            )
        })?;
        if !shdrs.is_empty() {
            let shstrndx = header.e_shstrndx.get(LE).0;
            if shstrndx == object::elf::SHN_XINDEX.0 {
                return Err(ElfError::Unsupported(
                    "extended section name table index (SHN_XINDEX)".into(),
                ));
            }
            if usize::from(shstrndx) >= shdrs.len() {
                return Err(ElfError::Malformed(format!(
                    "e_shstrndx {shstrndx} out of range ({} sections)",
                    shdrs.len()
                )));
            }
        }
        Ok(Elf {
            data,
            header,
            phdrs: phdrs.iter().map(Phdr::from).collect(),
            shdrs: shdrs.iter().map(Shdr::from).collect(),
        })
    }

    /// Index of the section name string table (`e_shstrndx`).
    pub fn shstrndx(&self) -> usize {
        usize::from(self.header.e_shstrndx.get(LE).0)
    }

    /// File offset of the program header table (`e_phoff`).
    pub fn phoff(&self) -> u64 {
        self.header.e_phoff.get(LE)
    }

    /// File offset of the section header table (`e_shoff`, 0 for none).
    pub fn shoff(&self) -> u64 {
        self.header.e_shoff.get(LE)
    }

    /// `e_type`.
    pub fn file_type(&self) -> FileType {
        self.header.e_type.get(LE)
    }

    /// The file header with new table positions and counts, encoded.
    pub fn header_bytes(&self, phoff: u64, phnum: u16, shoff: u64, shnum: u16) -> [u8; EHDR_SIZE] {
        let mut h = self.header;
        h.e_phoff.set(LE, phoff);
        h.e_phnum.set(LE, phnum);
        h.e_shoff.set(LE, shoff);
        h.e_shnum.set(LE, shnum);
        let mut b = [0u8; EHDR_SIZE];
        b.copy_from_slice(bytes_of(&h));
        b
    }

    /// The section name string table's bytes.
    pub fn shstrtab(&self) -> Result<&'a [u8]> {
        let i = self.shstrndx();
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
        let tab = object::read::StringTable::new(tab, 0, tab.len() as u64);
        let name = tab.get(sh.sh_name).map_err(|()| {
            ElfError::Malformed(format!(
                "section {i}: name offset {} out of range or not NUL-terminated",
                sh.sh_name
            ))
        })?;
        Ok(String::from_utf8_lossy(name).into_owned())
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

    fn offset_of_vaddr(&self, vaddr: u64, len: u64, what: &str) -> Result<u64> {
        self.vaddr_to_offset(vaddr, len).ok_or_else(|| {
            ElfError::Malformed(format!(
                "{what} at address {vaddr:#x} ({len} bytes) is not in the file part of any PT_LOAD"
            ))
        })
    }

    /// `count` `T`s at address `vaddr` (mapped from the file by a PT_LOAD),
    /// with the file offset they start at.
    fn pods_at_vaddr<T: Pod>(&self, vaddr: u64, count: u64, what: &str) -> Result<(u64, &'a [T])> {
        let len = count
            .checked_mul(std::mem::size_of::<T>() as u64)
            .ok_or_else(|| ElfError::Malformed(format!("{what}: size overflow")))?;
        let n = usize::try_from(count)
            .map_err(|_| ElfError::Malformed(format!("{what}: {count} entries")))?;
        let off = self.offset_of_vaddr(vaddr, len, what)?;
        Ok((off, pods_at::<T>(self.data, off, n, what)?))
    }

    /// The 8-byte little-endian value stored at `vaddr` in the file.
    pub fn u64_at_vaddr(&self, vaddr: u64) -> Result<u64> {
        let off = self.offset_of_vaddr(vaddr, 8, "8-byte value")?;
        Ok(pod_at::<object::U64<LE>>(self.data, off, "8-byte value")?.get(LE))
    }

    /// The `PT_DYNAMIC` entries up to `DT_NULL` (empty for static files).
    pub fn dynamic(&self) -> Result<Vec<(DynamicTag, u64)>> {
        let Some(dynp) = self.phdrs.iter().find(|p| p.p_type == PT_DYNAMIC) else {
            return Ok(Vec::new());
        };
        // A partial trailing entry is not an entry (as ld.so reads it).
        let count = usize::try_from(dynp.p_filesz / DYN_SIZE as u64).unwrap_or(usize::MAX);
        let table = pods_at::<Dyn64<LE>>(self.data, dynp.p_offset, count, "dynamic section")?;
        Ok(table
            .iter()
            .map(|d| (d.d_tag.get(LE), d.d_val.get(LE)))
            .take_while(|(tag, _)| *tag != DT_NULL)
            .collect())
    }

    /// Every dynamic relocation: `DT_RELA`, `DT_REL`, `DT_JMPREL` and
    /// `DT_RELR` (decoded).
    pub fn dynamic_relocations(&self) -> Result<Vec<DynReloc>> {
        let dynamic = self.dynamic()?;
        let tag = |t: DynamicTag| dynamic.iter().find(|(k, _)| *k == t).map(|(_, v)| *v);
        let mut out = Vec::new();
        if let Some(addr) = tag(DT_RELA) {
            let size = tag(DT_RELASZ).unwrap_or(0);
            let ent = tag(DT_RELAENT).unwrap_or(RELA_SIZE);
            self.read_rel_table(addr, size, ent, RelocTable::Rela, &mut out)?;
        }
        if let Some(addr) = tag(DT_REL) {
            let size = tag(DT_RELSZ).unwrap_or(0);
            let ent = tag(DT_RELENT).unwrap_or(REL_SIZE);
            self.read_rel_table(addr, size, ent, RelocTable::Rel, &mut out)?;
        }
        if let Some(addr) = tag(DT_JMPREL) {
            let size = tag(DT_PLTRELSZ).unwrap_or(0);
            let table = if tag(DT_PLTREL) == Some(DT_REL.0 as u64) {
                RelocTable::JmpRel
            } else {
                RelocTable::JmpRela
            };
            let ent = if table == RelocTable::JmpRel {
                REL_SIZE
            } else {
                RELA_SIZE
            };
            self.read_rel_table(addr, size, ent, table, &mut out)?;
        }
        if let Some(addr) = tag(DT_RELR) {
            let size = tag(DT_RELRSZ).unwrap_or(0);
            if let Some(ent) = tag(DT_RELRENT) {
                if ent != RELR_SIZE {
                    return Err(ElfError::Malformed(format!(
                        "DT_RELRENT {ent} (expected {RELR_SIZE})"
                    )));
                }
            }
            let (_, words) =
                self.pods_at_vaddr::<Relr64<LE>>(addr, size / RELR_SIZE, "RELR relocation table")?;
            decode_relr(words, &mut out)?;
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
        let expected = if table.has_addend() {
            RELA_SIZE
        } else {
            REL_SIZE
        };
        if ent != expected {
            return Err(ElfError::Malformed(format!(
                "{table:?} relocation entry size {ent} (expected {expected})"
            )));
        }
        if size == 0 {
            return Ok(());
        }
        let what = "relocation table";
        // The table must be mapped whole, even a trailing partial entry.
        self.offset_of_vaddr(addr, size, what)?;
        let count = size / expected;
        if table.has_addend() {
            let (off, rels) = self.pods_at_vaddr::<Rela64<LE>>(addr, count, what)?;
            out.reserve(rels.len());
            out.extend(rels.iter().zip(0u64..).map(|(r, i)| DynReloc {
                table,
                entry_offset: Some(off + i * expected),
                r_offset: r.r_offset.get(LE),
                r_type: r.r_type(LE, false),
                r_sym: r.r_sym(LE, false),
                addend: Some(r.r_addend.get(LE)),
            }));
        } else {
            let (off, rels) = self.pods_at_vaddr::<Rel64<LE>>(addr, count, what)?;
            out.reserve(rels.len());
            out.extend(rels.iter().zip(0u64..).map(|(r, i)| DynReloc {
                table,
                entry_offset: Some(off + i * expected),
                r_offset: r.r_offset.get(LE),
                r_type: r.r_type(LE),
                r_sym: r.r_sym(LE),
                addend: None,
            }));
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
                "DT_SYMENT {syment} (expected {SYM_SIZE})"
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
        let (_, sym) = self.pods_at_vaddr::<Sym64<LE>>(addr, 1, "dynamic symbol")?;
        sym.first().map(DynSym::from).ok_or_else(|| {
            ElfError::Malformed(format!("dynamic symbol index {index} out of range"))
        })
    }

    /// Every dynamic symbol (through the `.dynsym` section).
    pub fn dynamic_symbols(&self) -> Result<Vec<DynSym>> {
        let Some(s) = self.shdrs.iter().find(|s| s.sh_type == SHT_DYNSYM) else {
            return Ok(Vec::new());
        };
        // A partial trailing entry is not a symbol.
        let count = usize::try_from(s.file_size() / SYM_SIZE).unwrap_or(usize::MAX);
        get(self.data, s.sh_offset, s.file_size(), "section contents")?;
        let syms = pods_at::<Sym64<LE>>(self.data, s.sh_offset, count, "dynamic symbol table")?;
        Ok(syms.iter().map(DynSym::from).collect())
    }
}

/// Decodes `DT_RELR` (address entries and 63-bit bitmaps, 8-byte words)
/// with `object`'s [`RelrIterator`]. A table that starts with a bitmap has
/// no base address: malformed.
fn decode_relr(words: &[Relr64<LE>], out: &mut Vec<DynReloc>) -> Result<()> {
    if words.first().is_some_and(|w| w.0.get(LE) & 1 != 0) {
        return Err(ElfError::Malformed(
            "RELR table starts with a bitmap entry".into(),
        ));
    }
    out.extend(
        RelrIterator::<FileHeader64<LE>>::new(LE, words).map(|r_offset| DynReloc {
            table: RelocTable::Relr,
            entry_offset: None,
            r_offset,
            r_type: R_X86_64_RELATIVE,
            r_sym: 0,
            addend: None,
        }),
    );
    Ok(())
}

/// Says which of the identification checks `object`'s
/// [`FileHeader::parse`] makes (it reports them all as one "Unsupported ELF
/// header") the input fails: not ELF, too short, 32-bit, big-endian or an
/// unknown version.
fn check_ident(data: &[u8]) -> Result<()> {
    if data.get(..4) != Some(object::elf::ELFMAG.as_slice()) {
        return Err(ElfError::NotElf);
    }
    let (Some(&class), Some(&encoding), Some(&version)) = (data.get(4), data.get(5), data.get(6))
    else {
        return Err(ElfError::Truncated(format!(
            "file is {} bytes, shorter than the ELF identification",
            data.len()
        )));
    };
    match object::elf::FileClass(class) {
        ELFCLASS64 => {}
        ELFCLASS32 => {
            return Err(ElfError::Unsupported(
                "32-bit ELF (ELFCLASS32); only x86-64 ELF64 is supported".into(),
            ))
        }
        _ => return Err(ElfError::Unsupported(format!("unknown ELF class {class}"))),
    }
    if object::elf::DataEncoding(encoding) != ELFDATA2LSB {
        return Err(ElfError::Unsupported(
            "big-endian ELF; only little-endian x86-64 is supported".into(),
        ));
    }
    if object::elf::FileVersion(version) != object::elf::EV_CURRENT {
        return Err(ElfError::Unsupported(format!(
            "ELF identification version {version} (expected {})",
            object::elf::EV_CURRENT.0
        )));
    }
    Ok(())
}

/// A header entry size other than the one ELF64 defines.
fn entry_size_error(field: &str, got: u16, expected: usize) -> Option<ElfError> {
    (usize::from(got) != expected)
        .then(|| ElfError::Malformed(format!("{field} {got} (expected {expected})")))
}

/// `object`'s refusal to read `what` (`len` bytes at `off`): truncated when
/// the bytes are not all in the file, else malformed with `object`'s reason
/// (misaligned, count overflow).
fn table_error(
    what: &str,
    off: u64,
    len: u64,
    file_len: usize,
    e: object::read::Error,
) -> ElfError {
    if off.checked_add(len).is_none_or(|end| end > file_len as u64) {
        trunc(what, off, len, file_len)
    } else {
        ElfError::Malformed(format!("{what} at offset {off:#x} ({len} bytes): {e}"))
    }
}

fn machine_name(m: Machine) -> &'static str {
    use object::elf::{EM_386, EM_AARCH64, EM_AMDGPU, EM_ARM, EM_PPC64, EM_RISCV, EM_S390};
    match m {
        EM_386 => "i386",
        EM_ARM => "ARM",
        EM_X86_64 => "x86-64",
        EM_AARCH64 => "AArch64",
        EM_RISCV => "RISC-V",
        EM_AMDGPU => "AMDGPU",
        EM_PPC64 => "PowerPC64",
        EM_S390 => "s390",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relr(words: &[u64]) -> Vec<Relr64<LE>> {
        words
            .iter()
            .map(|&w| Relr64(object::U64::new(LE, w)))
            .collect()
    }

    #[test]
    fn relr_decoding() {
        // Address 0x1000, then bitmap with bits for 0x1008 and 0x1010 (bits 1,2 => value 0b111).
        // Next bitmap covers from 0x1008 + 63*8.
        let mut out = Vec::new();
        decode_relr(&relr(&[0x1000, 0b111, 0b11]), &mut out).expect("valid RELR");
        let offs: Vec<u64> = out.iter().map(|r| r.r_offset).collect();
        assert_eq!(offs, [0x1000, 0x1008, 0x1010, 0x1008 + 63 * 8]);
        let mut out = Vec::new();
        assert!(decode_relr(&relr(&[0b11]), &mut out).is_err());
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

    /// A 64-byte ELF64 x86-64 shared-object header with no tables.
    fn bare_header() -> Vec<u8> {
        let h = FileHeader64::<LE> {
            e_ident: object::elf::Ident {
                magic: object::elf::ELFMAG,
                class: ELFCLASS64,
                data: ELFDATA2LSB,
                version: object::elf::EV_CURRENT,
                os_abi: object::elf::ELFOSABI_SYSV,
                abi_version: 0,
                padding: [0; 7],
            },
            e_type: object::U16::new(LE, ET_DYN),
            e_machine: object::U16::new(LE, EM_X86_64),
            e_version: U32::new(LE, 1),
            e_entry: U64::new(LE, 0),
            e_phoff: U64::new(LE, 0),
            e_shoff: U64::new(LE, 0),
            e_flags: U32::new(LE, object::elf::FileFlags(0)),
            e_ehsize: object::U16::new(LE, EHDR_SIZE as u16),
            e_phentsize: object::U16::new(LE, PHDR_SIZE as u16),
            e_phnum: object::U16::new(LE, 0),
            e_shentsize: object::U16::new(LE, SHDR_SIZE as u16),
            e_shnum: object::U16::new(LE, 0),
            e_shstrndx: object::U16::new(LE, object::elf::SHN_UNDEF),
        };
        bytes_of(&h).to_vec()
    }

    /// What `Elf::parse` says of the bare header with `patches` (offset,
    /// bytes) written over it.
    fn refused_with(patches: &[(usize, &[u8])]) -> ElfError {
        let mut data = bare_header();
        for &(at, bytes) in patches {
            data[at..at + bytes.len()].copy_from_slice(bytes);
        }
        Elf::parse(&data).expect_err("refused")
    }

    #[test]
    fn header_and_tables_are_checked_with_context() {
        let good = bare_header();
        let elf = Elf::parse(&good).expect("bare header parses");
        assert!(elf.phdrs.is_empty() && elf.shdrs.is_empty());
        let (phoff, shoff) = (32, 40);
        let (phentsize, phnum, shnum) = (54, 56, 60);

        // The identification version is checked (object's FileHeader::parse).
        let err = refused_with(&[(6, &[0])]);
        assert!(
            matches!(&err, ElfError::Unsupported(m) if m.contains("version 0")),
            "{err}"
        );

        // Entry sizes name the field and the expectation.
        let err = refused_with(&[
            (phoff, &64u64.to_le_bytes()),
            (phentsize, &55u16.to_le_bytes()),
            (phnum, &1u16.to_le_bytes()),
        ]);
        let want = "e_phentsize 55 (expected 56)";
        assert!(
            matches!(&err, ElfError::Malformed(m) if m.contains(want)),
            "{err}"
        );

        // A table past the end is truncated, with offset and length.
        let err = refused_with(&[
            (shoff, &0x1000u64.to_le_bytes()),
            (shnum, &3u16.to_le_bytes()),
        ]);
        let want = ["section header table", "0x1000", "192 bytes"];
        assert!(
            matches!(&err, ElfError::Truncated(m) if want.iter().all(|w| m.contains(w))),
            "{err}"
        );

        // Extended numbering stays refused (the rewrite writes 16-bit counts).
        let err = refused_with(&[(shoff, &64u64.to_le_bytes())]);
        assert!(
            matches!(&err, ElfError::Unsupported(m) if m.contains("e_shnum = 0")),
            "{err}"
        );

        // A header cut short is truncated.
        let err = Elf::parse(good.get(..40).expect("prefix")).expect_err("refused");
        assert!(
            matches!(&err, ElfError::Truncated(m) if m.contains("ELF header")),
            "{err}"
        );
    }

    #[test]
    fn short_reads_are_errors_with_context() {
        let err = get(&[0u8; 4], 2, 8, "thing").expect_err("past the end");
        let msg = err.to_string();
        assert!(
            msg.contains("thing") && msg.contains("0x2") && msg.contains("8 bytes"),
            "{msg}"
        );
        assert!(pod_at::<object::U64<LE>>(&[0u8; 7], 0, "value").is_err());
        assert!(pods_at::<Sym64<LE>>(&[0u8; 47], 0, 2, "symbols").is_err());
        assert!(pods_at::<Sym64<LE>>(&[0u8; 48], u64::MAX, 2, "symbols").is_err());
    }
}
