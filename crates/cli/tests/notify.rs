//! Root-only, live: the ethtool netlink monitor group on this machine's kernel, inside a lab
//! namespace of the test's own. A channel change on its veth (`ethtool -L`, the command users
//! run) comes back as a CHANNELS notification naming the device, and nothing is heard from a
//! namespace the socket does not belong to. Whether the kernel announces RSS changes (6.17+)
//! is read from the ethtool family's commands, checked here against the running release.

mod common;

use netsteer_nic::{Change, Monitor};
use std::process::Command;
use std::time::{Duration, Instant};

fn release_at_least(major: u32, minor: u32) -> bool {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut parts = r.trim().split(['.', '-']);
    let a: u32 = parts.next().unwrap().parse().unwrap();
    let b: u32 = parts.next().unwrap().parse().unwrap();
    (a, b) >= (major, minor)
}

#[test]
fn a_channel_change_is_announced_to_the_namespace_that_made_it() {
    if let Err(why) = common::root_and_tools(&[("ip", "iproute2"), ("ethtool", "ethtool")]) {
        common::cannot_run(&why);
        return;
    }
    let pair = common::Pair::create(4);
    let server = pair.server.path();
    let (got, took, rss) = common::in_netns(&server, || {
        let mut m = Monitor::open().expect("the ethtool monitor group");
        let started = Instant::now();
        // Forked from this thread: the command runs in its namespace.
        let out = Command::new("ethtool")
            .args(["-L", "v0b", "rx", "2"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let mut got = Vec::new();
        while got.is_empty() && started.elapsed() < Duration::from_secs(5) {
            got.extend(m.wait(Duration::from_millis(500)).unwrap().0);
        }
        (got, started.elapsed(), m.announces_rss)
    });
    eprintln!(
        "heard {got:?} {:.1} ms after ethtool started",
        took.as_secs_f64() * 1e3
    );
    let n = got
        .iter()
        .find(|n| n.change == Change::Channels)
        .unwrap_or_else(|| panic!("no channels notification: {got:?}"));
    assert_eq!(n.dev.as_deref(), Some("v0b"));
    assert!(n.ifindex.is_some_and(|i| i > 0), "{n:?}");
    assert_eq!(
        rss,
        release_at_least(6, 17),
        "RSS notifications on this kernel"
    );

    // The client's namespace hears nothing of the server's changes.
    let client = pair.client.path();
    let heard = common::in_netns(&client, || {
        let mut m = Monitor::open().unwrap();
        let out = pair.server.exec(&["ethtool", "-L", "v0b", "rx", "3"]);
        assert!(out.status.success(), "{out:?}");
        m.wait(Duration::from_millis(500)).unwrap().0
    });
    assert!(heard.is_empty(), "{heard:?}");
}
