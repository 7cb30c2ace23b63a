//! The yum/dnf repository, written natively: `<arch>/*.rpm` plus
//! `repodata/` with `primary`, `filelists` and `other` (gzip, named by
//! their sha256 as createrepo_c does) and `repomd.xml`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::{
    copy_file, gzip, sign, write_file, xml_escape, PublishError, PublishOptions, SignMode,
};
use rocm_kpack_fs::sha256_file;
use rocm_kpack_package::rpm::{sense, split_evr, Dep, RpmFile, RpmReader};

struct Pkg {
    reader: RpmReader,
    sha256: String,
    size: u64,
    href: String,
    files: Vec<RpmFile>,
}

/// createrepo's rule for which files primary.xml lists.
fn primary_file(path: &str) -> bool {
    path.starts_with("/etc/") || path.contains("bin/") || path == "/usr/lib/sendmail"
}

fn dep_xml(out: &mut String, tag: &str, deps: &[Dep], requires: bool) {
    let deps: Vec<&Dep> = deps
        .iter()
        .filter(|d| !d.name.starts_with("rpmlib(") && d.flags & sense::RPMLIB == 0)
        .collect();
    if deps.is_empty() {
        return;
    }
    let _ = writeln!(out, "    <rpm:{tag}>");
    for d in deps {
        let _ = write!(out, "      <rpm:entry name=\"{}\"", xml_escape(&d.name));
        if let Some(f) = d.repo_flags() {
            let (e, v, r) = split_evr(&d.version);
            let _ = write!(
                out,
                " flags=\"{f}\" epoch=\"{}\" ver=\"{}\"",
                xml_escape(e.unwrap_or("0")),
                xml_escape(v)
            );
            if let Some(r) = r {
                let _ = write!(out, " rel=\"{}\"", xml_escape(r));
            }
        }
        let pre = sense::PREREQ | sense::SCRIPT_PRE | sense::SCRIPT_POST;
        if requires && d.flags & pre != 0 {
            out.push_str(" pre=\"1\"");
        }
        out.push_str("/>\n");
    }
    let _ = writeln!(out, "    </rpm:{tag}>");
}

fn version_xml(p: &RpmReader) -> String {
    format!(
        "<version epoch=\"{}\" ver=\"{}\" rel=\"{}\"/>",
        p.epoch(),
        xml_escape(p.version()),
        xml_escape(p.release())
    )
}

fn file_xml(out: &mut String, f: &RpmFile, indent: &str) {
    let is_dir = f.mode & 0o170000 == 0o040000;
    if is_dir {
        let _ = writeln!(
            out,
            "{indent}<file type=\"dir\">{}</file>",
            xml_escape(&f.path)
        );
    } else {
        let _ = writeln!(out, "{indent}<file>{}</file>", xml_escape(&f.path));
    }
}

/// Writes `<arch>/*.rpm` and `repodata/` into `root`; returns how many
/// rpms the repository holds. Every rpm's header and payload digests are
/// verified first.
pub fn write_yum(
    rpms: &[PathBuf],
    root: &Path,
    opts: &PublishOptions,
) -> Result<usize, PublishError> {
    let mut pkgs: BTreeMap<String, Pkg> = BTreeMap::new();
    for path in rpms {
        let reader = RpmReader::open(path)?;
        reader.verify_payload()?;
        let (size, sha) = sha256_file(path)?;
        let arch = reader.arch().to_string();
        let fname = format!(
            "{}-{}-{}.{}.rpm",
            reader.name(),
            reader.version(),
            reader.release(),
            arch
        );
        let href = format!("{arch}/{fname}");
        let sha_hex = hex::encode(sha);
        if let Some(prev) = pkgs.get(&href) {
            if prev.sha256 == sha_hex {
                continue;
            }
            return Err(PublishError::Invalid(format!(
                "two different rpms map to {href} (second: {})",
                path.display()
            )));
        }
        copy_file(path, &root.join(&href))?;
        let files = reader.files();
        pkgs.insert(
            href.clone(),
            Pkg {
                reader,
                sha256: sha_hex,
                size,
                href,
                files,
            },
        );
    }
    let n = pkgs.len();
    let mut primary = String::new();
    let _ = writeln!(primary, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>");
    let _ = writeln!(
        primary,
        "<metadata xmlns=\"http://linux.duke.edu/metadata/common\" xmlns:rpm=\"http://linux.duke.edu/metadata/rpm\" packages=\"{n}\">"
    );
    let mut filelists = String::new();
    let _ = writeln!(filelists, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>");
    let _ = writeln!(
        filelists,
        "<filelists xmlns=\"http://linux.duke.edu/metadata/filelists\" packages=\"{n}\">"
    );
    let mut other = String::new();
    let _ = writeln!(other, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>");
    let _ = writeln!(
        other,
        "<otherdata xmlns=\"http://linux.duke.edu/metadata/other\" packages=\"{n}\">"
    );
    use rocm_kpack_package::rpm::tag;
    for p in pkgs.values() {
        let r = &p.reader;
        let h = &r.header;
        let s = |t: u32| xml_escape(h.string(t).unwrap_or(""));
        let _ = writeln!(primary, "<package type=\"rpm\">");
        let _ = writeln!(primary, "  <name>{}</name>", xml_escape(r.name()));
        let _ = writeln!(primary, "  <arch>{}</arch>", xml_escape(r.arch()));
        let _ = writeln!(primary, "  {}", version_xml(r));
        let _ = writeln!(
            primary,
            "  <checksum type=\"sha256\" pkgid=\"YES\">{}</checksum>",
            p.sha256
        );
        let _ = writeln!(primary, "  <summary>{}</summary>", s(tag::SUMMARY));
        let _ = writeln!(
            primary,
            "  <description>{}</description>",
            s(tag::DESCRIPTION)
        );
        let _ = writeln!(primary, "  <packager>{}</packager>", s(tag::PACKAGER));
        let _ = writeln!(primary, "  <url>{}</url>", s(tag::URL));
        let build = h.int(tag::BUILDTIME).unwrap_or(0);
        let _ = writeln!(
            primary,
            "  <time file=\"{}\" build=\"{build}\"/>",
            opts.source_date_epoch
        );
        let _ = writeln!(
            primary,
            "  <size package=\"{}\" installed=\"{}\" archive=\"{}\"/>",
            p.size,
            r.installed_size(),
            r.archive_size()
        );
        let _ = writeln!(primary, "  <location href=\"{}\"/>", xml_escape(&p.href));
        let _ = writeln!(primary, "  <format>");
        let _ = writeln!(
            primary,
            "    <rpm:license>{}</rpm:license>",
            s(tag::LICENSE)
        );
        let _ = writeln!(primary, "    <rpm:vendor>{}</rpm:vendor>", s(tag::VENDOR));
        let _ = writeln!(primary, "    <rpm:group>{}</rpm:group>", s(tag::GROUP));
        let _ = writeln!(
            primary,
            "    <rpm:buildhost>{}</rpm:buildhost>",
            s(tag::BUILDHOST)
        );
        let _ = writeln!(
            primary,
            "    <rpm:sourcerpm>{}</rpm:sourcerpm>",
            s(tag::SOURCERPM)
        );
        let _ = writeln!(
            primary,
            "    <rpm:header-range start=\"{}\" end=\"{}\"/>",
            h.start, h.end
        );
        dep_xml(&mut primary, "provides", &r.provides(), false);
        dep_xml(&mut primary, "requires", &r.requires(), true);
        dep_xml(&mut primary, "conflicts", &r.conflicts(), false);
        dep_xml(&mut primary, "obsoletes", &r.obsoletes(), false);
        dep_xml(&mut primary, "recommends", &r.recommends(), false);
        for f in p.files.iter().filter(|f| primary_file(&f.path)) {
            file_xml(&mut primary, f, "    ");
        }
        let _ = writeln!(primary, "  </format>");
        let _ = writeln!(primary, "</package>");

        let _ = writeln!(
            filelists,
            "<package pkgid=\"{}\" name=\"{}\" arch=\"{}\">",
            p.sha256,
            xml_escape(r.name()),
            xml_escape(r.arch())
        );
        let _ = writeln!(filelists, "  {}", version_xml(r));
        for f in &p.files {
            file_xml(&mut filelists, f, "  ");
        }
        let _ = writeln!(filelists, "</package>");

        let _ = writeln!(
            other,
            "<package pkgid=\"{}\" name=\"{}\" arch=\"{}\">",
            p.sha256,
            xml_escape(r.name()),
            xml_escape(r.arch())
        );
        let _ = writeln!(other, "  {}", version_xml(r));
        let _ = writeln!(other, "</package>");
    }
    primary.push_str("</metadata>\n");
    filelists.push_str("</filelists>\n");
    other.push_str("</otherdata>\n");

    let repodata = root.join("repodata");
    let mut repomd = String::new();
    let _ = writeln!(repomd, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>");
    let _ = writeln!(
        repomd,
        "<repomd xmlns=\"http://linux.duke.edu/metadata/repo\" xmlns:rpm=\"http://linux.duke.edu/metadata/rpm\">"
    );
    let _ = writeln!(repomd, "  <revision>{}</revision>", opts.source_date_epoch);
    for (kind, text) in [
        ("primary", &primary),
        ("filelists", &filelists),
        ("other", &other),
    ] {
        let gz = gzip(text.as_bytes())?;
        let gz_sha = hex::encode(Sha256::digest(&gz));
        let open_sha = hex::encode(Sha256::digest(text.as_bytes()));
        let name = format!("{gz_sha}-{kind}.xml.gz");
        write_file(&repodata.join(&name), &gz)?;
        let _ = writeln!(repomd, "  <data type=\"{kind}\">");
        let _ = writeln!(repomd, "    <checksum type=\"sha256\">{gz_sha}</checksum>");
        let _ = writeln!(
            repomd,
            "    <open-checksum type=\"sha256\">{open_sha}</open-checksum>"
        );
        let _ = writeln!(repomd, "    <location href=\"repodata/{name}\"/>");
        let _ = writeln!(
            repomd,
            "    <timestamp>{}</timestamp>",
            opts.source_date_epoch
        );
        let _ = writeln!(repomd, "    <size>{}</size>", gz.len());
        let _ = writeln!(repomd, "    <open-size>{}</open-size>", text.len());
        let _ = writeln!(repomd, "  </data>");
    }
    repomd.push_str("</repomd>\n");
    let repomd_path = repodata.join("repomd.xml");
    write_file(&repomd_path, repomd.as_bytes())?;
    if opts.sign_key.is_some() {
        sign(
            opts,
            &repomd_path,
            &repodata.join("repomd.xml.asc"),
            SignMode::Detached,
        )?;
    }
    Ok(n)
}
