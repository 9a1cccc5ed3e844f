//! `ObjectStorage`: where checkpoints and savepoints live, through `object_store`.
//!
//! A local folder (the embedded default, under the data dir) or S3 (any S3-compatible
//! endpoint; path-style and plain http allowed for local endpoints). Every call passes
//! through the `object-store.put` / `object-store.get` failpoints so tests can make
//! uploads fail or stall.

use crate::failpoint;
use crate::mapped_pages::MappedFile;
use crate::object_writer::ObjectWriter;
use crate::{Result, StorageError};
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use std::sync::Arc;
use std::time::Duration;

/// Where object storage points: `file:///abs/path` or `s3://bucket/prefix`.
#[derive(Debug, Clone, Default)]
pub struct S3Settings {
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub allow_http: bool,
    /// Bounds each request (and its retries): the high-availability log and lease
    /// must fail fast during an outage instead of retrying for minutes.
    pub request_timeout: Option<Duration>,
}

#[derive(Clone)]
pub struct ObjectStorage {
    store: Arc<dyn ObjectStore>,
    /// Prefix inside the store under which all our keys live.
    prefix: String,
    url: String,
    /// The folder of a local store: reads map its files (see [`ObjectStorage::get`]).
    local_root: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for ObjectStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ObjectStorage({})", self.url)
    }
}

pub(crate) fn os_err(e: object_store::Error) -> StorageError {
    StorageError::Io(std::io::Error::other(e.to_string()))
}

impl ObjectStorage {
    /// Opens `url`: a plain path or `file://` URL (created if missing), or `s3://bucket/prefix`.
    pub fn open(url: &str, s3: &S3Settings) -> Result<ObjectStorage> {
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            // Environment first (AWS_ACCESS_KEY_ID, AWS_ENDPOINT, ...), then weir.toml.
            let mut b = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
            if let Some(t) = s3.request_timeout {
                // Before `with_allow_http`, which lives in the same client options.
                b = b
                    .with_client_options(
                        object_store::ClientOptions::new()
                            .with_timeout(t)
                            .with_connect_timeout(t),
                    )
                    .with_retry(object_store::RetryConfig {
                        max_retries: 2,
                        retry_timeout: t,
                        ..Default::default()
                    });
            }
            if let Some(e) = &s3.endpoint {
                b = b.with_endpoint(e);
            }
            if let Some(r) = &s3.region {
                b = b.with_region(r);
            }
            if let Some(k) = &s3.access_key_id {
                b = b.with_access_key_id(k);
            }
            if let Some(k) = &s3.secret_access_key {
                b = b.with_secret_access_key(k);
            }
            if s3.allow_http
                || s3
                    .endpoint
                    .as_deref()
                    .is_some_and(|e| e.starts_with("http://"))
            {
                b = b.with_allow_http(true);
            }
            // Local S3-compatible endpoints (MinIO, moto) want path-style requests.
            b = b.with_virtual_hosted_style_request(false);
            let store = b.build().map_err(os_err)?;
            return Ok(ObjectStorage {
                store: Arc::new(store),
                prefix: prefix.trim_matches('/').to_string(),
                url: url.to_string(),
                local_root: None,
            });
        }
        let path = url.strip_prefix("file://").unwrap_or(url);
        std::fs::create_dir_all(path)?;
        let store = object_store::local::LocalFileSystem::new_with_prefix(path)
            .map_err(os_err)?
            .with_automatic_cleanup(true);
        Ok(ObjectStorage {
            store: Arc::new(store),
            prefix: String::new(),
            url: url.to_string(),
            local_root: Some(std::path::PathBuf::from(path)),
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub(crate) fn path(&self, key: &str) -> ObjectPath {
        if self.prefix.is_empty() {
            ObjectPath::from(key)
        } else {
            ObjectPath::from(format!("{}/{}", self.prefix, key))
        }
    }

    /// A human-readable location for `key` (for SHOW CHECKPOINTS).
    pub fn location(&self, key: &str) -> String {
        format!("{}/{}", self.url.trim_end_matches('/'), key)
    }

    pub(crate) async fn failpoint(&self, name: &str) -> Result<()> {
        match failpoint::get(name).as_deref() {
            Some("fail") => Err(StorageError::Io(std::io::Error::other(format!(
                "failpoint {name}: injected failure"
            )))),
            Some("stall") => {
                // Stall until the failpoint is cleared (the checkpoint times out first).
                while failpoint::get(name).as_deref() == Some("stall") {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    pub(crate) fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// Writes an object piece by piece (see [`ObjectWriter`]): for files too large to
    /// hold whole.
    pub fn writer(&self, key: &str) -> ObjectWriter {
        ObjectWriter::new(self.clone(), key)
    }

    /// Writes an object in one request (`Bytes`, or pieces collected into a payload).
    pub async fn put(&self, key: &str, payload: impl Into<PutPayload>) -> Result<()> {
        self.failpoint("object-store.put").await?;
        self.store
            .put(&self.path(key), payload.into())
            .await
            .map_err(os_err)?;
        Ok(())
    }

    /// `None` when the object does not exist.
    /// A whole object. A local file is memory-mapped rather than read: restoring a
    /// large checkpoint then costs page-cache mappings instead of a copy into fresh
    /// memory (which, with the kernel zeroing every new page, was a third of the
    /// recovery time). Checkpoint files are immutable once written, and deleting a
    /// mapped file keeps its data until the mapping is dropped.
    pub async fn get(&self, key: &str) -> Result<Option<Bytes>> {
        Ok(self.get_object(key).await?.map(StoredObject::into_bytes))
    }

    /// [`ObjectStorage::get`], saying whether the bytes are a map of a local file
    /// (whose pages a reader may hand back, see [`crate::mapped_pages`]).
    pub async fn get_object(&self, key: &str) -> Result<Option<StoredObject>> {
        self.failpoint("object-store.get").await?;
        if let Some(root) = &self.local_root {
            let path = root.join(key);
            return tokio::task::spawn_blocking(move || match std::fs::File::open(&path) {
                Ok(file) if file.metadata()?.len() == 0 => {
                    Ok(Some(StoredObject::Fetched(Bytes::new())))
                }
                Ok(file) => Ok(Some(StoredObject::Mapped(MappedFile::map(&file)?))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e.into()),
            })
            .await
            .map_err(|e| StorageError::Io(std::io::Error::other(e.to_string())))?;
        }
        match self.store.get(&self.path(key)).await {
            Ok(r) => Ok(Some(StoredObject::Fetched(
                r.bytes().await.map_err(os_err)?,
            ))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(os_err(e)),
        }
    }

    /// Moves `from` to `to`, replacing `to`: an atomic rename in a local folder, a copy
    /// and a delete on S3. `Ok(false)` when `from` does not exist.
    pub async fn rename(&self, from: &str, to: &str) -> Result<bool> {
        self.failpoint("object-store.put").await?;
        match self.store.rename(&self.path(from), &self.path(to)).await {
            Ok(()) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(os_err(e)),
        }
    }

    pub async fn delete(&self, key: &str) -> Result<()> {
        match self.store.delete(&self.path(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(os_err(e)),
        }
    }

    /// Every key under `prefix` (relative to our own prefix), recursively.
    pub async fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>> {
        let base = self.path(prefix);
        let strip = if self.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", self.prefix)
        };
        let items: Vec<_> = self
            .store
            .list(Some(&base))
            .try_collect()
            .await
            .map_err(os_err)?;
        Ok(items
            .into_iter()
            .map(|m| {
                let k = m.location.to_string();
                (k.strip_prefix(&strip).unwrap_or(&k).to_string(), m.size)
            })
            .collect())
    }

    /// Deletes every key under `prefix`.
    pub async fn delete_prefix(&self, prefix: &str) -> Result<()> {
        for (k, _) in self.list(prefix).await? {
            self.delete(&k).await?;
        }
        Ok(())
    }

    /// Removes the staged files of writes that a crash interrupted in a local folder,
    /// and returns how many files and bytes that freed. A local write goes to
    /// `<key>#<n>` and is renamed when it completes; a process killed before that
    /// leaves the staged file, which listings skip, so nothing would ever collect it
    /// (a q18 delta is gigabytes). Only a process that is the folder's one writer may
    /// call this (at startup): it would break another writer's write in progress. S3
    /// keeps an interrupted multipart upload's parts until a bucket lifecycle rule
    /// (`AbortIncompleteMultipartUpload`) removes them.
    pub fn remove_staged_writes(&self) -> Result<(usize, u64)> {
        let Some(root) = &self.local_root else {
            return Ok((0, 0));
        };
        let mut freed = (0, 0);
        let mut folders = vec![root.clone()];
        while let Some(folder) = folders.pop() {
            for entry in std::fs::read_dir(&folder)? {
                let entry = entry?;
                let kind = entry.file_type()?;
                if kind.is_dir() {
                    folders.push(entry.path());
                } else if kind.is_file() && is_staged_write(&entry.file_name()) {
                    let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
                    std::fs::remove_file(entry.path())?;
                    freed = (freed.0 + 1, freed.1 + size);
                }
            }
        }
        Ok(freed)
    }
}

/// A local store's staged write: a file name ending in `#` and digits (how
/// `object_store`'s `LocalFileSystem` names them, and why its listings skip them).
fn is_staged_write(name: &std::ffi::OsStr) -> bool {
    let name = name.to_string_lossy();
    name.rsplit_once('#')
        .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn local_folder_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let s = ObjectStorage::open(dir.path().to_str().unwrap(), &S3Settings::default()).unwrap();
        s.put("a/b/c", Bytes::from_static(b"hello")).await.unwrap();
        assert_eq!(
            s.get("a/b/c").await.unwrap().unwrap(),
            Bytes::from_static(b"hello")
        );
        assert!(s.get("a/missing").await.unwrap().is_none());
        assert_eq!(s.list("a").await.unwrap(), vec![("a/b/c".to_string(), 5)]);
        s.delete_prefix("a").await.unwrap();
        assert!(s.list("a").await.unwrap().is_empty());
    }

    /// A write interrupted by a crash leaves `<key>#<n>`: startup removes it, and
    /// nothing else (a finished object, a file whose `#` is not followed by digits).
    #[tokio::test]
    async fn staged_writes_left_by_a_crash_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let s = ObjectStorage::open(dir.path().to_str().unwrap(), &S3Settings::default()).unwrap();
        s.put("cp/1/shared/u/1.delta", Bytes::from_static(b"done"))
            .await
            .unwrap();
        let staged = dir.path().join("cp/1/shared/u/2.delta#7");
        std::fs::write(&staged, b"interrupted").unwrap();
        std::fs::write(dir.path().join("cp/3.base#12"), b"too").unwrap();
        let not_staged = dir.path().join("cp/a#b");
        std::fs::write(&not_staged, b"kept").unwrap();
        assert_eq!(s.remove_staged_writes().unwrap(), (2, 14));
        assert!(!staged.exists() && not_staged.exists());
        let keys: Vec<(String, u64)> = s.list("cp/1").await.unwrap();
        assert_eq!(keys, vec![("cp/1/shared/u/1.delta".to_string(), 4)]);
        assert_eq!(s.remove_staged_writes().unwrap(), (0, 0));
    }
}

/// An object read whole: a map of a local file, or bytes fetched into memory.
pub enum StoredObject {
    Mapped(MappedFile),
    Fetched(Bytes),
}

impl StoredObject {
    pub fn into_bytes(self) -> Bytes {
        match self {
            StoredObject::Mapped(m) => m.bytes().clone(),
            StoredObject::Fetched(b) => b,
        }
    }
}

/// The version of an object that a conditional write must find: its ETag, and its
/// version id where the store keeps versions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectVersion {
    e_tag: Option<String>,
    version: Option<String>,
}

impl ObjectVersion {
    fn of(e_tag: Option<String>, version: Option<String>) -> Self {
        ObjectVersion { e_tag, version }
    }
}

/// What a conditional write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conditional {
    /// Written; the object's new version.
    Written(ObjectVersion),
    /// Not written: the object exists (create) or changed (replace).
    Conflict,
}

impl ObjectStorage {
    /// Writes `key` only if it does not exist yet (S3 `If-None-Match: *`).
    pub async fn create(&self, key: &str, bytes: Bytes) -> Result<Conditional> {
        self.put_mode(key, bytes, PutMode::Create).await
    }

    /// Replaces `key` only if it is still at `expected` (S3 `If-Match: <etag>`). Needs
    /// a store with conditional updates: S3 and S3-compatible endpoints, not a local
    /// folder.
    pub async fn replace(
        &self,
        key: &str,
        bytes: Bytes,
        expected: &ObjectVersion,
    ) -> Result<Conditional> {
        let mode = PutMode::Update(UpdateVersion {
            e_tag: expected.e_tag.clone(),
            version: expected.version.clone(),
        });
        self.put_mode(key, bytes, mode).await
    }

    async fn put_mode(&self, key: &str, bytes: Bytes, mode: PutMode) -> Result<Conditional> {
        self.failpoint("object-store.put").await?;
        let opts = PutOptions {
            mode,
            ..Default::default()
        };
        match self
            .store
            .put_opts(&self.path(key), PutPayload::from_bytes(bytes), opts)
            .await
        {
            Ok(r) => Ok(Conditional::Written(ObjectVersion::of(r.e_tag, r.version))),
            // A replace of a key that is gone conflicts too: someone deleted it.
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. }
                | object_store::Error::NotFound { .. },
            ) => Ok(Conditional::Conflict),
            Err(e) => Err(os_err(e)),
        }
    }

    /// The object and its version; `None` when it does not exist.
    pub async fn get_versioned(&self, key: &str) -> Result<Option<(Bytes, ObjectVersion)>> {
        self.failpoint("object-store.get").await?;
        match self.store.get(&self.path(key)).await {
            Ok(r) => {
                let version = ObjectVersion::of(r.meta.e_tag.clone(), r.meta.version.clone());
                Ok(Some((r.bytes().await.map_err(os_err)?, version)))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(os_err(e)),
        }
    }
}
