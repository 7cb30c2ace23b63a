//! GNU tar (the deb's `control.tar` and `data.tar`) on `tar::Builder` and
//! `tar::Header`'s own setters.
//!
//! `Header::set_path` normalizes names: a leading `./` is dropped (the
//! archive root stays `./`, directories keep their trailing `/`), and `..`
//! or absolute names are refused, so a hostile name cannot be written by
//! mistake. Names and link targets longer than a header field go into
//! `././@LongLink` records written by `append_data` / `append_link`.

use std::io::{self, Read, Write};

use ::tar::{Builder, EntryType as TarType, Header};

use super::EntryType;
use crate::digest::ExactReader;

/// GNU tar writer: owners 0:0 root/root, one mtime, long names and link
/// targets through `././@LongLink`.
pub struct TarWriter<W: Write> {
    builder: Builder<W>,
    mtime: u64,
}

impl<W: Write> TarWriter<W> {
    /// A tar stream on `out` whose entries all carry `mtime`.
    pub fn new(out: W, mtime: u64) -> Self {
        TarWriter {
            builder: Builder::new(out),
            mtime,
        }
    }

    /// Adds one entry. `path` is relative (`usr/lib/x`; `./` for the
    /// archive root; directories may end in `/`). For files `data`
    /// supplies exactly `size` bytes; for symlinks `link` is the target.
    pub fn append(
        &mut self,
        path: &str,
        kind: EntryType,
        mode: u32,
        size: u64,
        link: &str,
        data: Option<&mut dyn Read>,
    ) -> io::Result<()> {
        let mut h = Header::new_gnu();
        h.set_mode(mode & 0o7777);
        h.set_uid(0);
        h.set_gid(0);
        h.set_username("root")?;
        h.set_groupname("root")?;
        h.set_mtime(self.mtime);
        match kind {
            EntryType::File => {
                let src = data.ok_or_else(|| io::Error::other("tar file entry without data"))?;
                h.set_entry_type(TarType::Regular);
                h.set_size(size);
                self.builder
                    .append_data(&mut h, path, ExactReader::new(src, size))
            }
            EntryType::Dir => {
                h.set_entry_type(TarType::Directory);
                h.set_size(0);
                self.builder.append_data(&mut h, path, io::empty())
            }
            EntryType::Symlink => {
                h.set_entry_type(TarType::Symlink);
                h.set_size(0);
                self.builder.append_link(&mut h, path, link)
            }
        }
    }

    /// Writes the end-of-archive blocks and returns the output.
    pub fn finish(self) -> io::Result<W> {
        self.builder.into_inner()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_back(bytes: &[u8]) -> Vec<(String, TarType, Option<String>, u64)> {
        let mut a = ::tar::Archive::new(bytes);
        a.entries()
            .expect("entries")
            .map(|e| {
                let e = e.expect("entry");
                let link = e
                    .link_name()
                    .expect("link")
                    .map(|l| l.to_string_lossy().into_owned());
                (
                    e.path().expect("path").to_string_lossy().into_owned(),
                    e.header().entry_type(),
                    link,
                    e.header().mtime().expect("mtime"),
                )
            })
            .collect()
    }

    #[test]
    fn long_names_and_targets_round_trip() {
        let long = format!("usr/lib/{}", "d/".repeat(60));
        let file = format!("{long}f");
        let target = format!("../{}", "t".repeat(120));
        let mut w = TarWriter::new(Vec::new(), 7);
        w.append("./", EntryType::Dir, 0o755, 0, "", None)
            .expect("root");
        w.append(&long, EntryType::Dir, 0o755, 0, "", None)
            .expect("dir");
        w.append(&file, EntryType::File, 0o644, 3, "", Some(&mut &b"abc"[..]))
            .expect("file");
        w.append("usr/l", EntryType::Symlink, 0o777, 0, &target, None)
            .expect("link");
        let got = read_back(&w.finish().expect("finish"));
        assert_eq!(
            got,
            [
                ("./".to_string(), TarType::Directory, None, 7),
                (long.clone(), TarType::Directory, None, 7),
                (file, TarType::Regular, None, 7),
                ("usr/l".to_string(), TarType::Symlink, Some(target), 7),
            ]
        );
    }

    #[test]
    fn hostile_names_and_short_data_are_refused() {
        let mut w = TarWriter::new(Vec::new(), 0);
        assert!(w
            .append("usr/../../x", EntryType::Dir, 0o755, 0, "", None)
            .is_err());
        assert!(w
            .append("/etc/x", EntryType::Dir, 0o755, 0, "", None)
            .is_err());
        let short = w.append("x", EntryType::File, 0o644, 5, "", Some(&mut &b"ab"[..]));
        assert!(short.is_err());
    }
}
