//! Helpers shared by the end-to-end tests: fixture paths, Debian test data,
//! temp dirs and commands.

pub mod bins;
pub mod clang;
pub mod debian;
pub mod fixtures;
pub mod http;
pub mod tree;
