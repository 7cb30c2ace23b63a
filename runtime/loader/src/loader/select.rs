//! The code-object selection rule (docs/runtime.md, "Code-object selection
//! rule"): which arch key, in which archive, a device loads.
//!
//! [`choices`] is the one copy of the rule. The loader's
//! [`Cache`](super::Cache) runs it over the archives its search paths
//! offer and tries what it offers in turn; the fetcher
//! (`fetcher/src/resolve.rs`) runs it over a manifest's archive list
//! through [`loadable`], so what it installs is exactly what the loader may
//! open.

use rocm_kpack_format::target::{TargetId, AMDHSA_PREFIX};

use crate::detect::{SRAMECC_PROCESSORS, XNACK_PROCESSORS};

/// Strip an optional `amdgcn-amd-amdhsa--` prefix.
pub fn strip_triple_prefix(arch: &str) -> &str {
    arch.strip_prefix(AMDHSA_PREFIX).unwrap_or(arch)
}

/// Arch keys that can serve `arch`, most specific first. Unparsable ids are
/// matched literally.
pub fn compatible_variants(arch: &str) -> Vec<String> {
    let arch = strip_triple_prefix(arch.trim());
    match TargetId::parse(arch) {
        Ok(id) => id.compatible_variants(),
        Err(_) => vec![arch.to_owned()],
    }
}

/// Where [`choices`] looks for arch keys: the archives behind the
/// loader's search paths, or the archives a manifest lists ([`Listed`]).
pub trait Archives {
    /// A place that may hold code objects (an archive path, a manifest
    /// entry's index).
    type Candidate: Clone;
    /// What a candidate holding the key yields (the opened archive).
    type Hit;

    /// The candidates that may hold any of `variants` (the compatible
    /// variants of every wanted arch, in the order of [`choices`]), in
    /// search order.
    fn candidates(&mut self, variants: &[String]) -> Vec<Self::Candidate>;

    /// `Some` when `candidate` holds code objects under `key`.
    fn holds(&mut self, candidate: &Self::Candidate, key: &str) -> Option<Self::Hit>;

    /// Called before `key` (a variant of `arch`) is looked for (tracing).
    fn trying(&mut self, _arch: &str, _key: &str) {}
}

/// One place [`choices`] offers: a candidate holding code objects under
/// `key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice<C, H> {
    pub candidate: C,
    /// What it yielded.
    pub hit: H,
    /// The arch key to load from it.
    pub key: String,
}

/// The selection rule, with fall-through (docs/runtime.md, "Code-object
/// selection rule"): for each wanted arch in the caller's priority order,
/// its compatible variants most specific first, and for each variant every
/// candidate holding it, in search order. A loader tries the choices in
/// this order until one has the kernel: an archive may hold only some of
/// a variant's kernels (a small `xnack-` overlay beside the full archive).
/// The candidates are those of every wanted arch at once, as AMD's loader
/// expands its search paths for the whole list before it looks.
pub fn choices<A: Archives + ?Sized, S: AsRef<str>>(
    archives: &mut A,
    wanted: &[S],
) -> Vec<Choice<A::Candidate, A::Hit>> {
    let per_arch: Vec<(&str, Vec<String>)> = wanted
        .iter()
        .map(|a| (a.as_ref(), compatible_variants(a.as_ref())))
        .collect();
    let mut every: Vec<String> = Vec::new();
    for v in per_arch.iter().flat_map(|(_, v)| v) {
        if !every.contains(v) {
            every.push(v.clone());
        }
    }
    let candidates = archives.candidates(&every);
    let mut out = Vec::new();
    for (arch, variants) in per_arch {
        for variant in variants {
            archives.trying(arch, &variant);
            for c in &candidates {
                if let Some(hit) = archives.holds(c, &variant) {
                    out.push(Choice {
                        candidate: c.clone(),
                        hit,
                        key: variant.clone(),
                    });
                }
            }
        }
    }
    out
}

/// Whether an archive listing `keys` may hold one of `variants`: what
/// makes a manifest entry a candidate.
pub fn lists_any<K: AsRef<str>>(keys: &[K], variants: &[String]) -> bool {
    keys.iter()
        .any(|k| variants.iter().any(|v| v == k.as_ref()))
}

/// Archives given by the arch keys each holds, in search order (a
/// manifest's `kpack_files` and their `architectures`): candidates are the
/// indices of those listing a variant, as the loader expands a manifest.
#[derive(Debug, Clone, Copy)]
pub struct Listed<'a, L>(pub &'a [L]);

impl<L: AsRef<[String]>> Archives for Listed<'_, L> {
    type Candidate = usize;
    type Hit = ();

    fn candidates(&mut self, variants: &[String]) -> Vec<usize> {
        (0..self.0.len())
            .filter(|&i| {
                self.0
                    .get(i)
                    .is_some_and(|keys| lists_any(keys.as_ref(), variants))
            })
            .collect()
    }

    fn holds(&mut self, candidate: &usize, key: &str) -> Option<()> {
        let keys = self.0.get(*candidate)?.as_ref();
        keys.iter().any(|k| k == key).then_some(())
    }
}

/// The arch list a device is loaded with: its target id, then its generic
/// fallback ([`TargetId::generic_fallback`]), as the preload shim passes it
/// (docs/runtime.md, "Generic ISA fallback").
pub fn device_arch_list(device: &TargetId) -> Vec<String> {
    std::iter::once(device.to_string())
        .chain(device.generic_fallback().map(|g| g.to_string()))
        .collect()
}

/// The target ids a process may present for a GPU known as `local` (a
/// detected target, `--target` or an override): xnack is a per-process mode,
/// so a processor that has it (or a `local` naming it) comes with both
/// settings whatever `local` says; sramecc, when `local` leaves it open on
/// a processor that has it, with both. Everything else as `local` has it.
pub fn process_targets(local: &TargetId) -> Vec<TargetId> {
    let mut out = vec![local.clone()];
    let processor = local.processor();
    let open = [
        (
            "sramecc",
            SRAMECC_PROCESSORS.contains(&processor) && local.feature("sramecc").is_none(),
        ),
        (
            "xnack",
            XNACK_PROCESSORS.contains(&processor) || local.feature("xnack").is_some(),
        ),
    ];
    for (feature, _) in open.iter().filter(|(_, open)| *open) {
        out = out
            .iter()
            .flat_map(|t| {
                [true, false].map(|on| t.with_feature(feature, on).unwrap_or_else(|_| t.clone()))
            })
            .collect();
    }
    out
}

/// What the loader may load for a GPU known as `local` from `archives`
/// (arch keys per archive, in search order): for each of its
/// [`process_targets`], every archive index and key [`choices`] offers with
/// [`device_arch_list`], since the loader falls through to any of them when
/// the ones before lack a kernel; without repeats, in first-seen order.
/// Empty when nothing serves it.
pub fn loadable<L: AsRef<[String]>>(local: &TargetId, archives: &[L]) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    for device in process_targets(local) {
        for c in choices(&mut Listed(archives), &device_arch_list(&device)) {
            let choice = (c.candidate, c.key);
            if !out.contains(&choice) {
                out.push(choice);
            }
        }
    }
    out
}

/// Whether the loader may load a code object filed under `key` for a GPU
/// known as `local`, were it the only one on offer ([`loadable`]). The key
/// may carry the triple prefix and name its features in any order.
pub fn may_load(local: &TargetId, key: &str) -> bool {
    TargetId::parse(strip_triple_prefix(key))
        .is_ok_and(|code| !loadable(local, &[[code.to_string()]]).is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> TargetId {
        TargetId::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn names(ids: &[TargetId]) -> Vec<String> {
        ids.iter().map(TargetId::to_string).collect()
    }

    fn keys(lists: &[&[&str]]) -> Vec<Vec<String>> {
        lists
            .iter()
            .map(|l| l.iter().map(|k| (*k).to_owned()).collect())
            .collect()
    }

    fn offered(archives: &[Vec<String>], wanted: &[&str]) -> Vec<(usize, String)> {
        choices(&mut Listed(archives), wanted)
            .into_iter()
            .map(|c| (c.candidate, c.key))
            .collect()
    }

    #[test]
    fn choices_go_arch_then_variant_then_archive() {
        let archives = keys(&[
            &["gfx942"],
            &["gfx942:sramecc+", "gfx9-4-generic"],
            &["gfx942:sramecc+"],
        ]);
        assert_eq!(
            offered(&archives, &["gfx942:sramecc+:xnack-", "gfx9-4-generic"]),
            [
                (1, "gfx942:sramecc+".to_owned()),
                (2, "gfx942:sramecc+".to_owned()),
                (0, "gfx942".to_owned()),
                (1, "gfx9-4-generic".to_owned()),
            ]
        );
        assert_eq!(
            offered(&archives[..1], &["amdgcn-amd-amdhsa--gfx942:xnack+"]),
            [(0, "gfx942".to_owned())]
        );
        assert!(offered(&archives, &["gfx90a"]).is_empty());
        // Unparsable arches match literally.
        assert_eq!(offered(&keys(&[&["weird"]]), &["weird"]).len(), 1);
    }

    #[test]
    fn an_xnack_overlay_comes_before_the_base_and_both_are_loadable() {
        // AMD's torch layout: `torch_gfx90a:xnack-.kpack` holds a few
        // kernels, `torch_gfx90a.kpack` all of them.
        let archives = keys(&[&["gfx90a:xnack-"], &["gfx90a"]]);
        assert_eq!(
            offered(&archives, &["amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-"]),
            [(0, "gfx90a:xnack-".to_owned()), (1, "gfx90a".to_owned())]
        );
        assert_eq!(
            loadable(&t("gfx90a"), &archives),
            [(1, "gfx90a".to_owned()), (0, "gfx90a:xnack-".to_owned())]
        );
    }

    #[test]
    fn arch_lists_and_process_targets() {
        assert_eq!(
            device_arch_list(&t("gfx1151")),
            ["gfx1151", "gfx11-generic"]
        );
        assert_eq!(device_arch_list(&t("gfx90a:xnack+")), ["gfx90a:xnack+"]);
        assert_eq!(names(&process_targets(&t("gfx1100"))), ["gfx1100"]);
        assert_eq!(
            names(&process_targets(&t("gfx942:sramecc+"))),
            ["gfx942:sramecc+:xnack+", "gfx942:sramecc+:xnack-"]
        );
        assert_eq!(
            names(&process_targets(&t("gfx900:xnack-"))),
            ["gfx900:xnack+", "gfx900:xnack-"]
        );
        assert_eq!(process_targets(&t("gfx90a")).len(), 4);
    }

    #[test]
    fn native_then_generic_code_per_process_target() {
        let archives = keys(&[&["gfx9-4-generic:xnack-"], &["gfx942:xnack+"]]);
        assert_eq!(
            loadable(&t("gfx942:sramecc+"), &archives),
            [
                (1, "gfx942:xnack+".to_owned()),
                (0, "gfx9-4-generic:xnack-".to_owned())
            ]
        );
        assert!(may_load(&t("gfx906"), "gfx9-generic"));
        assert!(!may_load(&t("gfx906:sramecc+"), "gfx9-generic:sramecc+"));
    }
}
