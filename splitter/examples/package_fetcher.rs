//! Packages rocm-kpack-fetch itself with the splitter's own writers: a deb
//! (binary, apt hook, systemd units), an rpm (binary, systemd units) and a
//! wheel carrying the binary as a script (`<dist>.data/scripts/`).
//!
//! Lives here, not in the fetcher, so the fetcher never depends on the
//! packager. Usage:
//!
//!     cargo run -p rocm-kpack-splitter --example package_fetcher -- \
//!         BINARY TEMPLATES_DIR VERSION OUT_DIR [XZ_LEVEL]
//!
//! TEMPLATES_DIR is `repo-templates/fetch`; XZ_LEVEL defaults to 6 (tests
//! pass 0). Prints the written paths.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use flate2::write::GzEncoder;
use rocm_kpack_package::compress::Compression;
use rocm_kpack_package::deb::{write_deb, DebSpec};
use rocm_kpack_package::meta::{render_description, wrap, ControlFields, ControlFile};
use rocm_kpack_package::rpm::{write_rpm, Dep, RpmSpec};
use rocm_kpack_package::tree::{Entry, Payload};
use rocm_kpack_package::wheel::{write_wheel, WheelSpec};

const NAME: &str = "rocm-kpack-fetch";
const SUMMARY: &str = "fetch AMD GPU device code for installed ROCm packages";
const DESCRIPTION: &str = "rocm-kpack-fetch detects the local AMD GPUs and fetches, verifies and \
installs the device-code archives (.kpack) that installed generic packages list in their \
manifests, or installs the matching device packages with apt, dnf or pip.";
const MAINTAINER: &str = "rocm-kpack developers <rocm-kpack@example.org>";
const HOMEPAGE: &str = "https://github.com/ROCm/rocm-kpack";
/// Fixed timestamp: identical inputs give identical packages.
const EPOCH: u64 = 1_704_067_200;

fn read(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).with_context(|| format!("reading {}", path.display()))
}

fn gzip(data: &[u8]) -> Result<Vec<u8>> {
    // No file name or mtime in the header: reproducible.
    let mut e = GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(data)?;
    Ok(e.finish()?)
}

fn copyright() -> Vec<u8> {
    format!(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
Upstream-Name: rocm-kpack\nSource: {HOMEPAGE}\n\nFiles: *\nCopyright: 2024 Advanced Micro Devices, Inc.\nLicense: MIT\n \
Permission is hereby granted, free of charge, to any person obtaining a copy of this software \
and associated documentation files, to deal in the Software without restriction.\n"
    )
    .into_bytes()
}

fn deb(bin: &Path, templates: &Path, version: &str, level: u32, out: &Path) -> Result<PathBuf> {
    let doc = format!("usr/share/doc/{NAME}");
    let changelog = format!(
        "{NAME} ({version}) unstable; urgency=medium\n\n  * Release {version}.\n\n -- {MAINTAINER}  Mon, 01 Jan 2024 00:00:00 +0000\n"
    );
    let mut p = Payload::new();
    p.insert(Entry::bytes(&format!("usr/bin/{NAME}"), 0o755, read(bin)?))?;
    p.insert(Entry::bytes(
        "etc/apt/apt.conf.d/99rocm-kpack-fetch",
        0o644,
        read(&templates.join("apt/99rocm-kpack-fetch"))?,
    ))?;
    for unit in ["rocm-kpack-fetch.service", "rocm-kpack-fetch.timer"] {
        p.insert(Entry::bytes(
            &format!("lib/systemd/system/{unit}"),
            0o644,
            read(&templates.join("systemd").join(unit))?,
        ))?;
    }
    p.insert(Entry::bytes(&format!("{doc}/copyright"), 0o644, copyright()))?;
    p.insert(Entry::bytes(&format!("{doc}/changelog.gz"), 0o644, gzip(changelog.as_bytes())?))?;
    p.add_parent_dirs();
    let mut control = ControlFields::default();
    control.set("Package", NAME);
    control.set("Version", version);
    control.set("Architecture", "amd64");
    control.set("Maintainer", MAINTAINER);
    control.set("Depends", "libc6 (>= 2.34), libgcc-s1 (>= 4.2)");
    control.set("Section", "utils");
    control.set("Priority", "optional");
    control.set("Homepage", HOMEPAGE);
    control.set("Description", render_description(SUMMARY, &wrap(DESCRIPTION, 72)));
    let files = [ControlFile {
        name: "conffiles".into(),
        mode: 0o644,
        data: b"/etc/apt/apt.conf.d/99rocm-kpack-fetch\n".to_vec(),
    }];
    let path = out.join(format!("{NAME}_{version}_amd64.deb"));
    let f = BufWriter::new(File::create(&path)?);
    write_deb(
        f,
        &DebSpec {
            control,
            control_files: &files,
            payload: &p,
            compression: Compression::Xz,
            level: Some(level),
            mtime: EPOCH,
        },
    )?
    .flush()?;
    Ok(path)
}

fn rpm(bin: &Path, templates: &Path, version: &str, level: u32, out: &Path) -> Result<PathBuf> {
    let mut p = Payload::new();
    p.insert(Entry::bytes(&format!("usr/bin/{NAME}"), 0o755, read(bin)?))?;
    for unit in ["rocm-kpack-fetch.service", "rocm-kpack-fetch.timer"] {
        p.insert(Entry::bytes(
            &format!("usr/lib/systemd/system/{unit}"),
            0o644,
            read(&templates.join("systemd").join(unit))?,
        ))?;
    }
    p.insert(Entry::bytes(&format!("usr/share/licenses/{NAME}/LICENSE"), 0o644, copyright()))?;
    p.add_parent_dirs();
    let spec = RpmSpec {
        name: NAME.into(),
        epoch: None,
        version: version.replace('-', "_"),
        release: "1".into(),
        arch: "x86_64".into(),
        summary: SUMMARY.into(),
        description: DESCRIPTION.into(),
        license: "MIT".into(),
        group: "Unspecified".into(),
        url: Some(HOMEPAGE.into()),
        packager: Some(MAINTAINER.into()),
        source_rpm: format!("{NAME}-{}-1.src.rpm", version.replace('-', "_")),
        provides: Vec::new(),
        requires: vec![Dep::any("libc.so.6()(64bit)")],
        conflicts: Vec::new(),
        obsoletes: Vec::new(),
        scripts: BTreeMap::new(),
        config_files: Vec::new(),
        build_time: EPOCH,
        changelog: Some((MAINTAINER.into(), format!("- Release {version}"))),
        compression: Compression::Xz,
        level: Some(level),
    };
    let path = out.join(format!("{NAME}-{}-1.x86_64.rpm", spec.version));
    let f = BufWriter::new(File::create(&path)?);
    write_rpm(f, &spec, &p, out)?.flush()?;
    Ok(path)
}

fn wheel(bin: &Path, version: &str, out: &Path) -> Result<PathBuf> {
    let dist = NAME.replace('-', "_");
    let tag = "py3-none-manylinux_2_28_x86_64";
    let mut p = Payload::new();
    p.insert(Entry::bytes(
        &format!("{dist}-{version}.data/scripts/{NAME}"),
        0o755,
        read(bin)?,
    ))?;
    let mut info = BTreeMap::new();
    info.insert(
        "METADATA".to_string(),
        format!(
            "Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\nSummary: {SUMMARY}\nHome-page: {HOMEPAGE}\nLicense: MIT\nRequires-Python: >=3.8\n\n{DESCRIPTION}\n"
        )
        .into_bytes(),
    );
    info.insert(
        "WHEEL".to_string(),
        format!("Wheel-Version: 1.0\nGenerator: rocm-kpack\nRoot-Is-Purelib: false\nTag: {tag}\n").into_bytes(),
    );
    let path = out.join(format!("{dist}-{version}-{tag}.whl"));
    let f = BufWriter::new(File::create(&path)?);
    write_wheel(
        f,
        &WheelSpec {
            dist_info: format!("{dist}-{version}.dist-info"),
            dist_info_files: info,
            payload: &p,
            mtime: EPOCH,
        },
    )?
    .flush()?;
    Ok(path)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (bin, templates, version, out, level) = match args.as_slice() {
        [b, t, v, o] => (b, t, v, o, 6),
        [b, t, v, o, l] => (b, t, v, o, l.parse().context("XZ_LEVEL")?),
        _ => bail!("usage: package_fetcher BINARY TEMPLATES_DIR VERSION OUT_DIR [XZ_LEVEL]"),
    };
    let out = Path::new(out);
    fs::create_dir_all(out)?;
    let (bin, templates) = (Path::new(bin), Path::new(templates));
    for path in [
        deb(bin, templates, version, level, out)?,
        rpm(bin, templates, version, level, out)?,
        wheel(bin, version, out)?,
    ] {
        println!("{}", path.display());
    }
    Ok(())
}
