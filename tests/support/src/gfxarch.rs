//! AMD's `librocm_kpack` lookup, against which tests check what a split or
//! an install leaves on disk. That library never reads a `.kpm`: for the
//! arches the HIP runtime asks for (a device's ISA, then its generic
//! fallback; `docs/runtime.md`, "Generic ISA fallback") it expands the
//! marker's `@GFXARCH@` pattern with each compatible variant of each
//! (`gfx90a:xnack-`, then `gfx90a`) and keeps the archives that exist. So
//! an archive is found only under a per-processor (or per-target-id) name.
//! Then, arch by arch and variant by variant (most specific first), every
//! archive holding the variant is a choice, tried in turn until one has
//! the kernel (since rocm-systems #9953).

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

/// The file names AMD's lookup tries for `arch`, in order: the pattern
/// expanded with each compatible variant.
pub fn candidates(pattern: &str, arch: &TargetId) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for v in arch.compatible_variants() {
        let path = expand_pattern(pattern, &v);
        if !out.contains(&path) {
            out.push(path);
        }
    }
    out
}

/// Where AMD's lookup may load the code objects of `device` (a process ISA
/// such as `gfx90a:xnack-`) from, in the order it tries them (see the
/// module docs). Empty when nothing serves it.
pub fn choices(pattern: &str, device: &TargetId) -> Vec<Found> {
    let arches: Vec<TargetId> = std::iter::once(device.clone())
        .chain(device.generic_fallback())
        .collect();
    let mut opened: Vec<(String, Archive)> = Vec::new();
    for arch in &arches {
        for path in candidates(pattern, arch) {
            if opened.iter().any(|(p, _)| *p == path) {
                continue;
            }
            if let Ok(a) = Archive::open(Path::new(&path)) {
                opened.push((path, a));
            }
        }
    }
    let mut out = Vec::new();
    for arch in &arches {
        for key in arch.compatible_variants() {
            for (path, archive) in &opened {
                if archive.has_arch(&key) {
                    out.push(Found {
                        archive: PathBuf::from(path),
                        key: key.clone(),
                    });
                }
            }
        }
    }
    out
}

/// The first of [`choices`]: where a code object every archive holds is
/// loaded from.
pub fn lookup(pattern: &str, device: &TargetId) -> Option<Found> {
    choices(pattern, device).into_iter().next()
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
