//! The splitter library: inspect fat binaries and archives, split binaries
//! (ELF surgery), trees and artifact directories, build packages and publish
//! repositories. The `rocm-kpack` command line is a thin layer over it.

pub mod elf;
pub mod inspect;
pub mod split_binary;
pub mod artifact;
pub mod plan;
pub mod scan;
pub mod tree;
pub mod verify_tree;
pub mod recombine;
pub mod split_package;
