//! Advice printed after an error (`PROGRAM: hint: ...`, and `hint` in the
//! `--json` error object): one a command attached ([`Hint`]), else one
//! read from the error itself. A full disk names the file system that
//! filled up, where it is mounted and how much is free, so the advice is
//! about the output's device, not the input.

use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use rocm_kpack_fs::PathError;

use crate::iec_size;

/// Advice attached to an error with `anyhow::Context::context`: it shows
/// nothing in the error line (its text is empty, and
/// [`crate::error_chain`] skips empty causes), only after it as the hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hint(pub String);

impl std::fmt::Display for Hint {
    fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Ok(())
    }
}

/// The hint for `err`: a [`Hint`] anywhere in its chain, else advice for
/// an I/O error that has some (a full disk or quota). `out_option` is the
/// command's output option (`--out`), named in the advice when the command
/// has one.
pub fn hint_for(err: &anyhow::Error, out_option: Option<&str>) -> Option<String> {
    if let Some(Hint(text)) = err.downcast_ref::<Hint>() {
        return Some(text.clone());
    }
    let path_error = err
        .chain()
        .filter_map(|e| e.downcast_ref::<PathError>())
        .find(|e| is_full(&e.source));
    if let Some(e) = path_error {
        return Some(full_disk_advice(&e.path, out_option));
    }
    err.chain()
        .filter_map(|e| e.downcast_ref::<io::Error>())
        .find(|e| is_full(e))
        .map(|_| match out_option {
            Some(opt) => format!("free space on the output's file system, or choose another {opt}"),
            None => "free space on the file system being written".to_owned(),
        })
}

/// No space left, or the user's quota used up.
fn is_full(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    )
}

/// "the file system mounted at M (which holds PATH) is full: X free of Y;
/// free space there or choose another --out".
fn full_disk_advice(path: &Path, out_option: Option<&str>) -> String {
    let existing = path.ancestors().find(|p| p.symlink_metadata().is_ok());
    let place = match existing.and_then(|p| mount_point(p).map(|m| (p, m))) {
        Some((p, mount)) => {
            let free = match rustix::fs::statvfs(p) {
                Ok(s) => format!(
                    " ({} free of {})",
                    iec_size(s.f_bavail.saturating_mul(s.f_frsize)),
                    iec_size(s.f_blocks.saturating_mul(s.f_frsize))
                ),
                Err(_) => String::new(),
            };
            format!(
                "the file system mounted at {} is full{free}",
                mount.display()
            )
        }
        None => format!("the file system holding {} is full", path.display()),
    };
    match out_option {
        Some(opt) => format!("{place}: free space there, or choose another {opt}"),
        None => format!("{place}: free space there"),
    }
}

/// The deepest ancestor of `path` on another device than `path`'s parent
/// chain below it: where the file system holding `path` is mounted.
fn mount_point(path: &Path) -> Option<PathBuf> {
    let dev = path.symlink_metadata().ok()?.dev();
    let mut mount = path;
    for parent in path.ancestors().skip(1) {
        match parent.metadata() {
            Ok(m) if m.dev() == dev => mount = parent,
            _ => break,
        }
    }
    Some(mount.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attached_hint_wins_and_shows_nothing_in_the_line() {
        let err = anyhow::anyhow!("cannot read x")
            .context(Hint("pass --spec".into()))
            .context("loading the spec");
        assert_eq!(hint_for(&err, None).as_deref(), Some("pass --spec"));
        assert_eq!(crate::error_chain(&err), "loading the spec: cannot read x");
    }

    #[test]
    fn a_full_disk_names_the_mount_point_and_the_output_option() {
        let dir = std::env::temp_dir();
        let full = io::Error::from(io::ErrorKind::StorageFull);
        let err = anyhow::Error::new(PathError::new("cannot write", dir.join("x/y"), full))
            .context("input.deb");
        let hint = hint_for(&err, Some("--out")).expect("a hint");
        let mount = mount_point(&dir).expect("mounted somewhere");
        assert!(
            hint.starts_with(&format!(
                "the file system mounted at {} is full (",
                mount.display()
            )) && hint.ends_with("free space there, or choose another --out"),
            "{hint}"
        );
        // Other I/O errors get no advice.
        let denied = io::Error::from(io::ErrorKind::PermissionDenied);
        let err = anyhow::Error::new(PathError::new("cannot write", dir, denied));
        assert_eq!(hint_for(&err, Some("--out")), None);
    }
}
