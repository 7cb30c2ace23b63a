//! Which file is mapped at an address: the host binary of a fat-binary
//! wrapper. On Linux `/proc/self/maps` is the only reliable source (dladdr
//! does not resolve addresses in data segments). On Windows the module
//! holding the address comes from `GetModuleHandleExW(FROM_ADDRESS |
//! UNCHANGED_REFCOUNT)`, its path from `GetModuleFileNameW` (grown until a
//! long path fits), and the file offset from the module's own section table.
// The maps parser is Linux's; on Windows only its unit tests use it.
#![cfg_attr(windows, allow(dead_code))]

use std::ffi::OsStr;
use std::path::PathBuf;

use crate::{Error, Result};

/// A file-backed mapping found for an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedFile {
    /// Path of the mapped file (` (deleted)` stripped).
    pub path: PathBuf,
    /// File offset of the address: `addr - start + mapping offset`.
    pub offset: u64,
}

/// One parsed line of `/proc/<pid>/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MapsLine<'a> {
    start: u64,
    end: u64,
    offset: u64,
    /// Everything after the inode column; empty for anonymous mappings.
    path: &'a [u8],
}

/// Find the file mapped at `addr` in this process.
pub fn discover_binary_path(addr: usize) -> Result<MappedFile> {
    #[cfg(windows)]
    {
        windows::module_of(addr)
    }
    #[cfg(not(windows))]
    {
        discover_in_proc_maps(addr)
    }
}

fn discover_in_proc_maps(addr: usize) -> Result<MappedFile> {
    if cfg!(not(target_os = "linux")) {
        return Err(Error::PathDiscovery(
            "binary path discovery is implemented for Linux and Windows only".into(),
        ));
    }
    let maps = std::fs::read("/proc/self/maps")
        .map_err(|e| Error::PathDiscovery(format!("/proc/self/maps: {e}")))?;
    find_in_maps(&maps, addr as u64).ok_or_else(|| {
        Error::PathDiscovery(format!("address {addr:#x} is not in any file mapping"))
    })
}

#[cfg(windows)]
mod windows {
    use std::ffi::c_void;
    use std::os::windows::ffi::OsStringExt;

    use super::MappedFile;
    use crate::{Error, Result};

    const GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT: u32 = 0x2;
    const GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS: u32 = 0x4;
    const ERROR_INSUFFICIENT_BUFFER: u32 = 122;
    /// Longest path Windows APIs return (`\\?\` paths), in UTF-16 units.
    const MAX_LONG_PATH: usize = 32_768;

    #[link(name = "kernel32")]
    extern "system" {
        fn GetModuleHandleExW(flags: u32, name: *const u16, module: *mut *mut c_void) -> i32;
        fn GetModuleFileNameW(module: *mut c_void, filename: *mut u16, size: u32) -> u32;
        fn GetLastError() -> u32;
    }

    /// The module (DLL/EXE) whose image holds `addr`.
    pub(super) fn module_of(addr: usize) -> Result<MappedFile> {
        let mut module: *mut c_void = std::ptr::null_mut();
        // SAFETY: with FROM_ADDRESS the name argument is only used as an
        // address to look up, never read; UNCHANGED_REFCOUNT means nothing
        // needs releasing.
        let ok = unsafe {
            GetModuleHandleExW(
                GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS
                    | GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
                addr as *const u16,
                &mut module,
            )
        };
        if ok == 0 || module.is_null() {
            // SAFETY: no preconditions.
            let err = unsafe { GetLastError() };
            return Err(Error::PathDiscovery(format!(
                "address {addr:#x} is not in any loaded module (error {err})"
            )));
        }
        let mut buf: Vec<u16> = vec![0; 512];
        let len = loop {
            let size = u32::try_from(buf.len()).unwrap_or(u32::MAX);
            // SAFETY: `buf` is writable for `size` UTF-16 units.
            let n = unsafe { GetModuleFileNameW(module, buf.as_mut_ptr(), size) } as usize;
            // SAFETY: no preconditions.
            let err = unsafe { GetLastError() };
            if n == 0 {
                return Err(Error::PathDiscovery(format!(
                    "GetModuleFileNameW failed (error {err})"
                )));
            }
            // A truncated path fills the buffer exactly.
            if n < buf.len() && err != ERROR_INSUFFICIENT_BUFFER {
                break n;
            }
            if buf.len() >= MAX_LONG_PATH {
                return Err(Error::PathDiscovery(
                    "module path longer than 32767 characters".into(),
                ));
            }
            buf.resize((buf.len() * 2).min(MAX_LONG_PATH), 0);
        };
        buf.truncate(len);
        let path = std::path::PathBuf::from(std::ffi::OsString::from_wide(&buf));
        let rva = addr - module as usize;
        // SAFETY: `module` is the base of a loaded image, whose headers the
        // loader mapped readable.
        let offset = unsafe { file_offset(module.cast::<u8>(), rva) }.unwrap_or(rva as u64);
        Ok(MappedFile { path, offset })
    }

    /// File offset of `rva` in the image loaded at `base`, from its section
    /// table (`None` for addresses in zero-filled memory or the headers).
    ///
    /// This does not reuse the one PE reader (`splitter/src/coff/read.rs`):
    /// that reader checks a file's bytes, lives in the splitter, and reads
    /// through `object`, none of which librocm_kpack links; and here there
    /// is no file slice to check, only an image the Windows loader mapped
    /// and validated, of which these four fields of the section table are
    /// read in place.
    ///
    /// # Safety
    /// `base` is the base address of a loaded PE image.
    unsafe fn file_offset(base: *const u8, rva: usize) -> Option<u64> {
        // SAFETY: caller contract: the headers are mapped.
        let read32 = |off: usize| unsafe { base.add(off).cast::<u32>().read_unaligned() };
        // SAFETY: as above.
        let read16 = |off: usize| unsafe { base.add(off).cast::<u16>().read_unaligned() };
        let nt = read32(0x3c) as usize;
        let sections = usize::from(read16(nt + 6));
        let table = nt + 24 + usize::from(read16(nt + 20));
        (0..sections).find_map(|i| {
            let at = table + 40 * i;
            let (vsize, va, raw_size, raw_ptr) = (
                read32(at + 8) as usize,
                read32(at + 12) as usize,
                read32(at + 16) as usize,
                read32(at + 20),
            );
            let within = rva.checked_sub(va)?;
            (within < vsize.max(raw_size) && within < raw_size)
                .then(|| u64::from(raw_ptr) + within as u64)
        })
    }
}

/// Look `addr` up in the text of a maps file.
fn find_in_maps(maps: &[u8], addr: u64) -> Option<MappedFile> {
    maps.split(|&b| b == b'\n')
        .filter_map(parse_line)
        .find(|l| l.start <= addr && addr < l.end && is_file_path(l.path))
        .map(|l| MappedFile {
            path: PathBuf::from(bytes_to_os(strip_deleted(l.path))),
            offset: l.offset.saturating_add(addr - l.start),
        })
}

/// `start-end perms offset dev inode   path` — the path is the rest of the
/// line after the inode column and its padding, so spaces inside it survive.
fn parse_line(line: &[u8]) -> Option<MapsLine<'_>> {
    let mut rest = line;
    let range = next_field(&mut rest)?;
    let _perms = next_field(&mut rest)?;
    let offset = next_field(&mut rest)?;
    let _dev = next_field(&mut rest)?;
    let _inode = next_field(&mut rest)?;
    let dash = range.iter().position(|&b| b == b'-')?;
    let start = parse_hex(range.get(..dash)?)?;
    let end = parse_hex(range.get(dash + 1..)?)?;
    let mut path = rest;
    while let [b' ' | b'\t', tail @ ..] = path {
        path = tail;
    }
    Some(MapsLine {
        start,
        end,
        offset: parse_hex(offset)?,
        path,
    })
}

/// Split off the next space-delimited field, skipping leading spaces.
fn next_field<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let s = *rest;
    let begin = s.iter().position(|&b| b != b' ')?;
    let s = s.get(begin..)?;
    let len = s.iter().position(|&b| b == b' ').unwrap_or(s.len());
    let (field, tail) = s.split_at(len);
    *rest = tail;
    Some(field)
}

fn parse_hex(text: &[u8]) -> Option<u64> {
    u64::from_str_radix(std::str::from_utf8(text).ok()?, 16).ok()
}

/// Real files start with `/`; `[heap]`, `[vdso]`, `[anon:...]` and anonymous
/// mappings do not.
fn is_file_path(path: &[u8]) -> bool {
    path.first() == Some(&b'/')
}

/// The kernel appends ` (deleted)` to files unlinked after mapping.
fn strip_deleted(path: &[u8]) -> &[u8] {
    path.strip_suffix(b" (deleted)").unwrap_or(path)
}

fn bytes_to_os(bytes: &[u8]) -> &OsStr {
    #[cfg(unix)]
    {
        std::os::unix::ffi::OsStrExt::from_bytes(bytes)
    }
    #[cfg(not(unix))]
    {
        // Not reached: discovery is Linux-only. Keep the build portable.
        OsStr::new(std::str::from_utf8(bytes).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &[u8] = b"\
55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 1311 /usr/bin/app
55d0c0a01000-55d0c0a05000 r-xp 00001000 08:01 1311 /usr/bin/app
7f0000000000-7f0000002000 rw-p 00000000 00:00 0 
7f0000010000-7f0000013000 r--p 00002000 08:01 42                         /opt/my dir/lib with spaces.so
7f0000020000-7f0000021000 r--p 00004000 08:01 43                         /tmp/gone.so (deleted)
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
";

    #[test]
    fn finds_file_and_offset() {
        let m = find_in_maps(MAPS, 0x55d0c0a01010).expect("mapped");
        assert_eq!(m.path, PathBuf::from("/usr/bin/app"));
        assert_eq!(m.offset, 0x1010);
    }

    #[test]
    fn keeps_spaces_and_strips_deleted() {
        let m = find_in_maps(MAPS, 0x7f0000010005).expect("mapped");
        assert_eq!(m.path, PathBuf::from("/opt/my dir/lib with spaces.so"));
        assert_eq!(m.offset, 0x2005);
        let m = find_in_maps(MAPS, 0x7f0000020000).expect("mapped");
        assert_eq!(m.path, PathBuf::from("/tmp/gone.so"));
        assert_eq!(m.offset, 0x4000);
    }

    #[test]
    fn anonymous_and_special_mappings_and_gaps_are_not_found() {
        assert_eq!(find_in_maps(MAPS, 0x7f0000000010), None);
        assert_eq!(find_in_maps(MAPS, 0x7ffd00000010), None);
        assert_eq!(find_in_maps(MAPS, 0x1000), None);
        // End address is exclusive.
        assert_eq!(find_in_maps(MAPS, 0x55d0c0a05000), None);
    }

    #[test]
    fn garbage_lines_are_skipped() {
        let text = b"not a maps line\nzz-yy r 0 0 0 /x\n\n";
        assert_eq!(find_in_maps(text, 0x10), None);
    }

    #[test]
    #[cfg(any(target_os = "linux", windows))]
    fn discovers_this_test_binary() {
        let here = discovers_this_test_binary as fn() as usize;
        let m = discover_binary_path(here).expect("own code is file-mapped");
        let exe = std::env::current_exe().expect("current_exe");
        assert_eq!(m.path.file_name(), exe.file_name());
        assert!(m.offset > 0);
    }
}
