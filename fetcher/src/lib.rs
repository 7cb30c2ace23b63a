//! The fetcher library.
