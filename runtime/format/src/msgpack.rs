//! A small, bounded MessagePack reader and the writer helpers every format
//! in this crate uses.
//!
//! The reader decodes untrusted bytes into a [`Value`] tree. It never
//! recurses deeper than [`MAX_DEPTH`] and checks every declared length
//! against the bytes that remain before allocating, so a hostile length
//! prefix cannot make it reserve more memory than the input justifies.
//! [`value_len`] measures one value without decoding it, for bytes behind a
//! raw pointer; both take type bytes apart through the same `Head`.
//!
//! The writer helpers wrap `rmp::encode`: strings are always `str` (never
//! `bin`), integers always take their smallest encoding, and lengths that do
//! not fit MessagePack's 32-bit limit are an error instead of being
//! truncated.

use crate::error::{Error, Result};

/// Nesting limit of [`Reader`]: deeper input is rejected, which bounds the
/// recursion (and stack use) of the decoder. Our formats need depth 4.
pub const MAX_DEPTH: usize = 64;

/// Preallocation cap for arrays and maps: a declared element count is only
/// trusted up to this many slots; longer containers grow as elements
/// actually decode.
const PREALLOC_LIMIT: usize = 1024;

/// One decoded MessagePack value. Maps keep their encoded order.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Nil,
    Bool(bool),
    /// Any non-negative integer, whatever width it was encoded with.
    UInt(u64),
    /// A negative integer.
    Int(i64),
    F32(f32),
    F64(f64),
    /// A `str` (valid UTF-8).
    Str(String),
    /// A `bin`.
    Bin(Vec<u8>),
    Array(Vec<Value>),
    /// Key/value pairs in encoded order (duplicates are kept; see
    /// [`Value::map_entries`] for a checked view).
    Map(Vec<(Value, Value)>),
    /// An extension value: type tag and payload.
    Ext(i8, Vec<u8>),
}

impl Value {
    /// The string if this is a `str`.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The integer if this is a non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::UInt(v) => Some(*v),
            _ => None,
        }
    }

    /// The bytes if this is a `bin`.
    pub fn as_bin(&self) -> Option<&[u8]> {
        match self {
            Value::Bin(b) => Some(b),
            _ => None,
        }
    }

    /// The elements if this is an array.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The pairs if this is a map.
    pub fn as_map(&self) -> Option<&[(Value, Value)]> {
        match self {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }

    /// The value stored under the string key `key`, if this is a map.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.as_map()?
            .iter()
            .find(|(k, _)| k.as_str() == Some(key))
            .map(|(_, v)| v)
    }

    /// The pairs of a map whose keys are all distinct strings, in encoded
    /// order. `None` if this is not a map, a key is not a `str`, or a key
    /// repeats (a repeated key makes "which one wins" reader-dependent).
    pub fn map_entries(&self) -> Option<Vec<(&str, &Value)>> {
        let map = self.as_map()?;
        let mut out: Vec<(&str, &Value)> = Vec::with_capacity(map.len());
        // Hashed: a map of n keys costs O(n), so a hostile TOC with a
        // million keys opens in linear time.
        let mut seen: std::collections::HashSet<&str> =
            std::collections::HashSet::with_capacity(map.len());
        for (k, v) in map {
            let k = k.as_str()?;
            if !seen.insert(k) {
                return None;
            }
            out.push((k, v));
        }
        Some(out)
    }

    /// A short name of this value's type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Nil => "nil",
            Value::Bool(_) => "bool",
            Value::UInt(_) | Value::Int(_) => "int",
            Value::F32(_) | Value::F64(_) => "float",
            Value::Str(_) => "str",
            Value::Bin(_) => "bin",
            Value::Array(_) => "array",
            Value::Map(_) => "map",
            Value::Ext(..) => "ext",
        }
    }
}

/// Decodes exactly one value that spans all of `bytes`.
pub fn decode(bytes: &[u8]) -> Result<Value> {
    let mut reader = Reader::new(bytes);
    let value = reader.read_value()?;
    if reader.remaining() != 0 {
        return Err(reader.error(format!(
            "{} trailing bytes after the value",
            reader.remaining()
        )));
    }
    Ok(value)
}

/// A bounded MessagePack decoder over a byte slice.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    base: u64,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader {
            buf,
            pos: 0,
            base: 0,
        }
    }

    /// A reader whose error offsets are reported relative to `base` (the
    /// position of `buf` inside its file).
    pub fn with_base_offset(buf: &'a [u8], base: u64) -> Self {
        Reader { buf, pos: 0, base }
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not consumed yet.
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Decodes the next value.
    pub fn read_value(&mut self) -> Result<Value> {
        self.value(0)
    }

    fn error(&self, detail: impl Into<String>) -> Error {
        Error::Msgpack {
            offset: self.base.saturating_add(self.pos as u64),
            detail: detail.into(),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.buf.len())
            .ok_or_else(|| {
                self.error(format!(
                    "needs {n} bytes, {} remain (truncated?)",
                    self.remaining()
                ))
            })?;
        let out = self
            .buf
            .get(self.pos..end)
            .ok_or_else(|| self.error("out of range"))?;
        self.pos = end;
        Ok(out)
    }

    fn take_array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let bytes = self.take(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take_array::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_be_bytes(self.take_array()?))
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_be_bytes(self.take_array()?))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_be_bytes(self.take_array()?))
    }

    /// A length read from the input, converted to usize and checked against
    /// the remaining bytes: each of `len` items needs at least `min_item`
    /// bytes, so a longer claim cannot be honest.
    fn checked_len(&self, len: u64, min_item: usize, what: &str) -> Result<usize> {
        let len = usize::try_from(len)
            .map_err(|_| self.error(format!("{what} length {len} too large")))?;
        let need = len
            .checked_mul(min_item)
            .ok_or_else(|| self.error(format!("{what} length {len} too large")))?;
        if need > self.remaining() {
            return Err(self.error(format!(
                "{what} of length {len} needs at least {need} bytes, {} remain",
                self.remaining()
            )));
        }
        Ok(len)
    }

    fn str_body(&mut self, len: u64) -> Result<Value> {
        let at = self.pos;
        let len = self.checked_len(len, 1, "str")?;
        let bytes = self.take(len)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(Value::Str(s.to_owned())),
            Err(e) => Err(Error::Msgpack {
                offset: self.base.saturating_add(at as u64),
                detail: format!("str is not valid UTF-8: {e}"),
            }),
        }
    }

    fn bin_body(&mut self, len: u64) -> Result<Value> {
        let len = self.checked_len(len, 1, "bin")?;
        Ok(Value::Bin(self.take(len)?.to_vec()))
    }

    fn ext_body(&mut self, len: u64) -> Result<Value> {
        let tag = i8::from_be_bytes(self.take_array()?);
        let len = self.checked_len(len, 1, "ext")?;
        Ok(Value::Ext(tag, self.take(len)?.to_vec()))
    }

    fn array_body(&mut self, len: u64, depth: usize) -> Result<Value> {
        let len = self.checked_len(len, 1, "array")?;
        let mut items = Vec::with_capacity(len.min(PREALLOC_LIMIT));
        for _ in 0..len {
            items.push(self.value(depth + 1)?);
        }
        Ok(Value::Array(items))
    }

    fn map_body(&mut self, len: u64, depth: usize) -> Result<Value> {
        let len = self.checked_len(len, 2, "map")?;
        let mut pairs = Vec::with_capacity(len.min(PREALLOC_LIMIT));
        for _ in 0..len {
            let k = self.value(depth + 1)?;
            let v = self.value(depth + 1)?;
            pairs.push((k, v));
        }
        Ok(Value::Map(pairs))
    }

    /// `n` big-endian bytes as an integer (a length field).
    fn be(&mut self, n: usize) -> Result<u64> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |v, &b| (v << 8) | u64::from(b)))
    }

    fn value(&mut self, depth: usize) -> Result<Value> {
        if depth >= MAX_DEPTH {
            return Err(self.error(format!("nesting deeper than {MAX_DEPTH}")));
        }
        let tag = self.u8()?;
        let head =
            Head::read(tag, |n| self.be(n))?.ok_or_else(|| self.error("reserved marker 0xc1"))?;
        Ok(match head {
            Head::Nil => Value::Nil,
            Head::Bool(b) => Value::Bool(b),
            Head::FixInt(v) => int(v),
            Head::UInt(1) => Value::UInt(u64::from(self.u8()?)),
            Head::UInt(2) => Value::UInt(u64::from(self.u16()?)),
            Head::UInt(4) => Value::UInt(u64::from(self.u32()?)),
            Head::UInt(_) => Value::UInt(self.u64()?),
            Head::Int(1) => int(i64::from(i8::from_be_bytes(self.take_array()?))),
            Head::Int(2) => int(i64::from(i16::from_be_bytes(self.take_array()?))),
            Head::Int(4) => int(i64::from(i32::from_be_bytes(self.take_array()?))),
            Head::Int(_) => int(i64::from_be_bytes(self.take_array()?)),
            Head::Float(4) => Value::F32(f32::from_be_bytes(self.take_array()?)),
            Head::Float(_) => Value::F64(f64::from_be_bytes(self.take_array()?)),
            Head::Str(n) => return self.str_body(n),
            Head::Bin(n) => return self.bin_body(n),
            Head::Ext(n) => return self.ext_body(n),
            Head::Array(n) => return self.array_body(n, depth),
            Head::Map(n) => return self.map_body(n, depth),
        })
    }
}

/// What a type byte announces: the one place that knows MessagePack's type
/// bytes, shared by [`Reader`] and [`value_len`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Head {
    Nil,
    Bool(bool),
    /// A fixint: the value is the type byte itself.
    FixInt(i64),
    /// Unsigned, signed or float number of this many payload bytes.
    UInt(u8),
    Int(u8),
    Float(u8),
    /// Payload byte counts.
    Str(u64),
    Bin(u64),
    /// Payload byte count after the one-byte extension type.
    Ext(u64),
    /// Element and pair counts.
    Array(u64),
    Map(u64),
}

impl Head {
    /// Decodes type byte `tag`, reading its length field (1, 2 or 4
    /// big-endian bytes) through `length` where it has one. `None` for the
    /// reserved byte 0xc1.
    fn read(tag: u8, mut length: impl FnMut(usize) -> Result<u64>) -> Result<Option<Head>> {
        Ok(Some(match tag {
            0x00..=0x7f => Head::FixInt(i64::from(tag)),
            0x80..=0x8f => Head::Map(u64::from(tag & 0x0f)),
            0x90..=0x9f => Head::Array(u64::from(tag & 0x0f)),
            0xa0..=0xbf => Head::Str(u64::from(tag & 0x1f)),
            0xc0 => Head::Nil,
            0xc1 => return Ok(None),
            0xc2 => Head::Bool(false),
            0xc3 => Head::Bool(true),
            0xc4 => Head::Bin(length(1)?),
            0xc5 => Head::Bin(length(2)?),
            0xc6 => Head::Bin(length(4)?),
            0xc7 => Head::Ext(length(1)?),
            0xc8 => Head::Ext(length(2)?),
            0xc9 => Head::Ext(length(4)?),
            0xca => Head::Float(4),
            0xcb => Head::Float(8),
            0xcc => Head::UInt(1),
            0xcd => Head::UInt(2),
            0xce => Head::UInt(4),
            0xcf => Head::UInt(8),
            0xd0 => Head::Int(1),
            0xd1 => Head::Int(2),
            0xd2 => Head::Int(4),
            0xd3 => Head::Int(8),
            0xd4 => Head::Ext(1),
            0xd5 => Head::Ext(2),
            0xd6 => Head::Ext(4),
            0xd7 => Head::Ext(8),
            0xd8 => Head::Ext(16),
            0xd9 => Head::Str(length(1)?),
            0xda => Head::Str(length(2)?),
            0xdb => Head::Str(length(4)?),
            0xdc => Head::Array(length(2)?),
            0xdd => Head::Array(length(4)?),
            0xde => Head::Map(length(2)?),
            0xdf => Head::Map(length(4)?),
            0xe0..=0xff => Head::FixInt(i64::from(tag as i8)),
        }))
    }

    /// Bytes after the header (and length field) that belong to this value
    /// itself, and how many nested values follow them.
    fn extent(self) -> (u64, u64) {
        match self {
            Head::Nil | Head::Bool(_) | Head::FixInt(_) => (0, 0),
            Head::UInt(n) | Head::Int(n) | Head::Float(n) => (u64::from(n), 0),
            Head::Str(n) | Head::Bin(n) => (n, 0),
            Head::Ext(n) => (n.saturating_add(1), 0),
            Head::Array(n) => (0, n),
            Head::Map(n) => (0, n.saturating_mul(2)),
        }
    }
}

/// Length in bytes of the one MessagePack value at offset 0, without
/// decoding it: for bytes behind a raw pointer whose extent is unknown (a
/// marker, `runtime/loader/src/loader/marker_mem.rs`). Bytes are read only through
/// `read_byte`, only at offsets below `max`, and only those holding type
/// bytes and length fields: payloads are skipped, not read. Nesting is
/// bounded by [`MAX_DEPTH`], as in [`Reader`]; a value that would need bytes
/// at or past `max` is an error.
pub fn value_len(mut read_byte: impl FnMut(usize) -> u8, max: usize) -> Result<usize> {
    let error = |pos: usize, detail: String| Error::Msgpack {
        offset: pos as u64,
        detail,
    };
    let truncated = |pos: usize| error(pos, format!("value longer than {max} bytes or truncated"));
    let mut pos = 0usize;
    let mut byte = |pos: &mut usize| -> Result<u8> {
        if *pos >= max {
            return Err(truncated(*pos));
        }
        let b = read_byte(*pos);
        *pos += 1;
        Ok(b)
    };
    // Values still to walk at the current level, and those of the enclosing
    // levels: containers are walked depth-first, without recursion.
    let mut pending: u64 = 1;
    let mut outer: Vec<u64> = Vec::new();
    loop {
        if pending == 0 {
            match outer.pop() {
                Some(p) => {
                    pending = p;
                    continue;
                }
                None => return Ok(pos),
            }
        }
        pending -= 1;
        let tag = byte(&mut pos)?;
        let head = Head::read(tag, |n| {
            (0..n).try_fold(0u64, |v, _| Ok((v << 8) | u64::from(byte(&mut pos)?)))
        })?
        .ok_or_else(|| error(pos - 1, "reserved marker 0xc1".into()))?;
        let (skip, children) = head.extent();
        // Skipped payload must still lie below the cap: checked, not read.
        pos = usize::try_from(skip)
            .ok()
            .and_then(|skip| pos.checked_add(skip))
            .filter(|&p| p <= max)
            .ok_or_else(|| truncated(pos))?;
        if children > 0 {
            // Every child needs at least one byte: impossible counts fail
            // before they are walked.
            if children > (max - pos) as u64 {
                return Err(truncated(pos));
            }
            if outer.len() + 1 >= MAX_DEPTH {
                return Err(error(pos, format!("nesting deeper than {MAX_DEPTH}")));
            }
            outer.push(pending);
            pending = children;
        }
    }
}

/// Signed encodings of non-negative numbers normalise to [`Value::UInt`], so
/// "is this an unsigned integer" does not depend on the writer's choice.
fn int(v: i64) -> Value {
    match u64::try_from(v) {
        Ok(u) => Value::UInt(u),
        Err(_) => Value::Int(v),
    }
}

fn too_long(what: &str, len: usize) -> Error {
    Error::InvalidArgument(format!(
        "{what} of length {len} exceeds MessagePack's 32-bit length limit"
    ))
}

fn len32(what: &str, len: usize) -> Result<u32> {
    u32::try_from(len).map_err(|_| too_long(what, len))
}

// Writing into a Vec cannot fail, but rmp's signatures carry io::Error.
fn write_err<E: std::fmt::Display>(e: E) -> Error {
    Error::InvalidArgument(format!("MessagePack encoding failed: {e}"))
}

/// Appends a `str` (never `bin`) in its smallest encoding.
pub fn write_str(buf: &mut Vec<u8>, s: &str) -> Result<()> {
    rmp::encode::write_str_len(buf, len32("str", s.len())?).map_err(write_err)?;
    buf.extend_from_slice(s.as_bytes());
    Ok(())
}

/// Appends a `bin` in its smallest encoding.
pub fn write_bin(buf: &mut Vec<u8>, b: &[u8]) -> Result<()> {
    rmp::encode::write_bin_len(buf, len32("bin", b.len())?).map_err(write_err)?;
    buf.extend_from_slice(b);
    Ok(())
}

/// Appends an unsigned integer in its smallest encoding.
pub fn write_uint(buf: &mut Vec<u8>, v: u64) -> Result<()> {
    rmp::encode::write_uint(buf, v).map_err(write_err)?;
    Ok(())
}

/// Appends a signed integer in its smallest encoding.
pub fn write_sint(buf: &mut Vec<u8>, v: i64) -> Result<()> {
    rmp::encode::write_sint(buf, v).map_err(write_err)?;
    Ok(())
}

/// Appends a map header for `len` pairs.
pub fn write_map_len(buf: &mut Vec<u8>, len: usize) -> Result<()> {
    rmp::encode::write_map_len(buf, len32("map", len)?).map_err(write_err)?;
    Ok(())
}

/// Appends an array header for `len` elements.
pub fn write_array_len(buf: &mut Vec<u8>, len: usize) -> Result<()> {
    rmp::encode::write_array_len(buf, len32("array", len)?).map_err(write_err)?;
    Ok(())
}

/// Appends an array of `str`.
pub fn write_str_array<S: AsRef<str>>(buf: &mut Vec<u8>, items: &[S]) -> Result<()> {
    write_array_len(buf, items.len())?;
    for s in items {
        write_str(buf, s.as_ref())?;
    }
    Ok(())
}

/// Appends any [`Value`], integers in their smallest encoding, maps in
/// their stored order. Decoding the output gives back an equal value.
pub fn write_value(buf: &mut Vec<u8>, v: &Value) -> Result<()> {
    match v {
        Value::Nil => rmp::encode::write_nil(buf).map_err(write_err)?,
        Value::Bool(b) => rmp::encode::write_bool(buf, *b).map_err(write_err)?,
        Value::UInt(u) => write_uint(buf, *u)?,
        Value::Int(i) => write_sint(buf, *i)?,
        Value::F32(f) => rmp::encode::write_f32(buf, *f).map_err(write_err)?,
        Value::F64(f) => rmp::encode::write_f64(buf, *f).map_err(write_err)?,
        Value::Str(s) => write_str(buf, s)?,
        Value::Bin(b) => write_bin(buf, b)?,
        Value::Array(items) => {
            write_array_len(buf, items.len())?;
            for item in items {
                write_value(buf, item)?;
            }
        }
        Value::Map(pairs) => {
            write_map_len(buf, pairs.len())?;
            for (k, v) in pairs {
                write_value(buf, k)?;
                write_value(buf, v)?;
            }
        }
        Value::Ext(tag, data) => {
            rmp::encode::write_ext_meta(buf, len32("ext", data.len())?, *tag).map_err(write_err)?;
            buf.extend_from_slice(data);
        }
    }
    Ok(())
}

/// Encodes one [`Value`] into a new buffer.
pub fn encode(v: &Value) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    write_value(&mut buf, v)?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let mut buf = Vec::new();
            write_uint(&mut buf, *v)?;
            assert_eq!(&buf, want, "encoding of {v}");
            assert_eq!(decode(&buf)?, Value::UInt(*v));
        }
        Ok(())
    }

    #[test]
    fn str_is_never_bin() -> Result<()> {
        let mut buf = Vec::new();
        write_str(&mut buf, &"x".repeat(40))?;
        assert_eq!(buf.first(), Some(&0xd9));
        Ok(())
    }

    #[test]
    fn depth_limit() {
        let deep = vec![0x91u8; MAX_DEPTH + 1];
        assert!(matches!(decode(&deep), Err(Error::Msgpack { .. })));
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
            assert!(decode(bytes).is_err(), "{bytes:02x?}");
        }
    }

    #[test]
    fn signed_non_negative_normalises() -> Result<()> {
        assert_eq!(decode(&[0xd0, 0x05])?, Value::UInt(5));
        assert_eq!(decode(&[0xd0, 0xfb])?, Value::Int(-5));
        assert_eq!(decode(&[0xff])?, Value::Int(-1));
        Ok(())
    }

    #[test]
    fn value_round_trip() -> Result<()> {
        let v = Value::Map(vec![
            (
                Value::Str("a".into()),
                Value::Array(vec![Value::Nil, Value::Bool(true)]),
            ),
            (Value::Str("b".into()), Value::Bin(vec![1, 2, 3])),
            (Value::Str("c".into()), Value::Int(-300)),
            (Value::Str("d".into()), Value::F64(1.5)),
            (Value::Str("e".into()), Value::Ext(7, vec![9; 3])),
        ]);
        assert_eq!(decode(&encode(&v)?)?, v);
        Ok(())
    }

    #[test]
    fn map_entries_rejects_duplicates_and_non_str_keys() {
        let dup = Value::Map(vec![
            (Value::Str("a".into()), Value::Nil),
            (Value::Str("a".into()), Value::Nil),
        ]);
        assert!(dup.map_entries().is_none());
        let binkey = Value::Map(vec![(Value::Bin(b"a".to_vec()), Value::Nil)]);
        assert!(binkey.map_entries().is_none());
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
        // The reader consumes exactly as much of every value.
        let mut reader = Reader::new(&padded);
        reader.read_value()?;
        assert_eq!(reader.position(), v.len());
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
        // The reader's depth limit, exactly.
        let mut deep = vec![0x91u8; MAX_DEPTH - 1];
        deep.push(0x00);
        assert_eq!(len_of(&deep).ok(), Some(deep.len()));
        assert!(decode(&deep).is_ok());
        let mut deeper = vec![0x91u8; MAX_DEPTH];
        deeper.push(0x00);
        assert!(len_of(&deeper).is_err());
        assert!(decode(&deeper).is_err());
    }

    #[test]
    fn value_len_agrees_with_the_reader_on_every_type_byte() {
        // Each type byte followed by enough 0x01 bytes for any header.
        for tag in 0..=255u8 {
            let mut bytes = vec![tag];
            bytes.extend_from_slice(&[0x01; 40]);
            let mut reader = Reader::new(&bytes);
            let read = reader.read_value().map(|_| reader.position());
            assert_eq!(len_of(&bytes).ok(), read.ok(), "type byte {tag:#04x}");
        }
    }
}
