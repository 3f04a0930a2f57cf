//! The one bounded id: what an invocation, approval, correlation or capability id, a
//! contract digest or a scope entry may be wherever it crosses a trust boundary (the
//! journal, the gateway's wire bodies, MCP arguments, the approvals API). One type and one
//! rule instead of a constant and a check per door, so the doors cannot drift apart.
//!
//! ```
//! use capgate_core::id::{BoundedId, IdError};
//!
//! let id: BoundedId = "call_1".parse()?;
//! assert_eq!(id, "call_1");
//! assert_eq!(BoundedId::new("x".repeat(257)), Err(IdError::TooLong));
//! assert_eq!(BoundedId::check("a\nb"), Err(IdError::ControlCharacter));
//! // On the wire it is a plain string, refused while it is parsed.
//! assert!(serde_json::from_str::<BoundedId>("\"\"").is_err());
//! # Ok::<(), IdError>(())
//! ```

use serde::{Deserialize, Serialize};

/// A string that is non-empty, at most [`BoundedId::MAX_CHARS`] characters and free of
/// control characters. It can only be built through [`BoundedId::new`] (or parsing, or
/// deserializing, which call it), so holding one is proof that it was checked.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct BoundedId(String);

/// Why a string is not a [`BoundedId`]. Its message reads after the field's name:
/// "`invocationId` is longer than 256 characters".
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdError {
    /// The string is empty.
    #[error("is empty")]
    Empty,
    /// More than [`BoundedId::MAX_CHARS`] characters.
    #[error("is longer than {} characters", BoundedId::MAX_CHARS)]
    TooLong,
    /// A control character (newline, NUL, escape…), which could forge log lines or
    /// headers wherever the id is echoed.
    #[error("contains control characters")]
    ControlCharacter,
}

impl BoundedId {
    /// The longest id, in characters (docs/gateway.md).
    pub const MAX_CHARS: usize = 256;

    /// Check `value` against the rule without taking it.
    pub fn check(value: &str) -> Result<(), IdError> {
        if value.is_empty() {
            Err(IdError::Empty)
        } else if value.chars().nth(Self::MAX_CHARS).is_some() {
            Err(IdError::TooLong)
        } else if value.chars().any(char::is_control) {
            Err(IdError::ControlCharacter)
        } else {
            Ok(())
        }
    }

    /// The id, if `value` keeps the rule.
    pub fn new(value: impl Into<String>) -> Result<Self, IdError> {
        let value = value.into();
        Self::check(&value)?;
        Ok(BoundedId(value))
    }
}

crate::wire::checked_string!(BoundedId, IdError);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bounds_are_one_to_256_characters_not_bytes() {
        assert!(BoundedId::check("inv_1").is_ok());
        assert!(BoundedId::check(&"x".repeat(256)).is_ok());
        assert!(BoundedId::check(&"é".repeat(256)).is_ok());
        assert_eq!(BoundedId::check(&"x".repeat(257)), Err(IdError::TooLong));
        assert_eq!(BoundedId::check(""), Err(IdError::Empty));
    }

    #[test]
    fn control_characters_are_refused_anywhere() {
        for bad in ["a\nb", "\u{0}", "x\u{1b}[31m", "tab\there", "\u{7f}"] {
            assert_eq!(
                BoundedId::check(bad),
                Err(IdError::ControlCharacter),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_wire_form_is_a_plain_string_checked_while_it_is_parsed() {
        let id: BoundedId = serde_json::from_str("\"call_1\"").unwrap();
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"call_1\"");
        let long = serde_json::to_string(&"x".repeat(257)).unwrap();
        let err = serde_json::from_str::<BoundedId>(&long).unwrap_err();
        assert!(
            err.to_string().starts_with("is longer than 256 characters"),
            "{err}"
        );
    }

    #[test]
    fn the_message_reads_after_a_field_name() {
        assert_eq!(
            format!("`invocationId` {}", IdError::TooLong),
            "`invocationId` is longer than 256 characters"
        );
    }
}
