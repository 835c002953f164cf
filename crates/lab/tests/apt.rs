//! The lab's private apt configuration: kernels of other Debian suites are found and can be
//! downloaded, while the machine's own apt never sees those suites (nothing from them can be
//! installed on the host). Uses the real archive the machine is configured with.

use netsteer_lab::vm::image::{Apt, kernel_package};
use std::process::Command;

fn host_policy() -> String {
    let out = Command::new("apt-cache")
        .args(["policy", "linux-image-amd64"])
        .output()
        .expect("apt-cache (is this Debian?)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn other_suites_kernels_come_from_a_private_list_the_host_never_reads() {
    if !std::path::Path::new("/etc/debian_version").exists() {
        assert!(std::env::var("CI").is_err(), "CI runs on Debian");
        eprintln!("SKIPPED: not Debian");
        return;
    }
    let before = host_policy();
    let sources_before = std::fs::read_dir("/etc/apt/sources.list.d")
        .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
        .unwrap_or_default();
    let (pkg, apt) = kernel_package(Some("5.10")).expect("5.10 from bullseye");
    assert!(pkg.starts_with("linux-image-5.10."), "{pkg}");
    let dir = apt.dir.expect("a private configuration");
    assert!(dir.join("etc/sources.list").is_file());
    let list = std::fs::read_to_string(dir.join("etc/sources.list")).unwrap();
    assert!(
        list.contains(" bullseye main") && list.contains(" trixie-backports main"),
        "{list}"
    );
    // The host's apt is as it was: no new source file, no other suite in its policy.
    let sources_after = std::fs::read_dir("/etc/apt/sources.list.d")
        .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
        .unwrap_or_default();
    assert_eq!(sources_before, sources_after);
    let after = host_policy();
    assert_eq!(before, after);
    for suite in ["bullseye", "trixie"] {
        assert!(
            !after.contains(&format!(" {suite}/")),
            "the host's apt lists {suite}: {after}"
        );
    }
    // The host's own suites still answer first: 6.1 is the host's.
    let (pkg, apt) = kernel_package(Some("6.1")).unwrap();
    assert!(pkg.starts_with("linux-image-6.1."), "{pkg}");
    assert!(apt.dir.is_none());
    let _ = Apt::host();
}
