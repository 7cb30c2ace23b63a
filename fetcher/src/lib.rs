//! The library of `rocm-kpack-fetch`: detect the local AMD GPUs and fetch,
//! verify and install the device code they need. The binary (its own
//! package, `fetcher/cli`) parses arguments, sets up logging, renders
//! progress, calls this library and turns the result into an exit code (the
//! table shared with `rocm-kpack`, in `rocm_kpack_cli`). The library carries
//! no clap, anyhow or indicatif: it returns typed errors and reports
//! progress through [`progress::Reporter`].
//!
//! [`detect`] finds the local targets; [`ops`] holds the work of each
//! command (plain data in, serializable reports out). Below them the
//! library modules follow the data flow:
//!
//! [`resolve`] (installed manifests -> needed archives) -> [`plan`] (an
//! [`plan::InstallPlan`], printable) -> [`download`] over [`client`] (stream,
//! hash, resume, retry) -> [`install`] (lock, temp, fsync, rename) and
//! [`state`] (what was installed and why), driven by [`execute`].
//! [`sources`] says where archives come from; [`progress`] reports
//! transfers; [`python`] starts interpreters isolated. [`pm`] is the
//! alternative to all that: install device packages with apt, dnf or pip.

pub mod client;
pub mod config;
pub mod database_sets;
pub mod detect;
pub mod download;
pub mod error;
pub mod execute;
pub mod install;
pub mod ops;
pub mod plan;
pub mod pm;
pub mod progress;
pub mod python;
pub mod resolve;
pub mod sources;
pub mod state;
pub mod unlisted;
