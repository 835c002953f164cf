//! `netsteer agent` over HTTP: what it refuses (unknown paths, bodies, oversized or malformed
//! heads, a peer holding too many connections), and a real Prometheus (Debian's `prometheus`,
//! on 127.0.0.1) scraping it, with promtool checking the exposition and the rules, and every
//! dashboard expression evaluated against that Prometheus.
//!
//! The agent only reads the host; Prometheus keeps its data in a temporary directory. Both are
//! killed by drop guards, also when an assertion fails.

mod common;

use common::prometheus::{Prometheus, get, parse_response, raw, repo, tool};

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `netsteer agent`, killed when dropped.
pub struct AgentProcess {
    child: Child,
    pub addr: SocketAddr,
}

impl AgentProcess {
    /// Starts the agent on 127.0.0.1 with a free port and waits for its address line.
    pub fn start(extra: &[&str]) -> AgentProcess {
        let (child, line) = common::spawn_with_start_line(
            Command::new(env!("CARGO_BIN_EXE_netsteer"))
                .args(["agent", "--listen", "127.0.0.1:0"])
                .args(extra)
                .stdout(Stdio::null()),
        );
        let addr = line
            .trim()
            .strip_prefix("netsteer agent: serving http://")
            .or_else(|| line.trim().strip_prefix("netsteer agent: serving https://"))
            .and_then(|s| s.strip_suffix("/metrics"))
            .unwrap_or_else(|| panic!("no address line: {line:?}"))
            .parse()
            .unwrap();
        AgentProcess { child, addr }
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_agent_serves_metrics_and_refuses_what_it_does_not_know() {
    let agent = AgentProcess::start(&["--root", common::fixture("mlx5-128cpu").to_str().unwrap()]);
    let (code, body) = get(agent.addr, "/metrics");
    assert_eq!(code, 200);
    assert!(body.contains("netsteer_softnet_processed_total{cpu=\"127\"}"));
    for (request, want) in [
        (&b"GET /nope HTTP/1.1\r\n\r\n"[..], 404),
        (b"GET /../../etc/passwd HTTP/1.1\r\n\r\n", 404),
        (
            b"POST /metrics HTTP/1.1\r\nContent-Length: 4\r\n\r\nabcd",
            404,
        ),
        (
            b"GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            404,
        ),
        (b"DELETE /metrics HTTP/1.1\r\n\r\n", 404),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),
    ] {
        let (code, _) = raw(agent.addr, request);
        assert_eq!(code, want, "{:?}", String::from_utf8_lossy(request));
    }
    // A head that never ends is cut at 8 KiB, not buffered without bound.
    let mut s = TcpStream::connect(agent.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nX-Long: ").unwrap();
    let _ = s.write_all(&vec![b'a'; 64 * 1024]);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    // 431 Request Header Fields Too Large (RFC 6585), hyper's answer at its 8 KiB cap.
    assert_eq!(parse_response(&out).0, 431);
    // Still serving.
    assert_eq!(get(agent.addr, "/metrics").0, 200);
}

/// A client on 127.0.0.2 (another peer address on loopback).
fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    let local: SocketAddr = format!("{from}:0").parse().unwrap();
    s.bind(&local.into()).unwrap();
    s.connect(&to.into()).unwrap();
    s.into()
}

/// One GET /metrics from `from`; the response's status.
fn scrape_from(from: &str, to: SocketAddr) -> u16 {
    let mut scraper = connect_from(from, to);
    scraper
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    scraper
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = Vec::new();
    scraper.read_to_end(&mut out).unwrap();
    parse_response(&out).0
}

#[test]
fn a_slow_peer_cannot_lock_the_scraper_out() {
    let agent = AgentProcess::start(&[
        "--root",
        common::fixture("dev-vm").to_str().unwrap(),
        "--max-per-peer",
        "2",
        "--scraper",
        "127.0.0.2",
    ]);
    // Two connections that send half a head and stop: the peer's slots.
    let mut idle: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut s = connect_from("127.0.0.1", agent.addr);
            s.write_all(b"GET /metr").unwrap();
            s
        })
        .collect();
    // The agent accepts in the order the handshakes completed, so these two hold the peer's
    // slots before the next connection is looked at.
    // A third from the same peer is told why at once.
    let mut third = connect_from("127.0.0.1", agent.addr);
    third
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut out = Vec::new();
    let _ = third.read_to_end(&mut out);
    assert_eq!(parse_response(&out).0, 503);
    // The configured scraper is served meanwhile.
    assert_eq!(scrape_from("127.0.0.2", agent.addr), 200);
    // The slow ones are dropped at the head deadline (5 s), freeing the slots.
    for s in &mut idle {
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut buf = Vec::new();
        // Closed without an answer (EOF), not left open until our own 60 s timeout.
        let n = s.read_to_end(&mut buf);
        assert!(matches!(n, Ok(0)), "{n:?} {buf:?}");
    }
    assert_eq!(get(agent.addr, "/metrics").0, 200);
}

/// Issue 35 item 8: 64 idle connections from 16 loopback addresses (4 each) are one source
/// network (/24): they get `--max-per-peer` places between them, the rest are refused at once,
/// and the idle ones are closed within the head deadline. The configured scraper keeps
/// its places even while another network holds every other one. (Before: the per-address
/// cap let them take all 64 places and the scraper got 503.)
#[test]
fn many_addresses_of_one_network_cannot_lock_the_scraper_out() {
    let agent = AgentProcess::start(&[
        "--root",
        common::fixture("dev-vm").to_str().unwrap(),
        "--max-connections",
        "64",
        "--scraper",
        "127.0.1.1",
    ]);
    let t0 = std::time::Instant::now();
    let mut idle = Vec::new();
    for a in 1..=16 {
        for _ in 0..4 {
            idle.push(connect_from(&format!("127.0.0.{a}"), agent.addr));
        }
    }
    // Refused ones are answered 503 and closed at once; held ones are closed, unanswered,
    // after the head deadline (5 s from the connection's start).
    let mut refused = 0;
    for s in &mut idle {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        if !buf.is_empty() {
            assert_eq!(parse_response(&buf).0, 503);
            refused += 1;
        }
    }
    assert_eq!(
        refused, 60,
        "one /24 held more than --max-per-peer (4) places"
    );
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
    // Every place but the scraper's taken by other networks (one connection from each of 60
    // /24s, trickling a head): the scraper is still served.
    let mut others: Vec<TcpStream> = (0..60)
        .map(|n| {
            let mut s = connect_from(&format!("127.{}.{}.1", 2 + n / 200, n % 200), agent.addr);
            s.write_all(b"GET /metr").unwrap();
            s
        })
        .collect();
    let heads_sent = std::time::Instant::now();
    // Time for the agent to take the 60 in.
    std::thread::sleep(Duration::from_millis(300));
    // Each of the 60 was taken in and is still held: nothing to read yet (a 503 would be
    // there at once; an end, its head deadline run out). The places the first 64 held were
    // given back before their clients saw them closed, so none of the 60 finds one counted.
    for (n, s) in others.iter().enumerate() {
        s.set_nonblocking(true).unwrap();
        let mut b = [0u8; 64];
        match s.peek(&mut b) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            r => panic!(
                "other network {n} was not held {:?} after its head: {r:?} {:?}",
                heads_sent.elapsed(),
                String::from_utf8_lossy(&b)
            ),
        }
        s.set_nonblocking(false).unwrap();
    }
    // A 61st other network is refused at once: the scraper's places are kept. Asked first,
    // while the 60 heads are surely within their 5 s deadline (a slow scrape on a loaded
    // machine once let them expire, and the late one was admitted).
    let mut late = connect_from("127.9.9.9", agent.addr);
    late.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut buf = Vec::new();
    let _ = late.read_to_end(&mut buf);
    assert!(
        !buf.is_empty(),
        "the 61st network was admitted, not refused"
    );
    assert_eq!(parse_response(&buf).0, 503);
    // And the scraper is still served.
    assert_eq!(scrape_from("127.0.1.1", agent.addr), 200);
    others.clear();
}

/// Every PromQL expression of the dashboard (panel targets and annotations), with Grafana's
/// variables replaced the way Grafana would for "All instances".
fn dashboard_expressions() -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("deploy/grafana/netsteer-dashboard.json"))
        .expect("dashboard");
    let d: serde_json::Value = serde_json::from_str(&text).expect("dashboard JSON");
    let mut out = Vec::new();
    let mut walk_targets = |targets: &serde_json::Value| {
        for t in targets.as_array().into_iter().flatten() {
            if let Some(e) = t["expr"].as_str() {
                out.push(e.to_string());
            }
        }
    };
    for p in d["panels"].as_array().unwrap() {
        walk_targets(&p["targets"]);
    }
    for a in d["annotations"]["list"].as_array().into_iter().flatten() {
        if let Some(e) = a["expr"].as_str() {
            out.push(e.to_string());
        }
    }
    out.into_iter()
        .map(|e| {
            e.replace("$__rate_interval", "1m")
                .replace("$instance", ".+")
        })
        .collect()
}

#[test]
fn a_real_prometheus_scrapes_the_agent_and_the_rules_and_dashboard_evaluate() {
    if !(tool("prometheus") && tool("promtool")) {
        common::cannot_run("needs prometheus and promtool (apt-get install prometheus)");
        return;
    }
    // The live host, read only.
    let agent = AgentProcess::start(&[]);
    let (code, body) = get(agent.addr, "/metrics");
    assert_eq!(code, 200);
    // promtool lints the exposition as Prometheus parses it.
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The rules are valid and their unit tests pass.
    let dir = repo().join("deploy/prometheus");
    for args in [
        vec!["check", "rules", "netsteer.rules.yml"],
        vec!["test", "rules", "netsteer.rules.test.yml"],
    ] {
        let out = Command::new("promtool")
            .args(&args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let prom = Prometheus::start(None, &[agent.addr.to_string()]);
    let up = prom.wait_for("up{job=\"netsteer\"} == 1");
    assert_eq!(up.len(), 1);
    let build = prom.wait_for("netsteer_build_info");
    assert_eq!(build[0]["metric"]["instance"], agent.addr.to_string());
    let cpus = std::fs::read_to_string("/proc/stat")
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .count();
    let processed = prom.wait_for("netsteer_softnet_processed_total");
    assert_eq!(processed.len(), cpus, "{processed:?}");
    assert_eq!(prom.wait_for("netsteer_cpu_seconds_total").len(), 3 * cpus);
    prom.wait_for("netsteer_doctor_findings{severity=\"critical\"}");
    // The recording rules ran on the scraped data (they need two scrapes in their window).
    let ratio = prom.wait_for("instance_cpu:netsteer_cpu_irq_softirq:ratio_rate5m");
    assert_eq!(ratio.len(), cpus);
    // Every dashboard expression is valid PromQL over these series.
    let exprs = dashboard_expressions();
    assert!(exprs.len() >= 15, "{exprs:?}");
    for e in &exprs {
        let v = prom.query(e);
        assert_eq!(v["status"], "success", "{e}: {v}");
    }
    // The heatmap's expression has one series per CPU.
    let heat = prom.wait_for(&exprs[0]);
    assert_eq!(heat.len(), cpus, "{}", exprs[0]);
}

/// The words of `key=` in the packaged agent unit (deploy/systemd/netsteer-agent.service).
fn unit_value(unit: &str, key: &str) -> Option<String> {
    unit.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(|v| v.trim().to_string())
}

/// The agent as its unit runs it: an unprivileged user with no capabilities and no way to gain
/// any (setpriv does what DynamicUser=, CapabilityBoundingSet= and NoNewPrivileges= do),
/// beside the same command as root, on the same namespace, with a state directory that
/// `tune apply` wrote: the same families and series, and every collector succeeding.
#[test]
fn the_agent_serves_as_its_unprivileged_unit_what_it_serves_as_root() {
    if !common::is_root() {
        common::cannot_run("needs root (it drops to an unprivileged user)");
        return;
    }
    let unit =
        std::fs::read_to_string(repo().join("deploy/systemd/netsteer-agent.service")).unwrap();
    for (key, want) in [
        ("DynamicUser", "yes"),
        ("NoNewPrivileges", "yes"),
        ("CapabilityBoundingSet", ""),
        ("AmbientCapabilities", ""),
        ("ProtectSystem", "strict"),
        ("ProtectKernelTunables", "yes"),
    ] {
        assert_eq!(unit_value(&unit, key).as_deref(), Some(want), "{key}");
    }
    let exec = unit_value(&unit, "ExecStart").unwrap();
    let mut words = exec.split_whitespace();
    assert_eq!(words.next(), Some("/usr/bin/netsteer"));
    let unit_args: Vec<&str> = words.collect();
    assert_eq!(unit_args, ["agent", "--listen", "127.0.0.1:9641"]);

    let pair = common::Pair::create(2);
    let scratch = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let state = scratch.path().join("state");
    let state = state.to_str().unwrap();
    let bin = env!("CARGO_BIN_EXE_netsteer");
    let out = pair.server.exec(&[
        bin,
        "tune",
        "apply",
        "--profile",
        "balanced",
        "--dev",
        "v0b",
        "--state-dir",
        state,
    ]);
    common::succeeded(&out);
    let mut args: Vec<&str> = vec![bin];
    args.extend(&unit_args);
    args.extend(["--once", "--dev", "v0b", "--state-dir", state]);
    // One scrape: its series (labels included, values left out) and the collectors that failed.
    let scrape = |argv: &[&str]| -> (Vec<String>, Vec<String>) {
        let out = pair.server.exec(argv);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{argv:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let samples: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .collect();
        let failed = samples
            .iter()
            .filter(|l| l.starts_with("netsteer_scrape_collector_success") && l.ends_with(" 0"))
            .map(|l| l.to_string())
            .collect();
        let mut keys: Vec<String> = samples
            .iter()
            .map(|l| l.rsplit_once(' ').unwrap().0.to_string())
            .collect();
        keys.sort();
        (keys, failed)
    };
    let (as_root, failed_as_root) = scrape(&args);
    let uid = format!("{}", 61184 + std::process::id() % 4000);
    let mut unprivileged = vec![
        "setpriv",
        "--reuid",
        &uid,
        "--regid",
        &uid,
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
    ];
    unprivileged.extend(&args);
    let (as_unit, failed) = scrape(&unprivileged);
    assert_eq!(as_root, as_unit);
    for collector in ["tune", "nic", "softnet", "snmp"] {
        let key = format!("netsteer_scrape_collector_success{{collector=\"{collector}\"}}");
        assert!(as_unit.contains(&key), "no {key} in {as_unit:#?}");
    }
    // The namespace holds only a veth while /proc/interrupts shows the host's queue vectors: a
    // container's view, whose doctor cannot judge the host's NICs (its collector says so, as
    // root too). Nothing else may fail, and nothing fail for want of privilege.
    assert_eq!(failed, failed_as_root, "as the unit runs it");
    assert!(
        failed.iter().all(|l| l.contains("collector=\"doctor\"")),
        "as the unit runs it: {failed:?}"
    );
    assert!(
        as_unit
            .iter()
            .any(|k| k.starts_with("netsteer_tune_drift_items"))
    );
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, made with openssl(1)
/// in `dir`.
fn certificates(dir: &std::path::Path) {
    let sh = |script: &str| {
        let out = Command::new("sh")
            .arg("-ec")
            .arg(script)
            .current_dir(dir)
            .output()
            .expect("openssl (Debian openssl)");
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    sh(
        "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=netsteer-test-ca \
        -keyout ca.key -out ca.crt 2>/dev/null",
    );
    for (name, ext) in [
        (
            "server",
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth",
        ),
        ("client", "extendedKeyUsage=clientAuth"),
    ] {
        std::fs::write(dir.join(format!("{name}.ext")), ext).unwrap();
        sh(&format!(
            "openssl req -newkey rsa:2048 -nodes -subj /CN={name} -keyout {name}.key \
             -out {name}.csr 2>/dev/null && openssl x509 -req -in {name}.csr -CA ca.crt \
             -CAkey ca.key -CAcreateserial -days 2 -extfile {name}.ext -out {name}.crt 2>/dev/null"
        ));
    }
}

/// curl's HTTP status for `url` with `args` (0 when no HTTP answer came: a refused handshake).
fn curl(url: &str, args: &[&str]) -> u16 {
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "20",
        ])
        .args(args)
        .arg(url)
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

/// Hardening round three: the agent takes Prometheus's web configuration file. Over TLS with
/// basic auth a real Prometheus scrapes it with the credentials (up 1) and is refused without
/// them (up 0); curl sees 401 without credentials and a failed handshake in plain HTTP; with
/// client certificates required, a client without one never gets a response. Beyond loopback
/// the agent does not start without authentication. (Before: no TLS, no credentials, and
/// `--listen 0.0.0.0` served anyone.)
#[test]
fn over_tls_with_credentials_prometheus_scrapes_and_without_it_is_refused() {
    let openssl = Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !tool("prometheus") || !tool("curl") || !openssl {
        return common::cannot_run("needs prometheus, curl and openssl (.ci/deps installs them)");
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    certificates(d);
    let hash = bcrypt::hash("s3cret-scrape", 6).unwrap();
    std::fs::write(
        d.join("web.yml"),
        format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
             basic_auth_users:\n  prometheus: '{hash}'\n\
             http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n"
        ),
    )
    .unwrap();
    let web = d.join("web.yml");
    let fixture = common::fixture("mlx5-128cpu");
    let agent = AgentProcess::start(&[
        "--root",
        fixture.to_str().unwrap(),
        "--web-config-file",
        web.to_str().unwrap(),
    ]);
    let url = format!("https://{}/metrics", agent.addr);
    let ca = d.join("ca.crt");
    let ca = ca.to_str().unwrap();
    assert_eq!(curl(&url, &["--cacert", ca]), 401);
    assert_eq!(curl(&url, &["--cacert", ca, "-u", "prometheus:wrong"]), 401);
    assert_eq!(
        curl(&url, &["--cacert", ca, "-u", "nobody:s3cret-scrape"]),
        401
    );
    assert_eq!(
        curl(&url, &["--cacert", ca, "-u", "prometheus:s3cret-scrape"]),
        200
    );
    // Cached after the first success: still checked against the password.
    assert_eq!(
        curl(&url, &["--cacert", ca, "-u", "prometheus:s3cret-scrapE"]),
        401
    );
    assert_eq!(
        curl(&format!("http://{}/metrics", agent.addr), &[]),
        0,
        "plain HTTP on the TLS port got an answer"
    );

    let password = d.join("password");
    std::fs::write(&password, "s3cret-scrape").unwrap();
    let target = vec![agent.addr.to_string()];
    let tls = format!("    scheme: https\n    tls_config:\n      ca_file: {ca}\n");
    let with = format!(
        "{tls}    basic_auth:\n      username: prometheus\n      password_file: {}\n",
        password.display()
    );
    let prom = Prometheus::start_jobs(
        None,
        &[("with", &target, &with), ("without", &target, &tls)],
    );
    assert_eq!(prom.wait_for("up{job=\"with\"} == 1").len(), 1);
    assert_eq!(prom.wait_for("up{job=\"without\"} == 0").len(), 1);
    // What it scraped is the agent's.
    let with = prom.wait_for("count(netsteer_softnet_processed_total{job=\"with\"})");
    assert_eq!(with[0]["value"][1], "128", "{with:?}");
    let without = prom.vector("count(netsteer_softnet_processed_total{job=\"without\"})");
    assert!(without.is_empty(), "{without:?}");
    drop(prom);
    drop(agent);

    // Client certificates, required and verified.
    std::fs::write(
        d.join("mtls.yml"),
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
         client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n",
    )
    .unwrap();
    let mtls = d.join("mtls.yml");
    let agent = AgentProcess::start(&[
        "--root",
        fixture.to_str().unwrap(),
        "--web-config-file",
        mtls.to_str().unwrap(),
    ]);
    let url = format!("https://{}/metrics", agent.addr);
    assert_eq!(curl(&url, &["--cacert", ca]), 0);
    let (cert, key) = (d.join("client.crt"), d.join("client.key"));
    assert_eq!(
        curl(
            &url,
            &[
                "--cacert",
                ca,
                "--cert",
                cert.to_str().unwrap(),
                "--key",
                key.to_str().unwrap()
            ]
        ),
        200
    );
    // The server's own certificate is no client's.
    let (scert, skey) = (d.join("server.crt"), d.join("server.key"));
    assert_eq!(
        curl(
            &url,
            &[
                "--cacert",
                ca,
                "--cert",
                scert.to_str().unwrap(),
                "--key",
                skey.to_str().unwrap()
            ]
        ),
        0
    );
    drop(agent);

    // Beyond loopback: authentication or no start; a bad file is named.
    for (extra, want) in [
        (vec![], "beyond loopback"),
        (
            vec!["--web-config-file", "/nonexistent/web.yml"],
            "/nonexistent/web.yml",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_netsteer"))
            .args([
                "agent",
                "--listen",
                "0.0.0.0:0",
                "--root",
                fixture.to_str().unwrap(),
            ])
            .args(&extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(want), "{err}");
    }
}

/// `--scrapers-only`: the `--scraper` list is an allow list; any other client's connection is
/// closed before a byte is read, and the scraper is served. (Before: `--scraper` kept places
/// for the scraper but served everyone.)
#[test]
fn with_scrapers_only_nobody_else_is_served() {
    let agent = AgentProcess::start(&[
        "--root",
        common::fixture("dev-vm").to_str().unwrap(),
        "--scraper",
        "127.0.0.2",
        "--scrapers-only",
    ]);
    for other in ["127.0.0.1", "127.0.0.3", "127.0.1.2"] {
        let mut s = connect_from(other, agent.addr);
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        assert!(
            out.is_empty(),
            "{other} got {:?}",
            String::from_utf8_lossy(&out)
        );
    }
    assert_eq!(scrape_from("127.0.0.2", agent.addr), 200);
    // --scrapers-only without a --scraper is a flag error.
    let out = Command::new(env!("CARGO_BIN_EXE_netsteer"))
        .args(["agent", "--scrapers-only", "--once"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--scraper"));
}

/// `Authorization: Basic` for `user:password`.
fn basic(user_password: &str) -> String {
    // RFC 4648 base64, padded (the crate is not a dependency of these tests).
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::from("Basic ");
    for chunk in user_password.as_bytes().chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// One GET /metrics from `from` with `authorization`: the status, the body and how long the
/// answer took.
fn scrape_with(from: &str, to: SocketAddr, authorization: &str) -> (u16, String, Duration) {
    let t = std::time::Instant::now();
    let mut s = connect_from(from, to);
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(
        format!("GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: {authorization}\r\n\r\n")
            .as_bytes(),
    )
    .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let (code, body) = parse_response(&out);
    (code, body, t.elapsed())
}

/// The value of the sample `key` (name and labels as exposed) in a scrape's text.
fn sample(body: &str, key: &str) -> Option<f64> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.rsplit_once(' ').filter(|(k, _)| *k == key))
        .map(|(_, v)| v.parse().unwrap())
}

/// Issue 77: 60 connections from 60 networks sending a wrong password while the scraper
/// scrapes with the right one. Every one of its scrapes is served from the cache of verified
/// credentials (no bcrypt run: the agent's counter of passed checks stays at the first one's
/// 1), so it is answered within Prometheus's 10 s timeout; and the failed checks the agent ran
/// are bounded by its failure budget (its stated burst plus rate × the agent's whole life),
/// however many guesses came. (Before: every guess ran bcrypt on the blocking pool the scrapes
/// use, and the scraper's scrapes waited behind them, 12–17 s.)
#[test]
fn a_crowd_guessing_passwords_cannot_delay_the_authenticated_scraper() {
    let dir = tempfile::tempdir().unwrap();
    // Cost 12 (bcrypt's default): 0.2–0.4 s a check on one core of the CI machine.
    let hash = bcrypt::hash("right-password", 12).unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  prometheus: '{hash}'\n")).unwrap();
    let born = std::time::Instant::now();
    let agent = AgentProcess::start(&[
        "--root",
        common::fixture("mlx5-128cpu").to_str().unwrap(),
        "--web-config-file",
        web.to_str().unwrap(),
    ]);
    let to = agent.addr;
    let right = basic("prometheus:right-password");
    // The scraper's first scrape, before the crowd: its credentials are checked and remembered.
    let (code, _, _) = scrape_with("127.0.0.1", to, &right);
    assert_eq!(code, 200);

    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let stop = Arc::new(AtomicBool::new(false));
    let guesses = Arc::new(AtomicU64::new(0));
    let crowd: Vec<_> = (0..60u32)
        .map(|n| {
            let (stop, guesses) = (stop.clone(), guesses.clone());
            // One /24 each (127.2.0.1, 127.2.1.1, ...): the connection caps do not stop them.
            let from = format!("127.{}.{}.1", 2 + n / 200, n % 200);
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let wrong = basic(&format!("prometheus:guess-{n}-{i}"));
                    let (code, _, _) = scrape_with(&from, to, &wrong);
                    assert!(matches!(code, 401 | 429 | 503), "a guess got {code}");
                    guesses.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // The crowd is at the door before the scraper comes back.
    std::thread::sleep(Duration::from_secs(1));
    let mut slowest = Duration::ZERO;
    for k in 1..=10u32 {
        let (code, body, took) = scrape_with("127.0.0.1", to, &right);
        assert_eq!(code, 200);
        // The symptom the issue names (Prometheus's default scrape timeout).
        assert!(
            took < Duration::from_secs(10),
            "scrape {k} took {took:?} ({} guesses answered so far)",
            guesses.load(Ordering::Relaxed)
        );
        slowest = slowest.max(took);
        // What makes it so: served from the cache, not behind anyone's bcrypt check.
        let passed = sample(
            &body,
            "netsteer_http_bcrypt_checks_total{result=\"passed\"}",
        );
        assert_eq!(passed, Some(1.0), "scrape {k} ran bcrypt");
        let hits = sample(&body, "netsteer_http_auth_cache_hits_total");
        assert_eq!(hits, Some(f64::from(k)), "scrape {k} was not a cache hit");
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    for t in crowd {
        t.join().unwrap();
    }
    let (code, body, _) = scrape_with("127.0.0.1", to, &right);
    assert_eq!(code, 200);
    let life = born.elapsed().as_secs_f64();
    let value = |key: &str| sample(&body, key).unwrap_or_else(|| panic!("no {key}"));
    let failed = value("netsteer_http_bcrypt_checks_total{result=\"failed\"}");
    let rate = value("netsteer_http_auth_failure_budget_per_second");
    let burst = value("netsteer_http_auth_failure_budget_burst");
    let unchecked = value("netsteer_http_auth_refused_total{reason=\"over_budget\"}");
    let guesses = guesses.load(Ordering::Relaxed) as f64;
    eprintln!(
        "{guesses} guesses in {life:.1} s: {failed} failed checks, {unchecked} refused \
         unchecked; the scraper's slowest scrape {slowest:?}"
    );
    assert!(
        failed <= burst + rate * life,
        "{failed} failed checks in {life:.1} s, over the budget of {burst} + {rate}/s"
    );
    // The crowd was over the budget: most guesses were answered without a check.
    assert!(
        unchecked > 0.0 && failed < guesses,
        "{failed} checks of {guesses} guesses"
    );
}

/// Issue 77: a bcrypt cost above the agent's maximum (14) is refused at start, naming the file
/// and the user (a cost-31 check takes days: 8 wrong passwords would hold every thread); 14
/// itself is taken. (Before: the cost-31 hash was accepted.)
#[test]
fn a_bcrypt_cost_above_the_maximum_is_refused_at_start_naming_file_and_user() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = common::fixture("dev-vm");
    // A well-formed hash of cost 4 relabelled: the file is only parsed at start.
    let hash = bcrypt::hash("x", 4).unwrap();
    for (cost, ok) in [("31", false), ("15", false), ("14", true)] {
        let web = dir.path().join(format!("web-{cost}.yml"));
        let costly = hash.replacen("$04$", &format!("${cost}$"), 1);
        std::fs::write(
            &web,
            format!("basic_auth_users:\n  alice: '{hash}'\n  scraper: '{costly}'\n"),
        )
        .unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_netsteer"))
            .args(["agent", "--once", "--root", fixture.to_str().unwrap()])
            .arg("--web-config-file")
            .arg(&web)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        if ok {
            assert_eq!(out.status.code(), Some(0), "cost {cost}: {err}");
            continue;
        }
        assert_eq!(
            out.status.code(),
            Some(2),
            "cost {cost} was accepted: {err}"
        );
        for want in [
            web.to_str().unwrap(),
            "basic_auth_users.scraper",
            cost,
            "14",
        ] {
            assert!(err.contains(want), "cost {cost}: no {want:?} in {err}");
        }
    }
}

/// Round three, still open in issue 77: two scrapers on loopback (one /24: the same client to
/// the round-three agent) alternating see the same rate findings. A burst of UDP datagrams
/// dropped at a full socket buffer before each pair is a `socket-rcvbuf-errors` finding over
/// the interval that holds it; each pair of scrapes taken over the same rates (the agent's
/// `netsteer_doctor_rates_end_timestamp_seconds`) must agree on it, and some pair must show it
/// in both. (Before: the first scraper's scrape reset the interval and the second saw none.)
#[test]
fn two_scrapers_alternating_see_the_same_rates() {
    // The live host, read only: the burst is in this test's own network namespace.
    let agent = AgentProcess::start(&[]);
    let sink = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
    sink.set_recv_buffer_size(1024).unwrap();
    let local: SocketAddr = "127.0.0.1:0".parse().unwrap();
    sink.bind(&local.into()).unwrap();
    let sink_addr = sink.local_addr().unwrap().as_socket().unwrap();
    let send = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    // Never read: all but the first few are dropped as RcvbufErrors. Sent before every pair,
    // so every interval of the sampler holds drops wherever its first read fell (the agent
    // prints its address before its sampler starts).
    let burst = || {
        for _ in 0..200 {
            let _ = send.send_to(&[7u8; 1000], sink_addr);
        }
    };
    let finding = |body: &str| {
        body.lines().any(|l| {
            l.starts_with("netsteer_doctor_finding{") && l.contains("rule=\"socket-rcvbuf-errors\"")
        })
    };
    let window = |body: &str| sample(body, "netsteer_doctor_rates_end_timestamp_seconds");
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let mut both = false;
    let mut pairs = 0;
    while !both {
        assert!(
            std::time::Instant::now() < deadline,
            "no pair of scrapes over the same sampled rates saw the burst ({pairs} pairs)"
        );
        burst();
        let a = scrape_with("127.0.0.1", agent.addr, "none").1;
        let b = scrape_with("127.0.0.2", agent.addr, "none").1;
        if window(&a) == window(&b) {
            pairs += 1;
            assert_eq!(
                finding(&a),
                finding(&b),
                "pair {pairs}: the first scraper saw socket-rcvbuf-errors {}, the second {}",
                finding(&a),
                finding(&b)
            );
            both = finding(&a) && window(&a).is_some();
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    drop(sink);
}
