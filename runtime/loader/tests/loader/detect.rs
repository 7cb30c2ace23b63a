//! GPU detection against KFD sysfs trees: the demo's machines
//! (splitter/demo/machines/) and the trees that exist only for these tests
//! (tests/fixtures/sysfs/), both written by
//! splitter/demo/machines/generate.py, each with a golden output in
//! tests/fixtures/detect-golden/; plus overrides, hot-plug during a scan, and
//! broken trees.
//!
//! `KPACK_UPDATE_GOLDEN=1 cargo test -p rocm-kpack-loader --test loader -- detect::` rewrites
//! the goldens; review the diff before committing.
// Linux only: KFD sysfs exists only there, and the golden outputs hold
// Linux's error texts ("No such file or directory"); under Wine 6 of these
// tests differ only in those texts.
#![cfg(target_os = "linux")]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rocm_kpack_format::Error;
use rocm_kpack_loader::detect::{
    detect, process_isas, ArchOverride, DetectOptions, Detection, HsaOverride, OverrideSource,
    ScanHook, DEFAULT_MAX_SCANS, XNACK_PROCESSORS,
};

/// Every tree and the targets it must produce. The golden test also fails
/// when a tree exists that is not listed here, or the reverse.
const FIXTURES: &[(&str, &[&str])] = &[
    ("780m", &["gfx1103"]),
    ("apu-plus-dgpu", &["gfx1100", "gfx1103"]),
    ("container-one-of-two", &["gfx1100"]),
    ("cpu-only", &[]),
    ("devices-path-only", &["gfx1102"]),
    ("many-nodes", &["gfx90a:sramecc+"]),
    ("mi210", &["gfx90a:sramecc+"]),
    ("mi300x", &["gfx942:sramecc+"]),
    ("mi300x-cpx", &["gfx942:sramecc+"]),
    ("no-driver", &[]),
    ("old-kernel", &["gfx1030", "gfx908:sramecc+"]),
    ("quirky-properties", &["gfx1201"]),
    ("rx7900xtx", &["gfx1100"]),
    ("rx9070xt", &["gfx1201"]),
    ("strix-halo", &["gfx1151"]),
    ("unreadable-node", &["gfx1100"]),
    ("w7500", &["gfx1102"]),
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The two homes of sysfs trees, relative to the workspace: the demo's
/// machines (product data) and the detection tests' own trees.
const TREE_DIRS: [&str; 2] = ["splitter/demo/machines", "tests/fixtures/sysfs"];

/// Where tree `name` is, relative to the workspace (the `root` its golden
/// records, and the path the CLI test passes).
fn tree_rel(name: &str) -> String {
    let dir = TREE_DIRS
        .iter()
        .find(|dir| workspace().join(dir).join(name).is_dir())
        .unwrap_or_else(|| panic!("no sysfs tree {name} in {TREE_DIRS:?}"));
    format!("{dir}/{name}")
}

fn fixture(name: &str) -> PathBuf {
    workspace().join(tree_rel(name))
}

fn run(name: &str) -> Detection {
    detect(&fixture(name), &DetectOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The golden form: pretty JSON with `root` as the workspace-relative path the
/// CLI test passes, so both tests compare against the same bytes.
/// The golden is what `rocm-kpack-fetch detect --json` prints
/// (fetcher/cli/tests/fetch/detect_cli.rs checks the same files): the detection as a
/// document, whose first key is the schema of cli/src/json.rs.
fn golden_text(name: &str, mut detection: Detection) -> String {
    detection.root = PathBuf::from(tree_rel(name));
    let text = serde_json::to_string_pretty(&detection).expect("serialize");
    let body = text.strip_prefix("{\n").expect("a JSON object");
    format!("{{\n  \"schema\": 1,\n{body}\n")
}

#[test]
fn golden_outputs_match_every_fixture() {
    let update = std::env::var_os("KPACK_UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let mut on_disk: Vec<String> = TREE_DIRS
        .iter()
        .flat_map(|dir| fs::read_dir(workspace().join(dir)).expect("sysfs trees dir"))
        .map(|e| e.expect("entry"))
        .filter(|e| e.file_type().expect("type").is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let listed: Vec<&str> = FIXTURES.iter().map(|(n, _)| *n).collect();
    assert_eq!(on_disk, listed, "tree directories vs the FIXTURES table");

    let mut failures = Vec::new();
    for (name, targets) in FIXTURES {
        let detection = run(name);
        assert_eq!(detection.targets, *targets, "{name}: targets");
        assert_eq!(
            detection.detected_targets, *targets,
            "{name}: detected targets"
        );
        assert_eq!(
            detection.scans,
            if detection.topology.is_some() { 1 } else { 0 },
            "{name}"
        );
        let actual = golden_text(name, detection);
        let path = workspace()
            .join("tests/fixtures/detect-golden")
            .join(format!("{name}.json"));
        if update {
            fs::write(&path, &actual).expect("write golden");
            continue;
        }
        match fs::read_to_string(&path) {
            Ok(expected) if expected == actual => {}
            Ok(expected) => failures.push(format!(
                "{name}: output differs from {}\n--- expected\n{expected}\n--- actual\n{actual}",
                path.display()
            )),
            Err(e) => failures.push(format!("{name}: {}: {e}", path.display())),
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n(rerun with KPACK_UPDATE_GOLDEN=1 to accept)",
        failures.join("\n\n")
    );
}

#[test]
fn mi300x_platform() {
    let d = run("mi300x");
    assert!(d.driver_loaded);
    assert_eq!(d.driver_initstate.as_deref(), Some("live"));
    assert_eq!(d.topology.as_deref(), Some("/sys/class/kfd/kfd/topology"));
    assert_eq!(d.cpu_nodes.len(), 2);
    assert!(d.cpu_nodes.iter().all(|n| n.cpu_cores_count == 96));
    assert_eq!(d.gpu_nodes.len(), 8);
    let hive = d.gpu_nodes[0].hive_id;
    assert_ne!(hive, 0);
    for (i, n) in d.gpu_nodes.iter().enumerate() {
        assert_eq!(n.node_id, 2 + i as u32);
        assert_eq!(n.target, "gfx942:sramecc+");
        assert_eq!(n.gfx_target_version, 90402);
        assert_eq!(n.capability, 746_037_888);
        assert_eq!((n.simd_count, n.compute_units), (1216, Some(304)));
        assert_eq!((n.num_xcc, n.device_id, n.vendor_id), (8, 29857, 0x1002));
        assert_eq!(n.wave_front_size, Some(64));
        assert_eq!(n.hive_id, hive);
        assert_eq!(n.name, "ip discovery");
        let render = n.render_node.as_ref().expect("render node");
        assert_eq!(render.path, format!("/dev/dri/renderD{}", 128 + i));
        assert!(render.usable, "{render:?}");
    }
    assert_eq!(d.gpu_nodes[0].pci_address, "0000:05:00.0");
    assert!(d.kfd_device.usable);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
}

#[test]
fn consumer_and_workstation_parts() {
    let cases: &[(&str, &str, u32, Option<u32>, u32)] = &[
        ("mi210", "gfx90a:sramecc+", 90010, Some(104), 29711),
        ("rx7900xtx", "gfx1100", 110000, Some(96), 29772),
        ("w7500", "gfx1102", 110002, Some(28), 29833),
        ("rx9070xt", "gfx1201", 120001, Some(64), 30032),
        ("strix-halo", "gfx1151", 110501, Some(32), 5510),
        ("780m", "gfx1103", 110003, Some(12), 5567),
    ];
    for &(name, target, version, cus, device) in cases {
        let d = run(name);
        assert_eq!(d.gpu_nodes.len(), 1, "{name}");
        let n = &d.gpu_nodes[0];
        assert_eq!(n.node_id, 1, "{name}");
        assert_eq!(n.target, target, "{name}");
        assert_eq!(n.gfx_target_version, version, "{name}");
        assert_eq!(n.compute_units, cus, "{name}");
        assert_eq!(n.device_id, device, "{name}");
        assert_eq!(n.cpu_cores_count, 0, "{name}: APU GPUs are their own node");
        assert!(d.warnings.is_empty(), "{name}: {:?}", d.warnings);
    }
    // RX 7900 XTX: capability without SRAM_EDC and no sramecc feature at all.
    assert_eq!(run("rx7900xtx").gpu_nodes[0].capability, 671_588_992);
}

#[test]
fn apu_plus_discrete_gpu_installs_for_the_union() {
    let d = run("apu-plus-dgpu");
    let nodes: Vec<(u32, &str)> = d
        .gpu_nodes
        .iter()
        .map(|n| (n.node_id, n.target.as_str()))
        .collect();
    assert_eq!(nodes, [(1, "gfx1103"), (2, "gfx1100")]);
    assert_eq!(d.targets, ["gfx1100", "gfx1103"]);
}

#[test]
fn partition_mode_duplicates_collapse_to_one_target() {
    let d = run("mi300x-cpx");
    assert_eq!(d.gpu_nodes.len(), 8);
    let mut gpu_ids: Vec<u32> = d.gpu_nodes.iter().map(|n| n.gpu_id).collect();
    gpu_ids.sort_unstable();
    gpu_ids.dedup();
    assert_eq!(gpu_ids.len(), 8, "each partition has its own gpu_id");
    assert!(d
        .gpu_nodes
        .iter()
        .all(|n| n.compute_units == Some(38) && n.num_xcc == 1));
    assert_eq!(d.targets, ["gfx942:sramecc+"]);
}

#[test]
fn node_ids_sort_numerically() {
    let d = run("many-nodes");
    let cpu: Vec<u32> = d.cpu_nodes.iter().map(|n| n.node_id).collect();
    let gpu: Vec<u32> = d.gpu_nodes.iter().map(|n| n.node_id).collect();
    assert_eq!(cpu, (0..8).collect::<Vec<_>>());
    assert_eq!(gpu, [8, 9, 10, 11]);
    assert_eq!(d.generation_id, Some(2));
}

#[test]
fn unreadable_nodes_are_skipped_with_warnings() {
    let d = run("unreadable-node");
    let gpu: Vec<u32> = d.gpu_nodes.iter().map(|n| n.node_id).collect();
    assert_eq!(gpu, [1]);
    assert_eq!(d.cpu_nodes.len(), 1);
    assert_eq!(d.warnings.len(), 2, "{:?}", d.warnings);
    assert!(d.warnings[0].starts_with("node 2: /sys/class/kfd/kfd/topology/nodes/2/properties: "));
    assert!(d.warnings[0].contains("directory"), "{}", d.warnings[0]);
    assert!(d.warnings[1].starts_with("node 3: /sys/class/kfd/kfd/topology/nodes/3/gpu_id: "));
    assert!(d.warnings.iter().all(|w| w.ends_with("node skipped")));
}

#[test]
fn old_kernel_without_newer_keys() {
    let d = run("old-kernel");
    assert_eq!(d.generation_id, Some(3));
    let [mi100, navi21] = d.gpu_nodes.as_slice() else {
        panic!("two GPUs expected: {:?}", d.gpu_nodes)
    };
    // gfx908 is sramecc+ even though this capability lacks SRAM_EDC.
    assert_eq!(
        mi100.capability & rocm_kpack_loader::detect::CAP_SRAM_EDC_SUPPORTED,
        0
    );
    assert_eq!(mi100.target, "gfx908:sramecc+");
    assert_eq!(mi100.name, "arcturus");
    assert_eq!(navi21.target, "gfx1030");
    // num_xcc is absent: one XCC, as the ROCm thunk assumes.
    assert!(d.gpu_nodes.iter().all(|n| n.num_xcc == 1));
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
}

#[test]
fn quirky_properties_warn_but_detect() {
    let d = run("quirky-properties");
    let [node] = d.gpu_nodes.as_slice() else {
        panic!("one GPU expected: {:?}", d.gpu_nodes)
    };
    assert_eq!(node.target, "gfx1201");
    assert_eq!(node.simd_per_cu, None);
    assert_eq!(node.compute_units, None);
    assert_eq!(
        node.wave_front_size,
        Some(32),
        "last line without a newline is read"
    );
    let joined = d.warnings.join("\n");
    for needle in [
        "node 1: /sys/class/kfd/kfd/topology/nodes/1/properties line ",
        "expected `key value`, found \"this line is not a property\"",
        "unique_id_hex: \"0x5f3d00000000f1ae\" is not a decimal number",
        "node 1: simd_per_cu missing or 0; compute units unknown",
        "node 2: gfx_target_version 120016 cannot be named",
    ] {
        assert!(joined.contains(needle), "missing {needle:?} in\n{joined}");
    }
    assert_eq!(d.warnings.len(), 4, "{joined}");
}

#[test]
fn container_sees_all_gpus_but_can_open_one() {
    let d = run("container-one-of-two");
    assert_eq!(d.container_hints, ["/.dockerenv"]);
    let usable: Vec<(u32, bool)> = d
        .gpu_nodes
        .iter()
        .map(|n| (n.node_id, n.render_node.as_ref().is_some_and(|r| r.usable)))
        .collect();
    assert_eq!(usable, [(1, false), (2, true)]);
    let missing = d.gpu_nodes[0].render_node.as_ref().expect("render node");
    assert!(
        missing
            .error
            .as_deref()
            .is_some_and(|e| e.contains("No such file")),
        "{missing:?}"
    );
    // Detection does not fail, and both GPUs count for installing.
    assert_eq!(d.targets, ["gfx1100"]);
}

#[test]
fn no_driver_and_cpu_only() {
    let d = run("no-driver");
    assert!(!d.driver_loaded);
    assert_eq!(d.driver_initstate, None);
    assert_eq!(d.topology, None);
    assert_eq!((d.scans, d.generation_id), (0, None));
    assert!(!d.kfd_device.usable);
    assert!(!d.has_targets());

    let d = run("cpu-only");
    assert!(d.driver_loaded);
    assert!(d.topology.is_some());
    assert_eq!(d.cpu_nodes.len(), 1);
    assert!(d.gpu_nodes.is_empty());
    assert!(d.kfd_device.usable);
    assert!(!d.has_targets());
}

#[test]
fn real_topology_path_is_accepted() {
    let d = run("devices-path-only");
    assert!(!fixture("devices-path-only").join("sys/class").exists());
    assert_eq!(
        d.topology.as_deref(),
        Some("/sys/devices/virtual/kfd/kfd/topology")
    );
    assert_eq!(d.targets, ["gfx1102"]);
}

#[test]
fn arch_override_replaces_detection() {
    let opts =
        DetectOptions::from_env_values(Some("gfx90a:xnack-, gfx1100,gfx1100"), None).unwrap();
    let d = detect(&fixture("cpu-only"), &opts).unwrap();
    assert!(d.detected_targets.is_empty());
    assert_eq!(d.targets, ["gfx1100", "gfx90a:xnack-"]);
    let o = d.arch_override.as_ref().expect("recorded");
    assert_eq!(o.source, OverrideSource::Environment);

    // On a GPU machine the override still wins; what sysfs says is kept.
    let opts = DetectOptions {
        arch_override: Some(ArchOverride::parse(OverrideSource::CommandLine, "gfx1151").unwrap()),
        ..DetectOptions::default()
    };
    let d = detect(&fixture("mi300x"), &opts).unwrap();
    assert_eq!(d.detected_targets, ["gfx942:sramecc+"]);
    assert_eq!(d.targets, ["gfx1151"]);
    let json = serde_json::to_value(&d).unwrap();
    assert_eq!(json["arch_override"]["source"], "--target");
}

#[test]
fn hsa_override_renames_every_gpu() {
    let opts = DetectOptions::from_env_values(None, Some("11.0.0")).unwrap();
    let d = detect(&fixture("apu-plus-dgpu"), &opts).unwrap();
    let targets: Vec<&str> = d.gpu_nodes.iter().map(|n| n.target.as_str()).collect();
    assert_eq!(targets, ["gfx1100", "gfx1100"]);
    let raw: Vec<u32> = d.gpu_nodes.iter().map(|n| n.gfx_target_version).collect();
    assert_eq!(raw, [110003, 110000], "sysfs values are kept");
    assert_eq!(d.targets, ["gfx1100"]);
    let o = d.hsa_override.as_ref().expect("recorded");
    assert_eq!(
        (o.value.as_str(), o.processor.as_str()),
        ("11.0.0", "gfx1100")
    );

    // Feature bits still come from the node's capability.
    let opts = DetectOptions {
        hsa_override: Some(HsaOverride::parse("9.4.2").unwrap()),
        ..DetectOptions::default()
    };
    assert_eq!(
        detect(&fixture("rx7900xtx"), &opts).unwrap().targets,
        ["gfx942:sramecc-"]
    );

    // An override also makes an unnameable node usable (as it does for ROCm).
    let opts = DetectOptions::from_env_values(None, Some("12.0.1")).unwrap();
    let d = detect(&fixture("quirky-properties"), &opts).unwrap();
    assert_eq!(d.gpu_nodes.len(), 2);
    assert_eq!(d.targets, ["gfx1201"]);
}

#[test]
fn bad_override_values_are_errors() {
    for (arch, hsa) in [
        (Some(","), None),
        (Some("gfx1100;rm"), None),
        (None, Some("11")),
        (None, Some("9.0.16")),
    ] {
        let err = DetectOptions::from_env_values(arch, hsa).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    }
    let opts = DetectOptions::from_env_values(Some(""), Some("  ")).unwrap();
    assert!(
        opts.arch_override.is_none() && opts.hsa_override.is_none(),
        "empty = unset"
    );
}

#[test]
fn unusable_root_is_an_error() {
    let err = detect(
        Path::new("/nonexistent/kpack-root"),
        &DetectOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(err, Error::FileNotFound { .. }), "{err:?}");
    let file = fixture("rx7900xtx").join("dev/kfd");
    let err = detect(&file, &DetectOptions::default()).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
}

/// Copies a fixture so a test can change it; symlinks stay symlinks.
fn copy_tree(src: &Path, dst: &Path) {
    fs::create_dir_all(dst).unwrap();
    for entry in fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        let (from, to) = (entry.path(), dst.join(entry.file_name()));
        let kind = entry.file_type().unwrap();
        if kind.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&from).unwrap(), &to).unwrap();
        } else if kind.is_dir() {
            copy_tree(&from, &to);
        } else {
            fs::copy(&from, &to).unwrap();
        }
    }
}

const TOPO: &str = "sys/devices/virtual/kfd/kfd/topology";

#[test]
fn generation_change_mid_scan_rescans() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    copy_tree(&fixture("rx7900xtx"), &root);
    let topo = root.join(TOPO);
    let calls = Arc::new(AtomicU32::new(0));
    let hook: ScanHook = {
        let (topo, calls) = (topo.clone(), Arc::clone(&calls));
        Arc::new(move |attempt| {
            calls.fetch_add(1, Ordering::SeqCst);
            if attempt == 1 {
                // A second GPU appears after the nodes were read.
                copy_tree(&topo.join("nodes/1"), &topo.join("nodes/2"));
                fs::write(topo.join("nodes/2/gpu_id"), "6601\n").unwrap();
                let props = fs::read_to_string(topo.join("nodes/2/properties")).unwrap();
                let props = props.replace("drm_render_minor 128\n", "drm_render_minor 129\n");
                fs::write(topo.join("nodes/2/properties"), props).unwrap();
                fs::write(topo.join("generation_id"), "2\n").unwrap();
            }
        })
    };
    let opts = DetectOptions {
        scan_hook: Some(hook),
        ..DetectOptions::default()
    };
    let d = detect(&root, &opts).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!((d.scans, d.generation_id), (2, Some(2)));
    let ids: Vec<(u32, u32)> = d.gpu_nodes.iter().map(|n| (n.node_id, n.gpu_id)).collect();
    assert_eq!(ids, [(1, 43687), (2, 6601)], "the rescan sees the new node");
    let render = d.gpu_nodes[1].render_node.as_ref().unwrap();
    assert_eq!(
        (render.path.as_str(), render.usable),
        ("/dev/dri/renderD129", false)
    );
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
}

#[test]
fn generation_that_never_settles_is_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    copy_tree(&fixture("mi210"), &root);
    let topo = root.join(TOPO);
    let calls = Arc::new(AtomicU32::new(0));
    let hook: ScanHook = {
        let calls = Arc::clone(&calls);
        Arc::new(move |attempt| {
            calls.fetch_add(1, Ordering::SeqCst);
            fs::write(topo.join("generation_id"), format!("{}\n", 100 + attempt)).unwrap();
        })
    };
    let opts = DetectOptions {
        scan_hook: Some(hook.clone()),
        ..DetectOptions::default()
    };
    let d = detect(&root, &opts).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), DEFAULT_MAX_SCANS);
    assert_eq!(d.scans, DEFAULT_MAX_SCANS);
    assert_eq!(d.generation_id, Some(100 + u64::from(DEFAULT_MAX_SCANS)));
    assert_eq!(
        d.targets,
        ["gfx90a:sramecc+"],
        "the last scan is still reported"
    );
    assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
    assert!(d.warnings[0].contains("generation_id changed during each of 5 scans"));

    calls.store(0, Ordering::SeqCst);
    let opts = DetectOptions {
        scan_hook: Some(hook),
        max_scans: 2,
        ..DetectOptions::default()
    };
    assert_eq!(detect(&root, &opts).unwrap().scans, 2);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[test]
fn broken_trees_warn_and_never_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let topo = root.join(TOPO);
    fs::create_dir_all(topo.join("nodes")).unwrap();
    // No generation_id; a stray file; an empty node; a node that is a file;
    // a node whose properties is binary junk; a GPU-looking node without
    // gpu_id; one with a non-numeric gpu_id.
    fs::write(topo.join("nodes/README"), "x").unwrap();
    fs::create_dir(topo.join("nodes/0")).unwrap();
    fs::write(topo.join("nodes/0/properties"), "").unwrap();
    fs::write(topo.join("nodes/1"), "not a dir").unwrap();
    fs::create_dir(topo.join("nodes/2")).unwrap();
    fs::write(
        topo.join("nodes/2/properties"),
        [0xff, 0x00, b'\n', b'k', b' ', 0x80],
    )
    .unwrap();
    for (node, gpu_id) in [("3", None), ("4", Some("abc\n"))] {
        let dir = topo.join("nodes").join(node);
        fs::create_dir(&dir).unwrap();
        fs::write(
            dir.join("properties"),
            "simd_count 8\nsimd_per_cu 2\ngfx_target_version 110000\n",
        )
        .unwrap();
        if let Some(g) = gpu_id {
            fs::write(dir.join("gpu_id"), g).unwrap();
        }
    }
    fs::create_dir(topo.join("nodes/5")).unwrap();
    fs::write(
        topo.join("nodes/5/properties"),
        "simd_count 4\ngfx_target_version 0\n",
    )
    .unwrap();

    let d = detect(root, &DetectOptions::default()).unwrap();
    assert_eq!(
        d.topology.as_deref(),
        Some("/sys/devices/virtual/kfd/kfd/topology")
    );
    assert!(!d.driver_loaded);
    assert!(d.gpu_nodes.is_empty());
    let cpu: Vec<u32> = d.cpu_nodes.iter().map(|n| n.node_id).collect();
    assert_eq!(cpu, [0, 2, 5]);
    let w = d.warnings.join("\n");
    for needle in [
        "generation_id: ",
        "ignoring \"README\", not a node number",
        "node 1: /sys/devices/virtual/kfd/kfd/topology/nodes/1/properties: ",
        "node 2: /sys/devices/virtual/kfd/kfd/topology/nodes/2/properties line 1: expected `key value`",
        "node 3: /sys/devices/virtual/kfd/kfd/topology/nodes/3/gpu_id: ",
        "node 4: /sys/devices/virtual/kfd/kfd/topology/nodes/4/gpu_id: \"abc\" is not a number",
        "node 5: 4 SIMDs but no gfx_target_version; not counted as a GPU",
    ] {
        assert!(w.contains(needle), "missing {needle:?} in\n{w}");
    }
}

#[test]
fn process_isas_add_the_xnack_mode_the_runtime_runs_with() {
    // Fixture detections as the HIP runtime of a process names them.
    for (name, off, on) in [
        (
            "mi210",
            &["gfx90a:sramecc+:xnack-"][..],
            &["gfx90a:sramecc+:xnack+"][..],
        ),
        (
            "mi300x",
            &["gfx942:sramecc+:xnack-"],
            &["gfx942:sramecc+:xnack+"],
        ),
        (
            "old-kernel",
            &["gfx1030", "gfx908:sramecc+:xnack-"],
            &["gfx1030", "gfx908:sramecc+:xnack+"],
        ),
        ("rx7900xtx", &["gfx1100"], &["gfx1100"]),
        ("cpu-only", &[], &[]),
    ] {
        let targets = run(name).targets;
        assert_eq!(process_isas(&targets, None), off, "{name}: HSA_XNACK unset");
        assert_eq!(
            process_isas(&targets, Some("0")),
            off,
            "{name}: HSA_XNACK=0"
        );
        assert_eq!(
            process_isas(&targets, Some("")),
            off,
            "{name}: HSA_XNACK empty"
        );
        assert_eq!(process_isas(&targets, Some("1")), on, "{name}: HSA_XNACK=1");
    }
    assert_eq!(
        process_isas(
            &[
                "gfx906:sramecc-",
                "gfx900",
                "gfx801",
                "gfx90a:xnack+", // already says: kept
                "gfx1010",       // GFX10+: never xnack
                "gfx1201",
                "gfx803",
                "not a target", // kept as given
                "gfx900",       // repeat dropped
            ],
            None
        ),
        [
            "gfx906:sramecc-:xnack-",
            "gfx900:xnack-",
            "gfx801:xnack-",
            "gfx90a:xnack+",
            "gfx1010",
            "gfx1201",
            "gfx803",
            "not a target",
        ]
    );
    // Every listed processor gains the feature; the list is GFX8/GFX9 only.
    for p in XNACK_PROCESSORS {
        assert_eq!(process_isas(&[p], Some("1")), [format!("{p}:xnack+")]);
        assert!(p.len() == 6, "{p}: GFX10+ never runs with xnack");
    }
}
