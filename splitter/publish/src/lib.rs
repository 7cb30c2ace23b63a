//! `rocm-kpack publish`: turn a directory of packages into repositories
//! that stock clients use (docs/packaging.md "Publishing"):
//!
//! - apt ([`apt`]): `pool/main/<prefix>/<source>/*.deb`,
//!   `dists/<suite>/main/binary-<arch>/Packages{,.gz}`, `dists/<suite>/Release`
//!   (MD5Sum + SHA256; signed: `InRelease`, `Release.gpg`);
//! - yum/dnf ([`yum`]): `<arch>/*.rpm` + `repodata/` (repomd.xml, primary,
//!   filelists, other; signed: `repomd.xml.asc`), written natively;
//! - pip ([`pip`]): `files/*.whl` (+ `.metadata`, PEP 658), PEP 503
//!   `simple/index.html` and `simple/<project>/index.html`, and PEP 691
//!   JSON as `index.json` beside each `index.html`;
//! - kpack store ([`store`]): `by-hash/sha256/<hex>` + `index.json`, from
//!   the `.kpack` archives found loose in PKG_DIR or inside its packages;
//! - the `rocm-kpack-fetch` packages ([`fetcher`]), built from a fetcher
//!   binary and added to the apt, yum and pip repositories, with the
//!   store's URL as their sources file (`--store-url`).
//!
//! Each repository kind is built in a staging directory inside `--out`
//! and its top-level directories replace the previous ones only when
//! everything succeeded. Output is deterministic (dates from
//! SOURCE_DATE_EPOCH, sorted entries, gzip without timestamps); only GPG
//! signatures differ between runs.

pub mod apt;
pub mod cache;
pub mod fetcher;
pub mod pip;
pub mod store;
pub mod yum;

use rocm_kpack_format::layout;
use rocm_kpack_fs::{check_replaceable, move_into_place, PathError};
use rocm_kpack_package::progress::ProgressHandle;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;

use rocm_kpack_package::PackageError;

/// Everything that can stop a publish.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// Reading an input package failed or it is malformed.
    #[error(transparent)]
    Package(#[from] PackageError),
    /// A file system operation failed.
    // Not transparent: the PathError stays in the source chain, where
    // rocm_kpack_cli::hint_for finds the path of a full file system.
    #[error("{0}")]
    Io(#[from] PathError),
    /// A signing key was given but gpg cannot be run.
    #[error("signing with key {key:?} requested but {program:?} was not found; install gnupg or drop --sign-key")]
    GpgMissing {
        /// The gpg program tried.
        program: PathBuf,
        /// The key.
        key: String,
    },
    /// gpg failed.
    #[error("gpg failed to sign {}: {detail}", path.display())]
    Sign {
        /// The file being signed.
        path: PathBuf,
        /// gpg's stderr.
        detail: String,
    },
    /// Bad arguments or conflicting inputs.
    #[error("{0}")]
    Invalid(String),
}

impl PublishError {
    pub(crate) fn io(what: &'static str, path: &Path, source: io::Error) -> Self {
        PublishError::Io(PathError::new(what, path, source))
    }
}

/// How [`publish`] publishes.
#[derive(Debug, Clone)]
pub struct PublishOptions {
    /// Write an apt repository.
    pub apt: bool,
    /// Write a yum/dnf repository.
    pub yum: bool,
    /// Write a pip simple index.
    pub pip: bool,
    /// Write the kpack store.
    pub kpack_store: bool,
    /// apt suite (and codename).
    pub suite: String,
    /// apt component.
    pub component: String,
    /// apt Origin and Label.
    pub origin: String,
    /// GPG key id to sign with.
    pub sign_key: Option<String>,
    /// The gpg program.
    pub gpg: PathBuf,
    /// Dates in Release, repomd.xml and index.json.
    pub source_date_epoch: u64,
    /// Build the `rocm-kpack-fetch` packages from this binary and add them
    /// to the repositories written.
    pub fetcher: Option<fetcher::FetcherOptions>,
    /// Replace repository directories that exist (`--force`, republishing);
    /// else they are refused.
    pub replace_existing: bool,
    /// Where progress goes (one item per repository kind written).
    pub progress: ProgressHandle,
    /// zstd level of the store's kernel-database objects (default
    /// [`rocm_kpack_format::archive::RELEASE_ZSTD_LEVEL`]).
    pub store_zstd_level: i32,
    /// Threads encoding the store's objects at once (at least 1; fewer run
    /// when their encoders would not fit in `memory`).
    pub jobs: usize,
    /// Memory budget of the store's encoders, in bytes: objects are encoded
    /// in parallel only while their encoders fit (see
    /// [`store::encoder_memory`]).
    pub memory: u64,
    /// Directory of encoded store objects kept between runs (see
    /// [`cache`]): an object found there, intact, is copied instead of
    /// encoded again; one encoded is added.
    pub cache: Option<PathBuf>,
}

impl Default for PublishOptions {
    fn default() -> Self {
        PublishOptions {
            apt: false,
            yum: false,
            pip: false,
            kpack_store: false,
            suite: "stable".into(),
            component: "main".into(),
            origin: "rocm-kpack".into(),
            sign_key: None,
            gpg: PathBuf::from("gpg"),
            source_date_epoch: rocm_kpack_package::DEFAULT_SOURCE_DATE_EPOCH,
            fetcher: None,
            replace_existing: false,
            progress: ProgressHandle::default(),
            store_zstd_level: rocm_kpack_format::archive::RELEASE_ZSTD_LEVEL,
            jobs: 1,
            memory: 1 << 30,
            cache: None,
        }
    }
}

/// Packages found in PKG_DIR, each list sorted.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// `.deb` files.
    pub debs: Vec<PathBuf>,
    /// `.rpm` files.
    pub rpms: Vec<PathBuf>,
    /// `.whl` files.
    pub wheels: Vec<PathBuf>,
    /// Loose `.kpack` archives.
    pub kpacks: Vec<PathBuf>,
}

/// Finds packages under `dir` (recursively; symlinks and hidden entries
/// skipped; `exclude` and everything below it skipped).
pub fn scan_inputs(dir: &Path, exclude: Option<&Path>) -> Result<Inputs, PublishError> {
    let mut inputs = Inputs::default();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if let Some(ex) = exclude {
            if fs::canonicalize(&d).is_ok_and(|c| c.starts_with(ex)) {
                continue;
            }
        }
        let rd = fs::read_dir(&d).map_err(|e| PublishError::io("cannot list", &d, e))?;
        for item in rd {
            let item = item.map_err(|e| PublishError::io("cannot list", &d, e))?;
            let name = item.file_name();
            let name = name.to_string_lossy();
            let ft = item
                .file_type()
                .map_err(|e| PublishError::io("cannot stat", &item.path(), e))?;
            let p = item.path();
            // Hidden entries are skipped (temporary files, staging
            // directories), except `.kpack/` directories of split trees.
            if name.starts_with('.') && !(ft.is_dir() && name == layout::KPACK_DIR) {
                continue;
            }
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file() {
                if name.ends_with(".deb") {
                    inputs.debs.push(p);
                } else if name.ends_with(".rpm") && !name.ends_with(".src.rpm") {
                    inputs.rpms.push(p);
                } else if name.ends_with(".whl") {
                    inputs.wheels.push(p);
                } else if layout::is_archive_path(&name) {
                    inputs.kpacks.push(p);
                }
            }
        }
    }
    inputs.debs.sort();
    inputs.rpms.sort();
    inputs.wheels.sort();
    inputs.kpacks.sort();
    Ok(inputs)
}

/// What [`publish`] wrote.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PublishReport {
    /// The package directory read.
    pub input: PathBuf,
    /// The repository root written (`--out`).
    pub output: PathBuf,
    /// debs in the apt repository.
    pub debs: usize,
    /// rpms in the yum repository.
    pub rpms: usize,
    /// wheels in the pip index.
    pub wheels: usize,
    /// Archives in the kpack store.
    pub archives: usize,
    /// Store objects encoded by this run.
    pub objects_encoded: usize,
    /// Store objects copied from the cache instead of encoded.
    pub objects_from_cache: usize,
    /// Repository kinds written.
    pub kinds: Vec<String>,
    /// Top-level entries of the output replaced.
    pub replaced: Vec<String>,
    /// The `rocm-kpack-fetch` packages built and added (file names).
    pub fetcher_packages: Vec<String>,
    /// Things the user should know (no store URL for installs, ...).
    pub warnings: Vec<String>,
}

/// Which repository kinds a publish writes: those asked for, or with none
/// asked for, each kind that has packages, and the kpack store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct KindsOn {
    apt: bool,
    yum: bool,
    pip: bool,
    store: bool,
}

impl KindsOn {
    fn of(opts: &PublishOptions, inputs: &Inputs) -> KindsOn {
        if opts.apt || opts.yum || opts.pip || opts.kpack_store {
            KindsOn {
                apt: opts.apt,
                yum: opts.yum,
                pip: opts.pip,
                store: opts.kpack_store,
            }
        } else {
            KindsOn {
                apt: !inputs.debs.is_empty(),
                yum: !inputs.rpms.is_empty(),
                pip: !inputs.wheels.is_empty(),
                store: true,
            }
        }
    }

    fn names(self) -> Vec<String> {
        [
            (self.apt, "apt"),
            (self.yum, "yum"),
            (self.pip, "pip"),
            (self.store, "kpack-store"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, name)| (*name).to_owned())
        .collect()
    }
}

/// What [`plan`] found: what a publish with the same arguments would
/// write, without writing anything.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PublishPlan {
    /// The package directory read.
    pub input: PathBuf,
    /// The repository root that would be written.
    pub output: PathBuf,
    /// Repository kinds that would be written.
    pub kinds: Vec<String>,
    /// The packages and loose archives found, by kind (paths).
    pub debs: Vec<PathBuf>,
    pub rpms: Vec<PathBuf>,
    pub wheels: Vec<PathBuf>,
    pub archives: Vec<PathBuf>,
    /// Whether the rocm-kpack-fetch packages would be built and added.
    pub fetcher_packages: bool,
}

/// The checks every publish makes before reading a package: the package
/// directory is not inside the output, the suite is a plain name, gpg runs
/// when signing; then the inputs found, never none.
fn prepare(pkg_dir: &Path, out: &Path, opts: &PublishOptions) -> Result<Inputs, PublishError> {
    let pkg_canon =
        fs::canonicalize(pkg_dir).map_err(|e| PublishError::io("cannot read", pkg_dir, e))?;
    let out_canon = rocm_kpack_fs::resolve_existing(out)
        .map_err(|e| PublishError::io("cannot read", out, e))?;
    if pkg_canon.starts_with(&out_canon) {
        return Err(PublishError::Invalid(format!(
            "the package directory {} is inside the output {}; choose another --out",
            pkg_dir.display(),
            out.display()
        )));
    }
    if opts.suite.is_empty()
        || !opts
            .suite
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(PublishError::Invalid(format!(
            "suite {:?}: letters, digits, `-_.` only",
            opts.suite
        )));
    }
    if let Some(key) = &opts.sign_key {
        check_gpg(&opts.gpg, key)?;
    }
    let inputs = scan_inputs(pkg_dir, Some(&out_canon))?;
    if inputs.debs.is_empty()
        && inputs.rpms.is_empty()
        && inputs.wheels.is_empty()
        && inputs.kpacks.is_empty()
    {
        // A publish of nothing is a mistake (a wrong directory), not an
        // empty repository.
        return Err(PublishError::Invalid(format!(
            "{}: no packages to publish (searched it recursively for .deb, .rpm and .whl files and .kpack archives)",
            pkg_dir.display()
        )));
    }
    Ok(inputs)
}

/// What [`publish`] would write, writing nothing (`--dry-run`).
pub fn plan(
    pkg_dir: &Path,
    out: &Path,
    opts: &PublishOptions,
) -> Result<PublishPlan, PublishError> {
    let inputs = prepare(pkg_dir, out, opts)?;
    let kinds = KindsOn::of(opts, &inputs);
    Ok(PublishPlan {
        input: pkg_dir.to_path_buf(),
        output: out.to_path_buf(),
        kinds: kinds.names(),
        fetcher_packages: opts.fetcher.is_some() && (kinds.apt || kinds.yum || kinds.pip),
        debs: inputs.debs,
        rpms: inputs.rpms,
        wheels: inputs.wheels,
        archives: inputs.kpacks,
    })
}

/// Publishes the packages of `pkg_dir` into `out`. With no kind selected,
/// every kind that has inputs is written, plus the kpack store. A package
/// directory with no package in it is an error that names it.
pub fn publish(
    pkg_dir: &Path,
    out: &Path,
    opts: &PublishOptions,
) -> Result<PublishReport, PublishError> {
    let mut inputs = prepare(pkg_dir, out, opts)?;
    fs::create_dir_all(out).map_err(|e| PublishError::io("cannot create", out, e))?;
    let kinds = KindsOn::of(opts, &inputs);
    let (apt_on, yum_on, pip_on, store_on) = (kinds.apt, kinds.yum, kinds.pip, kinds.store);
    let mut report = PublishReport {
        input: pkg_dir.to_path_buf(),
        output: out.to_path_buf(),
        ..PublishReport::default()
    };
    // Built outside the staging directory, whose entries all become
    // top-level entries of the repository.
    let fetcher_dir = tempfile::Builder::new()
        .prefix(".publish-fetcher-")
        .tempdir_in(out)
        .map_err(|e| PublishError::io("cannot create a directory in", out, e))?;
    if let Some(f) = &opts.fetcher {
        let kinds = fetcher::Kinds {
            deb: apt_on,
            rpm: yum_on,
            wheel: pip_on,
        };
        for path in
            fetcher::build_fetcher_packages(f, kinds, opts.source_date_epoch, fetcher_dir.path())?
        {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if name.ends_with(".deb") {
                inputs.debs.push(path);
            } else if name.ends_with(".rpm") {
                inputs.rpms.push(path);
            } else {
                inputs.wheels.push(path);
            }
            report.fetcher_packages.push(name);
        }
        if f.store_url.is_none() && (apt_on || yum_on) {
            report.warnings.push(
                "no --store-url: the rocm-kpack-fetch packages name no kpack store, so installing a generic package fetches no device code until a source is configured (/etc/rocm-kpack/sources.d/)"
                    .into(),
            );
        }
    }
    let staging = tempfile::Builder::new()
        .prefix(".publish-staging-")
        .tempdir_in(out)
        .map_err(|e| PublishError::io("cannot create a staging directory in", out, e))?;
    let stage = staging.path();
    let kinds = [apt_on, yum_on, pip_on, store_on]
        .iter()
        .filter(|k| **k)
        .count();
    opts.progress.begin("publish", "repositories", kinds as u64);
    if apt_on {
        report.debs = apt::write_apt(&inputs.debs, stage, opts)?;
        report.kinds.push("apt".into());
        opts.progress.item_done("apt");
    }
    if yum_on {
        report.rpms = yum::write_yum(&inputs.rpms, stage, opts)?;
        report.kinds.push("yum".into());
        opts.progress.item_done("yum");
    }
    if pip_on {
        report.wheels = pip::write_pip(&inputs.wheels, stage, opts.source_date_epoch)?;
        report.kinds.push("pip".into());
        opts.progress.item_done("pip");
    }
    if store_on {
        let written = store::write_store(&inputs, stage, opts)?;
        report.archives = written.entries;
        report.objects_encoded = written.encoded;
        report.objects_from_cache = written.from_cache;
        report.kinds.push("kpack-store".into());
        opts.progress.item_done("kpack-store");
    }
    // Swap staged top-level entries into place.
    let mut names: Vec<_> = fs::read_dir(stage)
        .map_err(|e| PublishError::io("cannot list", stage, e))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()
        .map_err(|e| PublishError::io("cannot list", stage, e))?;
    names.sort();
    // The overwrite rule: every entry is checked before the first moves.
    for name in &names {
        let dest = out.join(name);
        check_replaceable(&dest, opts.replace_existing)
            .map_err(|e| PublishError::io(e.action, &dest, e.source))?;
    }
    for name in names {
        let dest = out.join(&name);
        let existed = fs::symlink_metadata(&dest).is_ok();
        move_into_place(&stage.join(&name), &dest, opts.replace_existing)?;
        if existed {
            report.replaced.push(name.to_string_lossy().into_owned());
        }
    }
    Ok(report)
}

/// Writes `data` to `path`, creating parent directories.
pub(crate) fn write_file(path: &Path, data: &[u8]) -> Result<(), PublishError> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(|e| PublishError::io("cannot create", parent, e))?;
    }
    // Fsynced and renamed into place; readable by a web server.
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o644);
    rocm_kpack_fs::write_atomically(path, data, Some(mode)).map_err(PublishError::from)
}

/// Copies a package into the repository (creating parents).
pub(crate) fn copy_file(src: &Path, dest: &Path) -> Result<(), PublishError> {
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent).map_err(|e| PublishError::io("cannot create", parent, e))?;
    }
    // Into a temporary file, fsynced, then renamed: a crash leaves no
    // short package under its final name.
    let copy_err = |e| PublishError::io("cannot copy into the repository:", dest, e);
    let mut out = rocm_kpack_fs::PendingFile::create(dest)?;
    let mut input = fs::File::open(src).map_err(|e| PublishError::io("cannot open", src, e))?;
    io::copy(&mut input, out.file_mut()).map_err(copy_err)?;
    out.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
    out.commit()?;
    Ok(())
}

/// gzip with no name and mtime 0 (deterministic).
pub(crate) fn gzip(data: &[u8]) -> Result<Vec<u8>, PublishError> {
    use std::io::Write;
    let mut enc = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::new(9));
    enc.write_all(data)
        .and_then(|_| enc.finish())
        .map_err(|e| PublishError::io("cannot compress", Path::new("<memory>"), e))
}

/// XML text escaping.
pub(crate) fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // XML 1.0 forbids most control characters.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => {}
            c => out.push(c),
        }
    }
    out
}

fn check_gpg(gpg: &Path, key: &str) -> Result<(), PublishError> {
    match Command::new(gpg).arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err(PublishError::GpgMissing {
            program: gpg.to_path_buf(),
            key: key.to_string(),
        }),
    }
}

/// How [`sign`] signs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignMode {
    /// `--clearsign` (apt InRelease).
    Clear,
    /// `--armor --detach-sign` (Release.gpg, repomd.xml.asc).
    Detached,
}

/// Signs `input` into `output` with gpg.
pub fn sign(
    opts: &PublishOptions,
    input: &Path,
    output: &Path,
    mode: SignMode,
) -> Result<(), PublishError> {
    let Some(key) = &opts.sign_key else {
        return Ok(());
    };
    let mut cmd = Command::new(&opts.gpg);
    cmd.args([
        "--batch",
        "--yes",
        "--no-tty",
        "--digest-algo",
        "SHA256",
        "--local-user",
    ])
    .arg(key)
    .arg("--armor");
    match mode {
        SignMode::Clear => cmd.arg("--clearsign"),
        SignMode::Detached => cmd.arg("--detach-sign"),
    };
    cmd.arg("--output").arg(output).arg(input);
    let o = cmd.output().map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            PublishError::GpgMissing {
                program: opts.gpg.clone(),
                key: key.clone(),
            }
        } else {
            PublishError::io("cannot run gpg for", input, e)
        }
    })?;
    if !o.status.success() {
        return Err(PublishError::Sign {
            path: input.to_path_buf(),
            detail: String::from_utf8_lossy(&o.stderr).trim().to_string(),
        });
    }
    Ok(())
}
