//! The two ways a user replaces what sysfs says: an explicit target list
//! (`--target` / `ROCM_KPACK_ARCH_OVERRIDE`), and `HSA_OVERRIDE_GFX_VERSION`,
//! which the ROCm stack honours by treating every GPU as that version.

use std::collections::BTreeSet;
use std::fmt;

use serde::Serialize;

use super::gfx::processor_name;
use crate::{Error, Result};
use rocm_kpack_format::target::TargetId;

/// Environment variable holding a comma-separated target list that replaces
/// detection.
pub const ARCH_OVERRIDE_ENV: &str = "ROCM_KPACK_ARCH_OVERRIDE";

/// Environment variable (`MAJOR.MINOR.STEPPING`) that the ROCm runtime uses
/// in place of every GPU's `gfx_target_version`.
pub const HSA_OVERRIDE_ENV: &str = "HSA_OVERRIDE_GFX_VERSION";

/// AMD's detector `rocm-bootstrap`: a comma-separated target list that
/// replaces its detection; the fetcher honours it below its own override.
pub const BOOTSTRAP_FORCE_ENV: &str = "ROCM_BOOTSTRAP_FORCE_GFX_ARCH";

/// AMD's detector `rocm-bootstrap`: `1` turns detection off (no targets),
/// before [`BOOTSTRAP_FORCE_ENV`] is looked at.
pub const BOOTSTRAP_DISABLE_ENV: &str = "ROCM_BOOTSTRAP_DISABLE_DETECTION";

/// uv's override of its PyTorch-backend detection: one target
/// (`gfx1100`); the fetcher honours it below `rocm-bootstrap`'s.
pub const UV_ARCH_ENV: &str = "UV_AMD_GPU_ARCHITECTURE";

/// conda's (rattler's) override of the `__amdgpu_arch` virtual package:
/// the ISA version `MAJOR.MINOR.STEPPING` of one GPU (`9.4.2`); the
/// fetcher honours it last.
pub const CONDA_ARCH_ENV: &str = "CONDA_OVERRIDE_AMDGPU_ARCH";

/// Where a target-list override came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum OverrideSource {
    /// The `--target` command-line option.
    #[serde(rename = "--target")]
    CommandLine,
    /// The `ROCM_KPACK_ARCH_OVERRIDE` environment variable.
    #[serde(rename = "ROCM_KPACK_ARCH_OVERRIDE")]
    Environment,
    /// `ROCM_BOOTSTRAP_FORCE_GFX_ARCH`, shared with AMD's `rocm-bootstrap`.
    #[serde(rename = "ROCM_BOOTSTRAP_FORCE_GFX_ARCH")]
    Bootstrap,
    /// `UV_AMD_GPU_ARCHITECTURE`, uv's.
    #[serde(rename = "UV_AMD_GPU_ARCHITECTURE")]
    Uv,
    /// `CONDA_OVERRIDE_AMDGPU_ARCH`, conda's and rattler's.
    #[serde(rename = "CONDA_OVERRIDE_AMDGPU_ARCH")]
    Conda,
}

impl fmt::Display for OverrideSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OverrideSource::CommandLine => "--target",
            OverrideSource::Environment => ARCH_OVERRIDE_ENV,
            OverrideSource::Bootstrap => BOOTSTRAP_FORCE_ENV,
            OverrideSource::Uv => UV_ARCH_ENV,
            OverrideSource::Conda => CONDA_ARCH_ENV,
        })
    }
}

/// An explicit target list that replaces detection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArchOverride {
    /// Where the list came from.
    pub source: OverrideSource,
    /// The targets, deduplicated and sorted.
    pub targets: Vec<String>,
}

impl ArchOverride {
    /// Parses a comma-separated list (`gfx1100, gfx90a:xnack-`). Spaces
    /// around entries and empty entries are ignored; at least one target is
    /// required. Each entry must be a valid target id ([`TargetId::parse`])
    /// and is kept in its canonical spelling (no `amdgcn-amd-amdhsa--`
    /// prefix, features sorted).
    pub fn parse(source: OverrideSource, list: &str) -> Result<ArchOverride> {
        let mut targets = BTreeSet::new();
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let id = TargetId::parse(entry).map_err(|e| {
                let detail = match e {
                    Error::InvalidArgument(detail) => detail,
                    other => other.to_string(),
                };
                Error::InvalidArgument(format!("{source}: {detail}"))
            })?;
            targets.insert(id.to_string());
        }
        if targets.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "{source}: {list:?} names no target (expected a comma-separated list such as gfx1100,gfx90a)"
            )));
        }
        Ok(ArchOverride {
            source,
            targets: targets.into_iter().collect(),
        })
    }
}

/// A parsed `HSA_OVERRIDE_GFX_VERSION`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HsaOverride {
    /// The value as given (trimmed), e.g. `11.0.0`.
    pub value: String,
    /// The same as a `gfx_target_version` (110000).
    pub gfx_target_version: u32,
    /// The processor every GPU is treated as (`gfx1100`).
    pub processor: String,
}

impl HsaOverride {
    /// Parses `MAJOR.MINOR.STEPPING` in decimal (`9.0.10` is gfx90a). Minor
    /// and stepping must be 0-15, as in a processor name.
    pub fn parse(value: &str) -> Result<HsaOverride> {
        let value = value.trim();
        let bad = |why: &str| {
            Error::InvalidArgument(format!(
                "{HSA_OVERRIDE_ENV}={value:?}: {why} (expected MAJOR.MINOR.STEPPING such as 11.0.0)"
            ))
        };
        let parts: Vec<&str> = value.split('.').collect();
        let [major, minor, stepping] = parts.as_slice() else {
            return Err(bad("not three numbers"));
        };
        let number = |s: &str| -> Result<u32> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad("not decimal numbers"));
            }
            s.parse::<u32>().map_err(|_| bad("number too large"))
        };
        let (major, minor, stepping) = (number(major)?, number(minor)?, number(stepping)?);
        if minor > 15 || stepping > 15 {
            return Err(bad("minor and stepping must be 0-15"));
        }
        let version = major
            .checked_mul(10_000)
            .and_then(|v| v.checked_add(minor * 100 + stepping))
            .ok_or_else(|| bad("number too large"))?;
        let processor =
            processor_name(version).ok_or_else(|| bad("major version must not be 0"))?;
        Ok(HsaOverride {
            value: value.to_string(),
            gfx_target_version: version,
            processor,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn arch_list() {
        let o = ArchOverride::parse(
            OverrideSource::Environment,
            " gfx90a:xnack-, gfx1100,,amdgcn-amd-amdhsa--gfx1100, gfx942:xnack-:sramecc+",
        )
        .unwrap();
        assert_eq!(
            o.targets,
            ["gfx1100", "gfx90a:xnack-", "gfx942:sramecc+:xnack-"]
        );
        assert!(ArchOverride::parse(OverrideSource::CommandLine, " , ").is_err());
        assert!(ArchOverride::parse(OverrideSource::CommandLine, "").is_err());
        let err = ArchOverride::parse(OverrideSource::CommandLine, "gfx1100,../etc").unwrap_err();
        assert!(err.to_string().contains("--target"), "{err}");
        assert!(ArchOverride::parse(OverrideSource::CommandLine, "gfx 1100").is_err());
    }

    #[test]
    fn hsa_values() {
        let o = HsaOverride::parse("11.0.0").unwrap();
        assert_eq!(
            (o.gfx_target_version, o.processor.as_str()),
            (110000, "gfx1100")
        );
        let o = HsaOverride::parse(" 9.0.10\n").unwrap();
        assert_eq!(
            (o.value.as_str(), o.processor.as_str()),
            ("9.0.10", "gfx90a")
        );
        assert_eq!(HsaOverride::parse("10.3.0").unwrap().processor, "gfx1030");
        for bad in [
            "",
            "11",
            "11.0",
            "11.0.0.0",
            "a.b.c",
            "11.0.16",
            "9.16.0",
            "0.0.1",
            "+1.0.0",
            "99999999999.0.0",
            "429497.0.0",
        ] {
            assert!(HsaOverride::parse(bad).is_err(), "{bad:?}");
        }
    }
}
