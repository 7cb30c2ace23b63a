//! `rocm-kpack-fetch gc`: [`ops::gc`] as text or JSON; lists what would go
//! unless `--yes`. Without targets nothing is collected (exit 3).

use rocm_kpack_cli::ExitStatus;
use rocm_kpack_fetcher::ops;

use super::{local_targets, lock_options, print_warnings, scan_config};
use crate::cli::GcArgs;

/// Runs `gc`.
pub fn run(args: &GcArgs) -> anyhow::Result<ExitStatus> {
    let local = local_targets(&args.targets)?;
    if local.ids.is_empty() {
        return super::no_targets(
            &local,
            args.json.enabled,
            Some("not collecting anything: with no targets every archive would go; pass --target TARGET to say what to keep"),
        );
    }
    let out = ops::gc::run(&ops::gc::GcRequest {
        local,
        scan: scan_config(&args.scan)?,
        apply: args.yes,
        lock: lock_options(&args.scan),
    })?;
    if !args.json.enabled {
        print_warnings(&out.warnings);
    }
    args.json.report(&out, || text(&out, args.yes))?;
    Ok(ExitStatus::Success)
}

/// What was (or would be) collected, for people.
fn text(out: &ops::gc::GcReport, yes: bool) -> String {
    let mut text = String::new();
    for c in &out.candidates {
        let path = c.path();
        if let Some(k) = out.kept.iter().find(|k| k.path == path) {
            text.push_str(&format!(
                "kept {}: {} lists it too\n",
                path.display(),
                k.listed_by.display()
            ));
            continue;
        }
        let verb = if yes { "removed" } else { "would remove" };
        text.push_str(&format!("{verb} {}: {}\n", path.display(), c.reason));
    }
    if out.candidates.is_empty() {
        text.push_str("nothing to collect\n");
    } else if !yes {
        text.push_str("pass --yes to remove them\n");
    }
    text
}
