//! The grammars of package fields read from input (a deb's control file, an
//! rpm's header tags, a wheel's file name and METADATA) before they become a
//! file name, a path component or a URL path segment. Each field kind has one
//! grammar, that of the format it comes from (Debian policy 5.6.1, 5.6.7 and
//! 5.6.12, rpm's spec preamble rules, PEP 427, 440 and 508), narrowed where a
//! format is looser than a file name may be: every accepted value first
//! passes the format crate's rule for a single name
//! (`rocm_kpack_format::layout::names::plain`). Refusals are the same
//! [`NameError`] the file and path names give.

pub use rocm_kpack_format::layout::names::NameError;
use rocm_kpack_format::layout::names::{plain, refuse, starts_alnum};

/// Largest epoch dpkg accepts in a Debian version (C's `INT_MAX`).
pub const MAX_DEB_EPOCH: u64 = i32::MAX as u64;

/// Which package field a value is; selects the grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// Debian `Package` (`[a-z0-9][a-z0-9+.-]+`).
    DebPackage,
    /// Debian `Source` (same grammar as a package name).
    DebSource,
    /// Debian `Version` (`[epoch:]upstream[-revision]`).
    DebVersion,
    /// Debian `Architecture` (`amd64`, `all`, `linux-any`).
    DebArchitecture,
    /// rpm `NAME`.
    RpmName,
    /// rpm `VERSION` (no `-`).
    RpmVersion,
    /// rpm `RELEASE` (no `-`).
    RpmRelease,
    /// rpm `ARCH` (`x86_64`, `noarch`).
    RpmArch,
    /// Wheel distribution name (PEP 508 `Name`, or its escaped form).
    WheelName,
    /// Wheel version (PEP 440 characters).
    WheelVersion,
    /// One part of a wheel's compressed tag triple.
    WheelTag,
}

impl FieldKind {
    /// The field in words, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            FieldKind::DebPackage => "Debian package name",
            FieldKind::DebSource => "Debian source package name",
            FieldKind::DebVersion => "Debian version",
            FieldKind::DebArchitecture => "Debian architecture",
            FieldKind::RpmName => "rpm name",
            FieldKind::RpmVersion => "rpm version",
            FieldKind::RpmRelease => "rpm release",
            FieldKind::RpmArch => "rpm architecture",
            FieldKind::WheelName => "wheel distribution name",
            FieldKind::WheelVersion => "wheel version",
            FieldKind::WheelTag => "wheel tag",
        }
    }
}

/// Checks `value` against the grammar of `kind`.
pub fn check(kind: FieldKind, value: &str) -> Result<(), NameError> {
    let what = kind.describe();
    match kind {
        FieldKind::DebPackage | FieldKind::DebSource => {
            plain(what, value, "+.-")?;
            if value.len() < 2 || value.chars().any(|c| c.is_ascii_uppercase()) {
                return Err(refuse(what, value, "must be two or more of [a-z0-9+.-]"));
            }
            Ok(())
        }
        FieldKind::DebVersion => {
            plain(what, value, ".+~-:")?;
            let upstream = match value.split_once(':') {
                Some((epoch, rest)) => {
                    if epoch.is_empty() || !epoch.bytes().all(|b| b.is_ascii_digit()) {
                        return Err(refuse(what, value, "the epoch must be a number"));
                    }
                    // dpkg reads the epoch with strtol and refuses one
                    // above INT_MAX ("epoch in version is too big").
                    if epoch.parse::<u64>().map_or(true, |n| n > MAX_DEB_EPOCH) {
                        return Err(refuse(
                            what,
                            value,
                            format!("the epoch is above dpkg's limit {MAX_DEB_EPOCH}"),
                        ));
                    }
                    rest
                }
                None => value,
            };
            if upstream.contains(':') {
                return Err(refuse(what, value, "`:` only after the epoch"));
            }
            if !upstream.starts_with(|c: char| c.is_ascii_digit()) {
                return Err(refuse(
                    what,
                    value,
                    "the upstream version must start with a digit",
                ));
            }
            if upstream.ends_with('-') {
                return Err(refuse(what, value, "empty Debian revision"));
            }
            Ok(())
        }
        FieldKind::DebArchitecture => {
            plain(what, value, "-")?;
            if value.chars().any(|c| c.is_ascii_uppercase()) {
                return Err(refuse(what, value, "must be lowercase"));
            }
            Ok(())
        }
        FieldKind::RpmName => plain(what, value, "._+-"),
        FieldKind::RpmVersion | FieldKind::RpmRelease => {
            plain(what, value, "._+~^")?;
            starts_alnum(what, value)
        }
        FieldKind::RpmArch => plain(what, value, "_"),
        FieldKind::WheelName => {
            plain(what, value, "._-")?;
            if !value.ends_with(|c: char| c.is_ascii_alphanumeric()) {
                return Err(refuse(what, value, "must end with a letter or digit"));
            }
            Ok(())
        }
        FieldKind::WheelVersion => {
            plain(what, value, ".!+_-")?;
            starts_alnum(what, value)
        }
        FieldKind::WheelTag => plain(what, value, "._"),
    }
}

#[cfg(test)]
mod tests {
    use super::{check, FieldKind, FieldKind::*};

    #[test]
    fn fields_accept_real_ones() {
        for (kind, ok) in [
            (DebPackage, "librocrand1"),
            (DebPackage, "libstdc++6"),
            (DebPackage, "g++-12"),
            (DebVersion, "5.3.3-4"),
            (DebVersion, "1:2.3~rc1+dfsg-1.1"),
            (DebVersion, "6.2.4.60204-139~22.04"),
            (DebVersion, "2147483647:1.0-1"),
            (DebVersion, "0002147483647:1.0"),
            (DebArchitecture, "amd64"),
            (DebArchitecture, "linux-any"),
            (RpmName, "rocm-hip-libraries"),
            (RpmName, "libstdc++"),
            (RpmVersion, "6.2.0"),
            (RpmRelease, "1.el9"),
            (RpmVersion, "1.0~rc1^git1"),
            (RpmVersion, "1.0^git"),
            (RpmArch, "x86_64"),
            (RpmArch, "noarch"),
            (WheelName, "torch"),
            (WheelName, "rocm_sdk.libraries"),
            (WheelVersion, "2.5.0+rocm6.2"),
            (WheelVersion, "1!2.0.post1"),
            (WheelVersion, "1!2.0"),
            (WheelTag, "manylinux_2_28_x86_64"),
        ] {
            assert_eq!(check(kind, ok), Ok(()), "{kind:?} {ok:?}");
        }
    }

    #[test]
    fn fields_refuse_hostile_ones() {
        let long = "a".repeat(300);
        let kinds_and_values: &[(FieldKind, &[&str])] = &[
            (
                DebPackage,
                &[
                    "../x", "/etc", "a/b", "%2e%2e", "http:x", "a\0b", "a\nb", "A", "-x", ".x",
                    &long, "x", "",
                ],
            ),
            (DebSource, &["../x", "..", "foo bar"]),
            (
                DebVersion,
                &[
                    "../1",
                    "1/2",
                    "1%2F",
                    "x1",
                    "1:",
                    ":1",
                    "a:1",
                    "1\n",
                    "1-",
                    &long,
                    "2147483648:1",
                    "4294967296:1",
                    "99999999999999999999999:1",
                ],
            ),
            (
                DebArchitecture,
                &["..", "amd64/../x", "AMD64", "a%2f", "a\0"],
            ),
            (
                RpmName,
                &["..", "../x", "/abs", "a/b", "-x", "a%2e", "a\tb", &long],
            ),
            (RpmVersion, &["..", ".1", "1-2", "1/2", "~1", "1\0"]),
            (RpmRelease, &["..", "1/../../x", "1-2"]),
            (RpmArch, &["..", "x86_64/..", "x86-64", "noarch\n"]),
            (
                WheelName,
                &["..", "../x", "torch/", "torch-", "-torch", "a:b"],
            ),
            (WheelVersion, &["..", ".1", "1/2", "1%2F"]),
            (WheelTag, &["..", "py3/x", "py3-none"]),
        ];
        for (kind, bad) in kinds_and_values {
            for value in *bad {
                let err =
                    check(*kind, value).expect_err(&format!("{kind:?} {value:?} must be refused"));
                let text = err.to_string();
                assert!(
                    text.starts_with(&format!("refusing {} ", kind.describe())),
                    "{text}"
                );
                assert!(text.len() < 300, "message is bounded: {text}");
                assert!(!text.contains('\n') && !text.contains('\0'), "{text:?}");
            }
        }
    }

    /// dpkg itself on the epochs around its limit: what we accept, dpkg
    /// compares; what we refuse, dpkg refuses.
    #[test]
    fn deb_epoch_limit_is_dpkgs() {
        for (epoch, ok) in [("2147483647", true), ("2147483648", false)] {
            let version = format!("{epoch}:1.0-1");
            assert_eq!(check(DebVersion, &version).is_ok(), ok, "{version}");
            let dpkg = std::process::Command::new("dpkg")
                .args([
                    "--compare-versions",
                    &format!("{version}+kpack1"),
                    "gt",
                    &version,
                ])
                .output()
                .expect("dpkg (apt-get install dpkg)");
            assert_eq!(
                dpkg.status.success(),
                ok,
                "dpkg on {version}: {}",
                String::from_utf8_lossy(&dpkg.stderr)
            );
        }
    }
}
