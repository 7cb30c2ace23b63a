//! `--via apt`: the dpkg database says which package owns each installed
//! manifest; its device packages are named by pkgspec's `deb_device`
//! template and checked against apt's index (`X-Kpack-Gfx`).

use std::path::{Path, PathBuf};
use std::process::Command;

use rocm_kpack_deb822::ControlFields;
use rocm_kpack_format::target::TargetId;
use rocm_kpack_pkgspec::NameKind;

use super::native::{Installed, NativeScheme};
use super::{
    check_not_in_transaction, checked, output, passthrough, path_in_root, DevicePackage, PmError,
    PmPlan,
};
use crate::resolve::arch_serves;

/// How apt and dpkg are driven.
#[derive(Debug, Clone)]
pub struct Apt {
    /// The system root (`/`, or a throwaway root driven with apt's
    /// `Dir=` options and `dpkg --root`).
    pub root: PathBuf,
    /// Extra arguments put before the apt-get / apt-cache command.
    pub extra: Vec<String>,
    /// AMD's native scheme: installed host packages get their device
    /// packages too.
    pub native: NativeScheme,
}

impl Apt {
    /// The options that point apt and dpkg at the root (none for `/`).
    pub fn root_options(&self) -> Vec<String> {
        if self.root == Path::new("/") {
            return Vec::new();
        }
        let r = self.root.display();
        vec![
            format!("-o=Dir={r}"),
            format!("-o=Dir::State::status={r}/var/lib/dpkg/status"),
            format!("-o=DPkg::Options::=--root={r}"),
            "-o=DPkg::Options::=--force-not-root".into(),
            "-o=Debug::NoLocking=1".into(),
            "-o=APT::Sandbox::User=root".into(),
        ]
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.args(self.root_options()).args(&self.extra);
        c.env("DEBIAN_FRONTEND", "noninteractive");
        c
    }

    /// The installed package owning `path` (a path below the root), if any.
    pub fn owner(&self, path: &Path) -> Result<Option<String>, PmError> {
        let mut c = Command::new("dpkg-query");
        c.arg(format!(
            "--admindir={}",
            self.root.join("var/lib/dpkg").display()
        ))
        .arg("-S")
        .arg(path_in_root(&self.root, path));
        let o = output(&mut c)?;
        if !o.status.success() {
            return Ok(None);
        }
        Ok(parse_dpkg_s(&String::from_utf8_lossy(&o.stdout)))
    }

    /// The `X-Kpack-Gfx` targets apt's index lists for `package`:
    /// `Ok(None)` when the index does not know the package, an empty
    /// list when it has no such field.
    pub fn index_gfx(&self, package: &str) -> Result<Option<Vec<String>>, PmError> {
        let mut c = self.command("apt-cache");
        c.args(["show", "--no-all-versions", package]);
        let o = output(&mut c)?;
        if !o.status.success() {
            return Ok(None);
        }
        let text = String::from_utf8_lossy(&o.stdout);
        if text.trim().is_empty() {
            return Ok(None);
        }
        Ok(Some(parse_kpack_gfx(&text)))
    }

    /// The packages dpkg lists as installed (or half-way: unpacked,
    /// failed configuration), with their installed size.
    pub fn installed(&self) -> Result<Vec<Installed>, PmError> {
        let mut c = Command::new("dpkg-query");
        c.arg(format!(
            "--admindir={}",
            self.root.join("var/lib/dpkg").display()
        ))
        .args([
            "-W",
            "-f=${db:Status-Abbrev}\t${Package}\t${Version}\t${Installed-Size}\n",
        ]);
        Ok(parse_dpkg_installed(&checked(&mut c)?))
    }

    /// The packages `apt-get remove` of `packages` would remove, from its
    /// simulation (`-s`): those and every package that depends on them.
    pub fn simulate_remove(&self, packages: &[String]) -> Result<Vec<String>, PmError> {
        let mut c = self.command("apt-get");
        c.args(["-s", "remove"]).args(packages);
        Ok(parse_simulated_removals(&checked(&mut c)?))
    }

    /// Marks `packages` as installed by hand, so that removing the meta
    /// package that pulled them in leaves them out of `apt autoremove`.
    pub fn mark_manual(&self, packages: &[String]) -> Result<(), PmError> {
        if packages.is_empty() {
            return Ok(());
        }
        let mut c = self.command("apt-mark");
        c.arg("manual").args(packages);
        checked(&mut c).map(|_| ())
    }

    /// Runs `apt-get remove -y` for `packages` (and what depends on them).
    pub fn remove(&self, packages: &[String]) -> Result<(), PmError> {
        check_not_in_transaction("apt-get", &self.root.join("var/lib/dpkg/lock"))?;
        let mut c = self.command("apt-get");
        c.args(["remove", "-y"]).args(packages);
        passthrough(&mut c)
    }

    /// Runs `apt-get install -y` for the plan's packages.
    pub fn install(&self, plan: &PmPlan) -> Result<(), PmError> {
        check_not_in_transaction("apt-get", &self.root.join("var/lib/dpkg/lock"))?;
        let mut c = self.command("apt-get");
        c.args(["install", "-y"]).args(plan.names());
        passthrough(&mut c)
    }

    /// `dpkg-query -W` status of a package (for checks after installing).
    pub fn installed_version(&self, package: &str) -> Result<Option<String>, PmError> {
        let mut c = Command::new("dpkg-query");
        c.arg(format!(
            "--admindir={}",
            self.root.join("var/lib/dpkg").display()
        ))
        .args(["-W", "-f=${Status}\t${Version}", package]);
        let o = output(&mut c)?;
        if !o.status.success() {
            return Ok(None);
        }
        let text = String::from_utf8_lossy(&o.stdout);
        Ok(text
            .split_once('\t')
            .filter(|(s, _)| s.ends_with(" installed"))
            .map(|(_, v)| v.to_string()))
    }
}

impl super::SystemPm for Apt {
    fn tool(&self) -> &'static str {
        "apt-get"
    }
    fn device_kind(&self) -> NameKind {
        NameKind::DebDevice
    }
    fn owner_noun(&self) -> &'static str {
        "installed package"
    }
    fn owner(&self, path: &Path) -> Result<Option<String>, PmError> {
        Apt::owner(self, path)
    }
    /// A device package apt's index lists; one whose `X-Kpack-Gfx` does
    /// not name its targets still goes, with a warning.
    fn admit(
        &self,
        dev: &DevicePackage,
        generic: &str,
        warnings: &mut Vec<String>,
    ) -> Result<bool, PmError> {
        let Some(gfx) = self.index_gfx(&dev.name)? else {
            warnings.push(format!(
                "{} (device code of {generic} for {}) is not in apt's index; run apt-get update, or use file mode",
                dev.name,
                dev.targets.join(", ")
            ));
            return Ok(false);
        };
        let serves = gfx.is_empty()
            || dev.targets.iter().all(|t| {
                TargetId::parse(t).is_ok_and(|id| gfx.iter().any(|g| arch_serves(&id, g)))
            });
        if !serves {
            warnings.push(format!(
                "{} declares X-Kpack-Gfx: {} which does not list {}",
                dev.name,
                gfx.join(" "),
                dev.targets.join(", ")
            ));
        }
        Ok(true)
    }
    fn native(&self) -> &NativeScheme {
        &self.native
    }
    fn installed(&self) -> Result<Vec<Installed>, PmError> {
        Apt::installed(self)
    }
    /// Those apt's index knows (`apt-cache show`, one each).
    fn available(&self, names: &[String]) -> Result<Vec<String>, PmError> {
        let mut out = Vec::new();
        for name in names {
            if self.index_gfx(name)?.is_some() {
                out.push(name.clone());
            }
        }
        Ok(out)
    }
}

/// The package of `dpkg -S` output (`pkg[:arch][, pkg2]: /path`),
/// skipping `diversion by` lines.
pub fn parse_dpkg_s(text: &str) -> Option<String> {
    text.lines()
        .filter(|l| !l.starts_with("diversion by"))
        .find_map(|l| {
            let (pkgs, _) = l.split_once(": ")?;
            let first = pkgs.split(',').next()?.trim();
            let name = first.split(':').next()?.trim();
            (!name.is_empty()).then(|| name.to_string())
        })
}

/// `dpkg-query -W -f='${db:Status-Abbrev}\t${Package}\t${Version}\t${Installed-Size}\n'`
/// output: the packages present in any installed state (not those
/// removed with only configuration files left). Installed-Size is KiB.
pub fn parse_dpkg_installed(text: &str) -> Vec<Installed> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            let status = f.next()?;
            let name = f.next()?.trim();
            let version = f.next()?.trim();
            let kib: u64 = f.next()?.trim().parse().unwrap_or(0);
            // Second letter: the package's state (n: not installed,
            // c: configuration files only).
            let present = !matches!(status.chars().nth(1), None | Some('n' | 'c'));
            (present && !name.is_empty()).then(|| Installed {
                name: name.to_string(),
                version: version.to_string(),
                bytes: kib.saturating_mul(1024),
            })
        })
        .collect()
}

/// The packages of the `Remv <name> [<version>]` lines of `apt-get -s
/// remove` output, in order.
pub fn parse_simulated_removals(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("Remv "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(|n| n.split(':').next().unwrap_or(n).to_string())
        .collect()
}

/// The `X-Kpack-Gfx` field of the first stanza of `apt-cache show` output
/// (none when the stanza does not parse or lacks the field).
pub fn parse_kpack_gfx(text: &str) -> Vec<String> {
    ControlFields::parse(text)
        .ok()
        .and_then(|stanza| {
            stanza
                .get("X-Kpack-Gfx")
                .map(|v| v.split_whitespace().map(str::to_string).collect())
        })
        .unwrap_or_default()
}

/// Runs `apt-get update` against the root (tests and `--pm-update`).
pub fn update(apt: &Apt) -> Result<(), PmError> {
    check_not_in_transaction("apt-get", &apt.root.join("var/lib/dpkg/lock"))?;
    let mut c = apt.command("apt-get");
    c.arg("update");
    checked(&mut c).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dpkg_s_output_names_the_owner() {
        assert_eq!(
            parse_dpkg_s("librocrand1:amd64: /usr/lib/x86_64-linux-gnu/.kpack/librocrand.kpm\n")
                .as_deref(),
            Some("librocrand1")
        );
        assert_eq!(
            parse_dpkg_s("diversion by foo from: /x\nbar, baz: /x\n").as_deref(),
            Some("bar")
        );
        assert_eq!(parse_dpkg_s(""), None);
    }

    #[test]
    fn kpack_gfx_from_the_first_stanza() {
        let text = "Package: librocrand1-gfx90x\nVersion: 1\nX-Kpack-Gfx: gfx900 gfx906 gfx908 gfx90a\n\nPackage: other\nX-Kpack-Gfx: gfx1100\n";
        assert_eq!(
            parse_kpack_gfx(text),
            ["gfx900", "gfx906", "gfx908", "gfx90a"]
        );
        assert!(parse_kpack_gfx("Package: x\n").is_empty());
    }

    #[test]
    fn installed_packages_and_simulated_removals() {
        let text = "ii \tamdrocm-fft-host8.2\t8.2.0-1\t120\nrc \told\t1\t5\nii \tamdrocm-fft8.2-gfx942\t8.2.0-1\t\niU \thalf\t2\t1\n";
        let got = parse_dpkg_installed(text);
        assert_eq!(
            got.iter()
                .map(|p| (p.name.as_str(), p.bytes))
                .collect::<Vec<_>>(),
            [
                ("amdrocm-fft-host8.2", 120 * 1024),
                ("amdrocm-fft8.2-gfx942", 0),
                ("half", 1024)
            ]
        );
        let sim = "NOTE: This is only a simulation!\nRemv amdrocm-fft8.2 [8.2.0-1]\nRemv amdrocm-fft8.2-gfx90a:amd64 [8.2.0-1]\n";
        assert_eq!(
            parse_simulated_removals(sim),
            ["amdrocm-fft8.2", "amdrocm-fft8.2-gfx90a"]
        );
    }

    #[test]
    fn throwaway_root_options_only_for_other_roots() {
        let sys = Apt {
            root: "/".into(),
            extra: Vec::new(),
            native: Default::default(),
        };
        assert!(sys.root_options().is_empty());
        let r = Apt {
            root: "/tmp/r".into(),
            extra: Vec::new(),
            native: Default::default(),
        };
        let o = r.root_options();
        assert!(o.contains(&"-o=Dir=/tmp/r".to_string()));
        assert!(o.contains(&"-o=DPkg::Options::=--root=/tmp/r".to_string()));
    }
}
