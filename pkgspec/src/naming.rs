//! Package naming templates: `{name}` (the input package or distribution
//! name), `{group}` (device group as declared) and `{group_lower}`.

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
}

impl NameKind {
    /// Every kind, in declaration order.
    pub const ALL: [NameKind; 7] = [
        NameKind::DebGeneric,
        NameKind::DebDevice,
        NameKind::RpmGeneric,
        NameKind::RpmDevice,
        NameKind::WheelGeneric,
        NameKind::WheelDevice,
        NameKind::WheelExtra,
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
        }
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
            NameKind::DebGeneric | NameKind::RpmGeneric | NameKind::WheelGeneric
        )
    }
}

const PLACEHOLDERS: [&str; 3] = ["name", "group", "group_lower"];

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
        }
    }

    /// Renders one name: `group` is None for generic kinds.
    pub fn render(&self, kind: NameKind, name: &str, group: Option<&str>) -> String {
        render(self.template(kind), name, group.unwrap_or(""))
    }

    /// Checks every template (see [`check_template`]).
    pub fn check(&self) -> Result<(), (NameKind, String)> {
        for kind in NameKind::ALL {
            check_template(self.template(kind), kind).map_err(|e| (kind, e))?;
        }
        Ok(())
    }
}

fn render(template: &str, name: &str, group: &str) -> String {
    template
        .replace("{name}", name)
        .replace("{group_lower}", &group.to_ascii_lowercase())
        .replace("{group}", group)
}

/// A template is valid when its braces balance around known placeholders,
/// it uses `{name}` (package names), a device template uses `{group}` or `{group_lower}`
/// (else every device package gets the same name), a generic one uses
/// neither, and the literal text is safe in deb, rpm and wheel names.
pub fn check_template(template: &str, kind: NameKind) -> Result<(), String> {
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
                literal.push_str(rest.get(..i).unwrap_or_default());
                let tail = rest.get(i..).unwrap_or_default();
                if tail.starts_with('}') {
                    return Err(format!("template {template:?}: unbalanced '}}'"));
                }
                let close = tail
                    .find('}')
                    .ok_or_else(|| format!("template {template:?}: unclosed '{{'"))?;
                let key = tail.get(1..close).unwrap_or_default();
                if !PLACEHOLDERS.contains(&key) {
                    return Err(format!(
                        "template {template:?}: unknown placeholder {{{key}}} (known: {{name}}, {{group}}, {{group_lower}})"
                    ));
                }
                used.push(key);
                rest = tail.get(close + 1..).unwrap_or_default();
            }
        }
    }
    if kind.needs_name() && !used.contains(&"name") {
        return Err(format!("template {template:?} must contain {{name}}"));
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
}
