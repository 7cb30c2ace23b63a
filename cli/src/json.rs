//! `--json` documents: every one is a JSON object whose first key is
//! `"schema"` ([`JSON_SCHEMA`]), and a failed command prints the error
//! object ([`ErrorDocument`]) instead. docs/cli-json.md lists every field.

use anyhow::Context as _;
use serde::Serialize;

use crate::print_stdout;

/// The layout version of every `--json` document of both programs. It
/// grows when a field is removed or renamed or changes its type or
/// meaning; new fields do not change it (readers ignore what they do not
/// know). docs/cli-json.md describes this version.
pub const JSON_SCHEMA: u32 = 1;

/// A document: `schema`, then the fields of `body` (a struct, map or
/// internally tagged enum: anything serde flattens into an object).
#[derive(Serialize)]
struct Document<'a, T: ?Sized> {
    schema: u32,
    #[serde(flatten)]
    body: &'a T,
}

/// `value` as a `--json` document: `{"schema": N, ...its fields}`, pretty,
/// with a final newline. A value that is not an object (a list, a string)
/// is an error: a document always has room for new fields.
pub fn json_document<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<String> {
    let doc = Document {
        schema: JSON_SCHEMA,
        body: value,
    };
    let text = serde_json::to_string_pretty(&doc).context("writing the JSON document")?;
    Ok(text + "\n")
}

/// Prints [`json_document`] on stdout ([`print_stdout`]).
pub fn print_json_document<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    print_stdout(&json_document(value)?)
}

/// What `--json` prints when the command fails, on stdout, while the
/// error line goes to stderr as always: the error with its causes (one
/// line, as on stderr), the exit code the process ends with, and advice
/// when there is some (`null` otherwise).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorDocument {
    /// The error and its causes, `a: b: c`.
    pub error: String,
    /// The process's exit code (1 failure, 2 usage error, ...).
    pub exit_code: u8,
    /// What to do about it, or `None`.
    pub hint: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Report {
        input: &'static str,
        count: u32,
    }

    #[derive(Serialize)]
    #[serde(tag = "kind", rename_all = "lowercase")]
    enum Tagged {
        Archive { size: u64 },
    }

    #[test]
    fn schema_comes_first_then_the_fields_in_order() {
        let text = json_document(&Report {
            input: "a",
            count: 2,
        })
        .expect("document");
        assert_eq!(
            text,
            "{\n  \"schema\": 1,\n  \"input\": \"a\",\n  \"count\": 2\n}\n"
        );
        let tagged = json_document(&Tagged::Archive { size: 3 }).expect("document");
        let v: serde_json::Value = serde_json::from_str(&tagged).expect("json");
        assert_eq!(
            v,
            serde_json::json!({"schema": 1, "kind": "archive", "size": 3})
        );
    }

    #[test]
    fn a_list_is_not_a_document() {
        assert!(json_document(&[1, 2]).is_err());
    }

    #[test]
    fn the_error_object_has_its_three_fields() {
        let text = json_document(&ErrorDocument {
            error: "x: no such file".into(),
            exit_code: 1,
            hint: None,
        })
        .expect("document");
        let v: serde_json::Value = serde_json::from_str(&text).expect("json");
        assert_eq!(
            v,
            serde_json::json!({"schema": 1, "error": "x: no such file", "exit_code": 1, "hint": null})
        );
    }
}
