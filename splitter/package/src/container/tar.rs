//! GNU tar, the format `dpkg-deb` writes, on `tar::Builder` with headers
//! built here.
//!
//! `Builder::append` writes each header, the data and the padding, and
//! `into_inner` the end-of-archive blocks. The headers are filled field by
//! field rather than through `Builder::append_data` / `Header::set_path`,
//! which keep today's bytes out of reach: they drop the leading `./` that
//! dpkg's members carry, refuse `..` (the readers' tests craft such
//! members), write the checksum as seven digits and NUL where GNU tar
//! writes six digits, NUL and space, and emit `././@LongLink` records
//! without the `root` owner names. Long names and link targets therefore
//! get their `././@LongLink` records here too.

use std::io::{self, Read, Write};

use ::tar::{Builder, EntryType as TarType, Header};

use super::EntryType;
use crate::digest::ExactReader;

/// GNU tar writer: owners 0:0 root/root, one mtime, names and link targets
/// as given, long ones through `././@LongLink`.
pub struct TarWriter<W: Write> {
    builder: Builder<W>,
    mtime: u64,
}

/// Copies `value` into a NUL-padded header field, truncating what does not
/// fit (the full value is then in a `././@LongLink` record).
fn put(field: &mut [u8], value: &[u8]) {
    let n = value.len().min(field.len());
    field.fill(0);
    if let (Some(dst), Some(src)) = (field.get_mut(..n), value.get(..n)) {
        dst.copy_from_slice(src);
    }
}

fn header(
    name: &[u8],
    kind: TarType,
    mode: u32,
    size: u64,
    link: &[u8],
    mtime: u64,
) -> io::Result<Header> {
    let mut h = Header::new_gnu();
    put(&mut h.as_old_mut().name, name);
    h.set_mode(mode & 0o7777);
    h.set_uid(0);
    h.set_gid(0);
    h.set_size(size);
    h.set_mtime(mtime);
    h.set_entry_type(kind);
    put(&mut h.as_old_mut().linkname, link);
    h.set_username("root")?;
    h.set_groupname("root")?;
    // The crate's checksum value, in GNU tar's layout (6 digits, NUL, space).
    h.set_cksum();
    let sum = h.cksum()?;
    put(
        &mut h.as_old_mut().cksum,
        format!("{sum:06o}\0 ").as_bytes(),
    );
    Ok(h)
}

impl<W: Write> TarWriter<W> {
    /// A tar stream on `out` whose entries all carry `mtime`.
    pub fn new(out: W, mtime: u64) -> Self {
        TarWriter {
            builder: Builder::new(out),
            mtime,
        }
    }

    /// A `././@LongLink` record carrying `value` for the next header. GNU
    /// tar writes it with mtime 0.
    fn long(&mut self, kind: TarType, value: &[u8]) -> io::Result<()> {
        let mut data = value.to_vec();
        data.push(0);
        let h = header(b"././@LongLink", kind, 0o644, data.len() as u64, b"", 0)?;
        self.builder.append(&h, data.as_slice())
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
            self.long(TarType::GNULongName, path.as_bytes())?;
        }
        if link.len() > 100 {
            self.long(TarType::GNULongLink, link.as_bytes())?;
        }
        let (flag, size) = match kind {
            EntryType::File => (TarType::Regular, size),
            EntryType::Dir => (TarType::Directory, 0),
            EntryType::Symlink => (TarType::Symlink, 0),
        };
        let h = header(
            path.as_bytes(),
            flag,
            mode,
            size,
            link.as_bytes(),
            self.mtime,
        )?;
        if kind == EntryType::File {
            let src = data.ok_or_else(|| io::Error::other("tar file entry without data"))?;
            self.builder.append(&h, ExactReader::new(src, size))
        } else {
            self.builder.append(&h, io::empty())
        }
    }

    /// Writes the end-of-archive blocks and returns the output.
    pub fn finish(self) -> io::Result<W> {
        self.builder.into_inner()
    }
}
