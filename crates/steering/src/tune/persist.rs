//! Persistence: a systemd unit that re-applies the saved invocation at boot, and a udev rule
//! that starts it again when a tuned interface (re)appears (driver reload, hot plug). It saves
//! the *invocation*, not the values: IRQ numbers and queue counts may differ after a reboot, so
//! the plan is computed again from the host as it is then.

use serde::{Deserialize, Serialize};
use std::io;
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
    /// What `tune apply` was asked (`opts`, and `profile` as given: `None` for none), to be
    /// asked again at boot with the same state directory.
    pub fn from_options(
        profile: Option<crate::tune::Profile>,
        opts: &crate::tune::PlanOptions,
        cpus: Option<String>,
        state_dir: &Path,
    ) -> Invocation {
        Invocation {
            profile: profile.map(|p| p.to_string()).unwrap_or_default(),
            knobs: opts
                .knobs
                .iter()
                .map(|k| format!("{}={}", k.path, k.value))
                .collect(),
            devices: opts.devices.clone(),
            cpus,
            irqbalance: match opts.irqbalance {
                crate::tune::IrqbalancePolicy::Leave => "leave".into(),
                crate::tune::IrqbalancePolicy::Stop => "stop".into(),
            },
            state_dir: state_dir.display().to_string(),
            reserve_queue: opts.reserve_queue,
            ports: opts.ports.clone(),
            napi: opts.napi.map(|m| m.to_string()),
        }
    }

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

/// Writes the unit and the udev rule inside `fs`'s root; on the live host also reloads
/// systemd and udev and enables the unit. Returns what was done, a line each.
pub fn install(
    fs: &netsteer_host::HostFs,
    exe: &Path,
    inv: &Invocation,
) -> io::Result<Vec<String>> {
    let root = fs.root();
    let unit = in_root(root, UNIT_PATH);
    let rule = in_root(root, RULE_PATH);
    for (path, text) in [(&unit, unit_text(exe, inv)), (&rule, rule_text(inv))] {
        super::journal::write_atomic(path, text.as_bytes())
            .map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", path.display())))?;
    }
    let mut lines = vec![
        format!("wrote {}", unit.display()),
        format!("wrote {}", rule.display()),
    ];
    if fs.is_live() {
        for args in [
            &["systemctl", "daemon-reload"][..],
            &["systemctl", "enable", UNIT_NAME],
            &["udevadm", "control", "--reload"],
        ] {
            lines.push(run_tool(args));
        }
    } else {
        lines.push("with --root: no systemctl or udevadm was run".into());
    }
    Ok(lines)
}

/// Removes what [`install`] wrote (disabling the unit first on the live host). Returns what
/// was done, a line each.
pub fn uninstall(fs: &netsteer_host::HostFs) -> io::Result<Vec<String>> {
    let mut lines = Vec::new();
    if fs.is_live() {
        lines.push(run_tool(&["systemctl", "disable", UNIT_NAME]));
    }
    for rel in [UNIT_PATH, RULE_PATH] {
        let p = in_root(fs.root(), rel);
        match std::fs::remove_file(&p) {
            Ok(()) => lines.push(format!("removed {}", p.display())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                lines.push(format!("{}: not there", p.display()))
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("removing {}: {e}", p.display()),
                ));
            }
        }
    }
    if fs.is_live() {
        lines.push(run_tool(&["systemctl", "daemon-reload"]));
        lines.push(run_tool(&["udevadm", "control", "--reload"]));
    }
    Ok(lines)
}

/// Runs a service manager command; what happened, as a line (a failure is reported, not
/// fatal: the files are what persists).
fn run_tool(args: &[&str]) -> String {
    match std::process::Command::new(args[0])
        .args(&args[1..])
        .stdin(std::process::Stdio::null())
        .output()
    {
        Ok(o) if o.status.success() => format!("ran {}", args.join(" ")),
        Ok(o) => format!(
            "{} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => format!("{}: {e}", args.join(" ")),
    }
}
