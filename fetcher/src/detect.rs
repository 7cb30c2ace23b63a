//! Local GPU targets for the commands that install: detection (or the
//! override) with [`local_detection`], the targets parsed as target ids
//! ([`local_targets`]), and the human-readable report of a [`Detection`]
//! ([`write_text`]; its JSON is the serialization of [`Detection`]).

use std::io::{self, Write};
use std::path::Path;

use anyhow::Context;
use rocm_kpack_format::target::TargetId;
use rocm_kpack_loader::detect::{
    detect, processor_name, ArchOverride, DetectOptions, Detection, GpuNode, OverrideSource,
    ARCH_OVERRIDE_ENV, BOOTSTRAP_DISABLE_ENV, BOOTSTRAP_FORCE_ENV, HSA_OVERRIDE_ENV,
    TOPOLOGY_PATHS,
};

/// Applies AMD's `rocm-bootstrap` variables to `opts`, as that detector
/// reads them, when neither `--target` nor `ROCM_KPACK_ARCH_OVERRIDE` set
/// the targets (ours win: they name this tool). `disable` is
/// `ROCM_BOOTSTRAP_DISABLE_DETECTION`: exactly `1` turns detection off,
/// and then `force` is not looked at; `force` is
/// `ROCM_BOOTSTRAP_FORCE_GFX_ARCH`, a comma-separated list that replaces
/// detection. So one setting in a Dockerfile configures both detectors
/// (docs/detection.md "Overrides and environment"). A bad list is an error (rocm-bootstrap
/// raises on an unknown target too).
pub fn apply_bootstrap_env(
    opts: &mut DetectOptions,
    disable: Option<&str>,
    force: Option<&str>,
) -> Result<(), String> {
    if opts.arch_override.is_some() {
        return Ok(());
    }
    if disable == Some("1") {
        opts.detection_disabled = Some(format!("{BOOTSTRAP_DISABLE_ENV}=1"));
        return Ok(());
    }
    if let Some(list) = force.filter(|v| !v.trim().is_empty()) {
        let o = ArchOverride::parse(OverrideSource::Bootstrap, list)
            .map_err(|e| format!("{BOOTSTRAP_FORCE_ENV}: {e}"))?;
        opts.arch_override = Some(o);
    }
    Ok(())
}

/// Detection below `sysfs_root` (`/` for this machine) with `opts` (the
/// overrides; the command line builds them from `--target` and the
/// environment).
pub fn local_detection(sysfs_root: &Path, opts: &DetectOptions) -> anyhow::Result<Detection> {
    detect(sysfs_root, opts)
        .with_context(|| format!("cannot detect GPUs below {}", sysfs_root.display()))
}

/// Detection plus its targets parsed as target ids.
#[derive(Debug, Clone)]
pub struct LocalTargets {
    /// What detection found (or the override).
    pub detection: Detection,
    /// The targets to install for.
    pub ids: Vec<TargetId>,
}

/// Detects (or takes the override) and parses the targets. Unparsable
/// names from sysfs are dropped with a warning in the detection.
pub fn local_targets(sysfs_root: &Path, opts: &DetectOptions) -> anyhow::Result<LocalTargets> {
    let mut detection = local_detection(sysfs_root, opts)?;
    let mut ids = Vec::new();
    for t in &detection.targets {
        match TargetId::parse(t) {
            Ok(id) => ids.push(id),
            Err(e) => detection
                .warnings
                .push(format!("ignoring target {t:?}: {e}")),
        }
    }
    Ok(LocalTargets { detection, ids })
}

/// Where the targets came from, for messages: `detected`, or `from` the
/// override's source.
pub fn targets_origin(d: &Detection) -> String {
    match &d.arch_override {
        Some(o) => format!("from {}", o.source),
        None => "detected".to_string(),
    }
}

/// The message for "no targets": what detection saw and how to override.
pub fn no_targets_message(d: &Detection) -> String {
    let mut text = Vec::new();
    // The detection report's own wording says why there is no GPU.
    if write_text(&mut text, d).is_err() {
        return "no AMD GPU found; pass --target TARGET".into();
    }
    String::from_utf8_lossy(&text).trim_end().to_string()
}

/// The human-readable report: one line per GPU node, then the targets, or a
/// plain statement of why there is no GPU.
pub fn write_text(out: &mut impl Write, d: &Detection) -> io::Result<()> {
    if d.root.as_os_str() != "/" {
        writeln!(out, "sysfs root: {}", d.root.display())?;
    }
    if let Some(topology) = &d.topology {
        let generation = d
            .generation_id
            .map_or(String::new(), |g| format!(" (generation {g})"));
        writeln!(
            out,
            "KFD topology {topology}{generation}: {} CPU node{}, {} GPU node{}",
            d.cpu_nodes.len(),
            plural(d.cpu_nodes.len()),
            d.gpu_nodes.len(),
            plural(d.gpu_nodes.len()),
        )?;
    }
    for node in &d.gpu_nodes {
        writeln!(out, "{}", node_line(node, d))?;
    }
    if let Some(hsa) = &d.hsa_override {
        writeln!(
            out,
            "{HSA_OVERRIDE_ENV}={} is set: every GPU is treated as {}, as the ROCm runtime does",
            hsa.value, hsa.processor
        )?;
    }
    if !d.gpu_nodes.is_empty() && !d.kfd_device.usable {
        writeln!(
            out,
            "note: {} cannot be opened ({}); programs run by this user cannot use the GPUs \
             (group render/video? device passed to the container?)",
            d.kfd_device.path,
            d.kfd_device.error.as_deref().unwrap_or("unknown error"),
        )?;
    }
    if !d.container_hints.is_empty() {
        let why = if d.gpu_nodes.is_empty() {
            ""
        } else {
            " (sysfs shows every GPU of the host; those whose render node cannot be opened \
             are not usable here)"
        };
        writeln!(out, "container: {}{why}", d.container_hints.join(", "))?;
    }

    match &d.arch_override {
        Some(o) => {
            let found = if d.detected_targets.is_empty() {
                "nothing".to_string()
            } else {
                d.detected_targets.join(", ")
            };
            writeln!(
                out,
                "targets: {} (from {}, replacing detection, which found {found})",
                o.targets.join(", "),
                o.source
            )?;
        }
        None if d.detection_disabled.is_some() => {
            writeln!(
                out,
                "no targets: detection is disabled ({})",
                d.detection_disabled.as_deref().unwrap_or_default()
            )?;
            writeln!(
                out,
                "to choose targets, pass --target TARGET or set {ARCH_OVERRIDE_ENV} or {BOOTSTRAP_FORCE_ENV} (and unset {BOOTSTRAP_DISABLE_ENV})"
            )?;
        }
        None if d.targets.is_empty() => {
            writeln!(out, "no AMD GPU found: {}", no_gpu_reason(d))?;
            writeln!(
                out,
                "to choose targets anyway, pass --target TARGET or set {ARCH_OVERRIDE_ENV} (e.g. gfx1100,gfx90a)"
            )?;
        }
        None => writeln!(out, "targets: {}", d.targets.join(", "))?,
    }
    Ok(())
}

fn node_line(node: &GpuNode, d: &Detection) -> String {
    let mut target = node.target.clone();
    if d.hsa_override.is_some() {
        let sysfs = processor_name(node.gfx_target_version)
            .unwrap_or_else(|| format!("gfx_target_version {}", node.gfx_target_version));
        target.push_str(&format!(" (sysfs: {sysfs})"));
    }
    let cus = node
        .compute_units
        .map_or("? CUs".to_string(), |c| format!("{c} CUs"));
    let render = match &node.render_node {
        Some(r) if r.usable => format!("{} usable", r.path),
        Some(r) => format!(
            "{} not usable: {}",
            r.path,
            r.error.as_deref().unwrap_or("unknown error")
        ),
        None => "no render node".to_string(),
    };
    format!(
        "node {}: {target}, {cus}, device {:#06x}, PCI {}, {render}",
        node.node_id, node.device_id, node.pci_address
    )
}

fn no_gpu_reason(d: &Detection) -> String {
    match (&d.topology, d.driver_loaded) {
        (None, false) => format!(
            "the amdgpu driver is not loaded and there is no KFD topology ({})",
            TOPOLOGY_PATHS[0]
        ),
        (None, true) => format!(
            "amdgpu is loaded but there is no KFD topology ({}); the kernel may lack KFD (HSA_AMD) support",
            TOPOLOGY_PATHS[0]
        ),
        (Some(_), loaded) => format!(
            "KFD lists {} CPU node{} and no GPU node{}",
            d.cpu_nodes.len(),
            plural(d.cpu_nodes.len()),
            if loaded { "" } else { " (amdgpu is not loaded)" }
        ),
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(
        opts: &mut DetectOptions,
        disable: Option<&str>,
        force: Option<&str>,
    ) -> Option<Vec<String>> {
        apply_bootstrap_env(opts, disable, force).unwrap_or_else(|e| panic!("{e}"));
        opts.arch_override.as_ref().map(|o| o.targets.clone())
    }

    /// rocm-bootstrap's order (its detect.py): disable (exactly `1`)
    /// before force; ours (`--target`, `ROCM_KPACK_ARCH_OVERRIDE`) before
    /// both.
    #[test]
    fn bootstrap_variables_follow_rocm_bootstrap_below_our_overrides() {
        let mut o = DetectOptions::default();
        assert_eq!(
            apply(&mut o, None, Some("gfx942, gfx90a")),
            Some(vec!["gfx90a".into(), "gfx942".into()])
        );
        assert_eq!(
            o.arch_override.as_ref().map(|a| a.source),
            Some(OverrideSource::Bootstrap)
        );

        let mut o = DetectOptions::default();
        assert_eq!(apply(&mut o, Some("1"), Some("gfx942")), None);
        assert_eq!(
            o.detection_disabled.as_deref(),
            Some("ROCM_BOOTSTRAP_DISABLE_DETECTION=1")
        );

        // Only `1` disables, as rocm-bootstrap compares.
        let mut o = DetectOptions::default();
        assert_eq!(apply(&mut o, Some("true"), None), None);
        assert!(o.detection_disabled.is_none());
        assert_eq!(apply(&mut o, Some("0"), Some(" ")), None);

        let mut o =
            DetectOptions::from_env_values(Some("gfx1100"), None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            apply(&mut o, Some("1"), Some("gfx942")),
            Some(vec!["gfx1100".into()])
        );
        assert!(o.detection_disabled.is_none());

        let mut o = DetectOptions::default();
        let Err(err) = apply_bootstrap_env(&mut o, None, Some("gfx942,../x")) else {
            panic!("a bad list was accepted");
        };
        assert!(err.starts_with("ROCM_BOOTSTRAP_FORCE_GFX_ARCH: "), "{err}");
    }
}
