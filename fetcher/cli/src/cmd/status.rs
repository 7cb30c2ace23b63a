//! `rocm-kpack-fetch status`: [`ops::status`] as text or JSON.

use rocm_kpack_cli::ExitStatus;
use rocm_kpack_cli::{iec_size, plural};
use rocm_kpack_fetcher::detect::targets_origin;
use rocm_kpack_fetcher::download::Cache;
use rocm_kpack_fetcher::ops::{self, default_cache_dir};
use rocm_kpack_fetcher::sources::Sources;

use super::{local_targets, print_warnings, scan_config};
use crate::cli::StatusArgs;
use rocm_kpack_fetcher::unlisted::BinaryCoverage;

/// Runs `status`.
pub fn run(args: &StatusArgs) -> anyhow::Result<ExitStatus> {
    let local = local_targets(&args.targets)?;
    let config = scan_config(&args.scan)?;
    let scan = config.scan();
    let cache = Cache::new(
        args.cache_dir
            .clone()
            .unwrap_or_else(|| default_cache_dir(&args.scan.root)),
    );
    let mut warnings = Vec::new();
    let unlisted = rocm_kpack_fetcher::unlisted::check(&scan, &config, &local.ids, &mut warnings);
    let mut out = ops::status::status(&local, &scan, &cache, unlisted);
    out.warnings.extend(warnings);
    out.native = rocm_kpack_fetcher::pm::native::coverage_in(
        &args.scan.root,
        &super::native_scheme(&args.native)?,
        &local.ids,
    )?;
    if let Some(s) = super::pip_device_status(&args.scan, &config, &local.ids)? {
        out.warnings.extend(s.warnings.iter().cloned());
        out.pip_device_packages = s;
    }
    // A source `install` would skip looks configured but serves nothing.
    out.warnings
        .extend(Sources::configured(&args.scan.root, &scan.manifests).skipped());
    // The exit code says what the text says: 3 without a GPU, 4 with
    // archives missing (or manifests refused), else 0; the same with --json.
    let status = if out.targets.is_empty() {
        ExitStatus::NoGpu
    } else if out.components.iter().any(|c| !c.complete)
        || out.unlisted.iter().any(|b| !b.complete)
        || !out.refused_manifests.is_empty()
        || !out.pip_device_packages.missing.is_empty()
        || !out.native.missing.is_empty()
        || !out.orphans.is_empty()
    {
        ExitStatus::Problems
    } else {
        ExitStatus::Success
    };
    if !args.json.enabled {
        print_warnings(&out.warnings);
    }
    let advice = Advice {
        install: advised(args, "install", " --auto"),
        gc: advised(args, "gc --yes", ""),
        searched: config.searched(),
    };
    args.json
        .report(&out, || text(&out, &local, &cache, &advice))?;
    Ok(status)
}

/// The commands the text advises, and where the scan looked.
struct Advice {
    install: String,
    gc: String,
    searched: String,
}

/// `rocm-kpack-fetch WORDS` with the options of this `status` that choose
/// what it looks at (`--target`, else `no_target`; `--root`,
/// `--sysfs-root`, `--prefix`, ...), so the command advised acts on what
/// was just reported.
fn advised(args: &StatusArgs, words: &str, no_target: &str) -> String {
    let mut line = format!("rocm-kpack-fetch {words}");
    if args.targets.targets.is_empty() {
        line.push_str(no_target);
    } else {
        line.push_str(&format!(" --target {}", args.targets.targets.join(",")));
    }
    let root = std::path::Path::new("/");
    for (option, path) in [
        ("--root", &args.scan.root),
        ("--sysfs-root", &args.targets.sysfs_root),
    ] {
        if path != root {
            line.push_str(&format!(
                " {option} {}",
                shell_word(&path.to_string_lossy())
            ));
        }
    }
    for p in &args.scan.prefixes {
        line.push_str(&format!(" --prefix {}", shell_word(&p.to_string_lossy())));
    }
    if args.scan.no_default_prefixes {
        line.push_str(" --no-default-prefixes");
    }
    if let Some(python) = &args.scan.python {
        line.push_str(&format!(" --python {}", shell_word(python)));
    }
    line
}

/// `word` as the shell reads it back: as it is when it holds only
/// characters no shell treats specially, else in single quotes.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:=@,".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// The report for people.
fn text(
    out: &ops::status::StatusReport,
    local: &rocm_kpack_fetcher::detect::LocalTargets,
    cache: &Cache,
    advice: &Advice,
) -> String {
    let Advice {
        install,
        gc,
        searched,
    } = advice;
    let mut text = String::new();
    if out.targets.is_empty() {
        text.push_str("targets: none (no AMD GPU found; pass --target TARGET to choose)\n");
    } else {
        text.push_str(&format!(
            "targets: {} ({})\n",
            out.targets.join(", "),
            targets_origin(&local.detection)
        ));
    }
    let pip = &out.pip_device_packages;
    if out.components.is_empty()
        && out.unlisted.is_empty()
        && out.native.missing.is_empty()
        && out.native.unused.is_empty()
        && pip.missing.is_empty()
        && pip.unneeded.is_empty()
        && out.orphans.is_empty()
    {
        text.push_str(&format!("no installed .kpm manifests found ({searched})\n"));
    }
    for c in &out.components {
        let (one, many) = if c.databases_needed > 0 {
            ("archive or database file", "archives and database files")
        } else {
            ("archive", "archives")
        };
        let state = if c.complete {
            format!("complete ({} present)", plural(c.present, one, many))
        } else {
            format!(
                "{} of {} missing ({}): run `{install}`",
                c.missing.len(),
                plural(c.needed, one, many),
                iec_size(c.bytes_missing)
            )
        };
        text.push_str(&format!(
            "{} ({}): {state}\n",
            c.component,
            c.manifest.display()
        ));
        for m in &c.missing {
            text.push_str(&format!("  missing: {m}\n"));
        }
        // -v: what is there, and why it is needed.
        if rocm_kpack_cli::verbose() > 0 {
            for f in &c.found {
                text.push_str(&format!("  present: {} ({})\n", f.name, f.reason));
            }
        }
        for t in &c.no_device_code {
            text.push_str(&format!(
                "  warning: {} publishes no device code for {t}\n",
                c.component
            ));
        }
    }
    text.push_str(&unlisted_text(&out.unlisted));
    for d in &pip.missing {
        text.push_str(&format!(
            "pip: {} ({}[{}]) missing for {}: run `rocm-kpack-fetch install --auto --via pip`\n",
            d.dist,
            d.base,
            d.extra,
            d.local.join(", ")
        ));
    }
    for d in &pip.unneeded {
        text.push_str(&format!(
            "pip: {} installed for no GPU here ({}; `rocm-kpack-fetch prune --via pip` removes it)\n",
            d.dist,
            iec_size(d.size)
        ));
    }
    for m in &out.native.missing {
        text.push_str(&format!(
            "{} (native): {} missing for {}: run `rocm-kpack-fetch install --auto --via apt|dnf`\n",
            m.generic,
            m.name,
            m.targets.join(", ")
        ));
    }
    for u in &out.native.unused {
        text.push_str(&format!(
            "{} (native): {} installed for {}, no GPU here (`rocm-kpack-fetch prune` removes it)\n",
            u.host, u.package.name, u.target
        ));
    }
    for r in &out.refused_manifests {
        text.push_str(&format!(
            "refused manifest {}: {}\n",
            r.path.display(),
            r.error
        ));
    }
    for o in &out.orphans {
        text.push_str(&format!(
            "orphan {} (component {}): no installed manifest lists it; `{gc}` removes it\n",
            o.path.display(),
            o.component
        ));
    }
    if !out.partial_downloads.is_empty() {
        let bytes: u64 = out.partial_downloads.iter().map(|p| p.bytes).sum();
        text.push_str(&format!(
            "{} ({}) kept in {} for resuming\n",
            plural(
                out.partial_downloads.len(),
                "partial download",
                "partial downloads"
            ),
            iec_size(bytes),
            cache.partial_dir().display()
        ));
    }
    text
}

/// The coverage of host binaries without a `.kpm`, for people: one line
/// per binary, one per missing archive with its provider, what to do.
pub fn unlisted_text(unlisted: &[BinaryCoverage]) -> String {
    let mut text = String::new();
    for b in unlisted {
        let owner = b
            .package
            .as_deref()
            .map(|p| format!(", package {p}"))
            .unwrap_or_default();
        if b.complete {
            text.push_str(&format!(
                "{} (no .kpm{owner}): complete ({} an archive)\n",
                b.binary.display(),
                plural(
                    b.found.len(),
                    "target setting finds",
                    "target settings find"
                )
            ));
            continue;
        }
        text.push_str(&format!(
            "{} (no .kpm{owner}): {} of {} no archive\n",
            b.binary.display(),
            b.missing.len(),
            plural(
                b.missing.len() + b.found.len(),
                "target setting finds",
                "target settings find"
            )
        ));
        for m in &b.missing {
            text.push_str(&format!(
                "  missing for {}: {}: {}\n",
                m.target,
                m.searched.first().map_or("an archive", String::as_str),
                m.advice()
            ));
            if m.searched.len() > 1 {
                text.push_str(&format!(
                    "    (also looked for {})\n",
                    m.searched[1..].join(", ")
                ));
            }
            if let Some(d) = &m.detail {
                text.push_str(&format!("    {d}\n"));
            }
        }
    }
    text
}
