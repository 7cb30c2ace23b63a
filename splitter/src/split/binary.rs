//! Split one fat binary into a host-only binary, per-processor `.kpack`
//! archives and a `.kpm` manifest.
//!
//! Data flow: [`split_fat_elf`] turns a fat binary's bytes into host-only
//! bytes plus its bundles (with each wrapper's `co_index`); an
//! [`ArchiveSet`] sorts code objects into archive units (one processor, or
//! one generic ISA: [`rocm_kpack_pkgspec::Placement`]) and streams them
//! into `<component>_<unit>.kpack` temp files; [`PendingArchives::commit`]
//! and [`PendingFile::commit`] make everything visible by renaming temp
//! files only after all of it succeeded. [`split_binary`] wires these for a
//! single file; tree splits reuse the same pieces.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{self, BufWriter, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocm_kpack_format::archive::{transport, Archive, ArchiveWriter, CompressionScheme};
use rocm_kpack_format::bundle::{self, BundleRef};
use rocm_kpack_format::layout;
use rocm_kpack_format::manifest::{ArchiveTransport, Manifest, ManifestFile};
use rocm_kpack_format::marker::Marker;
use rocm_kpack_fs::{PathError, PendingFile};
use rocm_kpack_pkgspec::{Spec, SpecError};
use serde::Serialize;

use crate::coff::{self, PeError};
use crate::elf::{self, verify, Classification, ElfError, WrapperInfo};
use crate::image::Image;
use crate::split::output::ArchiveOutput;

/// Everything that can stop a split. Messages carry context; the
/// underlying error is the `source`.
#[derive(Debug, thiserror::Error)]
pub enum SplitError {
    /// The ELF file cannot be split (not ELF, unsupported, malformed,
    /// refused, or the result failed verification).
    #[error(transparent)]
    Elf(#[from] ElfError),
    /// The PE/COFF image cannot be split (PE32, not x86-64, malformed,
    /// refused, or the result failed verification).
    #[error(transparent)]
    Pe(#[from] PeError),
    /// `.hip_fatbin` does not hold valid offload bundles.
    #[error("corrupted offload bundle in .hip_fatbin")]
    Bundle(#[source] rocm_kpack_format::Error),
    /// Writing an archive, marker or manifest failed.
    #[error("writing {what}")]
    Format {
        what: String,
        #[source]
        source: rocm_kpack_format::Error,
    },
    /// A code object's target has no device group, or the spec is invalid.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// A file system operation failed.
    // Not transparent: the PathError stays in the source chain, where
    // rocm_kpack_cli::hint_for finds the path of a full file system.
    #[error("{0}")]
    Io(#[from] PathError),
    /// An error while splitting a particular file.
    #[error("{}", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: Box<SplitError>,
    },
    /// Bad arguments (component name, output location).
    #[error("{0}")]
    Invalid(String),
}

/// A bundle that does not stream (bad entry, decompression, size, MD5).
impl From<rocm_kpack_format::Error> for SplitError {
    fn from(e: rocm_kpack_format::Error) -> Self {
        SplitError::Bundle(e)
    }
}

impl SplitError {
    fn io(what: &'static str, path: &Path, source: io::Error) -> Self {
        SplitError::Io(PathError::new(what, path, source))
    }

    fn in_file(self, path: &Path) -> Self {
        match self {
            SplitError::File { .. } | SplitError::Io(_) | SplitError::Invalid(_) => self,
            other => SplitError::File {
                path: path.to_path_buf(),
                source: Box::new(other),
            },
        }
    }
}

/// How [`split_binary`] splits.
#[derive(Debug, Clone)]
pub struct SplitBinaryOptions {
    /// Component name (archive group name, file prefix). Default: the file
    /// name up to its first `.` (`librocrand.so.1.1` -> `librocrand`).
    pub component: Option<String>,
    /// Device groups. Default: the built-in spec, one group per processor.
    pub spec: Spec,
    /// How the archives are written. Default: [`ArchiveOutput::fast`],
    /// since one binary is split to try things out; release outputs use
    /// the tree split's level.
    pub output: ArchiveOutput,
}

impl Default for SplitBinaryOptions {
    fn default() -> Self {
        SplitBinaryOptions {
            component: None,
            spec: Spec::builtin(),
            output: ArchiveOutput::fast(),
        }
    }
}

/// What happened to the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SplitOutcome {
    /// Device code moved to archives; host-only binary written.
    Split,
    /// The input already carries a marker / HIPK wrappers: copied unchanged.
    AlreadySplit,
    /// The input has no `.hip_fatbin` (PE: `.hip_fat`): copied unchanged.
    HostOnly,
}

/// One archive written, in the reports of `split-binary`, `split` and
/// `recombine`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArchiveReport {
    /// `split-binary`: the file written; `split`, `recombine`: its path
    /// relative to the output directory.
    pub path: PathBuf,
    /// The component (the `<component>` of its file name).
    pub component: String,
    /// The device tree that ships it (= the archive's `gfx_arch_family`):
    /// the group carrying its processor, or its generic ISA.
    pub group: String,
    /// The processor or generic ISA it holds code for (its file name is
    /// `<component>_<unit>.kpack`).
    pub unit: String,
    /// Arch keys in the archive (sorted).
    pub architectures: Vec<String>,
    /// TOC entries.
    pub entries: usize,
    pub size: u64,
    /// Lowercase hex.
    pub sha256: String,
}

/// The result of [`split_binary`].
#[derive(Debug, Clone, Serialize)]
pub struct SplitBinaryReport {
    pub input: PathBuf,
    /// The host-only binary (or unchanged copy).
    pub output: PathBuf,
    pub outcome: SplitOutcome,
    /// Why the input was left alone, for [`SplitOutcome::AlreadySplit`];
    /// for a split, what changed beyond the device code (a PE image's
    /// Authenticode signature removed).
    pub note: Option<String>,
    pub component: String,
    /// Marker `kernel_name` (TOC keys are `<kernel_name>#<co_index>`).
    pub kernel_name: String,
    pub input_size: u64,
    pub output_size: u64,
    /// Size of `.hip_fatbin` (0 when not split).
    pub fatbin_size: u64,
    pub bundles: usize,
    pub code_objects: usize,
    pub wrappers: Vec<WrapperInfo>,
    /// Address of the marker section (`.rocm_kpack_ref`, PE: `.kpackrf`)
    /// in the host-only binary.
    pub marker_address: Option<u64>,
    pub archives: Vec<ArchiveReport>,
    /// The `.kpm` manifest written.
    pub manifest: Option<PathBuf>,
}

/// Marker search paths for a binary `depth` directory levels below the
/// directory holding `.kpack/`: `[<up>.kpack/<component>.kpm,
/// <up>.kpack/<component>_@GFXARCH@.kpack]`, `<up>` = `../` x depth.
pub fn marker_search_paths(component: &str, depth: usize) -> Vec<String> {
    layout::marker_search_paths(&"../".repeat(depth), component).to_vec()
}

/// The default component of a file: its name up to the first `.`.
pub fn default_component(file_name: &str) -> &str {
    file_name.split('.').next().unwrap_or(file_name)
}

/// Checks a component name is usable in archive file names and as the
/// archives' `group_name`.
pub fn validate_component(component: &str) -> Result<(), SplitError> {
    let ok = !component.is_empty()
        && !component.starts_with('.')
        && !component.contains("..")
        && component
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+'));
    if ok {
        Ok(())
    } else {
        Err(SplitError::Invalid(format!(
            "component name {component:?} must be non-empty ASCII letters, digits, '-', '_', '.' or '+' \
             (not starting with '.'); pass --component"
        )))
    }
}

/// The host-only binary of a split, described over the input
/// ([`Image`]), streamed out and verified as written: memory does not grow
/// with the host code.
#[derive(Debug)]
pub enum HostOutput<'a> {
    Elf {
        image: Image<'a>,
        /// What the verification expects.
        marker: Vec<u8>,
        marker_vaddr: u64,
        co_indices: Vec<u32>,
    },
    Pe {
        image: Image<'a>,
        /// The input, which the verification compares the output with.
        input: Box<coff::FatPe<'a>>,
        marker: Vec<u8>,
        marker_rva: u32,
        co_indices: Vec<u32>,
    },
}

impl HostOutput<'_> {
    fn image(&self) -> &Image<'_> {
        match self {
            HostOutput::Elf { image, .. } | HostOutput::Pe { image, .. } => image,
        }
    }

    /// Its size in bytes.
    pub fn len(&self) -> u64 {
        self.image().len() as u64
    }

    /// Whether it is empty (never, for a split).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Memory it holds and takes to write (for the budget).
    pub fn memory(&self) -> u64 {
        self.image().memory()
    }

    /// Checks `bytes`, the output as written (mapped back) or built.
    /// ELF verification reads headers and tables, not the code; PE
    /// verification compares the sections with the input's.
    fn verify(&self, bytes: &[u8]) -> Result<(), SplitError> {
        match self {
            HostOutput::Elf {
                marker,
                marker_vaddr,
                co_indices,
                ..
            } => verify::verify(
                bytes,
                &verify::Expected {
                    marker,
                    marker_vaddr: *marker_vaddr,
                    co_indices,
                },
            )?,
            HostOutput::Pe {
                input,
                marker,
                marker_rva,
                co_indices,
                ..
            } => coff::verify::verify(
                input,
                bytes,
                &coff::verify::Expected {
                    marker,
                    marker_rva: *marker_rva,
                    co_indices,
                },
            )?,
        }
        Ok(())
    }

    /// Writes it into `file` (named `path` in errors), an empty file open
    /// for writing and reading, then verifies it from the file, mapped
    /// back.
    pub fn write_into(&self, file: &mut File, path: &Path) -> Result<(), SplitError> {
        use std::io::Write as _;
        let mut w = BufWriter::new(&mut *file);
        self.image()
            .write_to(&mut w)
            .and_then(|()| w.flush())
            .map_err(|e| SplitError::io("cannot write", path, e))?;
        drop(w);
        // SAFETY: read-only map of the file this function just wrote and
        // still holds open.
        let map = unsafe { memmap2::Mmap::map(&*file) }
            .map_err(|e| SplitError::io("cannot map", path, e))?;
        self.verify(&map)
    }

    /// The whole output in memory, verified (tests, small inputs).
    pub fn to_vec(&self) -> Result<Vec<u8>, SplitError> {
        let bytes = self.image().to_vec();
        self.verify(&bytes)?;
        Ok(bytes)
    }
}

/// A fat binary split: the host-only output and the device code.
#[derive(Debug)]
pub struct SplitElf<'a> {
    /// The host-only binary (verified as it is written).
    pub host: HostOutput<'a>,
    /// Bundles of `.hip_fatbin` in section order (index = `co_index`),
    /// located but not read ([`bundle::scan_fatbin`]): [`add_bundles`]
    /// streams their code objects.
    pub bundles: Vec<BundleRef<'a>>,
    /// Each wrapper and the `co_index` of the bundle it pointed at.
    pub wrappers: Vec<WrapperInfo>,
    /// Address of `.rocm_kpack_ref` in `host`.
    pub marker_address: u64,
    /// File offset and size of `.hip_fatbin` (PE: `.hip_fat`) in the input.
    pub fatbin_range: (u64, u64),
    /// What the split changed beyond the device code, for the report (a
    /// PE image's Authenticode signature removed).
    pub notes: Vec<String>,
}

impl SplitElf<'_> {
    /// Every device code object as `(co_index, target id, bytes)`, by
    /// co_index then target id, all in memory (tests, small inputs).
    pub fn code_objects(&self) -> Result<Vec<(u32, String, Vec<u8>)>, SplitError> {
        let mut out = Vec::new();
        for (i, b) in self.bundles.iter().enumerate() {
            let mut cos = Vec::new();
            b.stream_code_objects(|e, d| -> Result<(), SplitError> {
                cos.push((
                    i as u32,
                    e.target_id().unwrap_or_default().to_string(),
                    d.into_owned(),
                ));
                Ok(())
            })?;
            cos.sort_by(|a, b| a.1.cmp(&b.1));
            out.extend(cos);
        }
        Ok(out)
    }

    /// The most memory streaming one of its bundles takes
    /// ([`add_bundles`]): the decoder, plus the code objects of one unit
    /// held until the unit's last one arrives (units counted per target
    /// id, an upper bound of per processor).
    pub fn streaming_memory(&self) -> u64 {
        self.bundles
            .iter()
            .map(|b| {
                let largest: u64 = b.targets().map(|(_, n)| n).max().unwrap_or(0);
                b.decoder_memory() + largest
            })
            .max()
            .unwrap_or(0)
    }
}

/// What [`split_fat_elf`] found.
// One per binary, moved once: boxing the split would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum ElfSplit<'a> {
    /// No `.hip_fatbin`: keep the file as it is.
    HostOnly,
    /// Already split (the reason says how it was recognised): keep as is.
    AlreadySplit(String),
    /// Split.
    Split(SplitElf<'a>),
}

/// Splits a fat binary held in memory: an x86-64 ELF file, or a PE32+
/// x86-64 image (DLL/EXE, recognised by its `MZ`/`PE` headers; see
/// [`coff`]). `kernel_name` goes into the marker (TOC keys are
/// `<kernel_name>#<co_index>`), `search_paths` are the marker's archive
/// locations (see [`marker_search_paths`]). The host-only output is
/// verified as it is written ([`HostOutput::write_into`]).
pub fn split_fat_elf<'a>(
    data: &'a [u8],
    kernel_name: &str,
    search_paths: Vec<String>,
) -> Result<ElfSplit<'a>, SplitError> {
    if coff::is_pe(data) {
        return split_fat_pe(data, kernel_name, search_paths);
    }
    let fat = match elf::classify(data)? {
        Classification::HostOnly => return Ok(ElfSplit::HostOnly),
        Classification::AlreadySplit(why) => return Ok(ElfSplit::AlreadySplit(why)),
        Classification::Fat(fat) => fat,
    };
    let section = fat.fatbin_bytes()?;
    let bundles = bundle::scan_fatbin(section).map_err(SplitError::Bundle)?;
    let offsets: Vec<u64> = bundles.iter().map(|b| b.offset).collect();
    let marker = marker_bytes(kernel_name, search_paths)?;
    let rw = elf::rewrite(&fat, &marker, &offsets)?;
    let co_indices: Vec<u32> = rw.wrappers.iter().map(|w| w.co_index).collect();
    Ok(ElfSplit::Split(SplitElf {
        host: HostOutput::Elf {
            image: rw.image,
            marker,
            marker_vaddr: rw.marker_vaddr,
            co_indices,
        },
        bundles,
        wrappers: rw.wrappers,
        marker_address: rw.marker_vaddr,
        fatbin_range: fat.fatbin_file_range(),
        notes: Vec::new(),
    }))
}

/// The marker both formats embed.
fn marker_bytes(kernel_name: &str, search_paths: Vec<String>) -> Result<Vec<u8>, SplitError> {
    Marker {
        kpack_search_paths: search_paths,
        kernel_name: kernel_name.to_string(),
    }
    .to_msgpack()
    .map_err(|source| SplitError::Format {
        what: "marker".into(),
        source,
    })
}

/// [`split_fat_elf`] for PE images: `.kpackrf` added, wrappers redirected,
/// `.hip_fat` reclaimed, the result verified.
fn split_fat_pe<'a>(
    data: &'a [u8],
    kernel_name: &str,
    search_paths: Vec<String>,
) -> Result<ElfSplit<'a>, SplitError> {
    let fat = match coff::classify(data)? {
        coff::Classification::HostOnly => return Ok(ElfSplit::HostOnly),
        coff::Classification::AlreadySplit(why) => return Ok(ElfSplit::AlreadySplit(why)),
        coff::Classification::Fat(fat) => fat,
    };
    let bundles = bundle::scan_fatbin(fat.fatbin_bytes()?).map_err(SplitError::Bundle)?;
    let offsets: Vec<u64> = bundles.iter().map(|b| b.offset).collect();
    let marker = marker_bytes(kernel_name, search_paths)?;
    let rw = coff::rewrite(&fat, &marker, &offsets)?;
    let co_indices: Vec<u32> = rw.wrappers.iter().map(|w| w.co_index).collect();
    let fatbin_range = fat.fatbin_file_range();
    let mut notes = Vec::new();
    if rw.signature_removed {
        tracing::warn!(kernel_name, "Authenticode signature removed by the split");
        notes.push(
            "the input was Authenticode-signed; the signature no longer matches the split image and was removed \
             (sign the output again)"
                .to_string(),
        );
    }
    Ok(ElfSplit::Split(SplitElf {
        host: HostOutput::Pe {
            image: rw.image,
            input: Box::new(fat),
            marker,
            marker_rva: rw.marker_rva,
            co_indices,
        },
        bundles,
        wrappers: rw.wrappers,
        marker_address: rw.marker_va,
        fatbin_range,
        notes,
    }))
}

/// Bytes added but not yet written, across all unit archives of a set,
/// unless [`ArchiveSet::set_memory`] says otherwise.
const SET_IN_FLIGHT_BYTES: usize = 64 << 20;

struct UnitArchive {
    /// Its device tree (`gfx_arch_family`).
    tree: String,
    writer: ArchiveWriter<BufWriter<PendingFile>>,
    arches: BTreeSet<String>,
    entries: usize,
}

/// Sorts code objects into archive units (one per processor or generic
/// ISA, [`Spec::placement`]) and streams each into
/// A finished archive's size, sha256 and manifest `transport`.
type Described = (u64, [u8; 32], ArchiveTransport);

/// `<kpack_dir>/<component>_<unit>.kpack` (temp files until committed).
///
/// Callers add entries in a sorted, deterministic order (this crate uses
/// kernel name, then co_index, then target id); archives then come out
/// byte-identical for identical inputs.
pub struct ArchiveSet<'s> {
    kpack_dir: PathBuf,
    created_dir: bool,
    component: String,
    spec: &'s Spec,
    scheme: CompressionScheme,
    level: i32,
    units: BTreeMap<String, UnitArchive>,
    /// Bound on the bytes queued in all unit writers together.
    in_flight: usize,
    /// Where the writers' jobs run (None: the current rayon pool).
    pool: Option<Arc<rayon::ThreadPool>>,
}

impl<'s> ArchiveSet<'s> {
    /// A set writing into `kpack_dir` (created on first use).
    pub fn new(
        kpack_dir: &Path,
        component: &str,
        spec: &'s Spec,
        scheme: CompressionScheme,
        zstd_level: i32,
    ) -> Result<Self, SplitError> {
        validate_component(component)?;
        Ok(ArchiveSet {
            kpack_dir: kpack_dir.to_path_buf(),
            created_dir: false,
            component: component.to_string(),
            spec,
            scheme,
            level: zstd_level,
            units: BTreeMap::new(),
            in_flight: SET_IN_FLIGHT_BYTES,
            pool: None,
        })
    }

    /// Bounds the bytes queued for compression in all of the set's
    /// archives together (see [`crate::budget::MemoryPlan::in_flight`]),
    /// and runs their jobs on `pool`. The output does not depend on either.
    pub fn set_memory(&mut self, in_flight: usize, pool: Option<Arc<rayon::ThreadPool>>) {
        self.in_flight = in_flight.max(1);
        self.pool = pool;
    }

    /// The archive unit of a target id ([`Spec::placement`]).
    pub fn unit_of(&self, target_id: &str) -> Result<String, SplitError> {
        Ok(self.spec.placement(target_id)?.unit)
    }

    /// Checks that every target has a device group (before any work).
    pub fn check_targets<'t>(
        &self,
        targets: impl IntoIterator<Item = &'t str>,
    ) -> Result<(), SplitError> {
        Ok(self.spec.check_covered(targets)?)
    }

    /// Adds one code object under TOC key `binary_key` and arch key
    /// `target_id` to its unit's archive (once: a generic ISA has one
    /// archive of its own, not a copy per family).
    pub fn add(
        &mut self,
        binary_key: &str,
        target_id: &str,
        data: &[u8],
    ) -> Result<(), SplitError> {
        self.add_owned(binary_key, target_id, data.to_vec())
    }

    /// [`ArchiveSet::add`] taking the bytes by value (no copy).
    pub fn add_owned(
        &mut self,
        binary_key: &str,
        target_id: &str,
        data: Vec<u8>,
    ) -> Result<(), SplitError> {
        let place = self.spec.placement(target_id)?;
        let ua = match self.units.get_mut(&place.unit) {
            Some(ua) => ua,
            None => {
                let ua = self.open_unit(&place.unit, &place.tree)?;
                self.units.entry(place.unit.clone()).or_insert(ua)
            }
        };
        ua.writer
            .add_kernel(binary_key, target_id, data)
            .map_err(|source| SplitError::Format {
                what: format!(
                    "archive {}",
                    layout::archive_file_name(&self.component, &place.unit)
                ),
                source,
            })?;
        ua.arches.insert(target_id.to_string());
        ua.entries += 1;
        self.bound_queues()
    }

    /// Writes every queued kernel (nothing stays in memory but the
    /// writers' buffers).
    pub fn drain(&mut self) -> Result<(), SplitError> {
        let in_flight = std::mem::replace(&mut self.in_flight, 0);
        let r = self.bound_queues();
        self.in_flight = in_flight;
        r
    }

    /// Writes the oldest queued kernel of the fullest writer until all the
    /// queues together are within the set's bound.
    fn bound_queues(&mut self) -> Result<(), SplitError> {
        loop {
            let total: usize = self.units.values().map(|u| u.writer.queued_bytes()).sum();
            if total <= self.in_flight {
                return Ok(());
            }
            let Some((unit, ua)) = self
                .units
                .iter_mut()
                .max_by_key(|(_, u)| u.writer.queued_bytes())
            else {
                return Ok(());
            };
            let component = &self.component;
            ua.writer
                .write_oldest()
                .map_err(|source| SplitError::Format {
                    what: format!("archive {}", layout::archive_file_name(component, unit)),
                    source,
                })?;
        }
    }

    /// Starts `<component>_<unit>.kpack`; its `gfx_arch_family` is the
    /// tree that ships it.
    fn open_unit(&mut self, unit: &str, tree: &str) -> Result<UnitArchive, SplitError> {
        if !self.kpack_dir.is_dir() {
            fs::create_dir_all(&self.kpack_dir)
                .map_err(|e| SplitError::io("cannot create directory", &self.kpack_dir, e))?;
            self.created_dir = true;
        }
        let file_name = layout::archive_file_name(&self.component, unit);
        let temp = PendingFile::create(&self.kpack_dir.join(&file_name))?;
        let mut writer = ArchiveWriter::new(
            BufWriter::with_capacity(256 << 10, temp),
            &self.component,
            tree,
            self.scheme,
            self.level,
        )
        .map_err(|source| SplitError::Format {
            what: format!("archive {file_name}"),
            source,
        })?;
        writer.set_in_flight_bytes(self.in_flight);
        if let Some(pool) = &self.pool {
            writer.set_pool(Arc::clone(pool));
        }
        Ok(UnitArchive {
            tree: tree.to_string(),
            writer,
            arches: BTreeSet::new(),
            entries: 0,
        })
    }

    /// Finishes every archive (TOC, header), hashes them and prepares the
    /// `.kpm` manifest. Nothing is visible until [`PendingArchives::commit`].
    pub fn finish(mut self) -> Result<PendingArchives, SplitError> {
        let units = std::mem::take(&mut self.units);
        let mut archives = Vec::with_capacity(units.len());
        for (unit, mut ua) in units {
            let file_name = layout::archive_file_name(&self.component, &unit);
            let what = || format!("archive {file_name}");
            ua.writer
                .set_gfx_arches(ua.arches.iter().cloned().collect());
            let buf = ua.writer.finish().map_err(|source| SplitError::Format {
                what: what(),
                source,
            })?;
            let temp = buf.into_inner().map_err(|e| {
                SplitError::io(
                    "cannot write",
                    &self.kpack_dir.join(&file_name),
                    e.into_error(),
                )
            })?;
            archives.push(((ua.tree, unit), file_name, temp, ua.arches, ua.entries));
        }
        // Hash the finished archives and describe their transport forms
        // (in parallel: they are independent).
        use rayon::prelude::*;
        let frame_level = (self.scheme == CompressionScheme::ZstdPerKernel).then_some(self.level);
        let hashed: Vec<Result<Described, SplitError>> = archives
            .par_iter_mut()
            .map(|(_, name, temp, _, _)| {
                let path = self.kpack_dir.join(&*name);
                let (size, sha) = temp
                    .seek(SeekFrom::Start(0))
                    .and_then(|_| rocm_kpack_fs::sha256_reader(temp.file_mut()))
                    .map_err(|e| SplitError::io("cannot read back", &path, e))?;
                let format_err = |source| SplitError::Format {
                    what: format!("archive {name}"),
                    source,
                };
                let archive = Archive::open(temp.temp_path()).map_err(format_err)?;
                let transport =
                    transport::manifest_transport(&archive, frame_level).map_err(format_err)?;
                Ok((size, sha, transport))
            })
            .collect();
        let mut files = Vec::with_capacity(archives.len());
        let mut manifest_files = Vec::with_capacity(archives.len());
        for (((group, unit), file_name, temp, arches, entries), h) in
            archives.into_iter().zip(hashed)
        {
            let (size, sha, transport) = h?;
            let architectures: Vec<String> = arches.into_iter().collect();
            manifest_files.push(ManifestFile {
                filename: file_name.clone(),
                family: group.clone(),
                architectures: architectures.clone(),
                size,
                sha256: Some(sha),
                transport: Some(transport),
            });
            files.push((
                temp,
                ArchiveReport {
                    path: self.kpack_dir.join(&file_name),
                    component: self.component.clone(),
                    group,
                    unit,
                    architectures,
                    entries,
                    size,
                    sha256: hex::encode(sha),
                },
            ));
        }
        let manifest = if files.is_empty() {
            None
        } else {
            manifest_files.sort_by(|a, b| a.filename.cmp(&b.filename));
            let bytes = Manifest {
                component: self.component.clone(),
                kpack_files: manifest_files,
                database_files: Vec::new(),
                prefix_path: None,
            }
            .to_msgpack()
            .map_err(|source| SplitError::Format {
                what: format!("manifest {}", layout::manifest_file_name(&self.component)),
                source,
            })?;
            let dest = self
                .kpack_dir
                .join(layout::manifest_file_name(&self.component));
            Some(PendingFile::write(&dest, &bytes, None)?)
        };
        Ok(PendingArchives {
            kpack_dir: std::mem::take(&mut self.kpack_dir),
            created_dir: std::mem::take(&mut self.created_dir),
            files,
            manifest,
        })
    }
}

impl Drop for ArchiveSet<'_> {
    fn drop(&mut self) {
        // On error paths: remove temp files first, then the directory we
        // created (only if it is empty).
        self.units.clear();
        if self.created_dir {
            let _ = fs::remove_dir(&self.kpack_dir);
        }
    }
}

/// Finished archives and manifest in temp files.
pub struct PendingArchives {
    kpack_dir: PathBuf,
    created_dir: bool,
    files: Vec<(PendingFile, ArchiveReport)>,
    manifest: Option<PendingFile>,
}

impl PendingArchives {
    /// The archives that [`PendingArchives::commit`] will make visible.
    pub fn reports(&self) -> impl Iterator<Item = &ArchiveReport> {
        self.files.iter().map(|(_, r)| r)
    }

    /// Renames archives, then the manifest, into place. Returns the
    /// archives and the manifest path (None when there was no device code).
    /// On failure, the files already renamed are removed again.
    pub fn commit(mut self) -> Result<CommittedArchives, SplitError> {
        let files = std::mem::take(&mut self.files);
        let mut done = CommittedArchives {
            archives: Vec::with_capacity(files.len()),
            manifest: None,
        };
        for (temp, report) in files {
            if let Err(e) = temp.commit() {
                done.rollback();
                return Err(e.into());
            }
            done.archives.push(report);
        }
        if let Some(m) = self.manifest.take() {
            match m.commit() {
                Ok(p) => done.manifest = Some(p),
                Err(e) => {
                    done.rollback();
                    return Err(e.into());
                }
            }
        }
        self.created_dir = false;
        Ok(done)
    }
}

/// Archives and manifest made visible by [`PendingArchives::commit`].
#[derive(Debug)]
pub struct CommittedArchives {
    pub archives: Vec<ArchiveReport>,
    /// None when there was no device code.
    pub manifest: Option<PathBuf>,
}

impl CommittedArchives {
    /// Removes the committed files again (a later step failed).
    pub fn rollback(&mut self) {
        for a in self.archives.drain(..) {
            let _ = fs::remove_file(&a.path);
        }
        if let Some(m) = self.manifest.take() {
            let _ = fs::remove_file(m);
        }
    }
}

impl Drop for PendingArchives {
    fn drop(&mut self) {
        self.files.clear();
        self.manifest = None;
        if self.created_dir {
            let _ = fs::remove_dir(&self.kpack_dir);
        }
    }
}

/// A code object streamed out of a bundle: its target id and bytes.
type Arrived<'a> = (String, Cow<'a, [u8]>);

/// Streams the code objects of `bundles` (a split's, index = co_index)
/// into `set` under TOC keys `<kernel_name>#<co_index>`, one bundle at a
/// time. Each archive unit gets a bundle's code objects in target id order
/// whatever order the bundle stores them in (a unit's are held until its
/// last one arrives), so archives depend only on the code objects, not on
/// compression or layout. `release` gets the input bytes that are no
/// longer needed (a plain bundle's code objects once copied, each bundle
/// once streamed) so their pages can be dropped ([`release_pages`]);
/// `progress` runs after every code object. Returns the number of code
/// objects.
pub fn add_bundles(
    set: &mut ArchiveSet<'_>,
    kernel_name: &str,
    bundles: &[BundleRef<'_>],
    mut release: impl FnMut(&[u8]),
    mut progress: impl FnMut(),
) -> Result<usize, SplitError> {
    let mut count = 0usize;
    for (i, b) in bundles.iter().enumerate() {
        let key = format!("{kernel_name}#{i}");
        let mut expected: BTreeMap<String, usize> = BTreeMap::new();
        for (target, _) in b.targets() {
            *expected.entry(set.unit_of(target)?).or_default() += 1;
        }
        // Per unit: its code objects of this bundle that arrived so far.
        let mut pending: BTreeMap<String, Vec<Arrived<'_>>> = BTreeMap::new();
        b.stream_code_objects(|entry, data| -> Result<(), SplitError> {
            let target = entry.target_id().unwrap_or_default();
            let unit = set.unit_of(target)?;
            let list = pending.entry(unit.clone()).or_default();
            list.push((target.to_string(), data));
            if list.len() < expected.get(&unit).copied().unwrap_or(0) {
                return Ok(());
            }
            let mut list = pending.remove(&unit).unwrap_or_default();
            list.sort_by(|x, y| x.0.cmp(&y.0));
            for (target, data) in list {
                match data {
                    Cow::Borrowed(bytes) => {
                        set.add(&key, &target, bytes)?;
                        release(bytes);
                    }
                    Cow::Owned(bytes) => set.add_owned(&key, &target, bytes)?,
                }
                progress();
                count += 1;
            }
            Ok(())
        })?;
        release(b.raw());
    }
    Ok(count)
}

/// Drops the whole pages under `bytes` (a slice of `map`; anything else is
/// ignored) from this process's memory map once the code object has been
/// copied out, so peak RSS stays at the archive writers' batches instead of
/// growing with `.hip_fatbin`.
pub fn release_pages(map: &memmap2::Mmap, bytes: &[u8]) {
    const PAGE: usize = 4096;
    let base = map.as_ptr() as usize;
    let Some(start) = (bytes.as_ptr() as usize).checked_sub(base) else {
        return;
    };
    let first = start.div_ceil(PAGE) * PAGE;
    let end = (start + bytes.len()) / PAGE * PAGE;
    if end > first && end <= map.len() {
        // SAFETY: the map is a private read-only file mapping that is never
        // written, so MADV_DONTNEED only drops clean pages; later reads of
        // the range fault them in again from the file with identical
        // contents. No reference observes a change.
        let _ = unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, first, end - first)
        };
    }
}

/// Splits the fat binary `input` into `out_dir`: `out_dir/<file name>`
/// (host-only, same permissions), `out_dir/.kpack/<component>_<unit>.kpack`
/// per processor or generic ISA and `out_dir/.kpack/<component>.kpm`. A host-only or
/// already split input is copied unchanged. Outputs appear atomically and
/// only when everything succeeded; the input is never modified.
pub fn split_binary(
    input: &Path,
    out_dir: &Path,
    opts: &SplitBinaryOptions,
) -> Result<SplitBinaryReport, SplitError> {
    split_binary_inner(input, out_dir, opts).map_err(|e| e.in_file(input))
}

fn split_binary_inner(
    input: &Path,
    out_dir: &Path,
    opts: &SplitBinaryOptions,
) -> Result<SplitBinaryReport, SplitError> {
    let file_name = input
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| SplitError::Invalid(format!("{}: no UTF-8 file name", input.display())))?
        .to_string();
    let component = opts
        .component
        .clone()
        .unwrap_or_else(|| default_component(&file_name).to_string());
    validate_component(&component)?;
    opts.spec.validate()?;

    let file = File::open(input).map_err(|e| SplitError::io("cannot open", input, e))?;
    let meta = file
        .metadata()
        .map_err(|e| SplitError::io("cannot stat", input, e))?;
    if !meta.is_file() {
        return Err(SplitError::Invalid(format!(
            "{} is not a regular file",
            input.display()
        )));
    }
    let out_meta =
        fs::metadata(out_dir).map_err(|e| SplitError::io("output directory", out_dir, e))?;
    if !out_meta.is_dir() {
        return Err(SplitError::Invalid(format!(
            "output {} is not a directory",
            out_dir.display()
        )));
    }
    let output = out_dir.join(&file_name);
    if let Ok(existing) = fs::metadata(&output) {
        if same_file(&meta, &existing) {
            return Err(SplitError::Invalid(format!(
                "output {} is the input itself; choose another output directory",
                output.display()
            )));
        }
    }
    // The overwrite rule, before any work: the host binary and the manifest
    // are what every split writes.
    rocm_kpack_fs::check_replaceable(&output, opts.output.replace_existing)?;
    rocm_kpack_fs::check_replaceable(
        &out_dir
            .join(layout::KPACK_DIR)
            .join(layout::manifest_file_name(&component)),
        opts.output.replace_existing,
    )?;
    if meta.len() == 0 {
        return Err(ElfError::NotElf.into());
    }
    // SAFETY: the file is opened read-only and only read through the map.
    // Another process truncating it meanwhile would fault; that is the
    // standard caveat of reading files through mmap.
    let map =
        unsafe { memmap2::Mmap::map(&file) }.map_err(|e| SplitError::io("cannot map", input, e))?;
    let data: &[u8] = &map;

    let mut report = SplitBinaryReport {
        input: input.to_path_buf(),
        output: output.clone(),
        outcome: SplitOutcome::Split,
        note: None,
        component: component.clone(),
        kernel_name: file_name.clone(),
        input_size: meta.len(),
        output_size: meta.len(),
        fatbin_size: 0,
        bundles: 0,
        code_objects: 0,
        wrappers: Vec::new(),
        marker_address: None,
        archives: Vec::new(),
        manifest: None,
    };
    let split = match split_fat_elf(data, &file_name, marker_search_paths(&component, 0))? {
        ElfSplit::Split(s) => s,
        unchanged => {
            let (outcome, note) = match unchanged {
                ElfSplit::AlreadySplit(why) => (SplitOutcome::AlreadySplit, Some(why)),
                _ => (SplitOutcome::HostOnly, None),
            };
            tracing::info!(input = %input.display(), ?outcome, "copying unchanged");
            PendingFile::write(&output, data, Some(meta.permissions()))?.commit()?;
            report.outcome = outcome;
            report.note = note;
            return Ok(report);
        }
    };

    // Device code into archives, bundle by bundle in co_index order, each
    // bundle's code objects by target id.
    let mut set = ArchiveSet::new(
        &out_dir.join(layout::KPACK_DIR),
        &component,
        &opts.spec,
        opts.output.scheme(),
        opts.output.zstd_level,
    )?;
    set.check_targets(
        split
            .bundles
            .iter()
            .flat_map(|b| b.targets().map(|(t, _)| t)),
    )?;
    let work = opts.output.work().map_err(SplitError::Invalid)?;
    set.set_memory(work.plan.in_flight, Some(Arc::clone(&work.pool)));
    // The rewrite read the host part through the map: those pages are not
    // needed any more.
    release_pages(&map, data);
    let (_, fatbin_size) = split.fatbin_range;
    let nbundles = split.bundles.len();
    let SplitElf {
        host,
        bundles,
        wrappers,
        marker_address,
        notes,
        ..
    } = split;
    for note in &notes {
        tracing::warn!(input = %input.display(), "{note}");
    }
    let code_objects = add_bundles(
        &mut set,
        &file_name,
        &bundles,
        |b| release_pages(&map, b),
        || {},
    )?;
    let pending = set.finish()?;
    let mut host_file = PendingFile::create(&output)?;
    let temp = host_file.temp_path().to_path_buf();
    host.write_into(host_file.file_mut(), &temp)?;
    release_pages(&map, data);
    host_file.set_permissions(meta.permissions())?;
    // Archives first: whoever sees the host-only binary finds its archives.
    let mut committed = pending.commit()?;
    if let Err(e) = host_file.commit() {
        committed.rollback();
        return Err(e.into());
    }
    let CommittedArchives { archives, manifest } = committed;

    report.output_size = host.len();
    report.fatbin_size = fatbin_size;
    report.bundles = nbundles;
    report.code_objects = code_objects;
    report.wrappers = wrappers;
    report.marker_address = Some(marker_address);
    report.note = (!notes.is_empty()).then(|| notes.join("; "));
    report.archives = archives;
    report.manifest = manifest;
    Ok(report)
}

#[cfg(unix)]
fn same_file(a: &fs::Metadata, b: &fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn same_file(_a: &fs::Metadata, _b: &fs::Metadata) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_paths_and_components() {
        assert_eq!(
            marker_search_paths("librocrand", 0),
            [".kpack/librocrand.kpm", ".kpack/librocrand_@GFXARCH@.kpack"]
        );
        assert_eq!(
            marker_search_paths("rand", 2),
            ["../../.kpack/rand.kpm", "../../.kpack/rand_@GFXARCH@.kpack"]
        );
        assert_eq!(default_component("librocrand.so.1.1"), "librocrand");
        assert_eq!(default_component("app"), "app");
        assert!(validate_component("").is_err());
        assert!(validate_component("a/b").is_err());
        assert!(validate_component("a:b").is_err());
        assert!(validate_component("rand_lib").is_ok());
    }
}
