//! The built-in spec: one device group per processor (docs/packaging.md
//! "Device groups: per target"), the family tables a spec may choose
//! instead or upgrade from, LLVM's processor and generic-ISA tables, the
//! kernel-database rules, naming templates and validation switches used
//! when a spec file does not say otherwise.

use crate::databases::{ArchSource, DatabaseRule};
use crate::{Fetch, Group, Naming, PackageDefaults, Spec, Validation, Versioning};

/// Every AMDGPU processor LLVM knows (AMDGPUUsage "Processors" table), the
/// names a spec may list and database file names are searched for.
pub const KNOWN_PROCESSORS: &[&str] = &[
    "gfx600", "gfx601", "gfx602", "gfx700", "gfx701", "gfx702", "gfx703", "gfx704", "gfx705",
    "gfx801", "gfx802", "gfx803", "gfx805", "gfx810", "gfx900", "gfx902", "gfx904", "gfx906",
    "gfx908", "gfx909", "gfx90a", "gfx90c", "gfx940", "gfx941", "gfx942", "gfx950", "gfx1010",
    "gfx1011", "gfx1012", "gfx1013", "gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034",
    "gfx1035", "gfx1036", "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151",
    "gfx1152", "gfx1153", "gfx1200", "gfx1201", "gfx1250", "gfx1251",
];

/// The translation domains of rocjitsu's ahead-of-time translations
/// (`share/rocjitsu/translations/<domain>/v1/`), each with the processor
/// it serves: rocjitsu's own spelling, kept explicit as AMD's splitter
/// keeps it.
pub const TRANSLATION_DOMAINS: &[(&str, &str)] = &[("gfx1250-b0-a0", "gfx1250")];

/// The family table (`granularity = "family"`, docs/packaging.md "Device
/// groups: families"): AMD's GPU families before its per-target packages, then one family per processor AMD's table
/// leaves out. Each family also carries the generic ISA serving its
/// processors (LLVM's table, [`generic_isas_of`]).
pub const FAMILIES: &[(&str, &[&str])] = &[
    // AMD's table: single-processor families for gfx9, whose members
    // differ in instruction support ...
    ("gfx900", &["gfx900"]),
    ("gfx906", &["gfx906"]),
    ("gfx908", &["gfx908"]),
    ("gfx90a", &["gfx90a"]),
    ("gfx90c", &["gfx90c"]),
    // ... and the families of several processors, split into discrete
    // and integrated GPUs where AMD splits them.
    ("gfx94X", &["gfx942"]),
    ("gfx950", &["gfx950"]),
    ("gfx101X", &["gfx1010", "gfx1011", "gfx1012"]),
    (
        "gfx103X-dgpu",
        &["gfx1030", "gfx1031", "gfx1032", "gfx1034"],
    ),
    ("gfx103X-igpu", &["gfx1033", "gfx1035", "gfx1036"]),
    ("gfx110X-dgpu", &["gfx1100", "gfx1101", "gfx1102"]),
    ("gfx110X-igpu", &["gfx1103"]),
    ("gfx115X", &["gfx1150", "gfx1151", "gfx1152", "gfx1153"]),
    ("gfx120X", &["gfx1200", "gfx1201"]),
    ("gfx125X", &["gfx1250"]),
    // Processors outside AMD's table that distributions still build
    // (Debian's ROCm packages carry gfx803): a family of their own each,
    // as AMD makes every processor a family of its own name.
    ("gfx801", &["gfx801"]),
    ("gfx802", &["gfx802"]),
    ("gfx803", &["gfx803"]),
    ("gfx805", &["gfx805"]),
    ("gfx810", &["gfx810"]),
    ("gfx902", &["gfx902"]),
    ("gfx904", &["gfx904"]),
    ("gfx909", &["gfx909"]),
    ("gfx940", &["gfx940"]),
    ("gfx941", &["gfx941"]),
    ("gfx1013", &["gfx1013"]),
    ("gfx1251", &["gfx1251"]),
];

/// The family table before AMD split gfx9 and the dgpu/igpu families
/// (2025): the groups whose packages the current families replace
/// (docs/packaging.md "Upgrades from the previous family table").
/// `tests/fixtures/specs/families-2025.toml` is this table as a spec file.
pub const FAMILIES_2025: &[(&str, &[&str])] = &[
    (
        "gfx80X",
        &["gfx801", "gfx802", "gfx803", "gfx805", "gfx810"],
    ),
    (
        "gfx90X",
        &[
            "gfx900", "gfx902", "gfx904", "gfx906", "gfx908", "gfx909", "gfx90a", "gfx90c",
        ],
    ),
    ("gfx94X", &["gfx940", "gfx941", "gfx942"]),
    ("gfx950", &["gfx950"]),
    ("gfx101X", &["gfx1010", "gfx1011", "gfx1012", "gfx1013"]),
    (
        "gfx103X",
        &[
            "gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036",
        ],
    ),
    ("gfx110X", &["gfx1100", "gfx1101", "gfx1102", "gfx1103"]),
    ("gfx115X", &["gfx1150", "gfx1151", "gfx1152", "gfx1153"]),
    ("gfx120X", &["gfx1200", "gfx1201"]),
    ("gfx125X", &["gfx1250", "gfx1251"]),
];

/// The generic ISAs serving some processor of `targets`, each once, in
/// LLVM's table order: what a family's archive set must include to be
/// self-sufficient.
pub fn generic_isas_of(targets: &[&str]) -> Vec<String> {
    crate::GENERIC_ISAS
        .iter()
        .filter(|g| g.processors.iter().any(|p| targets.contains(p)))
        .map(|g| g.name.to_string())
        .collect()
}

fn groups_of(table: &[(&str, &[&str])]) -> Vec<Group> {
    table
        .iter()
        .map(|(name, targets)| Group {
            name: (*name).to_string(),
            targets: strings(targets),
            generic_isas: generic_isas_of(targets),
        })
        .collect()
}

/// The family groups of [`FAMILIES`].
pub fn family_groups() -> Vec<Group> {
    groups_of(FAMILIES)
}

/// The processors of the default per-target spec, in group order: AMD's
/// device targets ([`crate::amd::DEVICE_TARGETS`]), then every other
/// processor the family table gives a family of its own (those
/// distributions still build, gfx803), so the two granularities cover the
/// same processors and a target neither knows stays an error naming it.
pub fn per_target_processors() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = crate::amd::DEVICE_TARGETS.to_vec();
    for (_, targets) in FAMILIES {
        for t in *targets {
            if !out.contains(t) {
                out.push(t);
            }
        }
    }
    out
}

/// The groups of the default spec: one per processor of
/// [`per_target_processors`], each also carrying the generic ISAs serving
/// it.
pub fn per_target_default_groups() -> Vec<Group> {
    crate::per_target_groups(&per_target_processors())
}

/// The family groups a per-target spec replaces: those of
/// [`FAMILIES_2025`] and of [`FAMILIES`], so installs of either table's
/// packages upgrade to the per-target ones. A name both tables use
/// (`gfx94X`, `gfx101X`) is one replaced group serving the processors of
/// either: its transitional package brings every processor's package an
/// install of either version had.
pub fn family_groups_replaced_by_per_target() -> Vec<Group> {
    let mut merged: Vec<(&str, Vec<&str>)> = Vec::new();
    for (name, targets) in FAMILIES_2025.iter().chain(FAMILIES) {
        match merged.iter_mut().find(|(n, _)| n == name) {
            Some((_, known)) => {
                for t in *targets {
                    if !known.contains(t) {
                        known.push(t);
                    }
                }
            }
            None => merged.push((name, targets.to_vec())),
        }
    }
    let table: Vec<(&str, &[&str])> = merged.iter().map(|(n, t)| (*n, t.as_slice())).collect();
    groups_of(&table)
}

/// The family groups of [`FAMILIES_2025`].
pub fn family_groups_2025() -> Vec<Group> {
    groups_of(FAMILIES_2025)
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_string()).collect()
}

/// The built-in kernel-database rules (docs/packaging.md), tried in order.
/// Each matches kernel files only: code objects, the databases of known
/// libraries, files under directories that name a target. A file whose
/// name merely mentions a target (a test list `*_gfx90a.txt`) stays
/// generic unless the spec opts in to [`target_token_rule`].
pub fn database_rules() -> Vec<DatabaseRule> {
    vec![
        // Tensile/hipBLASLt libraries: code objects and their `.dat`
        // catalogues below a `library/` directory.
        DatabaseRule {
            name: "tensile".into(),
            include: strings(&["**/library/**/*.{co,hsaco,dat}"]),
            exclude: Vec::new(),
            arch: vec![ArchSource::FileName, ArchSource::Directory],
        },
        // Tensile's per-arch layout (rocBLAS, hipBLASLt, hipSPARSELt):
        // every file below `<library>/library/<target>/`, manifests and
        // fallback catalogues included. Only these libraries' directories:
        // any file counts here, not only code objects.
        DatabaseRule {
            name: "tensile-arch-dir".into(),
            include: strings(&[
                "**/rocblas/library/**",
                "**/hipblaslt/library/**",
                "**/hipsparselt/library/**",
            ]),
            exclude: Vec::new(),
            arch: vec![ArchSource::AnchorDirectory],
        },
        // AOTriton up to 0.8: `aotriton/kernels/<target>/...`.
        DatabaseRule {
            name: "aotriton".into(),
            include: strings(&["**/aotriton/kernels/**"]),
            exclude: Vec::new(),
            arch: vec![ArchSource::Directory],
        },
        // AOTriton as torch wheels ship it: `aotriton.images/amd-<target>/`
        // and family directories (`amd-gfx11xx`) serving every processor
        // of the family.
        DatabaseRule {
            name: "aotriton-images".into(),
            include: strings(&["**/aotriton.images/amd-*/**"]),
            exclude: Vec::new(),
            arch: vec![ArchSource::AmdDirectory],
        },
        // MIOpen's per-processor performance and find databases.
        DatabaseRule {
            name: "miopen-db".into(),
            include: strings(&["**/share/miopen/db/gfx*.{kdb,db.txt,fdb.txt,model}"]),
            exclude: Vec::new(),
            arch: vec![ArchSource::FileNamePrefix],
        },
        // MIOpen's composable-kernel solver libraries, one per processor.
        // (`MIOpenCK<name>_<target>.dll` on Windows.)
        DatabaseRule {
            name: "miopen-ck".into(),
            include: strings(&["**/libMIOpenCK*_gfx*.so*", "**/MIOpenCK*_gfx*.dll"]),
            exclude: Vec::new(),
            arch: vec![ArchSource::FileName],
        },
        // Composable Kernel's per-target static libraries, named by the
        // sanitized target (`libdevice_conv_operations_gfx950_xnackp.a`;
        // `device_conv_operations_<target>.lib` on Windows). The
        // all-target `libdevice_conv_operations.a` stays generic.
        DatabaseRule {
            name: "composable-kernel".into(),
            include: strings(&["**/{libdevice,device}_conv_operations_gfx*.{a,lib}"]),
            exclude: Vec::new(),
            arch: vec![ArchSource::SanitizedSuffix],
        },
        // hip-kernel-provider content in hipDNN's plugin engines:
        // everything below the first target directory under
        // `engines/arch_content/` or `engines/test_arch_content/`, at any
        // depth (the producer directories between are a convention).
        DatabaseRule {
            name: "hip-kernel-provider".into(),
            include: strings(&[
                "**/engines/arch_content/**",
                "**/engines/test_arch_content/**",
            ]),
            exclude: Vec::new(),
            arch: vec![ArchSource::AnchorDirectory],
        },
        // rocjitsu's ahead-of-time translations:
        // `share/rocjitsu/translations/<domain>/v1/<sha256>.{man,obj}`.
        DatabaseRule {
            name: "rocjitsu".into(),
            include: vec![format!(
                "**/share/rocjitsu/translations/*/v1/{}.{{man,obj}}",
                "[0-9a-f]".repeat(64)
            )],
            exclude: Vec::new(),
            arch: vec![ArchSource::TranslationDomain],
        },
        // Loose code objects anywhere, named by a target directory or a
        // `_<target>` suffix.
        DatabaseRule {
            name: "code-objects".into(),
            include: strings(&["**/*.{co,hsaco}"]),
            exclude: Vec::new(),
            arch: vec![ArchSource::Directory, ArchSource::FileNameSuffix],
        },
    ]
}

/// The opt-in catch-all (`catch_all_databases = true` in a spec, as the
/// public rocm-kpack's `--split-databases`): any file below a directory
/// named by a target, or whose stem ends in `_<target>`, is that target's
/// device data, whatever it holds.
pub fn target_token_rule() -> DatabaseRule {
    DatabaseRule {
        name: "target-token".into(),
        include: strings(&["**"]),
        exclude: Vec::new(),
        arch: vec![ArchSource::Directory, ArchSource::FileNameSuffix],
    }
}

/// Package names (docs/packaging.md "Package naming").
pub fn naming() -> Naming {
    crate::naming::Profile::Kpack.naming()
}

/// Metadata used when the input package does not provide it.
pub fn package_defaults() -> PackageDefaults {
    PackageDefaults {
        maintainer: None,
        section: Some("libs".into()),
        license: None,
        homepage: None,
        device_payload: None,
    }
}

/// The built-in spec (see [`Spec::builtin`]): per target, replacing both
/// family tables.
pub fn builtin() -> Spec {
    Spec {
        groups: per_target_default_groups(),
        replaces: family_groups_replaced_by_per_target(),
        ..families()
    }
}

/// The family spec (`granularity = "family"`, [`Spec::default_families`]):
/// the family table, replacing the 2025 one.
pub fn families() -> Spec {
    Spec {
        groups: family_groups(),
        replaces: family_groups_2025(),
        kernel_databases: database_rules(),
        naming: naming(),
        package: package_defaults(),
        fetch: Fetch::default(),
        validation: Validation::default(),
        version: Versioning::default(),
    }
}
