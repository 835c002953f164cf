//! The reporter sink: each message is written as human lines or as one JSON object per line,
//! and flushed at once so a pipe keeps every line even if the program is killed.

use serde::{Deserialize, Serialize};
use std::io::{self, Write};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Human,
    JsonLines,
}

/// A message a benchmark reports.
pub trait Message: Serialize {
    /// The human rendering, one string per line.
    fn human(&self) -> Vec<String>;
}

pub struct Reporter<W: Write> {
    format: Format,
    out: W,
}

impl<W: Write> Reporter<W> {
    pub fn new(format: Format, out: W) -> Self {
        Reporter { format, out }
    }

    pub fn emit<M: Message>(&mut self, m: &M) -> io::Result<()> {
        match self.format {
            Format::JsonLines => {
                let line = serde_json::to_string(m).map_err(io::Error::other)?;
                writeln!(self.out, "{line}")?;
            }
            Format::Human => {
                for line in m.human() {
                    writeln!(self.out, "{line}")?;
                }
            }
        }
        self.out.flush()
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

/// Nanoseconds as microseconds with three decimals, the unit people read RTTs in.
pub fn us(ns: u64) -> String {
    format!("{:.3}us", ns as f64 / 1000.0)
}

/// The `"type"` of every benchmark message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Interval,
    Summary,
    Error,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Client,
    Server,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorMessage {
    #[serde(rename = "type")]
    pub kind: Kind,
    pub bench: String,
    pub role: Role,
    pub message: String,
}

impl ErrorMessage {
    pub fn new(bench: &str, role: Role, message: impl Into<String>) -> Self {
        ErrorMessage {
            kind: Kind::Error,
            bench: bench.into(),
            role,
            message: message.into(),
        }
    }
}

impl Message for ErrorMessage {
    fn human(&self) -> Vec<String> {
        vec![format!("error: {}", self.message)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Hello {
        #[serde(rename = "type")]
        kind: &'static str,
        n: u32,
    }

    impl Message for Hello {
        fn human(&self) -> Vec<String> {
            vec![format!("hello {}", self.n), "second line".into()]
        }
    }

    #[test]
    fn json_lines_and_human() {
        let mut r = Reporter::new(Format::JsonLines, Vec::new());
        r.emit(&Hello {
            kind: "interval",
            n: 3,
        })
        .unwrap();
        assert_eq!(
            String::from_utf8(r.into_inner()).unwrap(),
            "{\"type\":\"interval\",\"n\":3}\n"
        );
        let mut r = Reporter::new(Format::Human, Vec::new());
        r.emit(&Hello {
            kind: "interval",
            n: 3,
        })
        .unwrap();
        assert_eq!(
            String::from_utf8(r.into_inner()).unwrap(),
            "hello 3\nsecond line\n"
        );
        assert_eq!(us(57_224), "57.224us");
    }
}
