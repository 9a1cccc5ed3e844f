//! The time bounds of an interval join's condition, for cleaning its state by
//! watermark (see the executor's `join_cleaning`): every conjunct comparing a column
//! of one side with a column of the other, each optionally plus or minus a fixed
//! interval (`b.ts >= a.ts`, `b.ts <= a.expires`, `b.ts BETWEEN a.ts - INTERVAL '10'
//! SECOND AND a.ts`, which DataFusion splits into two such conjuncts).

use datafusion::arrow::datatypes::DataType;
use datafusion::common::DFSchema;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator};
use weir_executor::operators::join_cleaning::IntervalBound;

/// `column + offset_ms` on one side: (side, payload column, offset).
fn term(e: &Expr, sides: [&DFSchema; 2]) -> Option<(usize, usize, i64)> {
    match e {
        // Only time columns: watermarks are on them, and `num >= maxn` is no interval.
        Expr::Column(c) => sides.iter().enumerate().find_map(|(s, schema)| {
            let i = schema.maybe_index_of_column(c)?;
            let temporal = matches!(
                schema.field(i).data_type(),
                DataType::Timestamp(..) | DataType::Date32 | DataType::Date64
            );
            temporal.then_some((s, i, 0))
        }),
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let Expr::Literal(v, _) = right.as_ref() else {
                return None;
            };
            let ms = weir_executor::watermark::fixed_interval_ms(v)?;
            let (s, i, o) = term(left, sides)?;
            match op {
                Operator::Plus => Some((s, i, o + ms)),
                Operator::Minus => Some((s, i, o - ms)),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The bounds `filter` implies, over payload columns of `left` (side 0) and `right`.
pub fn interval_bounds(filter: &Expr, left: &DFSchema, right: &DFSchema) -> Vec<IntervalBound> {
    let mut bounds = Vec::new();
    for conjunct in split_conjunction(filter) {
        let Expr::BinaryExpr(BinaryExpr {
            left: a,
            op,
            right: b,
        }) = conjunct
        else {
            continue;
        };
        let (Some(a), Some(b)) = (term(a, [left, right]), term(b, [left, right])) else {
            continue;
        };
        if a.0 == b.0 {
            continue;
        }
        // Normalized to `hi >= lo + c`: rows of hi's side below lo's watermark + c die.
        let (hi, lo) = match op {
            Operator::Gt | Operator::GtEq => (a, b),
            Operator::Lt | Operator::LtEq => (b, a),
            _ => continue,
        };
        bounds.push(IntervalBound {
            side: hi.0,
            column: hi.1,
            other_column: lo.1,
            offset_ms: lo.2 - hi.2,
        });
    }
    bounds
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use datafusion::common::ScalarValue;
    use datafusion::logical_expr::{col, lit};

    fn schema(q: &str, cols: &[&str]) -> DFSchema {
        let ts = DataType::Timestamp(TimeUnit::Microsecond, None);
        let fields: Vec<Field> = cols
            .iter()
            .map(|c| Field::new(*c, ts.clone(), true))
            .collect();
        DFSchema::try_from_qualified_schema(q, &Schema::new(fields)).unwrap()
    }

    /// Nexmark q5's `AuctionBids.num >= MaxBids.maxn` compares counts, not times.
    #[test]
    fn numbers_compared_are_no_interval() {
        let field = |n: &str| Field::new(n, DataType::Int64, true);
        let a = DFSchema::try_from_qualified_schema("a", &Schema::new(vec![field("num")])).unwrap();
        let b =
            DFSchema::try_from_qualified_schema("b", &Schema::new(vec![field("maxn")])).unwrap();
        let filter = col("a.num").gt_eq(col("b.maxn"));
        assert_eq!(interval_bounds(&filter, &a, &b), vec![]);
    }

    #[test]
    fn between_gives_one_bound_per_side() {
        // Nexmark q4: B.date_time BETWEEN A.date_time AND A.expires.
        let a = schema("a", &["id", "date_time", "expires"]);
        let b = schema("b", &["date_time"]);
        let filter = col("b.date_time")
            .gt_eq(col("a.date_time"))
            .and(col("b.date_time").lt_eq(col("a.expires")));
        let bounds = interval_bounds(&filter, &a, &b);
        assert_eq!(
            bounds,
            vec![
                // Bids below the auctions' watermark on date_time are dead ...
                IntervalBound {
                    side: 1,
                    column: 0,
                    other_column: 1,
                    offset_ms: 0
                },
                // ... and auctions that expired before the bids' watermark.
                IntervalBound {
                    side: 0,
                    column: 2,
                    other_column: 0,
                    offset_ms: 0
                },
            ]
        );
    }

    #[test]
    fn intervals_shift_the_bound() {
        let a = schema("a", &["ts"]);
        let b = schema("b", &["ts"]);
        let ten = lit(ScalarValue::new_interval_mdn(0, 0, 10_000_000_000));
        // b.ts >= a.ts - 10 s: b rows die below a's watermark - 10 s.
        let filter = col("b.ts").gt_eq(col("a.ts") - ten);
        assert_eq!(
            interval_bounds(&filter, &a, &b),
            vec![IntervalBound {
                side: 1,
                column: 0,
                other_column: 0,
                offset_ms: -10_000
            }]
        );
        // Same-side comparisons and other operators give nothing.
        assert!(interval_bounds(&col("a.ts").gt(col("a.ts")), &a, &b).is_empty());
        assert!(interval_bounds(&col("a.ts").eq(col("b.ts")), &a, &b).is_empty());
    }
}
