use std::io;
use std::path::PathBuf;

/// A parser's complaint about text; the caller adds the file name (see [`HostError::Parse`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    /// 1-based line number of the offending line (0 when the whole text is at fault).
    pub line: usize,
    pub message: String,
}

impl ParseError {
    pub fn new(line: usize, message: impl Into<String>) -> Self {
        ParseError {
            line,
            message: message.into(),
        }
    }
}

/// Errors of the host model. Paths are the paths *as seen by the host* (`/proc/stat`), not the
/// path under a `--root` tree, so messages stay the same for a live host and its snapshot.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: ParseError,
    },
    #[error("{path}: {source}")]
    CpuSet {
        path: PathBuf,
        #[source]
        source: crate::cpuset::CpuSetError,
    },
    #[error("{root}: not a host tree ({reason})")]
    NotAHostTree { root: PathBuf, reason: String },
    #[error("{path}: symbolic links nest too deeply")]
    LinkLoop { path: PathBuf },
    /// What the tree cannot answer at all (not one file's failure).
    #[error("{0}")]
    Unavailable(String),
}

impl HostError {
    /// The errno of an I/O failure, if any (tune tells EPERM from EIO from ENOENT by it).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            HostError::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// True when the file simply is not there (an absent knob rather than a broken one).
    pub fn is_not_found(&self) -> bool {
        matches!(self, HostError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

pub type Result<T, E = HostError> = std::result::Result<T, E>;

/// The error and its causes joined by ": ", as anyhow's `{:#}` does, but without a cause its
/// parent's message already ends with: library errors such as `"{path}: {source}"` print their
/// cause and also return it from `source()`, which `{:#}` would print twice.
pub fn chain_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = String::new();
    let mut cur = Some(e);
    while let Some(cause) = cur {
        let msg = cause.to_string();
        if !out.ends_with(&msg) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&msg);
        }
        cur = cause.source();
    }
    out
}

#[cfg(test)]
mod chain_tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("reading counters")]
    struct Outer(#[source] HostError);

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let host = HostError::Io {
            path: "/proc/stat".into(),
            source: io::Error::from_raw_os_error(2),
        };
        assert_eq!(
            chain_text(&Outer(host)),
            "reading counters: /proc/stat: No such file or directory (os error 2)"
        );
    }
}
