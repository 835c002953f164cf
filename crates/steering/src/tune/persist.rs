//! Persistence: a systemd unit that re-applies the saved invocation at boot, and a udev rule
//! that starts it again when a tuned interface (re)appears (driver reload, hot plug). It saves
//! the *invocation*, not the values: IRQ numbers and queue counts may differ after a reboot, so
//! the plan is computed again from the host as it is then.
//!
//! The unit is static (deploy/systemd/netsteer-tune.service, shipped by the Debian package);
//! the invocation lives in a drop-in beside it, the way `systemctl edit` customizes a packaged
//! unit, so the package owns its file and the administrator's choice survives its upgrades.

use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};

pub const UNIT_NAME: &str = "netsteer-tune.service";
/// Where `persist` writes the unit when no package installed one.
pub const UNIT_PATH: &str = "etc/systemd/system/netsteer-tune.service";
/// Where the Debian package installs it (and /lib, the same directory on a merged-/usr system).
pub const PACKAGED_UNIT_PATHS: &[&str] = &[
    "usr/lib/systemd/system/netsteer-tune.service",
    "lib/systemd/system/netsteer-tune.service",
];
/// What to run and after which devices: the only file that carries the invocation.
pub const DROPIN_PATH: &str = "etc/systemd/system/netsteer-tune.service.d/persist.conf";
pub const RULE_PATH: &str = "etc/udev/rules.d/90-netsteer-tune.rules";
/// The unit the package ships, word for word (deploy/systemd/); `persist` writes it with its
/// own path in ExecStart where no package did.
pub const UNIT_TEXT: &str = include_str!("../../../../deploy/systemd/netsteer-tune.service");
const PACKAGED_EXE: &str = "/usr/bin/netsteer";
const HEADER: &str =
    "# Written by `netsteer tune persist`; removed by `netsteer tune unpersist`.\n";

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
            // The unit runs from `/`: a relative `--state-dir` is saved as the directory it
            // named when persisted.
            state_dir: std::path::absolute(state_dir)
                .unwrap_or_else(|_| state_dir.to_path_buf())
                .display()
                .to_string(),
            reserve_queue: opts.reserve_queue,
            ports: opts.ports.clone(),
            napi: opts.napi.map(|m| m.to_string()),
        }
    }

    pub fn args(&self) -> Vec<String> {
        let mut a = vec!["tune".into(), "apply".into()];
        if !self.profile.is_empty() {
            a.push("--profile".into());
            a.push(self.profile.clone());
        }
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

/// systemd splits `$NETSTEER_TUNE_ARGS` on whitespace and expands `%` and `$` in an
/// Environment= line (systemd.service "Command lines", systemd.unit "Specifiers"): a word is
/// kept to the characters that mean nothing there. Ours are names, numbers, lists and paths.
fn check_word(word: &str) -> io::Result<()> {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./,:=@+".contains(c))
    {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "tune persist: {word:?} cannot be saved for systemd (only letters, digits and \
             -_./,:=@+ survive its word splitting and expansion)"
        ),
    ))
}

/// The unit for a host without the package: the packaged text with this binary's path.
pub fn unit_text(exe: &Path) -> io::Result<String> {
    let exe = exe.display().to_string();
    check_word(&exe)?;
    Ok(format!(
        "{HEADER}# No packaged unit was found ({}).\n{}",
        PACKAGED_UNIT_PATHS[0],
        UNIT_TEXT.replace(PACKAGED_EXE, &exe)
    ))
}

/// The name systemd gives the device unit of interface `dev`: its path
/// `/sys/subsystem/net/devices/<dev>` escaped as `systemd-escape --path` does
/// (systemd.unit(5) "String Escaping for Inclusion in Unit Names"; `do_escape` in systemd's
/// src/basic/unit-name.c): `/` becomes `-`; letters, digits, `:`, `_` and `.` stay (a
/// leading `.` is escaped, but the path starts with `sys`); every other byte, `-` included, becomes `\xNN`. `br-lan`'s unit is
/// `sys-subsystem-net-devices-br\x2dlan.device`; an `After=` on the unescaped name waits for a
/// unit that never appears.
pub fn device_unit(dev: &str) -> String {
    let mut s = String::from("sys-subsystem-net-devices-");
    for b in dev.bytes() {
        if b.is_ascii_alphanumeric() || b":_.".contains(&b) {
            s.push(b as char);
        } else if b == b'/' {
            s.push('-');
        } else {
            s += &format!("\\x{b:02x}");
        }
    }
    s + ".device"
}

/// The drop-in: the invocation, and the tuned devices to wait for.
pub fn dropin_text(inv: &Invocation) -> io::Result<String> {
    let args = inv.args();
    for a in &args {
        check_word(a)?;
    }
    let devices: Vec<String> = inv.devices.iter().map(|d| device_unit(d)).collect();
    let mut s = format!(
        "{HEADER}[Unit]\nDescription=netsteer: apply the {profile} to {devs}\n",
        profile = if inv.profile.is_empty() {
            "saved settings".to_string()
        } else {
            format!("{} profile", inv.profile)
        },
        devs = if inv.devices.is_empty() {
            "the physical NICs".to_string()
        } else {
            inv.devices.join(", ")
        },
    );
    if !devices.is_empty() {
        s += &format!("After={}\n", devices.join(" "));
    }
    // Quoted whole: unquoted, systemd reads each space-separated word as an assignment.
    s += &format!(
        "\n[Service]\nEnvironment=\"NETSTEER_TUNE_ARGS={}\"\n",
        args.join(" ")
    );
    Ok(s)
}

/// One rule per tuned interface (every net device when none was named): on `add`, ask systemd
/// to (re)start the unit.
pub fn rule_text(inv: &Invocation) -> String {
    let mut s = String::from(HEADER);
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

/// Writes the drop-in and the udev rule inside `fs`'s root, and the unit too where no package
/// installed it; on the live host also reloads systemd and udev and enables the unit. Returns
/// what was done, a line each. Nothing is written when the invocation cannot be saved.
pub fn install(
    fs: &netsteer_host::HostFs,
    exe: &Path,
    inv: &Invocation,
) -> io::Result<Vec<String>> {
    let root = fs.root();
    let packaged = PACKAGED_UNIT_PATHS
        .iter()
        .map(|p| in_root(root, p))
        .find(|p| p.is_file());
    let mut files = vec![
        (in_root(root, DROPIN_PATH), dropin_text(inv)?),
        (in_root(root, RULE_PATH), rule_text(inv)),
    ];
    let mut lines = Vec::new();
    match &packaged {
        Some(p) => lines.push(format!("the unit is the package's: {}", p.display())),
        None => files.insert(0, (in_root(root, UNIT_PATH), unit_text(exe)?)),
    }
    for (path, text) in &files {
        super::journal::write_atomic(path, text.as_bytes())
            .map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", path.display())))?;
        lines.push(format!("wrote {}", path.display()));
    }
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

/// Removes what [`install`] wrote (disabling the unit first on the live host): a unit in /etc
/// only if persist wrote it (its first line says so), never one the administrator wrote there.
/// Returns what was done, a line each.
pub fn uninstall(fs: &netsteer_host::HostFs) -> io::Result<Vec<String>> {
    let mut lines = Vec::new();
    if fs.is_live() {
        lines.push(run_tool(&["systemctl", "disable", UNIT_NAME]));
    }
    let unit = in_root(fs.root(), UNIT_PATH);
    let ours = std::fs::read_to_string(&unit).is_ok_and(|t| t.starts_with(HEADER));
    for rel in [DROPIN_PATH, RULE_PATH, UNIT_PATH] {
        let p = in_root(fs.root(), rel);
        if rel == UNIT_PATH && p.exists() && !ours {
            lines.push(format!("{}: not written by persist, left", p.display()));
            continue;
        }
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
    // The drop-in directory, if persist's file was all it held.
    if let Some(dir) = in_root(fs.root(), DROPIN_PATH).parent() {
        let _ = std::fs::remove_dir(dir);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn inv() -> Invocation {
        Invocation {
            profile: "latency".into(),
            devices: vec!["eth0".into(), "eth1".into()],
            cpus: Some("2-5".into()),
            irqbalance: "leave".into(),
            state_dir: "/var/lib/netsteer".into(),
            reserve_queue: Some(1),
            ports: vec![9000, 9001],
            knobs: vec!["nic/eth0/coalesce/rx-usecs=0".into()],
            napi: None,
        }
    }

    /// What systemd will run is the invocation's words, in order, after its whitespace split.
    #[test]
    fn the_dropin_carries_the_invocation_word_for_word() {
        let text = dropin_text(&inv()).unwrap();
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("Environment=\"NETSTEER_TUNE_ARGS="))
            .and_then(|l| l.strip_suffix('"'))
            .unwrap();
        let words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        assert_eq!(words, inv().args());
        assert!(text.contains(
            "After=sys-subsystem-net-devices-eth0.device sys-subsystem-net-devices-eth1.device"
        ));
    }

    /// A word systemd would split or expand is refused before anything is written.
    #[test]
    fn words_systemd_would_change_are_refused() {
        for bad in ["/var/lib/my state", "/srv/100%", "/srv/$HOME", ""] {
            let mut i = inv();
            i.state_dir = bad.into();
            let e = dropin_text(&i).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad}");
        }
        assert!(unit_text(Path::new("/opt/my tools/netsteer")).is_err());
        let unit = unit_text(Path::new("/opt/netsteer/bin/netsteer")).unwrap();
        assert!(unit.starts_with(HEADER));
        assert!(unit.contains("ExecStart=/opt/netsteer/bin/netsteer $NETSTEER_TUNE_ARGS"));
        assert!(!unit.contains(PACKAGED_EXE));
    }

    /// Device units are named as systemd names them: compared with the real `systemd-escape`.
    #[test]
    fn device_units_are_escaped_as_systemd_escapes_them() {
        let names = [
            "eth0",
            "br-lan",
            "enp3s0f1",
            "eth0.100",
            "bond0.10-x",
            "wg+x",
            "a@b",
            "x,y",
            "v=1",
            "_veth",
            "tap:1",
            ".hidden",
            "caf\u{e9}",
        ];
        let out = std::process::Command::new("systemd-escape")
            .arg("--path")
            .arg("--suffix=device")
            .args(
                names
                    .iter()
                    .map(|n| format!("/sys/subsystem/net/devices/{n}")),
            )
            .output()
            .expect("systemd-escape (package systemd, installed by .ci/deps)");
        assert!(out.status.success(), "{out:?}");
        let want: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let got: Vec<String> = names.iter().map(|n| device_unit(n)).collect();
        assert_eq!(got, want);
        assert_eq!(
            device_unit("br-lan"),
            "sys-subsystem-net-devices-br\\x2dlan.device"
        );
        let mut i = inv();
        i.devices = vec!["br-lan".into()];
        assert!(
            dropin_text(&i)
                .unwrap()
                .contains("After=sys-subsystem-net-devices-br\\x2dlan.device\n")
        );
    }

    /// A relative `--state-dir` is saved as the directory it named: the unit runs from `/`.
    #[test]
    fn a_relative_state_dir_is_saved_absolute() {
        let opts = crate::tune::PlanOptions::for_profile(crate::tune::Profile::Latency);
        let i = Invocation::from_options(None, &opts, None, Path::new("st/x"));
        let want = std::env::current_dir().unwrap().join("st/x");
        assert_eq!(Path::new(&i.state_dir), want);
    }

    /// No profile (only `--set`): no empty word, which the split would drop.
    #[test]
    fn an_invocation_without_a_profile_has_no_empty_word() {
        let mut i = inv();
        i.profile.clear();
        assert!(!i.args().iter().any(|a| a.is_empty() || a == "--profile"));
        assert!(
            dropin_text(&i)
                .unwrap()
                .contains("apply the saved settings")
        );
    }
}
