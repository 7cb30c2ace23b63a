//! Property tests: whatever kernels, keys and arches go in, both schemes
//! read back identical bytes, and deduplication changes only the layout.

use proptest::prelude::*;
use rocm_kpack_format::archive::{Archive, ArchiveWriter, CompressionScheme, HEADER_SIZE};
use std::collections::{BTreeSet, HashMap};
use std::io::Cursor;

const ARCHES: &[&str] = &[
    "gfx1100",
    "gfx1101",
    "gfx90a:xnack+",
    "gfx90a:xnack-",
    "gfx942:sramecc+:xnack-",
    "gfx11-generic",
];

/// Kernel bytes: often drawn from a small pool so duplicates are common.
fn kernel_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..3000),
        (0u8..4).prop_map(|i| vec![i; 700 + usize::from(i)]),
        (0usize..500, any::<u8>()).prop_map(|(n, b)| vec![b; n]),
    ]
}

type Kernels = Vec<(String, String, Vec<u8>)>;

fn kernels() -> impl Strategy<Value = Kernels> {
    prop::collection::vec(
        (
            "[a-z][a-z0-9/._+-]{0,30}#[0-9]{1,2}",
            prop::sample::select(ARCHES),
            kernel_bytes(),
        ),
        0..24,
    )
    .prop_map(|v| {
        let mut seen = BTreeSet::new();
        v.into_iter()
            .filter(|(b, a, _)| seen.insert((b.clone(), *a)))
            .map(|(b, a, d)| (b, a.to_owned(), d))
            .collect()
    })
}

fn write(scheme: CompressionScheme, kernels: &Kernels, in_flight: usize, level: i32) -> Vec<u8> {
    let mut w =
        ArchiveWriter::new(Cursor::new(Vec::new()), "grp", "gfx110X", scheme, level).unwrap();
    w.set_in_flight_bytes(in_flight);
    for (b, a, d) in kernels {
        w.add_kernel(b, a, d.clone()).unwrap();
    }
    w.finish().unwrap().into_inner()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn round_trip(
        kernels in kernels(),
        zstd in any::<bool>(),
        in_flight in prop_oneof![Just(0usize), 100usize..20_000, Just(usize::MAX)],
        level in 1i32..6,
    ) {
        let scheme = if zstd { CompressionScheme::ZstdPerKernel } else { CompressionScheme::None };
        let bytes = write(scheme, &kernels, in_flight, level);
        // Determinism: the in-flight bound never changes the output.
        prop_assert_eq!(&write(scheme, &kernels, usize::MAX, level), &bytes);

        let archive = Archive::from_bytes(bytes.clone()).unwrap();
        prop_assert_eq!(archive.scheme(), scheme);
        archive.verify().unwrap();

        // TOC order: binaries by first appearance, arches in insertion order.
        let mut expected_order: Vec<(String, Vec<&str>)> = Vec::new();
        for (b, a, _) in &kernels {
            match expected_order.iter_mut().find(|(name, _)| name == b) {
                Some((_, arches)) => arches.push(a),
                None => expected_order.push((b.clone(), vec![a])),
            }
        }
        let expected_flat: Vec<(&str, &str)> = expected_order
            .iter()
            .flat_map(|(b, arches)| arches.iter().map(move |a| (b.as_str(), *a)))
            .collect();
        let listed: Vec<(&str, &str)> = archive.entries().map(|(b, a, _)| (b, a)).collect();
        prop_assert_eq!(listed, expected_flat);

        // Bytes back, and ordinals: equal content <=> equal ordinal,
        // numbered by first appearance.
        let mut by_content: HashMap<&[u8], u32> = HashMap::new();
        for (b, a, d) in &kernels {
            let next = by_content.len() as u32;
            let want = *by_content.entry(d.as_slice()).or_insert(next);
            let e = archive.entry(b, a).unwrap();
            prop_assert_eq!(e.ordinal, want);
            prop_assert_eq!(e.original_size, d.len() as u64);
            prop_assert_eq!(&archive.kernel(b, a).unwrap(), d);
        }
        prop_assert_eq!(archive.blob_count() as usize, by_content.len());

        // Dedup shrinks the blob region to the distinct contents only.
        let distinct: u64 = by_content.keys().map(|d| d.len() as u64).sum();
        match scheme {
            CompressionScheme::None => {
                prop_assert_eq!(archive.toc_offset() - HEADER_SIZE, distinct);
            }
            CompressionScheme::ZstdPerKernel => {
                let frames: u64 = (0..archive.blob_count())
                    .map(|o| archive.stored_size(o).unwrap() + 4)
                    .sum();
                prop_assert_eq!(archive.blob_region_len(), 4 + frames);
            }
        }
        let arches: BTreeSet<&str> = kernels.iter().map(|(_, a, _)| a.as_str()).collect();
        prop_assert_eq!(archive.gfx_arches().len(), arches.len());
    }
}
