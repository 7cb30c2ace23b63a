//! `rocm-kpack publish PKG_DIR --out REPO [--apt] [--yum] [--pip]
//! [--kpack-store] [--suite NAME] [--sign-key KEYID] [--gpg PROGRAM] [--json]`.

use std::path::PathBuf;

use rocm_kpack_cli::{ExitStatus, JsonArg};
use rocm_kpack_package::source_date_epoch;
use rocm_kpack_package::publish::{publish, PublishOptions};

use crate::cli::OutArg;

/// Publish a directory of packages (.deb, .rpm, .whl, loose .kpack) as
/// repositories: apt (pool/ + dists/), yum/dnf (<arch>/ + repodata/), pip
/// (simple/ + files/, PEP 503 HTML and PEP 691 JSON) and the kpack store
/// (by-hash/sha256/ + index.json). Without a kind flag, every kind that has
/// packages is written, plus the kpack store. Dates come from
/// SOURCE_DATE_EPOCH; output is byte-identical on rerun (signatures aside).
///
/// --out is the repository root; the kinds written replace their previous
/// directories there.
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
    /// apt suite.
    #[arg(long, default_value = "stable")]
    pub suite: String,
    /// Sign Release (InRelease, Release.gpg) and repomd.xml (.asc) with this
    /// GPG key.
    #[arg(long, value_name = "KEYID")]
    pub sign_key: Option<String>,
    /// The gpg program used for signing.
    #[arg(long, default_value = "gpg")]
    pub gpg: PathBuf,
    #[command(flatten)]
    pub json: JsonArg,
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let opts = PublishOptions {
        apt: args.apt,
        yum: args.yum,
        pip: args.pip,
        kpack_store: args.kpack_store,
        suite: args.suite.clone(),
        sign_key: args.sign_key.clone(),
        gpg: args.gpg.clone(),
        source_date_epoch: source_date_epoch()?,
        ..PublishOptions::default()
    };
    let report = publish(&args.pkg_dir, &args.out.dir, &opts)?;
    args.json.print(&report, || {
        format!(
            "published {} into {}: {} debs, {} rpms, {} wheels, {} archives\n",
            report.kinds.join(", "),
            args.out.dir.display(),
            report.debs,
            report.rpms,
            report.wheels,
            report.archives
        )
    })?;
    Ok(ExitStatus::Success)
}
