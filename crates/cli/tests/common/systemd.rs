//! A real systemd for the tests that bind to a unit: Debian's `/lib/systemd/systemd` as PID 1
//! of PID, mount, UTS, IPC and cgroup namespaces of its own, inside one of the test's network
//! namespaces, with only the test's unit files (`SYSTEMD_UNIT_PATH`). The test's commands run
//! inside with `nsenter --all`, so `systemctl` reaches this systemd and a process's
//! `/proc/PID/cgroup` reads as it does on a host where systemd is PID 1.
//!
//! Containment, as root on a shared machine: systemd gets a fresh cgroup2 mount at
//! `/sys/fs/cgroup` (unified mode, so it never mounts or writes the host's v1 hierarchies),
//! rooted by the cgroup namespace at a directory this test made in the host's v2 hierarchy;
//! everything it creates lands below that directory. A fresh sysfs (this network namespace's
//! devices), `/run` and `/proc` are its own mounts. The start script stops before systemd if
//! any step fails or the cgroup namespace is not rooted where it should be. Dropped: SIGKILL to
//! the box's PID 1 ends every process in it, then the directory goes. If the test process dies
//! first, `setpriv --pdeathsig KILL` and `unshare --kill-child` take the box down with it and
//! the next start removes directories whose test process is gone.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const PREFIX: &str = "netsteer-test-systemd-";

pub struct Systemd {
    /// The `unshare` process (its child is the box's PID 1).
    unshare: Child,
    /// The box's PID 1 as the host numbers it.
    pid: u32,
    cgroup: PathBuf,
    _units: tempfile::TempDir,
}

/// The host's cgroup v2 hierarchy: `/sys/fs/cgroup` on a unified host, its `unified`
/// directory on a hybrid one.
fn v2_root() -> Option<PathBuf> {
    ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.join("cgroup.controllers").is_file())
}

/// Removes `dir` and everything below it, deepest first, after killing what is left in it.
fn remove_tree(dir: &Path) {
    let _ = std::fs::write(dir.join("cgroup.kill"), "1");
    let mut dirs = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if let Ok(rd) = std::fs::read_dir(&d) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
        dirs.push(d);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    for d in dirs.iter().rev() {
        // A cgroup is busy until its last process is reaped.
        while std::fs::remove_dir(d).is_err() && d.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Directories of earlier runs whose test process is gone.
fn sweep(root: &Path) {
    let Ok(rd) = std::fs::read_dir(root) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let owner = rest.split('-').next().unwrap_or("");
        if !owner.is_empty() && !Path::new("/proc").join(owner).exists() {
            remove_tree(&e.path());
        }
    }
}

impl Systemd {
    /// systemd with `units` (file name, contents) in the network namespace at `netns` (its
    /// `/run/netns` path), running once `systemctl is-system-running` answers. None (after
    /// `cannot_run`) where the host has no cgroup v2 hierarchy or no systemd.
    pub fn start(netns: &str, units: &[(&str, &str)]) -> Option<Systemd> {
        let (Some(root), true) = (v2_root(), Path::new("/lib/systemd/systemd").is_file()) else {
            super::cannot_run("needs systemd (Debian systemd) and a cgroup v2 hierarchy");
            return None;
        };
        sweep(&root);
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let cgroup = root.join(format!("{PREFIX}{}-{n}", std::process::id()));
        std::fs::create_dir(&cgroup).unwrap_or_else(|e| panic!("{}: {e}", cgroup.display()));
        let units_dir = tempfile::tempdir().unwrap();
        for (name, text) in units {
            std::fs::write(units_dir.path().join(name), text).unwrap();
        }
        // The target systemd starts: nothing but itself (the tests start their units).
        std::fs::write(
            units_dir.path().join("netsteer-test.target"),
            "[Unit]\nDefaultDependencies=no\n",
        )
        .unwrap();
        let inner = format!(
            "set -e
mount -t sysfs sysfs /sys
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t tmpfs run /run
mount -t proc proc /proc
grep -qx '0::/' /proc/self/cgroup
exec env -i container=netsteer-test SYSTEMD_UNIT_PATH={} PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  /lib/systemd/systemd --system --unit=netsteer-test.target --log-target=null",
            units_dir.path().display()
        );
        let outer = format!(
            "echo $$ > {}/cgroup.procs && exec nsenter --net={netns} setpriv --pdeathsig KILL \
             unshare --fork --kill-child=SIGKILL --pid --mount --uts --ipc --cgroup \
             --propagation private sh -c \"$0\"",
            cgroup.display()
        );
        let unshare = Command::new("sh")
            .args(["-c", &outer, &inner])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sh");
        let mut sd = Systemd {
            unshare,
            pid: 0,
            cgroup,
            _units: units_dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        // The box's PID 1: unshare's one child, once it has exec'd systemd.
        loop {
            let children = format!("/proc/{0}/task/{0}/children", sd.unshare.id());
            let pid = std::fs::read_to_string(children)
                .ok()
                .and_then(|c| c.split_whitespace().next()?.parse::<u32>().ok());
            if let Some(pid) = pid
                && std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim() == "systemd")
            {
                sd.pid = pid;
                break;
            }
            if let Ok(Some(status)) = sd.unshare.try_wait() {
                let mut err = String::new();
                use std::io::Read;
                let _ = sd.unshare.stderr.take().unwrap().read_to_string(&mut err);
                panic!("systemd's namespaces: {status}: {err}");
            }
            assert!(Instant::now() < deadline, "systemd never started");
            std::thread::sleep(Duration::from_millis(20));
        }
        loop {
            let state = sd.systemctl(&["is-system-running"]);
            let state = String::from_utf8_lossy(&state.stdout).trim().to_string();
            if state == "running" || state == "degraded" {
                return Some(sd);
            }
            assert!(
                Instant::now() < deadline,
                "systemd not running within 30 s: {state:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `program args` inside the box (all its namespaces).
    pub fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut c = Command::new("nsenter");
        c.args(["--target", &self.pid.to_string(), "--all", program])
            .args(args);
        c
    }

    pub fn systemctl(&self, args: &[&str]) -> Output {
        self.command("systemctl", args).output().expect("nsenter")
    }

    /// This build's netsteer inside; the output whatever the exit status.
    pub fn netsteer(&self, args: &[&str]) -> Output {
        self.command(env!("CARGO_BIN_EXE_netsteer"), args)
            .output()
            .expect("nsenter")
    }

    /// What a shell command inside prints, trimmed; it must succeed.
    pub fn text(&self, cmd: &str) -> String {
        super::printed(
            cmd,
            self.command("sh", &["-c", cmd]).output().expect("nsenter"),
        )
    }

    /// The box's root as its PID 1 sees it (its own /proc, /sys and cgroup mounts), read
    /// from the host without entering it.
    pub fn root(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root", self.pid))
    }

    /// A unit's main process as the box numbers it (0 when it has none).
    pub fn main_pid(&self, unit: &str) -> u32 {
        self.text(&format!("systemctl show -p MainPID --value {unit}"))
            .parse()
            .unwrap()
    }
}

impl Drop for Systemd {
    fn drop(&mut self) {
        if self.pid != 0 {
            let _ = Command::new("kill")
                .args(["-KILL", &self.pid.to_string()])
                .status();
        }
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
        remove_tree(&self.cgroup);
    }
}
