//! `ObjectWriter`: an object written piece by piece, as its producer makes the pieces.
//!
//! A compaction merges a uid's chain into a new base that can be as large as the
//! operator's whole state (q18 at 30M events: 2.9 GB). Built in memory first, the base
//! was a second copy of the state and the job's peak RSS. Written through this, the
//! file is never whole in memory: a small file is still one `put`; once the pieces
//! reach [`PART_BYTES`] the writer switches to a multipart upload (a staged file that
//! is renamed at the end in a local folder), with at most [`PARTS_IN_FLIGHT`] parts in
//! flight. The object appears only when [`ObjectWriter::finish`] completes.
//!
//! A started upload that does not complete (an error, or the writer dropped when a
//! checkpoint expires) is aborted, so S3 keeps no pending upload and its parts: the
//! writer drives `MultipartUpload` itself rather than through `WriteMultipart`, which
//! drops an upload unaborted when a part fails.

use crate::object_storage::{os_err, ObjectStorage};
use crate::{Result, StorageError};
use bytes::Bytes;
use object_store::{MultipartUpload, ObjectStoreExt, PutPayload};
use tokio::task::JoinSet;

/// Least size of a multipart upload's parts (S3 wants at least 5 MiB for all but the
/// last). A part is whole pieces, so it can be larger.
const PART_BYTES: usize = 16 << 20;
/// Parts uploading at once: bounds the memory a slow store makes the writer hold.
const PARTS_IN_FLIGHT: usize = 2;

/// Size and CRC-32 of a written object, as recorded in a checkpoint's `_metadata`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub size: u64,
    pub crc32: u32,
}

pub struct ObjectWriter {
    storage: ObjectStorage,
    key: String,
    /// Pieces not yet sent: the whole object while it is small, then the next part.
    pending: Vec<Bytes>,
    pending_bytes: usize,
    /// The multipart upload, once started; `None` again once completed or aborted.
    upload: Option<Box<dyn MultipartUpload>>,
    parts: JoinSet<object_store::Result<()>>,
    size: u64,
    crc: crc32fast::Hasher,
}

impl ObjectWriter {
    pub(crate) fn new(storage: ObjectStorage, key: &str) -> Self {
        ObjectWriter {
            storage,
            key: key.to_string(),
            pending: Vec::new(),
            pending_bytes: 0,
            upload: None,
            parts: JoinSet::new(),
            size: 0,
            crc: crc32fast::Hasher::new(),
        }
    }

    /// Appends a piece (not copied); waits while the store is behind.
    pub async fn write(&mut self, piece: Bytes) -> Result<()> {
        self.size += piece.len() as u64;
        self.crc.update(&piece);
        self.pending_bytes += piece.len();
        self.pending.push(piece);
        if self.pending_bytes >= PART_BYTES {
            self.send_part().await?;
        }
        Ok(())
    }

    /// Sends the pending pieces as the next part (starting the upload if need be),
    /// then waits until fewer than [`PARTS_IN_FLIGHT`] parts are uploading.
    async fn send_part(&mut self) -> Result<()> {
        if self.upload.is_none() {
            self.storage.failpoint("object-store.put").await?;
            let path = self.storage.path(&self.key);
            let upload = self.storage.store().put_multipart(&path).await;
            self.upload = Some(upload.map_err(os_err)?);
        }
        let part: PutPayload = std::mem::take(&mut self.pending).into_iter().collect();
        self.pending_bytes = 0;
        let upload = self.upload.as_mut().expect("started above");
        self.parts.spawn(upload.put_part(part));
        while self.parts.len() >= PARTS_IN_FLIGHT {
            self.join_part().await?;
        }
        Ok(())
    }

    async fn join_part(&mut self) -> Result<()> {
        match self.parts.join_next().await {
            None => Ok(()),
            Some(Ok(uploaded)) => uploaded.map_err(os_err),
            Some(Err(e)) => Err(StorageError::Io(std::io::Error::other(e.to_string()))),
        }
    }

    /// Writes what is left and makes the object visible; aborts on failure.
    pub async fn finish(mut self) -> Result<Written> {
        let written = Written {
            size: self.size,
            crc32: self.crc.clone().finalize(),
        };
        if self.upload.is_none() {
            let payload: PutPayload = std::mem::take(&mut self.pending).into_iter().collect();
            self.storage.put(&self.key, payload).await?;
            return Ok(written);
        }
        match self.complete().await {
            Ok(()) => Ok(written),
            Err(e) => {
                self.abort().await;
                Err(e)
            }
        }
    }

    async fn complete(&mut self) -> Result<()> {
        if !self.pending.is_empty() {
            self.send_part().await?;
        }
        while !self.parts.is_empty() {
            self.join_part().await?;
        }
        let mut upload = self.upload.take().expect("a started upload");
        if let Err(e) = upload.complete().await {
            self.upload = Some(upload);
            return Err(os_err(e));
        }
        Ok(())
    }

    /// Gives up: nothing becomes visible, and a started upload's parts are removed.
    pub async fn abort(mut self) {
        self.parts.shutdown().await;
        if let Some(mut upload) = self.upload.take() {
            if let Err(e) = upload.abort().await {
                tracing::warn!(key = %self.key, error = %e, "aborting an upload failed");
            }
        }
    }

    /// Writes every piece of `pieces`, then finishes; aborts on failure.
    pub async fn write_all(mut self, pieces: impl IntoIterator<Item = Bytes>) -> Result<Written> {
        for piece in pieces {
            if let Err(e) = self.write(piece).await {
                self.abort().await;
                return Err(e);
            }
        }
        self.finish().await
    }
}

impl Drop for ObjectWriter {
    /// A writer dropped mid-upload (its checkpoint expired, its task was cancelled)
    /// aborts the upload in the background.
    fn drop(&mut self) {
        let Some(mut upload) = self.upload.take() else {
            return;
        };
        self.parts.abort_all();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = upload.abort().await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object_storage::S3Settings;

    fn pieces(total: usize, seed: u8) -> Vec<Bytes> {
        let mut out = Vec::new();
        let mut left = total;
        let mut i = 0usize;
        while left > 0 {
            // Uneven pieces, some larger than a part.
            let n = left.min([1, 70_000, 5 << 20, PART_BYTES + 3][i % 4]);
            out.push(Bytes::from(vec![seed.wrapping_add(i as u8); n]));
            left -= n;
            i += 1;
        }
        out
    }

    /// A small object (one `put`) and a large one (a multipart upload) read back as
    /// the pieces concatenated, with the size and CRC-32 of those bytes; an aborted
    /// upload leaves no object.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pieces_become_one_object() {
        let dir = tempfile::tempdir().unwrap();
        let s = ObjectStorage::open(dir.path().to_str().unwrap(), &S3Settings::default()).unwrap();
        for (key, total) in [("small", 100_000), ("large", 3 * PART_BYTES + 12_345)] {
            let parts = pieces(total, key.len() as u8);
            let expected: Vec<u8> = parts.concat();
            let written = s.writer(key).write_all(parts).await.unwrap();
            let read = s.get(key).await.unwrap().expect("written");
            assert_eq!(read.len(), expected.len(), "{key}");
            assert!(read.as_ref() == expected.as_slice(), "{key}: same bytes");
            assert_eq!(written.size, expected.len() as u64);
            assert_eq!(written.crc32, crc32fast::hash(&expected));
        }
        let mut w = s.writer("aborted");
        for p in pieces(2 * PART_BYTES, 9) {
            w.write(p).await.unwrap();
        }
        w.abort().await;
        assert!(s.get("aborted").await.unwrap().is_none());
        let mut keys: Vec<String> = s
            .list("")
            .await
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        keys.sort();
        assert_eq!(keys, vec!["large".to_string(), "small".to_string()]);
    }
}
