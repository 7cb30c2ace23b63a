//! The kpack store: a directory (or URL) of archives by content,
//! `by-hash/sha256/<hex>`, plus an index.

/// The content-addressed directory, relative to the store root.
pub const BY_HASH_DIR: &str = "by-hash/sha256";

/// The store's index of archives, relative to its root.
pub const INDEX_FILE: &str = "index.json";

/// Largest `index.json` the fetcher reads (it reads it only for its
/// database sets).
pub const MAX_INDEX_FILE: u64 = 64 << 20;

/// `by-hash/sha256/<hex>`: where the archive with this digest lives,
/// relative to the store root (or a source URL).
pub fn by_hash_path(sha256: &[u8; 32]) -> String {
    format!("{BY_HASH_DIR}/{}", hex::encode(sha256))
}

/// The transport encoding of kernel-database objects: one zstd frame
/// (`index.json` says `"encoding": "zstd"`; archives, already
/// compressed, are stored as they are: `"identity"`).
pub const DATABASE_ENCODING: &str = "zstd";

/// The file-name suffix of [`DATABASE_ENCODING`] objects.
pub const DATABASE_SUFFIX: &str = ".zst";

/// The first bytes of a zstd frame, which a database object must start
/// with: anything else is an encoding this reader does not know.
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// `by-hash/sha256/<hex>.zst`: where the database file whose installed
/// bytes have this digest lives, encoded, relative to the store root.
pub fn database_object_path(sha256: &[u8; 32]) -> String {
    format!("{}{DATABASE_SUFFIX}", by_hash_path(sha256))
}

/// `by-hash/sha256/<hex>.zst`: where the transport form of an archive
/// lives (`archive::transport`), `<hex>` being the sha256 of the decoded
/// form (the manifest's `transport.sha256`). The same rule as database
/// objects: a zstd object is named by the digest of the bytes it decodes
/// to, so one name never holds two things.
pub fn transport_object_path(sha256: &[u8; 32]) -> String {
    database_object_path(sha256)
}

/// `by-hash/sha256/<hex>.zst`: where a database set lives
/// (`database_set`: one processor's database files as one stream), `<hex>`
/// being the sha256 of the decoded stream, which `index.json` gives. The
/// rule of every zstd object of the store.
pub fn database_set_object_path(sha256: &[u8; 32]) -> String {
    database_object_path(sha256)
}
