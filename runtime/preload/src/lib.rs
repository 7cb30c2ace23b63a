//! LD_PRELOAD shim for split binaries on stock HIP runtimes.
