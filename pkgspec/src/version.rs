//! The version suffix that makes a split package newer than the fat
//! package it came from (docs/packaging.md "Versions").
//!
//! A split package copying the fat package's version exactly ties with it:
//! with the distribution's repository and ours both configured, apt, dnf
//! and pip then keep (or pick) the distribution's fat package. Each
//! ecosystem has its own way to say "the same upstream release, rebuilt
//! downstream", and that is what the suffix uses:
//! - deb: `5.3.3-4` -> `5.3.3-4+kpack1`, the way binNMUs (`+b1`) and
//!   backports (`~bpo12+1`... after `+`) extend a version: `+` sorts after
//!   the end of the string, so the result is newer;
//! - rpm: the release `4` -> `4.kpack1` (a further release segment is
//!   newer, as a dist tag `4.fc40` is);
//! - wheels: the PEP 440 local version `1.0` -> `1.0+kpack1` (a local
//!   version sorts above its public version and `==1.0` still matches it);
//!   a version that already has a local label extends it:
//!   `2.1.0+cu121` -> `2.1.0+cu121.kpack1`.

use crate::fields::{self, FieldKind};
use serde::{Deserialize, Serialize};

/// The built-in suffix.
pub const DEFAULT_SUFFIX: &str = "kpack1";

/// The longest suffix accepted.
pub const MAX_SUFFIX: usize = 32;

/// `[version]` of a spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Versioning {
    /// Appended to every split package's version (see the module docs);
    /// empty keeps the input's version exactly (the split packages then tie
    /// with the fat ones and package managers keep the fat ones).
    pub suffix: String,
}

impl Default for Versioning {
    fn default() -> Self {
        Versioning {
            suffix: DEFAULT_SUFFIX.into(),
        }
    }
}

/// A suffix is empty or dot-separated segments of lowercase ASCII letters
/// and digits, the first starting with a letter (`kpack1`, `kpack.2`):
/// valid in a Debian revision, an rpm release and a PEP 440 local label
/// alike, and unchanged by PEP 440 normalization.
pub fn check_suffix(suffix: &str) -> Result<(), String> {
    if suffix.is_empty() {
        return Ok(());
    }
    let segments_ok = suffix.split('.').all(|s| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
    });
    if !segments_ok
        || !suffix.starts_with(|c: char| c.is_ascii_lowercase())
        || suffix.len() > MAX_SUFFIX
    {
        return Err(format!(
            "version.suffix {suffix:?} must be lowercase letters and digits in `.`-separated segments, \
             starting with a letter, at most {MAX_SUFFIX} bytes (e.g. \"kpack1\"), or \"\" for none"
        ));
    }
    Ok(())
}

impl Versioning {
    /// Checks the suffix ([`check_suffix`]).
    pub fn check(&self) -> Result<(), String> {
        check_suffix(&self.suffix)
    }

    /// The Debian version of a split package of a deb at `version`
    /// (`[epoch:]upstream[-revision]`): `+<suffix>` appended; the epoch
    /// stays. A version that already ends in the suffix is refused (the
    /// input looks like a package we split).
    pub fn deb(&self, version: &str) -> Result<String, String> {
        check_name(FieldKind::DebVersion, version)?;
        let out = self.append(version, '+')?;
        check_name(FieldKind::DebVersion, &out)?;
        Ok(out)
    }

    /// The rpm release of a split package whose input release is
    /// `release`: `.<suffix>` appended.
    pub fn rpm_release(&self, release: &str) -> Result<String, String> {
        check_name(FieldKind::RpmRelease, release)?;
        let out = self.append(release, '.')?;
        check_name(FieldKind::RpmRelease, &out)?;
        Ok(out)
    }

    /// The PEP 440 version of a split wheel of a wheel at `version`:
    /// `+<suffix>`, or `.<suffix>` after an existing local label.
    pub fn wheel(&self, version: &str) -> Result<String, String> {
        check_name(FieldKind::WheelVersion, version)?;
        let sep = match version.split_once('+') {
            None => '+',
            Some((public, local)) => {
                let local_ok = !public.is_empty()
                    && local
                        .split(['.', '-', '_'])
                        .all(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric()));
                if !local_ok {
                    return Err(format!(
                        "version {version:?}: a PEP 440 local label is letters and digits separated by `.`"
                    ));
                }
                '.'
            }
        };
        // `1.0+kpack1` was split already though its tail is `+kpack1`,
        // not the `.kpack1` a second split would add.
        self.refuse_split(version, '+')?;
        let out = self.append(version, sep)?;
        check_name(FieldKind::WheelVersion, &out)?;
        Ok(out)
    }

    fn append(&self, version: &str, sep: char) -> Result<String, String> {
        if self.suffix.is_empty() {
            return Ok(version.to_string());
        }
        self.refuse_split(version, sep)?;
        Ok(format!("{version}{sep}{}", self.suffix))
    }

    /// Refuses a `version` ending in `<sep><suffix>`: the input looks like
    /// a package rocm-kpack already split.
    fn refuse_split(&self, version: &str, sep: char) -> Result<(), String> {
        let tail = format!("{sep}{}", self.suffix);
        if !self.suffix.is_empty() && version.ends_with(&tail) {
            return Err(format!(
                "version {version:?} already ends in {tail:?}: the input looks like a package \
                 rocm-kpack already split; split the distribution's package, or set \
                 [version] suffix = \"\" in the spec to keep the version as it is"
            ));
        }
        Ok(())
    }
}

/// `value` checked against the grammar of its field ([`crate::fields`]),
/// the one every package field read from input passes too.
fn check_name(kind: FieldKind, value: &str) -> Result<(), String> {
    fields::check(kind, value).map_err(|e| e.to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn suffixes() {
        let v = Versioning::default();
        assert_eq!(v.deb("5.3.3-4").unwrap(), "5.3.3-4+kpack1");
        assert_eq!(v.deb("1:2.0-3").unwrap(), "1:2.0-3+kpack1");
        assert_eq!(v.deb("5.3.3-4+b1").unwrap(), "5.3.3-4+b1+kpack1");
        assert_eq!(v.deb("1.0").unwrap(), "1.0+kpack1");
        assert_eq!(
            v.deb("6.4~rc1-1~bpo12+1").unwrap(),
            "6.4~rc1-1~bpo12+1+kpack1"
        );
        assert!(v.deb("5.3.3-4+kpack1").unwrap_err().contains("already"));
        assert!(v.deb("x1.0-1").unwrap_err().contains("digit"));
        assert!(v.deb("a:1.0-1").unwrap_err().contains("epoch"));
        assert!(v.deb("1.0-").unwrap_err().contains("revision"));
        assert!(v.deb("1.0-1_2").unwrap_err().contains("'_'"));
        // The suffixed version must still fit the grammar's length.
        assert!(v
            .deb(&format!("1.{}", "0".repeat(250)))
            .unwrap_err()
            .contains("longer"));
        assert!(v.rpm_release("4-1").is_err());
        assert_eq!(v.rpm_release("4").unwrap(), "4.kpack1");
        assert_eq!(v.rpm_release("4.fc40").unwrap(), "4.fc40.kpack1");
        assert_eq!(v.wheel("1.0").unwrap(), "1.0+kpack1");
        assert_eq!(v.wheel("2.1.0+cu121").unwrap(), "2.1.0+cu121.kpack1");
        assert!(v.wheel("2.1.0+").is_err());
        assert!(v.wheel("1.0+a+b").is_err());
        assert!(v.wheel("1.0/x").is_err());
        assert_eq!(v.wheel("1!2.0").unwrap(), "1!2.0+kpack1");
        assert!(v.wheel("1.0+kpack1").unwrap_err().contains("already"));
        assert!(v.wheel("1!2.0+kpack1").unwrap_err().contains("already"));
        assert!(v.deb("2147483647:1.0-1").is_ok());
        assert!(v.deb("4294967296:1.0-1").unwrap_err().contains("epoch"));
        assert!(v
            .wheel("2.1.0+cu121.kpack1")
            .unwrap_err()
            .contains("already"));
        let none = Versioning {
            suffix: String::new(),
        };
        assert_eq!(none.deb("5.3.3-4").unwrap(), "5.3.3-4");
        assert_eq!(none.wheel("1.0").unwrap(), "1.0");
        for ok in ["", "kpack1", "kpack.2", "site"] {
            assert!(check_suffix(ok).is_ok(), "{ok}");
        }
        for bad in [
            "1kpack",
            "Kpack1",
            "kpack-1",
            "kpack_1",
            "kpack..1",
            "kpack.",
            "+kpack1",
            &"k".repeat(33),
        ] {
            assert!(check_suffix(bad).is_err(), "{bad}");
        }
    }
}
