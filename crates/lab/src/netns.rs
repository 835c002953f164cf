//! Hosts (network namespaces) and the veth links between them.

use crate::record::delete_namespace;
use crate::{Cleanup, LabError, Result, run};
use std::process::{Child, Command, Output, Stdio};

/// A lab host: one network namespace. Cheap to clone; the lab owns its lifetime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NsHost {
    name: String,
    short: String,
}

fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 12 && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

impl NsHost {
    pub(crate) fn create(prefix: &str, short: &str, cleanup: &Cleanup) -> Result<NsHost> {
        if !valid_name(short) {
            return Err(LabError::Invalid(format!(
                "host name {short:?}: 1-12 letters or digits"
            )));
        }
        let name = format!("{prefix}-{short}");
        run("ip", &["netns", "add", &name])?;
        let n = name.clone();
        cleanup.defer_checked(format!("delete namespace {name}"), move || {
            delete_namespace(&n)
        });
        Ok(NsHost {
            name,
            short: short.to_string(),
        })
    }

    /// The namespace's name under /run/netns.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn short_name(&self) -> &str {
        &self.short
    }

    /// The namespace file, for setns(2) or `--client-netns`.
    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }

    /// `ip -n HOST ARGS...`.
    pub fn ip(&self, args: &[&str]) -> Result<Output> {
        let mut full = vec!["-n", &self.name];
        full.extend_from_slice(args);
        run("ip", &full)
    }

    /// A per-namespace sysctl (net.*): it changes this host only, never the root namespace.
    pub fn sysctl(&self, key: &str, value: &str) -> Result<()> {
        if !key.starts_with("net.") {
            return Err(LabError::Invalid(format!(
                "sysctl {key}: only net.* keys are per namespace"
            )));
        }
        self.exec(&["sysctl", "-qw", &format!("{key}={value}")])
            .map(|_| ())
    }
}

/// Where a lab host's programs run. A namespace of this machine is the lab's only kind of host
/// (the `Remote` trait over it had one implementation once SSH went; issue 54): it runs
/// programs (`command`, `exec`, `sh`, `spawn`, pinned with taskset), and lets this process
/// enter it (`netns_path`), which netsteer's own benchmarks and the tune library use to run
/// in-process on a thread inside it.
impl NsHost {
    /// The host's name in messages ("nsl123x0-lab-server").
    pub fn label(&self) -> &str {
        &self.name
    }

    /// `ip netns exec NAME [taskset -c CPUS] PROGRAM ARGS`; the namespace's cleanup kills
    /// whatever still runs in it. The caller sets stdio and spawns it.
    pub fn command(&self, cpus: Option<&str>, program: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        // A lab run blocks the termination signals for its signal thread; what it starts must
        // still stop on them.
        netsteer_sock::signal::unblock_termination_in(&mut c);
        c.args(["netns", "exec", &self.name]);
        if let Some(list) = cpus {
            c.args(["taskset", "-c", list]);
        }
        c.arg(program).args(args);
        crate::note_started(program);
        c
    }

    /// The host's network namespace file (for setns(2)).
    pub fn netns_path(&self) -> Option<String> {
        Some(self.path())
    }

    /// Runs a program on the host and waits; a non-zero exit is an error with its stderr.
    pub fn exec(&self, args: &[&str]) -> Result<Output> {
        let Some((program, rest)) = args.split_first() else {
            return Err(LabError::Invalid("exec: no program".into()));
        };
        crate::output_of(
            self.command(None, program, rest).stdin(Stdio::null()),
            &format!("{} (on {})", args.join(" "), self.label()),
        )
    }

    /// Runs a shell script on the host.
    pub fn sh(&self, script: &str) -> Result<Output> {
        self.exec(&["sh", "-c", script])
    }

    /// Starts a program on the host, output discarded, stdin closed.
    pub fn spawn(&self, cpus: Option<&str>, program: &str, args: &[&str]) -> Result<Child> {
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

/// How a veth link is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkSpec {
    /// rx and tx queues on each end (veth: 1..=64 here; the kernel allows more).
    pub queues: u32,
    /// `ADDR/LEN` for each end, IPv4 or IPv6.
    pub addr_a: Option<String>,
    pub addr_b: Option<String>,
    pub mtu: Option<u32>,
}

impl Default for LinkSpec {
    fn default() -> Self {
        LinkSpec {
            queues: 1,
            addr_a: None,
            addr_b: None,
            mtu: None,
        }
    }
}

/// A veth pair: `dev_a` inside host a, `dev_b` inside host b. It goes away with either
/// namespace, so it needs no undo step of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Veth {
    pub a: NsHost,
    pub b: NsHost,
    pub dev_a: String,
    pub dev_b: String,
}

fn check_cidr(s: &str) -> Result<()> {
    let bad = || LabError::Invalid(format!("address {s:?}: expected ADDR/LEN"));
    let (ip, len) = s.split_once('/').ok_or_else(bad)?;
    let ip: std::net::IpAddr = ip.parse().map_err(|_| bad())?;
    let len: u8 = len.parse().map_err(|_| bad())?;
    if len > if ip.is_ipv4() { 32 } else { 128 } {
        return Err(bad());
    }
    Ok(())
}

impl Veth {
    pub(crate) fn create(a: &NsHost, b: &NsHost, spec: &LinkSpec, index: usize) -> Result<Veth> {
        if a == b {
            return Err(LabError::Invalid(format!(
                "a link needs two hosts, got {} twice",
                a.short_name()
            )));
        }
        if !(1..=64).contains(&spec.queues) {
            return Err(LabError::Invalid(format!(
                "{} queues: 1 to 64",
                spec.queues
            )));
        }
        for addr in [&spec.addr_a, &spec.addr_b].into_iter().flatten() {
            check_cidr(addr)?;
        }
        let (dev_a, dev_b) = (format!("v{index}a"), format!("v{index}b"));
        let q = spec.queues.to_string();
        // Made inside host a with its peer moved straight into host b: the pair never exists
        // in the root namespace.
        a.ip(&[
            "link",
            "add",
            &dev_a,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
            "type",
            "veth",
            "peer",
            "name",
            &dev_b,
            "netns",
            b.name(),
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
        ])?;
        for (host, dev, addr) in [(a, &dev_a, &spec.addr_a), (b, &dev_b, &spec.addr_b)] {
            if let Some(mtu) = spec.mtu {
                host.ip(&["link", "set", dev, "mtu", &mtu.to_string()])?;
            }
            if let Some(addr) = addr {
                host.ip(&["addr", "add", addr, "dev", dev])?;
            }
            host.ip(&["link", "set", dev, "up"])?;
        }
        Ok(Veth {
            a: a.clone(),
            b: b.clone(),
            dev_a,
            dev_b,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_addresses_are_checked_before_anything_runs() {
        assert!(valid_name("client"));
        assert!(!valid_name("a/b"));
        assert!(!valid_name(""));
        assert!(!valid_name("thirteenchars"));
        assert!(check_cidr("10.0.0.1/24").is_ok());
        assert!(check_cidr("fd00::1/64").is_ok());
        assert!(check_cidr("10.0.0.1").is_err());
        assert!(check_cidr("10.0.0.1/33").is_err());
        assert!(check_cidr("x/8").is_err());
    }
}
