//! AMD's native package scheme (docs/packaging.md "AMD's multi-arch
//! packages"): packages without a `.kpm`, whose names say everything. The
//! host package `amdrocm-fft-host8.2` has one device package per target,
//! `amdrocm-fft8.2-gfx942`; the meta package `amdrocm-fft8.2` depends on
//! the host and on every device package.
//!
//! The rule is two name patterns ([`NativeScheme`]), `{base}-host{version}`
//! and `{base}{version}-{target}` by default, configurable on the command
//! line (`--native-host`, `--native-device`). Device packages are found
//! from the installed host packages: a name is never parsed into a device
//! package on its own, so a package that merely ends in `-gfx942` is left
//! alone. What a repository has is asked of apt or dnf, not guessed.

use rocm_kpack_format::target::TargetId;
use rocm_kpack_pkgspec::amd::device_target_of;
use serde::Serialize;

use super::DevicePackage;

/// The default host-package pattern.
pub const DEFAULT_HOST_PATTERN: &str = "{base}-host{version}";
/// The default device-package pattern.
pub const DEFAULT_DEVICE_PATTERN: &str = "{base}{version}-{target}";

/// A pattern that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("native package pattern {pattern:?}: {detail}")]
pub struct PatternError {
    /// The pattern.
    pub pattern: String,
    /// What is wrong.
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(String),
    Base,
    Version,
    Target,
}

fn tokenize(pattern: &str, allowed: &[&str]) -> Result<Vec<Token>, PatternError> {
    let err = |detail: String| PatternError {
        pattern: pattern.to_string(),
        detail,
    };
    let mut out = Vec::new();
    let mut rest = pattern;
    while !rest.is_empty() {
        match rest.find('{') {
            Some(0) => {
                let end = rest
                    .find('}')
                    .ok_or_else(|| err("unclosed {".to_string()))?;
                let name = &rest[1..end];
                if !allowed.contains(&name) {
                    return Err(err(format!(
                        "unknown placeholder {{{name}}} (allowed: {})",
                        allowed.join(", ")
                    )));
                }
                let token = match name {
                    "base" => Token::Base,
                    "version" => Token::Version,
                    _ => Token::Target,
                };
                if out.contains(&token) {
                    return Err(err(format!("{{{name}}} appears twice")));
                }
                out.push(token);
                rest = &rest[end + 1..];
            }
            Some(i) => {
                out.push(Token::Literal(rest[..i].to_string()));
                rest = &rest[i..];
            }
            None => {
                out.push(Token::Literal(rest.to_string()));
                rest = "";
            }
        }
    }
    for needed in allowed {
        let token = match *needed {
            "base" => Token::Base,
            "version" => Token::Version,
            _ => Token::Target,
        };
        if !out.contains(&token) {
            return Err(err(format!("{{{needed}}} is missing")));
        }
    }
    Ok(out)
}

/// A host package's parts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Host {
    /// The host package's name.
    pub name: String,
    /// `{base}` (`amdrocm-fft`).
    pub base: String,
    /// `{version}` (`8.2`).
    pub version: String,
}

/// The two patterns of AMD's native scheme.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeScheme {
    host: Vec<Token>,
    device: Vec<Token>,
}

impl Default for NativeScheme {
    fn default() -> Self {
        // The defaults are valid by construction (checked by a test).
        NativeScheme::new(DEFAULT_HOST_PATTERN, DEFAULT_DEVICE_PATTERN).unwrap_or(NativeScheme {
            host: Vec::new(),
            device: Vec::new(),
        })
    }
}

impl NativeScheme {
    /// The scheme of a host pattern (with `{base}` and `{version}`) and a
    /// device pattern (with those and `{target}`).
    pub fn new(host: &str, device: &str) -> Result<NativeScheme, PatternError> {
        Ok(NativeScheme {
            host: tokenize(host, &["base", "version"])?,
            device: tokenize(device, &["base", "version", "target"])?,
        })
    }

    /// The parts of `name` when it is a host package name.
    pub fn host_of(&self, name: &str) -> Option<Host> {
        let mut base = None;
        let mut version = None;
        if !match_tokens(&self.host, name, &mut base, &mut version) {
            return None;
        }
        Some(Host {
            name: name.to_string(),
            base: base?.to_string(),
            version: version?.to_string(),
        })
    }

    /// The device package of `host` for `target`.
    pub fn device(&self, host: &Host, target: &str) -> String {
        self.device
            .iter()
            .map(|t| match t {
                Token::Literal(l) => l.as_str(),
                Token::Base => host.base.as_str(),
                Token::Version => host.version.as_str(),
                Token::Target => target,
            })
            .collect()
    }

    /// The target of `name` when it is one of `host`'s device packages.
    pub fn device_target<'a>(&self, host: &Host, name: &'a str) -> Option<&'a str> {
        const MARK: &str = "\u{0}";
        let full = self.device(host, MARK);
        let (prefix, suffix) = full.split_once(MARK)?;
        let target = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
        (device_target_of(target) == Some(target)).then_some(target)
    }
}

/// Characters of a package name (Debian's and rpm's, both allow these).
fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '_' | '-')
}

/// Matches `text` against `tokens`, `{base}` shortest first (so in
/// `{base}{version}` the version takes every trailing digit and dot),
/// `{version}` a digit then digits and dots.
fn match_tokens<'a>(
    tokens: &[Token],
    text: &'a str,
    base: &mut Option<&'a str>,
    version: &mut Option<&'a str>,
) -> bool {
    let Some((first, rest)) = tokens.split_first() else {
        return text.is_empty();
    };
    match first {
        Token::Literal(l) => text
            .strip_prefix(l.as_str())
            .is_some_and(|t| match_tokens(rest, t, base, version)),
        Token::Base | Token::Version | Token::Target => {
            let ok = |i: usize, c: char| match first {
                Token::Version if i == 0 => c.is_ascii_digit(),
                Token::Version => c.is_ascii_digit() || c == '.',
                _ => name_char(c),
            };
            for (n, (i, c)) in text.char_indices().enumerate() {
                if !ok(n, c) {
                    break;
                }
                let end = i + c.len_utf8();
                let (value, tail) = text.split_at(end);
                if match_tokens(rest, tail, base, version) {
                    match first {
                        Token::Base => *base = Some(value),
                        Token::Version => *version = Some(value),
                        _ => {}
                    }
                    return true;
                }
            }
            false
        }
    }
}

/// An installed package, as the package database lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Installed {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Bytes it occupies installed.
    pub bytes: u64,
}

/// The device-package targets of the local targets (AMD's per-target
/// names: `gfx942:sramecc+` -> `gfx942`), each with the local targets it
/// serves, in order.
pub fn device_targets(targets: &[TargetId]) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for t in targets {
        let name = t.to_string();
        let Some(d) = device_target_of(&name) else {
            continue;
        };
        match out.iter_mut().find(|(o, _)| o == d) {
            Some((_, ts)) => ts.push(name.clone()),
            None => out.push((d.to_string(), vec![name.clone()])),
        }
    }
    out
}

/// The installed host packages of the scheme.
pub fn hosts(scheme: &NativeScheme, installed: &[Installed]) -> Vec<Host> {
    installed
        .iter()
        .filter_map(|p| scheme.host_of(&p.name))
        .collect()
}

/// The device packages the installed host packages lack for the local
/// `targets` (not yet installed), for the caller to check against its
/// repositories.
pub fn missing_devices(
    scheme: &NativeScheme,
    installed: &[Installed],
    targets: &[TargetId],
) -> Vec<DevicePackage> {
    let mut out = Vec::new();
    for host in hosts(scheme, installed) {
        for (target, serves) in device_targets(targets) {
            let name = scheme.device(&host, &target);
            if installed.iter().any(|p| p.name == name) {
                continue;
            }
            out.push(DevicePackage {
                name,
                generic: host.name.clone(),
                component: host.base.clone(),
                group: target,
                targets: serves,
            });
        }
    }
    out
}

/// The warning for a device package no configured repository has.
pub fn unavailable(dev: &DevicePackage) -> String {
    format!(
        "no configured repository has {} (device code of {} for {}); update the package index or add AMD's repository",
        dev.name,
        dev.generic,
        dev.targets.join(", ")
    )
}

/// An installed device package and its target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstalledDevice {
    /// The package.
    pub package: Installed,
    /// Its host package.
    pub host: String,
    /// The target it carries code for.
    pub target: String,
}

/// The installed device packages of the installed host packages whose
/// target is not among `keep` (device-package targets, as from
/// [`device_targets`]).
pub fn unkept_devices(
    scheme: &NativeScheme,
    installed: &[Installed],
    keep: &[String],
) -> Vec<InstalledDevice> {
    let hosts = hosts(scheme, installed);
    let mut out = Vec::new();
    for p in installed {
        for host in &hosts {
            if let Some(target) = scheme.device_target(host, &p.name) {
                if !keep.iter().any(|k| k == target) {
                    out.push(InstalledDevice {
                        package: p.clone(),
                        host: host.name.clone(),
                        target: target.to_string(),
                    });
                }
                break;
            }
        }
    }
    out
}

/// AMD's native device packages against the local targets (`status`,
/// `doctor`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct NativeCoverage {
    /// Device packages an installed host package lacks for a local target.
    pub missing: Vec<DevicePackage>,
    /// Installed device packages for no local target.
    pub unused: Vec<InstalledDevice>,
}

/// The coverage of the installed host packages for `targets`.
pub fn coverage(
    scheme: &NativeScheme,
    installed: &[Installed],
    targets: &[TargetId],
) -> NativeCoverage {
    let local: Vec<String> = device_targets(targets)
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    NativeCoverage {
        missing: missing_devices(scheme, installed, targets),
        unused: unkept_devices(scheme, installed, &local),
    }
}

/// The coverage for `targets` of the packages installed in `root`'s
/// package database (dpkg's or rpm's; none: empty).
pub fn coverage_in(
    root: &std::path::Path,
    scheme: &NativeScheme,
    targets: &[TargetId],
) -> Result<NativeCoverage, super::PmError> {
    let installed = match crate::unlisted::Database::of(root) {
        Some(crate::unlisted::Database::Dpkg(apt)) => apt.installed()?,
        Some(crate::unlisted::Database::Rpm(dnf)) => dnf.installed()?,
        None => return Ok(NativeCoverage::default()),
    };
    Ok(coverage(scheme, &installed, targets))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn installed(names: &[&str]) -> Vec<Installed> {
        names
            .iter()
            .map(|n| Installed {
                name: n.to_string(),
                version: "1".into(),
                bytes: 10,
            })
            .collect()
    }

    #[test]
    fn amd_names_round_trip_through_the_default_scheme() {
        let s = NativeScheme::default();
        assert_eq!(
            s,
            NativeScheme::new(DEFAULT_HOST_PATTERN, DEFAULT_DEVICE_PATTERN).unwrap()
        );
        let h = s.host_of("amdrocm-fft-host8.2").unwrap();
        assert_eq!(
            (h.base.as_str(), h.version.as_str()),
            ("amdrocm-fft", "8.2")
        );
        assert_eq!(s.device(&h, "gfx942"), "amdrocm-fft8.2-gfx942");
        assert_eq!(
            s.device_target(&h, "amdrocm-fft8.2-gfx1100"),
            Some("gfx1100")
        );
        // The meta package, another library's device package, a strict
        // variant and a feature suffix are not device packages of this host.
        assert_eq!(s.device_target(&h, "amdrocm-fft8.2"), None);
        assert_eq!(s.device_target(&h, "amdrocm-blas8.2-gfx942"), None);
        assert_eq!(s.device_target(&h, "amdrocm-fft8.2-gfx1250-strict"), None);
        assert_eq!(s.host_of("amdrocm-fft8.2-gfx942"), None);
        assert_eq!(s.host_of("amdrocm-fft-host"), None);
        assert_eq!(s.host_of("libc6"), None);
        // A base with dashes and digits of its own.
        let h = s.host_of("amdrocm-hip2-rt-host8.2.1").unwrap();
        assert_eq!(s.device(&h, "gfx90a"), "amdrocm-hip2-rt8.2.1-gfx90a");
    }

    #[test]
    fn patterns_are_checked_and_configurable() {
        assert!(NativeScheme::new("{base}-host", DEFAULT_DEVICE_PATTERN).is_err());
        assert!(NativeScheme::new(DEFAULT_HOST_PATTERN, "{base}{version}").is_err());
        assert!(NativeScheme::new("{base}{base}{version}", DEFAULT_DEVICE_PATTERN).is_err());
        assert!(NativeScheme::new("{base}-{arch}{version}", DEFAULT_DEVICE_PATTERN).is_err());
        let s = NativeScheme::new("{base}-runtime{version}", "{base}-{target}{version}").unwrap();
        let h = s.host_of("mylib-runtime3").unwrap();
        assert_eq!(s.device(&h, "gfx942"), "mylib-gfx9423");
        assert_eq!(s.device_target(&h, "mylib-gfx9423"), Some("gfx942"));
    }

    #[test]
    fn missing_and_unkept_device_packages() {
        let s = NativeScheme::default();
        let pkgs = installed(&[
            "amdrocm-fft-host8.2",
            "amdrocm-fft8.2",
            "amdrocm-fft8.2-gfx90a",
            "amdrocm-fft8.2-gfx942",
            "librocsparse0-gfx942",
        ]);
        let t = |s: &str| TargetId::parse(s).unwrap();
        let missing = missing_devices(&s, &pkgs, &[t("gfx1100"), t("gfx942:sramecc+")]);
        assert_eq!(
            missing.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
            ["amdrocm-fft8.2-gfx1100"]
        );
        assert_eq!(missing[0].targets, ["gfx1100"]);
        let cov = coverage(&s, &pkgs, &[t("gfx942:sramecc+")]);
        assert!(cov.missing.is_empty(), "{cov:?}");
        assert_eq!(cov.unused.len(), 1);
        assert_eq!(cov.unused[0].package.name, "amdrocm-fft8.2-gfx90a");
        let unkept = unkept_devices(&s, &pkgs, &["gfx942".to_string()]);
        assert_eq!(
            unkept
                .iter()
                .map(|d| (d.package.name.as_str(), d.target.as_str()))
                .collect::<Vec<_>>(),
            [("amdrocm-fft8.2-gfx90a", "gfx90a")]
        );
    }
}
