//! `rocm-kpack recombine`: the reduce step. Several shards, each the split
//! output of one build (tree splits: `generic/` + `<tree>/`; artifact
//! splits: `<name>_<component>_generic/` + `<name>_<component>_<tree>/`),
//! become one generic output plus one output per device tree of the spec.
//! Shards in the old family layout (`<component>_<family>.kpack`) are
//! inputs like any other, so recombining one such shard moves it to the
//! per-processor layout.
//!
//! - Generic: taken from the first shard that has it; every other shard's
//!   generic must equal it byte for byte (`.kpm` manifests and
//!   `artifact_manifest.txt` aside, both regenerated) when the spec's
//!   `generic_must_match` says so; otherwise differences are warnings.
//! - Device code: every shard archive's entries are re-sorted into archive
//!   units, one per processor or generic ISA, each in the tree
//!   [`Spec::placement`] names. The same (binary, target) from two shards is
//!   duplicate device code (identical generic-ISA code objects are not:
//!   every family build carries them) and fails or warns per
//!   `duplicate_device_code`. A shard archive that is exactly one output
//!   archive (same unit, tree, entries and scheme) is copied byte for byte;
//!   others are rewritten (entries in kernel name, co_index, arch order) at
//!   the options' level.
//! - Database files are re-read with the spec's rules and go to their
//!   arch's tree.
//! - The `.kpm` of every component is regenerated, listing every archive
//!   of every tree (the reduce step owns the complete manifest,
//!   docs/formats.md 3; overlays without it still load and verify through
//!   the `@GFXARCH@` pattern).
//! - A spec target some binary has no code object for is reported per
//!   `missing_device_code`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use filetime::FileTime;
use rocm_kpack_format::archive::{transport, Archive, ArchiveWriter, CompressionScheme};
use rocm_kpack_format::layout as kpack_layout;
use rocm_kpack_format::manifest::{ArchiveTransport, DatabaseFile, Manifest, ManifestFile};
use rocm_kpack_fs::copy_error;
use rocm_kpack_pkgspec::{
    is_generic_isa, processor_of, processors_served_by, DatabaseClassifier, OnDuplicate, OnMissing,
    Spec,
};
use serde::Serialize;

use crate::split::artifact::{is_artifact_dir, parse_artifact_name, read_prefixes};
use crate::split::binary::ArchiveReport;
use crate::split::engine::{
    finish_dirs_with, write_manifest_txt, EngineError, Result, Staging, MANIFEST_TXT,
};
use crate::split::output::ArchiveOutput;
use crate::split::plan::{source_date_epoch, Dest, Layout};
use crate::split::scan::is_kpack_path;

/// How to recombine.
#[derive(Debug, Clone)]
pub struct RecombineOptions {
    /// Output groups, database rules, validation switches.
    pub spec: Spec,
    /// How rewritten archives are written; with no compression given,
    /// an archive keeps its shard's scheme (and may be copied unchanged).
    pub output: ArchiveOutput,
}

impl Default for RecombineOptions {
    fn default() -> Self {
        RecombineOptions {
            spec: Spec::builtin(),
            output: ArchiveOutput::release(),
        }
    }
}

/// What a recombine did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RecombineReport {
    pub shards: Vec<PathBuf>,
    pub output: PathBuf,
    /// Output directories (generic ones first per unit).
    pub outputs: Vec<String>,
    pub archives: Vec<RecombinedArchive>,
    /// `.kpm` manifests written (relative to the output).
    pub manifests: Vec<String>,
    /// Database files placed: (output path, tree, arch).
    pub databases: Vec<(String, String, String)>,
    pub warnings: Vec<String>,
}

/// One output archive.
#[derive(Debug, Clone, Serialize)]
pub struct RecombinedArchive {
    #[serde(flatten)]
    pub archive: ArchiveReport,
    /// Copied unchanged from this shard archive (else rewritten).
    pub copied_from: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Tree,
    Artifacts,
}

/// One unit of a shard: a generic tree and device trees.
#[derive(Debug, Default, Clone)]
struct ShardUnit {
    generic: Option<PathBuf>,
    /// (group as named in the shard, directory).
    devices: Vec<(String, PathBuf)>,
}

fn discover(shard: &Path) -> Result<(Kind, BTreeMap<String, ShardUnit>)> {
    let bad = |why: String| EngineError::Input {
        path: shard.to_path_buf(),
        why,
    };
    if !shard.is_dir() {
        return Err(bad("is not a directory".into()));
    }
    let mut names: Vec<String> = fs::read_dir(shard)
        .map_err(|e| bad(format!("cannot be read: {e}")))?
        .filter_map(|i| i.ok())
        .filter(|i| i.path().is_dir())
        .map(|i| i.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    let mut units: BTreeMap<String, ShardUnit> = BTreeMap::new();
    if shard.join("generic").is_dir() {
        let u = units.entry(String::new()).or_default();
        for n in names {
            let p = shard.join(&n);
            if n == "generic" {
                u.generic = Some(p);
            } else {
                u.devices.push((n, p));
            }
        }
        return Ok((Kind::Tree, units));
    }
    for n in names {
        let p = shard.join(&n);
        if !is_artifact_dir(&p) {
            continue;
        }
        let (prefix, suffix) = parse_artifact_name(&n).ok_or_else(|| {
            bad(format!(
                "{n}: artifact name is not <name>_<component>_<suffix>"
            ))
        })?;
        let u = units.entry(prefix.to_string()).or_default();
        if suffix == "generic" {
            u.generic = Some(p);
        } else {
            u.devices.push((suffix.to_string(), p));
        }
    }
    if units.is_empty() {
        return Err(bad(
            "is not a split output (no generic/ directory and no artifact directories)".into(),
        ));
    }
    Ok((Kind::Artifacts, units))
}

/// Recombines `shards` into `out` (see the module docs).
pub fn recombine(
    shards: &[PathBuf],
    out: &Path,
    opts: &RecombineOptions,
) -> Result<RecombineReport> {
    if shards.is_empty() {
        return Err(EngineError::Invalid("no shard directories given".into()));
    }
    opts.spec.validate()?;
    let mut kind = None;
    let mut units: BTreeMap<String, Vec<(usize, ShardUnit)>> = BTreeMap::new();
    for (i, s) in shards.iter().enumerate() {
        let (k, us) = discover(s)?;
        if kind.is_some_and(|prev| prev != k) {
            return Err(EngineError::Input {
                path: s.clone(),
                why:
                    "mixes tree splits (generic/) and artifact splits; recombine one kind at a time"
                        .into(),
            });
        }
        kind = Some(k);
        for (name, u) in us {
            units.entry(name).or_default().push((i, u));
        }
    }
    let kind = kind.unwrap_or(Kind::Tree);
    let inputs: Vec<&Path> = shards.iter().map(PathBuf::as_path).collect();
    let staging = Staging::new(&inputs, out, opts.output.replace_existing)?;
    let work = opts.output.work().map_err(EngineError::Invalid)?;
    let in_flight = work.plan.in_flight;
    let mut report = work.install(|| -> Result<RecombineReport> {
        let classifier = DatabaseClassifier::new(&opts.spec)?;
        let mut report = RecombineReport::default();
        for (name, parts) in &units {
            let layout = match kind {
                Kind::Tree => Layout::Tree,
                Kind::Artifacts => Layout::Artifact {
                    prefix: name.clone(),
                },
            };
            recombine_unit(
                shards,
                &layout,
                parts,
                staging.path(),
                opts,
                in_flight,
                &classifier,
                &mut report,
            )?;
        }
        Ok(report)
    })?;
    report.outputs = staging.publish()?;
    report.shards = shards.to_vec();
    report.output = out.to_path_buf();
    Ok(report)
}

/// A tree's files: relative path -> (kind, mode, mtime, inode or link text).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Dir,
    File { size: u64, inode: (u64, u64) },
    Symlink(String),
}

struct Walked {
    nodes: BTreeMap<String, (Node, u32, FileTime)>,
}

fn walk(root: &Path) -> Result<Walked> {
    let mut nodes = BTreeMap::new();
    for item in walkdir::WalkDir::new(root)
        .min_depth(1)
        .follow_links(false)
        .sort_by_file_name()
    {
        let item = item.map_err(|e| {
            let p = e.path().unwrap_or(root).to_path_buf();
            EngineError::io(
                "cannot read",
                &p,
                e.into_io_error()
                    .unwrap_or_else(|| io::Error::other("walk")),
            )
        })?;
        let rel = item
            .path()
            .strip_prefix(root)
            .ok()
            .and_then(|r| r.to_str())
            .ok_or_else(|| EngineError::Input {
                path: item.path().to_path_buf(),
                why: "file name is not valid UTF-8".into(),
            })?
            .to_string();
        let meta = fs::symlink_metadata(item.path())
            .map_err(|e| EngineError::io("cannot read", item.path(), e))?;
        let ft = meta.file_type();
        let node = if ft.is_dir() {
            Node::Dir
        } else if ft.is_symlink() {
            let t = fs::read_link(item.path())
                .map_err(|e| EngineError::io("cannot read", item.path(), e))?;
            Node::Symlink(t.to_string_lossy().into_owned())
        } else if ft.is_file() {
            Node::File {
                size: meta.len(),
                inode: (meta.dev(), meta.ino()),
            }
        } else {
            return Err(EngineError::Input {
                path: item.path().to_path_buf(),
                why: "unsupported file type".into(),
            });
        };
        nodes.insert(
            rel,
            (
                node,
                meta.permissions().mode() & 0o7777,
                FileTime::from_last_modification_time(&meta),
            ),
        );
    }
    Ok(Walked { nodes })
}

/// `<dir>/<component>.kpm` (just the name in the top directory).
fn manifest_rel(dir: &str, component: &str) -> String {
    let name = kpack_layout::manifest_file_name(component);
    if dir.is_empty() {
        name
    } else {
        format!("{dir}/{name}")
    }
}

/// Generated files that recombine rewrites (not compared, not copied).
fn regenerated(rel: &str, kind_artifact: bool) -> bool {
    (is_kpack_path(rel) && kpack_layout::is_manifest_path(rel))
        || (kind_artifact && rel == MANIFEST_TXT)
}

fn same_contents(a: &Path, b: &Path) -> io::Result<bool> {
    let mut fa = BufReader::new(File::open(a)?);
    let mut fb = BufReader::new(File::open(b)?);
    let mut ba = vec![0u8; 1 << 16];
    let mut bb = vec![0u8; 1 << 16];
    loop {
        let na = read_full(&mut fa, &mut ba)?;
        let nb = read_full(&mut fb, &mut bb)?;
        if na != nb || ba.get(..na) != bb.get(..nb) {
            return Ok(false);
        }
        if na == 0 {
            return Ok(true);
        }
    }
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        let Some(rest) = buf.get_mut(n..) else { break };
        match r.read(rest)? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// Differences between two generic trees (sorted, one line each).
fn compare_trees(
    a_root: &Path,
    a: &Walked,
    b_root: &Path,
    b: &Walked,
    artifact: bool,
) -> Result<Vec<String>> {
    let mut diffs = Vec::new();
    let keys: BTreeSet<&String> = a.nodes.keys().chain(b.nodes.keys()).collect();
    for k in keys {
        if regenerated(k, artifact) {
            continue;
        }
        match (a.nodes.get(k), b.nodes.get(k)) {
            (Some(_), None) => diffs.push(format!("{k}: only in {}", a_root.display())),
            (None, Some(_)) => diffs.push(format!("{k}: only in {}", b_root.display())),
            (Some((na, ma, _)), Some((nb, mb, _))) => match (na, nb) {
                (Node::Dir, Node::Dir) => {}
                (Node::Symlink(x), Node::Symlink(y)) if x != y => {
                    diffs.push(format!("{k}: symlink to {x} vs {y}"))
                }
                (Node::Symlink(_), Node::Symlink(_)) => {}
                (Node::File { size: sa, .. }, Node::File { size: sb, .. }) => {
                    let pa = a_root.join(k);
                    let pb = b_root.join(k);
                    if sa != sb
                        || !same_contents(&pa, &pb)
                            .map_err(|e| EngineError::io("cannot read", &pb, e))?
                    {
                        diffs.push(format!("{k}: contents differ"));
                    } else if ma != mb {
                        diffs.push(format!("{k}: mode {ma:o} vs {mb:o}"));
                    }
                }
                _ => diffs.push(format!("{k}: different file types")),
            },
            (None, None) => {}
        }
    }
    Ok(diffs)
}

fn set_mode(p: &Path, mode: u32) -> Result<()> {
    fs::set_permissions(p, fs::Permissions::from_mode(mode))
        .map_err(|e| EngineError::io("cannot set permissions of", p, e))
}

fn set_mtime(p: &Path, t: FileTime) -> Result<()> {
    filetime::set_file_mtime(p, t).map_err(|e| EngineError::io("cannot set the time of", p, e))
}

fn mkdirs(p: &Path) -> Result<()> {
    fs::create_dir_all(p).map_err(|e| EngineError::io("cannot create directory", p, e))
}

/// Copies a walked tree (symlinks as symlinks, hard links as hard links,
/// modes and mtimes), skipping `skip` paths. Directory attributes are set
/// later by [`finish_dirs_with`].
fn copy_tree(src: &Path, w: &Walked, dst: &Path, skip: impl Fn(&str) -> bool) -> Result<()> {
    mkdirs(dst)?;
    let mut first_name: BTreeMap<(u64, u64), String> = BTreeMap::new();
    for (rel, (node, mode, mtime)) in &w.nodes {
        if skip(rel) {
            continue;
        }
        let to = dst.join(rel);
        match node {
            Node::Dir => mkdirs(&to)?,
            Node::Symlink(t) => {
                if let Some(p) = to.parent() {
                    mkdirs(p)?;
                }
                std::os::unix::fs::symlink(t, &to)
                    .map_err(|e| EngineError::io("cannot create symlink", &to, e))?;
                filetime::set_symlink_file_times(&to, *mtime, *mtime)
                    .map_err(|e| EngineError::io("cannot set the time of", &to, e))?;
            }
            Node::File { inode, .. } => {
                if let Some(p) = to.parent() {
                    mkdirs(p)?;
                }
                if let Some(first) = first_name.get(inode) {
                    fs::hard_link(dst.join(first), &to)
                        .map_err(|e| EngineError::io("cannot hard-link", &to, e))?;
                    continue;
                }
                first_name.insert(*inode, rel.clone());
                let from = src.join(rel);
                fs::copy(&from, &to).map_err(|e| EngineError::Io(copy_error(&from, &to, e)))?;
                set_mode(&to, *mode)?;
                set_mtime(&to, *mtime)?;
            }
        }
    }
    Ok(())
}

/// One database file (or symlink) of a shard's device output.
struct DbSource {
    group: String,
    arch: String,
    path: PathBuf,
    shard: usize,
    node: Node,
    mode: u32,
    mtime: FileTime,
}

/// One shard archive.
struct Source {
    shard: usize,
    path: PathBuf,
    /// The unit its file name gives (`x_gfx90a.kpack` -> `gfx90a`; a
    /// family-layout `x_gfx90X.kpack` gives `gfx90X`, which is no unit).
    unit: Option<String>,
    archive: Archive,
}

/// (kernel name, co_index, arch): the order entries are written in.
type EntryKey = (String, u64, String);

/// One output archive being assembled: its tree, and each entry with the
/// source (index) it is taken from.
type UnitEntries<'k> = (String, Vec<(&'k EntryKey, usize)>);

fn entry_key(binary_key: &str, arch: &str) -> EntryKey {
    match binary_key.rsplit_once('#') {
        Some((name, co)) => match co.parse::<u64>() {
            Ok(n) => (name.to_string(), n, arch.to_string()),
            Err(_) => (binary_key.to_string(), u64::MAX, arch.to_string()),
        },
        None => (binary_key.to_string(), u64::MAX, arch.to_string()),
    }
}

fn binary_key(k: &EntryKey) -> String {
    if k.1 == u64::MAX {
        k.0.clone()
    } else {
        format!("{}#{}", k.0, k.1)
    }
}

/// Handles a problem the spec's switch decides about.
fn duplicate(opts: &RecombineOptions, report: &mut RecombineReport, msg: String) -> Result<()> {
    match opts.spec.validation.duplicate_device_code {
        OnDuplicate::Error => Err(EngineError::Conflict(format!(
            "{msg} (spec: duplicate_device_code = \"error\")"
        ))),
        OnDuplicate::Warn => {
            tracing::debug!("{msg}; keeping the first");
            report.warnings.push(format!("{msg}; kept the first"));
            Ok(())
        }
    }
}

/// Recombines one unit (a tree, or one artifact's outputs) of every shard
/// into `root`. The phases, in order: [`merge_generic`] (compare the
/// shards' generic trees, copy the first), [`generic_inventory`] (its
/// directories and `.kpm` places), [`collect_devices`] (every shard's
/// archives and database files), [`place_databases`], [`write_archives`]
/// (regrouped archives and their regenerated `.kpm`), [`keep_manifests`]
/// of components without archives, [`check_missing`], then
/// [`finish_trees`].
#[allow(clippy::too_many_arguments)]
fn recombine_unit(
    shards: &[PathBuf],
    layout: &Layout,
    parts: &[(usize, ShardUnit)],
    root: &Path,
    opts: &RecombineOptions,
    in_flight: usize,
    classifier: &DatabaseClassifier,
    report: &mut RecombineReport,
) -> Result<()> {
    let unit = Unit {
        shards,
        layout,
        root,
        opts,
        artifact: matches!(layout, Layout::Artifact { .. }),
    };
    let generic = merge_generic(&unit, parts, report)?;
    let mut dirs: BTreeMap<String, (u32, FileTime)> = BTreeMap::new();
    let mut newest = FileTime::zero();
    let mut kpm_dirs = generic_inventory(&generic.walk, &mut dirs, &mut newest);
    let generic_prefixes = if unit.artifact {
        read_prefixes(generic.first)?
    } else {
        Vec::new()
    };
    let (sources, db) = collect_devices(&unit, parts, classifier, &mut dirs, &mut newest)?;
    let generated = source_date_epoch().unwrap_or(newest);
    place_databases(&unit, &db, report)?;
    write_archives(
        &unit,
        &generic,
        &sources,
        &mut kpm_dirs,
        in_flight,
        generated,
        report,
    )?;
    keep_manifests(&generic, kpm_dirs, report)?;
    if opts.spec.validation.missing_device_code != OnMissing::Ignore {
        check_missing(&sources, &opts.spec, report)?;
    }
    finish_trees(&unit, &generic.out, &generic_prefixes, &dirs, generated)
}

/// What every phase of [`recombine_unit`] reads.
struct Unit<'r> {
    shards: &'r [PathBuf],
    layout: &'r Layout,
    root: &'r Path,
    opts: &'r RecombineOptions,
    artifact: bool,
}

impl Unit<'_> {
    fn shard_name(&self, i: usize) -> String {
        self.shards
            .get(i)
            .map_or_else(|| format!("shard {i}"), |p| p.display().to_string())
    }
}

/// The merged generic tree.
struct Generic<'p> {
    /// Every shard's generic tree, in shard order.
    generics: Vec<(usize, &'p PathBuf)>,
    /// The first, which is copied.
    first: &'p PathBuf,
    walk: Walked,
    /// Where it went.
    out: PathBuf,
    name: String,
}

/// Compares the shards' generic trees (as the spec's `generic_must_match`
/// says) and copies the first into `root`, but for the files recombine
/// regenerates.
fn merge_generic<'p>(
    unit: &Unit<'_>,
    parts: &'p [(usize, ShardUnit)],
    report: &mut RecombineReport,
) -> Result<Generic<'p>> {
    let (layout, artifact) = (unit.layout, unit.artifact);
    let generics: Vec<(usize, &PathBuf)> = parts
        .iter()
        .filter_map(|(i, u)| u.generic.as_ref().map(|g| (*i, g)))
        .collect();
    let Some(&(_, first_generic)) = generics.first() else {
        return Err(EngineError::Input {
            path: unit.shards.first().cloned().unwrap_or_default(),
            why: format!(
                "no shard has the generic output {}",
                layout.dir_name(&Dest::Generic)
            ),
        });
    };
    let first_walk = walk(first_generic)?;
    for &(_, other) in generics.iter().skip(1) {
        let w = walk(other)?;
        let diffs = compare_trees(first_generic, &first_walk, other, &w, artifact)?;
        if diffs.is_empty() {
            continue;
        }
        let shown: Vec<&str> = diffs.iter().take(5).map(String::as_str).collect();
        let msg = format!(
            "generic output {} differs from {}: {}{}",
            other.display(),
            first_generic.display(),
            shown.join("; "),
            if diffs.len() > 5 {
                format!(" (and {} more)", diffs.len() - 5)
            } else {
                String::new()
            }
        );
        if unit.opts.spec.validation.generic_must_match {
            return Err(EngineError::Conflict(format!(
                "{msg} (spec: generic_must_match = true)"
            )));
        }
        tracing::debug!("{msg}; using the first");
        report.warnings.push(format!("{msg}; used the first"));
    }
    let generic_name = layout.dir_name(&Dest::Generic);
    let generic_out = unit.root.join(&generic_name);
    copy_tree(first_generic, &first_walk, &generic_out, |rel| {
        regenerated(rel, artifact)
    })?;
    Ok(Generic {
        generics,
        first: first_generic,
        walk: first_walk,
        out: generic_out,
        name: generic_name,
    })
}

/// The generic tree's directories (into `dirs`), its newest time (into
/// `newest`), and where each component's manifest lives in it.
fn generic_inventory(
    first_walk: &Walked,
    dirs: &mut BTreeMap<String, (u32, FileTime)>,
    newest: &mut FileTime,
) -> BTreeMap<String, Vec<String>> {
    for (rel, (node, mode, mtime)) in &first_walk.nodes {
        *newest = (*newest).max(*mtime);
        if *node == Node::Dir {
            dirs.insert(rel.clone(), (*mode, *mtime));
        }
    }
    let mut kpm_dirs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for rel in first_walk.nodes.keys() {
        if is_kpack_path(rel) && kpack_layout::is_manifest_path(rel) {
            let (dir, name) = rel.rsplit_once('/').unwrap_or(("", rel));
            if let Some(c) = kpack_layout::manifest_component(name) {
                kpm_dirs
                    .entry(c.to_string())
                    .or_default()
                    .push(dir.to_string());
            }
        }
    }
    kpm_dirs
}

/// Archive sources by (kpack dir, component).
type Sources = BTreeMap<(String, String), Vec<Source>>;
/// Output path -> candidate database files, in shard order.
type Databases = BTreeMap<String, Vec<DbSource>>;

/// Every shard's device trees: their directories (into `dirs`), newest
/// time, archives and database files.
fn collect_devices(
    unit: &Unit<'_>,
    parts: &[(usize, ShardUnit)],
    classifier: &DatabaseClassifier,
    dirs: &mut BTreeMap<String, (u32, FileTime)>,
    newest: &mut FileTime,
) -> Result<(Sources, Databases)> {
    let artifact = unit.artifact;
    let mut sources: Sources = BTreeMap::new();
    let mut db: Databases = BTreeMap::new();
    for (shard, parts_unit) in parts {
        for (_, dir) in &parts_unit.devices {
            let prefixes = if artifact {
                read_prefixes(dir)?
            } else {
                Vec::new()
            };
            let w = walk(dir)?;
            for (rel, (node, mode, mtime)) in &w.nodes {
                *newest = (*newest).max(*mtime);
                if artifact && rel == MANIFEST_TXT {
                    continue;
                }
                let path = dir.join(rel);
                match node {
                    Node::Dir => {
                        dirs.entry(rel.clone()).or_insert((*mode, *mtime));
                    }
                    Node::File { .. }
                        if is_kpack_path(rel) && kpack_layout::is_archive_path(rel) =>
                    {
                        let archive =
                            Archive::open(&path).map_err(|source| EngineError::Format {
                                path: path.clone(),
                                source,
                            })?;
                        let (kdir, name) = rel.rsplit_once('/').unwrap_or(("", rel));
                        let unit_name = kpack_layout::archive_unit(archive.group_name(), name)
                            .map(str::to_string);
                        sources
                            .entry((kdir.to_string(), archive.group_name().to_string()))
                            .or_default()
                            .push(Source {
                                shard: *shard,
                                path,
                                unit: unit_name,
                                archive,
                            });
                    }
                    Node::Symlink(_) if is_kpack_path(rel) => {
                        // Per-target archive symlinks are added by packaging.
                    }
                    _ => {
                        let in_root = if artifact {
                            prefixes
                                .iter()
                                .find_map(|p| rel.strip_prefix(&format!("{p}/")))
                                .unwrap_or(rel)
                        } else {
                            rel.as_str()
                        };
                        let source = database_source(
                            unit, classifier, in_root, path, *shard, node, *mode, *mtime,
                        )?;
                        db.entry(rel.clone()).or_default().push(source);
                    }
                }
            }
        }
    }
    Ok((sources, db))
}

/// A device output file that is no archive: a kernel database, whose group
/// the spec's rules give.
#[allow(clippy::too_many_arguments)]
fn database_source(
    unit: &Unit<'_>,
    classifier: &DatabaseClassifier,
    in_root: &str,
    path: PathBuf,
    shard: usize,
    node: &Node,
    mode: u32,
    mtime: FileTime,
) -> Result<DbSource> {
    let m = classifier.classify(in_root).ok_or_else(|| EngineError::Input {
        path: path.clone(),
        why: "device output file matches no kernel-database rule of the spec, so its group is unknown"
            .into(),
    })?;
    let place = unit
        .opts
        .spec
        .placement(&m.arch)
        .map_err(|_| EngineError::Input {
            path: path.clone(),
            why: format!(
                "kernel database for {}, which no device group covers",
                m.arch
            ),
        })?;
    Ok(DbSource {
        group: place.tree,
        arch: m.arch,
        path,
        shard,
        node: node.clone(),
        mode,
        mtime,
    })
}

/// Each database path from its first shard into its group's tree (a
/// duplicate is judged by the spec's `duplicate_device_code`).
fn place_databases(unit: &Unit<'_>, db: &Databases, report: &mut RecombineReport) -> Result<()> {
    for (rel, candidates) in db {
        let Some(first) = candidates.first() else {
            continue;
        };
        for other in candidates.iter().skip(1) {
            let identical = match (&first.node, &other.node) {
                (Node::Symlink(a), Node::Symlink(b)) => a == b,
                (Node::File { .. }, Node::File { .. }) => {
                    same_contents(&first.path, &other.path)
                        .map_err(|e| EngineError::io("cannot read", &other.path, e))?
                }
                _ => false,
            };
            if !(identical && is_generic_isa(processor_of(&first.arch))) {
                duplicate(
                    unit.opts,
                    report,
                    format!(
                        "duplicate device code: database file {rel} ({}) in {} and {}",
                        first.arch,
                        unit.shard_name(first.shard),
                        unit.shard_name(other.shard)
                    ),
                )?;
            }
        }
        let to = unit
            .root
            .join(unit.layout.dir_name(&Dest::Group(first.group.clone())))
            .join(rel);
        if let Some(p) = to.parent() {
            mkdirs(p)?;
        }
        match &first.node {
            Node::Symlink(target) => {
                std::os::unix::fs::symlink(target, &to)
                    .map_err(|e| EngineError::io("cannot create symlink", &to, e))?;
                filetime::set_symlink_file_times(&to, first.mtime, first.mtime)
                    .map_err(|e| EngineError::io("cannot set the time of", &to, e))?;
            }
            _ => {
                fs::copy(&first.path, &to)
                    .map_err(|e| EngineError::Io(copy_error(&first.path, &to, e)))?;
                set_mode(&to, first.mode)?;
                set_mtime(&to, first.mtime)?;
            }
        }
        report
            .databases
            .push((rel.clone(), first.group.clone(), first.arch.clone()));
    }
    Ok(())
}

/// Every component's archives regrouped ([`regroup`]) and its manifest
/// regenerated wherever the generic tree had it ([`write_manifest`]).
fn write_archives(
    unit: &Unit<'_>,
    generic: &Generic<'_>,
    sources: &Sources,
    kpm_dirs: &mut BTreeMap<String, Vec<String>>,
    in_flight: usize,
    generated: FileTime,
    report: &mut RecombineReport,
) -> Result<()> {
    for ((kdir, component), srcs) in sources {
        let files = regroup(
            unit.shards,
            unit.layout,
            unit.root,
            kdir,
            component,
            srcs,
            unit.opts,
            in_flight,
            report,
            generated,
        )?;
        let mut manifest_files: Vec<ManifestFile> = files;
        manifest_files.sort_by(|a, b| a.filename.cmp(&b.filename));
        let dirs_for = kpm_dirs
            .remove(component)
            .unwrap_or_else(|| vec![kdir.clone()]);
        for d in dirs_for {
            let rel = manifest_rel(&d, component);
            write_manifest(generic, component, &rel, &manifest_files, generated)?;
            report.manifests.push(format!("{}/{rel}", generic.name));
        }
    }
    Ok(())
}

/// The regenerated manifest `rel` of `component` in the generic tree.
fn write_manifest(
    generic: &Generic<'_>,
    component: &str,
    rel: &str,
    manifest_files: &[ManifestFile],
    generated: FileTime,
) -> Result<()> {
    // Database files: every shard's manifest lists those of its
    // own build; the reduced manifest lists them all (first shard
    // wins a path, as for the files themselves).
    let mut database_files: BTreeMap<String, DatabaseFile> = BTreeMap::new();
    // Every shard of one package layout declares the same prefix path.
    let mut prefix_path = None;
    let mut kpack_files = manifest_files.to_vec();
    for &(_, g) in &generic.generics {
        let shard_kpm = g.join(rel);
        if !shard_kpm.is_file() {
            continue;
        }
        let m = Manifest::read(&shard_kpm).map_err(|source| EngineError::Format {
            path: shard_kpm.clone(),
            source,
        })?;
        prefix_path = prefix_path.or(m.prefix_path);
        for f in m.database_files {
            database_files.entry(f.path.clone()).or_insert(f);
        }
        // An archive copied from this shard (the same bytes) was
        // framed at the level the shard's manifest gives.
        for ours in &mut kpack_files {
            if let Some(ArchiveTransport::Solid {
                level: level @ None,
                ..
            }) = &mut ours.transport
            {
                *level = m
                    .kpack_files
                    .iter()
                    .find(|f| f.sha256.is_some() && f.sha256 == ours.sha256)
                    .and_then(|f| match f.transport {
                        Some(ArchiveTransport::Solid { level, .. }) => level,
                        _ => None,
                    });
            }
        }
    }
    let bytes = Manifest {
        component: component.to_string(),
        kpack_files,
        database_files: database_files.into_values().collect(),
        prefix_path,
    }
    .to_msgpack()
    .map_err(|source| EngineError::Format {
        path: PathBuf::from(kpack_layout::manifest_file_name(component)),
        source,
    })?;
    let to = generic.out.join(rel);
    if let Some(p) = to.parent() {
        mkdirs(p)?;
    }
    fs::write(&to, &bytes).map_err(|e| EngineError::io("cannot write", &to, e))?;
    set_mode(&to, 0o644)?;
    set_mtime(&to, generated)
}

/// Manifests of components no shard has archives for: kept as they are.
fn keep_manifests(
    generic: &Generic<'_>,
    kpm_dirs: BTreeMap<String, Vec<String>>,
    report: &mut RecombineReport,
) -> Result<()> {
    for (component, ds) in kpm_dirs {
        for d in ds {
            let rel = manifest_rel(&d, &component);
            let from = generic.first.join(&rel);
            let to = generic.out.join(&rel);
            fs::copy(&from, &to).map_err(|e| EngineError::Io(copy_error(&from, &to, e)))?;
            report.warnings.push(format!(
                "{rel}: no shard has archives of {component}; manifest kept as is"
            ));
        }
    }
    Ok(())
}

/// Every output tree: `artifact_manifest.txt` (artifact layout), then the
/// directories' modes and times.
fn finish_trees(
    unit: &Unit<'_>,
    generic_out: &Path,
    generic_prefixes: &[String],
    dirs: &BTreeMap<String, (u32, FileTime)>,
    generated: FileTime,
) -> Result<()> {
    let mut trees: Vec<PathBuf> = vec![generic_out.to_path_buf()];
    for t in unit.opts.spec.trees() {
        let d = unit.root.join(unit.layout.dir_name(&Dest::Group(t)));
        if d.is_dir() {
            trees.push(d);
        }
    }
    if unit.artifact {
        for t in &trees {
            let is_generic = *t == generic_out;
            let prefixes: Vec<&str> = generic_prefixes
                .iter()
                .map(String::as_str)
                .filter(|p| is_generic || t.join(p).exists())
                .collect();
            write_manifest_txt(t, &prefixes, generated)?;
        }
    }
    finish_dirs_with(&trees, dirs, generated)
}

/// Sorts the entries of one component's shard archives into archive units
/// and writes one archive per unit into its tree; returns their manifest
/// entries.
#[allow(clippy::too_many_arguments)]
fn regroup(
    shards: &[PathBuf],
    layout: &Layout,
    root: &Path,
    kdir: &str,
    component: &str,
    srcs: &[Source],
    opts: &RecombineOptions,
    in_flight: usize,
    report: &mut RecombineReport,
    generated: FileTime,
) -> Result<Vec<ManifestFile>> {
    let spec = &opts.spec;
    let shard_name = |i: usize| {
        shards
            .get(i)
            .map_or_else(|| format!("shard {i}"), |p| p.display().to_string())
    };
    // Entry -> the sources providing it, in shard order.
    let mut providers: BTreeMap<EntryKey, Vec<usize>> = BTreeMap::new();
    for (si, s) in srcs.iter().enumerate() {
        for (key, arch, _) in s.archive.entries() {
            providers.entry(entry_key(key, arch)).or_default().push(si);
        }
    }
    for (k, ps) in &providers {
        let Some((&first, rest)) = ps.split_first() else {
            continue;
        };
        let key = binary_key(k);
        for &other in rest {
            let (Some(a), Some(b)) = (srcs.get(first), srcs.get(other)) else {
                continue;
            };
            let identical_generic = is_generic_isa(processor_of(&k.2))
                && match (a.archive.kernel(&key, &k.2), b.archive.kernel(&key, &k.2)) {
                    (Ok(x), Ok(y)) => x == y,
                    _ => false,
                };
            if !identical_generic {
                duplicate(
                    opts,
                    report,
                    format!(
                        "duplicate device code: {key} for {} in {} ({}) and {} ({})",
                        k.2,
                        shard_name(a.shard),
                        a.path.display(),
                        shard_name(b.shard),
                        b.path.display()
                    ),
                )?;
            }
        }
    }
    // Unit -> its tree, and the entries with the source each is taken from:
    // preferably a source that is already this unit's archive (so a shard's
    // per-processor archive stays whole and can be copied unchanged), else
    // the first provider.
    let mut by_unit: BTreeMap<String, UnitEntries<'_>> = BTreeMap::new();
    for (k, ps) in &providers {
        let Some(&first) = ps.first() else { continue };
        let place = spec.placement(&k.2).map_err(|e| EngineError::Input {
            path: srcs.get(first).map(|s| s.path.clone()).unwrap_or_default(),
            why: e.to_string(),
        })?;
        let pick = ps
            .iter()
            .find(|si| {
                srcs.get(**si)
                    .is_some_and(|s| s.unit.as_deref() == Some(place.unit.as_str()))
            })
            .copied()
            .unwrap_or(first);
        by_unit
            .entry(place.unit)
            .or_insert_with(|| (place.tree, Vec::new()))
            .1
            .push((k, pick));
    }
    let mut files = Vec::new();
    for (unit, (tree_name, entries)) in by_unit {
        let file_name = kpack_layout::archive_file_name(component, &unit);
        let tree = layout.dir_name(&Dest::Group(tree_name.clone()));
        let rel = if kdir.is_empty() {
            format!("{tree}/{file_name}")
        } else {
            format!("{tree}/{kdir}/{file_name}")
        };
        let to = root.join(&rel);
        if let Some(p) = to.parent() {
            mkdirs(p)?;
        }
        let arches: BTreeSet<String> = entries.iter().map(|(k, _)| k.2.clone()).collect();
        // Copy unchanged when one untouched source archive is exactly this
        // unit, in this tree.
        let single: BTreeSet<usize> = entries.iter().map(|(_, si)| *si).collect();
        let copy_from = match single.iter().next() {
            Some(&si) if single.len() == 1 => srcs.get(si).filter(|s| {
                s.unit.as_deref() == Some(unit.as_str())
                    && s.archive.gfx_arch_family() == tree_name
                    && s.archive.entries().count() == entries.len()
                    && opts
                        .output
                        .compression
                        .is_none_or(|c| c == s.archive.scheme())
            }),
            _ => None,
        };
        // The copy's frame level is the shard's, which its archive does
        // not record: the shard's manifest gives it (below).
        let (copied_from, frame_level) = match copy_from {
            Some(s) => {
                fs::copy(&s.path, &to).map_err(|e| EngineError::Io(copy_error(&s.path, &to, e)))?;
                (Some(s.path.clone()), None)
            }
            None => {
                let scheme = opts
                    .output
                    .compression
                    .or_else(|| srcs.first().map(|s| s.archive.scheme()))
                    .unwrap_or(CompressionScheme::ZstdPerKernel);
                let file =
                    File::create(&to).map_err(|e| EngineError::io("cannot create", &to, e))?;
                let fmt_err = |source| EngineError::Format {
                    path: to.clone(),
                    source,
                };
                let mut w = ArchiveWriter::new(
                    BufWriter::with_capacity(1 << 20, file),
                    component,
                    &tree_name,
                    scheme,
                    opts.output.zstd_level,
                )
                .map_err(fmt_err)?;
                w.set_in_flight_bytes(in_flight);
                for (k, si) in &entries {
                    let s = srcs
                        .get(*si)
                        .ok_or_else(|| EngineError::Invalid("source index".into()))?;
                    let key = binary_key(k);
                    let data =
                        s.archive
                            .kernel(&key, &k.2)
                            .map_err(|source| EngineError::Format {
                                path: s.path.clone(),
                                source,
                            })?;
                    w.add_kernel(&key, &k.2, data).map_err(fmt_err)?;
                }
                w.set_gfx_arches(arches.iter().cloned().collect());
                let buf = w.finish().map_err(fmt_err)?;
                buf.into_inner()
                    .map_err(|e| EngineError::io("cannot write", &to, e.into_error()))?;
                let level = opts.output.zstd_level;
                (
                    None,
                    (scheme == CompressionScheme::ZstdPerKernel).then_some(level),
                )
            }
        };
        set_mode(&to, 0o644)?;
        set_mtime(&to, generated)?;
        let (size, sha) = rocm_kpack_fs::sha256_file(&to)
            .map_err(|e| EngineError::io(e.action, &to, e.source))?;
        let format_err = |source| EngineError::Format {
            path: to.clone(),
            source,
        };
        let transport = Archive::open(&to)
            .and_then(|a| transport::manifest_transport(&a, frame_level))
            .map_err(format_err)?;
        let architectures: Vec<String> = arches.into_iter().collect();
        report.archives.push(RecombinedArchive {
            archive: ArchiveReport {
                path: rel.into(),
                component: component.to_string(),
                group: tree_name.clone(),
                unit,
                architectures: architectures.clone(),
                entries: entries.len(),
                size,
                sha256: hex::encode(sha),
            },
            copied_from,
        });
        files.push(ManifestFile {
            filename: file_name,
            family: tree_name,
            architectures,
            size,
            sha256: Some(sha),
            transport: Some(transport),
        });
    }
    Ok(files)
}

/// Reports spec targets that binaries have no code object for.
fn check_missing(
    sources: &BTreeMap<(String, String), Vec<Source>>,
    spec: &Spec,
    report: &mut RecombineReport,
) -> Result<()> {
    let mut messages = Vec::new();
    for ((_, component), srcs) in sources {
        // Binary key -> processors it has code for (generic ISAs expanded).
        let mut served: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for s in srcs {
            for (key, arch, _) in s.archive.entries() {
                let p = processor_of(arch);
                let set = served.entry(key.to_string()).or_default();
                if is_generic_isa(p) {
                    set.extend(processors_served_by(p).iter().map(|x| x.to_string()));
                } else {
                    set.insert(p.to_string());
                }
            }
        }
        let total = served.len();
        let mut none = Vec::new();
        let mut partial = Vec::new();
        for t in spec.targets() {
            let lacking: Vec<&String> = served
                .iter()
                .filter(|(_, s)| !s.contains(t))
                .map(|(k, _)| k)
                .collect();
            if lacking.len() == total {
                none.push(t.to_string());
            } else if let Some(first) = lacking.first() {
                partial.push(format!(
                    "{t} (missing for {} of {total} binaries, e.g. {first})",
                    lacking.len()
                ));
            }
        }
        if !none.is_empty() {
            messages.push(format!(
                "component {component}: no device code for {} of {} spec targets: {}",
                none.len(),
                spec.targets().len(),
                none.join(", ")
            ));
        }
        if !partial.is_empty() {
            messages.push(format!(
                "component {component}: incomplete device code for {}",
                partial.join(", ")
            ));
        }
    }
    if messages.is_empty() {
        return Ok(());
    }
    match spec.validation.missing_device_code {
        OnMissing::Error => Err(EngineError::Conflict(format!(
            "{} (spec: missing_device_code = \"error\")",
            messages.join("; ")
        ))),
        _ => {
            for m in messages {
                tracing::debug!("{m}");
                report.warnings.push(m);
            }
            Ok(())
        }
    }
}
