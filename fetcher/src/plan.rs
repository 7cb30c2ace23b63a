//! The install plan: plain data saying, for every installed manifest, which
//! archives the local targets need and whether each is already present and
//! valid, must be fetched, or cannot be fetched, the archives this tool
//! installed that the manifest no longer lists (superseded, to remove), plus
//! the targets a component publishes no device code for. Built before any
//! network I/O; `--dry-run` prints it and stops, `--json` serializes it.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use rocm_kpack_format::target::TargetId;
use serde::Serialize;

use crate::resolve::{database_needs, needs, InstalledManifest, RefusedManifest, Scan};
use crate::state::{FileStamp, State, StateEntry};
use rocm_kpack_cli::iec_size;
use rocm_kpack_format::manifest::{ArchiveTransport, ManifestFile};
use rocm_kpack_fs::sha256_regular;

/// What to do with one needed archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// Absent: download it.
    Fetch,
    /// Present with the manifest's size and sha256: nothing to do.
    Present,
    /// Present but different from the manifest (damaged or outdated):
    /// download and replace it.
    Replace,
    /// The manifest (legacy schema) has no sha256, so a download could not
    /// be verified: not fetched.
    Unverifiable,
    /// A database file this tool may not write: another component lists
    /// the same path, or a different file it did not install is there.
    Refused,
}

impl Action {
    fn word(self) -> &'static str {
        match self {
            Action::Fetch => "fetch",
            Action::Present => "present",
            Action::Replace => "replace",
            Action::Unverifiable => "no-hash",
            Action::Refused => "refused",
        }
    }
}

/// What a planned item is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ItemKind {
    /// A `.kpack` archive in the manifest's `.kpack` directory, stored as
    /// it is.
    #[default]
    Archive,
    /// A kernel-database file at its install path below the manifest's
    /// prefix, stored zstd-encoded.
    Database,
}

/// One archive (or, in [`ComponentPlan::databases`], kernel-database file)
/// a component needs here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedArchive {
    /// Archive or database file.
    pub kind: ItemKind,
    /// File name (in the component's `.kpack` directory); for a database
    /// file its install path below the manifest's prefix.
    pub filename: String,
    /// Where it is (or will be) installed.
    pub path: PathBuf,
    /// Family from the manifest.
    pub family: String,
    /// Every arch key the manifest lists for the archive (not in
    /// `--json`, which has the keys that serve a local target, `arches`).
    #[serde(skip)]
    pub architectures: Vec<String>,
    /// Size from the manifest.
    pub size: u64,
    /// SHA-256 from the manifest, hex (`null` for legacy manifests).
    pub sha256: Option<String>,
    /// What to do.
    pub action: Action,
    /// Local targets it serves.
    pub targets: Vec<String>,
    /// Its arch keys that serve them.
    pub arches: Vec<String>,
    /// Why a present file is replaced, or why it cannot be fetched.
    pub detail: Option<String>,
    /// The transport form the manifest lists for the archive (never for a
    /// database file).
    #[serde(skip)]
    pub transport: Option<ArchiveTransport>,
}

/// What an installed archive may be to count as the manifest's `file`,
/// most likely first: when the state's `recorded` entry says it was
/// rebuilt here from a transport form and that transport is the one (of a
/// format this reader knows) the manifest lists now, the size and sha256
/// recorded for the file written; and always the manifest's own size and
/// sha256 (a package installed later may have put the published archive
/// over the rebuilt one). The one place that decides "installed and
/// current" for an archive: the plan (install, status, trigger) and
/// doctor ask it; gc and remove delete only what the state records.
pub fn expected_archive(file: &ManifestFile, recorded: Option<&StateEntry>) -> Vec<Expected> {
    let published = Expected {
        size: file.size,
        sha256: file.sha256,
        rebuilt: false,
    };
    let rebuilt = recorded.filter(|e| match (&e.rebuilt, &file.transport) {
        (Some(r), Some(ArchiveTransport::Solid { sha256, .. })) => {
            r.transport_sha256 == hex::encode(sha256)
        }
        _ => false,
    });
    match rebuilt.and_then(|e| Some((e.size, decode_sha256(&e.sha256)?))) {
        Some((size, sha256)) => vec![
            Expected {
                size,
                sha256: Some(sha256),
                rebuilt: true,
            },
            published,
        ],
        None => vec![published],
    }
}

/// A size and sha256 an installed archive may have ([`expected_archive`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 (`None`: a legacy manifest without one).
    pub sha256: Option<[u8; 32]>,
    /// The values are those of an archive rebuilt here, not the
    /// manifest's.
    pub rebuilt: bool,
}

/// 64 hex digits as bytes.
pub(crate) fn decode_sha256(hex: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(hex, &mut out).ok()?;
    Some(out)
}

impl PlannedArchive {
    /// The manifest's sha256 as bytes.
    pub fn sha256_bytes(&self) -> Option<[u8; 32]> {
        decode_sha256(self.sha256.as_deref()?)
    }

    /// "why" in words: which local target may load which arch keys.
    pub fn reason(&self) -> String {
        format!(
            "{} may load {}",
            self.targets.join(", "),
            self.arches.join(", ")
        )
    }
}

/// An archive this tool installed for a manifest that no longer lists it:
/// the package was upgraded (from family-named archives to per-processor
/// ones, or to a release without that processor). `install` removes it,
/// because a loader that expands the marker's `@GFXARCH@` pattern (AMD's
/// `librocm_kpack` never reads the `.kpm`; ours falls back to the pattern
/// when the manifest has nothing for the arch) would still open a
/// per-processor name and load code built for the old host binary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Superseded {
    /// File name (in the component's `.kpack` directory).
    pub filename: String,
    /// Where it is.
    pub path: PathBuf,
}

/// The plan for one installed manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ComponentPlan {
    /// Component name.
    pub component: String,
    /// The manifest file.
    pub manifest: PathBuf,
    /// Its `.kpack` directory.
    pub kpack_dir: PathBuf,
    /// Needed archives, in manifest order.
    pub archives: Vec<PlannedArchive>,
    /// Needed kernel-database files, in manifest order.
    pub databases: Vec<PlannedArchive>,
    /// Archives installed for an earlier version of this manifest that it
    /// no longer lists, in name order: removed by `install`.
    pub superseded: Vec<Superseded>,
    /// Local targets this component publishes no device code for.
    pub no_device_code: Vec<String>,
}

impl ComponentPlan {
    /// Archives, then database files.
    pub fn items(&self) -> impl Iterator<Item = &PlannedArchive> {
        self.archives.iter().chain(&self.databases)
    }
}

/// The whole plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstallPlan {
    /// The local targets planned for.
    pub targets: Vec<String>,
    /// One entry per installed manifest.
    pub components: Vec<ComponentPlan>,
    /// Manifests that were refused (not trusted or not readable).
    pub refused_manifests: Vec<RefusedManifest>,
}

/// Totals of a plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Archives to download (fetch + replace).
    pub to_fetch: usize,
    /// Their bytes.
    pub bytes_to_fetch: u64,
    /// Archives already present and valid.
    pub present: usize,
    /// Archives that cannot be verified and database files this tool may
    /// not write, so are not fetched.
    pub unverifiable: usize,
    /// Superseded archives to remove.
    pub superseded: usize,
    /// (component, target) pairs without device code.
    pub no_device_code: usize,
}

/// How an already-present file was judged.
fn check_present(
    path: &Path,
    size: u64,
    sha256: Option<&[u8; 32]>,
    stamp: Option<FileStamp>,
) -> (bool, Option<String>) {
    let one = Expected {
        size,
        sha256: sha256.copied(),
        rebuilt: false,
    };
    check_present_any(path, &[one], stamp)
}

/// [`check_present`] against several acceptable (size, sha256) pairs
/// (`expected`, not empty), reading the file at most once. `stamp` is that
/// of the first pair's file. The detail names the first pair.
fn check_present_any(
    path: &Path,
    expected: &[Expected],
    stamp: Option<FileStamp>,
) -> (bool, Option<String>) {
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(_) => return (false, None),
    };
    let first = expected.first();
    let sized: Vec<&Expected> = expected.iter().filter(|e| e.size == meta.len()).collect();
    if sized.is_empty() {
        return (
            false,
            Some(format!(
                "present file has {} bytes, manifest says {}",
                meta.len(),
                first.map_or(0, |e| e.size)
            )),
        );
    }
    if sized.iter().any(|e| e.sha256.is_none()) {
        return (
            true,
            Some("size matches; no sha256 in the (legacy) manifest".into()),
        );
    }
    // A file we installed and that has not changed since need not be re-read.
    if stamp.is_some_and(|s| s == FileStamp::of(&meta)) && sized.first() == first.as_ref() {
        return (true, None);
    }
    match sha256_regular(path) {
        Ok((_, actual)) if sized.iter().any(|e| e.sha256 == Some(actual)) => (true, None),
        Ok((_, actual)) => (
            false,
            Some(format!(
                "present file has sha256 {}, manifest says {}",
                hex::encode(actual),
                first
                    .and_then(|e| e.sha256)
                    .map(hex::encode)
                    .unwrap_or_default()
            )),
        ),
        Err(e) => (false, Some(format!("cannot read present file: {e}"))),
    }
}

/// The archives `state` records as installed for manifest `m` (by its file
/// name) that no manifest in `m`'s directory lists any more. Archives of a
/// component whose manifest is gone (the package was removed) are left to
/// `gc`: no host binary of it remains to load them.
pub fn superseded(scan: &Scan, m: &InstalledManifest, state: Option<&State>) -> Vec<Superseded> {
    let Some(state) = state else {
        return Vec::new();
    };
    let manifest = m.file_name();
    let listed = |name: &str| {
        scan.manifests
            .iter()
            .filter(|o| o.kpack_dir == m.kpack_dir)
            .any(|o| o.manifest.kpack_files.iter().any(|f| f.filename == name))
    };
    state
        .archives
        .iter()
        .filter(|(name, e)| e.manifest == manifest && !listed(name))
        .map(|(name, _)| Superseded {
            filename: name.clone(),
            path: m.kpack_dir.join(name),
        })
        .collect()
}

/// Every installed manifest that lists each database file, by the file's
/// path on disk (the manifest's prefix joined with its key): built once
/// from a scan, so that "who else lists this path" is one lookup whatever
/// the number of manifests and files. Keyed by the path, not the key: a
/// `.kpack` directory nested in another's prefix (`/opt/rocm/.kpack`
/// listing `lib/x.co`, `/opt/rocm/lib/.kpack` listing `x.co`) reaches the
/// same file by another key.
#[derive(Debug, Default)]
pub struct Claims {
    by_path: std::collections::HashMap<PathBuf, Vec<PathBuf>>,
}

#[cfg(test)]
thread_local! {
    /// Entries indexed plus paths looked up, for tests that check the
    /// work is linear in the number of database files.
    static CLAIM_PROBES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn probe() {
    #[cfg(test)]
    CLAIM_PROBES.with(|c| c.set(c.get() + 1));
}

impl Claims {
    /// The index of `manifests`.
    pub fn build<'a>(manifests: impl IntoIterator<Item = &'a InstalledManifest>) -> Claims {
        let mut claims = Claims::default();
        claims.add(manifests);
        claims
    }

    /// Adds `manifests` (a manifest already indexed counts once).
    pub fn add<'a>(&mut self, manifests: impl IntoIterator<Item = &'a InstalledManifest>) {
        for m in manifests {
            for f in &m.manifest.database_files {
                probe();
                let listers = self.by_path.entry(m.database_path(&f.path)).or_default();
                if !listers.contains(&m.path) {
                    listers.push(m.path.clone());
                }
            }
        }
    }

    /// The first manifest (in scan order) listing the file at `path`,
    /// other than `manifest`.
    pub fn other(&self, path: &Path, manifest: &Path) -> Option<&PathBuf> {
        probe();
        self.by_path
            .get(path)?
            .iter()
            .find(|m| m.as_path() != manifest)
    }
}

/// The database files of `m` the local `targets` may load (the loader's
/// rule, [`crate::resolve::arch_serves`], on each file's architectures), each judged like an
/// archive. A file found at its path that this tool did not install and
/// that differs is not ours to replace: it is reported, not fetched. A path
/// another installed manifest lists too (of the same prefix, or of another
/// whose paths reach it: `claims`) is refused.
fn plan_databases(
    claims: &Claims,
    m: &InstalledManifest,
    targets: &[TargetId],
    state: Option<&State>,
) -> Vec<PlannedArchive> {
    let mut out = Vec::new();
    for need in database_needs(&m.manifest, targets) {
        let Some(f) = m.manifest.database_files.get(need.index) else {
            continue;
        };
        let (need_targets, arches) = (need.targets, need.arches);
        let path = m.database_path(&f.path);
        let recorded = state.and_then(|s| s.databases.get(&f.path));
        let stamp = recorded
            .filter(|e| e.sha256 == hex::encode(f.sha256))
            .and_then(|e| e.file);
        let (mut action, mut detail) = match check_present(&path, f.size, Some(&f.sha256), stamp) {
            (true, d) => (Action::Present, d),
            (false, d) if fs::symlink_metadata(&path).is_ok() => (Action::Replace, d),
            (false, d) => (Action::Fetch, d),
        };
        if let Some(other) = claims.other(&path, &m.path) {
            action = Action::Refused;
            detail = Some(format!(
                "{} lists the same path; refusing a database file two components claim",
                other.display()
            ));
        } else if action == Action::Replace && recorded.is_none() {
            action = Action::Refused;
            detail = Some(format!(
                "{}; rocm-kpack-fetch did not install it (a package may own it), so it is not replaced",
                detail.unwrap_or_else(|| "present file differs from the manifest".into())
            ));
        }
        out.push(PlannedArchive {
            kind: ItemKind::Database,
            filename: f.path.clone(),
            path,
            family: f.family.clone(),
            architectures: f.architectures.clone(),
            size: f.size,
            sha256: Some(hex::encode(f.sha256)),
            action,
            targets: need_targets,
            arches,
            detail,
            transport: None,
        });
    }
    out
}

impl InstallPlan {
    /// Plans for `targets`. `states` holds the loaded state of each `.kpack`
    /// directory (missing entries count as empty). Reads (and may hash)
    /// present archives; no network.
    pub fn build(
        scan: &Scan,
        targets: &[TargetId],
        states: &BTreeMap<PathBuf, State>,
    ) -> InstallPlan {
        let claims = Claims::build(&scan.manifests);
        let mut components = Vec::new();
        for m in &scan.manifests {
            let n = needs(&m.manifest, targets);
            let state = states.get(&m.kpack_dir);
            let mut archives = Vec::new();
            for need in n.archives {
                let Some(file) = m.manifest.kpack_files.get(need.index) else {
                    continue;
                };
                let path = m.archive_path(file);
                let recorded = state.and_then(|s| s.archives.get(&file.filename));
                let expected = expected_archive(file, recorded);
                let stamp = recorded
                    .filter(|e| {
                        expected
                            .first()
                            .and_then(|x| x.sha256)
                            .is_some_and(|h| hex::encode(h) == e.sha256)
                    })
                    .and_then(|e| e.file);
                let (valid, detail) = check_present_any(&path, &expected, stamp);
                let action = match (valid, file.sha256.is_some(), path.exists()) {
                    (true, _, _) => Action::Present,
                    (false, false, _) => Action::Unverifiable,
                    (false, true, true) => Action::Replace,
                    (false, true, false) => Action::Fetch,
                };
                let detail = match action {
                    Action::Unverifiable => Some(
                        "the manifest (legacy schema) has no sha256; a download could not be verified".into(),
                    ),
                    _ => detail,
                };
                archives.push(PlannedArchive {
                    kind: ItemKind::Archive,
                    filename: file.filename.clone(),
                    path,
                    family: file.family.clone(),
                    architectures: file.architectures.clone(),
                    size: file.size,
                    sha256: file.sha256.map(hex::encode),
                    action,
                    targets: need.targets,
                    arches: need.arches,
                    detail,
                    transport: file.transport.clone(),
                });
            }
            let databases = plan_databases(&claims, m, targets, state);
            components.push(ComponentPlan {
                component: m.manifest.component.clone(),
                manifest: m.path.clone(),
                kpack_dir: m.kpack_dir.clone(),
                archives,
                databases,
                superseded: superseded(scan, m, state),
                no_device_code: n.uncovered,
            });
        }
        InstallPlan {
            targets: targets.iter().map(ToString::to_string).collect(),
            components,
            refused_manifests: scan.refused.clone(),
        }
    }

    /// Totals.
    pub fn summary(&self) -> Summary {
        let mut s = Summary::default();
        for c in &self.components {
            s.no_device_code += c.no_device_code.len();
            s.superseded += c.superseded.len();
            for a in c.items() {
                match a.action {
                    Action::Fetch | Action::Replace => {
                        s.to_fetch += 1;
                        s.bytes_to_fetch += a.size;
                    }
                    Action::Present => s.present += 1,
                    Action::Unverifiable | Action::Refused => s.unverifiable += 1,
                }
            }
        }
        s
    }

    /// Archives and database files to download, with their component plan.
    pub fn fetches(&self) -> impl Iterator<Item = (&ComponentPlan, &PlannedArchive)> {
        self.components.iter().flat_map(|c| {
            c.items()
                .filter(|a| matches!(a.action, Action::Fetch | Action::Replace))
                .map(move |a| (c, a))
        })
    }

    /// Warnings for the user: targets without device code, refused
    /// manifests, unverifiable archives.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for r in &self.refused_manifests {
            out.push(format!(
                "refusing manifest {}: {}",
                r.path.display(),
                r.error
            ));
        }
        for c in &self.components {
            for t in &c.no_device_code {
                out.push(format!(
                    "{} publishes no device code for {t} ({})",
                    c.component,
                    c.manifest.display()
                ));
            }
            for a in c
                .archives
                .iter()
                .filter(|a| a.action == Action::Unverifiable)
            {
                out.push(format!(
                    "{}: not fetching {}: its manifest (legacy schema) has no sha256",
                    c.component, a.filename
                ));
            }
            for a in c.databases.iter().filter(|a| a.action == Action::Refused) {
                out.push(format!(
                    "{}: not fetching {}: {}",
                    c.component,
                    a.path.display(),
                    a.detail.as_deref().unwrap_or_default()
                ));
            }
        }
        out
    }
}

impl fmt::Display for InstallPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "targets: {}", self.targets.join(", "))?;
        if self.components.is_empty() {
            writeln!(f, "no installed .kpm manifests found")?;
        }
        for c in &self.components {
            writeln!(f, "{} ({}):", c.component, c.manifest.display())?;
            if c.archives.is_empty() && c.databases.is_empty() && c.no_device_code.is_empty() {
                writeln!(f, "  nothing needed")?;
            }
            for a in c.items() {
                writeln!(
                    f,
                    "  {:<8} {}  {}  for {}",
                    a.action.word(),
                    a.filename,
                    iec_size(a.size),
                    a.reason()
                )?;
                if let Some(d) = &a.detail {
                    writeln!(f, "           ({d})")?;
                }
            }
            for a in &c.superseded {
                writeln!(
                    f,
                    "  remove   {}  (installed for an earlier {}, which no longer lists it)",
                    a.filename,
                    c.manifest
                        .file_name()
                        .map(|n| n.to_string_lossy())
                        .unwrap_or_default()
                )?;
            }
            for t in &c.no_device_code {
                writeln!(
                    f,
                    "  warning: {} publishes no device code for {t}",
                    c.component
                )?;
            }
        }
        for r in &self.refused_manifests {
            writeln!(f, "refused manifest {}: {}", r.path.display(), r.error)?;
        }
        let s = self.summary();
        write!(
            f,
            "plan: {} to fetch ({}), {} present",
            s.to_fetch,
            iec_size(s.bytes_to_fetch),
            s.present
        )?;
        if s.unverifiable > 0 {
            write!(f, ", {} unverifiable or refused", s.unverifiable)?;
        }
        if s.superseded > 0 {
            write!(f, ", {} superseded to remove", s.superseded)?;
        }
        if s.no_device_code > 0 {
            write!(
                f,
                ", {} without device code",
                rocm_kpack_cli::plural(s.no_device_code, "target", "targets")
            )?;
        }
        writeln!(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::InstalledManifest;
    use rocm_kpack_format::manifest::{Manifest, ManifestFile};
    use sha2::{Digest, Sha256};

    /// A rebuilt archive counts only while the state says so for the
    /// transport (of a format this reader knows) the manifest lists now.
    #[test]
    fn a_rebuilt_archive_is_current_only_for_its_transport() {
        let solid = |sha: u8| ArchiveTransport::Solid {
            size: 1000,
            sha256: [sha; 32],
            level: Some(19),
        };
        let file = |transport: Option<ArchiveTransport>| ManifestFile {
            filename: "a.kpack".into(),
            family: "gfx90a".into(),
            architectures: vec!["gfx90a".into()],
            size: 100,
            sha256: Some([1; 32]),
            transport,
        };
        let entry = StateEntry {
            component: "c".into(),
            manifest: "c.kpm".into(),
            family: "gfx90a".into(),
            architectures: vec!["gfx90a".into()],
            size: 120,
            sha256: hex::encode([2; 32]),
            source: None,
            installed_at: 0,
            targets: vec![],
            reason: String::new(),
            file: None,
            rebuilt: Some(crate::state::Rebuilt {
                transport_sha256: hex::encode([3; 32]),
                level: 6,
            }),
        };
        let published = Expected {
            size: 100,
            sha256: Some([1; 32]),
            rebuilt: false,
        };
        let local = Expected {
            size: 120,
            sha256: Some([2; 32]),
            rebuilt: true,
        };
        assert_eq!(
            expected_archive(&file(Some(solid(3))), Some(&entry)),
            [local, published],
            "the rebuilt file, or the published one a package put over it"
        );
        assert_eq!(expected_archive(&file(Some(solid(3))), None), [published]);
        let plain = StateEntry {
            rebuilt: None,
            ..entry.clone()
        };
        assert_eq!(
            expected_archive(&file(Some(solid(3))), Some(&plain)),
            [published]
        );
        // A new release (another transport), a format this reader does
        // not know, no transport at all: the manifest's values.
        for other in [
            Some(solid(4)),
            Some(ArchiveTransport::Unsupported { format: 2 }),
            None,
        ] {
            assert_eq!(
                expected_archive(&file(other.clone()), Some(&entry)),
                [published],
                "{other:?}"
            );
        }
    }

    /// An archive rebuilt here and later overwritten by a package with the
    /// published archive is current too (dnf's device rpm takes the file
    /// over after the trigger's fetch).
    #[test]
    fn either_the_rebuilt_or_the_published_archive_is_present() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.kpack");
        let (rebuilt, published) = (b"rebuilt here".to_vec(), b"as published, longer".to_vec());
        let expect = |bytes: &[u8], rebuilt: bool| Expected {
            size: bytes.len() as u64,
            sha256: Some(Sha256::digest(bytes).into()),
            rebuilt,
        };
        let both = [expect(&rebuilt, true), expect(&published, false)];
        for bytes in [&rebuilt, &published] {
            fs::write(&path, bytes).expect("write");
            assert!(check_present_any(&path, &both, None).0);
        }
        fs::write(&path, b"something else").expect("write");
        let (ok, detail) = check_present_any(&path, &both, None);
        assert!(!ok);
        assert!(detail.expect("detail").contains("bytes"));
        fs::write(&path, b"rebuilt herX").expect("write");
        let (ok, detail) = check_present_any(&path, &both, None);
        assert!(!ok);
        assert!(detail.expect("detail").contains("sha256"));
        // The stamp recorded for the file written here skips the read;
        // without it the bytes are read and compared.
        fs::write(&path, &published).expect("write");
        let stamp = FileStamp::of(&fs::metadata(&path).expect("meta"));
        let only_rebuilt_same_size = [Expected {
            size: published.len() as u64,
            ..expect(&rebuilt, true)
        }];
        assert!(check_present_any(&path, &only_rebuilt_same_size, Some(stamp)).0);
        assert!(!check_present_any(&path, &only_rebuilt_same_size, None).0);
    }

    #[test]
    fn present_fetch_replace_and_uncovered() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kpack = dir.path().join(".kpack");
        fs::create_dir_all(&kpack).expect("mkdir");
        let good = b"good archive bytes".to_vec();
        let file = |name: &str, arches: &[&str], bytes: &[u8]| ManifestFile {
            filename: name.into(),
            family: name.into(),
            architectures: arches.iter().map(|s| s.to_string()).collect(),
            size: bytes.len() as u64,
            sha256: Some(Sha256::digest(bytes).into()),
            transport: None,
        };
        let manifest = Manifest {
            component: "c".into(),
            kpack_files: vec![
                file("a.kpack", &["gfx90a"], &good),
                file("b.kpack", &["gfx1100"], b"bbbb"),
                file("c.kpack", &["gfx942"], b"cccc"),
                file("d.kpack", &["gfx1201"], b"dddd"),
            ],
            database_files: Vec::new(),
            prefix_path: None,
        };
        fs::write(kpack.join("a.kpack"), &good).expect("write");
        fs::write(kpack.join("b.kpack"), b"BBBB").expect("write");
        let scan = Scan {
            kpack_dirs: vec![kpack.clone()],
            manifests: vec![InstalledManifest {
                path: kpack.join("c.kpm"),
                kpack_dir: kpack.clone(),
                manifest,
            }],
            refused: vec![],
        };
        let targets: Vec<TargetId> = ["gfx90a", "gfx1100", "gfx942:sramecc+", "gfx803"]
            .iter()
            .map(|t| TargetId::parse(t).expect("target"))
            .collect();
        let plan = InstallPlan::build(&scan, &targets, &BTreeMap::new());
        let c = plan.components.first().expect("component");
        let actions: Vec<(&str, Action)> = c
            .archives
            .iter()
            .map(|a| (a.filename.as_str(), a.action))
            .collect();
        assert_eq!(
            actions,
            [
                ("a.kpack", Action::Present),
                ("b.kpack", Action::Replace),
                ("c.kpack", Action::Fetch)
            ]
        );
        let b = c.archives.get(1).expect("b");
        assert!(
            b.detail.as_deref().is_some_and(|d| d.contains("sha256")),
            "{:?}",
            b.detail
        );
        assert_eq!(c.no_device_code, ["gfx803"]);
        let s = plan.summary();
        assert_eq!(
            (s.to_fetch, s.bytes_to_fetch, s.present, s.no_device_code),
            (2, 8, 1, 1)
        );
        let text = plan.to_string();
        assert!(text.contains("fetch    c.kpack"), "{text}");
        assert!(
            text.contains("warning: c publishes no device code for gfx803"),
            "{text}"
        );
    }

    /// A package upgraded from family-named archives to per-processor ones:
    /// the family archive this tool installed for the old manifest is to
    /// be removed; one recorded for another manifest, or still listed, is
    /// not.
    #[test]
    fn archives_an_upgraded_manifest_no_longer_lists_are_superseded() {
        use crate::state::StateEntry;
        let dir = tempfile::tempdir().expect("tempdir");
        let kpack = dir.path().join(".kpack");
        fs::create_dir_all(&kpack).expect("mkdir");
        let bytes = b"per-processor".to_vec();
        let manifest = Manifest {
            component: "r".into(),
            kpack_files: vec![ManifestFile {
                filename: "r_gfx90a.kpack".into(),
                family: "gfx90X".into(),
                architectures: vec!["gfx90a:xnack-".into()],
                size: bytes.len() as u64,
                transport: None,
                sha256: Some(Sha256::digest(&bytes).into()),
            }],
            database_files: Vec::new(),
            prefix_path: None,
        };
        let entry = |manifest: &str| StateEntry {
            component: "r".into(),
            manifest: manifest.into(),
            family: "gfx90X".into(),
            architectures: vec!["gfx90a:xnack-".into()],
            size: 1,
            sha256: "00".repeat(32),
            source: None,
            installed_at: 0,
            targets: vec![],
            reason: String::new(),
            file: None,
            rebuilt: None,
        };
        let mut state = State::default();
        state
            .archives
            .insert("r_gfx90X.kpack".into(), entry("r.kpm"));
        state
            .archives
            .insert("r_gfx90a.kpack".into(), entry("r.kpm"));
        state
            .archives
            .insert("o_gfx90X.kpack".into(), entry("o.kpm"));
        let scan = Scan {
            kpack_dirs: vec![kpack.clone()],
            manifests: vec![InstalledManifest {
                path: kpack.join("r.kpm"),
                kpack_dir: kpack.clone(),
                manifest,
            }],
            refused: vec![],
        };
        let states = BTreeMap::from([(kpack.clone(), state)]);
        let plan = InstallPlan::build(&scan, &[TargetId::parse("gfx90a").expect("t")], &states);
        let c = plan.components.first().expect("component");
        assert_eq!(
            c.superseded,
            [Superseded {
                filename: "r_gfx90X.kpack".into(),
                path: kpack.join("r_gfx90X.kpack"),
            }]
        );
        assert_eq!(plan.summary().superseded, 1);
        let text = plan.to_string();
        assert!(
            text.contains("remove   r_gfx90X.kpack  (installed for an earlier r.kpm, which no longer lists it)"),
            "{text}"
        );
        assert!(text.contains("1 superseded to remove"), "{text}");
    }

    /// Two components of one prefix listing 20,000 database files each,
    /// one path in both: the shared path is refused for both, and finding
    /// the other claimant of every path is one index build and one lookup
    /// per file (linear), not a scan of the other manifests per file (the
    /// quadratic way took 8e8 comparisons here).
    #[test]
    fn claimed_paths_are_found_with_one_lookup_per_file() {
        use rocm_kpack_format::manifest::DatabaseFile;
        const N: usize = 20_000;
        let dir = tempfile::tempdir().expect("tempdir");
        let kpack = dir.path().join(".kpack");
        fs::create_dir_all(&kpack).expect("mkdir");
        let db = |path: String| DatabaseFile {
            path,
            family: "gfx90X".into(),
            architectures: vec!["gfx90a".into()],
            size: 1,
            sha256: [7; 32],
        };
        let component = |name: &str| {
            let mut files: Vec<DatabaseFile> = (0..N)
                .map(|i| db(format!("{name}/library/TensileLibrary_{i}_gfx90a.co")))
                .collect();
            files.push(db("shared/TensileLibrary_gfx90a.co".into()));
            InstalledManifest {
                path: kpack.join(format!("{name}.kpm")),
                kpack_dir: kpack.clone(),
                manifest: Manifest {
                    component: name.into(),
                    kpack_files: Vec::new(),
                    database_files: files,
                    prefix_path: None,
                },
            }
        };
        let scan = Scan {
            kpack_dirs: vec![kpack.clone()],
            manifests: vec![component("a"), component("b")],
            refused: vec![],
        };
        CLAIM_PROBES.with(|c| c.set(0));
        let plan = InstallPlan::build(
            &scan,
            &[TargetId::parse("gfx90a").expect("t")],
            &BTreeMap::new(),
        );
        let probes = CLAIM_PROBES.with(std::cell::Cell::get);
        let files = 2 * (N as u64 + 1);
        assert_eq!(probes, 2 * files, "one insert and one lookup per file");
        for c in &plan.components {
            assert_eq!(c.databases.len(), N + 1);
            let refused: Vec<&str> = c
                .databases
                .iter()
                .filter(|d| d.action == Action::Refused)
                .map(|d| d.filename.as_str())
                .collect();
            assert_eq!(
                refused,
                ["shared/TensileLibrary_gfx90a.co"],
                "{}",
                c.component
            );
        }
        assert_eq!(plan.summary().to_fetch, 2 * N);
    }

    #[test]
    fn legacy_entries_without_sha256_are_never_fetched() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kpack = dir.path().join(".kpack");
        fs::create_dir_all(&kpack).expect("mkdir");
        let legacy = |name: &str, arch: &str| ManifestFile {
            filename: name.into(),
            family: arch.into(),
            architectures: vec![arch.into()],
            transport: None,
            size: 3,
            sha256: None,
        };
        fs::write(kpack.join("old.kpack"), b"abc").expect("write");
        let scan = Scan {
            kpack_dirs: vec![kpack.clone()],
            manifests: vec![InstalledManifest {
                path: kpack.join("l.kpm"),
                kpack_dir: kpack.clone(),
                manifest: Manifest {
                    component: "l".into(),
                    kpack_files: vec![
                        legacy("old.kpack", "gfx90a"),
                        legacy("new.kpack", "gfx1100"),
                    ],
                    database_files: Vec::new(),
                    prefix_path: None,
                },
            }],
            refused: vec![],
        };
        let targets = [
            TargetId::parse("gfx90a").expect("t"),
            TargetId::parse("gfx1100").expect("t"),
        ];
        let plan = InstallPlan::build(&scan, &targets, &BTreeMap::new());
        let actions: Vec<Action> = plan
            .components
            .iter()
            .flat_map(|c| c.archives.iter().map(|a| a.action))
            .collect();
        assert_eq!(actions, [Action::Present, Action::Unverifiable]);
        assert_eq!(plan.fetches().count(), 0);
        assert!(
            plan.warnings()
                .iter()
                .any(|w| w.contains("not fetching new.kpack")),
            "{:?}",
            plan.warnings()
        );
    }
}
