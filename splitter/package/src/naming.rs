//! Package naming and relations (docs/packaging.md "Package naming"): names
//! come from the spec's naming templates (`{name}`, `{group}`,
//! `{group_lower}`); the relations' fixed parts live here.

use rocm_kpack_pkgspec::{NameKind, Naming};

/// What generic packages recommend.
pub const FETCH_PACKAGE: &str = "rocm-kpack-fetch";

/// The generic package (or distribution) name of a format.
pub fn generic(n: &Naming, kind: NameKind, name: &str) -> String {
    n.render(kind, name, None)
}

/// A device package (or distribution) name of a format.
pub fn device(n: &Naming, kind: NameKind, name: &str, group: &str) -> String {
    n.render(kind, name, Some(group))
}

/// The generic wheel's extra that pulls in one group (`device-<group>`).
pub fn wheel_extra(n: &Naming, group: &str) -> String {
    n.render(NameKind::WheelExtra, "", Some(group))
}

/// Virtual package every device package of `generic` provides.
pub fn device_code_provide(generic: &str) -> String {
    format!("{generic}-device-code")
}

/// rpm capability naming one target: `rocm-kpack(gfx1100)`.
pub fn rpm_target_provide(target: &str) -> String {
    format!("rocm-kpack({target})")
}
