//! Processing time: `PROCTIME()` (Flink's), the wall-clock time at which a row is
//! projected, as a TIMESTAMP with millisecond values.
//!
//! One clock for the whole process that never goes back (the largest reading so
//! far), so that a watermark taken from it holds for every later row. A projection
//! that computes `PROCTIME()` is where that column's watermarks begin: at each
//! barrier (every `barrier_interval`, 1 s by default) it emits the clock's time on
//! that column (`Operator::clock_watermarks`), so a window aggregation over it
//! (Nexmark q12) closes each window within about a barrier interval after the wall
//! clock passed its end: Flink fires a processing-time timer at that instant. As in
//! Flink, the end of a bounded input does not close processing-time windows; they
//! close when their time comes.

use datafusion::common::ScalarValue;
use std::sync::atomic::{AtomicI64, Ordering};

/// The function's name, as SQL calls it.
pub const NAME: &str = "proctime";

static LAST_MS: AtomicI64 = AtomicI64::new(0);

/// Now, in milliseconds since the epoch, never less than an earlier reading.
pub fn now_ms() -> i64 {
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    LAST_MS.fetch_max(wall, Ordering::AcqRel).max(wall)
}

/// A processing-time value (or watermark) of `ms` milliseconds, in the column type
/// `PROCTIME()` returns.
pub fn value(ms: i64) -> ScalarValue {
    ScalarValue::TimestampNanosecond(Some(ms.saturating_mul(1_000_000)), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_never_goes_back() {
        let mut last = now_ms();
        for _ in 0..1000 {
            let t = now_ms();
            assert!(t >= last);
            last = t;
        }
        LAST_MS.fetch_max(last + 60_000, Ordering::AcqRel);
        assert!(
            now_ms() >= last + 60_000,
            "a reading ahead of the wall clock holds"
        );
    }
}
