//! Virtual-machine hosts: QEMU guests with real drivers and real interrupts (virtio-net with
//! one PCI-MSI vector per queue, per-queue NAPI, writable IRQ affinity), so the IRQ half of
//! netsteer runs live where veth has none.
//!
//! A guest boots a Debian kernel with a busybox initramfs ([`image`]). It sees the host's root
//! read-only over 9p (`/host`), so the host's netsteer, ethtool and iproute2 run inside it by
//! `chroot /host`, with the guest's own /proc, /sys and /dev mounted there; a scratch
//! directory of the lab is writable (`/x`). Commands go over the second serial port, one line
//! each, answered with the exit code; output comes back through the scratch directory.
//!
//! Two guests of a [`VmPair`] are joined by multi-queue taps on a bridge inside a lab
//! namespace: QEMU runs in that namespace, so nothing is added to the root namespace, and
//! deleting it (on drop, or by the next lab after a SIGKILL) takes the taps and QEMU with it.
//! QEMU also dies with the thread that started it (PR_SET_PDEATHSIG).
//!
//! What emulation shows: drivers, vectors, affinities, NAPI ids, which CPU takes which queue,
//! whether busy polling engages. What it does not: timings. Under TCG (this machine's nested
//! KVM stalls at boot) a guest's microseconds are not bare metal's.

pub mod anchor;
pub mod image;
pub mod ladder;
pub mod lane;
pub mod noise;
pub mod share;
pub mod trace;
pub mod twin;
pub mod zoo;

use crate::{Lab, LabError, NsHost, Result};
use image::Image;
use serde::{Deserialize, Serialize};
pub use share::install_into;
use share::{in_dir, open_dir, read_output};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The NIC a guest gets: which emulated device, so which Linux driver and which knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NicModel {
    /// virtio-net-pci, multi-queue: a vector per queue each way, per-queue NAPI, busy polling;
    /// no RSS table, no coalescing, no n-tuple.
    #[default]
    Virtio,
    /// virtio-net-pci with `rss=on,hash=on` (QEMU's software RSS): a 128-entry indirection
    /// table and a 40-byte key the guest sets; no coalescing, no n-tuple.
    VirtioRss,
    /// Intel 82576 (`-device igb`, QEMU 8+), the Linux igb driver: an MSI-X vector per queue,
    /// up to 8 combined channels, a 128-entry RSS table, rx-usecs/tx-usecs coalescing; n-tuple
    /// filters fixed off.
    Igb,
    /// Intel 82574L (`-device e1000e`), the Linux e1000e driver: one queue pair, MSI-X vectors
    /// for rx-0, tx-0 and "other", no RSS table to steer with: the noise rig's third model
    /// (`lab noise`), not the ladder's or the lane's, which need queues to steer between.
    E1000e,
}

impl NicModel {
    pub fn name(self) -> &'static str {
        match self {
            NicModel::Virtio => "virtio",
            NicModel::VirtioRss => "virtio-rss",
            NicModel::Igb => "igb",
            NicModel::E1000e => "e1000e",
        }
    }

    /// Whether the ladder and the lane can run on it: they steer between receive queues.
    pub fn has_queues_to_steer(self) -> bool {
        !matches!(self, NicModel::E1000e)
    }

    /// The guest driver's name in `ethtool -i` and netsteer's show.
    pub fn driver(self) -> &'static str {
        match self {
            NicModel::Virtio | NicModel::VirtioRss => "virtio_net",
            NicModel::Igb => "igb",
            NicModel::E1000e => "e1000e",
        }
    }

    /// Whether QEMU reads the queues over a multi-queue tap: virtio's queues are the tap's,
    /// igb's are the emulated NIC's own (it hashes and steers itself) over one tap queue.
    fn multi_queue_tap(self) -> bool {
        !matches!(self, NicModel::Igb | NicModel::E1000e)
    }

    /// QEMU's `-netdev` and `-device` arguments for a NIC on `tap` with `queues` queue pairs
    /// (igb takes its queue count from the guest driver, one per vCPU by default).
    fn qemu_args(self, tap: &str, queues: u32, mac: &str) -> [String; 4] {
        let netdev = if self.multi_queue_tap() {
            format!("tap,id=n0,ifname={tap},script=no,downscript=no,vhost=off,queues={queues}")
        } else {
            format!("tap,id=n0,ifname={tap},script=no,downscript=no,vhost=off")
        };
        // virtio_net's layout: one vector per queue each way, plus config and control.
        let device = match self {
            NicModel::Virtio => format!(
                "virtio-net-pci,netdev=n0,mq=on,vectors={},mac={mac}",
                2 * queues + 2
            ),
            NicModel::VirtioRss => format!(
                "virtio-net-pci,netdev=n0,mq=on,vectors={},rss=on,hash=on,mac={mac}",
                2 * queues + 2
            ),
            NicModel::Igb => format!("igb,netdev=n0,mac={mac}"),
            NicModel::E1000e => format!("e1000e,netdev=n0,mac={mac}"),
        };
        ["-netdev".into(), netdev, "-device".into(), device]
    }
}

impl NicModel {
    /// Whether this machine's QEMU emulates the device (igb needs QEMU 8; Debian 12 has 7.2,
    /// and QEMU 10 from bookworm-backports, which `.ci/deps` installs).
    pub fn check_qemu(self) -> Result<()> {
        let device = match self {
            NicModel::Virtio | NicModel::VirtioRss => "virtio-net-pci",
            NicModel::Igb => "igb",
            NicModel::E1000e => "e1000e",
        };
        let out = Command::new("qemu-system-x86_64")
            .args(["-device", "help"])
            .output()
            .map_err(|source| LabError::Io {
                what: "qemu-system-x86_64 -device help (apt-get install qemu-system-x86)".into(),
                source,
            })?;
        let list = String::from_utf8_lossy(&out.stdout);
        if list.contains(&format!("name \"{device}\"")) {
            return Ok(());
        }
        let version = Command::new("qemu-system-x86_64")
            .arg("--version")
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
            .unwrap_or_default();
        Err(LabError::Invalid(format!(
            "--nic {}: this QEMU ({version}) has no {device:?} device (igb needs QEMU 8 or later: on Debian 12, qemu-system-x86 from bookworm-backports, which .ci/deps installs); --nic virtio works with any",
            self.name()
        )))
    }
}

impl std::str::FromStr for NicModel {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "virtio" => Ok(NicModel::Virtio),
            "virtio-rss" => Ok(NicModel::VirtioRss),
            "igb" => Ok(NicModel::Igb),
            "e1000e" => Ok(NicModel::E1000e),
            _ => Err(format!(
                "unknown NIC model {s:?} (virtio, virtio-rss, igb or e1000e)"
            )),
        }
    }
}

/// One guest's shape.
#[derive(Debug, Clone)]
pub struct GuestSpec {
    pub name: String,
    pub cpus: u32,
    pub mem_mb: u32,
    /// The tap (in the namespace QEMU runs in), the NIC's queues and its model.
    pub nic: Option<(String, u32, NicModel)>,
    pub mac: String,
    /// More QEMU arguments (a zoo guest's NUMA nodes, expander bridges and extra NICs).
    pub extra: Vec<String>,
    /// Virtual time ([`twin`]): QEMU's `-icount shift=N,sleep=off` on single-threaded TCG,
    /// each guest instruction counting 2^N ns of the guest's clock. None: the host's clock
    /// (multi-threaded TCG, or `NETSTEER_VM_ACCEL`).
    pub virtual_time: Option<u32>,
    /// A second command port whose commands run in the guest's `peer` network namespace (a
    /// twin's client end, [`Guest::peer`]).
    pub peer_channel: bool,
}

/// How long a command line may go unacknowledged before it is sent again, and how many times
/// it is sent (a line the guest lost or got in part is never run, so sending it again is safe).
const ACK_WAIT: Duration = Duration::from_secs(20);
const SENDS: u32 = 5;

/// A running guest. Killed when dropped.
pub struct Guest {
    pub name: String,
    /// QEMU; None for a second channel into a guest another `Guest` owns.
    child: Option<Child>,
    chan: Option<BufReader<UnixStream>>,
    dir: PathBuf,
    /// The channel's socket, and the directory (in `dir`) its commands' output comes back in,
    /// opened before the guest ran (the guest writes there: a link it puts in the directory's
    /// place later is not followed, since the files are reached through this descriptor).
    sock: PathBuf,
    out: std::fs::File,
    /// The peer channel's output directory, opened alike (a guest with a peer channel).
    peer_out: Option<std::fs::File>,
    next: u64,
    /// From QEMU's start to the guest's first command prompt.
    pub boot_time: Duration,
    pub release: String,
}

impl Guest {
    /// Starts QEMU for `spec` (inside `ns` when given: where its tap is). `dir` is the guest's
    /// own scratch directory. Returns at once; [`Guest::wait_ready`] waits for the boot.
    pub fn start(
        image: &Image,
        spec: &GuestSpec,
        ns: Option<&NsHost>,
        dir: &Path,
    ) -> Result<Guest> {
        let io = |what: String| move |source| LabError::Io { what, source };
        std::fs::create_dir_all(dir.join("x"))
            .map_err(io(format!("creating {}", dir.display())))?;
        let out = open_dir(&dir.join("x"))?;
        let peer_out = if spec.peer_channel {
            std::fs::create_dir_all(dir.join("x/peer"))
                .map_err(io(format!("creating {}", dir.join("x/peer").display())))?;
            Some(open_dir(&dir.join("x/peer"))?)
        } else {
            None
        };
        let sock = dir.join("ch.sock");
        let _ = std::fs::remove_file(&sock);
        let peer_sock = dir.join("ch-peer.sock");
        let _ = std::fs::remove_file(&peer_sock);
        // icount needs one TCG thread for all vCPUs (QEMU refuses it with thread=multi); the
        // guest's clock then follows the instructions run, not the host (docs/devel/tcg-icount.rst).
        let accel = match spec.virtual_time {
            Some(_) => "tcg,thread=single".to_string(),
            None => {
                std::env::var("NETSTEER_VM_ACCEL").unwrap_or_else(|_| "tcg,thread=multi".into())
            }
        };
        let mut args: Vec<String> = vec![
            "-accel".into(),
            accel,
            "-smp".into(),
            spec.cpus.to_string(),
            "-m".into(),
            spec.mem_mb.to_string(),
            "-nodefaults".into(),
            "-no-reboot".into(),
            "-display".into(),
            "none".into(),
            "-kernel".into(),
            image.kernel.display().to_string(),
            "-initrd".into(),
            image.initramfs.display().to_string(),
            "-append".into(),
            if spec.peer_channel {
                "console=ttyS0 panic=-1 quiet netsteer.peer".into()
            } else {
                "console=ttyS0 panic=-1 quiet".into()
            },
            "-serial".into(),
            format!("file:{}", dir.join("console.log").display()),
            "-chardev".into(),
            format!("socket,id=ch,path={},server=on,wait=off", sock.display()),
            "-serial".into(),
            "chardev:ch".into(),
            "-fsdev".into(),
            "local,id=root,path=/,security_model=none,readonly=on,multidevs=remap".into(),
            "-device".into(),
            "virtio-9p-pci,fsdev=root,mount_tag=hostroot".into(),
            "-fsdev".into(),
            format!(
                "local,id=x,path={},security_model=none",
                dir.join("x").display()
            ),
            "-device".into(),
            "virtio-9p-pci,fsdev=x,mount_tag=scratch".into(),
        ];
        if spec.peer_channel {
            // The third ISA port (ttyS2) shares IRQ 4 with the console's ttyS0, and QEMU does
            // not OR the two; the console is quiet after boot, and a line whose interrupt was
            // lost is not acknowledged and so is sent again (see `sh`).
            args.push("-chardev".into());
            args.push(format!(
                "socket,id=chp,path={},server=on,wait=off",
                peer_sock.display()
            ));
            args.push("-serial".into());
            args.push("chardev:chp".into());
        }
        if let Some(shift) = spec.virtual_time {
            args.push("-icount".into());
            args.push(format!("shift={shift},sleep=off"));
        }
        if let Some((tap, queues, model)) = &spec.nic {
            args.extend(model.qemu_args(tap, *queues, &spec.mac));
        }
        args.extend(spec.extra.iter().cloned());
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut cmd = match ns {
            Some(h) => h.command(None, "qemu-system-x86_64", &argv),
            None => {
                let mut c = Command::new("qemu-system-x86_64");
                c.args(&argv);
                c
            }
        };
        netsteer_sock::signal::die_with_parent(&mut cmd);
        let log = std::fs::File::create(dir.join("qemu.log"))
            .map_err(io(format!("creating {}", dir.join("qemu.log").display())))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(io(
                "starting qemu-system-x86_64 (apt-get install qemu-system-x86)".into(),
            ))?;
        Ok(Guest {
            name: spec.name.clone(),
            child: Some(child),
            chan: None,
            dir: dir.to_path_buf(),
            sock,
            out,
            peer_out,
            next: 0,
            boot_time: Duration::ZERO,
            release: String::new(),
        })
    }

    /// The guest's second channel, whose commands run in its `peer` network namespace (started
    /// with [`GuestSpec::peer_channel`]); not ready until [`Guest::wait_ready`]. It owns no
    /// emulator: the guest goes when `self` is dropped.
    pub fn peer(&self, name: &str) -> Result<Guest> {
        let out = self
            .peer_out
            .as_ref()
            .ok_or_else(|| {
                LabError::Invalid(format!(
                    "guest {}: started without a peer channel",
                    self.name
                ))
            })?
            .try_clone()
            .map_err(|source| LabError::Io {
                what: format!("guest {}: the peer channel's directory", self.name),
                source,
            })?;
        Ok(Guest {
            name: name.to_string(),
            child: None,
            chan: None,
            dir: self.dir.clone(),
            sock: self.dir.join("ch-peer.sock"),
            out,
            peer_out: None,
            next: 0,
            boot_time: Duration::ZERO,
            release: String::new(),
        })
    }

    fn why_not(&self) -> String {
        let tail = |p: PathBuf| {
            let t = std::fs::read_to_string(p).unwrap_or_default();
            let lines: Vec<&str> = t.lines().collect();
            lines[lines.len().saturating_sub(8)..].join(" | ")
        };
        format!(
            "qemu: {}; console: {}",
            tail(self.dir.join("qemu.log")),
            tail(self.dir.join("console.log"))
        )
    }

    /// Waits up to `limit` for the guest's command loop. A QEMU that is gone by then (an
    /// abort, a signal) is [`LabError::EmulatorCrashed`], whatever the channel said.
    pub fn wait_ready(&mut self, started: Instant, limit: Duration) -> Result<()> {
        let r = self.wait_ready_inner(started, limit);
        if r.is_err() && self.emulator_died() {
            return Err(LabError::EmulatorCrashed {
                guest: self.name.clone(),
                detail: self.why_not(),
            });
        }
        if r.is_err() && started.elapsed() > limit {
            return Err(LabError::BootStalled {
                guest: self.name.clone(),
                seconds: limit.as_secs(),
                detail: self.why_not(),
            });
        }
        r
    }

    /// True once QEMU has exited (waiting a moment for a process that is going down).
    fn emulator_died(&mut self) -> bool {
        let Some(child) = self.child.as_mut() else {
            return false;
        };
        for _ in 0..20 {
            if let Ok(Some(_)) = child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    fn wait_ready_inner(&mut self, started: Instant, limit: Duration) -> Result<()> {
        let sock = self.sock.clone();
        let stream = loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                return Err(LabError::Invalid(format!(
                    "guest {}: qemu exited ({status}) before booting: {}",
                    self.name,
                    self.why_not()
                )));
            }
            if let Ok(s) = UnixStream::connect(&sock) {
                break s;
            }
            if started.elapsed() > limit {
                return Err(LabError::Invalid(format!(
                    "guest {}: no channel after {:.0} s: {}",
                    self.name,
                    limit.as_secs_f64(),
                    self.why_not()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut r = BufReader::new(stream);
        let line = self.read_line(&mut r, started, limit)?;
        let release = line
            .trim()
            .strip_prefix("@@READY")
            .ok_or_else(|| LabError::Invalid(format!("guest {}: said {line:?}", self.name)))?;
        self.release = release.trim().to_string();
        self.boot_time = started.elapsed();
        r.get_mut()
            .write_all(b"go\n")
            .map_err(|source| LabError::Io {
                what: format!("guest {} channel", self.name),
                source,
            })?;
        self.chan = Some(r);
        Ok(())
    }

    fn read_line(
        &self,
        r: &mut BufReader<UnixStream>,
        since: Instant,
        limit: Duration,
    ) -> Result<String> {
        let mut line = String::new();
        self.read_line_by(r, &mut line, since + limit)?
            .ok_or_else(|| {
                LabError::Invalid(format!(
                    "guest {}: no answer within {:.0} s: {}",
                    self.name,
                    limit.as_secs_f64(),
                    self.why_not()
                ))
            })
    }

    /// The next `@@` line from the guest, or None at `deadline`. `line` holds a partial line
    /// across calls (a deadline can fall in the middle of one).
    fn read_line_by(
        &self,
        r: &mut BufReader<UnixStream>,
        line: &mut String,
        deadline: Instant,
    ) -> Result<Option<String>> {
        loop {
            let Some(left) = deadline
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
            else {
                return Ok(None);
            };
            r.get_ref()
                .set_read_timeout(Some(left.min(Duration::from_secs(1))))
                .map_err(|source| LabError::Io {
                    what: format!("guest {} channel", self.name),
                    source,
                })?;
            match r.read_line(line) {
                Ok(0) => {
                    return Err(LabError::Invalid(format!(
                        "guest {}: channel closed: {}",
                        self.name,
                        self.why_not()
                    )));
                }
                Ok(_) if line.ends_with('\n') => {
                    // The serial line may carry the kernel's stray bytes before ours.
                    let found = line.find("@@").map(|i| line[i..].to_string());
                    line.clear();
                    if found.is_some() {
                        return Ok(found);
                    }
                }
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(source) => {
                    return Err(LabError::Io {
                        what: format!("guest {} channel", self.name),
                        source,
                    });
                }
            }
        }
    }

    /// Runs a shell command line in the guest (busybox sh, outside the chroot); its exit code
    /// and output (stdout and stderr).
    pub fn sh(&mut self, cmd: &str, limit: Duration) -> Result<(i32, String)> {
        if cmd.contains('\n') || !cmd.is_ascii() {
            // One line of ASCII: the guest checks its length in bytes with busybox's ${#cmd}.
            return Err(LabError::Invalid(
                "a guest command is one line of ASCII".into(),
            ));
        }
        let id = self.next;
        self.next += 1;
        let mut r = self
            .chan
            .take()
            .ok_or_else(|| LabError::Invalid(format!("guest {} is not ready", self.name)))?;
        let result: Result<(i32, String)> = (|| {
            let send = |r: &mut BufReader<UnixStream>| {
                r.get_mut()
                    .write_all(format!("@@CMD {id} {} {cmd} @@END\n", cmd.len()).as_bytes())
                    .map_err(|source| LabError::Io {
                        what: format!("guest {} channel", self.name),
                        source,
                    })
            };
            let start = Instant::now();
            let mut line = String::new();
            let mut sends = 1;
            let mut sent = Instant::now();
            let mut acked = false;
            send(&mut r)?;
            loop {
                let deadline = if acked {
                    start + limit
                } else {
                    (sent + ACK_WAIT).min(start + limit)
                };
                let Some(got) = self.read_line_by(&mut r, &mut line, deadline)? else {
                    if !acked && sends < SENDS && start.elapsed() < limit {
                        eprintln!(
                            "netsteer lab: guest {}: command {id} not acknowledged within {} s; sending it again",
                            self.name,
                            ACK_WAIT.as_secs()
                        );
                        sends += 1;
                        sent = Instant::now();
                        send(&mut r)?;
                        continue;
                    }
                    return Err(LabError::Invalid(format!(
                        "no answer within {:.0} s ({sends} send(s), {}): {}",
                        start.elapsed().as_secs_f64(),
                        if acked {
                            "acknowledged"
                        } else {
                            "never acknowledged"
                        },
                        self.why_not()
                    )));
                };
                let mut f = got.split_whitespace();
                match (f.next(), f.next()) {
                    (Some("@@ACK"), Some(n)) if n == id.to_string() => acked = true,
                    // Not whole when it arrived: not run, so sent again.
                    (Some("@@BAD"), _) if !acked && sends < SENDS => {
                        eprintln!(
                            "netsteer lab: guest {}: command {id} arrived incomplete; sending it again",
                            self.name
                        );
                        sends += 1;
                        sent = Instant::now();
                        send(&mut r)?;
                    }
                    (Some("@@DONE"), Some(n)) if n == id.to_string() => {
                        let rc: i32 = f.next().and_then(|c| c.parse().ok()).unwrap_or(-1);
                        let out_path = in_dir(&self.out, &format!("out.{id}"));
                        let out = read_output(&out_path);
                        let _ = std::fs::remove_file(&out_path);
                        return Ok((rc, out));
                    }
                    _ => {}
                }
            }
        })();
        self.chan = Some(r);
        result.map_err(|e| LabError::Invalid(format!("guest {}: {cmd}: {e}", self.name)))
    }

    /// QEMU's process id (its command line says how the guest was emulated).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The guest's scratch share as the host sees it (`/x` in the guest, [`GUEST_SHARE`]
    /// inside its `chroot /host`): what the guest writes there, the host reads here.
    pub fn share_dir(&self) -> PathBuf {
        self.dir.join("x")
    }

    /// Runs a program of the host (its path as on the host) inside the guest.
    pub fn host(&mut self, argv: &[&str], limit: Duration) -> Result<(i32, String)> {
        let line = std::iter::once("chroot /host".to_string())
            .chain(argv.iter().map(|a| crate::remote::shell_quote(a)))
            .collect::<Vec<_>>()
            .join(" ");
        self.sh(&line, limit)
    }

    /// As [`Guest::host`], failing unless the program exits 0.
    pub fn host_ok(&mut self, argv: &[&str], limit: Duration) -> Result<String> {
        let (rc, out) = self.host(argv, limit)?;
        self.ok(rc, out, &argv.join(" "))
    }

    /// As [`Guest::sh`], failing unless the line exits 0.
    pub fn sh_ok(&mut self, cmd: &str, limit: Duration) -> Result<String> {
        let (rc, out) = self.sh(cmd, limit)?;
        self.ok(rc, out, cmd)
    }

    /// `out` when `rc` is 0; else the error naming the guest and `what` ran.
    fn ok(&self, rc: i32, out: String, what: &str) -> Result<String> {
        if rc != 0 {
            return Err(LabError::Command {
                command: format!("(guest {}) {what}", self.name),
                code: Some(rc),
                stderr: out,
            });
        }
        Ok(out)
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The pair's addresses on the guests' link.
pub const VM_A_ADDR: &str = "10.78.0.1";
pub const VM_B_ADDR: &str = "10.78.0.2";

#[derive(Debug, Clone)]
pub struct VmPairSpec {
    pub cpus: u32,
    /// Queue pairs of a virtio NIC (igb's driver picks its own: one per vCPU).
    pub queues: u32,
    /// Guest memory: 1 GiB by default, since the host's netsteer runs from the uncached 9p
    /// share (a debug build is 120 MB) and a ladder rung runs a server, tune and a client at
    /// once.
    pub mem_mb: u32,
    pub nic: NicModel,
    /// The guest kernel's series (`6.12`); None: the apt candidate (Debian 12's 6.1).
    pub kernel: Option<String>,
    /// How long a boot may take (TCG on a busy 2-core machine: tens of seconds).
    pub boot_limit: Duration,
}

impl Default for VmPairSpec {
    fn default() -> Self {
        VmPairSpec {
            cpus: 2,
            queues: 4,
            mem_mb: 1024,
            nic: NicModel::Virtio,
            kernel: None,
            boot_limit: Duration::from_secs(240),
        }
    }
}

impl VmPairSpec {
    /// `2 vCPUs, igb NIC each, kernel 6.12` (or `of the apt candidate`).
    pub fn describe(&self) -> String {
        format!(
            "{} vCPUs, {} NIC each, kernel {}",
            self.cpus,
            self.nic.name(),
            self.kernel.as_deref().unwrap_or("of the apt candidate")
        )
    }

    /// The pair a scenario's `[vm]` asks for, `nic` and `kernel` (the command line's) first.
    pub fn of(
        vm: Option<crate::scenario::VmTopology>,
        nic: Option<NicModel>,
        kernel: Option<String>,
    ) -> VmPairSpec {
        let vm = vm.unwrap_or_default();
        VmPairSpec {
            nic: nic.unwrap_or(vm.nic),
            kernel: kernel.or(vm.kernel),
            ..Default::default()
        }
    }
}

/// Two guests whose `eth0`s (`nic`, `queues` queues each) share a bridge in the lab's
/// `net` namespace, addressed [`VM_A_ADDR`] and [`VM_B_ADDR`].
pub struct VmPair {
    /// Set when the first boot's emulator crashed and the pair was booted again: what died.
    pub retried: Option<String>,
    pub a: Guest,
    pub b: Guest,
    pub image: Image,
    pub nic: NicModel,
    /// The CPUs of guest a the latency client and the bulk flows run on: 0 and 1 in a pair;
    /// in a twin, where a and b are one guest, CPUs the server's side does not use.
    pub client_cpus: [u32; 2],
    /// Guest a's NIC as its commands name it (`eth0`; a twin's client NIC keeps the name the
    /// guest gave it).
    pub client_dev: String,
    /// The icount shift when the guests run in virtual time (a twin only).
    pub virtual_time: Option<u32>,
    /// The namespace of the taps and their bridge (None: a twin, whose NICs are on a hub).
    pub net: Option<NsHost>,
    // Last: deleting the namespace takes the taps (and anything QEMU left) with it.
    pub lab: Lab,
}

/// Runs `boot`, and once more when it failed because QEMU itself crashed or stalled before a
/// guest was up ([`LabError::EmulatorCrashed`], [`LabError::BootStalled`]): said on stderr and
/// returned as the second value; a second failure, or any other, is the error.
pub fn once_more_after_a_crash<T>(
    mut boot: impl FnMut() -> Result<T>,
) -> Result<(T, Option<String>)> {
    match boot() {
        Err(e @ (LabError::EmulatorCrashed { .. } | LabError::BootStalled { .. })) => {
            let what = format!("{e}; booted once more");
            eprintln!("netsteer lab: {what}");
            Ok((boot()?, Some(what)))
        }
        other => other.map(|t| (t, None)),
    }
}

/// One guest of its own lab (no tap: its NICs, if any, are in `spec.extra`): the kernel's
/// image built or reused, the lab's scratch made, QEMU started and the boot waited for, up to
/// `boot_limit`. The lab is returned last so that it outlives the guest.
pub(crate) fn boot_single(
    tag: &str,
    kernel: Option<&str>,
    spec: &GuestSpec,
    boot_limit: Duration,
) -> Result<(Guest, Image, Lab)> {
    let image = image::build(kernel)?;
    let lab = Lab::new(tag)?;
    let dir = lab.scratch()?;
    let started = Instant::now();
    let mut guest = Guest::start(&image, spec, None, &dir.join(&spec.name))?;
    guest.wait_ready(started, boot_limit)?;
    Ok((guest, image, lab))
}

/// Where the guest's scratch share appears inside `chroot /host` (see the image's init).
pub const GUEST_SHARE: &str = "/tmp/netsteer-x";

impl VmPair {
    /// Boots the pair; once more when QEMU itself crashed before a guest was up (said on
    /// stderr and kept in [`VmPair::retried`]; a second crash is the error).
    pub fn new(tag: &str, spec: &VmPairSpec) -> Result<VmPair> {
        let (mut pair, retried) = once_more_after_a_crash(|| Self::new_once(tag, spec))?;
        pair.retried = retried;
        Ok(pair)
    }

    /// [`VmPair::new`], saying on stderr what boots and how long it took (a first run fetches
    /// the kernel; TCG boots take tens of seconds).
    pub fn boot_announced(tag: &str, spec: &VmPairSpec) -> Result<VmPair> {
        eprintln!(
            "netsteer lab: booting two guests ({}; the first run fetches and caches the kernel)",
            spec.describe()
        );
        let pair = VmPair::new(tag, spec)?;
        eprintln!(
            "netsteer lab: guests up in {:.1} s and {:.1} s (kernel {})",
            pair.a.boot_time.as_secs_f64(),
            pair.b.boot_time.as_secs_f64(),
            pair.a.release
        );
        Ok(pair)
    }

    fn new_once(tag: &str, spec: &VmPairSpec) -> Result<VmPair> {
        spec.nic.check_qemu()?;
        let image = image::build(spec.kernel.as_deref())?;
        let mut lab = Lab::new(tag)?;
        let net = lab.switch("net")?;
        let dir = lab.scratch()?;
        let mut guests = Vec::new();
        let started = Instant::now();
        for (i, name) in ["a", "b"].iter().enumerate() {
            let tap = format!("tap{i}");
            if spec.nic.multi_queue_tap() {
                net.ip(&["tuntap", "add", "dev", &tap, "mode", "tap", "multi_queue"])?;
            } else {
                net.ip(&["tuntap", "add", "dev", &tap, "mode", "tap"])?;
            }
            net.ip(&["link", "set", &tap, "master", "br0", "up"])?;
            let g = Guest::start(
                &image,
                &GuestSpec {
                    name: (*name).to_string(),
                    cpus: spec.cpus,
                    mem_mb: spec.mem_mb,
                    nic: Some((tap, spec.queues, spec.nic)),
                    mac: format!("52:54:00:4e:53:{:02x}", i + 1),
                    extra: Vec::new(),
                    virtual_time: None,
                    peer_channel: false,
                },
                Some(&net),
                &dir.join(name),
            )?;
            guests.push(g);
        }
        let mut b = guests.pop().expect("two guests");
        let mut a = guests.pop().expect("two guests");
        a.wait_ready(started, spec.boot_limit)?;
        b.wait_ready(started, spec.boot_limit)?;
        for (g, addr) in [(&mut a, VM_A_ADDR), (&mut b, VM_B_ADDR)] {
            let (rc, out) = g.sh(
                &format!("ip addr add {addr}/24 dev eth0 && ip link set eth0 up"),
                Duration::from_secs(60),
            )?;
            if rc != 0 {
                return Err(LabError::Invalid(format!(
                    "guest {}: addressing eth0: {out}",
                    g.name
                )));
            }
        }
        Ok(VmPair {
            retried: None,
            a,
            b,
            image,
            nic: spec.nic,
            client_cpus: [0, 1],
            client_dev: "eth0".into(),
            virtual_time: None,
            net: Some(net),
            lab,
        })
    }

    /// The twin as a pair ([`twin`]): both ends in one guest of `spec.cpus + 2` vCPUs (the
    /// server's side keeps CPUs 0 and 1, as guest b of a pair does; the client's side gets the
    /// two above, its NIC's vectors with them), guest a being the channel into the client's
    /// namespace and guest b the root namespace, whose `eth0` is the server's NIC. What the
    /// lab runs between a pair's guests runs here unchanged; with `virtual_time`, on one clock.
    pub fn twin(tag: &str, spec: &VmPairSpec, virtual_time: Option<u32>) -> Result<VmPair> {
        let t = twin::Twin::boot(
            tag,
            &twin::TwinSpec {
                nic: spec.nic,
                kernel: spec.kernel.clone(),
                cpus: spec.cpus + 2,
                mem_mb: spec.mem_mb,
                virtual_time,
                boot_limit: spec.boot_limit,
            },
        )?;
        let twin::Twin {
            retried,
            mut peer,
            mut guest,
            image,
            server,
            client,
            lab,
            ..
        } = t;
        // Each side as a pair's guest would have it: a queue per CPU of its own (igb opened
        // one per vCPU of the whole twin), its vectors on its CPUs, read back.
        let client_cpus = [spec.cpus, spec.cpus + 1];
        let sides = [
            (
                &mut guest,
                &server,
                format!("0-{}", spec.cpus - 1),
                spec.cpus,
            ),
            (
                &mut peer,
                &client,
                format!("{}-{}", client_cpus[0], client_cpus[1]),
                2,
            ),
        ];
        for (g, end, cpus, queues) in sides {
            if spec.nic == NicModel::Igb {
                g.sh_ok(
                    &format!("chroot /host ethtool -L {} combined {queues}", end.dev),
                    twin::T,
                )?;
            }
            twin::pin_msi(g, &end.pci, &cpus)?;
        }
        twin::reachable(&mut guest, &client, &server)?;
        Ok(VmPair {
            retried,
            a: peer,
            b: guest,
            image,
            nic: spec.nic,
            client_cpus,
            client_dev: client.dev.clone(),
            virtual_time,
            net: None,
            lab,
        })
    }

    /// Gives both guests the program at `host_bin` (the host's netsteer) and returns its path
    /// inside `chroot /host`. The host path itself may not be visible there: the guest mounts
    /// its own tmpfs over /tmp (a clone under /tmp would be shadowed), so the program goes
    /// through each guest's scratch share instead (one copy, hard-linked for the second).
    pub fn install(&self, host_bin: &Path) -> Result<String> {
        install_into(host_bin, &[&self.a, &self.b])
    }
}

#[cfg(test)]
mod retry_tests {
    use super::*;

    fn crashed() -> LabError {
        LabError::EmulatorCrashed {
            guest: "a".into(),
            detail: "iotlb_to_section: Assertion failed".into(),
        }
    }

    #[test]
    fn an_emulator_failure_boots_once_more_and_says_so_and_nothing_else_does() {
        let mut n = 0;
        let (v, note) = once_more_after_a_crash(|| {
            n += 1;
            if n == 1 { Err(crashed()) } else { Ok(7) }
        })
        .unwrap();
        assert_eq!((v, n), (7, 2));
        assert!(note.unwrap().contains("booted once more"));
        // A stall twice is the error: one retry, not a loop.
        let mut n = 0;
        let r: Result<(u8, _)> = once_more_after_a_crash(|| {
            n += 1;
            Err(LabError::BootStalled {
                guest: "b".into(),
                seconds: 150,
                detail: String::new(),
            })
        });
        assert!(matches!(r, Err(LabError::BootStalled { .. })));
        assert_eq!(n, 2);
        // Any other failure is not the emulator's: no retry.
        let mut n = 0;
        let r: Result<(u8, _)> = once_more_after_a_crash(|| {
            n += 1;
            Err(LabError::Invalid("bad spec".into()))
        });
        assert!(r.is_err());
        assert_eq!(n, 1);
        // A success is not retried and carries no note.
        let (_, note) = once_more_after_a_crash(|| Ok(())).unwrap();
        assert!(note.is_none());
    }
}
