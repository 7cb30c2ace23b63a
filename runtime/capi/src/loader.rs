//! Loader functions: cache lifecycle, path discovery, code-object loading,
//! architecture enumeration.

use std::ffi::{c_char, c_void, CStr};
use std::path::Path;
use std::sync::Arc;

use crate::archive::os_str;
use crate::handles::{
    c_str, cache_ref, code, malloc_for, non_null, out_slot, KpackArchive, KpackCache,
};
use crate::panic::{boundary, boundary_void};
use crate::{kpack_cache_t, kpack_error_t};
use rocm_kpack_format::archive::Archive;
use rocm_kpack_format::ErrorCode;
use rocm_kpack_loader::loader::{discover_binary_path, marker_from_ptr, Cache};

/// `kpack_arch_callback_t`: return `true` to continue enumerating.
#[allow(non_camel_case_types)]
pub type kpack_arch_callback_t =
    Option<unsafe extern "C" fn(arch: *const c_char, user_data: *mut c_void) -> bool>;

/// `kpack_cache_create`: a cache configured from the environment, read now.
/// `*cache` is freed with [`kpack_cache_destroy`]; NULL on failure.
///
/// # Safety
/// `cache` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn kpack_cache_create(cache: *mut kpack_cache_t) -> kpack_error_t {
    boundary(|| {
        // SAFETY: caller contract.
        let out = unsafe { out_slot(cache) }?;
        *out = std::ptr::null_mut();
        *out = Box::into_raw(Box::new(KpackCache {
            cache: Cache::from_env(),
        }));
        Ok(())
    })
}

/// `kpack_cache_destroy`: close the cache's archives and free it. NULL is a
/// no-op. Code objects already returned stay valid.
///
/// # Safety
/// `cache` is NULL or a live handle from [`kpack_cache_create`] that no other
/// thread is using, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn kpack_cache_destroy(cache: kpack_cache_t) {
    boundary_void(|| {
        if !cache.is_null() {
            // SAFETY: created by Box::into_raw in kpack_cache_create, freed once.
            drop(unsafe { Box::from_raw(cache) });
        }
    })
}

/// `kpack_discover_binary_path`: path of the file mapped at
/// `address_in_binary`, NUL-terminated into `path_out`; the file offset of
/// the address into `*offset_out` if that is not NULL. A path that does not
/// fit (with its NUL) is `INVALID_ARGUMENT`, like the reference library.
///
/// # Safety
/// `path_out` is NULL or writable for `path_out_size` bytes; `offset_out` is
/// NULL or writable. `address_in_binary` is only compared, never read.
#[no_mangle]
pub unsafe extern "C" fn kpack_discover_binary_path(
    address_in_binary: *const c_void,
    path_out: *mut c_char,
    path_out_size: usize,
    offset_out: *mut usize,
) -> kpack_error_t {
    boundary(|| {
        non_null(address_in_binary)?;
        non_null(path_out)?;
        if path_out_size == 0 {
            return Err(ErrorCode::InvalidArgument);
        }
        let found = discover_binary_path(address_in_binary as usize).map_err(code)?;
        let bytes = path_bytes(&found.path);
        if bytes.len() >= path_out_size {
            return Err(ErrorCode::InvalidArgument);
        }
        // SAFETY: bytes.len() + 1 <= path_out_size, the caller's buffer size.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), path_out.cast::<u8>(), bytes.len());
            *path_out.add(bytes.len()) = 0;
        }
        // SAFETY: caller contract (NULL allowed).
        if let Some(off) = unsafe { offset_out.as_mut() } {
            *off = usize::try_from(found.offset).map_err(|_| ErrorCode::PathDiscoveryFailed)?;
        }
        Ok(())
    })
}

/// `kpack_load_code_object`: the code object of wrapper `co_index` of the
/// binary at `binary_path` whose marker is at `hipk_metadata`, for the first
/// servable target of `arch_list`. `*code_object_out` is a `malloc` buffer
/// freed with [`kpack_free_code_object`]; NULL (and size 0) on failure.
/// NULL entries of `arch_list` are skipped.
///
/// # Safety
/// `cache` is NULL or live; `hipk_metadata` is NULL or points at a readable
/// MessagePack marker; `binary_path` is NULL or NUL-terminated; `arch_list`
/// is NULL or holds `arch_count` pointers, each NULL or NUL-terminated; the
/// output pointers are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn kpack_load_code_object(
    cache: kpack_cache_t,
    hipk_metadata: *const c_void,
    binary_path: *const c_char,
    co_index: u32,
    arch_list: *const *const c_char,
    arch_count: usize,
    code_object_out: *mut *mut c_void,
    code_object_size_out: *mut usize,
) -> kpack_error_t {
    boundary(|| {
        // SAFETY: caller contract.
        let (data_out, size_out) =
            unsafe { (out_slot(code_object_out)?, out_slot(code_object_size_out)?) };
        *data_out = std::ptr::null_mut();
        *size_out = 0;
        // SAFETY: caller contract.
        let cache = &unsafe { cache_ref(cache) }?.cache;
        non_null(hipk_metadata)?;
        // SAFETY: caller contract.
        let binary_path = unsafe { c_str(binary_path) }?;
        non_null(arch_list)?;
        if arch_count == 0 {
            return Err(ErrorCode::InvalidArgument);
        }
        // Disabled wins over everything but argument errors (reference order).
        if cache.config().disabled {
            return Err(ErrorCode::NotImplemented);
        }
        // SAFETY: arch_list holds arch_count pointers (caller contract).
        let entries = unsafe { std::slice::from_raw_parts(arch_list, arch_count) };
        let arches: Vec<String> = entries
            .iter()
            .filter(|p| !p.is_null())
            // SAFETY: each non-NULL entry is NUL-terminated (caller contract).
            .map(|&p| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
            .collect();
        if arches.is_empty() && cache.config().arch_override.is_none() {
            return Err(ErrorCode::InvalidArgument);
        }
        // SAFETY: caller contract on hipk_metadata.
        let marker = unsafe { marker_from_ptr(hipk_metadata.cast::<u8>()) }.map_err(code)?;
        let path = Path::new(os_str(binary_path.to_bytes()));
        // Decompressed straight into the buffer the caller gets.
        let mut oom = false;
        let (buf, len, _) = cache
            .load_code_object_with(&marker, path, co_index, &arches, malloc_for(&mut oom))
            .map_err(|e| if oom { ErrorCode::OutOfMemory } else { code(e) })?;
        *data_out = buf.into_raw();
        *size_out = len;
        Ok(())
    })
}

/// `kpack_free_code_object`: free a buffer from [`kpack_load_code_object`].
/// NULL is a no-op.
///
/// # Safety
/// `code_object` is NULL or a buffer from `kpack_load_code_object`, freed once.
#[no_mangle]
pub unsafe extern "C" fn kpack_free_code_object(code_object: *mut c_void) {
    // SAFETY: the buffer came from libc::malloc.
    boundary_void(|| unsafe { libc::free(code_object) })
}

/// `kpack_enumerate_architectures`: call `callback` for each arch of the
/// archive at `archive_path` (gfx_arches order) until it returns false.
/// The string passed to the callback is valid only during the call.
///
/// # Safety
/// `archive_path` is NULL or NUL-terminated; `callback` is NULL or a function
/// safe to call with `user_data`.
#[no_mangle]
pub unsafe extern "C" fn kpack_enumerate_architectures(
    archive_path: *const c_char,
    callback: kpack_arch_callback_t,
    user_data: *mut c_void,
) -> kpack_error_t {
    boundary(|| {
        // SAFETY: caller contract.
        let path = unsafe { c_str(archive_path) }?;
        let callback = callback.ok_or(ErrorCode::InvalidArgument)?;
        let archive = Archive::open(Path::new(os_str(path.to_bytes()))).map_err(code)?;
        let handle = KpackArchive::new(Arc::new(archive)).map_err(code)?;
        for arch in &handle.arches {
            // SAFETY: the callback's contract is the caller's.
            if !unsafe { callback(arch.as_ptr(), user_data) } {
                break;
            }
        }
        Ok(())
    })
}

fn path_bytes(path: &Path) -> &[u8] {
    path.as_os_str().as_encoded_bytes()
}
