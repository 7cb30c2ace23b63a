//! `--python` (and `--via pip`): installed distributions of one
//! interpreter that declare `Provides-Extra: device-<group>` get the
//! extras the local targets need, installed with `python -m pip`.
//!
//! Two rules pick the extras:
//! - our split distributions: their RECORD lists `.kpm` manifests, and the
//!   manifests say which device groups the local targets need;
//! - distributions without a `.kpm` (AMD's `rocm`, `torch`, `torchvision`
//!   from its multi-arch releases): one `device-<target>` extra per local
//!   processor, the target as AMD's detector maps it
//!   ([`rocm_kpack_pkgspec::amd::device_target_of`]). Which device
//!   distributions an extra brings is read from the base's
//!   `Requires-Dist: <dist>; extra == "device-<target>"` (the prefix differs
//!   from the base's name: `torch` brings `amd-torch-device-gfx942`), so
//!   `status` can name what is missing and `prune` what no GPU here needs.

use std::path::PathBuf;

use rocm_kpack_format::manifest::Manifest;
use rocm_kpack_format::target::TargetId;
use rocm_kpack_fs::lock::PermissionPolicy;
use rocm_kpack_pkgspec::amd::{
    device_extra, device_target_of, target_of_extra, DEVICE_EXTRA_PREFIX,
};
use rocm_kpack_pkgspec::pep508::{self, MarkerEnv};
use rocm_kpack_pkgspec::{NameKind, Naming};
use serde::{Deserialize, Serialize};

use super::pip_links::{freeing, Link};
use super::{checked, manifest_groups, passthrough, DevicePackage, PmError, PmPlan};

/// Lists every installed distribution the interpreter finds (the first of
/// each PEP 503 name, as `importlib.metadata` and pip take it): its name,
/// version, the bytes of the regular files its RECORD lists that have no
/// other hard link, and each file that has ([`super::pip_links`] decides
/// what removing it frees), where its `.dist-info` is and whether that is
/// one of the interpreter's site-packages directories, `REQUESTED` and
/// `INSTALLER`, its `Provides-Extra` and `Requires-Dist` as written, and
/// the `.kpm` manifests it owns. Everything read here is checked on the
/// Rust side ([`Listing::from_raw`]); nothing is evaluated.
const LIST_SCRIPT: &str = r#"
import json, os, site, stat, sys
from importlib import metadata
def norm(n):
    import re
    return re.sub(r"[-_.]+", "-", n).lower()
sites = {os.path.realpath(p) for p in site.getsitepackages()}
out, seen = [], set()
for d in metadata.distributions():
    name = d.metadata.get('Name') or ''
    if not name or norm(name) in seen:
        continue
    seen.add(norm(name))
    base = str(d.locate_file(''))
    files = d.files or []
    size, links, paths = 0, [], set()
    for f in files:
        path = os.path.abspath(str(d.locate_file(f)))
        if path in paths:
            continue
        paths.add(path)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        if st.st_nlink == 1:
            size += st.st_size
            continue
        links.append({
            'row': str(f), 'path': path, 'dev': st.st_dev, 'ino': st.st_ino,
            'nlink': st.st_nlink, 'size': st.st_size, 'hashed': f.hash is not None,
        })
    info = getattr(d, '_path', None)
    flag = lambda n: bool(info is not None and os.path.isfile(os.path.join(str(info), n)))
    installer = ''
    if info is not None:
        try:
            with open(os.path.join(str(info), 'INSTALLER'), 'rb') as fh:
                installer = fh.read(64).decode('utf-8', 'replace').strip()
        except OSError:
            pass
    kpms = [os.path.abspath(str(d.locate_file(f))) for f in files if str(f).endswith('.kpm')]
    out.append({
        'name': name, 'version': d.version or '', 'size': size, 'links': links,
        'location': os.path.realpath(base), 'in_site': os.path.realpath(base) in sites,
        'dist_info': os.path.realpath(str(info)) if info is not None else '',
        'requested': flag('REQUESTED'), 'installer': installer,
        'extras': d.metadata.get_all('Provides-Extra') or [],
        'requires': d.metadata.get_all('Requires-Dist') or [],
        'kpms': sorted(kpms),
    })
print(json.dumps(out))
"#;

/// One distribution as the listing script prints it (unchecked).
#[derive(Debug, Clone, Deserialize)]
struct RawDistribution {
    name: String,
    version: String,
    size: u64,
    links: Vec<Link>,
    location: String,
    in_site: bool,
    dist_info: String,
    requested: bool,
    installer: String,
    extras: Vec<String>,
    requires: Vec<String>,
    kpms: Vec<PathBuf>,
}

/// An installed distribution declaring device extras.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Distribution {
    /// Distribution name as in METADATA.
    pub name: String,
    /// Installed version.
    pub version: String,
    /// Its `device-*` extras (PEP 685 normalized).
    pub extras: Vec<String>,
    /// Absolute paths of the `.kpm` manifests its RECORD lists.
    pub kpms: Vec<PathBuf>,
    /// (device extra, PEP 503 name of another distribution it requires).
    #[serde(default)]
    pub requires: Vec<(String, String)>,
}

impl Distribution {
    /// The distributions the extra `extra` requires (the listing leaves
    /// out the distribution itself, which `device-all` may re-enter with
    /// the per-target extras).
    pub fn device_dists(&self, extra: &str) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for (e, d) in &self.requires {
            if e == extra && !out.contains(&d.as_str()) {
                out.push(d);
            }
        }
        out
    }
}

/// One installed distribution.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq, Default)]
pub struct Installed {
    /// PEP 503 name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Bytes of the regular files its RECORD lists that have no other hard
    /// link: its removal frees them.
    pub size: u64,
    /// The files it lists that have more than one hard link (`rocm-sdk
    /// init` links device files into `_rocm_sdk_devel`): what removing it
    /// frees of those is [`super::pip_links::freeing`]'s to say.
    #[serde(default)]
    pub links: Vec<Link>,
    /// The directory its RECORD's paths are relative to (site-packages).
    #[serde(default)]
    pub location: PathBuf,
    /// Its `.dist-info` directory.
    #[serde(default)]
    pub dist_info: PathBuf,
    /// The user asked for it (`REQUESTED`, PEP 376), by an installer that
    /// writes it only then: uv writes it for every distribution, so a uv
    /// install says nothing.
    #[serde(default)]
    pub requested: bool,
    /// The PEP 503 names of the distributions it requires whatever extras
    /// it was installed with, or through an extra that is not a device
    /// extra: those are needed by it, not by a GPU.
    #[serde(default)]
    pub needs: Vec<String>,
}

/// What the interpreter has installed.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct Listing {
    /// Distributions that declare `device-*` extras.
    pub distributions: Vec<Distribution>,
    /// Every installed distribution, by PEP 503 name.
    pub installed: Vec<Installed>,
    /// Distributions left out, with why (outside site-packages, names or
    /// versions that are not PEP 503 / PEP 440).
    #[serde(default)]
    pub ignored: Vec<String>,
}

impl Listing {
    /// Checks what the listing script printed: a distribution outside the
    /// interpreter's site-packages directories (a directory a `.pth` file
    /// put on `sys.path`, which another user may own), or whose name or
    /// version is not PEP 503 / PEP 440, is left out with a note; a
    /// requirement that does not parse, or names a URL, is left out too.
    /// Device extras are read with markers evaluated for every extra
    /// ([`rocm_kpack_pkgspec::pep508::Requirement::extras_requiring`]).
    fn from_raw(raw: Vec<RawDistribution>, env: &MarkerEnv) -> Listing {
        let mut out = Listing::default();
        for r in raw {
            if !r.in_site {
                out.ignored.push(format!(
                    "{} at {}: not in the interpreter's site-packages",
                    shown(&r.name),
                    r.location
                ));
                continue;
            }
            if let Err(e) = pep508::check_name(&r.name) {
                out.ignored.push(format!("{e} at {}", r.location));
                continue;
            }
            if let Err(e) = pep508::check_version(&r.version) {
                out.ignored.push(format!("{}: {e}", r.name));
                continue;
            }
            let key = pep508::normalize(&r.name);
            let declared: Vec<String> = r.extras.iter().map(|e| pep508::normalize(e)).collect();
            let device_extras: Vec<String> = declared
                .iter()
                .filter(|e| e.starts_with(DEVICE_EXTRA_PREFIX))
                .cloned()
                .collect();
            let mut requires = Vec::new();
            let mut needs = Vec::new();
            for text in &r.requires {
                let req = match pep508::Requirement::parse(text) {
                    Ok(req) if req.url.is_none() => req,
                    Ok(_) => {
                        out.ignored.push(format!(
                            "{key}: requirement {} names a URL; not followed",
                            shown(text)
                        ));
                        continue;
                    }
                    Err(e) => {
                        out.ignored.push(format!("{key}: {e}"));
                        continue;
                    }
                };
                let dep = req.key();
                if dep == key {
                    continue;
                }
                let via = req.extras_requiring(env, &declared);
                if via.is_empty() {
                    if req.applies(env, &[]) && !needs.contains(&dep) {
                        needs.push(dep);
                    }
                    continue;
                }
                for e in via {
                    if e.starts_with(DEVICE_EXTRA_PREFIX) {
                        requires.push((e, dep.clone()));
                    } else if !needs.contains(&dep) {
                        needs.push(dep.clone());
                    }
                }
            }
            requires.sort();
            requires.dedup();
            out.installed.push(Installed {
                name: key,
                version: r.version.clone(),
                size: r.size,
                links: r.links,
                location: PathBuf::from(&r.location),
                dist_info: PathBuf::from(&r.dist_info),
                requested: r.requested && r.installer != "uv",
                needs,
            });
            if !device_extras.is_empty() {
                out.distributions.push(Distribution {
                    name: r.name,
                    version: r.version,
                    extras: device_extras,
                    kpms: r.kpms,
                    requires,
                });
            }
        }
        out.distributions.sort_by_key(|d| d.name.to_lowercase());
        out.installed.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// The installed distribution called `name` (PEP 503 name).
    pub fn get(&self, name: &str) -> Option<&Installed> {
        self.installed.iter().find(|i| i.name == name)
    }
}

/// A name in its PEP 503 / PEP 685 normal form (`Device_GFX942` ->
/// `device-gfx942`).
pub use rocm_kpack_pkgspec::pep508::normalize as normalize_extra;

fn shown(text: &str) -> String {
    rocm_kpack_format::layout::names::shown(text)
}

/// The device targets (as in `device-<target>` extras) of the local
/// targets, each with the local targets it serves, in order.
pub fn device_targets(targets: &[TargetId]) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for t in targets {
        let Some(dt) = device_target_of(t.processor()) else {
            continue;
        };
        let local = t.to_string();
        match out.iter_mut().find(|(d, _)| d == dt) {
            Some((_, ts)) => {
                if !ts.contains(&local) {
                    ts.push(local);
                }
            }
            None => out.push((dt.to_string(), vec![local])),
        }
    }
    out
}

/// The extras a distribution without `.kpm` needs for the local targets:
/// `device-<target>` for each (as [`DevicePackage`]s named by the extra).
/// A target the distribution has no extra for becomes a warning that says
/// it publishes no device code for it.
pub fn native_extras(
    dist: &Distribution,
    targets: &[TargetId],
    warnings: &mut Vec<String>,
) -> Vec<DevicePackage> {
    let mut out = Vec::new();
    for (dt, local) in device_targets(targets) {
        let extra = device_extra(&dt);
        if dist.extras.contains(&extra) {
            out.push(DevicePackage {
                name: extra,
                generic: dist.name.clone(),
                component: dist.name.clone(),
                group: dt,
                targets: local,
            });
        } else {
            warnings.push(format!(
                "{} publishes no device code for {} (it declares no extra {extra})",
                dist.name,
                local.join(", ")
            ));
        }
    }
    out
}

/// A device distribution of a base without `.kpm`, judged against the
/// local targets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NativeDevice {
    /// The base distribution (`torch`).
    pub base: String,
    /// The extra (`device-gfx942`).
    pub extra: String,
    /// The device target of the extra.
    pub target: String,
    /// The device distribution (`amd-torch-device-gfx942`, PEP 503 name).
    pub dist: String,
    /// Installed version, if installed.
    pub installed: Option<String>,
    /// Bytes its RECORD lists (0 when not installed).
    pub size: u64,
    /// Local targets it serves (empty: no GPU here needs it).
    pub local: Vec<String>,
}

/// Every device distribution the `device-<target>` extras of the
/// distributions without `.kpm` name, with whether it is installed and
/// which local targets it serves. Bases with `.kpm` keep their own rule.
pub fn native_devices(listing: &Listing, targets: &[TargetId]) -> Vec<NativeDevice> {
    extra_devices(listing, targets, |d| d.kpms.is_empty())
}

/// [`native_devices`] for the bases `include` picks: `prune` takes every
/// base, since our per-target split wheels have the same shape as AMD's
/// (a `device-<target>` extra requiring `<dist>-device-<target>`).
pub fn extra_devices(
    listing: &Listing,
    targets: &[TargetId],
    include: impl Fn(&Distribution) -> bool,
) -> Vec<NativeDevice> {
    let local = device_targets(targets);
    let mut out = Vec::new();
    for dist in listing.distributions.iter().filter(|d| include(d)) {
        for extra in &dist.extras {
            let Some(target) = target_of_extra(extra) else {
                continue;
            };
            let serves = local
                .iter()
                .find(|(dt, _)| dt == target)
                .map(|(_, ts)| ts.clone())
                .unwrap_or_default();
            for dev in dist.device_dists(extra) {
                let installed = listing.get(dev);
                out.push(NativeDevice {
                    base: dist.name.clone(),
                    extra: extra.clone(),
                    target: target.to_string(),
                    dist: dev.to_string(),
                    installed: installed.map(|i| i.version.clone()),
                    size: installed.map_or(0, |i| i.size),
                    local: serves.clone(),
                });
            }
        }
    }
    out
}

/// `prune --via pip`: the installed device distributions of every base
/// with `device-<target>` extras (AMD's and our split wheels) that serve no
/// kept target ([`prune_candidates`]),
/// removed with `python -I -m pip uninstall -y`. pip never checks a
/// base's extras (`pip check` ignores them), so the base stays consistent.
impl crate::ops::prune::PruneBackend for Pip {
    fn name(&self) -> &'static str {
        "pip"
    }

    fn plan(
        &self,
        ctx: &crate::ops::prune::PruneContext,
    ) -> Result<crate::ops::prune::BackendPlan, crate::ops::prune::PruneError> {
        use crate::ops::prune::{BackendPlan, PruneItem, PruneKind};
        let listing = self.listing()?;
        let (gone, notes) = removable(
            &listing,
            prune_candidates(
                &extra_devices(&listing, ctx.keep, |_| true),
                &ctx.kept_device_targets(),
            ),
        );
        let mut plan = BackendPlan::new(self.name());
        plan.warnings = notes;
        plan.warnings
            .extend(listing.ignored.iter().map(|i| format!("ignoring {i}")));
        let names: Vec<&str> = gone.iter().map(|d| d.dist.as_str()).collect();
        let freed = freeing(&listing, &names);
        for (dist, bytes) in &freed.stays {
            plan.warnings.push(format!(
                "{dist}: {} of its files stay on disk: they have hard links that stay (a kept distribution's, or one no RECORD lists, such as uv's cache)",
                rocm_kpack_cli::iec_size(*bytes)
            ));
        }
        for d in &gone {
            plan.items.push(PruneItem {
                kind: PruneKind::Package,
                name: d.dist.clone(),
                targets: vec![d.target.clone()],
                bytes: freed.bytes_of(&d.dist),
                reason: format!(
                    "{}[{}] serves none of {}",
                    d.base,
                    d.extra,
                    ctx.keep_label()
                ),
                links: freed
                    .links_of(&d.dist)
                    .map(|l| crate::ops::prune::LinkItem {
                        path: l.link.path.display().to_string(),
                        recorded_by: l.owner.clone(),
                    })
                    .collect(),
                removal: None,
            });
        }
        if !gone.is_empty() {
            plan.command = Some(format!(
                "{} -m pip uninstall -y -- {}",
                self.python,
                names.join(" ")
            ));
        }
        Ok(plan)
    }

    fn apply(
        &self,
        _ctx: &crate::ops::prune::PruneContext,
        plan: &crate::ops::prune::BackendPlan,
    ) -> Result<crate::ops::prune::Applied, crate::ops::prune::PruneError> {
        let names: Vec<&str> = plan.items.iter().map(|i| i.name.as_str()).collect();
        let python = self.interpreter()?;
        // The links to remove, found again now, and only those shown.
        let shown: Vec<&str> = plan
            .items
            .iter()
            .flat_map(|i| i.links.iter().map(|l| l.path.as_str()))
            .collect();
        let links: Vec<super::pip_links::ForeignLink> = if shown.is_empty() {
            Vec::new()
        } else {
            freeing(&self.listing()?, &names)
                .links
                .into_iter()
                .filter(|l| shown.contains(&l.link.path.to_string_lossy().as_ref()))
                .collect()
        };
        let mut c = python.command();
        // pip's messages go to stderr: stdout is the report (`--json`).
        c.args([
            "-m",
            "pip",
            "uninstall",
            "--disable-pip-version-check",
            "-y",
            "--",
        ])
        .args(&names)
        .stdout(std::process::Stdio::from(std::io::stderr()));
        passthrough(&mut c)?;
        // Only after the uninstall: should it fail, the distributions are
        // still there, and so are the links into their files.
        let unlinked = super::pip_links::remove(&python, &links)?;
        let mut removed: Vec<String> = names.iter().map(|n| format!("pip: {n}")).collect();
        removed.extend(unlinked.removed.iter().map(|p| format!("pip: {p}")));
        Ok(crate::ops::prune::Applied {
            removed,
            notes: unlinked.kept,
        })
    }
}

/// What `status` and `doctor` say about the device distributions of the
/// bases without `.kpm`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NativeStatus {
    /// Device distributions a local target needs and pip has not
    /// installed (the base declares the target's extra).
    pub missing: Vec<NativeDevice>,
    /// Installed device distributions no local target needs.
    pub unneeded: Vec<NativeDevice>,
    /// Local targets a base has no extra for.
    pub warnings: Vec<String>,
}

impl NativeStatus {
    /// The status of `python`'s distributions (`None`: no interpreter is
    /// configured, or it cannot list them, which the manifest scan of the
    /// same interpreter already reports).
    ///
    /// An interpreter another user controls is an error unless
    /// `permissions` accepts it ([`crate::python::Interpreter::trusted`]).
    pub fn of_python(
        python: Option<&str>,
        targets: &[TargetId],
        permissions: PermissionPolicy,
    ) -> Result<Option<NativeStatus>, PmError> {
        let Some(python) = python else {
            return Ok(None);
        };
        let pip = Pip {
            python: python.to_string(),
            index_url: None,
            extra: Vec::new(),
            permissions,
        };
        match pip.listing() {
            Ok(l) => {
                let mut s = NativeStatus::of(&l, targets);
                s.warnings
                    .extend(l.ignored.iter().map(|i| format!("ignoring {i}")));
                Ok(Some(s))
            }
            Err(e @ PmError::Python(crate::python::PythonError::Untrusted { .. })) => Err(e),
            Err(e) => {
                tracing::debug!("pip device distributions: {e}");
                Ok(None)
            }
        }
    }

    /// From a listing, for the local targets.
    pub fn of(listing: &Listing, targets: &[TargetId]) -> NativeStatus {
        let mut out = NativeStatus::default();
        let devices = native_devices(listing, targets);
        for d in &devices {
            if !d.local.is_empty() && d.installed.is_none() && !out.missing.contains(d) {
                out.missing.push(d.clone());
            }
        }
        out.unneeded = prune_candidates(&devices, &[]);
        for dist in listing.distributions.iter().filter(|d| d.kpms.is_empty()) {
            native_extras(dist, targets, &mut out.warnings);
        }
        out
    }
}

/// The installed device distributions that serve no local target and no
/// target of `keep` (device targets), through any extra: a distribution
/// that a kept extra also requires stays. One entry per distribution.
pub fn prune_candidates(devices: &[NativeDevice], keep: &[String]) -> Vec<NativeDevice> {
    let kept = |d: &NativeDevice| !d.local.is_empty() || keep.contains(&d.target);
    let mut out: Vec<NativeDevice> = Vec::new();
    for d in devices.iter().filter(|d| d.installed.is_some()) {
        let needed = devices.iter().any(|o| o.dist == d.dist && kept(o));
        if !needed && !out.iter().any(|o| o.dist == d.dist) {
            out.push(d.clone());
        }
    }
    out
}

/// Of the prune candidates, those that may go, and a note for each that
/// stays: one the user asked for (`REQUESTED`), or one another installed
/// distribution needs whatever its extras (a third-party base's
/// `device-gfx90a` extra may name an ordinary dependency that `app`
/// requires too). Removing either would break what the user installed.
pub fn removable(
    listing: &Listing,
    candidates: Vec<NativeDevice>,
) -> (Vec<NativeDevice>, Vec<String>) {
    let mut gone = Vec::new();
    let mut notes = Vec::new();
    for d in candidates {
        if listing.get(&d.dist).is_some_and(|i| i.requested) {
            notes.push(format!(
                "keeping {}: it was asked for by name (REQUESTED), not only through {}[{}]",
                d.dist, d.base, d.extra
            ));
            continue;
        }
        let needers: Vec<&str> = listing
            .installed
            .iter()
            .filter(|i| i.name != d.dist && i.needs.contains(&d.dist))
            .map(|i| i.name.as_str())
            .collect();
        if !needers.is_empty() {
            notes.push(format!(
                "keeping {}: {} require{} it, not only {}[{}]",
                d.dist,
                needers.join(", "),
                if needers.len() == 1 { "s" } else { "" },
                d.base,
                d.extra
            ));
            continue;
        }
        gone.push(d);
    }
    (gone, notes)
}

/// How pip is driven.
#[derive(Debug, Clone)]
pub struct Pip {
    /// The interpreter (`python3`, a venv's `bin/python`).
    pub python: String,
    /// `--index-url` for pip, if any.
    pub index_url: Option<String>,
    /// Extra arguments after `pip install`.
    pub extra: Vec<String>,
    /// Whether an interpreter another user controls is refused.
    pub permissions: PermissionPolicy,
}

impl Pip {
    /// The interpreter, checked ([`crate::python::Interpreter::trusted`]).
    pub fn interpreter(&self) -> Result<crate::python::Interpreter, PmError> {
        Ok(crate::python::Interpreter::trusted(
            &self.python,
            self.permissions,
        )?)
    }

    /// What the interpreter has installed.
    pub fn listing(&self) -> Result<Listing, PmError> {
        let python = self.interpreter()?;
        let mut c = python.command();
        c.args(["-c", LIST_SCRIPT]);
        let text = checked(&mut c)?;
        let raw: Vec<RawDistribution> =
            serde_json::from_str(text.trim()).map_err(|e| PmError::Output {
                tool: self.python.clone(),
                detail: e.to_string(),
            })?;
        Ok(Listing::from_raw(raw, &python.env))
    }

    /// Builds the plan: one `dist[device-a,device-b]==version` per
    /// distribution that needs device code here (its manifests say which
    /// groups; without a manifest, one `device-<target>` per local target).
    pub fn plan(&self, targets: &[TargetId], naming: &Naming) -> Result<PmPlan, PmError> {
        let mut plan = PmPlan {
            tool: format!("{} -m pip", self.python),
            ..PmPlan::default()
        };
        let listing = self.listing()?;
        plan.warnings
            .extend(listing.ignored.iter().map(|i| format!("ignoring {i}")));
        for dist in listing.distributions {
            let mut wanted: Vec<DevicePackage> = Vec::new();
            if dist.kpms.is_empty() {
                wanted = native_extras(&dist, targets, &mut plan.warnings);
            }
            for kpm in &dist.kpms {
                let manifest = match Manifest::read(kpm) {
                    Ok(m) => m,
                    Err(e) => {
                        plan.warnings.push(format!("{}: {e}", kpm.display()));
                        continue;
                    }
                };
                for (group, group_targets) in
                    manifest_groups(&manifest, &dist.name, targets, &mut plan.warnings)
                {
                    let extra = naming.render(NameKind::WheelExtra, &dist.name, Some(&group));
                    if !dist.extras.contains(&extra) {
                        plan.warnings.push(format!(
                            "{} does not declare the extra {extra} (for {})",
                            dist.name,
                            group_targets.join(", ")
                        ));
                        continue;
                    }
                    if !wanted.iter().any(|w| w.group == group) {
                        wanted.push(DevicePackage {
                            name: extra,
                            generic: dist.name.clone(),
                            component: manifest.component.clone(),
                            group,
                            targets: group_targets,
                        });
                    }
                }
            }
            if wanted.is_empty() {
                continue;
            }
            let extras: Vec<&str> = wanted.iter().map(|w| w.name.as_str()).collect();
            let requirement = format!("{}[{}]=={}", dist.name, extras.join(","), dist.version);
            for mut w in wanted {
                w.name = requirement.clone();
                plan.packages.push(w);
            }
        }
        Ok(plan)
    }

    /// Runs `python -I -m pip install` for the plan's requirements, from
    /// `/` ([`crate::python::command`]).
    pub fn install(&self, plan: &PmPlan) -> Result<(), PmError> {
        let mut c = self.interpreter()?.command();
        c.args(["-m", "pip", "install", "--disable-pip-version-check"]);
        if let Some(url) = &self.index_url {
            c.args(["--index-url", url]);
        }
        // Requirements after `--`: none of them can be read as an option.
        c.args(&self.extra).arg("--").args(plan.names());
        passthrough(&mut c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(s: &str) -> TargetId {
        TargetId::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    /// AMD's `torch`: per-target extras and `device-all`, each bringing
    /// `amd-torch-device-<t>`; installed with `device-all`.
    fn listing() -> Listing {
        let targets = ["gfx90a", "gfx942", "gfx1100"];
        let mut requires = Vec::new();
        for t in targets {
            requires.push((format!("device-{t}"), format!("amd-torch-device-{t}")));
            requires.push(("device-all".into(), format!("amd-torch-device-{t}")));
        }
        let mut extras: Vec<String> = targets.iter().map(|t| format!("device-{t}")).collect();
        extras.push("device-all".into());
        let mut installed = vec![Installed {
            name: "torch".into(),
            version: "2.9.0".into(),
            size: 10,
            ..Installed::default()
        }];
        for (t, size) in [("gfx90a", 100), ("gfx942", 200)] {
            installed.push(Installed {
                name: format!("amd-torch-device-{t}"),
                version: "2.9.0".into(),
                size,
                ..Installed::default()
            });
        }
        Listing {
            distributions: vec![Distribution {
                name: "torch".into(),
                version: "2.9.0".into(),
                extras,
                kpms: Vec::new(),
                requires,
            }],
            installed,
            ignored: Vec::new(),
        }
    }

    #[test]
    fn a_base_without_kpm_gets_the_device_extra_of_each_local_processor() {
        let l = listing();
        let mut warnings = Vec::new();
        let got = native_extras(
            &l.distributions[0],
            &[target("gfx942:sramecc+:xnack-"), target("gfx1201")],
            &mut warnings,
        );
        let names: Vec<(&str, &str)> = got
            .iter()
            .map(|p| (p.name.as_str(), p.group.as_str()))
            .collect();
        assert_eq!(names, [("device-gfx942", "gfx942")]);
        assert_eq!(got[0].targets, ["gfx942:sramecc+:xnack-"]);
        assert_eq!(
            warnings,
            ["torch publishes no device code for gfx1201 (it declares no extra device-gfx1201)"]
        );
    }

    #[test]
    fn status_names_missing_and_unneeded_device_distributions() {
        let l = listing();
        let s = NativeStatus::of(&l, &[target("gfx1100")]);
        let missing: Vec<&str> = s.missing.iter().map(|d| d.dist.as_str()).collect();
        assert_eq!(missing, ["amd-torch-device-gfx1100"]);
        let unneeded: Vec<(&str, u64)> = s
            .unneeded
            .iter()
            .map(|d| (d.dist.as_str(), d.size))
            .collect();
        assert_eq!(
            unneeded,
            [
                ("amd-torch-device-gfx90a", 100),
                ("amd-torch-device-gfx942", 200)
            ]
        );
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    }

    #[test]
    fn prune_keeps_what_a_local_or_kept_target_needs() {
        let l = listing();
        let devices = native_devices(&l, &[target("gfx942")]);
        let gone: Vec<String> = prune_candidates(&devices, &[])
            .into_iter()
            .map(|d| d.dist)
            .collect();
        assert_eq!(gone, ["amd-torch-device-gfx90a"]);
        assert!(prune_candidates(&devices, &["gfx90a".into()]).is_empty());
    }

    #[test]
    fn prune_takes_the_device_wheels_of_our_split_bases_too() {
        // Our per-target split wheel: a `.kpm` in the base, and a generic-ISA
        // wheel that two target extras share.
        let mut l = listing();
        let base = &mut l.distributions[0];
        base.kpms = vec![PathBuf::from("/venv/lib/x/.kpack/torch.kpm")];
        for t in ["gfx1100", "gfx1101"] {
            base.requires.push((
                format!("device-{t}"),
                "amd-torch-device-gfx11-generic".into(),
            ));
        }
        base.extras.push("device-gfx1101".into());
        l.installed.push(Installed {
            name: "amd-torch-device-gfx11-generic".into(),
            version: "2.9.0".into(),
            size: 50,
            ..Installed::default()
        });
        let here = [target("gfx942")];
        assert!(
            native_devices(&l, &here).is_empty(),
            "status keeps the .kpm rule"
        );
        let gone = |keep: &[String]| -> Vec<String> {
            prune_candidates(&extra_devices(&l, &here, |_| true), keep)
                .into_iter()
                .map(|d| d.dist)
                .collect()
        };
        assert_eq!(
            gone(&[]),
            ["amd-torch-device-gfx90a", "amd-torch-device-gfx11-generic"]
        );
        assert_eq!(gone(&["gfx1101".into()]), ["amd-torch-device-gfx90a"]);
    }

    #[test]
    fn names_normalize_as_pep_503_says() {
        assert_eq!(normalize_extra("Device_GFX942"), "device-gfx942");
        assert_eq!(normalize_extra("amd.torch--device"), "amd-torch-device");
    }
}
