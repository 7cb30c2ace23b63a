//! Debian's ROCm packages as real-world test data: pinned versions, fetched
//! with `apt-get download` when not cached, checked against pinned sha256
//! sums, extracted once with `dpkg-deb -x`.
//!
//! Where .debs are looked for, in order: `$ROCM_KPACK_TESTDATA` (if set),
//! `/var/cache/rocm-kpack-debs`, `<workspace>/target/debian-cache`. Downloads
//! and extractions go to `$ROCM_KPACK_TESTDATA` if set, else
//! `<workspace>/target/debian-cache`. `tests/scripts/fetch-debian-testdata.sh`
//! does the same from a shell.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// A pinned Debian package.
#[derive(Debug, Clone, Copy)]
pub struct Package {
    /// Package name.
    pub name: &'static str,
    /// Exact Debian version.
    pub version: &'static str,
    /// sha256 of the .deb, lowercase hex.
    pub sha256: &'static str,
}

impl Package {
    /// The file name `apt-get download` writes.
    pub fn file_name(&self) -> String {
        format!("{}_{}_amd64.deb", self.name, self.version)
    }
}

/// Every package the tests and benchmarks use (Debian 12 bookworm).
pub const PACKAGES: [Package; 3] = [
    Package {
        name: "librocrand1",
        version: "5.3.3-4",
        sha256: "b145d4e47a26ce14da5f8550a092db8d3c7e2d84174c68885336de40f51b7b81",
    },
    Package {
        name: "librocsparse0",
        version: "5.3.0+dfsg-2",
        sha256: "688878bb8cb9ec7970e7b632828d91336a6819860fb0c306372eb6a7199b3b8e",
    },
    Package {
        name: "libamdhip64-5",
        version: "5.2.3-8",
        sha256: "e89c3757b6ca16b7a03374a0a42402ab19e9e7000251d47379838be965330ebd",
    },
];

/// Packages bookworm lacks, from Debian 13 trixie through a private apt
/// configuration ([`trixie_apt_args`]): librocsolver0 for the scaling
/// benchmark, librocblas0 (166 MB deb, 2.26 GB installed, most of it the
/// Tensile kernel database) for the kernel-database test and benchmark,
/// libhipfft0-tests (1.1 MB deb) for its fat executable `hipfft-test`
/// (GNU ld, with a GNU_PROPERTY note: unlike the fixtures').
pub const TRIXIE_PACKAGES: [Package; 3] = [
    Package {
        name: "librocsolver0",
        version: "5.5.1-7",
        sha256: "8b3763a18c7bebc244337432bbef5e1ff4ac4dcf56bba32e766b4070c3afaee0",
    },
    Package {
        name: "librocblas0",
        version: "5.5.1+dfsg-7",
        sha256: "951dfa1a46ee275dace455f396640cfc63a47927455a0903b73c4e50030574c1",
    },
    Package {
        name: "libhipfft0-tests",
        version: "6.1.2-3",
        sha256: "76a01cbe5c5b588548cb37ec1747eacc2f58acfa4af95f89cf3aee37e12a9302",
    },
];

/// apt options of a private configuration under `<cache>/apt-trixie/`
/// (its own sources.list, state and cache; the machine's sources are
/// never touched), written and `apt-get update`d on first use.
pub fn trixie_apt_args() -> io::Result<Vec<String>> {
    let root = cache_dir().join("apt-trixie");
    let sources = root.join("etc/sources.list");
    let args: Vec<String> = [
        format!("Dir::Etc::SourceList={}", sources.display()),
        "Dir::Etc::SourceParts=/nonexistent".to_string(),
        format!("Dir::State={}", root.display()),
        format!("Dir::State::Lists={}", root.join("lists").display()),
        format!("Dir::State::status={}", root.join("status").display()),
        format!("Dir::Cache={}", root.display()),
        format!("Dir::Cache::archives={}", root.join("archives").display()),
    ]
    .into_iter()
    .flat_map(|o| ["-o".to_string(), o])
    .collect();
    let updated = std::fs::read_dir(root.join("lists"))
        .map(|rd| {
            rd.filter_map(Result::ok)
                .any(|e| e.file_name().to_string_lossy().ends_with("_InRelease"))
        })
        .unwrap_or(false);
    if !updated {
        for d in ["etc", "lists/partial", "archives/partial"] {
            std::fs::create_dir_all(root.join(d))?;
        }
        std::fs::write(
            &sources,
            "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main\n",
        )?;
        if !root.join("status").exists() {
            std::fs::write(root.join("status"), "")?;
        }
        let status = Command::new("apt-get")
            .args(&args)
            .args(["-q", "update"])
            .status()
            .map_err(|e| io::Error::other(format!("running apt-get update (trixie): {e}")))?;
        if !status.success() {
            return Err(io::Error::other(format!(
                "apt-get update of the private trixie configuration failed ({status})"
            )));
        }
    }
    Ok(args)
}

/// System-wide cache that CI images pre-populate.
const SYSTEM_CACHE: &str = "/var/cache/rocm-kpack-debs";

/// The pinned package called `name`.
pub fn pinned(name: &str) -> io::Result<Package> {
    PACKAGES
        .iter()
        .chain(TRIXIE_PACKAGES.iter())
        .find(|p| p.name == name)
        .copied()
        .ok_or_else(|| io::Error::other(format!("{name}: not a pinned test package")))
}

/// Where downloads and extractions go.
pub fn cache_dir() -> PathBuf {
    match std::env::var_os("ROCM_KPACK_TESTDATA") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .nth(2)
            .expect("workspace root above tests/support/")
            .join("target")
            .join("debian-cache"),
    }
}

fn search_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("ROCM_KPACK_TESTDATA").filter(|d| !d.is_empty()) {
        dirs.push(PathBuf::from(d));
    }
    dirs.push(PathBuf::from(SYSTEM_CACHE));
    dirs.push(cache_dir());
    dirs
}

/// sha256 of a file, lowercase hex.
pub fn sha256_file(path: &Path) -> io::Result<String> {
    sha256_reader(&mut std::fs::File::open(path)?)
}

/// Hex sha256 of everything `reader` yields.
pub fn sha256_reader(reader: &mut dyn std::io::Read) -> io::Result<String> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(buf.get(..n).unwrap_or_default());
    }
    Ok(hex::encode(hasher.finalize()))
}

/// Checks `path` has the pinned sha256 of `pkg`.
pub fn verify_deb(pkg: &Package, path: &Path) -> io::Result<()> {
    let actual = sha256_file(path)?;
    if actual != pkg.sha256 {
        return Err(io::Error::other(format!(
            "{}: sha256 {actual}, expected {} for {} {}",
            path.display(),
            pkg.sha256,
            pkg.name,
            pkg.version
        )));
    }
    Ok(())
}

/// Path of the verified .deb of `name` (one of [`PACKAGES`]), downloading it
/// with `apt-get download name=version` if no cache has it. A cached or
/// downloaded file whose sha256 differs is an error.
pub fn package(name: &str) -> io::Result<PathBuf> {
    let pkg = pinned(name)?;
    let file = pkg.file_name();
    for dir in search_dirs() {
        let path = dir.join(&file);
        if path.is_file() {
            verify_deb(&pkg, &path)?;
            return Ok(path);
        }
    }
    let dest_dir = cache_dir();
    std::fs::create_dir_all(&dest_dir)?;
    // Download into a private directory, verify, then rename into place so a
    // concurrent test never sees a partial file.
    let tmp = tempfile::Builder::new()
        .prefix(".download-")
        .tempdir_in(&dest_dir)?;
    let trixie = if TRIXIE_PACKAGES.iter().any(|p| p.name == name) {
        trixie_apt_args()?
    } else {
        Vec::new()
    };
    let status = Command::new("apt-get")
        .args(&trixie)
        .arg("download")
        .arg(format!("{}={}", pkg.name, pkg.version))
        .current_dir(tmp.path())
        .status()
        .map_err(|e| io::Error::other(format!("running apt-get download: {e}")))?;
    if !status.success() {
        return Err(io::Error::other(format!(
            "apt-get download {}={} failed ({status}); is a Debian bookworm apt source configured?",
            pkg.name, pkg.version
        )));
    }
    let downloaded = tmp.path().join(&file);
    verify_deb(&pkg, &downloaded)?;
    let dest = dest_dir.join(&file);
    std::fs::rename(&downloaded, &dest)?;
    Ok(dest)
}

/// Root of the extracted package (`dpkg-deb -x`), extracted once into the
/// cache directory (to a temporary directory renamed into place).
pub fn extracted(name: &str) -> io::Result<PathBuf> {
    let pkg = pinned(name)?;
    let root = cache_dir()
        .join("extracted")
        .join(format!("{}_{}", pkg.name, pkg.version));
    if root.is_dir() {
        return Ok(root);
    }
    let deb = package(name)?;
    let parent = root
        .parent()
        .ok_or_else(|| io::Error::other("extraction directory has no parent"))?;
    std::fs::create_dir_all(parent)?;
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{}-", pkg.name))
        .tempdir_in(parent)?;
    let status = Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(tmp.path())
        .status()
        .map_err(|e| io::Error::other(format!("running dpkg-deb: {e}")))?;
    if !status.success() {
        return Err(io::Error::other(format!(
            "dpkg-deb -x {} failed ({status})",
            deb.display()
        )));
    }
    let tmp_path = tmp.keep();
    match std::fs::rename(&tmp_path, &root) {
        Ok(()) => Ok(root),
        // Another process finished first: use its tree.
        Err(_) if root.is_dir() => {
            std::fs::remove_dir_all(&tmp_path)?;
            Ok(root)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp_path);
            Err(e)
        }
    }
}

const LIBDIR: &str = "usr/lib/x86_64-linux-gnu";

/// The targets of librocrand's offload bundle, as `inspect` sorts them.
pub const LIBROCRAND_TARGETS: [&str; 7] = [
    "gfx1030",
    "gfx803",
    "gfx900:xnack-",
    "gfx906:xnack-",
    "gfx908:xnack-",
    "gfx90a:xnack+",
    "gfx90a:xnack-",
];

/// Debian's `librocrand.so.1.1` (1 bundle, 7 device targets).
pub fn librocrand_so() -> io::Result<PathBuf> {
    Ok(extracted("librocrand1")?
        .join(LIBDIR)
        .join("librocrand.so.1.1"))
}

/// trixie's `hipfft-test` (5.7 MB fat PIE executable, 11 code objects).
pub fn hipfft_test() -> io::Result<PathBuf> {
    Ok(extracted("libhipfft0-tests")?.join("usr/libexec/rocm/libhipfft0-tests/hipfft-test"))
}

/// Debian's `librocsparse.so.0.1` (1.3 GB; for benchmarks).
pub fn librocsparse_so() -> io::Result<PathBuf> {
    Ok(extracted("librocsparse0")?
        .join(LIBDIR)
        .join("librocsparse.so.0.1"))
}

/// trixie's `librocsolver.so.0.1` (1.59 GB, 1.58 GB of `.hip_fatbin`; for
/// benchmarks).
pub fn librocsolver_so() -> io::Result<PathBuf> {
    Ok(extracted("librocsolver0")?
        .join(LIBDIR)
        .join("librocsolver.so.0.1"))
}

/// Debian's real HIP runtime `libamdhip64.so.5.2.21153`.
pub fn libamdhip64_so() -> io::Result<PathBuf> {
    Ok(extracted("libamdhip64-5")?
        .join(LIBDIR)
        .join("libamdhip64.so.5.2.21153"))
}
