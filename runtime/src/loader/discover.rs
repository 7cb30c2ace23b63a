//! Which file is mapped at an address: the host binary of a fat-binary
//! wrapper. On Linux `/proc/self/maps` is the only reliable source (dladdr
//! does not resolve addresses in data segments).

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
    if cfg!(not(target_os = "linux")) {
        return Err(Error::PathDiscovery(
            "binary path discovery is implemented for Linux only".into(),
        ));
    }
    let maps = std::fs::read("/proc/self/maps")
        .map_err(|e| Error::PathDiscovery(format!("/proc/self/maps: {e}")))?;
    find_in_maps(&maps, addr as u64).ok_or_else(|| {
        Error::PathDiscovery(format!("address {addr:#x} is not in any file mapping"))
    })
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
    let path_start = rest.iter().position(|&b| b != b' ' && b != b'\t').unwrap_or(rest.len());
    Some(MapsLine {
        start,
        end,
        offset: parse_hex(offset)?,
        path: rest.get(path_start..).unwrap_or_default(),
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
    fn discovers_this_test_binary() {
        let here = discovers_this_test_binary as fn() as usize;
        let m = discover_binary_path(here).expect("own code is file-mapped");
        let exe = std::env::current_exe().expect("current_exe");
        assert_eq!(m.path.file_name(), exe.file_name());
        assert!(m.offset > 0);
    }
}
