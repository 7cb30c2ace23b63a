//! The fetcher installs exactly the archives the loader loads from: for
//! every processor of the family table (`Spec::builtin()`), with its
//! `sramecc`/`xnack` variants, and for realistic sets of archives, the
//! archives `resolve::needs` picks from a manifest are the archives a real
//! loader [`Cache`] resolves to for every setting a process may run that GPU
//! with, under the same keys; and with only those archives installed the
//! loader still decides the same way. Both sides call
//! `rocm_kpack_loader::select` (docs/runtime.md, "Code-object selection rule").

use std::collections::BTreeSet;
use std::fs;
use std::io::Cursor;
use std::path::{Path, PathBuf};

use rocm_kpack_fetcher::resolve::needs;
use rocm_kpack_format::archive::{ArchiveWriter, CompressionScheme};
use rocm_kpack_format::manifest::{Manifest, ManifestFile};
use rocm_kpack_format::marker::Marker;
use rocm_kpack_format::target::TargetId;
use rocm_kpack_loader::detect::{process_isas, SRAMECC_PROCESSORS, XNACK_PROCESSORS};
use rocm_kpack_loader::loader::{Cache, LoaderConfig};
use rocm_kpack_loader::ErrorCode;
use rocm_kpack_pkgspec::{Group, Spec};

/// Code-object key of the test binary (`<kernel_name>#0`).
const KERNEL: &str = "lib/libdemo.so";

fn t(s: &str) -> TargetId {
    TargetId::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// One archive: file name and the arch keys it holds.
type Archive = (String, Vec<String>);

/// What the loader decides for one device: archive index and key.
type Decision = Result<(usize, String), ErrorCode>;

/// A component installed as a tree: `lib/libdemo.so` whose marker names
/// `../.kpack/demo.kpm` only, every archive kept in `store/` and linked
/// into `.kpack/` when installed.
struct Install {
    dir: tempfile::TempDir,
    manifest: Manifest,
}

impl Install {
    fn new(archives: &[Archive]) -> Install {
        let dir = tempfile::tempdir().expect("tempdir");
        for sub in ["lib", ".kpack", "store"] {
            fs::create_dir_all(dir.path().join(sub)).expect("mkdir");
        }
        fs::write(dir.path().join("lib/libdemo.so"), b"host code").expect("binary");
        let mut files = Vec::new();
        for (name, keys) in archives {
            let mut w = ArchiveWriter::new(
                Cursor::new(Vec::new()),
                name,
                name,
                CompressionScheme::None,
                3,
            )
            .expect("writer");
            for key in keys {
                w.add_kernel(
                    &format!("{KERNEL}#0"),
                    key,
                    format!("{name}/{key}").into_bytes(),
                )
                .expect("add kernel");
            }
            let bytes = w.finish().expect("finish").into_inner();
            fs::write(dir.path().join("store").join(name), &bytes).expect("write archive");
            files.push(ManifestFile {
                filename: name.clone(),
                family: name.clone(),
                architectures: keys.clone(),
                size: bytes.len() as u64,
                sha256: Some([0; 32]),
                transport: None,
            });
        }
        let manifest = Manifest {
            component: "demo".into(),
            kpack_files: files,
            database_files: Vec::new(),
            prefix_path: None,
        };
        let encoded = manifest.to_msgpack().expect("encode manifest");
        fs::write(dir.path().join(".kpack/demo.kpm"), encoded).expect("write manifest");
        Install { dir, manifest }
    }

    fn kpack(&self) -> PathBuf {
        self.dir.path().join(".kpack")
    }

    /// Installs exactly the archives at `indices` (manifest order).
    fn install_only(&self, indices: &BTreeSet<usize>) {
        for (i, f) in self.manifest.kpack_files.iter().enumerate() {
            let at = self.kpack().join(&f.filename);
            let _ = fs::remove_file(&at);
            if indices.contains(&i) {
                fs::hard_link(self.dir.path().join("store").join(&f.filename), &at).expect("link");
            }
        }
    }

    fn index_of(&self, path: &Path) -> usize {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        self.manifest
            .kpack_files
            .iter()
            .position(|f| Some(&f.filename) == name.as_ref())
            .unwrap_or_else(|| panic!("{} is not in the manifest", path.display()))
    }

    /// What the loader loads for `device`, asked as the preload shim asks
    /// (docs/runtime.md: `[target, generic fallback]`): archive index and
    /// key, or the error code.
    /// Every archive the loader may load `device`'s code from, in the
    /// order it falls through: load, then take the archive that served
    /// away (as if it lacked the kernel) and load again, until nothing
    /// serves. Leaves `present` installed.
    fn fall_through(&self, present: &BTreeSet<usize>, device: &TargetId) -> Vec<(usize, String)> {
        let mut left = present.clone();
        let mut out = Vec::new();
        loop {
            self.install_only(&left);
            let cache = Cache::with_config(LoaderConfig::default());
            let Ok((index, key)) = self.load(&cache, device) else {
                break;
            };
            left.remove(&index);
            out.push((index, key));
        }
        self.install_only(present);
        out
    }

    fn load(&self, cache: &Cache, device: &TargetId) -> Decision {
        let mut arch_list = vec![device.to_string()];
        arch_list.extend(device.generic_fallback().map(|g| g.to_string()));
        let marker = Marker {
            kpack_search_paths: vec!["../.kpack/demo.kpm".into()],
            kernel_name: KERNEL.into(),
        };
        let binary = self.dir.path().join("lib/libdemo.so");
        let co = cache
            .load_code_object(&marker, &binary, 0, &arch_list)
            .map_err(|e| e.code())?;
        let index = self.index_of(&co.archive_path);
        let name = &self.manifest.kpack_files[index].filename;
        assert_eq!(
            co.data,
            format!("{name}/{}", co.arch).into_bytes(),
            "bytes of {device}"
        );
        Ok((index, co.arch))
    }
}

/// The target ids a GPU known as `local` runs with in processes: its
/// `sramecc` setting (both when `local` leaves it open on a processor that
/// has it), and the HIP runtime's naming of it under `HSA_XNACK=0` and `=1`
/// (`detect::process_isas`), whatever xnack `local` names.
fn process_devices(local: &TargetId) -> Vec<TargetId> {
    let p = local.processor();
    let sramecc: Vec<Option<bool>> = match local.feature("sramecc") {
        Some(on) => vec![Some(on)],
        None if SRAMECC_PROCESSORS.contains(&p) => vec![Some(true), Some(false)],
        None => vec![None],
    };
    let mut out: Vec<TargetId> = Vec::new();
    for s in sramecc {
        let base = match s {
            Some(on) => format!("{p}:sramecc{}", if on { '+' } else { '-' }),
            None => p.to_owned(),
        };
        for hsa_xnack in ["0", "1"] {
            for isa in process_isas(&[&base], Some(hsa_xnack)) {
                let id = t(&isa);
                if !out.contains(&id) {
                    out.push(id);
                }
            }
        }
    }
    out
}

/// Every processor of the family table as the fetcher may see it: bare,
/// and with each `sramecc`/`xnack` setting it can have.
fn local_targets(spec: &Spec) -> Vec<TargetId> {
    let mut out = Vec::new();
    for p in spec.targets() {
        out.push(t(p));
        let sramecc = SRAMECC_PROCESSORS.contains(&p);
        let xnack = XNACK_PROCESSORS.contains(&p);
        for on in ['+', '-'] {
            if sramecc {
                out.push(t(&format!("{p}:sramecc{on}")));
            }
            if xnack {
                out.push(t(&format!("{p}:xnack{on}")));
            }
            if sramecc && xnack {
                let off = if on == '+' { '-' } else { '+' };
                out.push(t(&format!("{p}:sramecc{on}:xnack{off}")));
            }
        }
    }
    out
}

fn keys(v: impl IntoIterator<Item = impl Into<String>>) -> Vec<String> {
    v.into_iter().map(Into::into).collect()
}

fn archive(group: &Group, suffix: &str, v: Vec<String>) -> Archive {
    (format!("demo_{}{suffix}.kpack", group.name), v)
}

/// Realistic archive sets over the family table, one archive per family
/// in table order unless said otherwise: (name, archives).
fn scenarios(spec: &Spec) -> Vec<(String, Vec<Archive>)> {
    let groups = &spec.groups;
    let per_family = |f: &dyn Fn(usize, &Group) -> Vec<String>| -> Vec<Archive> {
        groups
            .iter()
            .enumerate()
            .map(|(i, g)| archive(g, "", f(i, g)))
            .filter(|(_, v)| !v.is_empty())
            .collect()
    };
    let native = |g: &Group| keys(g.targets.iter().cloned());
    let both = |g: &Group| keys(g.targets.iter().chain(&g.generic_isas).cloned());
    // Feature variants as the compilers publish them: xnack+/- for xnack
    // processors, sramecc on some, plain on others; generics with xnack.
    let featured = |g: &Group| -> Vec<String> {
        let mut v = Vec::new();
        for (k, p) in g.targets.iter().enumerate() {
            let p = p.as_str();
            match (
                SRAMECC_PROCESSORS.contains(&p),
                XNACK_PROCESSORS.contains(&p),
                k % 3,
            ) {
                (true, true, 0) => v.extend(keys([
                    format!("{p}:sramecc+:xnack-"),
                    format!("{p}:xnack+"),
                ])),
                (true, _, 1) => v.extend(keys([format!("{p}:sramecc-"), p.to_owned()])),
                (_, true, _) => v.extend(keys([format!("{p}:xnack+"), format!("{p}:xnack-")])),
                (_, _, 2) => {}
                _ => v.push(p.to_owned()),
            }
        }
        for gen in &g.generic_isas {
            match gen.as_str() {
                "gfx9-generic" | "gfx10-1-generic" => {
                    v.extend(keys([format!("{gen}:xnack-"), gen.clone()]))
                }
                "gfx9-4-generic" => v.extend(keys([
                    format!("{gen}:sramecc+:xnack+"),
                    format!("{gen}:xnack-"),
                ])),
                _ => v.push(gen.clone()),
            }
        }
        v
    };
    let mut out = vec![
        ("native only".to_owned(), per_family(&|_, g| native(g))),
        (
            "generic only where there is one".to_owned(),
            per_family(&|_, g| {
                if g.generic_isas.is_empty() {
                    native(g)
                } else {
                    keys(g.generic_isas.iter().cloned())
                }
            }),
        ),
        ("native and generic".to_owned(), per_family(&|_, g| both(g))),
        (
            "generic first, then native".to_owned(),
            per_family(&|_, g| keys(g.generic_isas.iter().chain(&g.targets).cloned())),
        ),
        (
            "feature variants".to_owned(),
            per_family(&|_, g| featured(g)),
        ),
        (
            // The first processor of each family natively; generics only in
            // every other family carrying them.
            "sparse".to_owned(),
            per_family(&|i, g| {
                let mut v = keys(g.targets.first().cloned());
                if i % 2 == 1 {
                    v.extend(g.generic_isas.iter().cloned());
                }
                v
            }),
        ),
        (
            // Native code split over two archives per family, generics in
            // both: the loader falls through from the first listing a key
            // to the others.
            "duplicated keys".to_owned(),
            groups
                .iter()
                .flat_map(|g| {
                    let (a, b) = g.targets.split_at(g.targets.len() / 2);
                    [
                        archive(g, "_a", keys(a.iter().chain(&g.generic_isas).cloned())),
                        archive(
                            g,
                            "_b",
                            keys(g.targets.iter().chain(&g.generic_isas).cloned()),
                        ),
                        archive(g, "_c", keys(b.iter().cloned())),
                    ]
                })
                .filter(|(_, v)| !v.is_empty())
                .collect(),
        ),
    ];
    // Every family missing in turn: its GPUs find only other families'
    // targets, and generic code where a sibling family carries it.
    for (skip, g) in groups.iter().enumerate() {
        out.push((
            format!("without {}", g.name),
            per_family(&|i, g| if i == skip { Vec::new() } else { both(g) }),
        ));
        out.push((
            format!("without {}, with feature variants", g.name),
            per_family(&|i, g| if i == skip { Vec::new() } else { featured(g) }),
        ));
    }
    out
}

#[test]
fn fetcher_needs_exactly_what_the_loader_loads_for_every_family_target() {
    let spec = Spec::builtin();
    let processors = spec.targets();
    let locals = local_targets(&spec);
    let with = |list: &[&str]| processors.iter().filter(|p| list.contains(p)).count();
    let both = processors
        .iter()
        .filter(|p| SRAMECC_PROCESSORS.contains(p) && XNACK_PROCESSORS.contains(p))
        .count();
    assert_eq!(
        locals.len(),
        processors.len() + 2 * (with(&SRAMECC_PROCESSORS) + with(&XNACK_PROCESSORS) + both)
    );
    let (mut decisions, mut served, mut uncovered) = (0usize, 0usize, 0usize);
    let scenarios = scenarios(&spec);
    for (scenario, archives) in &scenarios {
        let install = Install::new(archives);
        let all: BTreeSet<usize> = (0..archives.len()).collect();
        for local in &locals {
            let what = format!("{scenario}: {local}");
            let need = needs(&install.manifest, std::slice::from_ref(local));

            // The loader, every archive installed, for each process setting.
            install.install_only(&all);
            let cache = Cache::with_config(LoaderConfig::default());
            let decided: Vec<(TargetId, Decision)> = process_devices(local)
                .into_iter()
                .map(|device| {
                    let r = install.load(&cache, &device);
                    (device, r)
                })
                .collect();
            decisions += decided.len();
            let mut loaded: Vec<(usize, String)> = Vec::new();
            for (device, r) in &decided {
                match r {
                    Ok(_) => loaded.extend(install.fall_through(&all, device)),
                    Err(code) => assert_eq!(*code, ErrorCode::ArchNotFound, "{what}: {device}"),
                }
            }

            let fetched: BTreeSet<usize> = need.archives.iter().map(|n| n.index).collect();
            let opened: BTreeSet<usize> = loaded.iter().map(|(i, _)| *i).collect();
            assert_eq!(
                fetched, opened,
                "{what}: fetched vs loaded archives ({loaded:?})"
            );
            for n in &need.archives {
                let from_here: BTreeSet<&String> = loaded
                    .iter()
                    .filter(|(i, _)| *i == n.index)
                    .map(|(_, k)| k)
                    .collect();
                let arches: BTreeSet<&String> = n.arches.iter().collect();
                assert!(
                    from_here.is_subset(&arches),
                    "{what}: keys of archive {}: loaded {from_here:?}, fetched for {arches:?}",
                    n.index
                );
                assert_eq!(arches.len(), n.arches.len(), "{what}: repeated keys");
                assert_eq!(n.targets, [local.to_string()], "{what}");
            }
            assert_eq!(
                need.uncovered.is_empty(),
                !loaded.is_empty(),
                "{what}: uncovered"
            );
            if loaded.is_empty() {
                uncovered += 1;
                continue;
            }
            served += 1;

            // With only what the fetcher installs, the loader decides alike.
            install.install_only(&fetched);
            let cache = Cache::with_config(LoaderConfig::default());
            for (device, full) in &decided {
                let now = install.load(&cache, device);
                assert_eq!(
                    now.ok(),
                    full.clone().ok(),
                    "{what}: {device} with only the fetched archives"
                );
            }
        }
    }
    eprintln!(
        "{} processors, {} local targets, {} archive sets: {decisions} loader decisions; \
         {served} served, {uncovered} uncovered",
        processors.len(),
        locals.len(),
        scenarios.len()
    );
    assert!(
        served > 0 && uncovered > 0,
        "served {served}, uncovered {uncovered}"
    );
}
