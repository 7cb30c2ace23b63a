//! `rocm-kpack inspect FILE [--json]`.

use std::fmt::Write as _;
use std::path::PathBuf;

use rocm_kpack_cli::{iec_size, plural, ExitStatus, JsonArg};
use rocm_kpack_splitter::coff::inspect::PeReport;
use rocm_kpack_splitter::elf::inspect::{ElfReport, MarkerReport, WrapperReport};
use rocm_kpack_splitter::inspect::{self, ArchiveReport, BundleSectionReport, Report};
use rocm_kpack_splitter::inspect_package::{PackageReport, PackageRole};

use crate::cli::SpecArg;

/// Show what a file holds: a `.kpack` archive (header, arches, every TOC
/// entry with sizes and compression ratio), a `.kpm` manifest, a fat binary
/// (each offload bundle and its targets, each wrapper and its code-object
/// index), a split host-only binary (its `.rocm_kpack_ref` marker), or a raw
/// offload bundle. ELF files and PE images (Windows DLLs/EXEs: `.hip_fat`,
/// `.hipFatB`, `.kpackrf`) alike, or a package (.deb, .rpm, .whl, ours or
/// AMD's): the GPU targets it carries (fat binaries, archives) or declares,
/// and for a generic package the device packages it expects (named by
/// --spec, or by AMD's scheme for AMD's host packages; a wheel's
/// `device-<target>` extras). The kind is recognised from the file's content.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The file to inspect.
    pub file: PathBuf,
    /// The spec whose naming gives the device packages a generic package
    /// expects.
    #[command(flatten)]
    pub spec: SpecArg,
    #[command(flatten)]
    pub json: JsonArg,
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let report = inspect::inspect_with(&args.file, &args.spec.load()?)?;
    args.json.document(&report, || render(&report))?;
    Ok(ExitStatus::Success)
}

fn render(report: &Report) -> String {
    match report {
        Report::Archive(a) => render_archive(a),
        Report::Manifest(m) => {
            let mut out = format!("kpm manifest: component {}\n", m.component);
            for f in &m.kpack_files {
                let _ = writeln!(
                    out,
                    "  {}  family {}  {} bytes  sha256 {}\n    arches: {}",
                    f.filename,
                    f.family,
                    f.size,
                    f.sha256.as_deref().unwrap_or("(none: legacy manifest)"),
                    f.architectures.join(" ")
                );
            }
            out
        }
        Report::Bundle(b) => render_bundles(b, ""),
        Report::Elf(e) => render_elf(e),
        Report::Pe(p) => render_pe(p),
        Report::Package(p) => render_package(p),
    }
}

fn render_package(p: &PackageReport) -> String {
    let kind = format!("{:?}", p.format).to_lowercase();
    let what = match p.role {
        PackageRole::Fat => format!("fat package, device code for {}", p.targets.join(" ")),
        PackageRole::Generic => {
            "generic package: host code; its device code is in the packages below".to_owned()
        }
        PackageRole::Device if p.targets.is_empty() => {
            format!("device package for {}", p.declared_targets.join(" "))
        }
        PackageRole::Device => format!("device package, code for {}", p.targets.join(" ")),
        PackageRole::Host => "no device code, and nothing that refers to any".to_owned(),
    };
    let mut out = format!("{kind} {} {}: {what}\n", p.name, p.version);
    // A device package without archives already said so in its headline.
    let headline_says = p.role == PackageRole::Device && p.targets.is_empty();
    if !p.declared_targets.is_empty() && !headline_says {
        let _ = writeln!(out, "  declares targets: {}", p.declared_targets.join(" "));
    }
    for f in &p.fat_binaries {
        let _ = writeln!(out, "  fat binary {}: {}", f.path, f.targets.join(" "));
    }
    for b in &p.split_binaries {
        let _ = writeln!(out, "  split binary {b}");
    }
    let width = p.archives.iter().map(|a| a.path.len()).max().unwrap_or(0);
    for a in &p.archives {
        let _ = writeln!(
            out,
            "  archive {:<width$}  {:>10}  {}: {}",
            a.path,
            iec_size(a.size),
            a.group,
            a.arches.join(" ")
        );
    }
    for m in &p.manifests {
        let _ = writeln!(
            out,
            "  manifest {} (component {}): {}",
            m.path,
            m.component,
            plural(m.kpack_files.len(), "archive", "archives")
        );
    }
    if !p.expects.is_empty() {
        let _ = writeln!(
            out,
            "  expects {}:",
            plural(p.expects.len(), "device package", "device packages")
        );
        let width = p.expects.iter().map(|e| e.name.len()).max().unwrap_or(0);
        for e in &p.expects {
            let via = e
                .extra
                .as_ref()
                .map(|x| format!(" (extra {x})"))
                .unwrap_or_default();
            let _ = writeln!(out, "    {:<width$}  {}{via}", e.name, e.group);
        }
    }
    out
}

fn render_archive(a: &ArchiveReport) -> String {
    let mut out = format!(
        "kpack archive v{}: group {}, family {}, {} bytes\n  scheme {}, {} blobs, TOC at {}\n  arches: {}\n  code objects: {} bytes stored as {} ({:.2}x)\n",
        a.format_version,
        a.group_name,
        a.gfx_arch_family,
        a.file_size,
        a.compression_scheme,
        a.blob_count,
        a.toc_offset,
        a.gfx_arches.join(" "),
        a.original_bytes,
        a.stored_bytes,
        if a.stored_bytes == 0 { 1.0 } else { a.original_bytes as f64 / a.stored_bytes as f64 },
    );
    let width = a.entries.iter().map(|e| e.binary.len()).max().unwrap_or(0);
    for e in &a.entries {
        let _ = writeln!(
            out,
            "  {:<width$}  {:<22} #{:<4} {:>10} -> {:>10} ({:.2}x)",
            e.binary, e.arch, e.ordinal, e.original_size, e.stored_size, e.compression_ratio
        );
    }
    out
}

fn render_bundles(b: &BundleSectionReport, indent: &str) -> String {
    let mut out = format!(
        "{indent}{} offload bundle(s) in {} bytes\n",
        b.bundles.len(),
        b.section_size
    );
    for bundle in &b.bundles {
        let how = match (&bundle.ccob_version, &bundle.ccob_method) {
            (Some(v), Some(m)) => format!(
                "CCOB v{v} {m}, {} -> {} bytes",
                bundle.stored_size, bundle.uncompressed_size
            ),
            _ => format!("uncompressed, {} bytes", bundle.stored_size),
        };
        let _ = writeln!(
            out,
            "{indent}  bundle {} at {:#x}: {how}",
            bundle.index, bundle.offset
        );
        for e in bundle.entries.iter().filter(|e| e.target.is_some()) {
            let _ = writeln!(
                out,
                "{indent}    {:<24} {:>10} bytes  ({})",
                e.target.as_deref().unwrap_or(""),
                e.size,
                e.triple
            );
        }
    }
    out
}

fn render_elf(e: &ElfReport) -> String {
    let head = format!("ELF {}: {}\n", e.elf_type, e.state);
    render_binary(
        head,
        e.hip_fatbin.as_ref(),
        e.marker.as_ref(),
        ".rocm_kpack_ref",
        &e.wrappers,
    )
}

fn render_pe(p: &PeReport) -> String {
    let signed = if p.signed {
        ", Authenticode-signed"
    } else {
        ""
    };
    let head = format!("{} ({}){signed}: {}\n", p.image_type, p.machine, p.state);
    render_binary(
        head,
        p.hip_fat.as_ref(),
        p.marker.as_ref(),
        ".kpackrf",
        &p.wrappers,
    )
}

/// The part ELF and PE reports share: bundles, marker, wrappers.
fn render_binary(
    mut out: String,
    bundles: Option<&BundleSectionReport>,
    marker: Option<&MarkerReport>,
    marker_section: &str,
    wrappers: &[WrapperReport],
) -> String {
    if let Some(section) = bundles {
        out.push_str(&render_bundles(section, "  "));
    }
    if let Some(marker) = marker {
        let _ = writeln!(
            out,
            "  marker ({marker_section}): kernel_name {}\n    search paths: {}",
            marker.kernel_name,
            marker.kpack_search_paths.join(", ")
        );
    }
    let _ = writeln!(out, "  {} fat-binary wrapper(s)", wrappers.len());
    for WrapperReport {
        index,
        magic,
        binary,
        co_index,
    } in wrappers
    {
        let _ = writeln!(
            out,
            "    wrapper {index}: {magic} -> {binary:#x}, co_index {}",
            co_index.map_or_else(|| "?".to_owned(), |c| c.to_string())
        );
    }
    out
}
