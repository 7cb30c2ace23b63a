//! The workspace's end-to-end tests, one test binary with one module per
//! subject (as cargo's own test suite is), over the one support
//! crate `rocm-kpack-test-support` (tests/support). One binary links once;
//! tests/scripts/parallel-tests.sh runs it once per module (`suite
//! install_flows::`), several processes at a time, so a module's statics
//! (built binaries, split packages, chroots) are shared by its tests as
//! before.
//!
//! Process-wide state is off limits to a module: no test sets environment
//! variables or the working directory of this process (children get
//! theirs through `Command`), and the one global allocator
//! (`hostile_rpm`'s counter) counts per thread. The split's memory test,
//! which measures the heap of the whole process, is a binary of its own
//! (tests/tests/split_memory.rs).

mod amd_native;
mod cli_conformance;
mod cli_inspect;
mod cli_json;
mod cli_progress;
mod database_kinds;
mod database_packages;
mod fetch_e2e;
mod fixtures;
mod hostile_fetch;
mod hostile_packages;
mod hostile_rpm;
mod install_flows;
mod layouts;
mod old_kernels;
mod package_formats;
mod pip_native;
mod pip_torch;
mod publish_clients;
mod readme;
mod recombine;
mod release_ci;
mod repo_layout;
mod rocblas_databases;
mod runtime_e2e;
mod split_binary;
mod split_package;
mod split_tree;
mod verify_tree;
mod via_package_managers;
mod windows_split;
