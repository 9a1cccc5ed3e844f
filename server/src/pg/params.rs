//! Extended-protocol parameters: inferring their types at Parse/Describe and binding
//! their values at Execute.
//!
//! Values are bound by substituting typed SQL literals for `$n` placeholders, after
//! decoding each parameter with its declared (or inferred) type in the format the
//! client used. Every statement kind (SELECT, DML, DDL, SHOW) thus runs through the
//! same path as the simple protocol.

use pgwire::api::portal::Portal;
use pgwire::api::Type;
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};

/// Highest `$n` used in `sql` (outside quotes).
pub fn count_placeholders(sql: &str) -> usize {
    let mut max = 0;
    for_each_placeholder(sql, |n, _, _| max = max.max(n));
    max
}

fn for_each_placeholder(sql: &str, mut f: impl FnMut(usize, usize, usize)) {
    let b = sql.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\'' | b'"' => {
                let q = b[i];
                i += 1;
                while i < b.len() && b[i] != q {
                    i += 1;
                }
                i += 1;
            }
            b'$' => {
                let start = i;
                i += 1;
                let ds = i;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                if i > ds {
                    if let Ok(n) = sql[ds..i].parse::<usize>() {
                        f(n, start, i);
                    }
                }
            }
            _ => i += 1,
        }
    }
}

/// Types of placeholders written as `CAST($n AS type)` or `$n::type`, for the
/// parameters DataFusion's inference leaves open (pgjdbc sends dates and timestamps
/// untyped, in forms like `2023-12-31 +00` that only a typed parse accepts).
pub fn cast_types(sql: &str) -> Vec<(usize, Type)> {
    static CASTS: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"(?i)(?:CAST\s*\(\s*\$(\d+)\s+AS\s+|\$(\d+)\s*::\s*)(double\s+precision|timestamp\s+with(?:out)?\s+time\s+zone|character\s+varying|[a-z_][a-z0-9_]*)",
        )
        .expect("valid regex")
    });
    CASTS
        .captures_iter(sql)
        .filter_map(|c| {
            let n = c.get(1).or_else(|| c.get(2))?.as_str().parse().ok()?;
            Some((n, type_named(&c[3])?))
        })
        .collect()
}

fn type_named(name: &str) -> Option<Type> {
    let name = name.to_ascii_lowercase();
    let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
    Some(match name.as_str() {
        "int2" | "smallint" => Type::INT2,
        "int" | "int4" | "integer" => Type::INT4,
        "int8" | "bigint" => Type::INT8,
        "real" | "float4" => Type::FLOAT4,
        "float" | "float8" | "double precision" => Type::FLOAT8,
        "numeric" | "decimal" => Type::NUMERIC,
        "bool" | "boolean" => Type::BOOL,
        "date" => Type::DATE,
        "timestamp" | "timestamp without time zone" => Type::TIMESTAMP,
        "timestamptz" | "timestamp with time zone" => Type::TIMESTAMPTZ,
        "bytea" => Type::BYTEA,
        "text" | "varchar" | "character varying" => Type::TEXT,
        _ => return None,
    })
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn bad_param(i: usize, e: impl std::fmt::Display) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".into(),
        "22P02".into(),
        format!("invalid value for parameter ${}: {e}", i + 1),
    )))
}

/// The SQL literal for parameter `i` of `portal`, read as `ty`.
fn literal<S: Clone>(portal: &Portal<S>, i: usize, ty: &Type) -> PgWireResult<String> {
    macro_rules! get {
        ($t:ty) => {
            portal.parameter::<$t>(i, ty).map_err(|e| bad_param(i, e))?
        };
    }
    let lit = match *ty {
        Type::BOOL => get!(bool).map(|v| if v { "TRUE".into() } else { "FALSE".into() }),
        Type::INT2 => get!(i16).map(|v| v.to_string()),
        Type::INT4 => get!(i32).map(|v| v.to_string()),
        Type::INT8 => get!(i64).map(|v| v.to_string()),
        Type::OID => get!(u32).map(|v| v.to_string()),
        Type::FLOAT4 => get!(f32).map(|v| {
            if v.is_finite() {
                format!("CAST({v:?} AS REAL)")
            } else {
                format!("CAST('{v}' AS REAL)")
            }
        }),
        Type::FLOAT8 => get!(f64).map(|v| {
            if v.is_finite() {
                format!("CAST({v:?} AS DOUBLE PRECISION)")
            } else {
                format!("CAST('{v}' AS DOUBLE PRECISION)")
            }
        }),
        Type::NUMERIC => get!(rust_decimal::Decimal)
            .map(|v| format!("CAST({} AS NUMERIC)", quote(&v.to_string()))),
        Type::DATE => get!(chrono::NaiveDate).map(|v| format!("DATE {}", quote(&v.to_string()))),
        Type::TIMESTAMP => get!(chrono::NaiveDateTime).map(|v| {
            format!(
                "TIMESTAMP {}",
                quote(&v.format("%Y-%m-%d %H:%M:%S%.f").to_string())
            )
        }),
        Type::TIMESTAMPTZ => get!(chrono::DateTime<chrono::FixedOffset>).map(|v| {
            format!(
                "CAST({} AS TIMESTAMPTZ)",
                quote(&v.with_timezone(&chrono::Utc).to_rfc3339())
            )
        }),
        Type::BYTEA => match portal.parameters.get(i).cloned().flatten() {
            None => None,
            Some(bytes) => {
                let raw = if portal.parameter_format.is_binary(i) {
                    bytes.to_vec()
                } else {
                    bytea_from_text(&bytes).map_err(|e| bad_param(i, e))?
                };
                Some(format!("decode('{}', 'hex')", hex(&raw)))
            }
        },
        _ => {
            // Text and unknown types: the raw text, as a string literal; DataFusion
            // coerces it where the context needs another type.
            match portal.parameters.get(i).cloned().flatten() {
                None => None,
                Some(bytes) => Some(quote(
                    std::str::from_utf8(&bytes).map_err(|e| bad_param(i, e))?,
                )),
            }
        }
    };
    Ok(lit.unwrap_or_else(|| "NULL".into()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A bytea in Postgres's text forms: `\x` followed by hex digits, or the escape
/// form (`\\` for a backslash, `\ooo` octal, other bytes as they are).
fn bytea_from_text(text: &[u8]) -> Result<Vec<u8>, String> {
    if let Some(digits) = text.strip_prefix(b"\\x") {
        let digits: Vec<u8> = digits
            .iter()
            .copied()
            .filter(|c| !c.is_ascii_whitespace())
            .collect();
        if !digits.len().is_multiple_of(2) {
            return Err("invalid hexadecimal data: odd number of digits".into());
        }
        return digits
            .chunks(2)
            .map(|pair| {
                std::str::from_utf8(pair)
                    .ok()
                    .and_then(|p| u8::from_str_radix(p, 16).ok())
                    .ok_or_else(|| "invalid hexadecimal digit".to_string())
            })
            .collect();
    }
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        match (text[i], text.get(i + 1..i + 4)) {
            (b'\\', Some([b'\\', ..])) => {
                out.push(b'\\');
                i += 2;
            }
            (b'\\', Some(oct)) if oct.iter().all(|c| (b'0'..=b'7').contains(c)) => {
                let v = oct
                    .iter()
                    .fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'));
                out.push(u8::try_from(v).map_err(|_| "invalid input syntax for type bytea")?);
                i += 4;
            }
            (b'\\', _) if text.get(i + 1) == Some(&b'\\') => {
                out.push(b'\\');
                i += 2;
            }
            (b'\\', _) => return Err("invalid input syntax for type bytea".into()),
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(out)
}

/// `sql` with every `$n` replaced by the literal of parameter n.
pub fn bind<S: Clone>(sql: &str, portal: &Portal<S>, types: &[Type]) -> PgWireResult<String> {
    let mut literals = Vec::with_capacity(portal.parameter_len());
    for i in 0..portal.parameter_len() {
        let ty = portal
            .statement
            .parameter_types
            .get(i)
            .cloned()
            .flatten()
            .or_else(|| types.get(i).cloned())
            .unwrap_or(Type::TEXT);
        literals.push(literal(portal, i, &ty)?);
    }
    let mut out = String::with_capacity(sql.len());
    let mut last = 0;
    let mut err = None;
    for_each_placeholder(sql, |n, start, end| {
        out.push_str(&sql[last..start]);
        match literals.get(n.wrapping_sub(1)) {
            Some(l) => out.push_str(&format!("({l})")),
            None => err = Some(n),
        }
        last = end;
    });
    out.push_str(&sql[last..]);
    if let Some(n) = err {
        return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
            "ERROR".into(),
            "08P01".into(),
            format!("there is no parameter ${n}"),
        ))));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn casts_of_placeholders_give_types() {
        let t = cast_types("SELECT CAST($1 AS date), $2::timestamp with time zone, CAST( $3 AS double precision), $4::numeric(10,2), $5::widget");
        assert_eq!(
            t,
            vec![
                (1, Type::DATE),
                (2, Type::TIMESTAMPTZ),
                (3, Type::FLOAT8),
                (4, Type::NUMERIC)
            ]
        );
    }

    #[test]
    fn bytea_text_forms() {
        assert_eq!(bytea_from_text(b"\\x01ff").unwrap(), vec![1, 255]);
        assert_eq!(
            bytea_from_text(b"a\\\\b\\001").unwrap(),
            b"a\\b\x01".to_vec()
        );
        assert!(bytea_from_text(b"\\x0").is_err());
        assert!(bytea_from_text(b"\\q").is_err());
    }

    #[test]
    fn placeholders_outside_quotes_only() {
        assert_eq!(count_placeholders("select $1, '$5', $2"), 2);
        assert_eq!(count_placeholders("select 1"), 0);
    }
}
