//! What `netsteer netchannel run` tells its preloaded library (crate `netsteer-preload`), through the environment (the
//! one channel that reaches a program's start-up unchanged). The CLI builds it with
//! [`Settings::to_env`] after checking every flag; the library reads it back with
//! [`Settings::from_env`] and refuses to start the program on anything it cannot parse.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Channel addresses of peers (comma-separated HOST:PORT): a connect to one of their hosts on
/// a chosen port rides netchannel to that peer.
pub const ENV_PEERS: &str = "NETSTEER_NC_PEERS";
/// Address this program's endpoint accepts channels on (HOST:PORT).
pub const ENV_LISTEN: &str = "NETSTEER_NC_LISTEN";
/// Throughput-class ports (comma-separated).
pub const ENV_PORTS: &str = "NETSTEER_NC_PORTS";
/// Latency-class ports: their sockets take the latency channels.
pub const ENV_LATENCY_PORTS: &str = "NETSTEER_NC_LATENCY_PORTS";
/// Throughput-class channels per session.
pub const ENV_CHANNELS: &str = "NETSTEER_NC_CHANNELS";
/// Latency-class channels per session.
pub const ENV_LATENCY_CHANNELS: &str = "NETSTEER_NC_LATENCY_CHANNELS";
/// Receive window of each virtual socket, in bytes.
pub const ENV_WINDOW: &str = "NETSTEER_NC_WINDOW";
/// `1`: one line on stderr per socket taken over.
pub const ENV_VERBOSE: &str = "NETSTEER_NC_VERBOSE";
/// Receive memory one peer's session may hold (its open sockets × the window), in bytes.
pub const ENV_SESSION_MEMORY: &str = "NETSTEER_NC_SESSION_MEMORY";
/// Who reads the channels: `app` (the program's threads when they wait; the default) or
/// `thread` (a reader thread per channel). See [`crate::drive`].
pub const ENV_RECEIVE: &str = "NETSTEER_NC_RECEIVE";

/// Sessions one peer address may hold with a preloaded program: a peer has one per process
/// that talks to it, so a host's prefork workers need one each (Debian's php-fpm starts 5,
/// gunicorn 2 × cores + 1). 8 is one prefix's whole share (`max_sessions_per_prefix`); a
/// process past it falls back to plain TCP (the preload) rather than failing.
pub const SESSIONS_PER_PEER: usize = 8;

/// What all peers together may take of a preloaded program, whatever they send (the library
/// [`crate::Config`]'s defaults are sized for a dedicated proxy; a preloaded program is
/// somebody's service, so it gives peers less). Stated in docs/netchannel.md and driven past
/// by the preload's hostile-peer test.
pub fn apply_peer_caps(cfg: &mut crate::Config) {
    cfg.max_sessions_per_peer = SESSIONS_PER_PEER;
    cfg.max_sessions = 128;
    // 1/16 of the places a prefix, a quarter kept for prefixes already served.
    cfg.max_sessions_per_prefix = 8;
    cfg.session_reserve = 32;
    cfg.reserved_sessions_per_prefix = 2;
    // Three channels a session by default: 128 sessions' worth. Each costs the program two
    // threads (its writer and its standby reader) and two descriptors.
    cfg.max_channels = 384;
    cfg.max_channels_per_prefix = 96;
    cfg.max_handshakes = 64;
    cfg.max_handshakes_per_prefix = 16;
    cfg.max_receive_memory = 2 << 30;
    cfg.max_receive_memory_per_prefix = 512 << 20;
}

const ALL: [&str; 10] = [
    ENV_PEERS,
    ENV_LISTEN,
    ENV_PORTS,
    ENV_LATENCY_PORTS,
    ENV_CHANNELS,
    ENV_LATENCY_CHANNELS,
    ENV_WINDOW,
    ENV_VERBOSE,
    ENV_SESSION_MEMORY,
    ENV_RECEIVE,
];

/// The most channels of one class (netchannel's limit is 64 in all).
pub const MAX_CHANNELS: u16 = 32;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub peers: Vec<SocketAddr>,
    pub listen: Option<SocketAddr>,
    pub ports: BTreeSet<u16>,
    pub latency_ports: BTreeSet<u16>,
    pub channels: u16,
    pub latency_channels: u16,
    pub window: u32,
    pub verbose: bool,
    /// Bounds what one session may make this side buffer: with [`SESSIONS_PER_PEER`], one
    /// peer's memory is at most `SESSIONS_PER_PEER × session_memory`.
    pub session_memory: u64,
    /// The program's threads read the channels ([`crate::Config::app_driven`]); false: a
    /// reader thread per channel.
    pub app_driven: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            peers: Vec::new(),
            listen: None,
            ports: BTreeSet::new(),
            latency_ports: BTreeSet::new(),
            channels: 2,
            latency_channels: 1,
            window: 1 << 20,
            verbose: false,
            session_memory: 256 << 20,
            app_driven: true,
        }
    }
}

/// A setting that cannot be used, named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadSetting {
    pub name: &'static str,
    pub value: String,
    pub why: String,
}

impl fmt::Display for BadSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={:?}: {}", self.name, self.value, self.why)
    }
}

impl std::error::Error for BadSetting {}

fn bad(name: &'static str, value: &str, why: impl Into<String>) -> BadSetting {
    BadSetting {
        name,
        value: value.to_string(),
        why: why.into(),
    }
}

/// Parses a comma-separated port list ("6379,80"); ports are 1..=65535.
pub fn parse_ports(name: &'static str, value: &str) -> Result<BTreeSet<u16>, BadSetting> {
    let mut out = BTreeSet::new();
    for p in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match p.parse::<u16>() {
            Ok(n) if n > 0 => {
                out.insert(n);
            }
            _ => return Err(bad(name, value, format!("{p:?} is not a port (1-65535)"))),
        }
    }
    Ok(out)
}

pub fn parse_addr(name: &'static str, value: &str) -> Result<SocketAddr, BadSetting> {
    value
        .trim()
        .parse()
        .map_err(|_| bad(name, value, "not an address (IP:PORT, [IPv6]:PORT)"))
}

fn parse_num<T: std::str::FromStr + PartialOrd + fmt::Display>(
    name: &'static str,
    value: &str,
    lo: T,
    hi: T,
) -> Result<T, BadSetting> {
    match value.trim().parse::<T>() {
        Ok(n) if n >= lo && n <= hi => Ok(n),
        _ => Err(bad(name, value, format!("need a number in {lo}..={hi}"))),
    }
}

impl Settings {
    /// Reads the settings through `get` (the environment in the library).
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Settings, BadSetting> {
        // An empty variable is an unset one (`to_env` writes every variable).
        let get = |k: &str| get(k).filter(|v| !v.is_empty());
        let mut s = Settings::default();
        if let Some(v) = get(ENV_PEERS) {
            for p in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                s.peers.push(parse_addr(ENV_PEERS, p)?);
            }
        }
        if let Some(v) = get(ENV_LISTEN) {
            s.listen = Some(parse_addr(ENV_LISTEN, &v)?);
        }
        if let Some(v) = get(ENV_PORTS) {
            s.ports = parse_ports(ENV_PORTS, &v)?;
        }
        if let Some(v) = get(ENV_LATENCY_PORTS) {
            s.latency_ports = parse_ports(ENV_LATENCY_PORTS, &v)?;
        }
        if let Some(v) = get(ENV_CHANNELS) {
            s.channels = parse_num(ENV_CHANNELS, &v, 1, MAX_CHANNELS)?;
        }
        if let Some(v) = get(ENV_LATENCY_CHANNELS) {
            s.latency_channels = parse_num(ENV_LATENCY_CHANNELS, &v, 0, MAX_CHANNELS)?;
        }
        if let Some(v) = get(ENV_WINDOW) {
            s.window = parse_num(ENV_WINDOW, &v, 65536, 256 << 20)?;
        }
        if let Some(v) = get(ENV_SESSION_MEMORY) {
            s.session_memory = parse_num(ENV_SESSION_MEMORY, &v, 1 << 20, 1 << 40)?;
        }
        if let Some(v) = get(ENV_RECEIVE) {
            s.app_driven = match v.trim() {
                "app" => true,
                "thread" => false,
                _ => return Err(bad(ENV_RECEIVE, &v, "need app or thread")),
            };
        }
        s.verbose = get(ENV_VERBOSE).is_some_and(|v| v == "1");
        s.check()?;
        Ok(s)
    }

    /// Refuses settings that cannot work together.
    pub fn check(&self) -> Result<(), BadSetting> {
        if self.peers.is_empty() && self.listen.is_none() {
            return Err(bad(
                ENV_PEERS,
                "",
                "no peer and no listen address: no socket could ride netchannel",
            ));
        }
        if self.ports.is_empty() && self.latency_ports.is_empty() {
            return Err(bad(
                ENV_PORTS,
                "",
                "no port chosen: no socket would ride netchannel",
            ));
        }
        if let Some(p) = self.ports.intersection(&self.latency_ports).next() {
            return Err(bad(
                ENV_LATENCY_PORTS,
                &self.latency_ports_text(),
                format!("port {p} is also a throughput port"),
            ));
        }
        if !self.latency_ports.is_empty() && self.latency_channels == 0 {
            return Err(bad(
                ENV_LATENCY_CHANNELS,
                "0",
                "latency ports need at least one latency channel",
            ));
        }
        if self.session_memory < u64::from(self.window) {
            return Err(bad(
                ENV_SESSION_MEMORY,
                &self.session_memory.to_string(),
                format!("smaller than one socket's window ({})", self.window),
            ));
        }
        if let Some(l) = self.listen
            && (self.ports.contains(&l.port()) || self.latency_ports.contains(&l.port()))
        {
            return Err(bad(
                ENV_LISTEN,
                &l.to_string(),
                "the channel port is also a chosen application port",
            ));
        }
        Ok(())
    }

    fn latency_ports_text(&self) -> String {
        join(&self.latency_ports)
    }

    /// The environment that carries these settings (every variable, so a stale one from the
    /// caller's environment cannot mix in).
    pub fn to_env(&self) -> Vec<(&'static str, String)> {
        let peers: Vec<String> = self.peers.iter().map(ToString::to_string).collect();
        vec![
            (ENV_PEERS, peers.join(",")),
            (
                ENV_LISTEN,
                self.listen.map(|l| l.to_string()).unwrap_or_default(),
            ),
            (ENV_PORTS, join(&self.ports)),
            (ENV_LATENCY_PORTS, join(&self.latency_ports)),
            (ENV_CHANNELS, self.channels.to_string()),
            (ENV_LATENCY_CHANNELS, self.latency_channels.to_string()),
            (ENV_WINDOW, self.window.to_string()),
            (ENV_VERBOSE, if self.verbose { "1" } else { "0" }.into()),
            (ENV_SESSION_MEMORY, self.session_memory.to_string()),
            (
                ENV_RECEIVE,
                if self.app_driven { "app" } else { "thread" }.into(),
            ),
        ]
    }

    /// Every variable name, for a caller that clears them.
    pub fn names() -> &'static [&'static str] {
        &ALL
    }

    /// Whether a socket to or on `port` rides netchannel, and in which class.
    pub fn class_of(&self, port: u16) -> Option<crate::Class> {
        if self.latency_ports.contains(&port) {
            Some(crate::Class::Latency)
        } else if self.ports.contains(&port) {
            Some(crate::Class::Throughput)
        } else {
            None
        }
    }

    /// The peer whose host a connect to `to` is aimed at, when its port is chosen.
    pub fn peer_for(&self, to: SocketAddr) -> Option<SocketAddr> {
        self.class_of(to.port())?;
        self.peers.iter().copied().find(|p| same_host(p, &to))
    }
}

/// The preload library's file name.
pub const LIBRARY: &str = "libnetsteer_preload.so";

/// The `netsteer netchannel run` flag that sets variable `name` (for error messages).
pub fn flag_of(name: &str) -> &str {
    match name {
        ENV_PEERS => "--peer/--listen",
        ENV_PORTS => "--ports",
        ENV_LATENCY_PORTS => "--latency-ports",
        ENV_LATENCY_CHANNELS => "--latency-channels",
        ENV_LISTEN => "--listen",
        ENV_SESSION_MEMORY => "--session-memory",
        ENV_CHANNELS => "--channels",
        ENV_WINDOW => "--window",
        ENV_RECEIVE => "--receive",
        other => other,
    }
}

/// Where the preload library is: `given` (`--preload`), else where cargo built it beside
/// the binary `exe` (`target/<profile>/deps` first: `cargo test` refreshes the library there
/// and not always beside the binary, where an older `cargo build` may have left one), else
/// the package's /usr/lib/netsteer.
pub fn find_library(given: Option<&Path>, exe: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(p) = given {
        return std::fs::canonicalize(p)
            .ok()
            .filter(|c| c.is_file())
            .ok_or_else(|| format!("--preload {}: no such file", p.display()));
    }
    let mut tried = Vec::new();
    if let Some(dir) = exe.and_then(Path::parent) {
        tried.push(dir.join("deps").join(LIBRARY));
        tried.push(dir.join(LIBRARY));
    }
    tried.push(Path::new("/usr/lib/netsteer").join(LIBRARY));
    if let Some(p) = tried.iter().find(|p| p.is_file()) {
        return Ok(p.clone());
    }
    let list: Vec<String> = tried.iter().map(|p| p.display().to_string()).collect();
    Err(format!(
        "the preload library {LIBRARY} is not in {} (build it with `cargo build -p netsteer-preload`, or give --preload)",
        list.join(", ")
    ))
}

impl Settings {
    /// `program args` with `lib` preloaded (ahead of any LD_PRELOAD already set) and these
    /// settings in its environment.
    pub fn command(&self, lib: &Path, program: &OsStr, args: &[OsString]) -> Command {
        let mut preload = lib.as_os_str().to_owned();
        if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
            preload.push(":");
            preload.push(old);
        }
        let mut cmd = Command::new(program);
        cmd.args(args).env("LD_PRELOAD", preload);
        for (k, v) in self.to_env() {
            cmd.env(k, v);
        }
        cmd
    }
}

fn same_host(a: &SocketAddr, b: &SocketAddr) -> bool {
    let canon = |s: &SocketAddr| s.ip().to_canonical();
    canon(a) == canon(b)
}

fn join(ports: &BTreeSet<u16>) -> String {
    ports
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn round_trip_through_the_environment() {
        let s = Settings {
            peers: vec![
                "10.0.0.2:7700".parse().unwrap(),
                "[::1]:7701".parse().unwrap(),
            ],
            listen: Some("0.0.0.0:7700".parse().unwrap()),
            ports: [6379, 80].into(),
            latency_ports: [6380].into(),
            channels: 4,
            latency_channels: 2,
            window: 1 << 21,
            verbose: true,
            session_memory: 64 << 20,
            // Not the default, so the round trip shows it is carried.
            app_driven: false,
        };
        let vars: HashMap<String, String> = s
            .to_env()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .filter(|(_, v)| !v.is_empty())
            .collect();
        assert_eq!(Settings::from_env(|k| vars.get(k).cloned()).unwrap(), s);
    }

    #[test]
    fn bad_values_are_named() {
        let e = Settings::from_env(env(&[
            (ENV_PEERS, "10.0.0.2:1"),
            (ENV_PORTS, "1"),
            (ENV_RECEIVE, "kernel"),
        ]))
        .unwrap_err();
        assert_eq!((e.name, flag_of(e.name)), (ENV_RECEIVE, "--receive"));
        let e = Settings::from_env(env(&[(ENV_PEERS, "10.0.0.2"), (ENV_PORTS, "1")])).unwrap_err();
        assert_eq!(e.name, ENV_PEERS);
        let e = Settings::from_env(env(&[(ENV_PEERS, "10.0.0.2:1"), (ENV_PORTS, "6379,x")]))
            .unwrap_err();
        assert_eq!(e.name, ENV_PORTS);
        assert!(e.to_string().contains("\"x\""), "{e}");
        let e = Settings::from_env(env(&[
            (ENV_PEERS, "10.0.0.2:1"),
            (ENV_PORTS, "6379"),
            (ENV_CHANNELS, "0"),
        ]))
        .unwrap_err();
        assert_eq!(e.name, ENV_CHANNELS);
        let e = Settings::from_env(env(&[(ENV_PORTS, "6379")])).unwrap_err();
        assert!(e.why.contains("no peer"), "{e}");
        let e = Settings::from_env(env(&[(ENV_LISTEN, "0.0.0.0:6379"), (ENV_PORTS, "6379")]))
            .unwrap_err();
        assert_eq!(e.name, ENV_LISTEN);
        let e = Settings::from_env(env(&[
            (ENV_LISTEN, "0.0.0.0:7700"),
            (ENV_PORTS, "6379"),
            (ENV_LATENCY_PORTS, "6379"),
        ]))
        .unwrap_err();
        assert_eq!(e.name, ENV_LATENCY_PORTS);
    }

    #[test]
    fn which_connects_ride_netchannel() {
        let s = Settings::from_env(env(&[
            (ENV_PEERS, "10.0.0.2:7700"),
            (ENV_PORTS, "6379"),
            (ENV_LATENCY_PORTS, "6380"),
        ]))
        .unwrap();
        let peer: SocketAddr = "10.0.0.2:7700".parse().unwrap();
        assert_eq!(s.peer_for("10.0.0.2:6379".parse().unwrap()), Some(peer));
        assert_eq!(
            s.peer_for("[::ffff:10.0.0.2]:6380".parse().unwrap()),
            Some(peer)
        );
        assert_eq!(s.peer_for("10.0.0.2:22".parse().unwrap()), None);
        assert_eq!(s.peer_for("10.0.0.3:6379".parse().unwrap()), None);
        assert_eq!(s.class_of(6380), Some(crate::Class::Latency));
    }

    #[test]
    fn the_library_is_found_in_deps_first_and_a_bad_preload_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("netsteer");
        std::fs::create_dir(dir.path().join("deps")).unwrap();
        for p in [
            dir.path().join(LIBRARY),
            dir.path().join("deps").join(LIBRARY),
        ] {
            std::fs::write(p, b"").unwrap();
        }
        let found = find_library(None, Some(&exe)).unwrap();
        assert_eq!(found, dir.path().join("deps").join(LIBRARY));
        std::fs::remove_file(dir.path().join("deps").join(LIBRARY)).unwrap();
        assert_eq!(
            find_library(None, Some(&exe)).unwrap(),
            dir.path().join(LIBRARY)
        );
        let missing = dir.path().join("nope.so");
        let e = find_library(Some(&missing), Some(&exe)).unwrap_err();
        assert!(e.starts_with("--preload ") && e.contains("nope.so"), "{e}");
        assert_eq!(flag_of(ENV_SESSION_MEMORY), "--session-memory");
    }

    #[test]
    fn the_command_carries_the_library_and_every_setting() {
        let s = Settings {
            peers: vec!["10.0.0.2:7700".parse().unwrap()],
            ports: [6379].into(),
            ..Settings::default()
        };
        let cmd = s.command(
            Path::new("/x/lib.so"),
            OsStr::new("redis-cli"),
            &["ping".into()],
        );
        let envs: std::collections::HashMap<_, _> = cmd
            .get_envs()
            .map(|(k, v)| (k.to_owned(), v.map(OsStr::to_owned)))
            .collect();
        let preload = envs[OsStr::new("LD_PRELOAD")].clone().unwrap();
        assert!(
            preload.to_string_lossy().starts_with("/x/lib.so"),
            "{preload:?}"
        );
        assert_eq!(
            envs[OsStr::new(ENV_PORTS)].as_deref(),
            Some(OsStr::new("6379"))
        );
        assert_eq!(cmd.get_program(), "redis-cli");
    }
}
