//! `.kpm` manifests: v1 round trip, legacy reading, hostile input.

use crate::archive_common::{legacy_manifest_bytes, sample_manifest, ValueExt};
use proptest::prelude::*;
use rocm_kpack_format::layout;
use rocm_kpack_format::manifest::{DatabaseFile, Manifest, ManifestFile};
use rocm_kpack_format::msgpack::{self, Value};
use rocm_kpack_format::Error;

fn s(x: &str) -> Value {
    Value::String(x.into())
}

/// The sample manifest as a Value, for mutation.
fn sample_value() -> Value {
    msgpack::decode::<Value>(&sample_manifest().to_msgpack().unwrap()).unwrap()
}

fn file0(v: &mut Value) -> &mut Vec<(Value, Value)> {
    let Value::Map(top) = v else { panic!() };
    let Value::Array(files) = &mut top[2].1 else {
        panic!()
    };
    let Value::Map(f) = &mut files[0] else {
        panic!()
    };
    f
}

fn set(map: &mut [(Value, Value)], key: &str, v: Value) {
    map.iter_mut()
        .find(|(k, _)| k.as_str() == Some(key))
        .unwrap()
        .1 = v;
}

#[test]
fn v1_round_trip_and_layout() {
    let m = sample_manifest();
    let bytes = m.to_msgpack().unwrap();
    assert_eq!(m.to_msgpack().unwrap(), bytes, "deterministic");
    assert_eq!(Manifest::parse(&bytes).unwrap(), m);

    let v = msgpack::decode::<Value>(&bytes).unwrap();
    let keys: Vec<&str> = v
        .as_map()
        .unwrap()
        .iter()
        .map(|(k, _)| k.as_str().unwrap())
        .collect();
    assert_eq!(keys, ["format_version", "component", "kpack_files"]);
    let f = &v.get("kpack_files").unwrap().as_array().unwrap()[0];
    let fkeys: Vec<&str> = f
        .as_map()
        .unwrap()
        .iter()
        .map(|(k, _)| k.as_str().unwrap())
        .collect();
    assert_eq!(
        fkeys,
        ["filename", "family", "architectures", "size", "sha256"]
    );
    assert_eq!(f.get("sha256"), Some(&Value::Binary(vec![0xab; 32])));

    assert_eq!(
        m.file_for_arch("gfx90a:xnack-").unwrap().filename,
        "rand_lib_gfx90a.kpack"
    );
    assert!(m.file_for_arch("gfx90a").is_none());
}

#[test]
fn read_from_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rand_lib.kpm");
    std::fs::write(&path, sample_manifest().to_msgpack().unwrap()).unwrap();
    assert_eq!(Manifest::read(&path).unwrap(), sample_manifest());
    assert!(matches!(
        Manifest::read(&dir.path().join("nope.kpm")),
        Err(Error::FileNotFound { .. })
    ));
    std::fs::write(&path, [0x80]).unwrap();
    let e = Manifest::read(&path).unwrap_err();
    assert!(e.to_string().contains("rand_lib.kpm"), "{e}");
}

#[test]
fn legacy_schema_is_read() {
    let m = Manifest::parse(&legacy_manifest_bytes()).unwrap();
    assert_eq!(
        m,
        Manifest {
            component: "rand_lib".into(),
            kpack_files: vec![
                ManifestFile {
                    filename: "rand_lib_gfx110X.kpack".into(),
                    family: "gfx110X".into(),
                    architectures: vec!["gfx1100".into(), "gfx1101".into()],
                    size: 518,
                    sha256: None,
                    transport: None,
                },
                ManifestFile {
                    filename: "rand_lib_gfx942.kpack".into(),
                    family: "gfx942".into(),
                    architectures: vec!["gfx942".into()],
                    size: 4096,
                    sha256: None,
                    transport: None,
                },
            ],
            database_files: Vec::new(),
            prefix_path: None,
        }
    );
    // v1 output needs hashes the legacy schema never had.
    assert!(m.to_msgpack().is_err());
}

#[test]
fn hostile_filenames_are_rejected() {
    for name in [
        "",
        ".",
        "..",
        "../x.kpack",
        "a/b.kpack",
        "/etc/passwd",
        "a\\b.kpack",
        "x..kpack",
        "a\0b",
        "http:host",
        "http:host.kpack",
        "file:%2F..%2Fetc%2Fshadow.kpack",
        "//host/x.kpack",
        "%2e%2e.kpack",
        "x.kpack\n",
        "x.txt",
    ] {
        let mut v = sample_value();
        set(file0(&mut v), "filename", s(name));
        let e = Manifest::parse(&msgpack::encode(&v).unwrap()).unwrap_err();
        assert!(matches!(e, Error::InvalidMetadata(_)), "{name:?}: {e}");

        // The legacy manifest with the hostile name in its last entry.
        let mut v = msgpack::decode::<Value>(&legacy_manifest_bytes()).unwrap();
        let Value::Map(top) = &mut v else { panic!() };
        let Value::Map(files) = &mut top[3].1 else {
            panic!()
        };
        let Value::Map(f) = &mut files[2].1 else {
            panic!()
        };
        set(f, "file", s(name));
        assert!(
            Manifest::parse(&msgpack::encode(&v).unwrap()).is_err(),
            "legacy {name:?}"
        );

        let mut m = sample_manifest();
        m.kpack_files[1].filename = name.into();
        assert!(m.to_msgpack().is_err(), "writer accepts {name:?}");
    }
}

#[test]
fn hostile_components_are_rejected() {
    let long = "c".repeat(300);
    for name in [
        "",
        "..",
        "../x",
        "/etc",
        "a/b",
        "%2e%2e",
        "http://h/",
        "x\n",
        "x\0",
        long.as_str(),
    ] {
        let mut v = sample_value();
        let Value::Map(top) = &mut v else { panic!() };
        set(top, "component", s(name));
        let e = Manifest::parse(&msgpack::encode(&v).unwrap()).unwrap_err();
        assert!(
            e.to_string().contains("unsafe component name"),
            "{name:?}: {e}"
        );
        let mut m = sample_manifest();
        m.component = name.into();
        assert!(m.to_msgpack().is_err(), "writer accepts {name:?}");
    }
}

#[test]
fn wrong_types_and_versions() {
    type Mutation = (&'static str, fn(&mut Value));
    let cases: &[Mutation] = &[
        ("version 4", |v| {
            let Value::Map(top) = v else { panic!() };
            top[0].1 = Value::from(4);
        }),
        ("version 2 without database_files", |v| {
            let Value::Map(top) = v else { panic!() };
            top[0].1 = Value::from(2);
        }),
        ("database_files in version 1", |v| {
            let Value::Map(top) = v else { panic!() };
            top.push((s("database_files"), Value::Array(vec![])));
        }),
        ("component bin", |v| {
            let Value::Map(top) = v else { panic!() };
            top[1].1 = Value::Binary(b"rand_lib".to_vec());
        }),
        ("kpack_files map", |v| {
            let Value::Map(top) = v else { panic!() };
            top[2].1 = Value::Map(vec![]);
        }),
        ("sha256 31 bytes", |v| {
            set(file0(v), "sha256", Value::Binary(vec![0; 31]))
        }),
        ("sha256 33 bytes", |v| {
            set(file0(v), "sha256", Value::Binary(vec![0; 33]))
        }),
        ("sha256 hex str", |v| {
            set(file0(v), "sha256", s(&"ab".repeat(32)))
        }),
        ("size negative", |v| set(file0(v), "size", Value::from(-1))),
        ("size str", |v| set(file0(v), "size", s("518"))),
        ("family bin", |v| {
            set(file0(v), "family", Value::Binary(b"gfx110X".to_vec()))
        }),
        ("architectures str", |v| {
            set(file0(v), "architectures", s("gfx1100"))
        }),
        ("architecture nil", |v| {
            set(file0(v), "architectures", Value::Array(vec![Value::Nil]))
        }),
        ("filename missing", |v| {
            file0(v).retain(|(k, _)| k.as_str() != Some("filename"))
        }),
        ("sha256 missing", |v| {
            file0(v).retain(|(k, _)| k.as_str() != Some("sha256"))
        }),
        ("duplicate filename", |v| {
            let Value::Map(top) = v else { panic!() };
            let Value::Array(files) = &mut top[2].1 else {
                panic!()
            };
            let first = files[0].clone();
            files.push(first);
        }),
        ("not a map", |v| *v = Value::Array(vec![])),
    ];
    for (why, mutate) in cases {
        let mut v = sample_value();
        mutate(&mut v);
        let e = Manifest::parse(&msgpack::encode(&v).unwrap());
        assert!(e.is_err(), "{why}");
        if *why == "version 4" {
            let e = e.unwrap_err();
            assert!(
                matches!(e, Error::UnsupportedVersion { found: 4, .. }),
                "{e}"
            );
            assert!(e.to_string().contains("upgrade rocm-kpack-fetch"), "{e}");
        }
    }
}

fn with_databases() -> Manifest {
    let mut m = sample_manifest();
    m.database_files = vec![
        DatabaseFile {
            path: "rocblas/library/Kernels.so-000-gfx90a-xnack+.hsaco".into(),
            family: "gfx90X".into(),
            architectures: vec!["gfx90a:xnack+".into()],
            size: 20_384_632,
            sha256: [0x11; 32],
        },
        DatabaseFile {
            path: "rocblas/library/TensileLibrary_gfx90a.co".into(),
            family: "gfx90X".into(),
            architectures: vec!["gfx90a".into()],
            size: 395_981_312,
            sha256: [0x22; 32],
        },
    ];
    m
}

/// A manifest listing database files is version 2 (an earlier reader
/// refuses it rather than fetch part of it); one without stays version 1,
/// byte for byte what earlier writers wrote.
#[test]
fn v2_lists_database_files_and_v1_stays_for_archives_only() {
    let v1 = sample_manifest().to_msgpack().unwrap();
    assert_eq!(
        msgpack::decode::<Value>(&v1).unwrap().get("format_version"),
        Some(&Value::from(1))
    );
    let m = with_databases();
    let bytes = m.to_msgpack().unwrap();
    assert_eq!(Manifest::parse(&bytes).unwrap(), m);
    let v = msgpack::decode::<Value>(&bytes).unwrap();
    assert_eq!(v.get("format_version"), Some(&Value::from(2)));
    let keys: Vec<&str> = v
        .as_map()
        .unwrap()
        .iter()
        .map(|(k, _)| k.as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "format_version",
            "component",
            "kpack_files",
            "database_files"
        ]
    );
    let d = &v.get("database_files").unwrap().as_array().unwrap()[1];
    let dkeys: Vec<&str> = d
        .as_map()
        .unwrap()
        .iter()
        .map(|(k, _)| k.as_str().unwrap())
        .collect();
    assert_eq!(dkeys, ["path", "family", "architectures", "size", "sha256"]);
    assert_eq!(d.get("sha256"), Some(&Value::Binary(vec![0x22; 32])));
    let served: Vec<&str> = m
        .database_files_for("gfx90a:xnack+")
        .map(|f| f.path.as_str())
        .collect();
    assert_eq!(
        served,
        ["rocblas/library/Kernels.so-000-gfx90a-xnack+.hsaco"]
    );
}

#[test]
fn hostile_database_paths_are_rejected() {
    for path in [
        "",
        "../etc/passwd",
        "lib/../../x",
        "/etc/passwd",
        "lib//x.co",
        "lib/./x.co",
        "lib/x.co/",
        ".kpack/x.co",
        "lib/.kpack/y.hsaco",
        "lib/.kpack/x_gfx90a.kpack",
        "lib/other.kpm",
        "lib\\..\\x",
        "lib/x\nco",
        "lib/x\0co",
    ] {
        let mut m = with_databases();
        m.database_files[0].path = path.into();
        assert!(m.to_msgpack().is_err(), "writer accepted {path:?}");
        // The same bytes, hand-made: the reader refuses them too.
        let mut v = msgpack::decode::<Value>(&with_databases().to_msgpack().unwrap()).unwrap();
        let Value::Map(top) = &mut v else { panic!() };
        let Value::Array(dbs) = &mut top[3].1 else {
            panic!()
        };
        let Value::Map(d) = &mut dbs[0] else { panic!() };
        set(d, "path", s(path));
        let e = Manifest::parse(&msgpack::encode(&v).unwrap()).unwrap_err();
        assert!(e.to_string().contains("database path"), "{path:?}: {e}");
    }
    // Another library's archives outside any `.kpack/` directory are
    // content like any other (hip-kernel-provider's per-target kernels).
    let mut m = with_databases();
    let hkp = "lib/hipdnn_plugins/engines/arch_content/p/gfx90a/kernels_gfx90a.kpack";
    m.database_files[0].path = hkp.into();
    m.database_files.sort_by(|a, b| a.path.cmp(&b.path));
    let back = Manifest::parse(&m.to_msgpack().unwrap()).unwrap();
    assert!(back.database_files.iter().any(|f| f.path == hkp));
    // Listed twice, or a file that is another's directory.
    for (a, b) in [("lib/x.co", "lib/x.co"), ("lib/x", "lib/x/y.co")] {
        let mut m = with_databases();
        m.database_files[0].path = a.into();
        m.database_files[1].path = b.into();
        let e = Manifest::parse(&m.to_msgpack().unwrap()).unwrap_err();
        assert!(e.to_string().contains("database file"), "{a} {b}: {e}");
    }
    // A path between the file and its descendant in sorted order (`-`
    // sorts before `/`): the file is still found to be a directory.
    for order in [
        ["a", "a-b", "a/x"],
        ["a/x", "a-b", "a"],
        ["a-b", "a/x", "a"],
    ] {
        let mut m = with_databases();
        let template = m.database_files[0].clone();
        m.database_files = order
            .iter()
            .map(|p| DatabaseFile {
                path: format!("lib/{p}"),
                ..template.clone()
            })
            .collect();
        let e = Manifest::parse(&m.to_msgpack().unwrap()).unwrap_err();
        assert!(
            e.to_string()
                .contains(r#"database file "lib/a" is a directory of "lib/a/x""#),
            "{order:?}: {e}"
        );
    }
}

/// Debian's multiarch MIOpen: databases outside the prefix. The manifest
/// is version 3 and carries the prefix's path below the install root; the
/// database paths are relative to that root, and their keys relative to
/// the prefix climb the fewest levels.
fn multiarch() -> Manifest {
    let mut m = with_databases();
    m.prefix_path = Some("usr/lib/x86_64-linux-gnu".into());
    m.database_files[0].path = "usr/share/miopen/db/gfx90a68.kdb".into();
    m.database_files[1].path =
        "usr/lib/x86_64-linux-gnu/rocblas/library/TensileLibrary_gfx90a.co".into();
    m
}

#[test]
fn v3_declares_the_prefix_path_and_lists_databases_from_the_root() {
    let m = multiarch();
    let bytes = m.to_msgpack().unwrap();
    assert_eq!(Manifest::parse(&bytes).unwrap(), m);
    let v = msgpack::decode::<Value>(&bytes).unwrap();
    assert_eq!(v.get("format_version"), Some(&Value::from(3)));
    let keys: Vec<&str> = v
        .as_map()
        .unwrap()
        .iter()
        .map(|(k, _)| k.as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "format_version",
            "component",
            "kpack_files",
            "database_files",
            "prefix_path"
        ]
    );
    let keys: Vec<Option<String>> = m
        .database_files
        .iter()
        .map(|f| layout::database_key(m.prefix_path.as_deref(), &f.path))
        .collect();
    assert_eq!(
        keys,
        [
            Some("../../share/miopen/db/gfx90a68.kdb".into()),
            Some("rocblas/library/TensileLibrary_gfx90a.co".into())
        ]
    );
    for key in keys.iter().flatten() {
        layout::names::check(layout::names::NameKind::DatabaseKey, key).unwrap();
    }
    assert_eq!(
        layout::split_database_key("../../share/x.kdb"),
        Some((2, "share/x.kdb"))
    );
    assert_eq!(
        layout::database_tree_path(
            "usr/lib/x86_64-linux-gnu",
            m.prefix_path.as_deref(),
            "usr/share/x.kdb"
        )
        .as_deref(),
        Some("usr/share/x.kdb")
    );
    assert_eq!(
        layout::database_tree_path("opt/lib", m.prefix_path.as_deref(), "usr/share/x.kdb"),
        None
    );
    // A version-2 manifest has no prefix_path, a version-3 one must.
    let Value::Map(top) = msgpack::decode::<Value>(&bytes).unwrap() else {
        panic!()
    };
    let mut v2 = top.clone();
    v2[0].1 = Value::from(2);
    let e = Manifest::parse(&msgpack::encode(&Value::Map(v2)).unwrap()).unwrap_err();
    assert!(e.to_string().contains("prefix_path"), "{e}");
    let mut v3 = top;
    v3.pop();
    let e = Manifest::parse(&msgpack::encode(&Value::Map(v3)).unwrap()).unwrap_err();
    assert!(e.to_string().contains("prefix_path"), "{e}");
}

#[test]
fn hostile_prefix_paths_and_paths_at_the_prefix_are_rejected() {
    // The root is one validated relative path: no `..`, not absolute.
    for prefix in [
        "",
        "/usr/lib",
        "../usr/lib",
        "usr/../lib",
        "usr//lib",
        "usr/lib/",
        "usr/.kpack",
        "usr/lib\\x",
    ] {
        let mut m = multiarch();
        m.prefix_path = Some(prefix.into());
        assert!(m.to_msgpack().is_err(), "writer accepted {prefix:?}");
        let mut v = msgpack::decode::<Value>(&multiarch().to_msgpack().unwrap()).unwrap();
        let Value::Map(top) = &mut v else { panic!() };
        top[4].1 = s(prefix);
        let e = Manifest::parse(&msgpack::encode(&v).unwrap()).unwrap_err();
        assert!(e.to_string().contains("prefix path"), "{prefix:?}: {e}");
    }
    // A database file at the prefix or one of the directories above it.
    for path in ["usr/lib/x86_64-linux-gnu", "usr/lib", "usr"] {
        let mut m = multiarch();
        m.database_files[0].path = path.into();
        let e = Manifest::parse(&m.to_msgpack().unwrap()).unwrap_err();
        assert!(e.to_string().contains("is the prefix"), "{path}: {e}");
    }
    // Still the database-path validator for every path.
    let mut m = multiarch();
    m.database_files[0].path = "usr/../etc/passwd".into();
    assert!(m.to_msgpack().is_err());
    for key in [
        "../../../../../../../../../../../../../../../../../x",
        "../a/../b",
        "../../",
        "/x",
        "../.kpack/x.kpm",
    ] {
        assert!(
            layout::names::check(layout::names::NameKind::DatabaseKey, key).is_err(),
            "{key}"
        );
    }
}

#[test]
fn truncation_at_every_offset() {
    for bytes in [
        sample_manifest().to_msgpack().unwrap(),
        with_databases().to_msgpack().unwrap(),
        legacy_manifest_bytes(),
    ] {
        for cut in 0..bytes.len() {
            assert!(Manifest::parse(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut extra = bytes.clone();
        extra.push(0xc0);
        assert!(Manifest::parse(&extra).is_err(), "trailing byte");
    }
}

proptest! {
    #[test]
    fn any_manifest_round_trips(
        component in "[a-z][a-z_]{0,11}",
        files in prop::collection::vec(
            ("[a-zA-Z0-9][a-zA-Z0-9_.-]{0,15}\\.kpack", "gfx[0-9a-zX]{2,6}", prop::collection::vec("gfx[0-9a-z:+-]{2,12}", 0..5), any::<u64>(), any::<[u8; 32]>()),
            0..5,
        ),
    ) {
        let mut seen = std::collections::BTreeSet::new();
        let kpack_files: Vec<ManifestFile> = files
            .into_iter()
            .filter(|(name, ..)| !name.contains("..") && name != "." && seen.insert(name.clone()))
            .map(|(filename, family, architectures, size, sha)| ManifestFile {
                filename, family, architectures, size, sha256: Some(sha), transport: None,
            })
            .collect();
        let m = Manifest { component, kpack_files, database_files: Vec::new(), prefix_path: None };
        prop_assert_eq!(Manifest::parse(&m.to_msgpack().unwrap()).unwrap(), m);
    }
}

#[test]
fn the_transport_key_round_trips_and_an_unknown_format_leaves_the_manifest_readable() {
    use rocm_kpack_format::manifest::ArchiveTransport;
    let mut m = sample_manifest();
    let solid = ArchiveTransport::Solid {
        size: 123_456,
        sha256: [0x5a; 32],
        level: Some(19),
    };
    m.kpack_files[0].transport = Some(solid.clone());
    m.kpack_files[1].transport = Some(ArchiveTransport::Solid {
        size: 7,
        sha256: [1; 32],
        level: None,
    });
    let bytes = m.to_msgpack().unwrap();
    let back = Manifest::parse(&bytes).unwrap();
    assert_eq!(back, m);
    // An optional key: the version stays 1.
    assert_eq!(back.format_version(), 1);
    let mut v = msgpack::decode::<Value>(&bytes).unwrap();
    let t = file0(&mut v)
        .iter()
        .find(|(k, _)| k.as_str() == Some("transport"))
        .map(|(_, t)| t.clone())
        .unwrap();
    let keys: Vec<&str> = t
        .as_map()
        .unwrap()
        .iter()
        .map(|(k, _)| k.as_str().unwrap())
        .collect();
    assert_eq!(keys, ["format", "size", "sha256", "level"]);

    // A newer writer's format, with keys this reader does not know.
    set(
        file0(&mut v),
        "transport",
        Value::Map(vec![
            (s("format"), Value::from(2)),
            (s("chunks"), Value::Array(vec![Value::from(1)])),
        ]),
    );
    let newer = Manifest::parse(&msgpack::encode(&v).unwrap()).unwrap();
    assert_eq!(
        newer.kpack_files[0].transport,
        Some(ArchiveTransport::Unsupported { format: 2 })
    );
    assert_eq!(newer.kpack_files[0].sha256, m.kpack_files[0].sha256);

    // Format 1 with a damaged key is refused, not half-read.
    for (key, bad) in [
        ("sha256", Value::Binary(vec![0; 31])),
        ("size", s("big")),
        ("level", s("high")),
    ] {
        let mut v = msgpack::decode::<Value>(&bytes).unwrap();
        let f = file0(&mut v);
        let Some((_, Value::Map(t))) = f.iter_mut().find(|(k, _)| k.as_str() == Some("transport"))
        else {
            panic!()
        };
        set(t, key, bad);
        let e = Manifest::parse(&msgpack::encode(&v).unwrap()).unwrap_err();
        assert!(
            e.to_string().contains(&format!("transport.{key}")),
            "{key}: {e}"
        );
    }
}
