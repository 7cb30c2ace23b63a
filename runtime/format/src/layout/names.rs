//! The validators of names read from input (see the `names` entry in
//! `layout.rs` for the rule every kind builds on).

use std::fmt;

/// The longest accepted single name, in bytes (`NAME_MAX`).
pub const MAX_NAME: usize = 255;

/// The longest accepted member path, in bytes (`PATH_MAX`).
pub const MAX_PATH: usize = 4096;

/// What a name is; selects the grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    /// A relative install path inside a package (`usr/lib/x.so`).
    MemberPath,
    /// A component (`librocsparse`).
    Component,
    /// An archive file name (`<component>_<unit>.kpack`).
    ArchiveFile,
    /// A manifest file name (`<component>.kpm`).
    ManifestFile,
    /// A kernel-database file's path below a manifest's prefix
    /// (`rocblas/library/TensileLibrary_gfx90a.co`).
    DatabasePath,
    /// A database file's place relative to the manifest's prefix, as
    /// the fetcher records it (`../../share/miopen/db/x.kdb`; see
    /// [`super::database_key`]).
    DatabaseKey,
}

impl NameKind {
    /// The kind in words, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            NameKind::MemberPath => "member path",
            NameKind::Component => "component name",
            NameKind::ArchiveFile => "archive file name",
            NameKind::ManifestFile => "manifest file name",
            NameKind::DatabasePath => "database path",
            NameKind::DatabaseKey => "database path relative to the prefix",
        }
    }
}

/// A refused name: what it was to be, a printable spelling and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("refusing {kind} {shown}: {reason}")]
pub struct NameError {
    /// What the name was to be, in words (`archive file name`).
    pub kind: &'static str,
    /// The name, escaped and shortened for printing.
    pub shown: String,
    /// Why it is refused.
    pub reason: String,
}

/// A name escaped (`{:?}`) and cut to 80 characters, so a hostile name
/// cannot forge or flood a message.
pub fn shown(name: &str) -> String {
    const SHOWN: usize = 80;
    if name.chars().count() <= SHOWN {
        return format!("{name:?}");
    }
    let head: String = name.chars().take(SHOWN).collect();
    format!("{head:?}... ({} bytes)", name.len())
}

/// The refusal of `name` as a `kind` (in words), because of `reason`.
pub fn refuse(kind: &'static str, name: &str, reason: impl fmt::Display) -> NameError {
    NameError {
        kind,
        shown: shown(name),
        reason: reason.to_string(),
    }
}

/// Checks what every single name must be (see the module docs), then
/// that each character is alphanumeric or in `extra`. `kind` says what
/// the name is, in words.
pub fn plain(kind: &'static str, name: &str, extra: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(refuse(kind, name, "empty"));
    }
    if name.len() > MAX_NAME {
        return Err(refuse(kind, name, format!("longer than {MAX_NAME} bytes")));
    }
    if name.contains("..") {
        return Err(refuse(kind, name, "contains `..`"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !c.is_ascii_alphanumeric() && !extra.contains(*c))
    {
        let why = match c {
            '/' | '\\' => "a path separator".to_string(),
            '\0' => "a NUL byte".to_string(),
            '%' => "a percent-encoding".to_string(),
            c if c.is_control() || c.is_whitespace() => {
                format!("the control or space character {c:?}")
            }
            c => format!("the character {c:?}"),
        };
        return Err(refuse(kind, name, format!("contains {why}")));
    }
    if name.starts_with(['.', '-']) {
        return Err(refuse(kind, name, "starts with `.` or `-`"));
    }
    Ok(())
}

/// Refuses a name that does not start with an ASCII letter or digit.
pub fn starts_alnum(kind: &'static str, name: &str) -> Result<(), NameError> {
    if name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        Ok(())
    } else {
        Err(refuse(kind, name, "must start with a letter or digit"))
    }
}

/// Whether `text` is spelled like a URL scheme (`http`, `file`,
/// `git+ssh`): joined onto a URL, `<scheme>:rest` would be absolute.
fn looks_like_scheme(text: &str) -> bool {
    text.starts_with(|c: char| c.is_ascii_alphabetic())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Checks `name` against the grammar of `kind`.
pub fn check(kind: NameKind, name: &str) -> Result<(), NameError> {
    let what = kind.describe();
    match kind {
        NameKind::MemberPath => check_member_path(name),
        NameKind::DatabasePath => {
            check_member_path(name).map_err(|e| refuse(what, name, e.reason))?;
            if name.contains('\\') {
                return Err(refuse(what, name, "contains a backslash"));
            }
            if name.split('/').any(|c| c == super::KPACK_DIR) {
                return Err(refuse(
                    what,
                    name,
                    format!("lies in a {} directory", super::KPACK_DIR),
                ));
            }
            // The archives and manifests of components live in `.kpack/`,
            // which no database path enters (above). An archive elsewhere
            // is another library's content: hip-kernel-provider ships its
            // kernels per target as `.kpack` files below hipDNN's plugin
            // engines. A manifest has no such use, and the fetcher finds
            // manifests by name, so none is a database file.
            if super::manifest_component(name.rsplit('/').next().unwrap_or(name)).is_some() {
                return Err(refuse(what, name, "names a kpack manifest"));
            }
            Ok(())
        }
        NameKind::DatabaseKey => {
            let (_, rest) = super::split_database_key(name).ok_or_else(|| {
                refuse(
                    what,
                    name,
                    format!("climbs more than {} levels", super::MAX_DATABASE_UP),
                )
            })?;
            check(NameKind::DatabasePath, rest).map_err(|e| refuse(what, name, e.reason))
        }
        NameKind::Component => {
            plain(what, name, "._+-")?;
            starts_alnum(what, name)
        }
        NameKind::ArchiveFile => {
            // Archive names carry target ids: `x_gfx90a:xnack-.kpack`.
            plain(what, name, "._+:-")?;
            starts_alnum(what, name)?;
            if !super::is_archive_path(name) {
                return Err(refuse(
                    what,
                    name,
                    format!("does not end in .{}", super::ARCHIVE_EXT),
                ));
            }
            if name
                .split_once(':')
                .is_some_and(|(head, _)| looks_like_scheme(head))
            {
                return Err(refuse(what, name, "starts like a URL scheme"));
            }
            Ok(())
        }
        NameKind::ManifestFile => {
            let component = super::manifest_component(name).ok_or_else(|| {
                refuse(
                    what,
                    name,
                    format!("does not end in .{}", super::MANIFEST_EXT),
                )
            })?;
            check(NameKind::Component, component).map_err(|e| refuse(what, name, e.reason))
        }
    }
}

/// A member path: relative, `/`-separated, every component a plain
/// name (no `.`, `..` or empty ones), no control characters, at most
/// [`MAX_PATH`] bytes. Other characters are allowed: packages install
/// arbitrary file names.
fn check_member_path(path: &str) -> Result<(), NameError> {
    let kind = NameKind::MemberPath.describe();
    if path.is_empty() {
        return Err(refuse(kind, path, "empty path"));
    }
    if path.len() > MAX_PATH {
        return Err(refuse(kind, path, format!("longer than {MAX_PATH} bytes")));
    }
    if path.starts_with('/') {
        return Err(refuse(kind, path, "absolute path"));
    }
    if path.chars().any(char::is_control) {
        return Err(refuse(kind, path, "control character in name"));
    }
    for comp in path.split('/') {
        match comp {
            "" => return Err(refuse(kind, path, "empty path component")),
            "." | ".." => return Err(refuse(kind, path, format!("`{comp}` path component"))),
            c if c.len() > MAX_NAME => {
                return Err(refuse(
                    kind,
                    path,
                    format!("a component longer than {MAX_NAME} bytes"),
                ))
            }
            _ => {}
        }
    }
    Ok(())
}
