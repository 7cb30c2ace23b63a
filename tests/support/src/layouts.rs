//! Archive layouts as loaders see them: whether AMD's lookup
//! ([`crate::gfxarch`]) finds every code object of a split binary, and the
//! reference layout the public rocm-kpack tool writes (per-target-id
//! archives, a marker holding only the pattern, no `.kpm`), generated from a
//! committed fat fixture (tests/fixtures/README.md, "Archive layouts kept
//! for compatibility").

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Cursor};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use rocm_kpack_format::archive::{Archive, ArchiveWriter, CompressionScheme, DEFAULT_ZSTD_LEVEL};
use rocm_kpack_format::bundle;
use rocm_kpack_format::layout;
use rocm_kpack_format::target::TargetId;
use rocm_kpack_splitter::elf::{self, Classification};
use rocm_kpack_splitter::split::binary::{split_fat_elf, ElfSplit};

use crate::gfxarch;

/// Every code object of a fat binary: (co_index, target id) -> bytes.
pub fn fat_code_objects(fat: &Path) -> io::Result<BTreeMap<(u32, String), Vec<u8>>> {
    let data = fs::read(fat)?;
    let Classification::Fat(f) = elf::classify(&data).map_err(io::Error::other)? else {
        return Err(io::Error::other(format!(
            "{}: not a fat binary",
            fat.display()
        )));
    };
    let section = f.fatbin_bytes().map_err(io::Error::other)?;
    let mut out = BTreeMap::new();
    for (i, b) in bundle::parse_fatbin(section)
        .map_err(io::Error::other)?
        .iter()
        .enumerate()
    {
        for (t, d) in b.code_objects() {
            out.insert((i as u32, t.to_string()), d.to_vec());
        }
    }
    Ok(out)
}

/// Follows the `@GFXARCH@` expansion of the split binary `split` exactly as
/// AMD's loader does ([`crate::gfxarch::lookup`]), for every code object of
/// its fat original `fat` whose target is in `targets`: the archive found
/// must hold `<kernel_name>#<co_index>` under that very target,
/// byte-identical. Returns how many code objects were checked.
pub fn check_pattern_finds(split: &Path, fat: &Path, targets: &[&str]) -> Result<usize, String> {
    let pattern = gfxarch::pattern_of(split).map_err(|e| e.to_string())?;
    let cos = fat_code_objects(fat).map_err(|e| format!("{}: {e}", fat.display()))?;
    let mut checked = 0;
    for ((co, target), bytes) in cos
        .iter()
        .filter(|((_, t), _)| targets.contains(&t.as_str()))
    {
        let device = TargetId::parse(target).map_err(|e| e.to_string())?;
        let Some(found) = gfxarch::lookup(&pattern.pattern, &device) else {
            let tried = gfxarch::candidates(&pattern.pattern, &device);
            return Err(format!(
                "{}: {target}: no archive among {tried:?}",
                split.display()
            ));
        };
        if found.key != *target {
            return Err(format!(
                "{}: {target} found as {}",
                found.archive.display(),
                found.key
            ));
        }
        // The name the pattern expands to is the archive itself, never an alias.
        let md = fs::symlink_metadata(&found.archive)
            .map_err(|e| format!("{}: {e}", found.archive.display()))?;
        if !md.file_type().is_file() {
            return Err(format!("{}: not a regular file", found.archive.display()));
        }
        let key = format!("{}#{co}", pattern.marker.kernel_name);
        let archive = Archive::open(&found.archive)
            .map_err(|e| format!("{}: {e}", found.archive.display()))?;
        match archive.kernel(&key, target) {
            Ok(got) if got == *bytes => checked += 1,
            Ok(_) => {
                return Err(format!(
                    "{}: {key} {target}: bytes differ",
                    found.archive.display()
                ))
            }
            Err(e) => return Err(format!("{}: {key} {target}: {e}", found.archive.display())),
        }
    }
    Ok(checked)
}

/// Writes the reference layout of the fat library `fat` into `out`, as the
/// public rocm-kpack tool lays out a split tree: `lib/<file name>`
/// host-only, its marker holding only `../.kpack/<component>_@GFXARCH@.kpack`
/// (kernel name `lib/<file name>`), and one archive per target id,
/// `.kpack/<component>_<target id>.kpack` (`gfx90a:xnack-` keeps its `:`),
/// whose `gfx_arch_family` is that target id; no `.kpm`. The component is
/// the file name up to its first `.`. Deterministic.
pub fn write_reference_layout(fat: &Path, out: &Path) -> io::Result<()> {
    let file_name = fat
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| io::Error::other("fixture without a file name"))?;
    let component = file_name.split('.').next().unwrap_or(file_name);
    let kernel_name = format!("lib/{file_name}");
    let [_, pattern] = layout::marker_search_paths("../", component);
    let data = fs::read(fat)?;
    let ElfSplit::Split(split) =
        split_fat_elf(&data, &kernel_name, vec![pattern]).map_err(io::Error::other)?
    else {
        return Err(io::Error::other(format!(
            "{}: not a fat binary",
            fat.display()
        )));
    };
    // Target id -> (binary key, bytes), in co_index order.
    let mut by_target: BTreeMap<String, Vec<(String, Vec<u8>)>> = BTreeMap::new();
    for (co, target, bytes) in split.code_objects().map_err(io::Error::other)? {
        let id = TargetId::parse(&target)
            .map_err(io::Error::other)?
            .to_string();
        by_target
            .entry(id)
            .or_default()
            .push((format!("{kernel_name}#{co}"), bytes));
    }
    let kpack = out.join(layout::KPACK_DIR);
    fs::create_dir_all(&kpack)?;
    for (target, kernels) in by_target {
        let mut w = ArchiveWriter::new(
            Cursor::new(Vec::new()),
            component,
            &target,
            CompressionScheme::ZstdPerKernel,
            DEFAULT_ZSTD_LEVEL,
        )
        .map_err(io::Error::other)?;
        for (key, bytes) in kernels {
            w.add_kernel(&key, &target, bytes)
                .map_err(io::Error::other)?;
        }
        let bytes = w.finish().map_err(io::Error::other)?.into_inner();
        let path = kpack.join(layout::archive_file_name(component, &target));
        fs::write(&path, bytes)?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644))?;
    }
    let host = out.join(&kernel_name);
    fs::create_dir_all(host.parent().unwrap_or(out))?;
    fs::write(&host, split.host.to_vec().map_err(io::Error::other)?)?;
    fs::set_permissions(&host, fs::Permissions::from_mode(0o755))
}
