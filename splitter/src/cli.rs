//! Argument definitions. Each subcommand's arguments live with the command
//! in `cmd/`; this file lists the commands and declares, once, the argument
//! groups several of them flatten in (`--spec`, `--out`, `--jobs`, archive
//! compression). `--json`, `-v`/`-q` and the exit codes are shared with
//! `rocm-kpack-fetch` through `rocm_kpack_cli`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use rocm_kpack_cli::ExitStatus;
use rocm_kpack_format::archive::{CompressionScheme, RELEASE_ZSTD_LEVEL};
use rocm_kpack_pkgspec::Spec;
use rocm_kpack_splitter::split::output::ArchiveOutput;

use crate::cmd;

/// Split AMD GPU fat binaries into host-only binaries plus per-GPU
/// `.kpack` archives (one per processor, packaged per family), and inspect
/// what fat binaries and archives contain.
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

/// `--help` epilogue: the exit-code table, then where to start.
fn after_help() -> String {
    format!(
        "{}\n\nRun `rocm-kpack demo` to see the whole pipeline on built-in inputs.",
        ExitStatus::table()
    )
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show what a .kpack archive, .kpm manifest, fat binary or split binary contains.
    Inspect(cmd::inspect::Args),
    /// Write one code object out of a .kpack archive.
    Extract(cmd::extract::Args),
    /// Split one fat binary into a host-only binary, per-processor .kpack archives and a .kpm manifest.
    SplitBinary(cmd::split_binary::Args),
    /// Split an install tree or build artifact directory into generic + per-family device trees.
    Split(cmd::split::Args),
    /// Reduce step: combine the split outputs of several build shards into one generic + per-group artifacts.
    Recombine(cmd::recombine::Args),
    /// Check that every marker in a tree resolves to device code for the given targets.
    #[command(after_help = ExitStatus::summary("rocm-kpack", &[ExitStatus::Success, ExitStatus::Failure, ExitStatus::Usage, ExitStatus::Problems]))]
    Verify(cmd::verify::Args),
    /// Find (and with --yes rewrite) ELF files whose program header table Linux before 5.18 would not find.
    #[command(after_help = ExitStatus::summary("rocm-kpack", &[ExitStatus::Success, ExitStatus::Failure, ExitStatus::Usage, ExitStatus::Problems]))]
    RepairPhdr(cmd::repair_phdr::Args),
    /// Show the effective package spec, or check a spec file.
    Spec(cmd::spec::Args),
    /// Build a generic package and one package per device group (deb, rpm, wheel) from a split tree.
    // Its own --version is the packages' version, not the program's.
    #[command(disable_version_flag = true)]
    Package(cmd::package::Args),
    /// Turn a directory of packages into apt, yum/dnf and pip repositories and a kpack store.
    Publish(cmd::publish::Args),
    /// Split a fat .deb, .rpm or .whl into a generic package plus one package per device group.
    SplitPackage(cmd::split_package::Args),
    /// Run the whole pipeline on built-in inputs in a temporary directory.
    Demo(rocm_kpack_demo::Args),
    #[command(flatten)]
    Docs(rocm_kpack_cli::DocsCommand),
}

/// `--spec`: the package spec choosing device groups.
#[derive(Debug, Clone, clap::Args)]
pub struct SpecArg {
    /// Package spec (TOML): device groups, kernel-database rules, naming,
    /// validation switches [default: the built-in spec, one group per GPU target].
    #[arg(long)]
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

/// `--out` and `--force`: where a command writes, and the one overwrite
/// rule (an output that exists is refused unless `--force`).
#[derive(Debug, Clone, clap::Args)]
pub struct OutArg {
    /// Output directory (created if missing); it must not overlap the
    /// input.
    #[arg(long = "out", short = 'o', value_name = "DIR")]
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
    #[arg(long, short)]
    pub jobs: Option<usize>,
    /// Memory budget: what runs at the same time is admitted against it
    /// (bytes, or with a unit: 512M, 2G) [default: half the available
    /// memory, at most 1G].
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
}

impl JobsArg {
    /// The thread count asked for (`None`: one per core); 0 is refused.
    pub fn get(&self) -> anyhow::Result<Option<usize>> {
        if self.jobs == Some(0) {
            anyhow::bail!("--jobs must be at least 1");
        }
        Ok(self.jobs)
    }

    /// The memory budget asked for in bytes (`None`: the default); at
    /// least [`rocm_kpack_splitter::budget::MIN_BUDGET`].
    pub fn memory(&self) -> anyhow::Result<Option<u64>> {
        use rocm_kpack_splitter::budget::{parse_size, MIN_BUDGET};
        let Some(text) = &self.memory else {
            return Ok(None);
        };
        let bytes = parse_size(text).map_err(|e| anyhow::anyhow!("--memory {e}"))?;
        if bytes < MIN_BUDGET {
            anyhow::bail!(
                "--memory {text}: at least {} MiB are needed",
                MIN_BUDGET >> 20
            );
        }
        Ok(Some(bytes))
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
    #[arg(long, default_value = "auto")]
    pub device_compression: String,
    /// Device package compression level [default: the compressor's; zstd
    /// in `split-package`: the split's --level].
    #[arg(long)]
    pub device_level: Option<u32>,
}

impl DeviceCompressionArgs {
    /// The compression asked for (None: automatic) and its level.
    pub fn resolve(
        &self,
    ) -> anyhow::Result<(
        Option<rocm_kpack_package::compress::Compression>,
        Option<u32>,
    )> {
        use rocm_kpack_package::compress::Compression;
        let compression = match self.device_compression.as_str() {
            "auto" => None,
            other => Some(Compression::from_name(other).ok_or_else(|| {
                anyhow::anyhow!(
                    "unknown device compression {other:?} (auto, xz, gzip, zstd, zstd-long, none)"
                )
            })?),
        };
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
    /// zstd level: 19, the release level, writes slower and downloads
    /// smaller; reading is as fast at any level.
    #[arg(long, default_value_t = RELEASE_ZSTD_LEVEL)]
    pub level: i32,
}

impl ArchiveCompressionArgs {
    /// Help of `--level` where it defaults to the fast level.
    const FAST_LEVEL_HELP: &str = "zstd level: split-binary defaults to 3, fast, for trying things out; \
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
    pub fn output(&self, jobs: &JobsArg, out: &OutArg) -> anyhow::Result<ArchiveOutput> {
        Ok(ArchiveOutput {
            compression: self.scheme(),
            zstd_level: self.level,
            jobs: jobs.get()?,
            memory: jobs.memory()?,
            replace_existing: out.force,
        })
    }
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
