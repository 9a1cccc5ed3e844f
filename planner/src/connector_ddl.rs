//! RisingWave's connector DDL, rewritten into what sqlparser reads:
//!
//! - `CREATE SOURCE s (...)` is `CREATE TABLE s (...)` with the option
//!   `"weir.source" = 'true'`: a source is a table fed by its connector. Over a
//!   generator (`nexmark`, `datagen`) it keeps no rows (RisingWave's sources): its log
//!   holds index ranges and views regenerate the rows they replay. Over Kafka its
//!   records are kept, as Materialize keeps source data, so views over it recover like
//!   views over any table.
//! - `DROP SOURCE s` is `DROP TABLE s`.
//! - Bare dotted keys in `WITH (...)` (`properties.bootstrap.server = '...'`) are quoted.
//! - A trailing `FORMAT f ENCODE e [(k = v, ...)]` becomes the options
//!   `"format" = 'f', "encode" = 'e'` (plus the encode options).
//! - `INCLUDE partition | offset | timestamp | key [AS name]` clauses (Kafka message
//!   metadata) become columns (`int`, `bigint`, `timestamptz`, `bytea`; default names
//!   `_kafka_<what>`) and options `"include.<name>" = '<what>'`.

/// Byte ranges `[start, end)` in the statement.
type Spans = Vec<(usize, usize)>;

/// Top-level words (outside quotes and parentheses) with their byte ranges, and the
/// byte range of each top-level parenthesised group.
pub(crate) fn scan(sql: &str) -> (Spans, Spans) {
    let bytes = sql.as_bytes();
    let mut words = Vec::new();
    let mut groups = Vec::new();
    let mut depth = 0usize;
    let mut quote: Option<u8> = None;
    let mut word_start: Option<usize> = None;
    let mut group_start = 0;
    for (i, &c) in bytes.iter().enumerate() {
        if let Some(q) = quote {
            if c == q {
                quote = None;
            }
            continue;
        }
        let is_word = c.is_ascii_alphanumeric() || c == b'_';
        if depth == 0 {
            match (word_start, is_word) {
                (None, true) => word_start = Some(i),
                (Some(s), false) => {
                    words.push((s, i));
                    word_start = None;
                }
                _ => {}
            }
        }
        match c {
            b'\'' | b'"' => quote = Some(c),
            b'(' => {
                if depth == 0 {
                    group_start = i;
                }
                depth += 1;
            }
            b')' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    groups.push((group_start, i + 1));
                }
            }
            _ => {}
        }
    }
    if let Some(s) = word_start {
        words.push((s, bytes.len()));
    }
    (words, groups)
}

/// Splits `inner` (the text between a group's parentheses) at top-level commas.
fn split_items(inner: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut cur = String::new();
    for c in inner.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '\'' | '"' => quote = Some(c),
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                ',' if depth == 0 => {
                    out.push(std::mem::take(&mut cur));
                    continue;
                }
                _ => {}
            },
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur);
    }
    out
}

/// `a.b = v` -> `"a.b" = v`; anything else unchanged.
fn quote_key(item: &str) -> String {
    let Some((key, value)) = item.split_once('=') else {
        return item.to_string();
    };
    let k = key.trim();
    if (k.contains('.') || k.contains('-')) && !k.starts_with('"') && !k.starts_with('\'') {
        format!(" \"{k}\" ={value}")
    } else {
        item.to_string()
    }
}

/// Rewrites connector DDL (see the module docs); other statements are returned as is.
pub fn rewrite(sql: &str) -> String {
    // `DROP SOURCE [IF EXISTS] s` drops the table a source is.
    let (words, _) = scan(sql);
    let lower = sql.to_ascii_lowercase();
    if let [(a, b), (c, d), ..] = words[..] {
        if &lower[a..b] == "drop" && &lower[c..d] == "source" {
            let mut out = sql.to_string();
            out.replace_range(c..d, "TABLE");
            return out;
        }
    }
    let (sql, watermark) = strip_watermark(sql);
    rewrite_options(&sql, watermark)
}

/// `WATERMARK FOR col AS expr` in the column list (Flink's syntax) is removed from it
/// and returned as the options `"watermark.column"` and `"watermark.expr"`.
fn strip_watermark(sql: &str) -> (String, Vec<String>) {
    let lower = sql.to_ascii_lowercase();
    let (words, groups) = scan(sql);
    let word = |i: usize| -> Option<&str> { words.get(i).map(|&(s, e)| &lower[s..e]) };
    if word(0) != Some("create") || !matches!(word(1), Some("table") | Some("source")) {
        return (sql.to_string(), vec![]);
    }
    let Some(&(gs, ge)) = groups.first() else {
        return (sql.to_string(), vec![]);
    };
    let items = split_items(&sql[gs + 1..ge - 1]);
    let Some(i) = items.iter().position(|it| {
        let w: Vec<String> = it
            .split_whitespace()
            .take(2)
            .map(str::to_ascii_lowercase)
            .collect();
        w == ["watermark", "for"]
    }) else {
        return (sql.to_string(), vec![]);
    };
    let item = items[i].trim();
    let rest = item["watermark".len()..].trim_start()["for".len()..].trim_start();
    let (column, expr) = match rest.find(|c: char| c.is_whitespace()) {
        Some(end)
            if rest[end..]
                .trim_start()
                .to_ascii_lowercase()
                .starts_with("as") =>
        {
            (&rest[..end], rest[end..].trim_start()[2..].trim())
        }
        _ => (rest, ""),
    };
    let kept: Vec<&str> = items
        .iter()
        .enumerate()
        .filter(|(k, _)| *k != i)
        .map(|(_, it)| it.as_str())
        .collect();
    let out = format!("{}({}){}", &sql[..gs], kept.join(","), &sql[ge..]);
    let column = column.trim_matches('"').to_string();
    (
        out,
        vec![
            format!("\"watermark.column\" = '{}'", column.replace('\'', "''")),
            format!("\"watermark.expr\" = '{}'", expr.replace('\'', "''")),
        ],
    )
}

fn rewrite_options(sql: &str, watermark: Vec<String>) -> String {
    let lower = sql.to_ascii_lowercase();
    let (words, groups) = scan(sql);
    let word = |i: usize| -> Option<&str> { words.get(i).map(|&(s, e)| &lower[s..e]) };
    if word(0) != Some("create") || !matches!(word(1), Some("table") | Some("source")) {
        return sql.to_string();
    }
    let mut body = sql.to_string();
    // `INCLUDE what [AS name]` clauses: removed here, added back as columns below.
    let mut includes: Vec<(String, String)> = Vec::new();
    let mut include_spans: Vec<(usize, usize)> = Vec::new();
    let mut wi = 0;
    while wi < words.len() {
        if word(wi) == Some("include") {
            let what = word(wi + 1).unwrap_or_default().to_string();
            let (name, last) = if word(wi + 2) == Some("as") {
                (word(wi + 3).unwrap_or_default().to_string(), wi + 3)
            } else {
                (format!("_kafka_{what}"), wi + 1)
            };
            include_spans.push((words[wi].0, words[last.min(words.len() - 1)].1));
            includes.push((name, what));
            wi = last + 1;
        } else {
            wi += 1;
        }
    }
    // `FORMAT f ENCODE e [(...)]` at the end.
    let mut extra: Vec<String> = watermark;
    if let Some(fi) = (0..words.len()).rev().find(|&i| word(i) == Some("format")) {
        if word(fi + 2) == Some("encode") && word(fi + 3).is_some() {
            let (start, _) = words[fi];
            extra.push(format!(
                "\"format\" = '{}'",
                word(fi + 1).unwrap_or_default()
            ));
            extra.push(format!(
                "\"encode\" = '{}'",
                word(fi + 3).unwrap_or_default()
            ));
            let encode_end = words[fi + 3].1;
            if let Some(&(gs, ge)) = groups.iter().find(|(gs, _)| *gs >= encode_end) {
                extra.extend(split_items(&sql[gs + 1..ge - 1]));
            }
            body.truncate(start);
        }
    }
    for (name, what) in &includes {
        extra.push(format!("\"include.{name}\" = '{what}'"));
    }
    if word(1) == Some("source") {
        extra.push("\"weir.source\" = 'true'".to_string());
    }
    // The WITH group: the first top-level group after the word `with`.
    let with_group = words
        .iter()
        .position(|&(s, e)| &lower[s..e] == "with")
        .and_then(|wi| groups.iter().find(|(gs, _)| *gs >= words[wi].1).copied())
        .filter(|(_, ge)| *ge <= body.len());
    let mut out = match with_group {
        Some((gs, ge)) => {
            let mut items: Vec<String> = split_items(&sql[gs + 1..ge - 1]);
            items.extend(extra.iter().map(|e| format!(" {e}")));
            let items: Vec<String> = items.iter().map(|i| quote_key(i)).collect();
            format!("{}({}){}", &body[..gs], items.join(","), &body[ge..])
        }
        None if !extra.is_empty() => format!(
            "{} WITH ({})",
            body.trim_end(),
            extra
                .iter()
                .map(|i| quote_key(i))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => body,
    };
    // Metadata columns join the column list; their clauses go (right to left, so the
    // earlier byte ranges stay valid; all of them lie after the column list).
    for &(s, e) in include_spans.iter().rev() {
        out.replace_range(s..e, "");
    }
    if let (false, Some(&(_, ge))) = (includes.is_empty(), groups.first()) {
        let columns: String = includes
            .iter()
            .map(|(name, what)| {
                let t = match what.as_str() {
                    "partition" => "int",
                    "offset" => "bigint",
                    "timestamp" => "timestamptz",
                    _ => "bytea",
                };
                format!(", {name} {t}")
            })
            .collect();
        out.insert_str(ge - 1, &columns);
    }
    if word(1) == Some("source") {
        let (s, e) = words[1];
        out.replace_range(s..e, "TABLE");
    }
    out
}

/// A sink's `WITH (...)` options as (lower-case key, value) pairs.
pub type SinkOptions = Vec<(String, String)>;

/// What a sink reads: a table or view, or its own query (`CREATE SINK k AS SELECT ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkInput {
    Relation(String),
    Query(String),
}

/// `CREATE SINK name FROM relation | AS query [WITH (k = v, ...)] [FORMAT f ENCODE e]`:
/// the sink's name, what it reads, and its options (keys lower-case, values unquoted;
/// `format` / `encode` from the FORMAT clause). A query ends at the last top-level
/// `WITH (...)` (a CTE's `WITH` comes first).
pub fn parse_sink(sql: &str) -> Option<(String, SinkInput, SinkOptions)> {
    let rewritten = rewrite(&sql.replacen(
        &sql[..sql.to_ascii_lowercase().find("sink")? + 4],
        "CREATE TABLE",
        1,
    ));
    let lower = rewritten.to_ascii_lowercase();
    let (words, groups) = scan(&rewritten);
    let word = |i: usize| -> Option<&str> { words.get(i).map(|&(s, e)| &rewritten[s..e]) };
    let keyword = lower.get(words.get(3)?.0..words.get(3)?.1)?;
    let unquote = |t: &str| t.trim().trim_matches('"').trim_matches('\'').to_string();
    let ident = |t: &str| {
        if t.starts_with('"') {
            unquote(t)
        } else {
            t.to_ascii_lowercase()
        }
    };
    let name = ident(word(2)?);
    // The options group: after the last top-level `with` that a group follows.
    let with = words
        .iter()
        .enumerate()
        .rev()
        .find(|(_, &(s, e))| &lower[s..e] == "with")
        .and_then(|(wi, &(ws, we))| {
            let &(gs, ge) = groups.iter().find(|(gs, _)| *gs >= we)?;
            // Only when nothing but the group follows the `with` word.
            (rewritten[we..gs].trim().is_empty()
                && rewritten[ge..]
                    .trim()
                    .trim_end_matches(';')
                    .trim()
                    .is_empty())
            .then_some((wi, ws, gs, ge))
        });
    let input = match keyword {
        "from" => SinkInput::Relation(ident(word(4)?)),
        "as" => {
            let start = words[3].1;
            let end = with.map_or(rewritten.len(), |(_, ws, _, _)| ws);
            let query = rewritten[start..end].trim().trim_end_matches(';').trim();
            if query.is_empty() {
                return None;
            }
            SinkInput::Query(query.to_string())
        }
        _ => return None,
    };
    let mut options = Vec::new();
    if let Some((_, _, gs, ge)) = with {
        for item in split_items(&rewritten[gs + 1..ge - 1]) {
            let (k, v) = item.split_once('=')?;
            options.push((unquote(k).to_ascii_lowercase(), unquote(v)));
        }
    }
    Some((name, input, options))
}

#[cfg(test)]
mod tests {
    use super::rewrite;

    #[test]
    fn watermark_clause_becomes_options() {
        let got = rewrite(
            "CREATE TABLE t (id bigint, ts timestamp, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)",
        );
        assert_eq!(
            got,
            "CREATE TABLE t (id bigint, ts timestamp) WITH (\"watermark.column\" = 'ts', \"watermark.expr\" = 'ts - INTERVAL ''5'' SECOND')"
        );
        let got = rewrite(
            "CREATE SOURCE s (ts timestamp, watermark for ts as ts) WITH (connector = 'kafka')",
        );
        assert!(got.contains("\"watermark.expr\" = 'ts'"), "{got}");
        assert!(got.starts_with("CREATE TABLE s (ts timestamp)"), "{got}");
    }

    #[test]
    fn drop_source_drops_its_table() {
        assert_eq!(rewrite("DROP SOURCE IF EXISTS s"), "DROP TABLE IF EXISTS s");
        assert_eq!(rewrite("drop source s"), "drop TABLE s");
    }

    #[test]
    fn risingwave_source_ddl() {
        let got = rewrite(
            "CREATE SOURCE s (id bigint, v text) WITH (connector = 'kafka', topic = 'a.b', properties.bootstrap.server = 'h:9092') FORMAT PLAIN ENCODE JSON",
        );
        assert_eq!(
            got,
            "CREATE TABLE s (id bigint, v text) WITH (connector = 'kafka', topic = 'a.b', \"properties.bootstrap.server\" = 'h:9092', \"format\" = 'plain', \"encode\" = 'json', \"weir.source\" = 'true') "
        );
    }

    #[test]
    fn include_clauses_become_columns_and_options() {
        let got = rewrite(
            "CREATE TABLE t (id bigint) INCLUDE partition INCLUDE key AS k WITH (connector = 'kafka') FORMAT PLAIN ENCODE JSON",
        );
        assert_eq!(
            got,
            "CREATE TABLE t (id bigint, _kafka_partition int, k bytea)   WITH (connector = 'kafka', \"format\" = 'plain', \"encode\" = 'json', \"include._kafka_partition\" = 'partition', \"include.k\" = 'key') "
        );
    }

    #[test]
    fn create_sink() {
        let (name, from, opts) = super::parse_sink(
            "CREATE SINK k FROM v WITH (connector = 'blackhole', properties.x = '1') FORMAT PLAIN ENCODE JSON",
        )
        .unwrap();
        assert_eq!(name, "k");
        assert_eq!(from, super::SinkInput::Relation("v".into()));
        assert_eq!(
            opts,
            vec![
                ("connector".to_string(), "blackhole".to_string()),
                ("properties.x".into(), "1".into()),
                ("format".into(), "plain".into()),
                ("encode".into(), "json".into()),
            ]
        );
        assert!(super::parse_sink("CREATE SINK k v").is_none());
        let (_, input, opts) = super::parse_sink(
            "CREATE SINK q AS WITH b AS (SELECT * FROM bid) SELECT count(*) FROM b WITH (connector = 'blackhole');",
        )
        .unwrap();
        assert_eq!(
            input,
            super::SinkInput::Query("WITH b AS (SELECT * FROM bid) SELECT count(*) FROM b".into())
        );
        assert_eq!(
            opts,
            vec![("connector".to_string(), "blackhole".to_string())]
        );
    }

    #[test]
    fn format_without_with_and_plain_tables() {
        assert_eq!(
            rewrite("create table t (a int) format plain encode csv"),
            "create table t (a int) WITH (\"format\" = 'plain', \"encode\" = 'csv')"
        );
        let plain = "CREATE TABLE t (a int PRIMARY KEY, format text)";
        assert_eq!(rewrite(plain), plain);
        assert_eq!(rewrite("SELECT 1"), "SELECT 1");
    }
}
