//! The format crate's integration tests, one binary (a module per subject):
//! conformance with the reference writer's vectors, the lazy and malformed
//! archive paths, property and mutation fuzzing of every parser, bundles,
//! manifests, markers, target ids and million-entry TOCs. The allocator
//! records each thread's largest allocation, which the fuzzing and malformed
//! input tests bound by the input's size.
#![allow(clippy::expect_used, clippy::unwrap_used)]

#[global_allocator]
static ALLOC: rocm_kpack_testkit::alloc::PeakAlloc = rocm_kpack_testkit::alloc::PeakAlloc;

mod archive_common;

mod archive_conformance;
mod archive_fuzz;
mod archive_lazy;
mod archive_malformed;
mod archive_proptest;
mod bundle;
mod manifest;
mod marker;
mod target;
mod toc_scale;
