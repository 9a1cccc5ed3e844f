//! OverWindow: window functions (`lag(x) OVER (PARTITION BY k ORDER BY t)`, `sum(x) OVER
//! (...)`, `min(t) OVER (PARTITION BY k)`, ...) kept up to date under inserts, updates
//! and deletes.
//!
//! A [`PartitionedOperator`] whose partitions show every row with its window values:
//! when an epoch changes a partition, the window functions are evaluated again over the
//! whole partition (DataFusion's physical window expressions, on one batch of the
//! partition's rows in ORDER BY order) and the rows whose values changed are retracted
//! and inserted again. Work per epoch is therefore proportional to the size of the
//! partitions it touches, which suits per-key windows (sessions per user) and not one
//! huge unpartitioned window.

use crate::error::Result;
use crate::operator::Operator;
use crate::operators::partition_rows::{
    Partition, PartitionLayout, PartitionedOperator, PartitionedSpec, Showing, Shown, StateRestore,
};
use crate::operators::spec::BuildContext;
use crate::plain_rows::RowCodec;
use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::physical_plan::WindowExpr;
use std::sync::Arc;
use weir_storage::StateBackend;

#[derive(Debug, Clone)]
pub struct OverWindowSpec {
    pub layout: PartitionLayout,
    /// The window functions, over the input row's columns (`layout.row_types`), all
    /// with the same PARTITION BY and ORDER BY.
    pub window_exprs: Vec<Arc<dyn WindowExpr>>,
    /// The input row's schema the window expressions were planned against.
    pub input_schema: SchemaRef,
}

impl OverWindowSpec {
    /// The window functions' names, comma-separated.
    fn function_names(&self) -> String {
        let names: Vec<&str> = self.window_exprs.iter().map(|e| e.name()).collect();
        names.join(", ")
    }

    fn window_types(&self) -> Vec<DataType> {
        let fields = self.layout.output_schema.fields();
        fields[fields.len() - self.window_exprs.len()..]
            .iter()
            .map(|f| f.data_type().clone())
            .collect()
    }
}

impl PartitionedSpec for OverWindowSpec {
    fn kind(&self) -> &'static str {
        "OverWindow"
    }

    fn describe(&self) -> String {
        format!(
            "OverWindow: partition keys={} order keys={} functions=[{}] uid={} state=StateTable(key_group, partition -> every row in order)",
            self.layout.partition_types.len(),
            self.layout.sort_fields.len(),
            self.function_names(),
            self.layout.uid
        )
    }

    fn layout(&self) -> &PartitionLayout {
        &self.layout
    }

    fn layout_mut(&mut self) -> &mut PartitionLayout {
        &mut self.layout
    }

    fn state_schema(&self) -> String {
        format!(
            "over {} functions({})",
            self.layout.describe_types(),
            self.function_names()
        )
    }

    fn build(&self, ctx: &BuildContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(over_window_operator(
            self.clone(),
            ctx.backend.clone(),
            ctx.restore,
        )?))
    }
}

/// Every row of a partition with its window values.
pub struct Windowed {
    spec: OverWindowSpec,
    types: Vec<DataType>,
}

impl Shown for Windowed {
    fn name(&self) -> &str {
        "OverWindow"
    }

    fn extra_types(&self) -> Vec<DataType> {
        self.types.clone()
    }

    fn shown(&self, partition: Option<&Partition>, rows: &RowCodec) -> Result<Showing> {
        let present: Vec<&[u8]> = partition
            .into_iter()
            .flat_map(|p| p.present().map(|(_, row)| row))
            .collect();
        if present.is_empty() {
            return Ok(Showing {
                rows: vec![],
                extras: vec![],
            });
        }
        let columns = if self.spec.input_schema.fields().is_empty() {
            vec![]
        } else {
            rows.decode(present.iter().copied())?
        };
        let batch = RecordBatch::try_new_with_options(
            self.spec.input_schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(present.len())),
        )?;
        let values = self
            .spec
            .window_exprs
            .iter()
            .zip(&self.types)
            .map(|(e, t)| {
                let v = e.evaluate(&batch)?;
                Ok(if v.data_type() == t {
                    v
                } else {
                    arrow::compute::cast(&v, t)?
                })
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        Ok(Showing {
            rows: present.iter().map(|r| r.to_vec()).collect(),
            extras: values,
        })
    }
}

pub type OverWindowOperator = PartitionedOperator<Windowed>;

pub fn over_window_operator(
    spec: OverWindowSpec,
    backend: Arc<dyn StateBackend>,
    restore: StateRestore,
) -> Result<OverWindowOperator> {
    let types = spec.window_types();
    let layout = spec.layout.clone();
    PartitionedOperator::new(layout, Windowed { spec, types }, backend, restore)
}
