//! `rocm-kpack-fetch list`: [`ops::list`] as text or JSON.

use rocm_kpack_cli::iec_size;
use rocm_kpack_cli::ExitStatus;
use rocm_kpack_fetcher::ops::{self, list::Presence};

use super::{print_warnings, scan_config};
use crate::cli::ListArgs;

/// Runs `list`.
pub fn run(args: &ListArgs) -> anyhow::Result<ExitStatus> {
    let config = scan_config(&args.scan)?;
    let out = ops::list::list(&config.scan());
    if !args.json.enabled {
        print_warnings(&out.warnings);
    }
    args.json.report(&out, || text(&out, &config.searched()))?;
    Ok(ExitStatus::Success)
}

/// The listing for people.
fn text(out: &ops::list::ListReport, searched: &str) -> String {
    let mut text = String::new();
    if out.kpack_dirs.is_empty() {
        text.push_str(&format!("no .kpack directories found ({searched})\n"));
    }
    for d in &out.kpack_dirs {
        text.push_str(&format!("{}:\n", d.kpack_dir.display()));
        for c in &d.components {
            let name = c
                .manifest
                .file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default();
            text.push_str(&format!("  {} ({name}):\n", c.component));
            let mut rows: Vec<[String; 5]> = Vec::new();
            for a in c.archives.iter().chain(&c.databases) {
                let status = match a.status {
                    Presence::Fetched => "fetched",
                    Presence::Present => "present",
                    Presence::Absent => "absent",
                };
                rows.push([
                    status.to_owned(),
                    a.filename.clone(),
                    // As the group's packages name it (pkgspec/src/naming.rs,
                    // `{group_lower}`), so the row reads as `apt install`
                    // would take it; the file name keeps the manifest's.
                    a.family.to_ascii_lowercase(),
                    iec_size(a.size),
                    format!("[{}]", a.architectures.join(", ")),
                ]);
            }
            text.push_str(&table(&rows));
            rows.clear();
        }
        for o in &d.orphans {
            text.push_str(&format!(
                "  orphan   {} (component {}, no manifest lists it{}; `gc` removes it)\n",
                o.filename,
                o.component,
                if o.present { "" } else { ", file gone" }
            ));
        }
    }
    for r in &out.refused_manifests {
        text.push_str(&format!(
            "refused manifest {}: {}\n",
            r.path.display(),
            r.error
        ));
    }
    text
}

/// One component's archives as aligned columns: status, file name and
/// group left-aligned, size right-aligned, then the arch keys.
fn table(rows: &[[String; 5]]) -> String {
    let width = |i: usize| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0);
    let (w0, w1, w2, w3) = (width(0), width(1), width(2), width(3));
    rows.iter()
        .map(|[status, file, group, size, arches]| {
            format!("    {status:<w0$}  {file:<w1$}  {group:<w2$}  {size:>w3$}  {arches}\n")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn columns_line_up() {
        let row = |s: &str, f: &str, size: &str| {
            [s.into(), f.into(), "g".into(), size.into(), "[a]".into()]
        };
        let text = super::table(&[
            row("fetched", "x_gfx90X.kpack", "1.5 KiB"),
            row("absent", "x_gfx110X.kpack", "13.7 KiB"),
        ]);
        let ends: Vec<usize> = text.lines().map(|l| l.find('[').unwrap_or(0)).collect();
        assert_eq!(ends[0], ends[1], "{text}");
        assert!(
            text.contains("    fetched  x_gfx90X.kpack   g   1.5 KiB  [a]"),
            "{text}"
        );
    }
}
