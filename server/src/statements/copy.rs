//! `COPY t [(columns)] FROM STDIN` and `COPY t [(columns)] | (query) TO STDOUT`, in
//! Postgres's text and CSV formats (`WITH (FORMAT csv, HEADER, DELIMITER ',', NULL
//! '', QUOTE '"', ESCAPE '"')` and the older `WITH CSV HEADER` / `DELIMITER ','`).
//!
//! COPY FROM answers with CopyInResponse; the wire layer collects the CopyData and
//! calls [`finish_copy_in`] at CopyDone. All rows of one COPY are one write (one log
//! entry), so a bad row anywhere applies nothing: the error names the line and column
//! (22P02 for a value, 22P04 for a wrong number of fields), as Postgres's CONTEXT does.
//! Values are parsed by casting text to the column's type (Arrow's casts, which accept
//! Postgres's text forms of numbers, booleans, dates and timestamps). Columns left out
//! of the column list are NULL (Weir has no DEFAULT values).
//!
//! COPY TO writes each row as the wire's text encoding of its values (so the same text
//! as a SELECT shows), escaped for the format. Server-side files and programs (`FROM
//! 'file'`, `PROGRAM`) are refused (0A000): psql's `\copy` sends the file as STDIN.
//! Binary format is refused (0A000).

use crate::database::{relation_name, Database};
use crate::output::Output;
use crate::session::Session;
use crate::{dml, query};
use arrow::array::{new_null_array, Array, ArrayRef, RecordBatch, StringArray};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::sql::sqlparser::ast::{
    CopyLegacyCsvOption, CopyLegacyOption, CopyOption, CopySource, CopyTarget, Statement,
};
use std::sync::Arc;
use weir_executor::StreamChunk;
use weir_planner::{sqlstate, SqlError, SqlResult};

/// The data format of one COPY.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyFormat {
    pub csv: bool,
    pub delimiter: char,
    pub null: String,
    pub header: bool,
    pub quote: char,
    pub escape: char,
}

impl CopyFormat {
    fn text() -> Self {
        CopyFormat {
            csv: false,
            delimiter: '\t',
            null: "\\N".into(),
            header: false,
            quote: '"',
            escape: '"',
        }
    }

    fn csv() -> Self {
        CopyFormat {
            csv: true,
            delimiter: ',',
            null: String::new(),
            ..Self::text()
        }
    }
}

/// A COPY FROM STDIN waiting for its data (kept in the session).
#[derive(Debug, Clone)]
pub struct CopyIn {
    pub table: String,
    /// The table's schema and, for each field of the data, its column there.
    pub schema: SchemaRef,
    pub columns: Vec<usize>,
    pub format: CopyFormat,
    /// The CopyData received so far.
    pub data: Vec<u8>,
}

/// A COPY's data is parsed and written as one statement, so it is held in memory
/// until CopyDone; more than this is refused (54000) rather than exhausting memory.
pub const MAX_COPY_BYTES: usize = 1 << 30;

fn bad_option(what: String) -> SqlError {
    SqlError::new(sqlstate::SYNTAX_ERROR, what)
}

/// The format named by the statement's options.
fn format_of(options: &[CopyOption], legacy: &[CopyLegacyOption]) -> SqlResult<CopyFormat> {
    let mut csv = false;
    for o in options {
        if let CopyOption::Format(name) = o {
            match name.value.to_ascii_lowercase().as_str() {
                "csv" => csv = true,
                "text" => csv = false,
                "binary" => {
                    return Err(SqlError::unsupported(
                        "COPY in binary format is not supported (text and csv are)",
                    ))
                }
                other => {
                    return Err(bad_option(format!(
                        "COPY format \"{other}\" not recognized"
                    )))
                }
            }
        }
    }
    if legacy.iter().any(|o| matches!(o, CopyLegacyOption::Csv(_))) {
        csv = true;
    }
    if legacy.iter().any(|o| matches!(o, CopyLegacyOption::Binary)) {
        return Err(SqlError::unsupported(
            "COPY in binary format is not supported (text and csv are)",
        ));
    }
    let mut f = if csv {
        CopyFormat::csv()
    } else {
        CopyFormat::text()
    };
    let mut escape = None;
    for o in options {
        match o {
            CopyOption::Format(_) => {}
            CopyOption::Delimiter(c) => f.delimiter = *c,
            CopyOption::Null(s) => f.null = s.clone(),
            CopyOption::Header(h) => f.header = *h,
            CopyOption::Quote(c) => f.quote = *c,
            CopyOption::Escape(c) => escape = Some(*c),
            CopyOption::Encoding(e)
                if e.eq_ignore_ascii_case("utf8") || e.eq_ignore_ascii_case("utf-8") => {}
            other => {
                return Err(SqlError::unsupported(format!(
                    "COPY option {other} is not supported"
                )))
            }
        }
    }
    for o in legacy {
        match o {
            CopyLegacyOption::Csv(csv_options) => {
                for c in csv_options {
                    match c {
                        CopyLegacyCsvOption::Header => f.header = true,
                        CopyLegacyCsvOption::Quote(q) => f.quote = *q,
                        CopyLegacyCsvOption::Escape(e) => escape = Some(*e),
                        other => {
                            return Err(SqlError::unsupported(format!(
                                "COPY option {other} is not supported"
                            )))
                        }
                    }
                }
            }
            CopyLegacyOption::Delimiter(c) => f.delimiter = *c,
            CopyLegacyOption::Null(s) => f.null = s.clone(),
            CopyLegacyOption::Header => f.header = true,
            other => {
                return Err(SqlError::unsupported(format!(
                    "COPY option {other} is not supported"
                )))
            }
        }
    }
    f.escape = escape.unwrap_or(f.quote);
    if f.header && !f.csv {
        return Err(SqlError::unsupported(
            "COPY HEADER is available only in CSV mode",
        ));
    }
    if f.delimiter == '\n' || f.delimiter == '\r' || (!f.csv && f.delimiter == '\\') {
        return Err(bad_option(
            "COPY delimiter cannot be newline, carriage return or backslash".into(),
        ));
    }
    Ok(f)
}

pub async fn execute(db: &Database, session: &mut Session, stmt: &Statement) -> SqlResult<Output> {
    let Statement::Copy {
        source,
        to,
        target,
        options,
        legacy_options,
        ..
    } = stmt
    else {
        return Err(SqlError::internal("not COPY"));
    };
    let format = format_of(options, legacy_options)?;
    match (to, target) {
        (false, CopyTarget::Stdin) => start_copy_in(db, session, source, format),
        (true, CopyTarget::Stdout) => copy_out(db, session, source, &format).await,
        (_, CopyTarget::File { .. } | CopyTarget::Program { .. }) => Err(SqlError::unsupported(
            "COPY to or from a server-side file or program is not supported; use STDIN / STDOUT (psql's \\copy)",
        )),
        (true, CopyTarget::Stdin) | (false, CopyTarget::Stdout) => {
            Err(SqlError::syntax("COPY FROM goes with STDIN, COPY TO with STDOUT"))
        }
    }
}

fn start_copy_in(
    db: &Database,
    session: &mut Session,
    source: &CopySource,
    format: CopyFormat,
) -> SqlResult<Output> {
    let CopySource::Table {
        table_name,
        columns,
    } = source
    else {
        return Err(SqlError::syntax(
            "COPY (query) FROM is not possible; COPY a table FROM",
        ));
    };
    let table = relation_name(table_name)?;
    let schema = dml::check_target(db, &table, "copy to")?;
    let columns = column_indexes(&schema, columns)?;
    let n = columns.len();
    session.copy_in = Some(CopyIn {
        table,
        schema,
        columns,
        format,
        data: Vec::new(),
    });
    Ok(Output::CopyIn { columns: n })
}

fn column_indexes(
    schema: &SchemaRef,
    columns: &[datafusion::sql::sqlparser::ast::Ident],
) -> SqlResult<Vec<usize>> {
    if columns.is_empty() {
        return Ok((0..schema.fields().len()).collect());
    }
    let mut out = Vec::with_capacity(columns.len());
    for c in columns {
        let name = match c.quote_style {
            Some(_) => c.value.clone(),
            None => c.value.to_ascii_lowercase(),
        };
        let i = schema.index_of(&name).map_err(|_| {
            SqlError::new(
                sqlstate::UNDEFINED_COLUMN,
                format!("column \"{name}\" does not exist"),
            )
        })?;
        if out.contains(&i) {
            return Err(SqlError::new(
                sqlstate::DUPLICATE_COLUMN,
                format!("column \"{name}\" specified more than once"),
            ));
        }
        out.push(i);
    }
    Ok(out)
}

/// Parses the collected data of a COPY FROM STDIN and writes it as one statement.
pub async fn finish_copy_in(
    db: &Database,
    session: &mut Session,
    copy: CopyIn,
) -> SqlResult<Output> {
    let text = std::str::from_utf8(&copy.data).map_err(|e| {
        SqlError::new(
            sqlstate::CHARACTER_NOT_IN_REPERTOIRE,
            format!("COPY {}: invalid UTF-8 in the data: {e}", copy.table),
        )
    })?;
    let records = if copy.format.csv {
        parse_csv(text, &copy.format)
    } else {
        parse_text(text, &copy.format)
    }
    .map_err(|(line, why)| copy_error(&copy.table, line, why))?;
    let batch = to_batch(&copy, &records)?;
    let n = batch.num_rows();
    if n > 0 {
        dml::write(db, session, &copy.table, StreamChunk::inserts(batch)).await?;
    }
    Ok(Output::rows("COPY", n))
}

fn copy_error(table: &str, line: usize, why: String) -> SqlError {
    SqlError::new(
        sqlstate::BAD_COPY_FILE_FORMAT,
        format!("COPY {table}, line {line}: {why}"),
    )
}

/// One record of the data: its line number and its fields (None: NULL).
type Record = (usize, Vec<Option<String>>);

/// Postgres's text format: one line a row, fields split by the delimiter, `\N` (or the
/// NULL string) for NULL, backslash escapes; a line `\.` ends the data.
fn parse_text(text: &str, f: &CopyFormat) -> Result<Vec<Record>, (usize, String)> {
    let mut out = Vec::new();
    // The newline after the last row ends it; it does not start an empty one.
    let text = text.strip_suffix('\n').unwrap_or(text);
    for (i, line) in text.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line == "\\." {
            break;
        }
        let fields = line
            .split(f.delimiter)
            .map(|raw| {
                if raw == f.null {
                    Ok(None)
                } else {
                    unescape_text(raw).map(Some)
                }
            })
            .collect::<Result<Vec<_>, String>>()
            .map_err(|e| (i + 1, e))?;
        out.push((i + 1, fields));
    }
    Ok(out)
}

fn unescape_text(raw: &str) -> Result<String, String> {
    if !raw.contains('\\') {
        return Ok(raw.to_string());
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('b') => out.push('\u{8}'),
            Some('f') => out.push('\u{c}'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some('v') => out.push('\u{b}'),
            Some('x') => {
                let mut v = 0u32;
                let mut digits = 0;
                while digits < 2 {
                    match chars.peek().and_then(|d| d.to_digit(16)) {
                        Some(d) => {
                            v = v * 16 + d;
                            chars.next();
                            digits += 1;
                        }
                        None => break,
                    }
                }
                if digits == 0 {
                    out.push('x');
                } else {
                    out.push(char::from_u32(v).ok_or("invalid \\x escape")?);
                }
            }
            Some(d @ '0'..='7') => {
                let mut v = d.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match chars.peek().and_then(|d| d.to_digit(8)) {
                        Some(d) => {
                            v = v * 8 + d;
                            chars.next();
                        }
                        None => break,
                    }
                }
                out.push(char::from_u32(v).ok_or("invalid octal escape")?);
            }
            Some(other) => out.push(other),
            None => return Err("end-of-line after a backslash".into()),
        }
    }
    Ok(out)
}

/// CSV: fields split by the delimiter, quoted fields may hold delimiters, quotes
/// (escaped) and newlines; an unquoted field equal to the NULL string is NULL.
fn parse_csv(text: &str, f: &CopyFormat) -> Result<Vec<Record>, (usize, String)> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    let mut line = 1usize;
    let mut first = true;
    loop {
        if chars.peek().is_none() {
            break;
        }
        let start_line = line;
        let mut fields = Vec::new();
        let mut field = String::new();
        let mut quoted = false;
        let mut any_quote = false;
        loop {
            let Some(c) = chars.next() else {
                if quoted {
                    return Err((start_line, "unterminated CSV quoted field".into()));
                }
                break;
            };
            if quoted {
                if c == f.escape && chars.peek() == Some(&f.quote) && f.escape != f.quote {
                    field.push(chars.next().unwrap_or(c));
                } else if c == f.quote {
                    if f.escape == f.quote && chars.peek() == Some(&f.quote) {
                        chars.next();
                        field.push(c);
                    } else {
                        quoted = false;
                    }
                } else {
                    if c == '\n' {
                        line += 1;
                    }
                    field.push(c);
                }
                continue;
            }
            match c {
                c if c == f.quote => {
                    quoted = true;
                    any_quote = true;
                }
                c if c == f.delimiter => {
                    fields.push(csv_value(std::mem::take(&mut field), any_quote, f));
                    any_quote = false;
                }
                '\r' if chars.peek() == Some(&'\n') => {}
                '\n' => {
                    line += 1;
                    break;
                }
                c => field.push(c),
            }
        }
        if fields.is_empty() && field == "\\." && !any_quote {
            break;
        }
        fields.push(csv_value(field, any_quote, f));
        if first && f.header {
            first = false;
            continue;
        }
        first = false;
        out.push((start_line, fields));
    }
    Ok(out)
}

fn csv_value(field: String, quoted: bool, f: &CopyFormat) -> Option<String> {
    (quoted || field != f.null).then_some(field)
}

/// The records as a batch of the table's schema, each value cast from its text.
fn to_batch(copy: &CopyIn, records: &[Record]) -> SqlResult<RecordBatch> {
    let width = copy.columns.len();
    for (line, fields) in records {
        if fields.len() < width {
            let missing = copy.schema.field(copy.columns[fields.len()]).name();
            return Err(copy_error(
                &copy.table,
                *line,
                format!("missing data for column \"{missing}\""),
            ));
        }
        if fields.len() > width {
            return Err(copy_error(
                &copy.table,
                *line,
                "extra data after last expected column".into(),
            ));
        }
    }
    let n = records.len();
    let mut columns: Vec<ArrayRef> = copy
        .schema
        .fields()
        .iter()
        .map(|f| new_null_array(f.data_type(), n))
        .collect();
    for (k, &col) in copy.columns.iter().enumerate() {
        let field = copy.schema.field(col);
        let texts: StringArray = records.iter().map(|(_, r)| r[k].clone()).collect();
        columns[col] = cast_text(&texts, field.data_type()).map_err(|row| {
            let (line, values) = &records[row];
            SqlError::new(
                sqlstate::INVALID_TEXT_REPRESENTATION,
                format!(
                    "COPY {}, line {line}, column {}: invalid input syntax for type {}: \"{}\"",
                    copy.table,
                    field.name(),
                    crate::ddl::pg_type_name(field.data_type()),
                    values[k].clone().unwrap_or_default()
                ),
            )
        })?;
    }
    let nullable = Arc::new(arrow::datatypes::Schema::new(
        copy.schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ));
    Ok(RecordBatch::try_new(nullable, columns)?)
}

/// Casts text to `to`; on failure, the index of the first value that does not parse.
fn cast_text(texts: &StringArray, to: &DataType) -> Result<ArrayRef, usize> {
    let strict = CastOptions {
        safe: false,
        ..Default::default()
    };
    if let Ok(a) = cast_with_options(texts, to, &strict) {
        return Ok(a);
    }
    // The slow path, only on error: find the value that failed.
    for i in 0..texts.len() {
        if cast_with_options(&texts.slice(i, 1), to, &strict).is_err() {
            return Err(i);
        }
    }
    Err(0)
}

/// `COPY ... TO STDOUT`: the rows of a table, view or query, one line each.
async fn copy_out(
    db: &Database,
    session: &mut Session,
    source: &CopySource,
    f: &CopyFormat,
) -> SqlResult<Output> {
    let select = match source {
        CopySource::Table {
            table_name,
            columns,
        } => {
            let cols = if columns.is_empty() {
                "*".to_string()
            } else {
                columns
                    .iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            format!("SELECT {cols} FROM {table_name}")
        }
        CopySource::Query(q) => q.to_string(),
    };
    let mut stmt = match weir_planner::parse_statement(&select)? {
        weir_planner::WeirStatement::Sql(s) => s,
        _ => return Err(SqlError::internal("COPY source is not a query")),
    };
    super::expand(db, &mut stmt)?;
    let ctx = query::snapshot_context(db, session, &stmt, Default::default()).await?;
    let (schema, batches) = query::run_query(&ctx, &stmt).await?;
    let texts = crate::pg::encode::text_values(&schema, &batches)
        .map_err(|e| SqlError::internal(e.to_string()))?;
    let mut lines: Vec<Vec<u8>> = texts.iter().map(|row| format_line(row, f)).collect();
    if f.header {
        // The wire layer sends one CopyData per line and counts them as rows for the
        // `COPY n` tag: the header rides in the first row's message. (With no rows it
        // goes alone and the tag says 1, where Postgres says 0.)
        let names: Vec<Option<String>> = schema
            .fields()
            .iter()
            .map(|c| Some(c.name().clone()))
            .collect();
        let mut header = format_line(&names, f);
        match lines.first_mut() {
            Some(first) => {
                header.append(first);
                *first = header;
            }
            None => lines.push(header),
        }
    }
    Ok(Output::CopyOut {
        columns: schema.fields().len(),
        lines,
    })
}

/// One row in the format, with its newline.
fn format_line(values: &[Option<String>], f: &CopyFormat) -> Vec<u8> {
    let mut line = String::new();
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            line.push(f.delimiter);
        }
        match v {
            None => line.push_str(&f.null),
            Some(v) if f.csv => line.push_str(&csv_field(v, f)),
            Some(v) => line.push_str(&escape_text(v, f.delimiter)),
        }
    }
    line.push('\n');
    line.into_bytes()
}

fn csv_field(v: &str, f: &CopyFormat) -> String {
    let needs_quotes = v.is_empty() && f.null.is_empty()
        || v == f.null
        || v.contains([f.delimiter, f.quote, '\n', '\r'])
        || v == "\\.";
    if !needs_quotes {
        return v.to_string();
    }
    let mut out = String::with_capacity(v.len() + 2);
    out.push(f.quote);
    for c in v.chars() {
        if c == f.quote || c == f.escape {
            out.push(f.escape);
        }
        out.push(c);
    }
    out.push(f.quote);
    out
}

fn escape_text(v: &str, delimiter: char) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' if delimiter == '\t' => out.push_str("\\t"),
            c if c == delimiter => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(records: &[Record]) -> Vec<Vec<Option<&str>>> {
        records
            .iter()
            .map(|(_, r)| r.iter().map(|v| v.as_deref()).collect())
            .collect()
    }

    #[test]
    fn text_format_unescapes_and_reads_nulls() {
        let r = parse_text(
            "1\ta\\tb\t\\N\n2\tx\\\\y\t\\101\n\\.\nignored\n",
            &CopyFormat::text(),
        )
        .unwrap();
        assert_eq!(
            values(&r),
            vec![
                vec![Some("1"), Some("a\tb"), None],
                vec![Some("2"), Some("x\\y"), Some("A")]
            ]
        );
        assert_eq!(r[1].0, 2);
    }

    #[test]
    fn csv_handles_quotes_newlines_header_and_nulls() {
        let mut f = CopyFormat::csv();
        f.header = true;
        let r = parse_csv(
            "id,name,note\n1,\"a,b\",\n2,\"say \"\"hi\"\"\nthere\",\"\"\n3,c,d\n",
            &f,
        )
        .unwrap();
        assert_eq!(
            values(&r),
            vec![
                vec![Some("1"), Some("a,b"), None],
                vec![Some("2"), Some("say \"hi\"\nthere"), Some("")],
                vec![Some("3"), Some("c"), Some("d")],
            ]
        );
        assert_eq!(r.iter().map(|(l, _)| *l).collect::<Vec<_>>(), vec![2, 3, 5]);
        assert!(parse_csv("1,\"open\n", &CopyFormat::csv()).is_err());
    }

    #[test]
    fn output_is_escaped_for_its_format() {
        let row = vec![Some("a\tb".to_string()), None, Some("x,\"y\"".to_string())];
        assert_eq!(
            String::from_utf8(format_line(&row, &CopyFormat::text())).unwrap(),
            "a\\tb\t\\N\tx,\"y\"\n"
        );
        assert_eq!(
            String::from_utf8(format_line(&row, &CopyFormat::csv())).unwrap(),
            "a\tb,,\"x,\"\"y\"\"\"\n"
        );
    }

    #[test]
    fn a_bad_value_names_its_line_and_column() {
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("id", DataType::Int32, false),
            arrow::datatypes::Field::new("name", DataType::Utf8, true),
        ]));
        let copy = CopyIn {
            table: "t".into(),
            schema,
            columns: vec![0, 1],
            format: CopyFormat::text(),
            data: vec![],
        };
        let records = parse_text("1\ta\nx\tb\n", &copy.format).unwrap();
        let e = to_batch(&copy, &records).unwrap_err();
        assert_eq!(e.code, sqlstate::INVALID_TEXT_REPRESENTATION);
        assert!(e.message.contains("line 2, column id"), "{}", e.message);
        let short = parse_text("1\n", &copy.format).unwrap();
        let e = to_batch(&copy, &short).unwrap_err();
        assert!(
            e.message.contains("missing data for column \"name\""),
            "{}",
            e.message
        );
        let ok = to_batch(&copy, &parse_text("1\ta\n2\t\\N\n", &copy.format).unwrap()).unwrap();
        assert_eq!(ok.num_rows(), 2);
    }
}
