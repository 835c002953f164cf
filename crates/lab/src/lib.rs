//! The lab: hosts made of network namespaces (or QEMU guests, [`vm`]), joined by veth links,
//! with processes started inside them on chosen CPUs — the apparatus of the seeds' two-host
//! experiments, made on one machine and always taken down again. [`run`] plays a scenario's
//! variants through the experiment module (`netsteer_experiment::experiment`), changing the server
//! host with the tune library in-process; [`report`] renders the result.
//!
//! Cleanup follows the kernel selftests (`tools/testing/selftests/net/lib.sh`, `defer.sh`):
//! every set-up step registers its undo right next to it ([`Cleanup`]), and the undo steps run
//! in reverse order when the [`Lab`] is dropped — on success, on an error, and while a panic
//! unwinds. A run killed with SIGKILL cannot clean up, so every lab also leaves a record
//! (`/run/netsteer-lab/<prefix>`) naming its owner process; [`clean_stale`] (run by every new
//! lab, and by `netsteer lab clean`) removes the namespaces of records whose owner is gone, and
//! nothing else. Everything a lab makes lives inside its own namespaces (veths are created
//! there, never in the root namespace), so the host's real network is never touched.

mod cleanup;
mod netns;
pub mod pair;
mod record;
pub mod remote;
pub mod report;
pub mod run;
pub mod scenario;
pub mod vm;
pub mod workload;

pub use cleanup::Cleanup;
pub use netns::{LinkSpec, NsHost, Veth};
pub use pair::{Pair, PairSpec};
pub use record::{
    RECORD_DIR, Record, clean_own, clean_stale, clean_up_on_termination, scratch_path,
    stop_child_on_termination, wait_if_terminating,
};

use std::io;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error("{command}: exit {code:?}: {stderr}")]
    Command {
        command: String,
        code: Option<i32>,
        stderr: String,
    },
    #[error("{0}")]
    Invalid(String),
    /// QEMU itself died before the guest was up (TCG has bugs of its own, such as
    /// `iotlb_to_section: Assertion ... failed`): not netsteer's failure, and worth one retry.
    #[error("guest {guest}: the emulator crashed before the guest was up: {detail}")]
    EmulatorCrashed { guest: String, detail: String },
    /// The guest never reached its command loop while QEMU kept running (a TCG stall, a
    /// kernel that hung in early boot): also the emulator's class of failure, worth one retry.
    #[error("guest {guest}: not up after {seconds} s while its emulator still ran: {detail}")]
    BootStalled {
        guest: String,
        seconds: u64,
        detail: String,
    },
    #[error(transparent)]
    Experiment(#[from] netsteer_experiment::experiment::ExperimentError),
}

pub type Result<T, E = LabError> = std::result::Result<T, E>;

pub use netsteer_sock::is_root;

/// Runs a command to completion; an error names the command and carries its stderr.
pub(crate) fn run(program: &str, args: &[&str]) -> Result<Output> {
    output_of(
        Command::new(program).args(args),
        &format!("{program} {}", args.join(" ")),
    )
}

/// The programs this process's labs have started (directly, or inside a host), in order.
static STARTED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

pub(crate) fn note_started(program: &str) {
    STARTED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(program.to_string());
}

/// Every program the labs of this process started, by the name they were started with: the
/// lab changes hosts through the tune library in-process, and this is how a test proves that
/// no `netsteer` process was started for it.
pub fn programs_started() -> Vec<String> {
    STARTED.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Runs `cmd` to completion; a failure to start or a non-zero exit is an error naming
/// `what` (the command line as people read it) and carrying its stderr.
pub(crate) fn output_of(cmd: &mut Command, what: &str) -> Result<Output> {
    note_started(&cmd.get_program().to_string_lossy());
    let out = cmd.output().map_err(|source| LabError::Io {
        what: format!("running {what}"),
        source,
    })?;
    if !out.status.success() {
        return Err(LabError::Command {
            command: what.to_string(),
            code: out.status.code(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out)
}

/// One lab: a unique prefix, the hosts and links made under it, and their cleanup.
pub struct Lab {
    prefix: String,
    /// This lab's record (`record` module): every namespace and program is noted there first.
    record: std::path::PathBuf,
    hosts: Vec<NsHost>,
    links: Vec<Veth>,
    /// The hosts made by [`Lab::switch`].
    switches: Vec<String>,
    // Declared last: dropped after the handles above, and it undoes everything they name.
    cleanup: Cleanup,
}

impl std::fmt::Debug for Lab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lab")
            .field("prefix", &self.prefix)
            .field("hosts", &self.hosts)
            .finish_non_exhaustive()
    }
}

impl Lab {
    /// A new lab whose namespaces are named `nsl<pid>x<n>-<tag>-<host>`. Removes the leftovers
    /// of labs whose process is gone first. Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN).
    pub fn new(tag: &str) -> Result<Lab> {
        if tag.is_empty()
            || tag.len() > 16
            || !tag.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(LabError::Invalid(format!(
                "lab tag {tag:?}: 1-16 letters, digits or '-'"
            )));
        }
        clean_stale()?;
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let prefix = format!(
            "nsl{}x{}-{tag}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let cleanup = Cleanup::default();
        let rec = Record::create(&prefix)?;
        let path = rec.path().to_path_buf();
        // The record goes last, after every namespace it names is gone.
        cleanup.defer(format!("remove {}", path.display()), move || {
            let _ = std::fs::remove_file(&path);
        });
        Ok(Lab {
            prefix,
            record: rec.path().to_path_buf(),
            hosts: Vec::new(),
            links: Vec::new(),
            switches: Vec::new(),
            cleanup,
        })
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The lab's private scratch directory (0700, under the root-only record directory, made
    /// fresh: an existing one is refused), removed with the lab.
    pub fn scratch(&self) -> Result<std::path::PathBuf> {
        let dir = record::create_scratch(&self.prefix)?;
        let for_cleanup = dir.clone();
        self.defer(format!("remove {}", dir.display()), move || {
            let _ = std::fs::remove_dir_all(&for_cleanup);
        });
        Ok(dir)
    }

    /// Notes a program running for the lab (`lab with`), so a later `lab clean` stops it if
    /// this process is killed before it can.
    pub fn note_child(&self, pid: u32) -> Result<()> {
        Record::note_child(&self.record, pid)
    }

    /// A new host: a network namespace with loopback up and IPv6 off (unless `ipv6`), so no
    /// router solicitations or DAD traffic mix into measurements.
    pub fn host(&mut self, name: &str, ipv6: bool) -> Result<NsHost> {
        if self.hosts.iter().any(|h| h.short_name() == name) {
            return Err(LabError::Invalid(format!("host {name} exists already")));
        }
        Record::note(&self.record, &format!("ns {}-{name}", self.prefix))?;
        let host = NsHost::create(&self.prefix, name, &self.cleanup)?;
        host.sysctl(
            "net.ipv6.conf.all.disable_ipv6",
            if ipv6 { "0" } else { "1" },
        )?;
        host.sysctl(
            "net.ipv6.conf.default.disable_ipv6",
            if ipv6 { "0" } else { "1" },
        )?;
        host.ip(&["link", "set", "lo", "up"])?;
        self.hosts.push(host.clone());
        Ok(host)
    }

    /// A veth link between two hosts of this lab, addressed and up.
    pub fn link(&mut self, a: &NsHost, b: &NsHost, spec: &LinkSpec) -> Result<Veth> {
        let v = Veth::create(a, b, spec, self.links.len())?;
        self.links.push(v.clone());
        Ok(v)
    }

    /// A switch: a host holding one Linux bridge, `br0`, that other hosts join with
    /// [`Lab::attach`]. It forwards frames between them as a top-of-rack switch would
    /// (learning, STP off so a port forwards at once) and has no address of its own, so a
    /// three-host topology (clients and a server, or a load balancer and its backends) needs
    /// no routing.
    pub fn switch(&mut self, name: &str) -> Result<NsHost> {
        let sw = self.host(name, false)?;
        sw.ip(&["link", "add", "br0", "type", "bridge", "stp_state", "0"])?;
        sw.ip(&["link", "set", "br0", "up"])?;
        self.switches.push(sw.name().to_string());
        Ok(sw)
    }

    /// Joins `host` to a switch of this lab: a veth whose host end is `dev_a` (addressed with
    /// `spec.addr_a`) and whose other end is a port of the switch's bridge.
    pub fn attach(&mut self, host: &NsHost, switch: &NsHost, spec: &LinkSpec) -> Result<Veth> {
        if !self.switches.iter().any(|s| s == switch.name()) {
            return Err(LabError::Invalid(format!(
                "{} is not a switch of this lab",
                switch.short_name()
            )));
        }
        if spec.addr_b.is_some() {
            return Err(LabError::Invalid(
                "a switch port has no address (addr_b)".into(),
            ));
        }
        let v = self.link(host, switch, spec)?;
        switch.ip(&["link", "set", &v.dev_b, "master", "br0"])?;
        Ok(v)
    }

    pub fn hosts(&self) -> &[NsHost] {
        &self.hosts
    }

    /// Registers an undo step of the caller's own (a qdisc, a sysctl inside a host): it runs
    /// before the namespaces are deleted.
    pub fn defer(&self, what: impl Into<String>, f: impl FnOnce() + Send + 'static) {
        self.cleanup.defer(what, f);
    }

    /// Takes the lab down now and reports the undo steps that failed (dropping does the same,
    /// silently).
    pub fn close(self) -> Vec<String> {
        self.cleanup.run_all()
    }
}
