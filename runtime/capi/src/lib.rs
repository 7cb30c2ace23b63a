//! The `librocm_kpack` C ABI (`include/rocm_kpack/kpack.h`): a thin layer over
//! [`rocm_kpack_format::archive`] and [`rocm_kpack_loader::loader`]. This crate is
//! the only one that builds `librocm_kpack.so` / `librocm_kpack.a`; its
//! `exports.map` keeps every symbol but `kpack_*` local.
//!
//! Every exported function runs its body inside [`panic::boundary`], so a
//! panic becomes an error code and never unwinds into C. Pointer arguments go
//! through the helpers in [`handles`]. Ownership, as documented in the
//! header: handles are `Box`es turned into raw pointers and freed by their
//! close/destroy function; strings returned by the query functions belong to
//! the archive handle; kernel and code-object buffers come from `malloc` and
//! are freed by `kpack_free_kernel` / `kpack_free_code_object` (which call
//! `free`, so a C caller's plain `free` is also safe).

pub mod archive;
pub mod handles;
pub mod loader;
pub mod panic;

pub use archive::{
    kpack_close, kpack_free_kernel, kpack_get_architecture, kpack_get_architecture_count,
    kpack_get_binary, kpack_get_binary_count, kpack_get_kernel, kpack_open,
};
pub use handles::{kpack_archive_t, kpack_cache_t, KpackArchive, KpackCache};
pub use loader::{
    kpack_arch_callback_t, kpack_cache_create, kpack_cache_destroy, kpack_discover_binary_path,
    kpack_enumerate_architectures, kpack_free_code_object, kpack_load_code_object,
};

/// `kpack_error_t`: the fixed error numbering of the reference header.
#[allow(non_camel_case_types)]
pub type kpack_error_t = rocm_kpack_format::ErrorCode;

#[cfg(test)]
mod tests;
