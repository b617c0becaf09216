//! JSON objects that name a key twice.
//!
//! JSON parsers keep the last of two equal keys, so a program naming node
//! `A` twice (a front-end building JSON by concatenation, two nodes given
//! one name) was optimized without its first `A`, and answered as if
//! nothing were wrong. Requests and program files are read once more for
//! this, before they are parsed.

use serde::de::{Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use std::collections::HashSet;
use std::fmt;

/// A key written twice in one object: where (the keys leading to it, the
/// top-level `inputs` and `nodes` left out, as errors name a node or input
/// by its name alone) and the parser's words with the line and column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuplicateKey {
    /// The repeated key's path, e.g. `A` (a node) or `A.kernel`.
    pub at: String,
    /// What is wrong, with the line and column of the second occurrence.
    pub message: String,
}

/// The first key an object of `text` names twice, if any. Text that is not
/// JSON gives `None`: its parser says what is wrong.
pub fn find(text: &[u8]) -> Option<DuplicateKey> {
    let mut de = serde_json::Deserializer::from_slice(text);
    match de.deserialize_any(Walk { path: Vec::new() }) {
        Ok(()) => None,
        Err(e) => {
            let message = e.to_string();
            let at = message.strip_prefix(MARK)?.split('\u{0}').next()?.to_string();
            let said = message.split('\u{0}').nth(1)?.to_string();
            Some(DuplicateKey { at, message: said })
        }
    }
}

/// Starts the error text of a duplicate (any other error is not one).
const MARK: &str = "\u{1}duplicate:";

struct Walk {
    path: Vec<String>,
}

impl Walk {
    fn at(&self, key: &str) -> String {
        let mut parts: Vec<&str> = self.path.iter().map(String::as_str).collect();
        if matches!(parts.first(), Some(&"inputs") | Some(&"nodes")) {
            parts.remove(0);
        }
        parts.push(key);
        parts.join(".")
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for Walk {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen: HashSet<String> = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if seen.contains(&key) {
                let at = self.at(&key);
                return Err(A::Error::custom(format!(
                    "{MARK}{at}\u{0}the key `{}` is written twice in one object (JSON keeps only the last)",
                    crate::error::shown(&key)
                )));
            }
            let mut path = self.path.clone();
            path.push(key.clone());
            map.next_value_seed(Walk { path })?;
            seen.insert(key);
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Walk { path: self.path.clone() })?.is_some() {}
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_written_twice_is_found_with_its_path_and_position() {
        let text = br#"{"inputs": {"X": {"key_bounds": [1]}},
                        "nodes": {"A": {"op": "transform", "input": "X", "kernel": "relu"},
                                  "A": {"op": "transform", "input": "X", "kernel": "neg"}},
                        "outputs": ["A", "A"]}"#;
        let d = find(text).expect("A twice");
        assert_eq!(d.at, "A");
        assert!(d.message.contains("the key `A` is written twice") && d.message.contains("line 3"), "{}", d.message);
        let d = find(br#"{"nodes": {"A": {"op": "x", "op": "y"}}}"#).unwrap();
        assert_eq!(d.at, "A.op");
        let d = find(br#"{"cluster": {"sites": 2}, "cluster": {}}"#).unwrap();
        assert_eq!(d.at, "cluster");
        // Equal keys in different objects, repeated values and lists are fine.
        assert_eq!(find(br#"{"a": {"k": 1}, "b": {"k": [1, 1, {"k": 2}]}}"#), None);
        // Not JSON: the parser will say what is wrong.
        assert_eq!(find(b"{\"a\": "), None);
    }
}
