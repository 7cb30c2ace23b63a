//! Reading a marker through the raw pointer a HIPK wrapper carries. The
//! marker's length is not stored anywhere: it is the length of one MessagePack
//! value, found by [`msgpack::value_len`] (which walks the value's structure
//! one header at a time), never past [`MAX_MARKER_LEN`] bytes.
//!
//! A corrupt marker can claim more bytes than the mapping holds (a string
//! running off the end of the last page). On Linux the bytes are therefore
//! first copied with `process_vm_readv` on this process, which stops at the
//! first unreadable page instead of faulting; the walk then runs over the
//! copy, and a value that needs bytes past the readable end is rejected. On
//! Windows `VirtualQuery` bounds the copy the same way. Where neither is
//! available (seccomp, other systems) the walk reads the memory directly,
//! touching only bytes the structure covers.

use crate::{Error, Result};
use rocm_kpack_format::marker::Marker;
use rocm_kpack_format::msgpack;

/// Largest marker accepted (the reference library uses the same bound).
pub const MAX_MARKER_LEN: usize = rocm_kpack_format::marker::MAX_LEN;

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
        let len = marker_len(|i| copy.get(i).copied().unwrap_or(0), copy.len())?;
        let bytes = copy.get(..len).ok_or_else(|| {
            Error::InvalidMetadata(format!(
                "marker: a {len}-byte value in a {}-byte copy",
                copy.len()
            ))
        })?;
        return parse_marker(bytes);
    }
    // SAFETY: forwarded caller contract; `read` is only called below the cap
    // and only at offsets the value's structure covers.
    let len = marker_len(|i| unsafe { ptr.add(i).read() }, MAX_MARKER_LEN)?;
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

/// Windows: the readable extent comes from `VirtualQuery` (committed,
/// readable, not guard pages), and that much is copied with
/// `ReadProcessMemory` on this process (the counterpart of
/// `process_vm_readv`: the copy happens outside Rust's view of memory, so
/// bytes past the marker's own allocation are never read as a Rust slice).
#[cfg(windows)]
fn copy_readable(ptr: *const u8, max: usize) -> Option<Result<Vec<u8>>> {
    use std::ffi::c_void;
    #[repr(C)]
    struct MemoryBasicInformation {
        base_address: *mut c_void,
        allocation_base: *mut c_void,
        allocation_protect: u32,
        partition_id: u16,
        region_size: usize,
        state: u32,
        protect: u32,
        kind: u32,
    }
    #[link(name = "kernel32")]
    extern "system" {
        fn VirtualQuery(
            address: *const c_void,
            info: *mut MemoryBasicInformation,
            len: usize,
        ) -> usize;
        fn GetCurrentProcess() -> *mut c_void;
        fn ReadProcessMemory(
            process: *mut c_void,
            base: *const c_void,
            buffer: *mut c_void,
            size: usize,
            read: *mut usize,
        ) -> i32;
    }
    const MEM_COMMIT: u32 = 0x1000;
    const PAGE_GUARD: u32 = 0x100;
    // PAGE_READONLY, READWRITE, WRITECOPY, EXECUTE_READ, EXECUTE_READWRITE,
    // EXECUTE_WRITECOPY.
    const READABLE: u32 = 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80;
    let mut readable = 0usize;
    let mut addr = ptr as usize;
    while readable < max {
        let mut info = std::mem::MaybeUninit::<MemoryBasicInformation>::uninit();
        let size = std::mem::size_of::<MemoryBasicInformation>();
        // SAFETY: VirtualQuery only writes `size` bytes into `info`; the
        // queried address is never dereferenced.
        let n = unsafe { VirtualQuery(addr as *const c_void, info.as_mut_ptr(), size) };
        if n != size {
            break;
        }
        // SAFETY: fully written by the successful call above.
        let info = unsafe { info.assume_init() };
        if info.state != MEM_COMMIT
            || info.protect & READABLE == 0
            || info.protect & PAGE_GUARD != 0
        {
            break;
        }
        let end = (info.base_address as usize).saturating_add(info.region_size);
        if end <= addr {
            break;
        }
        readable += end - addr;
        addr = end;
    }
    if readable == 0 {
        return Some(Err(Error::InvalidMetadata(format!(
            "marker pointer {ptr:p} is not readable"
        ))));
    }
    let mut buf = vec![0u8; readable.min(max)];
    let mut copied = 0usize;
    // SAFETY: `buf` is writable for its length; the kernel validates the
    // source range and reports unreadable memory instead of faulting.
    let ok = unsafe {
        ReadProcessMemory(
            GetCurrentProcess(),
            ptr.cast(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut copied,
        )
    };
    if ok == 0 && copied == 0 {
        return None;
    }
    buf.truncate(copied);
    Some(Ok(buf))
}

#[cfg(not(any(target_os = "linux", windows)))]
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
        return Err(Error::InvalidMetadata(
            "marker lists no kpack_search_paths".into(),
        ));
    }
    Ok(marker)
}

/// Length of the marker value at offset 0 ([`msgpack::value_len`]), at
/// most [`MAX_MARKER_LEN`] bytes, any failure being `INVALID_METADATA`.
fn marker_len(read_byte: impl FnMut(usize) -> u8, max: usize) -> Result<usize> {
    msgpack::value_len(read_byte, max).map_err(|e| Error::InvalidMetadata(format!("marker: {e}")))
}
