//! Offload bundle parsing on the committed fixtures (tests/fixtures, built by
//! its build.sh with Debian's clang-15/19) and on malformed inputs derived
//! from them: every failure must be an `Err`, never a panic or an allocation
//! beyond what the input justifies.

use std::path::PathBuf;

use object::{Object, ObjectSection};
use rocm_kpack_format::bundle::{
    compress_ccob, parse_bundle_at, parse_fatbin, scan_fatbin, write_bundle, Bundle, CcobMethod,
    Compression, BUNDLE_MAGIC, HIP_BUNDLE_ALIGN,
};

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

/// The `.hip_fatbin` section of a fixture.
fn fatbin(rel: &str) -> Vec<u8> {
    let path = fixture(rel);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file = object::File::parse(&*bytes).expect("ELF");
    let section = file.section_by_name(".hip_fatbin").expect(".hip_fatbin");
    section.data().expect("section data").to_vec()
}

const ARCHES15: [&str; 5] = [
    "gfx1030",
    "gfx1100",
    "gfx1101",
    "gfx90a:xnack+",
    "gfx90a:xnack-",
];
const ARCHES19: [&str; 7] = [
    "gfx1030",
    "gfx11-generic",
    "gfx1100",
    "gfx1101",
    "gfx90a:xnack+",
    "gfx90a:xnack-",
    "gfx942:sramecc+",
];

fn targets(b: &Bundle) -> Vec<String> {
    let mut t: Vec<String> = b.code_objects().map(|(t, _)| t.to_string()).collect();
    t.sort();
    t
}

#[test]
fn parses_every_fixture() {
    for (set, arches, compressed) in [
        ("clang15", &ARCHES15[..], false),
        ("clang19", &ARCHES19[..], false),
        ("clang19-compressed", &ARCHES19[..], true),
    ] {
        for (name, count) in [
            ("app_pie", 1),
            ("app_nopie", 1),
            ("libfixture.so", 1),
            ("libmulti.so", 3),
            ("app_rdc", 1),
        ] {
            let rel = format!("{set}/{name}");
            let section = fatbin(&rel);
            let bundles = parse_fatbin(&section).unwrap_or_else(|e| panic!("{rel}: {e}"));
            assert_eq!(bundles.len(), count, "{rel}");
            for b in &bundles {
                assert_eq!(b.is_compressed(), compressed, "{rel}");
                // The linker aligns each translation unit's section to 4096.
                assert_eq!(b.offset % 4096, 0, "{rel}");
                assert_eq!(targets(b), arches, "{rel}");
                assert_eq!(b.entries.iter().filter(|e| e.is_host()).count(), 1, "{rel}");
                for (target, co) in b.code_objects() {
                    assert_eq!(co.get(..4), Some(&b"\x7fELF"[..]), "{rel} {target}");
                }
                for e in &b.entries {
                    assert_eq!(e.offset % HIP_BUNDLE_ALIGN, 0, "{rel} {}", e.triple);
                }
                if let Compression::Ccob {
                    version,
                    method,
                    total_size,
                    uncompressed_size,
                    ..
                } = b.compression
                {
                    // clang-19 --offload-compress: CCOB v2, zstd.
                    assert_eq!((version, method), (2, CcobMethod::Zstd), "{rel}");
                    assert_eq!(total_size, Some(b.len), "{rel}");
                    assert_eq!(uncompressed_size, b.data.len() as u64, "{rel}");
                }
            }
            // Everything after the last bundle is padding.
            let last = bundles
                .last()
                .map(|b| (b.offset + b.len) as usize)
                .unwrap_or(0);
            assert!(section[last..].iter().all(|&b| b == 0), "{rel}");
        }
    }
}

#[test]
fn write_bundle_reproduces_clang_offload_bundler_output() {
    for rel in ["clang15/libmulti.so", "clang19/app_pie", "clang19/app_rdc"] {
        let section = fatbin(rel);
        for b in parse_fatbin(&section).expect("parse") {
            let entries: Vec<(&str, &[u8])> = b
                .entries
                .iter()
                .map(|e| (e.triple.as_str(), b.entry_data(e).expect("entry data")))
                .collect();
            let rewritten = write_bundle(&entries);
            assert!(
                rewritten == b.data.as_ref(),
                "{rel}: bundle at {} differs",
                b.offset
            );
        }
    }
}

#[test]
fn ccob_fixtures_match_uncompressed_twins_and_compress_ccob() {
    for name in [
        "app_pie",
        "app_nopie",
        "libfixture.so",
        "libmulti.so",
        "app_rdc",
    ] {
        let plain_section = fatbin(&format!("clang19/{name}"));
        let ccob_section = fatbin(&format!("clang19-compressed/{name}"));
        let plain = parse_fatbin(&plain_section).expect("plain");
        let ccob = parse_fatbin(&ccob_section).expect("ccob");
        assert_eq!(plain.len(), ccob.len(), "{name}");
        for (p, c) in plain.iter().zip(&ccob) {
            // Same uncompressed bytes (fixed -cuid makes the twins identical).
            assert!(
                p.data == c.data,
                "{name}: decompressed bundle differs from twin"
            );
            assert_eq!(p.entries, c.entries, "{name}");
            // compress_ccob writes clang's header: same version, method,
            // uncompressed size and hash (truncated MD5). The zstd bytes
            // themselves differ slightly: clang links Debian's libzstd 1.5.4,
            // the zstd crate bundles 1.5.7.
            let ours = compress_ccob(&p.data, 2, CcobMethod::Zstd).expect("compress");
            let theirs = &ccob_section[c.offset as usize..(c.offset + c.len) as usize];
            assert_eq!(ours[..8], theirs[..8], "{name}: magic, version, method");
            assert_eq!(
                ours[12..24],
                theirs[12..24],
                "{name}: uncompressed size, hash"
            );
            let ours = parse_bundle_at(&ours, 0).expect("parse ours");
            assert!(ours.data == c.data, "{name}");
        }
    }
}

/// A section of `plain`'s bundles as CCOBs of `version` and `method`, with
/// odd padding between them.
fn ccob_section(plain: &[Bundle<'_>], version: u16, method: CcobMethod) -> Vec<u8> {
    let mut s = Vec::new();
    for (i, b) in plain.iter().enumerate() {
        s.extend(std::iter::repeat_n(0u8, i * 7));
        s.extend(compress_ccob(&b.data, version, method).expect("compress"));
    }
    s
}

#[test]
fn v1_v3_zlib_made_from_fixtures_parse_back() {
    let section = fatbin("clang15/libmulti.so");
    let plain = parse_fatbin(&section).expect("parse");
    for version in 1..=3u16 {
        for method in [CcobMethod::Zlib, CcobMethod::Zstd] {
            let s = ccob_section(&plain, version, method);
            let back = parse_fatbin(&s).unwrap_or_else(|e| panic!("v{version} {method}: {e}"));
            assert_eq!(back.len(), plain.len());
            for (a, b) in back.iter().zip(&plain) {
                assert!(a.data == b.data, "v{version} {method}");
                assert_eq!(a.entries, b.entries);
            }
        }
    }
}

/// Small real inputs for the malformed-input tests: an uncompressed bundle
/// section, clang's CCOB v2, and v1/v3 zlib/zstd made from it.
fn corpus() -> Vec<(String, Vec<u8>)> {
    let plain = fatbin("clang15/libfixture.so");
    let bundles = parse_fatbin(&plain).expect("parse");
    let data = bundles[0].data.to_vec();
    let mut out = vec![
        ("clang15 bundle".to_string(), data.clone()),
        ("clang19 ccob v2".to_string(), {
            let s = fatbin("clang19-compressed/libfixture.so");
            let b = parse_fatbin(&s).expect("parse");
            s[..b[0].len as usize].to_vec()
        }),
    ];
    for (v, m) in [
        (1, CcobMethod::Zlib),
        (1, CcobMethod::Zstd),
        (3, CcobMethod::Zlib),
        (3, CcobMethod::Zstd),
    ] {
        out.push((
            format!("ccob v{v} {m}"),
            compress_ccob(&data, v, m).expect("compress"),
        ));
    }
    out
}

#[test]
fn every_truncation_is_an_error() {
    for (name, bytes) in corpus() {
        assert!(parse_fatbin(&bytes).is_ok(), "{name}");
        for n in 1..bytes.len() {
            assert!(
                parse_fatbin(&bytes[..n]).is_err(),
                "{name}: truncated to {n} of {} bytes parsed",
                bytes.len()
            );
        }
    }
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn malformed_uncompressed_headers() {
    let good = corpus().remove(0).1;
    let err = |b: &[u8]| parse_fatbin(b).err().map(|e| e.to_string());
    // Bad magic.
    let mut b = good.clone();
    b[3] = b'X';
    assert!(err(&b).is_some_and(|e| e.contains("no bundle magic")));
    // Huge entry counts: refused before allocating.
    for count in [u64::MAX, 1 << 40, 1_000_000] {
        let mut b = good.clone();
        put_u64(&mut b, 24, count);
        assert!(err(&b).is_some_and(|e| e.contains("cannot fit")), "{count}");
    }
    // Entry offset / size past the end, and overflowing offset + size.
    for (field, v) in [
        (32, good.len() as u64),
        (40, good.len() as u64),
        (32, u64::MAX),
        (40, u64::MAX - 10),
    ] {
        let mut b = good.clone();
        // Second entry (the first device code object) of the clang layout.
        let second = 32 + 24 + 25;
        put_u64(&mut b, second + field - 32, v);
        assert!(err(&b).is_some(), "field {field} = {v}");
    }
    // Triple length past the end, and absurd.
    for v in [good.len() as u64, u64::MAX] {
        let mut b = good.clone();
        put_u64(&mut b, 48, v);
        assert!(err(&b).is_some(), "triple length {v}");
    }
    // A code object overlapping the header.
    let mut b = good.clone();
    put_u64(&mut b, 32 + 24 + 25, 8);
    assert!(err(&b).is_some_and(|e| e.contains("overlaps")));
    // Non-UTF-8 triple.
    let mut b = good.clone();
    b[56] = 0xff;
    assert!(err(&b).is_some_and(|e| e.contains("UTF-8")));
    // Garbage after a valid bundle (not zero padding).
    let mut b = good.clone();
    b.extend_from_slice(&[0, 0, 0, 0x41]);
    assert!(err(&b).is_some());
    // parse_bundle_at past the end.
    assert!(parse_bundle_at(&good, good.len() + 1).is_err());
    assert!(parse_bundle_at(&good, usize::MAX).is_err());
}

#[test]
fn ccob_size_lies_and_bombs() {
    let corpus = corpus();
    let v2 = corpus[1].1.clone();
    let v3 = compress_ccob(&corpus[0].1, 3, CcobMethod::Zstd).expect("v3");
    let err = |b: &[u8]| parse_bundle_at(b, 0).err().map(|e| e.to_string());
    // Total size larger than the data, smaller than the header, zero.
    for total in [v2.len() as u32 + 1, u32::MAX, 23, 0] {
        let mut b = v2.clone();
        b[8..12].copy_from_slice(&total.to_le_bytes());
        assert!(err(&b).is_some(), "v2 total {total}");
    }
    for total in [v3.len() as u64 + 1, u64::MAX, 31] {
        let mut b = v3.clone();
        put_u64(&mut b, 8, total);
        assert!(err(&b).is_some(), "v3 total {total}");
    }
    // Total size shorter than the real frame: truncated payload.
    let mut b = v2.clone();
    let short = v2.len() as u32 - 10;
    b[8..12].copy_from_slice(&short.to_le_bytes());
    assert!(err(&b).is_some());
    // Uncompressed size lies in both directions, and zip-bomb claims.
    let real = corpus[0].1.len() as u64;
    for claim in [real - 1, real + 1, 0] {
        let mut b = v3.clone();
        put_u64(&mut b, 16, claim);
        assert!(err(&b).is_some(), "claim {claim}");
    }
    for claim in [100_000_000_000u64, u64::MAX, 4 << 30] {
        let mut b = v3.clone();
        put_u64(&mut b, 16, claim);
        assert!(
            err(&b).is_some_and(|e| e.contains("claims")),
            "claim {claim}"
        );
    }
    // Unknown version and method.
    let mut b = v2.clone();
    b[4] = 9;
    assert!(err(&b).is_some_and(|e| e.contains("version")));
    let mut b = v2.clone();
    b[6] = 7;
    assert!(err(&b).is_some_and(|e| e.contains("method")));
    // Wrong method for the payload.
    let mut b = v2.clone();
    b[6] = 0;
    assert!(err(&b).is_some());
    // A real zip bomb: 256 MiB of zeros inside a valid bundle.
    let zeros = vec![0u8; 256 << 20];
    let bomb_plain = write_bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx1100", &zeros)]);
    drop(zeros);
    let bomb = compress_ccob(&bomb_plain, 3, CcobMethod::Zstd).expect("bomb");
    drop(bomb_plain);
    assert!(bomb.len() < 256 << 10, "bomb is {} bytes", bomb.len());
    assert!(err(&bomb).is_some_and(|e| e.contains("claims")));
}

/// splitmix64: a seeded generator so failures reproduce.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Random mutations of real inputs: whatever comes out must be an error or a
/// consistent parse. Iterations per input from KPACK_FUZZ_ITERS (default 300).
#[test]
fn random_mutations_never_panic() {
    let iters: usize = std::env::var("KPACK_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let seed: u64 = std::env::var("KPACK_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x6b_7061_636b);
    let mut rng = Rng(seed);
    let corpus = corpus();
    // Interesting values for length/offset fields.
    let specials = [
        0u64,
        1,
        23,
        24,
        31,
        32,
        4095,
        4096,
        u32::MAX as u64,
        u64::MAX,
        1 << 63,
    ];
    let mut ok = 0usize;
    for (name, base) in &corpus {
        for i in 0..iters {
            let mut b = base.clone();
            for _ in 0..1 + rng.below(4) {
                let len = b.len();
                match rng.below(6) {
                    0 => {
                        let at = rng.below(len);
                        b[at] ^= 1 << rng.below(8);
                    }
                    1 => {
                        let at = rng.below(len);
                        b[at] = rng.next() as u8;
                    }
                    2 if len >= 8 => {
                        // Header fields live in the first few hundred bytes.
                        let at = rng.below(len.min(200) - 7);
                        let v = specials[rng.below(specials.len())];
                        b[at..at + 8].copy_from_slice(&v.to_le_bytes());
                    }
                    3 => b.truncate(rng.below(len)),
                    4 => {
                        let at = rng.below(len);
                        let extra: Vec<u8> = (0..rng.below(64)).map(|_| rng.next() as u8).collect();
                        b.splice(at..at, extra);
                    }
                    _ => {
                        // Append another copy: exercises sequences.
                        let pad = rng.below(16);
                        b.extend(std::iter::repeat_n(0u8, pad));
                        b.extend_from_slice(base);
                    }
                }
                if b.is_empty() {
                    break;
                }
            }
            match parse_fatbin(&b) {
                Ok(bundles) => {
                    ok += 1;
                    for bundle in &bundles {
                        let end = bundle.offset + bundle.len;
                        assert!(end <= b.len() as u64, "{name} #{i}: bundle past input");
                        for (_, co) in bundle.code_objects() {
                            assert!(co.len() <= bundle.data.len());
                        }
                        // Decompressed size stays bounded by the input.
                        assert!(bundle.data.len() as u64 <= (b.len() as u64) * 1024 + 65536);
                    }
                }
                Err(e) => {
                    assert!(!e.to_string().is_empty());
                }
            }
        }
    }
    // Some mutations (e.g. in code object bytes) leave the input valid.
    assert!(ok > 0, "no mutation parsed; generator broken?");
}

#[test]
fn magic_inside_code_objects_does_not_split_bundles() {
    // A code object containing both magics must not be mistaken for the
    // start of another bundle: the end comes from the header.
    let mut co = b"\x7fELF".to_vec();
    co.extend_from_slice(BUNDLE_MAGIC);
    co.extend_from_slice(&[2, 0, 0, 0, 0, 0, 0, 0]);
    co.extend_from_slice(b"CCOB\x02\x00\x01\x00");
    let one = write_bundle(&[
        ("host-x86_64-unknown-linux--", &[]),
        ("hipv4-amdgcn-amd-amdhsa--gfx1100", &co),
    ]);
    let mut section = one.clone();
    section.resize(section.len().next_multiple_of(4096), 0);
    section.extend_from_slice(&one);
    let bundles = parse_fatbin(&section).expect("parse");
    assert_eq!(bundles.len(), 2);
    assert_eq!(bundles[0].code_object("gfx1100"), Some(&co[..]));
    assert_eq!(bundles[1].offset as usize, one.len().next_multiple_of(4096));
}

/// (bundle index, target id) -> bytes.
type Streamed = Vec<((usize, String), Vec<u8>)>;

/// Every code object of a section, read by streaming.
fn streamed(section: &[u8]) -> Result<Streamed, rocm_kpack_format::Error> {
    let mut out = Vec::new();
    for (i, b) in scan_fatbin(section)?.iter().enumerate() {
        b.stream_code_objects(|e, d| -> Result<(), rocm_kpack_format::Error> {
            out.push((
                (i, e.target_id().unwrap_or_default().to_string()),
                d.into_owned(),
            ));
            Ok(())
        })?;
    }
    out.sort();
    Ok(out)
}

fn parsed(section: &[u8]) -> Vec<((usize, String), Vec<u8>)> {
    let mut out: Vec<_> = parse_fatbin(section)
        .expect("parse")
        .iter()
        .enumerate()
        .flat_map(|(i, b)| {
            b.code_objects()
                .map(|(t, d)| ((i, t.to_string()), d.to_vec()))
                .collect::<Vec<_>>()
        })
        .collect();
    out.sort();
    out
}

#[test]
fn scanning_and_streaming_agree_with_parsing() {
    let mut sections: Vec<(String, Vec<u8>)> = corpus();
    for rel in [
        "clang15/libmulti.so",
        "clang19/libmulti.so",
        "clang19-compressed/libmulti.so",
    ] {
        sections.push((rel.to_string(), fatbin(rel)));
    }
    let multi = fatbin("clang19/libmulti.so");
    let plain = parse_fatbin(&multi).expect("parse");
    for version in 1..=3u16 {
        for method in [CcobMethod::Zlib, CcobMethod::Zstd] {
            sections.push((
                format!("multi v{version} {method}"),
                ccob_section(&plain, version, method),
            ));
        }
    }
    for (name, s) in &sections {
        let scanned = scan_fatbin(s).unwrap_or_else(|e| panic!("{name}: {e}"));
        let full = parse_fatbin(s).expect("parse");
        assert_eq!(scanned.len(), full.len(), "{name}");
        for (a, b) in scanned.iter().zip(&full) {
            assert_eq!(
                (a.offset, a.len, a.compression),
                (b.offset, b.len, b.compression),
                "{name}"
            );
            assert_eq!(a.entries, b.entries, "{name}");
        }
        let got = streamed(s).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!got.is_empty(), "{name}");
        assert!(got == parsed(s), "{name}: streamed code objects differ");
    }
}

#[test]
fn streaming_finds_every_corruption_that_parsing_finds() {
    for (name, bytes) in corpus() {
        for n in 1..bytes.len() {
            assert!(
                streamed(&bytes[..n]).is_err(),
                "{name}: truncated to {n} streamed"
            );
        }
        // One flipped bit anywhere in a CCOB payload: parse and stream
        // agree on whether it is an error.
        if bytes.starts_with(b"CCOB") {
            for at in (20..bytes.len()).step_by(7) {
                let mut bad = bytes.clone();
                bad[at] ^= 0x10;
                assert_eq!(
                    parse_fatbin(&bad).is_err(),
                    streamed(&bad).is_err(),
                    "{name}: bit flipped at {at}"
                );
            }
        }
    }
}

#[test]
fn entries_sharing_bytes_stream_correctly() {
    // Two targets whose entries overlap (clang never writes this, but the
    // format allows it): both come out whole.
    let co: Vec<u8> = (0..10_000u32).map(|i| (i * 31 % 253) as u8).collect();
    let mut b = write_bundle(&[
        ("hipv4-amdgcn-amd-amdhsa--gfx1100", &co),
        ("hipv4-amdgcn-amd-amdhsa--gfx1030", &co),
    ]);
    // Point the second entry into the middle of the first.
    let second = 32 + 24 + "hipv4-amdgcn-amd-amdhsa--gfx1100".len();
    put_u64(&mut b, second, 4096 + 100);
    put_u64(&mut b, second + 8, 5000);
    let c = compress_ccob(&b, 3, CcobMethod::Zstd).expect("compress");
    assert!(streamed(&c).expect("stream") == parsed(&c));
}

#[test]
fn streaming_holds_one_code_object_not_the_bundle() {
    // Eight 1 MiB code objects in one CCOB.
    let cos: Vec<Vec<u8>> = (0..8u32)
        .map(|k| {
            (0..1u32 << 20)
                .map(|i| ((i ^ k).wrapping_mul(2_654_435_761) >> 24) as u8)
                .collect()
        })
        .collect();
    let targets: Vec<String> = (0..8)
        .map(|k| format!("hipv4-amdgcn-amd-amdhsa--gfx{}", 1100 + k))
        .collect();
    let entries: Vec<(&str, &[u8])> = targets
        .iter()
        .map(String::as_str)
        .zip(cos.iter().map(Vec::as_slice))
        .collect();
    let c = compress_ccob(&write_bundle(&entries), 3, CcobMethod::Zstd).expect("compress");
    let largest = |f: &dyn Fn()| {
        rocm_kpack_testkit::alloc::PEAK.with(|p| p.set(0));
        f();
        rocm_kpack_testkit::alloc::PEAK.with(|p| p.get())
    };
    let whole = largest(&|| drop(parse_fatbin(&c).expect("parse")));
    let mut total = 0usize;
    let scan = scan_fatbin(&c).expect("scan");
    let streaming = largest(&|| {
        scan[0]
            .stream_code_objects(|_, d| -> Result<(), rocm_kpack_format::Error> {
                assert_eq!(d.len(), 1 << 20);
                Ok(())
            })
            .expect("stream");
    });
    total += scan[0].targets().count();
    assert_eq!(total, 8);
    assert!(whole >= 8 << 20, "parse: largest allocation {whole}");
    assert!(
        streaming <= (1 << 20) + (128 << 10),
        "stream: largest allocation {streaming}"
    );
}
