//! Phases 1 and 4 of a run: the staging directory inside the output
//! directory, and publishing what was written into it.

use std::fs;
use std::path::{Path, PathBuf};

use rocm_kpack_fs::{check_replaceable, move_into_place, sync_tree};

use super::{EngineError, Result};

/// A staging directory inside the output directory; finished trees are
/// renamed into the output directory by [`Staging::publish`]. Dropping it
/// unpublished removes everything, including an output directory it created.
#[derive(Debug)]
pub struct Staging {
    dir: Option<tempfile::TempDir>,
    out: PathBuf,
    created_out: bool,
    replace: bool,
}

impl Staging {
    /// Checks `out` is usable for input `input` (not inside it), creates it
    /// if missing, and a staging directory in it.
    /// With `replace`, outputs that exist are replaced
    /// ([`move_into_place`]); without, they are refused before anything is
    /// written.
    pub fn new(input_paths: &[&Path], out: &Path, replace: bool) -> Result<Staging> {
        for input in input_paths {
            check_not_inside(input, out)?;
        }
        let created_out = !out.exists();
        fs::create_dir_all(out).map_err(|e| EngineError::io("cannot create directory", out, e))?;
        if !out.is_dir() {
            return Err(EngineError::Output {
                path: out.to_path_buf(),
                why: "exists and is not a directory".into(),
            });
        }
        let dir = tempfile::Builder::new()
            .prefix(".rocm-kpack-staging-")
            .tempdir_in(out)
            .map_err(|e| EngineError::io("cannot create a directory in", out, e))?;
        Ok(Staging {
            dir: Some(dir),
            out: out.to_path_buf(),
            created_out,
            replace,
        })
    }

    /// The staging directory.
    pub fn path(&self) -> &Path {
        self.dir.as_ref().map_or(self.out.as_path(), |d| d.path())
    }

    /// Fails if `out/name` already exists, unless outputs are replaced.
    pub fn check_free(&self, name: &str) -> Result<()> {
        check_replaceable(&self.out.join(name), self.replace).map_err(EngineError::from)
    }

    /// Moves every child of the staging directory into the output
    /// directory (all names are checked first).
    pub fn publish(mut self) -> Result<Vec<String>> {
        let staging = self.path().to_path_buf();
        let mut names = Vec::new();
        for item in
            fs::read_dir(&staging).map_err(|e| EngineError::io("cannot list", &staging, e))?
        {
            let item = item.map_err(|e| EngineError::io("cannot list", &staging, e))?;
            let name = item.file_name().to_string_lossy().into_owned();
            if !name.starts_with('.') {
                names.push(name);
            }
        }
        names.sort();
        for n in &names {
            self.check_free(n)?;
        }
        // Everything written (host binaries, archives, copies) reaches the
        // disk before any of it becomes visible under its final name.
        for n in &names {
            sync_tree(&staging.join(n))?;
        }
        for n in &names {
            move_into_place(&staging.join(n), &self.out.join(n), self.replace)?;
        }
        self.created_out = false;
        Ok(names)
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if let Some(d) = self.dir.take() {
            let _ = d.close();
        }
        if self.created_out {
            let _ = fs::remove_dir(&self.out);
        }
    }
}

/// `out` must not be `input` or inside it (judged on canonical paths; `out`
/// may not exist yet).
pub fn check_not_inside(input: &Path, out: &Path) -> Result<()> {
    let input_c = fs::canonicalize(input).map_err(|e| EngineError::Input {
        path: input.to_path_buf(),
        why: format!("cannot be read: {e}"),
    })?;
    // Canonicalize the longest existing ancestor of `out`.
    let abs = if out.is_absolute() {
        out.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| EngineError::io("cannot determine", Path::new("current directory"), e))?
            .join(out)
    };
    let mut existing = abs.as_path();
    let mut rest: Vec<&std::ffi::OsStr> = Vec::new();
    let canon = loop {
        match fs::canonicalize(existing) {
            Ok(c) => break c,
            Err(_) => {
                if let Some(name) = existing.file_name() {
                    rest.push(name);
                }
                match existing.parent() {
                    Some(p) => existing = p,
                    None => break PathBuf::from("/"),
                }
            }
        }
    };
    let mut full = canon;
    for r in rest.iter().rev() {
        full.push(r);
    }
    if full.starts_with(&input_c) {
        return Err(EngineError::Output {
            path: out.to_path_buf(),
            why: format!(
                "is inside the input {}; choose an output outside it",
                input.display()
            ),
        });
    }
    Ok(())
}
