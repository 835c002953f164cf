//! Where a lab host's programs run: the [`Remote`] seam. A namespace of this machine
//! ([`crate::NsHost`]) is the lab's host today; a machine reached over SSH ([`SshHost`]) is the
//! second implementation, so the same workload code can drive two real machines.
//!
//! What each gives: every host runs programs (`command`, `exec`, `sh`, `spawn`, pinned with
//! taskset). Only a namespace host also lets this process *enter* it ([`Remote::netns_path`]),
//! which netsteer's own benchmarks use to run in-process on a thread inside the host; on an SSH
//! host they would run as `netsteer bench ... --json` processes instead. `lab run` makes
//! namespace hosts; scenarios naming SSH hosts are not wired yet (they also need the workloads'
//! configuration files copied over, and netsteer installed there).

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

/// A machine reached with OpenSSH's `ssh` in batch mode (keys only, never a password prompt):
/// every command is one `ssh` process whose remote command line is quoted word by word, so
/// arguments with spaces or quotes arrive as they were given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshHost {
    target: String,
    options: Vec<String>,
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

impl SshHost {
    /// `target` is what ssh takes: `host`, `user@host`, or a `Host` of ssh_config.
    pub fn new(target: &str) -> Result<SshHost> {
        // An option-looking or empty target would be taken as an ssh flag or fail obscurely.
        if target.is_empty()
            || target.starts_with('-')
            || target.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(LabError::Invalid(format!(
                "ssh host {target:?}: expected host, user@host or an ssh_config Host"
            )));
        }
        Ok(SshHost {
            target: target.to_string(),
            options: vec!["BatchMode=yes".into()],
        })
    }

    /// Adds an ssh `-o` option (`Port=2222`, `IdentityFile=...`, `UserKnownHostsFile=...`).
    pub fn option(mut self, option: &str) -> Result<SshHost> {
        if !option.contains('=') || option.starts_with('-') {
            return Err(LabError::Invalid(format!(
                "ssh option {option:?}: expected Name=value"
            )));
        }
        self.options.push(option.to_string());
        Ok(self)
    }

    /// The remote command line: `taskset -c CPUS` when pinned, then the program and its
    /// arguments, each quoted.
    pub fn remote_line(cpus: Option<&str>, program: &str, args: &[&str]) -> String {
        let mut words: Vec<String> = Vec::new();
        if let Some(c) = cpus {
            words.extend(["taskset".into(), "-c".into(), shell_quote(c)]);
        }
        words.push(shell_quote(program));
        words.extend(args.iter().map(|a| shell_quote(a)));
        words.join(" ")
    }
}

impl Remote for SshHost {
    fn label(&self) -> &str {
        &self.target
    }

    fn command(&self, cpus: Option<&str>, program: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ssh");
        netsteer_sock::signal::unblock_termination_in(&mut c);
        for o in &self.options {
            c.arg("-o").arg(o);
        }
        // `--` ends ssh's options; the remote line is one argument that the far side's shell
        // splits back into the quoted words.
        c.arg("--")
            .arg(&self.target)
            .arg(Self::remote_line(cpus, program, args));
        c
    }

    fn netns_path(&self) -> Option<String> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_survive_the_remote_shell() {
        assert_eq!(shell_quote("iperf3"), "iperf3");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("$HOME;rm"), "'$HOME;rm'");
        assert_eq!(
            SshHost::remote_line(Some("0,2-3"), "sh", &["-c", "echo $x"]),
            "taskset -c 0,2-3 sh -c 'echo $x'"
        );
        // What a POSIX shell makes of the line is the original words.
        let words = [
            "a b",
            "it's",
            "",
            "$HOME",
            "\"q\"",
            "back\\slash",
            "new\nline",
        ];
        let mut args = vec!["%s|"];
        args.extend(words);
        let line = SshHost::remote_line(None, "printf", &args);
        let out = Command::new("sh").arg("-c").arg(&line).output().unwrap();
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            format!("{}|", words.join("|"))
        );
    }

    #[test]
    fn targets_and_options_that_ssh_would_misread_are_refused() {
        assert!(SshHost::new("root@db7").is_ok());
        for bad in ["", "-oProxyCommand=x", "a b", "a\nb"] {
            assert!(SshHost::new(bad).is_err(), "{bad:?}");
        }
        let h = SshHost::new("db7").unwrap();
        assert!(h.clone().option("Port=2222").is_ok());
        assert!(h.clone().option("-p").is_err());
        assert!(h.option("Port").is_err());
        let c = SshHost::new("db7")
            .unwrap()
            .option("Port=2222")
            .unwrap()
            .command(Some("1"), "echo", &["x y"]);
        let argv: Vec<_> = c
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            argv,
            [
                "-o",
                "BatchMode=yes",
                "-o",
                "Port=2222",
                "--",
                "db7",
                "taskset -c 1 echo 'x y'"
            ]
        );
    }
}
