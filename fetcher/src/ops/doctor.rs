//! `doctor`: can programs here use device code? Checks the driver, KFD,
//! /dev/kfd and render nodes, container signs, variables that restrict
//! GPUs, and that every local target is covered by an installed archive, and
//! has every kernel-database file it may load, for every installed manifest.

use rocm_kpack_cli::plural;
use std::fs;

use serde::Serialize;

use crate::detect::LocalTargets;
use crate::plan::expected_archive;
use crate::resolve::{arch_serves, needs, Scan};
use crate::sources::Sources;
use crate::unlisted::BinaryCoverage;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Fine.
    Ok,
    /// For information.
    Info,
    /// Probably fine, but worth knowing.
    Warning,
    /// Device code will not work as installed.
    Problem,
}

/// One check.
#[derive(Debug, Serialize)]
pub struct Check {
    /// What was checked (`driver`, `coverage COMPONENT TARGET`, ...).
    pub check: String,
    /// How it came out.
    pub outcome: Outcome,
    /// What was seen.
    pub detail: String,
}

/// What `doctor` found (its `--json` output).
#[derive(Debug, Serialize)]
pub struct DoctorReport {
    /// The local targets.
    pub targets: Vec<String>,
    /// Every check, in order.
    pub checks: Vec<Check>,
    /// Checks with [`Outcome::Problem`].
    pub problems: usize,
    /// Checks with [`Outcome::Warning`].
    pub warnings: usize,
}

/// Adds the checks of the device distributions of pip-installed bases
/// without a `.kpm`: one missing for a local target is a problem, one
/// installed for no GPU here a warning (`prune --via pip`), as for native
/// packages ([`add_native`]).
pub fn add_pip_devices(report: &mut DoctorReport, s: &crate::pm::pip::NativeStatus) {
    let missing = s.missing.iter().map(|d| {
        (
            format!("pip {} {}", d.base, d.local.join(",")),
            Outcome::Problem,
            format!(
                "{} ({}[{}]) is not installed: run `rocm-kpack-fetch install --auto --via pip`",
                d.dist, d.base, d.extra
            ),
        )
    });
    let unneeded = s.unneeded.iter().map(|d| {
        (
            format!("pip {} {}", d.base, d.target),
            Outcome::Warning,
            format!(
                "{} is installed for no GPU here ({} bytes): `rocm-kpack-fetch prune --via pip` removes it",
                d.dist, d.size
            ),
        )
    });
    for (check, outcome, detail) in missing.chain(unneeded) {
        match outcome {
            Outcome::Problem => report.problems += 1,
            Outcome::Warning => report.warnings += 1,
            Outcome::Ok | Outcome::Info => {}
        }
        report.checks.push(Check {
            check,
            outcome,
            detail,
        });
    }
}

/// Variables that restrict which GPUs a process uses (not what to install).
pub const VISIBLE_DEVICE_VARS: [&str; 3] = [
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
];

/// Runs every check for `local`'s targets and the manifests of `scan`;
/// `visible_devices` are the [`VISIBLE_DEVICE_VARS`] that are set, with
/// their values; `unlisted` is the coverage of the host binaries without
/// a manifest ([`crate::unlisted::check`]); `sources` the configured
/// sources ([`Sources::configured`]), whose skipped entries are warnings.
pub fn doctor(
    local: &LocalTargets,
    scan: &Scan,
    visible_devices: &[(String, String)],
    unlisted: &[BinaryCoverage],
    sources: &Sources,
) -> DoctorReport {
    let d = &local.detection;
    let overridden = d.arch_override.is_some();
    let mut checks = Vec::new();
    let mut add = |check: &str, outcome, detail: String| {
        checks.push(Check {
            check: check.to_string(),
            outcome,
            detail,
        })
    };
    // Without a GPU, the hardware checks are problems unless the user chose
    // targets explicitly (then they are only notes).
    let hw_fail = if overridden {
        Outcome::Warning
    } else {
        Outcome::Problem
    };

    match (d.driver_loaded, &d.driver_initstate) {
        (true, Some(s)) => add(
            "driver",
            Outcome::Ok,
            format!("amdgpu loaded (initstate {s})"),
        ),
        (true, None) => add("driver", Outcome::Ok, "amdgpu built into the kernel".into()),
        (false, _) => add("driver", hw_fail, "amdgpu is not loaded".into()),
    }
    match &d.topology {
        Some(t) => add(
            "kfd-topology",
            Outcome::Ok,
            format!(
                "{t}: {}, {}",
                plural(d.gpu_nodes.len(), "GPU node", "GPU nodes"),
                plural(d.cpu_nodes.len(), "CPU node", "CPU nodes")
            ),
        ),
        None => add("kfd-topology", hw_fail, "no KFD topology in sysfs".into()),
    }
    if d.gpu_nodes.is_empty() {
        add("gpus", hw_fail, "no GPU node".into());
    } else {
        add(
            "gpus",
            Outcome::Ok,
            format!("detected {}", d.detected_targets.join(", ")),
        );
    }
    if let Some(o) = &d.arch_override {
        add(
            "targets",
            Outcome::Info,
            format!("{} from {}", o.targets.join(", "), o.source),
        );
    }
    if let Some(h) = &d.hsa_override {
        add(
            "hsa-override",
            Outcome::Info,
            format!(
                "HSA_OVERRIDE_GFX_VERSION={}: GPUs are treated as {}",
                h.value, h.processor
            ),
        );
    }
    let kfd = &d.kfd_device;
    match (kfd.usable, d.gpu_nodes.is_empty()) {
        (true, _) => add("kfd-device", Outcome::Ok, format!("{} can be opened", kfd.path)),
        (false, false) => add(
            "kfd-device",
            Outcome::Problem,
            format!(
                "{} cannot be opened ({}): programs run by this user cannot use the GPUs (group render/video? device passed to the container?)",
                kfd.path,
                kfd.error.as_deref().unwrap_or("unknown error")
            ),
        ),
        (false, true) => add(
            "kfd-device",
            hw_fail,
            format!("{} cannot be opened ({})", kfd.path, kfd.error.as_deref().unwrap_or("unknown error")),
        ),
    }
    for node in &d.gpu_nodes {
        if let Some(r) = node.render_node.as_ref().filter(|r| !r.usable) {
            add(
                "render-node",
                Outcome::Warning,
                format!(
                    "node {} ({}): {} cannot be opened ({}); this process cannot use that GPU",
                    node.node_id,
                    node.target,
                    r.path,
                    r.error.as_deref().unwrap_or("unknown error")
                ),
            );
        }
    }
    if !d.container_hints.is_empty() {
        add(
            "container",
            Outcome::Info,
            format!(
                "running in a container ({}): sysfs shows every GPU of the host",
                d.container_hints.join(", ")
            ),
        );
    }
    for (var, v) in visible_devices {
        add(
            "visible-devices",
            Outcome::Info,
            format!("{var}={v} restricts which GPUs processes use, not what is installed"),
        );
    }
    for w in &d.warnings {
        add("detection", Outcome::Warning, w.clone());
    }

    add(
        "manifests",
        Outcome::Info,
        format!(
            "{} in {}",
            plural(
                scan.manifests.len(),
                "installed manifest",
                "installed manifests"
            ),
            plural(
                scan.kpack_dirs.len(),
                ".kpack directory",
                ".kpack directories"
            )
        ),
    );
    if let Some(skipped) = sources.skipped() {
        add("sources", Outcome::Warning, skipped);
    }
    for r in &scan.refused {
        add(
            "manifest",
            Outcome::Problem,
            format!("{} refused: {}", r.path.display(), r.error),
        );
    }
    let mut state_warnings = Vec::new();
    let states = super::load_states(&scan.kpack_dirs, &mut state_warnings);
    for w in state_warnings {
        add("state", Outcome::Warning, w);
    }
    for m in &scan.manifests {
        let n = needs(&m.manifest, &local.ids);
        let state = states.get(&m.kpack_dir);
        for target in &local.ids {
            let name = format!("coverage {} {}", m.manifest.component, target);
            if n.uncovered.contains(&target.to_string()) {
                add(
                    &name,
                    Outcome::Warning,
                    format!(
                        "{} publishes no device code for {target}: its GPU code will not run here",
                        m.manifest.component
                    ),
                );
                continue;
            }
            // Usable: some archive serving the target is present with the
            // size it must have (the manifest's, or that of the archive
            // rebuilt here; verify re-hashes).
            let serving: Vec<_> = m
                .manifest
                .kpack_files
                .iter()
                .filter(|f| f.architectures.iter().any(|a| arch_serves(target, a)))
                .collect();
            let present = serving.iter().find(|f| {
                let recorded = state.and_then(|s| s.archives.get(&f.filename));
                let sizes = expected_archive(f, recorded);
                fs::metadata(m.archive_path(f))
                    .is_ok_and(|meta| sizes.iter().any(|e| e.size == meta.len()))
            });
            match present {
                Some(f) => add(
                    &name,
                    Outcome::Ok,
                    format!("{}", m.archive_path(f).display()),
                ),
                None => add(
                    &name,
                    Outcome::Problem,
                    format!(
                        "not installed ({}): run `rocm-kpack-fetch install --auto`",
                        serving
                            .iter()
                            .map(|f| f.filename.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ),
            }
            // Kernel-database files the target may load: all of them must
            // be there, or the library fails at its first call that needs one.
            let databases: Vec<_> = m
                .manifest
                .database_files
                .iter()
                .filter(|f| f.architectures.iter().any(|a| arch_serves(target, a)))
                .collect();
            if databases.is_empty() {
                continue;
            }
            let name = format!("databases {} {}", m.manifest.component, target);
            let missing: Vec<&str> = databases
                .iter()
                .filter(|f| {
                    !fs::metadata(m.database_path(&f.path)).is_ok_and(|meta| meta.len() == f.size)
                })
                .map(|f| f.path.as_str())
                .collect();
            if missing.is_empty() {
                add(
                    &name,
                    Outcome::Ok,
                    format!(
                        "{} present",
                        plural(databases.len(), "database file", "database files")
                    ),
                );
            } else {
                add(
                    &name,
                    Outcome::Problem,
                    format!(
                        "not installed ({}): run `rocm-kpack-fetch install --auto`",
                        missing.join(", ")
                    ),
                );
            }
        }
    }
    // Trees without a manifest: what the loader finds, setting by setting.
    for b in unlisted {
        let shown = b.binary.display();
        for f in &b.found {
            add(
                &format!("coverage {shown} {}", f.target),
                Outcome::Ok,
                format!("{} ({})", f.archive.display(), f.arch),
            );
        }
        for m in &b.missing {
            add(
                &format!("coverage {shown} {}", m.target),
                Outcome::Problem,
                format!(
                    "no .kpm and no archive ({}): {}",
                    m.searched.join(", "),
                    m.advice()
                ),
            );
        }
    }

    let problems = checks
        .iter()
        .filter(|c| c.outcome == Outcome::Problem)
        .count();
    let warnings = checks
        .iter()
        .filter(|c| c.outcome == Outcome::Warning)
        .count();
    DoctorReport {
        targets: d.targets.clone(),
        checks,
        problems,
        warnings,
    }
}

/// Adds the checks of AMD's native device packages: one missing for a
/// local target is a problem (install it with `install --auto --via
/// apt|dnf`), one installed for no local target a warning (`prune`).
pub fn add_native(report: &mut DoctorReport, native: &crate::pm::native::NativeCoverage) {
    for m in &native.missing {
        report.checks.push(Check {
            check: format!("native {} {}", m.generic, m.group),
            outcome: Outcome::Problem,
            detail: format!(
                "{} is not installed (for {}): run `rocm-kpack-fetch install --auto --via apt|dnf`",
                m.name,
                m.targets.join(", ")
            ),
        });
        report.problems += 1;
    }
    for u in &native.unused {
        report.checks.push(Check {
            check: format!("native {} {}", u.host, u.target),
            outcome: Outcome::Warning,
            detail: format!(
                "{} is installed for {}, which is no GPU here: `rocm-kpack-fetch prune` removes it",
                u.package.name, u.target
            ),
        });
        report.warnings += 1;
    }
}
