//! A fat shared library with many compressed bundles (CCOB) and many
//! targets, built at test time by Debian's clang-19 with
//! `--offload-compress`, like the libraries of ROCm wheels: one translation
//! unit per bundle, each kernel carrying a block of data per processor
//! (`.incbin` of deterministic, code-like bytes: compressible about 2-3x),
//! so the decompressed device code reaches any size without compiling
//! that much code. Built once per shape and cached under the test-data
//! cache ([`crate::debian::cache_dir`]/ccob/), atomically.

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Targets of every bundle: a dozen processors from gfx900 to gfx1201,
/// with the two xnack variants of gfx90a sharing an archive unit.
pub const TARGETS: &[&str] = &[
    "gfx900",
    "gfx906",
    "gfx908",
    "gfx90a:xnack+",
    "gfx90a:xnack-",
    "gfx942",
    "gfx1030",
    "gfx1100",
    "gfx1101",
    "gfx1102",
    "gfx1200",
    "gfx1201",
];

/// The shape of a library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Translation units = CCOB bundles.
    pub bundles: usize,
    /// Data per code object (each target of each bundle).
    pub blob_bytes: usize,
}

impl Shape {
    /// For tests: 8 bundles x 12 targets x 512 KiB, about 48 MiB of
    /// decompressed device code.
    pub const SMALL: Shape = Shape {
        bundles: 8,
        blob_bytes: 512 << 10,
    };
    /// For the benchmark: 28 bundles x 12 targets x 3 MiB, about 1.03 GiB
    /// of decompressed device code (over 1 GB).
    pub const LARGE: Shape = Shape {
        bundles: 28,
        blob_bytes: 3 << 20,
    };
    /// [`Shape::LARGE`] with half its bundles (same code objects, half the
    /// bytes): the benchmark's "2x the input takes at most 2.1x the time".
    pub const HALF: Shape = Shape {
        bundles: 14,
        blob_bytes: 3 << 20,
    };

    /// Decompressed bytes of device data the library carries (code objects
    /// are slightly larger: ELF headers and the kernel itself).
    pub fn device_bytes(&self) -> u64 {
        (self.bundles * TARGETS.len() * self.blob_bytes) as u64
    }

    fn key(&self) -> String {
        format!(
            "b{}-t{}-k{}",
            self.bundles,
            TARGETS.len(),
            self.blob_bytes >> 10
        )
    }
}

/// Deterministic, code-like bytes: 32-bit words drawn with a skewed
/// distribution from a 4096-word dictionary (an instruction set's worth of
/// encodings), so zstd compresses them about as much as real code objects.
pub fn code_like_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as u32
    };
    let dict: Vec<u32> = (0..4096).map(|_| next()).collect();
    let mut out = Vec::with_capacity(len + 4);
    while out.len() < len {
        let r = next();
        // Small indices far more often than large ones.
        let idx = (((r & 0xfff) * ((r >> 12) & 0xfff)) >> 12) as usize;
        out.extend_from_slice(&dict[idx % dict.len()].to_le_bytes());
    }
    out.truncate(len);
    out
}

fn processors() -> Vec<&'static str> {
    let mut p: Vec<&str> = TARGETS
        .iter()
        .map(|t| t.split(':').next().unwrap_or(t))
        .collect();
    p.dedup();
    p
}

/// The library of `shape` (`libccob.so`), built on first use.
pub fn library(shape: Shape) -> io::Result<PathBuf> {
    let dir = crate::debian::cache_dir().join("ccob").join(shape.key());
    let lib = dir.join("libccob.so");
    if lib.is_file() {
        return Ok(lib);
    }
    fs::create_dir_all(dir.parent().unwrap_or(&dir))?;
    let work = tempfile::Builder::new()
        .prefix(".ccob-build-")
        .tempdir_in(dir.parent().unwrap_or(&dir))?;
    build(shape, work.path())?;
    // Another process may have finished first: either copy is the same.
    match fs::rename(work.path().join("out"), &dir) {
        Ok(()) => Ok(lib),
        Err(_) if lib.is_file() => Ok(lib),
        Err(e) => Err(e),
    }
}

fn build(shape: Shape, work: &Path) -> io::Result<()> {
    let fixtures = crate::fixtures::fixtures_dir();
    let out = work.join("out");
    fs::create_dir_all(&out)?;
    let mut objects = Vec::new();
    for b in 0..shape.bundles {
        for (pi, p) in processors().iter().enumerate() {
            let seed = (b * 1000 + pi) as u64;
            fs::write(
                work.join(format!("blob_{b}_{p}.bin")),
                code_like_bytes(seed, shape.blob_bytes),
            )?;
        }
        let mut src = String::from("#include \"hipmin.h\"\n");
        let _ = writeln!(
            src,
            "__global__ void ccob_kernel_{b}(int *p, int i) {{\n\
             #ifdef __HIP_DEVICE_COMPILE__\n\
             \x20 asm volatile(\".pushsection .rodata.ccob_blob,\\\"a\\\",@progbits\\n.incbin \\\"{}/blob_{b}_\" __amdgcn_processor__ \".bin\\\"\\n.popsection\" ::: \"memory\");\n\
             #endif\n\
             \x20 p[0] = i + {b};\n}}",
            work.display()
        );
        let hip = work.join(format!("tu{b}.hip"));
        fs::write(&hip, src)?;
        let obj = work.join(format!("tu{b}.o"));
        let mut cmd = Command::new("clang-19");
        cmd.args([
            "-x",
            "hip",
            "-nogpuinc",
            "-nogpulib",
            "-O2",
            "-fPIC",
            "-mcode-object-version=6",
        ])
        .args(["--offload-compress", "-Wno-unused-command-line-argument"])
        .arg(format!("-I{}", fixtures.join("src").display()))
        .arg(format!("-cuid=ccob{b}"))
        .args(TARGETS.iter().map(|t| format!("--offload-arch={t}")))
        .arg("-c")
        .arg(&hip)
        .arg("-o")
        .arg(&obj);
        run(&mut cmd)?;
        objects.push(obj);
    }
    let mut link = Command::new("clang-19");
    link.args([
        "-fuse-ld=lld",
        "-shared",
        "-Wl,--build-id=sha1",
        "-Wl,-soname,libccob.so",
    ])
    .args(&objects)
    .arg(format!("-L{}", crate::fixtures::stub_lib_dir().display()))
    .arg("-lamdhip64")
    .arg("-o")
    .arg(out.join("libccob.so"));
    run(&mut link)
}

fn run(cmd: &mut Command) -> io::Result<()> {
    let o = cmd.output().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("{cmd:?}: {e} (apt-get install clang-19 lld-19)"),
        )
    })?;
    if o.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        )))
    }
}
