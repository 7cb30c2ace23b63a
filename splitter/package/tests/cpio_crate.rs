//! The measurement behind keeping our own cpio newc writer instead of the
//! `cpio` crate (docs/packaging.md "Why the cpio writer is our own"): the
//! same entries written both ways, byte for byte; what the crate does with
//! a source shorter than the size it was told; both archives listed by GNU
//! cpio; and the time each takes for the same payload (printed, not
//! asserted: the machine decides it).

use std::io::{self, Read, Write};
use std::process::{Command, Stdio};
use std::time::Instant;

use rocm_kpack_package::container::CpioWriter;

const MTIME: u32 = 1_704_067_200;

/// (name, mode, data): a directory, files whose name and data lengths
/// cover every padding remainder, an empty file and a symlink.
fn entries() -> Vec<(String, u32, Vec<u8>)> {
    let mut out = vec![("./usr/lib/.kpack".to_string(), 0o040755, Vec::new())];
    for i in 0..8usize {
        let name = format!("./usr/lib/.kpack/f{}", "x".repeat(i));
        out.push((name, 0o100644, vec![b'a' + i as u8; i * 3 + 1]));
    }
    out.push(("./usr/lib/empty".into(), 0o100644, Vec::new()));
    out.push(("./usr/lib/link.so".into(), 0o120777, b"libx.so.1".to_vec()));
    out
}

fn ours(entries: &[(String, u32, Vec<u8>)]) -> Vec<u8> {
    let mut w = CpioWriter::new(Vec::new(), u64::from(MTIME));
    for (i, (name, mode, data)) in entries.iter().enumerate() {
        let ino = u32::try_from(i + 1).expect("ino");
        let mut r = data.as_slice();
        let src: Option<&mut dyn Read> = if data.is_empty() { None } else { Some(&mut r) };
        w.append(name, ino, *mode, data.len() as u64, src)
            .expect("append");
    }
    let (bytes, len) = w.finish().expect("finish");
    assert_eq!(len, bytes.len() as u64);
    bytes
}

/// The crate with every field set as the rpm writer sets it. `trailer`
/// says whether the crate's own `trailer()` ends it (mtime 0) or one built
/// with our mtime.
fn with_crate(entries: &[(String, u32, Vec<u8>)], own_trailer: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, (name, mode, data)) in entries.iter().enumerate() {
        let ino = u32::try_from(i + 1).expect("ino");
        let size = u32::try_from(data.len()).expect("size");
        let mut w = cpio::newc::Builder::new(name)
            .ino(ino)
            .mode(*mode)
            .mtime(MTIME)
            .write(&mut out, size);
        w.write_all(data).expect("data");
        w.finish().expect("finish");
    }
    if own_trailer {
        cpio::newc::trailer(&mut out).expect("trailer");
    } else {
        cpio::newc::Builder::new("TRAILER!!!")
            .mtime(MTIME)
            .write(&mut out, 0)
            .finish()
            .expect("trailer");
    }
    out
}

#[test]
fn the_crate_writes_our_bytes_but_its_trailer_has_mtime_zero() {
    let e = entries();
    let ours = ours(&e);
    assert_eq!(
        ours,
        with_crate(&e, false),
        "entries and a matching trailer"
    );
    let theirs = with_crate(&e, true);
    assert_eq!(ours.len(), theirs.len());
    let differing: Vec<usize> = (0..ours.len()).filter(|&i| ours[i] != theirs[i]).collect();
    // Only the trailer's c_mtime (bytes 46..54 of its 110-byte header).
    let trailer = ours.len() - 124;
    assert!(!differing.is_empty());
    assert!(
        differing
            .iter()
            .all(|&i| (trailer + 46..trailer + 54).contains(&i)),
        "{differing:?}"
    );
}

#[test]
fn the_crate_accepts_a_short_source_silently_ours_refuses_it() {
    // A file that shrank between the digest pass and the payload pass.
    let mut out = Vec::new();
    let mut w = cpio::newc::Builder::new("./f").write(&mut out, 10);
    w.write_all(b"12345").expect("write");
    w.finish().expect("the crate reports nothing");
    // 110-byte header, "./f\0" padded to 116, then 5 of the 10 bytes.
    assert_eq!(out.len(), 116 + 5, "data cut short, no padding, no error");

    let mut ours = CpioWriter::new(Vec::new(), 0);
    let err = ours
        .append("./f", 1, 0o100644, 10, Some(&mut &b"12345"[..]))
        .expect_err("short source");
    assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
}

fn gnu_cpio_list(archive: &[u8]) -> Vec<String> {
    let mut child = Command::new("cpio")
        .args(["-it", "--quiet"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("cpio (install the cpio package)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(archive)
        .expect("feed cpio");
    let out = child.wait_with_output().expect("cpio");
    assert!(out.status.success(), "cpio -it failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn gnu_cpio_lists_both() {
    let e = entries();
    let names: Vec<String> = e.iter().map(|(n, _, _)| n.clone()).collect();
    assert_eq!(gnu_cpio_list(&ours(&e)), names);
    assert_eq!(gnu_cpio_list(&with_crate(&e, true)), names);
}

#[test]
fn time_both_writers() {
    // 64 files of 1 MiB, streamed from plain readers (a package file is
    // not a buffered slice) into the same counting sink.
    let data = vec![0x5au8; 1 << 20];
    let names: Vec<String> = (0..64).map(|i| format!("./usr/lib/.kpack/f{i}")).collect();
    let t = Instant::now();
    let mut w = CpioWriter::new(Counted(0), u64::from(MTIME));
    for (i, n) in names.iter().enumerate() {
        let mut r = PlainReader(data.as_slice());
        w.append(n, i as u32 + 1, 0o100644, data.len() as u64, Some(&mut r))
            .expect("append");
    }
    let (Counted(ours_len), len) = w.finish().expect("finish");
    assert_eq!(ours_len, len);
    let ours_time = t.elapsed();
    let t = Instant::now();
    let mut counted = Counted(0);
    for (i, n) in names.iter().enumerate() {
        let mut w = cpio::newc::Builder::new(n)
            .ino(i as u32 + 1)
            .mode(0o100644)
            .mtime(MTIME)
            .write(&mut counted, data.len() as u32);
        io::copy(&mut PlainReader(data.as_slice()), &mut w).expect("copy");
        w.finish().expect("finish");
    }
    cpio::newc::trailer(&mut counted).expect("trailer");
    let crate_time = t.elapsed();
    assert_eq!(ours_len, counted.0);
    println!("64 MiB in 64 files: ours {ours_time:?}, cpio crate {crate_time:?}");
}

/// A reader without `BufRead`, as a file is: `io::copy` goes through a
/// buffer for both writers.
struct PlainReader<'a>(&'a [u8]);

impl Read for PlainReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

/// Counts bytes: what the rpm writer would need again with the crate, to
/// know the archive size the signature header records.
struct Counted(u64);

impl Write for Counted {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
