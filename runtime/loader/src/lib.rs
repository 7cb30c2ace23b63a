//! The rocm-kpack loader: finds and loads the code objects of split (HIPK)
//! binaries at launch, holds the code-object selection rule that the fetcher
//! shares, and detects the local GPUs from KFD sysfs.
//!
//! Every byte format it reads comes from [`rocm_kpack_format`]; the C ABI
//! over this crate is `rocm-kpack-capi` (`runtime/capi`), the preload shim
//! `rocm-kpack-preload` (`runtime/preload`).

pub mod detect;
pub mod loader;

/// The code-object selection rule, shared by the loader and the fetcher.
pub use loader::select;

pub use rocm_kpack_format::{Error, ErrorCode, Result};
