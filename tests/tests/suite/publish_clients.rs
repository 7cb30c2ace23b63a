//! `rocm-kpack publish`: repositories served over HTTP on 127.0.0.1 and
//! used by the real clients (apt-get, dnf, pip) installing into throwaway
//! roots; the kpack store; signing with a throwaway GPG key; determinism;
//! refusal of corrupt inputs.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use rocm_kpack_format::archive::Archive;
use rocm_kpack_package::container::ZipWriter;
use rocm_kpack_package::meta::ControlFields;
use rocm_kpack_package::wheel::WheelReader;
use rocm_kpack_package::{Format, PackageOptions};
use rocm_kpack_publish::{publish, PublishError, PublishOptions, PublishReport};
use rocm_kpack_test_support::packages::*;
use rocm_kpack_test_support::{http, packages};
use serde_json::Value;

/// Fixture packages whose only dependencies are on each other, so a
/// client can install them into an empty root.
fn self_contained(formats: &[Format]) -> PackageOptions {
    let mut o = fixture_options(formats);
    o.meta.deb.fields.remove("Depends");
    o
}

fn publish_ok(pkgs: &Path, out: &Path, opts: &PublishOptions) -> PublishReport {
    publish(pkgs, out, opts).unwrap_or_else(|e| panic!("publish failed: {}", chain(&e)))
}

fn apt_root(root: &Path, source: &str) -> Vec<String> {
    apt_dirs(root);
    dpkg_root(root);
    fs::write(root.join("etc/apt/sources.list"), format!("{source}\n")).expect("sources");
    apt_opts(root)
}

#[test]
fn apt_installs_the_device_package_and_pulls_in_the_generic_one() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (split, _) = fixture_split(tmp.path());
    let pkgs = tmp.path().join("pkgs");
    build(&split, &pkgs, &self_contained(&[Format::Deb]));
    let repo = tmp.path().join("repo");
    let report = publish_ok(
        &pkgs,
        &repo,
        &PublishOptions {
            apt: true,
            ..PublishOptions::default()
        },
    );
    // generic, 5 device debs, 3 transitional debs of the 2025 families.
    assert_eq!(report.debs, 9);
    assert_eq!(report.kinds, ["apt"]);
    // The index keeps the device stanzas' X-Kpack-Gfx, and Release lists
    // the index files with their hashes.
    let packages =
        fs::read_to_string(repo.join("dists/stable/main/binary-amd64/Packages")).expect("Packages");
    let stanzas = ControlFields::parse_all(&packages).expect("parse Packages");
    assert_eq!(stanzas.len(), 9);
    let dev = stanzas
        .iter()
        .find(|s| s.get("Package") == Some("libfixture1-gfx110x-dgpu"))
        .expect("device stanza");
    assert_eq!(dev.get("X-Kpack-Gfx"), Some("gfx1100 gfx1101"));
    assert_eq!(
        dev.get("Depends"),
        Some("libfixture1 (= 1.0-1+kpack1), libfixture1-gfx11-generic (= 1.0-1+kpack1)")
    );
    let isa = stanzas
        .iter()
        .find(|s| s.get("Package") == Some("libfixture1-gfx11-generic"))
        .expect("generic-ISA stanza");
    assert_eq!(
        isa.get("X-Kpack-Gfx"),
        Some("gfx1100 gfx1101 gfx1102 gfx1103 gfx1150 gfx1151 gfx1152 gfx1153")
    );
    assert_eq!(
        dev.get("Filename"),
        Some("pool/main/libf/libfixture1/libfixture1-gfx110x-dgpu_1.0-1+kpack1_amd64.deb")
    );
    assert_eq!(
        sha256(&repo.join(dev.get("Filename").expect("filename"))),
        dev.get("SHA256").expect("sha")
    );
    let release = fs::read_to_string(repo.join("dists/stable/Release")).expect("Release");
    assert!(
        release.contains("Date: Mon, 01 Jan 2024 00:00:00 UTC\n"),
        "{release}"
    );
    let pk_sha = sha256(&repo.join("dists/stable/main/binary-amd64/Packages"));
    assert!(release.contains(&format!(" {pk_sha} ")), "{release}");

    let server = http::serve_dir(&repo).expect("serve");
    let root = tmp.path().join("root");
    let opts = apt_root(
        &root,
        &format!("deb [trusted=yes] {} stable main", server.root_url()),
    );
    ok(Command::new("apt-get").args(&opts).arg("update"));
    ok(Command::new("apt-get").args(&opts).args([
        "-y",
        "--no-install-recommends",
        "install",
        "libfixture1-gfx110x-dgpu",
    ]));
    let status = fs::read_to_string(root.join("var/lib/dpkg/status")).expect("status");
    for pkg in [
        "libfixture1",
        "libfixture1-gfx110x-dgpu",
        "libfixture1-gfx11-generic",
    ] {
        assert!(
            status.contains(&format!("Package: {pkg}\nStatus: install ok installed")),
            "{pkg} missing:\n{status}"
        );
    }
    assert!(!status.contains("libfixture1-gfx90a"));
    // Installed under the names `@GFXARCH@` expands to, as regular files.
    let kdir = root.join(LIBDIR).join(".kpack");
    assert!(kdir.join("libfixture.kpm").is_file());
    for (unit, arch) in [
        ("gfx1100", "gfx1100"),
        ("gfx1101", "gfx1101"),
        ("gfx11-generic", "gfx11-generic"),
    ] {
        let path = kdir.join(format!("libfixture_{unit}.kpack"));
        assert!(
            fs::symlink_metadata(&path)
                .expect("lstat")
                .file_type()
                .is_file(),
            "{}",
            path.display()
        );
        assert!(Archive::open(&path).expect("archive").has_arch(arch));
    }
    assert!(server.requests().iter().any(|r| r
        .path
        .ends_with("libfixture1-gfx110x-dgpu_1.0-1+kpack1_amd64.deb")
        && r.status == 200));
}

#[test]
fn dnf_installs_generic_and_device_rpms_from_a_published_repo() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (split, _) = fixture_split(tmp.path());
    let pkgs = tmp.path().join("pkgs");
    build(&split, &pkgs, &self_contained(&[Format::Rpm]));
    let repo = tmp.path().join("repo");
    let report = publish_ok(
        &pkgs,
        &repo,
        &PublishOptions {
            yum: true,
            ..PublishOptions::default()
        },
    );
    assert_eq!(report.rpms, 9);
    assert!(repo
        .join("x86_64/libfixture1-1.0-1.kpack1.x86_64.rpm")
        .is_file());
    assert!(repo
        .join("noarch/libfixture1-gfx110x-dgpu-1.0-1.kpack1.noarch.rpm")
        .is_file());
    let repomd = fs::read_to_string(repo.join("repodata/repomd.xml")).expect("repomd");
    for kind in ["primary", "filelists", "other"] {
        assert!(
            repomd.contains(&format!("<data type=\"{kind}\">")),
            "{repomd}"
        );
    }
    let server = http::serve_dir(&repo).expect("serve");
    let root = tmp.path().join("root");
    fs::create_dir_all(&root).expect("mkdir");
    ok(Command::new("dnf")
        .arg("-y")
        .arg(format!("--installroot={}", root.display()))
        .args([
            "--releasever=1",
            "--setopt=reposdir=/dev/null",
            "--setopt=local.gpgcheck=0",
        ])
        .arg(format!("--repofrompath=local,{}", server.root_url()))
        .args(["install", "libfixture1-gfx110x-dgpu"]));
    let q = ok(Command::new("rpm")
        .arg("--root")
        .arg(&root)
        .args(["-qa", "--qf", "%{NAME}\n"]));
    let installed: BTreeSet<&str> = q.lines().collect();
    assert!(
        installed.contains("libfixture1") && installed.contains("libfixture1-gfx110x-dgpu"),
        "{q}"
    );
    assert!(!installed.contains("libfixture1-gfx90a"));
    // The family rpm requires the generic-ISA rpm of the ISA it carries.
    assert!(installed.contains("libfixture1-gfx11-generic"), "{q}");
    ok(Command::new("rpm").arg("--root").arg(&root).args([
        "-V",
        "libfixture1",
        "libfixture1-gfx110x-dgpu",
        "libfixture1-gfx11-generic",
    ]));
    let a =
        Archive::open(&root.join(LIBDIR).join(".kpack/libfixture_gfx1100.kpack")).expect("archive");
    assert!(a.has_arch("gfx1100"));
    // The provides a user asks dnf for: a processor with code of its own
    // is served by its family's rpm, one without only by the generic ISA's.
    let who = |target: &str| {
        let o = ok(Command::new("rpm").arg("--root").arg(&root).args([
            "-q",
            "--whatprovides",
            &format!("rocm-kpack({target})"),
            "--qf",
            "%{NAME}\n",
        ]));
        o.lines().map(str::to_string).collect::<BTreeSet<String>>()
    };
    assert!(
        who("gfx1101").contains("libfixture1-gfx110x-dgpu"),
        "{:?}",
        who("gfx1101")
    );
    assert_eq!(
        who("gfx1102"),
        BTreeSet::from(["libfixture1-gfx11-generic".to_string()])
    );
}

#[test]
fn pip_installs_the_extra_from_a_published_index_and_uninstalls_cleanly() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (split, _) = wheel_split(tmp.path());
    let pkgs = tmp.path().join("pkgs");
    build(&split, &pkgs, &wheel_options());
    let repo = tmp.path().join("repo");
    let report = publish_ok(
        &pkgs,
        &repo,
        &PublishOptions {
            pip: true,
            ..PublishOptions::default()
        },
    );
    assert_eq!(report.wheels, 6);
    let page =
        fs::read_to_string(repo.join("simple/kpkg-device-gfx110x-dgpu/index.html")).expect("page");
    let whl = "kpkg_device_gfx110x_dgpu-1.0+kpack1-py3-none-linux_x86_64.whl";
    let sha = sha256(&repo.join("files").join(whl));
    assert!(
        page.contains(&format!("href=\"../../files/{whl}#sha256={sha}\"")),
        "{page}"
    );
    assert!(page.contains("data-requires-python=\"&gt;=3.8\""), "{page}");
    // The 2025 family's view (an index URL printed before the families
    // changed): its base wheel requires the wheels now carrying gfx110X.
    let old_view = fs::read_to_string(
        repo.join("families/gfx110x/files/kpkg-1.0+kpack1-py3-none-linux_x86_64.whl.metadata"),
    )
    .expect("the gfx110x view's base wheel");
    assert!(
        old_view
            .lines()
            .any(|l| l.trim_end() == "Requires-Dist: kpkg-device-gfx110x-dgpu==1.0+kpack1"),
        "{old_view}"
    );
    assert!(
        !old_view
            .lines()
            .any(|l| l.trim_end() == "Requires-Dist: kpkg-device-gfx90a==1.0+kpack1"),
        "{old_view}"
    );
    let old90 = fs::read_to_string(
        repo.join("families/gfx90x/files/kpkg-1.0+kpack1-py3-none-linux_x86_64.whl.metadata"),
    )
    .expect("the gfx90x view's base wheel");
    assert!(
        old90
            .lines()
            .any(|l| l.trim_end() == "Requires-Dist: kpkg-device-gfx90a==1.0+kpack1"),
        "{old90}"
    );
    let json: Value = serde_json::from_str(
        &fs::read_to_string(repo.join("simple/kpkg/index.json")).expect("json"),
    )
    .expect("parse");
    assert_eq!(json["meta"]["api-version"], "1.1");
    assert_eq!(
        json["files"][0]["filename"],
        "kpkg-1.0+kpack1-py3-none-linux_x86_64.whl"
    );
    assert_eq!(json["files"][0]["requires-python"], ">=3.8");

    let server = http::serve_dir(&repo).expect("serve");
    let venv = tmp.path().join("venv");
    let python = packages::venv(&venv);
    let pip = venv.join("bin/pip");
    let index = format!("{}simple/", server.root_url());
    pip_install(&python, &index, &["kpkg[device-gfx110x-dgpu]"]);
    ok(Command::new(&pip).args(["check", "--disable-pip-version-check"]));
    let listed =
        ok(Command::new(&pip).args(["list", "--disable-pip-version-check", "--format=freeze"]));
    assert!(
        listed.contains("kpkg==1.0+kpack1")
            && listed.contains("kpkg-device-gfx110x-dgpu==1.0+kpack1"),
        "{listed}"
    );
    assert!(
        listed.contains("kpkg-device-gfx11-generic==1.0+kpack1"),
        "{listed}"
    );
    assert!(!listed.contains("gfx90a"), "{listed}");
    let out = ok(Command::new(venv.join("bin/python")).args([
        "-c",
        "import kpkg; print(sorted(p.name for p in kpkg.KPACK_DIR.iterdir()))",
    ]));
    assert_eq!(
        out.trim(),
        "['kpkg.kpm', 'kpkg_gfx11-generic.kpack', 'kpkg_gfx1100.kpack', 'kpkg_gfx1101.kpack']"
    );
    let sp = rocm_kpack_test_support::site_packages(&venv);
    for (tree, unit) in [
        ("gfx110X-dgpu", "gfx1101"),
        ("gfx11-generic", "gfx11-generic"),
    ] {
        let name = format!("kpkg_{unit}.kpack");
        assert_eq!(
            fs::read(sp.join("kpkg/.kpack").join(&name)).expect("installed archive"),
            fs::read(split.join(tree).join("kpkg/.kpack").join(&name)).expect("archive")
        );
    }
    assert!(sp.join("kpkg/hsa/gfx1100/fixture.co").is_file());
    // The JSON form was negotiated (pip asks for it first).
    assert!(
        server.requests().iter().any(|r| r.path == "/simple/kpkg/"
            && r.status == 200
            && r.content_type == "application/vnd.pypi.simple.v1+json"),
        "{:?}",
        server.requests()
    );

    // Uninstall the extra's distribution, then the base: nothing is left.
    // (pip removes only directories that directly hold a listed file, so
    // removing the base first would leave the device wheel's empty
    // `kpkg/hsa/` parent behind; no file either way.)
    pip_uninstall(
        &pip,
        &[
            "kpkg-device-gfx110x-dgpu",
            "kpkg-device-gfx11-generic",
            "kpkg",
        ],
    );
    let left: Vec<String> = fs::read_dir(&sp)
        .expect("site-packages")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("kpkg"))
        .collect();
    assert!(left.is_empty(), "left after uninstall: {left:?}");
}

#[test]
fn kpack_store_indexes_archives_from_every_package_kind() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (split, _) = fixture_split(tmp.path());
    let pkgs = tmp.path().join("pkgs");
    build(&split, &pkgs, &self_contained(&[Format::Deb, Format::Rpm]));
    let (wsplit, _) = wheel_split(tmp.path());
    build(&wsplit, &pkgs.join("wheels"), &wheel_options());
    let loose = pkgs.join("loose");
    fs::create_dir_all(&loose).expect("mkdir");
    fs::copy(
        split
            .join("gfx90a")
            .join(LIBDIR)
            .join(".kpack/libfixture_gfx90a.kpack"),
        loose.join("libfixture_gfx90a.kpack"),
    )
    .expect("copy");
    let repo = tmp.path().join("repo");
    let report = publish_ok(
        &pkgs,
        &repo,
        &PublishOptions {
            kpack_store: true,
            ..PublishOptions::default()
        },
    );
    let index: Value =
        serde_json::from_str(&fs::read_to_string(repo.join("index.json")).expect("index"))
            .expect("json");
    assert_eq!(index["format_version"], 2);
    // These packages carry no kernel-database files.
    assert_eq!(index["database_files"], serde_json::json!([]));
    let archives = index["archives"].as_array().expect("archives");
    assert!(
        archives.iter().all(|a| a["encoding"] == "identity"),
        "archives are stored as they are"
    );
    assert_eq!(archives.len(), report.archives);
    // One entry per processor or generic ISA and version. libfixture:
    // gfx90a, gfx1030, gfx1100, gfx1101, gfx942 and gfx11-generic from the
    // debs (1.0-1+kpack1) and from the rpms (1.0-1.kpack1: each ecosystem
    // spells the split version its own way) + 1 loose; kpkg: the same 6
    // from wheels.
    assert_eq!(archives.len(), 19);
    for a in archives {
        let p = repo.join(a["path"].as_str().expect("path"));
        assert_eq!(sha256(&p), a["sha256"].as_str().expect("sha"));
        assert_eq!(
            fs::metadata(&p).expect("stat").len(),
            a["size"].as_u64().expect("size")
        );
        assert_eq!(
            a["path"].as_str().expect("path"),
            format!("by-hash/sha256/{}", a["sha256"].as_str().expect("sha"))
        );
    }
    // A processor's archive: its family is the group (the archive
    // header's `gfx_arch_family`), it serves that processor alone.
    let gfx1101 = |version: &str| {
        archives
            .iter()
            .find(|a| {
                a["component"] == "libfixture"
                    && a["filename"] == "libfixture_gfx1101.kpack"
                    && a["version"] == version
            })
            .unwrap_or_else(|| panic!("libfixture gfx1101 {version}"))
    };
    for (version, package) in [
        (
            "1.0-1+kpack1",
            "libfixture1-gfx110x-dgpu_1.0-1+kpack1_amd64.deb",
        ),
        (
            "1.0-1.kpack1",
            "libfixture1-gfx110x-dgpu-1.0-1.kpack1.noarch.rpm",
        ),
    ] {
        let e = gfx1101(version);
        assert_eq!(e["group"], "gfx110X-dgpu");
        assert_eq!(e["arches"], serde_json::json!(["gfx1101"]));
        assert_eq!(e["targets"], serde_json::json!(["gfx1101"]));
        assert_eq!(e["packages"], serde_json::json!([package]));
        assert_eq!(
            e["sha256"],
            gfx1101("1.0-1+kpack1")["sha256"],
            "same bytes in both formats"
        );
    }
    let gfx90a = archives
        .iter()
        .find(|a| a["filename"] == "libfixture_gfx90a.kpack" && !a["version"].is_null())
        .expect("libfixture gfx90a");
    assert_eq!(gfx90a["group"], "gfx90a");
    assert_eq!(
        gfx90a["arches"],
        serde_json::json!(["gfx90a:xnack+", "gfx90a:xnack-"])
    );
    assert_eq!(gfx90a["targets"], serde_json::json!(["gfx90a"]));
    let loose_entry = archives
        .iter()
        .find(|a| a["group"] == "gfx90a" && a["version"].is_null())
        .expect("loose archive");
    assert_eq!(loose_entry["filename"], "libfixture_gfx90a.kpack");
    assert_eq!(loose_entry["packages"], serde_json::json!([]));
    // A generic ISA's archive is its own group and serves every processor
    // of the ISA.
    let wheel_entry = archives
        .iter()
        .find(|a| a["component"] == "kpkg" && a["group"] == "gfx11-generic")
        .expect("kpkg gfx11-generic");
    assert_eq!(wheel_entry["filename"], "kpkg_gfx11-generic.kpack");
    assert_eq!(wheel_entry["version"], "1.0+kpack1");
    assert_eq!(
        wheel_entry["targets"],
        serde_json::json!([
            "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"
        ])
    );
    assert_eq!(
        wheel_entry["packages"],
        serde_json::json!(["kpkg_device_gfx11_generic-1.0+kpack1-py3-none-linux_x86_64.whl"])
    );
    let by_hash: Vec<_> = fs::read_dir(repo.join("by-hash/sha256"))
        .expect("by-hash")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let transports = by_hash.iter().filter(|n| n.ends_with(".zst")).count();
    assert_eq!(
        (by_hash.len() - transports, transports),
        (12, 12),
        "one file per distinct archive, and its transport object"
    );
    // Every archive's transport object decodes to the stream its entry
    // names.
    for a in archives {
        let t = &a["transport"];
        let obj = fs::read(repo.join(t["path"].as_str().expect("path"))).expect("object");
        assert_eq!(t["stored_size"], obj.len() as u64);
        let flat = zstd::decode_all(obj.as_slice()).expect("zstd");
        assert_eq!(t["size"], flat.len() as u64);
        assert_eq!(
            t["sha256"],
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&flat))
        );
    }
}

#[test]
fn publishing_is_deterministic_and_replaces_previous_output() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (split, _) = fixture_split(tmp.path());
    let pkgs = tmp.path().join("pkgs");
    build(&split, &pkgs, &self_contained(&[Format::Deb, Format::Rpm]));
    let (wsplit, _) = wheel_split(tmp.path());
    build(&wsplit, &pkgs, &wheel_options());
    // Republishing over a previous output replaces it (`--force`).
    let opts = PublishOptions {
        replace_existing: true,
        ..PublishOptions::default()
    };
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    let report = publish_ok(&pkgs, &a, &opts);
    assert_eq!(report.kinds, ["apt", "yum", "pip", "kpack-store"]);
    publish_ok(&pkgs, &b, &opts);
    let sa = snapshot(&a);
    assert!(sa.len() > 30);
    assert!(sa == snapshot(&b), "two publishes differ");
    // Rerun over the old output, after a package disappeared: replaced,
    // nothing stale left.
    fs::remove_file(pkgs.join("libfixture1-gfx90x_1.0-1+kpack1_amd64.deb"))
        .expect("the transitional deb");
    publish_ok(&pkgs, &a, &opts);
    let sa2 = snapshot(&a);
    assert!(
        !sa2.keys().any(|k| k.contains("libfixture1-gfx90x_")),
        "stale deb kept"
    );
    assert!(!sa2.keys().any(|k| k.contains(".publish-staging")));
    publish_ok(&pkgs, &b, &opts);
    assert!(sa2 == snapshot(&b));
}

fn gpg(home: &Path) -> Command {
    let mut c = Command::new("gpg");
    c.arg("--homedir").arg(home).args(["--batch", "--no-tty"]);
    c
}

#[test]
fn signed_repositories_verify_and_missing_gpg_is_a_clear_error() {
    let tmp = tempfile::tempdir().expect("tmp");
    let home = tmp.path().join("gnupg");
    fs::create_dir_all(&home).expect("mkdir");
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&home, fs::Permissions::from_mode(0o700)).expect("chmod");
    ok(gpg(&home).args([
        "--passphrase",
        "",
        "--quick-gen-key",
        "Repo Signer <repo@example.org>",
        "ed25519",
        "sign",
        "never",
    ]));
    let colons = ok(gpg(&home).args(["--list-keys", "--with-colons"]));
    let fpr = colons
        .lines()
        .find(|l| l.starts_with("fpr:"))
        .and_then(|l| l.split(':').nth(9))
        .expect("fingerprint")
        .to_string();
    let wrapper = tmp.path().join("gpg-wrapper");
    fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec gpg --homedir '{}' \"$@\"\n",
            home.display()
        ),
    )
    .expect("wrapper");
    fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).expect("chmod");

    let (split, _) = fixture_split(tmp.path());
    let pkgs = tmp.path().join("pkgs");
    build(&split, &pkgs, &self_contained(&[Format::Deb, Format::Rpm]));
    let repo = tmp.path().join("repo");
    let opts = PublishOptions {
        apt: true,
        yum: true,
        sign_key: Some(fpr.clone()),
        gpg: wrapper.clone(),
        ..PublishOptions::default()
    };
    publish_ok(&pkgs, &repo, &opts);
    let dist = repo.join("dists/stable");
    ok(gpg(&home).arg("--verify").arg(dist.join("InRelease")));
    ok(gpg(&home)
        .arg("--verify")
        .arg(dist.join("Release.gpg"))
        .arg(dist.join("Release")));
    ok(gpg(&home)
        .arg("--verify")
        .arg(repo.join("repodata/repomd.xml.asc"))
        .arg(repo.join("repodata/repomd.xml")));

    // apt accepts the signature with the key as signed-by (no trusted=yes).
    let keyring = tmp.path().join("repo-key.gpg");
    ok(gpg(&home)
        .arg("--output")
        .arg(&keyring)
        .arg("--export")
        .arg(&fpr));
    let server = http::serve_dir(&repo).expect("serve");
    let root = tmp.path().join("root");
    let aopts = apt_root(
        &root,
        &format!(
            "deb [signed-by={}] {} stable main",
            keyring.display(),
            server.root_url()
        ),
    );
    let o = ok(Command::new("apt-get").args(&aopts).arg("update"));
    assert!(!o.contains("NO_PUBKEY"), "{o}");
    let o = run(Command::new("apt-get").args(&aopts).args([
        "-y",
        "install",
        "--no-install-recommends",
        "libfixture1",
    ]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // A key without gpg: a clear error, nothing written.
    let repo2 = tmp.path().join("repo2");
    let err = publish(
        &pkgs,
        &repo2,
        &PublishOptions {
            apt: true,
            sign_key: Some(fpr),
            gpg: PathBuf::from("/nonexistent/gpg"),
            ..PublishOptions::default()
        },
    )
    .expect_err("gpg missing");
    assert!(matches!(err, PublishError::GpgMissing { .. }));
    let msg = chain(&err);
    assert!(
        msg.contains("/nonexistent/gpg") && msg.contains("was not found"),
        "{msg}"
    );
    assert!(!repo2.join("dists").exists());
}

#[test]
fn corrupt_packages_stop_publishing_without_touching_the_repository() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (split, _) = fixture_split(tmp.path());
    let pkgs = tmp.path().join("pkgs");
    build(&split, &pkgs, &self_contained(&[Format::Deb]));
    let repo = tmp.path().join("repo");
    publish_ok(&pkgs, &repo, &PublishOptions::default());
    let before = snapshot(&repo);
    fs::write(pkgs.join("broken_1_amd64.deb"), b"!<arch>\ngarbage").expect("write");
    let err = publish(&pkgs, &repo, &PublishOptions::default()).expect_err("corrupt");
    let msg = chain(&err);
    assert!(msg.contains("broken_1_amd64.deb"), "{msg}");
    assert!(
        before == snapshot(&repo),
        "repository changed by a failed publish"
    );
    // A wheel whose RECORD lies.
    fs::remove_file(pkgs.join("broken_1_amd64.deb")).expect("rm");
    let (wsplit, _) = wheel_split(tmp.path());
    let wheels = tmp.path().join("wheels");
    build(&wsplit, &wheels, &wheel_options());
    let good = WheelReader::open(&wheels.join("kpkg-1.0+kpack1-py3-none-linux_x86_64.whl"))
        .expect("wheel");
    // Same members, but RECORD claims another size for __init__.py.
    let bad = pkgs.join("kpkg-1.0+kpack1-py3-none-linux_x86_64.whl");
    let mut z = ZipWriter::new(fs::File::create(&bad).expect("create"), 0);
    good.for_each_file(|name, mode, _, data| {
        let mut v = Vec::new();
        data.read_to_end(&mut v).expect("read");
        if name.ends_with("/RECORD") {
            let text = String::from_utf8(v).expect("utf8");
            let line = text
                .lines()
                .find(|l| l.starts_with("kpkg/__init__.py,"))
                .expect("row");
            let size = line.rsplit(',').next().expect("size");
            let forged = line.replace(&format!(",{size}"), &format!(",{}", size.len() + 1000));
            v = text.replace(line, &forged).into_bytes();
        }
        z.add_bytes(name, mode, &v).expect("zip");
        Ok(())
    })
    .expect("copy");
    z.finish().expect("zip");
    let err = publish(&pkgs, &repo, &PublishOptions::default()).expect_err("bad wheel");
    let msg = chain(&err);
    assert!(
        msg.contains("kpkg-1.0+kpack1-py3-none-linux_x86_64.whl"),
        "{msg}"
    );
    assert!(before == snapshot(&repo));
    // A package directory inside the output is refused.
    let inside = repo.join("incoming");
    fs::create_dir_all(&inside).expect("mkdir");
    let err = publish(&inside, &repo, &PublishOptions::default()).expect_err("nested");
    assert!(chain(&err).contains("inside the output"), "{}", chain(&err));
}

/// `rocm-kpack-fetch install --via dnf` against a real dnf: the generic rpm
/// installed from a `publish --yum` repository served on 127.0.0.1, then the
/// fetcher maps the local target to the device rpm, prints the plan and
/// installs it with dnf into the same throwaway root.
#[test]
fn fetcher_via_dnf_installs_the_device_rpm_with_dnf() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (split, _) = fixture_split(tmp.path());
    let pkgs = tmp.path().join("pkgs");
    build(&split, &pkgs, &self_contained(&[Format::Rpm]));
    let repo = tmp.path().join("repo");
    publish_ok(
        &pkgs,
        &repo,
        &PublishOptions {
            yum: true,
            ..PublishOptions::default()
        },
    );
    let server = http::serve_dir(&repo).expect("serve");
    let root = tmp.path().join("root");
    fs::create_dir_all(&root).expect("mkdir");
    let dnf_opts = [
        "--setopt=reposdir=/dev/null".to_owned(),
        "--setopt=local.gpgcheck=0".to_owned(),
        format!("--repofrompath=local,{}", server.root_url()),
    ];
    ok(Command::new("dnf")
        .arg("-y")
        .arg(format!("--installroot={}", root.display()))
        .arg("--releasever=1")
        .args(&dnf_opts)
        .args(["install", "libfixture1"]));
    let fetch = || {
        let mut c = rocm_kpack_test_support::bins::command("rocm-kpack-fetch");
        c.env("ROCM_KPACK_PYTHON", "")
            .args(["install", "--via", "dnf", "--target", "gfx1100", "--root"])
            .arg(&root);
        for o in &dnf_opts {
            c.arg(format!("--pm-opt={o}"));
        }
        c
    };
    // gfx1100's native archive and the generic ISA's, which the loader
    // falls through to for a kernel the native one lacks.
    assert_eq!(
        ok(fetch().arg("--dry-run")),
        "dnf install libfixture1-gfx11-generic libfixture1-gfx110x-dgpu\n"
    );
    ok(&mut fetch());
    let q = ok(Command::new("rpm")
        .arg("--root")
        .arg(&root)
        .args(["-qa", "--qf", "%{NAME}\n"]));
    let installed: BTreeSet<&str> = q.lines().collect();
    assert!(installed.contains("libfixture1-gfx110x-dgpu"), "{q}");
    assert!(installed.contains("libfixture1-gfx11-generic"), "{q}");
    assert!(!installed.contains("libfixture1-gfx90a"), "{q}");
    let owner = ok(Command::new("rpm")
        .arg("--root")
        .arg(&root)
        .arg("-qf")
        .arg(format!("/{LIBDIR}/.kpack/libfixture_gfx1100.kpack"))
        .args(["--qf", "%{NAME}\n"]));
    assert_eq!(owner.trim(), "libfixture1-gfx110x-dgpu");
}
