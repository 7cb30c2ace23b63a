//! Low-level archive functions: open, query, get kernel, close.

use std::ffi::{c_char, c_void};
use std::path::Path;
use std::sync::Arc;

use crate::handles::{archive_ref, c_str, code, malloc_for, out_slot, KpackArchive};
use crate::panic::{boundary, boundary_void};
use crate::{kpack_archive_t, kpack_error_t};
use rocm_kpack_format::archive::Archive;
use rocm_kpack_format::ErrorCode;

/// `kpack_open`: open the archive at `path`. On success `*archive` is a
/// handle the caller frees with [`kpack_close`]; on failure it is NULL.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `archive` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn kpack_open(
    path: *const c_char,
    archive: *mut kpack_archive_t,
) -> kpack_error_t {
    boundary(|| {
        // SAFETY: caller contract.
        let out = unsafe { out_slot(archive) }?;
        *out = std::ptr::null_mut();
        // SAFETY: caller contract.
        let path = unsafe { c_str(path) }?;
        let opened = Archive::open(Path::new(os_str(path.to_bytes()))).map_err(code)?;
        let handle = KpackArchive::new(Arc::new(opened)).map_err(code)?;
        *out = Box::into_raw(Box::new(handle));
        Ok(())
    })
}

/// `kpack_close`: free an archive handle and the strings it handed out.
/// NULL is a no-op.
///
/// # Safety
/// `archive` is NULL or a live handle from [`kpack_open`], not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn kpack_close(archive: kpack_archive_t) {
    boundary_void(|| {
        if !archive.is_null() {
            // SAFETY: created by Box::into_raw in kpack_open, freed once.
            drop(unsafe { Box::from_raw(archive) });
        }
    })
}

/// `kpack_get_architecture_count`: number of entries of `gfx_arches`.
///
/// # Safety
/// `archive` is NULL or live; `count` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn kpack_get_architecture_count(
    archive: kpack_archive_t,
    count: *mut usize,
) -> kpack_error_t {
    boundary(|| {
        // SAFETY: caller contract.
        let (a, out) = unsafe { (archive_ref(archive)?, out_slot(count)?) };
        *out = a.arches.len();
        Ok(())
    })
}

/// `kpack_get_architecture`: arch `index` in `gfx_arches` order. The string
/// belongs to the archive handle (valid until [`kpack_close`]).
///
/// # Safety
/// `archive` is NULL or live; `arch` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn kpack_get_architecture(
    archive: kpack_archive_t,
    index: usize,
    arch: *mut *const c_char,
) -> kpack_error_t {
    boundary(|| {
        // SAFETY: caller contract.
        let (a, out) = unsafe { (archive_ref(archive)?, out_slot(arch)?) };
        *out = a
            .arches
            .get(index)
            .ok_or(ErrorCode::InvalidArgument)?
            .as_ptr();
        Ok(())
    })
}

/// `kpack_get_binary_count`: number of binary keys in the TOC.
///
/// # Safety
/// `archive` is NULL or live; `count` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn kpack_get_binary_count(
    archive: kpack_archive_t,
    count: *mut usize,
) -> kpack_error_t {
    boundary(|| {
        // SAFETY: caller contract.
        let (a, out) = unsafe { (archive_ref(archive)?, out_slot(count)?) };
        *out = a.binaries.len();
        Ok(())
    })
}

/// `kpack_get_binary`: binary key `index` in lexicographic order. The
/// string belongs to the archive handle (valid until [`kpack_close`]).
///
/// # Safety
/// `archive` is NULL or live; `binary` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn kpack_get_binary(
    archive: kpack_archive_t,
    index: usize,
    binary: *mut *const c_char,
) -> kpack_error_t {
    boundary(|| {
        // SAFETY: caller contract.
        let (a, out) = unsafe { (archive_ref(archive)?, out_slot(binary)?) };
        *out = a
            .binaries
            .get(index)
            .ok_or(ErrorCode::InvalidArgument)?
            .as_ptr();
        Ok(())
    })
}

/// `kpack_get_kernel`: decompress the kernel of (`binary_name`, `arch`)
/// into a `malloc` buffer the caller frees with [`kpack_free_kernel`]. The
/// buffer outlives the archive handle.
///
/// # Safety
/// `archive` is NULL or live; the strings are NULL or NUL-terminated; the
/// output pointers are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn kpack_get_kernel(
    archive: kpack_archive_t,
    binary_name: *const c_char,
    arch: *const c_char,
    kernel_data: *mut *mut c_void,
    kernel_size: *mut usize,
) -> kpack_error_t {
    boundary(|| {
        // SAFETY: caller contract.
        let (data_out, size_out) = unsafe { (out_slot(kernel_data)?, out_slot(kernel_size)?) };
        *data_out = std::ptr::null_mut();
        *size_out = 0;
        // SAFETY: caller contract.
        let (a, binary, arch) =
            unsafe { (archive_ref(archive)?, c_str(binary_name)?, c_str(arch)?) };
        // Keys are UTF-8; anything else cannot name a kernel.
        let (Ok(binary), Ok(arch)) = (binary.to_str(), arch.to_str()) else {
            return Err(ErrorCode::KernelNotFound);
        };
        // Decompressed straight into the buffer the caller gets.
        let mut oom = false;
        let (buf, len) = a
            .archive
            .kernel_with(binary, arch, malloc_for(&mut oom))
            .map_err(|e| if oom { ErrorCode::OutOfMemory } else { code(e) })?;
        *data_out = buf.into_raw();
        *size_out = len;
        Ok(())
    })
}

/// `kpack_free_kernel`: free a buffer from [`kpack_get_kernel`]. NULL is a
/// no-op.
///
/// # Safety
/// `kernel_data` is NULL or a buffer from `kpack_get_kernel`, freed once.
#[no_mangle]
pub unsafe extern "C" fn kpack_free_kernel(kernel_data: *mut c_void) {
    // SAFETY: the buffer came from libc::malloc.
    boundary_void(|| unsafe { libc::free(kernel_data) })
}

/// Bytes of a C path as an `OsStr`.
pub(crate) fn os_str(bytes: &[u8]) -> &std::ffi::OsStr {
    #[cfg(unix)]
    {
        std::os::unix::ffi::OsStrExt::from_bytes(bytes)
    }
    #[cfg(not(unix))]
    {
        std::ffi::OsStr::new(std::str::from_utf8(bytes).unwrap_or_default())
    }
}
