//! `rocm-kpack publish PKG_DIR --out REPO [--apt] [--yum] [--pip]
//! [--kpack-store] [--suite NAME] [--sign-key KEYID] [--gpg PROGRAM] [--json]`.

use std::path::PathBuf;
use std::process::ExitCode;

use rocm_kpack_package::source_date_epoch;
use rocm_kpack_package::publish::{publish, PublishOptions};

/// Publish a directory of packages (.deb, .rpm, .whl, loose .kpack) as
/// repositories: apt (pool/ + dists/), yum/dnf (<arch>/ + repodata/), pip
/// (simple/ + files/, PEP 503 HTML and PEP 691 JSON) and the kpack store
/// (by-hash/sha256/ + index.json). Without a kind flag, every kind that has
/// packages is written, plus the kpack store. Dates come from
/// SOURCE_DATE_EPOCH; output is byte-identical on rerun (signatures aside).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory searched (recursively) for packages.
    pub pkg_dir: PathBuf,
    /// Repository root (created if missing); the kinds written replace their
    /// previous directories.
    #[arg(long, short)]
    pub out: PathBuf,
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
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
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
    let report = publish(&args.pkg_dir, &args.out, &opts)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "published {} into {}: {} debs, {} rpms, {} wheels, {} archives",
            report.kinds.join(", "),
            args.out.display(),
            report.debs,
            report.rpms,
            report.wheels,
            report.archives
        );
    }
    Ok(ExitCode::SUCCESS)
}
