//! `netsteer watch` through the binary on the live host, advice mode (it writes nothing): it
//! runs for its duration, every line is a JSON event, and a cap past the hard ceiling is
//! refused naming the flag before anything runs.

const BIN: &str = env!("CARGO_BIN_EXE_netsteer");

#[test]
fn advice_mode_runs_for_its_duration_and_speaks_json_lines() {
    let state = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(BIN)
        .args(["watch", "--interval", "0.5", "--duration", "2", "--json"])
        .arg("--state-dir")
        .arg(state.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let e: netsteer_steering::watch::Event =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert!(
            !matches!(e, netsteer_steering::watch::Event::Applied { .. }),
            "advice mode applied: {line}"
        );
    }
    // Advice mode keeps no journal.
    assert!(!state.path().join("watch/journal").exists());
}

#[test]
fn a_cap_past_its_ceiling_is_refused_naming_the_flag() {
    for (flag, v) in [
        ("--max-budget-usecs", "50000"),
        ("--max-backlog", "0"),
        ("--interval", "0.05"),
    ] {
        let out = std::process::Command::new(BIN)
            .args(["watch", flag, v, "--duration", "1"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag} {v}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag), "{flag}: {err}");
    }
}
