//! Conformance runs over `../shared/conformance/` (third-party sqllogictest files):
//! the `conformance` binary's report and the floor `tests/conformance.rs` holds.
//!
//! Every file runs against its own fresh `weir` server. Records are counted one by one
//! (a failing record does not hide the rest of its file). Records that use syntax Weir
//! deliberately does not support yet are skipped and listed with the reason. SQLite
//! files get the two header lines sqllogictest-rs needs, in a temporary copy.

use crate::WeirProcess;
use sqllogictest::{DefaultColumnType, Record};
use std::path::{Path, PathBuf};

/// (pattern in the lower-cased SQL, reason). Each is a feature of a later issue (none
/// left: CUMULATE windows, the last, are built).
const SKIP: &[(&str, &str)] = &[];

/// With `WEIR_CONFORMANCE_LOG=<file>`, every failure (SQL and error) is appended there.
fn log_failure(kind: &str, loc: &str, sql: &str, error: &str) {
    if let Ok(path) = std::env::var("WEIR_CONFORMANCE_LOG") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "=== {kind} {loc}\n{}\n--- {}", sql.trim(), error.trim());
        }
    }
}

const LABELS: &[&str] = &["postgres", "postgresql", "weir"];

fn skip_reason(sql: &str) -> Option<&'static str> {
    let l = sql.to_ascii_lowercase();
    SKIP.iter().find(|(p, _)| l.contains(p)).map(|(_, r)| *r)
}

pub struct FileResult {
    pub name: String,
    pub passed: usize,
    pub failed: usize,
    pub skipped: Vec<(String, &'static str)>,
    pub first_failures: Vec<String>,
    /// SQLite files: each query that passed as a SELECT, created as a materialized
    /// view and compared (as a multiset) with the same SELECT.
    pub mv_passed: usize,
    pub mv_failed: usize,
    pub mv_first_failures: Vec<String>,
    /// Queries a materialized view must refuse (issue 5: cross joins, and correlated
    /// subqueries that are cross joins in disguise), refused with 0A000 and the reason:
    /// listed with the reason, counted apart from passes and failures.
    pub mv_refused: Vec<(String, &'static str)>,
    /// The second mode: queries that passed as views, created before loading.
    pub views_first: crate::views_first::ViewsFirst,
}

/// Refusals the issue asks materialized views to make: (text of the error, reason).
const REFUSED_BY_DESIGN: &[(&str, &str)] = &[
    (
        "(a cross join) is refused in a materialized view",
        "view refused by design: a join with no equality between the sides (cross join)",
    ),
    (
        "correlated subquery whose correlation is not an equality",
        "view refused by design: a correlated subquery with only inequalities (a cross join)",
    ),
];

/// How a query fared as a materialized view.
enum ViewOutcome {
    Equal,
    Refused(&'static str),
    Failed(String),
}

/// Rows of a simple query as text, sorted (a multiset), or the error.
async fn sorted_rows(
    client: &tokio_postgres::Client,
    sql: &str,
) -> Result<Vec<Vec<String>>, String> {
    let mut rows = crate::query::try_rows(client, sql).await?;
    rows.sort();
    Ok(rows)
}

/// The query as a materialized view, compared with the same SELECT.
async fn as_view(client: &tokio_postgres::Client, n: usize, sql: &str) -> ViewOutcome {
    match create_and_compare(client, n, sql).await {
        Ok(()) => ViewOutcome::Equal,
        Err((code, e)) => match REFUSED_BY_DESIGN.iter().find(|(m, _)| e.contains(m)) {
            Some((_, reason)) if code.as_deref() == Some("0A000") => ViewOutcome::Refused(reason),
            _ => ViewOutcome::Failed(e),
        },
    }
}

/// Creates `sql` as the materialized view `name`; errors carry the SQLSTATE when the
/// server sent one.
pub(crate) async fn create_view(
    client: &tokio_postgres::Client,
    name: &str,
    sql: &str,
) -> Result<(), (Option<String>, String)> {
    let plain = |e: String| (None, e);
    let sql = sql.trim().trim_end_matches(';');
    // Columns named by the harness: SQLite's queries repeat expressions (`a+1, a+1`),
    // which Postgres names alike and refuses as a view's columns.
    let width = client
        .prepare(sql)
        .await
        .map_err(|e| plain(e.to_string()))?
        .columns()
        .len();
    let columns: Vec<String> = (1..=width).map(|i| format!("c{i}")).collect();
    client
        .batch_execute(&format!(
            "CREATE MATERIALIZED VIEW {name} ({}) AS {sql}",
            columns.join(", ")
        ))
        .await
        .map_err(|e| match e.as_db_error() {
            Some(d) => (Some(d.code().code().to_string()), d.message().to_string()),
            None => plain(e.to_string()),
        })
}

/// Creates the view and compares it; errors carry the SQLSTATE when the server sent one.
async fn create_and_compare(
    client: &tokio_postgres::Client,
    n: usize,
    sql: &str,
) -> Result<(), (Option<String>, String)> {
    let plain = |e: String| (None, e);
    let name = format!("conformance_mv_{n}");
    create_view(client, &name, sql).await?;
    let sql = sql.trim().trim_end_matches(';');
    let result = async {
        client
            .batch_execute("FLUSH")
            .await
            .map_err(|e| plain(e.to_string()))?;
        let view = sorted_rows(client, &format!("SELECT * FROM {name}"))
            .await
            .map_err(plain)?;
        let select = sorted_rows(client, sql).await.map_err(plain)?;
        if view == select {
            Ok(())
        } else {
            Err(plain(format!(
                "view has {} rows, the SELECT {}; first difference at {:?}",
                view.len(),
                select.len(),
                view.iter().zip(&select).position(|(a, b)| a != b)
            )))
        }
    }
    .await;
    let _ = client
        .batch_execute(&format!("DROP MATERIALIZED VIEW {name}"))
        .await;
    result
}

/// Runs one file: its records, each passing query also as a materialized view, and
/// every `views_first_stride`-th query equal as a view again in the second mode
/// ([`crate::views_first`]).
pub async fn run_file(
    path: &Path,
    display: &str,
    tmp: &Path,
    views_first_stride: usize,
) -> FileResult {
    let is_sqlite = display.starts_with("sqlite/");
    let source = if is_sqlite {
        let copy = tmp.join(path.file_name().unwrap());
        let text = std::fs::read_to_string(path).unwrap();
        std::fs::write(
            &copy,
            format!("hash-threshold 8\n\ncontrol resultmode valuewise\n\n{text}"),
        )
        .unwrap();
        copy
    } else {
        path.to_path_buf()
    };
    let records = sqllogictest::parse_file::<DefaultColumnType>(&source)
        .unwrap_or_else(|e| panic!("cannot parse {display}: {e}"));
    let data = tmp.join(format!("data-{}", display.replace('/', "_")));
    let server = WeirProcess::start(&data, 2).await;
    let port = server.port;
    let mut runner = sqllogictest::Runner::new(move || crate::slt::connect_untyped(port));
    for l in LABELS {
        runner.add_label(l);
    }
    let mut res = FileResult {
        name: display.to_string(),
        passed: 0,
        failed: 0,
        skipped: vec![],
        first_failures: vec![],
        mv_passed: 0,
        mv_failed: 0,
        mv_first_failures: vec![],
        mv_refused: vec![],
        views_first: Default::default(),
    };
    // For the second mode: the records that count, and the queries equal as views.
    let mut replay = Vec::new();
    let mut candidates = Vec::new();
    // Every passing query is also compared as a materialized view (both suites).
    let client = Some(server.connect().await);
    let mut views = 0usize;
    for record in records {
        let (sql, loc) = match &record {
            Record::Statement {
                sql,
                loc,
                conditions,
                ..
            }
            | Record::Query {
                sql,
                loc,
                conditions,
                ..
            } => {
                // `skipif postgresql` / `onlyif mysql` records are not meant for a
                // Postgres-compatible engine: they are not part of the count.
                let skipped_by_condition = conditions.iter().any(|c| match c {
                    sqllogictest::Condition::OnlyIf { label } => !LABELS.contains(&label.as_str()),
                    sqllogictest::Condition::SkipIf { label } => LABELS.contains(&label.as_str()),
                });
                if skipped_by_condition {
                    continue;
                }
                (Some(sql.clone()), loc.to_string())
            }
            _ => (None, String::new()),
        };
        if let Some(sql) = &sql {
            if let Some(reason) = skip_reason(sql) {
                res.skipped.push((loc, reason));
                continue;
            }
        }
        let is_query = matches!(record, Record::Query { .. });
        let ordinal = replay.len();
        if sql.is_some() {
            replay.push((ordinal, record.clone()));
        }
        let outcome = runner.run_async(record).await;
        if sql.is_some() {
            match outcome {
                Ok(_) => {
                    res.passed += 1;
                    if let (Some(client), Some(sql), true) = (&client, &sql, is_query) {
                        views += 1;
                        match as_view(client, views, sql).await {
                            ViewOutcome::Equal => {
                                res.mv_passed += 1;
                                if views.is_multiple_of(views_first_stride) {
                                    candidates.push(crate::views_first::Candidate {
                                        ordinal,
                                        loc: loc.clone(),
                                        sql: sql.clone(),
                                    });
                                }
                            }
                            ViewOutcome::Refused(reason) => {
                                res.mv_refused.push((loc.clone(), reason));
                            }
                            ViewOutcome::Failed(e) => {
                                log_failure("view", &loc, sql, &e);
                                res.mv_failed += 1;
                                if res.mv_first_failures.len() < 5 {
                                    res.mv_first_failures.push(format!("{loc}: {e}"));
                                }
                            }
                        }
                    }
                }
                Err(e) => {
                    log_failure(
                        "select",
                        &loc,
                        sql.as_deref().unwrap_or_default(),
                        &e.display(false).to_string(),
                    );
                    res.failed += 1;
                    if res.first_failures.len() < 5 {
                        res.first_failures.push(format!(
                            "{loc}: {}",
                            e.display(false)
                                .to_string()
                                .lines()
                                .take(3)
                                .collect::<Vec<_>>()
                                .join(" | ")
                        ));
                    }
                }
            }
        }
    }
    drop(client);
    drop(runner);
    drop(server);
    let data = tmp.join(format!("views-first-{}", display.replace('/', "_")));
    res.views_first = crate::views_first::run(replay, candidates, &data).await;
    res
}

pub fn files(dir: &Path, base: &Path, out: &mut Vec<(PathBuf, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files(&p, base, out);
        } else if p.extension().is_some_and(|e| e == "slt") {
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().to_string();
            out.push((p, rel));
        }
    }
}

/// The conformance folder next to the project (`../shared/conformance`).
pub fn default_dir() -> PathBuf {
    crate::clients::manifest_dir().join("../../shared/conformance")
}

/// Runs every file under `dir` whose path contains `filter`.
pub async fn run_suite(dir: &Path, filter: &str) -> Vec<FileResult> {
    let mut list = Vec::new();
    files(dir, dir, &mut list);
    let tmp = tempfile::tempdir().unwrap();
    let mut results = Vec::new();
    for (path, rel) in list {
        if !rel.contains(filter) {
            continue;
        }
        eprintln!("running {rel}");
        // SQLite's 5,000 view queries: every 10th in the second mode (time).
        let stride = if rel.starts_with("sqlite/") { 10 } else { 1 };
        results.push(run_file(&path, &rel, tmp.path(), stride).await);
    }
    results
}

/// (passed, failed) of the materialized-view comparisons over all files.
pub fn view_totals(results: &[FileResult]) -> (usize, usize) {
    results
        .iter()
        .fold((0, 0), |(p, f), r| (p + r.mv_passed, f + r.mv_failed))
}

/// (passed, failed) of the views created before loading, over all files.
/// (passed, failed, passed with no write after creation) of the views created before
/// loading, over all files.
pub fn views_first_totals(results: &[FileResult]) -> (usize, usize, usize) {
    results.iter().fold((0, 0, 0), |(p, f, u), r| {
        let v = &r.views_first;
        (p + v.passed, f + v.failed, u + v.unwritten)
    })
}

/// Queries refused as materialized views by design, over all files.
pub fn refused_total(results: &[FileResult]) -> usize {
    results.iter().map(|r| r.mv_refused.len()).sum()
}

/// (passed, failed, skipped) over all files.
pub fn totals(results: &[FileResult]) -> (usize, usize, usize) {
    results.iter().fold((0, 0, 0), |(p, f, s), r| {
        (p + r.passed, f + r.failed, s + r.skipped.len())
    })
}

/// The markdown report: per-file table, skip list with reasons, first failures.
pub fn report(results: &[FileResult]) -> String {
    let mut out = String::new();
    out.push_str("\n| file | passed | failed | skipped | total | pass % |\n");
    out.push_str("| --- | ---: | ---: | ---: | ---: | ---: |\n");
    for r in results {
        let total = r.passed + r.failed + r.skipped.len();
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {:.1} |\n",
            r.name,
            r.passed,
            r.failed,
            r.skipped.len(),
            total,
            100.0 * r.passed as f64 / total.max(1) as f64
        ));
    }
    let (p, f, s) = totals(results);
    out.push_str(&format!(
        "| **total** | {p} | {f} | {s} | {} | {:.1} |\n",
        p + f + s,
        100.0 * p as f64 / (p + f + s).max(1) as f64
    ));
    let (vp, vf) = view_totals(results);
    let refused = refused_total(results);
    if vp + vf + refused > 0 {
        out.push_str(&format!(
            "\nQueries that pass as SELECTs, as materialized views compared with the same SELECT: {vp} of {} ({:.1}%) equal; {refused} more refused by design (listed below)\n",
            vp + vf,
            100.0 * vp as f64 / (vp + vf).max(1) as f64
        ));
        for r in results {
            for f in &r.mv_first_failures {
                out.push_str(&format!("- {f}\n"));
            }
        }
    }
    let (fp, ff, fu) = views_first_totals(results);
    if fp + ff > 0 {
        out.push_str(&format!(
            "\nViews created before loading (every change reaches them): {fp} of {} equal their SELECT ({fu} of them saw no write: their file writes nothing after their relations exist)\n",
            fp + ff
        ));
        for r in results {
            for f in &r.views_first.first_failures {
                out.push_str(&format!("- {f}\n"));
            }
        }
    }
    out.push_str("\nSkipped records:\n");
    for r in results {
        for (loc, reason) in &r.skipped {
            out.push_str(&format!("- {loc}: {reason}\n"));
        }
    }
    out.push_str("\nQueries refused as materialized views by design:\n");
    for r in results {
        for (loc, reason) in &r.mv_refused {
            out.push_str(&format!("- {loc}: {reason}\n"));
        }
    }
    out.push_str("\nFirst failures per file:\n");
    for r in results {
        for f in &r.first_failures {
            out.push_str(&format!("- {f}\n"));
        }
    }
    out
}
