//! The twin: both ends of a measurement in one QEMU process. One guest has two NICs of the
//! model under test on the same QEMU hub (`-netdev hubport`, the same `hubid`), so a frame one
//! sends the other receives, through both emulated devices and both guest drivers, with real
//! MSI-X interrupts at each end; the client's NIC is moved into a network namespace of its
//! own inside the guest ([`PEER_NS`]), so the kernel cannot short-cut the route over loopback.
//!
//! Why one process: QEMU's virtual time (`-icount`) makes the guest's clock follow the
//! instructions it runs rather than the host's clock, so a busy host slows the guest down
//! without making its latencies larger — but only within one QEMU process. Two guests on a
//! tap bridge ([`super::VmPair`]) each keep their own clock, and the host's scheduler sits
//! between them. With `shift=0` one instruction is one nanosecond of the guest's clock, so a
//! round trip's "ns" is the instructions both ends ran for it (plus the device models' timers,
//! which run on the same clock). See docs/lab.md for what that does not represent.
//!
//! The twin also runs on the host's clock (no `-icount`, multi-threaded TCG), which separates
//! the two effects: one process, and virtual time.

use super::image::Image;
use super::{Guest, GuestSpec, NicModel, VM_A_ADDR, VM_B_ADDR};
use crate::{Lab, LabError, Result};
use std::path::Path;
use std::time::{Duration, Instant};

/// The namespace inside the guest that holds the client's NIC.
pub const PEER_NS: &str = "peer";
/// The NICs' MACs: the server's (root namespace, [`VM_B_ADDR`]) and the client's ([`PEER_NS`],
/// [`VM_A_ADDR`]); the guest's interface names are found from them.
const SERVER_MAC: &str = "52:54:00:54:57:02";
const CLIENT_MAC: &str = "52:54:00:54:57:01";
/// How long one setup command in the twin may take.
pub(super) const T: Duration = Duration::from_secs(120);

/// A twin guest's shape.
#[derive(Debug, Clone)]
pub struct TwinSpec {
    /// Both NICs' model. A hub port carries one queue, so virtio-net has one queue pair here;
    /// igb emulates its own queues and RSS behind the one port.
    pub nic: NicModel,
    /// The guest kernel's series (`6.12`, `7.3`); None: the apt candidate.
    pub kernel: Option<String>,
    pub cpus: u32,
    pub mem_mb: u32,
    /// `Some(shift)`: virtual time, each instruction 2^shift ns of the guest's clock.
    pub virtual_time: Option<u32>,
    pub boot_limit: Duration,
}

impl Default for TwinSpec {
    fn default() -> Self {
        TwinSpec {
            nic: NicModel::Igb,
            kernel: None,
            cpus: 2,
            mem_mb: 1024,
            virtual_time: Some(0),
            boot_limit: Duration::from_secs(300),
        }
    }
}

impl TwinSpec {
    /// `one guest, 2 vCPUs, two igb NICs on one hub, virtual time (icount shift 0), kernel 7.3`.
    pub fn describe(&self) -> String {
        format!(
            "one guest, {} vCPUs, two {} NICs on one hub, {}, kernel {}",
            self.cpus,
            self.nic.name(),
            match self.virtual_time {
                Some(s) => format!("virtual time (icount shift {s})"),
                None => "the host's clock".to_string(),
            },
            self.kernel.as_deref().unwrap_or("of the apt candidate")
        )
    }

    /// QEMU's arguments for the two NICs: hub ports of hub 0, one device each.
    pub fn nic_args(&self) -> Vec<String> {
        let mut a = Vec::new();
        // Fixed slots two apart: QEMU's igb puts its SR-IOV VFs 16 slots above its own
        // (devfn + 0x80, two functions each, hw/net/igb.c), so two igbs left to pick adjacent
        // slots collide on their VFs' slot and QEMU refuses to start.
        // The server's first: the guest names it eth0 (as in a pair's guest b, so the lab's
        // runs address it alike); `join` makes sure of it.
        for (i, (mac, slot)) in [(SERVER_MAC, 0x0a), (CLIENT_MAC, 0x0c)].iter().enumerate() {
            let id = format!("t{i}");
            a.push("-netdev".into());
            a.push(format!("hubport,id={id},hubid=0"));
            a.push("-device".into());
            let dev = match self.nic {
                NicModel::Igb => format!("igb,netdev={id}"),
                NicModel::E1000e => format!("e1000e,netdev={id}"),
                NicModel::Virtio => format!("virtio-net-pci,netdev={id}"),
                NicModel::VirtioRss => format!("virtio-net-pci,netdev={id},rss=on,hash=on"),
            };
            a.push(format!("{dev},mac={mac},addr={slot:#04x}"));
        }
        a
    }
}

/// One end's NIC inside the twin: its interface name and its PCI function (whose `msi_irqs`
/// stay listed in sysfs whatever namespace the interface is in).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct End {
    pub dev: String,
    pub pci: String,
}

/// A booted twin: the server's NIC up in the root namespace as `eth0` and [`VM_B_ADDR`], the
/// client's in [`PEER_NS`] as [`VM_A_ADDR`], the link checked end to end. `guest` runs
/// commands in the root namespace, `peer` (a second serial channel into the same guest) in
/// [`PEER_NS`]. Killed when dropped.
pub struct Twin {
    /// Set when the first boot's emulator crashed and the guest was booted again.
    pub retried: Option<String>,
    pub peer: Guest,
    pub guest: Guest,
    pub image: Image,
    pub spec: TwinSpec,
    pub server: End,
    pub client: End,
    // Last: the lab's scratch outlives the guest that writes into it.
    pub lab: Lab,
}

impl Twin {
    /// Boots the guest and joins its two NICs; once more when QEMU itself crashed or stalled
    /// before the guest was up (said on stderr, kept in [`Twin::retried`]).
    pub fn boot(tag: &str, spec: &TwinSpec) -> Result<Twin> {
        let (mut t, retried) = super::once_more_after_a_crash(|| Self::boot_once(tag, spec))?;
        t.retried = retried;
        Ok(t)
    }

    fn boot_once(tag: &str, spec: &TwinSpec) -> Result<Twin> {
        spec.nic.check_qemu()?;
        let (mut guest, image, lab) = super::boot_single(
            tag,
            spec.kernel.as_deref(),
            &GuestSpec {
                name: "twin".into(),
                cpus: spec.cpus,
                mem_mb: spec.mem_mb,
                nic: None,
                mac: String::new(),
                extra: spec.nic_args(),
                virtual_time: spec.virtual_time,
                peer_channel: true,
            },
            spec.boot_limit,
        )?;
        let (server, client) = join(&mut guest)?;
        let mut peer = guest.peer("twin-peer")?;
        peer.wait_ready(Instant::now(), T)?;
        peer.release = guest.release.clone();
        Ok(Twin {
            retried: None,
            peer,
            guest,
            image,
            spec: spec.clone(),
            server,
            client,
            lab,
        })
    }

    /// Gives the guest the program at `host_bin` and returns its path inside `chroot /host`.
    pub fn install(&self, host_bin: &Path) -> Result<String> {
        super::install_into(host_bin, &[&self.guest])
    }
}

/// Waits until a ping from the client's namespace crosses the hub to the server (the emulated
/// PHYs take a moment to come up, and again after a channel change resets the device).
pub(super) fn reachable(g: &mut Guest, client: &End, server: &End) -> Result<()> {
    let (rc, out) = g.sh(
        &format!(
            "i=0; while [ $i -lt 60 ]; do chroot /host /bin/ip netns exec {PEER_NS} busybox ping -c 1 -W 1 {VM_B_ADDR} >/dev/null 2>&1 && exit 0; i=$((i+1)); sleep 0.5; done; chroot /host /bin/ip -n {PEER_NS} addr; chroot /host /bin/ip addr; exit 1"
        ),
        T,
    )?;
    if rc != 0 {
        return Err(LabError::Invalid(format!(
            "guest {}: {} ({PEER_NS}) never reached {} across the hub: {out}",
            g.name, client.dev, server.dev
        )));
    }
    Ok(())
}

/// Moves every MSI/MSI-X vector of the PCI function `pci` to `cpus` (an affinity list: `1`,
/// `0-1`), each read back; their IRQ numbers. A function without MSI vectors is an error: the
/// lab's NICs all have them, and what has none cannot be pinned by vector.
pub(super) fn pin_msi(g: &mut Guest, pci: &str, cpus: &str) -> Result<Vec<u32>> {
    let out = g.sh_ok(&format!("ls /sys/bus/pci/devices/{pci}/msi_irqs"), T)?;
    let irqs: Vec<u32> = out
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    if irqs.is_empty() {
        return Err(LabError::Invalid(format!(
            "guest {}: {pci} lists no MSI vectors",
            g.name
        )));
    }
    let list: Vec<String> = irqs.iter().map(u32::to_string).collect();
    g.sh_ok(
        &format!(
            "for i in {}; do echo {cpus} > /proc/irq/$i/smp_affinity_list && [ \"$(cat /proc/irq/$i/smp_affinity_list)\" = {cpus} ] || {{ echo IRQ $i reads $(cat /proc/irq/$i/smp_affinity_list), not {cpus}; exit 1; }}; done",
            list.join(" ")
        ),
        T,
    )?;
    Ok(irqs)
}

/// `dev`'s PCI function, from its device link in sysfs.
pub(super) fn end_of(g: &mut Guest, dev: &str) -> Result<End> {
    let path = g.sh_ok(&format!("readlink -f /sys/class/net/{dev}/device"), T)?;
    let pci = pci_function(&path).ok_or_else(|| {
        LabError::Invalid(format!(
            "guest {}: {dev} is on no PCI function ({})",
            g.name,
            path.trim()
        ))
    })?;
    Ok(End {
        dev: dev.to_string(),
        pci,
    })
}

/// The PCI function (`0000:00:0a.0`) a device's sysfs path is under: the device itself (igb,
/// e1000e) or a parent (virtio-net's device is `virtio2`, a child of its PCI function).
pub fn pci_function(sysfs_path: &str) -> Option<String> {
    let is_bdf = |c: &str| {
        let b = c.as_bytes();
        c.len() == 12
            && b[4] == b':'
            && b[7] == b':'
            && b[10] == b'.'
            && c.chars()
                .enumerate()
                .all(|(i, ch)| matches!(i, 4 | 7 | 10) || ch.is_ascii_hexdigit())
    };
    sysfs_path
        .trim()
        .rsplit('/')
        .find(|c| is_bdf(c))
        .map(str::to_string)
}

/// The interface whose MAC is `mac` in `ip -o link` output.
pub fn interface_with_mac(ip_o_link: &str, mac: &str) -> Option<String> {
    ip_o_link.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let _index = f.next()?;
        let name = f.next()?.trim_end_matches(':');
        let name = name.split('@').next()?;
        let rest: Vec<&str> = f.collect();
        let i = rest.iter().position(|w| *w == "link/ether")?;
        (rest.get(i + 1)?.eq_ignore_ascii_case(mac)).then(|| name.to_string())
    })
}

/// Finds both NICs by MAC, moves the client's into [`PEER_NS`], names the server's `eth0`
/// (the guest named it so unless it probed the NICs out of slot order), addresses both, and
/// waits until a ping crosses the hub (the emulated PHYs take a moment to come up).
fn join(g: &mut Guest) -> Result<(End, End)> {
    let links = g.sh_ok("chroot /host /bin/ip -o link", T)?;
    let mut end = |mac: &str| -> Result<End> {
        let dev = interface_with_mac(&links, mac).ok_or_else(|| {
            LabError::Invalid(format!(
                "guest {}: no interface with MAC {mac} in `ip -o link`: {links}",
                g.name
            ))
        })?;
        end_of(g, &dev)
    };
    let mut server = end(SERVER_MAC)?;
    let mut client = end(CLIENT_MAC)?;
    // The path, not the name: busybox's chroot prefers its own applet of that name, and
    // busybox's ip has no netns.
    let ip = "chroot /host /bin/ip";
    if client.dev == "eth0" {
        // The server's name to be: the client's vectors are named after its interface when
        // it is opened, and two sets of `eth0-…` in /proc/interrupts would be summed as one NIC.
        g.sh_ok(&format!("{ip} link set eth0 name peer0"), T)?;
        client.dev = "peer0".into();
    }
    let c = &client.dev;
    g.sh_ok(&format!(
            "{ip} netns add {PEER_NS} && {ip} link set {c} netns {PEER_NS} && {ip} -n {PEER_NS} link set lo up && {ip} -n {PEER_NS} addr add {VM_A_ADDR}/24 dev {c} && {ip} -n {PEER_NS} link set {c} up"
        ),
        T,
    )?;
    if server.dev != "eth0" {
        // Down still (nothing opened it): a driver names its vectors after the interface when
        // it is opened, so they read `eth0-…` too.
        g.sh_ok(&format!("{ip} link set {} name eth0", server.dev), T)?;
        server.dev = "eth0".into();
    }
    let s = &server.dev;
    g.sh_ok(
        &format!("{ip} addr add {VM_B_ADDR}/24 dev {s} && {ip} link set {s} up"),
        T,
    )?;
    reachable(g, &client, &server)?;
    Ok((server, client))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nic_is_found_on_its_pci_function_itself_or_its_parent() {
        assert_eq!(
            pci_function("/sys/devices/pci0000:00/0000:00:0a.0\n").as_deref(),
            Some("0000:00:0a.0")
        );
        assert_eq!(
            pci_function("/sys/devices/pci0000:00/0000:00:0c.0/virtio3").as_deref(),
            Some("0000:00:0c.0")
        );
        // Behind a bridge: the function nearest the device.
        assert_eq!(
            pci_function("/sys/devices/pci0000:20/0000:20:00.0/0000:21:01.0").as_deref(),
            Some("0000:21:01.0")
        );
        assert_eq!(pci_function("/sys/devices/virtual/net/lo"), None);
        assert_eq!(pci_function(""), None);
    }

    #[test]
    fn interfaces_are_found_by_mac_whatever_the_guest_named_them() {
        let out = "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000\\    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00\n2: eth0: <BROADCAST,MULTICAST> mtu 1500 qdisc noop state DOWN mode DEFAULT group default qlen 1000\\    link/ether 52:54:00:54:57:01 brd ff:ff:ff:ff:ff:ff\n3: enp0s4@if9: <BROADCAST,MULTICAST> mtu 1500 qdisc noop state DOWN mode DEFAULT group default qlen 1000\\    link/ether 52:54:00:54:57:02 brd ff:ff:ff:ff:ff:ff\n";
        assert_eq!(interface_with_mac(out, CLIENT_MAC).as_deref(), Some("eth0"));
        assert_eq!(
            interface_with_mac(out, "52:54:00:54:57:02").as_deref(),
            Some("enp0s4")
        );
        assert_eq!(interface_with_mac(out, "52:54:00:54:57:03"), None);
    }

    #[test]
    fn both_nics_are_on_one_hub_and_virtual_time_is_said() {
        let s = TwinSpec::default();
        let a = s.nic_args();
        assert_eq!(a.iter().filter(|x| x.starts_with("hubport,")).count(), 2);
        assert!(
            a.iter()
                .filter(|x| x.starts_with("hubport,"))
                .all(|x| x.ends_with("hubid=0"))
        );
        assert!(
            a.iter().any(|x| x.contains(SERVER_MAC)) && a.iter().any(|x| x.contains(CLIENT_MAC))
        );
        assert!(s.describe().contains("virtual time (icount shift 0)"));
        let wall = TwinSpec {
            virtual_time: None,
            ..s
        };
        assert!(wall.describe().contains("the host's clock"));
    }
}
