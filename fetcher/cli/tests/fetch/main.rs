//! `rocm-kpack-fetch install` and friends run as processes against a real
//! HTTP server on 127.0.0.1 (`rocm_kpack_test_support::http`) that
//! misbehaves on cue, with real `.kpack` archives (ArchiveWriter) and
//! `.kpm` manifests in temporary roots, and with split fixture libraries
//! (`layouts`); the `detect` command against the sysfs trees and goldens
//! (`detect_cli`), the package-manager modes (`pm_cli`) and the packaged
//! unit and hook templates (`templates`). The crate's one test binary;
//! helpers here, tests in modules.

mod commands;
mod database_sets;
mod databases;
mod detect_cli;
mod faults;
mod install;
mod layouts;
mod ops;
mod pm_cli;
mod process;
mod templates;
mod transport;
mod unlisted;

use std::borrow::BorrowMut;
use std::fs;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rocm_kpack_format::archive::{ArchiveWriter, CompressionScheme};
use rocm_kpack_format::manifest::{Manifest, ManifestFile};
use sha2::{Digest, Sha256};

pub use rocm_kpack_test_support::http::{Fault, Gate, Server};

/// A test archive: its manifest entry and bytes.
#[derive(Debug, Clone)]
pub struct Archive {
    pub file: ManifestFile,
    pub bytes: Vec<u8>,
}

impl Archive {
    /// Hex sha256.
    pub fn hex(&self) -> String {
        hex::encode(Sha256::digest(&self.bytes))
    }
    /// Server path in the content-addressed layout.
    pub fn by_hash(&self) -> String {
        format!("/by-hash/sha256/{}", self.hex())
    }
    /// Server path in the by-name layout.
    pub fn by_name(&self) -> String {
        format!("/{}", self.file.filename)
    }
}

/// Deterministic pseudo-random bytes (xorshift).
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A real `.kpack` archive for `component`/`family` with one kernel of
/// about `size / arches` bytes per arch.
pub fn make_archive(
    component: &str,
    family: &str,
    arches: &[&str],
    size: usize,
    seed: u64,
) -> Archive {
    let mut w = writer(component, family, CompressionScheme::None, 0);
    let per = size / arches.len().max(1);
    for (i, arch) in arches.iter().enumerate() {
        w.add_kernel("lib/libtest.so#0", arch, noise(per, seed * 31 + i as u64))
            .expect("add kernel");
    }
    let bytes = w.finish().expect("finish").into_inner();
    Archive {
        file: manifest_entry(component, family, arches, &bytes),
        bytes,
    }
}

/// An archive writer for `component`/`family` into memory.
pub fn writer(
    component: &str,
    family: &str,
    scheme: CompressionScheme,
    level: i32,
) -> ArchiveWriter<Cursor<Vec<u8>>> {
    ArchiveWriter::new(Cursor::new(Vec::new()), component, family, scheme, level)
        .expect("archive writer")
}

/// The manifest entry of the archive `bytes` of `component`/`family`
/// (without a transport form).
pub fn manifest_entry(
    component: &str,
    family: &str,
    arches: &[&str],
    bytes: &[u8],
) -> ManifestFile {
    ManifestFile {
        filename: format!("{component}_{family}.kpack"),
        family: family.to_string(),
        architectures: arches.iter().map(|s| s.to_string()).collect(),
        size: bytes.len() as u64,
        sha256: Some(Sha256::digest(bytes).into()),
        transport: None,
    }
}

/// A temporary root with a `/opt/rocm/.kpack` prefix and a cache.
pub struct Env {
    pub tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub kpack: PathBuf,
    pub cache: PathBuf,
}

impl Default for Env {
    fn default() -> Self {
        Env::new()
    }
}

impl Env {
    pub fn new() -> Env {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("root");
        let kpack = root.join("opt/rocm/.kpack");
        fs::create_dir_all(&kpack).expect("mkdir");
        let cache = tmp.path().join("cache");
        Env {
            tmp,
            root,
            kpack,
            cache,
        }
    }

    /// Writes `<kpack>/<component>.kpm` listing `archives`.
    pub fn manifest(&self, kpack: &Path, component: &str, archives: &[&Archive]) {
        let m = Manifest {
            component: component.to_string(),
            kpack_files: archives.iter().map(|a| a.file.clone()).collect(),
            database_files: Vec::new(),
            prefix_path: None,
        };
        fs::create_dir_all(kpack).expect("mkdir");
        fs::write(
            kpack.join(format!("{component}.kpm")),
            m.to_msgpack().expect("encode"),
        )
        .expect("write kpm");
    }

    /// The standard component: rocrand with gfx90X, gfx110X and gfx94X
    /// archives (about `size` bytes each), manifest written, nothing served.
    pub fn rocrand(&self, size: usize) -> Vec<Archive> {
        let archives = vec![
            make_archive(
                "rocrand",
                "gfx90X",
                &["gfx906", "gfx90a", "gfx90a:xnack+"],
                size,
                1,
            ),
            make_archive("rocrand", "gfx110X", &["gfx1100", "gfx1101"], size, 2),
            make_archive("rocrand", "gfx94X", &["gfx942", "gfx942:xnack+"], size, 3),
        ];
        let refs: Vec<&Archive> = archives.iter().collect();
        self.manifest(&self.kpack, "rocrand", &refs);
        archives
    }

    /// `rocm-kpack-fetch ARGS` with a clean environment.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rocm-kpack-fetch"));
        cmd.args(args);
        rocm_kpack_test_support::bins::isolate_fetcher(&mut cmd);
        cmd
    }

    /// `install --target TARGET` below this root from `sources`, with short
    /// retry waits; `extra` appended.
    pub fn install(&self, arch: &str, sources: &[String], extra: &[&str]) -> Command {
        let root = self.root.to_string_lossy().into_owned();
        let cache = self.cache.to_string_lossy().into_owned();
        let mut args: Vec<&str> = vec![
            "install",
            "--target",
            arch,
            "--root",
            &root,
            "--allow-http",
            "--retry-base-ms",
            "20",
        ];
        if !extra.contains(&"--cache-dir") {
            args.extend(["--cache-dir", cache.as_str()]);
        }
        for s in sources {
            args.extend(["--source", s.as_str()]);
        }
        args.extend(extra);
        self.cmd(&args)
    }

    /// `SUBCOMMAND --root ROOT EXTRA...`
    pub fn sub(&self, sub: &str, extra: &[&str]) -> Command {
        let root = self.root.to_string_lossy().into_owned();
        let mut args = vec![sub, "--root", &root];
        args.extend(extra);
        self.cmd(&args)
    }

    /// Files in the `.kpack` directory, sorted.
    pub fn kpack_files(&self) -> Vec<String> {
        list_dir(&self.kpack)
    }

    /// Partial downloads in the cache: (name, size).
    pub fn partials(&self) -> Vec<(String, u64)> {
        let dir = self.cache.join("partial");
        list_dir(&dir)
            .into_iter()
            .map(|n| {
                let len = fs::metadata(dir.join(&n)).map(|m| m.len()).unwrap_or(0);
                (n, len)
            })
            .collect()
    }

    /// The parsed state file.
    pub fn state(&self) -> serde_json::Value {
        let text = fs::read_to_string(self.kpack.join(".rocm-kpack-fetch-state.json"))
            .expect("state file");
        serde_json::from_str(&text).expect("state JSON")
    }
}

/// Names in a directory, sorted (none if it does not exist).
pub fn list_dir(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|e| {
            e.map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Runs to completion: (exit code, stdout, stderr).
pub fn run(mut cmd: impl BorrowMut<Command>) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.borrow_mut().output().expect("run rocm-kpack-fetch");
    (
        status.code().expect("exit code (not a signal)"),
        String::from_utf8(stdout).expect("utf-8 stdout"),
        String::from_utf8(stderr).expect("utf-8 stderr"),
    )
}

/// Asserts success and returns stdout.
#[track_caller]
pub fn ok(cmd: impl BorrowMut<Command>) -> String {
    let (code, stdout, stderr) = run(cmd);
    assert_eq!(
        code, 0,
        "exit code\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    stdout
}

/// Asserts the file holds exactly `a`'s bytes.
#[track_caller]
pub fn assert_installed(path: &Path, a: &Archive) {
    let bytes = fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        bytes == a.bytes,
        "{} differs from the archive",
        path.display()
    );
}
