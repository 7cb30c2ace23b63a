//! Starting a Python interpreter (the site-packages query of [`crate::resolve`],
//! the distribution listing and `pip install` of [`crate::pm::pip`]).
//!
//! The fetcher usually runs as root, often from a directory another user
//! owns. A plain `python3 -c "import json"` or `python3 -m pip` puts the
//! current directory first on `sys.path`, so a `json.py` or `pip.py` there
//! would run as root. Every interpreter is therefore started isolated:
//!
//! - `-I`: neither the current nor the script's directory on `sys.path`,
//!   no user site-packages, every `PYTHON*` variable ignored (a venv's
//!   interpreter stays a venv: that comes from its `pyvenv.cfg`);
//! - working directory `/`, so nothing the interpreter or a wrapper
//!   (pyenv's shims read `.python-version` from it) finds relative to
//!   it belongs to another user;
//! - the `PYTHON*` variables removed from its environment too: `-I` covers
//!   the interpreter itself, not the build backends `pip` starts for a
//!   source distribution. The rest of the environment (PATH, HOME, proxy
//!   and `PIP_*` settings, certificates) is the invoking user's choice and
//!   is kept, as pip needs it.
//!
//! And only an interpreter no other user controls is started at all
//! ([`Interpreter::trusted`]), the same rule as for a `.kpack` directory:
//! an interpreter runs every `.pth` file of its site-packages at start, so
//! a venv another user can write is that user's code running as root. The
//! interpreter file and each symlink to it, its `pyvenv.cfg`, the
//! directories of its standard library and site-packages, every `.pth`
//! file there, and every directory such a file puts on `sys.path` (what
//! `pip install -e ~user/proj` leaves: a `sitecustomize.py` there runs at
//! every start, `-I` or not) must be owned by root or this user and
//! writable by no one else; `--unsafe-permissions` skips the check. This is checked before
//! anything runs but the standard library itself (`python -I -S`, which
//! reads no `.pth` file, says where the directories are).

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use rocm_kpack_fs::lock::PermissionPolicy;
use rocm_kpack_pkgspec::pep508::MarkerEnv;
use serde::Deserialize;

/// The working directory of every interpreter started here.
const CWD: &str = "/";

/// Why an interpreter is not started.
#[derive(Debug, thiserror::Error)]
pub enum PythonError {
    /// No such program.
    #[error("no Python interpreter {0:?} (not a file, nor on PATH)")]
    NotFound(String),
    /// Another user controls part of it.
    #[error("refusing the Python interpreter {python}: {why}; anyone who can change it runs code as this user when it starts (pass --unsafe-permissions to accept it)")]
    Untrusted {
        /// The interpreter as given.
        python: String,
        /// What is wrong.
        why: String,
    },
    /// The probe failed or said something unexpected.
    #[error("{python}: cannot ask where its libraries are: {detail}")]
    Probe {
        /// The interpreter as given.
        python: String,
        /// What went wrong.
        detail: String,
    },
}

/// What `python -I -S` says about itself.
#[derive(Debug, Clone, Deserialize)]
struct Probe {
    path: Vec<String>,
    sites: Vec<String>,
    env: MarkerEnv,
}

/// Prints the standard library's directories (`sys.path` without site),
/// the site-packages directories `site` would add (a venv's, found from its
/// `pyvenv.cfg` as `site` finds them, and the base's when that file
/// includes them), and the environment markers, as `packaging` computes
/// them. `site.venv` is not called: it processes the `.pth` files (runs
/// their `import` lines) that are to be checked first.
const PROBE: &str = r#"
import json, os, platform, site, sys
def venv():
    exe_dir = os.path.dirname(os.path.abspath(sys.executable))
    prefix = os.path.dirname(exe_dir)
    for conf in (os.path.join(exe_dir, 'pyvenv.cfg'), os.path.join(prefix, 'pyvenv.cfg')):
        if os.path.isfile(conf):
            break
    else:
        return None, True
    system = False
    with open(conf, encoding='utf-8') as f:
        for line in f:
            key, eq, value = line.partition('=')
            if eq and key.strip().lower() == 'include-system-site-packages':
                system = value.strip().lower() == 'true'
    return prefix, system
prefix, system = venv()
sites = site.getsitepackages([prefix]) if prefix is not None else []
if system:
    sites += [p for p in site.getsitepackages() if p not in sites]
def impl_version(info):
    v = '{0.major}.{0.minor}.{0.micro}'.format(info)
    if info.releaselevel != 'final':
        v += info.releaselevel[0] + str(info.serial)
    return v
env = {
    'implementation_name': sys.implementation.name,
    'implementation_version': impl_version(sys.implementation.version),
    'os_name': os.name,
    'platform_machine': platform.machine(),
    'platform_release': platform.release(),
    'platform_system': platform.system(),
    'platform_version': platform.version(),
    'python_full_version': platform.python_version(),
    'platform_python_implementation': platform.python_implementation(),
    'python_version': '.'.join(platform.python_version_tuple()[:2]),
    'sys_platform': sys.platform,
}
print(json.dumps({'path': [p for p in sys.path if p], 'sites': sites, 'env': env}))
"#;

/// An interpreter that may be started ([`Interpreter::trusted`]).
#[derive(Debug, Clone)]
pub struct Interpreter {
    /// As the user named it.
    pub name: String,
    program: OsString,
    /// Its site-packages directories.
    pub sites: Vec<PathBuf>,
    /// Its environment markers.
    pub env: MarkerEnv,
}

impl Interpreter {
    /// Checks `python` (a name on PATH, or a path: a relative one is made
    /// absolute against this process's current directory, without
    /// resolving symlinks, since a venv's `bin/python` is one) and asks it,
    /// isolated and without site, where its libraries are; refuses it
    /// when another user controls any of them (module docs), unless
    /// `permissions` is [`PermissionPolicy::Unsafe`].
    pub fn trusted(
        python: &str,
        permissions: PermissionPolicy,
    ) -> Result<Interpreter, PythonError> {
        let program = locate(python).ok_or_else(|| PythonError::NotFound(python.to_string()))?;
        let untrusted = |why: String| PythonError::Untrusted {
            python: python.to_string(),
            why,
        };
        let strict = permissions.is_strict();
        if strict {
            check_chain(&program).map_err(untrusted)?;
            for cfg in venv_config(&program) {
                check_file(&cfg).map_err(untrusted)?;
            }
        }
        let mut c = bare_command(program.as_os_str());
        c.args(["-S", "-c", PROBE]);
        let out = c.output().map_err(|e| PythonError::Probe {
            python: python.to_string(),
            detail: e.to_string(),
        })?;
        if !out.status.success() {
            return Err(PythonError::Probe {
                python: python.to_string(),
                detail: format!(
                    "exit {:?}: {}",
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            });
        }
        let probe: Probe = serde_json::from_slice(&out.stdout).map_err(|e| PythonError::Probe {
            python: python.to_string(),
            detail: e.to_string(),
        })?;
        let sites: Vec<PathBuf> = probe.sites.iter().map(PathBuf::from).collect();
        if strict {
            for dir in probe
                .path
                .iter()
                .map(Path::new)
                .chain(sites.iter().map(PathBuf::as_path))
            {
                if dir.exists() {
                    check_chain(dir).map_err(untrusted)?;
                }
            }
            for dir in &sites {
                for pth in pth_files(dir) {
                    check_file(&pth).map_err(untrusted)?;
                    for added in pth_dirs(dir, &pth).map_err(untrusted)? {
                        check_chain(&added).map_err(|why| {
                            untrusted(format!(
                                "{why}, and {} puts {} on sys.path, where the interpreter looks for sitecustomize and every module it imports",
                                pth.display(),
                                added.display()
                            ))
                        })?;
                    }
                }
            }
        }
        Ok(Interpreter {
            name: python.to_string(),
            program: program.into_os_string(),
            sites,
            env: probe.env,
        })
    }

    /// A command for it with `-I` as its first argument, run from `/`
    /// without `PYTHON*` variables. Callers add `-c SCRIPT` or `-m MODULE ...`.
    pub fn command(&self) -> Command {
        bare_command(&self.program)
    }
}

fn bare_command(program: &std::ffi::OsStr) -> Command {
    let mut cmd = Command::new(program);
    cmd.arg("-I").current_dir(CWD);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PYTHON") {
            cmd.env_remove(&key);
        }
    }
    cmd
}

/// The interpreter's path: `python` made absolute (not canonical), or the
/// first executable of that name on PATH.
fn locate(python: &str) -> Option<PathBuf> {
    if python.contains('/') {
        let p = std::path::absolute(Path::new(python)).ok()?;
        return p.is_file().then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(python))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0)
        })
}

/// The `pyvenv.cfg` an interpreter reads (beside it or one level up).
fn venv_config(program: &Path) -> Vec<PathBuf> {
    let Some(dir) = program.parent() else {
        return Vec::new();
    };
    [
        dir.join("pyvenv.cfg"),
        rocm_kpack_fs::parent_dir(dir).join("pyvenv.cfg"),
    ]
    .into_iter()
    .filter(|p| p.symlink_metadata().is_ok())
    .collect()
}

/// The `.pth` files of a site-packages directory.
fn pth_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "pth"))
        .collect()
}

/// The directories a `.pth` file of `site` adds to `sys.path`, as `site`
/// reads it: each line that is neither empty, a comment, nor an `import`
/// statement (whose code is the `.pth` file's, checked with it) names a
/// directory relative to `site`, added when it exists. `pip install -e
/// ~user/proj` leaves such a line; that user's `sitecustomize.py` there
/// would run in every interpreter start, `-I` or not.
fn pth_dirs(site: &Path, pth: &Path) -> Result<Vec<PathBuf>, String> {
    // site reads a `.pth` file whole; a larger one is not ours to guess at.
    let bytes = rocm_kpack_fs::read_limited(pth, 1 << 20).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for line in String::from_utf8_lossy(&bytes).lines() {
        if line.starts_with('#') || line.starts_with("import ") || line.starts_with("import\t") {
            continue;
        }
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        let dir = site.join(line);
        if dir.exists() && !out.contains(&dir) {
            out.push(dir);
        }
    }
    Ok(out)
}

/// Owner and mode that no other user can change: owned by root or this
/// user, and (for a directory without the sticky bit, or a file) not
/// writable by group (unless root's group) or others.
fn check_owner(path: &Path, meta: &std::fs::Metadata, sticky_ok: bool) -> Result<(), String> {
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != 0 && meta.uid() != me {
        return Err(format!(
            "{} is owned by uid {}, not root or this user",
            path.display(),
            meta.uid()
        ));
    }
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    let mode = meta.mode();
    let writable = (mode & 0o020 != 0 && meta.gid() != 0) || mode & 0o002 != 0;
    if writable && !(sticky_ok && mode & 0o1000 != 0) {
        return Err(format!(
            "other users may write {} (mode {:o})",
            path.display(),
            mode & 0o7777
        ));
    }
    Ok(())
}

/// `path` and every directory above it (a sticky, world-writable one such
/// as `/tmp` is accepted two or more levels up).
fn check_ancestors(path: &Path) -> Result<(), String> {
    for (depth, p) in path.ancestors().enumerate() {
        if p.as_os_str().is_empty() {
            continue;
        }
        let meta = p
            .symlink_metadata()
            .map_err(|e| format!("{}: {e}", p.display()))?;
        check_owner(p, &meta, depth >= 2)?;
    }
    Ok(())
}

/// A file (`pyvenv.cfg`, a `.pth`): it and its directories.
fn check_file(path: &Path) -> Result<(), String> {
    check_ancestors(path)
}

/// `path`, each symlink on the way to what it names, and the directories
/// of each.
fn check_chain(path: &Path) -> Result<(), String> {
    let mut current = path.to_path_buf();
    for _ in 0..40 {
        check_ancestors(&current)?;
        let meta = current
            .symlink_metadata()
            .map_err(|e| format!("{}: {e}", current.display()))?;
        if !meta.file_type().is_symlink() {
            // The directories on the way may be symlinks too: the
            // canonical path must pass as well.
            let real = current
                .canonicalize()
                .map_err(|e| format!("{}: {e}", current.display()))?;
            if real != current {
                check_ancestors(&real)?;
            }
            return Ok(());
        }
        let target =
            std::fs::read_link(&current).map_err(|e| format!("{}: {e}", current.display()))?;
        current = rocm_kpack_fs::parent_dir(&current).join(target);
    }
    Err(format!("{}: too many symlinks", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpreters_start_isolated_from_slash() {
        let python = Interpreter::trusted("python3", PermissionPolicy::Strict)
            .unwrap_or_else(|e| panic!("{e}"));
        let cmd = python.command();
        let program = Path::new(cmd.get_program());
        assert!(program.is_absolute(), "{program:?}");
        let args: Vec<_> = cmd.get_args().collect();
        assert_eq!(args, ["-I"]);
        assert_eq!(cmd.get_current_dir(), Some(Path::new("/")));
        assert!(
            python.env.contains_key("python_version"),
            "{:?}",
            python.env
        );
        assert!(!python.sites.is_empty());
        assert!(matches!(
            Interpreter::trusted("no-such-python-here", PermissionPolicy::Strict),
            Err(PythonError::NotFound(_))
        ));
    }

    #[test]
    fn a_world_writable_directory_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let dir = tmp.path().join("open");
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
            .unwrap_or_else(|e| panic!("{e}"));
        let f = dir.join("x.pth");
        std::fs::write(&f, "").unwrap_or_else(|e| panic!("{e}"));
        let err = check_file(&f).expect_err("world-writable parent");
        assert!(err.contains("other users may write"), "{err}");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(check_file(&f), Ok(()));
    }

    #[test]
    fn pth_lines_name_the_directories_site_adds() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let site = tmp.path().join("site");
        let elsewhere = tmp.path().join("proj");
        for d in [site.join("rel"), elsewhere.clone()] {
            std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{e}"));
        }
        let pth = site.join("__editable__.proj-1.0.pth");
        std::fs::write(
            &pth,
            format!(
                "# comment\nimport os; os.getcwd()\nrel\n\n{}  \nmissing\nrel\n",
                elsewhere.display()
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(pth_dirs(&site, &pth), Ok(vec![site.join("rel"), elsewhere]));
    }

    /// The probe finds a venv's site-packages without processing its
    /// `.pth` files, whose `import` lines must not run before they are
    /// checked.
    #[test]
    fn the_probe_runs_no_pth_file() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let venv = tmp.path().join("venv");
        let made = Command::new("python3")
            .args(["-m", "venv", "--without-pip"])
            .arg(&venv)
            .status()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(made.success());
        let python = venv.join("bin/python").display().to_string();
        let site = Interpreter::trusted(&python, PermissionPolicy::Unsafe)
            .unwrap_or_else(|e| panic!("{e}"))
            .sites;
        assert_eq!(site.len(), 1, "{site:?}");
        assert!(site[0].starts_with(&venv), "{site:?}");
        let marker = tmp.path().join("pth-ran");
        std::fs::write(
            site[0].join("zz.pth"),
            format!(
                "import os; open({:?}, 'w').close()\n",
                marker.display().to_string()
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let again = Interpreter::trusted(&python, PermissionPolicy::Strict);
        assert!(again.is_ok(), "{again:?}");
        assert!(!marker.exists(), "the probe ran the .pth file");
    }
}
