//! rocm-kpack runtime: every on-disk format (reader and writer), the
//! code-object loader, GPU detection, and the `librocm_kpack` C ABI.
//!
//! Data flow: [`bundle`] (offload bundles / CCOB inside `.hip_fatbin`) and
//! [`wrapper`] describe what a fat binary carries; [`archive`] stores code
//! objects in `.kpack` files; [`marker`] and [`manifest`] tell a host binary
//! where its archives are; `loader` finds and loads code objects at launch.

pub mod archive;
pub mod bundle;
pub mod capi;
pub mod detect;
pub mod error;
pub mod loader;
pub mod manifest;
pub mod marker;
pub mod msgpack;
pub mod target;
pub mod wrapper;

pub use error::{Error, ErrorCode, Result};
