//! The loader's integration tests, one binary: GPU detection against KFD
//! sysfs trees (`detect`) and the loader's behaviour table through its Rust
//! API (`behaviour`).
// tests: a panic is the failure report
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod behaviour;
mod detect;
