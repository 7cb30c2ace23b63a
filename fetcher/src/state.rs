//! What rocm-kpack-fetch installed in one `.kpack` directory, and why:
//! `<prefix>/.kpack/.rocm-kpack-fetch-state.json`, rewritten atomically
//! (temp file, fsync, rename, fsync directory) after every change.
//!
//! Only archives listed here are ever removed by `remove` and `gc`; files a
//! package manager installed are never in it. The recorded inode and mtime
//! let `install` trust an unchanged archive without re-hashing it
//! (`verify` always re-hashes).
//!
//! ```json
//! {
//!   "format_version": 1,
//!   "archives": {
//!     "rocrand_gfx90X.kpack": {
//!       "component": "rocrand", "manifest": "rocrand.kpm", "family": "gfx90X",
//!       "architectures": ["gfx90a", "gfx90a:xnack+"],
//!       "size": 1234, "sha256": "<64 hex digits>",
//!       "source": "https://mirror.example/kpack/by-hash/sha256/<hex>",
//!       "installed_at": 1732200000,
//!       "targets": ["gfx90a:sramecc+"],
//!       "reason": "gfx90a:sramecc+ may load gfx90a, gfx90a:xnack+",
//!       "file": { "inode": 42, "mtime_ns": 1732200000123456789 }
//!     }
//!   },
//!   "databases": { "rocblas/library/TensileLibrary_gfx90a.co": { ... } },
//!   "created_dirs": ["rocblas", "rocblas/library"]
//! }
//! ```
//!
//! `databases` and `created_dirs` (directories made for database files,
//! removed again once empty) are written only when not empty. Both are
//! keyed by the path relative to the prefix; a file above it (a manifest
//! with a `prefix_path`) climbs with one `../` per level, as few as needed
//! (`../../share/miopen/db/gfx90a68.kdb`,
//! [`rocm_kpack_format::layout::database_key`]), checked as one
//! `DatabaseKey` name.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::{STATE_FILE, TEMP_PREFIX, TEMP_SUFFIX};
use rocm_kpack_format::layout::names::{self, NameKind};
use rocm_kpack_format::layout::MAX_STATE_FILE;
use rocm_kpack_fs::PathError;

/// The state file's format version.
pub const STATE_VERSION: u32 = 1;

/// The whole state file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    /// [`STATE_VERSION`].
    pub format_version: u32,
    /// Installed archives by file name.
    pub archives: BTreeMap<String, StateEntry>,
    /// Installed kernel-database files by install path below the prefix
    /// (the manifest's `database_files` path). Written only when there are
    /// some, so a state without them stays readable by earlier versions.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub databases: BTreeMap<String, StateEntry>,
    /// Directories below the prefix that this tool created for database
    /// files (paths like the database paths): removing a database file
    /// also removes these, deepest first, once empty; a directory not
    /// listed here (a package's, the user's) is never removed. Written only
    /// when there are some.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub created_dirs: BTreeSet<String>,
}

impl Default for State {
    fn default() -> Self {
        State {
            format_version: STATE_VERSION,
            archives: BTreeMap::new(),
            databases: BTreeMap::new(),
            created_dirs: BTreeSet::new(),
        }
    }
}

/// One archive rocm-kpack-fetch installed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateEntry {
    /// Component (manifest `component`).
    pub component: String,
    /// File name of the manifest that listed the archive.
    pub manifest: String,
    /// Family (manifest `family`).
    pub family: String,
    /// Arch keys in the archive (manifest `architectures`).
    pub architectures: Vec<String>,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256, lowercase hex.
    pub sha256: String,
    /// Masked URL it was fetched from (`null` when completed from the cache).
    pub source: Option<String>,
    /// Unix time of the install, seconds.
    pub installed_at: u64,
    /// The local targets that needed it.
    pub targets: Vec<String>,
    /// Why it was needed, in words.
    pub reason: String,
    /// Identity of the installed file when it was recorded; `None` while
    /// the install is in progress (then the file must be re-hashed).
    pub file: Option<FileStamp>,
    /// Set when the archive was rebuilt here from the store's transport
    /// form: `size` and `sha256` above are then those of the file written
    /// here (its frames compressed at this machine's level), not the
    /// manifest's. Written only when set, so a state without rebuilt
    /// archives stays readable by earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebuilt: Option<Rebuilt>,
}

/// How an archive was rebuilt from its transport form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rebuilt {
    /// SHA-256 of the transport form's decoded stream it came from,
    /// lowercase hex: the manifest's `transport.sha256` at the time.
    pub transport_sha256: String,
    /// The zstd level its code objects were compressed at.
    pub level: i32,
}

/// Whether `s` is a SHA-256 in hex (64 digits).
fn is_hex_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Inode and modification time of an installed file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileStamp {
    /// Inode number.
    pub inode: u64,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i128,
}

impl FileStamp {
    /// The stamp of a file's metadata.
    pub fn of(meta: &fs::Metadata) -> FileStamp {
        FileStamp {
            inode: meta.ino(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        }
    }
}

/// Why a state file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Reading or writing the state file failed.
    #[error(transparent)]
    Io(#[from] PathError),
    /// The file is not valid state JSON.
    #[error("{}: not a valid rocm-kpack-fetch state file: {detail}", path.display())]
    Invalid {
        /// The state file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
}

impl State {
    /// Every record: archives, then database files.
    pub fn items(&self) -> impl Iterator<Item = (crate::plan::ItemKind, &String, &StateEntry)> {
        let archives = self
            .archives
            .iter()
            .map(|(n, e)| (crate::plan::ItemKind::Archive, n, e));
        let databases = self
            .databases
            .iter()
            .map(|(n, e)| (crate::plan::ItemKind::Database, n, e));
        archives.chain(databases)
    }

    /// The state file path for a `.kpack` directory.
    pub fn path(kpack_dir: &Path) -> PathBuf {
        kpack_dir.join(STATE_FILE)
    }

    /// Loads the state of `kpack_dir`; a missing file is an empty state.
    pub fn load(kpack_dir: &Path) -> Result<State, StateError> {
        let path = Self::path(kpack_dir);
        // Never through a symlink, never a FIFO, never more than the limit:
        // another user may have planted it.
        let bytes = match rocm_kpack_fs::read_limited(&path, MAX_STATE_FILE) {
            Ok(b) => b,
            Err(e) if e.source.kind() == io::ErrorKind::NotFound => return Ok(State::default()),
            Err(e) if e.action == "refusing" => {
                let source = io::Error::new(io::ErrorKind::PermissionDenied, e.source.to_string());
                return Err(PathError::new(e.action, path, source).into());
            }
            Err(e) => return Err(e.into()),
        };
        let state: State = serde_json::from_slice(&bytes).map_err(|e| StateError::Invalid {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        if state.format_version != STATE_VERSION {
            return Err(StateError::Invalid {
                path,
                detail: format!(
                    "format_version {} (this rocm-kpack-fetch writes {STATE_VERSION})",
                    state.format_version
                ),
            });
        }
        state
            .check_names()
            .map_err(|detail| StateError::Invalid { path, detail })?;
        Ok(state)
    }

    /// Every name the state gives (archive file names, components,
    /// manifest file names) against its validator, and every digest: a
    /// state file is input like any other, and its names are deleted.
    fn check_names(&self) -> Result<(), String> {
        let lists = [
            ("archives", NameKind::ArchiveFile, &self.archives),
            ("databases", NameKind::DatabaseKey, &self.databases),
        ];
        for (list, kind, entries) in lists {
            for (name, e) in entries {
                let at = |field: &str, err: &dyn std::fmt::Display| {
                    format!("{list}[{}].{field}: {err}", names::shown(name))
                };
                names::check(kind, name).map_err(|err| at("(key)", &err))?;
                names::check(NameKind::Component, &e.component)
                    .map_err(|err| at("component", &err))?;
                names::check(NameKind::ManifestFile, &e.manifest)
                    .map_err(|err| at("manifest", &err))?;
                if !is_hex_sha256(&e.sha256) {
                    return Err(at("sha256", &"not 64 hex digits"));
                }
                if e.rebuilt
                    .as_ref()
                    .is_some_and(|r| !is_hex_sha256(&r.transport_sha256))
                {
                    return Err(at("rebuilt.transport_sha256", &"not 64 hex digits"));
                }
            }
        }
        for dir in &self.created_dirs {
            names::check(NameKind::DatabaseKey, dir)
                .map_err(|err| format!("created_dirs[{}]: {err}", names::shown(dir)))?;
        }
        Ok(())
    }

    /// Loads the state; an unreadable or invalid file is moved aside
    /// (`.corrupt` suffix) and replaced by an empty state, with a warning.
    pub fn load_or_reset(
        kpack_dir: &Path,
        warnings: &mut Vec<String>,
    ) -> Result<State, StateError> {
        match Self::load(kpack_dir) {
            Err(StateError::Invalid { path, detail }) => {
                let aside = path.with_extension("json.corrupt");
                fs::rename(&path, &aside)
                    .map_err(|source| PathError::new("cannot move aside", &path, source))?;
                warnings.push(format!(
                    "{}: {detail}; moved to {} and starting over",
                    path.display(),
                    aside.display()
                ));
                Ok(State::default())
            }
            other => other,
        }
    }

    /// Writes the state atomically.
    pub fn save(&self, kpack_dir: &Path) -> Result<(), StateError> {
        let path = Self::path(kpack_dir);
        let mut json = serde_json::to_vec_pretty(self).map_err(|e| StateError::Invalid {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        json.push(b'\n');
        // Under the fetcher's temporary name: the next run that takes the
        // directory's lock removes what a killed one left.
        let temp = rocm_kpack_fs::TempName {
            prefix: TEMP_PREFIX,
            suffix: TEMP_SUFFIX,
        };
        let mode = std::fs::Permissions::from_mode(0o644);
        rocm_kpack_fs::write_atomically_named(&path, &json, Some(mode), temp)
            .map_err(|source| PathError::new("cannot write", path, source.into()).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> StateEntry {
        StateEntry {
            component: "rocrand".into(),
            manifest: "rocrand.kpm".into(),
            family: "gfx90X".into(),
            architectures: vec!["gfx90a".into()],
            size: 10,
            sha256: "00".repeat(32),
            source: Some("https://m.example/x".into()),
            installed_at: 1,
            targets: vec!["gfx90a".into()],
            reason: "gfx90a may load gfx90a".into(),
            file: Some(FileStamp {
                inode: 3,
                mtime_ns: 4,
            }),
            rebuilt: None,
        }
    }

    #[test]
    fn round_trips_and_rejects_junk() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(State::load(dir.path()).expect("load"), State::default());
        let mut s = State::default();
        s.archives.insert("rocrand_gfx90X.kpack".into(), entry());
        s.save(dir.path()).expect("save");
        assert_eq!(State::load(dir.path()).expect("load"), s);
        let text = fs::read_to_string(State::path(dir.path())).expect("read");
        assert!(
            !text.contains("rebuilt"),
            "no key for archives not rebuilt (earlier versions refuse unknown keys): {text}"
        );
        let rebuilt = StateEntry {
            rebuilt: Some(Rebuilt {
                transport_sha256: "ab".repeat(32),
                level: 6,
            }),
            ..entry()
        };
        s.archives.insert("rocrand_gfx110X.kpack".into(), rebuilt);
        s.save(dir.path()).expect("save");
        assert_eq!(State::load(dir.path()).expect("load"), s);

        for (key, field, value) in [
            ("../../etc/passwd.kpack", "component", "rocrand"),
            ("/etc/x.kpack", "component", "rocrand"),
            ("http:host", "component", "rocrand"),
            ("x%2F..kpack", "component", "rocrand"),
            ("ok.kpack", "component", "../x"),
            ("ok.kpack", "manifest", "../../x.kpm"),
            ("ok.kpack", "manifest", "x\nkpm"),
            ("ok.kpack", "sha256", "zz"),
            ("ok.kpack", "rebuilt.transport_sha256", "zz"),
        ] {
            let mut bad = State::default();
            let mut e = entry();
            match field {
                "component" => e.component = value.into(),
                "manifest" => e.manifest = value.into(),
                "sha256" => e.sha256 = value.into(),
                _ => {
                    e.rebuilt = Some(Rebuilt {
                        transport_sha256: value.into(),
                        level: 6,
                    })
                }
            }
            bad.archives.insert(key.into(), e);
            fs::write(
                State::path(dir.path()),
                serde_json::to_vec(&bad).expect("json"),
            )
            .expect("write");
            let err = State::load(dir.path()).expect_err(key);
            assert!(matches!(err, StateError::Invalid { .. }), "{err}");
            assert!(err.to_string().contains("archives["), "{err}");
        }
        let link = dir.path().join("elsewhere.json");
        fs::write(&link, serde_json::to_vec(&s).expect("json")).expect("write");
        fs::remove_file(State::path(dir.path())).expect("rm");
        std::os::unix::fs::symlink(&link, State::path(dir.path())).expect("symlink");
        assert!(
            matches!(State::load(dir.path()), Err(StateError::Io(_))),
            "symlinked state is not followed"
        );
        fs::remove_file(State::path(dir.path())).expect("rm");

        fs::write(
            State::path(dir.path()),
            b"{\"format_version\": 1, \"archives\": 3}",
        )
        .expect("write");
        assert!(matches!(
            State::load(dir.path()),
            Err(StateError::Invalid { .. })
        ));
        let mut warnings = Vec::new();
        let reset = State::load_or_reset(dir.path(), &mut warnings).expect("reset");
        assert_eq!(reset, State::default());
        assert_eq!(warnings.len(), 1);
        assert!(dir
            .path()
            .join(".rocm-kpack-fetch-state.json.corrupt")
            .exists());
    }
}
