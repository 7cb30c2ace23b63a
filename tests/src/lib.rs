//! The end-to-end tests are one test binary, `tests/suite/main.rs` (one
//! module per subject), plus `tests/split_memory.rs`, which measures the
//! heap of its whole process and so keeps a process of its own; their
//! helpers are in `rocm-kpack-test-support` (`tests/support/`).
