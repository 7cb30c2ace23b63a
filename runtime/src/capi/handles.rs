//! Opaque handles and the shared checks that turn C pointers into Rust
//! references. Every check failure is `KPACK_ERROR_INVALID_ARGUMENT`.

use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::Arc;

use crate::archive::Archive;
use crate::loader::Cache;
use crate::{Error, ErrorCode};

/// What `kpack_archive_t` points at: the archive plus the C strings the query
/// functions hand out (owned here, valid until `kpack_close`).
pub struct KpackArchive {
    pub(crate) archive: Arc<Archive>,
    pub(crate) arches: Vec<CString>,
    pub(crate) binaries: Vec<CString>,
}

impl KpackArchive {
    /// Wrap an open archive, precomputing its C strings.
    pub(crate) fn new(archive: Arc<Archive>) -> Result<Self, Error> {
        let cstring = |s: &str| {
            CString::new(s).map_err(|_| {
                Error::format("kpack TOC", 0, format!("name {s:?} contains a NUL byte"))
            })
        };
        let arches = archive
            .gfx_arches()
            .iter()
            .map(|a| cstring(a))
            .collect::<Result<Vec<_>, _>>()?;
        let binaries = archive
            .binaries()
            .into_iter()
            .map(cstring)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(KpackArchive {
            archive,
            arches,
            binaries,
        })
    }
}

/// What `kpack_cache_t` points at.
pub struct KpackCache {
    pub(crate) cache: Cache,
}

/// `kpack_archive_t`: owned by the caller from `kpack_open` until `kpack_close`.
#[allow(non_camel_case_types)]
pub type kpack_archive_t = *mut KpackArchive;

/// `kpack_cache_t`: owned by the caller from `kpack_cache_create` until
/// `kpack_cache_destroy`.
#[allow(non_camel_case_types)]
pub type kpack_cache_t = *mut KpackCache;

/// Null check for an input pointer.
pub(crate) fn non_null<T>(ptr: *const T) -> Result<*const T, ErrorCode> {
    if ptr.is_null() {
        Err(ErrorCode::InvalidArgument)
    } else {
        Ok(ptr)
    }
}

/// Borrow a C string argument.
///
/// # Safety
/// `ptr` is NULL or a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn c_str<'a>(ptr: *const c_char) -> Result<&'a CStr, ErrorCode> {
    // SAFETY: non-null, and NUL-terminated per the caller's contract.
    Ok(unsafe { CStr::from_ptr(non_null(ptr)?) })
}

/// Borrow an output slot.
///
/// # Safety
/// `ptr` is NULL or valid for writes of `T` for `'a`.
pub(crate) unsafe fn out_slot<'a, T>(ptr: *mut T) -> Result<&'a mut T, ErrorCode> {
    // SAFETY: non-null and writable per the caller's contract.
    unsafe { ptr.as_mut() }.ok_or(ErrorCode::InvalidArgument)
}

/// Borrow an archive handle.
///
/// # Safety
/// `handle` is NULL or a live handle from `kpack_open`.
pub(crate) unsafe fn archive_ref<'a>(handle: kpack_archive_t) -> Result<&'a KpackArchive, ErrorCode> {
    // SAFETY: live handle per the caller's contract.
    unsafe { handle.cast_const().as_ref() }.ok_or(ErrorCode::InvalidArgument)
}

/// Borrow a cache handle.
///
/// # Safety
/// `handle` is NULL or a live handle from `kpack_cache_create`.
pub(crate) unsafe fn cache_ref<'a>(handle: kpack_cache_t) -> Result<&'a KpackCache, ErrorCode> {
    // SAFETY: live handle per the caller's contract.
    unsafe { handle.cast_const().as_ref() }.ok_or(ErrorCode::InvalidArgument)
}

/// Copy `data` into a `malloc` buffer the C caller frees (never NULL on
/// success, even for zero bytes).
pub(crate) fn malloc_copy(data: &[u8]) -> Result<*mut c_void, ErrorCode> {
    // SAFETY: plain allocation; checked for NULL below.
    let buf = unsafe { libc::malloc(data.len().max(1)) };
    if buf.is_null() {
        return Err(ErrorCode::OutOfMemory);
    }
    // SAFETY: `buf` holds at least `data.len()` bytes and does not overlap.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf.cast::<u8>(), data.len()) };
    Ok(buf)
}

/// Map a library error to its code.
pub(crate) fn code(e: Error) -> ErrorCode {
    e.code()
}
