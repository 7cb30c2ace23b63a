//! The splitter library: inspect fat binaries (ELF: [`elf`], PE/COFF:
//! [`coff`]) and archives ([`inspect`]),
//! split binaries, trees and artifact directories ([`split`]), and split
//! fat packages into generic + device packages ([`split_package`], over
//! `rocm-kpack-package`), within a memory budget ([`budget`]). The
//! `rocm-kpack` command line (its own package, `splitter/cli`) is a thin
//! layer over it; this library carries no clap, anyhow or indicatif.

pub mod budget;
pub mod coff;
pub mod elf;
pub mod image;
pub mod inspect;
pub mod inspect_package;
pub mod split;
pub mod split_package;
