//! The split plan: plain data saying, before anything is written, where
//! every input entry goes (generic tree or a device tree) and how (copy,
//! hard link, symlink, split), and which fat binaries feed which archive set
//! (`<component>_<unit>.kpack` per processor or generic ISA +
//! `<component>.kpm` in one `.kpack/` directory). `split --dry-run` prints
//! it. Device trees are named by [`Spec::placement`]: a group's, or a
//! generic ISA's own.
//!
//! Where `.kpack/` lives (the "kpack root" of a binary, which its marker
//! paths climb to and its `kernel_name` is relative to):
//! - artifact directories: the stage prefix (`math-libs/rocRAND/stage`);
//!   one archive set per artifact, `kernel_name` = artifact-relative path;
//! - install trees: the deepest `--prefix-dir` holding the binary; else the
//!   Debian multiarch directory (`usr/lib/x86_64-linux-gnu`) when the binary
//!   lies in it; else the parent of the binary's deepest `lib`, `lib64`,
//!   `bin`, `sbin` or `libexec` directory (`opt/rocm/lib/x.so` ->
//!   `opt/rocm`, `torch/lib/x.so` -> `torch`); else the binary's own
//!   directory. One archive set per (kpack root, component); the component
//!   is the file name up to its first `.` unless `--component` says.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;

use filetime::FileTime;
use rocm_kpack_pkgspec::Spec;
use serde::Serialize;

use crate::split::binary::{default_component, marker_search_paths, validate_component};
use crate::split::scan::{hard_link_groups, EntryKind, FileClass, Scan};

/// Why a plan cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A kernel database whose arch no group carries.
    #[error("{path}: kernel database for {arch} ({rule} rule), {why}")]
    Database {
        path: String,
        arch: String,
        rule: String,
        why: String,
    },
    /// The input already holds kpack archives or manifests.
    #[error("{path}: the input already holds kpack archives/manifests; split works on fat trees (merge split outputs with `rocm-kpack recombine`)")]
    AlreadyKpacked { path: String },
    /// Bad component or option.
    #[error("{0}")]
    Invalid(String),
}

/// Which output tree an entry goes to. In JSON it is the tree's name,
/// `"generic"` or the group's (no group may be called `generic`), one
/// shape for both.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dest {
    /// Host code and everything that is not device code.
    Generic,
    /// One device tree: a group's, or a generic ISA's own
    /// ([`Spec::placement`]).
    Group(String),
}

impl Serialize for Dest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl fmt::Display for Dest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dest::Generic => f.write_str("generic"),
            Dest::Group(g) => f.write_str(g),
        }
    }
}

/// How output trees are named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Layout {
    /// `generic/`, `<group>/`.
    Tree,
    /// `<prefix>_generic/`, `<prefix>_<group>/` (docs/packaging.md input 3),
    /// each with an `artifact_manifest.txt`.
    Artifact {
        /// `<name>_<component>`.
        prefix: String,
    },
}

impl Layout {
    /// Directory name of one output tree.
    pub fn dir_name(&self, dest: &Dest) -> String {
        match self {
            Layout::Tree => dest.to_string(),
            Layout::Artifact { prefix } => format!("{prefix}_{dest}"),
        }
    }
}

/// What to do with one entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "action")]
pub enum Action {
    /// Create the directory.
    Mkdir,
    /// Copy the file.
    Copy,
    /// Hard-link to another output path of the same tree (written first).
    HardLink { to: String },
    /// Create the symlink (text kept verbatim).
    Symlink { target: String },
}

/// One input entry and where it goes.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedEntry {
    /// Input path.
    pub src: PathBuf,
    /// Path inside the output tree.
    pub out: String,
    /// Output tree.
    pub dest: Dest,
    pub action: Action,
    /// Permission bits.
    pub mode: u32,
    #[serde(skip)]
    pub mtime: FileTime,
    /// Bytes (files).
    pub size: u64,
    /// Why it goes where it goes (database rule and arch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The target id a kernel database serves (`gfx90a:xnack+`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_arch: Option<String>,
}

/// One fat binary to split.
#[derive(Debug, Clone, Serialize)]
pub struct BinaryPlan {
    pub src: PathBuf,
    /// Path of the host-only binary in the generic tree.
    pub out: String,
    /// Marker `kernel_name` (TOC keys `<kernel_name>#<co_index>`).
    pub kernel_name: String,
    /// Marker search paths.
    pub search_paths: Vec<String>,
    pub mode: u32,
    #[serde(skip)]
    pub mtime: FileTime,
    pub size: u64,
}

/// Fat binaries that share archives.
#[derive(Debug, Clone, Serialize)]
pub struct ArchiveSetPlan {
    /// Archive `group_name` and file-name prefix.
    pub component: String,
    /// `.kpack/` directory of the archives (in each group's tree).
    pub archive_dir: String,
    /// `.kpack/` directories of the generic tree that get the `.kpm`.
    pub manifest_dirs: Vec<String>,
    /// The binaries, sorted by kernel name.
    pub binaries: Vec<BinaryPlan>,
}

/// The whole plan for one input (tree or artifact).
#[derive(Debug, Clone, Serialize)]
pub struct SplitPlan {
    pub layout: Layout,
    /// Artifact stage prefixes (empty for trees).
    pub prefixes: Vec<String>,
    /// Copies, links, directories (sorted by output path).
    pub entries: Vec<PlannedEntry>,
    pub archive_sets: Vec<ArchiveSetPlan>,
    /// Mode and mtime of every input directory, by output path, so that
    /// directories created in any output tree look like the input's.
    #[serde(skip)]
    pub dirs: BTreeMap<String, (u32, FileTime)>,
    /// Things worth telling (symlinks leaving the tree, ...).
    pub warnings: Vec<String>,
    /// Timestamp for generated files (archives, manifests): the newest
    /// input mtime, or `SOURCE_DATE_EPOCH`.
    #[serde(skip)]
    pub generated_mtime: FileTime,
}

impl SplitPlan {
    /// Device groups that receive anything from entries (archives are only
    /// known once binaries are read).
    pub fn entry_groups(&self) -> BTreeSet<&str> {
        self.entries
            .iter()
            .filter_map(|e| match &e.dest {
                Dest::Group(g) => Some(g.as_str()),
                Dest::Generic => None,
            })
            .collect()
    }
}

impl fmt::Display for SplitPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for set in &self.archive_sets {
            writeln!(
                f,
                "archive set {}: archives {}/{}_<processor>.kpack, manifest in {}",
                set.component,
                set.archive_dir,
                set.component,
                set.manifest_dirs.join(", ")
            )?;
            for b in &set.binaries {
                writeln!(
                    f,
                    "  split    {} -> {}/{}  (kernel name {})",
                    b.out,
                    self.layout.dir_name(&Dest::Generic),
                    b.out,
                    b.kernel_name
                )?;
            }
        }
        for e in &self.entries {
            let tree = self.layout.dir_name(&e.dest);
            let (what, detail) = match &e.action {
                Action::Mkdir => continue,
                Action::Copy => ("copy    ", String::new()),
                Action::HardLink { to } => ("hardlink", format!("  (same file as {to})")),
                Action::Symlink { target } => ("symlink ", format!("  (-> {target})")),
            };
            let note = e
                .note
                .as_ref()
                .map(|n| format!("  [{n}]"))
                .unwrap_or_default();
            writeln!(f, "  {what} {} -> {tree}/{}{detail}{note}", e.out, e.out)?;
        }
        for w in &self.warnings {
            writeln!(f, "warning: {w}")?;
        }
        Ok(())
    }
}

/// How binaries are assigned to archive sets.
#[derive(Debug, Clone)]
pub enum KpackMode {
    /// Install tree: kpack root per binary (see the module docs).
    Tree {
        /// One component for every binary.
        component: Option<String>,
        /// Explicit kpack roots (tree-relative).
        prefix_dirs: Vec<String>,
    },
    /// Artifact: one set for all binaries, component `<name>_<component>`.
    Artifact { component: String },
}

/// One scanned content root: output path prefix (`""` for trees, the stage
/// prefix for artifacts) and its scan.
pub struct Root<'s> {
    pub prefix: String,
    pub scan: &'s Scan,
}

fn join(prefix: &str, rel: &str) -> String {
    match (prefix.is_empty(), rel.is_empty()) {
        (true, _) => rel.to_string(),
        (_, true) => prefix.to_string(),
        _ => format!("{prefix}/{rel}"),
    }
}

fn parent(rel: &str) -> &str {
    rel.rsplit_once('/').map_or("", |(d, _)| d)
}

/// The kpack root of a tree binary at `rel` (see the module docs).
pub fn kpack_root(rel: &str, prefix_dirs: &[String]) -> String {
    let dir = parent(rel);
    let comps: Vec<&str> = if dir.is_empty() {
        Vec::new()
    } else {
        dir.split('/').collect()
    };
    let under = |p: &str| p.is_empty() || dir == p || dir.starts_with(&format!("{p}/"));
    if let Some(p) = prefix_dirs
        .iter()
        .filter(|p| under(p))
        .max_by_key(|p| p.len())
    {
        return p.clone();
    }
    // Walk the components from the last: `before` is what precedes `c`,
    // so the prefixes are whole slices and never an index into one.
    let mut before: &[&str] = &comps;
    while let Some((&c, rest)) = before.split_last() {
        let prev = rest.last().copied();
        if is_multiarch(c) && matches!(prev, Some("lib" | "lib32" | "lib64")) {
            return before.join("/");
        }
        if matches!(c, "lib" | "lib64" | "lib32" | "bin" | "sbin" | "libexec") {
            return rest.join("/");
        }
        before = rest;
    }
    dir.to_string()
}

/// A Debian multiarch tuple (`x86_64-linux-gnu`, `arm-linux-gnueabihf`).
fn is_multiarch(c: &str) -> bool {
    c.contains("-linux-")
        && c.chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_')
}

/// Directory levels between `root` and the directory holding `rel`.
fn depth_below(root: &str, rel: &str) -> usize {
    let dir = parent(rel);
    let inner = if root.is_empty() {
        dir
    } else {
        dir.strip_prefix(root)
            .map(|d| d.trim_start_matches('/'))
            .unwrap_or(dir)
    };
    if inner.is_empty() {
        0
    } else {
        inner.split('/').count()
    }
}

fn strip_root<'a>(root: &str, rel: &'a str) -> &'a str {
    if root.is_empty() {
        rel
    } else {
        rel.strip_prefix(root)
            .map(|r| r.trim_start_matches('/'))
            .unwrap_or(rel)
    }
}

/// The device tree of a database file: where code for its arch goes.
fn database_tree(spec: &Spec, path: &str, arch: &str, rule: &str) -> Result<String, PlanError> {
    spec.placement(arch)
        .map(|p| p.tree)
        .map_err(|_| PlanError::Database {
            path: path.to_string(),
            arch: arch.to_string(),
            rule: rule.to_string(),
            why: format!(
                "which no device group covers (groups: {})",
                spec.group_names().join(", ")
            ),
        })
}

/// Keeps a directory in the generic tree only when something generic lies
/// below it or it was empty in the input: directories that only held
/// database files (`lib/aotriton/kernels/gfx942/`) exist only in their
/// group's tree.
fn prune_generic_dirs(entries: &mut Vec<PlannedEntry>, sets: &[ArchiveSetPlan]) {
    let mut has_children: BTreeSet<&str> = BTreeSet::new();
    for e in entries.iter() {
        has_children.insert(parent(&e.out));
    }
    for set in sets {
        for b in &set.binaries {
            has_children.insert(parent(&b.out));
        }
    }
    let mut keep: BTreeSet<String> = BTreeSet::new();
    let mark = |path: &str, keep: &mut BTreeSet<String>| {
        let mut p = path;
        while !p.is_empty() && keep.insert(p.to_string()) {
            p = parent(p);
        }
    };
    for e in entries.iter() {
        let generic_leaf = match e.action {
            Action::Mkdir => !has_children.contains(e.out.as_str()),
            _ => e.dest == Dest::Generic,
        };
        if generic_leaf {
            mark(
                if e.action == Action::Mkdir {
                    &e.out
                } else {
                    parent(&e.out)
                },
                &mut keep,
            );
        }
    }
    for set in sets {
        for b in &set.binaries {
            mark(parent(&b.out), &mut keep);
        }
        for d in &set.manifest_dirs {
            mark(parent(d), &mut keep);
        }
    }
    entries.retain(|e| e.action != Action::Mkdir || keep.contains(&e.out));
}

/// `SOURCE_DATE_EPOCH` if set and valid.
pub fn source_date_epoch() -> Option<FileTime> {
    std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .map(|s| FileTime::from_unix_time(s, 0))
}

/// Plans the split of `roots` (one tree, or an artifact's stage prefixes).
pub fn plan(
    roots: &[Root<'_>],
    layout: Layout,
    mode: &KpackMode,
    spec: &Spec,
) -> Result<SplitPlan, PlanError> {
    let mut entries = Vec::new();
    let mut dirs = BTreeMap::new();
    let mut warnings = Vec::new();
    // (kpack root, component) -> binaries; BTreeMap keeps sets sorted.
    let mut sets: BTreeMap<(String, String), Vec<BinaryPlan>> = BTreeMap::new();
    // Artifact mode: prefixes that hold binaries, in order.
    let mut binary_prefixes: Vec<String> = Vec::new();

    if let KpackMode::Artifact { component }
    | KpackMode::Tree {
        component: Some(component),
        ..
    } = mode
    {
        validate_component(component).map_err(|e| PlanError::Invalid(e.to_string()))?;
    }

    for root in roots {
        let scan = root.scan;
        if !root.prefix.is_empty() {
            dirs.insert(root.prefix.clone(), (scan.root_mode, scan.root_mtime));
        }
        let links = hard_link_groups(scan);
        // Non-first name -> first name.
        let mut link_to: BTreeMap<&str, &str> = BTreeMap::new();
        for names in links.values() {
            if let Some((first, rest)) = names.split_first() {
                for n in rest {
                    link_to.insert(n.as_str(), first.as_str());
                }
            }
        }
        // Destination of every entry, for hard-link decisions.
        let mut dest_of: BTreeMap<&str, Dest> = BTreeMap::new();
        for e in &scan.entries {
            let out = join(&root.prefix, &e.rel);
            let src = scan.path_of(&e.rel);
            match &e.kind {
                EntryKind::Dir => {
                    dirs.insert(out.clone(), (e.mode, e.mtime));
                    entries.push(PlannedEntry {
                        src,
                        out,
                        dest: Dest::Generic,
                        action: Action::Mkdir,
                        mode: e.mode,
                        mtime: e.mtime,
                        size: 0,
                        note: None,
                        database_arch: None,
                    });
                }
                EntryKind::Symlink {
                    target,
                    outside,
                    database,
                } => {
                    if *outside {
                        warnings.push(format!(
                            "{out}: symlink to {target} points outside the tree; kept as is, not followed"
                        ));
                    }
                    let (dest, note) = match database {
                        Some(arch) => {
                            let g = database_tree(spec, &out, arch, "symlink")?;
                            (Dest::Group(g), Some(format!("database symlink, {arch}")))
                        }
                        None => (Dest::Generic, None),
                    };
                    entries.push(PlannedEntry {
                        src,
                        out,
                        dest,
                        action: Action::Symlink {
                            target: target.clone(),
                        },
                        mode: e.mode,
                        mtime: e.mtime,
                        size: 0,
                        note,
                        database_arch: database.clone(),
                    });
                }
                EntryKind::File { size, class, .. } => {
                    let (dest, note) = match class {
                        FileClass::KpackFile => {
                            return Err(PlanError::AlreadyKpacked { path: out });
                        }
                        FileClass::Database { arch, rule } => {
                            let g = database_tree(spec, &out, arch, rule)?;
                            (Dest::Group(g), Some(format!("{rule} database, {arch}")))
                        }
                        FileClass::FatBinary | FileClass::SplitBinary | FileClass::Other => {
                            (Dest::Generic, None)
                        }
                    };
                    let db_arch = match class {
                        FileClass::Database { arch, .. } => Some(arch.clone()),
                        _ => None,
                    };
                    dest_of.insert(e.rel.as_str(), dest.clone());
                    if let Some(first) = link_to.get(e.rel.as_str()) {
                        if dest_of.get(first) == Some(&dest) {
                            entries.push(PlannedEntry {
                                src,
                                out,
                                dest,
                                action: Action::HardLink {
                                    to: join(&root.prefix, first),
                                },
                                mode: e.mode,
                                mtime: e.mtime,
                                size: *size,
                                note,
                                database_arch: db_arch.clone(),
                            });
                            continue;
                        }
                    }
                    if *class == FileClass::FatBinary {
                        let (key, kernel_name, depth) = match mode {
                            KpackMode::Tree {
                                component,
                                prefix_dirs,
                            } => {
                                let kroot = kpack_root(&e.rel, prefix_dirs);
                                let file_name = e.rel.rsplit('/').next().unwrap_or(&e.rel);
                                let comp = component
                                    .clone()
                                    .unwrap_or_else(|| default_component(file_name).to_string());
                                validate_component(&comp)
                                    .map_err(|err| PlanError::Invalid(format!("{out}: {err}")))?;
                                let depth = depth_below(&kroot, &e.rel);
                                let kernel_name = strip_root(&kroot, &e.rel).to_string();
                                ((kroot, comp), kernel_name, depth)
                            }
                            KpackMode::Artifact { component } => {
                                if !binary_prefixes.contains(&root.prefix) {
                                    binary_prefixes.push(root.prefix.clone());
                                }
                                let depth = depth_below("", &e.rel);
                                ((String::new(), component.clone()), out.clone(), depth)
                            }
                        };
                        let search_paths = marker_search_paths(&key.1, depth);
                        sets.entry(key).or_default().push(BinaryPlan {
                            src,
                            out,
                            kernel_name,
                            search_paths,
                            mode: e.mode,
                            mtime: e.mtime,
                            size: *size,
                        });
                        continue;
                    }
                    entries.push(PlannedEntry {
                        src,
                        out,
                        dest,
                        action: Action::Copy,
                        mode: e.mode,
                        mtime: e.mtime,
                        size: *size,
                        note,
                        database_arch: db_arch,
                    });
                }
            }
        }
    }

    let archive_sets: Vec<ArchiveSetPlan> = sets
        .into_iter()
        .map(|((kroot, component), mut binaries)| {
            binaries.sort_by(|a, b| a.kernel_name.cmp(&b.kernel_name));
            let (archive_dir, manifest_dirs) = match mode {
                KpackMode::Tree { .. } => {
                    let d = join(&kroot, rocm_kpack_format::layout::KPACK_DIR);
                    (d.clone(), vec![d])
                }
                KpackMode::Artifact { .. } => {
                    let dirs: Vec<String> = binary_prefixes
                        .iter()
                        .map(|p| join(p, rocm_kpack_format::layout::KPACK_DIR))
                        .collect();
                    (
                        dirs.first()
                            .cloned()
                            .unwrap_or_else(|| rocm_kpack_format::layout::KPACK_DIR.into()),
                        dirs,
                    )
                }
            };
            ArchiveSetPlan {
                component,
                archive_dir,
                manifest_dirs,
                binaries,
            }
        })
        .collect();

    prune_generic_dirs(&mut entries, &archive_sets);
    entries.sort_by(|a, b| a.out.cmp(&b.out));
    let newest = roots
        .iter()
        .map(|r| r.scan.newest_mtime())
        .max()
        .unwrap_or_else(FileTime::zero);
    Ok(SplitPlan {
        layout,
        prefixes: roots
            .iter()
            .map(|r| r.prefix.clone())
            .filter(|p| !p.is_empty())
            .collect(),
        entries,
        archive_sets,
        dirs,
        warnings,
        generated_mtime: source_date_epoch().unwrap_or(newest),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kpack_roots() {
        let none: Vec<String> = Vec::new();
        assert_eq!(kpack_root("lib/libx.so.1", &none), "");
        assert_eq!(kpack_root("bin/app", &none), "");
        assert_eq!(kpack_root("opt/rocm/lib/libx.so", &none), "opt/rocm");
        assert_eq!(
            kpack_root("usr/lib/x86_64-linux-gnu/librocrand.so.1.1", &none),
            "usr/lib/x86_64-linux-gnu"
        );
        assert_eq!(kpack_root("usr/bin/app", &none), "usr");
        assert_eq!(
            kpack_root(
                "usr/lib/python3/dist-packages/torch/lib/libc10_hip.so",
                &none
            ),
            "usr/lib/python3/dist-packages/torch"
        );
        assert_eq!(kpack_root("pkg/hsa/libx.so", &none), "pkg/hsa");
        assert_eq!(kpack_root("app", &none), "");
        let p = vec!["opt".to_string(), "opt/rocm-6".to_string()];
        assert_eq!(kpack_root("opt/rocm-6/lib/deep/libx.so", &p), "opt/rocm-6");
        assert_eq!(kpack_root("usr/lib/libx.so", &p), "usr");
    }

    #[test]
    fn depths() {
        assert_eq!(depth_below("", "lib/x.so"), 1);
        assert_eq!(depth_below("", "x.so"), 0);
        assert_eq!(depth_below("opt/rocm", "opt/rocm/lib/x.so"), 1);
        assert_eq!(
            depth_below("usr/lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu/x.so"),
            0
        );
        assert_eq!(strip_root("opt/rocm", "opt/rocm/lib/x.so"), "lib/x.so");
        assert_eq!(
            marker_search_paths("x", depth_below("", "math-libs/rocRAND/stage/lib/x.so") - 3),
            ["../.kpack/x.kpm", "../.kpack/x_@GFXARCH@.kpack"]
        );
    }
}
