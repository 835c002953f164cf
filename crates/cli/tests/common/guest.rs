//! What the VM tests do inside their guests: a shell line that must succeed (with the guest's
//! kernel log when it does not), netsteer's udp-echo server in guest b and 64 flows from guest
//! a against it. One copy, for vm_drivers and vm_balance.

use netsteer_lab::vm::{Guest, VM_B_ADDR};
use std::time::Duration;

/// The binary inside the guests' `chroot /host` (through their scratch share).
pub const GBIN: &str = "/tmp/netsteer-x/netsteer";
const T: Duration = Duration::from_secs(240);

/// A guest shell line that must succeed; its output.
pub fn sh(g: &mut Guest, cmd: &str) -> String {
    let (rc, out) = g.sh(cmd, T).unwrap();
    if rc != 0 {
        // A command killed (137: SIGKILL, as the guest's OOM killer sends it) says why only
        // in the guest's kernel log.
        let (_, log) = g.sh("dmesg | tail -n 25", T).unwrap_or_default();
        panic!(
            "guest {}: {cmd}: exit {rc}: {out}\nthe guest's kernel log ends:\n{log}",
            g.name
        );
    }
    out
}

/// 64 flows from guest a in the background for at most `seconds`, until [`stop_flows`].
pub fn start_flows(a: &mut Guest, seconds: u32) {
    stop_flows(a);
    sh(
        a,
        &format!(
            "chroot /host {GBIN} bench udp-echo client {VM_B_ADDR}:4321 --flows 64 --duration {seconds} --timeout 5 > /dev/null 2>&1 &"
        ),
    );
}

/// Ends every client guest a runs and waits until they are gone: a background client left
/// running would add its packets to the next measurement and its memory to the next
/// client's (a CI run saw a foreground burst SIGKILLed in a 1 GiB guest with two 16-second
/// clients still running beside it, each then holding 210 MiB of latency histograms).
pub fn stop_flows(a: &mut Guest) {
    sh(
        a,
        "killall netsteer 2> /dev/null; i=0; while pidof netsteer > /dev/null && [ $i -lt 100 ]; do i=$((i+1)); sleep 0.1; done; ! pidof netsteer > /dev/null",
    );
}

/// The echo server in guest b, answering from CPU 1 only: its replies then leave on one tx
/// queue, so when a virtio device drops RSS (and the tap picks each flow's queue by where its
/// last reply came from) the flows land on one queue, not wherever the scheduler put the
/// thread. Its log, a line a second, is `/x/server.log`.
pub fn start_server(b: &mut Guest) {
    let (rc, _) = b
        .sh("chroot /host ss -Hlun 'sport = :4321' | grep -q .", T)
        .unwrap();
    if rc == 0 {
        return;
    }
    sh(
        b,
        &format!(
            "chroot /host {GBIN} bench udp-echo server --listen {VM_B_ADDR}:4321 --cpu 1 --max-pps-per-source 0 --max-pps 0 --duration 900 > /x/server.log 2>&1 &"
        ),
    );
    sh(
        b,
        "i=0; while [ $i -lt 100 ]; do chroot /host ss -Hlun 'sport = :4321' | grep -q . && exit 0; i=$((i+1)); sleep 0.1; done; cat /x/server.log; exit 1",
    );
}

/// The echoes per second of the server's last logged second (0 before its first line).
pub fn server_pps(b: &mut Guest) -> u64 {
    let (_, last) = b.sh("tail -n 1 /x/server.log", T).unwrap();
    last.split("pps=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0)
}

/// Waits (at most `seconds`) until the server's last second shows at least `pps` echoes: a
/// TCG guest can take seconds to start 64 client threads. Whether it got there.
pub fn wait_for_echoes(b: &mut Guest, pps: u64, seconds: u32) -> bool {
    for _ in 0..seconds {
        std::thread::sleep(Duration::from_secs(1));
        if server_pps(b) >= pps {
            return true;
        }
    }
    false
}

/// The guest's wall clock in milliseconds (what netsteer stamps its intervals and events by).
pub fn now_ms(g: &mut Guest) -> u64 {
    let out = sh(
        g,
        "chroot /host python3 -c 'import time; print(time.time_ns() // 1000000)'",
    );
    out.trim()
        .parse()
        .unwrap_or_else(|e| panic!("the guest's clock: {e}: {out:?}"))
}
