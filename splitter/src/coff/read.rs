//! Parse a PE image through `object::pe`'s raw types (`ImageNtHeaders`,
//! `SectionTable`, `ImageBaseRelocation`; every read bounds-checked): headers, the
//! section table, data directories, base relocations and the fat binary
//! wrappers, and classify it as host-only, already split or fat.

use std::mem::{offset_of, size_of};

use object::pe::{
    ImageBaseRelocation, ImageDebugDirectory, ImageDosHeader, ImageFileHeader, ImageNtHeaders32,
    ImageNtHeaders64, ImageOptionalHeader64, ImageSectionHeader,
};
use object::pod::bytes_of;
use object::read::pe::{ImageNtHeaders, ImageOptionalHeader};
use object::read::ReadRef;
use object::{LittleEndian as LE, U16, U32, U64};
use rocm_kpack_format::wrapper::{FatbinWrapper, HIPF_MAGIC, WRAPPER_SIZE};

use super::{PeError, Result};

/// Device code: offload bundles or CCOB (`.hip_fatbin` truncated to 8 bytes).
pub const FATBIN_SECTION: &str = ".hip_fat";
/// The `__CudaFatBinaryWrapper`s (`.hipFatBinSegment` truncated).
pub const WRAPPER_SECTION: &str = ".hipFatB";
/// The kpack marker of a split image (`.rocm_kpack_ref` does not fit).
pub const MARKER_SECTION: &str = ".kpackrf";

/// `IMAGE_FILE_MACHINE_AMD64`.
pub const MACHINE_AMD64: u16 = object::pe::IMAGE_FILE_MACHINE_AMD64.0;
/// `IMAGE_FILE_RELOCS_STRIPPED`.
pub const FILE_RELOCS_STRIPPED: u16 = object::pe::IMAGE_FILE_RELOCS_STRIPPED.0;
/// `IMAGE_FILE_DLL`.
pub const FILE_DLL: u16 = object::pe::IMAGE_FILE_DLL.0;
/// `IMAGE_DLLCHARACTERISTICS_DYNAMIC_BASE`.
pub const DLL_DYNAMIC_BASE: u16 = object::pe::IMAGE_DLLCHARACTERISTICS_DYNAMIC_BASE.0;
/// `IMAGE_SCN_CNT_INITIALIZED_DATA`.
pub const SCN_INITIALIZED_DATA: u32 = object::pe::IMAGE_SCN_CNT_INITIALIZED_DATA.0;
/// `IMAGE_SCN_MEM_READ`.
pub const SCN_MEM_READ: u32 = object::pe::IMAGE_SCN_MEM_READ.0;
/// Data directory indices this module reads or rewrites.
pub const DIR_SECURITY: usize = object::pe::IMAGE_DIRECTORY_ENTRY_SECURITY;
pub const DIR_BASERELOC: usize = object::pe::IMAGE_DIRECTORY_ENTRY_BASERELOC;
pub const DIR_DEBUG: usize = object::pe::IMAGE_DIRECTORY_ENTRY_DEBUG;
/// Base relocation types.
pub const REL_ABSOLUTE: u16 = object::pe::IMAGE_REL_BASED_ABSOLUTE.0;
pub const REL_HIGHLOW: u16 = object::pe::IMAGE_REL_BASED_HIGHLOW.0;
pub const REL_DIR64: u16 = object::pe::IMAGE_REL_BASED_DIR64.0;
/// Size of one section header.
pub const SECTION_HEADER_SIZE: usize = size_of::<ImageSectionHeader>();
/// Size of one `IMAGE_DEBUG_DIRECTORY` entry.
pub const DEBUG_ENTRY_SIZE: usize = size_of::<ImageDebugDirectory>();
/// Offset of `PointerToRawData` in an `IMAGE_DEBUG_DIRECTORY` entry.
pub const DEBUG_POINTER_TO_RAW_DATA: usize = offset_of!(ImageDebugDirectory, pointer_to_raw_data);

/// NT header field offsets (from `PE\0\0`).
pub const NT_NUMBER_OF_SECTIONS: usize =
    offset_of!(ImageNtHeaders64, file_header) + offset_of!(ImageFileHeader, number_of_sections);
pub const NT_POINTER_TO_SYMBOL_TABLE: usize = offset_of!(ImageNtHeaders64, file_header)
    + offset_of!(ImageFileHeader, pointer_to_symbol_table);
const NT_OPTIONAL_HEADER: usize = offset_of!(ImageNtHeaders64, optional_header);
/// Optional header field offsets shared by PE32 and PE32+.
pub const OPT_SIZE_OF_INITIALIZED_DATA: usize =
    offset_of!(ImageOptionalHeader64, size_of_initialized_data);
pub const OPT_SIZE_OF_IMAGE: usize = offset_of!(ImageOptionalHeader64, size_of_image);
pub const OPT_SIZE_OF_HEADERS: usize = offset_of!(ImageOptionalHeader64, size_of_headers);
pub const OPT_CHECKSUM: usize = offset_of!(ImageOptionalHeader64, check_sum);
/// PE32+ data directories start here in the optional header.
const OPT64_DATA_DIRECTORIES: usize = size_of::<ImageOptionalHeader64>();

/// `len` bytes at file offset `off`, or a [`PeError::Truncated`] naming `what`.
pub(crate) fn bytes_at<'a>(data: &'a [u8], off: u64, len: u64, what: &str) -> Result<&'a [u8]> {
    data.read_bytes_at(off, len).map_err(|()| {
        PeError::Truncated(format!(
            "{what} at offset {off:#x} ({len} bytes) extends past the end of the file ({} bytes)",
            data.len()
        ))
    })
}

/// The little-endian `u32` at file offset `off`.
pub(crate) fn u32_at(data: &[u8], off: usize, what: &str) -> Result<u32> {
    Ok(pod_at::<U32<LE>>(data, off, what)?.get(LE))
}

/// The little-endian `u64` at file offset `off`.
pub(crate) fn u64_at(data: &[u8], off: usize, what: &str) -> Result<u64> {
    Ok(pod_at::<U64<LE>>(data, off, what)?.get(LE))
}

fn pod_at<'a, T: object::pod::Pod>(data: &'a [u8], off: usize, what: &str) -> Result<&'a T> {
    let b = bytes_at(data, off as u64, size_of::<T>() as u64, what)?;
    object::pod::from_bytes::<T>(b)
        .map(|(v, _)| v)
        .map_err(|()| PeError::Truncated(what.into()))
}

/// Whether `data` starts like a PE image (`MZ` and a `PE\0\0` signature
/// where `e_lfanew` says).
pub fn is_pe(data: &[u8]) -> bool {
    if data.get(..2) != Some(b"MZ") {
        return false;
    }
    let Ok(dos) = data.read_at::<ImageDosHeader>(0) else {
        return false;
    };
    data.read_bytes_at(u64::from(dos.e_lfanew.get(LE)), 4) == Ok(b"PE\0\0".as_slice())
}

/// One section header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Section {
    pub index: usize,
    /// The 8 raw name bytes (`/N` string table references not resolved).
    pub name: [u8; 8],
    pub virtual_size: u32,
    pub rva: u32,
    pub raw_size: u32,
    pub raw_ptr: u32,
    pub characteristics: u32,
}

impl Section {
    /// The name up to its first NUL, lossily decoded.
    pub fn name(&self) -> String {
        let name: Vec<u8> = self.name.iter().copied().take_while(|&b| b != 0).collect();
        String::from_utf8_lossy(&name).into_owned()
    }

    /// Bytes the section occupies in memory (`VirtualSize`, or the raw size
    /// when a linker left it 0).
    pub fn virtual_extent(&self) -> u32 {
        if self.virtual_size == 0 {
            self.raw_size
        } else {
            self.virtual_size
        }
    }

    /// Whether `rva` lies in the section's memory image.
    pub fn contains_rva(&self, rva: u32) -> bool {
        rva >= self.rva && u64::from(rva) < u64::from(self.rva) + u64::from(self.virtual_extent())
    }

    fn parse(index: usize, h: &ImageSectionHeader) -> Section {
        Section {
            index,
            name: h.name,
            virtual_size: h.virtual_size.get(LE),
            rva: h.virtual_address.get(LE),
            raw_size: h.size_of_raw_data.get(LE),
            raw_ptr: h.pointer_to_raw_data.get(LE),
            characteristics: h.characteristics.get(LE).0,
        }
    }

    /// The on-disk header, relocation and line number fields taken from
    /// `base` (zero in images, but not ours to change).
    pub fn to_raw(&self, base: &ImageSectionHeader) -> ImageSectionHeader {
        let mut h = *base;
        h.name = self.name;
        h.virtual_size.set(LE, self.virtual_size);
        h.virtual_address.set(LE, self.rva);
        h.size_of_raw_data.set(LE, self.raw_size);
        h.pointer_to_raw_data.set(LE, self.raw_ptr);
        h.characteristics
            .set(LE, object::pe::SectionFlags(self.characteristics));
        h
    }

    /// The 40 on-disk bytes (relocation and line number fields zero: images
    /// carry none).
    pub fn to_bytes(&self) -> [u8; SECTION_HEADER_SIZE] {
        let mut b = [0u8; SECTION_HEADER_SIZE];
        b.copy_from_slice(bytes_of(&self.to_raw(&ImageSectionHeader::default())));
        b
    }
}

/// One base relocation entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaseReloc {
    /// Address patched by the loader.
    pub rva: u32,
    /// `IMAGE_REL_BASED_*`.
    pub kind: u16,
}

/// A parsed PE image.
#[derive(Debug)]
pub struct Pe<'a> {
    pub data: &'a [u8],
    /// PE32+ (`true`) or PE32.
    pub pe32_plus: bool,
    /// Offset of `PE\0\0` (`e_lfanew`).
    pub nt_offset: usize,
    pub machine: u16,
    pub characteristics: u16,
    pub pointer_to_symbol_table: u32,
    /// Offset of the optional header.
    pub opt_offset: usize,
    pub image_base: u64,
    pub section_alignment: u32,
    pub file_alignment: u32,
    pub size_of_image: u32,
    pub size_of_headers: u32,
    pub size_of_initialized_data: u32,
    pub checksum: u32,
    pub dll_characteristics: u16,
    /// Offset of the data directory array (PE32+ only; 0 for PE32).
    pub dirs_offset: usize,
    /// `(VirtualAddress, Size)` per data directory.
    pub dirs: Vec<(u32, u32)>,
    /// Offset of the section table.
    pub section_table: usize,
    pub sections: Vec<Section>,
    /// The section table as stored.
    pub section_headers: &'a [ImageSectionHeader],
}

impl<'a> Pe<'a> {
    /// The first RVA past every section (where `SizeOfImage` must end,
    /// rounded up to the section alignment, and where a new section goes).
    pub fn sections_end(&self) -> u64 {
        self.sections
            .iter()
            .map(|s| u64::from(s.rva) + u64::from(s.virtual_extent()))
            .max()
            .unwrap_or(0)
    }

    /// Parses the headers and section table. Any machine; PE32 images parse
    /// too (so they can be recognised and refused by name).
    pub fn parse(data: &'a [u8]) -> Result<Pe<'a>> {
        if !is_pe(data) {
            return Err(PeError::NotPe("no MZ header with a PE signature".into()));
        }
        let dos = ImageDosHeader::parse(data).map_err(|e| PeError::Truncated(e.to_string()))?;
        let nt_offset = dos.nt_headers_offset() as usize;
        let opt_offset = nt_offset + NT_OPTIONAL_HEADER;
        let magic = pod_at::<U16<LE>>(data, opt_offset, "optional header magic")?.get(LE);
        let headers = match magic {
            object::pe::IMAGE_NT_OPTIONAL_HDR64_MAGIC => {
                nt_headers::<ImageNtHeaders64>(data, dos.nt_headers_offset())?
            }
            object::pe::IMAGE_NT_OPTIONAL_HDR32_MAGIC => {
                nt_headers::<ImageNtHeaders32>(data, dos.nt_headers_offset())?
            }
            other => {
                return Err(PeError::Malformed(format!(
                    "optional header magic {other:#x}"
                )));
            }
        };
        let pe32_plus = magic == object::pe::IMAGE_NT_OPTIONAL_HDR64_MAGIC;
        let pe = Pe {
            data,
            pe32_plus,
            nt_offset,
            opt_offset,
            // PE32 images are only recognised and refused: their
            // directories are not read.
            dirs_offset: if pe32_plus {
                opt_offset + OPT64_DATA_DIRECTORIES
            } else {
                0
            },
            dirs: if pe32_plus { headers.dirs } else { Vec::new() },
            ..headers.pe
        };
        pe.check_layout()?;
        Ok(pe)
    }

    /// Alignments are powers of two, raw data lies inside the file and
    /// after the headers, sections do not overlap in memory.
    fn check_layout(&self) -> Result<()> {
        let fa = self.file_alignment;
        let sa = self.section_alignment;
        if !fa.is_power_of_two() || !sa.is_power_of_two() || fa > sa.max(512) {
            return Err(PeError::Malformed(format!(
                "FileAlignment {fa:#x} / SectionAlignment {sa:#x} are not powers of two"
            )));
        }
        let len = self.data.len() as u64;
        let mut prev_end = 0u64;
        for s in &self.sections {
            if s.raw_size > 0 {
                let end = u64::from(s.raw_ptr) + u64::from(s.raw_size);
                if end > len {
                    return Err(PeError::Truncated(format!(
                        "section {} raw data [{:#x}, {end:#x}) runs past the end of the file ({len:#x} bytes)",
                        s.name(),
                        s.raw_ptr
                    )));
                }
                if s.raw_ptr < self.size_of_headers {
                    return Err(PeError::Malformed(format!(
                        "section {} raw data at {:#x} overlaps the headers (SizeOfHeaders {:#x})",
                        s.name(),
                        s.raw_ptr,
                        self.size_of_headers
                    )));
                }
            }
            if u64::from(s.rva) < prev_end {
                return Err(PeError::Malformed(format!(
                    "section {} at RVA {:#x} overlaps the previous section or is out of order",
                    s.name(),
                    s.rva
                )));
            }
            prev_end = u64::from(s.rva) + u64::from(s.virtual_extent());
        }
        Ok(())
    }

    /// Index of the section named `name` (exact 8-byte name). Two sections
    /// of that name are an error.
    pub fn find_section(&self, name: &str) -> Result<Option<usize>> {
        let mut found = None;
        for s in &self.sections {
            if s.name() == name {
                if found.is_some() {
                    return Err(PeError::Malformed(format!("two {name} sections")));
                }
                found = Some(s.index);
            }
        }
        Ok(found)
    }

    /// The section's initialised bytes: `min(VirtualSize, SizeOfRawData)`
    /// bytes of its raw data (the rest of its memory image is zero).
    pub fn section_data(&self, index: usize) -> Result<&'a [u8]> {
        let s = self
            .sections
            .get(index)
            .ok_or_else(|| PeError::Malformed(format!("no section {index}")))?;
        let len = s.raw_size.min(s.virtual_extent()) as usize;
        let start = s.raw_ptr as usize;
        if s.raw_size == 0 {
            return Ok(&[]);
        }
        self.data
            .get(start..start + len)
            .ok_or_else(|| PeError::Truncated(format!("section {} raw data", s.name())))
    }

    /// The virtual address of `rva` at the preferred base
    /// (`ImageBase + rva`); an image whose addresses overflow is malformed.
    pub fn va(&self, rva: u32) -> Result<u64> {
        self.image_base.checked_add(u64::from(rva)).ok_or_else(|| {
            PeError::Malformed(format!(
                "ImageBase {:#x} + RVA {rva:#x} overflows",
                self.image_base
            ))
        })
    }

    /// The section holding `rva`.
    pub fn section_at(&self, rva: u32) -> Option<&Section> {
        self.sections.iter().find(|s| s.contains_rva(rva))
    }

    /// File offset of `len` initialised bytes at `rva` (inside one
    /// section's raw data).
    pub fn rva_to_offset(&self, rva: u32, len: u32) -> Option<usize> {
        let s = self.section_at(rva)?;
        let within = rva - s.rva;
        let end = u64::from(within) + u64::from(len);
        (end <= u64::from(s.raw_size.min(s.virtual_extent())))
            .then(|| s.raw_ptr as usize + within as usize)
    }

    /// Data directory `index`, `None` when absent or empty.
    pub fn dir(&self, index: usize) -> Option<(u32, u32)> {
        self.dirs
            .get(index)
            .copied()
            .filter(|&(a, s)| a != 0 && s != 0)
    }

    /// Whether the loader may place the image at another base (then every
    /// absolute pointer needs a base relocation).
    pub fn relocatable(&self) -> bool {
        self.dll_characteristics & DLL_DYNAMIC_BASE != 0
            && self.characteristics & FILE_RELOCS_STRIPPED == 0
    }

    /// `DLL`, `EXE`.
    pub fn kind(&self) -> &'static str {
        if self.characteristics & FILE_DLL != 0 {
            "DLL"
        } else {
            "EXE"
        }
    }

    /// The machine's common name.
    pub fn machine_name(&self) -> String {
        match self.machine {
            0x8664 => "x86-64".into(),
            0x14c => "i386".into(),
            0xaa64 => "ARM64".into(),
            0xa641 => "ARM64EC".into(),
            0x1c4 => "ARMv7".into(),
            other => format!("machine {other:#06x}"),
        }
    }

    /// Every base relocation (ABSOLUTE padding entries skipped).
    pub fn base_relocations(&self) -> Result<Vec<BaseReloc>> {
        let Some((rva, size)) = self.dir(DIR_BASERELOC) else {
            return Ok(Vec::new());
        };
        let off = self.rva_to_offset(rva, size).ok_or_else(|| {
            PeError::Malformed(format!(
                "base relocation directory at RVA {rva:#x} is not in the file"
            ))
        })?;
        let table = bytes_at(
            self.data,
            off as u64,
            u64::from(size),
            "base relocation table",
        )?;
        let mut out = Vec::new();
        let mut at = 0usize;
        while at + size_of::<ImageBaseRelocation>() <= table.len() {
            let head = pod_at::<ImageBaseRelocation>(table, at, "base relocation block")?;
            let page = head.virtual_address.get(LE);
            let block = head.size_of_block.get(LE) as usize;
            if block < size_of::<ImageBaseRelocation>()
                || at + block > table.len()
                || !block.is_multiple_of(2)
            {
                return Err(PeError::Malformed(format!(
                    "base relocation block at {at:#x} has size {block:#x}"
                )));
            }
            let first = at + size_of::<ImageBaseRelocation>();
            let count = (block - size_of::<ImageBaseRelocation>()) / 2;
            let entries = table
                .read_slice_at::<U16<LE>>(first as u64, count)
                .map_err(|()| PeError::Truncated(format!("base relocation block at {at:#x}")))?;
            for e in entries {
                let v = e.get(LE);
                let kind = v >> 12;
                if kind != REL_ABSOLUTE {
                    out.push(BaseReloc {
                        rva: page.wrapping_add(u32::from(v & 0xfff)),
                        kind,
                    });
                }
            }
            at += block;
        }
        Ok(out)
    }

    /// Whether the image carries an Authenticode signature (a certificate
    /// table in the security directory).
    pub fn signed(&self) -> bool {
        self.dir(DIR_SECURITY).is_some()
    }
}

/// What [`nt_headers`] read: the header fields and the data directories.
struct NtHeaders<'a> {
    pe: Pe<'a>,
    dirs: Vec<(u32, u32)>,
}

/// The NT headers, data directories and section table through `object`'s
/// PE reader (which checks the signature, the optional header's size and
/// magic, and that both tables lie in the file).
fn nt_headers<H: ImageNtHeaders>(data: &[u8], nt_offset: u32) -> Result<NtHeaders<'_>> {
    let mut offset = u64::from(nt_offset);
    let (nt, dirs) = H::parse(data, &mut offset).map_err(|e| PeError::Truncated(e.to_string()))?;
    let table = nt
        .sections(data, offset)
        .map_err(|e| PeError::Truncated(format!("section table: {e}")))?;
    let section_table =
        usize::try_from(offset).map_err(|_| PeError::Truncated("section table offset".into()))?;
    let fh = nt.file_header();
    let opt = nt.optional_header();
    Ok(NtHeaders {
        pe: Pe {
            data,
            pe32_plus: false,
            nt_offset: 0,
            machine: fh.machine.get(LE).0,
            characteristics: fh.characteristics.get(LE).0,
            pointer_to_symbol_table: fh.pointer_to_symbol_table.get(LE),
            opt_offset: 0,
            image_base: opt.image_base(),
            section_alignment: opt.section_alignment(),
            file_alignment: opt.file_alignment(),
            size_of_image: opt.size_of_image(),
            size_of_headers: opt.size_of_headers(),
            size_of_initialized_data: opt.size_of_initialized_data(),
            checksum: opt.check_sum(),
            dll_characteristics: opt.dll_characteristics().0,
            dirs_offset: 0,
            dirs: Vec::new(),
            section_table,
            section_headers: table.iter().as_slice(),
            sections: table
                .iter()
                .enumerate()
                .map(|(i, h)| Section::parse(i, h))
                .collect(),
        },
        dirs: dirs
            .iter()
            .map(|d| (d.virtual_address.get(LE), d.size.get(LE)))
            .collect(),
    })
}

/// One wrapper of `.hipFatB` and where its pointer leads.
#[derive(Debug, Clone, Copy)]
pub struct Slot {
    pub index: usize,
    /// RVA of the wrapper.
    pub rva: u32,
    pub wrapper: FatbinWrapper,
    /// RVA the `binary` pointer holds (`binary - ImageBase`).
    pub target_rva: u32,
    /// A DIR64 base relocation fixes the pointer up at load time.
    pub relocated: bool,
}

/// What kind of image the input is.
#[derive(Debug)]
pub enum Classification<'a> {
    /// No `.hip_fat`, `.hipFatB` or `.kpackrf`: nothing to split.
    HostOnly,
    /// Already split (marker section or HIPK wrappers); the reason says which.
    AlreadySplit(String),
    /// A fat image this module can split.
    Fat(FatPe<'a>),
}

/// A parsed fat PE image.
#[derive(Debug)]
pub struct FatPe<'a> {
    pub pe: Pe<'a>,
    /// Section index of `.hip_fat`.
    pub fatbin: usize,
    /// Section index of `.hipFatB`.
    pub wrappers: usize,
    pub slots: Vec<Slot>,
    pub relocs: Vec<BaseReloc>,
}

impl<'a> FatPe<'a> {
    /// The `.hip_fat` bytes (the offload bundles).
    pub fn fatbin_bytes(&self) -> Result<&'a [u8]> {
        self.pe.section_data(self.fatbin)
    }

    /// File offset and size of `.hip_fat`'s raw data.
    pub fn fatbin_file_range(&self) -> (u64, u64) {
        self.pe
            .sections
            .get(self.fatbin)
            .map_or((0, 0), |s| (u64::from(s.raw_ptr), u64::from(s.raw_size)))
    }
}

/// Classifies `data`: host-only, already split, or a splittable fat image.
/// A PE32 or non-x86-64 image is an error only when it carries device code.
pub fn classify(data: &[u8]) -> Result<Classification<'_>> {
    let pe = Pe::parse(data)?;
    let marker = pe.find_section(MARKER_SECTION)?;
    let fatbin = pe.find_section(FATBIN_SECTION)?;
    let wrappers = pe.find_section(WRAPPER_SECTION)?;
    if marker.is_none() && fatbin.is_none() && wrappers.is_none() {
        return Ok(Classification::HostOnly);
    }
    if !pe.pe32_plus {
        return Err(PeError::Unsupported(format!(
            "PE32 (32-bit) {} for {} with device code; only PE32+ x86-64 images can be split",
            pe.kind(),
            pe.machine_name()
        )));
    }
    if pe.machine != MACHINE_AMD64 {
        return Err(PeError::Unsupported(format!(
            "{} {} with device code; only x86-64 images can be split",
            pe.machine_name(),
            pe.kind()
        )));
    }
    if marker.is_some() {
        return Ok(Classification::AlreadySplit(format!(
            "has a {MARKER_SECTION} section"
        )));
    }
    let raw_wrappers = match wrappers {
        Some(w) => wrapper_list(&pe, w)?,
        None => Vec::new(),
    };
    let hipk = raw_wrappers.iter().filter(|(_, w)| w.is_hipk()).count();
    if hipk > 0 && hipk == raw_wrappers.len() {
        return Ok(Classification::AlreadySplit(format!(
            "its {hipk} wrapper(s) already carry the HIPK magic"
        )));
    }
    if let Some((i, (_, w))) = raw_wrappers
        .iter()
        .enumerate()
        .find(|(_, (_, w))| w.magic != HIPF_MAGIC)
    {
        return Err(PeError::Malformed(format!(
            "wrapper {i} in {WRAPPER_SECTION} has magic {:#010x} (expected HIPF {HIPF_MAGIC:#010x})",
            w.magic
        )));
    }
    let (fatbin, wrappers) = match (fatbin, wrappers) {
        (Some(f), Some(w)) if !raw_wrappers.is_empty() => (f, w),
        (None, Some(_)) => {
            return Err(PeError::Malformed(format!(
                "{WRAPPER_SECTION} holds HIPF wrappers but there is no {FATBIN_SECTION} section"
            )))
        }
        _ => {
            return Err(PeError::Malformed(format!(
                "{FATBIN_SECTION} is present but {WRAPPER_SECTION} holds no wrapper (nothing refers to the device code)"
            )))
        }
    };
    let fs = pe.sections[fatbin];
    if fs.raw_size == 0 {
        return Err(PeError::Malformed(format!(
            "{FATBIN_SECTION} has no raw data but HIPF wrappers point into it"
        )));
    }
    let relocs = pe.base_relocations()?;
    let relocated: std::collections::HashSet<u32> = relocs
        .iter()
        .filter(|r| r.kind == REL_DIR64)
        .map(|r| r.rva)
        .collect();
    let mut slots = Vec::with_capacity(raw_wrappers.len());
    for (index, (rva, wrapper)) in raw_wrappers.into_iter().enumerate() {
        let field = rva + 8;
        let has_reloc = relocated.contains(&field);
        if pe.relocatable() && !has_reloc {
            return Err(PeError::Refused(format!(
                "wrapper {index}'s pointer at RVA {field:#x} has no DIR64 base relocation, but the image is \
                 relocatable (DYNAMIC_BASE): .reloc is missing or incomplete, so the pointer cannot be redirected safely"
            )));
        }
        let target_rva = wrapper
            .binary
            .checked_sub(pe.image_base)
            .and_then(|r| u32::try_from(r).ok())
            .filter(|&r| fs.contains_rva(r))
            .ok_or_else(|| {
                PeError::Malformed(format!(
                    "wrapper {index} points at {:#x}, outside {FATBIN_SECTION} (RVA {:#x}..{:#x} + ImageBase {:#x})",
                    wrapper.binary,
                    fs.rva,
                    u64::from(fs.rva) + u64::from(fs.virtual_extent()),
                    pe.image_base
                ))
            })?;
        slots.push(Slot {
            index,
            rva,
            wrapper,
            target_rva,
            relocated: has_reloc,
        });
    }
    Ok(Classification::Fat(FatPe {
        pe,
        fatbin,
        wrappers,
        slots,
        relocs,
    }))
}

/// The wrappers of section `w` with their RVAs.
fn wrapper_list(pe: &Pe<'_>, w: usize) -> Result<Vec<(u32, FatbinWrapper)>> {
    let s = pe.sections[w];
    let data = pe.section_data(w)?;
    if (data.len() as u32) < s.virtual_size {
        return Err(PeError::Malformed(format!(
            "{WRAPPER_SECTION} has {} initialised bytes for VirtualSize {:#x}",
            data.len(),
            s.virtual_size
        )));
    }
    let used = data.get(..s.virtual_size as usize).unwrap_or(data);
    // The linker pads the section; trailing zero wrappers are padding only
    // when they are whole zero records past the last real one.
    let mut len = used.len() - used.len() % WRAPPER_SIZE;
    while len >= WRAPPER_SIZE && used[len - WRAPPER_SIZE..len].iter().all(|&b| b == 0) {
        len -= WRAPPER_SIZE;
    }
    if used.len() % WRAPPER_SIZE != 0 && used[len..].iter().any(|&b| b != 0) {
        return Err(PeError::Malformed(format!(
            "{WRAPPER_SECTION} size {:#x} is not a multiple of {WRAPPER_SIZE}",
            used.len()
        )));
    }
    let wrappers = FatbinWrapper::parse_all(&used[..len])
        .map_err(|e| PeError::Malformed(format!("{WRAPPER_SECTION}: {e}")))?;
    Ok(wrappers
        .into_iter()
        .enumerate()
        .map(|(i, w)| (s.rva + (i * WRAPPER_SIZE) as u32, w))
        .collect())
}
