//! Opaque handles and the shared checks that turn C pointers into Rust
//! references. Every check failure is `KPACK_ERROR_INVALID_ARGUMENT`.

use std::ffi::{c_char, c_void, CStr, CString};
use std::mem::MaybeUninit;
use std::sync::Arc;

use rocm_kpack_format::archive::Archive;
use rocm_kpack_format::{Error, ErrorCode};
use rocm_kpack_loader::loader::Cache;

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
pub(crate) unsafe fn archive_ref<'a>(
    handle: kpack_archive_t,
) -> Result<&'a KpackArchive, ErrorCode> {
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

/// A `malloc` buffer on its way to a C caller: freed on drop unless handed
/// out with [`MallocBuf::into_raw`]. Code objects are decompressed straight
/// into it ([`rocm_kpack_format::archive::Archive::kernel_with`]), so the caller's
/// buffer costs no extra copy.
pub(crate) struct MallocBuf {
    ptr: *mut u8,
    len: usize,
}

impl MallocBuf {
    /// `len` bytes (at least one, so success is never NULL), or `None` when
    /// `malloc` fails.
    pub(crate) fn new(len: usize) -> Option<MallocBuf> {
        // SAFETY: plain allocation; checked for NULL below.
        let ptr = unsafe { libc::malloc(len.max(1)) }.cast::<u8>();
        (!ptr.is_null()).then_some(MallocBuf { ptr, len })
    }

    /// Release ownership to the C caller, who frees it with `free`.
    pub(crate) fn into_raw(self) -> *mut c_void {
        let ptr = self.ptr.cast::<c_void>();
        std::mem::forget(self);
        ptr
    }
}

impl AsMut<[MaybeUninit<u8>]> for MallocBuf {
    fn as_mut(&mut self) -> &mut [MaybeUninit<u8>] {
        // SAFETY: `ptr` is a live allocation of at least `len` bytes owned by
        // `self`; viewing it as possibly-uninitialized bytes claims nothing
        // about its contents.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast::<MaybeUninit<u8>>(), self.len) }
    }
}

impl Drop for MallocBuf {
    fn drop(&mut self) {
        // SAFETY: allocated by libc::malloc in `new`, not handed out.
        unsafe { libc::free(self.ptr.cast::<c_void>()) }
    }
}

/// Allocation for [`rocm_kpack_format::archive::Archive::kernel_with`] and friends: a
/// [`MallocBuf`], with a failed `malloc` noted in `oom` (the library's error
/// type has no out-of-memory case; the C ABI reports
/// `KPACK_ERROR_OUT_OF_MEMORY` from the flag).
pub(crate) fn malloc_for(oom: &mut bool) -> impl FnMut(usize) -> Result<MallocBuf, Error> + '_ {
    move |len| {
        MallocBuf::new(len).ok_or_else(|| {
            *oom = true;
            Error::InvalidArgument(format!("cannot allocate {len} bytes"))
        })
    }
}

/// Map a library error to its code.
pub(crate) fn code(e: Error) -> ErrorCode {
    e.code()
}
