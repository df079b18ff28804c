//! Whole JSON documents whose top level is an object (train subsets, AdvGLUE `dev.json`): the
//! members in file order, and the line where each nested value starts, for row errors.

use std::fmt;
use std::path::Path;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

use super::DataError;

/// A JSON object's members in file order. serde_json's `Map` sorts its keys (no
/// `preserve_order` feature here), which would lose the order `"0","1",...,"10"` and with it
/// the link to line numbers.
struct OrderedObject(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for OrderedObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = OrderedObject;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OrderedObject, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, Value>()? {
                    members.push(member);
                }
                Ok(OrderedObject(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor)
    }
}

/// Parses a whole JSON document whose top level is an object, members in file order.
pub(super) fn parse_document(path: &Path, bytes: &[u8]) -> Result<Vec<(String, Value)>, DataError> {
    serde_json::from_slice::<OrderedObject>(bytes).map(|o| o.0).map_err(|e| DataError::Json {
        path: path.to_path_buf(),
        line: e.line().max(1),
        message: e.to_string(),
    })
}

/// 1-based line where each value nested `depth` containers deep starts, in document order
/// (depth 1: the top-level object's member values). serde_json reports no positions for
/// values, so this small scan of an already-validated document gives row errors a line.
pub(super) fn value_lines(bytes: &[u8], depth: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut stack: Vec<u8> = Vec::new();
    let (mut in_string, mut escaped, mut expect_value) = (false, false, true);
    for &b in bytes {
        if b == b'\n' {
            line += 1;
        }
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        if b.is_ascii_whitespace() {
            continue;
        }
        if expect_value && b != b']' && b != b'}' {
            if stack.len() == depth {
                out.push(line);
            }
            expect_value = false;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                stack.push(b);
                // An array holds values next; an object holds a key first.
                expect_value = b == b'[';
            }
            b'}' | b']' => {
                stack.pop();
                expect_value = false;
            }
            b',' => expect_value = stack.last() == Some(&b'['),
            b':' => expect_value = true,
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_lines_follow_nesting_and_skip_string_contents() {
        let doc = b"{\"a\": [1,\n {\"x\": \"}],{\"}, \n[]], \"b\": \n\n[ ]}";
        assert_eq!(value_lines(doc, 0), [1]);
        assert_eq!(value_lines(doc, 1), [1, 5]);
        assert_eq!(value_lines(doc, 2), [1, 2, 3]);
    }
}
