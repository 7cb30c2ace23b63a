//! `rocm-kpack publish PKG_DIR --out REPO [--apt] [--yum] [--pip]
//! [--kpack-store] [--store-url URL] [--fetcher-bin PATH | --no-fetcher]
//! [--suite NAME] [--sign-key KEYID] [--gpg PROGRAM] [--jobs N] [--memory SIZE]
//! [--cache DIR] [--dry-run] [--json]`.

use std::path::PathBuf;

use rocm_kpack_cli::{plural, ExitStatus, JsonArg, UsageError};
use rocm_kpack_publish::fetcher::{self, FetcherOptions};
use rocm_kpack_publish::{plan, publish, PublishOptions};

use crate::cli::{source_date_epoch, JobsArg, OutArg};

/// Publish a directory of packages (.deb, .rpm, .whl, loose .kpack) as
/// repositories: apt (pool/ + dists/), yum/dnf (<arch>/ + repodata/), pip
/// (simple/ + files/, PEP 503 HTML and PEP 691 JSON) and the kpack store
/// (by-hash/sha256/ + index.json). Without a kind flag, every kind that has
/// packages is written, plus the kpack store. Dates come from
/// SOURCE_DATE_EPOCH; output is byte-identical on rerun (signatures aside).
///
/// --out is the repository root; the kinds written replace their previous
/// directories there.
///
/// The rocm-kpack-fetch deb, rpm and wheel are built from the fetcher
/// binary installed next to this program (or --fetcher-bin) and added to
/// the apt, yum and pip repositories: installing a generic package from
/// them brings the fetcher (the generic deb recommends it), whose package
/// triggers fetch the device code. --store-url is where the kpack store
/// will be served; the fetcher packages carry it as their source, so
/// installs fetch with no configuration.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory searched (recursively) for packages.
    pub pkg_dir: PathBuf,
    #[command(flatten)]
    pub out: OutArg,
    /// Write the apt repository.
    #[arg(long)]
    pub apt: bool,
    /// Write the yum/dnf repository.
    #[arg(long)]
    pub yum: bool,
    /// Write the pip simple index.
    #[arg(long)]
    pub pip: bool,
    /// Write the kpack store for rocm-kpack-fetch.
    #[arg(long)]
    pub kpack_store: bool,
    /// URL at which the kpack store (this --out, when it holds one) will be
    /// served: written into the rocm-kpack-fetch packages as their source.
    #[arg(long, value_name = "URL")]
    pub store_url: Option<String>,
    /// The rocm-kpack-fetch binary to package [default: rocm-kpack-fetch
    /// next to this program].
    #[arg(long, value_name = "PATH", conflicts_with = "no_fetcher")]
    pub fetcher_bin: Option<PathBuf>,
    /// Do not add rocm-kpack-fetch packages.
    #[arg(long)]
    pub no_fetcher: bool,
    /// apt suite: letters, digits and `-_.`.
    #[arg(long, value_name = "NAME", default_value = "stable", value_parser = suite_name)]
    pub suite: String,
    /// Sign Release (InRelease, Release.gpg) and repomd.xml (.asc) with this
    /// GPG key (a key id, fingerprint or user id, as gpg --local-user takes).
    #[arg(long, value_name = "KEYID", value_parser = key_id)]
    pub sign_key: Option<String>,
    /// The gpg program used for signing.
    #[arg(long, value_name = "PROGRAM", default_value = "gpg")]
    pub gpg: PathBuf,
    /// --jobs, --memory: the kpack store's objects (kernel-database files)
    /// are encoded at the release level on this many threads, as many as
    /// their encoders fit in the memory budget (about 430 MiB each for
    /// objects of 128 MiB and more).
    #[command(flatten)]
    pub jobs: JobsArg,
    /// Keep the kpack store's encoded objects in DIR (created if missing)
    /// and take them from there on the next publish, instead of encoding
    /// again. Entries are checked before use (one that does not decode to
    /// its sha256 is encoded again, never published); the store written is
    /// the same with or without the cache.
    #[arg(long, value_name = "DIR", value_parser = rocm_kpack_cli::out_dir)]
    pub cache: Option<PathBuf>,
    /// Print what would be published (the packages found, the repository
    /// kinds), write nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub json: JsonArg,
}

/// `--suite NAME`: a directory name below dists/.
fn suite_name(text: &str) -> Result<String, String> {
    let ok = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !text.starts_with('.');
    if ok {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "{text:?}: letters, digits and `-_.` only, not starting with `.`"
        ))
    }
}

/// `--sign-key KEYID`: becomes an argument of gpg, so it may not look like
/// one of gpg's options.
fn key_id(text: &str) -> Result<String, String> {
    if text.is_empty() || text.starts_with('-') || text.chars().any(char::is_control) {
        Err(format!(
            "{text:?} is not a key id (a fingerprint, key id or user id)"
        ))
    } else {
        Ok(text.to_owned())
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let progress = super::progress::CommandProgress::new();
    let fetcher = fetcher_options(&args)?;
    let opts = PublishOptions {
        apt: args.apt,
        yum: args.yum,
        pip: args.pip,
        kpack_store: args.kpack_store,
        suite: args.suite.clone(),
        sign_key: args.sign_key.clone(),
        gpg: args.gpg.clone(),
        source_date_epoch: source_date_epoch()?,
        replace_existing: args.out.force,
        progress: progress.handle(),
        fetcher,
        jobs: jobs(&args.jobs),
        memory: args
            .jobs
            .memory
            .unwrap_or_else(rocm_kpack_splitter::budget::default_budget),
        cache: args.cache.clone(),
        ..PublishOptions::default()
    };
    if args.dry_run {
        let plan = plan(&args.pkg_dir, &args.out.dir, &opts)?;
        args.json.document(&plan, || {
            let mut text = format!(
                "would publish {} into {}: {}, {}, {}, {}{}\n",
                plan.kinds.join(", "),
                plan.output.display(),
                plural(plan.debs.len(), "deb", "debs"),
                plural(plan.rpms.len(), "rpm", "rpms"),
                plural(plan.wheels.len(), "wheel", "wheels"),
                plural(plan.archives.len(), "loose archive", "loose archives"),
                if plan.fetcher_packages {
                    ", and the rocm-kpack-fetch packages"
                } else {
                    ""
                }
            );
            // -v: every file found.
            let files = plan
                .debs
                .iter()
                .chain(&plan.rpms)
                .chain(&plan.wheels)
                .chain(&plan.archives)
                .filter(|_| rocm_kpack_cli::verbose() > 0);
            for p in files {
                text.push_str(&format!("  {}\n", p.display()));
            }
            text
        })?;
        return Ok(ExitStatus::Success);
    }
    let report = publish(&args.pkg_dir, &args.out.dir, &opts);
    let summary = progress.finish();
    let report = report?;
    for w in &report.warnings {
        tracing::warn!("{w}");
    }
    args.json.report(&report, || {
        format!(
            "published {} into {}: {}, {}, {}, {}\n{summary}",
            report.kinds.join(", "),
            args.out.dir.display(),
            plural(report.debs, "deb", "debs"),
            plural(report.rpms, "rpm", "rpms"),
            plural(report.wheels, "wheel", "wheels"),
            plural(report.archives, "store entry", "store entries"),
        )
    })?;
    Ok(ExitStatus::Success)
}

/// Encoding threads: `--jobs`, else one per core; at most
/// [`rocm_kpack_splitter::budget::max_threads`].
fn jobs(arg: &JobsArg) -> usize {
    use rocm_kpack_splitter::budget::max_threads;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let asked = arg.jobs.unwrap_or(cores);
    let most = max_threads(cores);
    if asked > most {
        tracing::warn!(
            "--jobs {asked}: running {most} threads, the most for {}",
            plural(cores, "core", "cores")
        );
    }
    asked.min(most)
}

/// The fetcher to package: `--fetcher-bin`, else `rocm-kpack-fetch` next to
/// this executable (a warning and none when it is not there).
fn fetcher_options(args: &Args) -> anyhow::Result<Option<FetcherOptions>> {
    if args.no_fetcher {
        return Ok(None);
    }
    if let Some(url) = &args.store_url {
        let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        if !matches!(scheme.as_deref(), Some("https" | "http" | "file")) {
            return Err(UsageError(format!(
                "--store-url {url:?}: use an https://, http:// or file:// URL"
            ))
            .into());
        }
        if scheme.as_deref() == Some("http") {
            // Printed with -q too: a store the fetchers will skip is a
            // broken publication, not a detail.
            rocm_kpack_cli::warning(&format!(
                "--store-url {}: rocm-kpack-fetch refuses http:// sources unless run with --allow-http \
                 (the package hooks: ROCM_KPACK_ALLOW_HTTP=1); use an https:// store",
                url.split_once('@').map_or_else(|| url.clone(), |(_, host)| format!("http://****@{host}"))
            ));
        }
    }
    let binary = match &args.fetcher_bin {
        Some(b) => b.clone(),
        None => {
            let sibling = std::env::current_exe()
                .ok()
                .and_then(|exe| exe.parent().map(|d| d.join(fetcher::NAME)))
                .filter(|p| p.is_file());
            match sibling {
                Some(p) => p,
                None => {
                    tracing::warn!(
                        "no rocm-kpack-fetch next to this program: publishing without the fetcher packages (pass --fetcher-bin PATH)"
                    );
                    return Ok(None);
                }
            }
        }
    };
    Ok(Some(FetcherOptions {
        binary,
        store_url: args.store_url.clone(),
        level: None,
    }))
}
