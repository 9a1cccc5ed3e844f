//! A connector's `WITH (...)` options, taken key by key by the connector that owns
//! them (sources in `source/`, sinks in `sinks/`): whatever is left once the connector
//! has taken its keys is an option nobody knows, and an error, never silently ignored.

use crate::error::{ExecError, Result};
use std::collections::BTreeMap;

/// Options as lower-case keys and text values.
#[derive(Debug, Clone, Default)]
pub struct ConnectorOptions {
    map: BTreeMap<String, String>,
}

impl ConnectorOptions {
    pub fn new(pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        Self {
            map: pairs
                .into_iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v))
                .collect(),
        }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.map.get(key).map(String::as_str)
    }

    pub fn take(&mut self, key: &str) -> Option<String> {
        self.map.remove(key)
    }

    /// The first of `keys` given (a name and its aliases); the others are taken too.
    pub fn take_any(&mut self, keys: &[&str]) -> Option<String> {
        keys.iter()
            .filter_map(|k| self.map.remove(*k))
            .reduce(|first, _| first)
    }

    /// `key`, which the connector cannot do without (`what` names the connector).
    pub fn require(&mut self, key: &str, what: &str, example: &str) -> Result<String> {
        self.take(key)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| invalid(format!("the {what} needs {key} = '{example}'")))
    }

    /// A finite number, or an error naming the key.
    pub fn take_number(&mut self, key: &str) -> Result<Option<f64>> {
        self.take(key)
            .map(|v| {
                v.parse::<f64>()
                    .ok()
                    .filter(|n| n.is_finite())
                    .ok_or_else(|| invalid(format!("invalid {key}: {v}")))
            })
            .transpose()
    }

    /// `true` or `false` (any case), or an error naming the key.
    pub fn take_bool(&mut self, key: &str) -> Result<Option<bool>> {
        self.take(key)
            .map(|v| match v.to_ascii_lowercase().as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(invalid(format!("{key} must be true or false, not {v}"))),
            })
            .transpose()
    }

    /// Every `<prefix><rest>` option, as `(rest, value)`.
    pub fn take_prefixed(&mut self, prefix: &str) -> Vec<(String, String)> {
        let keys: Vec<String> = self
            .map
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect();
        keys.into_iter()
            .filter_map(|k| {
                let v = self.map.remove(&k)?;
                Some((k[prefix.len()..].to_string(), v))
            })
            .collect()
    }

    /// The first key no one took.
    pub fn first_unknown(&self) -> Option<&str> {
        self.map.keys().next().map(String::as_str)
    }

    /// Ends the parse: an option left over is unknown to `what`.
    pub fn finish(self, what: &str) -> Result<()> {
        match self.first_unknown() {
            Some(k) => Err(invalid(format!("unknown {what} option \"{k}\""))),
            None => Ok(()),
        }
    }
}

/// The parser registered under `name` (any case) in a connector registry; 0A000
/// listing the registered names otherwise. `what` says which registry ("sink ").
pub(crate) fn registered<P: Copy>(registry: &[(&str, P)], name: &str, what: &str) -> Result<P> {
    registry
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, p)| *p)
        .ok_or_else(|| {
            let known: Vec<&str> = registry.iter().map(|(n, _)| *n).collect();
            ExecError::Unsupported(format!(
                "{what}connector '{name}' is not supported yet (supported: {})",
                known.join(", ")
            ))
        })
}

pub(crate) fn invalid(msg: impl Into<String>) -> ExecError {
    ExecError::InvalidParameter(msg.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_taken_once_and_leftovers_are_errors() {
        let mut o = ConnectorOptions::new([
            ("Topic".to_string(), "t".to_string()),
            ("properties.a".into(), "1".into()),
            ("rate".into(), "x".into()),
        ]);
        assert_eq!(o.take("topic").as_deref(), Some("t"));
        assert!(o.take("topic").is_none());
        assert!(o.take_number("rate").is_err());
        assert_eq!(
            o.take_prefixed("properties."),
            vec![("a".into(), "1".into())]
        );
        assert!(o.clone().finish("x").is_ok());
        o.map.insert("bogus".into(), "1".into());
        let e = o.finish("kafka connector").unwrap_err().to_string();
        assert_eq!(e, "unknown kafka connector option \"bogus\"");
    }
}
