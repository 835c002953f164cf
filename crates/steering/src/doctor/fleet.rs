//! Many hosts' doctor reports as one fleet view: each host's findings, and each rule's hosts,
//! so a support engineer sees at once which problem is everywhere and which is one host's.

use super::{Report, Severity};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const FLEET_SCHEMA_VERSION: u32 = 1;

/// One host of the fleet: its report, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetHost {
    /// A short name (the tree's directory name, made unique).
    pub host: String,
    /// The tree it was read from.
    pub root: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<Report>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A rule that fired on some hosts, at its worst severity there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetRule {
    pub id: String,
    pub severity: Severity,
    pub hosts: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetReport {
    pub schema_version: u32,
    pub hosts: Vec<FleetHost>,
    /// Most severe first, then the most widespread.
    pub rules: Vec<FleetRule>,
}

impl FleetReport {
    pub fn new(hosts: Vec<FleetHost>) -> FleetReport {
        let mut by_rule: BTreeMap<String, (Severity, Vec<String>)> = BTreeMap::new();
        for h in &hosts {
            let Some(r) = &h.report else { continue };
            for f in &r.findings {
                let e = by_rule
                    .entry(f.id.clone())
                    .or_insert((f.severity, Vec::new()));
                e.0 = e.0.max(f.severity);
                if !e.1.contains(&h.host) {
                    e.1.push(h.host.clone());
                }
            }
        }
        let mut rules: Vec<FleetRule> = by_rule
            .into_iter()
            .map(|(id, (severity, hosts))| FleetRule {
                id,
                severity,
                hosts,
            })
            .collect();
        rules.sort_by(|a, b| {
            b.severity
                .cmp(&a.severity)
                .then(b.hosts.len().cmp(&a.hosts.len()))
                .then(a.id.cmp(&b.id))
        });
        FleetReport {
            schema_version: FLEET_SCHEMA_VERSION,
            hosts,
            rules,
        }
    }

    /// 2 when a host could not be read, else 1 when any host has a warning or worse, else 0.
    pub fn exit_code(&self) -> u8 {
        if self.hosts.iter().any(|h| h.error.is_some()) {
            return 2;
        }
        self.hosts
            .iter()
            .filter_map(|h| h.report.as_ref())
            .map(Report::exit_code)
            .max()
            .unwrap_or(0)
    }
}

/// Doctor on every tree of `roots` (averages since boot, as for one `--root`): each host's
/// report, or why there is none (a tree that cannot be opened), or the core inputs it could not
/// read beside its report. `use_nic`: read each tree's recorded NIC settings.
pub fn examine_trees(roots: &[PathBuf], goal: super::Goal, use_nic: bool) -> FleetReport {
    let names = host_names(roots);
    let mut hosts = Vec::new();
    for (root, name) in roots.iter().zip(names) {
        let entry = |report: Option<Report>, error: Option<String>| FleetHost {
            host: name.clone(),
            root: root.display().to_string(),
            report,
            error,
        };
        let fs = match netsteer_host::HostFs::open(root) {
            Ok(fs) => fs,
            Err(e) => {
                hosts.push(entry(None, Some(format!("--root {}: {e}", root.display()))));
                continue;
            }
        };
        let settings = netsteer_nic::settings_source(&fs);
        let on = use_nic.then_some(&*settings);
        let sample = std::time::Duration::ZERO;
        match super::sampling::examine(&fs, on, sample, goal, None, None) {
            (report, missing) if missing.is_empty() => hosts.push(entry(Some(report), None)),
            (report, missing) => hosts.push(entry(
                Some(report),
                Some(format!("could not read {}", missing.join("; "))),
            )),
        }
    }
    FleetReport::new(hosts)
}

/// Short, unique host names from tree paths: the directory name, or more of the path where two
/// trees share it.
pub fn host_names(roots: &[std::path::PathBuf]) -> Vec<String> {
    let base = |p: &std::path::Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| p.display().to_string())
    };
    let names: Vec<String> = roots.iter().map(|p| base(p)).collect();
    names
        .iter()
        .zip(roots)
        .map(|(n, p)| {
            if names.iter().filter(|m| *m == n).count() > 1 {
                p.display().to_string()
            } else {
                n.clone()
            }
        })
        .collect()
}
/// A tree of one host: it has the /proc files doctor reads.
fn is_host_tree(dir: &Path) -> bool {
    dir.join("proc/stat").is_file() || dir.join("proc/interrupts").is_file()
}

/// The trees of a fleet run: several `--root`s, or one `--root` holding a directory per host
/// (what `netsteer snapshot` wrote on each, collected in one place). None for a single host.
pub fn fleet_roots(roots: &[PathBuf]) -> Option<Vec<PathBuf>> {
    match roots {
        [] => None,
        [one] if is_host_tree(one) => None,
        [one] => {
            let Ok(entries) = std::fs::read_dir(one) else {
                // Not a directory of trees: the single-host path reports the error.
                return None;
            };
            let mut trees: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_dir() && is_host_tree(p))
                .collect();
            if trees.is_empty() {
                return None;
            }
            trees.sort();
            Some(trees)
        }
        many => Some(many.to_vec()),
    }
}
