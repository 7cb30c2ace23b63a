//! What the tests of the runtime crates (format, loader, C ABI) and the
//! splitter's allocation tests share, as one crate instead of files compiled
//! into several crates by path. Only ever a dev-dependency; it depends on the
//! format crate alone, so the runtime's tests build nothing of the tools.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod alloc;
pub mod bomb;
pub mod layout;
pub mod toc;
