//! The lab's noise floor: the same variant run N times, and how far its p99 scatters. A
//! verdict in the lab is "better beyond the noise" only when a change moves the median by more
//! than the spread of repeated identical runs, so that spread is what decides what the lab can
//! tell at all. Measured in either rig — two guests on a tap bridge ([`super::VmPair`], the
//! lab's usual form) or one guest with both ends inside ([`super::twin`], optionally in
//! virtual time) — with the same protocol: the UDP echo server pinned to CPU 1 with its NIC's
//! vectors there, the client on CPU 0, `count` round trips a run.
//!
//! Beside latency, each run counts the mechanisms on the server's CPU per request: its NIC's
//! hard interrupts there (`/proc/interrupts`), NET_RX softirq runs there (`/proc/softirqs`) and
//! the server's context switches (`/proc/PID/task/*/status`). Emulation slows these down but
//! does not blur them: they are counts, not times.

use super::ladder::{SERVER_PORT, last_json, wait_port};
use super::twin::{Twin, pin_msi};
use super::{Guest, VM_B_ADDR, VmPair};
use crate::{LabError, Result};
use netsteer_bench::udp_echo::message::ClientSummary;
use netsteer_experiment::stats::Spread;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The server's CPU (its NIC's vectors are moved there) and the client's.
pub const SERVER_CPU: u32 = 1;
pub const CLIENT_CPU: u32 = 0;
const T: Duration = Duration::from_secs(600);
/// The latency flow's source port (fixed, so every run hashes alike).
const SRC_PORT: u16 = 40000;
/// Where the server writes its pid in the guest's scratch share.
const PID_FILE: &str = "/x/noise-server.pid";

/// Where the measurement runs.
pub enum Rig {
    Pair(Box<VmPair>),
    Twin(Box<Twin>),
}

impl Rig {
    fn server(&mut self) -> &mut Guest {
        match self {
            Rig::Pair(p) => &mut p.b,
            Rig::Twin(t) => &mut t.guest,
        }
    }

    fn client(&mut self) -> &mut Guest {
        match self {
            Rig::Pair(p) => &mut p.a,
            Rig::Twin(t) => &mut t.peer,
        }
    }

    /// `pair` or `twin`.
    pub fn name(&self) -> &'static str {
        match self {
            Rig::Pair(_) => "pair",
            Rig::Twin(_) => "twin",
        }
    }

    pub fn virtual_time(&self) -> Option<u32> {
        match self {
            Rig::Pair(_) => None,
            Rig::Twin(t) => t.spec.virtual_time,
        }
    }

    pub fn release(&self) -> &str {
        match self {
            Rig::Pair(p) => &p.a.release,
            Rig::Twin(t) => &t.guest.release,
        }
    }

    pub fn nic(&self) -> super::NicModel {
        match self {
            Rig::Pair(p) => p.nic,
            Rig::Twin(t) => t.spec.nic,
        }
    }

    /// The server's and the client's interfaces and PCI functions, each in its guest.
    fn ends(&mut self) -> Result<(super::twin::End, super::twin::End)> {
        match self {
            Rig::Twin(t) => Ok((t.server.clone(), t.client.clone())),
            Rig::Pair(p) => Ok((
                super::twin::end_of(&mut p.b, "eth0")?,
                super::twin::end_of(&mut p.a, "eth0")?,
            )),
        }
    }

    /// Gives the guest(s) the program and returns its path inside `chroot /host`.
    pub fn install(&self, host_bin: &std::path::Path) -> Result<String> {
        match self {
            Rig::Pair(p) => p.install(host_bin),
            Rig::Twin(t) => t.install(host_bin),
        }
    }
}

/// The server CPU's mechanism counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counters {
    hard_irqs: u64,
    net_rx: u64,
    switches: u64,
}

/// Reads [`Counters`] from one guest shell line's output: /proc/interrupts, a `@@@` line,
/// /proc/softirqs, a `@@@` line, then the server's threads' status files.
fn counters_of(text: &str, irqs: &[u32], cpu: u32) -> Result<Counters> {
    let mut parts = text.split("@@@\n");
    let (Some(int), Some(soft), Some(status)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(LabError::Invalid(format!(
            "the guest's counters are not in three parts: {text}"
        )));
    };
    let int = netsteer_host::parse::parse_interrupts(int)
        .map_err(|e| LabError::Invalid(format!("the guest's /proc/interrupts: {e}")))?;
    let col = int.cpus.iter().position(|c| *c == cpu).ok_or_else(|| {
        LabError::Invalid(format!("the guest's /proc/interrupts has no CPU{cpu}"))
    })?;
    let mut hard_irqs = 0;
    for irq in irqs {
        let row = int.irq(*irq).ok_or_else(|| {
            LabError::Invalid(format!("the guest's /proc/interrupts has no IRQ {irq}"))
        })?;
        hard_irqs = row
            .counts
            .get(col)
            .copied()
            .unwrap_or(0)
            .saturating_add(hard_irqs);
    }
    let soft = netsteer_host::parse::parse_softirqs(soft)
        .map_err(|e| LabError::Invalid(format!("the guest's /proc/softirqs: {e}")))?;
    let net_rx = *soft.per_cpu("NET_RX").get(&cpu).ok_or_else(|| {
        LabError::Invalid(format!(
            "the guest's /proc/softirqs has no NET_RX on CPU{cpu}"
        ))
    })?;
    let mut switches = 0;
    let mut seen = false;
    for l in status.lines() {
        // `cat` of several files with `grep -H`: `/proc/P/task/T/status:voluntary_ctxt_switches:	12`
        let mut f = l.rsplitn(2, ':');
        let (Some(v), Some(k)) = (f.next(), f.next()) else {
            continue;
        };
        if k.ends_with("voluntary_ctxt_switches") {
            let n = v
                .trim()
                .parse::<u64>()
                .map_err(|_| LabError::Invalid(format!("the server's status line {l:?}")))?;
            switches = n.saturating_add(switches);
            seen = true;
        }
    }
    if !seen {
        return Err(LabError::Invalid(format!(
            "the server's context switches were not readable (is it running?): {status}"
        )));
    }
    Ok(Counters {
        hard_irqs,
        net_rx,
        switches,
    })
}

/// What one run cost on the server's CPU, per round trip the server answered.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PerRequest {
    /// The server NIC's hard interrupts on the server's CPU.
    pub hard_irqs: f64,
    /// NET_RX softirq runs on the server's CPU.
    pub net_rx_softirqs: f64,
    /// The server's context switches (voluntary and not, all its threads).
    pub context_switches: f64,
}

/// One run of the variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoiseRun {
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub received: u64,
    pub lost: u64,
    pub per_request: PerRequest,
}

/// N identical runs and their scatter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoiseFloor {
    #[serde(rename = "type")]
    pub kind: String,
    /// `pair` or `twin`.
    pub rig: String,
    pub nic: String,
    pub kernel: String,
    /// The icount shift when the guest ran in virtual time; None: the host's clock.
    pub virtual_time: Option<u32>,
    pub count: u64,
    pub runs: Vec<NoiseRun>,
    pub p99_ns: Spread,
    /// (max − min) of the runs' p99s, % of their median: what a change must beat.
    pub noise_pct: f64,
    pub hard_irqs_per_request: Spread,
    pub net_rx_per_request: Spread,
    pub switches_per_request: Spread,
}

/// (max − min) % of the median (None without a median).
pub fn width_pct(s: &Spread) -> Option<f64> {
    (s.median != 0.0).then(|| s.width() / s.median.abs() * 100.0)
}

/// Runs the variant `runs` times in `rig` with the program at `bin` (its path inside the
/// guest's `chroot /host`); each run's line goes to `line` as it ends.
pub fn measure(
    rig: &mut Rig,
    bin: &str,
    runs: u32,
    count: u64,
    line: &mut dyn FnMut(&str) -> std::io::Result<()>,
) -> Result<NoiseFloor> {
    if runs < 2 {
        return Err(LabError::Invalid(format!(
            "a noise floor needs at least 2 runs (got {runs})"
        )));
    }
    let (server, client) = rig.ends()?;
    let server_irqs = pin_msi(rig.server(), &server.pci, &SERVER_CPU.to_string())?;
    pin_msi(rig.client(), &client.pci, &CLIENT_CPU.to_string())?;
    let addr = format!("{VM_B_ADDR}:{SERVER_PORT}");
    {
        let g = rig.server();
        g.sh(
            &format!(
                "chroot /host {bin} bench udp-echo server --listen {addr} --cpu {SERVER_CPU} --max-pps-per-source 0 --max-pps 0 --duration 36000 > /x/echo-server.log 2>&1 & echo $! > {PID_FILE}"
            ),
            T,
        )?;
        wait_port(g, true, "start")?;
    }
    let read = |g: &mut Guest| -> Result<Counters> {
        let out = g.sh_ok(
            &format!(
                "cat /proc/interrupts; echo @@@; cat /proc/softirqs; echo @@@; grep -H ctxt_switches /proc/$(cat {PID_FILE})/task/*/status"
            ),
            super::twin::T,
        )?;
        counters_of(&out, &server_irqs, SERVER_CPU)
    };
    let mut done = Vec::new();
    let result: Result<()> = (|| {
        for i in 0..runs {
            let before = read(rig.server())?;
            let (rc, out) = rig.client().sh(
                &format!(
                    "chroot /host {bin} bench udp-echo client {addr} --cpu {CLIENT_CPU} --src-port {SRC_PORT} --count {count} --timeout 5 --json"
                ),
                T,
            )?;
            let after = read(rig.server())?;
            let s: ClientSummary = last_json(&out).ok_or_else(|| {
                LabError::Invalid(format!(
                    "run {}: the client said no summary (exit {rc}): {out}",
                    i + 1
                ))
            })?;
            if rc != 0 || s.received + s.lost < count {
                // A client that gave up (three losses in a row end it) measured a shorter run
                // than the others: its p99 would widen the spread for a reason of its own.
                return Err(LabError::Invalid(format!(
                    "run {}: the client exited {rc} after {} of {count} round trips ({} lost): {out}",
                    i + 1,
                    s.received,
                    s.lost
                )));
            }
            let lat = s.latency_ns.as_ref().ok_or_else(|| {
                LabError::Invalid(format!("run {}: no round trip came back: {out}", i + 1))
            })?;
            let answered = (s.received + s.warmup_round_trips).max(1) as f64;
            let per = |a: u64, b: u64| a.saturating_sub(b) as f64 / answered;
            let run = NoiseRun {
                p50_ns: lat.p50,
                p99_ns: lat.p99,
                received: s.received,
                lost: s.lost,
                per_request: PerRequest {
                    hard_irqs: per(after.hard_irqs, before.hard_irqs),
                    net_rx_softirqs: per(after.net_rx, before.net_rx),
                    context_switches: per(after.switches, before.switches),
                },
            };
            line(&run_line(i + 1, runs, &run, rig.virtual_time().is_some())).map_err(|source| {
                LabError::Io {
                    what: "writing a run's line".into(),
                    source,
                }
            })?;
            done.push(run);
        }
        Ok(())
    })();
    // The server goes whatever happened (the guest dies with the rig anyway).
    let _ = rig.server().sh(
        &format!("kill $(cat {PID_FILE}) 2>/dev/null; rm -f {PID_FILE}"),
        T,
    );
    result?;
    let spread = |f: &dyn Fn(&NoiseRun) -> f64| {
        Spread::of(&done.iter().map(f).collect::<Vec<_>>()).unwrap_or_default()
    };
    let p99 = spread(&|r| r.p99_ns as f64);
    Ok(NoiseFloor {
        kind: "noise".into(),
        rig: rig.name().into(),
        nic: rig.nic().name().into(),
        kernel: rig.release().to_string(),
        virtual_time: rig.virtual_time(),
        count,
        noise_pct: width_pct(&p99).unwrap_or(f64::NAN),
        p99_ns: p99,
        hard_irqs_per_request: spread(&|r| r.per_request.hard_irqs),
        net_rx_per_request: spread(&|r| r.per_request.net_rx_softirqs),
        switches_per_request: spread(&|r| r.per_request.context_switches),
        runs: done,
    })
}

/// `virtual ns` for a run in virtual time (the guest's instructions, not the host's clock).
fn unit(virtual_time: bool) -> &'static str {
    if virtual_time { "virtual ns" } else { "ns" }
}

/// `run 3/10: p99 41230 ns, p50 30110 ns, 2000 answered, 0 lost; per request on CPU1: 1.02 IRQs, 1.01 NET_RX, 2.00 switches`.
pub fn run_line(i: u32, n: u32, r: &NoiseRun, virtual_time: bool) -> String {
    let unit = unit(virtual_time);
    format!(
        "run {i}/{n}: p99 {} {unit}, p50 {} {unit}, {} answered, {} lost; per request on CPU{SERVER_CPU}: {:.2} IRQs, {:.2} NET_RX, {:.2} switches",
        r.p99_ns,
        r.p50_ns,
        r.received,
        r.lost,
        r.per_request.hard_irqs,
        r.per_request.net_rx_softirqs,
        r.per_request.context_switches
    )
}

/// The summary's lines: the p99's scatter (the noise floor) and the counts' scatter.
pub fn summary_lines(f: &NoiseFloor) -> Vec<String> {
    let unit = unit(f.virtual_time.is_some());
    let clock = match f.virtual_time {
        Some(s) => format!("virtual time, icount shift {s}"),
        None => "the host's clock".into(),
    };
    let counts = |name: &str, s: &Spread| {
        format!(
            "{name} per request: {:.3} / {:.3} / {:.3} (spread {})",
            s.min,
            s.median,
            s.max,
            width_pct(s).map_or("n/a".into(), |p| format!("{p:.1} %"))
        )
    };
    vec![
        format!(
            "noise floor ({} rig, {}, kernel {}, {clock}, {} runs of {} round trips): p99 min/median/max {:.0} / {:.0} / {:.0} {unit}, spread {:.1} % of the median",
            f.rig,
            f.nic,
            f.kernel,
            f.runs.len(),
            f.count,
            f.p99_ns.min,
            f.p99_ns.median,
            f.p99_ns.max,
            f.noise_pct
        ),
        counts("  hard IRQs", &f.hard_irqs_per_request),
        counts("  NET_RX softirqs", &f.net_rx_per_request),
        counts("  context switches", &f.switches_per_request),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    const INT: &str = "           CPU0       CPU1       \n  24:        100        250   PCI-MSIX-0000:00:04.0   0-edge      eth1-TxRx-0\n  25:          3         40   PCI-MSIX-0000:00:04.0   1-edge      eth1-TxRx-1\n  26:          0          1   PCI-MSIX-0000:00:04.0   2-edge      eth1\n";
    const SOFT: &str = "                    CPU0       CPU1\n          HI:          0          0\n      NET_TX:          1          2\n      NET_RX:        500        777\n";
    const STATUS: &str = "/proc/99/task/99/status:voluntary_ctxt_switches:\t10\n/proc/99/task/99/status:nonvoluntary_ctxt_switches:\t3\n/proc/99/task/100/status:voluntary_ctxt_switches:\t5\n/proc/99/task/100/status:nonvoluntary_ctxt_switches:\t0\n";

    #[test]
    fn the_server_cpus_counts_are_read_from_the_three_files() {
        let text = format!("{INT}@@@\n{SOFT}@@@\n{STATUS}");
        let c = counters_of(&text, &[24, 25, 26], 1).unwrap();
        assert_eq!(
            c,
            Counters {
                hard_irqs: 291,
                net_rx: 777,
                switches: 18
            }
        );
        // Another CPU's column, a subset of the vectors.
        let c0 = counters_of(&text, &[24], 0).unwrap();
        assert_eq!((c0.hard_irqs, c0.net_rx), (100, 500));
        // A vector the file lacks, a CPU it lacks, or no status (server gone) is an error
        // naming what is missing, not a zero.
        let e = counters_of(&text, &[31], 1).unwrap_err().to_string();
        assert!(e.contains("no IRQ 31"), "{e}");
        let e = counters_of(&text, &[24], 2).unwrap_err().to_string();
        assert!(e.contains("no CPU2"), "{e}");
        let gone = format!("{INT}@@@\n{SOFT}@@@\ngrep: /proc/99/task/*/status: No such file\n");
        let e = counters_of(&gone, &[24], 1).unwrap_err().to_string();
        assert!(e.contains("context switches were not readable"), "{e}");
        assert!(counters_of(INT, &[24], 1).is_err());
    }

    #[test]
    fn the_noise_floor_is_the_p99s_width_over_their_median() {
        let s = Spread::of(&[100.0, 104.0, 102.0, 101.0]).unwrap();
        assert_eq!(width_pct(&s), Some(4.0 / 101.5 * 100.0));
        assert_eq!(width_pct(&Spread::default()), None);
        let r = NoiseRun {
            p50_ns: 30,
            p99_ns: 41,
            received: 2000,
            lost: 0,
            per_request: PerRequest {
                hard_irqs: 1.0,
                net_rx_softirqs: 1.25,
                context_switches: 2.0,
            },
        };
        let l = run_line(3, 10, &r, true);
        assert!(l.starts_with("run 3/10: p99 41 virtual ns"), "{l}");
        assert!(l.contains("1.25 NET_RX"), "{l}");
        assert!(run_line(1, 2, &r, false).contains("p99 41 ns"));
    }
}
