//! `netsteer lane` live, root-only, inside namespaces this test creates (deleted by drop
//! guards, also on failure). The service is a real UDP server (socat) in the server's
//! namespace; every readback is the kernel's own (netdev netlink through `show --json`,
//! /proc/PID/status, sysfs).
//!
//! 1. A lane lives and dies with its service: applied (the NAPI in the mode asked, the server
//!    pinned), rolled back to the byte when the server is killed, applied again for the new
//!    server, left in place by a killed holder and adopted by the next one, removed at last.
//! 2. Bad requests change nothing and name the flag.
//! 3. A killed apply leaves a journal the holder's next start completes.
//! 4. A systemd unit (systemd itself as PID 1 of namespaces of the test's own): every process
//!    of the unit pinned, the lane gone on `systemctl stop` and back on `systemctl start`.

mod common;

use common::systemd::Systemd;
use common::{Netns, Pair, Running};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

const PORT: &str = "4321";

fn ok(out: Output) -> Output {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The kernel's (major, minor).
fn kernel() -> (u32, u32) {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut p = r.trim().split(['.', '-', '+']);
    (
        p.next().unwrap().parse().unwrap(),
        p.next().unwrap().parse().unwrap(),
    )
}

/// A UDP server on PORT in `ns`: the lane's service.
fn service(ns: &Netns) -> Running {
    let s = Running::spawn(
        ns,
        &["socat", "-u", &format!("UDP-RECV:{PORT}"), "/dev/null"],
        &[],
        Stdio::null(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ns.text("ss -uanH").contains(&format!(":{PORT} ")) {
        assert!(Instant::now() < deadline, "socat never bound {PORT}");
        std::thread::sleep(Duration::from_millis(20));
    }
    s
}

fn pid(r: &Running) -> u32 {
    r.0.as_ref().unwrap().id()
}

fn allowed(pid: u32) -> String {
    allowed_under("/proc", pid)
}

/// A process's allowed CPUs from the /proc mounted at `proc`.
fn allowed_under(proc: &str, pid: u32) -> String {
    std::fs::read_to_string(format!("{proc}/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string()
}

/// v0b's NAPIs as netdev netlink reports them.
fn napis(ns: &Netns) -> Vec<netsteer_host::nic::NapiView> {
    let out = ok(ns.netsteer(&["show", "--json", "--dev", "v0b"]));
    let v: netsteer_host::view::HostView = serde_json::from_slice(&out.stdout).unwrap();
    v.nic("v0b").unwrap().napis.clone()
}

/// Everything a lane may change on v0b, as the kernel prints it.
fn state(ns: &Netns) -> String {
    let files = ns.text(
        "cd /sys/class/net/v0b && for f in queues/rx-*/rps_cpus queues/tx-*/xps_cpus napi_defer_hard_irqs gro_flush_timeout; do echo $f=$(cat $f 2>/dev/null); done",
    );
    format!("{files}\n{:?}", napis(ns))
}

fn wait_for(what: &str, limit: Duration, done: impl FnMut() -> bool) -> Duration {
    wait_for_or(what, limit, done, &String::new)
}

/// [`wait_for`], with `context()` in the failure's message (what a holder said).
fn wait_for_or(
    what: &str,
    limit: Duration,
    mut done: impl FnMut() -> bool,
    context: &dyn Fn() -> String,
) -> Duration {
    let t0 = Instant::now();
    while !done() {
        assert!(
            t0.elapsed() < limit,
            "{what}: not within {limit:?}{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(25));
    }
    t0.elapsed()
}

/// `lane hold echo` in `ns`, looking every 0.1 s; JSON Lines on stdout with `json`.
fn hold(ns: &Netns, state_dir: &str, json: bool) -> Running {
    let mut args = vec![
        env!("CARGO_BIN_EXE_netsteer"),
        "lane",
        "hold",
        "echo",
        "--state-dir",
        state_dir,
        "--interval",
        "0.1",
    ];
    if json {
        args.push("--json");
    }
    Running::spawn(ns, &args, &[], Stdio::null())
}

/// `lane apply` of the tests' lane "echo" on v0b with `extra` flags (the port, CPU and the
/// rest as each test gives them).
fn apply_lane(ns: &Netns, state_dir: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "lane",
        "apply",
        "--name",
        "echo",
        "--dev",
        "v0b",
        "--state-dir",
        state_dir,
    ];
    args.extend_from_slice(extra);
    ns.netsteer(&args)
}

/// `lane apply` of the tests' lane "echo" (UDP `PORT` on v0b, CPU 1) with `extra` flags.
fn apply_echo(ns: &Netns, state_dir: &str, extra: &[&str]) -> Output {
    let mut args = vec!["--udp", PORT, "--cpu", "1"];
    args.extend_from_slice(extra);
    apply_lane(ns, state_dir, &args)
}

/// `lane list`'s text.
fn listed(ns: &Netns, state_dir: &str) -> String {
    let out = ok(ns.netsteer(&["lane", "list", "--state-dir", state_dir]));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn journals(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir.join("lanes/echo/journal"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// A lane test's stage: a veth pair of `queues` queues whose server side has GRO on (the lane's
/// NAPI settings are GRO's), and a state directory of the test's own. None where live tests
/// cannot run (a failure under CI=true: `common::tune_live_usable`).
struct Stage {
    pair: Pair,
    dir: tempfile::TempDir,
}

impl Stage {
    fn new(queues: u32) -> Option<Stage> {
        Stage::with(queues, "ethtool -K v0b gro on")
    }

    /// The stage with `setup` run in the server's namespace instead of turning GRO on alone.
    fn with(queues: u32, setup: &str) -> Option<Stage> {
        if !common::tune_live_usable() {
            return None;
        }
        let pair = Pair::create(queues);
        pair.server.sh(setup);
        let dir = tempfile::tempdir().unwrap();
        Some(Stage { pair, dir })
    }

    fn b(&self) -> &Netns {
        &self.pair.server
    }

    fn sdp(&self) -> &str {
        self.dir.path().to_str().unwrap()
    }
}

#[test]
fn a_lane_lives_and_dies_with_its_service() {
    let Some(st) = Stage::new(1) else {
        return;
    };
    let (b, sdp) = (st.b(), st.sdp());
    let suspend = kernel() >= (6, 13);
    let mode = if suspend { "suspend" } else { "busy-poll" };
    let server = service(b);
    let before = state(b);
    let before_allowed = allowed(pid(&server));
    ok(apply_echo(b, sdp, &["--mode", mode]));
    let applied = state(b);
    let n = napis(b);
    assert_eq!(n.len(), 1, "{n:#?}");
    assert_eq!(n[0].defer_hard_irqs, Some(2), "{n:#?}");
    assert_eq!(n[0].gro_flush_timeout_ns, Some(200_000));
    if suspend {
        assert_eq!(n[0].irq_suspend_timeout_ns, Some(20_000_000));
    }
    assert_eq!(
        allowed(pid(&server)),
        "1",
        "the service is pinned to the lane's CPU"
    );
    // A second lane on the same CPU is refused, naming the lane that holds it.
    let second = b.netsteer(&[
        "lane",
        "apply",
        "--name",
        "other",
        "--dev",
        "v0b",
        "--udp",
        PORT,
        "--cpu",
        "1",
        "--state-dir",
        sdp,
    ]);
    assert_eq!(second.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("--cpu 1: lane \"echo\" holds it"),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert_eq!(state(b), applied);

    // Held: the server's death rolls the lane back to the byte.
    let holder = hold(b, sdp, true);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(state(b), applied, "a holder adopts the lane as it stands");
    drop(server);
    let took = wait_for(
        "rollback after the service died",
        Duration::from_secs(10),
        || state(b) == before,
    );
    eprintln!("lane rolled back {took:?} after its service was killed");

    // The service again: the lane comes back, for the new pid.
    let server = service(b);
    wait_for(
        "apply when the service came back",
        Duration::from_secs(10),
        || {
            // The journal's end too, not only the knobs: a holder killed between its last
            // write and its journal's `End` leaves an interrupted apply, which the next
            // holder rightly rolls back and applies again.
            state(b) == applied
                && allowed(pid(&server)) == "1"
                && listed(b, sdp).contains(&format!(": applied, pinned pid(s) {}", pid(&server)))
        },
    );

    // A killed holder leaves the lane; the next adopts it without writing anything.
    drop(holder);
    assert_eq!(state(b), applied);
    let written = journals(st.dir.path());
    let holder = hold(b, sdp, false);
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(journals(st.dir.path()), written, "nothing re-applied");
    // Two holders of one lane: the second is refused.
    let second = b.netsteer(&["lane", "hold", "echo", "--state-dir", sdp]);
    assert_eq!(second.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("another netsteer holds it"),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    // SIGTERM: the policy is to leave the lane for its service.
    let (out, err) = holder.stop();
    assert!(err.is_empty(), "{out}{err}");
    assert_eq!(state(b), applied);
    let text = listed(b, sdp);
    assert!(
        text.contains(&format!("echo: udp {PORT} on v0b")) && text.contains("applied"),
        "{text}"
    );
    ok(b.netsteer(&["lane", "remove", "echo", "--state-dir", sdp]));
    assert_eq!(state(b), before);
    assert_eq!(allowed(pid(&server)), before_allowed);
    assert_eq!(listed(b, sdp).trim(), "no lane recorded");
}

#[test]
fn bad_requests_change_nothing_and_name_the_flag() {
    let Some(st) = Stage::new(2) else {
        return;
    };
    let (b, sdp) = (st.b(), st.sdp());
    let _server = service(b);
    let before = state(b);
    let refused = |args: &[&str], want: &str| {
        let out = apply_lane(b, sdp, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}\nwanted: {want}");
        assert_eq!(state(b), before, "{args:?} changed something");
    };
    let cpus = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap();
    let absent = netsteer_host::CpuSet::parse_list(cpus.trim(), None)
        .unwrap()
        .max()
        .unwrap()
        + 1;
    let absent_s = absent.to_string();
    // Two queues and nothing to steer with (veth has neither n-tuple filters nor RSS).
    refused(
        &["--udp", PORT, "--cpu", "1"],
        "--dev v0b: nothing would steer udp port 4321 to rx-1",
    );
    refused(
        &["--udp", "4999", "--cpu", "1", "--queue", "1"],
        "--udp 4999: nobody serves it",
    );
    refused(
        &["--udp", PORT, "--cpu", &absent_s],
        &format!("--cpu {absent}: no such online CPU"),
    );
    refused(&["--udp", PORT, "--cpu", "1", "--queue", "5"], "--queue 5");
    if kernel() < (6, 19) {
        refused(
            &["--udp", PORT, "--cpu", "1", "--mode", "threaded-poll"],
            "--mode threaded-poll: threaded busy polling",
        );
    }
    assert_eq!(listed(b, sdp).trim(), "no lane recorded");
}

#[test]
fn a_killed_apply_is_completed_by_the_next_holder() {
    let Some(st) = Stage::new(1) else {
        return;
    };
    let (b, sdp) = (st.b(), st.sdp());
    let server = service(b);
    let before = state(b);
    let before_allowed = allowed(pid(&server));
    let out = apply_echo(
        b,
        sdp,
        &["--mode", "busy-poll", "--crash-after-writes", "1"],
    );
    assert!(!out.status.success(), "the hook aborts the apply");
    assert_ne!(state(b), before, "one write was made before the crash");
    let text = listed(b, sdp);
    assert!(text.contains("interrupted"), "{text}");
    let holder = hold(b, sdp, true);
    wait_for("the holder's apply", Duration::from_secs(10), || {
        allowed(pid(&server)) == "1"
    });
    let (out, _) = holder.stop();
    let events = hold_events(&out);
    assert_eq!(events, ["recovered", "applied"], "{out}");
    ok(b.netsteer(&["lane", "remove", "echo", "--state-dir", sdp]));
    assert_eq!(state(b), before);
    assert_eq!(allowed(pid(&server)), before_allowed);
}

/// The holder's events after its first, which says how it sees foreign changes: on this
/// machine's kernel by ethtool notifications (a live namespace has the monitor group).
fn hold_events(out: &str) -> Vec<String> {
    let events: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events[0]["event"], "watching", "{out}");
    assert_eq!(events[0]["watching"]["by"], "notifications", "{out}");
    events[1..]
        .iter()
        .map(|v| v["event"].as_str().unwrap().to_string())
        .collect()
}

/// A cgroup this test makes (v2 unified, or the first v1 hierarchy with `cgroup.procs`):
/// removed when dropped, its processes moved back to the parent first.
struct Cgroup {
    dir: std::path::PathBuf,
    rel: String,
}

impl Cgroup {
    fn create() -> Cgroup {
        let root = std::path::Path::new("/sys/fs/cgroup");
        let base = if root.join("cgroup.procs").is_file() {
            root.to_path_buf()
        } else {
            std::fs::read_dir(root)
                .unwrap()
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.join("cgroup.procs").is_file())
                .min()
                .expect("a cgroup hierarchy")
        };
        let name = format!("netsteer-lane-test-{}", std::process::id());
        let dir = base.join(&name);
        std::fs::create_dir(&dir).unwrap();
        let rel = dir
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        Cgroup { dir, rel }
    }

    fn add(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let parent = self.dir.parent().unwrap().join("cgroup.procs");
        if let Ok(procs) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
            for p in procs.lines() {
                let _ = std::fs::write(&parent, p);
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// `--cgroup`: the service is every process of the group once one of them holds the port;
/// the group's other process is pinned too, and the lane goes when the port's holder does
/// even though the group is not empty.
#[test]
fn a_cgroup_service_is_all_its_processes() {
    let Some(st) = Stage::new(1) else {
        return;
    };
    let (b, sdp) = (st.b(), st.sdp());
    let group = Cgroup::create();
    let helper = Running::spawn(b, &["sleep", "600"], &[], Stdio::null());
    let server = service(b);
    group.add(pid(&helper));
    group.add(pid(&server));
    let before = (allowed(pid(&helper)), state(b));
    ok(apply_echo(b, sdp, &["--cgroup", &group.rel]));
    assert_eq!(allowed(pid(&server)), "1");
    assert_eq!(
        allowed(pid(&helper)),
        "1",
        "the group's other process is the service too"
    );
    let holder = hold(b, sdp, false);
    drop(server);
    wait_for(
        "rollback once the port's holder is gone",
        Duration::from_secs(10),
        || allowed(pid(&helper)) == before.0,
    );
    assert_eq!(state(b), before.1);
    drop(holder);
    ok(b.netsteer(&["lane", "remove", "echo", "--state-dir", sdp]));
}

/// A TCP service: its listener is the service (a connection's socket on the same port is not
/// a listener); the UDP port of the same number has nobody.
#[test]
fn a_tcp_service_gets_its_lane() {
    let Some(st) = Stage::new(1) else {
        return;
    };
    let (b, sdp) = (st.b(), st.sdp());
    let server = Running::spawn(
        b,
        &["socat", "TCP-LISTEN:8080,reuseaddr,fork", "/dev/null"],
        &[],
        Stdio::null(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !b.text("ss -ltnH").contains(":8080 ") {
        assert!(Instant::now() < deadline, "socat never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = (allowed(pid(&server)), state(b));
    // `netsteer lane VERB --name web --dev v0b --PROTO 8080 --cpu 1 EXTRA…`.
    let web = |verb: &str, proto: &str, extra: &[&str]| {
        let head = ["lane", verb, "--name", "web", "--dev", "v0b", proto, "8080"];
        b.netsteer(&[&head[..], &["--cpu", "1"], extra, &["--state-dir", sdp]].concat())
    };
    let udp = web("apply", "--udp", &[]);
    assert_eq!(udp.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&udp.stderr).contains("--udp 8080: nobody serves it"));
    let plan = ok(web("plan", "--tcp", &["--mode", "busy-poll"]));
    let text = String::from_utf8_lossy(&plan.stdout);
    assert!(
        text.starts_with("lane web: tcp 8080 on v0b") && text.contains("SO_PREFER_BUSY_POLL"),
        "{text}"
    );
    ok(web("apply", "--tcp", &["--mode", "busy-poll"]));
    assert_eq!(allowed(pid(&server)), "1");
    ok(b.netsteer(&["lane", "remove", "web", "--state-dir", sdp]));
    assert_eq!((allowed(pid(&server)), state(b)), before);
}

/// The service restarted while no holder looked (its lane still applied for the old pid): the
/// next holder rolls the lane back and applies it again for the new process, every setting
/// written again, not only the new pin.
#[test]
fn a_service_restarted_unseen_gets_its_lane_again() {
    let Some(st) = Stage::new(1) else {
        return;
    };
    let (b, sdp) = (st.b(), st.sdp());
    let server = service(b);
    let before = state(b);
    ok(apply_echo(b, sdp, &["--mode", "busy-poll"]));
    let applied = state(b);
    assert_ne!(applied, before);
    drop(server);
    let server = service(b);
    let holder = hold(b, sdp, true);
    wait_for("the new server pinned", Duration::from_secs(10), || {
        allowed(pid(&server)) == "1"
    });
    assert_eq!(
        state(b),
        applied,
        "every setting of the lane, not only the pin"
    );
    let (out, _) = holder.stop();
    assert!(out.contains("\"event\":\"reapplied\""), "{out}");
    ok(b.netsteer(&["lane", "remove", "echo", "--state-dir", sdp]));
    assert_eq!(state(b), before);
}

/// The unit of the systemd test: the same UDP server, started and stopped by systemd, with a
/// helper process beside it in the unit's cgroup. `SuccessExitStatus`: socat ends with 143 on
/// the SIGTERM `systemctl stop` sends.
const ECHO_UNIT: &str = "[Unit]
DefaultDependencies=no
[Service]
ExecStart=/bin/sh -c 'sleep 600 & exec /usr/bin/socat -u UDP-RECV:4321 /dev/null'
SuccessExitStatus=143
";

/// The unit's processes other than its main one, as systemd's cgroup lists them.
fn helpers(sd: &Systemd, main: u32) -> Vec<u32> {
    let cg = sd.text("systemctl show -p ControlGroup --value echo.service");
    // Read inside: cgroup.procs numbers processes in the reader's PID namespace.
    sd.text(&format!("cat /sys/fs/cgroup{cg}/cgroup.procs"))
        .lines()
        .map(|l| l.parse().unwrap())
        .filter(|p| *p != main)
        .collect()
}

/// A process's allowed CPUs as the systemd box numbers it.
fn allowed_in(sd: &Systemd, pid: u32) -> String {
    allowed_under(&sd.root().join("proc").display().to_string(), pid)
}

/// `--unit`: systemd itself (PID 1 of namespaces of this test's own, inside the server's
/// network namespace) stops and starts the unit; the lane pins every process of the unit
/// (found through `systemctl show -p ControlGroup` and each process's cgroup as systemd placed
/// it, so the helper beside the port's holder too), goes when `systemctl stop` ends the unit
/// and comes back for the unit's new processes on `systemctl start`.
#[test]
fn a_systemd_units_stop_and_start_take_its_lane_down_and_up() {
    let Some(st) = Stage::new(1) else {
        return;
    };
    let (b, dirp) = (st.b(), st.sdp());
    let Some(sd) = Systemd::start(&b.path(), &[("echo.service", ECHO_UNIT)]) else {
        return;
    };
    let before = state(b);
    let start = |what: &str| {
        let out = sd.systemctl(&["start", "echo.service"]);
        assert!(out.status.success(), "{what}: {out:?}");
        wait_for(what, Duration::from_secs(10), || {
            b.text("ss -uanH").contains(&format!(":{PORT} "))
        });
        sd.main_pid("echo.service")
    };
    // A unit systemd does not know is refused, naming it, and changes nothing.
    let mut args = vec!["lane", "apply", "--name", "echo", "--dev", "v0b"];
    args.extend(["--state-dir", dirp, "--udp", PORT, "--cpu", "1"]);
    let mut unknown = args.clone();
    unknown.extend(["--unit", "nosuch.service"]);
    let out = sd.netsteer(&unknown);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("--unit nosuch.service: not a unit systemd has loaded (LoadState=not-found)"),
        "{out:?}"
    );
    assert_eq!(state(b), before);

    let main = start("systemctl start");
    let before_allowed = allowed_in(&sd, main);
    let mode = if kernel() >= (6, 13) {
        "suspend"
    } else {
        "busy-poll"
    };
    args.extend(["--unit", "echo.service", "--mode", mode]);
    let out = ok(sd.netsteer(&args));
    let applied = state(b);
    assert_ne!(applied, before, "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(allowed_in(&sd, main), "1", "the unit's process is pinned");
    let helper = helpers(&sd, main);
    assert_eq!(helper.len(), 1, "{helper:?}");
    assert_eq!(
        allowed_in(&sd, helper[0]),
        "1",
        "every process of the unit is the service"
    );

    // The holder as a user runs it: a unit of its own beside the service's (stopped with
    // SIGTERM by `systemctl stop`), its output in files the test reads on failure.
    let log = |f: &str| st.dir.path().join(f).display().to_string();
    let out = sd
        .command(
            "systemd-run",
            &[
                "--unit=netsteer-lane-echo",
                "--property=DefaultDependencies=no",
                &format!("--property=StandardOutput=file:{}", log("hold.out")),
                &format!("--property=StandardError=file:{}", log("hold.err")),
                env!("CARGO_BIN_EXE_netsteer"),
                "lane",
                "hold",
                "echo",
                "--state-dir",
                dirp,
                "--interval",
                "0.1",
            ],
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "systemd-run: {out:?}");
    let said = || {
        let read = |f: &str| std::fs::read_to_string(log(f)).unwrap_or_default();
        format!("holder said: {}{}", read("hold.out"), read("hold.err"))
    };
    let listed_in = || {
        let out = ok(sd.netsteer(&["lane", "list", "--state-dir", dirp]));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    wait_for(
        "the holder adopts the lane",
        Duration::from_secs(10),
        || listed_in().contains(&format!(": applied, pinned pid(s) {main}")),
    );
    let out = sd.systemctl(&["stop", "echo.service"]);
    assert!(out.status.success(), "{out:?}");
    let took = wait_for_or(
        "rollback once systemd stopped the unit",
        Duration::from_secs(10),
        || state(b) == before,
        &said,
    );
    eprintln!("lane rolled back {took:?} after systemctl stop");

    let main2 = start("systemctl start again");
    assert_ne!(main2, main);
    wait_for_or(
        "the lane again for the unit's new process",
        Duration::from_secs(10),
        || {
            state(b) == applied
                && allowed_in(&sd, main2) == "1"
                && helpers(&sd, main2)
                    .iter()
                    .all(|p| allowed_in(&sd, *p) == "1")
                && listed_in().contains(&format!(": applied, pinned pid(s) {main2}"))
        },
        &said,
    );
    let out = sd.systemctl(&["stop", "netsteer-lane-echo"]);
    assert!(out.status.success(), "{out:?}");
    ok(sd.netsteer(&["lane", "remove", "echo", "--state-dir", dirp]));
    assert_eq!(state(b), before);
    assert_eq!(allowed_in(&sd, main2), before_allowed);
}

/// How a stranger sits beside the service on its port (issue 77).
#[derive(Clone, Copy, Debug)]
enum Beside {
    /// `[::]:PORT` with IPV6_V6ONLY: another family, no conflict with `0.0.0.0:PORT`.
    V6Only,
    /// `127.0.0.2:PORT` with SO_REUSEADDR (the service sets it too): the same family on
    /// another address, which UDP lets any uid share when both ask.
    OtherAddress,
}

/// A process that is not the service: uid `uid` in `ns`, binding UDP PORT as `beside` says,
/// holding it 0.25 s and closing it 0.25 s, over and over — what the attacker of issue 77 did.
/// A process of its own (forked: the child makes only system calls until it is killed, as
/// a child of a threaded process must, never allocating), killed and reaped when dropped,
/// and killed by the kernel if the test process dies first (PR_SET_PDEATHSIG). It writes a
/// byte to a pipe each time it binds (`b`, or `e` when it cannot) and when it is about to
/// close (`c`, 0.25 s later), so the test goes by its cycles instead of guessing them from a
/// clock.
struct Stranger {
    pid: libc::pid_t,
    cycles: std::fs::File,
}

impl Stranger {
    fn start(ns: &Netns, uid: u32, beside: Beside) -> Stranger {
        use std::os::fd::{AsRawFd, FromRawFd};
        let netns = std::fs::File::open(ns.path()).unwrap();
        let port = PORT.parse::<u16>().unwrap().to_be();
        // Everything the child needs is made before fork: addresses, the CPU mask (every
        // online CPU, so that a pin to the lane's CPU is seen whatever the test's own mask).
        // SAFETY: all-zero bytes are a valid sockaddr_in/sockaddr_in6/cpu_set_t.
        let mut v6: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
        v6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        v6.sin6_port = port;
        // SAFETY: as above.
        let mut v4: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        v4.sin_family = libc::AF_INET as libc::sa_family_t;
        v4.sin_port = port;
        v4.sin_addr.s_addr = u32::from_be_bytes([127, 0, 0, 2]).to_be();
        // SAFETY: as above.
        let mut all: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
        for c in netsteer_host::CpuSet::parse_list(online.trim(), None)
            .unwrap()
            .iter()
        {
            // SAFETY: c is an online CPU number, below CPU_SETSIZE on this test's hosts.
            unsafe { libc::CPU_SET(c as usize, &mut all) };
        }
        let mut fds = [0; 2];
        // SAFETY: fds has room for the two descriptors pipe2 writes.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        let parent = std::process::id() as libc::pid_t;
        let nsfd = netns.as_raw_fd();
        let wfd = fds[1];
        // SAFETY: the child below makes only async-signal-safe system calls and never
        // returns (it loops until killed, or _exits).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: system calls on values made before fork; no allocation, no locks.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() != parent
                    || libc::setns(nsfd, libc::CLONE_NEWNET) != 0
                    || libc::sched_setaffinity(0, std::mem::size_of_val(&all), &all) != 0
                {
                    libc::_exit(2);
                }
                if uid != 0
                    && (libc::setgroups(0, std::ptr::null()) != 0
                        || libc::setgid(uid) != 0
                        || libc::setuid(uid) != 0)
                {
                    libc::_exit(3);
                }
                let one: libc::c_int = 1;
                let half = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 250_000_000,
                };
                loop {
                    let (family, opt_level, opt, addr, len) = match beside {
                        Beside::V6Only => (
                            libc::AF_INET6,
                            libc::IPPROTO_IPV6,
                            libc::IPV6_V6ONLY,
                            &v6 as *const _ as *const libc::sockaddr,
                            std::mem::size_of_val(&v6),
                        ),
                        Beside::OtherAddress => (
                            libc::AF_INET,
                            libc::SOL_SOCKET,
                            libc::SO_REUSEADDR,
                            &v4 as *const _ as *const libc::sockaddr,
                            std::mem::size_of_val(&v4),
                        ),
                    };
                    let s = libc::socket(family, libc::SOCK_DGRAM, 0);
                    libc::setsockopt(
                        s,
                        opt_level,
                        opt,
                        &one as *const _ as *const libc::c_void,
                        std::mem::size_of_val(&one) as libc::socklen_t,
                    );
                    let said = if s >= 0 && libc::bind(s, addr, len as libc::socklen_t) == 0 {
                        b"b"
                    } else {
                        b"e"
                    };
                    libc::write(wfd, said.as_ptr() as *const libc::c_void, 1);
                    libc::nanosleep(&half, std::ptr::null_mut());
                    libc::write(wfd, b"c".as_ptr() as *const libc::c_void, 1);
                    libc::close(s);
                    libc::nanosleep(&half, std::ptr::null_mut());
                }
            }
        }
        // SAFETY: fds[1] is the pipe's write end, the child's now; closing ours lets a read
        // see the end when the child is gone.
        unsafe { libc::close(fds[1]) };
        Stranger {
            pid,
            // SAFETY: fds[0] is the pipe's read end, owned from here by this File only.
            cycles: unsafe { std::fs::File::from_raw_fd(fds[0]) },
        }
    }

    fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Waits for its next event: a bind (its socket on the port from now, for 0.25 s) or the
    /// end of one (its socket about to close, after a holder at 0.1 s had two looks at it).
    fn next(&mut self) -> u8 {
        use std::io::Read;
        let mut b = [0u8];
        let n = self.cycles.read(&mut b).unwrap();
        assert_eq!(n, 1, "the stranger {} is gone", self.pid);
        assert_ne!(&b, b"e", "the stranger could not bind its socket");
        b[0]
    }
}

impl Drop for Stranger {
    fn drop(&mut self) {
        // SAFETY: our own child, reaped here once.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// The newest journal's sequence number in the lane "echo" (its name): an apply makes a new
/// journal, a rollback appends to the one it undoes.
fn newest_journal(state_dir: &std::path::Path) -> u64 {
    std::fs::read_dir(state_dir.join("lanes/echo/journal"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| e.file_name().to_str()?.strip_suffix(".jsonl")?.parse().ok())
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

/// Issue 77's attack on a lane whose service is "whoever holds the port": the service (socat,
/// root) on 0.0.0.0:PORT, a stranger of `uid` beside it as `beside` says, opening and closing
/// its socket twice a second. The stranger is never pinned, the holder never applies the lane
/// again because of it, and when the service stops the lane is rolled back although the
/// stranger still comes and goes on the port (and is not taken for the service then either).
/// The checks go by the stranger's own cycles (a byte per bind), not by a clock.
fn a_stranger_never_joins(uid: u32, beside: Beside) {
    let Some(st) = Stage::with(1, "ethtool -K v0b gro on && ip link set lo up") else {
        return;
    };
    let (b, sdp) = (st.b(), st.sdp());
    // SO_REUSEADDR on the service too: without it nobody could bind 127.0.0.2 beside it.
    let server = Running::spawn(
        b,
        &[
            "socat",
            "-u",
            &format!("UDP-RECV:{PORT},reuseaddr"),
            "/dev/null",
        ],
        &[],
        Stdio::null(),
    );
    wait_for("socat bound", Duration::from_secs(10), || {
        b.text("ss -uanH").contains(&format!("0.0.0.0:{PORT} "))
    });
    let before = state(b);
    ok(apply_echo(b, sdp, &["--mode", "busy-poll"]));
    let applied = state(b);
    assert_eq!(allowed(pid(&server)), "1");
    let seq = newest_journal(st.dir.path());
    let holder = hold(b, sdp, true);

    let mut stranger = Stranger::start(b, uid, beside);
    let own = allowed(stranger.pid());
    assert_ne!(own, "1", "the stranger may run anywhere to begin with");
    let check = |stranger: &Stranger, when: &str| {
        assert_eq!(
            allowed(stranger.pid()),
            own,
            "{when}: the stranger (uid {uid}, {beside:?}) was pinned to the lane's CPU"
        );
    };
    // Twelve binds and closes (6 s, the 12 re-applies in 5 s) beside the service,
    // looked at as each socket opens and as it is about to close.
    for _ in 0..24 {
        let e = stranger.next();
        check(
            &stranger,
            &format!("beside the running service ({})", e as char),
        );
    }
    assert_eq!(state(b), applied);
    assert_eq!(
        newest_journal(st.dir.path()),
        seq,
        "the holder applied the lane again because of the stranger"
    );

    // The service stops while the stranger keeps coming back to the port.
    drop(server);
    wait_for_or(
        "rollback once the service stopped, the stranger still on the port",
        Duration::from_secs(20),
        || {
            check(&stranger, "after the service stopped");
            state(b) == before
        },
        &|| format!("\n{}", listed(b, sdp)),
    );
    for _ in 0..24 {
        let e = stranger.next();
        check(&stranger, &format!("with the service gone ({})", e as char));
    }
    assert_eq!(state(b), before, "the lane was applied for the stranger");
    assert_eq!(newest_journal(st.dir.path()), seq);
    let (out, err) = holder.stop();
    let events = hold_events(&out);
    assert_eq!(events, ["rolled-back"], "{out}{err}");
    ok(b.netsteer(&["lane", "remove", "echo", "--state-dir", sdp]));
    assert_eq!(state(b), before);
}

/// nobody (65534) on `[::]:PORT` with IPV6_V6ONLY beside root's `0.0.0.0:PORT`.
#[test]
fn a_stranger_on_the_v6_port_never_joins_the_lane() {
    a_stranger_never_joins(65534, Beside::V6Only);
}

/// nobody on `127.0.0.2:PORT` (SO_REUSEADDR), the service's family on another address.
#[test]
fn a_stranger_on_another_address_never_joins_the_lane() {
    a_stranger_never_joins(65534, Beside::OtherAddress);
}

/// The service's own uid (root) on another family: a socket the lane was not planned for does
/// not join it either.
#[test]
fn a_stranger_of_the_services_uid_on_another_family_never_joins_the_lane() {
    a_stranger_never_joins(0, Beside::V6Only);
}
