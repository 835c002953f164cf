//! The one test-support module every crate's live tests share (included by path, so no crate
//! depends on another for its tests): what a live test does when this machine cannot run it,
//! and the check that it can. Under CI (`CI=true`) a test that cannot run fails instead of
//! passing: libtest hides a passing test's output, so a quiet skip would turn CI green having
//! tested nothing live.
#![allow(dead_code)]

/// True when the tests run under CI (`CI=true` or `CI=1`).
pub fn is_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// A live test that cannot run here: a failure under CI, else a line saying it was skipped.
pub fn cannot_run(why: &str) {
    if is_ci() {
        panic!("live test cannot run under CI=true: {why}");
    }
    eprintln!("SKIPPED: {why}");
}

/// Whether this process runs as root (effective uid 0), read from /proc/self/status so that
/// the module needs no crate.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Root and every `(tool, Debian package)` on PATH, or why not (for [`cannot_run`]).
pub fn root_and_tools(tools: &[(&str, &str)]) -> Result<(), String> {
    if !is_root() {
        return Err("needs root (network namespaces)".into());
    }
    for (tool, package) in tools {
        let found = std::process::Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Err(format!("{tool} is not installed (Debian {package})"));
        }
    }
    Ok(())
}

/// The redis tools the preload and proxy tests drive (a real cache server and its benchmark).
pub const REDIS_TOOLS: &[(&str, &str)] = &[
    ("redis-server", "redis-server"),
    ("redis-benchmark", "redis-tools"),
    ("redis-cli", "redis-tools"),
    ("ss", "iproute2"),
];
