//! A `.kpack` zstd bomb: a small archive whose one kernel truthfully
//! decodes to `size` zero bytes, with the TOC's `original_size` and the
//! frame's content size both saying so. Readers must refuse it without
//! allocating what it claims.

use rocm_kpack_format::archive::{ArchiveWriter, CompressionScheme, HEADER_SIZE};
use rocm_kpack_format::msgpack::{self, Value};
use std::io::Cursor;

/// TOC binary key and arch of the bomb's one kernel.
pub const BOMB_BINARY: &str = "lib/libbomb.so#0";
pub const BOMB_ARCH: &str = "gfx1100";

/// Largest block content zstd allows (RFC 8878, Block_Maximum_Size).
const BLOCK: u64 = 128 << 10;

/// One zstd frame decoding to `size` zero bytes, built by hand: a
/// single-segment header with an 8-byte content size, then RLE blocks of
/// 4 bytes each (3-byte header, the repeated byte), the densest a frame can
/// be. Built rather than compressed so a 4 GiB bomb costs nothing to make.
pub fn zero_frame(size: u64) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + 4 * usize::try_from(size / BLOCK + 1).unwrap_or(0));
    f.extend(0xFD2F_B528u32.to_le_bytes());
    // Frame_Header_Descriptor: FCS field 8 bytes (3 << 6), single segment.
    f.push(0xE0);
    f.extend(size.to_le_bytes());
    let mut left = size;
    loop {
        let n = left.min(BLOCK);
        left -= n;
        let last = u32::from(left == 0);
        // Block_Header: last flag, type 1 (RLE), size = bytes it expands to.
        let header = last | (1 << 1) | (u32::try_from(n).unwrap_or(0) << 3);
        f.extend(&header.to_le_bytes()[..3]);
        f.push(0);
        if left == 0 {
            return f;
        }
    }
}

/// The bomb archive: written by the real writer with a small kernel, then
/// its frame swapped for [`zero_frame`]`(size)` and the TOC patched to
/// match (`original_size`, `zstd_size`, `toc_offset`).
pub fn zstd_bomb_archive(size: u64) -> Vec<u8> {
    let mut w = ArchiveWriter::new(
        Cursor::new(Vec::new()),
        "bomb",
        "gfx110X",
        CompressionScheme::ZstdPerKernel,
        3,
    )
    .expect("writer");
    w.add_kernel(BOMB_BINARY, BOMB_ARCH, vec![0; 4096])
        .expect("kernel");
    let small = w.finish().expect("finish").into_inner();
    let toc_at = usize::try_from(u64::from_le_bytes(small[8..16].try_into().expect("header")))
        .expect("offset");
    let mut toc = msgpack::decode::<Value>(&small[toc_at..]).expect("toc");

    let frame = zero_frame(size);
    let header = usize::try_from(HEADER_SIZE).expect("header size");
    let mut out = small[..header].to_vec();
    out.extend(1u32.to_le_bytes());
    out.extend(u32::try_from(frame.len()).expect("frame").to_le_bytes());
    out.extend(&frame);
    let new_toc_at = out.len() as u64;
    out[8..16].copy_from_slice(&new_toc_at.to_le_bytes());
    *field(&mut toc, "zstd_size") = Value::from(new_toc_at - HEADER_SIZE);
    let entry = field(field(field(&mut toc, "toc"), BOMB_BINARY), BOMB_ARCH);
    *field(entry, "original_size") = Value::from(size);
    out.extend(msgpack::encode(&toc).expect("encode"));
    out
}

fn field<'v>(v: &'v mut Value, key: &str) -> &'v mut Value {
    let Value::Map(pairs) = v else {
        panic!("TOC: {key:?} is not in a map")
    };
    &mut pairs
        .iter_mut()
        .find(|(k, _)| k.as_str() == Some(key))
        .unwrap_or_else(|| panic!("TOC has no {key:?}"))
        .1
}
