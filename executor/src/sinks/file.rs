//! The file sink: `CREATE SINK k FROM v WITH (connector = 'file', path = '...')
//! FORMAT PLAIN | DEBEZIUM ENCODE JSON`: JSON lines. Exactly once, on object storage (a
//! local folder or S3, configured like checkpoints).
//!
//! Flink's FileSink, through [`super::two_phase`]: the records of each checkpoint are
//! staged as batch `n` of the sink's state and written at once as the pending file
//! `_pending/part-<n>.<ext>`; when the checkpoint completes the file is renamed to
//! `part-<n>.<ext>` (20-digit `n`, so names sort in commit order). A reader of the
//! folder's top level therefore sees only committed files. Recovery takes the highest
//! committed part as the marker and commits the restored batches after it again,
//! renaming their pending file or, if that was lost, writing the part from the state.
//! Writing a part is idempotent (same name, same bytes).

use super::format::{encode, named, SinkFormat, SinkRecord};
use super::two_phase::{SinkContext, Staged, Staging, TwoPhaseTarget};
use super::{SinkConnector, SinkTarget};
use crate::barrier::{Barrier, Epoch};
use crate::chunk::StreamChunk;
use crate::connector_options::{invalid, ConnectorOptions};
use crate::error::{ExecError, Result};
use crate::operator::Operator;
use arrow::datatypes::SchemaRef;
use bytes::Bytes;
use futures::future::BoxFuture;
use std::sync::Arc;
use weir_storage::object_storage::ObjectStorage;
use weir_storage::state_snapshot::StateDelta;

/// Committed files end in this (JSON lines). Parquet is not built: it needs the
/// `parquet` crate, which this build does not carry yet.
const EXTENSION: &str = "jsonl";

#[derive(Debug, Clone)]
pub struct FileSinkSpec {
    pub sink: String,
    pub storage: ObjectStorage,
    pub format: SinkFormat,
    /// The relation's schema: the records' field names.
    pub schema: SchemaRef,
}

/// `connector = 'file'` options: `path` (a folder, `file://` URL or `s3://bucket/prefix`;
/// S3 settings as for checkpoints) and `FORMAT PLAIN | DEBEZIUM ENCODE JSON` (JSON
/// lines; Parquet is not built yet).
pub(crate) fn parse_options(
    o: &mut ConnectorOptions,
    target: &SinkTarget<'_>,
) -> Result<Arc<dyn SinkConnector>> {
    let format = o.take("format").unwrap_or_else(|| "plain".into());
    let encode = o.take("encode").unwrap_or_else(|| "json".into());
    let path = o.take("path");
    if let Some(other) = o.first_unknown() {
        return Err(invalid(format!("unknown file sink option \"{other}\"")));
    }
    let format = match (
        format.to_ascii_lowercase().as_str(),
        encode.to_ascii_lowercase().as_str(),
    ) {
        ("plain", "json") => SinkFormat::Plain,
        ("debezium", "json") => SinkFormat::Debezium,
        (f, e) => {
            return Err(ExecError::Unsupported(format!(
                "file sink FORMAT {f} ENCODE {e} is not supported yet (PLAIN or DEBEZIUM ENCODE JSON is)"
            )))
        }
    };
    let path = path.ok_or_else(|| invalid("the file sink needs path = '...'"))?;
    let storage = ObjectStorage::open(&path, target.s3)
        .map_err(|e| invalid(format!("file sink path {path}: {e}")))?;
    Ok(Arc::new(FileSinkSpec {
        sink: target.name.to_string(),
        storage,
        format,
        schema: Arc::new(target.schema.clone()),
    }))
}

impl SinkConnector for FileSinkSpec {
    fn connector(&self) -> &'static str {
        "file"
    }
    fn exactly_once(&self) -> bool {
        true
    }
    fn exactly_once_setting(&self) -> &'static str {
        "the file sink"
    }
    fn build(&self, _: &str, ctx: SinkContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(FileSinkOperator::new(self.clone(), ctx)?))
    }
}

struct FileTarget {
    spec: FileSinkSpec,
}

fn storage_err(e: weir_storage::StorageError) -> ExecError {
    ExecError::Internal(format!("file sink: {e}"))
}

impl FileTarget {
    fn part(&self, seq: u64) -> String {
        format!("part-{seq:020}.{EXTENSION}")
    }

    /// The bytes of one batch's file: one record per line.
    fn contents(&self, batch: &Staged) -> Bytes {
        let mut lines = Vec::new();
        for r in batch.records.iter() {
            if let Some(p) = &r.payload {
                lines.extend_from_slice(p);
                lines.push(b'\n');
            }
        }
        Bytes::from(lines)
    }
}

impl TwoPhaseTarget for FileTarget {
    /// Pending files of an earlier run are dropped (restored batches are written again
    /// from the state); the highest committed part is the marker.
    fn recover<'a>(&'a self, _restored: &'a [Staged]) -> BoxFuture<'a, Result<Option<u64>>> {
        Box::pin(async move {
            let s = &self.spec.storage;
            s.delete_prefix("_pending").await.map_err(storage_err)?;
            let ext = format!(".{EXTENSION}");
            Ok(s.list("")
                .await
                .map_err(storage_err)?
                .iter()
                .filter_map(|(k, _)| k.strip_prefix("part-")?.strip_suffix(&ext)?.parse().ok())
                .max())
        })
    }

    fn prepare<'a>(&'a self, batch: &'a Staged) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let bytes = self.contents(batch);
            self.spec
                .storage
                .put(&format!("_pending/{}", self.part(batch.seq)), bytes)
                .await
                .map_err(storage_err)
        })
    }

    fn commit<'a>(&'a self, batches: &'a [Staged]) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let s = &self.spec.storage;
            for b in batches {
                let part = self.part(b.seq);
                let pending = format!("_pending/{part}");
                if !s.rename(&pending, &part).await.map_err(storage_err)? {
                    s.put(&part, self.contents(b)).await.map_err(storage_err)?;
                }
            }
            Ok(())
        })
    }
}

pub struct FileSinkOperator {
    spec: FileSinkSpec,
    staging: Staging,
}

impl FileSinkOperator {
    pub fn new(spec: FileSinkSpec, ctx: SinkContext) -> Result<Self> {
        let target = Arc::new(FileTarget { spec: spec.clone() });
        let staging = Staging::start(&spec.sink, target, ctx)?;
        Ok(Self { spec, staging })
    }
}

impl Operator for FileSinkOperator {
    fn name(&self) -> &str {
        "FileSink"
    }

    fn process_chunk(&mut self, chunk: StreamChunk, _out: &mut Vec<StreamChunk>) -> Result<()> {
        let chunk = named(chunk, &self.spec.schema)?;
        let records: Vec<SinkRecord> = encode(&self.spec.format, &self.spec.sink, &chunk)?;
        self.staging.push(records)
    }

    fn on_barrier(&mut self, _barrier: &Barrier, _out: &mut Vec<StreamChunk>) -> Result<()> {
        self.staging.check()
    }

    fn snapshot(&mut self, epoch: Epoch) -> Result<Vec<StateDelta>> {
        self.staging.snapshot(epoch)
    }
}
