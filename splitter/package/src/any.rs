//! A package of any of the three kinds, recognised by its first bytes
//! (never its name), for the readers that treat them alike: `inspect`,
//! `split-package`, and the kpack store of `publish`.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use serde::Serialize;

use crate::container::EntryType;
use crate::deb::DebReader;
use crate::rpm::RpmReader;
use crate::wheel::WheelReader;
use crate::{Format, PackageError};

/// Kind of a package, judged by content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PackageKind {
    /// Debian package (`ar` archive).
    Deb,
    /// RPM package (lead magic `ed ab ee db`).
    Rpm,
    /// Python wheel (zip).
    Wheel,
}

impl PackageKind {
    /// The packaging format written for this kind.
    pub fn format(self) -> Format {
        match self {
            PackageKind::Deb => Format::Deb,
            PackageKind::Rpm => Format::Rpm,
            PackageKind::Wheel => Format::Wheel,
        }
    }

    /// The kind of a file that starts with `head`, if it is a package.
    pub fn of_head(head: &[u8]) -> Option<PackageKind> {
        if head.starts_with(b"!<arch>\n") {
            Some(PackageKind::Deb)
        } else if head.starts_with(&[0xed, 0xab, 0xee, 0xdb]) {
            Some(PackageKind::Rpm)
        } else if head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06") {
            Some(PackageKind::Wheel)
        } else {
            None
        }
    }

    /// The kind of `path`, from its first bytes.
    pub fn detect(path: &Path) -> Result<PackageKind, PackageError> {
        let mut head = Vec::with_capacity(8);
        File::open(path)
            .and_then(|f| f.take(8).read_to_end(&mut head))
            .map_err(|e| PackageError::io("cannot read", path, e))?;
        PackageKind::of_head(&head).ok_or_else(|| {
            PackageError::corrupt(path, "not a .deb (ar), .rpm or .whl (zip) package")
        })
    }
}

/// An opened package: its reader, with what the three share.
pub enum AnyPackage {
    Deb(DebReader),
    Rpm(Box<RpmReader>),
    Wheel(Box<WheelReader>),
}

impl AnyPackage {
    /// Opens `path` as the kind its content says (control data, header
    /// digests and the wheel's member names are checked).
    pub fn open(path: &Path) -> Result<AnyPackage, PackageError> {
        AnyPackage::open_as(path, PackageKind::detect(path)?)
    }

    /// Opens `path` as a `kind` package.
    pub fn open_as(path: &Path, kind: PackageKind) -> Result<AnyPackage, PackageError> {
        Ok(match kind {
            PackageKind::Deb => AnyPackage::Deb(DebReader::open(path)?),
            PackageKind::Rpm => AnyPackage::Rpm(Box::new(RpmReader::open(path)?)),
            PackageKind::Wheel => AnyPackage::Wheel(Box::new(WheelReader::open(path)?)),
        })
    }

    /// Its kind.
    pub fn kind(&self) -> PackageKind {
        match self {
            AnyPackage::Deb(_) => PackageKind::Deb,
            AnyPackage::Rpm(_) => PackageKind::Rpm,
            AnyPackage::Wheel(_) => PackageKind::Wheel,
        }
    }

    /// The package's name (deb `Package`, rpm `NAME`, the wheel's `Name`).
    pub fn name(&self) -> String {
        match self {
            AnyPackage::Deb(r) => r.control.get("Package").unwrap_or_default().to_string(),
            AnyPackage::Rpm(r) => r.name().to_string(),
            AnyPackage::Wheel(w) => w.name().to_string(),
        }
    }

    /// Its version as its package manager spells it: deb `Version`, rpm
    /// `[E:]V-R`, the wheel's `Version`.
    pub fn version(&self) -> String {
        match self {
            AnyPackage::Deb(r) => r.control.get("Version").unwrap_or_default().to_string(),
            AnyPackage::Rpm(r) => match r.epoch() {
                0 => format!("{}-{}", r.version(), r.release()),
                e => format!("{e}:{}-{}", r.version(), r.release()),
            },
            AnyPackage::Wheel(w) => w.version().to_string(),
        }
    }

    /// Calls `f(path, size, data)` for every regular file of the payload,
    /// in order (an rpm's payload digest is checked at the end).
    pub fn for_each_file<F>(&self, mut f: F) -> Result<(), PackageError>
    where
        F: FnMut(&str, u64, &mut dyn Read) -> Result<(), PackageError>,
    {
        match self {
            AnyPackage::Deb(r) => r.for_each_entry(|m, data| {
                if m.kind == EntryType::File {
                    f(&m.path, m.size, data)?;
                }
                Ok(())
            }),
            AnyPackage::Rpm(r) => r.for_each_entry(|path, mode, size, data| {
                if mode & 0o170000 == 0o100000 {
                    f(path, size, data)?;
                }
                Ok(())
            }),
            AnyPackage::Wheel(w) => w.for_each_file(|path, _mode, size, data| f(path, size, data)),
        }
    }

    /// Extracts the payload into `dest` (existing, empty); see each
    /// reader's `extract`.
    pub fn extract(&self, dest: &Path) -> Result<(), PackageError> {
        match self {
            AnyPackage::Deb(r) => r.extract(dest),
            AnyPackage::Rpm(r) => r.extract(dest),
            AnyPackage::Wheel(w) => w.extract(dest),
        }
    }
}
