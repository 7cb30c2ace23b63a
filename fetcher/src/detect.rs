//! Local GPU targets for the commands that install: detection (or the
//! override) with [`local_detection`], the targets parsed as target ids
//! ([`local_targets`]), and the human-readable report of a [`Detection`]
//! ([`write_text`]; its JSON is the serialization of [`Detection`]).

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use rocm_kpack_format::target::TargetId;
use rocm_kpack_loader::detect::{
    detect, processor_name, ArchOverride, DetectOptions, Detection, GpuNode, HsaOverride,
    OverrideSource, ARCH_OVERRIDE_ENV, BOOTSTRAP_DISABLE_ENV, BOOTSTRAP_FORCE_ENV, CONDA_ARCH_ENV,
    HSA_OVERRIDE_ENV, TOPOLOGY_PATHS,
};

/// The override variables other tools read, as this process found them
/// (`None`: unset).
#[derive(Debug, Clone, Default)]
pub struct ToolEnv {
    /// `ROCM_BOOTSTRAP_DISABLE_DETECTION` (rocm-bootstrap's).
    pub bootstrap_disable: Option<String>,
    /// `ROCM_BOOTSTRAP_FORCE_GFX_ARCH` (rocm-bootstrap's).
    pub bootstrap_force: Option<String>,
    /// `UV_AMD_GPU_ARCHITECTURE` (uv's).
    pub uv: Option<String>,
    /// `CONDA_OVERRIDE_AMDGPU_ARCH` (conda's and rattler's).
    pub conda: Option<String>,
}

/// Applies the override variables of other tools to `opts`, when neither
/// `--target` nor `ROCM_KPACK_ARCH_OVERRIDE` set the targets (ours win:
/// they name this tool). In order, the first that is set decides:
///
/// 1. `ROCM_BOOTSTRAP_DISABLE_DETECTION`: exactly `1` turns detection off,
///    as AMD's `rocm-bootstrap` compares;
/// 2. `ROCM_BOOTSTRAP_FORCE_GFX_ARCH`: a comma-separated list;
/// 3. `UV_AMD_GPU_ARCHITECTURE`: uv's, one target (`gfx1100`), or a list;
/// 4. `CONDA_OVERRIDE_AMDGPU_ARCH`: the ISA version of the `__amdgpu_arch`
///    virtual package (conda/ceps #189), `MAJOR.MINOR.STEPPING` (`9.4.2`
///    is gfx942), or a target name.
///
/// So one line in a Dockerfile configures every tool (docs/detection.md
/// "Overrides and environment"). A value that names no known processor is
/// an error, as for `--target` ([`check_override`]).
pub fn apply_tool_env(opts: &mut DetectOptions, env: &ToolEnv) -> Result<(), String> {
    if opts.arch_override.is_some() {
        return Ok(());
    }
    if env.bootstrap_disable.as_deref() == Some("1") {
        opts.detection_disabled = Some(format!("{BOOTSTRAP_DISABLE_ENV}=1"));
        return Ok(());
    }
    let set = |v: &Option<String>| v.clone().filter(|v| !v.trim().is_empty());
    let chosen = if let Some(list) = set(&env.bootstrap_force) {
        Some((OverrideSource::Bootstrap, list))
    } else if let Some(list) = set(&env.uv) {
        Some((OverrideSource::Uv, list))
    } else if let Some(value) = set(&env.conda) {
        Some((OverrideSource::Conda, conda_target(&value)?))
    } else {
        None
    };
    if let Some((source, list)) = chosen {
        let o = ArchOverride::parse(source, &list).map_err(|e| format!("{source}: {e}"))?;
        opts.arch_override = Some(o);
    }
    Ok(())
}

/// The target of a `CONDA_OVERRIDE_AMDGPU_ARCH` value: an ISA version
/// (`9.4.2`, as `HSA_OVERRIDE_GFX_VERSION` spells it) or a target name.
fn conda_target(value: &str) -> Result<String, String> {
    let value = value.trim();
    if value.starts_with("gfx") {
        return Ok(value.to_string());
    }
    HsaOverride::parse(value).map(|o| o.processor).map_err(|_| {
        format!(
            "{CONDA_ARCH_ENV}={value:?}: expected the ISA version MAJOR.MINOR.STEPPING of a \
             processor (9.4.2 is gfx942) or a target name"
        )
    })
}

/// Refuses an override whose targets the family table does not know,
/// with the same check and hint as `--target`
/// (`rocm_kpack_pkgspec::targets::check_target`): `gfxdead` in an
/// environment variable is as wrong as on the command line.
pub fn check_override(opts: &DetectOptions) -> Result<(), String> {
    let Some(o) = &opts.arch_override else {
        return Ok(());
    };
    for t in &o.targets {
        rocm_kpack_pkgspec::targets::check_target(t).map_err(|e| format!("{}: {e}", o.source))?;
    }
    Ok(())
}

/// Detection failed below a sysfs root.
#[derive(Debug, thiserror::Error)]
#[error("cannot detect GPUs below {}", root.display())]
pub struct DetectError {
    /// The sysfs root detection read (`/` for this machine).
    pub root: PathBuf,
    /// Why.
    #[source]
    pub source: rocm_kpack_loader::Error,
}

/// Detection below `sysfs_root` (`/` for this machine) with `opts` (the
/// overrides; the command line builds them from `--target` and the
/// environment).
pub fn local_detection(sysfs_root: &Path, opts: &DetectOptions) -> Result<Detection, DetectError> {
    detect(sysfs_root, opts).map_err(|source| DetectError {
        root: sysfs_root.to_path_buf(),
        source,
    })
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
pub fn local_targets(sysfs_root: &Path, opts: &DetectOptions) -> Result<LocalTargets, DetectError> {
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

    fn env(
        disable: Option<&str>,
        force: Option<&str>,
        uv: Option<&str>,
        conda: Option<&str>,
    ) -> ToolEnv {
        let own = |v: Option<&str>| v.map(str::to_string);
        ToolEnv {
            bootstrap_disable: own(disable),
            bootstrap_force: own(force),
            uv: own(uv),
            conda: own(conda),
        }
    }

    fn apply(opts: &mut DetectOptions, e: &ToolEnv) -> Option<(OverrideSource, Vec<String>)> {
        apply_tool_env(opts, e).unwrap_or_else(|e| panic!("{e}"));
        opts.arch_override
            .as_ref()
            .map(|o| (o.source, o.targets.clone()))
    }

    /// rocm-bootstrap's order (its detect.py): disable (exactly `1`)
    /// before force; ours (`--target`, `ROCM_KPACK_ARCH_OVERRIDE`) before
    /// both; then uv's, then conda's.
    #[test]
    fn tool_variables_follow_their_precedence_below_our_overrides() {
        let mut o = DetectOptions::default();
        assert_eq!(
            apply(
                &mut o,
                &env(None, Some("gfx942, gfx90a"), Some("gfx1100"), None)
            ),
            Some((
                OverrideSource::Bootstrap,
                vec!["gfx90a".into(), "gfx942".into()]
            ))
        );
        let mut o = DetectOptions::default();
        assert_eq!(
            apply(&mut o, &env(Some("1"), Some("gfx942"), None, None)),
            None
        );
        assert_eq!(
            o.detection_disabled.as_deref(),
            Some("ROCM_BOOTSTRAP_DISABLE_DETECTION=1")
        );
        // Only `1` disables, as rocm-bootstrap compares.
        let mut o = DetectOptions::default();
        assert_eq!(apply(&mut o, &env(Some("true"), None, None, None)), None);
        assert!(o.detection_disabled.is_none());
        assert_eq!(apply(&mut o, &env(Some("0"), Some(" "), None, None)), None);

        let mut o = DetectOptions::default();
        assert_eq!(
            apply(&mut o, &env(None, None, Some("gfx1100"), Some("9.4.2"))),
            Some((OverrideSource::Uv, vec!["gfx1100".into()]))
        );
        let mut o = DetectOptions::default();
        assert_eq!(
            apply(&mut o, &env(None, None, None, Some("9.4.2"))),
            Some((OverrideSource::Conda, vec!["gfx942".into()]))
        );
        let mut o = DetectOptions::default();
        assert_eq!(
            apply(&mut o, &env(None, None, None, Some("9.0.10"))),
            Some((OverrideSource::Conda, vec!["gfx90a".into()]))
        );

        let mut o =
            DetectOptions::from_env_values(Some("gfx1100"), None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            apply(
                &mut o,
                &env(Some("1"), Some("gfx942"), Some("gfx90a"), None)
            ),
            Some((OverrideSource::Environment, vec!["gfx1100".into()]))
        );
        assert!(o.detection_disabled.is_none());

        let mut o = DetectOptions::default();
        let Err(err) = apply_tool_env(&mut o, &env(None, Some("gfx942,../x"), None, None)) else {
            panic!("a bad list was accepted");
        };
        assert!(err.starts_with("ROCM_BOOTSTRAP_FORCE_GFX_ARCH: "), "{err}");
        let mut o = DetectOptions::default();
        assert!(apply_tool_env(&mut o, &env(None, None, None, Some("banana"))).is_err());
    }

    /// An override naming a processor the table does not know is refused,
    /// whichever variable it came from.
    #[test]
    fn overrides_are_checked_against_the_family_table() {
        for e in [
            env(None, Some("gfxdead"), None, None),
            env(None, None, Some("gfx9999"), None),
        ] {
            let mut o = DetectOptions::default();
            apply_tool_env(&mut o, &e).unwrap_or_else(|e| panic!("{e}"));
            let Err(err) = check_override(&o) else {
                panic!("{e:?} was accepted");
            };
            assert!(err.contains("gfx"), "{err}");
        }
        let o =
            DetectOptions::from_env_values(Some("gfxdead"), None).unwrap_or_else(|e| panic!("{e}"));
        let err = check_override(&o).expect_err("ROCM_KPACK_ARCH_OVERRIDE=gfxdead");
        assert!(err.starts_with("ROCM_KPACK_ARCH_OVERRIDE: "), "{err}");
        let o = DetectOptions::from_env_values(Some("gfx942:sramecc+,gfx1100"), None)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(check_override(&o), Ok(()));
    }
}
