//! A statement's shape: its text with every literal replaced by a placeholder.
//!
//! `SELECT n FROM v WHERE g = 42` and `... WHERE g = 7` have one shape,
//! `select n from v where g = $1`, so the plan made for the first serves the second
//! with other values. The scan is a small lexer, not a parser: it only has to find
//! literals and normalise what does not change meaning (case of unquoted words,
//! whitespace, a trailing `;`). Anything it is unsure of (comments in the middle,
//! escape-string or dollar-quoted literals, placeholders already in the text) gives
//! no shape, and the statement takes the ordinary path.

/// A literal as written: what the placeholder stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Literal {
    /// An unsigned number, as written (`42`, `1.5`, `2e3`).
    Number(String),
    /// A string literal's contents (quotes removed, `''` unescaped).
    Text(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    pub text: String,
    pub literals: Vec<Literal>,
}

/// Longest statement worth shaping: big ones are not served by key anyway.
const MAX_LEN: usize = 4096;

pub fn shape_of(sql: &str) -> Option<Shape> {
    if sql.len() > MAX_LEN {
        return None;
    }
    let b = sql.as_bytes();
    let mut text = String::with_capacity(sql.len() + 8);
    let mut literals = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b' ' | b'\t' | b'\n' | b'\r' => {
                if !text.is_empty() && !text.ends_with(' ') {
                    text.push(' ');
                }
                i += 1;
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => return None,
            b'$' => return None,
            b'\'' => {
                let (value, next) = string_literal(b, i)?;
                literals.push(Literal::Text(value));
                push_placeholder(&mut text, literals.len());
                i = next;
            }
            b'"' => {
                let end = i + 1 + b[i + 1..].iter().position(|&x| x == b'"')?;
                text.push_str(&sql[i..=end]);
                i = end + 1;
            }
            b'0'..=b'9' => {
                let end = number_end(b, i);
                literals.push(Literal::Number(sql[i..end].to_string()));
                push_placeholder(&mut text, literals.len());
                i = end;
            }
            b'.' if b.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                let end = number_end(b, i);
                literals.push(Literal::Number(format!("0{}", &sql[i..end])));
                push_placeholder(&mut text, literals.len());
                i = end;
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'$')
                {
                    i += 1;
                }
                // E'..', B'..', X'..', U&'..': literals the lexer does not decode.
                if matches!(b.get(i), Some(b'\'') | Some(b'&')) {
                    return None;
                }
                text.push_str(&sql[start..i].to_ascii_lowercase());
            }
            b';' => {
                if sql[i + 1..].trim().is_empty() {
                    break;
                }
                return None;
            }
            c if c.is_ascii() => {
                text.push(c as char);
                i += 1;
            }
            _ => return None,
        }
    }
    let text = text.trim_end().to_string();
    Some(Shape { text, literals })
}

fn push_placeholder(text: &mut String, n: usize) {
    text.push('$');
    text.push_str(&n.to_string());
}

/// `'...'` starting at `start`: its value and the index after the closing quote.
fn string_literal(b: &[u8], start: usize) -> Option<(String, usize)> {
    let mut value = Vec::new();
    let mut i = start + 1;
    loop {
        match b.get(i)? {
            b'\'' if b.get(i + 1) == Some(&b'\'') => {
                value.push(b'\'');
                i += 2;
            }
            b'\'' => return Some((String::from_utf8(value).ok()?, i + 1)),
            &c => {
                value.push(c);
                i += 1;
            }
        }
    }
}

/// End of a number starting at `start`: digits, a fraction, an exponent.
fn number_end(b: &[u8], start: usize) -> usize {
    let mut i = start;
    let digits = |i: &mut usize| {
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
    };
    digits(&mut i);
    if b.get(i) == Some(&b'.') {
        i += 1;
        digits(&mut i);
    }
    if matches!(b.get(i), Some(b'e') | Some(b'E')) {
        let mut j = i + 1;
        if matches!(b.get(j), Some(b'+') | Some(b'-')) {
            j += 1;
        }
        if b.get(j).is_some_and(u8::is_ascii_digit) {
            i = j;
            digits(&mut i);
        }
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_become_placeholders() {
        let a = shape_of("SELECT n, total FROM v WHERE g = 42;").unwrap();
        let b = shape_of("select n,  total\nfrom V where G = 7").unwrap();
        assert_eq!(a.text, "select n, total from v where g = $1");
        assert_eq!(a.text, b.text);
        assert_eq!(a.literals, vec![Literal::Number("42".into())]);
        let c = shape_of("UPDATE t SET s = 'it''s', x = x + 1.5e3 WHERE id = -3").unwrap();
        assert_eq!(c.text, "update t set s = $1, x = x + $2 where id = -$3");
        assert_eq!(
            c.literals,
            vec![
                Literal::Text("it's".into()),
                Literal::Number("1.5e3".into()),
                Literal::Number("3".into())
            ]
        );
        // Digits inside names are not literals; quoted names keep their case.
        let d = shape_of("SELECT \"A1\" FROM t2 WHERE c3 = .5").unwrap();
        assert_eq!(d.text, "select \"A1\" from t2 where c3 = $1");
        assert_eq!(d.literals, vec![Literal::Number("0.5".into())]);
    }

    #[test]
    fn unsure_text_has_no_shape() {
        for sql in [
            "SELECT E'\\n'",
            "SELECT $1",
            "SELECT 1; SELECT 2",
            "SELECT /* c */ 1",
            "SELECT 'unterminated",
            "SELECT $$x$$",
        ] {
            assert_eq!(shape_of(sql), None, "{sql}");
        }
    }
}
