//! The splitter library: inspect fat binaries and archives, split binaries
//! (ELF surgery), trees and artifact directories, build packages and publish
//! repositories. The `rocm-kpack` command line is a thin layer over it.

pub mod elf;
pub mod inspect;
pub mod package;
pub mod publish;
pub mod split_binary;
