//! Repositories of packages in AMD's native multi-arch scheme, without any
//! `.kpm`: the host, device and meta packages of
//! `rocm_kpack_test_support::amd_native::write_native_set`, indexed as a
//! flat apt repository (dpkg-scanpackages) or a yum repository
//! (createrepo_c).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use rocm_kpack_test_support::amd_native::{write_native_set, NativeSet};

use super::ok;

/// `{base}` of the scheme.
pub const BASE: &str = "amdrocm-fft";
/// The packages' version (`{version}` is its major.minor).
pub const VERSION: &str = "8.2.0-1";
/// The host package.
pub const HOST: &str = "amdrocm-fft-host8.2";
/// The meta package.
pub const META: &str = "amdrocm-fft8.2";
/// The targets with a device package.
pub const TARGETS: &[&str] = &["gfx90a", "gfx942", "gfx1100"];

/// A device package's name.
pub fn device(target: &str) -> String {
    format!("{META}-{target}")
}

fn native_set(dir: &Path) -> NativeSet {
    let set = write_native_set(&dir.join("pkgs"), BASE, VERSION, TARGETS);
    assert_eq!(set.host.name, HOST);
    assert_eq!(set.meta.name, META);
    set
}

/// The one file of `target`'s device package, relative to the root.
pub fn device_file(set: &NativeSet, target: &str) -> String {
    set.devices
        .iter()
        .find(|(t, _)| t == target)
        .and_then(|(_, p)| p.file.clone())
        .unwrap_or_else(|| panic!("no device package for {target}"))
}

/// The debs in `dir/repo` with a flat repository's `Packages` index
/// (`deb [trusted=yes] <url> ./`). Returns the set and the repository.
pub fn apt_repo(dir: &Path) -> (NativeSet, PathBuf) {
    let set = native_set(dir);
    let repo = dir.join("repo");
    fs::create_dir_all(&repo).expect("mkdir");
    for deb in set.debs() {
        fs::copy(&deb, repo.join(deb.file_name().expect("name"))).expect("copy");
    }
    let index = ok(Command::new("dpkg-scanpackages")
        .args(["-m", "."])
        .current_dir(&repo));
    fs::write(repo.join("Packages"), index).expect("Packages");
    (set, repo)
}

/// The rpms in `dir/repo` with createrepo_c's metadata. Returns the set
/// and the repository.
pub fn yum_repo(dir: &Path) -> (NativeSet, PathBuf) {
    let set = native_set(dir);
    let repo = dir.join("repo");
    fs::create_dir_all(&repo).expect("mkdir");
    for rpm in set.rpms() {
        fs::copy(&rpm, repo.join(rpm.file_name().expect("name"))).expect("copy");
    }
    ok(Command::new("createrepo_c").arg("-q").arg(&repo));
    (set, repo)
}
