//! Handing a mapped state file's pages back to the kernel once they are read.
//!
//! A local checkpoint file is read through a memory map (see
//! [`crate::object_storage::ObjectStorage::get_object`]). A merge reads its files once,
//! front to back, and every page it touches stays in the process's resident set until
//! the map is dropped: q18's compaction of two deltas held 1.4 GB of file-backed RSS
//! beside the operator's state. `MADV_DONTNEED` on a read-only shared file mapping only
//! unmaps the pages: the file's data stays in the page cache, and reading the range
//! again faults the same bytes back in. It is applied only to addresses inside a live
//! map of a file, a [`MappedFile`] (which only this module makes, and only
//! `ObjectStorage::get_object` asks for): on anonymous memory it would zero the data.

use arrow::array::{Array, RecordBatch};
use bytes::Bytes;

/// A whole local file mapped read-only into memory. Only this module makes one, from
/// a real map: the page hand-back below is sound only on such memory, so the type,
/// not a caller's promise, says where it may happen.
#[derive(Debug, Clone)]
pub struct MappedFile(Bytes);

impl MappedFile {
    /// Maps `file`, which must not be empty (an empty map is an error).
    pub(crate) fn map(file: &std::fs::File) -> std::io::Result<MappedFile> {
        // SAFETY: checkpoint files are never written again once complete (see
        // `ObjectStorage::get`); deleting one keeps its data until the map is dropped.
        let map = unsafe { memmap2::Mmap::map(file)? };
        Ok(MappedFile(Bytes::from_owner(map)))
    }

    /// The file's bytes (they keep the map alive).
    pub fn bytes(&self) -> &Bytes {
        &self.0
    }

    fn range(&self) -> std::ops::Range<usize> {
        let start = self.0.as_ptr() as usize;
        start..start + self.0.len()
    }
}

/// The pages of `batch` that lie inside `file` are unmapped from the process (see the
/// module doc). Buffers outside `file` (copied while decoding, say) are left alone.
pub(crate) fn release(batch: &RecordBatch, file: &MappedFile) {
    let file_range = file.range();
    let mut lo = usize::MAX;
    let mut hi = 0;
    for column in batch.columns() {
        let data = column.to_data();
        let buffers = data
            .buffers()
            .iter()
            .chain(data.nulls().map(|n| n.buffer()));
        for b in buffers {
            let start = b.as_ptr() as usize;
            let end = start + b.len();
            if file_range.contains(&start) && end <= file_range.end {
                lo = lo.min(start);
                hi = hi.max(end);
            }
        }
    }
    if lo < hi {
        unmap(lo, hi);
    }
}

/// Every page of `file` is unmapped from the process: what reads it next faults back
/// in only what it touches.
pub(crate) fn release_all(file: &MappedFile) {
    let range = file.range();
    unmap(range.start, range.end);
}

/// The CRC-32 of `file`, its pages handed back as they are hashed: checking a file
/// before reading it does not make all of it resident.
pub(crate) fn crc32(file: &MappedFile) -> u32 {
    const CHUNK: usize = 4 << 20;
    let mut hasher = crc32fast::Hasher::new();
    for chunk in file.bytes().chunks(CHUNK) {
        hasher.update(chunk);
        let start = chunk.as_ptr() as usize;
        unmap(start, start + chunk.len());
    }
    hasher.finalize()
}

#[cfg(target_os = "linux")]
fn unmap(lo: usize, hi: usize) {
    static PAGE: std::sync::LazyLock<usize> = std::sync::LazyLock::new(|| {
        // SAFETY: sysconf has no preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(n).unwrap_or(4096).max(1)
    });
    let page = *PAGE;
    // Whole pages inside [lo, hi): a page shared with the next batch stays.
    let start = lo.div_ceil(page) * page;
    let end = hi / page * page;
    if start < end {
        // SAFETY: callers pass a range inside a `MappedFile` they borrow, so [start,
        // end) lies inside a live read-only shared map of a file; MADV_DONTNEED there
        // drops page-table entries only, and later reads fault the file's unchanged
        // bytes back in.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn unmap(_lo: usize, _hi: usize) {}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use crate::keyed_merge::merge_keyed;
    use crate::state_snapshot::{self, DeltaData, KeyedEntries};
    use std::io::Write;

    /// The resident KiB of the mapping that starts at `addr` (`/proc/self/smaps`).
    fn resident_kib(addr: *const u8) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let start = format!("{:x}-", addr as usize);
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&start));
        assert!(lines.next().is_some(), "mapping at {start} listed");
        let rss = lines.find(|l| l.starts_with("Rss:")).unwrap();
        rss.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    fn map(path: &std::path::Path) -> super::MappedFile {
        super::MappedFile::map(&std::fs::File::open(path).unwrap()).unwrap()
    }

    /// Hashing a mapped file gives its CRC and leaves little of it resident. A merge
    /// of a mapped base reads it back right and leaves only a window of it
    /// resident (the kernel maps a few MiB around each fault, more than the batch
    /// being read); the same merge of a file not marked as mapped leaves all of it
    /// resident (the control: the check can fail).
    #[test]
    fn a_merge_hands_a_mapped_files_pages_back() {
        let entries = KeyedEntries::from_entries((0..800_000u32).map(|i| {
            (
                i / 8_000,
                i.to_be_bytes().to_vec(),
                Some(vec![i as u8; 100]),
            )
        }));
        assert!(entries.batches().len() >= 12, "many batches");
        let encoded = state_snapshot::encode(&DeltaData::Keyed(entries.clone())).unwrap();
        let mut tmp = tempfile::NamedTempFile::new().unwrap();
        tmp.write_all(&encoded.to_bytes()).unwrap();
        tmp.flush().unwrap();
        let file_kib = encoded.len() as u64 / 1024;

        let marked = map(tmp.path());
        assert_eq!(super::crc32(&marked), crc32fast::hash(&encoded.to_bytes()));
        let hashed = resident_kib(marked.bytes().as_ptr());
        let data = state_snapshot::decode_mapped(state_snapshot::StateKind::Keyed, marked.clone())
            .unwrap()
            .into_keyed();
        assert!(merge_keyed(&[data]).to_entries() == entries.to_entries());
        let released = resident_kib(marked.bytes().as_ptr());

        let unmarked = map(tmp.path());
        let data =
            state_snapshot::decode(state_snapshot::StateKind::Keyed, unmarked.bytes().clone())
                .unwrap()
                .into_keyed();
        assert!(merge_keyed(&[data]).to_entries() == entries.to_entries());
        let kept = resident_kib(unmarked.bytes().as_ptr());

        assert!(
            released < file_kib / 3,
            "{released} KiB of a {file_kib} KiB file left resident"
        );
        assert!(
            hashed < file_kib / 3,
            "hashing left {hashed} KiB of {file_kib} KiB resident"
        );
        assert!(kept > file_kib * 3 / 4, "control: {kept} of {file_kib} KiB");
    }
}
