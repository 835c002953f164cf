use serde::{Deserialize, Serialize};
use std::fmt;

/// A value read from the host, or the reason it could not be read. Serialized as the plain value,
/// or as `{"unknown": "reason"}`, so a missing file never hides the rest of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
// `Unknown` comes first: serde tries untagged variants in order, and a struct whose fields are
// all optional would otherwise swallow `{"unknown": ...}`.
#[serde(untagged)]
pub enum Field<T> {
    Unknown { unknown: String },
    Known(T),
}

impl<T> Field<T> {
    pub fn unknown(reason: impl fmt::Display) -> Self {
        Field::Unknown {
            unknown: reason.to_string(),
        }
    }

    pub fn known(&self) -> Option<&T> {
        match self {
            Field::Known(v) => Some(v),
            Field::Unknown { .. } => None,
        }
    }

    /// Why the value is unknown, if it is.
    pub fn unknown_reason(&self) -> Option<&str> {
        match self {
            Field::Unknown { unknown } => Some(unknown),
            Field::Known(_) => None,
        }
    }

    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Field<U> {
        match self {
            Field::Known(v) => Field::Known(f(v)),
            Field::Unknown { unknown } => Field::Unknown { unknown },
        }
    }

    pub fn as_ref(&self) -> Field<&T> {
        match self {
            Field::Known(v) => Field::Known(v),
            Field::Unknown { unknown } => Field::Unknown {
                unknown: unknown.clone(),
            },
        }
    }
}

impl<T, E: fmt::Display> From<Result<T, E>> for Field<T> {
    fn from(r: Result<T, E>) -> Self {
        match r {
            Ok(v) => Field::Known(v),
            Err(e) => Field::unknown(e),
        }
    }
}

impl<T: fmt::Display> fmt::Display for Field<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Field::Known(v) => v.fmt(f),
            Field::Unknown { .. } => f.write_str("?"),
        }
    }
}
