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

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

/// The working directory of every interpreter started here.
const CWD: &str = "/";

/// A command for the interpreter `python` (a name looked up on PATH, or a
/// path: a relative one is made absolute against this process's current
/// directory, without resolving symlinks, since a venv's `bin/python` is
/// one) with `-I` as its first argument, run from `/` without `PYTHON*`
/// variables. Callers add `-c SCRIPT` or `-m MODULE ...`.
pub fn command(python: &str) -> Command {
    let program: OsString = if python.contains('/') {
        std::path::absolute(Path::new(python))
            .map(OsString::from)
            .unwrap_or_else(|_| OsString::from(python))
    } else {
        OsString::from(python)
    };
    let mut cmd = Command::new(program);
    cmd.arg("-I").current_dir(CWD);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PYTHON") {
            cmd.env_remove(&key);
        }
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_interpreters_are_made_absolute_and_names_stay_names() {
        let cmd = command("venv/bin/python");
        let program = Path::new(cmd.get_program());
        assert!(program.is_absolute(), "{program:?}");
        assert!(program.ends_with("venv/bin/python"), "{program:?}");
        assert_eq!(command("python3").get_program(), "python3");
        let args: Vec<_> = cmd.get_args().collect();
        assert_eq!(args, ["-I"]);
        assert_eq!(cmd.get_current_dir(), Some(Path::new("/")));
    }
}
