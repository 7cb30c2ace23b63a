//! Split layouts written on disk with the real archive/manifest/marker
//! writers, deterministic pseudo-random bytes, and running the programs a
//! test starts: for the loader's and the C ABI's tests.

use std::fs;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::process::Command;

use rocm_kpack_format::archive::{ArchiveWriter, CompressionScheme};
use rocm_kpack_format::manifest::{Manifest, ManifestFile};
use rocm_kpack_format::marker::Marker;
use sha2::Digest;

/// The reference writer's conformance vectors, kept in the repository.
pub fn testdata() -> PathBuf {
    workspace_root().join("tests/fixtures/vectors")
}

/// The workspace root (above this crate's `CARGO_MANIFEST_DIR`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|d| d.join("Cargo.lock").is_file())
        .expect("workspace root above CARGO_MANIFEST_DIR")
        .to_path_buf()
}

/// Deterministic bytes (xorshift64*), so failures reproduce.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
    /// Compressible bytes: runs of a few symbols, like code objects.
    pub fn code_object(&mut self, len: usize, tag: &str) -> Vec<u8> {
        let mut v = tag.as_bytes().to_vec();
        while v.len() < len {
            let run = 1 + self.below(24);
            let b = (self.next_u64() % 7) as u8 * 37;
            v.resize(v.len() + run, b);
        }
        v.truncate(len.max(tag.len()));
        v
    }
}

/// A kernel: (binary key, arch key, bytes).
pub type Kernel = (String, String, Vec<u8>);

pub fn kernel(binary: &str, arch: &str, data: impl Into<Vec<u8>>) -> Kernel {
    (binary.to_owned(), arch.to_owned(), data.into())
}

/// Write an archive holding `kernels` (in order) to `path`.
pub fn write_archive(
    path: &Path,
    group: &str,
    family: &str,
    scheme: CompressionScheme,
    kernels: &[Kernel],
) {
    let mut w =
        ArchiveWriter::new(Cursor::new(Vec::new()), group, family, scheme, 3).expect("writer");
    for (b, a, d) in kernels {
        w.add_kernel(b, a, d.clone()).expect("add_kernel");
    }
    let bytes = w.finish().expect("finish").into_inner();
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).expect("mkdir");
    }
    fs::write(path, bytes).expect("write archive");
}

/// Manifest entry describing the archive at `path` as it is on disk.
pub fn manifest_file(path: &Path, family: &str, arches: &[&str]) -> ManifestFile {
    let bytes = fs::read(path).unwrap_or_default();
    ManifestFile {
        filename: path
            .file_name()
            .expect("file name")
            .to_string_lossy()
            .into_owned(),
        family: family.to_owned(),
        architectures: arches.iter().map(|s| s.to_string()).collect(),
        size: bytes.len() as u64,
        sha256: Some(sha2::Sha256::digest(&bytes).into()),
        transport: None,
    }
}

pub fn write_manifest(path: &Path, component: &str, files: Vec<ManifestFile>) {
    let m = Manifest {
        component: component.to_owned(),
        kpack_files: files,
        database_files: Vec::new(),
        prefix_path: None,
    };
    fs::write(path, m.to_msgpack().expect("manifest encodes")).expect("write manifest");
}

pub fn marker(kernel_name: &str, paths: &[&str]) -> Marker {
    Marker {
        kpack_search_paths: paths.iter().map(|s| s.to_string()).collect(),
        kernel_name: kernel_name.to_owned(),
    }
}

/// A tree-split install: `<root>/lib/libfoo.so` (the host binary) with its
/// archives in `<root>/.kpack/`, and a marker listing the manifest first and
/// the `@GFXARCH@` pattern second, like the splitter writes.
pub struct Layout {
    pub dir: tempfile::TempDir,
}

pub const KERNEL_NAME: &str = "lib/libfoo.so";
pub const COMPONENT: &str = "foo";

impl Default for Layout {
    fn default() -> Self {
        Self::new()
    }
}

impl Layout {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::create_dir_all(dir.path().join("lib")).expect("mkdir lib");
        fs::create_dir_all(dir.path().join(".kpack")).expect("mkdir .kpack");
        fs::write(dir.path().join("lib/libfoo.so"), b"host-only stand-in").expect("binary");
        Layout { dir }
    }
    pub fn root(&self) -> &Path {
        self.dir.path()
    }
    pub fn binary(&self) -> PathBuf {
        self.root().join("lib/libfoo.so")
    }
    pub fn kpack(&self, name: &str) -> PathBuf {
        self.root().join(".kpack").join(name)
    }
    /// The marker the splitter would write for this layout.
    pub fn marker(&self) -> Marker {
        marker(
            KERNEL_NAME,
            &["../.kpack/foo.kpm", "../.kpack/foo_@GFXARCH@.kpack"],
        )
    }
    /// Write `.kpack/foo_<family>.kpack` and return its path.
    pub fn archive(&self, family: &str, scheme: CompressionScheme, kernels: &[Kernel]) -> PathBuf {
        let p = self.kpack(&rocm_kpack_format::layout::archive_file_name(
            COMPONENT, family,
        ));
        write_archive(&p, COMPONENT, family, scheme, kernels);
        p
    }
    /// Write `.kpack/foo.kpm` listing (archive path, family, arches).
    pub fn manifest(&self, files: &[(&Path, &str, &[&str])]) {
        let files = files
            .iter()
            .map(|(p, f, a)| manifest_file(p, f, a))
            .collect();
        write_manifest(&self.kpack("foo.kpm"), COMPONENT, files);
    }
}

/// Damages the payload of the first zstd frame of the archive at `path`
/// (after the frame count, the size prefix and the frame header), so the
/// first kernel it holds fails to decompress.
pub fn corrupt_first_frame(path: &Path) {
    let mut bytes = fs::read(path).expect("read");
    let archive = rocm_kpack_format::archive::Archive::open(path).expect("open");
    let (zoff, _) = archive.zstd_region().expect("a zstd archive");
    drop(archive);
    let at = zoff as usize + 4 + 4 + 8;
    bytes[at] ^= 0xff;
    bytes[at + 1] ^= 0xff;
    fs::write(path, &bytes).expect("write");
}

/// `<kernel_name>#<co_index>` for the layout's binary.
pub fn key(co_index: u32) -> String {
    format!("{KERNEL_NAME}#{co_index}")
}

/// Run a command, returning (status success, stdout, stderr) as text.
pub fn run(cmd: &mut Command) -> (bool, String, String) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Run a command and fail the test with its output unless it succeeds.
pub fn run_ok(cmd: &mut Command) -> String {
    let shown = format!("{cmd:?}");
    let (ok, stdout, stderr) = run(cmd);
    assert!(
        ok,
        "{shown} failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    stdout
}
