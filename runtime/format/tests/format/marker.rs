//! `.rocm_kpack_ref` marker: exact encoding, strict parsing.

use crate::archive_common::sample_marker;
use proptest::prelude::*;
use rocm_kpack_format::marker::Marker;
use rocm_kpack_format::msgpack::{self, Value};

fn s(x: &str) -> Value {
    Value::String(x.into())
}

fn enc(v: &Value) -> Vec<u8> {
    msgpack::encode(v).unwrap()
}

#[test]
fn encoding_is_exact() {
    let m = Marker {
        kpack_search_paths: vec!["a.kpm".into()],
        kernel_name: "lib/x.so".into(),
    };
    let mut want = vec![0x82, 0xb2];
    want.extend(b"kpack_search_paths");
    want.extend([0x91, 0xa5]);
    want.extend(b"a.kpm");
    want.push(0xab);
    want.extend(b"kernel_name");
    want.push(0xa8);
    want.extend(b"lib/x.so");
    assert_eq!(m.to_msgpack().unwrap(), want);
    assert_eq!(Marker::parse(&want).unwrap(), m);
}

#[test]
fn round_trip_and_determinism() {
    let m = sample_marker();
    let bytes = m.to_msgpack().unwrap();
    assert_eq!(m.to_msgpack().unwrap(), bytes);
    assert_eq!(Marker::parse(&bytes).unwrap(), m);
}

#[test]
fn key_order_on_read_does_not_matter_and_padding_is_accepted() {
    let v = Value::Map(vec![
        (s("kernel_name"), s("k")),
        (
            s("kpack_search_paths"),
            Value::Array(vec![s("p1"), s("p2")]),
        ),
    ]);
    let mut bytes = enc(&v);
    let m = Marker::parse(&bytes).unwrap();
    assert_eq!(m.kernel_name, "k");
    assert_eq!(m.kpack_search_paths, ["p1", "p2"]);
    bytes.extend([0u8; 13]);
    assert_eq!(Marker::parse(&bytes).unwrap(), m);
    bytes.push(1);
    assert!(Marker::parse(&bytes).is_err());
}

#[test]
fn wrong_types_and_keys_are_rejected() {
    let paths = || (s("kpack_search_paths"), Value::Array(vec![s("p")]));
    let name = || (s("kernel_name"), s("k"));
    let cases: Vec<(&str, Value)> = vec![
        ("not a map", Value::Array(vec![s("p")])),
        ("missing name", Value::Map(vec![paths()])),
        ("missing paths", Value::Map(vec![name()])),
        (
            "extra key",
            Value::Map(vec![paths(), name(), (s("x"), Value::Nil)]),
        ),
        ("duplicate key", Value::Map(vec![paths(), name(), name()])),
        (
            "bin key",
            Value::Map(vec![
                paths(),
                (Value::Binary(b"kernel_name".to_vec()), s("k")),
            ]),
        ),
        (
            "name bin",
            Value::Map(vec![
                paths(),
                (s("kernel_name"), Value::Binary(b"k".to_vec())),
            ]),
        ),
        (
            "name int",
            Value::Map(vec![paths(), (s("kernel_name"), Value::from(1))]),
        ),
        (
            "paths str",
            Value::Map(vec![(s("kpack_search_paths"), s("p")), name()]),
        ),
        (
            "path bin",
            Value::Map(vec![
                (
                    s("kpack_search_paths"),
                    Value::Array(vec![Value::Binary(b"p".to_vec())]),
                ),
                name(),
            ]),
        ),
        (
            "path nil",
            Value::Map(vec![
                (s("kpack_search_paths"), Value::Array(vec![Value::Nil])),
                name(),
            ]),
        ),
    ];
    for (why, v) in cases {
        assert!(Marker::parse(&enc(&v)).is_err(), "{why}");
    }
}

#[test]
fn truncation_and_huge_counts() {
    let bytes = sample_marker().to_msgpack().unwrap();
    for cut in 0..bytes.len() {
        assert!(Marker::parse(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    for hostile in [
        &[0xdf, 0xff, 0xff, 0xff, 0xff][..],
        &[0x81, 0xb2],
        &[0x82, 0xa1, b'a', 0xdd, 0xff, 0xff, 0xff, 0xff],
        &[0xc1],
        &[
            0x81, 0xab, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xa0,
        ],
    ] {
        assert!(Marker::parse(hostile).is_err(), "{hostile:02x?}");
    }
}

proptest! {
    #[test]
    fn any_marker_round_trips(
        paths in prop::collection::vec(".{0,40}", 0..6),
        name in ".{0,60}",
    ) {
        let m = Marker { kpack_search_paths: paths, kernel_name: name };
        let bytes = m.to_msgpack().unwrap();
        prop_assert_eq!(Marker::parse(&bytes).unwrap(), m);
    }
}
