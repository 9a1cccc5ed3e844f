//! Postgres-style output column names.
//!
//! DataFusion names an unaliased expression after its full text (`count(*)`,
//! `sum(t.a)`); Postgres names it after the function (`count`, `sum`), a column after the
//! column, and anything else `?column?`. Clients and tools expect the latter.

/// Marks the internal alias of a select item whose name repeats an earlier one's
/// (`SELECT a, a` plans as `a, a AS "a#dup2"`; see `output_names`).
pub const DUPLICATE_MARK: &str = "#dup";

/// The user-visible name of an alias: the internal duplicate alias `a#dup2` is `a`.
pub fn strip_duplicate_mark(name: &str) -> &str {
    match name.rsplit_once(DUPLICATE_MARK) {
        Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => base,
        _ => name,
    }
}

/// The Postgres name of an output column DataFusion called `df_name`.
pub fn pg_column_name(df_name: &str) -> String {
    let name = strip_duplicate_mark(df_name.trim());
    if name == "?column?" {
        return name.to_string();
    }
    if let Some(open) = name.find('(') {
        let func = &name[..open];
        if func == "CAST" || func == "TRY_CAST" {
            // `a::int` is named after `a` in Postgres.
            let inner = &name[open + 1..];
            if let Some(as_pos) = inner.rfind(" AS ") {
                return pg_column_name(&inner[..as_pos]);
            }
        }
        // DataFusion prints literals as `Int64(1)`, `Utf8("x")`: unnamed in Postgres.
        let is_sql_function = !func.is_empty()
            && func
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if is_sql_function {
            return func.to_string();
        }
        return "?column?".to_string();
    }
    if is_plain_identifier(name) {
        return name.to_string();
    }
    if let Some((q, col)) = name.rsplit_once('.') {
        if is_plain_identifier(col) && is_plain_identifier(q) {
            return col.to_string();
        }
    }
    "?column?".to_string()
}

fn is_plain_identifier(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '$')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_like_postgres() {
        assert_eq!(pg_column_name("count(*)"), "count");
        assert_eq!(pg_column_name("sum(t.a)"), "sum");
        assert_eq!(pg_column_name("t.a"), "a");
        assert_eq!(pg_column_name("a"), "a");
        assert_eq!(pg_column_name("t.a + Int64(1)"), "?column?");
        assert_eq!(pg_column_name("Int64(1)"), "?column?");
        assert_eq!(pg_column_name("CAST(t.a AS Int32)"), "a");
        assert_eq!(pg_column_name("a#dup2"), "a");
        assert_eq!(pg_column_name("count#dup3"), "count");
        assert_eq!(pg_column_name("?column?#dup2"), "?column?");
    }
}
