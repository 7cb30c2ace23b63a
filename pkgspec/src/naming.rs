//! Package naming templates: `{name}` (the input package or distribution
//! name), `{deb_name}` (`{name}` with a trailing `-devel` spelled `-dev`,
//! as Debian names development packages), `{group}` (device group as
//! declared), `{group_lower}` and `{version}` (`major.minor` of the input
//! version, as AMD puts it in its package names), and the naming profiles:
//! `kpack` (the built-in templates) and `amd-native` (AMD's own scheme,
//! docs/packaging.md "AMD's multi-arch packages").

use serde::{Deserialize, Serialize};

/// Templates for generated package names (docs/packaging.md "Package naming").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Naming {
    /// Generic deb (`{name}`).
    pub deb_generic: String,
    /// Device deb (`{name}-{group_lower}`).
    pub deb_device: String,
    /// Generic rpm.
    pub rpm_generic: String,
    /// Device rpm.
    pub rpm_device: String,
    /// Generic wheel distribution name.
    pub wheel_generic: String,
    /// Device wheel distribution name (`{name}-device-{group_lower}`).
    pub wheel_device: String,
    /// The generic wheel's extra that pulls in one device wheel
    /// (`device-{group_lower}`).
    pub wheel_extra: String,
    /// Meta deb depending on the generic deb and every device deb of a
    /// split, at exactly its version; empty: none.
    #[serde(default)]
    pub deb_meta: String,
    /// Meta rpm, as `deb_meta`.
    #[serde(default)]
    pub rpm_meta: String,
}

/// A naming profile: a whole set of templates, chosen by
/// `[naming] profile` (keys given beside it still override it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// The built-in templates (`{name}`, `{name}-{group_lower}`, no meta
    /// package).
    Kpack,
    /// AMD's native packages: host `{name}-host{version}`, device
    /// `{name}{version}-{group_lower}`, meta `{name}{version}` (debs with
    /// `{deb_name}`); wheels as `Kpack`, which already is AMD's wheel
    /// scheme.
    AmdNative,
}

impl Profile {
    /// Every profile.
    pub const ALL: [Profile; 2] = [Profile::Kpack, Profile::AmdNative];

    /// The value of `[naming] profile`.
    pub fn key(self) -> &'static str {
        match self {
            Profile::Kpack => "kpack",
            Profile::AmdNative => "amd-native",
        }
    }

    /// The profile a `[naming] profile` value names.
    pub fn from_key(key: &str) -> Option<Profile> {
        Profile::ALL.into_iter().find(|p| p.key() == key)
    }

    /// The profile's templates.
    pub fn naming(self) -> Naming {
        let kpack = Naming {
            deb_generic: "{name}".into(),
            deb_device: "{name}-{group_lower}".into(),
            rpm_generic: "{name}".into(),
            rpm_device: "{name}-{group_lower}".into(),
            wheel_generic: "{name}".into(),
            wheel_device: "{name}-device-{group_lower}".into(),
            wheel_extra: "device-{group_lower}".into(),
            deb_meta: String::new(),
            rpm_meta: String::new(),
        };
        match self {
            Profile::Kpack => kpack,
            Profile::AmdNative => Naming {
                deb_generic: "{deb_name}-host{version}".into(),
                deb_device: "{deb_name}{version}-{group_lower}".into(),
                deb_meta: "{deb_name}{version}".into(),
                rpm_generic: "{name}-host{version}".into(),
                rpm_device: "{name}{version}-{group_lower}".into(),
                rpm_meta: "{name}{version}".into(),
                ..kpack
            },
        }
    }
}

/// The `{version}` of a package version, as AMD derives the version in its
/// package names: the epoch dropped, then the leading digits of the first
/// two dot-separated parts (`1:8.2.0-12345` -> `8.2`). A version without
/// both is an error.
pub fn name_version(version: &str) -> Result<String, String> {
    let v = match version.split_once(':') {
        Some((e, rest)) if !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit()) => rest,
        _ => version,
    };
    let mut parts = v.split('.');
    let mut digits = || -> Option<&str> {
        let p = parts.next()?;
        let n = p.bytes().take_while(u8::is_ascii_digit).count();
        p.get(..n).filter(|d| !d.is_empty())
    };
    match (digits(), digits()) {
        (Some(major), Some(minor)) => Ok(format!("{major}.{minor}")),
        _ => Err(format!(
            "version {version:?} has no major.minor for the {{version}} in package names"
        )),
    }
}

/// Which template of [`Naming`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    DebGeneric,
    DebDevice,
    RpmGeneric,
    RpmDevice,
    WheelGeneric,
    WheelDevice,
    WheelExtra,
    DebMeta,
    RpmMeta,
}

impl NameKind {
    /// Every kind, in declaration order.
    pub const ALL: [NameKind; 9] = [
        NameKind::DebGeneric,
        NameKind::DebDevice,
        NameKind::RpmGeneric,
        NameKind::RpmDevice,
        NameKind::WheelGeneric,
        NameKind::WheelDevice,
        NameKind::WheelExtra,
        NameKind::DebMeta,
        NameKind::RpmMeta,
    ];

    /// The key in `[naming]`.
    pub fn key(self) -> &'static str {
        match self {
            NameKind::DebGeneric => "deb_generic",
            NameKind::DebDevice => "deb_device",
            NameKind::RpmGeneric => "rpm_generic",
            NameKind::RpmDevice => "rpm_device",
            NameKind::WheelGeneric => "wheel_generic",
            NameKind::WheelDevice => "wheel_device",
            NameKind::WheelExtra => "wheel_extra",
            NameKind::DebMeta => "deb_meta",
            NameKind::RpmMeta => "rpm_meta",
        }
    }

    /// Whether the template may be empty (no such package).
    pub fn optional(self) -> bool {
        matches!(self, NameKind::DebMeta | NameKind::RpmMeta)
    }

    /// Whether the template must use `{name}` (package names do; an
    /// extra lives inside one distribution's metadata).
    pub fn needs_name(self) -> bool {
        self != NameKind::WheelExtra
    }

    /// Whether names of this kind are per device group.
    pub fn is_device(self) -> bool {
        !matches!(
            self,
            NameKind::DebGeneric
                | NameKind::RpmGeneric
                | NameKind::WheelGeneric
                | NameKind::DebMeta
                | NameKind::RpmMeta
        )
    }
}

const PLACEHOLDERS: [&str; 5] = ["name", "deb_name", "group", "group_lower", "version"];

impl Naming {
    /// The template of one kind.
    pub fn template(&self, kind: NameKind) -> &str {
        match kind {
            NameKind::DebGeneric => &self.deb_generic,
            NameKind::DebDevice => &self.deb_device,
            NameKind::RpmGeneric => &self.rpm_generic,
            NameKind::RpmDevice => &self.rpm_device,
            NameKind::WheelGeneric => &self.wheel_generic,
            NameKind::WheelDevice => &self.wheel_device,
            NameKind::WheelExtra => &self.wheel_extra,
            NameKind::DebMeta => &self.deb_meta,
            NameKind::RpmMeta => &self.rpm_meta,
        }
    }

    /// The template slot of one kind.
    pub fn template_mut(&mut self, kind: NameKind) -> &mut String {
        match kind {
            NameKind::DebGeneric => &mut self.deb_generic,
            NameKind::DebDevice => &mut self.deb_device,
            NameKind::RpmGeneric => &mut self.rpm_generic,
            NameKind::RpmDevice => &mut self.rpm_device,
            NameKind::WheelGeneric => &mut self.wheel_generic,
            NameKind::WheelDevice => &mut self.wheel_device,
            NameKind::WheelExtra => &mut self.wheel_extra,
            NameKind::DebMeta => &mut self.deb_meta,
            NameKind::RpmMeta => &mut self.rpm_meta,
        }
    }

    /// Renders one name: `group` is None for generic kinds. `{version}`
    /// renders as written unless [`Naming::with_version`] filled it in.
    pub fn render(&self, kind: NameKind, name: &str, group: Option<&str>) -> String {
        render(self.template(kind), name, group.unwrap_or(""))
    }

    /// Whether a template uses `{version}`.
    pub fn uses_version(&self) -> bool {
        NameKind::ALL
            .iter()
            .any(|k| self.template(*k).contains("{version}"))
    }

    /// The templates with `{version}` filled in from a package version
    /// ([`name_version`]); unchanged when none uses it.
    pub fn with_version(&self, version: &str) -> Result<Naming, String> {
        let mut out = self.clone();
        if !self.uses_version() {
            return Ok(out);
        }
        let v = name_version(version)?;
        for kind in NameKind::ALL {
            let t = out.template_mut(kind);
            *t = t.replace("{version}", &v);
        }
        Ok(out)
    }

    /// Checks every template (see [`check_template`]), and that a meta
    /// package's name differs from the generic package's.
    pub fn check(&self) -> Result<(), (NameKind, String)> {
        for kind in NameKind::ALL {
            check_template(self.template(kind), kind).map_err(|e| (kind, e))?;
        }
        for (meta, generic) in [
            (NameKind::DebMeta, NameKind::DebGeneric),
            (NameKind::RpmMeta, NameKind::RpmGeneric),
        ] {
            if !self.template(meta).is_empty() && self.template(meta) == self.template(generic) {
                return Err((
                    meta,
                    format!(
                        "template {:?} is also the generic package's ({}): the meta package needs a name of its own",
                        self.template(meta),
                        generic.key()
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// `name` as Debian spells a development package (`-devel` -> `-dev`).
pub fn deb_name(name: &str) -> String {
    match name.strip_suffix("-devel") {
        Some(stem) => format!("{stem}-dev"),
        None => name.to_string(),
    }
}

fn render(template: &str, name: &str, group: &str) -> String {
    template
        .replace("{deb_name}", &deb_name(name))
        .replace("{name}", name)
        .replace("{group_lower}", &group.to_ascii_lowercase())
        .replace("{group}", group)
}

/// A template is valid when its braces balance around known placeholders,
/// it uses `{name}` (package names), a device template uses `{group}` or `{group_lower}`
/// (else every device package gets the same name), a generic one uses
/// neither, and the literal text is safe in deb, rpm and wheel names.
pub fn check_template(template: &str, kind: NameKind) -> Result<(), String> {
    if template.is_empty() && kind.optional() {
        return Ok(());
    }
    let device = kind.is_device();
    let mut rest = template;
    let mut used = Vec::new();
    let mut literal = String::new();
    while !rest.is_empty() {
        match rest.find(['{', '}']) {
            None => {
                literal.push_str(rest);
                break;
            }
            Some(i) => {
                // `find` returns a char boundary: the split cannot fail.
                let (before, tail) = rest.split_at(i);
                literal.push_str(before);
                let Some(tail) = tail.strip_prefix('{') else {
                    return Err(format!("template {template:?}: unbalanced '}}'"));
                };
                let (key, after) = tail
                    .split_once('}')
                    .ok_or_else(|| format!("template {template:?}: unclosed '{{'"))?;
                if !PLACEHOLDERS.contains(&key) {
                    return Err(format!(
                        "template {template:?}: unknown placeholder {{{key}}} (known: {{name}}, {{deb_name}}, {{group}}, {{group_lower}}, {{version}})"
                    ));
                }
                used.push(key);
                rest = after;
            }
        }
    }
    if kind.needs_name() && !used.iter().any(|k| *k == "name" || *k == "deb_name") {
        return Err(format!(
            "template {template:?} must contain {{name}} or {{deb_name}}"
        ));
    }
    let has_group = used.iter().any(|k| *k == "group" || *k == "group_lower");
    if device && !has_group {
        return Err(format!(
            "template {template:?} must contain {{group}} or {{group_lower}} (every device package would get the same name)"
        ));
    }
    if !device && has_group {
        return Err(format!(
            "template {template:?} is for the generic package and cannot use {{group}}"
        ));
    }
    if let Some(c) = literal
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+')))
    {
        return Err(format!(
            "template {template:?}: character {c:?} is not allowed in package names"
        ));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn templates() {
        let n = crate::defaults::naming();
        assert!(n.check().is_ok());
        assert_eq!(
            n.render(NameKind::DebDevice, "librocrand1", Some("gfx110X")),
            "librocrand1-gfx110x"
        );
        assert_eq!(
            n.render(NameKind::DebGeneric, "librocrand1", None),
            "librocrand1"
        );
        assert_eq!(
            n.render(NameKind::WheelExtra, "torch", Some("gfx94X-dcgpu")),
            "device-gfx94x-dcgpu"
        );
        use NameKind::{DebDevice, DebGeneric, WheelExtra};
        assert!(check_template("device-{group}", WheelExtra).is_ok());
        assert!(check_template("{name}-{grp}", DebDevice)
            .unwrap_err()
            .contains("unknown placeholder"));
        assert!(check_template("{name}-{group", DebDevice)
            .unwrap_err()
            .contains("unclosed"));
        assert!(check_template("{name}}", DebGeneric)
            .unwrap_err()
            .contains("unbalanced"));
        assert!(check_template("{name}-dev", DebDevice)
            .unwrap_err()
            .contains("same name"));
        assert!(check_template("{name}-{group}", DebGeneric).is_err());
        assert!(check_template("lib/{name}-{group}", DebDevice)
            .unwrap_err()
            .contains("'/'"));
        assert!(check_template("{group}", DebDevice)
            .unwrap_err()
            .contains("{name}"));
    }

    /// AMD's names for library `amdrocm-fft` 8.2 (TheRock's
    /// `update_package_name`): host `-host` before the version, device
    /// version then target, meta base and version; debs spell `-devel`
    /// `-dev`, rpms do not.
    #[test]
    fn the_amd_native_profile_gives_amds_names() {
        use NameKind::*;
        let n = Profile::AmdNative.naming();
        assert!(n.check().is_ok());
        let n = n.with_version("8.2.0-12345").unwrap();
        assert_eq!(
            n.render(DebGeneric, "amdrocm-fft", None),
            "amdrocm-fft-host8.2"
        );
        assert_eq!(
            n.render(DebDevice, "amdrocm-fft", Some("gfx1100")),
            "amdrocm-fft8.2-gfx1100"
        );
        assert_eq!(n.render(DebMeta, "amdrocm-fft", None), "amdrocm-fft8.2");
        assert_eq!(
            n.render(RpmGeneric, "amdrocm-fft", None),
            "amdrocm-fft-host8.2"
        );
        assert_eq!(
            n.render(RpmDevice, "amdrocm-fft", Some("gfx90a")),
            "amdrocm-fft8.2-gfx90a"
        );
        assert_eq!(n.render(RpmMeta, "amdrocm-fft", None), "amdrocm-fft8.2");
        assert_eq!(
            n.render(DebDevice, "amdrocm-blas-devel", Some("gfx942")),
            "amdrocm-blas-dev8.2-gfx942"
        );
        assert_eq!(
            n.render(RpmDevice, "amdrocm-blas-devel", Some("gfx942")),
            "amdrocm-blas-devel8.2-gfx942"
        );
        // Wheels keep the built-in names, which are AMD's wheel scheme.
        assert_eq!(
            n.render(WheelDevice, "torch", Some("gfx942")),
            "torch-device-gfx942"
        );
        // The kpack profile has no meta package and no {version}.
        let k = Profile::Kpack.naming();
        assert!(k.deb_meta.is_empty() && !k.uses_version());
        assert_eq!(k.with_version("no-version").unwrap(), k);
    }

    #[test]
    fn the_version_in_names_is_major_minor_as_amd_cuts_it() {
        assert_eq!(name_version("8.2.0").unwrap(), "8.2");
        assert_eq!(name_version("1:7.15.0~rc1-3").unwrap(), "7.15");
        assert_eq!(name_version("6.4rc2.1").unwrap(), "6.4");
        assert!(name_version("8").is_err());
        assert!(name_version("x.2").is_err());
        assert!(name_version("8.x").is_err());
        assert!(Profile::AmdNative.naming().with_version("8").is_err());
    }

    #[test]
    fn meta_templates_are_checked() {
        use NameKind::*;
        assert!(check_template("", DebMeta).is_ok());
        assert!(check_template("", DebGeneric).is_err());
        assert!(check_template("{name}{version}-{group}", RpmMeta)
            .unwrap_err()
            .contains("generic"));
        assert!(check_template("{deb_name}{version}", DebMeta).is_ok());
        let mut n = Profile::Kpack.naming();
        n.deb_meta = "{name}".into();
        let (kind, e) = n.check().unwrap_err();
        assert_eq!(kind, DebMeta);
        assert!(e.contains("name of its own"), "{e}");
    }
}
