//! Helpers for the root-only tests: uniquely named network namespaces deleted by a drop guard
//! (also when an assertion fails), and a root check.
#![allow(dead_code)]

pub mod guest;
pub mod pools;
pub mod prometheus;
pub mod resp;
pub mod systemd;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};

/// A process killed (and reaped) when dropped, also while a failed assertion unwinds.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Spawns `cmd` with stderr piped and returns it with the first line it writes there: the start
/// line every netsteer server prints once it listens (its address, its mode).
pub fn spawn_with_start_line(cmd: &mut Command) -> (Child, String) {
    use std::io::BufRead;
    let mut child = cmd
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let mut line = String::new();
    std::io::BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line)
}

/// A child process in a namespace with its output piped: stopped with SIGTERM (its output
/// returned) or waited for, and killed and reaped when dropped, also while a failed assertion
/// unwinds.
pub struct Running(pub Option<Child>);

impl Running {
    /// Starts `args` in `ns` with `env` added and `stdin`; stdout and stderr piped.
    pub fn spawn(
        ns: &Netns,
        args: &[&str],
        env: &[(&str, &str)],
        stdin: std::process::Stdio,
    ) -> Running {
        use std::process::Stdio;
        let mut cmd = ns.command(args[0], &args[1..]);
        cmd.stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        Running(Some(
            cmd.spawn().unwrap_or_else(|e| panic!("{args:?}: {e}")),
        ))
    }

    /// SIGTERM, then its whole stdout and stderr.
    pub fn stop(mut self) -> (String, String) {
        let c = self.0.take().unwrap();
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        let out = c.wait_with_output().unwrap();
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Waits for it to end; it must succeed. Its stdout.
    pub fn finish(mut self, what: &str) -> String {
        let out = self.0.take().unwrap().wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{what}: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// What command `what` printed, trimmed; it must have succeeded (its stderr says why not).
pub fn printed(what: &str, out: Output) -> String {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The command must have succeeded; its stderr says why not.
pub fn succeeded(out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A throwaway redis-server on 127.0.0.1:6379 (no persistence, in the foreground): the tests'
/// real cache server, started inside their namespace.
pub const REDIS_SERVER: &[&str] = &[
    "redis-server",
    "--port",
    "6379",
    "--bind",
    "127.0.0.1",
    "--save",
    "",
    "--appendonly",
    "no",
    "--daemonize",
    "no",
];

/// Relative path → bytes of every regular file of a tree (links are never written by tune).
pub fn files(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().map(Result::unwrap) {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                let rel = e.path().strip_prefix(root).unwrap().to_path_buf();
                out.insert(rel, std::fs::read(e.path()).unwrap());
            }
        }
    }
    out
}

/// Whether the live tune tests can run here: root, iproute2, ethtool and two online CPUs
/// (else a failure under CI=true, a SKIPPED line otherwise).
pub fn tune_live_usable() -> bool {
    let tools = ["ip", "ethtool"].iter().all(|t| {
        Command::new(t)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
            || Command::new(t)
                .arg("-V")
                .output()
                .is_ok_and(|o| o.status.success())
    });
    let cpus = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| netsteer_host::CpuSet::parse_list(&s, None).ok())
        .is_some_and(|s| s.len() >= 2);
    if !is_root() || !tools || !cpus {
        cannot_run("needs root, iproute2, ethtool and two online CPUs");
        return false;
    }
    true
}

/// Whether the VM tests with `model`'s NIC can run here: root, busybox-static and a QEMU with
/// the device (else a failure under CI=true, a SKIPPED line otherwise).
pub fn vm_usable(model: netsteer_lab::vm::NicModel) -> bool {
    let qemu = model.check_qemu();
    let busybox = Path::new("/bin/busybox").is_file();
    if !is_root() || qemu.is_err() || !busybox {
        cannot_run(&format!(
            "needs root, busybox-static and QEMU with the {} device: {}",
            model.name(),
            qemu.err().map(|e| e.to_string()).unwrap_or_default()
        ));
        return false;
    }
    true
}

/// One network namespace of its own lab (`netsteer_lab`): deleted when dropped, also while a
/// failed assertion unwinds, and by the next run if this one is killed.
pub struct Netns {
    pub name: String,
    host: netsteer_lab::NsHost,
    _lab: Option<netsteer_lab::Lab>,
}

/// The lab's two hosts (`client` and `server`) joined by a veth link with `queues` queues,
/// addressed `netsteer_lab::pair::{CLIENT_ADDR, SERVER_ADDR}`, devices `v0a` (client) and
/// `v0b` (server); all gone when dropped.
pub struct Pair {
    pub client: Netns,
    pub server: Netns,
    _pair: netsteer_lab::Pair,
}

impl Pair {
    pub fn create(queues: u32) -> Pair {
        let pair = netsteer_lab::Pair::new(
            "t",
            &netsteer_lab::PairSpec {
                queues,
                ..Default::default()
            },
        )
        .expect("lab pair");
        let wrap = |host: &netsteer_lab::NsHost| Netns {
            name: host.name().to_string(),
            host: host.clone(),
            _lab: None,
        };
        Pair {
            client: wrap(&pair.client),
            server: wrap(&pair.server),
            _pair: pair,
        }
    }
}

impl Netns {
    /// The namespace's file, for setns(2).
    pub fn path(&self) -> String {
        self.host.path()
    }

    pub fn create() -> Netns {
        let mut lab = netsteer_lab::Lab::new("t").expect("lab");
        let host = lab.host("h", true).expect("namespace");
        Netns {
            name: host.name().to_string(),
            host,
            _lab: Some(lab),
        }
    }

    /// A command that runs `program` inside (to spawn it).
    pub fn command(&self, program: &str, args: &[&str]) -> std::process::Command {
        self.host.command(None, program, args)
    }

    /// Runs a program inside; the output whatever the exit status.
    pub fn exec(&self, args: &[&str]) -> Output {
        self.host
            .command(None, args[0], &args[1..])
            .output()
            .expect("ip netns exec")
    }

    pub fn sh(&self, script: &str) {
        if let Err(e) = self.host.sh(script) {
            panic!("{script}: {e}");
        }
    }

    /// This build's netsteer run inside, with `args`; the output whatever the exit status.
    pub fn netsteer(&self, args: &[&str]) -> Output {
        let mut full = vec![env!("CARGO_BIN_EXE_netsteer")];
        full.extend_from_slice(args);
        self.exec(&full)
    }

    /// What a shell command inside prints, trimmed; it must succeed.
    pub fn text(&self, cmd: &str) -> String {
        printed(cmd, self.exec(&["sh", "-c", cmd]))
    }
}

pub fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd).args(args).output().expect(cmd);
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[path = "../../../../support/live.rs"]
mod live;
#[allow(unused_imports)]
pub use live::{REDIS_TOOLS, cannot_run, is_ci, is_root, root_and_tools};

/// A fixture host tree of the repository.
pub fn fixture(host: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/hosts")
        .join(host)
}

/// `netsteer snapshot` run in a guest (its binary at `bin` there), the tree copied over
/// `fixtures/hosts/NAME`: how the captured real guests' trees are made.
pub fn capture_guest(g: &mut netsteer_lab::vm::Guest, bin: &str, name: &str) {
    let t = std::time::Duration::from_secs(300);
    g.sh("rm -rf /x/snap", t).unwrap();
    let (rc, out) = g
        .host(&[bin, "snapshot", "--output", "/tmp/netsteer-x/snap"], t)
        .unwrap();
    assert_eq!(rc, 0, "snapshot: {out}");
    let dest = fixture(name);
    let _ = std::fs::remove_dir_all(&dest);
    let ok = std::process::Command::new("cp")
        .arg("-a")
        .arg(g.share_dir().join("snap"))
        .arg(&dest)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    eprintln!("captured {}", dest.display());
}

/// A scratch copy of a fixture tree (`cp -a` keeps its links as links).
pub fn scratch(host: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let st = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", fixture(host).display()))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(st.success());
    dir
}

/// Runs `f` on a thread that has entered the network namespace at `path` (setns(2)).
pub fn in_netns<T: Send>(path: &str, f: impl FnOnce() -> T + Send) -> T {
    let place = netsteer_sock::netns::Place {
        netns: Some(std::path::Path::new(path)),
        ..Default::default()
    };
    netsteer_sock::netns::on_thread(place, f).unwrap()
}

/// Waits (up to 20 s) until something listens on TCP `port` in `ns` (`ss -ltn`).
#[allow(dead_code)]
pub fn wait_port(ns: &Netns, addr: &str, port: u16) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        let out = ns.exec(&["ss", "-ltnH", &format!("( sport = :{port} )")]);
        if String::from_utf8_lossy(&out.stdout).contains(&format!(":{port}")) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("nothing listens on {addr}:{port} in {}", ns.name);
}
