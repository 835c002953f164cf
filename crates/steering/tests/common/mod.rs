//! Fixture trees for the tests: found in the repository, copied to a temp dir, read back
//! byte for byte.
#![allow(dead_code)]

use netsteer_host::view::HostView;
use netsteer_steering::doctor::{Load, LoadSource};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

pub fn fixture(host: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/hosts")
        .join(host)
}

/// Copies a tree (links kept as links) into a fresh temp dir.
pub fn copy_tree(from: &Path) -> tempfile::TempDir {
    fn copy(from: &Path, to: &Path) {
        for e in fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            let (src, dst) = (e.path(), to.join(e.file_name()));
            let ft = e.file_type().unwrap();
            if ft.is_symlink() {
                std::os::unix::fs::symlink(fs::read_link(&src).unwrap(), &dst).unwrap();
            } else if ft.is_dir() {
                fs::create_dir(&dst).unwrap();
                copy(&src, &dst);
            } else {
                fs::copy(&src, &dst).unwrap();
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    copy(from, dir.path());
    dir
}

/// Every file's bytes and every link's target, by relative path.
pub fn contents(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            let ft = e.file_type().unwrap();
            if ft.is_symlink() {
                let mut t = b"link:".to_vec();
                t.extend(fs::read_link(&p).unwrap().to_string_lossy().bytes());
                out.insert(rel, t);
            } else if ft.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(rel, fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// A live sample of two seconds in which each rx queue of `dev` took `per_queue[q]` interrupts/s
/// and `udp` UDP datagrams/s were delivered (the rates the RSS rules compare with the table).
pub fn sampled(view: &HostView, dev: &str, per_queue: &[f64], udp: f64) -> Load {
    use netsteer_host::irqname::IrqRole;
    use netsteer_host::sample::{IrqRate, NetRates, Rates};
    let nic = view.nic(dev).unwrap();
    let irqs = nic
        .irqs
        .iter()
        .filter_map(|i| match i.role {
            IrqRole::Rx(q) | IrqRole::RxTx(q) => Some((i, q)),
            _ => None,
        })
        .map(|(i, q)| {
            let v = per_queue.get(q as usize).copied().unwrap_or(0.0);
            IrqRate {
                irq: i.irq,
                name: i.name.clone(),
                per_cpu: std::iter::once((0, v)).collect(),
                total: v,
            }
        })
        .collect();
    Load {
        source: LoadSource::Sampled,
        seconds: 2.0,
        cpu: Rates {
            interval_s: 2.0,
            irqs,
            ..Default::default()
        },
        net: NetRates {
            devices: Vec::new(),
            udp_in: Some(udp),
            udp_rcvbuf_errors: Some(0.0),
        },
    }
}

/// A fixture tree as doctor sees it offline: the host view with its recorded NIC settings and
/// the since-boot load.
pub fn offline(host: &str) -> (HostView, Load) {
    use netsteer_host::ethtool::NicSettings;
    use netsteer_host::sample::{parse_uptime, read_net_counters, read_sample};
    let dir = fixture(host);
    let fs = netsteer_host::HostFs::open(&dir).unwrap();
    let ethtool = netsteer_host::capture::read_tree_ethtool(&dir).unwrap();
    let settings = move |n: &str| {
        ethtool
            .get(n)
            .cloned()
            .unwrap_or_else(|| NicSettings::unavailable("not recorded"))
    };
    let view = netsteer_host::read_host(&fs, Some(&settings));
    let sample = read_sample(&fs).unwrap();
    let net = read_net_counters(&fs);
    let uptime = fs.read_parsed("/proc/uptime", parse_uptime).unwrap();
    (view, Load::since_boot(&sample, &net, uptime))
}
