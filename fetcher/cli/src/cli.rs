//! The command line (clap derive), private to the binary. Argument groups
//! that several commands need, such as [`TargetArgs`], are separate structs
//! to flatten in; `--json` ([`JsonArg`]), `-v`/`-q` and the exit-code table come from
//! `rocm_kpack_cli`, shared with `rocm-kpack`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use rocm_kpack_cli::ExitStatus::{self, Failure, NoGpu, Problems, Success, Usage};
use rocm_kpack_cli::{examples, help_footer, JsonArg};
use rocm_kpack_loader::detect::{ArchOverride, OverrideSource};

/// Environment variables, shown by `--help` after the exit-code table.
const ENVIRONMENT_HELP: &str = "\
Environment:
  ROCM_KPACK_ARCH_OVERRIDE  comma-separated targets that replace detection
                            (--target takes precedence)
  ROCM_BOOTSTRAP_DISABLE_DETECTION
                            1: no targets (AMD's rocm-bootstrap reads it too);
                            --target and ROCM_KPACK_ARCH_OVERRIDE take precedence
  ROCM_BOOTSTRAP_FORCE_GFX_ARCH
                            comma-separated targets that replace detection, as
                            for rocm-bootstrap; below the three above
  UV_AMD_GPU_ARCHITECTURE   uv's: a target (gfx1100) that replaces detection;
                            below the four above
  CONDA_OVERRIDE_AMDGPU_ARCH
                            conda's: an ISA version (9.4.2 = gfx942) that
                            replaces detection; below all of the above
  HSA_OVERRIDE_GFX_VERSION  MAJOR.MINOR.STEPPING that every GPU is treated as,
                            as the ROCm runtime does (e.g. 11.0.0 = gfx1100)
  ROCM_KPACK_PYTHON         interpreter whose site-packages are searched for
                            manifests (default python3; empty: none)
  ROCM_KPACK_FETCH_SKIP     1: `trigger` (run by the package hooks) does nothing
  ROCM_KPACK_SYSFS_ROOT     `trigger`: detect GPUs below this directory
  ROCM_KPACK_ALLOW_HTTP     1: `trigger` accepts http:// sources
  RUST_LOG                  log filter for stderr, over -v/-q (e.g. debug,
                            rocm_kpack_fetch=trace)";

/// `--help` epilogue: the exit-code table (shared with `rocm-kpack`), the
/// environment (`RUST_LOG` once, here), then examples.
fn after_help() -> String {
    format!(
        "{}\n\n{ENVIRONMENT_HELP}\n\n{}",
        ExitStatus::table(),
        examples(&[
            ("What this machine's GPUs are:", "rocm-kpack-fetch detect"),
            (
                "Install the device code they need:",
                "rocm-kpack-fetch install --auto"
            ),
            (
                "Whether every installed package has it:",
                "rocm-kpack-fetch status"
            ),
        ])
    )
}

/// A subcommand's help epilogue: the exit codes it can end with (the table
/// itself is in `rocm-kpack-fetch --help`), then 1 to 3 examples.
fn footer(statuses: &[ExitStatus], items: &[(&str, &str)]) -> String {
    help_footer("rocm-kpack-fetch", statuses, items)
}

/// Detect local AMD GPUs and fetch, verify and install the device code
/// (.kpack archives) they need.
#[derive(Debug, Parser)]
#[command(name = "rocm-kpack-fetch", version, after_help = after_help())]
pub struct Cli {
    /// `-v`/`-q`, shared with `rocm-kpack`.
    #[command(flatten)]
    pub verbosity: rocm_kpack_cli::Verbosity,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the local AMD GPUs (from the kernel's KFD topology in sysfs) and
    /// the union of their targets, which is what gets installed.
    #[command(after_help = detect_help())]
    Detect(DetectArgs),
    /// Fetch, verify and install the device-code archives that installed
    /// packages' manifests (.kpm) list for the local GPU targets.
    #[command(after_help = install_help())]
    Install(InstallArgs),
    /// Show, per installed manifest, whether the local targets are covered,
    /// and for host binaries without a .kpm (AMD's reference layout) which
    /// archives the loader would not find through their markers (exit 4
    /// when device code is missing, 3 without a GPU).
    #[command(after_help = status_help())]
    Status(StatusArgs),
    /// List the archives of every installed manifest and who installed them.
    #[command(after_help = list_help())]
    List(ListArgs),
    /// Re-hash installed archives against their manifests; with targets,
    /// also check host binaries without a .kpm as status does (exit 4 on
    /// problems).
    #[command(after_help = verify_help())]
    Verify(VerifyArgs),
    /// Remove archives rocm-kpack-fetch installed, by component or file
    /// name. Lists them unless --yes.
    #[command(after_help = remove_help())]
    Remove(RemoveArgs),
    /// Remove archives rocm-kpack-fetch installed that no local target needs
    /// any more (or whose manifest is gone). Lists them unless --yes.
    #[command(after_help = gc_help())]
    Gc(GcArgs),
    /// Remove the device code of every target neither present nor named
    /// with --keep: archives this tool fetched, and device packages through
    /// apt, dnf or pip. Lists what goes, the bytes freed and what the
    /// package manager would remove too; only --yes removes.
    #[command(after_help = prune_help())]
    Prune(PruneArgs),
    /// Check that device code can be used here: driver, /dev/kfd, container,
    /// and every local target covered for every installed manifest and
    /// every host binary without a .kpm.
    #[command(after_help = doctor_help())]
    Doctor(DoctorArgs),
    /// Run by the package hooks after a transaction that installed or
    /// removed .kpm manifests: removes the archives of removed packages,
    /// then fetches (through rocm-kpack-fetch.service when systemd runs).
    /// Prints one line; always exits 0.
    #[command(after_help = trigger_help())]
    Trigger(crate::cmd::trigger::TriggerArgs),
    /// Print the pip index URL (a per-family view that `rocm-kpack publish
    /// --pip` wrote below --base) whose base wheels bring the device wheels
    /// of this machine's GPUs.
    #[command(hide = true, disable_help_flag = true)]
    PipIndexUrl(crate::cmd::pip_index_url::PipIndexUrlArgs),
    /// `pip install ARGS` once, with the local GPUs' `device-<target>`
    /// extras added to every requirement whose distribution declares them
    /// (`pip install torch` on an MI300X installs `torch[device-gfx942]`).
    /// Our options go before `install`.
    #[command(after_help = pip_help())]
    Pip(crate::cmd::pip_install::PipInstallArgs),
    /// `uv pip install ARGS` once, with the extras as for `pip`. Our
    /// options go before `pip install`.
    #[command(after_help = uv_help())]
    Uv(crate::cmd::pip_install::PipInstallArgs),
    #[command(flatten)]
    Docs(rocm_kpack_cli::DocsCommand),
}

/// `install` help epilogue: sources, files, then its exit codes.
fn install_help() -> String {
    format!(
        "\
Sources, tried in order (a 404 moves to the next):
  --source URL (repeatable), or only --offline DIR; then
  /etc/rocm-kpack/sources.d/*.toml; then <prefix>/.kpack/<component>.sources.toml
  shipped by a generic package. Each source is a kpack store: an archive is
  fetched as URL/by-hash/sha256/<sha256>, else as URL/<file name>.

Files:
  <prefix>/.kpack/.rocm-kpack-fetch.lock        one install at a time per prefix
  <prefix>/.kpack/.rocm-kpack-fetch-state.json  what was installed, from where, why
  <cache>/partial/<sha256>.part                 resumable partial downloads

{}",
        footer(
            &ExitStatus::ALL,
            &[
                (
                    "Install the device code of this machine's GPUs:",
                    "rocm-kpack-fetch install --auto",
                ),
                (
                    "Plan for a target without its GPU, from one source:",
                    "rocm-kpack-fetch install --target gfx942 --source https://mirror.example/kpack --dry-run",
                ),
                (
                    "Install device packages through apt instead:",
                    "rocm-kpack-fetch install --auto --via apt",
                ),
            ],
        )
    )
}

fn detect_help() -> String {
    footer(
        &[Success, Failure, Usage, NoGpu],
        &[
            (
                "List the local GPUs and their targets:",
                "rocm-kpack-fetch detect",
            ),
            (
                "The same as JSON, for a script:",
                "rocm-kpack-fetch detect --json",
            ),
        ],
    )
}

fn status_help() -> String {
    footer(
        &[Success, Failure, Usage, NoGpu, Problems],
        &[
            (
                "Whether the local GPUs have their device code:",
                "rocm-kpack-fetch status",
            ),
            (
                "The same for a target this machine lacks, as JSON:",
                "rocm-kpack-fetch status --target gfx1100 --json",
            ),
        ],
    )
}

fn list_help() -> String {
    footer(
        &[Success, Failure, Usage],
        &[
            (
                "Every installed archive and who installed it:",
                "rocm-kpack-fetch list",
            ),
            ("In a chroot:", "rocm-kpack-fetch list --root /srv/chroot"),
        ],
    )
}

fn verify_help() -> String {
    footer(
        &[Success, Failure, Usage, Problems],
        &[
            (
                "Re-hash every installed archive:",
                "rocm-kpack-fetch verify",
            ),
            (
                "Also check host binaries without a .kpm for gfx1100:",
                "rocm-kpack-fetch verify --target gfx1100",
            ),
        ],
    )
}

fn remove_help() -> String {
    footer(
        &[Success, Failure, Usage],
        &[
            (
                "What removing rocrand's archives would remove:",
                "rocm-kpack-fetch remove rocrand",
            ),
            ("Remove them:", "rocm-kpack-fetch remove rocrand --yes"),
        ],
    )
}

fn gc_help() -> String {
    footer(
        &[Success, Failure, Usage, NoGpu],
        &[
            ("What no local GPU needs any more:", "rocm-kpack-fetch gc"),
            ("Remove it:", "rocm-kpack-fetch gc --yes"),
        ],
    )
}

fn prune_help() -> String {
    footer(
        &[Success, Failure, Usage, NoGpu],
        &[
            (
                "What would go, keeping gfx942 besides the local GPUs:",
                "rocm-kpack-fetch prune --keep gfx942",
            ),
            (
                "Remove it, device packages through apt included:",
                "rocm-kpack-fetch prune --via apt --yes",
            ),
        ],
    )
}

fn doctor_help() -> String {
    footer(
        &[Success, Failure, Usage, NoGpu, Problems],
        &[
            (
                "Check the driver, /dev/kfd and every package's device code:",
                "rocm-kpack-fetch doctor",
            ),
            ("As JSON:", "rocm-kpack-fetch doctor --json"),
        ],
    )
}

fn trigger_help() -> String {
    footer(
        &[Success],
        &[(
            "What the deb's file trigger runs after a transaction:",
            "rocm-kpack-fetch trigger /opt/rocm/.kpack",
        )],
    )
}

fn pip_help() -> String {
    footer(
        &[Success, Failure, Usage, NoGpu],
        &[
            (
                "Install torch with the device extras of the local GPUs:",
                "rocm-kpack-fetch pip install torch",
            ),
            (
                "Only print what would be installed:",
                "rocm-kpack-fetch pip --dry-run install torch",
            ),
        ],
    )
}

fn uv_help() -> String {
    footer(
        &[Success, Failure, Usage, NoGpu],
        &[(
            "Install torch into uv's environment with the local GPUs' extras:",
            "rocm-kpack-fetch uv pip install torch",
        )],
    )
}

/// Where to look for installed manifests; shared by every command that
/// reads them.
#[derive(Debug, Clone, Args)]
pub struct ScanArgs {
    /// Take every default path (/opt/rocm*, /usr/lib/..., site-packages,
    /// /etc/rocm-kpack, the cache) below DIR instead of / (chroots, tests).
    #[arg(long, value_name = "DIR", default_value = "/", value_parser = rocm_kpack_cli::existing_dir)]
    pub root: PathBuf,
    /// Also look for manifests in P/.kpack and up to two directory levels
    /// below P (repeatable; not taken below --root).
    #[arg(long = "prefix", value_name = "P", value_parser = rocm_kpack_cli::existing_dir)]
    pub prefixes: Vec<PathBuf>,
    /// Look only in the --prefix directories.
    #[arg(long)]
    pub no_default_prefixes: bool,
    /// The Python interpreter whose site-packages are searched for
    /// manifests, and whose pip --via pip runs [default: $ROCM_KPACK_PYTHON,
    /// else python3; empty: no Python environment].
    // `--python-exe`, its name before, stays a hidden alias for one
    // release (docs/packaging.md).
    #[arg(long, value_name = "PATH", alias = "python-exe")]
    pub python: Option<String>,
    /// Write and delete in .kpack directories that other users may write
    /// (refused by default, as sudo and ssh refuse unsafe permissions:
    /// anyone who can write there could make this tool overwrite or
    /// delete files elsewhere).
    #[arg(long)]
    pub unsafe_permissions: bool,
    /// Seconds to wait for a .kpack directory that another rocm-kpack-fetch
    /// has locked (its pid is shown) before giving up (install, remove, gc).
    #[arg(long = "wait", value_name = "SECONDS", default_value_t = rocm_kpack_fetcher::install::DEFAULT_LOCK_WAIT_SECS)]
    pub wait: u64,
}

/// Where archives come from and how they are transferred.
#[derive(Debug, Clone, Args)]
pub struct NetArgs {
    /// Fetch from this source first (repeatable, tried in order): an
    /// https:// or file:// URL or a directory path.
    #[arg(long = "source", value_name = "URL")]
    pub sources: Vec<String>,
    /// Use only this directory of archives (by name, or by-hash/sha256/HEX);
    /// no network, no configured sources.
    #[arg(long, value_name = "DIR", conflicts_with = "sources")]
    pub offline: Option<PathBuf>,
    /// Accept plain http:// sources (and redirects to loopback http).
    #[arg(long)]
    pub allow_http: bool,
    /// Parallel transfers, 1 to 64 (more is a usage error: transfers wait
    /// on the network and share one worker thread per core).
    #[arg(long, short = 'j', value_name = "N", default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub jobs: u32,
    /// Keep partial downloads here [default: /var/cache/rocm-kpack-fetch
    /// for root, else $XDG_CACHE_HOME/rocm-kpack-fetch; below --root].
    #[arg(long, value_name = "DIR", value_parser = rocm_kpack_cli::out_dir)]
    pub cache_dir: Option<PathBuf>,
    /// Seconds to wait for a connection.
    #[arg(long, value_name = "SECS", default_value_t = 30.0, value_parser = parse_secs)]
    pub connect_timeout: f64,
    /// Seconds without any data (headers or body) before a transfer counts
    /// as stalled.
    #[arg(long, value_name = "SECS", default_value_t = 60.0, value_parser = parse_secs)]
    pub read_timeout: f64,
    /// Throughput floor in bytes per second: a transfer that receives less
    /// than this, on average, over --speed-time seconds is abandoned and the
    /// next source is tried from byte 0 (0: no floor).
    #[arg(long, value_name = "BYTES", default_value_t = rocm_kpack_fetcher::client::DEFAULT_SPEED_LIMIT)]
    pub speed_limit: u64,
    /// The window of --speed-limit, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = rocm_kpack_fetcher::client::DEFAULT_SPEED_TIME_SECS as f64, value_parser = parse_secs)]
    pub speed_time: f64,
    /// Retries per URL for transient errors (timeouts, resets, 5xx, 429).
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub retries: u32,
    /// First retry wait in milliseconds (doubles each retry, with jitter).
    #[arg(long, value_name = "MS", default_value_t = 500, hide = true)]
    pub retry_base_ms: u64,
    /// The zstd level at which an archive downloaded in its transport form
    /// (one solid stream) is framed here: 1 to 19, or `release` for the
    /// published archive's own level (the result is then byte for byte
    /// the published archive, checked against the manifest's sha256)
    /// [default: 5: see docs/packaging.md].
    #[arg(long, value_name = "N|release", value_parser = parse_frame_level,
          conflicts_with = "no_transport")]
    pub frame_level: Option<rocm_kpack_fetcher::execute::FrameLevel>,
    /// Always download archives as they are published, never their
    /// transport form, and kernel-database files one by one, never as a
    /// processor's set.
    #[arg(long)]
    pub no_transport: bool,
}

/// `--native-host`: a pattern [`NativeScheme`] takes (checked with the
/// default device pattern), so a typo is a usage error in every mode.
///
/// [`NativeScheme`]: rocm_kpack_fetcher::pm::native::NativeScheme
fn parse_host_pattern(s: &str) -> Result<String, String> {
    use rocm_kpack_fetcher::pm::native::{NativeScheme, DEFAULT_DEVICE_PATTERN};
    NativeScheme::new(s, DEFAULT_DEVICE_PATTERN)
        .map(|_| s.to_owned())
        .map_err(|e| e.to_string())
}

/// `--native-device`, as [`parse_host_pattern`].
fn parse_device_pattern(s: &str) -> Result<String, String> {
    use rocm_kpack_fetcher::pm::native::{NativeScheme, DEFAULT_HOST_PATTERN};
    NativeScheme::new(DEFAULT_HOST_PATTERN, s)
        .map(|_| s.to_owned())
        .map_err(|e| e.to_string())
}

/// `--index-url`: what pip can read an index from, by the rule of
/// `--source` (plain http allowed: pip warns about it itself). The text
/// is kept as given.
fn parse_index_url(s: &str) -> Result<String, String> {
    rocm_kpack_fetcher::sources::parse_source_url(s, "--index-url", true)
        .map(|_| s.to_owned())
        .map_err(|e| e.to_string())
}

fn parse_frame_level(s: &str) -> Result<rocm_kpack_fetcher::execute::FrameLevel, String> {
    use rocm_kpack_fetcher::execute::{FrameLevel, MAX_FRAME_LEVEL};
    if s == "release" {
        return Ok(FrameLevel::Release);
    }
    match s.parse::<i32>() {
        Ok(n) if (1..=MAX_FRAME_LEVEL).contains(&n) => Ok(FrameLevel::Level(n)),
        _ => Err(format!(
            "{s:?} is neither a zstd level from 1 to {MAX_FRAME_LEVEL} nor `release`"
        )),
    }
}

fn parse_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 86_400.0 => Ok(v),
        _ => Err(format!("{s:?} is not a number of seconds in (0, 86400]")),
    }
}

/// `install` options.
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// Install for the GPUs detected here (honours ROCM_KPACK_ARCH_OVERRIDE
    /// and HSA_OVERRIDE_GFX_VERSION).
    #[arg(long, conflicts_with = "targets")]
    pub auto: bool,
    /// How to find the local targets.
    #[command(flatten)]
    pub targets: TargetArgs,
    /// Where installed manifests are.
    #[command(flatten)]
    pub scan: ScanArgs,
    /// Sources and transfers.
    #[command(flatten)]
    pub net: NetArgs,
    /// Print the plan and stop.
    #[arg(long)]
    pub dry_run: bool,
    /// Output format.
    #[command(flatten)]
    pub json: JsonArg,
    /// Exit 4 when a component publishes no device code for a local target
    /// (else a warning). A refused manifest always fails the run (exit 1).
    #[arg(long)]
    pub strict: bool,
    /// Install the device PACKAGES of the installed generic packages with
    /// this package manager instead of fetching archives (dpkg/rpm/pip then
    /// own the files). With --root DIR other than /, apt/dpkg or dnf/rpm
    /// are pointed at DIR (throwaway roots). Refused inside a dpkg/rpm
    /// transaction: package hooks use file mode.
    #[arg(long, value_enum, value_name = "PM")]
    pub via: Option<Via>,
    /// Package index for --via pip (pip's --index-url): an https://,
    /// http:// or file:// URL, or a directory.
    #[arg(long, value_name = "URL", value_parser = parse_index_url)]
    pub index_url: Option<String>,
    /// Extra argument for the package manager (repeatable), e.g.
    /// --pm-opt=--repofrompath=local,http://mirror/ for dnf or
    /// --pm-opt=-o=Acquire::Retries=3 for apt. pip runs isolated
    /// (`python -I`) from `/`: give it absolute paths.
    #[arg(long = "pm-opt", value_name = "ARG", allow_hyphen_values = true)]
    pub pm_opts: Vec<String>,
    /// AMD's native package names (--via apt|dnf).
    #[command(flatten)]
    pub native: NativeArgs,
}

/// AMD's native package scheme (packages without a .kpm): how a host
/// package and its per-target device packages are named.
#[derive(Debug, Clone, Args)]
pub struct NativeArgs {
    /// Name pattern of a host package ({base}, {version}); each installed
    /// one gets the device packages of the local targets.
    #[arg(long, value_name = "PATTERN", default_value = rocm_kpack_fetcher::pm::native::DEFAULT_HOST_PATTERN,
          value_parser = parse_host_pattern)]
    pub native_host: String,
    /// Name pattern of a host package's device package for one target
    /// ({base}, {version}, {target}).
    #[arg(long, value_name = "PATTERN", default_value = rocm_kpack_fetcher::pm::native::DEFAULT_DEVICE_PATTERN,
          value_parser = parse_device_pattern)]
    pub native_device: String,
}

/// Package managers for `install --via`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Via {
    /// apt-get (Debian, Ubuntu).
    Apt,
    /// dnf (Fedora, RHEL).
    Dnf,
    /// pip of the interpreter (--python).
    Pip,
}

/// `status` options.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// How to find the local targets.
    #[command(flatten)]
    pub targets: TargetArgs,
    /// Where installed manifests are.
    #[command(flatten)]
    pub scan: ScanArgs,
    /// Partial downloads kept here [default as for install].
    #[arg(long, value_name = "DIR", value_parser = rocm_kpack_cli::out_dir)]
    pub cache_dir: Option<PathBuf>,
    /// AMD's native package names (device packages reported).
    #[command(flatten)]
    pub native: NativeArgs,
    /// Output format.
    #[command(flatten)]
    pub json: JsonArg,
}

/// `list` options.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Where installed manifests are.
    #[command(flatten)]
    pub scan: ScanArgs,
    /// Output format.
    #[command(flatten)]
    pub json: JsonArg,
}

/// `verify` options.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The targets whose archives trees without a .kpm must hold (the
    /// loader's search through each host binary's marker); detected
    /// unless --target is given, none checked without a GPU.
    #[command(flatten)]
    pub targets: TargetArgs,
    /// Where installed manifests are.
    #[command(flatten)]
    pub scan: ScanArgs,
    /// Output format.
    #[command(flatten)]
    pub json: JsonArg,
}

/// `remove` options.
#[derive(Debug, Args)]
pub struct RemoveArgs {
    /// Components (manifest `component`) or archive file names.
    #[arg(required = true, value_name = "COMPONENT|ARCHIVE")]
    pub names: Vec<String>,
    /// Really remove (otherwise only list what would go).
    #[arg(long)]
    pub yes: bool,
    /// Where installed manifests are.
    #[command(flatten)]
    pub scan: ScanArgs,
    /// Output format.
    #[command(flatten)]
    pub json: JsonArg,
}

/// `gc` options.
#[derive(Debug, Args)]
pub struct GcArgs {
    /// Which targets to keep archives for (default: detected).
    #[command(flatten)]
    pub targets: TargetArgs,
    /// Where installed manifests are.
    #[command(flatten)]
    pub scan: ScanArgs,
    /// Really remove (otherwise only list what would go).
    #[arg(long)]
    pub yes: bool,
    /// Output format.
    #[command(flatten)]
    pub json: JsonArg,
}

/// `prune` options.
#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Which targets are present (default: detected).
    #[command(flatten)]
    pub targets: TargetArgs,
    /// Also keep this target's device code (repeatable or comma-separated).
    #[arg(long = "keep", value_name = "TARGET", value_delimiter = ',',
          value_parser = rocm_kpack_cli::parse_target)]
    pub keep: Vec<String>,
    /// Where installed manifests are.
    #[command(flatten)]
    pub scan: ScanArgs,
    /// Package managers whose device packages to prune (repeatable)
    /// [default: apt when --root has a dpkg database, dnf when it has an
    /// rpm database].
    #[arg(long, value_enum, value_name = "PM")]
    pub via: Vec<Via>,
    /// Extra argument for the package manager (repeatable), as for install.
    #[arg(long = "pm-opt", value_name = "ARG", allow_hyphen_values = true)]
    pub pm_opts: Vec<String>,
    /// AMD's native package names.
    #[command(flatten)]
    pub native: NativeArgs,
    /// Really remove (otherwise only list what would go).
    #[arg(long, conflicts_with = "dry_run")]
    pub yes: bool,
    /// With --yes, also let apt or dnf remove packages that depend on a
    /// device package and are not AMD's meta packages (refused otherwise).
    #[arg(long)]
    pub allow_dependents: bool,
    /// Only list what would go (the default without --yes).
    #[arg(long)]
    pub dry_run: bool,
    /// Output format.
    #[command(flatten)]
    pub json: JsonArg,
}

/// `doctor` options.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// How to find the local targets.
    #[command(flatten)]
    pub targets: TargetArgs,
    /// Where installed manifests are.
    #[command(flatten)]
    pub scan: ScanArgs,
    /// AMD's native package names (device packages reported).
    #[command(flatten)]
    pub native: NativeArgs,
    /// Output format.
    #[command(flatten)]
    pub json: JsonArg,
}

/// `detect` options.
#[derive(Debug, Args)]
pub struct DetectArgs {
    /// How to find the local targets.
    #[command(flatten)]
    pub targets: TargetArgs,
    /// Output format.
    #[command(flatten)]
    pub json: JsonArg,
}

/// Choosing the local targets; shared by every command that installs.
#[derive(Debug, Args)]
pub struct TargetArgs {
    /// Read sysfs and /dev below DIR instead of / (fixture trees, chroots).
    #[arg(long, value_name = "DIR", default_value = "/", value_parser = rocm_kpack_cli::existing_dir)]
    pub sysfs_root: PathBuf,
    /// Use these GPU targets instead of detecting them (repeatable or
    /// comma-separated: --target gfx1100 --target gfx90a:xnack-), e.g. on a
    /// machine without a GPU. Checked against the family table. Takes
    /// precedence over ROCM_KPACK_ARCH_OVERRIDE; HSA_OVERRIDE_GFX_VERSION
    /// changes what detection reports (see `rocm-kpack-fetch --help`).
    #[arg(long = "target", alias = "arch", value_name = "TARGET", value_delimiter = ',',
          value_parser = rocm_kpack_cli::parse_target)]
    pub targets: Vec<String>,
}

impl TargetArgs {
    /// `--target` as a detection override (None without `--target`).
    pub fn target_override(&self) -> Option<ArchOverride> {
        if self.targets.is_empty() {
            return None;
        }
        ArchOverride::parse(OverrideSource::CommandLine, &self.targets.join(",")).ok()
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    #[test]
    fn arguments_are_consistent_and_help_has_the_exit_table_once() {
        Cli::command().debug_assert();
        let help = Cli::command().render_long_help().to_string();
        assert_eq!(help.matches("Exit status:").count(), 1, "{help}");
        assert!(help.contains(&ExitStatus::table()), "{help}");
    }
}
