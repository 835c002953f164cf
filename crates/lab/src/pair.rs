//! The topology every seed uses: a client host and a server host joined by one veth link —
//! the shape of the seeds' two-machine experiments. `lab run`, `lab with` (the benchmark
//! scripts) and the live tests all build it here, so none keeps a copy of namespace set-up.

use crate::{Lab, LabError, LinkSpec, NsHost, Result, Veth};
use netsteer_host::CpuSet;

/// The client's address on the link.
pub const CLIENT_ADDR: &str = "10.77.0.1";
/// The server's address on the link.
pub const SERVER_ADDR: &str = "10.77.0.2";
/// The client's IPv6 address when the pair is made with `ipv6` (a unique local address).
pub const CLIENT_ADDR6: &str = "fd77::1";
pub const SERVER_ADDR6: &str = "fd77::2";
/// The client's device on the link (the first link of a lab, see `Veth::create`).
pub const CLIENT_DEV: &str = "v0a";
/// The server's device on the link.
pub const SERVER_DEV: &str = "v0b";

/// How the pair is made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PairSpec {
    /// rx and tx queues of each veth end (1 when 0).
    pub queues: u32,
    pub mtu: Option<u32>,
    /// IPv6 on (with `CLIENT_ADDR6`/`SERVER_ADDR6`); off otherwise, so no router solicitation
    /// or DAD packet mixes into a measurement.
    pub ipv6: bool,
    /// Steer the client's receive work to these CPUs (RPS on every queue of `v0a`). The client
    /// stands for another machine: without this a veth processes the server's answers on the
    /// server's (the sender's) CPU and mixes them into the server's picture.
    pub client_rps: Option<CpuSet>,
}

/// A lab with its two hosts and their link; everything goes when it is dropped.
#[derive(Debug)]
pub struct Pair {
    pub client: NsHost,
    pub server: NsHost,
    pub link: Veth,
    ipv6: bool,
    // Last: the handles above name what it deletes.
    pub lab: Lab,
}

impl Pair {
    /// Makes the pair under a new lab tagged `tag` (see [`Lab::new`]).
    pub fn new(tag: &str, spec: &PairSpec) -> Result<Pair> {
        if let Some(set) = &spec.client_rps {
            // Checked before anything is made: an offline CPU in an RPS mask is silently
            // dropped by the kernel (store_rps_map()), and the client's work would land elsewhere.
            netsteer_sock::cpu::check_cpus("client RPS CPUs", &set.iter().collect::<Vec<_>>())
                .map_err(|e| LabError::Invalid(e.to_string()))?;
        }
        let mut lab = Lab::new(tag)?;
        let client = lab.host("client", spec.ipv6)?;
        let server = lab.host("server", spec.ipv6)?;
        let link = lab.link(
            &client,
            &server,
            &LinkSpec {
                queues: spec.queues.max(1),
                addr_a: Some(format!("{CLIENT_ADDR}/24")),
                addr_b: Some(format!("{SERVER_ADDR}/24")),
                mtu: spec.mtu,
            },
        )?;
        if spec.ipv6 {
            // nodad: the address is usable at once instead of after duplicate detection's
            // second or so (the link has no other host to collide with).
            client.ip(&[
                "addr",
                "add",
                &format!("{CLIENT_ADDR6}/64"),
                "dev",
                &link.dev_a,
                "nodad",
            ])?;
            server.ip(&[
                "addr",
                "add",
                &format!("{SERVER_ADDR6}/64"),
                "dev",
                &link.dev_b,
                "nodad",
            ])?;
        }
        if let Some(set) = &spec.client_rps {
            // The narrowest width that holds the set: bitmap_parse() takes any shorter mask.
            let mask = set
                .to_mask(netsteer_host::cpuset::nr_cpu_ids(set))
                .map_err(|e| LabError::Invalid(format!("client RPS CPUs: {e}")))?;
            for q in 0..spec.queues.max(1) {
                client.sh(&format!(
                    "echo {mask} > /sys/class/net/{}/queues/rx-{q}/rps_cpus",
                    link.dev_a
                ))?;
            }
        }
        Ok(Pair {
            client,
            server,
            link,
            ipv6: spec.ipv6,
            lab,
        })
    }

    /// What a program started by `netsteer lab with` finds in its environment, documented in
    /// docs/lab.md: the namespaces (for `ip netns exec`), the addresses and the devices.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![
            (PREFIX_VAR, self.lab.prefix().to_string()),
            ("NETSTEER_LAB_CLIENT_NS", self.client.name().to_string()),
            ("NETSTEER_LAB_SERVER_NS", self.server.name().to_string()),
            ("NETSTEER_LAB_CLIENT_ADDR", CLIENT_ADDR.to_string()),
            ("NETSTEER_LAB_SERVER_ADDR", SERVER_ADDR.to_string()),
            ("NETSTEER_LAB_CLIENT_DEV", self.link.dev_a.clone()),
            ("NETSTEER_LAB_SERVER_DEV", self.link.dev_b.clone()),
        ];
        if self.ipv6 {
            env.push(("NETSTEER_LAB_CLIENT_ADDR6", CLIENT_ADDR6.to_string()));
            env.push(("NETSTEER_LAB_SERVER_ADDR6", SERVER_ADDR6.to_string()));
        }
        env
    }

    /// Takes the lab down now; returns the undo steps that failed (see [`Lab::close`]).
    pub fn close(self) -> Vec<String> {
        self.lab.close()
    }

    /// A command for a program run beside the lab (in the root namespace) with the lab in its
    /// environment ([`Pair::env`]) and Ctrl-C and `kill` working as usual in it.
    pub fn command(&self, program: &std::ffi::OsStr) -> std::process::Command {
        let mut c = std::process::Command::new(program);
        c.envs(self.env());
        netsteer_sock::signal::unblock_termination_in(&mut c);
        c
    }
}

/// The variable naming the lab in its command's environment (`lab clean` finds the command
/// of a killed lab by it).
pub(crate) const PREFIX_VAR: &str = "NETSTEER_LAB_PREFIX";

/// `netsteer lab with`: makes the two-host lab, runs `command` in the root namespace with the
/// lab in its environment, and takes the lab down — also on a termination signal, which
/// stops the command first. Returns the command's status as a shell reports it: its exit
/// code, or 128 + the signal that ended it.
pub fn run_command(spec: &PairSpec, command: &[std::ffi::OsString]) -> Result<i32> {
    use std::os::unix::process::ExitStatusExt;
    let Some((program, args)) = command.split_first() else {
        return Err(LabError::Invalid("lab with: no command".into()));
    };
    // Before any thread starts: a signal stops the command, then takes the lab down.
    crate::clean_up_on_termination()?;
    let pair = Pair::new("with", spec)?;
    let mut child = pair
        .command(program)
        .args(args)
        .spawn()
        .map_err(|source| LabError::Io {
            what: format!("starting {}", program.to_string_lossy()),
            source,
        })?;
    crate::stop_child_on_termination(child.id());
    // Before waiting: if this process is SIGKILLed, `lab clean` stops the program too.
    pair.lab.note_child(child.id())?;
    let status = child.wait();
    crate::wait_if_terminating();
    let failed = pair.close();
    let status = status.map_err(|source| LabError::Io {
        what: format!("waiting for {}", program.to_string_lossy()),
        source,
    })?;
    if !failed.is_empty() {
        return Err(LabError::Invalid(format!(
            "lab cleanup failed: {}",
            failed.join("; ")
        )));
    }
    Ok(status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(2))
}
