//! Every on-disk format of rocm-kpack, reader and writer, and the one
//! [`layout`] module that names their files and directories.
//!
//! The read layer is always built; the write layer is behind features
//! (`write_core`: in-memory encoders; `write`: also the archive writer and
//! its rayon and sha2), so the loader and librocm_kpack link only the
//! reader (see the comment in this crate's `Cargo.toml`).
//!
//! Data flow: [`bundle`] (offload bundles / CCOB inside `.hip_fatbin`) and
//! [`wrapper`] describe what a fat binary carries; [`archive`] stores code
//! objects in `.kpack` files; [`marker`] and [`manifest`] tell a host binary
//! where its archives are; [`target`] parses and orders target ids;
//! [`msgpack`] is the one MessagePack layer (rmp-serde behind a bounded
//! scanner) they all use. The
//! file plumbing (atomic writes, hashing, hostile-file checks) is
//! `rocm-kpack-fs`. The byte layouts are described in `docs/formats.md`.

pub mod archive;
pub mod bundle;
pub mod database_set;
pub mod error;
mod framing;
pub mod layout;
mod le;
pub mod manifest;
pub mod marker;
pub mod msgpack;
pub mod target;
pub mod wrapper;

pub use error::{Error, ErrorCode, Result};
