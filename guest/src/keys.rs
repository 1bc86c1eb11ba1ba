//! A module's `ipam` keys as written, checked against the type the module reads them
//! into: a key that is not one of its fields, nor one of the host's
//! ([`HOST_IPAM_KEYS`]), but is close to one of its fields (a letter off, or the same
//! but for case) is refused, naming that field, instead of being ignored, so
//! `"strat"` never silently leaves `start` at its default. Keys match exactly, case
//! included. A key close to none is left alone (another tool's, or a key of a newer
//! host), and logged.

use crate::Error;
use serde::de::{self, DeserializeOwned, Visitor};
use serde_json::Value;
use wasm_ipam_codes::HOST_IPAM_KEYS;

/// Refuses a key of `ipam` that looks like a misspelt field of `T`.
pub(crate) fn check<T: DeserializeOwned>(ipam: &Value) -> Result<(), Error> {
    let (Some(object), Some(fields)) = (ipam.as_object(), fields_of::<T>()) else {
        return Ok(());
    };
    for key in object.keys() {
        if fields.contains(&key.as_str()) || HOST_IPAM_KEYS.contains(&key.as_str()) {
            continue;
        }
        match closest(key, fields) {
            Some(field) => {
                return Err(Error::invalid_config(format!(
                    "ipam.{key} is not a key of this module: did you mean {field}? (keys match exactly, case included; its keys: {})",
                    fields.join(", ")
                )));
            }
            None => ignored(key, fields),
        }
    }
    Ok(())
}

#[cfg(target_arch = "wasm32")]
fn ignored(key: &str, fields: &[&str]) {
    crate::log::warn(&format!(
        "ipam.{key} is neither a key of this module ({}) nor the host's: ignored",
        fields.join(", ")
    ));
}

#[cfg(not(target_arch = "wasm32"))]
fn ignored(_key: &str, _fields: &[&str]) {}

/// The field of `fields` that `key` most likely means: equal but for case, or within
/// an edit or two (one for short names).
fn closest<'a>(key: &str, fields: &[&'a str]) -> Option<&'a str> {
    let key = key.to_lowercase();
    fields
        .iter()
        .map(|field| (distance(&key, &field.to_lowercase()), *field))
        .filter(|(d, field)| *d <= if field.len() <= 4 { 1 } else { 2 })
        .min_by_key(|(d, _)| *d)
        .map(|(_, field)| field)
}

/// Levenshtein distance, by characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// The field names `T` deserializes (renames applied), if it is a struct: serde's
/// derive hands them to `deserialize_struct`, which this deserializer records and
/// then refuses.
pub fn fields_of<T: DeserializeOwned>() -> Option<&'static [&'static str]> {
    let mut recorder = FieldNames(None);
    let _ = T::deserialize(&mut recorder);
    recorder.0
}

struct FieldNames(Option<&'static [&'static str]>);

#[derive(Debug)]
struct Recorded;

impl std::fmt::Display for Recorded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("field names recorded")
    }
}

impl std::error::Error for Recorded {}

impl de::Error for Recorded {
    fn custom<M: std::fmt::Display>(_: M) -> Self {
        Recorded
    }
}

impl<'de> de::Deserializer<'de> for &mut FieldNames {
    type Error = Recorded;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Recorded> {
        self.0 = Some(fields);
        Err(Recorded)
    }

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Recorded> {
        Err(Recorded)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
        identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(serde::Deserialize, Debug)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Range {
        start: String,
        prefix_len: u8,
        #[serde(default)]
        gateway: Option<String>,
    }

    #[test]
    fn a_misspelt_or_miscased_key_is_refused_naming_the_field() {
        for (key, field) in [
            ("strat", "start"),
            ("PrefixLen", "prefixLen"),
            ("prefixlen", "prefixLen"),
            ("gatway", "gateway"),
        ] {
            let ipam = json!({"start": "a", "prefixLen": 24, key: 1});
            let err = check::<Range>(&ipam).unwrap_err();
            assert!(
                err.msg.starts_with(&format!(
                    "ipam.{key} is not a key of this module: did you mean {field}?"
                )),
                "{}",
                err.msg
            );
            assert_eq!(err.code, wasm_ipam_codes::INVALID_NETWORK_CONFIG);
        }
    }

    #[test]
    fn the_hosts_keys_and_keys_close_to_none_pass() {
        let ipam = json!({"start": "a", "prefixLen": 24, "type": "wasm-ipam", "module": "/m.wasm",
                          "deadlineSeconds": 5, "store": {}, "somethingElse": true});
        assert!(check::<Range>(&ipam).is_ok());
        assert_eq!(
            fields_of::<Range>(),
            Some(&["start", "prefixLen", "gateway"][..])
        );
        assert_eq!(
            fields_of::<serde_json::Value>(),
            None,
            "not a struct: not checked"
        );
    }
}
