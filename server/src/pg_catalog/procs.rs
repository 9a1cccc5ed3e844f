//! `pg_proc`, `pg_aggregate` and `pg_operator`: the functions, aggregates and
//! operators Weir evaluates the way Postgres does, with Postgres's signatures.
//!
//! The lists are what tools that generate SQL from the catalog (sqlsmith) draw from,
//! so they hold only what Weir can plan over the types of `types.rs`.

/// One function: name, argument type oids, result type oid, `prokind` (`f` function,
/// `a` aggregate).
pub struct Proc {
    pub name: &'static str,
    pub args: &'static [u32],
    pub result: u32,
    pub kind: &'static str,
}

const fn f(name: &'static str, args: &'static [u32], result: u32) -> Proc {
    Proc {
        name,
        args,
        result,
        kind: "f",
    }
}

const fn agg(name: &'static str, args: &'static [u32], result: u32) -> Proc {
    Proc {
        name,
        args,
        result,
        kind: "a",
    }
}

const BOOL: u32 = 16;
const INT8: u32 = 20;
const INT2: u32 = 21;
const INT4: u32 = 23;
const TEXT: u32 = 25;
const FLOAT4: u32 = 700;
const FLOAT8: u32 = 701;
const DATE: u32 = 1082;
const TIMESTAMP: u32 = 1114;
const TIMESTAMPTZ: u32 = 1184;
const NUMERIC: u32 = 1700;
const ANY: u32 = 2276;

/// First oid of the listed functions (Postgres's own are below 16384 too; these are
/// numbered in a range of their own).
pub const PROC_OID_BASE: u32 = 9000;
pub const OPERATOR_OID_BASE: u32 = 7000;

pub static PROCS: &[Proc] = &[
    f("abs", &[INT4], INT4),
    f("abs", &[INT8], INT8),
    f("abs", &[FLOAT8], FLOAT8),
    f("abs", &[NUMERIC], NUMERIC),
    f("ceil", &[FLOAT8], FLOAT8),
    f("floor", &[FLOAT8], FLOAT8),
    f("round", &[FLOAT8], FLOAT8),
    f("trunc", &[FLOAT8], FLOAT8),
    f("sqrt", &[FLOAT8], FLOAT8),
    f("exp", &[FLOAT8], FLOAT8),
    f("ln", &[FLOAT8], FLOAT8),
    f("power", &[FLOAT8, FLOAT8], FLOAT8),
    f("sign", &[FLOAT8], FLOAT8),
    f("lower", &[TEXT], TEXT),
    f("upper", &[TEXT], TEXT),
    f("length", &[TEXT], INT4),
    f("octet_length", &[TEXT], INT4),
    f("btrim", &[TEXT], TEXT),
    f("ltrim", &[TEXT], TEXT),
    f("rtrim", &[TEXT], TEXT),
    f("replace", &[TEXT, TEXT, TEXT], TEXT),
    f("substr", &[TEXT, INT4, INT4], TEXT),
    f("strpos", &[TEXT, TEXT], INT4),
    f("left", &[TEXT, INT4], TEXT),
    f("right", &[TEXT, INT4], TEXT),
    f("reverse", &[TEXT], TEXT),
    f("repeat", &[TEXT, INT4], TEXT),
    f("md5", &[TEXT], TEXT),
    f("initcap", &[TEXT], TEXT),
    f("split_part", &[TEXT, TEXT, INT4], TEXT),
    f("starts_with", &[TEXT, TEXT], BOOL),
    f("ascii", &[TEXT], INT4),
    f("chr", &[INT4], TEXT),
    f("lpad", &[TEXT, INT4, TEXT], TEXT),
    f("rpad", &[TEXT, INT4, TEXT], TEXT),
    f("translate", &[TEXT, TEXT, TEXT], TEXT),
    f("now", &[], TIMESTAMPTZ),
    f("date_trunc", &[TEXT, TIMESTAMP], TIMESTAMP),
    f("version", &[], TEXT),
    f("current_database", &[], 19),
    f("format_type", &[26, INT4], TEXT),
    f("quote_ident", &[TEXT], TEXT),
    agg("count", &[ANY], INT8),
    agg("count", &[], INT8),
    agg("sum", &[INT4], INT8),
    agg("sum", &[INT8], NUMERIC),
    agg("sum", &[FLOAT8], FLOAT8),
    agg("sum", &[NUMERIC], NUMERIC),
    agg("avg", &[INT4], NUMERIC),
    agg("avg", &[FLOAT8], FLOAT8),
    agg("avg", &[NUMERIC], NUMERIC),
    agg("min", &[INT4], INT4),
    agg("min", &[INT8], INT8),
    agg("min", &[FLOAT8], FLOAT8),
    agg("min", &[NUMERIC], NUMERIC),
    agg("min", &[TEXT], TEXT),
    agg("min", &[DATE], DATE),
    agg("min", &[TIMESTAMP], TIMESTAMP),
    agg("max", &[INT4], INT4),
    agg("max", &[INT8], INT8),
    agg("max", &[FLOAT8], FLOAT8),
    agg("max", &[NUMERIC], NUMERIC),
    agg("max", &[TEXT], TEXT),
    agg("max", &[DATE], DATE),
    agg("max", &[TIMESTAMP], TIMESTAMP),
    agg("bool_and", &[BOOL], BOOL),
    agg("bool_or", &[BOOL], BOOL),
    agg("string_agg", &[TEXT, TEXT], TEXT),
    agg("stddev", &[FLOAT8], FLOAT8),
    agg("variance", &[FLOAT8], FLOAT8),
];

/// One binary operator: name, left and right type oids, result type oid.
pub struct Operator {
    pub name: &'static str,
    pub left: u32,
    pub right: u32,
    pub result: u32,
}

/// Arithmetic on each numeric type, comparisons on every ordered type, `||` and
/// regular expressions on text.
pub fn operators() -> Vec<Operator> {
    let mut ops = Vec::new();
    for t in [INT2, INT4, INT8, FLOAT4, FLOAT8, NUMERIC] {
        for name in ["+", "-", "*", "/"] {
            ops.push(Operator {
                name,
                left: t,
                right: t,
                result: t,
            });
        }
    }
    for t in [
        BOOL,
        INT2,
        INT4,
        INT8,
        FLOAT4,
        FLOAT8,
        NUMERIC,
        TEXT,
        DATE,
        TIMESTAMP,
        TIMESTAMPTZ,
    ] {
        for name in ["=", "<>", "<", ">", "<=", ">="] {
            ops.push(Operator {
                name,
                left: t,
                right: t,
                result: BOOL,
            });
        }
    }
    ops.push(Operator {
        name: "||",
        left: TEXT,
        right: TEXT,
        result: TEXT,
    });
    for name in ["~", "!~", "~*", "!~*"] {
        ops.push(Operator {
            name,
            left: TEXT,
            right: TEXT,
            result: BOOL,
        });
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_signature_uses_listed_types() {
        for p in PROCS {
            for t in p.args.iter().chain([&p.result]) {
                assert!(super::super::types::by_oid(*t).is_some(), "{}", p.name);
            }
        }
        for o in operators() {
            for t in [o.left, o.right, o.result] {
                assert!(super::super::types::by_oid(t).is_some(), "{}", o.name);
            }
        }
    }
}
