//! A fixture install tree, built at test time from the committed fat
//! fixtures (no duplicate binaries in git): `bin/` executables (one with a
//! second hard-linked name), `lib/` shared libraries behind
//! `.so -> .so.1 -> .so.1.2` symlink chains, a Tensile-style
//! `lib/rocblas/library/`, an AOTriton-style `lib/aotriton/kernels/<gfx>/`,
//! a MIOpen database, plain files with various modes, a hard link and an
//! empty directory. Database files that are code objects hold real code
//! objects taken from the fixtures' bundles.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use rocm_kpack_format::bundle;
use rocm_kpack_splitter::elf::{self, Classification};

use crate::fixtures;

/// The fat binaries of the tree: tree path and fixture (clang19 set).
pub const BINARIES: [(&str, &str); 5] = [
    ("bin/app_pie", "clang19/app_pie"),
    ("bin/app_nopie", "clang19/app_nopie"),
    ("bin/app_rdc", "clang19/app_rdc"),
    ("lib/libfixture.so.1.2", "clang19/libfixture.so"),
    ("lib/libmulti.so.1.2", "clang19/libmulti.so"),
];

/// A second name of `bin/app_pie` (same inode).
pub const FAT_HARD_LINK: (&str, &str) = ("bin/app_pie_alias", "bin/app_pie");
/// A second name of a plain file (same inode).
pub const PLAIN_HARD_LINK: (&str, &str) =
    ("share/doc/fixture/README.alias", "share/doc/fixture/README");

/// Kernel database files: tree path, the device group of the built-in
/// spec they belong to, and the arch read from the path.
pub const DATABASES: [(&str, &str, &str); 9] = [
    (
        "lib/rocblas/library/TensileLibrary_lazy_gfx1100.dat",
        "gfx1100",
        "gfx1100",
    ),
    (
        "lib/rocblas/library/TensileLibrary_lazy_gfx90a.dat",
        "gfx90a",
        "gfx90a",
    ),
    (
        "lib/rocblas/library/TensileLibrary_Type_HH_gfx90a.co",
        "gfx90a",
        "gfx90a",
    ),
    (
        "lib/rocblas/library/TensileLibrary_Type_HH_gfx90a_xnack+.co",
        "gfx90a",
        "gfx90a:xnack+",
    ),
    (
        "lib/rocblas/library/Kernels.so-000-gfx1030.hsaco",
        "gfx1030",
        "gfx1030",
    ),
    (
        "lib/aotriton/kernels/gfx942/attn_fwd.hsaco",
        "gfx942",
        "gfx942",
    ),
    (
        "lib/aotriton/kernels/gfx942/attn_fwd.json",
        "gfx942",
        "gfx942",
    ),
    (
        "lib/aotriton/kernels/gfx1100/attn_fwd.hsaco",
        "gfx1100",
        "gfx1100",
    ),
    ("share/miopen/db/gfx90a68.kdb", "gfx90a", "gfx90a"),
];

/// A database symlink (moves with the group its name says, even where its
/// target is another's): path, target, group.
pub const DATABASE_SYMLINK: (&str, &str, &str) = (
    "lib/rocblas/library/TensileLibrary_lazy_gfx1101.dat",
    "TensileLibrary_lazy_gfx1100.dat",
    "gfx1101",
);

/// Library symlink chains: link -> target.
pub const SYMLINKS: [(&str, &str); 4] = [
    ("lib/libfixture.so.1", "libfixture.so.1.2"),
    ("lib/libfixture.so", "libfixture.so.1"),
    ("lib/libmulti.so.1", "libmulti.so.1.2"),
    ("lib/libmulti.so", "libmulti.so.1"),
];

/// Plain files: path, contents, mode.
pub const PLAIN: [(&str, &str, u32); 6] = [
    (
        "lib/rocblas/library/TensileManifest.txt",
        "TensileLibrary_lazy_gfx1100.dat\nTensileLibrary_lazy_gfx90a.dat\n",
        0o644,
    ),
    ("include/fixture.h", "int kpack_fixture_run(void);\n", 0o644),
    (
        "share/doc/fixture/README",
        "fixture install tree for rocm-kpack tests\n",
        0o644,
    ),
    (
        "bin/run.sh",
        "#!/bin/sh\nexec \"$(dirname \"$0\")/app_pie\" \"$@\"\n",
        0o755,
    ),
    ("etc/fixture.conf", "secret=1\n", 0o600),
    (
        "share/fixture/notes_gfx.txt",
        "not a target token: gfx, gfx9, gfx9999\n",
        0o444,
    ),
];

/// An empty directory the split must keep.
pub const EMPTY_DIR: &str = "lib/cmake/fixture";

/// Every code object of a fat fixture: target id -> bytes (first bundle).
pub fn code_objects(fixture: &Path) -> io::Result<BTreeMap<String, Vec<u8>>> {
    let data = fs::read(fixture)?;
    let fat = match elf::classify(&data).map_err(io::Error::other)? {
        Classification::Fat(f) => f,
        _ => return Err(io::Error::other(format!("{}: not fat", fixture.display()))),
    };
    let section = fat.fatbin_bytes().map_err(io::Error::other)?;
    let bundles = bundle::parse_fatbin(section).map_err(io::Error::other)?;
    let mut out = BTreeMap::new();
    if let Some(b) = bundles.first() {
        for (t, d) in b.code_objects() {
            out.insert(t.to_string(), d.to_vec());
        }
    }
    Ok(out)
}

fn write(root: &Path, rel: &str, data: &[u8], mode: u32) -> io::Result<PathBuf> {
    let p = root.join(rel);
    if let Some(d) = p.parent() {
        fs::create_dir_all(d)?;
    }
    fs::write(&p, data)?;
    fs::set_permissions(&p, fs::Permissions::from_mode(mode))?;
    Ok(p)
}

/// Builds the fixture tree under `root` (created). Every mtime is set to a
/// fixed time, so splits of two builds are byte-identical.
pub fn build(root: &Path) -> io::Result<()> {
    fs::create_dir_all(root)?;
    for (rel, fixture) in BINARIES {
        let data = fs::read(fixtures::fixture(fixture))?;
        write(root, rel, &data, 0o755)?;
    }
    fs::hard_link(root.join(FAT_HARD_LINK.1), root.join(FAT_HARD_LINK.0))?;
    for (link, target) in SYMLINKS {
        symlink(target, root.join(link))?;
    }
    let cos = code_objects(&fixtures::fixture("clang19/libfixture.so"))?;
    let co = |t: &str| -> io::Result<Vec<u8>> {
        cos.get(t)
            .cloned()
            .ok_or_else(|| io::Error::other(format!("fixture has no {t} code object")))
    };
    for (rel, _, arch) in DATABASES {
        let data = if rel.ends_with(".co") || rel.ends_with(".hsaco") {
            let target = match arch {
                "gfx90a" => "gfx90a:xnack-",
                "gfx942" => "gfx942:sramecc+",
                a => a,
            };
            co(target)?
        } else {
            format!("{{\"arch\": \"{arch}\", \"file\": \"{rel}\"}}\n").into_bytes()
        };
        write(root, rel, &data, 0o644)?;
    }
    symlink(DATABASE_SYMLINK.1, root.join(DATABASE_SYMLINK.0))?;
    for (rel, text, mode) in PLAIN {
        write(root, rel, text.as_bytes(), mode)?;
    }
    fs::hard_link(root.join(PLAIN_HARD_LINK.1), root.join(PLAIN_HARD_LINK.0))?;
    fs::create_dir_all(root.join(EMPTY_DIR))?;
    // Fixed times, deepest first (directories last).
    let t = filetime_fixed();
    let mut paths: Vec<PathBuf> = Vec::new();
    collect(root, &mut paths)?;
    paths.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in paths {
        set_times(&p, t)?;
    }
    set_times(root, t)
}

/// 2024-01-02 03:04:05 UTC.
const FIXED_TIME: i64 = 1_704_164_645;

fn filetime_fixed() -> i64 {
    FIXED_TIME
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    for e in fs::read_dir(dir)? {
        let e = e?;
        let p = e.path();
        if e.file_type()?.is_dir() {
            collect(&p, out)?;
        }
        out.push(p);
    }
    Ok(())
}

fn set_times(p: &Path, secs: i64) -> io::Result<()> {
    // `touch -h` sets symlinks' own times without following them.
    let status = std::process::Command::new("touch")
        .arg("-h")
        .arg("-d")
        .arg(format!("@{secs}"))
        .arg(p)
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("touch -h {} failed", p.display())))
    }
}

/// Extracts each of `trees` over `dest` in order with `cp -a` (symlinks,
/// hard links, modes and times kept), the way packages overlay.
pub fn overlay(trees: &[&Path], dest: &Path) -> io::Result<()> {
    fs::create_dir_all(dest)?;
    for t in trees {
        let status = std::process::Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", t.display()))
            .arg(dest)
            .status()?;
        if !status.success() {
            return Err(io::Error::other(format!("cp -a {} failed", t.display())));
        }
    }
    Ok(())
}

/// What a path is, for tree comparisons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// Directory with its mode.
    Dir { mode: u32 },
    /// Regular file: mode, mtime (seconds), sha256 hex, inode.
    File {
        mode: u32,
        mtime: i64,
        sha256: String,
        inode: u64,
    },
    /// Symlink and its text.
    Symlink(String),
}

/// Every path under `root` (relative, sorted) and what it is; symlinks are
/// never followed.
pub fn listing(root: &Path) -> io::Result<BTreeMap<String, Node>> {
    use std::os::unix::fs::MetadataExt;
    let mut paths = Vec::new();
    collect(root, &mut paths)?;
    let mut out = BTreeMap::new();
    for p in paths {
        let rel = p
            .strip_prefix(root)
            .map_err(io::Error::other)?
            .to_string_lossy()
            .into_owned();
        let m = fs::symlink_metadata(&p)?;
        let node = if m.file_type().is_symlink() {
            Node::Symlink(fs::read_link(&p)?.to_string_lossy().into_owned())
        } else if m.is_dir() {
            Node::Dir {
                mode: m.mode() & 0o7777,
            }
        } else {
            Node::File {
                mode: m.mode() & 0o7777,
                mtime: m.mtime(),
                sha256: crate::debian::sha256_file(&p)?,
                inode: m.ino(),
            }
        };
        out.insert(rel, node);
    }
    Ok(out)
}

/// The full error chain of `e`, as the CLI prints it (`a: b: c`).
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}
