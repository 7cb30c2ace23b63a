//! The former single module of containers, compression and digests, now
//! split into [`crate::container`], [`crate::compress`], [`crate::digest`]
//! and [`crate::dates`]; these re-exports keep the old paths working for
//! callers outside this crate.

pub use crate::compress::{decoder, Compression, Encoder};
pub use crate::container::{
    dos_datetime, read_ar_members, ArMember, ArWriter, CpioData, CpioEntry, CpioReader, CpioWriter,
    EntryType, TarWriter, ZipWriter,
};
pub use crate::dates::{civil, iso8601, rfc2822};
pub use crate::digest::{copy_exact, DigestWriter, HashingReader, HashingWriter};
