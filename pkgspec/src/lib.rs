//! The package spec.
