//! `rocm-kpack-fetch detect`: print what detection finds, as text for
//! people or as JSON (the serialization of `Detection`); exit 0 with
//! targets, 3 without.

use rocm_kpack_cli::ExitStatus;
use rocm_kpack_fetcher::detect::write_text;

use super::{detection, print_warnings};
use crate::cli::DetectArgs;

/// Runs `detect`.
pub fn run(args: &DetectArgs) -> anyhow::Result<ExitStatus> {
    let detection = detection(&args.targets)?;
    args.json.report(&detection, || {
        let mut text = Vec::new();
        // Writing to memory cannot fail.
        let _ = write_text(&mut text, &detection);
        String::from_utf8_lossy(&text).into_owned()
    })?;
    if !args.json.enabled {
        print_warnings(&detection.warnings);
    }
    Ok(if detection.has_targets() {
        ExitStatus::Success
    } else {
        ExitStatus::NoGpu
    })
}
