//! Argument definitions. Each subcommand's arguments live with the command
//! in `cmd/`; this file only lists them.

use clap::{Parser, Subcommand};

use crate::cmd;

/// Split AMD GPU fat binaries into host-only binaries plus per-GPU-family
/// `.kpack` archives, and inspect what fat binaries and archives contain.
#[derive(Debug, Parser)]
#[command(name = "rocm-kpack", version, propagate_version = true)]
#[command(after_help = "Exit codes: 0 success, 1 error, 2 usage error.\n\
Run `rocm-kpack demo` to see the whole pipeline on built-in inputs.")]
pub struct Cli {
    /// More log output on stderr (-v info, -vv debug; RUST_LOG overrides).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show what a .kpack archive, .kpm manifest, fat binary or split binary contains.
    Inspect(cmd::inspect::Args),
    /// Write one code object out of a .kpack archive.
    Extract(cmd::extract::Args),
    /// Split one fat binary into a host-only binary, per-group .kpack archives and a .kpm manifest.
    SplitBinary(cmd::split_binary::Args),
    /// Split an install tree or build artifact directory into generic + per-group trees.
    Split(cmd::split::Args),
    /// Reduce step: combine the split outputs of several build shards into one generic + per-group artifacts.
    Recombine(cmd::recombine::Args),
    /// Check that every marker in a tree resolves to device code for the given targets.
    Verify(cmd::verify::Args),
    /// Show the effective package spec, or check a spec file.
    Spec(cmd::spec::Args),
    /// Build a generic package and one package per device group (deb, rpm, wheel) from a split tree.
    Package(cmd::package::Args),
    /// Turn a directory of packages into apt, yum/dnf and pip repositories and a kpack store.
    Publish(cmd::publish::Args),
    /// Split a fat .deb, .rpm or .whl into a generic package plus one package per device group.
    SplitPackage(cmd::split_package::Args),
    /// Run the whole pipeline on built-in inputs in a temporary directory.
    Demo(cmd::demo::Args),
}
