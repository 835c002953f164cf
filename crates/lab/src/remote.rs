//! Where a lab host's programs run: the [`Remote`] seam. A namespace of this machine
//! ([`crate::NsHost`]) is the lab's host: every host runs programs (`command`, `exec`, `sh`,
//! `spawn`, pinned with taskset), and a namespace host also lets this process *enter* it
//! ([`Remote::netns_path`]), which netsteer's own benchmarks and the tune library use to run
//! in-process on a thread inside the host.
//!
//! An SSH implementation was written and deleted unwired (issue 39): scenarios never named
//! remote hosts, and nothing tested it against a real sshd. A second machine would come back
//! here as a typed remote interface, not as netsteer command lines.

use crate::{LabError, Result};
use std::process::{Child, Command, Output, Stdio};

/// A host of the lab: something that runs programs.
pub trait Remote: std::fmt::Debug + Send + Sync {
    /// The host's name in messages ("nsl123x0-lab-server", "root@db7").
    fn label(&self) -> &str;

    /// A command that runs `program args` on the host, pinned to `cpus` (a CPU list such as
    /// `0,2-3`) when given. The caller sets stdio and spawns it.
    fn command(&self, cpus: Option<&str>, program: &str, args: &[&str]) -> Command;

    /// The host's network namespace file, when it is a namespace of this machine (for
    /// setns(2)); `None` for a host elsewhere.
    fn netns_path(&self) -> Option<String>;

    /// Runs a program on the host and waits; a non-zero exit is an error with its stderr.
    fn exec(&self, args: &[&str]) -> Result<Output> {
        let Some((program, rest)) = args.split_first() else {
            return Err(LabError::Invalid("exec: no program".into()));
        };
        crate::output_of(
            self.command(None, program, rest).stdin(Stdio::null()),
            &format!("{} (on {})", args.join(" "), self.label()),
        )
    }

    /// Runs a shell script on the host.
    fn sh(&self, script: &str) -> Result<Output> {
        self.exec(&["sh", "-c", script])
    }

    /// Starts a program on the host, output discarded, stdin closed.
    fn spawn(&self, cpus: Option<&str>, program: &str, args: &[&str]) -> Result<Child> {
        self.command(cpus, program, args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| LabError::Io {
                what: format!("starting {program} on {}", self.label()),
                source,
            })
    }
}

/// A word quoted for a POSIX shell: inside single quotes everything is literal except the
/// quote itself, written as `'\''`.
pub fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,@%+".contains(&b))
    {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_survive_a_shell() {
        assert_eq!(shell_quote("iperf3"), "iperf3");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("$HOME;rm"), "'$HOME;rm'");
        // What a POSIX shell makes of the quoted words is the original words.
        let words = [
            "a b",
            "it's",
            "",
            "$HOME",
            "\"q\"",
            "back\\slash",
            "new\nline",
        ];
        let line = std::iter::once("printf '%s|'".to_string())
            .chain(words.iter().map(|w| shell_quote(w)))
            .collect::<Vec<_>>()
            .join(" ");
        let out = Command::new("sh").arg("-c").arg(&line).output().unwrap();
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            format!("{}|", words.join("|"))
        );
    }
}
