//! A Prometheus of a test's own and the HTTP requests the tests make (std only: no client
//! library is needed for GETs on 127.0.0.1 or inside a lab namespace).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Sends `request` as is and returns the status code and the body.
pub fn raw(addr: SocketAddr, request: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    parse_response(&out)
}

pub fn parse_response(out: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(out);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {head:?}"));
    (status, body.to_string())
}

pub fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    raw(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
}

pub fn tool(name: &str) -> bool {
    Command::new(name)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A Prometheus of its own on 127.0.0.1, data in a temporary directory; killed when dropped.
pub struct Prometheus {
    child: Child,
    pub addr: SocketAddr,
    dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Prometheus {
    /// Scrapes `targets` every second as job `netsteer` and evaluates the repository's rules;
    /// listens on 127.0.0.1, or inside `host` on `listen` when given.
    pub fn start(
        inside: Option<(&netsteer_lab::NsHost, SocketAddr)>,
        targets: &[String],
    ) -> Prometheus {
        Prometheus::start_jobs(inside, &[("netsteer", targets, "")])
    }

    /// As [`Prometheus::start`], with several jobs: (name, targets, more YAML of the job at
    /// its indentation, e.g. `scheme`, `tls_config`, `basic_auth`).
    pub fn start_jobs(
        inside: Option<(&netsteer_lab::NsHost, SocketAddr)>,
        jobs: &[(&str, &[String], &str)],
    ) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let rules = repo().join("deploy/prometheus/netsteer.rules.yml");
        let mut config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n",
            rules.canonicalize().unwrap().display(),
        );
        for (name, targets, extra) in jobs {
            config += &format!(
                "  - job_name: {name}\n{extra}    static_configs:\n      - targets: [{}]\n",
                targets
                    .iter()
                    .map(|t| format!("'{t}'"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config).unwrap();
        let addr: SocketAddr = match inside {
            Some((_, a)) => a,
            None => format!("127.0.0.1:{}", free_port()).parse().unwrap(),
        };
        let log = std::fs::File::create(dir.path().join("log")).unwrap();
        let args = [
            format!("--config.file={}", config_path.display()),
            format!("--storage.tsdb.path={}", dir.path().join("data").display()),
            format!("--web.listen-address={addr}"),
        ];
        let mut cmd = match inside {
            Some((host, _)) => {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                host.command(None, "prometheus", &args)
            }
            None => {
                let mut c = Command::new("prometheus");
                c.args(&args);
                c
            }
        };
        let child = cmd
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus");
        Prometheus { child, addr, dir }
    }

    /// `/api/v1/query` (an instant query now): the parsed JSON answer.
    pub fn query(&self, promql: &str) -> serde_json::Value {
        let mut encoded = String::new();
        for b in promql.bytes() {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                encoded.push(b as char);
            } else {
                encoded.push_str(&format!("%{b:02X}"));
            }
        }
        let (code, body) = get(self.addr, &format!("/api/v1/query?query={encoded}"));
        let v: serde_json::Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("{promql}: HTTP {code}: {e}: {body}"));
        v
    }

    /// The result vector of a query that must succeed.
    pub fn vector(&self, promql: &str) -> Vec<serde_json::Value> {
        let v = self.query(promql);
        assert_eq!(v["status"], "success", "{promql}: {v}");
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// Waits (up to two minutes) until `promql` returns at least one series.
    pub fn wait_for(&self, promql: &str) -> Vec<serde_json::Value> {
        let start = Instant::now();
        loop {
            // Prometheus accepts connections before it serves queries: until its storage is
            // up, /api answers 503 in plain text (seen once in the TLS test). /-/ready says
            // when it is.
            if TcpStream::connect(self.addr).is_ok() && get(self.addr, "/-/ready").0 == 200 {
                let v = self.query(promql);
                if v["status"] == "success"
                    && v["data"]["result"]
                        .as_array()
                        .is_some_and(|r| !r.is_empty())
                {
                    return v["data"]["result"].as_array().unwrap().clone();
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "no result for {promql} within 120 s: {}",
                std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
