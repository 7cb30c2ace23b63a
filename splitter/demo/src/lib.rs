//! `rocm-kpack demo`: the whole product on built-in inputs, on a machine
//! without a GPU, in a temporary directory that is reported and removed
//! (`--keep` keeps it).
//!
//! Each step is a real command (`rocm-kpack ...` in-process, through the
//! runner the `rocm-kpack` binary hands to [`run`]; `rocm-kpack-fetch ...`
//! and `dpkg ...` as children), printed before it runs; a failing step
//! stops the demo with the error and the command that reproduces it.
//!
//! Its inputs are product data in this crate: the fat binaries and the
//! stand-in HIP runtime in `binaries/` (the test fixtures, copied by
//! `binaries/generate.sh`) and the simulated machines in `machines/`.
//! The demo is a library the `rocm-kpack` binary calls with [`Options`]
//! (its `demo` arguments are the binary's): it reports errors as an
//! [`Error`], each with its chain of causes, which the binary prints.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use include_dir::{include_dir, Dir};
use rocm_kpack_cli::{iec_size, ExitStatus};
use rocm_kpack_format::marker::read_elf_marker;
use rocm_kpack_format::wrapper::FatbinWrapper;
use rocm_kpack_loader::detect::{self, DetectOptions};
use rocm_kpack_loader::loader::{Cache, LoaderConfig};
use rocm_kpack_package::compress::Compression;
use rocm_kpack_package::deb::{write_deb, DebSpec};
use rocm_kpack_package::meta::ControlFields;
use rocm_kpack_package::tree::Payload;
use rocm_kpack_package::wheel::{write_wheel, WheelSpec};
use rocm_kpack_serve::Server;
use sha2::{Digest, Sha256};

/// Runs `rocm-kpack ARGS...` (argv without the program name) in this
/// process and returns its exit status: the `rocm-kpack` binary's own
/// dispatcher, which this crate cannot link (the binary links the demo).
pub type RocmKpack<'a> = &'a dyn Fn(&[OsString]) -> Result<ExitStatus, BoxError>;

/// Any error, as the demo receives it from the crates it calls.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why the demo stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// What was being done (a step, with the command that reproduces it;
    /// a file) failed because of `source`.
    #[error("{context}")]
    Context {
        /// What was being done.
        context: String,
        /// Why it failed.
        #[source]
        source: BoxError,
    },
    /// A check of the demo failed, or an input is missing.
    #[error("{0}")]
    Failed(String),
    /// An error of a crate the demo calls, as that crate reports it.
    #[error(transparent)]
    Cause(BoxError),
}

impl Error {
    fn cause(e: impl Into<BoxError>) -> Error {
        Error::Cause(e.into())
    }
}

macro_rules! impl_from {
    ($($t:ty),* $(,)?) => {
        $(impl From<$t> for Error {
            fn from(e: $t) -> Error {
                Error::cause(e)
            }
        })*
    };
}

impl_from!(
    std::io::Error,
    std::num::ParseIntError,
    std::num::TryFromIntError,
    std::array::TryFromSliceError,
    object::Error,
    serde_json::Error,
    rocm_kpack_format::Error,
    rocm_kpack_package::PackageError,
    BoxError,
);

type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, said above its cause (the file, the step).
trait Context<T> {
    fn context(self, context: impl std::fmt::Display) -> Result<T>;
    fn with_context<C: std::fmt::Display>(self, context: impl FnOnce() -> C) -> Result<T>;
}

impl<T, E: Into<BoxError>> Context<T> for std::result::Result<T, E> {
    fn context(self, context: impl std::fmt::Display) -> Result<T> {
        self.map_err(|e| Error::Context {
            context: context.to_string(),
            source: e.into(),
        })
    }
    fn with_context<C: std::fmt::Display>(self, context: impl FnOnce() -> C) -> Result<T> {
        self.map_err(|e| Error::Context {
            context: context().to_string(),
            source: e.into(),
        })
    }
}

impl<T> Context<T> for Option<T> {
    fn context(self, context: impl std::fmt::Display) -> Result<T> {
        self.ok_or_else(|| Error::Failed(context.to_string()))
    }
    fn with_context<C: std::fmt::Display>(self, context: impl FnOnce() -> C) -> Result<T> {
        self.ok_or_else(|| Error::Failed(context().to_string()))
    }
}

/// Stops with [`Error::Failed`].
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err(Error::Failed(format!($($arg)*)))
    };
}

/// [`bail!`] unless `cond`.
macro_rules! ensure {
    ($cond:expr, $($arg:tt)*) => {
        if !$cond {
            bail!($($arg)*);
        }
    };
}

/// `outln!`, its error an [`Error`].
macro_rules! outln {
    ($($arg:tt)*) => {
        rocm_kpack_cli::outln!($($arg)*).map_err(Error::cause)
    };
}

/// Fat binaries compiled by Debian's clang-19 for seven targets (CCOB-compressed
/// and plain), embedded so the demo needs nothing but the binary:
/// (installed name, bytes).
const FAT_FIXTURES: &[(&str, &[u8])] = &[
    (
        "bin/kpack_demo_app",
        include_bytes!("../binaries/kpack_demo_app"),
    ),
    ("lib/libmulti.so", include_bytes!("../binaries/libmulti.so")),
    (
        "lib/libfixture.so",
        include_bytes!("../binaries/libfixture.so"),
    ),
];

/// The stand-in HIP runtime the fat binaries link against (records what it
/// is handed).
const STUB_HIP: &[u8] = include_bytes!("../binaries/libamdhip64.so");

/// Where the demo's deb installs: an /opt/rocm-style prefix.
const PREFIX: &str = "opt/rocm-kpack-demo";
const DEB_NAME: &str = "kpack-demo";
const WHEEL_DIST: &str = "kpack_demo";
const VERSION: &str = "1.0.0";

/// Machines `--machine` can simulate: name, description, and the KFD sysfs tree of
/// that machine (`machines/<name>`, written by `machines/generate.py`).
const GPUS: &[(&str, &str, Dir<'static>)] = &[
    (
        "rx7900xtx",
        "RX 7900 XTX (gfx1100)",
        include_dir!("$CARGO_MANIFEST_DIR/machines/rx7900xtx"),
    ),
    (
        "mi300x",
        "Instinct MI300X (gfx942)",
        include_dir!("$CARGO_MANIFEST_DIR/machines/mi300x"),
    ),
    (
        "mi210",
        "Instinct MI210 (gfx90a)",
        include_dir!("$CARGO_MANIFEST_DIR/machines/mi210"),
    ),
    (
        "w7500",
        "Radeon Pro W7500 (gfx1102)",
        include_dir!("$CARGO_MANIFEST_DIR/machines/w7500"),
    ),
    (
        "rx9070xt",
        "RX 9070 XT (gfx1201)",
        include_dir!("$CARGO_MANIFEST_DIR/machines/rx9070xt"),
    ),
    (
        "strix-halo",
        "Strix Halo APU (gfx1151)",
        include_dir!("$CARGO_MANIFEST_DIR/machines/strix-halo"),
    ),
    (
        "780m",
        "Radeon 780M APU (gfx1103)",
        include_dir!("$CARGO_MANIFEST_DIR/machines/780m"),
    ),
    (
        "apu-plus-dgpu",
        "780M APU + RX 7900 XTX",
        include_dir!("$CARGO_MANIFEST_DIR/machines/apu-plus-dgpu"),
    ),
    (
        "cpu-only",
        "a machine without an AMD GPU",
        include_dir!("$CARGO_MANIFEST_DIR/machines/cpu-only"),
    ),
];

/// Run the whole pipeline on built-in inputs, without a GPU: build a fat
/// .deb and a fat wheel from embedded fat binaries, split each into a
/// generic package plus one device package per GPU target, publish apt/pip/kpack-store
/// repositories and serve them on 127.0.0.1, install the generic package
/// into a throwaway root, let rocm-kpack-fetch add the device code for a
/// simulated GPU (a real machine's KFD sysfs tree), load every code object
/// through the runtime, run a split executable through the preload shim on
/// a stand-in HIP runtime, and report bytes saved and sha256 checks.
#[derive(Debug, Clone)]
pub struct Options {
    /// Which machine to simulate (one of [`machines`]): the KFD sysfs tree
    /// of a real machine, whose GPUs give the targets.
    pub machine: String,
    /// Keep the working directory instead of removing it.
    pub keep: bool,
    /// Work in this directory (created, kept) instead of a temporary one.
    pub dir: Option<PathBuf>,
    /// Debian 12's librocrand1 5.3.3-4 .deb to split as well, a real ROCm
    /// library beside the built-in fixtures.
    pub librocrand: Option<PathBuf>,
}

/// The machines the demo can simulate: (name, description).
pub fn machines() -> impl Iterator<Item = (&'static str, &'static str)> {
    GPUS.iter().map(|(name, about, _)| (*name, *about))
}

/// Step timings and report lines.
#[derive(Default)]
struct Report {
    steps: Vec<(String, f64)>,
    lines: Vec<String>,
}

impl Report {
    /// Runs one step, timing it; on failure the error names the command
    /// that reproduces it.
    fn step<T>(&mut self, name: &str, reproduce: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        outln!("\n==> {name}")?;
        let start = Instant::now();
        let result = f();
        self.steps
            .push((name.to_owned(), start.elapsed().as_secs_f64()));
        result.with_context(|| format!("step '{name}' failed; to reproduce: {reproduce}"))
    }
}

/// Paths of one demo run.
struct Work {
    root: PathBuf,
    sysfs: PathBuf,
    fat: PathBuf,
    split: PathBuf,
    repo: PathBuf,
    install_root: PathBuf,
    stub: PathBuf,
}

impl Work {
    fn new(root: &Path, gpu: &str) -> Work {
        Work {
            root: root.to_owned(),
            sysfs: root.join("sysfs").join(gpu),
            fat: root.join("fat"),
            split: root.join("packages"),
            repo: root.join("repo"),
            install_root: root.join("root"),
            stub: root.join("stand-in-hip"),
        }
    }
}

/// Runs the demo; `rocm_kpack` runs the `rocm-kpack` commands it shows.
pub fn run(args: Options, rocm_kpack: RocmKpack<'_>) -> Result<ExitStatus> {
    // Checked before the first step, not when the step that reads it runs.
    if let Some(deb) = &args.librocrand {
        if !deb.is_file() {
            bail!("--librocrand {}: no such file", deb.display());
        }
    }
    // The fetcher runs from step 5 on; missing, say so before step 1.
    fetcher_program()?;
    let mut tmp = None;
    let root = match &args.dir {
        Some(dir) => {
            fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            dir.clone()
        }
        None => {
            let dir = tempfile::Builder::new()
                .prefix("rocm-kpack-demo-")
                .tempdir()?;
            let path = dir.path().to_owned();
            tmp = Some(dir);
            path
        }
    };
    let kept = args.keep || args.dir.is_some();
    outln!(
        "rocm-kpack demo: simulated GPU {}, working directory {}{}",
        args.machine,
        root.display(),
        if kept {
            " (kept)"
        } else {
            " (removed at the end; --keep keeps it)"
        }
    )?;
    let started = Instant::now();
    let work = Work::new(&root, &args.machine);
    let mut report = Report::default();
    let result = run_steps(&args, &work, rocm_kpack, &mut report);
    if let Some(dir) = tmp {
        if args.keep {
            let _ = dir.keep();
        }
    }
    result?;
    outln!("\nrocm-kpack demo: report")?;
    for line in &report.lines {
        outln!("  {line}")?;
    }
    outln!("  time per step:")?;
    for (name, secs) in &report.steps {
        outln!("    {secs:>7.3} s  {name}")?;
    }
    // Apart from the build that made this program, which cargo timed.
    outln!(
        "  the demo took {:.1} s in all",
        started.elapsed().as_secs_f64()
    )?;
    Ok(ExitStatus::Success)
}

/// Prints `rocm-kpack ARGS...` and runs it through `runner`, as the user
/// would on the command line.
fn rocm_kpack_step(runner: RocmKpack<'_>, args: &[OsString]) -> Result<()> {
    let mut argv = vec![OsString::from("rocm-kpack")];
    argv.extend(args.iter().cloned());
    outln!("$ {}", shell_line(&argv))?;
    let status = runner(args)?;
    ensure!(status == ExitStatus::Success, "exited {}", status.code());
    Ok(())
}

/// Runs `rocm-kpack-fetch ARGS...` as a child process (the fetcher is its
/// own program; the splitter does not link it); returns its exit code.
fn rocm_kpack_fetch(args: &[OsString]) -> Result<u8> {
    let fetch = fetcher_program()?;
    let mut argv = vec![OsString::from("rocm-kpack-fetch")];
    argv.extend(args.iter().cloned());
    outln!("$ {}", shell_line(&argv))?;
    let status = Command::new(&fetch)
        .args(args)
        .status()
        .with_context(|| format!("running {}", fetch.display()))?;
    status
        .code()
        .and_then(|c| u8::try_from(c).ok())
        .with_context(|| format!("{} was killed ({status})", fetch.display()))
}

fn os(args: &[&dyn AsRefOs]) -> Vec<OsString> {
    args.iter().map(|a| a.to_os()).collect()
}

/// Strings and paths alike, for building argument lists.
trait AsRefOs {
    fn to_os(&self) -> OsString;
}
impl AsRefOs for &str {
    fn to_os(&self) -> OsString {
        OsString::from(self)
    }
}
impl AsRefOs for String {
    fn to_os(&self) -> OsString {
        OsString::from(self)
    }
}
impl AsRefOs for PathBuf {
    fn to_os(&self) -> OsString {
        self.as_os_str().to_owned()
    }
}

fn shell_line(argv: &[OsString]) -> String {
    argv.iter()
        .map(|a| {
            let s = a.to_string_lossy();
            if s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+".contains(c))
            {
                s.into_owned()
            } else {
                format!("'{}'", s.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn run_steps(
    args: &Options,
    work: &Work,
    runner: RocmKpack<'_>,
    report: &mut Report,
) -> Result<()> {
    let rocm_kpack = |argv: &[OsString]| rocm_kpack_step(runner, argv);
    // 1. Inputs: a fat deb and a fat wheel carrying the fat fixtures.
    let (fat_deb, fat_wheel) = report.step(
        "build a fat .deb and a fat wheel from the built-in fat binaries",
        "rocm-kpack demo --keep",
        || {
            let (_, _, tree) = GPUS
                .iter()
                .find(|(name, _, _)| *name == args.machine)
                .with_context(|| format!("no built-in sysfs tree for {}", args.machine))?;
            extract_dir(tree, &work.sysfs)?;
            fs::create_dir_all(&work.stub)?;
            fs::write(work.stub.join("libamdhip64.so"), STUB_HIP)?;
            let deb = build_fat_deb(work)?;
            let wheel = build_fat_wheel(work)?;
            for p in [&deb, &wheel] {
                outln!("    {} ({})", p.display(), iec_size(fs::metadata(p)?.len()))?;
            }
            Ok((deb, wheel))
        },
    )?;
    rocm_kpack(&os(&[
        &"inspect",
        &work
            .fat
            .join("deb-root")
            .join(PREFIX)
            .join("lib/libmulti.so"),
    ]))?;

    // 2. Split the packages.
    let librocrand = args.librocrand.as_ref();
    report.step(
        "split each fat package into a generic package + one package per GPU target",
        &format!("rocm-kpack split-package {} --out {}", fat_deb.display(), work.split.display()),
        || {
            rocm_kpack(&os(&[&"split-package", &fat_deb, &"--out", &work.split]))?;
            rocm_kpack(&os(&[&"split-package", &fat_wheel, &"--out", &work.split]))?;
            if let Some(deb) = librocrand {
                rocm_kpack(&os(&[&"split-package", deb, &"--out", &work.split]))?;
            } else {
                outln!(
                    "    (a real ROCm library too: `apt-get download librocrand1=5.3.3-4` on Debian 12, then --librocrand FILE)"
                )?;
            }
            Ok(())
        },
    )?;

    // 3. Publish and serve.
    let server = report.step(
        "publish apt, pip and kpack-store repositories and serve them on 127.0.0.1",
        &format!(
            "rocm-kpack publish {} --out {}",
            work.split.display(),
            work.repo.display()
        ),
        || {
            let store_url = format!("file://{}", std::path::absolute(&work.repo)?.display());
            rocm_kpack(&os(&[
                &"publish",
                &work.split,
                &"--out",
                &work.repo,
                &"--apt",
                &"--pip",
                &"--kpack-store",
                &"--store-url",
                &store_url,
                // The fetcher's own packages (a deb, an rpm and a wheel of
                // a 10 MiB program, at release compression) took most of
                // the demo's time; the demo runs this build's
                // rocm-kpack-fetch and installs no package of it.
                &"--no-fetcher",
            ]))?;
            outln!(
                "    (--no-fetcher: without it, publish also adds rocm-kpack-fetch's own deb, rpm and wheel, \
                 which the generic packages recommend; the demo runs this build's rocm-kpack-fetch instead)"
            )?;
            let server = Server::start(&work.repo)?;
            outln!("    serving {} at {}", work.repo.display(), server.url)?;
            Ok(server)
        },
    )?;

    // 4. The user installs the generic package only.
    let generic_deb = find_package(
        &work.split,
        &format!("{DEB_NAME}_{}_", split_deb_version(VERSION)?),
    )?;
    report.step(
        "install the generic (host-only) package into a throwaway root",
        &format!(
            "dpkg --root={} --force-not-root -i {}",
            work.install_root.display(),
            generic_deb.display()
        ),
        || install_deb(&work.install_root, &generic_deb),
    )?;

    // 5. Detect the GPU.
    let targets = report.step(
        "detect the GPU from its KFD sysfs tree",
        &format!(
            "rocm-kpack-fetch detect --sysfs-root {}",
            work.sysfs.display()
        ),
        || {
            let code = rocm_kpack_fetch(&os(&[&"detect", &"--sysfs-root", &work.sysfs]))?;
            let detection = detect::detect(&work.sysfs, &DetectOptions::default())?;
            let has_targets = !detection.targets.is_empty();
            ensure!(
                (code == ExitStatus::Success.code()) == has_targets,
                "detect exited {code} for targets {:?}",
                detection.targets
            );
            Ok(detection.targets)
        },
    )?;

    // 6. The fetcher adds the device code the GPU needs.
    let fetch_args = os(&[
        &"install",
        &"--auto",
        &"--root",
        &work.install_root,
        &"--no-default-prefixes",
        &"--prefix",
        &work.install_root.join(PREFIX),
        &"--sysfs-root",
        &work.sysfs,
        &"--source",
        &server.url,
        &"--allow-http",
    ]);
    let fetched = report.step(
        "rocm-kpack-fetch install --auto: fetch, verify and install the archives and database files this GPU needs",
        &format!("rocm-kpack-fetch {}", shell_line(&fetch_args)),
        || {
            let code = rocm_kpack_fetch(&fetch_args)?;
            let no_gpu = ExitStatus::NoGpu.code();
            if targets.is_empty() {
                ensure!(code == no_gpu, "expected exit {no_gpu} (no GPU), got {code}");
                return Ok(Vec::new());
            }
            ensure!(code == ExitStatus::Success.code(), "install exited {code}");
            let kpack_dir = work.install_root.join(PREFIX).join(".kpack");
            let mut fetched = Vec::new();
            for e in fs::read_dir(&kpack_dir)? {
                let p = e?.path();
                if p.extension().is_some_and(|x| x == "kpack") && !p.is_symlink() {
                    fetched.push(p);
                }
            }
            for m in fs::read_dir(&kpack_dir)? {
                let p = m?.path();
                if p.extension().is_some_and(|x| x == "kpm") {
                    let m = rocm_kpack_format::manifest::Manifest::read(&p)?;
                    for d in &m.database_files {
                        let installed = work.install_root.join(PREFIX).join(&d.path);
                        if installed.is_file() {
                            fetched.push(installed);
                        }
                    }
                }
            }
            fetched.sort();
            ensure!(
                fetched.iter().any(|p| p.extension().is_some_and(|x| x == "co")),
                "no kernel-database file was fetched"
            );
            let code = rocm_kpack_fetch(&os(&[&"verify", &"--root", &work.install_root, &"--no-default-prefixes", &"--prefix", &work.install_root.join(PREFIX)]))?;
            ensure!(code == ExitStatus::Success.code(), "verify exited {code}");
            Ok(fetched)
        },
    )?;
    if targets.is_empty() {
        outln!(
            "\nThe simulated machine ({}) has no AMD GPU, so it needs no device code:\n\
             the generic package is installed and its host code runs; rocm-kpack-fetch\n\
             found nothing to fetch and exited {} (\"no GPU\"). On a machine with a GPU it\n\
             would fetch that GPU family's archives; try `rocm-kpack demo --machine mi300x`.",
            args.machine,
            ExitStatus::NoGpu.code()
        )?;
        report.lines.push(format!(
            "{}: no AMD GPU, nothing fetched (as intended)",
            args.machine
        ));
        return Ok(());
    }

    // 7. Load every code object through the runtime, compare with originals.
    let isas = detect::process_isas(&targets, None);
    let loaded = report.step(
        "load every code object for this GPU through the runtime loader; compare sha256 with the fat originals",
        &format!(
            "ROCM_KPACK_DEBUG=1 rocm-kpack verify {} --targets {}",
            work.install_root.join(PREFIX).display(),
            isas.join(",")
        ),
        || load_and_compare(work, &isas),
    )?;

    // 8. Run the split executable through the preload shim, when this
    // program has one beside it (an installed `rocm-kpack` may not).
    let registered = match preload_shim()? {
        Some(shim) => Some(report.step(
            "run the split executable with the preload shim on a stand-in HIP runtime",
            "LD_PRELOAD=librocm_kpack_preload.so ROCM_KPACK_DEBUG=1 <root>/opt/rocm-kpack-demo/bin/kpack_demo_app",
            || run_with_preload(work, &isas, &shim),
        )?),
        None => {
            outln!(
                "\n==> preload shim: skipped, {PRELOAD_SHIM} is neither beside this program nor in ../lib \
                 (`{BUILD_COMMAND}` builds it beside rocm-kpack)"
            )?;
            None
        }
    };

    let auto_line = auto_bytes(work, &fat_deb)?;

    // 9. Take the device code away again: `remove` deletes what the
    // fetcher installed, database files included (as the package trigger
    // does when the generic package is removed).
    report.step(
        "rocm-kpack-fetch remove: delete the fetched archives and database files",
        "rocm-kpack-fetch remove kpack-demo --yes",
        || {
            let prefix = work.install_root.join(PREFIX);
            let kpack_dir = prefix.join(".kpack");
            let mut components = BTreeSet::new();
            for e in fs::read_dir(&kpack_dir)? {
                let p = e?.path();
                if p.extension().is_some_and(|x| x == "kpm") {
                    components.insert(rocm_kpack_format::manifest::Manifest::read(&p)?.component);
                }
            }
            let mut argv = os(&[
                &"remove",
                &"--root",
                &work.install_root,
                &"--no-default-prefixes",
                &"--prefix",
                &prefix,
                &"--yes",
            ]);
            argv.extend(components.iter().map(OsString::from));
            let code = rocm_kpack_fetch(&argv)?;
            ensure!(code == ExitStatus::Success.code(), "remove exited {code}");
            for p in &fetched {
                ensure!(!p.exists(), "{} is still there after remove", p.display());
            }
            Ok(())
        },
    )?;

    // Report.
    report.lines.push(format!(
        "GPU: {} -> targets {}",
        args.machine,
        targets.join(", ")
    ));
    let mut packages = vec![(DEB_NAME.to_owned(), VERSION.to_owned(), fat_deb.clone())];
    if let Some(deb) = librocrand {
        packages.push(("librocrand1".to_owned(), "5.3.3-4".to_owned(), deb.clone()));
    }
    for (name, version, fat) in &packages {
        report
            .lines
            .push(user_bytes(&work.split, name, version, fat, &targets)?);
    }
    report.lines.push(auto_line);
    report.lines.push(format!(
        "archives and database files fetched and verified (size + sha256): {}",
        fetched
            .iter()
            .filter_map(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    report.lines.push(format!(
        "code objects loaded through the runtime, sha256 equal to the originals: {loaded}"
    ));
    report.lines.push(match registered {
        Some(n) => format!(
            "preload shim: {n} fat binary registration(s) handed to the HIP runtime as HIPF bundles, sha256 equal to the originals"
        ),
        None => format!("preload shim: skipped ({PRELOAD_SHIM} not found)"),
    });
    drop(server);
    Ok(())
}

/// Download and installed bytes: the fat package vs the generic package
/// plus the device packages of this GPU's families and of the generic ISAs
/// they carry (a family package depends on those, docs/packaging.md
/// "Package naming", so apt downloads them too).
fn user_bytes(
    split: &Path,
    name: &str,
    version: &str,
    fat: &Path,
    targets: &[String],
) -> Result<String> {
    let spec = rocm_kpack_pkgspec::Spec::builtin();
    let version = &split_deb_version(version)?;
    let sizes =
        |p: &Path| -> Result<(u64, u64)> { Ok((fs::metadata(p)?.len(), installed_size(p)?)) };
    let (fat_dl, fat_inst) = sizes(fat)?;
    let (gen_dl, gen_inst) = sizes(&find_package(split, &format!("{name}_{version}_"))?)?;
    let mut groups = BTreeSet::new();
    for t in targets {
        for g in spec.group_for(t).unwrap_or_default() {
            groups.insert(g.name.to_ascii_lowercase());
            groups.extend(g.generic_isas.iter().map(|i| i.to_ascii_lowercase()));
        }
    }
    let (mut dl, mut inst, mut names) = (gen_dl, gen_inst, vec![name.to_owned()]);
    for g in &groups {
        if let Ok(p) = find_package(split, &format!("{name}-{g}_{version}_")) {
            let (d, i) = sizes(&p)?;
            dl += d;
            inst += i;
            names.push(format!("{name}-{g}"));
        }
    }
    let pct = |a: u64, b: u64| 100.0 * a as f64 / b.max(1) as f64;
    Ok(format!(
        "{name} through apt (generic + device debs): download {} -> {} ({:.0}%), installed {} -> {} ({:.0}%) with {}{}",
        iec_size(fat_dl),
        iec_size(dl),
        pct(dl, fat_dl),
        // dpkg's Installed-Size is in KiB.
        iec_size(fat_inst.saturating_mul(1024)),
        iec_size(inst.saturating_mul(1024)),
        pct(inst, fat_inst),
        names.join(" + "),
        if names.len() == 1 { " (no device code for this GPU in this package)" } else { "" }
    ))
}

/// What `install --auto` costs: the generic deb plus the bytes on the wire
/// for what the fetcher installed (archives as stored; database files as
/// their zstd-encoded store objects), against the fat deb; and the share
/// device code has in the fat package, with the same figures measured on a
/// real library for comparison.
fn auto_bytes(work: &Work, fat: &Path) -> Result<String> {
    let generic = find_package(
        &work.split,
        &format!("{DEB_NAME}_{}_", split_deb_version(VERSION)?),
    )?;
    let state_path = work
        .install_root
        .join(PREFIX)
        .join(".kpack/.rocm-kpack-fetch-state.json");
    let state: serde_json::Value = serde_json::from_str(&fs::read_to_string(&state_path)?)?;
    let index: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(work.repo.join("index.json"))?)?;
    let mut wire = 0u64;
    for (_, e) in state["archives"].as_object().into_iter().flatten() {
        wire += e["size"].as_u64().unwrap_or(0);
    }
    for (_, e) in state["databases"].as_object().into_iter().flatten() {
        let stored = index["database_files"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|d| d["sha256"] == e["sha256"])
            .and_then(|d| d["stored_size"].as_u64())
            .context("database file missing from index.json")?;
        wire += stored;
    }
    let fat_size = fs::metadata(fat)?.len();
    let total = fs::metadata(&generic)?.len() + wire;
    Ok(format!(
        "{DEB_NAME} through `rocm-kpack-fetch install --auto`: generic deb + {} on the wire = {} of the fat deb's {} ({:.0}%). \
         (The fixture's code objects are a few KiB, so package overhead weighs more here than in a real library; \
         `cargo run --release -p rocm-kpack-fetch --example bench_download` measures Debian's librocsparse0 per processor.)",
        iec_size(wire),
        iec_size(total),
        iec_size(fat_size),
        100.0 * total as f64 / fat_size.max(1) as f64
    ))
}

/// `Installed-Size` (KiB) from a deb's control file, as dpkg reports it.
fn installed_size(deb: &Path) -> Result<u64> {
    let out = Command::new("dpkg-deb")
        .args(["-f"])
        .arg(deb)
        .arg("Installed-Size")
        .output()?;
    ensure!(out.status.success(), "dpkg-deb -f {} failed", deb.display());
    Ok(String::from_utf8_lossy(&out.stdout).trim().parse()?)
}

/// Where the demo's Tensile-style kernel database lives below the prefix.
const TENSILE_DIR: &str = "lib/kpack-demo-blas/library";

/// Bytes of each processor's database file: large enough that device code
/// has the share of the package it has in real libraries (over 90%), small
/// enough that packaging, splitting and publishing it at the release
/// compression levels (xz, zstd 19) takes seconds: at 2 MiB those three
/// steps were 50 s of a 50 s demo.
const TENSILE_FILE_SIZE: usize = 256 << 10;

/// A Tensile-style kernel database for each processor the fixtures are
/// built for: `TensileLibrary_<processor>.co`, one of that processor's
/// real code objects repeated (as Tensile's thousands of similar kernels
/// are), so it compresses like the real thing.
fn tensile_database() -> Result<Vec<(String, Vec<u8>)>> {
    let libmulti = FAT_FIXTURES
        .iter()
        .find(|(n, _)| *n == "lib/libmulti.so")
        .context("libmulti fixture")?
        .1;
    let mut by_processor: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for ((_, target), code) in original_code_objects(libmulti)? {
        let id = target.rsplit("--").next().unwrap_or(&target);
        let processor = id.split(':').next().unwrap_or(id).to_string();
        by_processor.entry(processor).or_insert(code);
    }
    Ok(by_processor
        .into_iter()
        .map(|(processor, code)| {
            // Real kernel databases compress to a few percent, not to
            // nothing: vary every 16th byte (deterministically), from a
            // seed of the processor's own, as no two processors' databases
            // share those bytes (with one seed for all, xz found the
            // shared bytes across files and the fat deb looked smaller
            // than it would be).
            let seed = Sha256::digest(processor.as_bytes());
            let mut x = u32::from_le_bytes([seed[0], seed[1], seed[2], seed[3]]) | 1;
            let bytes: Vec<u8> = code
                .iter()
                .cycle()
                .take(TENSILE_FILE_SIZE)
                .enumerate()
                .map(|(i, b)| {
                    if i % 16 == 0 {
                        x ^= x << 13;
                        x ^= x >> 17;
                        x ^= x << 5;
                        x.to_le_bytes()[0]
                    } else {
                        *b
                    }
                })
                .collect();
            (
                format!("{TENSILE_DIR}/TensileLibrary_{processor}.co"),
                bytes,
            )
        })
        .collect())
}

fn build_fat_deb(work: &Work) -> Result<PathBuf> {
    let root = work.fat.join("deb-root");
    for (name, bytes) in FAT_FIXTURES {
        let path = root.join(PREFIX).join(name);
        fs::create_dir_all(path.parent().context("parent")?)?;
        fs::write(&path, bytes)?;
        let mode = if name.starts_with("bin/") {
            0o755
        } else {
            0o644
        };
        fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(mode))?;
    }
    for (name, bytes) in tensile_database()? {
        let path = root.join(PREFIX).join(name);
        fs::create_dir_all(path.parent().context("parent")?)?;
        fs::write(&path, bytes)?;
    }
    let control = ControlFields::parse(&format!(
        "Package: {DEB_NAME}\nVersion: {VERSION}\nArchitecture: amd64\nMaintainer: rocm-kpack demo <demo@rocm-kpack.invalid>\n\
         Section: libs\nPriority: optional\nDescription: rocm-kpack demo fat binaries\n \
         Fat binaries compiled from rocm-kpack's test sources for seven GPU targets.\n"
    ))
    .map_err(Error::Failed)?;
    let payload = Payload::scan(&root)?;
    let out = work.fat.join(format!("{DEB_NAME}_{VERSION}_amd64.deb"));
    write_deb(
        fs::File::create(&out)?,
        &DebSpec {
            control,
            control_files: &[],
            payload: &payload,
            compression: Compression::Xz,
            level: None,
            mtime: source_date_epoch()?,
        },
    )?;
    Ok(out)
}

fn build_fat_wheel(work: &Work) -> Result<PathBuf> {
    let root = work.fat.join("wheel-root");
    let pkg = root.join(WHEEL_DIST);
    fs::create_dir_all(&pkg)?;
    fs::write(
        pkg.join("__init__.py"),
        "\"\"\"rocm-kpack demo package with a fat HIP library.\"\"\"\n",
    )?;
    for (name, bytes) in FAT_FIXTURES.iter().filter(|(n, _)| n.starts_with("lib/")) {
        fs::write(pkg.join(name.trim_start_matches("lib/")), bytes)?;
    }
    let payload = Payload::scan(&root)?;
    let mut files = BTreeMap::new();
    files.insert(
        "METADATA".to_owned(),
        format!("Metadata-Version: 2.1\nName: kpack-demo\nVersion: {VERSION}\nSummary: rocm-kpack demo fat wheel\n").into_bytes(),
    );
    files.insert(
        "WHEEL".to_owned(),
        b"Wheel-Version: 1.0\nGenerator: rocm-kpack-demo\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n".to_vec(),
    );
    let out = work
        .fat
        .join(format!("{WHEEL_DIST}-{VERSION}-py3-none-linux_x86_64.whl"));
    write_wheel(
        fs::File::create(&out)?,
        &WheelSpec {
            dist_info: format!("{WHEEL_DIST}-{VERSION}.dist-info"),
            dist_info_files: files,
            payload: &payload,
            mtime: source_date_epoch()?,
        },
    )?;
    Ok(out)
}

fn source_date_epoch() -> Result<u64> {
    Ok(rocm_kpack_package::source_date_epoch()?)
}

/// The one package in `dir` whose file name starts with `prefix`.
/// The version of the split debs of a fat deb at `version` (the built-in
/// spec's suffix, as the demo splits with it).
fn split_deb_version(version: &str) -> Result<String> {
    rocm_kpack_pkgspec::Spec::builtin()
        .version
        .deb(version)
        .map_err(Error::Failed)
}

fn find_package(dir: &Path, prefix: &str) -> Result<PathBuf> {
    let mut found = Vec::new();
    for e in fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let p = e?.path();
        if p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        {
            found.push(p);
        }
    }
    match found.as_slice() {
        [one] => Ok(one.clone()),
        _ => bail!(
            "expected one package {prefix}* in {}, found {found:?}",
            dir.display()
        ),
    }
}

/// Installs a deb into a throwaway root with dpkg (as the packaging tests do).
fn install_deb(root: &Path, deb: &Path) -> Result<()> {
    for d in ["var/lib/dpkg/updates", "var/lib/dpkg/info"] {
        fs::create_dir_all(root.join(d))?;
    }
    let status = root.join("var/lib/dpkg/status");
    if !status.exists() {
        fs::write(&status, "")?;
    }
    outln!(
        "$ dpkg --root={} --force-not-root -i {}",
        root.display(),
        deb.display()
    )?;
    let out = Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .args(["--force-not-root", "-i"])
        .arg(deb)
        .output()
        .context("running dpkg (Debian: apt-get install dpkg)")?;
    ensure!(
        out.status.success(),
        "dpkg failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// The code objects of a fat binary by (bundle index, target id).
fn original_code_objects(data: &[u8]) -> Result<BTreeMap<(u32, String), Vec<u8>>> {
    use object::{Object as _, ObjectSection as _};
    let file = object::File::parse(data)?;
    let section = file
        .section_by_name(".hip_fatbin")
        .context("no .hip_fatbin section")?;
    let mut out = BTreeMap::new();
    for (index, bundle) in rocm_kpack_format::bundle::parse_fatbin(section.data()?)?
        .iter()
        .enumerate()
    {
        for (target, code) in bundle.code_objects() {
            out.insert((u32::try_from(index)?, target.to_owned()), code.to_vec());
        }
    }
    Ok(out)
}

/// The co_index of every wrapper of a split binary (each a HIPK wrapper
/// pointing at the marker).
fn split_co_indices(data: &[u8]) -> Result<Vec<u32>> {
    use object::{Object as _, ObjectSection as _};
    let file = object::File::parse(data)?;
    let section = file
        .section_by_name(".hipFatBinSegment")
        .context("no .hipFatBinSegment section")?;
    FatbinWrapper::parse_all(section.data()?)?
        .iter()
        .enumerate()
        .map(|(i, w)| {
            ensure!(w.is_hipk(), "wrapper {i} is not a HIPK wrapper: not split");
            Ok(w.co_index())
        })
        .collect()
}

fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

fn load_and_compare(work: &Work, isas: &[String]) -> Result<usize> {
    let cache = Cache::with_config(LoaderConfig::default());
    let mut loaded = 0;
    for (name, fat) in FAT_FIXTURES {
        let originals = original_code_objects(fat)?;
        let host_path = work.install_root.join(PREFIX).join(name);
        let marker = read_elf_marker(&mut fs::File::open(&host_path)?, &host_path)?
            .with_context(|| format!("{name}: not split (no marker)"))?;
        for co_index in split_co_indices(&fs::read(&host_path)?)
            .with_context(|| format!("{name}: its fat binary wrappers"))?
        {
            for isa in isas {
                let co = cache
                    .load_code_object(&marker, &host_path, co_index, &[isa.as_str()])
                    .with_context(|| format!("{name}#{co_index} for {isa}"))?;
                let want = originals
                    .get(&(co_index, co.arch.clone()))
                    .with_context(|| {
                        format!(
                            "{name}#{co_index}: no {} code object in the fat binary",
                            co.arch
                        )
                    })?;
                let (got, want) = (sha256_hex(&co.data), sha256_hex(want));
                ensure!(
                    got == want,
                    "{name}#{co_index} {}: sha256 {got}, original {want}",
                    co.arch
                );
                outln!(
                    "    {name}#{co_index} for {isa}: {} code object from {}, {} bytes, sha256 {}.. = original",
                    co.arch,
                    co.archive_path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
                    co.data.len(),
                    &got[..16]
                )?;
                loaded += 1;
            }
        }
    }
    Ok(loaded)
}

/// The README's first command: one `cargo build` of the three packages
/// the demo runs (one feature set, so every shared crate compiles once),
/// which leaves the fetcher and the preload shim beside `rocm-kpack`.
pub const BUILD_COMMAND: &str =
    "cargo build --release -p rocm-kpack -p rocm-kpack-fetch -p rocm-kpack-preload";

/// Where `librocm_kpack_preload.so` is: beside this executable (the
/// README's build), or in `../lib` (runtime/install-runtime.sh's prefix
/// beside `cargo install --root` of the same prefix). None when neither
/// has it: an installed demo has no source tree to build it from, and
/// runs no cargo.
fn preload_shim() -> Result<Option<PathBuf>> {
    let dir = this_program_dir()?;
    Ok([
        dir.join(PRELOAD_SHIM),
        dir.join("../lib").join(PRELOAD_SHIM),
    ]
    .into_iter()
    .find(|p| p.is_file()))
}

const PRELOAD_SHIM: &str = "librocm_kpack_preload.so";

/// Where `rocm-kpack-fetch` is: beside this executable (the same build,
/// or `cargo install` of both commands), else on PATH.
fn fetcher_program() -> Result<PathBuf> {
    const FETCH: &str = "rocm-kpack-fetch";
    let dir = this_program_dir()?;
    if dir.join(FETCH).is_file() {
        return Ok(dir.join(FETCH));
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(FETCH))
        .find(|p| p.is_file())
        .with_context(|| {
            format!(
                "{FETCH} is neither beside {} nor on PATH; build both commands at once \
                 (`{BUILD_COMMAND}`, from the source tree) or install {FETCH}",
                dir.display()
            )
        })
}

fn this_program_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating this program")?;
    Ok(exe.parent().context("this program's directory")?.to_owned())
}

fn run_with_preload(work: &Work, isas: &[String], shim: &Path) -> Result<usize> {
    let record = work.root.join("hip-registrations");
    fs::create_dir_all(&record)?;
    let app = work.install_root.join(PREFIX).join(FAT_FIXTURES[0].0);
    outln!(
        "$ LD_PRELOAD={} LD_LIBRARY_PATH={} ROCM_KPACK_ARCH_OVERRIDE={} {}",
        shim.display(),
        work.stub.display(),
        isas.join(","),
        app.display()
    )?;
    let out = Command::new(&app)
        .env("LD_PRELOAD", shim)
        .env("LD_LIBRARY_PATH", &work.stub)
        .env("ROCM_KPACK_ARCH_OVERRIDE", isas.join(","))
        .env("HIPSTUB_RECORD", &record)
        .env("HIPSTUB_STRICT", "1")
        .output()
        .with_context(|| format!("running {}", app.display()))?;
    ensure!(
        out.status.success(),
        "{} exited {:?}: {}",
        app.display(),
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    let originals = original_code_objects(FAT_FIXTURES[0].1)?;
    let mut names: Vec<PathBuf> = fs::read_dir(&record)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    names.sort();
    let mut n = 0;
    for path in names
        .iter()
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
    {
        let bytes = fs::read(path)?;
        ensure!(
            bytes.get(..8) == Some(b"HIPSTUB1"),
            "{}: not a stand-in record",
            path.display()
        );
        let magic = u32::from_le_bytes(bytes.get(8..12).context("record")?.try_into()?);
        ensure!(
            magic == rocm_kpack_format::wrapper::HIPF_MAGIC,
            "the HIP runtime received magic {magic:#x}, not HIPF"
        );
        for bundle in
            &rocm_kpack_format::bundle::parse_fatbin(bytes.get(40..).context("record payload")?)?
        {
            for (target, code) in bundle.code_objects() {
                let want = originals
                    .iter()
                    .find(|((_, t), _)| t == target)
                    .map(|(_, c)| c)
                    .with_context(|| format!("no original {target} code object"))?;
                ensure!(
                    sha256_hex(code) == sha256_hex(want),
                    "{target}: registered bytes differ from the original"
                );
                outln!("    HIP runtime received a HIPF bundle with the {target} code object, {} bytes = original", code.len())?;
            }
        }
        n += 1;
    }
    ensure!(n > 0, "the stand-in HIP runtime recorded no registration");
    Ok(n)
}

/// Writes an embedded directory tree to `dest`.
fn extract_dir(dir: &Dir<'_>, dest: &Path) -> Result<()> {
    fs::create_dir_all(dest)?;
    for entry in dir.entries() {
        let path = dest.join(entry.path());
        match entry {
            include_dir::DirEntry::Dir(d) => extract_dir(d, dest)?,
            include_dir::DirEntry::File(f) => {
                if let Some(parent) = path.parent() {
                    fs::create_dir_all(parent)?;
                }
                fs::write(&path, f.contents())?;
            }
        }
    }
    Ok(())
}
