//! Postgres number template patterns for `to_char(number, text)`.
//!
//! Supported, as Postgres 15 prints them in the C locale: `9` (digit, leading zeros
//! blank), `0` (digit, zeros kept; every digit position after the first `0` keeps its
//! zero too), `.` and `D` (decimal point), `,` and `G` (group separator, blank before the
//! first digit), `S` (sign anchored to the number, `+` or `-`), `MI` / `PL` / `SG`
//! (minus / plus / either at their position), `PR` (negative in angle brackets), `L`
//! (currency symbol: a blank in the C locale), `V` (multiply by ten per following digit),
//! `EEEE` (scientific notation), `RN` (Roman numerals), `TH` / `th` (ordinal suffix),
//! `FM` (no padding, no trailing zeros at `9` positions) and quoted literal text; other
//! characters are copied, and `B` is ignored, as in Postgres.
//!
//! Without `S`, `MI`, `SG` or `PR` a sign position is kept before the digits: blank for a
//! positive number, `-` moved next to the first digit for a negative one.
//! A number wider than the template prints `#` in every digit position.

use super::datetime_format::{FormatError, FormatResult};
use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, Decimal128Type, Float64Type, Int64Type};
use datafusion::common::{plan_err, Result};

const SYNTAX_ERROR: &str = "42601";

/// A value to format: exact (integers, numeric) or binary floating point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    Exact { unscaled: i128, scale: u32 },
    Float(f64),
}

/// The numbers of an integer, float or decimal column.
pub fn numbers(a: &ArrayRef) -> Result<Vec<Option<Number>>> {
    use datafusion::arrow::compute::cast;
    Ok(match a.data_type() {
        t if t.is_integer() => cast(a, &DataType::Int64)?
            .as_primitive::<Int64Type>()
            .iter()
            .map(|v| {
                v.map(|v| Number::Exact {
                    unscaled: v as i128,
                    scale: 0,
                })
            })
            .collect(),
        t if t.is_floating() => cast(a, &DataType::Float64)?
            .as_primitive::<Float64Type>()
            .iter()
            .map(|v| v.map(Number::Float))
            .collect(),
        DataType::Decimal128(_, s) => {
            let s = *s;
            a.as_primitive::<Decimal128Type>()
                .iter()
                .map(|v| {
                    v.map(|v| {
                        if s >= 0 {
                            Number::Exact {
                                unscaled: v,
                                scale: s as u32,
                            }
                        } else {
                            Number::Exact {
                                unscaled: v * 10i128.pow((-s) as u32),
                                scale: 0,
                            }
                        }
                    })
                })
                .collect()
        }
        other => return plan_err!("to_char does not take {other}"),
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Item {
    Nine,
    Zero,
    Point,
    Group,
    /// `S`: `+` / `-` next to the number.
    Sign,
    Minus,
    Plus,
    PlusMinus,
    Brackets,
    Currency,
    /// `V`: the digits after it are the fraction shifted into the integer.
    Shift,
    Exponent,
    Roman(bool),
    Ordinal(bool),
    Literal(char),
}

/// A parsed number template.
#[derive(Debug, Clone, PartialEq)]
pub struct NumberTemplate {
    items: Vec<Item>,
    fill: bool,
}

const KEYWORDS: &[(&str, Item)] = &[
    ("EEEE", Item::Exponent),
    ("eeee", Item::Exponent),
    ("MI", Item::Minus),
    ("mi", Item::Minus),
    ("PL", Item::Plus),
    ("pl", Item::Plus),
    ("PR", Item::Brackets),
    ("pr", Item::Brackets),
    ("RN", Item::Roman(true)),
    ("rn", Item::Roman(false)),
    ("SG", Item::PlusMinus),
    ("sg", Item::PlusMinus),
    ("TH", Item::Ordinal(true)),
    ("th", Item::Ordinal(false)),
    ("S", Item::Sign),
    ("s", Item::Sign),
    ("D", Item::Point),
    ("d", Item::Point),
    ("G", Item::Group),
    ("g", Item::Group),
    ("L", Item::Currency),
    ("l", Item::Currency),
    ("V", Item::Shift),
    ("v", Item::Shift),
    ("9", Item::Nine),
    ("0", Item::Zero),
    (".", Item::Point),
    (",", Item::Group),
];

fn syntax(msg: &str) -> FormatError {
    FormatError {
        code: SYNTAX_ERROR,
        message: msg.into(),
    }
}

impl NumberTemplate {
    pub fn parse(template: &str) -> FormatResult<NumberTemplate> {
        let mut items = Vec::new();
        let mut fill = false;
        let mut rest = template;
        while let Some(c) = rest.chars().next() {
            if let Some(r) = rest.strip_prefix("FM").or_else(|| rest.strip_prefix("fm")) {
                fill = true;
                rest = r;
                continue;
            }
            if let Some(r) = rest.strip_prefix('B').or_else(|| rest.strip_prefix('b')) {
                rest = r;
                continue;
            }
            if let Some((k, item)) = KEYWORDS.iter().find(|(k, _)| rest.starts_with(k)) {
                items.push(*item);
                rest = &rest[k.len()..];
                continue;
            }
            if c == '"' {
                let mut end = 1;
                let mut chars = rest[1..].chars();
                while let Some(q) = chars.next() {
                    end += q.len_utf8();
                    match q {
                        '"' => break,
                        '\\' => {
                            if let Some(n) = chars.next() {
                                end += n.len_utf8();
                                items.push(Item::Literal(n));
                            }
                        }
                        other => items.push(Item::Literal(other)),
                    }
                }
                rest = &rest[end..];
                continue;
            }
            items.push(Item::Literal(c));
            rest = &rest[c.len_utf8()..];
        }
        let t = NumberTemplate { items, fill };
        t.check()?;
        Ok(t)
    }

    fn count(&self, item: Item) -> usize {
        self.items.iter().filter(|i| **i == item).count()
    }

    fn check(&self) -> FormatResult<()> {
        if self.count(Item::Point) > 1 {
            return Err(syntax("multiple decimal points"));
        }
        let signs = self.count(Item::Sign) + self.count(Item::Minus) + self.count(Item::PlusMinus);
        if self.count(Item::Sign) > 1 || (self.count(Item::Sign) == 1 && signs > 1) {
            return Err(syntax(
                "cannot use \"S\" twice or together with \"MI\" / \"SG\"",
            ));
        }
        if self.count(Item::Brackets) > 0 && signs > 0 {
            return Err(syntax("cannot use \"PR\" and \"S\"/\"MI\"/\"SG\" together"));
        }
        if self.count(Item::Shift) > 0 && self.count(Item::Point) > 0 {
            return Err(syntax("cannot use \"V\" and decimal point together"));
        }
        if self.count(Item::Exponent) > 0
            && self.items.iter().any(|i| {
                matches!(
                    i,
                    Item::Group | Item::Shift | Item::Roman(_) | Item::Ordinal(_)
                )
            })
        {
            return Err(syntax("\"EEEE\" is incompatible with other formats"));
        }
        Ok(())
    }

    /// Digit positions before the decimal point (or `V`'s digits), and after it.
    fn digit_counts(&self) -> (usize, usize, usize) {
        let mut pre = 0;
        let mut post = 0;
        let mut shifted = 0;
        let (mut after_point, mut after_shift) = (false, false);
        for i in &self.items {
            match i {
                Item::Point => after_point = true,
                Item::Shift => after_shift = true,
                Item::Nine | Item::Zero if after_point => post += 1,
                Item::Nine | Item::Zero if after_shift => {
                    shifted += 1;
                    pre += 1
                }
                Item::Nine | Item::Zero => pre += 1,
                _ => {}
            }
        }
        (pre, post, shifted)
    }
}

/// |n| rounded to `post` decimals, as integer digits and fraction digits.
fn fixed(n: Number, post: usize) -> (bool, String, String) {
    match n {
        Number::Float(f) => {
            let s = format!("{:.*}", post, f.abs());
            let (i, fr) = s.split_once('.').unwrap_or((&s, ""));
            (
                f.is_sign_negative() && f != 0.0,
                i.to_string(),
                fr.to_string(),
            )
        }
        Number::Exact { unscaled, scale } => {
            let negative = unscaled < 0;
            let mut v = unscaled.unsigned_abs();
            let scale = scale as usize;
            let mut s = scale;
            if post < scale {
                let div = 10u128.pow((scale - post) as u32);
                let (q, r) = (v / div, v % div);
                v = if r * 2 >= div { q + 1 } else { q };
                s = post;
            }
            let digits = format!("{:0>width$}", v, width = s + 1);
            let (i, fr) = digits.split_at(digits.len() - s);
            let fr = format!("{fr:0<post$}");
            (negative && v != 0, i.to_string(), fr)
        }
    }
}

fn shifted(n: Number, by: usize) -> Number {
    match n {
        Number::Float(f) => Number::Float(f * 10f64.powi(by as i32)),
        Number::Exact { unscaled, scale } => {
            let by = by as u32;
            if scale >= by {
                Number::Exact {
                    unscaled,
                    scale: scale - by,
                }
            } else {
                Number::Exact {
                    unscaled: unscaled.saturating_mul(10i128.pow(by - scale)),
                    scale: 0,
                }
            }
        }
    }
}

fn to_f64(n: Number) -> f64 {
    match n {
        Number::Float(f) => f,
        Number::Exact { unscaled, scale } => unscaled as f64 / 10f64.powi(scale as i32),
    }
}

fn roman(mut v: i128) -> Option<String> {
    if !(1..=3999).contains(&v) {
        return None;
    }
    let table = [
        (1000, "M"),
        (900, "CM"),
        (500, "D"),
        (400, "CD"),
        (100, "C"),
        (90, "XC"),
        (50, "L"),
        (40, "XL"),
        (10, "X"),
        (9, "IX"),
        (5, "V"),
        (4, "IV"),
        (1, "I"),
    ];
    let mut s = String::new();
    for (n, r) in table {
        while v >= n {
            s.push_str(r);
            v -= n;
        }
    }
    Some(s)
}

fn ordinal(int_digits: &str, upper: bool) -> &'static str {
    let b = int_digits.as_bytes();
    let teen = b.len() > 1 && b[b.len() - 2] == b'1';
    let s = match b.last() {
        Some(b'1') if !teen => "st",
        Some(b'2') if !teen => "nd",
        Some(b'3') if !teen => "rd",
        _ => "th",
    };
    match (upper, s) {
        (false, _) => s,
        (true, "st") => "ST",
        (true, "nd") => "ND",
        (true, "rd") => "RD",
        _ => "TH",
    }
}

/// `to_char(number, template)`.
pub fn format(n: &Number, t: &NumberTemplate) -> FormatResult<String> {
    if let Some(upper) = t.items.iter().find_map(|i| match i {
        Item::Roman(u) => Some(*u),
        _ => None,
    }) {
        let (_, int, _) = fixed(*n, 0);
        let v: i128 = int.parse().unwrap_or(0);
        let r = roman(v).unwrap_or_else(|| "#".repeat(15));
        let r = if upper { r } else { r.to_lowercase() };
        return Ok(if t.fill { r } else { format!("{r:>15}") });
    }
    if t.count(Item::Exponent) > 0 {
        return Ok(exponent(n, t));
    }
    let (pre, post, shift) = t.digit_counts();
    let n = if shift > 0 { shifted(*n, shift) } else { *n };
    let (negative, int, frac) = fixed(n, post);
    let significant = int.trim_start_matches('0');
    let overflow = significant.len() > pre || matches!(n, Number::Float(f) if !f.is_finite());
    let first_zero = t
        .items
        .iter()
        .filter(|i| matches!(i, Item::Nine | Item::Zero))
        .position(|i| *i == Item::Zero)
        .unwrap_or(usize::MAX);
    let mut out = String::new();
    // Where the number (its sign slot) starts in `out`, and where its first shown digit is.
    let mut field_start: Option<usize> = None;
    let mut first_shown: Option<usize> = None;
    let mut digit_pos = 0; // among 9/0 positions
    let mut frac_pos = 0;
    let mut int_pos = 0;
    let mut past_point = false;
    // `S` after the digits prints at its place; before them (or without S, MI or SG) the
    // sign takes a position just before the number and moves next to its first digit.
    let digits_before = |p: usize| {
        t.items[..p]
            .iter()
            .any(|i| matches!(i, Item::Nine | Item::Zero | Item::Point))
    };
    let sign_after = t
        .items
        .iter()
        .position(|i| *i == Item::Sign)
        .is_some_and(digits_before);
    let slot = t.count(Item::Minus) + t.count(Item::PlusMinus) == 0 && !sign_after;
    // Trailing zeros at 9 positions are dropped under FM.
    let frac_kinds: Vec<Item> = {
        let mut after = false;
        t.items
            .iter()
            .filter(|i| {
                if **i == Item::Point {
                    after = true;
                }
                after && matches!(i, Item::Nine | Item::Zero)
            })
            .copied()
            .collect()
    };
    let mut frac_keep = frac.len();
    if t.fill && !overflow {
        while frac_keep > 0
            && frac_kinds.get(frac_keep - 1) == Some(&Item::Nine)
            && frac.as_bytes()[frac_keep - 1] == b'0'
        {
            frac_keep -= 1;
        }
    }
    for item in &t.items {
        let numeric = matches!(item, Item::Nine | Item::Zero | Item::Point | Item::Group);
        if numeric && field_start.is_none() {
            field_start = Some(out.len());
            if slot && !t.fill {
                out.push(' ');
            }
        }
        match item {
            Item::Nine | Item::Zero if !past_point => {
                let lead = pre - significant.len().min(pre);
                let c = if overflow {
                    Some('#')
                } else if int_pos >= lead {
                    Some(significant.as_bytes()[int_pos - lead] as char)
                } else if digit_pos >= first_zero {
                    Some('0')
                } else if t.fill {
                    None
                } else {
                    Some(' ')
                };
                if let Some(c) = c {
                    if c != ' ' && first_shown.is_none() {
                        first_shown = Some(out.len());
                    }
                    out.push(c);
                }
                int_pos += 1;
                digit_pos += 1;
            }
            Item::Nine | Item::Zero => {
                if overflow {
                    out.push('#');
                } else if frac_pos < frac_keep {
                    if first_shown.is_none() {
                        first_shown = Some(out.len());
                    }
                    out.push(frac.as_bytes()[frac_pos] as char);
                }
                frac_pos += 1;
                digit_pos += 1;
            }
            Item::Point => {
                past_point = true;
                if t.fill && first_shown.is_none() && frac_keep == 0 && !overflow {
                    // Postgres shows a zero rather than a bare point.
                    first_shown = Some(out.len());
                    out.push('0');
                }
                if first_shown.is_none() {
                    first_shown = Some(out.len());
                }
                out.push('.');
            }
            Item::Group => {
                if first_shown.is_some() || overflow {
                    out.push(',');
                } else if !t.fill {
                    out.push(' ');
                }
            }
            Item::Sign => {
                if sign_after {
                    out.push(if negative { '-' } else { '+' });
                }
            }
            Item::Minus => out.push_str(if negative {
                "-"
            } else if t.fill {
                ""
            } else {
                " "
            }),
            Item::Plus => out.push_str(if !negative {
                "+"
            } else if t.fill {
                ""
            } else {
                " "
            }),
            Item::PlusMinus => out.push(if negative { '-' } else { '+' }),
            Item::Brackets => out.push_str(if negative {
                ">"
            } else if t.fill {
                ""
            } else {
                " "
            }),
            Item::Currency => {
                if !t.fill {
                    out.push(' ')
                }
            }
            Item::Shift | Item::Exponent | Item::Roman(_) => {}
            Item::Ordinal(upper) => {
                if !negative && !overflow && post == 0 {
                    out.push_str(ordinal(&int, *upper));
                }
            }
            Item::Literal(c) => out.push(*c),
        }
    }
    // The anchored sign goes just before the first shown character of the number.
    if slot && !overflow {
        let mark = if t.count(Item::Brackets) > 0 {
            if negative {
                Some('<')
            } else {
                None
            }
        } else if t.count(Item::Sign) > 0 {
            Some(if negative { '-' } else { '+' })
        } else if negative {
            Some('-')
        } else {
            None
        };
        if let Some(mark) = mark {
            let at = first_shown.or(field_start).unwrap_or(out.len());
            if !t.fill && at > 0 && out.as_bytes()[at - 1] == b' ' {
                out.replace_range(at - 1..at, &mark.to_string());
            } else {
                out.insert(at, mark);
            }
        }
    }
    Ok(out)
}

/// `9.99EEEE`: a mantissa with the template's decimals and a signed two-digit exponent.
fn exponent(n: &Number, t: &NumberTemplate) -> String {
    let (_, post, _) = t.digit_counts();
    let v = to_f64(*n);
    if !v.is_finite() {
        return format!(" {}", "#".repeat(post + 6));
    }
    let s = format!("{:.*e}", post, v.abs());
    let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let sign = if v < 0.0 {
        "-"
    } else if t.fill {
        ""
    } else {
        " "
    };
    format!(
        "{sign}{mantissa}e{}{:02}",
        if exp < 0 { '-' } else { '+' },
        exp.abs()
    )
}

#[cfg(test)]
mod tests {
    //! Expected values are what Postgres 15 returns.
    use super::*;

    fn num(s: &str) -> Number {
        let (i, f) = s.split_once('.').unwrap_or((s, ""));
        Number::Exact {
            unscaled: format!("{i}{f}").parse().unwrap(),
            scale: f.len() as u32,
        }
    }

    #[test]
    fn formats_numbers_like_postgres() {
        let cases = [
            ("5", "999", "   5"),
            ("-5", "999", "  -5"),
            ("12345", "999", " ###"),
            ("1234.5", "9,999.99", " 1,234.50"),
            ("-1234.5", "9,999.99", "-1,234.50"),
            ("0.5", "9.99", "  .50"),
            ("0.5", "0.99", " 0.50"),
            ("1234.5", "FM9,999.99", "1,234.5"),
            ("5.0", "FM9.99", "5."),
            ("5", "FM999", "5"),
            ("-5", "FM999", "-5"),
            ("1234.5", "FM9999.00", "1234.50"),
            ("5", "9099", "  005"),
            ("-5", "000", "-005"),
            ("-12", "S9999", "  -12"),
            ("12", "S9999", "  +12"),
            ("-12", "9999S", "  12-"),
            ("-12", "9999MI", "  12-"),
            ("12", "9999MI", "  12 "),
            ("-12", "MI9999", "-  12"),
            ("12", "PL9999", "+   12"),
            ("-12", "PL9999", "   -12"),
            ("-12", "SG9999", "-  12"),
            ("12", "SG9999", "+  12"),
            ("-12", "9999PR", "  <12>"),
            ("12", "9999PR", "   12 "),
            ("12345.678", "9.99EEEE", " 1.23e+04"),
            ("-0.00012", "9.99EEEE", "-1.20e-04"),
            ("21", "99th", " 21st"),
            ("21", "FM99TH", "21ST"),
            ("12", "99V9", " 120"),
            ("12.45", "99V99", " 1245"),
            ("1234567", "9G999G999", " 1,234,567"),
            ("1234.5", "9999D99", " 1234.50"),
            ("1994", "RN", "        MCMXCIV"),
            ("5", "L999", "    5"),
            ("-0.5", "9.9", " -.5"),
            ("0.05", "9.9", "  .1"),
            ("0", "9.99", "  .00"),
            ("0", "FM9.99", "0."),
            ("123", "\"abc\"999", "abc 123"),
            ("123", "999 x", " 123 x"),
            ("1234.5678", "FM999999.999999", "1234.5678"),
            ("1234.5678", "99999", "  1235"),
            ("0.0001", "9.999", "  .000"),
            ("-1234.5", "FM9,999.99", "-1,234.5"),
            ("12", "B99", " 12"),
            ("99.999", "99.99", " ##.##"),
        ];
        let mut failures = Vec::new();
        for (v, t, want) in cases {
            let got = format(&num(v), &NumberTemplate::parse(t).unwrap()).unwrap();
            if got != want {
                failures.push(format!("to_char({v}, '{t}'): [{got}] want [{want}]"));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn floats_round_like_postgres() {
        let t = NumberTemplate::parse("999.99").unwrap();
        assert_eq!(format(&Number::Float(12.345), &t).unwrap(), "  12.35");
        assert_eq!(format(&Number::Float(-2.5), &t).unwrap(), "  -2.50");
    }

    #[test]
    fn bad_templates_are_syntax_errors() {
        for t in ["9.9.9", "S9S", "PR9S", "9V9.9"] {
            assert_eq!(
                NumberTemplate::parse(t).unwrap_err().code,
                SYNTAX_ERROR,
                "{t}"
            );
        }
    }
}
