//! Memory follows the budget, not the input: a library with many CCOB
//! (zstd) bundles and many targets, built here by clang-19
//! `--offload-compress` (tests/support/src/ccob.rs), is split while the
//! process-wide peak of live heap bytes is recorded
//! (runtime/testkit/src/alloc.rs). Decompressing every bundle at once,
//! as the splitter used to, costs the whole decompressed device code;
//! streaming costs one bundle's worth at most. The same split with other
//! `--jobs` and `--memory` settings gives byte-identical outputs, equal to
//! archives written from fully decompressed bundles.
//!
//! One test per process matters for the heap figure: this binary holds
//! one measured test, the others do not allocate concurrently with it
//! (they take the same lock). That is why it is not a module of the
//! `suite` binary (tests/tests/suite/main.rs), whose other tests allocate
//! at any time, and whose one global allocator is another.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use rocm_kpack_format::archive::{Archive, CompressionScheme};
use rocm_kpack_format::bundle::{parse_fatbin, Compression};
use rocm_kpack_pkgspec::Spec;
use rocm_kpack_splitter::split::binary::{split_binary, ArchiveSet, SplitBinaryOptions};
use rocm_kpack_splitter::split::engine::SplitOptions;
use rocm_kpack_splitter::split::output::ArchiveOutput;
use rocm_kpack_splitter::split::tree::split_tree;
use rocm_kpack_test_support::ccob::{self, Shape};
use rocm_kpack_test_support::snapshot;

#[global_allocator]
static ALLOC: rocm_kpack_testkit::alloc::PeakAlloc = rocm_kpack_testkit::alloc::PeakAlloc;

/// Serialises the tests of this binary (see the module docs).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn fatbin(lib: &Path) -> Vec<u8> {
    use object::{Object, ObjectSection};
    let data = std::fs::read(lib).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    obj.section_by_name(".hip_fatbin")
        .unwrap()
        .data()
        .unwrap()
        .to_vec()
}

/// Every archive of `dir/.kpack` by file name.
fn archives(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir.join(".kpack"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "kpack" || x == "kpm"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect()
}

#[test]
fn ccob_split_peak_heap_is_bounded_by_the_budget_not_the_bundles() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let lib = ccob::library(Shape::SMALL).expect("build the CCOB library (clang-19, lld-19)");
    // The input is what it claims: many zstd CCOBs, every target in each.
    let section = fatbin(&lib);
    let bundles = parse_fatbin(&section).unwrap();
    assert_eq!(bundles.len(), Shape::SMALL.bundles);
    let mut decompressed = 0u64;
    for b in &bundles {
        assert!(
            matches!(b.compression, Compression::Ccob { .. }),
            "{:?}",
            b.compression
        );
        assert_eq!(b.code_objects().count(), ccob::TARGETS.len());
        decompressed += b.data.len() as u64;
    }
    assert!(
        decompressed >= Shape::SMALL.device_bytes(),
        "{decompressed}"
    );
    drop(bundles);

    let out = tempfile::tempdir().unwrap();
    let opts = SplitBinaryOptions {
        spec: Spec::builtin(),
        output: ArchiveOutput {
            memory: Some(64 << 20),
            jobs: Some(2),
            ..ArchiveOutput::fast()
        },
        ..SplitBinaryOptions::default()
    };
    let (report, peak) =
        rocm_kpack_testkit::alloc::live_peak_during(|| split_binary(&lib, out.path(), &opts));
    let report = report.unwrap();
    assert_eq!(
        report.code_objects,
        Shape::SMALL.bundles * ccob::TARGETS.len()
    );
    eprintln!(
        "peak live heap {:.1} MiB for {:.1} MiB of decompressed bundles",
        peak as f64 / 1048576.0,
        decompressed as f64 / 1048576.0
    );
    // Queue (64 MiB / 8) + a unit's held code objects + the one being read
    // + writer buffers: about 14 MiB; all bundles at once: 48 MiB.
    assert!(peak < 24 << 20, "peak live heap {peak} bytes");
    assert!(
        (peak as u64) * 2 < decompressed,
        "peak {peak} vs {decompressed} decompressed"
    );

    // Nothing lost: every code object is in its archive, byte for byte.
    let spec = Spec::builtin();
    let mut seen = 0;
    for (i, b) in parse_fatbin(&section).unwrap().iter().enumerate() {
        for (target, bytes) in b.code_objects() {
            let unit = spec.placement(target).unwrap().unit;
            let a = Archive::open(
                &out.path()
                    .join(".kpack")
                    .join(format!("libccob_{unit}.kpack")),
            )
            .unwrap();
            assert_eq!(
                a.kernel(&format!("libccob.so#{i}"), target).unwrap(),
                bytes,
                "{i} {target}"
            );
            seen += 1;
        }
    }
    assert_eq!(seen, report.code_objects);
}

/// A PE image's host-only output is streamed too: splitting a DLL whose
/// host data is 160 MiB takes a few MiB of heap, not a copy of the image,
/// and the output is the one `to_vec` builds in memory.
#[test]
fn pe_split_peak_heap_does_not_grow_with_the_host_code() {
    use rocm_kpack_splitter::split::binary::{marker_search_paths, split_fat_elf, ElfSplit};
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const HOST_MIB: usize = 160;
    let dll = rocm_kpack_test_support::pe::big_dll(HOST_MIB)
        .expect("build the DLL (clang-19, lld-link-19, llvm-dlltool-19)");
    let input_len = std::fs::metadata(&dll).unwrap().len();
    assert!(input_len > (HOST_MIB as u64) << 20, "{input_len}");

    let out = tempfile::tempdir().unwrap();
    let opts = SplitBinaryOptions {
        spec: Spec::builtin(),
        output: ArchiveOutput {
            jobs: Some(1),
            ..ArchiveOutput::fast()
        },
        ..SplitBinaryOptions::default()
    };
    let (report, peak) =
        rocm_kpack_testkit::alloc::live_peak_during(|| split_binary(&dll, out.path(), &opts));
    let report = report.unwrap();
    eprintln!(
        "peak live heap {:.1} MiB for a {:.1} MiB DLL",
        peak as f64 / 1048576.0,
        input_len as f64 / 1048576.0
    );
    assert!(
        peak < 16 << 20,
        "peak live heap {peak} bytes for a {input_len}-byte DLL"
    );

    // The streamed file is the image built in memory, byte for byte.
    let data = std::fs::read(&dll).unwrap();
    let ElfSplit::Split(split) = split_fat_elf(
        &data,
        &report.kernel_name,
        marker_search_paths(&report.component, 0),
    )
    .unwrap() else {
        panic!("kpbig.dll is fat");
    };
    let written = std::fs::read(&report.output).unwrap();
    assert_eq!(written.len() as u64, split.host.len());
    assert!(
        written == split.host.to_vec().unwrap(),
        "streamed and in-memory outputs differ"
    );
}

#[test]
fn outputs_are_identical_whatever_the_jobs_and_memory() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let lib = ccob::library(Shape::SMALL).expect("build the CCOB library (clang-19, lld-19)");
    let d = tempfile::tempdir().unwrap();

    // split-binary: archives equal those written from fully decompressed
    // bundles, in the rule's order (co_index, then target id).
    let spec = Spec::builtin();
    let reference = d.path().join("reference");
    {
        let section = fatbin(&lib);
        let mut set = ArchiveSet::new(
            &reference.join(".kpack"),
            "libccob",
            &spec,
            CompressionScheme::ZstdPerKernel,
            rocm_kpack_format::archive::DEFAULT_ZSTD_LEVEL,
        )
        .unwrap();
        for (i, b) in parse_fatbin(&section).unwrap().iter().enumerate() {
            let mut cos: Vec<(&str, &[u8])> = b.code_objects().collect();
            cos.sort_by(|x, y| x.0.cmp(y.0));
            for (t, bytes) in cos {
                set.add(&format!("libccob.so#{i}"), t, bytes).unwrap();
            }
        }
        set.finish().unwrap().commit().unwrap();
    }
    let expected = archives(&reference);
    assert!(expected.len() > 10, "{:?}", expected.keys());
    for (jobs, memory) in [
        (Some(1), Some(32u64 << 20)),
        (Some(2), None),
        (None, Some(256 << 20)),
    ] {
        let out = d.path().join(format!("bin-{jobs:?}-{memory:?}"));
        std::fs::create_dir_all(&out).unwrap();
        let opts = SplitBinaryOptions {
            spec: spec.clone(),
            output: ArchiveOutput {
                jobs,
                memory,
                ..ArchiveOutput::fast()
            },
            ..SplitBinaryOptions::default()
        };
        split_binary(&lib, &out, &opts).unwrap();
        assert!(
            archives(&out) == expected,
            "split-binary --jobs {jobs:?} --memory {memory:?}"
        );
    }

    // split (tree): several binaries, so several archive sets compete for
    // the budget; every setting gives the same tree.
    let input = d.path().join("tree");
    std::fs::create_dir_all(input.join("lib")).unwrap();
    std::fs::copy(&lib, input.join("lib/libccob.so")).unwrap();
    for f in [
        "clang19-compressed/libmulti.so",
        "clang19/libfixture.so",
        "clang15/app_pie",
    ] {
        let src = rocm_kpack_test_support::fixtures::fixture(f);
        let name = f.replace('/', "_");
        std::fs::copy(src, input.join("lib").join(name)).unwrap();
    }
    let mut first: Option<snapshot::Snapshot> = None;
    for (jobs, memory) in [
        (Some(1), Some(32u64 << 20)),
        (Some(2), Some(64 << 20)),
        (None, None),
    ] {
        let out = d.path().join(format!("tree-{jobs:?}-{memory:?}"));
        let opts = SplitOptions {
            output: ArchiveOutput {
                jobs,
                memory,
                zstd_level: 3,
                ..ArchiveOutput::release()
            },
            ..SplitOptions::default()
        };
        split_tree(&input, &out, &opts).unwrap();
        let files = snapshot::snapshot(&out);
        assert!(files.nodes.len() > 10, "{}", files.nodes.len());
        match &first {
            None => first = Some(files),
            Some(f) => assert!(
                *f == files,
                "split --jobs {jobs:?} --memory {memory:?} differs"
            ),
        }
    }
}
