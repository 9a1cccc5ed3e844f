//! Conformance report over `../shared/conformance/` (third-party sqllogictest files).
//!
//! Usage: `cargo run -p weir-sql-tests --bin conformance [-- <conformance dir> [filter]]`
//!
//! Every file runs against its own fresh `weir` server. Records are counted one by one
//! (a failing record does not hide the rest of its file). Records that use syntax Weir
//! deliberately does not support yet are skipped and listed with the reason. SQLite
//! files get the two header lines sqllogictest-rs needs, in a temporary copy.

use sqllogictest::{DefaultColumnType, Record};
use std::path::{Path, PathBuf};
use weir_sql_tests::WeirProcess;

/// (pattern in the lower-cased SQL, reason). Each is a feature of a later issue.
const SKIP: &[(&str, &str)] = &[
    ("session(", "SESSION windows are not supported yet"),
    ("cumulate(", "CUMULATE windows are not supported yet"),
];

const LABELS: &[&str] = &["postgres", "postgresql", "weir"];

fn skip_reason(sql: &str) -> Option<&'static str> {
    let l = sql.to_ascii_lowercase();
    SKIP.iter().find(|(p, _)| l.contains(p)).map(|(_, r)| *r)
}

struct FileResult {
    name: String,
    passed: usize,
    failed: usize,
    skipped: Vec<(String, &'static str)>,
    first_failures: Vec<String>,
}

async fn run_file(path: &Path, display: &str, tmp: &Path) -> FileResult {
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
    let mut runner = sqllogictest::Runner::new(move || weir_sql_tests::slt::connect(port));
    for l in LABELS {
        runner.add_label(l);
    }
    let mut res = FileResult {
        name: display.to_string(),
        passed: 0,
        failed: 0,
        skipped: vec![],
        first_failures: vec![],
    };
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
        let outcome = runner.run_async(record).await;
        if sql.is_some() {
            match outcome {
                Ok(_) => res.passed += 1,
                Err(e) => {
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
    res
}

fn files(dir: &Path, base: &Path, out: &mut Vec<(PathBuf, String)>) {
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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = args.get(1).map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(
            // Run-time first: a shared target folder may hold a binary built in
            // another clone (see tests/slt.rs).
            std::env::var("CARGO_MANIFEST_DIR")
                .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
        )
        .join("../../shared/conformance")
    });
    let filter = args.get(2).cloned().unwrap_or_default();
    let mut list = Vec::new();
    files(&dir, &dir, &mut list);
    let tmp = tempfile::tempdir().unwrap();
    let mut results = Vec::new();
    for (path, rel) in list {
        if !rel.contains(&filter) {
            continue;
        }
        eprintln!("running {rel}");
        results.push(run_file(&path, &rel, tmp.path()).await);
    }
    println!("\n| file | passed | failed | skipped | total | pass % |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    let (mut p, mut f, mut s) = (0, 0, 0);
    for r in &results {
        let total = r.passed + r.failed + r.skipped.len();
        println!(
            "| {} | {} | {} | {} | {} | {:.1} |",
            r.name,
            r.passed,
            r.failed,
            r.skipped.len(),
            total,
            100.0 * r.passed as f64 / total.max(1) as f64
        );
        p += r.passed;
        f += r.failed;
        s += r.skipped.len();
    }
    println!(
        "| **total** | {p} | {f} | {s} | {} | {:.1} |",
        p + f + s,
        100.0 * p as f64 / (p + f + s).max(1) as f64
    );
    println!("\nSkipped records:");
    for r in &results {
        for (loc, reason) in &r.skipped {
            println!("- {loc}: {reason}");
        }
    }
    println!("\nFirst failures per file:");
    for r in &results {
        for f in &r.first_failures {
            println!("- {f}");
        }
    }
}
