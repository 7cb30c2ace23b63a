//! Packages and repositories: turn a split directory (`generic/` + one
//! tree per device group) into one generic package plus one package per
//! device group, as debs, rpms and/or wheels, named and related as
//! docs/packaging.md says; and read such packages back (the `rocm-kpack-publish`
//! crate publishes them as apt, yum and pip repositories and a kpack store).
//!
//! Flow: [`device::SplitDir::open`] reads the trees (never following a
//! symlink) and the device archives' headers; [`package`] builds each
//! payload (the trees as they are: archive names are already what a
//! marker's `@GFXARCH@` pattern expands to, so no alias symlinks), renders
//! metadata per format from one [`meta::PackageMeta`], and hands both to
//! the writers ([`deb`], [`rpm`], [`wheel`]), which stream files through
//! the deterministic container writers in [`container`] (one module per
//! format) and the compressors in [`compress`]. Outputs are
//! written to temporary files in the output directory and renamed into
//! place only when every package succeeded. The build is the private
//! `build` module: `build/plan.rs` (what the formats share), then
//! `build/debs.rs`, `build/rpms.rs`, `build/wheels.rs`; [`PackageOptions`]
//! is the request and [`naming`] the package names.
//!
//! The readers in the same modules serve `publish` and `split-package`:
//! - deb: [`deb::DebReader::open`] (control fields + control files, e.g.
//!   for [`meta::PackageMeta::from_control`]), `for_each_entry` (streamed
//!   data members), `extract` (safe, see [`extract`]);
//! - rpm: [`rpm::RpmReader::open`] (header digests checked), `files`,
//!   `requires`/`provides`/`scripts`/`config_files` (see
//!   [`meta::PackageMeta::from_rpm`]), `for_each_entry` / `extract`
//!   (payload digest checked), `verify_payload`;
//! - wheel: [`wheel::WheelReader::open`] (member names checked, METADATA,
//!   WHEEL, RECORD parsed), `verify_record`, `for_each_file`, `extract`.
//!   An extracted wheel keeps its `.dist-info/` in the generic tree;
//!   [`package`] takes METADATA (adding the device extras), WHEEL's tags and
//!   the other dist-info files from it and regenerates RECORD.

pub mod any;
mod build;
pub mod compress;
pub mod container;
pub mod dates;
pub mod deb;
pub mod device;
pub mod digest;
mod error;
pub mod extract;
pub mod meta;
pub mod naming;
mod options;
pub mod progress;
pub mod rpm;
pub mod tree;
pub mod wheel;

pub use build::{package, rpm_evr, BuiltPackage, PackageReport};
pub use error::PackageError;
pub use options::{source_date_epoch, Format, PackageOptions, DEFAULT_SOURCE_DATE_EPOCH};
