//! What removing pip distributions frees when their files have more than
//! one hard link, and the removal of the links that go with them
//! (`prune --via pip`).
//!
//! TheRock's `rocm-sdk init` expands the `rocm-sdk-devel` tree into
//! site-packages beside the runtime distributions and turns each file the
//! two share, device files included, into a hard link under
//! `_rocm_sdk_devel*`. It appends each link to a RECORD as a row without a
//! hash or size, as an installer does for a file it adds after
//! installation: current releases to the RECORD of the
//! `rocm-sdk-device-<target>` wheel that owns the file, so pip's uninstall
//! takes the link too; the first expansion of the tree to the RECORD of
//! `rocm-sdk-devel`. uv installs from its cache with hard links as well,
//! and no RECORD lists the cache's link.
//!
//! So, for the distributions that go ([`freeing`]), each file with more
//! than one link is judged by who lists its links:
//! - a link another distribution records without a hash was added after
//!   installation (rocm-sdk init's): it belongs to the file, and goes with
//!   it ([`remove`]), its row dropped from that RECORD so the RECORD stays
//!   true;
//! - a link a kept distribution's installer wrote (its row has a hash)
//!   means that distribution uses the file: it stays, and so do its links;
//! - the bytes count as freed only when every link is one that goes; a
//!   link no RECORD lists (uv's cache) keeps them on disk, and the plan
//!   says how much.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde::{Deserialize, Serialize};

use super::pip::Listing;
use super::PmError;
use crate::python::Interpreter;

/// A regular file with more than one hard link, as one distribution's
/// RECORD lists it (the listing script's `links`).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq, Default)]
pub struct Link {
    /// The RECORD row's path, as `importlib.metadata` reads it (relative
    /// to the distribution's location).
    pub row: String,
    /// The absolute path.
    pub path: PathBuf,
    /// Device and inode: the file, whatever its names.
    pub dev: u64,
    /// See `dev`.
    pub ino: u64,
    /// Its number of links when listed.
    pub nlink: u64,
    /// Its bytes.
    pub size: u64,
    /// The row has a hash: the installer wrote it with the distribution.
    /// Without one, something added the file after installation.
    pub hashed: bool,
}

/// A hard link another distribution records, to a file that goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignLink {
    /// The distribution whose RECORD lists it (PEP 503 name).
    pub owner: String,
    /// The distribution that goes, whose file it links (PEP 503 name).
    pub of: String,
    /// The link as its owner's RECORD lists it.
    pub link: Link,
    /// The owner's location (its RECORD's paths are relative to it).
    pub location: PathBuf,
    /// The owner's RECORD.
    pub record: PathBuf,
}

/// What removing a set of distributions frees ([`freeing`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Freeing {
    /// Per distribution that goes: the bytes its removal frees, its files
    /// without other links plus each linked file whose every link goes
    /// (counted once, at the first distribution that lists it).
    pub bytes: BTreeMap<String, u64>,
    /// Per distribution that goes: bytes of its files that stay on disk
    /// (a link no RECORD lists, or one a kept distribution installed).
    pub stays: BTreeMap<String, u64>,
    /// The links other distributions record that go with those files.
    pub links: Vec<ForeignLink>,
}

impl Freeing {
    /// Bytes removing `name` frees.
    pub fn bytes_of(&self, name: &str) -> u64 {
        self.bytes.get(name).copied().unwrap_or(0)
    }

    /// The foreign links that go with `name`'s files.
    pub fn links_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a ForeignLink> + 'a {
        self.links.iter().filter(move |l| l.of == name)
    }
}

/// What removing the distributions `going` (PEP 503 names) frees, hard
/// links judged as the module docs say.
pub fn freeing(listing: &Listing, going: &[&str]) -> Freeing {
    let mut holders: BTreeMap<(u64, u64), Vec<(&str, &Link)>> = BTreeMap::new();
    for i in &listing.installed {
        for l in &i.links {
            holders
                .entry((l.dev, l.ino))
                .or_default()
                .push((i.name.as_str(), l));
        }
    }
    let mut out = Freeing::default();
    let mut judged: BTreeSet<(u64, u64)> = BTreeSet::new();
    for name in going {
        let Some(dist) = listing.get(name) else {
            continue;
        };
        let (mut bytes, mut stays) = (dist.size, 0);
        for l in &dist.links {
            let key = (l.dev, l.ino);
            if !judged.insert(key) {
                continue;
            }
            let all = holders.get(&key).map(Vec::as_slice).unwrap_or_default();
            // A kept distribution's installer wrote a link, or one is
            // recorded where no RECORD can be rewritten (a distribution
            // that is not a directory): the file stays, with its links.
            let stays_put = |(owner, link): &(&str, &Link)| {
                !going.contains(owner)
                    && (link.hashed
                        || listing
                            .get(owner)
                            .is_none_or(|o| o.dist_info.as_os_str().is_empty()))
            };
            if all.iter().any(stays_put) {
                stays += l.size;
                continue;
            }
            let mut paths: BTreeSet<&Path> = BTreeSet::new();
            for (owner, link) in all {
                if !paths.insert(link.path.as_path()) || going.contains(owner) {
                    continue;
                }
                let Some(o) = listing.get(owner) else {
                    continue;
                };
                out.links.push(ForeignLink {
                    owner: owner.to_string(),
                    of: dist.name.clone(),
                    link: (*link).clone(),
                    location: o.location.clone(),
                    record: o.dist_info.join("RECORD"),
                });
            }
            if paths.len() as u64 >= l.nlink {
                bytes += l.size;
            } else {
                stays += l.size;
            }
        }
        out.bytes.insert(dist.name.clone(), bytes);
        if stays > 0 {
            out.stays.insert(dist.name.clone(), stays);
        }
    }
    out
}

/// Removes each link, reached from its owner's location without following
/// a symlink, only while it is still the file planned (a regular file of
/// the same device and inode), with the directories it leaves empty, and
/// drops the rows of those gone from the RECORDs that list them (rewritten
/// beside, then renamed over). Prints
/// `{"removed": [paths], "kept": [notes]}`.
const UNLINK_SCRIPT: &str = r#"
import csv, io, json, os, stat, sys
from pathlib import PurePosixPath
LIMIT = 64 << 20
DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
plan = json.load(sys.stdin)
removed, kept = [], []
def parts_of(row):
    p = PurePosixPath(row)
    if p.is_absolute() or not p.parts or any(x in ('.', '..') for x in p.parts):
        return None
    return p.parts
def opendir(root, parts):
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for x in parts:
            nfd = os.open(x, DIR, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd
def tidy(root, dirs):
    # The directories the link leaves empty go too, as pip's uninstall
    # removes those of its files; the first that is not empty stops it.
    for n in range(len(dirs), 0, -1):
        try:
            fd = opendir(root, dirs[:n - 1])
        except OSError:
            return
        try:
            os.rmdir(dirs[n - 1], dir_fd=fd)
        except OSError:
            return
        finally:
            os.close(fd)
def rewrite(path, dropped):
    d, base = os.path.split(path)
    dfd = os.open(d, DIR)
    try:
        fd = os.open(base, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        with os.fdopen(fd, 'r', encoding='utf-8', newline='') as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise OSError('it is not a regular file')
            text = fh.read(LIMIT + 1)
        if len(text) > LIMIT:
            raise OSError('it is over %d bytes' % LIMIT)
        rows = [r for r in csv.reader(io.StringIO(text)) if r]
        rows = [r for r in rows if str(PurePosixPath(r[0])) not in dropped]
        tmp = '.%s.kpack-%d' % (base, os.getpid())
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, st.st_mode & 0o7777, dir_fd=dfd)
        try:
            with os.fdopen(fd, 'w', encoding='utf-8', newline='') as out:
                if os.geteuid() == 0:
                    os.fchown(out.fileno(), st.st_uid, st.st_gid)
                os.fchmod(out.fileno(), st.st_mode & 0o7777)
                csv.writer(out, lineterminator='\n').writerows(rows)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, base, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
            raise
        os.fsync(dfd)
    finally:
        os.close(dfd)
for owner in plan:
    dropped = set()
    for link in owner['links']:
        parts = parts_of(link['row'])
        if parts is None:
            kept.append('%s: its RECORD row leaves %s' % (link['path'], owner['location']))
            continue
        try:
            fd = opendir(owner['location'], parts[:-1])
        except FileNotFoundError:
            dropped.add(link['row'])
            continue
        except OSError as e:
            kept.append('%s: %s' % (link['path'], e.strerror or e))
            continue
        try:
            st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (link['dev'], link['ino']):
                kept.append('%s: no longer the file planned; left in place' % link['path'])
                continue
            os.unlink(parts[-1], dir_fd=fd)
            removed.append(link['path'])
            dropped.add(link['row'])
            tidy(owner['location'], parts[:-1])
        except FileNotFoundError:
            dropped.add(link['row'])
        except OSError as e:
            kept.append('%s: %s' % (link['path'], e.strerror or e))
        finally:
            os.close(fd)
    if dropped:
        try:
            rewrite(owner['record'], dropped)
        except OSError as e:
            kept.append('%s: not updated (%s); it still lists %d removed link(s)' % (owner['record'], e.strerror or e, len(dropped)))
print(json.dumps({'removed': removed, 'kept': kept}))
"#;

/// One RECORD's part of [`UNLINK_SCRIPT`]'s input.
#[derive(Debug, Serialize)]
struct OwnerPlan<'a> {
    location: &'a Path,
    record: &'a Path,
    links: Vec<&'a Link>,
}

/// What [`UNLINK_SCRIPT`] did.
#[derive(Debug, Default, Deserialize)]
pub struct Unlinked {
    /// The links removed.
    pub removed: Vec<String>,
    /// Those left in place, and RECORDs not updated, with why.
    pub kept: Vec<String>,
}

/// Removes `links` and their RECORD rows, with `python` (the interpreter
/// whose site-packages they are in, already checked).
pub fn remove(python: &Interpreter, links: &[ForeignLink]) -> Result<Unlinked, PmError> {
    if links.is_empty() {
        return Ok(Unlinked::default());
    }
    let mut owners: BTreeMap<&Path, OwnerPlan> = BTreeMap::new();
    for l in links {
        owners
            .entry(l.record.as_path())
            .or_insert_with(|| OwnerPlan {
                location: &l.location,
                record: &l.record,
                links: Vec::new(),
            })
            .links
            .push(&l.link);
    }
    let input = serde_json::to_vec(&owners.into_values().collect::<Vec<_>>()).map_err(|e| {
        PmError::Output {
            tool: python.name.clone(),
            detail: e.to_string(),
        }
    })?;
    let mut c = python.command();
    c.args(["-c", UNLINK_SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let spawn = |source| PmError::Spawn {
        tool: python.name.clone(),
        source,
    };
    tracing::debug!(?c, "running");
    let mut child = c.spawn().map_err(spawn)?;
    // The script reads all of its input before it writes anything, so
    // writing first cannot fill both pipes.
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(&input).map_err(spawn)?;
    }
    let out = child.wait_with_output().map_err(spawn)?;
    if !out.status.success() {
        return Err(PmError::Failed {
            command: format!("{} -I -c <link removal>", python.name),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    serde_json::from_slice(&out.stdout).map_err(|e| PmError::Output {
        tool: python.name.clone(),
        detail: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pm::pip::Installed;

    fn link(path: &str, ino: u64, nlink: u64, hashed: bool) -> Link {
        Link {
            row: path.to_string(),
            path: PathBuf::from("/site").join(path),
            dev: 1,
            ino,
            nlink,
            size: 1000,
            hashed,
        }
    }

    fn dist(name: &str, size: u64, links: Vec<Link>) -> Installed {
        Installed {
            name: name.into(),
            version: "7.14".into(),
            size,
            links,
            location: "/site".into(),
            dist_info: format!("/site/{}-7.14.dist-info", name.replace('-', "_")).into(),
            ..Installed::default()
        }
    }

    /// rocm-sdk init's links: one the device wheel records (pip takes it),
    /// one rocm-sdk-devel records (goes with the file), one nobody records
    /// (uv's cache: the bytes stay), a file a kept distribution installed
    /// too (it stays, links and all), and one a distribution that is not a
    /// directory records (it stays).
    #[test]
    fn a_file_is_freed_only_when_every_link_goes() {
        let listing = Listing {
            installed: vec![
                dist(
                    "rocm-sdk-device-gfx90a",
                    10,
                    vec![
                        link("a/k90a.bin", 1, 2, true),
                        link("_rocm_sdk_devel/k90a.bin", 1, 2, false),
                        link("a/d90a.bin", 2, 2, true),
                        link("a/u90a.bin", 3, 2, true),
                        link("a/shared.bin", 4, 2, true),
                        link("a/z90a.bin", 6, 2, true),
                    ],
                ),
                dist(
                    "rocm-sdk-devel",
                    5,
                    vec![
                        link("_rocm_sdk_devel/d90a.bin", 2, 2, false),
                        link("_rocm_sdk_devel/k942.bin", 5, 2, false),
                    ],
                ),
                dist(
                    "rocm-sdk-device-gfx942",
                    10,
                    vec![link("a/k942.bin", 5, 2, true)],
                ),
                dist("rocm-sdk-core", 10, vec![link("c/shared.bin", 4, 2, true)]),
                Installed {
                    dist_info: PathBuf::new(),
                    ..dist("zipped", 0, vec![link("z/z90a.bin", 6, 2, false)])
                },
            ],
            ..Listing::default()
        };
        let f = freeing(&listing, &["rocm-sdk-device-gfx90a"]);
        // Own 10, k90a (both links its own), d90a (its other link goes).
        assert_eq!(f.bytes_of("rocm-sdk-device-gfx90a"), 10 + 1000 + 1000);
        // u90a (a link nobody records), shared.bin (rocm-sdk-core's), z90a
        // (recorded where no RECORD can be rewritten).
        assert_eq!(f.stays.get("rocm-sdk-device-gfx90a"), Some(&3000));
        let gone: Vec<(&str, &Path)> = f
            .links
            .iter()
            .map(|l| (l.owner.as_str(), l.link.path.as_path()))
            .collect();
        assert_eq!(
            gone,
            [(
                "rocm-sdk-devel",
                Path::new("/site/_rocm_sdk_devel/d90a.bin")
            )]
        );
        assert_eq!(
            f.links[0].record,
            Path::new("/site/rocm_sdk_devel-7.14.dist-info/RECORD")
        );
        // Both device wheels: each file counted once, gfx942's link too.
        let f = freeing(
            &listing,
            &["rocm-sdk-device-gfx90a", "rocm-sdk-device-gfx942"],
        );
        assert_eq!(f.bytes_of("rocm-sdk-device-gfx942"), 10 + 1000);
        assert_eq!(f.links_of("rocm-sdk-device-gfx942").count(), 1);
    }

    /// The removal follows no symlink, leaves a file that changed since the
    /// plan and a row that leaves the location, and drops only the rows of
    /// links it removed.
    #[test]
    fn links_go_only_while_they_are_the_file_planned() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let site = tmp.path().join("site");
        let outside = tmp.path().join("outside");
        for d in [site.join("d"), site.join("p-1.dist-info"), outside.clone()] {
            std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{e}"));
        }
        for f in [site.join("d/f1"), site.join("d/f3"), outside.join("f2")] {
            std::fs::write(&f, b"x").unwrap_or_else(|e| panic!("{e}"));
        }
        std::os::unix::fs::symlink(&outside, site.join("sub")).unwrap_or_else(|e| panic!("{e}"));
        let record = site.join("p-1.dist-info/RECORD");
        std::fs::write(
            &record,
            "d/f1,,\nd/f3,,\nsub/f2,,\n\"d/with,comma\",sha256=x,1\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let planned = |row: &str, file: &Path| {
            let m = std::fs::metadata(file).unwrap_or_else(|e| panic!("{e}"));
            ForeignLink {
                owner: "p".into(),
                of: "q".into(),
                link: Link {
                    row: row.into(),
                    path: site.join(row),
                    dev: m.dev(),
                    ino: m.ino(),
                    nlink: 2,
                    size: 1,
                    hashed: false,
                },
                location: site.clone(),
                record: record.clone(),
            }
        };
        let mut changed = planned("d/f3", &site.join("d/f3"));
        changed.link.ino += 1;
        let links = [
            planned("d/f1", &site.join("d/f1")),
            changed,
            planned("sub/f2", &outside.join("f2")),
            planned("../outside/f2", &outside.join("f2")),
        ];
        let python = Interpreter::trusted("python3", rocm_kpack_fs::lock::PermissionPolicy::Unsafe)
            .unwrap_or_else(|e| panic!("{e}"));
        let done = remove(&python, &links).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(done.removed, [site.join("d/f1").display().to_string()]);
        assert_eq!(done.kept.len(), 3, "{:?}", done.kept);
        assert!(outside.join("f2").is_file() && site.join("d/f3").is_file());
        let text = std::fs::read_to_string(&record).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(text, "d/f3,,\nsub/f2,,\n\"d/with,comma\",sha256=x,1\n");
    }
}
