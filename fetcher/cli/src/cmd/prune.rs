//! `rocm-kpack-fetch prune`: [`ops::prune`] over the fetcher's own files
//! and the chosen package managers, as text or JSON. Lists what goes, and
//! what the package managers would remove too, before removing anything;
//! only `--yes` removes. Without a target to keep nothing is pruned
//! (exit 3).

use rocm_kpack_cli::{iec_size, print_stdout, quiet, ExitStatus, UsageError};
use rocm_kpack_fetcher::ops::prune::{self, OwnFiles, PruneBackend, PruneContext};
use rocm_kpack_fetcher::pm::apt::Apt;
use rocm_kpack_fetcher::pm::dnf::Dnf;
use rocm_kpack_fetcher::pm::pip::Pip;
use rocm_kpack_format::target::TargetId;

use super::{local_targets, print_warnings, scan_config};
use crate::cli::{PruneArgs, Via};

/// The package managers to prune through: those asked for, else those
/// whose database exists below the root.
fn chosen(args: &PruneArgs) -> Vec<Via> {
    if !args.via.is_empty() {
        let mut out = Vec::new();
        for v in &args.via {
            if !out.contains(v) {
                out.push(*v);
            }
        }
        return out;
    }
    match rocm_kpack_fetcher::unlisted::Database::of(&args.scan.root) {
        Some(rocm_kpack_fetcher::unlisted::Database::Dpkg(_)) => vec![Via::Apt],
        Some(rocm_kpack_fetcher::unlisted::Database::Rpm(_)) => vec![Via::Dnf],
        None => Vec::new(),
    }
}

/// Runs `prune`.
pub fn run(args: &PruneArgs) -> anyhow::Result<ExitStatus> {
    let local = local_targets(&args.targets)?;
    let mut keep = local.ids.clone();
    for k in &args.keep {
        let id = TargetId::parse(k).map_err(|e| UsageError(format!("--keep {k}: {e}")))?;
        if !keep.contains(&id) {
            keep.push(id);
        }
    }
    if keep.is_empty() {
        return super::no_targets(
            &local,
            args.json.enabled,
            Some("not pruning anything: with no targets every target's device code would go; pass --keep TARGET to say what to keep"),
        );
    }
    let config = scan_config(&args.scan)?;
    let scan = config.scan();
    let native = super::native_scheme(&args.native)?;
    let ctx = PruneContext {
        scan: &scan,
        keep: &keep,
        lock: super::lock_options(&args.scan),
        allow_dependents: args.allow_dependents,
    };
    // Every backend lives here; `backends` borrows those chosen, in order.
    let apt = Apt {
        root: args.scan.root.clone(),
        extra: args.pm_opts.clone(),
        native: native.clone(),
    };
    let dnf = Dnf {
        root: args.scan.root.clone(),
        extra: args.pm_opts.clone(),
        native,
    };
    let pip = Pip {
        python: super::interpreter(args.scan.python.as_deref()),
        index_url: None,
        extra: args.pm_opts.clone(),
        permissions: rocm_kpack_fetcher::install::PermissionPolicy::from_allow_unsafe(
            args.scan.unsafe_permissions,
        ),
    };
    let mut backends: Vec<&dyn PruneBackend> = vec![&OwnFiles];
    for via in chosen(args) {
        match via {
            Via::Apt => backends.push(&apt),
            Via::Dnf => backends.push(&dnf),
            Via::Pip => backends.push(&pip),
        }
    }
    let apply = args.yes && !args.dry_run;
    // Plan and show everything before removing anything: what the package
    // managers would remove too is the user's to see first.
    let mut report = prune::plan(&backends, &ctx)?;
    let text = !args.json.enabled && !quiet();
    if !args.json.enabled {
        print_warnings(&local.detection.warnings);
        print_warnings(&report.warnings);
    }
    if text {
        print_stdout(&render(&report, apply))?;
    }
    if apply {
        let before = report.warnings.len();
        prune::apply(&backends, &ctx, &mut report)?;
        if !args.json.enabled {
            print_warnings(&report.warnings[before..]);
        }
        if text {
            let text: String = report
                .removed
                .iter()
                .map(|r| format!("removed {r}\n"))
                .collect();
            print_stdout(&text)?;
        }
    }
    args.json.report(&report, String::new)?;
    Ok(ExitStatus::Success)
}

/// The plan as text: per backend, each item with its size, then what the
/// package manager removes too, then the total.
fn render(plan: &prune::PruneReport, apply: bool) -> String {
    let verb = if apply { "removing" } else { "would remove" };
    let mut text = format!("keeping device code for: {}\n", plan.keep.join(", "));
    let mut any = false;
    for b in &plan.backends {
        for i in &b.items {
            any = true;
            text.push_str(&format!(
                "{verb} ({}) {} [{}]: {}\n",
                b.backend,
                i.name,
                iec_size(i.bytes),
                i.reason
            ));
            let mut owners: Vec<&str> = i.links.iter().map(|l| l.recorded_by.as_str()).collect();
            owners.sort_unstable();
            owners.dedup();
            if !i.links.is_empty() {
                text.push_str(&format!(
                    "  and {} hard link{} to its files that {} record{} (dropped from the record)\n",
                    i.links.len(),
                    if i.links.len() == 1 { "" } else { "s" },
                    owners.join(", "),
                    if owners.len() == 1 { "s" } else { "" }
                ));
            }
        }
        if !b.also_removed.is_empty() {
            text.push_str(&format!(
                "{} will ALSO remove (they depend on the above): {}\n",
                b.backend,
                b.also_removed.join(" ")
            ));
        }
    }
    if !any {
        text.push_str("nothing to prune\n");
    } else {
        text.push_str(&format!("frees {}\n", iec_size(plan.bytes)));
        if !apply {
            text.push_str("(dry run: pass --yes to remove them)\n");
        }
    }
    text
}
