//! `rocm-kpack-fetch doctor`: [`ops::doctor`] as text or JSON; exit 4 when
//! a check fails, 3 without targets.

use rocm_kpack_cli::{plural, ExitStatus};
use rocm_kpack_fetcher::ops::{self, doctor::Outcome, doctor::VISIBLE_DEVICE_VARS};
use rocm_kpack_fetcher::sources::Sources;

use super::{local_targets, scan_config};
use crate::cli::DoctorArgs;

/// Runs `doctor`.
pub fn run(args: &DoctorArgs) -> anyhow::Result<ExitStatus> {
    let local = local_targets(&args.targets)?;
    let config = scan_config(&args.scan)?;
    let scan = config.scan();
    let visible: Vec<(String, String)> = VISIBLE_DEVICE_VARS
        .iter()
        .filter_map(|var| std::env::var(var).ok().map(|v| (var.to_string(), v)))
        .collect();
    let mut warnings = Vec::new();
    let unlisted = rocm_kpack_fetcher::unlisted::check(&scan, &config, &local.ids, &mut warnings);
    super::print_warnings(&warnings);
    let sources = Sources::configured(&args.scan.root, &scan.manifests);
    let mut out = ops::doctor::doctor(&local, &scan, &visible, &unlisted, &sources);
    let native = rocm_kpack_fetcher::pm::native::coverage_in(
        &args.scan.root,
        &super::native_scheme(&args.native)?,
        &local.ids,
    )?;
    ops::doctor::add_native(&mut out, &native);
    if let Some(s) = super::pip_device_status(&args.scan, &config, &local.ids)? {
        ops::doctor::add_pip_devices(&mut out, &s);
    }
    args.json.report(&out, || {
        let mut text = String::new();
        for c in &out.checks {
            let word = match c.outcome {
                Outcome::Ok => "ok",
                Outcome::Info => "info",
                Outcome::Warning => "warning",
                Outcome::Problem => "PROBLEM",
            };
            text.push_str(&format!("{word:<8} {}: {}\n", c.check, c.detail));
        }
        text.push_str(&format!(
            "doctor: {}, {}\n",
            plural(out.problems, "problem", "problems"),
            plural(out.warnings, "warning", "warnings")
        ));
        text
    })?;
    Ok(if local.ids.is_empty() {
        ExitStatus::NoGpu
    } else if out.problems > 0 {
        ExitStatus::Problems
    } else {
        ExitStatus::Success
    })
}
