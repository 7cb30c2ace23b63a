//! Local AMD GPU detection from the kernel's KFD topology in sysfs — no ROCm
//! user space needed. The one implementation behind `rocm-kpack-fetch detect`
//! and the preload shim.
//!
//! Everything is read below a root directory (`/` on a real system) so tests
//! point it at fixture trees. The scan is bracketed by `generation_id` reads
//! and repeated when the topology changed underneath it. Problems with one
//! node (unreadable files, junk lines, unnameable versions) become warnings
//! and skip that node; only an unusable root is an error.

mod gfx;
mod overrides;
mod properties;

use std::collections::BTreeSet;
use std::fmt;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Serialize, Serializer};

pub use gfx::{
    processor_name, target_id, CAP_SRAM_EDC_SUPPORTED, SRAMECC_PROCESSORS, XNACK_PROCESSORS,
};
pub use overrides::{
    ArchOverride, HsaOverride, OverrideSource, ARCH_OVERRIDE_ENV, BOOTSTRAP_DISABLE_ENV,
    BOOTSTRAP_FORCE_ENV, CONDA_ARCH_ENV, HSA_OVERRIDE_ENV, UV_ARCH_ENV,
};
pub use properties::Properties;

use crate::{Error, Result};
use rocm_kpack_format::target::TargetId;

/// ROCm's switch for running a process with xnack on (`1`); anything
/// else, or unset, runs it with xnack off.
pub const HSA_XNACK_ENV: &str = "HSA_XNACK";

/// Test seam: the directory [`local_process_isas`] reads sysfs below
/// instead of `/` (a fixture tree such as `splitter/demo/machines/mi210`).
pub const SYSFS_ROOT_ENV: &str = "ROCM_KPACK_SYSFS_ROOT";

/// Where the topology lives, as seen from the root: the class path first,
/// then the real path it links to.
pub const TOPOLOGY_PATHS: [&str; 2] = [
    "/sys/class/kfd/kfd/topology",
    "/sys/devices/virtual/kfd/kfd/topology",
];

/// The KFD character device.
pub const KFD_DEVICE: &str = "/dev/kfd";

/// Scans attempted before giving up on a topology that keeps changing.
pub const DEFAULT_MAX_SCANS: u32 = 5;

/// sysfs attributes are at most a page; anything past this is not KFD's.
const MAX_SYSFS_FILE: u64 = 64 * 1024;

/// Called with the 1-based attempt number after a scan has read the nodes and
/// before `generation_id` is read again (a test seam for hot-plug).
pub type ScanHook = Arc<dyn Fn(u32) + Send + Sync>;

/// What [`detect`] should honour besides sysfs.
#[derive(Clone)]
pub struct DetectOptions {
    /// Replaces the detected targets (`--target` / `ROCM_KPACK_ARCH_OVERRIDE`
    /// / `ROCM_BOOTSTRAP_FORCE_GFX_ARCH`).
    pub arch_override: Option<ArchOverride>,
    /// Why detection yields no targets although sysfs is read (the
    /// fetcher's `ROCM_BOOTSTRAP_DISABLE_DETECTION=1`); `arch_override`
    /// still wins.
    pub detection_disabled: Option<String>,
    /// `HSA_OVERRIDE_GFX_VERSION`: every GPU node is named as this version.
    pub hsa_override: Option<HsaOverride>,
    /// Upper bound on scans while `generation_id` keeps changing (at least 1).
    pub max_scans: u32,
    /// See [`ScanHook`].
    pub scan_hook: Option<ScanHook>,
}

impl Default for DetectOptions {
    fn default() -> Self {
        DetectOptions {
            arch_override: None,
            detection_disabled: None,
            hsa_override: None,
            max_scans: DEFAULT_MAX_SCANS,
            scan_hook: None,
        }
    }
}

impl fmt::Debug for DetectOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DetectOptions")
            .field("arch_override", &self.arch_override)
            .field("detection_disabled", &self.detection_disabled)
            .field("hsa_override", &self.hsa_override)
            .field("max_scans", &self.max_scans)
            .field("scan_hook", &self.scan_hook.as_ref().map(|_| "Fn(u32)"))
            .finish()
    }
}

impl DetectOptions {
    /// Options from the values of `ROCM_KPACK_ARCH_OVERRIDE` and
    /// `HSA_OVERRIDE_GFX_VERSION` (pass `None` for unset). Empty or
    /// all-blank values count as unset, as shells tend to leave them.
    pub fn from_env_values(arch: Option<&str>, hsa: Option<&str>) -> Result<DetectOptions> {
        fn set(v: Option<&str>) -> Option<&str> {
            v.filter(|s| !s.trim().is_empty())
        }
        Ok(DetectOptions {
            arch_override: set(arch)
                .map(|v| ArchOverride::parse(OverrideSource::Environment, v))
                .transpose()?,
            hsa_override: set(hsa).map(HsaOverride::parse).transpose()?,
            ..DetectOptions::default()
        })
    }

    /// Options from this process's environment.
    pub fn from_env() -> Result<DetectOptions> {
        let arch = env_utf8(ARCH_OVERRIDE_ENV)?;
        let hsa = env_utf8(HSA_OVERRIDE_ENV)?;
        DetectOptions::from_env_values(arch.as_deref(), hsa.as_deref())
    }
}

fn env_utf8(name: &str) -> Result<Option<String>> {
    match std::env::var_os(name) {
        None => Ok(None),
        Some(v) => v
            .into_string()
            .map(Some)
            .map_err(|_| Error::InvalidArgument(format!("{name} is not valid UTF-8"))),
    }
}

/// The result of a scan. Serializes to the stable JSON of
/// `rocm-kpack-fetch detect --json`; paths other than `root` are as seen from
/// the root (`/dev/dri/renderD128`), so output does not depend on where a
/// fixture tree lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Detection {
    /// The directory everything was read below.
    #[serde(serialize_with = "lossy_path")]
    pub root: PathBuf,
    /// amdgpu is loaded: `initstate` says `live`, or the module directory
    /// exists without `initstate` (built in).
    pub driver_loaded: bool,
    /// Contents of `/sys/module/amdgpu/initstate`, if readable.
    pub driver_initstate: Option<String>,
    /// Which of [`TOPOLOGY_PATHS`] was found; `None`: no KFD topology.
    pub topology: Option<String>,
    /// `generation_id` at the end of the last scan.
    pub generation_id: Option<u64>,
    /// Scans made (more than 1 when the topology changed during a scan).
    pub scans: u32,
    /// Whether this process can open `/dev/kfd` read-write.
    pub kfd_device: DeviceAccess,
    /// Signs of running in a container (sysfs then shows every host GPU).
    pub container_hints: Vec<String>,
    /// Nodes that are not GPUs (CPU nodes; memory-only nodes), by id.
    pub cpu_nodes: Vec<CpuNode>,
    /// GPU nodes, by id.
    pub gpu_nodes: Vec<GpuNode>,
    /// Union of the GPU nodes' target ids, deduplicated and sorted.
    pub detected_targets: Vec<String>,
    /// The target-list override in effect, if any.
    pub arch_override: Option<ArchOverride>,
    /// The `HSA_OVERRIDE_GFX_VERSION` in effect, if any.
    pub hsa_override: Option<HsaOverride>,
    /// Why detection gives no targets ([`DetectOptions::detection_disabled`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detection_disabled: Option<String>,
    /// What to install for: the override's list, else `detected_targets`
    /// (none when detection is disabled).
    pub targets: Vec<String>,
    /// Everything skipped or doubtful, one sentence each.
    pub warnings: Vec<String>,
}

impl Detection {
    /// True when there is something to install for (a GPU or an override).
    pub fn has_targets(&self) -> bool {
        !self.targets.is_empty()
    }
}

/// Whether a device node can be opened read-write by this process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceAccess {
    /// Path as seen from the root.
    pub path: String,
    /// The open succeeded.
    pub usable: bool,
    /// Why the open failed.
    pub error: Option<String>,
}

/// A node that is not a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CpuNode {
    /// Node directory number.
    pub node_id: u32,
    /// `cpu_cores_count`.
    pub cpu_cores_count: u32,
}

/// A GPU node (`simd_count > 0` and `gfx_target_version != 0`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuNode {
    /// Node directory number.
    pub node_id: u32,
    /// The `gpu_id` file (KFD's hash identifying the GPU).
    pub gpu_id: u32,
    /// The `name` file (`ip discovery` or an ASIC name).
    pub name: String,
    /// Target id, e.g. `gfx942:sramecc+` (after `HSA_OVERRIDE_GFX_VERSION`).
    pub target: String,
    /// `gfx_target_version` as sysfs reports it (before any override).
    pub gfx_target_version: u32,
    /// `capability` (0 when absent).
    pub capability: u32,
    /// `simd_count`.
    pub simd_count: u32,
    /// `simd_per_cu`, if reported.
    pub simd_per_cu: Option<u32>,
    /// `simd_count / simd_per_cu`, if `simd_per_cu` is known and nonzero.
    pub compute_units: Option<u32>,
    /// `cpu_cores_count` (nonzero only on old APUs sharing one node).
    pub cpu_cores_count: u32,
    /// `wave_front_size`.
    pub wave_front_size: Option<u32>,
    /// `num_xcc`; 1 on kernels that do not report it.
    pub num_xcc: u32,
    /// `vendor_id` (0x1002 for AMD).
    pub vendor_id: u32,
    /// `device_id` (PCI device id).
    pub device_id: u32,
    /// `domain`.
    pub domain: u32,
    /// `location_id` (PCI bus << 8 | devfn).
    pub location_id: u32,
    /// `domain:bus:device.function` from the two above.
    pub pci_address: String,
    /// `hive_id` (nonzero for XGMI-connected GPUs).
    pub hive_id: u64,
    /// `unique_id`, if reported.
    pub unique_id: Option<u64>,
    /// `drm_render_minor`, if reported and nonzero.
    pub drm_render_minor: Option<u32>,
    /// `/dev/dri/renderD<minor>` and whether this process can open it
    /// (the ROCm thunk drops GPUs whose render node it cannot open).
    pub render_node: Option<DeviceAccess>,
}

/// Detects the GPUs visible below `root` (normally `/`).
///
/// Errors only when `root` is missing or unreadable; everything below it
/// that is missing or malformed is reported in [`Detection::warnings`] or
/// shows as absent.
pub fn detect(root: &Path, opts: &DetectOptions) -> Result<Detection> {
    let meta = fs::metadata(root).map_err(|e| Error::io(root, e))?;
    if !meta.is_dir() {
        return Err(Error::InvalidArgument(format!(
            "sysfs root {} is not a directory",
            root.display()
        )));
    }
    fs::read_dir(root).map_err(|e| Error::io(root, e))?;

    let driver_initstate = read_small(&root.join("sys/module/amdgpu/initstate"))
        .ok()
        .map(|s| s.trim().to_string());
    let driver_loaded = match &driver_initstate {
        Some(state) => state == "live",
        None => root.join("sys/module/amdgpu").is_dir(),
    };

    let topology = TOPOLOGY_PATHS
        .iter()
        .find(|logical| resolve(root, logical).is_dir())
        .copied();
    let scan = match topology {
        Some(logical) => scan_topology(root, logical, opts),
        None => Scan::default(),
    };

    let detected: BTreeSet<&str> = scan.gpu_nodes.iter().map(|n| n.target.as_str()).collect();
    let detected_targets: Vec<String> = detected.into_iter().map(str::to_string).collect();
    let targets = match (&opts.arch_override, &opts.detection_disabled) {
        (Some(o), _) => o.targets.clone(),
        (None, Some(_)) => Vec::new(),
        (None, None) => detected_targets.clone(),
    };
    for w in &scan.warnings {
        tracing::debug!("kfd: {w}");
    }
    Ok(Detection {
        root: root.to_path_buf(),
        driver_loaded,
        driver_initstate,
        topology: topology.map(str::to_string),
        generation_id: scan.generation_id,
        scans: scan.scans,
        kfd_device: probe_device(root, KFD_DEVICE.to_string()),
        container_hints: container_hints(root),
        cpu_nodes: scan.cpu_nodes,
        gpu_nodes: scan.gpu_nodes,
        detected_targets,
        arch_override: opts.arch_override.clone(),
        hsa_override: opts.hsa_override.clone(),
        detection_disabled: opts
            .detection_disabled
            .clone()
            .filter(|_| opts.arch_override.is_none()),
        targets,
        warnings: scan.warnings,
    })
}

/// Targets of this machine for in-process use (the preload shim): detection
/// at `/` with the overrides from the environment.
pub fn local_targets() -> Result<Vec<String>> {
    Ok(detect(Path::new("/"), &DetectOptions::from_env()?)?.targets)
}

/// The ISAs the HIP runtime of a process reports for detected targets:
/// sysfs cannot show xnack (a per-process mode), so processors that have it
/// ([`XNACK_PROCESSORS`]) get `xnack+` when `hsa_xnack` (the value of
/// [`HSA_XNACK_ENV`]) is `1` and `xnack-` otherwise, in canonical feature
/// order: `gfx90a:sramecc+` -> `gfx90a:sramecc+:xnack-`. Targets that
/// already say xnack, other processors and unparsable strings are kept as
/// given; order is kept and repeats are dropped.
pub fn process_isas<S: AsRef<str>>(targets: &[S], hsa_xnack: Option<&str>) -> Vec<String> {
    let xnack_on = hsa_xnack.is_some_and(|v| v.trim() == "1");
    let mut out: Vec<String> = Vec::with_capacity(targets.len());
    for target in targets {
        let target = target.as_ref();
        let isa = match TargetId::parse(target) {
            Ok(id)
                if XNACK_PROCESSORS.contains(&id.processor()) && id.feature("xnack").is_none() =>
            {
                id.with_feature("xnack", xnack_on)
                    .map_or_else(|_| target.to_owned(), |t| t.to_string())
            }
            _ => target.to_owned(),
        };
        if !out.contains(&isa) {
            out.push(isa);
        }
    }
    out
}

/// The targets the preload shim loads code objects for:
/// `ROCM_KPACK_ARCH_OVERRIDE`'s list exactly as given, else this machine's
/// detected targets as process ISAs ([`process_isas`] with `HSA_XNACK`).
/// sysfs is read below `/`, or below [`SYSFS_ROOT_ENV`] when that is set
/// (for tests).
pub fn local_process_isas() -> Result<Vec<String>> {
    let opts = DetectOptions::from_env()?;
    let root = std::env::var_os(SYSFS_ROOT_ENV)
        .filter(|r| !r.is_empty())
        .map_or_else(|| PathBuf::from("/"), PathBuf::from);
    let detection = detect(&root, &opts)?;
    if detection.arch_override.is_some() {
        return Ok(detection.targets);
    }
    let xnack = std::env::var(HSA_XNACK_ENV).ok();
    Ok(process_isas(&detection.targets, xnack.as_deref()))
}

#[derive(Default)]
struct Scan {
    cpu_nodes: Vec<CpuNode>,
    gpu_nodes: Vec<GpuNode>,
    warnings: Vec<String>,
    generation_id: Option<u64>,
    scans: u32,
}

/// Scans until two `generation_id` reads around a scan agree, at most
/// `max_scans` times; warnings of earlier (stale) scans are dropped.
fn scan_topology(root: &Path, logical: &str, opts: &DetectOptions) -> Scan {
    let max_scans = opts.max_scans.max(1);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut warnings = Vec::new();
        let before = read_generation(root, logical, &mut warnings);
        let (cpu_nodes, gpu_nodes) = scan_nodes(root, logical, opts, &mut warnings);
        if let Some(hook) = &opts.scan_hook {
            hook(attempt);
        }
        let mut after_warnings = Vec::new();
        let after = read_generation(root, logical, &mut after_warnings);
        let stable = match (before, after) {
            (Some(b), Some(a)) => b == a,
            // Nothing to compare: take the scan as it is (already warned).
            _ => true,
        };
        if stable || attempt >= max_scans {
            if !stable {
                warnings.push(format!(
                    "{logical}/generation_id changed during each of {attempt} scans; \
                     the topology is still changing and this result may be stale"
                ));
            }
            return Scan {
                cpu_nodes,
                gpu_nodes,
                warnings,
                generation_id: after.or(before),
                scans: attempt,
            };
        }
        tracing::debug!(
            "kfd: generation_id {before:?} -> {after:?} during scan {attempt}; rescanning"
        );
    }
}

fn read_generation(root: &Path, logical: &str, warnings: &mut Vec<String>) -> Option<u64> {
    let path = format!("{logical}/generation_id");
    match read_small(&resolve(root, &path)) {
        Ok(text) => match text.trim().parse::<u64>() {
            Ok(g) => Some(g),
            Err(_) => {
                warnings.push(format!(
                    "{path}: {:?} is not a number; cannot tell whether the topology changed during the scan",
                    text.trim()
                ));
                None
            }
        },
        Err(e) => {
            warnings.push(format!(
                "{path}: {e}; cannot tell whether the topology changed during the scan"
            ));
            None
        }
    }
}

/// Reads every node directory in numeric order.
fn scan_nodes(
    root: &Path,
    logical: &str,
    opts: &DetectOptions,
    warnings: &mut Vec<String>,
) -> (Vec<CpuNode>, Vec<GpuNode>) {
    let nodes_logical = format!("{logical}/nodes");
    let entries = match fs::read_dir(resolve(root, &nodes_logical)) {
        Ok(entries) => entries,
        Err(e) => {
            warnings.push(format!("{nodes_logical}: {e}"));
            return (Vec::new(), Vec::new());
        }
    };
    let mut ids = Vec::new();
    for entry in entries {
        match entry {
            Ok(entry) => {
                let name = entry.file_name();
                match name.to_str().and_then(|s| s.parse::<u32>().ok()) {
                    Some(id) => ids.push(id),
                    None => warnings.push(format!(
                        "{nodes_logical}: ignoring {:?}, not a node number",
                        name.to_string_lossy()
                    )),
                }
            }
            Err(e) => warnings.push(format!("{nodes_logical}: {e}")),
        }
    }
    // Numeric: a string sort would put 10 before 2.
    ids.sort_unstable();

    let mut cpu_nodes = Vec::new();
    let mut gpu_nodes = Vec::new();
    for id in ids {
        match read_node(root, &format!("{nodes_logical}/{id}"), id, opts, warnings) {
            Some(Node::Cpu(n)) => cpu_nodes.push(n),
            Some(Node::Gpu(n)) => gpu_nodes.push(*n),
            None => {}
        }
    }
    (cpu_nodes, gpu_nodes)
}

enum Node {
    Cpu(CpuNode),
    Gpu(Box<GpuNode>),
}

/// Reads one node; `None` (with a warning) when it cannot be used.
fn read_node(
    root: &Path,
    node_logical: &str,
    id: u32,
    opts: &DetectOptions,
    warnings: &mut Vec<String>,
) -> Option<Node> {
    let read = |file: &str| -> std::result::Result<String, String> {
        let path = format!("{node_logical}/{file}");
        read_small(&resolve(root, &path))
            .map_err(|e| format!("node {id}: {path}: {e}; node skipped"))
    };
    let text = match read("properties") {
        Ok(t) => t,
        Err(w) => {
            warnings.push(w);
            return None;
        }
    };
    let (props, problems) = Properties::parse(&text);
    warnings.extend(
        problems
            .into_iter()
            .map(|p| format!("node {id}: {node_logical}/properties {p}")),
    );

    let simd_count = props.get_u32("simd_count").unwrap_or(0);
    let gfx_target_version = props.get_u32("gfx_target_version").unwrap_or(0);
    let cpu_cores_count = props.get_u32("cpu_cores_count").unwrap_or(0);
    if simd_count == 0 || gfx_target_version == 0 {
        if simd_count > 0 {
            warnings.push(format!(
                "node {id}: {simd_count} SIMDs but no gfx_target_version; not counted as a GPU"
            ));
        }
        return Some(Node::Cpu(CpuNode {
            node_id: id,
            cpu_cores_count,
        }));
    }

    let gpu_id = match read("gpu_id") {
        Ok(t) => match t.trim().parse::<u32>() {
            Ok(g) => g,
            Err(_) => {
                warnings.push(format!(
                    "node {id}: {node_logical}/gpu_id: {:?} is not a number; node skipped",
                    t.trim()
                ));
                return None;
            }
        },
        Err(w) => {
            warnings.push(w);
            return None;
        }
    };
    let name = match read("name") {
        Ok(t) => t.trim().to_string(),
        Err(_) => {
            warnings.push(format!(
                "node {id}: {node_logical}/name unreadable; name left empty"
            ));
            String::new()
        }
    };

    let effective = opts
        .hsa_override
        .as_ref()
        .map_or(gfx_target_version, |o| o.gfx_target_version);
    let Some(processor) = processor_name(effective) else {
        warnings.push(format!(
            "node {id}: gfx_target_version {effective} cannot be named \
             (minor and stepping must be 0-15); node skipped"
        ));
        return None;
    };
    let capability = props.get_u32("capability").unwrap_or(0);

    let simd_per_cu = props.get_u32("simd_per_cu");
    let compute_units = simd_per_cu.and_then(|s| simd_count.checked_div(s));
    if compute_units.is_none() {
        warnings.push(format!(
            "node {id}: simd_per_cu missing or 0; compute units unknown"
        ));
    }
    let domain = props.get_u32("domain").unwrap_or(0);
    let location_id = props.get_u32("location_id").unwrap_or(0);
    let drm_render_minor = props.get_u32("drm_render_minor").filter(|&m| m != 0);
    let render_node =
        drm_render_minor.map(|minor| probe_device(root, format!("/dev/dri/renderD{minor}")));

    Some(Node::Gpu(Box::new(GpuNode {
        node_id: id,
        gpu_id,
        name,
        target: target_id(&processor, capability),
        gfx_target_version,
        capability,
        simd_count,
        simd_per_cu,
        compute_units,
        cpu_cores_count,
        wave_front_size: props.get_u32("wave_front_size"),
        num_xcc: props.get_u32("num_xcc").unwrap_or(1),
        vendor_id: props.get_u32("vendor_id").unwrap_or(0),
        device_id: props.get_u32("device_id").unwrap_or(0),
        domain,
        location_id,
        pci_address: format!(
            "{domain:04x}:{:02x}:{:02x}.{:x}",
            (location_id >> 8) & 0xff,
            (location_id >> 3) & 0x1f,
            location_id & 0x7
        ),
        hive_id: props.get("hive_id").unwrap_or(0),
        unique_id: props.get("unique_id"),
        drm_render_minor,
        render_node,
    })))
}

/// Opens `logical` (below `root`) read-write and closes it again, as the ROCm
/// thunk would open it.
fn probe_device(root: &Path, logical: String) -> DeviceAccess {
    match fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(resolve(root, &logical))
    {
        Ok(_) => DeviceAccess {
            path: logical,
            usable: true,
            error: None,
        },
        Err(e) => DeviceAccess {
            path: logical,
            usable: false,
            error: Some(e.to_string()),
        },
    }
}

/// Files and cgroup names that container runtimes leave behind.
fn container_hints(root: &Path) -> Vec<String> {
    let mut hints = Vec::new();
    for marker in ["/.dockerenv", "/run/.containerenv"] {
        if resolve(root, marker).exists() {
            hints.push(marker.to_string());
        }
    }
    if let Ok(cgroup) = read_small(&resolve(root, "/proc/1/cgroup")) {
        for runtime in ["docker", "kubepods", "containerd", "libpod", "lxc"] {
            if cgroup.contains(runtime) {
                hints.push(format!("/proc/1/cgroup mentions {runtime}"));
            }
        }
    }
    hints
}

/// `logical` (an absolute path as seen on the target system) below `root`.
fn resolve(root: &Path, logical: &str) -> PathBuf {
    root.join(logical.trim_start_matches('/'))
}

/// Reads at most [`MAX_SYSFS_FILE`] bytes; invalid UTF-8 is replaced, not
/// fatal.
fn read_small(path: &Path) -> std::io::Result<String> {
    let mut bytes = Vec::new();
    fs::File::open(path)?
        .take(MAX_SYSFS_FILE)
        .read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn lossy_path<S: Serializer>(path: &Path, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&path.to_string_lossy())
}
