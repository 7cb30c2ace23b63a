//! `--via dnf`: the rpm database says which package owns each installed
//! manifest; its device packages are named by pkgspec's `rpm_device`
//! template (they also provide `rocm-kpack(<target>)`).

use std::path::{Path, PathBuf};
use std::process::Command;

use rocm_kpack_pkgspec::NameKind;

use super::native::{Installed, NativeScheme};
use super::{
    check_not_in_transaction, checked, output, passthrough, path_in_root, PmError, PmPlan,
};

/// dnf removes the dependencies nothing needs any more along with a
/// package by default; a prune removes device packages only (the host
/// package a removed meta package pulled in stays).
const KEEP_UNUSED: &str = "--setopt=clean_requirements_on_remove=False";

/// Whether `root` has an rpm database: at the usual places, or where
/// this machine's rpm keeps it (`%_dbpath`; Debian's rpm uses
/// `~/.rpmdb`, so a dnf installroot made on Debian has it there).
pub fn has_rpm_database(root: &Path) -> bool {
    static DBPATH: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    let evaluated = DBPATH.get_or_init(|| {
        let mut c = Command::new("rpm");
        c.args(["--eval", "%{_dbpath}"]);
        let path = checked(&mut c).ok()?;
        let path = path.trim();
        path.starts_with('/').then(|| PathBuf::from(path))
    });
    ["var/lib/rpm", "usr/lib/sysimage/rpm"]
        .iter()
        .map(|d| root.join(d))
        .chain(evaluated.iter().map(|p| path_in_root_inverse(root, p)))
        .any(|d| std::fs::symlink_metadata(&d).is_ok_and(|m| m.is_dir()))
}

/// `path` (absolute, as the package database knows it) below `root`.
fn path_in_root_inverse(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

/// How dnf and rpm are driven.
#[derive(Debug, Clone)]
pub struct Dnf {
    /// The system root (`/` or an `--installroot`).
    pub root: PathBuf,
    /// Extra arguments put before dnf's command (`--repofrompath=...`).
    pub extra: Vec<String>,
    /// AMD's native scheme: installed host packages get their device
    /// packages too.
    pub native: NativeScheme,
}

impl Dnf {
    /// The options that point dnf at the root (none for `/`).
    pub fn root_options(&self) -> Vec<String> {
        if self.root == Path::new("/") {
            return Vec::new();
        }
        vec![
            format!("--installroot={}", self.root.display()),
            "--releasever=1".into(),
        ]
    }

    /// The installed package owning `path`, if any.
    pub fn owner(&self, path: &Path) -> Result<Option<String>, PmError> {
        let mut c = Command::new("rpm");
        c.arg("--root")
            .arg(&self.root)
            .args(["-qf", "--qf", "%{NAME}\n"])
            .arg(path_in_root(&self.root, path));
        let o = output(&mut c)?;
        if !o.status.success() {
            return Ok(None);
        }
        Ok(String::from_utf8_lossy(&o.stdout)
            .lines()
            .next()
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_string))
    }

    fn command(&self) -> Command {
        let mut c = Command::new("dnf");
        c.args(self.root_options()).args(&self.extra);
        c
    }

    /// The installed rpms with their installed size.
    pub fn installed(&self) -> Result<Vec<Installed>, PmError> {
        let mut c = Command::new("rpm");
        c.arg("--root").arg(&self.root).args([
            "-qa",
            "--qf",
            "%{NAME}\t%{VERSION}-%{RELEASE}\t%{SIZE}\n",
        ]);
        Ok(parse_rpm_installed(&checked(&mut c)?))
    }

    /// Which of `names` the configured repositories offer (one
    /// `dnf repoquery` for all).
    pub fn available(&self, names: &[String]) -> Result<Vec<String>, PmError> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut c = self.command();
        c.args(["-q", "repoquery", "--available", "--qf", "%{name}\n"])
            .args(names);
        let text = checked(&mut c)?;
        Ok(text
            .lines()
            .map(str::trim)
            .filter(|n| names.iter().any(|w| w == n))
            .map(str::to_string)
            .collect())
    }

    /// The packages `dnf remove` of `packages` would remove: those and
    /// every package that depends on them, from the transaction dnf shows
    /// and then declines (`--assumeno`). Unused dependencies are not
    /// removed ([`KEEP_UNUSED`]).
    pub fn simulate_remove(&self, packages: &[String]) -> Result<Vec<String>, PmError> {
        let mut c = self.command();
        c.args(["--assumeno", KEEP_UNUSED, "remove"]).args(packages);
        // dnf exits 1 after declining: judge by what it printed.
        let o = super::output(&mut c)?;
        let removed = parse_dnf_removals(&String::from_utf8_lossy(&o.stdout));
        if removed.is_empty() && !o.status.success() {
            return Err(PmError::Failed {
                command: super::describe(&c),
                status: o.status.to_string(),
                stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
            });
        }
        Ok(removed)
    }

    /// Marks `packages` as installed by the user, so that removing the
    /// meta package that pulled them in does not make them unused.
    pub fn mark_user_installed(&self, packages: &[String]) -> Result<(), PmError> {
        if packages.is_empty() {
            return Ok(());
        }
        let mut c = self.command();
        c.args(["-q", "mark", "install"]).args(packages);
        checked(&mut c).map(|_| ())
    }

    /// Runs `dnf -y remove` for `packages` (and what depends on them).
    pub fn remove(&self, packages: &[String]) -> Result<(), PmError> {
        check_not_in_transaction("dnf", &self.root.join("var/lib/rpm/.rpm.lock"))?;
        let mut c = self.command();
        c.args(["-y", KEEP_UNUSED, "remove"]).args(packages);
        passthrough(&mut c)
    }

    /// Runs `dnf install -y` for the plan's packages.
    pub fn install(&self, plan: &PmPlan) -> Result<(), PmError> {
        check_not_in_transaction("dnf", &self.root.join("var/lib/rpm/.rpm.lock"))?;
        let mut c = Command::new("dnf");
        c.arg("-y")
            .args(self.root_options())
            .args(&self.extra)
            .arg("install")
            .args(plan.names());
        passthrough(&mut c)
    }
}

impl super::SystemPm for Dnf {
    fn tool(&self) -> &'static str {
        "dnf"
    }
    fn device_kind(&self) -> NameKind {
        NameKind::RpmDevice
    }
    fn owner_noun(&self) -> &'static str {
        "installed rpm"
    }
    fn owner(&self, path: &Path) -> Result<Option<String>, PmError> {
        Dnf::owner(self, path)
    }
    fn native(&self) -> &NativeScheme {
        &self.native
    }
    fn installed(&self) -> Result<Vec<Installed>, PmError> {
        Dnf::installed(self)
    }
    fn available(&self, names: &[String]) -> Result<Vec<String>, PmError> {
        Dnf::available(self, names)
    }
}

/// `rpm -qa --qf '%{NAME}\t%{VERSION}-%{RELEASE}\t%{SIZE}\n'` output.
pub fn parse_rpm_installed(text: &str) -> Vec<Installed> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            let name = f.next()?.trim();
            let version = f.next()?.trim();
            let bytes = f.next()?.trim().parse().unwrap_or(0);
            (!name.is_empty()).then(|| Installed {
                name: name.to_string(),
                version: version.to_string(),
                bytes,
            })
        })
        .collect()
}

/// The package names of every `Removing...:` section of dnf's transaction
/// table (a name too long for its column stands alone on its line, the
/// rest of the row on the next, indented further).
pub fn parse_dnf_removals(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_removal = false;
    for line in text.lines() {
        if !line.starts_with(' ') {
            in_removal = line.starts_with("Removing") && line.trim_end().ends_with(':');
            continue;
        }
        if !in_removal || line.starts_with("  ") {
            continue;
        }
        if let Some(name) = line.split_whitespace().next() {
            if !out.iter().any(|o| o == name) {
                out.push(name.to_string());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dnf_transaction_tables_name_every_removal() {
        let text = "\
Dependencies resolved.
================================================================================
 Package                    Arch      Version         Repository          Size
================================================================================
Removing:
 amdrocm-fft8.2-gfx90a      x86_64    8.2.0-1         @commandline       10 k
Removing dependent packages:
 amdrocm-fft8.2-with-a-name-too-long-for-the-column
                            x86_64    8.2.0-1         @commandline        0  

Transaction Summary
================================================================================
Remove  2 Packages
";
        assert_eq!(
            parse_dnf_removals(text),
            [
                "amdrocm-fft8.2-gfx90a",
                "amdrocm-fft8.2-with-a-name-too-long-for-the-column"
            ]
        );
        let rpms = parse_rpm_installed("amdrocm-fft-host8.2\t8.2.0-1\t4096\n");
        assert_eq!(rpms[0].bytes, 4096);
        assert_eq!(rpms[0].version, "8.2.0-1");
    }
}
