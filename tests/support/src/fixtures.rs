//! Paths of the committed fixtures in `tests/fixtures/` (see its README.md):
//! fat binaries compiled from `tests/fixtures/src/` by `build.sh`, the
//! stand-in `libamdhip64.so` and what it records, and the test drivers.

use std::path::{Path, PathBuf};

/// Compiler sets: directory name, compiler, whether bundles are compressed.
pub const SETS: [(&str, &str, bool); 3] = [
    ("clang15", "clang-15", false),
    ("clang19", "clang-19", false),
    ("clang19-compressed", "clang-19 --offload-compress", true),
];

/// Fat binaries built for every set: file name and how many bundles
/// (= translation units, or device links for `-fgpu-rdc`) its `.hip_fatbin`
/// holds and how many wrappers its `.hipFatBinSegment` holds.
pub const BINARIES: [FatBinary; 5] = [
    FatBinary {
        name: "app_pie",
        kind: Kind::Executable,
        bundles: 1,
        wrappers: 1,
    },
    FatBinary {
        name: "app_nopie",
        kind: Kind::Executable,
        bundles: 1,
        wrappers: 1,
    },
    FatBinary {
        name: "libfixture.so",
        kind: Kind::SharedLibrary,
        bundles: 1,
        wrappers: 1,
    },
    FatBinary {
        name: "libmulti.so",
        kind: Kind::SharedLibrary,
        bundles: 3,
        wrappers: 3,
    },
    // -fgpu-rdc: one device-linked bundle; each TU keeps a wrapper pointing
    // at it, and only the first to run registers it (shared gpubin handle).
    FatBinary {
        name: "app_rdc",
        kind: Kind::Executable,
        bundles: 1,
        wrappers: 2,
    },
];

/// Target ids in the clang-15 fixtures, canonical, sorted.
pub const ARCHES_CLANG15: [&str; 5] = [
    "gfx1030",
    "gfx1100",
    "gfx1101",
    "gfx90a:xnack+",
    "gfx90a:xnack-",
];
/// Target ids in the clang-19 fixtures (code object v6), canonical, sorted.
pub const ARCHES_CLANG19: [&str; 7] = [
    "gfx1030",
    "gfx11-generic",
    "gfx1100",
    "gfx1101",
    "gfx90a:xnack+",
    "gfx90a:xnack-",
    "gfx942:sramecc+",
];

/// How a fixture is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Run directly (with the stub on `LD_LIBRARY_PATH`); exits 0.
    Executable,
    /// Run through [`run_lib`], which calls its `kpack_fixture_run`.
    SharedLibrary,
}

/// One fat binary of a set.
#[derive(Debug, Clone, Copy)]
pub struct FatBinary {
    /// File name inside the set directory.
    pub name: &'static str,
    /// Executable or library.
    pub kind: Kind,
    /// Bundles in `.hip_fatbin`.
    pub bundles: usize,
    /// Wrappers in `.hipFatBinSegment`.
    pub wrappers: usize,
}

/// A fat fixture: set + binary.
#[derive(Debug, Clone)]
pub struct Fixture {
    /// Set directory (`clang15`, `clang19`, `clang19-compressed`).
    pub set: &'static str,
    /// Whether its bundles are CCOBs.
    pub compressed: bool,
    /// The binary.
    pub binary: FatBinary,
    /// Absolute path.
    pub path: PathBuf,
}

impl Fixture {
    /// Target ids its bundles carry (sorted).
    pub fn arches(&self) -> &'static [&'static str] {
        if self.set == "clang15" {
            &ARCHES_CLANG15
        } else {
            &ARCHES_CLANG19
        }
    }

    /// The same binary built without compression (itself if uncompressed).
    pub fn uncompressed_twin(&self) -> PathBuf {
        if self.compressed {
            fixture(&format!("clang19/{}", self.binary.name))
        } else {
            self.path.clone()
        }
    }
}

/// `tests/fixtures/`.
pub fn fixtures_dir() -> PathBuf {
    // This crate lives in `tests/support/`.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ above tests/support/")
        .join("fixtures")
}

/// A path under `tests/fixtures/`, e.g. `fixture("clang15/app_pie")`.
pub fn fixture(name: &str) -> PathBuf {
    fixtures_dir().join(name)
}

/// The demo's machines (`splitter/demo/machines/`): KFD sysfs trees the
/// `rocm-kpack` binary embeds, which the tests use as real machines.
pub fn demo_machines_dir() -> PathBuf {
    fixtures_dir().join("../../splitter/demo/machines")
}

/// The KFD sysfs tree of machine `name`: a demo machine
/// (`splitter/demo/machines/<name>`) or a tree that exists only for the
/// detection tests (`tests/fixtures/sysfs/<name>`).
pub fn machine(name: &str) -> PathBuf {
    let demo = demo_machines_dir().join(name);
    if demo.is_dir() {
        demo
    } else {
        fixture(&format!("sysfs/{name}"))
    }
}

/// A copy in `dir` of machine `name` ([`machine`]) whose GPU nodes report
/// `gfx_target_version` instead of their own: a part no tree has yet
/// (gfx1250, 120500), on another part's node values. Symlinks stay
/// symlinks.
pub fn machine_reporting(name: &str, gfx_target_version: u32, dir: &Path) -> PathBuf {
    let out = dir.join(format!("{name}-as-{gfx_target_version}"));
    crate::packages::copy_tree(&machine(name), &out, &[]);
    let nodes = out.join("sys/devices/virtual/kfd/kfd/topology/nodes");
    let mut changed = 0;
    for node in std::fs::read_dir(&nodes).expect("nodes").flatten() {
        let props = node.path().join("properties");
        let text = std::fs::read_to_string(&props).expect("properties");
        let lines: Vec<String> = text
            .lines()
            .map(|l| match l.strip_prefix("gfx_target_version ") {
                Some(v) if v != "0" => {
                    changed += 1;
                    format!("gfx_target_version {gfx_target_version}")
                }
                _ => l.to_string(),
            })
            .collect();
        std::fs::write(&props, lines.join("\n") + "\n").expect("write properties");
    }
    assert!(changed > 0, "{name} has no GPU node");
    out
}

/// Every fat fixture (3 sets x 5 binaries).
pub fn all_fat() -> Vec<Fixture> {
    SETS.iter()
        .flat_map(|&(set, _, compressed)| {
            BINARIES.iter().map(move |b| Fixture {
                set,
                compressed,
                binary: *b,
                path: fixture(&format!("{set}/{}", b.name)),
            })
        })
        .collect()
}

/// Directory holding the stand-in `libamdhip64.so` (put it on
/// `LD_LIBRARY_PATH`).
pub fn stub_lib_dir() -> PathBuf {
    fixture("stub-hip")
}

/// The stand-in `libamdhip64.so`.
pub fn stub_lib() -> PathBuf {
    stub_lib_dir().join("libamdhip64.so")
}

/// `run_lib LIB...`: dlopens each library and calls its `kpack_fixture_run`.
pub fn run_lib() -> PathBuf {
    fixture("tools/run_lib")
}

/// `stub_probe hipk|hipf|bad`: registers one hand-made wrapper with the
/// stand-in runtime (see `tests/fixtures/src/stub_probe.c`).
pub fn stub_probe() -> PathBuf {
    fixture("tools/stub_probe")
}

/// Magic of a stand-in record file (`register-NNNN.bin`).
pub const RECORD_MAGIC: &[u8; 8] = b"HIPSTUB1";

/// Payload kinds of a stand-in record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadKind {
    /// 0: nothing recognisable at the pointer.
    None,
    /// 1: uncompressed offload bundle.
    Bundle,
    /// 2: CCOB.
    Ccob,
    /// 3: HIPK marker (MessagePack).
    Marker,
    /// Anything else (a newer stub).
    Other(u32),
}

/// One `register-NNNN.bin` written by the stand-in HIP runtime when
/// `HIPSTUB_RECORD` is set (format in `tests/fixtures/stub-hip/hip_stub.c`).
#[derive(Debug, Clone)]
pub struct Registration {
    /// NNNN from the file name (call order within a process).
    pub number: u32,
    /// Wrapper magic.
    pub magic: u32,
    /// Wrapper version.
    pub version: u32,
    /// Wrapper reserved1.
    pub reserved1: u64,
    /// What the binary pointer held.
    pub kind: PayloadKind,
    /// The copy was cut at the end of readable memory.
    pub truncated: bool,
    /// The bytes at the binary pointer.
    pub payload: Vec<u8>,
}

impl Registration {
    /// Parses one record file's bytes.
    pub fn parse(number: u32, bytes: &[u8]) -> Result<Registration, String> {
        let u32_at = |o: usize| -> Result<u32, String> {
            Ok(u32::from_le_bytes(
                bytes
                    .get(o..o + 4)
                    .ok_or("truncated record")?
                    .try_into()
                    .map_err(|_| "size")?,
            ))
        };
        let u64_at = |o: usize| -> Result<u64, String> {
            Ok(u64::from_le_bytes(
                bytes
                    .get(o..o + 8)
                    .ok_or("truncated record")?
                    .try_into()
                    .map_err(|_| "size")?,
            ))
        };
        if bytes.get(..8) != Some(&RECORD_MAGIC[..]) {
            return Err("not a HIPSTUB1 record".into());
        }
        let len = u64_at(32)? as usize;
        let payload = bytes.get(40..).ok_or("truncated record")?;
        if payload.len() != len {
            return Err(format!(
                "payload is {} bytes, header says {len}",
                payload.len()
            ));
        }
        Ok(Registration {
            number,
            magic: u32_at(8)?,
            version: u32_at(12)?,
            reserved1: u64_at(16)?,
            kind: match u32_at(24)? {
                0 => PayloadKind::None,
                1 => PayloadKind::Bundle,
                2 => PayloadKind::Ccob,
                3 => PayloadKind::Marker,
                k => PayloadKind::Other(k),
            },
            truncated: u32_at(28)? & 1 != 0,
            payload: payload.to_vec(),
        })
    }
}

/// Reads every `register-NNNN.bin` in a `HIPSTUB_RECORD` directory, in
/// number order.
pub fn read_registrations(dir: &Path) -> std::io::Result<Vec<Registration>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(number) = name
            .to_str()
            .and_then(|n| n.strip_prefix("register-"))
            .and_then(|n| n.strip_suffix(".bin"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let bytes = std::fs::read(entry.path())?;
        let reg = Registration::parse(number, &bytes).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: {e}", entry.path().display()),
            )
        })?;
        out.push(reg);
    }
    out.sort_by_key(|r| r.number);
    Ok(out)
}

/// Lines of `calls.log` in a `HIPSTUB_RECORD` directory (empty if absent).
pub fn read_call_log(dir: &Path) -> std::io::Result<Vec<String>> {
    match std::fs::read_to_string(dir.join("calls.log")) {
        Ok(s) => Ok(s.lines().map(str::to_string).collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// A command that runs `fixture` against the stand-in HIP runtime: the
/// executable itself, or [`run_lib`] on a library; `LD_LIBRARY_PATH` points
/// at [`stub_lib_dir`]. With `record`, `HIPSTUB_RECORD` is set to it.
pub fn command(fixture: &Fixture, record: Option<&Path>) -> std::process::Command {
    let mut cmd = match fixture.binary.kind {
        Kind::Executable => std::process::Command::new(&fixture.path),
        Kind::SharedLibrary => {
            let mut c = std::process::Command::new(run_lib());
            c.arg(&fixture.path);
            c
        }
    };
    cmd.env("LD_LIBRARY_PATH", stub_lib_dir());
    cmd.env_remove("HIPSTUB_RECORD");
    cmd.env_remove("HIPSTUB_STRICT");
    if let Some(dir) = record {
        cmd.env("HIPSTUB_RECORD", dir);
    }
    cmd
}
