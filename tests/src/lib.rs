//! The end-to-end tests live in `tests/`; their helpers are in
//! `rocm-kpack-test-support` (`tests/support/`).
