//! The apt repository: pool, Packages indices, Release (+ signatures).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use md5::Md5;
use sha2::{Digest, Sha256};

use rocm_kpack_fs::{for_each_block, open_regular_following, HashingReader};

use crate::{copy_file, gzip, sign, write_file, PublishError, PublishOptions, SignMode};
use rocm_kpack_package::dates::rfc2822;
use rocm_kpack_package::deb::DebReader;
use rocm_kpack_package::meta::ControlFields;

/// Fields the repository computes; dropped from control before adding.
const COMPUTED: [&str; 5] = ["Filename", "Size", "MD5sum", "SHA1", "SHA256"];

/// The pool directory of a package: `pool/<component>/<prefix>/<source>`,
/// prefix `libX` for `lib*` sources, else the first letter.
pub fn pool_dir(component: &str, source: &str) -> String {
    let prefix = if source.starts_with("lib") && source.len() > 3 {
        source.get(..4).unwrap_or(source)
    } else {
        source.get(..1).unwrap_or(source)
    };
    format!("pool/{component}/{prefix}/{source}")
}

struct Stanza {
    name: String,
    version: String,
    arch: String,
    fields: ControlFields,
}

/// SHA-256, MD5 and size of a deb in one read: the Packages index carries
/// both sums (apt checks SHA256; MD5sum is what older tools read).
fn sha256_md5_file(path: &Path) -> Result<([u8; 32], [u8; 16], u64), PublishError> {
    let file = open_regular_following(path)?;
    let mut reader = HashingReader::new(file);
    let mut md5 = Md5::new();
    for_each_block(&mut reader, |block| md5.update(block))
        .map_err(|e| PublishError::io("cannot read", path, e))?;
    let (sha, size) = reader.finish();
    Ok((sha, md5.finalize().into(), size))
}

/// Writes pool + dists into `root`; returns how many debs it holds.
pub fn write_apt(
    debs: &[PathBuf],
    root: &Path,
    opts: &PublishOptions,
) -> Result<usize, PublishError> {
    let mut stanzas: Vec<Stanza> = Vec::new();
    let mut placed: BTreeMap<String, [u8; 32]> = BTreeMap::new();
    for deb in debs {
        let r = DebReader::open(deb)?;
        let (sha, md5, size) = sha256_md5_file(deb)?;
        let get = |f: &str| r.control.get(f).unwrap_or_default().to_string();
        let (name, version, arch) = (get("Package"), get("Version"), get("Architecture"));
        let source = r
            .control
            .get("Source")
            .and_then(|s| s.split_whitespace().next())
            .unwrap_or(&name)
            .to_string();
        let file_version = version.split_once(':').map_or(version.as_str(), |(_, v)| v);
        let rel = format!(
            "{}/{name}_{file_version}_{arch}.deb",
            pool_dir(&opts.component, &source)
        );
        match placed.get(&rel) {
            Some(prev) if *prev == sha => continue,
            Some(_) => {
                return Err(PublishError::Invalid(format!(
                    "two different packages map to {rel} (second: {})",
                    deb.display()
                )))
            }
            None => {}
        }
        placed.insert(rel.clone(), sha);
        copy_file(deb, &root.join(&rel))?;
        let mut fields = r.control.clone();
        for f in COMPUTED {
            fields.remove(f);
        }
        fields.set("Filename", rel);
        fields.set("Size", size.to_string());
        fields.set("MD5sum", hex::encode(md5));
        fields.set("SHA256", hex::encode(sha));
        stanzas.push(Stanza {
            name,
            version,
            arch,
            fields,
        });
    }
    stanzas.sort_by(|a, b| (&a.name, &a.version, &a.arch).cmp(&(&b.name, &b.version, &b.arch)));
    let mut arches: BTreeSet<String> = stanzas
        .iter()
        .filter(|s| s.arch != "all")
        .map(|s| s.arch.clone())
        .collect();
    if arches.is_empty() {
        arches.insert("amd64".into());
    }
    let dist = root.join("dists").join(&opts.suite);
    let mut index_files: Vec<(String, Vec<u8>)> = Vec::new();
    for arch in &arches {
        let mut text = String::new();
        for s in stanzas
            .iter()
            .filter(|s| s.arch == *arch || s.arch == "all")
        {
            text.push_str(&s.fields.render());
            text.push('\n');
        }
        let base = format!("{}/binary-{arch}", opts.component);
        let gz = gzip(text.as_bytes())?;
        index_files.push((format!("{base}/Packages"), text.into_bytes()));
        index_files.push((format!("{base}/Packages.gz"), gz));
    }
    let mut release = String::new();
    release.push_str(&format!("Origin: {}\n", opts.origin));
    release.push_str(&format!("Label: {}\n", opts.origin));
    release.push_str(&format!("Suite: {}\n", opts.suite));
    release.push_str(&format!("Codename: {}\n", opts.suite));
    release.push_str(&format!("Date: {}\n", rfc2822(opts.source_date_epoch)));
    release.push_str(&format!(
        "Architectures: {}\n",
        arches.iter().cloned().collect::<Vec<_>>().join(" ")
    ));
    release.push_str(&format!("Components: {}\n", opts.component));
    release.push_str("Description: rocm-kpack split packages\n");
    release.push_str("MD5Sum:\n");
    for (name, data) in &index_files {
        release.push_str(&format!(
            " {} {:>16} {name}\n",
            hex::encode(Md5::digest(data)),
            data.len()
        ));
    }
    release.push_str("SHA256:\n");
    for (name, data) in &index_files {
        release.push_str(&format!(
            " {} {:>16} {name}\n",
            hex::encode(Sha256::digest(data)),
            data.len()
        ));
    }
    for (name, data) in &index_files {
        write_file(&dist.join(name), data)?;
    }
    let release_path = dist.join("Release");
    write_file(&release_path, release.as_bytes())?;
    if opts.sign_key.is_some() {
        sign(
            opts,
            &release_path,
            &dist.join("InRelease"),
            SignMode::Clear,
        )?;
        sign(
            opts,
            &release_path,
            &dist.join("Release.gpg"),
            SignMode::Detached,
        )?;
    }
    Ok(placed.len())
}
