//! Compression streams of deb members and rpm payloads: deterministic
//! encoders (gzip without mtime or name, xz with a thread-independent block
//! size, zstd with checksum) and the matching decoders.

use std::io::{self, Read, Write};

use flate2::write::GzEncoder;

/// Payload compression of a deb member or rpm payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    /// Stored.
    None,
    /// gzip (level 9 by default; header mtime 0, no file name).
    Gzip,
    /// xz, multi-threaded block encoder (preset 6 by default). The block
    /// size depends only on the preset, so the output is identical for any
    /// thread count.
    Xz,
    /// zstd, single-threaded (level 19 by default).
    Zstd,
    /// zstd with long-distance matching and a 2^27 window (`zstd --long=27`,
    /// the largest window every zstd decoder accepts without being told, so
    /// dpkg and rpm read it as plain zstd): a payload of uncompressed code
    /// objects compresses across them.
    ZstdLong,
}

/// The window of [`Compression::ZstdLong`]: 2^27 bytes.
pub const ZSTD_LONG_WINDOW_LOG: u32 = 27;

impl Compression {
    /// File-name suffix of a compressed deb member (`.xz`, ...).
    pub fn suffix(self) -> &'static str {
        match self {
            Compression::None => "",
            Compression::Gzip => ".gz",
            Compression::Xz => ".xz",
            Compression::Zstd | Compression::ZstdLong => ".zst",
        }
    }

    /// Parses `none`, `gzip`/`gz`, `xz`, `zstd`/`zst`, `zstd-long`.
    pub fn from_name(name: &str) -> Option<Compression> {
        match name {
            "none" => Some(Compression::None),
            "gzip" | "gz" => Some(Compression::Gzip),
            "xz" => Some(Compression::Xz),
            "zstd" | "zst" => Some(Compression::Zstd),
            "zstd-long" => Some(Compression::ZstdLong),
            _ => None,
        }
    }

    /// The name [`Compression::from_name`] reads (`xz`, `zstd-long`).
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Xz => "xz",
            Compression::Zstd => "zstd",
            Compression::ZstdLong => "zstd-long",
        }
    }

    /// The default level of this compressor.
    pub fn default_level(self) -> u32 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 9,
            Compression::Xz => 6,
            Compression::Zstd | Compression::ZstdLong => 19,
        }
    }
}

/// A compressing writer; [`Encoder::finish`] flushes the end of stream.
pub enum Encoder<W: Write> {
    /// Pass-through.
    None(W),
    /// gzip.
    Gzip(GzEncoder<W>),
    /// xz.
    Xz(liblzma::write::XzEncoder<W>),
    /// zstd.
    Zstd(zstd::stream::write::Encoder<'static, W>),
}

/// Worker threads for the xz encoder (does not affect the output).
fn xz_threads() -> u32 {
    std::thread::available_parallelism()
        .map(|n| n.get().min(8) as u32)
        .unwrap_or(1)
}

impl<W: Write> Encoder<W> {
    /// Starts a stream of `kind` at `level` (None = the kind's default).
    pub fn new(out: W, kind: Compression, level: Option<u32>) -> io::Result<Encoder<W>> {
        let level = level.unwrap_or(kind.default_level());
        Ok(match kind {
            Compression::None => Encoder::None(out),
            Compression::Gzip => Encoder::Gzip(
                flate2::GzBuilder::new()
                    .mtime(0)
                    .write(out, flate2::Compression::new(level.min(9))),
            ),
            Compression::Xz => {
                let stream = liblzma::stream::MtStreamBuilder::new()
                    .threads(xz_threads())
                    .preset(level.min(9))
                    .check(liblzma::stream::Check::Crc64)
                    .encoder()
                    .map_err(io::Error::other)?;
                Encoder::Xz(liblzma::write::XzEncoder::new_stream(out, stream))
            }
            Compression::Zstd | Compression::ZstdLong => {
                let lvl = i32::try_from(level.min(22)).unwrap_or(19);
                let mut enc = zstd::stream::write::Encoder::new(out, lvl)?;
                enc.include_checksum(true)?;
                if kind == Compression::ZstdLong {
                    enc.long_distance_matching(true)?;
                    enc.window_log(ZSTD_LONG_WINDOW_LOG)?;
                }
                Encoder::Zstd(enc)
            }
        })
    }

    /// Ends the stream and returns the inner writer.
    pub fn finish(self) -> io::Result<W> {
        match self {
            Encoder::None(w) => Ok(w),
            Encoder::Gzip(e) => e.finish(),
            Encoder::Xz(e) => e.finish(),
            Encoder::Zstd(e) => e.finish(),
        }
    }
}

impl<W: Write> Write for Encoder<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Encoder::None(w) => w.write(buf),
            Encoder::Gzip(e) => e.write(buf),
            Encoder::Xz(e) => e.write(buf),
            Encoder::Zstd(e) => e.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Encoder::None(w) => w.flush(),
            Encoder::Gzip(e) => e.flush(),
            Encoder::Xz(e) => e.flush(),
            Encoder::Zstd(e) => e.flush(),
        }
    }
}

/// A decompressing reader for `kind` (gzip, xz, zstd, or none; bzip2 and
/// lzma are not supported).
pub fn decoder<'r, R: Read + 'r>(inner: R, kind: Compression) -> io::Result<Box<dyn Read + 'r>> {
    Ok(match kind {
        Compression::None => Box::new(inner),
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(inner)),
        Compression::Xz => Box::new(liblzma::read::XzDecoder::new_multi_decoder(inner)),
        Compression::Zstd | Compression::ZstdLong => {
            Box::new(zstd::stream::read::Decoder::new(inner)?)
        }
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    #[test]
    fn xz_output_does_not_depend_on_threads() {
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut outs = Vec::new();
        for threads in [1u32, 3] {
            let stream = liblzma::stream::MtStreamBuilder::new()
                .threads(threads)
                .preset(1)
                .block_size(1 << 20)
                .check(liblzma::stream::Check::Crc64)
                .encoder()
                .expect("encoder");
            let mut enc = liblzma::write::XzEncoder::new_stream(Vec::new(), stream);
            enc.write_all(&data).expect("write");
            outs.push(enc.finish().expect("finish"));
        }
        assert_eq!(outs.first(), outs.get(1));
    }
}
