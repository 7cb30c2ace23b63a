//! Reading a marker through the raw pointer a HIPK wrapper carries. The
//! marker's length is not stored anywhere: it is the length of one MessagePack
//! value, found by walking the value's structure one header at a time, never
//! past [`MAX_MARKER_LEN`] bytes.
//!
//! A corrupt marker can claim more bytes than the mapping holds (a string
//! running off the end of the last page). On Linux the bytes are therefore
//! first copied with `process_vm_readv` on this process, which stops at the
//! first unreadable page instead of faulting; the walk then runs over the
//! copy, and a value that needs bytes past the readable end is rejected.
//! Where that syscall is unavailable (seccomp, non-Linux) the walk reads the
//! memory directly, touching only bytes the structure covers.

use rocm_kpack_format::marker::Marker;
use crate::{Error, Result};

/// Largest marker accepted (the reference library uses the same bound).
pub const MAX_MARKER_LEN: usize = 64 * 1024;

/// Nesting deeper than this is not a marker.
const MAX_DEPTH: u32 = 32;

/// Parse the marker at `ptr`.
///
/// # Safety
/// `ptr` must be the address of a marker in this process (a `.rocm_kpack_ref`
/// section of a loaded binary). With `process_vm_readv` available, unreadable
/// memory after (or at) `ptr` is reported as an error rather than touched;
/// without it, the caller must also guarantee the bytes the MessagePack
/// structure claims are readable.
pub unsafe fn marker_from_ptr(ptr: *const u8) -> Result<Marker> {
    if ptr.is_null() {
        return Err(Error::InvalidArgument("marker pointer is NULL".into()));
    }
    if let Some(copy) = copy_readable(ptr, MAX_MARKER_LEN) {
        let copy = copy?;
        let len = msgpack_value_len(|i| copy.get(i).copied().unwrap_or(0), copy.len())?;
        return parse_marker(copy.get(..len).unwrap_or_default());
    }
    // SAFETY: forwarded caller contract; `read` is only called below the cap
    // and only at offsets the value's structure covers.
    let len = msgpack_value_len(|i| unsafe { ptr.add(i).read() }, MAX_MARKER_LEN)?;
    // SAFETY: the walk above established that `len` bytes form one value
    // starting at `ptr`, all of which the caller vouches for.
    let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
    parse_marker(bytes)
}

/// Copy up to `max` bytes at `ptr`, stopping at the first unreadable page.
/// `None` when the kernel does not offer the copy (fall back to direct reads).
#[cfg(target_os = "linux")]
fn copy_readable(ptr: *const u8, max: usize) -> Option<Result<Vec<u8>>> {
    let mut buf = vec![0u8; max];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: max,
    };
    let remote = libc::iovec {
        iov_base: ptr.cast_mut().cast(),
        iov_len: max,
    };
    // SAFETY: `local` describes our own buffer; the kernel validates
    // `remote` and reports unreadable memory instead of faulting.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n < 0 {
        let err = std::io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::EFAULT) => Some(Err(Error::InvalidMetadata(format!(
                "marker pointer {ptr:p} is not readable"
            )))),
            // ENOSYS, EPERM (seccomp, restricted ptrace): read directly.
            _ => None,
        };
    }
    buf.truncate(usize::try_from(n).unwrap_or(0));
    Some(Ok(buf))
}

#[cfg(not(target_os = "linux"))]
fn copy_readable(_ptr: *const u8, _max: usize) -> Option<Result<Vec<u8>>> {
    None
}

/// Parse marker bytes, reporting every failure as `INVALID_METADATA` (what
/// the C ABI promises for a bad marker).
pub fn parse_marker(bytes: &[u8]) -> Result<Marker> {
    let marker = Marker::parse(bytes).map_err(|e| match e {
        Error::InvalidMetadata(_) => e,
        other => Error::InvalidMetadata(format!("marker: {other}")),
    })?;
    if marker.kpack_search_paths.is_empty() {
        return Err(Error::InvalidMetadata("marker lists no kpack_search_paths".into()));
    }
    Ok(marker)
}

/// Length in bytes of the single MessagePack value starting at offset 0,
/// reading bytes only through `read` at offsets below `cap`.
pub fn msgpack_value_len(mut read: impl FnMut(usize) -> u8, cap: usize) -> Result<usize> {
    let too_long = || Error::InvalidMetadata(format!("marker longer than {cap} bytes or truncated"));
    let mut pos = 0usize;
    // Values still to walk at each open level; a flat counter suffices
    // because containers are walked depth-first.
    let mut pending: u64 = 1;
    let mut depth_stack: Vec<u64> = Vec::new();
    let mut byte = |pos: &mut usize| -> Result<u8> {
        if *pos >= cap {
            return Err(too_long());
        }
        let b = read(*pos);
        *pos += 1;
        Ok(b)
    };
    while pending > 0 || !depth_stack.is_empty() {
        if pending == 0 {
            pending = depth_stack.pop().unwrap_or(0);
            continue;
        }
        pending -= 1;
        let tag = byte(&mut pos)?;
        let mut be = |pos: &mut usize, n: usize| -> Result<u64> {
            let mut v = 0u64;
            for _ in 0..n {
                v = (v << 8) | u64::from(byte(pos)?);
            }
            Ok(v)
        };
        // (payload bytes to skip, child values to walk)
        let (skip, children): (u64, u64) = match tag {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (0, 0),
            0x80..=0x8f => (0, u64::from(tag & 0x0f) * 2),
            0x90..=0x9f => (0, u64::from(tag & 0x0f)),
            0xa0..=0xbf => (u64::from(tag & 0x1f), 0),
            0xc4 | 0xd9 => (be(&mut pos, 1)?, 0),
            0xc5 | 0xda => (be(&mut pos, 2)?, 0),
            0xc6 | 0xdb => (be(&mut pos, 4)?, 0),
            0xc7 => (be(&mut pos, 1)? + 1, 0),
            0xc8 => (be(&mut pos, 2)? + 1, 0),
            0xc9 => (be(&mut pos, 4)? + 1, 0),
            0xca | 0xce | 0xd2 => (4, 0),
            0xcb | 0xcf | 0xd3 => (8, 0),
            0xcc | 0xd0 => (1, 0),
            0xcd | 0xd1 => (2, 0),
            0xd4 => (2, 0),
            0xd5 => (3, 0),
            0xd6 => (5, 0),
            0xd7 => (9, 0),
            0xd8 => (17, 0),
            0xdc => (0, be(&mut pos, 2)?),
            0xdd => (0, be(&mut pos, 4)?),
            0xde => (0, be(&mut pos, 2)? * 2),
            0xdf => (0, be(&mut pos, 4)? * 2),
            0xc1 => {
                return Err(Error::InvalidMetadata(format!(
                    "marker: reserved MessagePack byte 0xc1 at offset {}",
                    pos - 1
                )))
            }
        };
        // Skipped payload must still lie below the cap: checked without
        // reading it.
        let skip = usize::try_from(skip).map_err(|_| too_long())?;
        pos = pos.checked_add(skip).filter(|&p| p <= cap).ok_or_else(too_long)?;
        if children > 0 {
            // Every child needs at least one byte: reject impossible counts
            // before walking them.
            if children > (cap - pos) as u64 {
                return Err(too_long());
            }
            if depth_stack.len() as u32 >= MAX_DEPTH {
                return Err(Error::InvalidMetadata("marker nested too deeply".into()));
            }
            depth_stack.push(pending);
            pending = children;
        }
    }
    Ok(pos)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn len_of(bytes: &[u8]) -> Result<usize> {
        msgpack_value_len(|i| bytes[i], bytes.len())
    }

    #[test]
    fn measures_nested_values_exactly() {
        // {"a": [1, "xy", {"k": nil}], "b": 0xcd 0x0102}
        let v = [
            0x82, 0xa1, b'a', 0x93, 0x01, 0xa2, b'x', b'y', 0x81, 0xa1, b'k', 0xc0, 0xa1, b'b',
            0xcd, 0x01, 0x02,
        ];
        let mut padded = v.to_vec();
        padded.extend_from_slice(&[0xff; 8]);
        assert_eq!(len_of(&padded).expect("valid"), v.len());
    }

    #[test]
    fn never_reads_past_the_value() {
        let v = [0x92, 0xd9, 0x03, b'a', b'b', b'c', 0xc3];
        let mut highest = 0usize;
        let n = msgpack_value_len(
            |i| {
                highest = highest.max(i);
                v[i]
            },
            1 << 16,
        )
        .expect("valid");
        assert_eq!(n, v.len());
        // The str payload is skipped, not read; the last byte read is the bool.
        assert_eq!(highest, v.len() - 1);
    }

    #[test]
    fn rejects_truncation_huge_counts_and_depth() {
        assert!(len_of(&[0xa5, b'a']).is_err());
        assert!(len_of(&[0xdd, 0xff, 0xff, 0xff, 0xff, 0x00]).is_err());
        assert!(len_of(&[0xc1]).is_err());
        let deep = vec![0x91u8; 100];
        assert!(len_of(&deep).is_err());
    }
}
