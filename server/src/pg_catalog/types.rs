//! The Postgres types Weir has, as `pg_type` lists them: their oids, names, array
//! types and the names `format_type` and `::regtype::text` print.
//!
//! Only types Weir can store or compute are listed (plus the pseudo-types that
//! function signatures and tools refer to: `internal`, `anyarray`, ...), so a tool
//! that builds queries from this list builds queries Weir can plan.

use arrow::datatypes::DataType;

/// One row of `pg_type`.
pub struct PgType {
    pub oid: u32,
    /// `typname`: `int4`, `_int4`, ...
    pub name: &'static str,
    /// What `format_type` prints: `integer`, `integer[]`, ...
    pub sql_name: &'static str,
    pub len: i16,
    /// `typtype`: `b` base, `p` pseudo.
    pub kind: &'static str,
    /// `typcategory`: `N` numeric, `S` string, `A` array, ...
    pub category: &'static str,
    /// The element type of an array type (0 otherwise).
    pub element: u32,
    /// The array type of this type (0 when there is none).
    pub array: u32,
}

const fn base(
    oid: u32,
    name: &'static str,
    sql_name: &'static str,
    len: i16,
    category: &'static str,
    array: u32,
) -> PgType {
    PgType {
        oid,
        name,
        sql_name,
        len,
        kind: "b",
        category,
        element: 0,
        array,
    }
}

const fn array(oid: u32, name: &'static str, sql_name: &'static str, element: u32) -> PgType {
    PgType {
        oid,
        name,
        sql_name,
        len: -1,
        kind: "b",
        category: "A",
        element,
        array: 0,
    }
}

const fn pseudo(oid: u32, name: &'static str, array: u32) -> PgType {
    PgType {
        oid,
        name,
        sql_name: name,
        len: 4,
        kind: "p",
        category: "P",
        element: 0,
        array,
    }
}

/// Every type in `pg_type`, by oid (Postgres's own oids).
pub static TYPES: &[PgType] = &[
    base(16, "bool", "boolean", 1, "B", 1000),
    base(17, "bytea", "bytea", -1, "U", 1001),
    base(18, "char", "\"char\"", 1, "Z", 1002),
    base(19, "name", "name", 64, "S", 1003),
    base(20, "int8", "bigint", 8, "N", 1016),
    base(21, "int2", "smallint", 2, "N", 1005),
    base(22, "int2vector", "int2vector", -1, "A", 1006),
    base(23, "int4", "integer", 4, "N", 1007),
    base(24, "regproc", "regproc", 4, "N", 1008),
    base(25, "text", "text", -1, "S", 1009),
    base(26, "oid", "oid", 4, "N", 1028),
    base(30, "oidvector", "oidvector", -1, "A", 1013),
    base(700, "float4", "real", 4, "N", 1021),
    base(701, "float8", "double precision", 8, "N", 1022),
    base(1042, "bpchar", "character", -1, "S", 1014),
    base(1043, "varchar", "character varying", -1, "S", 1015),
    base(1082, "date", "date", 4, "D", 1182),
    base(
        1114,
        "timestamp",
        "timestamp without time zone",
        8,
        "D",
        1115,
    ),
    base(
        1184,
        "timestamptz",
        "timestamp with time zone",
        8,
        "D",
        1185,
    ),
    base(1186, "interval", "interval", 16, "T", 1187),
    base(1700, "numeric", "numeric", -1, "N", 1231),
    base(2205, "regclass", "regclass", 4, "N", 2210),
    base(2206, "regtype", "regtype", 4, "N", 2211),
    array(1000, "_bool", "boolean[]", 16),
    array(1001, "_bytea", "bytea[]", 17),
    array(1002, "_char", "\"char\"[]", 18),
    array(1003, "_name", "name[]", 19),
    array(1005, "_int2", "smallint[]", 21),
    array(1006, "_int2vector", "int2vector[]", 22),
    array(1007, "_int4", "integer[]", 23),
    array(1008, "_regproc", "regproc[]", 24),
    array(1009, "_text", "text[]", 25),
    array(1013, "_oidvector", "oidvector[]", 30),
    array(1014, "_bpchar", "character[]", 1042),
    array(1015, "_varchar", "character varying[]", 1043),
    array(1016, "_int8", "bigint[]", 20),
    array(1021, "_float4", "real[]", 700),
    array(1022, "_float8", "double precision[]", 701),
    array(1028, "_oid", "oid[]", 26),
    array(1115, "_timestamp", "timestamp without time zone[]", 1114),
    array(1182, "_date", "date[]", 1082),
    array(1185, "_timestamptz", "timestamp with time zone[]", 1184),
    array(1187, "_interval", "interval[]", 1186),
    array(1231, "_numeric", "numeric[]", 1700),
    array(2210, "_regclass", "regclass[]", 2205),
    array(2211, "_regtype", "regtype[]", 2206),
    pseudo(705, "unknown", 0),
    pseudo(2249, "record", 2287),
    array(2287, "_record", "record[]", 2249),
    pseudo(2275, "cstring", 1263),
    array(1263, "_cstring", "cstring[]", 2275),
    pseudo(2276, "any", 0),
    pseudo(2277, "anyarray", 0),
    pseudo(2278, "void", 0),
    pseudo(2281, "internal", 0),
    pseudo(2283, "anyelement", 0),
    pseudo(2776, "anynonarray", 0),
];

pub fn by_oid(oid: u32) -> Option<&'static PgType> {
    TYPES.iter().find(|t| t.oid == oid)
}

/// The type a name denotes, as `'name'::regtype` reads it: `typname` (`int4`) or the
/// SQL spelling (`integer`, `character varying`), optionally `pg_catalog.`-qualified,
/// with `[]` for arrays and any `(typmod)` ignored.
pub fn by_name(name: &str) -> Option<&'static PgType> {
    let name = name.trim().to_ascii_lowercase();
    let name = name.strip_prefix("pg_catalog.").unwrap_or(&name);
    let name = name.trim_matches('"');
    let (name, is_array) = match name.strip_suffix("[]") {
        Some(n) => (n.trim(), true),
        None => (name, false),
    };
    // Typmods (`varchar(10)`, `numeric(8,2)`, `timestamp(3) with time zone`) do not
    // change the type.
    let name = match (name.find('('), name.find(')')) {
        (Some(i), Some(j)) if j > i => format!("{}{}", &name[..i], &name[j + 1..]),
        _ => name.to_string(),
    };
    let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
    let alias = match name.as_str() {
        "int" | "integer" => "int4",
        "smallint" => "int2",
        "bigint" => "int8",
        "real" => "float4",
        "double precision" | "float" => "float8",
        "boolean" => "bool",
        "decimal" => "numeric",
        "character varying" => "varchar",
        "character" | "char" => "bpchar",
        "\"char\"" => "char",
        "timestamp without time zone" => "timestamp",
        "timestamp with time zone" => "timestamptz",
        "string" => "text",
        other => other,
    };
    let t = TYPES.iter().find(|t| t.name == alias)?;
    if is_array {
        by_oid(t.array)
    } else {
        Some(t)
    }
}

/// `format_type(oid, typmod)`: the SQL name, with `numeric(p,s)` and `varchar(n)`
/// typmods spelled out; `???` for an oid Weir does not know (as Postgres prints it).
pub fn format_type(oid: u32, typmod: Option<i32>) -> String {
    let Some(t) = by_oid(oid) else {
        return "???".to_string();
    };
    match (oid, typmod) {
        // numeric's typmod is ((precision << 16) | scale) + 4.
        (1700, Some(m)) if m >= 4 => format!("numeric({},{})", (m - 4) >> 16, (m - 4) & 0xffff),
        // character types' typmod is the length + 4.
        (1043 | 1042, Some(m)) if m >= 4 => format!("{}({})", t.sql_name, m - 4),
        _ => t.sql_name.to_string(),
    }
}

/// Postgres type oid of an Arrow type (what the wire protocol reports).
pub fn type_oid(t: &DataType) -> u32 {
    crate::pg::encode::pg_type(t).oid()
}

/// `atttypmod` of an Arrow type: numeric's precision and scale, else -1.
pub fn typmod(t: &DataType) -> i32 {
    match t {
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => {
            (((*p as i32) << 16) | (*s as i32)) + 4
        }
        _ => -1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_like_regtype() {
        assert_eq!(by_name("integer").map(|t| t.oid), Some(23));
        assert_eq!(by_name("int4").map(|t| t.oid), Some(23));
        assert_eq!(by_name("pg_catalog.numeric").map(|t| t.oid), Some(1700));
        assert_eq!(by_name("numeric(8,2)").map(|t| t.oid), Some(1700));
        assert_eq!(by_name("text[]").map(|t| t.oid), Some(1009));
        assert_eq!(by_name("character varying").map(|t| t.oid), Some(1043));
        assert_eq!(by_name("no_such_type").map(|t| t.oid), None);
    }

    #[test]
    fn format_type_prints_typmods() {
        assert_eq!(format_type(1700, Some((8 << 16 | 2) + 4)), "numeric(8,2)");
        assert_eq!(format_type(1043, Some(14)), "character varying(10)");
        assert_eq!(format_type(23, Some(-1)), "integer");
        assert_eq!(format_type(1007, None), "integer[]");
        assert_eq!(format_type(424242, None), "???");
    }

    #[test]
    fn every_array_points_back_to_its_element() {
        for t in TYPES.iter().filter(|t| t.array != 0) {
            let a = by_oid(t.array).expect("array type listed");
            assert_eq!(a.element, t.oid, "{}", t.name);
        }
    }
}
