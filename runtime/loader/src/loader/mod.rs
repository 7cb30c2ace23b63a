//! Finding and loading the code objects of split (HIPK) binaries at launch:
//! the Rust API behind `kpack_load_code_object` and the preload shim.
//!
//! Flow: [`config`] (environment, read once) -> [`Cache::resolve`] (search
//! paths from the marker, manifests, `@GFXARCH@` patterns, arch-first
//! matching of compatible target variants: [`select`], the selection rule
//! the fetcher shares) -> [`Resolved::load`]
//! (decompression outside any lock). [`discover`] maps an address back to
//! its file; [`marker_mem`] reads a marker through a wrapper's raw pointer.

pub mod cache;
pub mod config;
pub mod discover;
pub mod marker_mem;
pub mod select;

pub use cache::{Cache, CodeObject, Resolved};
pub use config::LoaderConfig;
pub use discover::{discover_binary_path, MappedFile};
pub use marker_mem::{marker_from_ptr, parse_marker, MAX_MARKER_LEN};
pub use select::{compatible_variants, strip_triple_prefix};
