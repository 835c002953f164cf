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

#[test]
fn the_binary_only_speaks_in_under_2500_lines() {
    let mut files = Vec::new();
    rust_files(&workspace().join("crates/cli/src"), &mut files);
    let total: usize = files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap().lines().count())
        .sum();
    assert!(total < 2500, "crates/cli/src has {total} lines");
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
    assert!(spreads[0].ends_with("bench/src/stats.rs"), "{spreads:?}");
    assert_eq!(setns.len(), 1, "{setns:?}");
    assert!(setns[0].ends_with("sock/src/netns.rs"), "{setns:?}");
}
