//! `inspect`: what a `.kpack` archive, `.kpm` manifest, offload bundle, fat
//! binary, split (host-only) binary or package (`crate::inspect_package`)
//! contains, as a plain serialisable report. The CLI prints it as text or
//! JSON.

use std::fs;
use std::path::Path;

use rocm_kpack_format::archive::Archive;
use rocm_kpack_format::bundle::{self, Bundle, Compression};
use rocm_kpack_format::manifest::Manifest;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::elf::inspect as elf_inspect;

/// Everything `inspect` can report, tagged by what the file is.
#[derive(Debug, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Report {
    Archive(ArchiveReport),
    Manifest(ManifestReport),
    /// A raw offload bundle (or CCOB) file, as written by clang-offload-bundler.
    Bundle(BundleSectionReport),
    Elf(elf_inspect::ElfReport),
    /// A PE/COFF image (Windows DLL or EXE).
    Pe(crate::coff::inspect::PeReport),
    /// A .deb, .rpm or .whl.
    Package(crate::inspect_package::PackageReport),
}

/// A `.kpack` archive: header fields and every TOC entry.
#[derive(Debug, Serialize)]
pub struct ArchiveReport {
    pub file_size: u64,
    pub format_version: u32,
    pub group_name: String,
    pub gfx_arch_family: String,
    pub gfx_arches: Vec<String>,
    pub compression_scheme: String,
    pub toc_offset: u64,
    pub blob_count: u32,
    pub entries: Vec<ArchiveEntryReport>,
    /// Sum of `original_size` over distinct blobs.
    pub original_bytes: u64,
    /// Bytes the distinct blobs occupy in the file.
    pub stored_bytes: u64,
}

/// One TOC entry of an archive.
#[derive(Debug, Serialize)]
pub struct ArchiveEntryReport {
    pub binary: String,
    pub arch: String,
    pub ordinal: u32,
    pub original_size: u64,
    pub stored_size: u64,
    /// original_size / stored_size.
    pub compression_ratio: f64,
    /// SHA-256 of the code object (decompressed and size-checked).
    pub sha256: String,
}

/// A `.kpm` manifest.
#[derive(Debug, Serialize)]
pub struct ManifestReport {
    pub component: String,
    pub kpack_files: Vec<ManifestFileReport>,
}

/// One archive listed by a manifest.
#[derive(Debug, Serialize)]
pub struct ManifestFileReport {
    pub filename: String,
    pub family: String,
    pub architectures: Vec<String>,
    pub size: u64,
    /// Lower-case hex; `null` for legacy manifests that carry none.
    pub sha256: Option<String>,
}

/// The bundles of a `.hip_fatbin` section (or a bundle file).
#[derive(Debug, Serialize)]
pub struct BundleSectionReport {
    pub section_size: u64,
    pub bundles: Vec<BundleReport>,
}

/// One offload bundle.
#[derive(Debug, Serialize)]
pub struct BundleReport {
    pub index: usize,
    /// Offset within the section.
    pub offset: u64,
    /// Bytes occupied in the section (compressed size for CCOB).
    pub stored_size: u64,
    pub compressed: bool,
    /// CCOB version and method, when compressed.
    pub ccob_version: Option<u16>,
    pub ccob_method: Option<String>,
    pub uncompressed_size: u64,
    pub entries: Vec<BundleEntryReport>,
}

/// One bundle entry (host entries included, with size 0).
#[derive(Debug, Serialize)]
pub struct BundleEntryReport {
    pub triple: String,
    /// Target id; `null` for the host entry.
    pub target: Option<String>,
    pub offset: u64,
    pub size: u64,
}

/// Errors of `inspect`.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Format {
        path: String,
        #[source]
        source: rocm_kpack_format::Error,
    },
    #[error("{path}: {source}")]
    Elf {
        path: String,
        #[source]
        source: crate::elf::ElfError,
    },
    #[error("{path}: {source}")]
    Pe {
        path: String,
        #[source]
        source: crate::coff::PeError,
    },
    #[error(transparent)]
    Package(#[from] crate::inspect_package::InspectPackageError),
    #[error("{path}: not a .kpack archive, .kpm manifest, offload bundle, ELF file, PE image or package (.deb, .rpm, .whl)")]
    Unknown { path: String },
}

/// Inspects one file, recognising it by its content (not its name); a
/// package's expected device packages are named by the built-in spec.
pub fn inspect(path: &Path) -> Result<Report, InspectError> {
    inspect_with(path, &rocm_kpack_pkgspec::Spec::builtin())
}

/// [`inspect`], naming a package's expected device packages by `spec`.
pub fn inspect_with(path: &Path, spec: &rocm_kpack_pkgspec::Spec) -> Result<Report, InspectError> {
    let shown = path.display().to_string();
    let format = |source| InspectError::Format {
        path: shown.clone(),
        source,
    };
    let head = open(path)
        .and_then(|mut f| crate::split::scan::read_head(&mut f, 24))
        .map_err(|source| InspectError::Read {
            path: shown.clone(),
            source,
        })?;
    if rocm_kpack_package::any::PackageKind::of_head(&head).is_some() {
        return Ok(Report::Package(crate::inspect_package::inspect_package(
            path, spec,
        )?));
    }
    if head.starts_with(&rocm_kpack_format::archive::MAGIC) {
        let archive = Archive::open(path).map_err(format)?;
        return archive_report(&archive)
            .map(Report::Archive)
            .map_err(format);
    }
    let data = read_regular(path).map_err(|source| InspectError::Read {
        path: shown.clone(),
        source,
    })?;
    if head.starts_with(b"\x7fELF") {
        return elf_inspect::inspect_elf(&data)
            .map(Report::Elf)
            .map_err(|source| InspectError::Elf {
                path: shown.clone(),
                source,
            });
    }
    if crate::coff::is_pe(&data) {
        return crate::coff::inspect::inspect_pe(&data)
            .map(Report::Pe)
            .map_err(|source| InspectError::Pe {
                path: shown.clone(),
                source,
            });
    }
    if head.starts_with(bundle::BUNDLE_MAGIC) || head.starts_with(bundle::CCOB_MAGIC) {
        return bundle_section_report(&data)
            .map(Report::Bundle)
            .map_err(format);
    }
    // A .kpm is a MessagePack map (fixmap 0x8X, map16 0xde, map32 0xdf).
    if matches!(head.first(), Some(0x80..=0x8f | 0xde | 0xdf)) {
        let manifest = Manifest::parse(&data).map_err(format)?;
        return Ok(Report::Manifest(manifest_report(&manifest)));
    }
    Err(InspectError::Unknown { path: shown })
}

/// A regular file only: a FIFO or device would block or never end.
fn open(path: &Path) -> std::io::Result<fs::File> {
    rocm_kpack_fs::open_regular(path).map_err(|e| e.source)
}

fn read_regular(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut data = Vec::new();
    open(path)?.read_to_end(&mut data)?;
    Ok(data)
}

/// Reports an opened archive; every blob's stored size is checked against
/// the file, so a damaged archive is an error rather than a wrong report.
pub fn archive_report(archive: &Archive) -> rocm_kpack_format::Result<ArchiveReport> {
    let mut entries = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let (mut original_bytes, mut stored_bytes) = (0u64, 0u64);
    let mut hashes = std::collections::BTreeMap::new();
    for (binary, arch, entry) in archive.entries() {
        let stored_size = archive.stored_size(entry.ordinal)?;
        let sha256 = match hashes.get(&entry.ordinal) {
            Some(h) => String::clone(h),
            None => {
                let h = hex::encode(Sha256::digest(archive.kernel_by_ordinal(entry.ordinal)?));
                hashes.insert(entry.ordinal, h.clone());
                h
            }
        };
        if seen.insert(entry.ordinal) {
            original_bytes = original_bytes.saturating_add(entry.original_size);
            stored_bytes = stored_bytes.saturating_add(stored_size);
        }
        entries.push(ArchiveEntryReport {
            binary: binary.to_owned(),
            arch: arch.to_owned(),
            ordinal: entry.ordinal,
            original_size: entry.original_size,
            stored_size,
            compression_ratio: ratio(entry.original_size, stored_size),
            sha256,
        });
    }
    Ok(ArchiveReport {
        file_size: archive.file_len(),
        format_version: rocm_kpack_format::archive::FORMAT_VERSION,
        group_name: archive.group_name().to_owned(),
        gfx_arch_family: archive.gfx_arch_family().to_owned(),
        gfx_arches: archive.gfx_arches().to_vec(),
        compression_scheme: archive.scheme().as_str().to_owned(),
        toc_offset: archive.toc_offset(),
        blob_count: archive.blob_count(),
        entries,
        original_bytes,
        stored_bytes,
    })
}

fn ratio(original: u64, stored: u64) -> f64 {
    if stored == 0 {
        1.0
    } else {
        // Rounded so JSON output stays stable across platforms.
        ((original as f64 / stored as f64) * 1000.0).round() / 1000.0
    }
}

/// Reports a parsed manifest.
pub fn manifest_report(manifest: &Manifest) -> ManifestReport {
    ManifestReport {
        component: manifest.component.clone(),
        kpack_files: manifest
            .kpack_files
            .iter()
            .map(|f| ManifestFileReport {
                filename: f.filename.clone(),
                family: f.family.clone(),
                architectures: f.architectures.clone(),
                size: f.size,
                sha256: f.sha256.map(hex::encode),
            })
            .collect(),
    }
}

/// Reports every bundle of a `.hip_fatbin` section.
pub fn bundle_section_report(section: &[u8]) -> rocm_kpack_format::Result<BundleSectionReport> {
    let bundles = bundle::parse_fatbin(section)?;
    Ok(BundleSectionReport {
        section_size: section.len() as u64,
        bundles: bundles.iter().enumerate().map(bundle_report).collect(),
    })
}

fn bundle_report((index, b): (usize, &Bundle<'_>)) -> BundleReport {
    let (ccob_version, ccob_method) = match b.compression {
        Compression::None => (None, None),
        Compression::Ccob {
            version, method, ..
        } => (Some(version), Some(method.to_string())),
    };
    BundleReport {
        index,
        offset: b.offset,
        stored_size: b.len,
        compressed: b.is_compressed(),
        ccob_version,
        ccob_method,
        uncompressed_size: b.data.len() as u64,
        entries: b
            .entries
            .iter()
            .map(|e| BundleEntryReport {
                triple: e.triple.clone(),
                target: e.target_id().map(str::to_owned),
                offset: e.offset,
                size: e.size,
            })
            .collect(),
    }
}
