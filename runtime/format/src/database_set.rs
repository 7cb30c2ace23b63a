//! The database set (docs/formats.md section 1.9): one processor's
//! kernel-database files as one stream, which a kpack store serves as one
//! zstd frame beside the per-file objects. Solid compression pays where
//! the set holds feature variants of one file (the `xnack+` and `xnack-`
//! builds of rocBLAS's `Kernels.so-000-gfx90a-*.hsaco` are two builds of
//! one source): per file each variant pays in full (docs/packaging.md,
//! "Transport form: kernel databases").
//!
//! ```text
//! 0   "KPDS"  u32 format=1  u64 toc_len
//! 16  toc: MessagePack array [{path, size, sha256}, ...], sorted by the
//!          bytes of path, no path twice
//!     every member's bytes, in TOC order
//! ```
//!
//! `path` is a manifest's database path (checked as the manifest's are);
//! `size` and `sha256` are the installed file's. The stream depends on
//! nothing but the files, so the store names its object by the sha256 of
//! the stream (`layout::store::database_set_object_path`).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::{self, Read};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::framing::{Framing, HEADER_LEN};
use crate::manifest::{validate_database_path, DatabaseFile};
use crate::msgpack::{self, Bin, Named, Str};
use rocm_kpack_fs::HashingReader;

/// Magic of the decoded stream.
pub const MAGIC: [u8; 4] = *b"KPDS";
/// The format this crate writes and reads; a stream of another is refused
/// (the fetcher then takes the per-file objects).
pub const FORMAT: u32 = 1;
/// Largest member read (16 GiB; the largest real database file, rocBLAS's
/// `TensileLibrary_gfx90a.co`, is 396 MB).
pub const MAX_MEMBER_SIZE: u64 = 16 << 30;
/// Largest sum of the members' sizes (64 GiB).
pub const MAX_SET_SIZE: u64 = 64 << 30;

const FRAMING: Framing = Framing {
    what: "kpack database set",
    magic: MAGIC,
    format: FORMAT,
    supported: "1",
};

/// One file of a set: its database path, installed size and sha256.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SetMember {
    /// Database path, as its manifest lists it.
    pub path: String,
    /// Installed size.
    pub size: u64,
    /// SHA-256 of the installed bytes.
    pub sha256: [u8; 32],
}

impl From<&DatabaseFile> for SetMember {
    fn from(f: &DatabaseFile) -> Self {
        SetMember {
            path: f.path.clone(),
            size: f.size,
            sha256: f.sha256,
        }
    }
}

/// What identifies a set stream: its size and sha256, and its members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetSummary {
    /// Bytes of the decoded stream.
    pub size: u64,
    /// SHA-256 of the decoded stream.
    pub sha256: [u8; 32],
    /// The members, in stream order.
    pub members: Vec<SetMember>,
}

#[derive(Serialize, Deserialize)]
struct WireMember<'a> {
    #[serde(borrow)]
    path: Str<'a>,
    size: u64,
    #[serde(borrow)]
    sha256: Bin<'a>,
}

/// Checks a member list as the reader does: paths valid and in strictly
/// increasing byte order, every size and the sum within the limits.
/// Returns the sum of the sizes.
fn check_members(members: &[SetMember]) -> Result<u64> {
    let mut total = 0u64;
    for (i, m) in members.iter().enumerate() {
        validate_database_path(&m.path).map_err(|e| FRAMING.bad(HEADER_LEN, e.to_string()))?;
        if let Some(prev) = i.checked_sub(1).and_then(|p| members.get(p)) {
            if prev.path.as_bytes() >= m.path.as_bytes() {
                return Err(FRAMING.bad(
                    HEADER_LEN,
                    format!(
                        "{:?} follows {:?}: members must be sorted by path, each once",
                        m.path, prev.path
                    ),
                ));
            }
        }
        if m.size > MAX_MEMBER_SIZE {
            return Err(FRAMING.bad(
                HEADER_LEN,
                format!(
                    "{:?} is {} bytes, over the {MAX_MEMBER_SIZE}-byte limit",
                    m.path, m.size
                ),
            ));
        }
        total = total
            .checked_add(m.size)
            .filter(|t| *t <= MAX_SET_SIZE)
            .ok_or_else(|| {
                FRAMING.bad(
                    HEADER_LEN,
                    format!("the members add up to more than {MAX_SET_SIZE} bytes"),
                )
            })?;
    }
    Ok(total)
}

/// The members sorted as a stream holds them, and its encoded TOC.
#[cfg(feature = "write_core")]
fn toc_of(members: &[SetMember]) -> Result<(Vec<SetMember>, Vec<u8>)> {
    let mut sorted = members.to_vec();
    sorted.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
    check_members(&sorted)?;
    let wire: Vec<Named<WireMember<'_>>> = sorted
        .iter()
        .map(|m| {
            Named(WireMember {
                path: Str(&m.path),
                size: m.size,
                sha256: Bin(&m.sha256),
            })
        })
        .collect();
    let toc = msgpack::encode(&wire)?;
    Ok((sorted, toc))
}

/// The size of the set stream of `members`, worked out from the list
/// alone (the TOC is a function of it): what a reader that knows the
/// members (the fetcher, from its manifest) requires a store's claim to be.
#[cfg(feature = "write_core")]
pub fn stream_size(members: &[SetMember]) -> Result<u64> {
    let (sorted, toc) = toc_of(members)?;
    let body: u64 = sorted.iter().map(|m| m.size).sum();
    Ok(HEADER_LEN + toc.len() as u64 + body)
}

/// Writes the set of `members` (any order; sorted here) to `out`, each
/// member's bytes read from what `open` returns for it and checked against
/// its size and sha256 (a file that changed is an error, and `out` is then
/// garbage).
#[cfg(feature = "write_core")]
pub fn write_set(
    members: &[SetMember],
    open: &mut dyn FnMut(&SetMember) -> io::Result<Box<dyn Read>>,
    out: &mut dyn io::Write,
) -> Result<SetSummary> {
    let (sorted, toc) = toc_of(members)?;
    let mut w = rocm_kpack_fs::HashingWriter::new(out);
    let write_err = |e| FRAMING.io("cannot write", e);
    io::Write::write_all(
        &mut w,
        &crate::framing::header(MAGIC, FORMAT, toc.len() as u64),
    )
    .map_err(write_err)?;
    io::Write::write_all(&mut w, &toc).map_err(write_err)?;
    for m in &sorted {
        let src = open(m).map_err(|e| FRAMING.io("cannot open a member", e))?;
        // One byte more than claimed shows a file that grew.
        let mut r = HashingReader::new(src.take(m.size.saturating_add(1)));
        io::copy(&mut r, &mut w).map_err(write_err)?;
        let (sha, size) = r.finish();
        if size != m.size || sha != m.sha256 {
            return Err(Error::InvalidArgument(format!(
                "database set member {:?}: {size} bytes with sha256 {}, expected {} bytes with sha256 {}",
                m.path,
                hex::encode(sha),
                m.size,
                hex::encode(m.sha256)
            )));
        }
    }
    let (_, sha256, size) = w.finish();
    Ok(SetSummary {
        size,
        sha256,
        members: sorted,
    })
}

/// [`write_set`] of files on disk: each member's bytes from its path
/// (a regular file, opened without following a symlink).
#[cfg(feature = "write_core")]
pub fn write_set_from_files(
    members: &[(SetMember, std::path::PathBuf)],
    out: &mut dyn io::Write,
) -> Result<SetSummary> {
    let paths: BTreeMap<&str, &std::path::Path> = members
        .iter()
        .map(|(m, p)| (m.path.as_str(), p.as_path()))
        .collect();
    let list: Vec<SetMember> = members.iter().map(|(m, _)| m.clone()).collect();
    let mut open = |m: &SetMember| -> io::Result<Box<dyn Read>> {
        let path = paths
            .get(m.path.as_str())
            .ok_or_else(|| io::Error::other(format!("no file for {:?}", m.path)))?;
        let f = rocm_kpack_fs::open_regular(path).map_err(io::Error::other)?;
        Ok(Box::new(io::BufReader::with_capacity(1 << 20, f)))
    };
    write_set(&list, &mut open, out)
}

/// Reads a decoded set stream from `r`, handing each member to `each`
/// with a reader of exactly its bytes (what `each` leaves unread is
/// skipped). Checks every length against the limits, every member's bytes
/// against the TOC's size and sha256 (after `each` returns: whatever
/// `each` keeps, it must check itself before trusting), and that nothing
/// follows the last member. An error from `each` stops the reading.
/// Returns the summary of the whole stream.
pub fn read_set(
    r: &mut dyn Read,
    each: &mut dyn FnMut(&SetMember, &mut dyn Read) -> io::Result<()>,
) -> Result<SetSummary> {
    let mut hr = HashingReader::new(r);
    let toc = FRAMING.read_toc(&mut hr)?;
    let wire: Vec<Named<WireMember<'_>>> = msgpack::decode(&toc).map_err(|e| match e {
        Error::Msgpack { offset, detail } => FRAMING.bad(HEADER_LEN + offset, detail),
        other => other,
    })?;
    let mut members = Vec::with_capacity(wire.len());
    for w in &wire {
        let sha256 = <[u8; 32]>::try_from(w.sha256.0).map_err(|_| {
            FRAMING.bad(
                HEADER_LEN,
                format!("{:?}: sha256 is not 32 bytes", w.path.0),
            )
        })?;
        members.push(SetMember {
            path: w.path.0.to_owned(),
            size: w.size,
            sha256,
        });
    }
    check_members(&members)?;
    let mut at = HEADER_LEN + toc.len() as u64;
    for m in &members {
        let mut data = HashingReader::new((&mut hr).take(m.size));
        each(m, &mut data).map_err(|e| FRAMING.io("cannot take a member", e))?;
        io::copy(&mut data, &mut io::sink()).map_err(|e| FRAMING.io("cannot read", e))?;
        let (sha, size) = data.finish();
        if size != m.size {
            return Err(FRAMING.bad(
                at + size,
                format!("truncated: {:?} has {size} of {} bytes", m.path, m.size),
            ));
        }
        if sha != m.sha256 {
            return Err(FRAMING.bad(
                at,
                format!(
                    "{:?} has sha256 {}, its TOC entry says {}",
                    m.path,
                    hex::encode(sha),
                    hex::encode(m.sha256)
                ),
            ));
        }
        at += m.size;
    }
    FRAMING.expect_end(&mut hr, at, "member")?;
    let (sha256, size) = hr.finish();
    Ok(SetSummary {
        size,
        sha256,
        members,
    })
}

/// The feature settings a database file name may carry (`-xnack+`,
/// `_sramecc-`, `:xnack+`).
const FEATURES: [&str; 2] = ["xnack", "sramecc"];

/// `path` without its feature settings: two files with the same stem are
/// builds of one source for different settings.
pub fn variant_stem(path: &str) -> Cow<'_, str> {
    let mut out = Cow::Borrowed(path);
    for sep in ['-', '_', ':'] {
        for feature in FEATURES {
            for sign in ['+', '-'] {
                let needle = format!("{sep}{feature}{sign}");
                if out.contains(&needle) {
                    out = Cow::Owned(out.replace(&needle, ""));
                }
            }
        }
    }
    out
}

/// The one processor (`gfx90a` of `gfx90a:xnack+`) every architecture of
/// a database file names; `None` when they name several or none.
pub fn processor_of(architectures: &[String]) -> Option<&str> {
    let mut it = architectures.iter().map(|a| crate::target::processor_of(a));
    let first = it.next()?;
    it.all(|p| p == first).then_some(first)
}

/// The sets worth storing for one manifest's `files`: per processor, all
/// of its files (those serving that processor only), when at least two of
/// them are feature variants of one another ([`variant_stem`]); without
/// variants solid transport gains about 2% (docs/packaging.md), not worth
/// a second copy in the store; nor when two of them have the same bytes
/// (the fetcher downloads those once anyway, and never as a set). Returns (processor, indices into `files`
/// sorted by path bytes), by processor.
pub fn sets_of(files: &[DatabaseFile]) -> Vec<(String, Vec<usize>)> {
    let mut by_processor: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, f) in files.iter().enumerate() {
        if let Some(p) = processor_of(&f.architectures) {
            by_processor.entry(p).or_default().push(i);
        }
    }
    let mut out = Vec::new();
    for (processor, mut indices) in by_processor {
        let mut stems = std::collections::BTreeSet::new();
        let variants = indices.iter().any(|&i| {
            files
                .get(i)
                .is_some_and(|f| !stems.insert(variant_stem(&f.path).into_owned()))
        });
        // Files with the same bytes are one download already.
        let mut shas: Vec<&[u8; 32]> = indices
            .iter()
            .filter_map(|&i| files.get(i).map(|f| &f.sha256))
            .collect();
        shas.sort();
        shas.dedup();
        if variants && shas.len() == indices.len() {
            indices.sort_by(|&a, &b| {
                let key = |i: usize| files.get(i).map(|f| f.path.as_bytes());
                key(a).cmp(&key(b))
            });
            out.push((processor.to_owned(), indices));
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn member(path: &str, bytes: &[u8]) -> (SetMember, Vec<u8>) {
        let sha256 = rocm_kpack_fs::sha256_reader(bytes).unwrap().1;
        (
            SetMember {
                path: path.into(),
                size: bytes.len() as u64,
                sha256,
            },
            bytes.to_vec(),
        )
    }

    fn sample() -> Vec<(SetMember, Vec<u8>)> {
        vec![
            member("lib/db/Kernels-gfx90a-xnack-.hsaco", &[2u8; 3000]),
            member("lib/db/Kernels-gfx90a-xnack+.hsaco", &[1u8; 5000]),
            member("lib/db/Empty.dat", b""),
            member(
                "lib/db/TensileLibrary_gfx90a.co",
                &(0..=255u8).cycle().take(7000).collect::<Vec<_>>(),
            ),
        ]
    }

    fn write(files: &[(SetMember, Vec<u8>)]) -> (Vec<u8>, SetSummary) {
        let bytes: BTreeMap<String, Vec<u8>> = files
            .iter()
            .map(|(m, b)| (m.path.clone(), b.clone()))
            .collect();
        let list: Vec<SetMember> = files.iter().map(|(m, _)| m.clone()).collect();
        let mut open = |m: &SetMember| -> io::Result<Box<dyn Read>> {
            Ok(Box::new(io::Cursor::new(bytes[&m.path].clone())))
        };
        let mut out = Vec::new();
        let s = write_set(&list, &mut open, &mut out).unwrap();
        (out, s)
    }

    /// Members read: path and bytes.
    type Members = Vec<(String, Vec<u8>)>;

    fn read(stream: &[u8]) -> Result<(SetSummary, Members)> {
        let mut got = Vec::new();
        let s = read_set(&mut &stream[..], &mut |m, data| {
            let mut b = Vec::new();
            data.read_to_end(&mut b)?;
            got.push((m.path.clone(), b));
            Ok(())
        })?;
        Ok((s, got))
    }

    #[test]
    fn round_trip_in_path_order() {
        let files = sample();
        let (stream, written) = write(&files);
        assert_eq!(written.size, stream.len() as u64);
        assert_eq!(&stream[..4], b"KPDS");
        let (summary, got) = read(&stream).unwrap();
        assert_eq!(summary, written);
        let list: Vec<SetMember> = files.iter().map(|(m, _)| m.clone()).collect();
        assert_eq!(stream_size(&list).unwrap(), written.size);
        let mut want: Vec<(String, Vec<u8>)> = files
            .iter()
            .map(|(m, b)| (m.path.clone(), b.clone()))
            .collect();
        want.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        assert_eq!(got, want);
        // The order of the input does not matter.
        let mut reversed = files.clone();
        reversed.reverse();
        assert_eq!(write(&reversed).0, stream);
        // From files on disk, too.
        let dir = tempfile::tempdir().unwrap();
        let on_disk: Vec<(SetMember, std::path::PathBuf)> = files
            .iter()
            .enumerate()
            .map(|(i, (m, b))| {
                let p = dir.path().join(i.to_string());
                std::fs::write(&p, b).unwrap();
                (m.clone(), p)
            })
            .collect();
        let mut out = Vec::new();
        assert_eq!(write_set_from_files(&on_disk, &mut out).unwrap(), written);
        assert_eq!(out, stream);
        // A file that changed is refused.
        std::fs::write(&on_disk[0].1, b"changed").unwrap();
        assert!(write_set_from_files(&on_disk, &mut Vec::new()).is_err());
    }

    #[test]
    fn a_reader_that_stops_early_still_gets_every_member() {
        let (stream, _) = write(&sample());
        let mut seen = 0;
        let s = read_set(&mut &stream[..], &mut |_, data| {
            let mut one = [0u8; 1];
            let _ = data.read(&mut one)?;
            seen += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!((seen, s.members.len()), (4, 4));
    }

    #[test]
    fn damaged_streams_are_refused() {
        let (stream, _) = write(&sample());
        let toc_end =
            HEADER_LEN as usize + u64::from_le_bytes(stream[8..16].try_into().unwrap()) as usize;
        // Truncated in the header, the TOC, the first member, the last.
        for cut in [0, 3, 15, 20, toc_end + 10, stream.len() - 1] {
            let e = read(&stream[..cut]).unwrap_err().to_string();
            assert!(e.contains("truncated"), "{cut}: {e}");
        }
        let mut longer = stream.clone();
        longer.push(0);
        assert!(read(&longer)
            .unwrap_err()
            .to_string()
            .contains("after the last member"));
        let mut newer = stream.clone();
        newer[4] = 2;
        assert!(matches!(
            read(&newer).unwrap_err(),
            Error::UnsupportedVersion { found: 2, .. }
        ));
        let mut magic = stream.clone();
        magic[3] = b'T';
        assert!(read(&magic).unwrap_err().to_string().contains("magic"));
        let mut huge = stream.clone();
        huge[8..16].copy_from_slice(&(crate::archive::MAX_TOC_SIZE + 1).to_le_bytes());
        assert!(read(&huge).unwrap_err().to_string().contains("limit"));
        // A flipped bit in any member's bytes.
        for at in [toc_end, stream.len() - 1] {
            let mut flipped = stream.clone();
            flipped[at] ^= 1;
            let e = read(&flipped).unwrap_err().to_string();
            assert!(e.contains("its TOC entry says"), "{at}: {e}");
        }
    }

    /// A stream with this TOC (`[{path, size, sha256}]` as given) and body.
    fn forged(entries: &[(&str, u64, &[u8])], body: &[u8]) -> Vec<u8> {
        let wire: Vec<Named<WireMember<'_>>> = entries
            .iter()
            .map(|(p, size, sha)| {
                Named(WireMember {
                    path: Str(p),
                    size: *size,
                    sha256: Bin(sha),
                })
            })
            .collect();
        let toc = msgpack::encode(&wire).unwrap();
        let mut out = crate::framing::header(MAGIC, FORMAT, toc.len() as u64).to_vec();
        out.extend_from_slice(&toc);
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn hostile_tocs_are_refused() {
        let (m, _) = member("x", b"abcd");
        let sha = m.sha256;
        let refused = |entries: &[(&str, u64, &[u8])], body: &[u8]| {
            read(&forged(entries, body)).unwrap_err().to_string()
        };
        // The forgery itself reads.
        read(&forged(&[("a/x", 4, &sha)], b"abcd")).unwrap();
        for bad in ["../x", "/etc/x", "a/../../x", "a//x", "", "a/.kpack/x.kpm"] {
            let e = refused(&[(bad, 4, &sha)], b"abcd");
            assert!(e.contains("unsafe database path"), "{bad:?}: {e}");
        }
        // Unsorted, and one path twice.
        assert!(refused(&[("b", 4, &sha), ("a", 4, &sha)], b"abcdabcd").contains("sorted"));
        assert!(refused(&[("a", 4, &sha), ("a", 4, &sha)], b"abcdabcd").contains("sorted"));
        // Size lies: more than the body holds, less (the rest trails), past
        // the limits.
        assert!(refused(&[("a", 5, &sha)], b"abcd").contains("truncated"));
        let abc = member("x", b"abc").0.sha256;
        assert!(refused(&[("a", 3, &abc)], b"abcd").contains("after the last member"));
        assert!(refused(&[("a", 1 << 40, &sha)], b"abcd").contains("limit"));
        let big = MAX_MEMBER_SIZE;
        assert!(refused(
            &[
                ("a", big, &sha),
                ("b", big, &sha),
                ("c", big, &sha),
                ("d", big, &sha),
                ("e", big, &sha)
            ],
            b""
        )
        .contains("add up to more than"));
        // A sha256 of the wrong length.
        assert!(refused(&[("a", 4, &sha[..31])], b"abcd").contains("32 bytes"));
        // An array of fields instead of a map.
        let mut t = crate::framing::header(MAGIC, FORMAT, 1).to_vec();
        t.push(0x91);
        assert!(read(&t).is_err());
    }

    fn db(path: &str, arches: &[&str]) -> DatabaseFile {
        DatabaseFile {
            path: path.into(),
            family: "gfx90a".into(),
            architectures: arches.iter().map(|a| a.to_string()).collect(),
            size: 1,
            sha256: rocm_kpack_fs::sha256_reader(path.as_bytes()).unwrap().1,
        }
    }

    #[test]
    fn sets_are_made_only_where_variants_exist() {
        assert_eq!(variant_stem("K-gfx90a-xnack+.hsaco"), "K-gfx90a.hsaco");
        assert_eq!(variant_stem("K_gfx942_sramecc-_xnack+.co"), "K_gfx942.co");
        assert_eq!(variant_stem("K-gfx1100.hsaco"), "K-gfx1100.hsaco");
        let files = vec![
            db("lib/TensileLibrary_gfx90a.co", &["gfx90a"]),
            db("lib/Kernels.so-000-gfx90a-xnack-.hsaco", &["gfx90a:xnack-"]),
            db("lib/Kernels.so-000-gfx90a-xnack+.hsaco", &["gfx90a:xnack+"]),
            db("lib/Kernels.so-000-gfx1100.hsaco", &["gfx1100"]),
            db("lib/TensileLibrary_gfx1100.co", &["gfx1100"]),
            db("lib/TensileLibrary.dat", &["gfx90a", "gfx1100"]),
        ];
        // gfx90a's three files, in path byte order ('+' < '-'); gfx1100
        // has no variants; the generic file belongs to no set.
        assert_eq!(sets_of(&files), vec![("gfx90a".to_string(), vec![2, 1, 0])]);
        assert!(sets_of(&files[3..]).is_empty());
        // Two of the files with the same bytes: no set.
        let mut twins = files.clone();
        twins[2].sha256 = twins[1].sha256;
        assert!(sets_of(&twins).is_empty());
        assert_eq!(
            processor_of(&["gfx90a:xnack+".into(), "gfx90a".into()]),
            Some("gfx90a")
        );
        assert_eq!(processor_of(&[]), None);
    }
}
