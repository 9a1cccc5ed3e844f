//! Postgres date-time template patterns: the formatter behind `to_char(timestamp |
//! timestamptz | date | interval, text)` and the parser behind `to_timestamp(text, text)`
//! and `to_date(text, text)`.
//!
//! It follows Postgres 15's `formatting.c`: a template is cut into keywords (`YYYY`,
//! `HH24`, `Month`, ...; the first keyword of Postgres's table that is a prefix wins, so
//! `HH24` beats `HH`), with the `FM` / `TM` prefixes and `TH` / `th` / `SP` suffixes,
//! double-quoted literal text (a backslash quotes the next character inside it) and a
//! backslash before `"` outside it; every other character is copied. Calendar arithmetic
//! is Postgres's own (`date2j`, `j2date`, ISO weeks), so that intervals, whose "dates" are
//! not real dates (`40 days`), format as Postgres formats them.
//!
//! Choices where Weir differs from or narrows Postgres, each an error rather than a wrong
//! answer:
//! - `TM` uses the English names (Postgres's C locale).
//! - Parsing (`to_timestamp` / `to_date`) supports the numeric fields, month and day names,
//!   AM/PM, AD/BC, `TZH` / `TZM` / `OF`, `J`, `DDD`, `WW`, `CC`, `SSSS(S)`, `MS`, `US`,
//!   `FF1`-`FF6` and ISO week dates (`IYYY` / `IW` / `ID` / `IDDD`); `TZ` and `OF` are
//!   refused as in Postgres 15 ("only supported in to_char", 0A000), and so is `RM`
//!   (Roman months, 0A000), which Postgres accepts.
//! - The `FX` prefix is accepted and parsing stays in its lenient mode: Postgres's FX mode
//!   (exact separators) is not implemented; a template using FX is refused (0A000) rather
//!   than parsed leniently.
//! - Timestamps with a time zone are shown in UTC, Weir's only session time zone (`TZ`
//!   gives `UTC`, `OF` gives `+00`).

/// SQLSTATE 22007: a template or an input that does not fit it.
pub const INVALID_DATETIME_FORMAT: &str = "22007";
/// SQLSTATE 22008: a field value out of its range (month 13, hour 25, February 30).
pub const DATETIME_FIELD_OVERFLOW: &str = "22008";
/// SQLSTATE 0A000: a pattern Weir does not implement.
pub const FEATURE_NOT_SUPPORTED: &str = "0A000";

/// An error with the SQLSTATE Postgres gives for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatError {
    pub code: &'static str,
    pub message: String,
}

impl FormatError {
    fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

pub type FormatResult<T> = Result<T, FormatError>;

/// The template keywords, in Postgres's search order (a longer keyword before its
/// prefixes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    ADot(Case),
    AmDot(Case),
    Ad(Case),
    Am(Case),
    BcDot(Case),
    Bc(Case),
    Cc,
    DayName(Case),
    Ddd,
    Dd,
    DayAbbrev(Case),
    D,
    Ff(u8),
    Fx,
    Hh24,
    Hh12,
    Hh,
    Iddd,
    Id,
    Iw,
    Iyyy,
    Iyy,
    Iy,
    I,
    J,
    Mi,
    Mm,
    MonthName(Case),
    MonthAbbrev(Case),
    Ms,
    Of,
    PmDot(Case),
    Pm(Case),
    Q,
    Rm(Case),
    Sssss,
    Ssss,
    Ss,
    Tzh,
    Tzm,
    Tz(Case),
    Us,
    Ww,
    W,
    YCommaYyy,
    Yyyy,
    Yyy,
    Yy,
    Y,
}

/// How a name is written: `MONTH`, `Month` or `month`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    Upper,
    Capital,
    Lower,
}

use Case::{Capital, Lower, Upper};

const KEYWORDS: &[(&str, Key)] = &[
    ("A.D.", Key::ADot(Upper)),
    ("A.M.", Key::AmDot(Upper)),
    ("AD", Key::Ad(Upper)),
    ("AM", Key::Am(Upper)),
    ("B.C.", Key::BcDot(Upper)),
    ("BC", Key::Bc(Upper)),
    ("CC", Key::Cc),
    ("DAY", Key::DayName(Upper)),
    ("DDD", Key::Ddd),
    ("DD", Key::Dd),
    ("DY", Key::DayAbbrev(Upper)),
    ("Day", Key::DayName(Capital)),
    ("Dy", Key::DayAbbrev(Capital)),
    ("D", Key::D),
    ("FF1", Key::Ff(1)),
    ("FF2", Key::Ff(2)),
    ("FF3", Key::Ff(3)),
    ("FF4", Key::Ff(4)),
    ("FF5", Key::Ff(5)),
    ("FF6", Key::Ff(6)),
    ("FX", Key::Fx),
    ("HH24", Key::Hh24),
    ("HH12", Key::Hh12),
    ("HH", Key::Hh),
    ("IDDD", Key::Iddd),
    ("ID", Key::Id),
    ("IW", Key::Iw),
    ("IYYY", Key::Iyyy),
    ("IYY", Key::Iyy),
    ("IY", Key::Iy),
    ("I", Key::I),
    ("J", Key::J),
    ("MI", Key::Mi),
    ("MM", Key::Mm),
    ("MONTH", Key::MonthName(Upper)),
    ("MON", Key::MonthAbbrev(Upper)),
    ("MS", Key::Ms),
    ("Month", Key::MonthName(Capital)),
    ("Mon", Key::MonthAbbrev(Capital)),
    ("OF", Key::Of),
    ("P.M.", Key::PmDot(Upper)),
    ("PM", Key::Pm(Upper)),
    ("Q", Key::Q),
    ("RM", Key::Rm(Upper)),
    ("SSSSS", Key::Sssss),
    ("SSSS", Key::Ssss),
    ("SS", Key::Ss),
    ("TZH", Key::Tzh),
    ("TZM", Key::Tzm),
    ("TZ", Key::Tz(Upper)),
    ("US", Key::Us),
    ("WW", Key::Ww),
    ("W", Key::W),
    ("Y,YYY", Key::YCommaYyy),
    ("YYYY", Key::Yyyy),
    ("YYY", Key::Yyy),
    ("YY", Key::Yy),
    ("Y", Key::Y),
    ("a.d.", Key::ADot(Lower)),
    ("a.m.", Key::AmDot(Lower)),
    ("ad", Key::Ad(Lower)),
    ("am", Key::Am(Lower)),
    ("b.c.", Key::BcDot(Lower)),
    ("bc", Key::Bc(Lower)),
    ("cc", Key::Cc),
    ("day", Key::DayName(Lower)),
    ("ddd", Key::Ddd),
    ("dd", Key::Dd),
    ("dy", Key::DayAbbrev(Lower)),
    ("d", Key::D),
    ("ff1", Key::Ff(1)),
    ("ff2", Key::Ff(2)),
    ("ff3", Key::Ff(3)),
    ("ff4", Key::Ff(4)),
    ("ff5", Key::Ff(5)),
    ("ff6", Key::Ff(6)),
    ("fx", Key::Fx),
    ("hh24", Key::Hh24),
    ("hh12", Key::Hh12),
    ("hh", Key::Hh),
    ("iddd", Key::Iddd),
    ("id", Key::Id),
    ("iw", Key::Iw),
    ("iyyy", Key::Iyyy),
    ("iyy", Key::Iyy),
    ("iy", Key::Iy),
    ("i", Key::I),
    ("j", Key::J),
    ("mi", Key::Mi),
    ("mm", Key::Mm),
    ("month", Key::MonthName(Lower)),
    ("mon", Key::MonthAbbrev(Lower)),
    ("ms", Key::Ms),
    ("of", Key::Of),
    ("p.m.", Key::PmDot(Lower)),
    ("pm", Key::Pm(Lower)),
    ("q", Key::Q),
    ("rm", Key::Rm(Lower)),
    ("sssss", Key::Sssss),
    ("ssss", Key::Ssss),
    ("ss", Key::Ss),
    ("tzh", Key::Tzh),
    ("tzm", Key::Tzm),
    ("tz", Key::Tz(Lower)),
    ("us", Key::Us),
    ("ww", Key::Ww),
    ("w", Key::W),
    ("y,yyy", Key::YCommaYyy),
    ("yyyy", Key::Yyyy),
    ("yyy", Key::Yyy),
    ("yy", Key::Yy),
    ("y", Key::Y),
];

impl Key {
    /// The keyword as written in Postgres's table (for messages).
    fn name(self) -> &'static str {
        KEYWORDS
            .iter()
            .find(|(_, k)| *k == self)
            .map(|(n, _)| *n)
            .unwrap_or("?")
    }

    /// Fields read as digits (`is_digit` in Postgres): a digit field followed by another
    /// digit field is read with its keyword's width.
    fn is_digit(self) -> bool {
        matches!(
            self,
            Key::Cc
                | Key::Ddd
                | Key::Dd
                | Key::D
                | Key::Ff(_)
                | Key::Hh24
                | Key::Hh12
                | Key::Hh
                | Key::Iddd
                | Key::Id
                | Key::Iw
                | Key::Iyyy
                | Key::Iyy
                | Key::Iy
                | Key::I
                | Key::J
                | Key::Mi
                | Key::Mm
                | Key::Ms
                | Key::Q
                | Key::Sssss
                | Key::Ssss
                | Key::Ss
                | Key::Tzh
                | Key::Tzm
                | Key::Us
                | Key::Ww
                | Key::W
                | Key::YCommaYyy
                | Key::Yyyy
                | Key::Yyy
                | Key::Yy
                | Key::Y
        )
    }

    /// Width of the field when it is read without a separator after it.
    fn width(self) -> usize {
        match self {
            Key::Ff(n) => n as usize,
            Key::Hh24 | Key::Hh12 => 2,
            Key::Iddd | Key::Iyyy | Key::Yyyy => 4,
            Key::Sssss => 5,
            Key::Ssss => 4,
            Key::YCommaYyy => 5,
            other => other.name().len(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Field {
        key: Key,
        /// `FM`: no padding.
        fill: bool,
        /// `TM`: translated names (English here), unpadded as in Postgres.
        translate: bool,
        /// `TH` / `th`: an ordinal suffix after the number.
        ordinal: Option<Case>,
    },
    /// A separator (space or punctuation) in the template.
    Separator(char),
    /// Any other literal character (including quoted text).
    Literal(char),
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    nodes: Vec<Node>,
}

fn keyword_at(s: &str) -> Option<(&'static str, Key)> {
    KEYWORDS.iter().find(|(n, _)| s.starts_with(n)).copied()
}

/// Postgres's `is_separator_char`: printable ASCII that is neither a letter nor a digit.
fn is_separator(c: char) -> bool {
    c.is_ascii() && !c.is_ascii_alphanumeric() && c > ' ' && c != '\u{7f}'
}

impl Key {
    /// The span of time (microseconds) that this field cannot tell apart in a
    /// timestamp shown in UTC: a day for the date's fields (and the constant zone
    /// fields), an hour for the hour and AM/PM, and so on down to one microsecond.
    fn timestamp_span_micros(self) -> i64 {
        use Key::*;
        match self {
            Ff(_) | Ms | Us => 1,
            Ss | Ssss | Sssss => 1_000_000,
            Mi => 60_000_000,
            Hh24 | Hh12 | Hh | AmDot(_) | Am(_) | PmDot(_) | Pm(_) => 3_600_000_000,
            ADot(_) | Ad(_) | BcDot(_) | Bc(_) | Cc | DayName(_) | Ddd | Dd | DayAbbrev(_) | D
            | Fx | Iddd | Id | Iw | Iyyy | Iyy | Iy | I | J | Mm | MonthName(_)
            | MonthAbbrev(_) | Of | Q | Rm(_) | Tzh | Tzm | Tz(_) | Ww | W | YCommaYyy | Yyyy
            | Yyy | Yy | Y => MICROS_PER_DAY,
        }
    }
}

impl Template {
    /// The span of time (microseconds, in spans aligned to 1970-01-01 00:00 UTC)
    /// within which every timestamp formats alike: a day for `YYYY-MM-DD`, a minute
    /// for `HH24:MI`. `to_char` over a column formats once per span its rows fall in.
    pub fn timestamp_span_micros(&self) -> i64 {
        self.nodes
            .iter()
            .filter_map(|n| match n {
                Node::Field { key, .. } => Some(key.timestamp_span_micros()),
                _ => None,
            })
            .min()
            .unwrap_or(MICROS_PER_DAY)
    }

    /// Cuts a template into keywords and literal text, as Postgres's `parse_format`.
    pub fn parse(template: &str) -> Template {
        let mut nodes = Vec::new();
        let mut rest = template;
        while !rest.is_empty() {
            let (mut fill, mut translate) = (false, false);
            for prefix in ["FM", "fm", "TM", "tm"] {
                if let Some(r) = rest.strip_prefix(prefix) {
                    fill = prefix.eq_ignore_ascii_case("FM");
                    translate = !fill;
                    rest = r;
                    break;
                }
            }
            if let Some((name, key)) = keyword_at(rest) {
                rest = &rest[name.len()..];
                let mut ordinal = None;
                for (suffix, case) in [("TH", Some(Upper)), ("th", Some(Lower)), ("SP", None)] {
                    if let Some(r) = rest.strip_prefix(suffix) {
                        ordinal = case;
                        rest = r;
                        break;
                    }
                }
                nodes.push(Node::Field {
                    key,
                    fill,
                    translate,
                    ordinal,
                });
                continue;
            }
            let mut chars = rest.chars();
            let Some(c) = chars.next() else { break };
            if c == '"' {
                // Quoted literal text; a backslash quotes the next character.
                let mut quoted = chars.as_str().chars().peekable();
                let mut consumed = 1;
                while let Some(q) = quoted.next() {
                    consumed += q.len_utf8();
                    match q {
                        '"' => break,
                        '\\' if quoted.peek().is_some() => {
                            let next = quoted.next().unwrap();
                            consumed += next.len_utf8();
                            nodes.push(Node::Literal(next));
                        }
                        other => nodes.push(Node::Literal(other)),
                    }
                }
                rest = &rest[consumed..];
                continue;
            }
            if c == '\\' && chars.as_str().starts_with('"') {
                nodes.push(Node::Literal('"'));
                rest = &rest[2..];
                continue;
            }
            nodes.push(if is_separator(c) || c.is_whitespace() {
                Node::Separator(c)
            } else {
                Node::Literal(c)
            });
            rest = chars.as_str();
        }
        Template { nodes }
    }
}

// --- Postgres's calendar arithmetic (datetime.c) ---

/// Julian day number of a (proleptic Gregorian) date; `month` and `day` may be out of
/// their ranges (intervals).
pub fn date2j(year: i64, month: i64, day: i64) -> i64 {
    let (month, year) = if month > 2 {
        (month + 1, year + 4800)
    } else {
        (month + 13, year + 4799)
    };
    let century = year / 100;
    let mut julian = year * 365 - 32167;
    julian += year / 4 - century + century / 4;
    julian += 7834 * month / 256 + day;
    julian
}

/// The date of a Julian day number: (year, month, day).
pub fn j2date(jd: i64) -> (i64, i64, i64) {
    let mut julian = jd + 32044;
    let mut quad = julian / 146097;
    let extra = (julian - quad * 146097) * 4 + 3;
    julian += 60 + quad * 3 + extra / 146097;
    quad = julian / 1461;
    julian -= quad * 1461;
    let mut y = julian * 4 / 1461;
    julian = if y != 0 {
        (julian + 305) % 365
    } else {
        (julian + 306) % 366
    } + 123;
    y += quad * 4;
    let quad = julian * 2141 / 65536;
    let day = julian - 7834 * quad / 256;
    let month = (quad + 10) % 12 + 1;
    (y - 4800, month, day)
}

/// Day of the week of a Julian day number, 0 = Sunday.
fn j2day(j: i64) -> i64 {
    (j + 1).rem_euclid(7)
}

/// First day (Julian) of ISO week `week` of ISO year `year`.
fn isoweek2j(year: i64, week: i64) -> i64 {
    let day4 = date2j(year, 1, 4);
    let day0 = j2day(day4 - 1);
    (week - 1) * 7 + (day4 - day0)
}

/// (ISO year, ISO week) of a date.
fn iso_year_week(year: i64, month: i64, day: i64) -> (i64, i64) {
    let dayn = date2j(year, month, day);
    let mut year = year;
    let mut day4 = date2j(year, 1, 4);
    let mut day0 = j2day(day4 - 1);
    if dayn < day4 - day0 {
        year -= 1;
        day4 = date2j(year, 1, 4);
        day0 = j2day(day4 - 1);
    }
    let mut week = (dayn - (day4 - day0)) / 7 + 1;
    if week >= 52 {
        let next4 = date2j(year + 1, 1, 4);
        let next0 = j2day(next4 - 1);
        if dayn >= next4 - next0 {
            year += 1;
            week = (dayn - (next4 - next0)) / 7 + 1;
        }
    }
    (year, week)
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const ROMAN_MONTHS: [&str; 12] = [
    "I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X", "XI", "XII",
];

/// A point in time or an interval, broken into the fields templates show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moment {
    /// Astronomical year (0 is 1 BC); for an interval, whole years.
    pub year: i64,
    pub month: i64,
    pub day: i64,
    pub hour: i64,
    pub minute: i64,
    pub second: i64,
    pub micros: i64,
    pub kind: MomentKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MomentKind {
    Timestamp,
    /// A timestamp with time zone, shown in UTC.
    TimestampTz,
    Interval,
}

const MICROS_PER_DAY: i64 = 86_400_000_000;
/// Julian day number of 1970-01-01.
pub const UNIX_EPOCH_J: i64 = 2_440_588;

impl Moment {
    /// A timestamp from microseconds since 1970-01-01 00:00.
    pub fn from_micros(micros: i64, kind: MomentKind) -> Moment {
        let days = micros.div_euclid(MICROS_PER_DAY);
        let time = micros.rem_euclid(MICROS_PER_DAY);
        let (year, month, day) = j2date(days + UNIX_EPOCH_J);
        Moment {
            year,
            month,
            day,
            hour: time / 3_600_000_000,
            minute: time / 60_000_000 % 60,
            second: time / 1_000_000 % 60,
            micros: time % 1_000_000,
            kind,
        }
    }

    /// An interval as Postgres's `interval2tm` splits it (the time part is not folded
    /// into days; signs follow each part).
    pub fn from_interval(months: i64, days: i64, micros: i64) -> Moment {
        Moment {
            year: months / 12,
            month: months % 12,
            day: days,
            hour: micros / 3_600_000_000,
            minute: micros / 60_000_000 % 60,
            second: micros / 1_000_000 % 60,
            micros: micros % 1_000_000,
            kind: MomentKind::Interval,
        }
    }

    fn is_interval(&self) -> bool {
        self.kind == MomentKind::Interval
    }

    /// Day of the year; for an interval, the span in days (30-day months).
    fn yday(&self) -> i64 {
        if self.is_interval() {
            (self.year * 12 + self.month) * 30 + self.day
        } else {
            date2j(self.year, self.month, self.day) - date2j(self.year, 1, 1) + 1
        }
    }

    fn wday(&self) -> i64 {
        j2day(date2j(self.year, self.month, self.day))
    }

    /// The year as shown: BC years counted from 1 (Postgres's `ADJUST_YEAR`).
    fn shown_year(&self, year: i64) -> i64 {
        if !self.is_interval() && year <= 0 {
            -(year - 1)
        } else {
            year
        }
    }
}

/// `%0*d` with Postgres's width rules: `width` digits, one more for a minus sign when
/// `signed_width`; none under FM.
fn padded(v: i64, width: usize, fill: bool, signed_width: bool) -> String {
    let w = if fill {
        0
    } else if signed_width && v < 0 {
        width + 1
    } else {
        width
    };
    format!("{v:0w$}")
}

/// Postgres's `str_numth`: st / nd / rd / th after a number.
fn ordinal_suffix(digits: &str, case: Case) -> &'static str {
    let b = digits.as_bytes();
    let last = b.last().copied().unwrap_or(b'0');
    let teen = b.len() > 1 && b[b.len() - 2] == b'1';
    let lower = match last {
        b'1' if !teen => "st",
        b'2' if !teen => "nd",
        b'3' if !teen => "rd",
        _ => "th",
    };
    match (case, lower) {
        (Lower, _) => lower,
        (_, "st") => "ST",
        (_, "nd") => "ND",
        (_, "rd") => "RD",
        _ => "TH",
    }
}

fn cased(s: &str, case: Case) -> String {
    match case {
        Upper => s.to_uppercase(),
        Lower => s.to_lowercase(),
        Capital => s.to_string(),
    }
}

/// A name padded to `width` unless FM or TM.
fn name(s: &str, case: Case, width: usize, unpadded: bool) -> String {
    let s = cased(s, case);
    if unpadded {
        s
    } else {
        format!("{s:<width$}")
    }
}

fn invalid_for_interval() -> FormatError {
    FormatError::new(
        INVALID_DATETIME_FORMAT,
        "invalid format specification for an interval value",
    )
}

/// Last `n` characters of a padded number (YYY, YY, Y).
fn last_chars(s: String, n: usize) -> String {
    let count = s.chars().count();
    s.chars().skip(count.saturating_sub(n)).collect()
}

/// `to_char(moment, template)`.
pub fn format(m: &Moment, template: &Template) -> FormatResult<String> {
    let mut out = String::new();
    for node in &template.nodes {
        match node {
            Node::Separator(c) | Node::Literal(c) => out.push(*c),
            Node::Field {
                key,
                fill,
                translate,
                ordinal,
            } => {
                let (text, numeric) = format_field(m, *key, *fill, *fill || *translate)?;
                out.push_str(&text);
                if let (Some(case), true) = (ordinal, numeric) {
                    out.push_str(ordinal_suffix(&text, *case));
                }
            }
        }
    }
    Ok(out)
}

/// One field's text, and whether it is a number (which TH applies to).
fn format_field(m: &Moment, key: Key, fill: bool, unpadded: bool) -> FormatResult<(String, bool)> {
    let interval = m.is_interval();
    let no_interval = || {
        if interval {
            Err(invalid_for_interval())
        } else {
            Ok(())
        }
    };
    let pm = m.hour % 24 >= 12;
    let bc = m.year <= 0;
    let text = match key {
        Key::Am(c) | Key::Pm(c) => cased(if pm { "PM" } else { "AM" }, c),
        Key::AmDot(c) | Key::PmDot(c) => cased(if pm { "P.M." } else { "A.M." }, c),
        Key::Ad(c) | Key::Bc(c) => {
            no_interval()?;
            cased(if bc { "BC" } else { "AD" }, c)
        }
        Key::ADot(c) | Key::BcDot(c) => {
            no_interval()?;
            cased(if bc { "B.C." } else { "A.D." }, c)
        }
        Key::MonthName(c) | Key::MonthAbbrev(c) | Key::Rm(c) => {
            no_interval_names(key, interval)?;
            if m.month == 0 {
                // An interval without a month part shows no month.
                return Ok((String::new(), false));
            }
            let idx = (m.month.rem_euclid(12) + 11) % 12;
            match key {
                Key::MonthName(_) => name(MONTHS[idx as usize], c, 9, unpadded),
                Key::MonthAbbrev(_) => cased(&MONTHS[idx as usize][..3], c),
                _ => name(ROMAN_MONTHS[idx as usize], c, 4, fill),
            }
        }
        Key::DayName(c) => {
            no_interval()?;
            name(DAYS[m.wday() as usize], c, 9, unpadded)
        }
        Key::DayAbbrev(c) => {
            no_interval()?;
            cased(&DAYS[m.wday() as usize][..3], c)
        }
        Key::Tz(c) => {
            no_interval()?;
            match m.kind {
                MomentKind::TimestampTz => cased("UTC", c),
                _ => String::new(),
            }
        }
        Key::Of | Key::Tzh => {
            no_interval()?;
            if fill {
                "+0".into()
            } else {
                "+00".into()
            }
        }
        Key::Tzm => {
            no_interval()?;
            "00".into()
        }
        Key::Fx => String::new(),
        _ => return Ok((format_number(m, key, fill)?, true)),
    };
    Ok((text, false))
}

/// Month names are not shown for intervals; Roman months are.
fn no_interval_names(key: Key, interval: bool) -> FormatResult<()> {
    if interval && !matches!(key, Key::Rm(_)) {
        Err(invalid_for_interval())
    } else {
        Ok(())
    }
}

fn format_number(m: &Moment, key: Key, fill: bool) -> FormatResult<String> {
    let interval = m.is_interval();
    let year = m.shown_year(m.year);
    let iso_year = || m.shown_year(iso_year_week(m.year, m.month, m.day).0);
    let hour12 = if m.hour % 12 == 0 { 12 } else { m.hour % 12 };
    Ok(match key {
        Key::Hh24 => padded(m.hour, 2, fill, true),
        Key::Hh | Key::Hh12 => padded(hour12, 2, fill, true),
        Key::Mi => padded(m.minute, 2, fill, true),
        Key::Ss => padded(m.second, 2, fill, true),
        Key::Ms => padded(m.micros / 1000, 3, fill, false),
        Key::Us => padded(m.micros, 6, fill, false),
        Key::Ff(n) => padded(m.micros / 10i64.pow(6 - n as u32), n as usize, fill, false),
        Key::Ssss | Key::Sssss => (m.hour * 3600 + m.minute * 60 + m.second).to_string(),
        Key::YCommaYyy => format!("{},{:03}", year / 1000, year - year / 1000 * 1000),
        Key::Yyyy => padded(year, 4, fill, true),
        Key::Yyy => last_chars(padded(year, 3, fill, true), 3),
        Key::Yy => last_chars(padded(year, 2, fill, true), 2),
        Key::Y => last_chars(padded(year, 1, fill, true), 1),
        Key::Iyyy => padded(iso_year(), 4, fill, true),
        Key::Iyy => last_chars(padded(iso_year(), 3, fill, true), 3),
        Key::Iy => last_chars(padded(iso_year(), 2, fill, true), 2),
        Key::I => last_chars(padded(iso_year(), 1, fill, true), 1),
        Key::Cc => {
            let c = if interval {
                m.year / 100
            } else if m.year > 0 {
                (m.year + 99) / 100
            } else {
                -((99 - (m.year - 1)) / 100)
            };
            if (-99..=99).contains(&c) {
                padded(c, 2, fill, true)
            } else {
                c.to_string()
            }
        }
        Key::Mm => padded(m.month, 2, fill, true),
        Key::Dd => padded(m.day, 2, fill, false),
        Key::Ddd => padded(m.yday(), 3, fill, false),
        Key::Iddd => {
            let (iy, _) = iso_year_week(m.year, m.month, m.day);
            let v = date2j(m.year, m.month, m.day) - isoweek2j(iy, 1) + 1;
            padded(v, 3, fill, false)
        }
        Key::D => {
            if interval {
                return Err(invalid_for_interval());
            }
            (m.wday() + 1).to_string()
        }
        Key::Id => {
            if interval {
                return Err(invalid_for_interval());
            }
            let w = m.wday();
            (if w == 0 { 7 } else { w }).to_string()
        }
        Key::Ww => padded((m.yday() - 1) / 7 + 1, 2, fill, false),
        Key::Iw => padded(iso_year_week(m.year, m.month, m.day).1, 2, fill, false),
        Key::W => ((m.day - 1) / 7 + 1).to_string(),
        Key::Q => {
            if interval && m.month == 0 {
                return Ok(String::new());
            }
            ((m.month - 1) / 3 + 1).to_string()
        }
        Key::J => date2j(m.year, m.month, m.day).to_string(),
        other => {
            return Err(FormatError::new(
                FEATURE_NOT_SUPPORTED,
                format!("formatting field \"{}\" is not supported", other.name()),
            ))
        }
    })
}

// --- parsing: to_timestamp / to_date ---

/// The fields `to_timestamp` / `to_date` read from their input.
#[derive(Debug, Default, Clone)]
struct Fields {
    year: Option<i64>,
    bc: bool,
    cc: Option<i64>,
    month: Option<i64>,
    day: Option<i64>,
    yday: Option<i64>,
    ww: Option<i64>,
    julian: Option<i64>,
    iso_year: Option<i64>,
    iso_week: Option<i64>,
    iso_wday: Option<i64>,
    iso_yday: Option<i64>,
    hour: Option<i64>,
    clock12: bool,
    pm: Option<bool>,
    minute: Option<i64>,
    second: Option<i64>,
    sssss: Option<i64>,
    micros: Option<i64>,
    tz_hours: Option<i64>,
    tz_minutes: Option<i64>,
    tz_negative: bool,
}

/// Reads input as `template` describes it, as Postgres's `DCH_from_char` in its default
/// (non-FX) mode: separators in the template match one separator (or none) in the input,
/// spaces before a field are skipped, literal template characters skip one input
/// character, and reading stops at the end of the input.
struct Reader<'a> {
    input: &'a str,
    pos: usize,
}

impl<'a> Reader<'a> {
    fn rest(&self) -> &'a str {
        &self.input[self.pos..]
    }
    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }
    fn bump(&mut self) {
        if let Some(c) = self.peek() {
            self.pos += c.len_utf8();
        }
    }
    fn skip_spaces(&mut self) {
        while self.peek().is_some_and(|c| c.is_whitespace()) {
            self.bump();
        }
    }
}

fn bad_value(value: &str, key: Key, detail: &str) -> FormatError {
    FormatError::new(
        INVALID_DATETIME_FORMAT,
        format!(
            "invalid value \"{}\" for \"{}\": {detail}",
            value.chars().take(key.width()).collect::<String>(),
            key.name()
        ),
    )
}

/// Whether the node after `i` is known not to start with a digit (so a number may take
/// as many digits as it finds).
fn next_is_separator(nodes: &[Node], i: usize) -> bool {
    if let Node::Field {
        ordinal: Some(_), ..
    } = nodes[i]
    {
        return true;
    }
    match nodes.get(i + 1) {
        None => true,
        Some(Node::Field { key, .. }) => !key.is_digit(),
        Some(Node::Separator(c)) | Some(Node::Literal(c)) => !c.is_ascii_digit(),
    }
}

/// Reads an integer field: exactly the keyword's width when another digit field follows
/// directly, otherwise as many digits as there are (with an optional sign).
fn read_int(r: &mut Reader, key: Key, fill: bool, greedy: bool) -> FormatResult<(i64, usize)> {
    while r.peek() == Some(' ') {
        r.bump();
    }
    let rest = r.rest();
    let bytes = rest.as_bytes();
    let mut end = 0;
    if matches!(bytes.first(), Some(b'+' | b'-')) {
        end = 1;
    }
    let limit = if fill || greedy {
        usize::MAX
    } else {
        if rest.chars().count() < key.width() {
            return Err(FormatError::new(
                INVALID_DATETIME_FORMAT,
                format!(
                    "source string too short for \"{}\" formatting field",
                    key.name()
                ),
            ));
        }
        key.width()
    };
    while end < bytes.len() && end < limit && bytes[end].is_ascii_digit() {
        end += 1;
    }
    let digits = &rest[..end];
    let value: i64 = digits
        .parse()
        .map_err(|_| bad_value(rest, key, "value must be an integer"))?;
    if !(fill || greedy) && end < key.width() {
        return Err(bad_value(
            rest,
            key,
            &format!(
                "field requires {} characters, but only {end} could be parsed (if the source string is not fixed-width, try the FM modifier)",
                key.width()
            ),
        ));
    }
    if !(i32::MIN as i64..=i32::MAX as i64).contains(&value) {
        return Err(FormatError::new(
            DATETIME_FIELD_OVERFLOW,
            format!(
                "value for \"{}\" in source string is out of range",
                key.name()
            ),
        ));
    }
    r.pos += end;
    let unsigned_digits = digits.trim_start_matches(['+', '-']).len();
    Ok((value, unsigned_digits))
}

/// Matches one of `names` (case-insensitively) at the reader; returns its index.
fn read_name(r: &mut Reader, key: Key, names: &[&str]) -> FormatResult<usize> {
    let rest = r.rest();
    // Longest first, so that "May" does not stop "Mayday"-like prefixes short.
    let mut best: Option<(usize, usize)> = None;
    for (i, n) in names.iter().enumerate() {
        if rest.len() >= n.len()
            && rest.is_char_boundary(n.len())
            && rest[..n.len()].eq_ignore_ascii_case(n)
            && best.is_none_or(|(_, l)| n.len() > l)
        {
            best = Some((i, n.len()));
        }
    }
    let (i, len) = best.ok_or_else(|| {
        bad_value(
            rest,
            key,
            "the given value did not match any of the allowed values for this field",
        )
    })?;
    r.pos += len;
    Ok(i)
}

fn set(slot: &mut Option<i64>, value: i64, key: Key) -> FormatResult<()> {
    match slot {
        Some(old) if *old != value => Err(FormatError::new(
            INVALID_DATETIME_FORMAT,
            format!(
                "conflicting values for \"{}\" field in formatting string",
                key.name()
            ),
        )),
        _ => {
            *slot = Some(value);
            Ok(())
        }
    }
}

fn unsupported_in_parse(key: Key) -> FormatError {
    FormatError::new(
        FEATURE_NOT_SUPPORTED,
        format!(
            "formatting field \"{}\" is only supported in to_char",
            key.name()
        ),
    )
}

fn read_fields(input: &str, template: &Template) -> FormatResult<Fields> {
    let mut f = Fields::default();
    let mut r = Reader { input, pos: 0 };
    let nodes = &template.nodes;
    for (i, node) in nodes.iter().enumerate() {
        if r.peek().is_none() {
            break;
        }
        match node {
            Node::Separator(_) => {
                if r.peek()
                    .is_some_and(|c| c.is_whitespace() || is_separator(c))
                {
                    r.bump();
                }
            }
            Node::Literal(_) => r.bump(),
            Node::Field {
                key, fill, ordinal, ..
            } => {
                if *key != Key::Fx {
                    r.skip_spaces();
                }
                read_field(&mut r, &mut f, *key, *fill, next_is_separator(nodes, i))?;
                if ordinal.is_some() {
                    // The ordinal suffix in the input ("5th").
                    r.bump();
                    r.bump();
                }
            }
        }
    }
    Ok(f)
}

fn read_field(
    r: &mut Reader,
    f: &mut Fields,
    key: Key,
    fill: bool,
    greedy: bool,
) -> FormatResult<()> {
    let int = |r: &mut Reader| read_int(r, key, fill, greedy);
    match key {
        Key::Fx => {
            return Err(FormatError::new(
                FEATURE_NOT_SUPPORTED,
                "the FX (exact format) modifier is not supported in to_timestamp and to_date",
            ))
        }
        Key::Tz(_) | Key::Of | Key::Rm(_) => return Err(unsupported_in_parse(key)),
        Key::Am(_) | Key::Pm(_) => {
            let pm = read_name(r, key, &["AM", "PM"])? == 1;
            f.pm = Some(pm);
        }
        Key::AmDot(_) | Key::PmDot(_) => {
            let pm = read_name(r, key, &["A.M.", "P.M."])? == 1;
            f.pm = Some(pm);
        }
        Key::Ad(_) | Key::Bc(_) => f.bc = read_name(r, key, &["AD", "BC"])? == 1,
        Key::ADot(_) | Key::BcDot(_) => f.bc = read_name(r, key, &["A.D.", "B.C."])? == 1,
        Key::MonthName(_) => {
            let m = read_name(r, key, &MONTHS)? as i64 + 1;
            set(&mut f.month, m, key)?;
        }
        Key::MonthAbbrev(_) => {
            let abbrevs: Vec<&str> = MONTHS.iter().map(|m| &m[..3]).collect();
            let m = read_name(r, key, &abbrevs)? as i64 + 1;
            set(&mut f.month, m, key)?;
        }
        Key::DayName(_) => {
            // Read and checked, but a day of the week does not fix a date.
            read_name(r, key, &DAYS)?;
        }
        Key::DayAbbrev(_) => {
            let abbrevs: Vec<&str> = DAYS.iter().map(|d| &d[..3]).collect();
            read_name(r, key, &abbrevs)?;
        }
        Key::Hh24 => set(&mut f.hour, int(r)?.0, key)?,
        Key::Hh | Key::Hh12 => {
            set(&mut f.hour, int(r)?.0, key)?;
            f.clock12 = true;
        }
        Key::Mi => set(&mut f.minute, int(r)?.0, key)?,
        Key::Ss => set(&mut f.second, int(r)?.0, key)?,
        Key::Ssss | Key::Sssss => set(&mut f.sssss, int(r)?.0, key)?,
        Key::Ms | Key::Us | Key::Ff(_) => {
            let (v, digits) = int(r)?;
            let unit_digits = match key {
                Key::Ms => 3,
                _ => 6,
            };
            if digits > unit_digits {
                return Err(FormatError::new(
                    DATETIME_FIELD_OVERFLOW,
                    format!(
                        "value for \"{}\" in source string is out of range",
                        key.name()
                    ),
                ));
            }
            // Digits are a fraction: "5" in MS is 500 ms.
            let scaled = v * 10i64.pow((unit_digits - digits) as u32);
            let micros = if key == Key::Ms {
                scaled * 1000
            } else {
                scaled
            };
            set(&mut f.micros, micros, key)?;
        }
        Key::Tzh => {
            r.skip_spaces();
            let negative = r.peek() == Some('-');
            if matches!(r.peek(), Some('+' | '-')) {
                r.bump();
            }
            let (h, _) = read_int(r, key, true, true)?;
            f.tz_negative = negative;
            f.tz_hours = Some(h);
        }
        Key::Tzm => f.tz_minutes = Some(int(r)?.0),
        Key::YCommaYyy => {
            let (thousands, _) = read_int(r, key, true, true)?;
            if r.peek() == Some(',') {
                r.bump();
            }
            let (rest, _) = read_int(r, key, false, false)?;
            set(&mut f.year, thousands * 1000 + rest, key)?;
        }
        Key::Yyyy | Key::Yyy | Key::Yy | Key::Y => {
            let (v, digits) = int(r)?;
            set(&mut f.year, partial_year(key, v, digits), key)?;
        }
        Key::Iyyy | Key::Iyy | Key::Iy | Key::I => {
            let (v, digits) = int(r)?;
            set(&mut f.iso_year, partial_year(key, v, digits), key)?;
        }
        Key::Cc => set(&mut f.cc, int(r)?.0, key)?,
        Key::Mm => set(&mut f.month, int(r)?.0, key)?,
        Key::Dd => set(&mut f.day, int(r)?.0, key)?,
        Key::Ddd => set(&mut f.yday, int(r)?.0, key)?,
        Key::Iddd => set(&mut f.iso_yday, int(r)?.0, key)?,
        Key::D => {
            // Gregorian day of week (1 = Sunday); only used with ISO weeks.
            let d = int(r)?.0;
            set(&mut f.iso_wday, if d == 1 { 7 } else { d - 1 }, key)?;
        }
        Key::Id => set(&mut f.iso_wday, int(r)?.0, key)?,
        Key::Ww => set(&mut f.ww, int(r)?.0, key)?,
        Key::Iw => set(&mut f.iso_week, int(r)?.0, key)?,
        Key::W => {
            // Week of month: read and ignored, as Postgres does without a day.
            int(r)?;
        }
        Key::Q => {
            // Postgres reads and ignores the quarter.
            int(r)?;
        }
        Key::J => set(&mut f.julian, int(r)?.0, key)?,
    }
    Ok(())
}

/// A year read by `YYY`, `YY` or `Y` (or their ISO forms) with fewer than four digits, as
/// Postgres completes it (`adjust_partial_year_to_2020`: 0-69 → 20xx, 70-99 → 19xx,
/// 100-519 → 2xxx, 520-999 → 1xxx). `YYYY` takes the year as written.
fn partial_year(key: Key, v: i64, digits: usize) -> i64 {
    if matches!(key, Key::Yyyy | Key::Iyyy) || digits >= 4 {
        return v;
    }
    match v {
        0..=69 => v + 2000,
        70..=99 => v + 1900,
        100..=519 => v + 2000,
        520..=999 => v + 1000,
        _ => v,
    }
}

fn out_of_range(what: String) -> FormatError {
    FormatError::new(
        DATETIME_FIELD_OVERFLOW,
        format!("date/time field value out of range: \"{what}\""),
    )
}

/// The date the fields name, as a Julian day number.
fn resolve_date(f: &Fields, input: &str) -> FormatResult<i64> {
    if let Some(j) = f.julian {
        return Ok(j);
    }
    let mut year = f.year;
    if year.is_none() {
        if let Some(cc) = f.cc {
            year = Some(if cc >= 0 {
                (cc - 1) * 100 + 1
            } else {
                cc * 100 + 1
            });
        }
    }
    if let Some(iy) = f
        .iso_year
        .or(if f.iso_week.is_some() || f.iso_yday.is_some() {
            year
        } else {
            None
        })
    {
        if f.iso_week.is_some() || f.iso_yday.is_some() {
            let j = match (f.iso_yday, f.iso_week) {
                (Some(d), _) => isoweek2j(iy, 1) + d - 1,
                (None, Some(w)) => isoweek2j(iy, w) + f.iso_wday.unwrap_or(1) - 1,
                (None, None) => unreachable!(),
            };
            return Ok(j);
        }
    }
    // No year at all is year 0 (1 BC), as in Postgres.
    let mut year = year.unwrap_or(0);
    if f.bc {
        if year <= 0 {
            return Err(out_of_range(input.to_string()));
        }
        year = -(year - 1);
    }
    if f.month.is_none() && f.day.is_none() {
        if let Some(d) = f.yday {
            let days_in_year = date2j(year + 1, 1, 1) - date2j(year, 1, 1);
            if !(1..=days_in_year).contains(&d) {
                return Err(out_of_range(input.to_string()));
            }
            return Ok(date2j(year, 1, 1) + d - 1);
        }
        if let Some(w) = f.ww {
            return Ok(date2j(year, 1, 1) + (w - 1) * 7);
        }
    }
    let month = f.month.unwrap_or(1);
    let day = f.day.unwrap_or(1);
    if !(1..=12).contains(&month) {
        return Err(out_of_range(input.to_string()));
    }
    let j = date2j(year, month, day);
    if day < 1 || j2date(j) != (year, month, day) {
        return Err(out_of_range(input.to_string()));
    }
    Ok(j)
}

/// Microseconds since midnight the fields name.
fn resolve_time(f: &Fields) -> FormatResult<i64> {
    let mut hour = f.hour.unwrap_or(0);
    if f.clock12 || f.pm.is_some() {
        if f.clock12 && !(1..=12).contains(&hour) {
            return Err(FormatError::new(
                INVALID_DATETIME_FORMAT,
                format!("hour \"{hour}\" is invalid for the 12-hour clock"),
            ));
        }
        if f.pm == Some(true) && hour < 12 {
            hour += 12;
        } else if f.pm == Some(false) && hour == 12 {
            hour = 0;
        }
    }
    let (minute, second) = (f.minute.unwrap_or(0), f.second.unwrap_or(0));
    if !(0..=24).contains(&hour) || !(0..60).contains(&minute) || !(0..=60).contains(&second) {
        return Err(FormatError::new(
            DATETIME_FIELD_OVERFLOW,
            format!("date/time field value out of range: \"{hour:02}:{minute:02}:{second:02}\""),
        ));
    }
    let seconds = match f.sssss {
        Some(s) if (0..86_400).contains(&s) => s,
        Some(_) => {
            return Err(FormatError::new(
                DATETIME_FIELD_OVERFLOW,
                "value for \"SSSSS\" in source string is out of range",
            ))
        }
        None => hour * 3600 + minute * 60 + second,
    };
    Ok(seconds * 1_000_000 + f.micros.unwrap_or(0))
}

/// `to_timestamp(input, template)`: microseconds since 1970-01-01 00:00 UTC (the input
/// is read in UTC unless it carries `TZH` / `OF`).
pub fn parse_timestamp(input: &str, template: &Template) -> FormatResult<i64> {
    let f = read_fields(input, template)?;
    let j = resolve_date(&f, input)?;
    let time = resolve_time(&f)?;
    let offset = match (f.tz_hours, f.tz_minutes) {
        (None, None) => 0,
        (h, m) => {
            let secs = h.unwrap_or(0).abs() * 3600 + m.unwrap_or(0) * 60;
            if f.tz_negative || h.unwrap_or(0) < 0 {
                -secs
            } else {
                secs
            }
        }
    };
    (j - UNIX_EPOCH_J)
        .checked_mul(MICROS_PER_DAY)
        .and_then(|d| d.checked_add(time))
        .and_then(|t| t.checked_sub(offset * 1_000_000))
        .ok_or_else(|| FormatError::new(DATETIME_FIELD_OVERFLOW, "timestamp out of range"))
}

/// `to_date(input, template)`: days since 1970-01-01 (time fields are read and dropped).
pub fn parse_date(input: &str, template: &Template) -> FormatResult<i64> {
    let f = read_fields(input, template)?;
    Ok(resolve_date(&f, input)? - UNIX_EPOCH_J)
}

/// For tests: a template's keywords as Postgres names them.
#[cfg(test)]
fn describe(template: &Template) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    for n in &template.nodes {
        match n {
            Node::Field { key, .. } => {
                let _ = write!(s, "[{}]", key.name());
            }
            Node::Separator(c) | Node::Literal(c) => s.push(*c),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    //! Expected values are what Postgres 15 returns (session time zone UTC).
    use super::*;

    fn ts(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, us: i64) -> Moment {
        let days = date2j(y, mo, d) - UNIX_EPOCH_J;
        Moment::from_micros(
            days * MICROS_PER_DAY + ((h * 60 + mi) * 60 + s) * 1_000_000 + us,
            MomentKind::Timestamp,
        )
    }

    fn fmt(m: &Moment, t: &str) -> String {
        format(m, &Template::parse(t)).unwrap()
    }

    #[test]
    fn calendar_round_trips() {
        for j in [0, 1_721_426, 2_440_588, 2_460_375, 2_500_000] {
            let (y, m, d) = j2date(j);
            assert_eq!(date2j(y, m, d), j);
        }
        assert_eq!(date2j(1970, 1, 1), UNIX_EPOCH_J);
    }

    #[test]
    fn formats_timestamps_like_postgres() {
        let m = ts(2024, 3, 5, 14, 7, 9, 123_456);
        assert_eq!(
            fmt(&m, "YYYY-MM-DD HH24:MI:SS.US Day DY Mon MONTH FMMonth DDD D J Q WW IW AM a.m. TH"),
            "2024-03-05 14:07:09.123456 Tuesday   TUE Mar MARCH     March 065 3 2460375 1 10 10 PM p.m. TH"
        );
        assert_eq!(fmt(&m, "YYYY-MM-DD HH24:MI"), "2024-03-05 14:07");
        assert_eq!(
            fmt(&m, "HH12 HH FF1 FF3 MS SSSS CC Y,YYY YYY YY Y"),
            "02 02 1 123 123 50829 21 2,024 024 24 4"
        );
        assert_eq!(
            fmt(&m, "RM rm IDDD ID IYYY IYY IY I W"),
            "III  iii  065 2 2024 024 24 4 1"
        );
        assert_eq!(fmt(&m, "DDTH ddth FMDDth DDSP"), "05TH 05th 5th 05");
        assert_eq!(fmt(&m, "TZ|OF|TZH:TZM"), "|+00|+00:00");
        assert_eq!(fmt(&m, "TMMonth TMDay"), "March Tuesday");
        let tz = Moment {
            kind: MomentKind::TimestampTz,
            ..m
        };
        assert_eq!(fmt(&tz, "TZ tz OF"), "UTC utc +00");
        assert_eq!(
            fmt(
                &ts(2024, 1, 1, 0, 0, 0, 0),
                "HH12 AM D ID IW IYYY IDDD WW W"
            ),
            "12 AM 2 1 01 2024 001 01 1"
        );
        assert_eq!(
            fmt(
                &ts(2021, 1, 1, 0, 0, 0, 0),
                "IYYY-IW-ID DDTH MMth FMDDTH FMYYYY"
            ),
            "2020-53-5 01ST 01st 1ST 2021"
        );
        assert_eq!(
            fmt(&ts(2024, 3, 5, 0, 0, 0, 0), "FMHH12:MI AM DDth"),
            "12:00 AM 05th"
        );
        assert_eq!(fmt(&ts(2024, 3, 11, 0, 0, 0, 0), "DDth DDTH"), "11th 11TH");
        assert_eq!(fmt(&ts(2024, 3, 22, 0, 0, 0, 0), "FMDDth"), "22nd");
    }

    #[test]
    fn quoted_text_and_escapes_are_literal() {
        let m = ts(2024, 3, 5, 14, 7, 9, 0);
        assert_eq!(
            fmt(&m, "\"Year\" YYYY \"q\\\"Q\" \\\"D"),
            "Year 2024 q\"Q \"3"
        );
        // Letters that start no keyword are copied; Y is a keyword.
        assert_eq!(fmt(&m, "xkz XYZ"), "xkz X4Z");
    }

    #[test]
    fn formats_bc_years() {
        let m = ts(-43, 3, 15, 0, 0, 0, 0);
        assert_eq!(
            fmt(&m, "YYYY YYY Y,YYY CC BC b.c. AD J IYYY IW"),
            "0044 044 0,044 -01 BC b.c. BC 1705428 0044 11"
        );
    }

    #[test]
    fn formats_intervals_like_postgres() {
        // interval '1 year 14 months 40 days 27:07:09.5'
        let m = Moment::from_interval(26, 40, (27 * 3600 + 7 * 60 + 9) * 1_000_000 + 500_000);
        assert_eq!(
            fmt(
                &m,
                "CC DDD DD HH24 HH12 IDDD IW IYYY J MM MS Q RM SSSS WW W Y,YYY YYYY AM"
            ),
            "00 820 40 27 03 072 11 0002 1721861 02 500 1 II   97629 118 6 0,002 0002 AM"
        );
        let neg = Moment::from_interval(0, 0, -(3 * 3600 + 5 * 60) * 1_000_000);
        assert_eq!(fmt(&neg, "HH24:MI:SS HH12 AM"), "-03:-05:00 -03 AM");
        let neg = Moment::from_interval(-14, -3, 0);
        assert_eq!(fmt(&neg, "YYYY MM DD DDD CC"), "-0001 -02 -3 -423 00");
        for t in ["Day", "DY", "D", "Month", "Mon", "TZ", "OF", "AD", "ID"] {
            let e = format(&m, &Template::parse(t)).unwrap_err();
            assert_eq!(e.code, INVALID_DATETIME_FORMAT, "{t}");
        }
    }

    fn parse_ts(input: &str, t: &str) -> FormatResult<Moment> {
        parse_timestamp(input, &Template::parse(t))
            .map(|us| Moment::from_micros(us, MomentKind::TimestampTz))
    }

    fn iso(m: &Moment) -> String {
        fmt(m, "YYYY-MM-DD HH24:MI:SS.US")
    }

    #[test]
    fn parses_timestamps_like_postgres() {
        let cases = [
            (
                "2024-03-05 14:07:09",
                "YYYY-MM-DD HH24:MI:SS",
                "2024-03-05 14:07:09.000000",
            ),
            ("20240305", "YYYYMMDD", "2024-03-05 00:00:00.000000"),
            ("05 Mar 2024", "DD Mon YYYY", "2024-03-05 00:00:00.000000"),
            (
                "5 march 2024 2:07 pm",
                "DD Month YYYY HH:MI AM",
                "2024-03-05 14:07:00.000000",
            ),
            ("12:30 AM", "HH12:MI AM", "0001-01-01 00:30:00.000000 BC"),
            (
                "2024-03-05 14:07:09.5",
                "YYYY-MM-DD HH24:MI:SS.MS",
                "2024-03-05 14:07:09.500000",
            ),
            (
                "2024-03-05 14:07:09.123456",
                "YYYY-MM-DD HH24:MI:SS.US",
                "2024-03-05 14:07:09.123456",
            ),
            ("24-3-5", "YY-MM-DD", "2024-03-05 00:00:00.000000"),
            ("99-3-5", "YY-MM-DD", "1999-03-05 00:00:00.000000"),
            ("2024 065", "YYYY DDD", "2024-03-05 00:00:00.000000"),
            ("2460375", "J", "2024-03-05 00:00:00.000000"),
            (
                "2024-03-05 14:00 +02",
                "YYYY-MM-DD HH24:MI TZH",
                "2024-03-05 12:00:00.000000",
            ),
            ("2020-53-5", "IYYY-IW-ID", "2021-01-01 00:00:00.000000"),
            ("2024", "YYYY-MM-DD", "2024-01-01 00:00:00.000000"),
            ("  2024-03-05", "YYYY-MM-DD", "2024-03-05 00:00:00.000000"),
            ("2024/03/05", "YYYY-MM-DD", "2024-03-05 00:00:00.000000"),
            (
                "Tuesday 2024-03-05",
                "Day YYYY-MM-DD",
                "2024-03-05 00:00:00.000000",
            ),
            (
                "5th March 2024",
                "DDth Month YYYY",
                "2024-03-05 00:00:00.000000",
            ),
            ("44 BC", "YYYY BC", "0044-01-01 00:00:00.000000 BC"),
        ];
        for (input, t, want) in cases {
            let got = parse_ts(input, t).unwrap_or_else(|e| panic!("{input} / {t}: {e:?}"));
            let shown = iso(&got) + if got.year <= 0 { " BC" } else { "" };
            assert_eq!(shown, want, "{input} / {t}");
        }
    }

    #[test]
    fn rejects_bad_input_with_postgres_codes() {
        let cases = [
            ("2024-13-05", "YYYY-MM-DD", DATETIME_FIELD_OVERFLOW),
            ("2024-02-30", "YYYY-MM-DD", DATETIME_FIELD_OVERFLOW),
            ("13:00 PM", "HH12:MI PM", INVALID_DATETIME_FORMAT),
            ("2024-03-05 -05:30", "YYYY-MM-DD OF", FEATURE_NOT_SUPPORTED),
            ("25:00", "HH24:MI", DATETIME_FIELD_OVERFLOW),
            ("abcd-03-05", "YYYY-MM-DD", INVALID_DATETIME_FORMAT),
            ("2024 Foo", "YYYY Mon", INVALID_DATETIME_FORMAT),
            ("2024-03-05 UTC", "YYYY-MM-DD TZ", FEATURE_NOT_SUPPORTED),
            ("2024", "FXYYYY", FEATURE_NOT_SUPPORTED),
            ("202", "YYYYMM", INVALID_DATETIME_FORMAT),
            (
                "2024-03-05 2024-04-05",
                "YYYY-MM-DD YYYY-MM-DD",
                INVALID_DATETIME_FORMAT,
            ),
        ];
        for (input, t, code) in cases {
            let e = parse_ts(input, t).unwrap_err();
            assert_eq!(e.code, code, "{input} / {t}: {e:?}");
        }
    }

    #[test]
    fn dates_ignore_time_fields() {
        let t = Template::parse("YYYY-MM-DD HH24:MI");
        assert_eq!(parse_date("2024-03-05 14:07", &t).unwrap(), 19787);
        assert_eq!(describe(&t), "[YYYY]-[MM]-[DD] [HH24]:[MI]");
    }
}
