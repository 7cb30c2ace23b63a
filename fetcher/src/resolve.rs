//! Which device code this machine needs: find the `.kpm` manifests of
//! installed packages under the known prefixes, and for each, the archives
//! the loader may open for the local targets.
//!
//! Manifests are trusted only because a package manager installed them; this
//! module never fetches one. Filenames in them were checked by
//! [`rocm_kpack_format::manifest::Manifest::parse`] (no `/`, `..`, ...), and a
//! manifest that fails that check is refused whole.
//!
//! Where manifests are looked for, each path below `--root`:
//! - `/opt/rocm*/.kpack`, and up to two directory levels below each
//!   `/opt/rocm*` (`/opt/rocm/lib/.kpack`);
//! - `/usr/.kpack`, `/usr/lib64/.kpack`, `/usr/lib/.kpack`, one level below
//!   `/usr/lib` (`/usr/lib/x86_64-linux-gnu/.kpack`), and `/usr/local/.kpack`
//!   and one level below it;
//! - the site-packages directories of `python3` (asked once; skipped if it
//!   cannot be run) and up to two levels below (`torch/lib/.kpack`);
//! - each `--prefix P` as given (not below the root): `P/.kpack` and up to two
//!   levels below `P`, or `P` itself when it is named `.kpack`.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use rocm_kpack_format::manifest::{Manifest, ManifestFile};
use rocm_kpack_format::target::TargetId;
use rocm_kpack_loader::select;
use serde::Serialize;

use rocm_kpack_format::layout::{self, KPACK_DIR, MANIFEST_EXT};

/// Where to look.
#[derive(Debug, Clone)]
pub struct ScanConfig {
    /// Every default location is taken below this directory (`/` normally).
    pub root: PathBuf,
    /// Extra prefixes (`--prefix`), used as given.
    pub prefixes: Vec<PathBuf>,
    /// Look in the known prefixes too (off with `--no-default-prefixes`).
    pub default_prefixes: bool,
    /// Interpreter to ask for its site-packages (`None`: do not ask).
    pub python: Option<String>,
}

/// A manifest found in a `.kpack` directory.
#[derive(Debug, Clone, Serialize)]
pub struct InstalledManifest {
    /// Path of the `.kpm` file.
    pub path: PathBuf,
    /// The `.kpack` directory it is in (where its archives go).
    pub kpack_dir: PathBuf,
    /// The parsed manifest.
    #[serde(skip)]
    pub manifest: Manifest,
}

impl InstalledManifest {
    /// File name of the manifest (`rocrand.kpm`).
    pub fn file_name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// The manifest's prefix: the directory holding its `.kpack`
    /// directory, below which its database files are installed.
    pub fn prefix(&self) -> &Path {
        self.kpack_dir.parent().unwrap_or(Path::new("/"))
    }

    /// Where the database file `key` of this manifest lives (its path as
    /// [`ScanConfig::scan`] rewrote it: relative to the prefix, `../` for
    /// each level above it).
    pub fn database_path(&self, key: &str) -> PathBuf {
        database_path(self.prefix(), key)
    }

    /// Where an archive of this manifest lives.
    pub fn archive_path(&self, file: &ManifestFile) -> PathBuf {
        self.kpack_dir.join(&file.filename)
    }
}

/// A manifest that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RefusedManifest {
    /// Path of the `.kpm` file.
    pub path: PathBuf,
    /// Why.
    pub error: String,
}

/// Everything found.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    /// Every `.kpack` directory found (canonical paths, sorted).
    pub kpack_dirs: Vec<PathBuf>,
    /// Usable manifests, by path.
    pub manifests: Vec<InstalledManifest>,
    /// Manifests refused (unreadable, malformed, hostile filenames).
    pub refused: Vec<RefusedManifest>,
}

impl ScanConfig {
    /// Search bases and how many directory levels below each to look.
    pub fn bases(&self) -> Vec<(PathBuf, u32)> {
        let mut bases = Vec::new();
        if self.default_prefixes {
            let under = |p: &str| self.root.join(p.trim_start_matches('/'));
            if let Ok(entries) = fs::read_dir(under("/opt")) {
                let mut rocm: Vec<PathBuf> = entries
                    .filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().starts_with("rocm"))
                    .map(|e| e.path())
                    .collect();
                rocm.sort();
                bases.extend(rocm.into_iter().map(|p| (p, 2)));
            }
            bases.push((under("/usr"), 0));
            bases.push((under("/usr/lib64"), 0));
            bases.push((under("/usr/lib"), 1));
            bases.push((under("/usr/local"), 1));
            if let Some(python) = &self.python {
                for dir in python_site_packages(python) {
                    bases.push((under(&dir), 2));
                }
            }
        }
        bases.extend(self.prefixes.iter().map(|p| (p.clone(), 2)));
        bases
    }

    /// Where [`ScanConfig::scan`] looks, in words, for a run that found no
    /// manifest: "searched ROOT/opt/rocm*, ..., python3's site-packages,
    /// P" (the interpreter is not run again to name its directories).
    pub fn searched(&self) -> String {
        let mut places = Vec::new();
        if self.default_prefixes {
            let under = |p: &str| self.root.join(p).display().to_string();
            places.push(under("opt/rocm*"));
            for p in ["usr", "usr/lib64", "usr/lib", "usr/local"] {
                places.push(under(p));
            }
            if let Some(python) = &self.python {
                places.push(format!("the site-packages of {python}"));
            }
        }
        places.extend(self.prefixes.iter().map(|p| p.display().to_string()));
        if places.is_empty() {
            return "searched nowhere: --no-default-prefixes and no --prefix".to_owned();
        }
        format!(
            "searched {} for {KPACK_DIR}/*.{MANIFEST_EXT}",
            places.join(", ")
        )
    }

    /// Finds `.kpack` directories and reads every manifest in them.
    pub fn scan(&self) -> Scan {
        let mut dirs = BTreeSet::new();
        let mut refused = Vec::new();
        for (base, depth) in self.bases() {
            if base.file_name().is_some_and(|n| n == KPACK_DIR) {
                if usable_kpack_dir(&base, &mut refused) {
                    insert_canonical(&mut dirs, &base);
                }
                continue;
            }
            find_kpack_dirs(&base, depth, &mut dirs, &mut refused);
        }
        // Database files never go above the root (compared canonical, as
        // the `.kpack` directories are).
        let root = fs::canonicalize(&self.root).unwrap_or_else(|_| self.root.clone());
        let mut scan = Scan {
            kpack_dirs: dirs.into_iter().collect(),
            refused,
            ..Scan::default()
        };
        for dir in &scan.kpack_dirs {
            let Ok(entries) = fs::read_dir(dir) else {
                continue;
            };
            let mut paths: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == MANIFEST_EXT) && p.is_file())
                .collect();
            paths.sort();
            for path in paths {
                match Manifest::read(&path)
                    .map_err(|e| e.to_string())
                    .and_then(|mut m| {
                        database_keys(&mut m, dir, &root)?;
                        Ok(m)
                    }) {
                    Ok(manifest) => scan.manifests.push(InstalledManifest {
                        path,
                        kpack_dir: dir.clone(),
                        manifest,
                    }),
                    Err(error) => scan.refused.push(RefusedManifest { path, error }),
                }
            }
        }
        scan
    }
}

/// Where the database file `key` (relative to `prefix`, `../` for each
/// level above it: [`rocm_kpack_format::layout::database_key`]) lives. A key
/// the state validator let through climbs at most
/// [`rocm_kpack_format::layout::MAX_DATABASE_UP`] levels; past `/` it stays at `/`.
pub fn database_path(prefix: &Path, key: &str) -> PathBuf {
    let (base, rel) = database_base(prefix, key);
    base.join(rel)
}

/// [`database_path`] taken apart: the directory `key` climbs to, and the
/// database path below it.
pub fn database_base<'k>(prefix: &Path, key: &'k str) -> (PathBuf, &'k str) {
    let (up, rel) = layout::split_database_key(key).unwrap_or((0, key));
    let base = prefix.ancestors().nth(up).unwrap_or(Path::new("/"));
    (base.to_path_buf(), rel)
}

/// Rewrites the database paths of `m`, found in `kpack_dir`, as keys
/// relative to its prefix. A manifest with a `prefix_path` is honoured only
/// where the prefix really ends in that path and the root it names is
/// `root` or below it: it cannot send its files into an ancestor of its
/// prefix that is not the install root it was built for, nor above the
/// `--root`.
///
/// Every database file must also be one the fetcher may install where the
/// manifest puts it ([`rocm_kpack_pkgspec::check_fetchable`]: a built-in
/// kernel-database rule's file, above the prefix only in that rule's own
/// directory); one that is not refuses the whole manifest, as a hostile
/// archive name does.
fn database_keys(m: &mut Manifest, kpack_dir: &Path, root: &Path) -> Result<(), String> {
    let fetchable = |m: &Manifest| {
        m.database_files.iter().try_for_each(|f| {
            rocm_kpack_pkgspec::check_fetchable(m.prefix_path.as_deref(), &f.path, &f.architectures)
                .map(drop)
                .map_err(|e| {
                    format!(
                        "database file {:?}: {e}; not installing any of its files",
                        f.path
                    )
                })
        })
    };
    let Some(prefix_path) = m.prefix_path.clone() else {
        return fetchable(m);
    };
    let prefix = kpack_dir.parent().unwrap_or(Path::new("/"));
    let install_root = prefix_path
        .split('/')
        .rev()
        .try_fold(prefix, |dir, comp| {
            (dir.file_name().is_some_and(|n| n == comp)).then(|| dir.parent()).flatten()
        })
        .ok_or_else(|| {
            format!(
                "its database files are relative to the install root {} lies in, but that directory is not below a {prefix_path:?} (moved, or reached through a symlink?); not installing them",
                prefix.display()
            )
        })?;
    if !install_root.starts_with(root) {
        return Err(format!(
            "its database files are relative to {}, which is not below the root {}; not installing them",
            install_root.display(),
            root.display()
        ));
    }
    fetchable(m)?;
    for f in &mut m.database_files {
        f.path = layout::database_key(Some(&prefix_path), &f.path)
            .ok_or_else(|| format!("database file {:?} is not below {:?}", f.path, prefix_path))?;
    }
    Ok(())
}

/// Whether `kpack` is a `.kpack` directory to use. A `.kpack` that is a
/// symlink is followed only when root or this user made it: one planted by
/// another user (who owns the prefix) would steer every command, the
/// package trigger's clean-up included, to a directory of that user's
/// choosing; it is refused (a failure of the run, like a refused manifest).
fn usable_kpack_dir(kpack: &Path, refused: &mut Vec<RefusedManifest>) -> bool {
    use std::os::unix::fs::MetadataExt;
    match fs::symlink_metadata(kpack) {
        Ok(m) if m.is_dir() => true,
        Ok(m) if m.file_type().is_symlink() => {
            let me = rustix::process::geteuid().as_raw();
            if m.uid() == 0 || m.uid() == me {
                return kpack.is_dir();
            }
            refused.push(RefusedManifest {
                path: kpack.to_path_buf(),
                error: format!(
                    "is a symlink owned by uid {}, not root or this user; not following it",
                    m.uid()
                ),
            });
            false
        }
        _ => false,
    }
}

fn insert_canonical(dirs: &mut BTreeSet<PathBuf>, dir: &Path) {
    // Symlinked prefixes (/opt/rocm -> /opt/rocm-6.2) must count once.
    dirs.insert(fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()));
}

/// Adds `base/.kpack` and, `depth` levels down, `*/.kpack`. Symlinked
/// directories are not descended (no loops); hidden ones are skipped.
fn find_kpack_dirs(
    base: &Path,
    depth: u32,
    dirs: &mut BTreeSet<PathBuf>,
    refused: &mut Vec<RefusedManifest>,
) {
    let kpack = base.join(KPACK_DIR);
    if usable_kpack_dir(&kpack, refused) {
        insert_canonical(dirs, &kpack);
    }
    if depth == 0 {
        return;
    }
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if is_dir && !hidden {
            find_kpack_dirs(&entry.path(), depth - 1, dirs, refused);
        }
    }
}

/// The interpreter's site-packages directories (system and user), or none
/// when it cannot be run or another user controls it (refused before it
/// starts, `crate::python::Interpreter::trusted`; the commands that read a
/// Python environment say so themselves).
pub fn python_site_packages(python: &str) -> Vec<String> {
    let checked =
        crate::python::Interpreter::trusted(python, rocm_kpack_fs::lock::PermissionPolicy::Strict);
    let python_cmd = match checked {
        Ok(p) => p,
        Err(e @ crate::python::PythonError::Untrusted { .. }) => {
            tracing::warn!("not scanning site-packages: {e}");
            return Vec::new();
        }
        Err(e) => {
            tracing::debug!("not scanning site-packages: {e}");
            return Vec::new();
        }
    };
    let script = "import json, site, sys\n\
                  paths = list(getattr(site, 'getsitepackages', lambda: [])())\n\
                  user = getattr(site, 'getusersitepackages', lambda: None)()\n\
                  paths += [user] if isinstance(user, str) else []\n\
                  print(json.dumps(paths))";
    let out = match python_cmd.command().args(["-c", script]).output() {
        Ok(o) if o.status.success() => o.stdout,
        Ok(o) => {
            tracing::debug!(
                "{python}: exit {:?}; not scanning site-packages",
                o.status.code()
            );
            return Vec::new();
        }
        Err(e) => {
            tracing::debug!("{python}: {e}; not scanning site-packages");
            return Vec::new();
        }
    };
    serde_json::from_slice::<Vec<String>>(&out).unwrap_or_default()
}

/// Whether a code object with arch key `key` may be loaded on a device whose
/// target is `local`: the loader's own rule ([`select::may_load`]).
pub use rocm_kpack_loader::select::may_load as arch_serves;

/// One archive a component needs here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Need {
    /// Index into the manifest's `kpack_files`.
    pub index: usize,
    /// Local targets it serves.
    pub targets: Vec<String>,
    /// Its arch keys that serve them.
    pub arches: Vec<String>,
}

/// What one component needs for the local targets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Needs {
    /// Archives to have, in manifest order.
    pub archives: Vec<Need>,
    /// Kernel-database files to have, in manifest order ([`Need::index`]
    /// into `database_files`): those with an architecture the loader's rule
    /// lets a local target load ([`database_needs`]).
    pub databases: Vec<Need>,
    /// Local targets none of its archives or database files serves.
    pub uncovered: Vec<String>,
}

/// The archives of `manifest` the loader may open on a machine with
/// `targets`, and the targets it has nothing for: for each target, every
/// archive the loader's selection rule may load from for each setting the
/// process may run the GPU with ([`select::loadable`] over the manifest's
/// archives in manifest order, as the loader searches a manifest). The
/// loader falls through to a later archive for a kernel the earlier ones
/// lack, so an overlay and its base, or native and generic-ISA code, are
/// both needed.
pub fn needs(manifest: &Manifest, targets: &[TargetId]) -> Needs {
    let lists: Vec<&[String]> = manifest
        .kpack_files
        .iter()
        .map(|f| f.architectures.as_slice())
        .collect();
    let mut out = Needs::default();
    // Per target: (archive index, arch key) the loader may load.
    let mut loads = Vec::with_capacity(targets.len());
    for target in targets {
        let l = select::loadable(target, &lists);
        if l.is_empty() {
            out.uncovered.push(target.to_string());
        }
        loads.push(l);
    }
    for (index, file) in manifest.kpack_files.iter().enumerate() {
        let mut need = Need {
            index,
            targets: Vec::new(),
            arches: Vec::new(),
        };
        let mut keys: Vec<&String> = Vec::new();
        for (target, l) in targets.iter().zip(&loads) {
            let before = keys.len();
            keys.extend(l.iter().filter(|(i, _)| *i == index).map(|(_, k)| k));
            if keys.len() > before {
                need.targets.push(target.to_string());
            }
        }
        // In the manifest's order.
        for a in &file.architectures {
            if keys.contains(&a) && !need.arches.contains(a) {
                need.arches.push(a.clone());
            }
        }
        if !need.targets.is_empty() {
            out.archives.push(need);
        }
    }
    out.databases = database_needs(manifest, targets);
    // A target whose device code is only database files is covered.
    out.uncovered
        .retain(|t| !out.databases.iter().any(|d| d.targets.contains(t)));
    out
}

/// The database files of `manifest` the local `targets` may load: each
/// file with an architecture [`arch_serves`] a target, with those targets
/// and architectures.
pub fn database_needs(manifest: &Manifest, targets: &[TargetId]) -> Vec<Need> {
    let mut out = Vec::new();
    for (index, f) in manifest.database_files.iter().enumerate() {
        let mut need = Need {
            index,
            targets: Vec::new(),
            arches: Vec::new(),
        };
        for t in targets {
            let serving: Vec<&String> = f
                .architectures
                .iter()
                .filter(|a| arch_serves(t, a))
                .collect();
            if !serving.is_empty() {
                need.targets.push(t.to_string());
                for a in serving {
                    if !need.arches.contains(a) {
                        need.arches.push(a.clone());
                    }
                }
            }
        }
        if !need.targets.is_empty() {
            out.push(need);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> TargetId {
        TargetId::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn file(name: &str, arches: &[&str]) -> ManifestFile {
        ManifestFile {
            filename: name.into(),
            family: name.into(),
            architectures: arches.iter().map(|s| s.to_string()).collect(),
            size: 1,
            transport: None,
            sha256: Some([0; 32]),
        }
    }

    #[test]
    fn what_the_loader_may_probe() {
        let mi300 = t("gfx942:sramecc+");
        assert!(arch_serves(&mi300, "gfx942"));
        assert!(arch_serves(&mi300, "gfx942:sramecc+"));
        assert!(arch_serves(&mi300, "gfx942:xnack-"));
        assert!(arch_serves(&mi300, "gfx942:sramecc+:xnack+"));
        assert!(arch_serves(&mi300, "gfx9-4-generic"));
        assert!(arch_serves(
            &mi300,
            "amdgcn-amd-amdhsa--gfx9-4-generic:xnack-"
        ));
        assert!(!arch_serves(&mi300, "gfx942:sramecc-"));
        assert!(!arch_serves(&mi300, "gfx90a"));
        assert!(!arch_serves(&mi300, "gfx9-generic"));
        // A target given without sramecc may meet either setting.
        assert!(arch_serves(&t("gfx90a"), "gfx90a:sramecc-"));
        // gfx90a has no generic ISA; gfx906 has gfx9-generic.
        assert!(!arch_serves(&t("gfx90a"), "gfx9-generic"));
        assert!(arch_serves(&t("gfx906"), "gfx9-generic"));
        assert!(arch_serves(&t("gfx1151"), "gfx11-generic"));
        assert!(!arch_serves(&t("gfx1100"), "gfx1101"));
        assert!(!arch_serves(&t("gfx1100"), "not-a-target"));
    }

    #[test]
    fn needs_pick_family_and_generic_archives() {
        let m = Manifest {
            component: "rocrand".into(),
            kpack_files: vec![
                file("r_gfx90X.kpack", &["gfx900", "gfx90a", "gfx90a:xnack+"]),
                file("r_gfx110X.kpack", &["gfx1100", "gfx1101"]),
                file("r_gfx11-generic.kpack", &["gfx11-generic"]),
            ],
            database_files: Vec::new(),
            prefix_path: None,
        };
        let n = needs(&m, &[t("gfx90a:xnack-"), t("gfx1151"), t("gfx803")]);
        assert_eq!(
            n.archives,
            vec![
                Need {
                    index: 0,
                    targets: vec!["gfx90a:xnack-".into()],
                    arches: vec!["gfx90a".into(), "gfx90a:xnack+".into()],
                },
                Need {
                    index: 2,
                    targets: vec!["gfx1151".into()],
                    arches: vec!["gfx11-generic".into()],
                },
            ]
        );
        assert_eq!(n.uncovered, vec!["gfx803".to_string()]);
    }

    fn database(
        path: &str,
        family: &str,
        arches: &[&str],
    ) -> rocm_kpack_format::manifest::DatabaseFile {
        rocm_kpack_format::manifest::DatabaseFile {
            path: path.into(),
            family: family.into(),
            architectures: arches.iter().map(|s| s.to_string()).collect(),
            size: 1,
            sha256: [0; 32],
        }
    }

    /// Database files are needed by the loader's rule too, and a target
    /// whose only device code is database files is covered.
    #[test]
    fn needs_lists_database_files_and_they_cover_their_targets() {
        let m = Manifest {
            component: "miopen".into(),
            prefix_path: None,
            kpack_files: vec![file("m_gfx90a.kpack", &["gfx90a"])],
            database_files: vec![
                database("share/miopen/db/gfx90a68.kdb", "gfx90a", &["gfx90a"]),
                database(
                    "share/miopen/db/gfx1100_48.kdb",
                    "gfx110X-dgpu",
                    &["gfx1100"],
                ),
                database(
                    "share/miopen/db/gfx1030_36.kdb",
                    "gfx103X-dgpu",
                    &["gfx1030"],
                ),
            ],
        };
        let n = needs(&m, &[t("gfx1100"), t("gfx803")]);
        assert!(n.archives.is_empty());
        assert_eq!(
            n.databases,
            vec![Need {
                index: 1,
                targets: vec!["gfx1100".into()],
                arches: vec!["gfx1100".into()],
            }]
        );
        assert_eq!(n.uncovered, vec!["gfx803".to_string()]);
    }

    /// A generic ISA copied into every family it serves (the earlier family
    /// layout): the loader falls through from the native archive to every
    /// copy for a kernel the ones before lack, so each is needed.
    #[test]
    fn every_archive_the_loader_may_fall_through_to_is_needed() {
        let m = Manifest {
            component: "demo".into(),
            kpack_files: vec![
                file("d_gfx110X.kpack", &["gfx11-generic", "gfx1100", "gfx1101"]),
                file("d_gfx115X.kpack", &["gfx11-generic"]),
                file("d_gfx90X.kpack", &["gfx90a"]),
            ],
            database_files: Vec::new(),
            prefix_path: None,
        };
        let n = needs(&m, &[t("gfx1100")]);
        assert_eq!(
            n.archives,
            vec![
                Need {
                    index: 0,
                    targets: vec!["gfx1100".into()],
                    arches: vec!["gfx11-generic".into(), "gfx1100".into()],
                },
                Need {
                    index: 1,
                    targets: vec!["gfx1100".into()],
                    arches: vec!["gfx11-generic".into()],
                },
            ]
        );
        let n = needs(&m, &[t("gfx1151")]);
        assert_eq!(
            n.archives.iter().map(|a| a.index).collect::<Vec<_>>(),
            [0, 1]
        );
        assert!(n.uncovered.is_empty());
    }

    #[test]
    fn scan_finds_manifests_under_root_and_refuses_hostile_ones() {
        let root = tempfile::tempdir().expect("tempdir");
        let good = root.path().join("opt/rocm-6.4/lib/.kpack");
        let multiarch = root.path().join("usr/lib/x86_64-linux-gnu/.kpack");
        for d in [&good, &multiarch] {
            fs::create_dir_all(d).expect("mkdir");
        }
        let m = Manifest {
            component: "rocrand".into(),
            kpack_files: vec![file("rocrand_gfx90X.kpack", &["gfx90a"])],
            database_files: Vec::new(),
            prefix_path: None,
        };
        let bytes = m.to_msgpack().expect("encode");
        fs::write(good.join("rocrand.kpm"), &bytes).expect("write");
        // Same length: swap the safe name for a hostile one.
        let safe = b"rocrand_gfx90X.kpack";
        let at = bytes
            .windows(safe.len())
            .position(|w| w == safe)
            .expect("name in manifest");
        let mut evil = bytes.clone();
        evil.splice(at..at + safe.len(), b"../../../etc/x.kpack".iter().copied());
        fs::write(multiarch.join("evil.kpm"), &evil).expect("write");

        let cfg = ScanConfig {
            root: root.path().to_path_buf(),
            prefixes: vec![],
            default_prefixes: true,
            python: None,
        };
        let scan = cfg.scan();
        assert_eq!(scan.kpack_dirs.len(), 2, "{:?}", scan.kpack_dirs);
        assert_eq!(scan.manifests.len(), 1);
        assert_eq!(
            scan.manifests
                .first()
                .map(|m| m.manifest.component.as_str()),
            Some("rocrand")
        );
        assert_eq!(scan.refused.len(), 1);
        let refused = scan.refused.first().expect("refused");
        assert!(
            refused.error.contains("unsafe archive filename"),
            "{}",
            refused.error
        );
    }
}
