//! AMD's `librocm_kpack` lookup, against which tests check what a split or
//! an install leaves on disk. That library never reads a `.kpm`: for each
//! arch the HIP runtime asks for, it expands the marker's `@GFXARCH@`
//! pattern with the arch's full target id (`gfx90a:xnack-`), then with its
//! processor (`gfx90a`), and opens the first archive that exists. So an
//! archive is found only under a per-processor (or per-target-id) name.
//!
//! The arches asked for one device are its ISA, then its generic fallback
//! (`docs/runtime.md`, "Generic ISA fallback"); inside an opened archive
//! the compatible variants of the arch are tried, most specific first.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use rocm_kpack_format::archive::Archive;
use rocm_kpack_format::layout::{expand_pattern, is_archive_pattern};
use rocm_kpack_format::marker::Marker;
use rocm_kpack_format::target::TargetId;
use rocm_kpack_loader::detect::{detect, process_isas, DetectOptions};
use rocm_kpack_splitter::elf::inspect::inspect_elf;

/// What the marker of a split binary points at.
#[derive(Debug, Clone)]
pub struct Pattern {
    /// The whole marker (for the loader; binary keys are
    /// `<kernel_name>#<index>`).
    pub marker: Marker,
    /// Its `@GFXARCH@` search path, joined to the binary's directory.
    pub pattern: String,
}

/// The marker of the split binary at `binary` and its archive pattern.
pub fn pattern_of(binary: &Path) -> io::Result<Pattern> {
    let report = inspect_elf(&fs::read(binary)?).map_err(io::Error::other)?;
    let marker = report
        .marker
        .ok_or_else(|| io::Error::other(format!("{}: no kpack marker", binary.display())))?;
    let rel = marker
        .kpack_search_paths
        .iter()
        .find(|p| is_archive_pattern(p))
        .ok_or_else(|| {
            io::Error::other(format!(
                "{}: marker has no @GFXARCH@ pattern",
                binary.display()
            ))
        })?;
    let dir = binary.parent().unwrap_or(Path::new("."));
    Ok(Pattern {
        pattern: dir.join(rel).to_string_lossy().into_owned(),
        marker: Marker {
            kpack_search_paths: marker.kpack_search_paths,
            kernel_name: marker.kernel_name,
        },
    })
}

/// Where AMD's lookup finds the code object of one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The archive opened.
    pub archive: PathBuf,
    /// The arch key of the code object in it.
    pub key: String,
}

/// The file names AMD's lookup tries for `arch`, in order.
pub fn candidates(pattern: &str, arch: &TargetId) -> Vec<String> {
    let mut out = vec![expand_pattern(pattern, &arch.to_string())];
    let bare = expand_pattern(pattern, arch.processor());
    if !out.contains(&bare) {
        out.push(bare);
    }
    out
}

/// What AMD's lookup opens for `device` (a process ISA such as
/// `gfx90a:xnack-`): for its ISA, then its generic fallback, the
/// [`candidates`] in order; the first archive that opens and holds a
/// compatible variant of the arch (most specific first) decides. `None`
/// when nothing does.
pub fn lookup(pattern: &str, device: &TargetId) -> Option<Found> {
    let arches = std::iter::once(device.clone()).chain(device.generic_fallback());
    for arch in arches {
        for path in candidates(pattern, &arch) {
            let Ok(archive) = Archive::open(Path::new(&path)) else {
                continue;
            };
            if let Some(key) = arch
                .compatible_variants()
                .into_iter()
                .find(|v| archive.has_arch(v))
            {
                return Some(Found {
                    archive: PathBuf::from(path),
                    key,
                });
            }
        }
    }
    None
}

/// Every ISA a process may present for the GPUs of machine `machine`
/// ([`crate::fixtures::machine`]): each detected target as
/// the HIP runtime names it under `HSA_XNACK=0` and `=1`.
pub fn process_devices(machine: &str) -> Vec<TargetId> {
    let root = crate::fixtures::machine(machine);
    let d = detect(&root, &DetectOptions::default()).expect("detect");
    let mut out: Vec<TargetId> = Vec::new();
    for xnack in ["0", "1"] {
        for isa in process_isas(&d.targets, Some(xnack)) {
            let id = TargetId::parse(&isa).expect("isa");
            if !out.contains(&id) {
                out.push(id);
            }
        }
    }
    out
}
