//! `rocm-kpack-fetch detect`: print what `rocm_kpack::detect` finds, as text
//! for people or as JSON (the serialization of [`Detection`]).

use std::io::{self, Write};

use anyhow::Context;
use rocm_kpack::detect::{
    detect, processor_name, DetectOptions, Detection, GpuNode, ARCH_OVERRIDE_ENV, HSA_OVERRIDE_ENV,
    TOPOLOGY_PATHS,
};

use crate::cli::{DetectArgs, TargetArgs};
use crate::{ExitStatus, UsageError};

/// Runs `detect`: exit 0 with targets, 3 without.
pub fn run(args: &DetectArgs) -> anyhow::Result<ExitStatus> {
    let detection = local_detection(&args.targets)?;
    let mut out = io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &detection).context("writing JSON")?;
        writeln!(out).context("writing JSON")?;
    } else {
        write_text(&mut out, &detection).context("writing output")?;
        for warning in &detection.warnings {
            eprintln!("warning: {warning}");
        }
    }
    out.flush().context("writing output")?;
    Ok(if detection.has_targets() {
        ExitStatus::Success
    } else {
        ExitStatus::NoGpu
    })
}

/// Detection with the command line's `--sysfs-root` / `--arch` and the
/// override variables of this process's environment (`--arch` wins over
/// `ROCM_KPACK_ARCH_OVERRIDE`). For every command that needs local targets.
pub fn local_detection(args: &TargetArgs) -> anyhow::Result<Detection> {
    let opts = options(args)?;
    detect(&args.sysfs_root, &opts)
        .with_context(|| format!("cannot detect GPUs below {}", args.sysfs_root.display()))
}

fn options(args: &TargetArgs) -> anyhow::Result<DetectOptions> {
    // An env override that --arch replaces is not even parsed.
    let arch_env = match args.arch {
        Some(_) => None,
        None => env_var(ARCH_OVERRIDE_ENV)?,
    };
    let hsa_env = env_var(HSA_OVERRIDE_ENV)?;
    let mut opts = DetectOptions::from_env_values(arch_env.as_deref(), hsa_env.as_deref())
        .map_err(|e| UsageError(e.to_string()))?;
    if let Some(arch) = &args.arch {
        opts.arch_override = Some(arch.clone());
    }
    Ok(opts)
}

fn env_var(name: &str) -> anyhow::Result<Option<String>> {
    match std::env::var_os(name) {
        None => Ok(None),
        Some(value) => match value.into_string() {
            Ok(v) => Ok(Some(v)),
            Err(_) => Err(UsageError(format!("{name} is not valid UTF-8")).into()),
        },
    }
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
        None if d.targets.is_empty() => {
            writeln!(out, "no AMD GPU found: {}", no_gpu_reason(d))?;
            writeln!(
                out,
                "to choose targets anyway, pass --arch LIST or set {ARCH_OVERRIDE_ENV} (e.g. gfx1100,gfx90a)"
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
