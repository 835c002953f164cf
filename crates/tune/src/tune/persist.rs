//! Persistence: a systemd unit that re-applies the saved invocation at boot, and a udev rule
//! that starts it again when a tuned interface (re)appears (driver reload, hot plug). It saves
//! the *invocation*, not the values: IRQ numbers and queue counts may differ after a reboot, so
//! the plan is computed again from the host as it is then.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const UNIT_NAME: &str = "netsteer-tune.service";
pub const UNIT_PATH: &str = "etc/systemd/system/netsteer-tune.service";
pub const RULE_PATH: &str = "etc/udev/rules.d/90-netsteer-tune.rules";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Invocation {
    pub profile: String,
    pub devices: Vec<String>,
    pub cpus: Option<String>,
    pub irqbalance: String,
    pub state_dir: String,
    pub reserve_queue: Option<u32>,
    pub ports: Vec<u16>,
    /// Explicit knobs as `PATH=VALUE` (`--set`).
    #[serde(default)]
    pub knobs: Vec<String>,
    /// `--napi MODE`: per-NAPI settings, planned again at boot for the NAPI ids of then.
    #[serde(default)]
    pub napi: Option<String>,
}

impl Invocation {
    pub fn args(&self) -> Vec<String> {
        let mut a = vec![
            "tune".into(),
            "apply".into(),
            "--profile".into(),
            self.profile.clone(),
        ];
        for d in &self.devices {
            a.push("--dev".into());
            a.push(d.clone());
        }
        if let Some(c) = &self.cpus {
            a.push("--cpus".into());
            a.push(c.clone());
        }
        a.push("--irqbalance".into());
        a.push(self.irqbalance.clone());
        if let Some(q) = self.reserve_queue {
            a.push("--reserve-queue".into());
            a.push(q.to_string());
        }
        if !self.ports.is_empty() {
            a.push("--ports".into());
            a.push(
                self.ports
                    .iter()
                    .map(u16::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            );
        }
        for k in &self.knobs {
            a.push("--set".into());
            a.push(k.clone());
        }
        if let Some(m) = &self.napi {
            a.push("--napi".into());
            a.push(m.clone());
        }
        a.push("--state-dir".into());
        a.push(self.state_dir.clone());
        a
    }
}

/// Quotes one word for a systemd ExecStart= line (systemd.syntax: double quotes, backslash
/// escapes); our words are names, lists and paths, so this is only a guard.
fn quote(word: &str) -> String {
    if word
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_./,:=".contains(c))
    {
        word.to_string()
    } else {
        format!("\"{}\"", word.replace('\\', "\\\\").replace('"', "\\\""))
    }
}

pub fn unit_text(exe: &Path, inv: &Invocation) -> String {
    let devices: Vec<String> = inv
        .devices
        .iter()
        .map(|d| format!("sys-subsystem-net-devices-{d}.device"))
        .collect();
    let args: Vec<String> = inv.args().iter().map(|a| quote(a)).collect();
    format!(
        "# Written by `netsteer tune persist`; removed by `netsteer tune unpersist`.\n\
         [Unit]\n\
         Description=netsteer: apply the {profile} profile to {devs}\n\
         After=network-pre.target {after}\n\
         Wants=network-pre.target\n\
         \n\
         [Service]\n\
         Type=oneshot\n\
         ExecStart={exe} {args}\n\
         \n\
         [Install]\n\
         WantedBy=multi-user.target\n",
        profile = inv.profile,
        devs = if inv.devices.is_empty() {
            "the physical NICs".to_string()
        } else {
            inv.devices.join(", ")
        },
        after = devices.join(" "),
        exe = quote(&exe.display().to_string()),
        args = args.join(" "),
    )
}

/// One rule per tuned interface (every net device when none was named): on `add`, ask systemd
/// to (re)start the unit.
pub fn rule_text(inv: &Invocation) -> String {
    let mut s = String::from(
        "# Written by `netsteer tune persist`; removed by `netsteer tune unpersist`.\n",
    );
    let kernels: Vec<String> = if inv.devices.is_empty() {
        vec!["*".into()]
    } else {
        inv.devices.clone()
    };
    for k in kernels {
        s += &format!(
            "ACTION==\"add\", SUBSYSTEM==\"net\", KERNEL==\"{k}\", TAG+=\"systemd\", ENV{{SYSTEMD_WANTS}}+=\"{UNIT_NAME}\"\n"
        );
    }
    s
}

pub fn in_root(root: &Path, rel: &str) -> PathBuf {
    root.join(rel)
}
