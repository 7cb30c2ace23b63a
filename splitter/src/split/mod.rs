//! Splitting, in data-flow order: [`scan`] walks an input tree and
//! classifies what it holds, [`plan`] decides (as plain data) where every
//! entry goes, [`binary`] splits one fat ELF (the ELF surgery lives in
//! [`crate::elf`]) and streams its device code into per-group archives,
//! [`engine`] executes a plan into a staging directory and publishes it
//! (its phases are listed there), [`tree`], [`artifact`] and [`batch`]
//! plan install trees, build artifact directories and directories of them
//! and run the engine, [`recombine`] merges the outputs of build shards,
//! and [`verify`] checks that every marker of a split tree resolves;
//! [`output`] is how each of them writes archives, and [`request`] is the
//! one call of the `split` command (which input kind, plan or run).

pub mod artifact;
pub mod batch;
pub mod binary;
pub mod engine;
pub mod output;
pub mod plan;
pub mod recombine;
pub mod repair;
pub mod request;
pub mod scan;
pub mod tree;
pub mod verify;
