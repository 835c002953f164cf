//! The shape of the workspace, checked: the limits issue 39 set, so that they hold after it.

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every crate's `src` files (tests/ and fuzz/ are not sources).
fn sources() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for c in std::fs::read_dir(workspace().join("crates")).unwrap() {
        let src = c.unwrap().path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut out);
        }
    }
    assert!(out.len() > 50, "found only {} sources", out.len());
    out
}

/// Lines before a file's `#[cfg(test)]` module: its code, without its unit tests.
fn code_lines(text: &str) -> usize {
    text.lines()
        .take_while(|l| l.trim() != "#[cfg(test)]")
        .count()
}

#[test]
fn no_source_file_over_1000_lines_of_code() {
    let long: Vec<String> = sources()
        .iter()
        .filter_map(|p| {
            let n = code_lines(&std::fs::read_to_string(p).unwrap());
            (n > 1000).then(|| format!("{}: {n}", p.display()))
        })
        .collect();
    assert!(long.is_empty(), "{long:#?}");
}

/// Code lines (comments dropped) of every file under `dir`, with their file.
fn code_of(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for l in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
            out.push((f.clone(), l.to_string()));
        }
    }
    out
}

/// The binary only speaks: no tune state handling (journals, renames of state directories,
/// removals), no search or experiment loop, no netlink or sysfs writes of its own. Each of those
/// lives in a library where a test can reach it without the command line.
#[test]
fn the_binary_only_speaks() {
    const DECISIONS: &[(&str, &str)] = &[
        (
            "journal::",
            "tune's journal is the Tuner's to read and write",
        ),
        ("fs::rename", "state directories are swapped by the Tuner"),
        ("remove_dir", "state directories are removed by the Tuner"),
        (
            "remove_file",
            "files netsteer owns are removed by the library that made them",
        ),
        (".screen(", "the search's loop is tune::search::run"),
        (".confirm(", "the search's loop is tune::search::run"),
        (
            "Experiment::new",
            "an experiment is built by its library (lab, Tuner)",
        ),
        (
            "planner::",
            "plans are made by tune's PlanOptions, not assembled here",
        ),
        (
            "OpenOptions",
            "output files are made by netsteer_host::output::NewFile",
        ),
        ("std::fs::write", "knobs are written by tune's Backend"),
    ];
    let mut found = Vec::new();
    for (f, l) in code_of(&workspace().join("crates/cli/src")) {
        for (needle, why) in DECISIONS {
            if l.contains(needle) {
                found.push(format!("{}: {} ({why})", f.display(), l.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "logic in the binary:\n{}",
        found.join("\n")
    );
}

/// Flags live in the binary (docs/architecture.md, "Where flags live"): no library defines a
/// clap `Args`, `Subcommand` or `Parser`, and a library that names clap at all does so behind
/// an optional feature, only to derive `ValueEnum` on its own choice types.
#[test]
fn flags_live_in_the_binary() {
    let crates = workspace().join("crates");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&crates).unwrap() {
        let dir = entry.unwrap().path();
        if dir.ends_with("cli") {
            continue;
        }
        for (f, l) in code_of(&dir.join("src")) {
            for needle in [
                "clap::Args",
                "clap::Subcommand",
                "clap::Parser",
                "derive(Args",
                "derive(Subcommand",
                "derive(Parser",
                "#[arg(",
                "#[command(",
                "use clap::",
            ] {
                if l.contains(needle) {
                    found.push(format!("{}: {}", f.display(), l.trim()));
                }
            }
        }
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        // The dependency line (a feature line `clap = ["dep:clap"]` holds a list).
        for l in manifest
            .lines()
            .filter(|l| l.starts_with("clap") && !l.contains('['))
        {
            if !l.contains("optional = true") {
                found.push(format!("{}: {l}", dir.join("Cargo.toml").display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "flags outside the binary:\n{}",
        found.join("\n")
    );
}

#[test]
fn doctor_and_tune_do_not_import_each_other() {
    let steering = workspace().join("crates/steering/src");
    for (dir, other) in [("doctor", "crate::tune"), ("tune", "crate::doctor")] {
        let mut files = Vec::new();
        rust_files(&steering.join(dir), &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            let code = text.lines().filter(|l| !l.trim_start().starts_with("//"));
            for l in code {
                assert!(!l.contains(other), "{}: {l}", f.display());
            }
        }
    }
}

#[test]
fn one_spread_and_one_namespace_thread_helper() {
    let mut spreads = Vec::new();
    let mut setns = Vec::new();
    for p in sources() {
        let text = std::fs::read_to_string(&p).unwrap();
        if text.contains("pub struct Spread") || text.contains("\nstruct Spread") {
            spreads.push(p.display().to_string());
        }
        if text.contains("libc::setns(") || text.contains("netns::enter(") {
            setns.push(p.display().to_string());
        }
    }
    assert_eq!(spreads.len(), 1, "{spreads:?}");
    assert!(
        spreads[0].ends_with("experiment/src/stats.rs"),
        "{spreads:?}"
    );
    assert_eq!(setns.len(), 1, "{setns:?}");
    assert!(setns[0].ends_with("sock/src/netns.rs"), "{setns:?}");
}

/// How an apply, a step or a rollback ended is an enum (`tune::status`), never text compared
/// (issue 73): no source compares a `status` with a string literal or builds one from one.
#[test]
fn statuses_are_enums_not_text() {
    let words = [
        "applied",
        "rolled-back",
        "rollback-incomplete",
        "changed",
        "unchanged",
        "rewritten",
        "skipped",
        "restored",
        "nothing-to-do",
        "incomplete",
    ];
    let mut found = Vec::new();
    for (f, line) in code_of(&workspace().join("crates")) {
        if f.ends_with("tune/status.rs") || f.components().any(|c| c.as_os_str() == "tests") {
            continue;
        }
        let l = line.replace(' ', "");
        let compared = ["status==\"", "status!=\"", "status:\""]
            .iter()
            .any(|p| words.iter().any(|w| l.contains(&format!("{p}{w}\""))));
        let matched = ["(\"applied\"", "Some(\"applied\""]
            .iter()
            .any(|p| l.contains(p));
        if compared || matched {
            found.push(format!("{}: {}", f.display(), line.trim()));
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

/// A plan item's id (`irq/41`, `rps/eth0/rx-3`, `nic/eth0/channels/combined`, …) is spelled and
/// read back in one place, `model/knob.rs`: no other steering source formats an id's first
/// word, strips it off, compares an id with one or matches on it to find what the item names
/// (a rollback once took an item's kind from its id's first word, which a journal's writer
/// chooses).
#[test]
fn item_ids_are_spelled_in_one_place() {
    let words = [
        "irq",
        "rps",
        "rfs",
        "xps",
        "nic",
        "napi",
        "napi-thread",
        "process",
        "service",
        "sysctl",
    ];
    let mut found = Vec::new();
    for (f, line) in code_of(&workspace().join("crates/steering/src")) {
        if f.ends_with("model/knob.rs") {
            continue;
        }
        let l = line.replace(' ', "");
        let spelled = words.iter().any(|w| {
            [
                format!("format!(\"{w}/"),
                format!("strip_prefix(\"{w}/\")"),
                format!("starts_with(\"{w}/\")"),
                format!("\"{w}/irqbalance\""),
                format!("==\"{w}/"),
                format!("!=\"{w}/"),
                format!("\"{w}\"=>"),
            ]
            .iter()
            .any(|p| l.contains(p.as_str()))
        }) || l.contains("format!(\"set{");
        if spelled {
            found.push(format!("{}: {}", f.display(), line.trim()));
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

/// A knob's file path (`/proc/irq/41/smp_affinity_list`, `/sys/class/net/eth0/queues/rx-3/
/// rps_cpus`, `/proc/sys/net/core/busy_poll`, a device's NAPI defaults) is parsed and spelled
/// by `model/knob.rs` alone, which also maps it to an item id: no other
/// steering source formats one, strips a prefix off one to learn what it is, or names a
/// `Target::File` (the variant for what is no knob) to find a knob in it (issue 73: the same
/// path was re-parsed for its kind, format, device and IRQ in nine places).
#[test]
fn knob_paths_are_parsed_in_one_place() {
    let spelled = [
        "format!(\"/proc/irq/",
        "format!(\"/proc/sys/",
        "(\"/proc/sys/\")",
        "(\"/proc/irq/\")",
        "(\"/sys/class/net/\")",
        "/queues/rx-{",
        "/queues/tx-{",
        "}/gro_flush_timeout\"",
        "}/napi_defer_hard_irqs\"",
        "}/threaded\"",
        "Target::File{path}",
        "Target::File{..}",
    ];
    // Whole files with every space and line break taken out, so that a `format!(` whose
    // literal rustfmt put on the next line is seen as well.
    let mut by_file: std::collections::BTreeMap<PathBuf, String> = Default::default();
    for (f, line) in code_of(&workspace().join("crates/steering/src")) {
        if f.ends_with("model/knob.rs") {
            continue;
        }
        by_file
            .entry(f)
            .or_default()
            .extend(line.chars().filter(|c| !c.is_whitespace()));
    }
    let mut found = Vec::new();
    for (f, text) in &by_file {
        for p in spelled {
            if text.contains(p) {
                found.push(format!("{}: {p}", f.display()));
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

/// A reflex is a function from the interval's signals (`watch/signals.rs`) to proposals: the
/// reflex files hold no `impl Watcher` (which would put the tuner, the journals and the
/// guard's state in its reach), and the watcher reaches doctor's judgments through
/// `doctor::shared`, not a rule file's insides (issue 73).
#[test]
fn reflexes_are_functions_of_their_signals() {
    let mut found = Vec::new();
    let watch = workspace().join("crates/steering/src/watch");
    for (f, line) in code_of(&watch) {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        let reflex = ["backlog.rs", "budget.rs", "doctor.rs"].contains(&name.as_str());
        if (reflex && line.contains("impl Watcher")) || line.contains("doctor::rules::") {
            found.push(format!("{}: {}", f.display(), line.trim()));
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

/// The arrows docs/architecture.md allows, `crate -> deps` per line after its `crate arrows`
/// marker ("netsteer-" dropped from the names).
fn documented_arrows() -> std::collections::BTreeMap<String, Vec<String>> {
    let doc = std::fs::read_to_string(workspace().join("docs/architecture.md")).unwrap();
    let block = doc
        .split("<!-- crate arrows -->")
        .nth(1)
        .expect("docs/architecture.md has its crate arrows")
        .split("```")
        .nth(1)
        .expect("the arrows' code block");
    block
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once("->"))
        .map(|(from, to)| {
            let mut to: Vec<String> = to.split_whitespace().map(str::to_string).collect();
            to.sort();
            (from.trim().to_string(), to)
        })
        .collect()
}

/// The workspace's real arrows: each crate's normal dependencies on the others, from
/// `cargo metadata`.
fn real_arrows() -> std::collections::BTreeMap<String, Vec<String>> {
    arrows_of_kinds(false)
}

/// The workspace's arrows from `cargo metadata`: normal dependencies, and with `dev` also the
/// tests' (a test-only arrow is still an arrow for the build order and the reader).
fn arrows_of_kinds(dev: bool) -> std::collections::BTreeMap<String, Vec<String>> {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(workspace())
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let short = |n: &str| n.strip_prefix("netsteer-").unwrap_or(n).to_string();
    let pkgs = m["packages"].as_array().unwrap();
    let names: Vec<&str> = pkgs.iter().map(|p| p["name"].as_str().unwrap()).collect();
    pkgs.iter()
        .map(|p| {
            let mut deps: Vec<String> = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null() || (dev && d["kind"] == "dev"))
                .map(|d| d["name"].as_str().unwrap())
                .filter(|d| names.contains(d))
                .map(short)
                .collect();
            deps.sort();
            deps.dedup();
            (short(p["name"].as_str().unwrap()), deps)
        })
        .collect()
}

/// The crate graph is the one docs/architecture.md draws: an arrow it does not allow (policy
/// importing an engine, a reader importing the binary) fails here, and so does one it lists
/// that went, so the page cannot drift again. Shown failing once by adding `netsteer-bench` to
/// steering's dependencies (the closing note of issue 54).
#[test]
fn the_crate_graph_is_the_one_the_architecture_page_draws() {
    let doc = documented_arrows();
    let real = real_arrows();
    let mut wrong = Vec::new();
    for (krate, deps) in &real {
        match doc.get(krate) {
            None => wrong.push(format!("{krate}: not on the page")),
            Some(allowed) => {
                for d in deps.iter().filter(|d| !allowed.contains(d)) {
                    wrong.push(format!("{krate} -> {d}: an arrow the page does not allow"));
                }
                for d in allowed.iter().filter(|d| !deps.contains(d)) {
                    wrong.push(format!("{krate} -> {d}: on the page, not in Cargo.toml"));
                }
            }
        }
    }
    for krate in doc.keys().filter(|k| !real.contains_key(*k)) {
        wrong.push(format!("{krate}: on the page, not in the workspace"));
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // Policy never compiles an engine.
    for engine in ["bench", "netchannel"] {
        assert!(
            !real["steering"].contains(&engine.to_string()),
            "steering -> {engine}"
        );
        assert!(
            !real["experiment"].contains(&engine.to_string()),
            "experiment -> {engine}"
        );
    }
}

/// No cycle among the crates, counting the tests' dependencies: netchannel's tests once used
/// the lab, which builds on bench, which builds on netchannel.
#[test]
fn no_crate_cycle_even_through_tests() {
    let arrows = arrows_of_kinds(true);
    // Depth-first from each crate; a crate met again on its own path is a cycle.
    fn visit(
        c: &str,
        arrows: &std::collections::BTreeMap<String, Vec<String>>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == c) {
            let mut cycle = path[at..].to_vec();
            cycle.push(c.to_string());
            return Some(cycle);
        }
        path.push(c.to_string());
        for d in arrows.get(c).into_iter().flatten() {
            if let Some(cycle) = visit(d, arrows, path) {
                return Some(cycle);
            }
        }
        path.pop();
        None
    }
    for c in arrows.keys() {
        if let Some(cycle) = visit(c, &arrows, &mut Vec::new()) {
            panic!("a crate cycle: {}", cycle.join(" -> "));
        }
    }
}
