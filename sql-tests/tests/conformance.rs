//! The conformance files (`../shared/conformance/`: RisingWave's and SQLite's) in the
//! default run, record by record, each file against its own server.
//!
//! Gates: 92% of the RisingWave records (what passes today) and each of their passing
//! queries equal as a materialized view; 100% of the SQLite records as plain SELECTs,
//! and every SQLite query that passes also equal as a materialized view, except the
//! views issue 5 requires Weir to refuse (cross joins, and correlated subqueries with
//! only inequalities, which are cross joins too): those must be refused with 0A000, are
//! listed with the reason, and are capped at the 4,112 refused today. A second mode
//! creates the queries that pass as views (every RisingWave one, every 10th SQLite one)
//! **before** the file writes the rows they read, so that every write reaches them as a
//! change: all must equal their SELECT. The tests print the per-file table, every
//! skipped or refused record with its reason, and the first failures.

use weir_sql_tests::conformance;

/// The gates of one suite: `floor` % of its records pass, `view_floor` % of its passing
/// queries also pass as materialized views, and at most `max_refused` of them are
/// refused as views by design (pinned, so that more refusals cannot pass as a
/// smaller denominator).
async fn holds_floor(
    suite: &str,
    floor: f64,
    view_floor: f64,
    at_least: usize,
    max_refused: usize,
) {
    let dir = conformance::default_dir();
    if !dir.join(suite).is_dir() {
        let why = format!(
            "{} is missing: the conformance files come with the project's shared folder",
            dir.join(suite).display()
        );
        // A user's clone has no shared folder: the suite reports itself skipped (and
        // scripts/test.sh repeats it at the end). In CI a missing folder is a failure.
        assert!(std::env::var_os("CI").is_none(), "{why} (CI is set)");
        eprintln!("SKIPPED conformance suite {suite}: {why}");
        return;
    }
    let results = conformance::run_suite(&dir, &format!("{suite}/")).await;
    eprintln!("{}", conformance::report(&results));
    let (passed, failed, skipped) = conformance::totals(&results);
    let total = passed + failed + skipped;
    assert!(total >= at_least, "only {total} {suite} records found");
    let pct = 100.0 * passed as f64 / total as f64;
    assert!(
        pct >= floor,
        "{suite}: {passed} of {total} records pass ({pct:.1}%), below the floor of {floor}%"
    );
    let (vp, vf) = conformance::view_totals(&results);
    let vpct = 100.0 * vp as f64 / (vp + vf).max(1) as f64;
    assert!(
        vpct >= view_floor,
        "{suite}: {vp} of {} queries pass as materialized views ({vpct:.1}%), below the floor of {view_floor}%",
        vp + vf
    );
    // The second mode: views created before loading, every write reaching them as a
    // change, all equal to their SELECT.
    let (fp, ff, unwritten) = conformance::views_first_totals(&results);
    assert!(
        fp > 0,
        "{suite}: no view ran in the views-before-loading mode"
    );
    assert_eq!(
        ff,
        0,
        "{suite}: {ff} of {} views created before loading differ from their SELECT",
        fp + ff
    );
    eprintln!("{suite}: views created before loading: {fp} equal ({unwritten} saw no write)");
    let refused = conformance::refused_total(&results);
    assert!(
        refused <= max_refused,
        "{suite}: {refused} queries refused as materialized views by design, more than the pinned {max_refused}"
    );
}

/// RisingWave files: 515 of 559 records pass (92.1%, measured 2026-12-01), so the
/// floor of 92% fails on the first record lost; their 110 passing queries also pass as
/// materialized views (100%), none refused.
const RW_FLOOR: f64 = 92.0;
const RW_VIEW_FLOOR: f64 = 100.0;
const RW_MAX_REFUSED: usize = 0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn risingwave_files_hold_the_floor() {
    holds_floor("risingwave", RW_FLOOR, RW_VIEW_FLOOR, 559, RW_MAX_REFUSED).await;
}

/// About seven minutes: 10,706 records of plain SELECTs (correlated subqueries run as
/// SubPlans, per outer row), and each query that passes also as a materialized view
/// compared with the same SELECT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_files_pass_as_selects_and_as_views() {
    holds_floor("sqlite", 100.0, 100.0, 10_706, 4_112).await;
}
