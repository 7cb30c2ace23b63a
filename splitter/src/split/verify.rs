//! `rocm-kpack verify`: check an installed (overlaid) tree the way the
//! runtime will use it.
//!
//! - every split binary's marker resolves, through its `.kpm` and
//!   `@GFXARCH@` pattern (the runtime loader's own search), to an archive
//!   entry `<kernel_name>#<co_index>` for every HIPK wrapper and every
//!   requested target (default: every arch the archives its marker reaches
//!   carry), asked for as a runtime does: the target id as the GPU reports
//!   it (`gfx90a:sramecc+:xnack-`), then its generic ISA;
//! - every archive entry belongs to some binary whose marker reaches that
//!   archive;
//! - every `.kpm` entry whose archive is present matches it (size, sha256,
//!   component, family, architectures);
//! - every archive is listed in its component's `.kpm`, or a marker's
//!   `@GFXARCH@` pattern reaches it under a name the loader expands the
//!   pattern to (a target id, processor or generic ISA, canonically
//!   spelled). Such an archive must then be what its name says: its
//!   component is the name's, and every arch it holds is one a loader
//!   looking for that name can use. Trees written by the public rocm-kpack
//!   tool have no `.kpm`, and overlaid shard outputs keep only the last
//!   shard's (docs/formats.md 3), so the pattern alone must do.
//!
//! Archives a manifest lists but that are not installed are fine as long as
//! no requested target needs them (a tree holds only some groups).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Component, Path, PathBuf};

use rayon::prelude::*;
use rocm_kpack_format::archive::Archive;
use rocm_kpack_format::layout;
use rocm_kpack_format::manifest::Manifest;
use rocm_kpack_format::marker::Marker;
use rocm_kpack_format::target::TargetId;
use rocm_kpack_loader::loader::{Cache, LoaderConfig};
use rocm_kpack_loader::select::{loadable, process_targets};
use rocm_kpack_pkgspec::targets::feature_completion;
use serde::Serialize;

use crate::elf::inspect::inspect_elf;
use crate::split::engine::{EngineError, Result};
use crate::split::scan::{is_kpack_path, is_x86_64_elf, read_head};

/// What to check.
#[derive(Debug, Clone, Default)]
pub struct VerifyOptions {
    /// Targets every binary must have code for (`gfx1100`,
    /// `gfx90a:xnack+`); None: the arches its reachable archives carry.
    pub targets: Option<Vec<String>>,
}

/// One problem found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// Tree-relative path of the file it is about.
    pub path: String,
    pub message: String,
}

/// One split binary checked.
#[derive(Debug, Clone, Serialize)]
pub struct BinaryCheck {
    pub path: String,
    pub kernel_name: String,
    /// co_index of each HIPK wrapper.
    pub co_indices: Vec<u32>,
    /// Targets checked for it.
    pub targets: Vec<String>,
    /// (co_index, target) pairs that resolved.
    pub resolved: usize,
}

/// The result of [`verify_tree`].
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    pub root: PathBuf,
    pub binaries: Vec<BinaryCheck>,
    /// Fat binaries still carrying device code (not an error).
    pub fat_binaries: Vec<String>,
    pub archives: Vec<String>,
    pub manifests: Vec<String>,
    /// Manifest entries whose archive is not installed.
    pub not_installed: Vec<String>,
    pub problems: Vec<Problem>,
}

impl VerifyReport {
    /// No problems.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

impl std::fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let resolved: usize = self.binaries.iter().map(|b| b.resolved).sum();
        writeln!(
            f,
            "{}: {} split binaries ({resolved} code objects resolved), {} archives, {} manifests",
            self.root.display(),
            self.binaries.len(),
            self.archives.len(),
            self.manifests.len()
        )?;
        for p in &self.fat_binaries {
            writeln!(f, "note: {p} is still a fat binary")?;
        }
        for p in &self.not_installed {
            writeln!(f, "note: {p} is listed but not installed")?;
        }
        if self.problems.is_empty() {
            writeln!(f, "OK")
        } else {
            writeln!(f, "{} problem(s):", self.problems.len())?;
            for p in &self.problems {
                writeln!(f, "  {}: {}", p.path, p.message)?;
            }
            Ok(())
        }
    }
}

/// The arch list a runtime passes for a device: its target id, then the
/// generic ISA it falls back to (docs/runtime.md: generic ISAs are separate
/// entries listed after the native one).
pub fn arch_list(target: &str) -> Vec<String> {
    let mut list = vec![target.to_string()];
    if let Some(g) = TargetId::parse(target)
        .ok()
        .and_then(|id| id.generic_fallback())
    {
        list.push(g.to_string());
    }
    list
}

/// Lexically normalized path (`a/b/../c` -> `a/c`), never touching the
/// file system, so paths built from markers compare with walked paths.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// One binary's check, its problems, and the (archive, key) pairs it owns.
type BinaryOutcome = (BinaryCheck, Vec<Problem>, BTreeSet<(String, String)>);

struct SplitBinary {
    rel: String,
    path: PathBuf,
    marker: Marker,
    co_indices: Vec<u32>,
}

enum Found {
    Binary(SplitBinary),
    Fat(String),
    Manifest(String),
    Archive(String),
    Nothing,
}

fn look_at(root: &Path, rel: String) -> std::result::Result<(Found, Option<Problem>), Problem> {
    let path = root.join(&rel);
    let problem = |message: String| Problem {
        path: rel.clone(),
        message,
    };
    if is_kpack_path(&rel) {
        return Ok((
            if layout::is_manifest_path(&rel) {
                Found::Manifest(rel)
            } else {
                Found::Archive(rel)
            },
            None,
        ));
    }
    let mut f = File::open(&path).map_err(|e| problem(format!("cannot read: {e}")))?;
    let head = read_head(&mut f, 64).map_err(|e| problem(format!("cannot read: {e}")))?;
    if !is_x86_64_elf(&head) {
        return Ok((Found::Nothing, None));
    }
    // SAFETY: read-only private mapping of a file we only read.
    let map = unsafe { memmap2::Mmap::map(&f) }.map_err(|e| problem(format!("cannot map: {e}")))?;
    let Ok(elf) = crate::elf::Elf::parse(&map) else {
        return Ok((Found::Nothing, None));
    };
    // Any ELF of the tree, split by whichever tool and stripped since.
    let phdr = crate::elf::phdr::check(&elf).err().map(|m| {
        problem(format!(
            "{m}; `rocm-kpack repair-phdr` rewrites it (docs/formats.md, \"Where the program header table lives\")"
        ))
    });
    let found = classify_elf(&elf, &map, rel.clone(), path, problem)?;
    Ok((found, phdr))
}

fn classify_elf(
    elf: &crate::elf::Elf<'_>,
    map: &[u8],
    rel: String,
    path: PathBuf,
    problem: impl Fn(String) -> Problem,
) -> std::result::Result<Found, Problem> {
    let has = |s: &str| matches!(elf.find_section(s), Ok(Some(_)));
    if has(crate::elf::rewrite::MARKER_SECTION) {
        let report =
            inspect_elf(map).map_err(|e| problem(format!("unreadable split binary: {e}")))?;
        let Some(m) = report.marker else {
            return Ok(Found::Nothing);
        };
        let mut co_indices: Vec<u32> = report
            .wrappers
            .iter()
            .filter(|w| w.magic == "HIPK")
            .filter_map(|w| w.co_index)
            .collect();
        co_indices.sort_unstable();
        co_indices.dedup();
        return Ok(Found::Binary(SplitBinary {
            rel: rel.clone(),
            path,
            marker: Marker {
                kpack_search_paths: m.kpack_search_paths,
                kernel_name: m.kernel_name,
            },
            co_indices,
        }));
    }
    if has(crate::elf::rewrite::FATBIN_SECTION) {
        return Ok(Found::Fat(rel));
    }
    Ok(Found::Nothing)
}

/// A marker search path of `b` as a tree-relative path (lexically
/// normalized), as the loader resolves it against the binary's directory.
fn marker_path(b: &SplitBinary, search_path: &str) -> Option<String> {
    let dir = Path::new(&b.rel).parent().unwrap_or(Path::new(""));
    normalize(&dir.join(search_path))
        .to_str()
        .map(str::to_string)
}

/// The archives among `archives` that the tree-relative `pattern` names
/// when the loader replaces `@GFXARCH@` with an arch it looks for: a
/// canonically spelled target id, processor or generic ISA (never a family
/// name such as `gfx90X`, which only a `.kpm` can point at). Each with the
/// unit its name gives.
fn pattern_hits<'a>(
    pattern: &str,
    archives: impl Iterator<Item = &'a String>,
) -> Vec<(&'a String, TargetId)> {
    let Some((pre, post)) = layout::split_pattern(pattern) else {
        return Vec::new();
    };
    archives
        .filter_map(|a| {
            let middle = a.strip_prefix(pre)?.strip_suffix(post)?;
            let unit = TargetId::parse(middle).ok()?;
            (unit.to_string() == middle).then_some((a, unit))
        })
        .collect()
}

/// Whether a loader that expanded `@GFXARCH@` to `unit` can take the code
/// object filed under `arch` from that file: some device has both among its
/// compatible variants (same processor, no feature set both ways).
fn name_serves(unit: &TargetId, arch: &str) -> bool {
    TargetId::parse(arch).is_ok_and(|a| {
        a.processor() == unit.processor()
            && unit
                .features()
                .iter()
                .all(|f| a.feature(&f.name).is_none_or(|on| on == f.enabled))
    })
}

/// The agents a requested target stands for: itself, or for a bare
/// processor that has features (`gfx942`), what a real agent of it may
/// present ([`process_targets`]: xnack is a per-process mode) that the
/// component's arch keys `known` serve, as the loader and the fetcher read
/// it; all of them when none is served, so that the miss is reported.
fn agents_of(target: &str, known: &[String]) -> Vec<String> {
    let Ok(id) = TargetId::parse(target) else {
        return vec![target.to_string()];
    };
    if !id.features().is_empty() {
        return vec![target.to_string()];
    }
    let all = process_targets(&id);
    let served: Vec<String> = all
        .iter()
        .filter(|agent| !loadable(agent, &[known]).is_empty())
        .map(ToString::to_string)
        .collect();
    if served.is_empty() {
        vec![target.to_string()]
    } else {
        served
    }
}

/// Checks the tree at `root` (see the module docs). An unusable root is an
/// error; everything found wrong inside is a [`Problem`] in the report.
///
/// The phases, in order: [`walk`] the tree, [`look_at_all`] its files,
/// [`open_archives`], [`check_manifests`] against them,
/// [`check_unlisted`] archives against the markers' patterns,
/// [`check_binary`] for each split binary (with the runtime loader), then
/// [`check_orphans`]. Problems are reported in that order.
pub fn verify_tree(root: &Path, opts: &VerifyOptions) -> Result<VerifyReport> {
    if !root.is_dir() {
        return Err(EngineError::Input {
            path: root.to_path_buf(),
            why: "is not a directory".into(),
        });
    }
    let mut problems = Vec::new();
    let files = walk(root, &mut problems);
    let found = look_at_all(root, files, &mut problems);
    let opened = open_archives(root, &found.archives, &mut problems);
    let listing = check_manifests(root, &found.manifests, &opened, &mut problems);
    check_unlisted(&found, &listing, &opened, &mut problems);

    // Resolve every (wrapper, target) with the runtime loader.
    let cache = Cache::with_config(LoaderConfig::default());
    let checks: Vec<BinaryOutcome> = found
        .binaries
        .par_iter()
        .map(|b| check_binary(b, opts, &listing.parsed, &opened, &cache))
        .collect();
    let mut owned: BTreeSet<(String, String)> = BTreeSet::new();
    let mut binary_checks = Vec::new();
    for (c, p, o) in checks {
        binary_checks.push(c);
        problems.extend(p);
        owned.extend(o);
    }
    check_orphans(&opened, &owned, &mut problems);

    Ok(VerifyReport {
        root: root.to_path_buf(),
        binaries: binary_checks,
        fat_binaries: found.fat_binaries,
        archives: found.archives,
        manifests: found.manifests,
        not_installed: listing.not_installed,
        problems,
    })
}

/// The tree-relative paths of every regular file under `root`, sorted; an
/// unreadable directory is a problem.
fn walk(root: &Path, problems: &mut Vec<Problem>) -> Vec<String> {
    let mut files = Vec::new();
    for item in walkdir::WalkDir::new(root)
        .follow_links(false)
        .sort_by_file_name()
    {
        let item = match item {
            Ok(i) => i,
            Err(e) => {
                problems.push(Problem {
                    path: e
                        .path()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default(),
                    message: format!("cannot read: {e}"),
                });
                continue;
            }
        };
        if !item.file_type().is_file() {
            continue;
        }
        if let Some(rel) = item.path().strip_prefix(root).ok().and_then(|r| r.to_str()) {
            files.push(rel.to_string());
        }
    }
    files
}

/// What the tree holds, by kind (tree-relative paths, in walk order).
struct Inventory {
    binaries: Vec<SplitBinary>,
    fat_binaries: Vec<String>,
    manifests: Vec<String>,
    archives: Vec<String>,
}

/// Looks at every file in parallel ([`look_at`]); the problems in file
/// order.
fn look_at_all(root: &Path, files: Vec<String>, problems: &mut Vec<Problem>) -> Inventory {
    let found: Vec<std::result::Result<(Found, Option<Problem>), Problem>> = files
        .into_par_iter()
        .map(|rel| look_at(root, rel))
        .collect();
    let mut inv = Inventory {
        binaries: Vec::new(),
        fat_binaries: Vec::new(),
        manifests: Vec::new(),
        archives: Vec::new(),
    };
    for f in found {
        let f = match f {
            Ok((found, phdr)) => {
                problems.extend(phdr);
                Ok(found)
            }
            Err(p) => Err(p),
        };
        match f {
            Ok(Found::Binary(b)) => inv.binaries.push(b),
            Ok(Found::Fat(p)) => inv.fat_binaries.push(p),
            Ok(Found::Manifest(p)) => inv.manifests.push(p),
            Ok(Found::Archive(p)) => inv.archives.push(p),
            Ok(Found::Nothing) => {}
            Err(p) => problems.push(p),
        }
    }
    inv
}

/// Opens each archive once.
fn open_archives(
    root: &Path,
    archives: &[String],
    problems: &mut Vec<Problem>,
) -> BTreeMap<String, Archive> {
    let mut opened: BTreeMap<String, Archive> = BTreeMap::new();
    for a in archives {
        match Archive::open(&root.join(a)) {
            Ok(ar) => {
                opened.insert(a.clone(), ar);
            }
            Err(e) => problems.push(Problem {
                path: a.clone(),
                message: format!("unreadable archive: {e}"),
            }),
        }
    }
    opened
}

/// What the manifests say.
struct Listing {
    /// Archives some manifest lists (tree-relative).
    listed: BTreeSet<String>,
    /// Listed archives that are not in the tree.
    not_installed: Vec<String>,
    /// Every readable manifest, by path.
    parsed: BTreeMap<String, Manifest>,
}

/// Reads every manifest and checks each entry whose archive is present.
fn check_manifests(
    root: &Path,
    manifests: &[String],
    opened: &BTreeMap<String, Archive>,
    problems: &mut Vec<Problem>,
) -> Listing {
    let mut listing = Listing {
        listed: BTreeSet::new(),
        not_installed: Vec::new(),
        parsed: BTreeMap::new(),
    };
    for m in manifests {
        let dir = m.rsplit_once('/').map_or("", |(d, _)| d);
        let man = match Manifest::read(&root.join(m)) {
            Ok(man) => man,
            Err(e) => {
                problems.push(Problem {
                    path: m.clone(),
                    message: format!("unreadable manifest: {e}"),
                });
                continue;
            }
        };
        for f in &man.kpack_files {
            let arel = if dir.is_empty() {
                f.filename.clone()
            } else {
                format!("{dir}/{}", f.filename)
            };
            listing.listed.insert(arel.clone());
            let apath = root.join(&arel);
            if !apath.exists() {
                listing.not_installed.push(arel);
                continue;
            }
            let mut bad = |message: String| {
                problems.push(Problem {
                    path: m.clone(),
                    message,
                })
            };
            check_manifest_entry(&apath, f, &man, opened.get(&arel), &mut bad);
        }
        listing.parsed.insert(m.clone(), man);
    }
    listing
}

/// One `.kpm` entry `f` of `man` against its archive at `apath` (`archive`
/// when it opened): size, sha256, component, family, architectures.
fn check_manifest_entry(
    apath: &Path,
    f: &rocm_kpack_format::manifest::ManifestFile,
    man: &Manifest,
    archive: Option<&Archive>,
    bad: &mut impl FnMut(String),
) {
    match rocm_kpack_fs::sha256_file(apath) {
        Ok((size, sha)) => {
            if size != f.size {
                bad(format!(
                    "{}: size {size}, manifest says {}",
                    f.filename, f.size
                ));
            }
            match f.sha256 {
                Some(h) if h != sha => bad(format!(
                    "{}: sha256 {}, manifest says {}",
                    f.filename,
                    hex::encode(sha),
                    hex::encode(h)
                )),
                None => bad(format!(
                    "{}: legacy manifest entry without sha256",
                    f.filename
                )),
                _ => {}
            }
        }
        Err(e) => bad(format!("{}: cannot read: {}", f.filename, e.source)),
    }
    let Some(a) = archive else {
        return;
    };
    if a.group_name() != man.component {
        bad(format!(
            "{}: archive component {:?}, manifest component {:?}",
            f.filename,
            a.group_name(),
            man.component
        ));
    }
    if a.gfx_arch_family() != f.family {
        bad(format!(
            "{}: archive family {:?}, manifest says {:?}",
            f.filename,
            a.gfx_arch_family(),
            f.family
        ));
    }
    let mut have: Vec<&str> = a.gfx_arches().iter().map(String::as_str).collect();
    let mut want: Vec<&str> = f.architectures.iter().map(String::as_str).collect();
    have.sort_unstable();
    want.sort_unstable();
    if have != want {
        bad(format!(
            "{}: archive arches [{}], manifest says [{}]",
            f.filename,
            have.join(", "),
            want.join(", ")
        ));
    }
}

/// Archives no manifest lists: a marker's `@GFXARCH@` pattern must reach
/// each, and it must be what its name says.
fn check_unlisted(
    found: &Inventory,
    listing: &Listing,
    opened: &BTreeMap<String, Archive>,
    problems: &mut Vec<Problem>,
) {
    // Archives a marker's pattern reaches: archive -> the unit its name
    // gives.
    let mut by_pattern: BTreeMap<&String, TargetId> = BTreeMap::new();
    for b in &found.binaries {
        for s in &b.marker.kpack_search_paths {
            if let Some(pattern) = marker_path(b, s).filter(|t| layout::is_archive_pattern(t)) {
                by_pattern.extend(pattern_hits(&pattern, opened.keys()));
            }
        }
    }
    for a in &found.archives {
        if listing.listed.contains(a) {
            continue;
        }
        let (Some(unit), Some(ar)) = (by_pattern.get(a), opened.get(a)) else {
            if opened.contains_key(a) {
                problems.push(Problem {
                    path: a.clone(),
                    message:
                        "archive is listed in no .kpm manifest of its directory, and no marker's \
                              @GFXARCH@ pattern reaches it"
                            .into(),
                });
            }
            continue;
        };
        let file_name = a.rsplit('/').next().unwrap_or(a);
        if layout::archive_unit(ar.group_name(), file_name) != Some(unit.to_string().as_str()) {
            problems.push(Problem {
                path: a.clone(),
                message: format!(
                    "archive component {:?} does not match its file name",
                    ar.group_name()
                ),
            });
        }
        let foreign: Vec<&str> = ar
            .gfx_arches()
            .iter()
            .map(String::as_str)
            .filter(|arch| !name_serves(unit, arch))
            .collect();
        if !foreign.is_empty() {
            problems.push(Problem {
                path: a.clone(),
                message: format!(
                    "archive named for {unit} holds [{}], which a loader looking for {unit} never takes from it",
                    foreign.join(", ")
                ),
            });
        }
    }
}

/// Which archives `b`'s marker reaches.
fn reach(
    b: &SplitBinary,
    parsed: &BTreeMap<String, Manifest>,
    opened: &BTreeMap<String, Archive>,
) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for s in &b.marker.kpack_search_paths {
        let Some(t) = marker_path(b, s) else { continue };
        if let Some(man) = parsed.get(&t) {
            let mdir = t.rsplit_once('/').map_or("", |(d, _)| d);
            for f in &man.kpack_files {
                let p = if mdir.is_empty() {
                    f.filename.clone()
                } else {
                    format!("{mdir}/{}", f.filename)
                };
                if opened.contains_key(&p) {
                    out.insert(p);
                }
            }
        } else if layout::is_archive_pattern(&t) {
            out.extend(
                pattern_hits(&t, opened.keys())
                    .into_iter()
                    .map(|(a, _)| a.clone()),
            );
        } else if opened.contains_key(&t) {
            out.insert(t);
        }
    }
    out
}

/// Resolves every (wrapper, target) of `b` with the runtime loader.
fn check_binary(
    b: &SplitBinary,
    opts: &VerifyOptions,
    parsed: &BTreeMap<String, Manifest>,
    opened: &BTreeMap<String, Archive>,
    cache: &Cache,
) -> BinaryOutcome {
    let reached = reach(b, parsed, opened);
    let targets: Vec<String> = match &opts.targets {
        Some(t) => t.clone(),
        None => {
            let mut s: BTreeSet<String> = BTreeSet::new();
            for a in &reached {
                if let Some(ar) = opened.get(a) {
                    s.extend(ar.gfx_arches().iter().cloned());
                }
            }
            s.into_iter().collect()
        }
    };
    let mut problems = Vec::new();
    let mut owned = BTreeSet::new();
    for a in &reached {
        for co in &b.co_indices {
            owned.insert((a.clone(), format!("{}#{co}", b.marker.kernel_name)));
        }
    }
    // The target spelling that would have matched, for "did you mean".
    let hint_for = |t: &str| -> String {
        let carried: Vec<TargetId> = reached
            .iter()
            .filter_map(|a| opened.get(a))
            .flat_map(|ar| {
                ar.gfx_arches()
                    .iter()
                    .filter_map(|g| TargetId::parse(g).ok())
            })
            .collect();
        TargetId::parse(t)
            .ok()
            .and_then(|id| feature_completion(&id, &carried))
            .map(|h| format!("; did you mean `{h}`?"))
            .unwrap_or_default()
    };
    let mut resolved = 0;
    if b.co_indices.is_empty() {
        problems.push(Problem {
            path: b.rel.clone(),
            message: "split binary without HIPK wrappers".into(),
        });
    }
    let known = known_arches(b, &reached, parsed, opened);
    for t in &targets {
        for agent in agents_of(t, &known) {
            for co in &b.co_indices {
                let key = format!("{}#{co}", b.marker.kernel_name);
                match cache.resolve(&b.marker, &b.path, *co, &arch_list(&agent)) {
                    Ok(_) => resolved += 1,
                    Err(e) => problems.push(Problem {
                        path: b.rel.clone(),
                        message: format!("no code object for {agent} ({key}): {e}{}", hint_for(t)),
                    }),
                }
            }
        }
    }
    (
        BinaryCheck {
            path: b.rel.clone(),
            kernel_name: b.marker.kernel_name.clone(),
            co_indices: b.co_indices.clone(),
            targets,
            resolved,
        },
        problems,
        owned,
    )
}

/// Arch keys `b`'s component has, installed (in `reached`) or only listed:
/// which agents of a bare processor it serves at all.
fn known_arches(
    b: &SplitBinary,
    reached: &BTreeSet<String>,
    parsed: &BTreeMap<String, Manifest>,
    opened: &BTreeMap<String, Archive>,
) -> Vec<String> {
    reached
        .iter()
        .filter_map(|a| opened.get(a))
        .flat_map(|ar| ar.gfx_arches().iter().cloned())
        .chain(
            b.marker
                .kpack_search_paths
                .iter()
                .filter_map(|s| parsed.get(&marker_path(b, s)?))
                .flat_map(|m| {
                    m.kpack_files
                        .iter()
                        .flat_map(|f| f.architectures.iter().cloned())
                }),
        )
        .collect()
}

/// Every archive entry must belong to a split binary whose marker reaches
/// its archive (`owned`: (archive, key) pairs).
fn check_orphans(
    opened: &BTreeMap<String, Archive>,
    owned: &BTreeSet<(String, String)>,
    problems: &mut Vec<Problem>,
) {
    for (path, a) in opened {
        let mut orphans: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (key, arch, _) in a.entries() {
            if !owned.contains(&(path.clone(), key.to_string())) {
                orphans.entry(key).or_default().push(arch);
            }
        }
        for (key, arches) in orphans {
            problems.push(Problem {
                path: path.clone(),
                message: format!(
                    "entry {key} ({}) belongs to no split binary whose marker reaches this archive",
                    arches.join(", ")
                ),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_normalization() {
        assert_eq!(
            normalize(Path::new("lib/../.kpack/x.kpm")),
            Path::new(".kpack/x.kpm")
        );
        assert_eq!(normalize(Path::new("a/./b/../../c")), Path::new("c"));
        assert_eq!(normalize(Path::new("../x")), Path::new("../x"));
    }
}
