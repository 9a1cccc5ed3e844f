//! `weir savepoint create|list|restore|drop`: a running server's savepoints from the
//! command line, for operators and CI/CD pipelines (a savepoint before every deploy).
//!
//! It connects like any Postgres client (`--host`, `--port`, `--user`, a password from
//! `--password`, `PGPASSWORD` or `WEIR_PASSWORD`), runs the statement, and prints what
//! the server answered: rows as a table, or with `--json` one JSON document on stdout
//! (`{"ok": true, "command": ..., "rows": [...], "notices": [...]}`, or `{"ok": false,
//! "sqlstate": ..., "message": ...}`). The exit status is 0 on success, 1 when the
//! server refused the statement, 2 when it could not be reached.

use clap::Subcommand;
use serde_json::{json, Map, Value};
use std::sync::{Arc, Mutex};
use tokio_postgres::{AsyncMessage, NoTls, SimpleQueryMessage};

#[derive(clap::Args)]
pub struct SavepointArgs {
    #[command(subcommand)]
    action: Action,
    /// Server host.
    #[arg(long, default_value = "127.0.0.1", global = true)]
    host: String,
    /// Server port.
    #[arg(long, default_value_t = 6543, global = true)]
    port: u16,
    #[arg(long, default_value = "weir", global = true)]
    user: String,
    /// Password (else PGPASSWORD or WEIR_PASSWORD).
    #[arg(long, global = true)]
    password: Option<String>,
    /// One JSON document on stdout instead of text.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum Action {
    /// SAVEPOINT name [FOR MATERIALIZED VIEW ...]; prints the savepoint as listed.
    Create {
        name: String,
        /// Only these views (repeatable); default every view and table.
        #[arg(long = "view")]
        views: Vec<String>,
    },
    /// SHOW SAVEPOINTS.
    List,
    /// RESTORE ALL FROM SAVEPOINT name, or with --view, RESTORE MATERIALIZED VIEW v
    /// FROM SAVEPOINT name for each.
    Restore {
        name: String,
        #[arg(long = "view")]
        views: Vec<String>,
        /// WITH (ignore_unclaimed_state = true).
        #[arg(long)]
        ignore_unclaimed_state: bool,
    },
    /// DROP SAVEPOINT name.
    Drop { name: String },
}

/// A quoted identifier: the name exactly as given.
fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl Action {
    /// The statements to run, in order; the last one's rows are the answer.
    fn statements(&self) -> Vec<String> {
        match self {
            Action::Create { name, views } if views.is_empty() => {
                vec![format!("SAVEPOINT {}", ident(name)), listed(name)]
            }
            Action::Create { name, views } => vec![
                format!(
                    "SAVEPOINT {} FOR MATERIALIZED VIEW {}",
                    ident(name),
                    views
                        .iter()
                        .map(|v| ident(v))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                listed(name),
            ],
            Action::List => vec!["SELECT * FROM weir_catalog.savepoints ORDER BY created".into()],
            Action::Restore {
                name,
                views,
                ignore_unclaimed_state,
            } => {
                let with = if *ignore_unclaimed_state {
                    " WITH (ignore_unclaimed_state = true)"
                } else {
                    ""
                };
                if views.is_empty() {
                    vec![format!("RESTORE ALL FROM SAVEPOINT {}{with}", ident(name))]
                } else {
                    views
                        .iter()
                        .map(|v| {
                            format!(
                                "RESTORE MATERIALIZED VIEW {} FROM SAVEPOINT {}{with}",
                                ident(v),
                                ident(name)
                            )
                        })
                        .collect()
                }
            }
            Action::Drop { name } => vec![format!("DROP SAVEPOINT {}", ident(name))],
        }
    }
}

/// The savepoint's row of `weir_catalog.savepoints`.
fn listed(name: &str) -> String {
    format!(
        "SELECT * FROM weir_catalog.savepoints WHERE name = '{}'",
        name.replace('\'', "''")
    )
}

/// What the statements answered: each statement's command tag, the rows of those
/// that return rows, and the notices.
#[derive(Default)]
struct Answer {
    commands: Vec<String>,
    rows: Vec<Value>,
}

async fn run_statements(
    client: &tokio_postgres::Client,
    statements: &[String],
) -> Result<Answer, tokio_postgres::Error> {
    let mut answer = Answer::default();
    for sql in statements {
        for m in client.simple_query(sql).await? {
            match m {
                SimpleQueryMessage::Row(r) => {
                    let mut obj = Map::new();
                    for (i, c) in r.columns().iter().enumerate() {
                        let v = r.get(i).map_or(Value::Null, |s| Value::String(s.into()));
                        obj.insert(c.name().to_string(), v);
                    }
                    answer.rows.push(Value::Object(obj));
                }
                SimpleQueryMessage::CommandComplete(_) => {
                    answer
                        .commands
                        .push(sql.split_whitespace().next().unwrap_or("").to_uppercase());
                }
                _ => {}
            }
        }
    }
    Ok(answer)
}

/// Runs the command; returns the process's exit status.
pub async fn run(args: SavepointArgs) -> i32 {
    let password = args
        .password
        .clone()
        .or_else(|| std::env::var("PGPASSWORD").ok())
        .or_else(|| std::env::var("WEIR_PASSWORD").ok());
    let mut conf = tokio_postgres::Config::new();
    conf.host(&args.host)
        .port(args.port)
        .user(&args.user)
        .dbname("weir")
        .application_name("weir savepoint");
    if let Some(p) = &password {
        conf.password(p);
    }
    let (client, mut connection) = match conf.connect(NoTls).await {
        Ok(c) => c,
        Err(e) => {
            return fail(
                &args,
                "08001",
                &format!(
                    "cannot connect to {}:{}: {}",
                    args.host,
                    args.port,
                    causes(&e)
                ),
                2,
            )
        }
    };
    let notices = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = notices.clone();
    let conn = tokio::spawn(async move {
        let mut stream = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(m)) = futures::StreamExt::next(&mut stream).await {
            if let AsyncMessage::Notice(n) = m {
                seen.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(n.message().into());
            }
        }
    });
    let result = run_statements(&client, &args.action.statements()).await;
    drop(client);
    let _ = conn.await;
    let notices = std::mem::take(&mut *notices.lock().unwrap_or_else(|e| e.into_inner()));
    match result {
        Ok(answer) => {
            print_answer(&args, &answer, &notices);
            0
        }
        Err(e) => match e.as_db_error() {
            Some(db) => fail(&args, db.code().code(), db.message(), 1),
            None => fail(&args, "08006", &causes(&e), 2),
        },
    }
}

fn print_answer(args: &SavepointArgs, answer: &Answer, notices: &[String]) {
    if args.json {
        let doc = json!({
            "ok": true,
            "command": answer.commands.first(),
            "rows": answer.rows,
            "notices": notices,
        });
        println!("{doc}");
        return;
    }
    for n in notices {
        println!("NOTICE: {n}");
    }
    for row in &answer.rows {
        let Value::Object(obj) = row else { continue };
        let fields: Vec<String> = obj
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("NULL")))
            .collect();
        println!("{}", fields.join(" "));
    }
    if let Some(c) = answer.commands.first() {
        if answer.rows.is_empty() {
            println!("{c}");
        }
    }
}

/// An error with its causes: tokio-postgres says "error connecting to server" and
/// keeps the reason (connection refused, ...) in its source.
fn causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    text
}

fn fail(args: &SavepointArgs, sqlstate: &str, message: &str, status: i32) -> i32 {
    if args.json {
        println!(
            "{}",
            json!({"ok": false, "sqlstate": sqlstate, "message": message})
        );
    } else {
        eprintln!("weir savepoint: {message} (SQLSTATE {sqlstate})");
    }
    status
}
