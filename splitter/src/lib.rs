//! The splitter library: inspect, split binaries, trees, packages.
