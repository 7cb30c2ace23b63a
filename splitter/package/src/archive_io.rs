//! Deterministic container writers shared by the deb, rpm and wheel
//! writers: `ar`, GNU `tar`, `cpio` (newc), `zip`, and the compressors.
//!
//! Every writer takes the timestamp from the caller (SOURCE_DATE_EPOCH),
//! fixes owners to 0:0 root/root, and writes entries in the order it is
//! given (callers sort). Data is streamed from readers; nothing buffers a
//! whole member. Members whose size must precede their data (`ar`, `zip`)
//! are written with a placeholder and patched by seeking back, so the
//! output must be a seekable file.

use std::io::{self, Read, Seek, SeekFrom, Write};

use flate2::write::{DeflateEncoder, GzEncoder};
use md5::Md5;
use sha2::{Digest, Sha256};

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
}

impl Compression {
    /// File-name suffix of a compressed deb member (`.xz`, ...).
    pub fn suffix(self) -> &'static str {
        match self {
            Compression::None => "",
            Compression::Gzip => ".gz",
            Compression::Xz => ".xz",
            Compression::Zstd => ".zst",
        }
    }

    /// Parses `none`, `gzip`/`gz`, `xz`, `zstd`/`zst`.
    pub fn from_name(name: &str) -> Option<Compression> {
        match name {
            "none" => Some(Compression::None),
            "gzip" | "gz" => Some(Compression::Gzip),
            "xz" => Some(Compression::Xz),
            "zstd" | "zst" => Some(Compression::Zstd),
            _ => None,
        }
    }

    /// The default level of this compressor.
    pub fn default_level(self) -> u32 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 9,
            Compression::Xz => 6,
            Compression::Zstd => 19,
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
            Compression::Zstd => {
                let lvl = i32::try_from(level.min(22)).unwrap_or(19);
                let mut enc = zstd::stream::write::Encoder::new(out, lvl)?;
                enc.include_checksum(true)?;
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
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::new(inner)?),
    })
}

/// Adapts a [`Digest`] to [`Write`] so `io::copy` can feed it.
pub struct DigestWriter<D: Digest>(pub D);

impl<D: Digest> Write for DigestWriter<D> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Counts and hashes everything written through it (sha256 + md5).
pub struct HashingWriter<W: Write> {
    inner: W,
    sha256: Sha256,
    md5: Option<Md5>,
    count: u64,
}

impl<W: Write> HashingWriter<W> {
    /// Hashes with sha256, and md5 too when `md5`.
    pub fn new(inner: W, md5: bool) -> Self {
        HashingWriter {
            inner,
            sha256: Sha256::new(),
            md5: md5.then(Md5::new),
            count: 0,
        }
    }
    /// Bytes written so far.
    pub fn count(&self) -> u64 {
        self.count
    }
    /// The inner writer plus sha256, md5 (zeros when not requested) and count.
    pub fn finish(self) -> (W, [u8; 32], [u8; 16], u64) {
        let sha: [u8; 32] = self.sha256.finalize().into();
        let md5: [u8; 16] = self.md5.map(|m| m.finalize().into()).unwrap_or([0; 16]);
        (self.inner, sha, md5, self.count)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        let done = buf.get(..n).unwrap_or_default();
        self.sha256.update(done);
        if let Some(m) = self.md5.as_mut() {
            m.update(done);
        }
        self.count += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Counts and hashes everything read through it.
pub struct HashingReader<R: Read> {
    inner: R,
    sha256: Sha256,
    md5: Option<Md5>,
    count: u64,
}

impl<R: Read> HashingReader<R> {
    /// Hashes with sha256, and md5 too when `md5`.
    pub fn new(inner: R, md5: bool) -> Self {
        HashingReader {
            inner,
            sha256: Sha256::new(),
            md5: md5.then(Md5::new),
            count: 0,
        }
    }
    /// sha256, md5 (zeros when not requested), bytes read.
    pub fn finish(self) -> ([u8; 32], [u8; 16], u64) {
        let sha: [u8; 32] = self.sha256.finalize().into();
        let md5: [u8; 16] = self.md5.map(|m| m.finalize().into()).unwrap_or([0; 16]);
        (sha, md5, self.count)
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let done = buf.get(..n).unwrap_or_default();
        self.sha256.update(done);
        if let Some(m) = self.md5.as_mut() {
            m.update(done);
        }
        self.count += n as u64;
        Ok(n)
    }
}

/// Copies exactly `size` bytes from `src` to `dst`; a short source is an
/// error (the file changed while it was being packaged).
pub fn copy_exact<R: Read + ?Sized, W: Write + ?Sized>(
    src: &mut R,
    dst: &mut W,
    size: u64,
) -> io::Result<()> {
    let copied = io::copy(&mut src.take(size), dst)?;
    if copied != size {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("expected {size} bytes, read {copied} (file changed while packaging?)"),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------- ar

/// `ar` archive writer (the deb container). Member sizes are patched after
/// the data is written, so members can be streamed.
pub struct ArWriter<W: Write + Seek> {
    out: W,
    mtime: u64,
}

impl<W: Write + Seek> ArWriter<W> {
    /// Writes the global header.
    pub fn new(mut out: W, mtime: u64) -> io::Result<Self> {
        out.write_all(b"!<arch>\n")?;
        Ok(ArWriter { out, mtime })
    }

    fn header(&self, name: &str, size: u64) -> io::Result<[u8; 60]> {
        if name.len() > 16 {
            return Err(io::Error::other(format!("ar member name {name:?} too long")));
        }
        if size > 9_999_999_999 {
            return Err(io::Error::other("ar member larger than 9999999999 bytes"));
        }
        let text = format!(
            "{name:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n",
            self.mtime.min(999_999_999_999),
            0,
            0,
            "100644",
            size
        );
        let mut h = [0u8; 60];
        if text.len() != 60 {
            return Err(io::Error::other("ar header overflow"));
        }
        h.copy_from_slice(text.as_bytes());
        Ok(h)
    }

    /// Adds a member from memory.
    pub fn add_bytes(&mut self, name: &str, data: &[u8]) -> io::Result<()> {
        let h = self.header(name, data.len() as u64)?;
        self.out.write_all(&h)?;
        self.out.write_all(data)?;
        if data.len() % 2 == 1 {
            self.out.write_all(b"\n")?;
        }
        Ok(())
    }

    /// Adds a member whose data `fill` streams into the writer it is given;
    /// the size is patched afterwards.
    pub fn add_streamed<F>(&mut self, name: &str, fill: F) -> io::Result<u64>
    where
        F: FnOnce(&mut W) -> io::Result<()>,
    {
        let start = self.out.stream_position()?;
        let placeholder = self.header(name, 0)?;
        self.out.write_all(&placeholder)?;
        fill(&mut self.out)?;
        let end = self.out.stream_position()?;
        let size = end
            .checked_sub(start + 60)
            .ok_or_else(|| io::Error::other("ar member writer moved backwards"))?;
        let h = self.header(name, size)?;
        self.out.seek(SeekFrom::Start(start))?;
        self.out.write_all(&h)?;
        self.out.seek(SeekFrom::Start(end))?;
        if size % 2 == 1 {
            self.out.write_all(b"\n")?;
        }
        Ok(size)
    }

    /// Returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// One member of an `ar` archive as read: name and data range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArMember {
    /// Member name (trailing `/` and spaces removed).
    pub name: String,
    /// Absolute offset of the data.
    pub offset: u64,
    /// Data size.
    pub size: u64,
}

/// Lists the members of an `ar` archive of total length `len`. Errors are
/// plain strings; callers add the file name.
pub fn read_ar_members<R: Read + Seek>(r: &mut R, len: u64) -> Result<Vec<ArMember>, String> {
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic)
        .map_err(|_| "too short for an ar archive".to_string())?;
    if &magic != b"!<arch>\n" {
        return Err("not an ar archive (bad magic)".into());
    }
    let mut pos = 8u64;
    let mut members = Vec::new();
    while pos < len {
        if pos + 60 > len {
            return Err(format!("truncated ar member header at offset {pos}"));
        }
        r.seek(SeekFrom::Start(pos)).map_err(|e| e.to_string())?;
        let mut h = [0u8; 60];
        r.read_exact(&mut h).map_err(|e| e.to_string())?;
        if h.get(58..60) != Some(&b"`\n"[..]) {
            return Err(format!("bad ar member header at offset {pos}"));
        }
        let name = String::from_utf8_lossy(h.get(..16).unwrap_or_default())
            .trim_end()
            .trim_end_matches('/')
            .to_string();
        let size_text = String::from_utf8_lossy(h.get(48..58).unwrap_or_default())
            .trim()
            .to_string();
        let size: u64 = size_text
            .parse()
            .map_err(|_| format!("bad ar member size {size_text:?} at offset {pos}"))?;
        let offset = pos + 60;
        let end = offset
            .checked_add(size)
            .filter(|&e| e <= len)
            .ok_or_else(|| format!("ar member {name:?} runs past the end of the file"))?;
        members.push(ArMember { name, offset, size });
        pos = end + (end % 2);
    }
    Ok(members)
}

// ---------------------------------------------------------------- tar

/// Kind of a tar / cpio entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryType {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link.
    Symlink,
}

/// GNU tar writer (the format `dpkg-deb` writes): owners 0:0 root/root,
/// one mtime, long names and link targets through `././@LongLink`.
pub struct TarWriter<W: Write> {
    out: W,
    mtime: u64,
}

fn octal(field: &mut [u8], value: u64) -> io::Result<()> {
    let width = field.len().saturating_sub(1);
    let text = format!("{value:0width$o}");
    if text.len() > width {
        // Base-256 (GNU) for values that do not fit in octal.
        if field.len() < 9 {
            return Err(io::Error::other("tar numeric field overflow"));
        }
        field.fill(0);
        let n = field.len();
        for (i, b) in value.to_be_bytes().iter().enumerate() {
            if let Some(slot) = field.get_mut(n - 8 + i) {
                *slot = *b;
            }
        }
        if let Some(first) = field.first_mut() {
            *first |= 0x80;
        }
        return Ok(());
    }
    field
        .get_mut(..width)
        .ok_or_else(|| io::Error::other("tar field"))?
        .copy_from_slice(text.as_bytes());
    if let Some(last) = field.last_mut() {
        *last = 0;
    }
    Ok(())
}

fn put(block: &mut [u8; 512], range: std::ops::Range<usize>, data: &[u8]) -> io::Result<()> {
    let field = block
        .get_mut(range)
        .ok_or_else(|| io::Error::other("tar field range"))?;
    let n = data.len().min(field.len());
    field
        .get_mut(..n)
        .ok_or_else(|| io::Error::other("tar field"))?
        .copy_from_slice(data.get(..n).unwrap_or_default());
    Ok(())
}

fn put_octal(block: &mut [u8; 512], range: std::ops::Range<usize>, value: u64) -> io::Result<()> {
    let field = block
        .get_mut(range)
        .ok_or_else(|| io::Error::other("tar field range"))?;
    octal(field, value)
}

impl<W: Write> TarWriter<W> {
    /// A tar stream on `out` whose entries all carry `mtime`.
    pub fn new(out: W, mtime: u64) -> Self {
        TarWriter { out, mtime }
    }

    fn header(
        &self,
        name: &[u8],
        typeflag: u8,
        mode: u32,
        size: u64,
        link: &[u8],
    ) -> io::Result<[u8; 512]> {
        let mut b = [0u8; 512];
        put(&mut b, 0..100, name)?;
        put_octal(&mut b, 100..108, u64::from(mode & 0o7777))?;
        put_octal(&mut b, 108..116, 0)?;
        put_octal(&mut b, 116..124, 0)?;
        put_octal(&mut b, 124..136, size)?;
        put_octal(&mut b, 136..148, self.mtime)?;
        put(&mut b, 148..156, b"        ")?;
        put(&mut b, 156..157, &[typeflag])?;
        put(&mut b, 157..257, link)?;
        put(&mut b, 257..265, b"ustar  \0")?;
        put(&mut b, 265..297, b"root")?;
        put(&mut b, 297..329, b"root")?;
        let sum: u32 = b.iter().map(|&x| u32::from(x)).sum();
        let text = format!("{sum:06o}\0 ");
        put(&mut b, 148..156, text.as_bytes())?;
        Ok(b)
    }

    fn long(&mut self, kind: u8, value: &[u8]) -> io::Result<()> {
        let mut data = value.to_vec();
        data.push(0);
        let h = self.header(b"././@LongLink", kind, 0o644, data.len() as u64, b"")?;
        // GNU tar writes mtime 0 for the long-name record.
        let mut h = h;
        put_octal(&mut h, 136..148, 0)?;
        put(&mut h, 148..156, b"        ")?;
        let sum: u32 = h.iter().map(|&x| u32::from(x)).sum();
        put(&mut h, 148..156, format!("{sum:06o}\0 ").as_bytes())?;
        self.out.write_all(&h)?;
        self.out.write_all(&data)?;
        self.pad(data.len() as u64)
    }

    fn pad(&mut self, size: u64) -> io::Result<()> {
        let rem = (size % 512) as usize;
        if rem != 0 {
            self.out.write_all(&[0u8; 512][..512 - rem])?;
        }
        Ok(())
    }

    /// Adds one entry. `path` is written as given (callers pass `./usr/...`,
    /// directories with a trailing `/`). For files `data` supplies exactly
    /// `size` bytes; for symlinks `link` is the target.
    pub fn append(
        &mut self,
        path: &str,
        kind: EntryType,
        mode: u32,
        size: u64,
        link: &str,
        data: Option<&mut dyn Read>,
    ) -> io::Result<()> {
        if path.len() > 100 {
            self.long(b'L', path.as_bytes())?;
        }
        if link.len() > 100 {
            self.long(b'K', link.as_bytes())?;
        }
        let (flag, size) = match kind {
            EntryType::File => (b'0', size),
            EntryType::Dir => (b'5', 0),
            EntryType::Symlink => (b'2', 0),
        };
        let h = self.header(path.as_bytes(), flag, mode, size, link.as_bytes())?;
        self.out.write_all(&h)?;
        if kind == EntryType::File {
            let src = data.ok_or_else(|| io::Error::other("tar file entry without data"))?;
            copy_exact(src, &mut self.out, size)?;
            self.pad(size)?;
        }
        Ok(())
    }

    /// Writes the end-of-archive blocks and returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.write_all(&[0u8; 1024])?;
        Ok(self.out)
    }
}

// ---------------------------------------------------------------- cpio

/// `cpio` newc writer (the rpm payload): inode = entry index, nlink 1,
/// owners 0, one mtime.
pub struct CpioWriter<W: Write> {
    out: W,
    mtime: u64,
    written: u64,
}

impl<W: Write> CpioWriter<W> {
    /// A cpio stream on `out`.
    pub fn new(out: W, mtime: u64) -> Self {
        CpioWriter {
            out,
            mtime,
            written: 0,
        }
    }

    fn pad4(&mut self) -> io::Result<()> {
        let rem = (self.written % 4) as usize;
        if rem != 0 {
            self.out.write_all(&[0u8; 4][..4 - rem])?;
            self.written += (4 - rem) as u64;
        }
        Ok(())
    }

    fn header(&mut self, name: &str, ino: u32, mode: u32, nlink: u32, size: u64) -> io::Result<()> {
        let size32 = u32::try_from(size)
            .map_err(|_| io::Error::other(format!("{name}: larger than 4 GiB (cpio newc limit)")))?;
        let namesize = name.len() + 1;
        let mtime = u32::try_from(self.mtime).unwrap_or(u32::MAX);
        let h = format!(
            "070701{ino:08x}{mode:08x}{:08x}{:08x}{nlink:08x}{mtime:08x}{size32:08x}{:08x}{:08x}{:08x}{:08x}{namesize:08x}{:08x}",
            0, 0, 0, 0, 0, 0, 0
        );
        self.out.write_all(h.as_bytes())?;
        self.out.write_all(name.as_bytes())?;
        self.out.write_all(&[0])?;
        self.written += (h.len() + namesize) as u64;
        self.pad4()
    }

    /// Adds one entry; `mode` includes the file type bits.
    pub fn append(
        &mut self,
        name: &str,
        ino: u32,
        mode: u32,
        size: u64,
        data: Option<&mut dyn Read>,
    ) -> io::Result<()> {
        self.header(name, ino, mode, 1, size)?;
        if size > 0 {
            let src = data.ok_or_else(|| io::Error::other("cpio entry without data"))?;
            copy_exact(src, &mut self.out, size)?;
            self.written += size;
            self.pad4()?;
        }
        Ok(())
    }

    /// Writes the trailer and returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.header("TRAILER!!!", 0, 0, 1, 0)?;
        Ok(self.out)
    }
}

/// One entry read from a cpio (newc or crc) stream.
#[derive(Debug, Clone)]
pub struct CpioEntry {
    /// Name as stored (e.g. `./usr/lib/x`).
    pub name: String,
    /// Mode with type bits.
    pub mode: u32,
    /// Data size.
    pub size: u64,
}

/// Streaming cpio (newc/crc) reader.
pub struct CpioReader<R: Read> {
    inner: R,
    pos: u64,
    pending: u64,
    done: bool,
}

impl<R: Read> CpioReader<R> {
    /// Reads entries from `inner`.
    pub fn new(inner: R) -> Self {
        CpioReader {
            inner,
            pos: 0,
            pending: 0,
            done: false,
        }
    }

    fn skip(&mut self, n: u64) -> io::Result<()> {
        let skipped = io::copy(&mut (&mut self.inner).take(n), &mut io::sink())?;
        if skipped != n {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "truncated cpio"));
        }
        self.pos += n;
        Ok(())
    }

    fn align(&mut self) -> io::Result<()> {
        let rem = self.pos % 4;
        if rem != 0 {
            self.skip(4 - rem)?;
        }
        Ok(())
    }

    /// The next entry, or None after the trailer. Unread data of the
    /// previous entry is skipped.
    pub fn next_entry(&mut self) -> io::Result<Option<CpioEntry>> {
        if self.done {
            return Ok(None);
        }
        if self.pending > 0 {
            let p = self.pending;
            self.pending = 0;
            self.skip(p)?;
        }
        self.align()?;
        let mut h = [0u8; 110];
        self.inner.read_exact(&mut h)?;
        self.pos += 110;
        let magic = h.get(..6).unwrap_or_default();
        if magic != b"070701" && magic != b"070702" {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad cpio magic at payload offset {}", self.pos - 110),
            ));
        }
        let field = |i: usize| -> io::Result<u64> {
            let s = h
                .get(6 + i * 8..14 + i * 8)
                .and_then(|b| std::str::from_utf8(b).ok())
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad cpio field"))?;
            u64::from_str_radix(s, 16)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad cpio field"))
        };
        let mode = u32::try_from(field(1)?).unwrap_or(0);
        let size = field(6)?;
        let namesize = field(11)?;
        if namesize == 0 || namesize > 65_536 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "bad cpio name size"));
        }
        let mut name = vec![0u8; namesize as usize];
        self.inner.read_exact(&mut name)?;
        self.pos += namesize;
        if name.last() == Some(&0) {
            name.pop();
        }
        let name = String::from_utf8(name)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "non-UTF-8 cpio name"))?;
        self.align()?;
        if name == "TRAILER!!!" {
            self.done = true;
            return Ok(None);
        }
        self.pending = size;
        Ok(Some(CpioEntry { name, mode, size }))
    }

    /// A reader over the current entry's data (exactly its size).
    pub fn data(&mut self) -> CpioData<'_, R> {
        CpioData { reader: self }
    }
}

/// Data of the current cpio entry.
pub struct CpioData<'a, R: Read> {
    reader: &'a mut CpioReader<R>,
}

impl<R: Read> Read for CpioData<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = (buf.len() as u64).min(self.reader.pending) as usize;
        if want == 0 {
            return Ok(0);
        }
        let n = self
            .reader
            .inner
            .read(buf.get_mut(..want).unwrap_or_default())?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "truncated cpio data"));
        }
        self.reader.pending -= n as u64;
        self.reader.pos += n as u64;
        Ok(n)
    }
}

// ---------------------------------------------------------------- zip

/// Converts a Unix time to MS-DOS date and time (UTC), clamped to
/// 1980-01-01..2107-12-31 (the representable range).
pub fn dos_datetime(epoch: u64) -> (u16, u16) {
    const MIN: u64 = 315_532_800; // 1980-01-01
    const MAX: u64 = 4_354_819_198; // 2107-12-31 23:59:58
    let t = epoch.clamp(MIN, MAX);
    let (y, mo, d, h, mi, s) = civil(t);
    let date = (((y - 1980) as u16) << 9) | ((mo as u16) << 5) | d as u16;
    let time = ((h as u16) << 11) | ((mi as u16) << 5) | (s / 2) as u16;
    (date, time)
}

/// UTC calendar fields of a Unix time: year, month, day, hour, minute, second.
pub fn civil(epoch: u64) -> (i64, u32, u32, u32, u32, u32) {
    let days = (epoch / 86_400) as i64;
    let secs = epoch % 86_400;
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = if m <= 2 { y + 1 } else { y };
    (
        y,
        m,
        d,
        (secs / 3600) as u32,
        ((secs % 3600) / 60) as u32,
        (secs % 60) as u32,
    )
}

/// RFC 2822 date in UTC (`Mon, 01 Jan 2024 00:00:00 UTC`), as apt's Release.
pub fn rfc2822(epoch: u64) -> String {
    let (y, m, d, h, mi, s) = civil(epoch);
    let days = (epoch / 86_400) as i64;
    let wd = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    let mon = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {d:02} {} {y} {h:02}:{mi:02}:{s:02} UTC",
        wd.get(days.rem_euclid(7) as usize).copied().unwrap_or("Thu"),
        mon.get((m as usize).saturating_sub(1)).copied().unwrap_or("Jan")
    )
}

/// ISO 8601 UTC (`2024-01-01T00:00:00Z`).
pub fn iso8601(epoch: u64) -> String {
    let (y, m, d, h, mi, s) = civil(epoch);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

struct ZipCentral {
    name: String,
    crc: u32,
    csize: u64,
    usize: u64,
    offset: u64,
    mode: u32,
    method: u16,
}

/// Deterministic zip writer: deflate (or stored for empty files), one
/// DOS timestamp, Unix permissions in the external attributes, zip64
/// extra fields only for entries or offsets that need them.
pub struct ZipWriter<W: Write + Seek> {
    out: W,
    date: u16,
    time: u16,
    entries: Vec<ZipCentral>,
}

const ZIP64_LIMIT: u64 = 0xFFFF_FFFE;

impl<W: Write + Seek> ZipWriter<W> {
    /// A zip on `out`; every entry gets the DOS time of `epoch` (clamped to 1980).
    pub fn new(out: W, epoch: u64) -> Self {
        let (date, time) = dos_datetime(epoch);
        ZipWriter {
            out,
            date,
            time,
            entries: Vec::new(),
        }
    }

    /// Adds a file of `size` bytes read from `data`; returns its sha256.
    pub fn add_file(
        &mut self,
        name: &str,
        mode: u32,
        size: u64,
        data: &mut dyn Read,
    ) -> io::Result<[u8; 32]> {
        let offset = self.out.stream_position()?;
        let zip64 = size >= ZIP64_LIMIT;
        let method: u16 = if size == 0 { 0 } else { 8 };
        let mut local = Vec::with_capacity(30 + name.len() + 20);
        local.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        local.extend_from_slice(&(if zip64 { 45u16 } else { 20u16 }).to_le_bytes());
        local.extend_from_slice(&0x0800u16.to_le_bytes()); // UTF-8 names
        local.extend_from_slice(&method.to_le_bytes());
        local.extend_from_slice(&self.time.to_le_bytes());
        local.extend_from_slice(&self.date.to_le_bytes());
        local.extend_from_slice(&[0u8; 12]); // crc, csize, usize: patched
        local.extend_from_slice(&(name.len() as u16).to_le_bytes());
        local.extend_from_slice(&(if zip64 { 20u16 } else { 0u16 }).to_le_bytes());
        local.extend_from_slice(name.as_bytes());
        if zip64 {
            local.extend_from_slice(&1u16.to_le_bytes());
            local.extend_from_slice(&16u16.to_le_bytes());
            local.extend_from_slice(&[0u8; 16]);
        }
        if name.len() > u16::MAX as usize {
            return Err(io::Error::other("zip entry name too long"));
        }
        self.out.write_all(&local)?;
        let data_start = self.out.stream_position()?;
        let mut crc = crc32fast::Hasher::new();
        let mut sha = Sha256::new();
        let mut counted = 0u64;
        {
            let mut reader = CrcShaReader {
                inner: data.take(size),
                crc: &mut crc,
                sha: &mut sha,
                count: &mut counted,
            };
            if method == 8 {
                let mut enc = DeflateEncoder::new(&mut self.out, flate2::Compression::new(6));
                io::copy(&mut reader, &mut enc)?;
                enc.finish()?;
            } else {
                io::copy(&mut reader, &mut self.out)?;
            }
        }
        if counted != size {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{name}: expected {size} bytes, read {counted}"),
            ));
        }
        let end = self.out.stream_position()?;
        let csize = end - data_start;
        let crc = crc.finalize();
        if !zip64 && csize >= ZIP64_LIMIT {
            return Err(io::Error::other(format!(
                "{name}: compressed size exceeds 4 GiB without zip64"
            )));
        }
        // Patch crc and sizes.
        self.out.seek(SeekFrom::Start(offset + 14))?;
        self.out.write_all(&crc.to_le_bytes())?;
        if zip64 {
            self.out.write_all(&u32::MAX.to_le_bytes())?;
            self.out.write_all(&u32::MAX.to_le_bytes())?;
            self.out
                .seek(SeekFrom::Start(offset + 30 + name.len() as u64 + 4))?;
            self.out.write_all(&size.to_le_bytes())?;
            self.out.write_all(&csize.to_le_bytes())?;
        } else {
            self.out.write_all(&(csize as u32).to_le_bytes())?;
            self.out.write_all(&(size as u32).to_le_bytes())?;
        }
        self.out.seek(SeekFrom::Start(end))?;
        self.entries.push(ZipCentral {
            name: name.to_string(),
            crc,
            csize,
            usize: size,
            offset,
            mode,
            method,
        });
        Ok(sha.finalize().into())
    }

    /// Adds a file from memory; returns its sha256.
    pub fn add_bytes(&mut self, name: &str, mode: u32, data: &[u8]) -> io::Result<[u8; 32]> {
        let mut r = data;
        self.add_file(name, mode, data.len() as u64, &mut r)
    }

    /// Writes the central directory (zip64 end records when needed).
    pub fn finish(mut self) -> io::Result<W> {
        let cd_start = self.out.stream_position()?;
        for e in &self.entries {
            let mut extra = Vec::new();
            let big_u = e.usize >= ZIP64_LIMIT;
            let big_c = e.csize >= ZIP64_LIMIT;
            let big_o = e.offset >= ZIP64_LIMIT;
            if big_u || big_c || big_o {
                let mut body = Vec::new();
                if big_u {
                    body.extend_from_slice(&e.usize.to_le_bytes());
                }
                if big_c {
                    body.extend_from_slice(&e.csize.to_le_bytes());
                }
                if big_o {
                    body.extend_from_slice(&e.offset.to_le_bytes());
                }
                extra.extend_from_slice(&1u16.to_le_bytes());
                extra.extend_from_slice(&(body.len() as u16).to_le_bytes());
                extra.extend_from_slice(&body);
            }
            let needs64 = !extra.is_empty();
            let mut c = Vec::with_capacity(46 + e.name.len() + extra.len());
            c.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
            c.extend_from_slice(&((3u16 << 8) | 45).to_le_bytes()); // made by Unix
            c.extend_from_slice(&(if needs64 { 45u16 } else { 20u16 }).to_le_bytes());
            c.extend_from_slice(&0x0800u16.to_le_bytes());
            c.extend_from_slice(&e.method.to_le_bytes());
            c.extend_from_slice(&self.time.to_le_bytes());
            c.extend_from_slice(&self.date.to_le_bytes());
            c.extend_from_slice(&e.crc.to_le_bytes());
            c.extend_from_slice(&(if big_c { u32::MAX } else { e.csize as u32 }).to_le_bytes());
            c.extend_from_slice(&(if big_u { u32::MAX } else { e.usize as u32 }).to_le_bytes());
            c.extend_from_slice(&(e.name.len() as u16).to_le_bytes());
            c.extend_from_slice(&(extra.len() as u16).to_le_bytes());
            c.extend_from_slice(&0u16.to_le_bytes()); // comment
            c.extend_from_slice(&0u16.to_le_bytes()); // disk
            c.extend_from_slice(&0u16.to_le_bytes()); // internal attrs
            let attrs = (0o100000u32 | (e.mode & 0o7777)) << 16;
            c.extend_from_slice(&attrs.to_le_bytes());
            c.extend_from_slice(&(if big_o { u32::MAX } else { e.offset as u32 }).to_le_bytes());
            c.extend_from_slice(e.name.as_bytes());
            c.extend_from_slice(&extra);
            self.out.write_all(&c)?;
        }
        let cd_end = self.out.stream_position()?;
        let cd_size = cd_end - cd_start;
        let count = self.entries.len() as u64;
        let need64 = count >= 0xFFFF || cd_size >= ZIP64_LIMIT || cd_start >= ZIP64_LIMIT;
        if need64 {
            let mut z = Vec::new();
            z.extend_from_slice(&0x0606_4b50u32.to_le_bytes());
            z.extend_from_slice(&44u64.to_le_bytes());
            z.extend_from_slice(&((3u16 << 8) | 45).to_le_bytes());
            z.extend_from_slice(&45u16.to_le_bytes());
            z.extend_from_slice(&0u32.to_le_bytes());
            z.extend_from_slice(&0u32.to_le_bytes());
            z.extend_from_slice(&count.to_le_bytes());
            z.extend_from_slice(&count.to_le_bytes());
            z.extend_from_slice(&cd_size.to_le_bytes());
            z.extend_from_slice(&cd_start.to_le_bytes());
            z.extend_from_slice(&0x0706_4b50u32.to_le_bytes());
            z.extend_from_slice(&0u32.to_le_bytes());
            z.extend_from_slice(&cd_end.to_le_bytes());
            z.extend_from_slice(&1u32.to_le_bytes());
            self.out.write_all(&z)?;
        }
        let mut end = Vec::with_capacity(22);
        end.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
        end.extend_from_slice(&0u16.to_le_bytes());
        end.extend_from_slice(&0u16.to_le_bytes());
        let n16 = if need64 { u16::MAX } else { count as u16 };
        end.extend_from_slice(&n16.to_le_bytes());
        end.extend_from_slice(&n16.to_le_bytes());
        end.extend_from_slice(&(if need64 { u32::MAX } else { cd_size as u32 }).to_le_bytes());
        end.extend_from_slice(&(if need64 { u32::MAX } else { cd_start as u32 }).to_le_bytes());
        end.extend_from_slice(&0u16.to_le_bytes());
        self.out.write_all(&end)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

struct CrcShaReader<'a, R: Read> {
    inner: R,
    crc: &'a mut crc32fast::Hasher,
    sha: &'a mut Sha256,
    count: &'a mut u64,
}

impl<R: Read> Read for CrcShaReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let done = buf.get(..n).unwrap_or_default();
        self.crc.update(done);
        self.sha.update(done);
        *self.count += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil(0), (1970, 1, 1, 0, 0, 0));
        assert_eq!(civil(1_704_067_200), (2024, 1, 1, 0, 0, 0));
        assert_eq!(rfc2822(1_704_067_200), "Mon, 01 Jan 2024 00:00:00 UTC");
        assert_eq!(iso8601(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(dos_datetime(0), dos_datetime(315_532_800));
    }

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

    #[test]
    fn cpio_roundtrip() {
        let mut w = CpioWriter::new(Vec::new(), 5);
        w.append("./a", 1, 0o100644, 3, Some(&mut &b"abc"[..])).expect("a");
        w.append("./d", 2, 0o040755, 0, None).expect("d");
        let bytes = w.finish().expect("finish");
        let mut r = CpioReader::new(&bytes[..]);
        let e = r.next_entry().expect("read").expect("entry");
        assert_eq!((e.name.as_str(), e.size), ("./a", 3));
        let mut s = String::new();
        r.data().read_to_string(&mut s).expect("data");
        assert_eq!(s, "abc");
        let e = r.next_entry().expect("read").expect("entry");
        assert_eq!(e.mode, 0o040755);
        assert!(r.next_entry().expect("read").is_none());
    }
}
