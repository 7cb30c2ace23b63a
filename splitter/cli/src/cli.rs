//! Argument definitions. Each subcommand's arguments live with the command
//! in `cmd/`; this file lists the commands and declares, once, the argument
//! groups several of them flatten in (`--spec`/`--target`, `--out`,
//! `--jobs`, archive compression) and their value parsers, so a bad value
//! is a usage error (exit 2) when the line is parsed. `--json`, `-v`/`-q`,
//! the exit codes and the help footers are shared with `rocm-kpack-fetch`
//! through `rocm_kpack_cli`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use rocm_kpack_cli::ExitStatus::{self, Failure, Problems, Success, Usage};
use rocm_kpack_cli::{examples, help_footer, UsageError};
use rocm_kpack_format::archive::{CompressionScheme, RELEASE_ZSTD_LEVEL};
use rocm_kpack_package::compress::Compression as PackageCompression;
use rocm_kpack_pkgspec::Spec;
use rocm_kpack_splitter::split::output::ArchiveOutput;

use crate::cmd;

/// Split AMD GPU fat binaries into host-only binaries plus per-GPU
/// `.kpack` archives (one per processor, packaged per GPU target), and
/// inspect what fat binaries, archives and packages contain.
#[derive(Debug, Parser)]
#[command(name = "rocm-kpack", version, propagate_version = true)]
#[command(after_help = after_help())]
pub struct Cli {
    /// `-v`/`-q`, shared with `rocm-kpack-fetch`.
    #[command(flatten)]
    pub verbosity: rocm_kpack_cli::Verbosity,
    #[command(subcommand)]
    pub command: Command,
}

/// `--help` epilogue: the exit-code table, the environment, examples.
fn after_help() -> String {
    format!(
        "{}\n\nEnvironment:\n  SOURCE_DATE_EPOCH         timestamp of every package and repository entry\n                            (default 2024-01-01)\n{}\n\n{}",
        ExitStatus::table(),
        rocm_kpack_cli::RUST_LOG_HELP,
        examples(&[
            (
                "See the whole pipeline on built-in inputs:",
                "rocm-kpack demo"
            ),
            (
                "Split a fat package into generic + per-target packages:",
                "rocm-kpack split-package librocrand1_5.3.3-4_amd64.deb --out pkgs"
            ),
            (
                "Publish them for apt and the fetcher:",
                "rocm-kpack publish pkgs --out repo --apt --kpack-store"
            ),
        ])
    )
}

/// The exit codes of a command that succeeds or fails.
const RUNS: &[ExitStatus] = &[Success, Failure, Usage];
/// ... and of one that may find problems (exit 4).
const CHECKS: &[ExitStatus] = &[Success, Failure, Usage, Problems];

fn footer(statuses: &[ExitStatus], items: &[(&str, &str)]) -> String {
    help_footer("rocm-kpack", statuses, items)
}

fn inspect_help() -> String {
    footer(
        RUNS,
        &[
            (
                "What an archive holds (binaries, targets, sizes):",
                "rocm-kpack inspect split/gfx1100/.kpack/libmulti_gfx1100.kpack",
            ),
            (
                "The GPU targets a package carries, or the device packages it expects:",
                "rocm-kpack inspect librocrand1_5.3.3-4_amd64.deb",
            ),
            (
                "A fat binary's offload bundles, as JSON:",
                "rocm-kpack inspect --json lib/libmulti.so",
            ),
        ],
    )
}

fn extract_help() -> String {
    footer(
        RUNS,
        &[(
            "Write the gfx1100 code object of libmulti.so to k.co:",
            "rocm-kpack extract libmulti_gfx1100.kpack --binary libmulti.so#0 --target gfx1100 --out k.co",
        )],
    )
}

fn split_binary_help() -> String {
    footer(
        RUNS,
        &[(
            "Split one library into out/ (host-only binary, .kpack/ archives and manifest):",
            "rocm-kpack split-binary lib/libmulti.so --out out",
        )],
    )
}

fn split_help() -> String {
    footer(
        RUNS,
        &[
            (
                "Split an install tree into generic/ and one tree per GPU target:",
                "rocm-kpack split /opt/rocm --out split",
            ),
            (
                "Only two targets (the spec `granularity = \"per-target\"`, `targets = [...]`):",
                "rocm-kpack split /opt/rocm --out split --target gfx942,gfx1100",
            ),
            (
                "Print the plan, write nothing:",
                "rocm-kpack split /opt/rocm --out split --dry-run",
            ),
        ],
    )
}

fn recombine_help() -> String {
    footer(
        RUNS,
        &[(
            "Merge the split outputs of two build shards:",
            "rocm-kpack recombine shard-gfx94X shard-gfx110X --out merged",
        )],
    )
}

fn verify_help() -> String {
    footer(
        CHECKS,
        &[
            (
                "Check an overlaid tree for every target its archives carry:",
                "rocm-kpack verify overlay",
            ),
            (
                "Check that gfx1100 and gfx1101 find all their code:",
                "rocm-kpack verify overlay --target gfx1100,gfx1101",
            ),
        ],
    )
}

fn repair_phdr_help() -> String {
    footer(
        CHECKS,
        &[
            (
                "List the files that would change:",
                "rocm-kpack repair-phdr /opt/rocm",
            ),
            (
                "Rewrite them in place:",
                "rocm-kpack repair-phdr /opt/rocm --yes",
            ),
        ],
    )
}

pub(crate) fn spec_help() -> String {
    footer(
        RUNS,
        &[
            ("Print the built-in spec as TOML:", "rocm-kpack spec show"),
            ("Check a spec file:", "rocm-kpack spec check my-spec.toml"),
        ],
    )
}

pub(crate) fn spec_show_help() -> String {
    footer(
        RUNS,
        &[
            ("Print the built-in spec as TOML:", "rocm-kpack spec show"),
            (
                "A spec file with every default filled in, as JSON:",
                "rocm-kpack spec show --spec my-spec.toml --json",
            ),
        ],
    )
}

pub(crate) fn spec_check_help() -> String {
    footer(
        RUNS,
        &[("Check a spec file:", "rocm-kpack spec check my-spec.toml")],
    )
}

fn package_help() -> String {
    footer(
        RUNS,
        &[
            (
                "Package a split tree as debs:",
                "rocm-kpack package split --name libmulti1 --version 1.0 --out pkgs",
            ),
            (
                "... as debs, rpms and wheels:",
                "rocm-kpack package split --name libmulti1 --version 1.0 --out pkgs --format deb,rpm,wheel",
            ),
        ],
    )
}

fn publish_help() -> String {
    footer(
        RUNS,
        &[
            (
                "An apt repository and the kpack store, for a store served at a URL:",
                "rocm-kpack publish pkgs --out repo --apt --kpack-store --store-url https://example.org/repo",
            ),
            (
                "Every kind the packages allow (apt, yum, pip, store):",
                "rocm-kpack publish pkgs --out repo",
            ),
            (
                "What would be published, writing nothing:",
                "rocm-kpack publish pkgs --out repo --dry-run",
            ),
        ],
    )
}

fn split_package_help() -> String {
    footer(
        RUNS,
        &[
            (
                "A generic package plus one package per GPU target:",
                "rocm-kpack split-package librocrand1_5.3.3-4_amd64.deb --out pkgs",
            ),
            (
                "Only the packages for two targets:",
                "rocm-kpack split-package librocrand1_5.3.3-4_amd64.deb --out pkgs --target gfx90a,gfx1030",
            ),
            (
                "The names of the packages it would write, writing nothing:",
                "rocm-kpack split-package librocrand1_5.3.3-4_amd64.deb --out pkgs --dry-run",
            ),
        ],
    )
}

fn demo_help() -> String {
    footer(
        RUNS,
        &[
            (
                "Run the pipeline on the default machine:",
                "rocm-kpack demo",
            ),
            (
                "Simulate an MI300X and keep the working directory:",
                "rocm-kpack demo --machine mi300x --keep",
            ),
        ],
    )
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show what a .kpack archive, .kpm manifest, fat binary, split binary or package (.deb, .rpm, .whl) contains.
    #[command(after_help = inspect_help())]
    Inspect(cmd::inspect::Args),
    /// Write one code object out of a .kpack archive.
    #[command(after_help = extract_help())]
    Extract(cmd::extract::Args),
    /// Split one fat binary into a host-only binary, per-processor .kpack archives and a .kpm manifest.
    #[command(after_help = split_binary_help())]
    SplitBinary(cmd::split_binary::Args),
    /// Split an install tree or build artifact directory into generic + per-target device trees.
    #[command(after_help = split_help())]
    Split(cmd::split::Args),
    /// Reduce step: combine the split outputs of several build shards into one generic + per-group artifacts.
    #[command(after_help = recombine_help())]
    Recombine(cmd::recombine::Args),
    /// Check that every marker in a tree resolves to device code for the given targets.
    #[command(after_help = verify_help())]
    Verify(cmd::verify::Args),
    /// Find (and with --yes rewrite) ELF files whose program header table Linux before 5.18 would not find.
    #[command(after_help = repair_phdr_help())]
    RepairPhdr(cmd::repair_phdr::Args),
    /// Show the effective package spec, or check a spec file.
    #[command(after_help = spec_help())]
    Spec(cmd::spec::Args),
    /// Build a generic package and one package per device group (deb, rpm, wheel) from a split tree.
    // Its own --version is the packages' version, not the program's.
    #[command(disable_version_flag = true, after_help = package_help())]
    Package(cmd::package::Args),
    /// Turn a directory of packages into apt, yum/dnf and pip repositories and a kpack store.
    #[command(after_help = publish_help())]
    Publish(cmd::publish::Args),
    /// Split a fat .deb, .rpm or .whl into a generic package plus one package per device group.
    #[command(after_help = split_package_help())]
    SplitPackage(cmd::split_package::Args),
    /// Run the whole pipeline on built-in inputs in a temporary directory.
    #[command(after_help = demo_help())]
    Demo(cmd::demo::Args),
    #[command(flatten)]
    Docs(rocm_kpack_cli::DocsCommand),
}

/// `--spec`: the package spec choosing device groups.
#[derive(Debug, Clone, clap::Args)]
pub struct SpecArg {
    /// Package spec (TOML): device groups, kernel-database rules, naming,
    /// validation switches [default: the built-in spec, one group per GPU target].
    #[arg(long, value_name = "FILE")]
    pub spec: Option<PathBuf>,
}

impl SpecArg {
    /// The spec file, or the built-in spec.
    pub fn load(&self) -> anyhow::Result<Spec> {
        Ok(match &self.spec {
            Some(p) => Spec::from_file(p)?,
            None => Spec::builtin(),
        })
    }
}

/// `--spec` or `--target`: the spec of `split` and `split-package`.
#[derive(Debug, Clone, clap::Args)]
pub struct SpecOrTargetsArg {
    #[command(flatten)]
    pub spec: SpecArg,
    /// Only these GPU targets, one device group each (repeatable or
    /// comma-separated): the spec `granularity = "per-target"`, `targets =
    /// [...]`. Device code for another target is an error that names it.
    #[arg(long = "target", value_name = "TARGET", value_delimiter = ',',
          value_parser = rocm_kpack_cli::parse_target, conflicts_with = "spec")]
    pub targets: Vec<String>,
}

impl SpecOrTargetsArg {
    /// One group per `--target`, else `--spec`, else the built-in spec.
    pub fn load(&self) -> anyhow::Result<Spec> {
        if self.targets.is_empty() {
            self.spec.load()
        } else {
            Ok(Spec::per_target(&self.targets)?)
        }
    }

    /// `err` with advice when `--target` left out a target the input has
    /// device code for.
    pub fn explain(&self, err: anyhow::Error) -> anyhow::Error {
        use rocm_kpack_pkgspec::SpecError;
        use rocm_kpack_splitter::split::binary::SplitError;
        use rocm_kpack_splitter::split::engine::EngineError;
        let uncovered = |e: &SpecError| {
            matches!(
                e,
                SpecError::UncoveredTarget { .. } | SpecError::UncoveredTargets { .. }
            )
        };
        // A boxed source is in the chain as the box.
        let split_error = |e: &(dyn std::error::Error + 'static)| {
            e.downcast_ref::<SplitError>()
                .or_else(|| e.downcast_ref::<Box<SplitError>>().map(|b| &**b))
                .is_some_and(|e| matches!(e, SplitError::Spec(s) if uncovered(s)))
        };
        let tree_error = |e: &(dyn std::error::Error + 'static)| {
            e.downcast_ref::<EngineError>()
                .or_else(|| e.downcast_ref::<Box<EngineError>>().map(|b| &**b))
                .is_some_and(|e| matches!(e, EngineError::Spec(s) if uncovered(s)))
        };
        let is_uncovered = err.chain().any(|e| {
            e.downcast_ref::<SpecError>().is_some_and(uncovered) || split_error(e) || tree_error(e)
        });
        if self.targets.is_empty() || !is_uncovered {
            return err;
        }
        err.context(rocm_kpack_cli::Hint(
            "the input has device code for more targets than --target names: name them all, \
             or leave --target out for one device group per target"
                .into(),
        ))
    }
}

/// `--out` and `--force`: where a command writes, and the one overwrite
/// rule (an output that exists is refused unless `--force`).
#[derive(Debug, Clone, clap::Args)]
pub struct OutArg {
    /// Output directory (created if missing); it must not overlap the
    /// input.
    #[arg(long = "out", short = 'o', value_name = "DIR", value_parser = rocm_kpack_cli::out_dir)]
    pub dir: PathBuf,
    /// Replace outputs that already exist in --out (otherwise the command
    /// refuses before writing anything).
    #[arg(long)]
    pub force: bool,
}

/// `--jobs`: parallelism.
#[derive(Debug, Clone, clap::Args)]
pub struct JobsArg {
    /// Worker threads [default: one per core, as many as the memory budget
    /// admits]. At most twice the cores (at least 8): more are capped, with
    /// a warning.
    #[arg(long, short, value_name = "N", value_parser = parse_jobs)]
    pub jobs: Option<usize>,
    /// Memory budget: what runs at the same time is admitted against it
    /// (bytes, or with a unit: 512M, 2G) [default: half the available
    /// memory, at most 1G].
    #[arg(long, value_name = "SIZE", value_parser = parse_memory)]
    pub memory: Option<u64>,
}

/// `--jobs N`: a thread count, at least 1.
fn parse_jobs(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{text:?} is not a number of threads")),
    }
}

/// `--memory SIZE`: at least [`rocm_kpack_splitter::budget::MIN_BUDGET`].
fn parse_memory(text: &str) -> Result<u64, String> {
    use rocm_kpack_splitter::budget::{parse_size, MIN_BUDGET};
    let bytes = parse_size(text)?;
    if bytes < MIN_BUDGET {
        return Err(format!(
            "{text:?}: at least {} MiB are needed",
            MIN_BUDGET >> 20
        ));
    }
    Ok(bytes)
}

/// A compression of packages (deb members, rpm payloads): its name.
pub fn parse_package_compression(text: &str) -> Result<PackageCompression, String> {
    PackageCompression::from_name(text)
        .ok_or_else(|| format!("unknown compression {text:?} (xz, gzip, zstd, zstd-long, none)"))
}

/// `--device-compression`: `auto` (None) or a compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceCompression(pub Option<PackageCompression>);

/// Parses `--device-compression`.
fn parse_device_compression(text: &str) -> Result<DeviceCompression, String> {
    if text == "auto" {
        return Ok(DeviceCompression(None));
    }
    PackageCompression::from_name(text)
        .map(|c| DeviceCompression(Some(c)))
        .ok_or_else(|| {
            format!("unknown device compression {text:?} (auto, xz, gzip, zstd, zstd-long, none)")
        })
}

/// A package compression level that `compression` accepts: 0 to 9 for xz
/// and gzip, 1 to 22 for zstd.
pub fn check_package_level(
    option: &str,
    compression: PackageCompression,
    level: Option<u32>,
) -> Result<(), UsageError> {
    let Some(level) = level else { return Ok(()) };
    let range = match compression {
        PackageCompression::None => return Ok(()),
        PackageCompression::Xz | PackageCompression::Gzip => 0..=9,
        PackageCompression::Zstd | PackageCompression::ZstdLong => 1..=22,
    };
    if range.contains(&level) {
        Ok(())
    } else {
        Err(UsageError(format!(
            "{option} {level}: {} takes {} to {}",
            compression.name(),
            range.start(),
            range.end()
        )))
    }
}

/// `--device-compression`, `--device-level`: how device packages (debs,
/// rpms) are compressed, for `package` and `split-package`.
#[derive(Debug, Clone, clap::Args)]
pub struct DeviceCompressionArgs {
    /// Compression of device packages: auto (the spec's `[package]
    /// device_payload = "solid"`: zstd-long; else gzip -1 for groups whose
    /// .kpack archives are already zstd-compressed, else the packages'
    /// compression: xz -6 unless `package --compression` says otherwise),
    /// xz, gzip, zstd, zstd-long (zstd with a 2^27 window:
    /// readable by dpkg 1.21.18 and later, Ubuntu's since 21.10, and rpm) or
    /// none. Packages of kernel-database files are where it matters: zstd-long
    /// at level 15 takes about a fifth of xz -6's CPU for about 5% more bytes
    /// (docs/packaging.md, "Compress once").
    #[arg(long, value_name = "KIND", default_value = "auto", value_parser = parse_device_compression)]
    pub device_compression: DeviceCompression,
    /// Device package compression level [default: the compressor's; zstd
    /// in `split-package`: the split's --level].
    #[arg(long, value_name = "N")]
    pub device_level: Option<u32>,
}

impl DeviceCompressionArgs {
    /// The compression asked for (None: automatic) and its level; a level
    /// the compressor does not take is a usage error.
    pub fn resolve(&self) -> anyhow::Result<(Option<PackageCompression>, Option<u32>)> {
        let DeviceCompression(compression) = self.device_compression;
        if let Some(c) = compression {
            check_package_level("--device-level", c, self.device_level)?;
        } else if self.device_level.is_some_and(|l| l > 22) {
            return Err(UsageError(format!(
                "--device-level {}: no compressor takes more than 22",
                self.device_level.unwrap_or_default()
            ))
            .into());
        }
        Ok((compression, self.device_level))
    }
}

/// Archive compression on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Compression {
    /// zstd, one frame per code object (`zstd-per-kernel`).
    Zstd,
    /// Stored as is (`none`).
    None,
}

/// `--compression`, `--level`: how `.kpack` archives are written. The
/// level defaults to the release level: the commands that flatten this in
/// write what users download, and the level never changes the bytes a
/// loader gets back. `split-binary` lowers it with
/// [`ArchiveCompressionArgs::fast_level`].
#[derive(Debug, Clone, clap::Args)]
pub struct ArchiveCompressionArgs {
    /// Archive compression [default: zstd; recombine: as in the shards].
    #[arg(long, value_enum)]
    pub compression: Option<Compression>,
    /// zstd level, 1 to 22: 19, the release level, writes slower and
    /// downloads smaller; reading is as fast at any level.
    #[arg(long, value_name = "N", default_value_t = RELEASE_ZSTD_LEVEL,
          value_parser = clap::value_parser!(i32).range(1..=22))]
    pub level: i32,
}

impl ArchiveCompressionArgs {
    /// Help of `--level` where it defaults to the fast level.
    const FAST_LEVEL_HELP: &str = "zstd level, 1 to 22: split-binary defaults to 3, fast, for trying things out; \
        the release outputs of `split` and `recombine` default to 19, which writes slower and downloads smaller";

    /// `rocm_kpack_format::archive::DEFAULT_ZSTD_LEVEL` as clap wants a
    /// default (a `&'static str`; the tests check the two agree).
    const FAST_LEVEL: &str = "3";

    /// `--level` defaulting to the fast level, for `split-binary`:
    /// a flattened argument takes its default from the field, so that
    /// command replaces it with `#[command(mut_arg("level", ...))]`.
    pub fn fast_level(arg: clap::Arg) -> clap::Arg {
        arg.default_value(Self::FAST_LEVEL)
            .help(Self::FAST_LEVEL_HELP)
            .long_help(Self::FAST_LEVEL_HELP)
    }

    /// The scheme asked for, if any.
    pub fn scheme(&self) -> Option<CompressionScheme> {
        self.compression.map(|c| match c {
            Compression::Zstd => CompressionScheme::ZstdPerKernel,
            Compression::None => CompressionScheme::None,
        })
    }

    /// How a command writes archives: these flags, `--jobs`/`--memory` and
    /// `--force`.
    pub fn output(&self, jobs: &JobsArg, out: &OutArg) -> ArchiveOutput {
        ArchiveOutput {
            compression: self.scheme(),
            zstd_level: self.level,
            jobs: jobs.jobs,
            memory: jobs.memory,
            replace_existing: out.force,
        }
    }
}

/// SOURCE_DATE_EPOCH, or the default; a malformed value is a usage error
/// (the variable is part of how the program was invoked).
pub fn source_date_epoch() -> anyhow::Result<u64> {
    rocm_kpack_package::source_date_epoch().map_err(|e| UsageError(e.to_string()).into())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;
    use rocm_kpack_format::archive::DEFAULT_ZSTD_LEVEL;

    use super::*;

    #[test]
    fn arguments_are_consistent_and_help_has_the_exit_table() {
        Cli::command().debug_assert();
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains(&ExitStatus::table()), "{help}");
    }

    #[test]
    fn extract_takes_out_and_the_old_output() {
        for flag in ["--out", "-o", "--output"] {
            let cli = Cli::try_parse_from([
                "rocm-kpack",
                "extract",
                "a.kpack",
                "--binary",
                "b#0",
                "--arch",
                "gfx90a",
                flag,
                "f",
            ])
            .expect("parse");
            match cli.command {
                Command::Extract(a) => assert_eq!(a.out, PathBuf::from("f")),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn release_commands_default_to_the_release_level_and_split_binary_to_the_fast_one() {
        let level = |args: &[&str]| -> i32 {
            let cli = Cli::try_parse_from(args).expect("parse");
            match cli.command {
                Command::Split(a) => a.compression.level,
                Command::Recombine(a) => a.compression.level,
                Command::SplitBinary(a) => a.compression.level,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(
            level(&["rocm-kpack", "split", "in", "--out", "o"]),
            RELEASE_ZSTD_LEVEL
        );
        assert_eq!(
            level(&["rocm-kpack", "recombine", "a", "--out", "o"]),
            RELEASE_ZSTD_LEVEL
        );
        assert_eq!(
            level(&["rocm-kpack", "split", "in", "--out", "o", "--level", "3"]),
            3
        );
        assert_eq!(
            level(&["rocm-kpack", "split-binary", "f", "--out", "o"]),
            DEFAULT_ZSTD_LEVEL
        );
        assert_eq!(
            level(&[
                "rocm-kpack",
                "split-binary",
                "f",
                "--out",
                "o",
                "--level",
                "19"
            ]),
            19
        );
        let mut cmd = Cli::command();
        let help = cmd
            .find_subcommand_mut("split-binary")
            .expect("split-binary")
            .render_long_help()
            .to_string();
        assert!(
            help.contains("split-binary defaults to 3") && help.contains("[default: 3]"),
            "{help}"
        );
    }
}
