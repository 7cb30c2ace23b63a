//! MessagePack for every format in this crate: serde types, decoded and
//! encoded by `rmp-serde`, behind one bounded scanner.
//!
//! Untrusted bytes go through [`measure`] before `rmp-serde` sees them. The
//! scanner walks one value without recursion and without allocating for
//! it: nesting deeper than [`MAX_DEPTH`] is refused, every declared length
//! (string, binary, extension payload, element and pair counts) is checked
//! against the bytes that remain, `str` payloads must be UTF-8 and map keys
//! must be `str` (all our formats key their maps by name). What passes is
//! then exactly the slice handed to `rmp-serde`, so no length prefix it
//! reads can claim more than the input holds, and serde's own cautious
//! preallocation (capped at 1 MiB per container) is the most a declared
//! count can reserve. [`value_len`] runs the same scanner over bytes behind
//! a raw pointer, reading type bytes and length fields only.
//!
//! The wire types are strict where serde is lenient: [`Str`] accepts only a
//! `str` (serde's `String` also takes a `bin` holding UTF-8) and [`Bin`]
//! only a `bin`. Integers keep serde's rule, which is also ours: a signed
//! encoding of a non-negative number is read as unsigned.
//!
//! Encoding ([`encode`]) writes structs as maps keyed by field name, in
//! field order; strings as `str`, never `bin`; integers in their smallest
//! encoding (`rmp::encode::write_uint`/`write_sint`).

use std::collections::HashSet;
use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;

use rmp::Marker;
use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde::ser::{Serialize, Serializer};

use crate::error::{Error, Result};

/// A decoded MessagePack value of any shape (`rmpv`), for free-form data
/// such as a TOC entry's `metadata` map.
pub use rmpv::Value;

/// Nesting limit: deeper input is refused by the scanner, which bounds the
/// recursion (and stack use) of the serde decoders behind it. Our formats
/// need depth 4.
pub const MAX_DEPTH: usize = 64;

/// Preallocation cap of our own containers ([`Pairs`]): a declared count is
/// trusted up to this many slots; longer maps grow as entries decode.
const PREALLOC_LIMIT: usize = 1024;

/// Where the scanner reads: a slice, or single bytes behind a pointer.
trait Source {
    /// The byte at `at`; only asked for `at` below the scan's bound.
    fn byte(&mut self, at: usize) -> Option<u8>;
    /// Whether the `len` bytes at `at` (below the bound) are UTF-8. A source
    /// whose payloads must not be read answers yes: those are checked when
    /// the bytes are decoded.
    fn utf8(&mut self, at: usize, len: usize) -> bool;
}

impl Source for &[u8] {
    fn byte(&mut self, at: usize) -> Option<u8> {
        self.get(at).copied()
    }

    fn utf8(&mut self, at: usize, len: usize) -> bool {
        at.checked_add(len)
            .and_then(|end| self.get(at..end))
            .is_some_and(|s| std::str::from_utf8(s).is_ok())
    }
}

/// Bytes read one at a time through a closure (memory behind a pointer).
struct Probe<F>(F);

impl<F: FnMut(usize) -> u8> Source for Probe<F> {
    fn byte(&mut self, at: usize) -> Option<u8> {
        Some((self.0)(at))
    }

    fn utf8(&mut self, _: usize, _: usize) -> bool {
        true
    }
}

/// What a type byte announces, from `rmp`'s [`Marker`].
enum Shape {
    /// This many payload bytes follow the header.
    Scalar(u64),
    Str(u64),
    /// Nested values follow (2 per map pair).
    Nested {
        values: u64,
        map: bool,
    },
}

/// The one scanner: the length of the value at offset 0 of `src`, reading
/// no byte at or past `max`. Error offsets are `base` plus the position.
fn scan<S: Source>(mut src: S, max: usize, base: u64) -> Result<usize> {
    let error = |pos: usize, detail: String| Error::Msgpack {
        offset: base.saturating_add(pos as u64),
        detail,
    };
    let short = |pos: usize, need: u64| {
        error(
            pos,
            format!(
                "needs {need} more bytes, {} remain (truncated, or longer than {max} bytes)",
                max.saturating_sub(pos)
            ),
        )
    };
    let mut pos = 0usize;
    // A length field of `n` big-endian bytes.
    let field = |src: &mut S, pos: &mut usize, n: usize| -> Result<u64> {
        let mut v = 0u64;
        for i in 0..n {
            let b = pos
                .checked_add(i)
                .filter(|&at| at < max)
                .and_then(|at| src.byte(at))
                .ok_or_else(|| short(*pos, n as u64))?;
            v = (v << 8) | u64::from(b);
        }
        *pos += n;
        Ok(v)
    };
    // Values still to walk at the current level (and whether it is a map),
    // and those of the enclosing levels: depth-first, without recursion.
    let mut pending: u64 = 1;
    let mut in_map = false;
    let mut outer: Vec<(u64, bool)> = Vec::new();
    loop {
        if pending == 0 {
            match outer.pop() {
                Some((p, m)) => {
                    (pending, in_map) = (p, m);
                    continue;
                }
                None => return Ok(pos),
            }
        }
        // Map pairs are counted down from an even number: keys come first.
        let is_key = in_map && pending.is_multiple_of(2);
        pending -= 1;
        let at = pos;
        let marker = Marker::from_u8(field(&mut src, &mut pos, 1)? as u8);
        let shape = match marker {
            Marker::FixPos(_) | Marker::FixNeg(_) | Marker::Null | Marker::True | Marker::False => {
                Shape::Scalar(0)
            }
            Marker::U8 | Marker::I8 => Shape::Scalar(1),
            Marker::U16 | Marker::I16 => Shape::Scalar(2),
            Marker::U32 | Marker::I32 | Marker::F32 => Shape::Scalar(4),
            Marker::U64 | Marker::I64 | Marker::F64 => Shape::Scalar(8),
            Marker::FixStr(n) => Shape::Str(u64::from(n)),
            Marker::Str8 => Shape::Str(field(&mut src, &mut pos, 1)?),
            Marker::Str16 => Shape::Str(field(&mut src, &mut pos, 2)?),
            Marker::Str32 => Shape::Str(field(&mut src, &mut pos, 4)?),
            Marker::Bin8 => Shape::Scalar(field(&mut src, &mut pos, 1)?),
            Marker::Bin16 => Shape::Scalar(field(&mut src, &mut pos, 2)?),
            Marker::Bin32 => Shape::Scalar(field(&mut src, &mut pos, 4)?),
            // Extension payloads follow a one-byte type tag.
            Marker::FixExt1 => Shape::Scalar(2),
            Marker::FixExt2 => Shape::Scalar(3),
            Marker::FixExt4 => Shape::Scalar(5),
            Marker::FixExt8 => Shape::Scalar(9),
            Marker::FixExt16 => Shape::Scalar(17),
            Marker::Ext8 => Shape::Scalar(field(&mut src, &mut pos, 1)? + 1),
            Marker::Ext16 => Shape::Scalar(field(&mut src, &mut pos, 2)? + 1),
            Marker::Ext32 => Shape::Scalar(field(&mut src, &mut pos, 4)? + 1),
            Marker::FixArray(n) => Shape::Nested {
                values: u64::from(n),
                map: false,
            },
            Marker::Array16 => Shape::Nested {
                values: field(&mut src, &mut pos, 2)?,
                map: false,
            },
            Marker::Array32 => Shape::Nested {
                values: field(&mut src, &mut pos, 4)?,
                map: false,
            },
            Marker::FixMap(n) => Shape::Nested {
                values: 2 * u64::from(n),
                map: true,
            },
            Marker::Map16 => Shape::Nested {
                values: 2 * field(&mut src, &mut pos, 2)?,
                map: true,
            },
            Marker::Map32 => Shape::Nested {
                values: 2 * field(&mut src, &mut pos, 4)?,
                map: true,
            },
            Marker::Reserved => return Err(error(at, "reserved type byte 0xc1".into())),
        };
        if is_key && !matches!(shape, Shape::Str(_)) {
            return Err(error(
                at,
                format!(
                    "map key must be a str, found type byte {:#04x}",
                    marker.to_u8()
                ),
            ));
        }
        let remain = max.saturating_sub(pos) as u64;
        match shape {
            Shape::Scalar(n) | Shape::Str(n) if n > remain => return Err(short(pos, n)),
            Shape::Str(n) => {
                // `n <= remain`, so it fits a usize.
                if !src.utf8(pos, n as usize) {
                    return Err(error(at, "str is not valid UTF-8".into()));
                }
                pos += n as usize;
            }
            Shape::Scalar(n) => pos += n as usize,
            Shape::Nested { values, map } => {
                // Every value needs at least one byte: impossible counts
                // fail before they are walked.
                if values > remain {
                    return Err(error(
                        at,
                        format!(
                            "{} of {values} values needs at least {values} bytes, {remain} remain",
                            if map { "map" } else { "array" }
                        ),
                    ));
                }
                if values > 0 {
                    if outer.len() + 1 >= MAX_DEPTH {
                        return Err(error(at, format!("nesting deeper than {MAX_DEPTH}")));
                    }
                    outer.push((pending, in_map));
                    (pending, in_map) = (values, map);
                }
            }
        }
    }
}

/// Length of the one well-formed MessagePack value at the start of
/// `bytes` (see the module docs for what "well-formed" checks). Error
/// offsets are reported relative to `base` (where `bytes` sit in a file).
pub fn measure(bytes: &[u8], base: u64) -> Result<usize> {
    scan(bytes, bytes.len(), base)
}

/// Length in bytes of the one MessagePack value at offset 0, without
/// decoding it: for bytes behind a raw pointer whose extent is unknown (a
/// marker, `runtime/loader/src/loader/marker_mem.rs`). The scanner of [`measure`]:
/// bytes are read only through `read_byte`, only at offsets below `max`,
/// and only those holding type bytes and length fields (payloads are
/// skipped, not read, so `str` payloads are checked for UTF-8 only when the
/// copied bytes are decoded). A value that would need bytes at or past
/// `max` is an error.
pub fn value_len(read_byte: impl FnMut(usize) -> u8, max: usize) -> Result<usize> {
    scan(Probe(read_byte), max, 0)
}

/// Decodes `T` from exactly one value that spans all of `bytes`; a value
/// that does not fit `T` is an [`Error::Msgpack`] naming the field.
pub fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T> {
    let len = measure(bytes, 0)?;
    if len != bytes.len() {
        return Err(Error::Msgpack {
            offset: len as u64,
            detail: format!("{} trailing bytes after the value", bytes.len() - len),
        });
    }
    deserialize(bytes).map_err(|detail| Error::Msgpack { offset: 0, detail })
}

/// Decodes `T` from `value`, the exact bytes of one value that [`measure`]
/// accepted. On failure the message names where (`toc.lib/x.so#0.gfx90a:
/// ordinal: invalid type ...`); the format's reader wraps it in its own
/// error. The path is worked out on the error path only, by decoding
/// again, so valid input pays nothing for it.
pub(crate) fn deserialize<'a, T: Deserialize<'a>>(
    value: &'a [u8],
) -> std::result::Result<T, String> {
    let first = match T::deserialize(&mut rmp_serde::Deserializer::from_read_ref(value)) {
        Ok(v) => return Ok(v),
        Err(e) => e,
    };
    let mut de = rmp_serde::Deserializer::from_read_ref(value);
    Err(match serde_path_to_error::deserialize::<_, T>(&mut de) {
        Err(e) => {
            let path = e.path().to_string();
            match path.as_str() {
                "" | "." => e.into_inner().to_string(),
                _ => format!("{path}: {}", e.into_inner()),
            }
        }
        Ok(_) => first.to_string(),
    })
}

/// Encodes `v`: structs as maps keyed by field name, in field order.
///
/// A length above 2^32 - 1 is an error, never truncated: [`Str`] and
/// [`Bin`] refuse one. (Containers cannot reach it: 2^32 elements of our
/// types do not fit in memory.)
#[cfg(feature = "write_core")]
pub fn encode<T: Serialize + ?Sized>(v: &T) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    v.serialize(&mut rmp_serde::Serializer::new(&mut buf).with_struct_map())
        .map_err(|e| Error::InvalidArgument(format!("MessagePack encoding failed: {e}")))?;
    Ok(buf)
}

fn len32<E: serde::ser::Error>(what: &str, len: usize) -> std::result::Result<(), E> {
    match u32::try_from(len) {
        Ok(_) => Ok(()),
        Err(_) => Err(E::custom(format_args!(
            "{what} of length {len} exceeds MessagePack's 32-bit length limit"
        ))),
    }
}

/// For `#[serde(default, deserialize_with = "present")]` on an optional
/// field: a key that is there holds a `T`, even when it is `nil` (serde's
/// `Option` would read `nil` as an absent key).
pub(crate) fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> std::result::Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// A MessagePack `str`, borrowed from the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Str<'a>(pub &'a str);

impl Serialize for Str<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        len32("str", self.0.len())?;
        s.serialize_str(self.0)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a str")
            }
            fn visit_borrowed_str<E: de::Error>(
                self,
                s: &'de str,
            ) -> std::result::Result<Self::Value, E> {
                Ok(Str(s))
            }
        }
        d.deserialize_str(V)
    }
}

impl fmt::Display for Str<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// A MessagePack `bin`, borrowed from the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bin<'a>(pub &'a [u8]);

impl Serialize for Bin<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        len32("bin", self.0.len())?;
        s.serialize_bytes(self.0)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Bin<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Bin<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a bin")
            }
            fn visit_borrowed_bytes<E: de::Error>(
                self,
                b: &'de [u8],
            ) -> std::result::Result<Self::Value, E> {
                Ok(Bin(b))
            }
        }
        d.deserialize_bytes(V)
    }
}

/// A struct that must be encoded as a map keyed by field name: serde's
/// derived structs also accept an array of their fields in order, which
/// our formats never write and so must not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Named<T>(pub T);

impl<T> std::ops::Deref for Named<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: Serialize> Serialize for Named<T> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Named<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct MapOnly<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for MapOnly<T> {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<T, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_map(MapOnly(PhantomData)).map(Named)
    }
}

/// A map kept in encoded order, whose keys must be distinct (a repeated
/// key makes "which one wins" reader-dependent). Checked in linear time:
/// a hostile map of a million keys costs a million hash insertions.
#[derive(Debug, Clone, PartialEq)]
pub struct Pairs<K, V>(pub Vec<(K, V)>);

impl<K: Serialize, V: Serialize> Serialize for Pairs<K, V> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

impl<'de, K, V> Deserialize<'de> for Pairs<K, V>
where
    K: Deserialize<'de> + Copy + Eq + Hash + fmt::Display,
    V: Deserialize<'de>,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct PairsVisitor<K, V>(PhantomData<(K, V)>);
        impl<'de, K, V> Visitor<'de> for PairsVisitor<K, V>
        where
            K: Deserialize<'de> + Copy + Eq + Hash + fmt::Display,
            V: Deserialize<'de>,
        {
            type Value = Pairs<K, V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                // Small maps (a TOC entry's arches) compare in place; a
                // set is built only for large ones.
                const LINEAR: usize = 8;
                let cap = map.size_hint().unwrap_or(0).min(PREALLOC_LIMIT);
                let mut out: Vec<(K, V)> = Vec::with_capacity(cap);
                let mut seen: HashSet<K> = HashSet::new();
                while let Some(k) = map.next_key::<K>()? {
                    let repeated = if out.len() < LINEAR {
                        out.iter().any(|(o, _)| *o == k)
                    } else {
                        if seen.is_empty() {
                            seen.extend(out.iter().map(|(o, _)| *o));
                        }
                        !seen.insert(k)
                    };
                    if repeated {
                        return Err(de::Error::custom(format_args!(
                            "key {k:?} repeated",
                            k = k.to_string()
                        )));
                    }
                    out.push((k, map.next_value()?));
                }
                Ok(Pairs(out))
            }
        }
        d.deserialize_map(PairsVisitor(PhantomData))
    }
}

/// Whether `v` is a map whose keys are distinct strings (what a TOC
/// entry's `metadata` must be).
pub fn is_str_keyed_map(v: &Value) -> bool {
    let Some(pairs) = v.as_map() else {
        return false;
    };
    let mut seen = HashSet::with_capacity(pairs.len());
    pairs
        .iter()
        .all(|(k, _)| k.as_str().is_some_and(|k| seen.insert(k)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_uint(v: u64) -> Vec<u8> {
        encode(&v).unwrap_or_default()
    }

    #[test]
    fn smallest_int_encodings() -> Result<()> {
        let cases: &[(u64, &[u8])] = &[
            (0, &[0x00]),
            (127, &[0x7f]),
            (128, &[0xcc, 0x80]),
            (255, &[0xcc, 0xff]),
            (256, &[0xcd, 0x01, 0x00]),
            (65536, &[0xce, 0, 1, 0, 0]),
            (1 << 32, &[0xcf, 0, 0, 0, 1, 0, 0, 0, 0]),
        ];
        for (v, want) in cases {
            let buf = write_uint(*v);
            assert_eq!(&buf, want, "encoding of {v}");
            assert_eq!(decode::<u64>(&buf)?, *v);
        }
        Ok(())
    }

    #[test]
    fn str_is_never_bin_and_bin_is_never_str() -> Result<()> {
        let long = "x".repeat(40);
        let buf = encode(&Str(&long))?;
        assert_eq!(buf.first(), Some(&0xd9));
        assert_eq!(decode::<Str<'_>>(&buf)?, Str(&long));
        assert!(decode::<Bin<'_>>(&buf).is_err());
        let bin = encode(&Bin(b"xy"))?;
        assert_eq!(bin, [0xc4, 2, b'x', b'y']);
        assert!(decode::<Str<'_>>(&bin).is_err());
        // serde's own String would take the bin; ours does not.
        assert!(decode::<String>(&bin).is_ok());
        Ok(())
    }

    #[test]
    fn depth_limit() {
        let deep = vec![0x91u8; MAX_DEPTH + 1];
        assert!(matches!(decode::<Value>(&deep), Err(Error::Msgpack { .. })));
    }

    #[test]
    fn huge_declared_lengths_fail_before_allocating() {
        for bytes in [
            &[0xdd, 0xff, 0xff, 0xff, 0xff][..],
            &[0xdf, 0xff, 0xff, 0xff, 0xff],
            &[0xdb, 0xff, 0xff, 0xff, 0xff],
            &[0xc6, 0xff, 0xff, 0xff, 0xff],
            &[0xc9, 0xff, 0xff, 0xff, 0xff, 0x01],
        ] {
            assert!(measure(bytes, 0).is_err(), "{bytes:02x?}");
            assert!(decode::<Value>(bytes).is_err(), "{bytes:02x?}");
        }
    }

    #[test]
    fn signed_non_negative_reads_as_unsigned() -> Result<()> {
        assert_eq!(decode::<u64>(&[0xd0, 0x05])?, 5);
        assert!(decode::<u64>(&[0xd0, 0xfb]).is_err());
        assert!(decode::<u64>(&[0xcb, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
        Ok(())
    }

    #[test]
    fn value_round_trip() -> Result<()> {
        let v = Value::Map(vec![
            (
                Value::from("a"),
                Value::Array(vec![Value::Nil, Value::Boolean(true)]),
            ),
            (Value::from("b"), Value::Binary(vec![1, 2, 3])),
            (Value::from("c"), Value::from(-300)),
            (Value::from("d"), Value::F64(1.5)),
            (Value::from("e"), Value::Ext(7, vec![9; 3])),
        ]);
        let bytes = encode(&v)?;
        assert_eq!(decode::<Value>(&bytes)?, v);
        // Same bytes as rmpv's own writer.
        let mut direct = Vec::new();
        rmpv::encode::write_value(&mut direct, &v)
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        assert_eq!(bytes, direct);
        Ok(())
    }

    #[test]
    fn keys_must_be_str_and_distinct() {
        // {1: nil}
        assert!(measure(&[0x81, 0x01, 0xc0], 0).is_err());
        // {"a": nil, "a": nil}
        let dup = [0x82, 0xa1, b'a', 0xc0, 0xa1, b'a', 0xc0];
        assert!(measure(&dup, 0).is_ok());
        let e = decode::<Pairs<Str<'_>, ()>>(&dup)
            .map(|_| ())
            .expect_err("repeated key");
        assert!(e.to_string().contains("repeated"), "{e}");
        let ok = [0x82, 0xa1, b'a', 0xc0, 0xa1, b'b', 0xc0];
        assert!(decode::<Pairs<Str<'_>, ()>>(&ok).is_ok());
        let mut many = vec![0xde, 0, 20];
        for i in 0..20u8 {
            many.extend([0xa1, b'a' + (i % 19), 0xc0]);
        }
        let e = decode::<Pairs<Str<'_>, ()>>(&many)
            .map(|_| ())
            .expect_err("repeated key");
        assert!(e.to_string().contains("repeated"), "{e}");
        assert!(is_str_keyed_map(&Value::Map(vec![(
            Value::from("a"),
            Value::Nil
        )])));
        assert!(!is_str_keyed_map(&Value::Map(vec![(
            Value::from(1),
            Value::Nil
        )])));
    }

    #[test]
    fn invalid_utf8_is_refused_by_the_scanner() {
        assert!(measure(&[0xa2, 0xff, 0xfe], 0).is_err());
        // value_len does not read payloads.
        assert_eq!(len_of(&[0xa2, 0xff, 0xfe]).ok(), Some(3));
    }

    #[test]
    fn structs_are_maps_never_arrays() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct T {
            a: u64,
        }
        assert!(decode::<T>(&[0x91, 0x01]).is_ok(), "serde's own leniency");
        assert!(decode::<Named<T>>(&[0x91, 0x01]).is_err());
        assert_eq!(
            decode::<Named<T>>(&[0x81, 0xa1, b'a', 0x01])
                .map(|t| t.a)
                .ok(),
            Some(1)
        );
    }

    #[test]
    fn errors_name_the_field() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct T<'a> {
            #[serde(borrow)]
            name: Str<'a>,
        }
        // {"name": 1}
        let e = decode::<T<'_>>(&[0x81, 0xa4, b'n', b'a', b'm', b'e', 0x01]).expect_err("int name");
        assert!(e.to_string().contains("name: invalid type"), "{e}");
    }

    fn len_of(bytes: &[u8]) -> Result<usize> {
        value_len(|i| bytes.get(i).copied().unwrap_or(0), bytes.len())
    }

    #[test]
    fn value_len_measures_nested_values_exactly() -> Result<()> {
        // {"a": [1, "xy", {"k": nil}], "b": 0xcd 0x0102}
        let v = [
            0x82, 0xa1, b'a', 0x93, 0x01, 0xa2, b'x', b'y', 0x81, 0xa1, b'k', 0xc0, 0xa1, b'b',
            0xcd, 0x01, 0x02,
        ];
        let mut padded = v.to_vec();
        padded.extend_from_slice(&[0xff; 8]);
        assert_eq!(len_of(&padded)?, v.len());
        assert_eq!(measure(&padded, 0)?, v.len());
        // rmp-serde consumes exactly as much.
        let mut de = rmp_serde::Deserializer::from_read_ref(&padded);
        Value::deserialize(&mut de).map_err(|e| Error::InvalidArgument(e.to_string()))?;
        let mut rest = &padded[..];
        rmpv::decode::read_value(&mut rest).map_err(|e| Error::InvalidArgument(e.to_string()))?;
        assert_eq!(padded.len() - rest.len(), v.len());
        Ok(())
    }

    #[test]
    fn value_len_never_reads_payloads_or_past_the_value() -> Result<()> {
        let v = [0x92, 0xd9, 0x03, b'a', b'b', b'c', 0xc3];
        let mut read = Vec::new();
        let n = value_len(
            |i| {
                read.push(i);
                v.get(i).copied().unwrap_or(0)
            },
            1 << 16,
        )?;
        assert_eq!(n, v.len());
        // Type bytes and the str's length field; its payload is skipped.
        assert_eq!(read, [0, 1, 2, 6]);
        Ok(())
    }

    #[test]
    fn value_len_rejects_truncation_huge_counts_reserved_and_depth() {
        assert!(len_of(&[0xa5, b'a']).is_err());
        assert!(len_of(&[0xdd, 0xff, 0xff, 0xff, 0xff, 0x00]).is_err());
        assert!(len_of(&[0xc1]).is_err());
        assert!(len_of(&[]).is_err());
        let mut deep = vec![0x91u8; MAX_DEPTH - 1];
        deep.push(0x00);
        assert_eq!(len_of(&deep).ok(), Some(deep.len()));
        assert!(decode::<Value>(&deep).is_ok());
        let mut deeper = vec![0x91u8; MAX_DEPTH];
        deeper.push(0x00);
        assert!(len_of(&deeper).is_err());
        assert!(decode::<Value>(&deeper).is_err());
    }

    #[test]
    fn scanner_agrees_with_rmpv_on_every_type_byte() {
        // Each type byte followed by enough empty strs for any header:
        // where the scanner accepts, rmpv reads the same length.
        for tag in 0..=255u8 {
            let mut bytes = vec![tag];
            bytes.extend_from_slice(&[0xa0; 40]);
            let scanned = measure(&bytes, 0).ok();
            let mut rest = &bytes[..];
            let read = rmpv::decode::read_value(&mut rest)
                .ok()
                .map(|_| bytes.len() - rest.len());
            // value_len reads no payload, so it may accept what measure
            // refuses (a str of 0xa0 bytes is not UTF-8), never the reverse.
            if let Some(n) = scanned {
                assert_eq!(Some(n), read, "type byte {tag:#04x}");
                assert_eq!(len_of(&bytes).ok(), Some(n), "type byte {tag:#04x}");
            }
        }
    }
}
