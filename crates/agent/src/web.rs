//! The web configuration file (`--web-config-file`), in the format of Prometheus's
//! exporter-toolkit (`docs/web-configuration.md` there; node_exporter's `--web.config.file`):
//! TLS with optional client certificates, and HTTP basic auth with bcrypt hashes. One file
//! serves the agent and any exporter beside it.
//!
//! Read as the agent starts, and refused whole, with the field named, when anything in it is
//! wrong or unknown (the toolkit reads it strictly too): a typo in `basic_auth_users` must not
//! leave the metrics open.
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt        # relative to this file's directory
//!   key_file: server.key
//!   client_auth_type: RequireAndVerifyClientCert
//!   client_ca_file: clients.crt
//!   min_version: TLS12
//! basic_auth_users:
//!   prometheus: $2y$10$...       # htpasswd -nBC 10 prometheus
//! http_server_config:
//!   headers:
//!     Strict-Transport-Security: max-age=31536000
//! ```

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use yaml_rust2::{Yaml, YamlLoader};

/// The largest web configuration, certificate or key file read.
const MAX_FILE: u64 = 1 << 20;

/// The highest bcrypt cost taken. A check's time doubles with each step: about 50 ms at cost
/// 10 on a current core, about 1 s at 14, days at 31. Every request with new credentials costs
/// one check, so a higher cost hands whoever can reach the port a way to hold the checks'
/// workers for seconds a guess (and unknown users are checked at the highest configured
/// cost, so one costly user makes every guess costly); 14 is well beyond what protects a
/// scrape password, which is a long random string, not a person's.
pub const MAX_BCRYPT_COST: u32 = 14;

/// A web configuration that cannot be used, with the file and the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebConfigError {
    pub file: PathBuf,
    pub what: String,
}

impl fmt::Display for WebConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file.display(), self.what)
    }
}

impl std::error::Error for WebConfigError {}

/// Which client certificates the TLS server asks for (the toolkit's `client_auth_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// None asked for (the default).
    NoClientCert,
    /// Verified against `client_ca_file` when the client sends one; none is also accepted.
    VerifyClientCertIfGiven,
    /// Required, and verified against `client_ca_file`.
    RequireAndVerifyClientCert,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub client_auth: ClientAuth,
    pub client_ca_file: Option<PathBuf>,
    pub min_version: TlsVersion,
    pub max_version: TlsVersion,
}

/// A parsed web configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WebConfig {
    pub tls: Option<TlsSettings>,
    /// User name → bcrypt hash. Empty: no authentication asked.
    pub users: BTreeMap<String, String>,
    /// Headers added to every response.
    pub headers: Vec<(String, String)>,
}

/// The file's fields, read strictly: an unknown key anywhere is an error naming it (the
/// toolkit reads the file strictly too).
#[derive(Default)]
struct Raw {
    tls_server_config: Option<RawTls>,
    basic_auth_users: Option<BTreeMap<String, String>>,
    http_server_config: Option<RawHttp>,
}

#[derive(Default)]
struct RawTls {
    cert_file: Option<String>,
    key_file: Option<String>,
    client_auth_type: Option<String>,
    client_ca_file: Option<String>,
    min_version: Option<String>,
    max_version: Option<String>,
    /// Keys the toolkit knows that are refused here by name (rustls chooses cipher suites
    /// and curves itself; certificates and keys come from files).
    refused: Vec<&'static str>,
}

#[derive(Default)]
struct RawHttp {
    headers: Option<BTreeMap<String, String>>,
}

/// A mapping's entries with string keys, or an error naming `at`.
fn mapping<'a>(y: &'a Yaml, at: &str) -> Result<Vec<(&'a str, &'a Yaml)>, String> {
    match y {
        Yaml::Hash(h) => h
            .iter()
            .map(|(k, v)| match k.as_str() {
                Some(k) => Ok((k, v)),
                None => Err(format!("{at}: a key that is not a string")),
            })
            .collect(),
        Yaml::Null => Ok(Vec::new()),
        _ => Err(format!("{at}: not a mapping")),
    }
}

/// A scalar read as text (YAML's `TLS12`, `true` and `10` are all strings to the toolkit).
fn text(y: &Yaml, at: &str) -> Result<String, String> {
    match y {
        Yaml::String(s) => Ok(s.clone()),
        Yaml::Integer(i) => Ok(i.to_string()),
        Yaml::Boolean(b) => Ok(b.to_string()),
        Yaml::Real(r) => Ok(r.clone()),
        _ => Err(format!("{at}: not a string")),
    }
}

fn string_map(y: &Yaml, at: &str) -> Result<BTreeMap<String, String>, String> {
    mapping(y, at)?
        .into_iter()
        .map(|(k, v)| Ok((k.to_string(), text(v, &format!("{at}.{k}"))?)))
        .collect()
}

fn parse(source: &str) -> Result<Raw, String> {
    let docs = YamlLoader::load_from_str(source).map_err(|e| e.to_string())?;
    let mut raw = Raw::default();
    let Some(top) = docs.first() else {
        return Ok(raw);
    };
    for (key, v) in mapping(top, "the file")? {
        match key {
            "tls_server_config" => {
                let mut t = RawTls::default();
                for (k, v) in mapping(v, key)? {
                    let at = format!("tls_server_config.{k}");
                    match k {
                        "cert_file" => t.cert_file = Some(text(v, &at)?),
                        "key_file" => t.key_file = Some(text(v, &at)?),
                        "client_auth_type" => t.client_auth_type = Some(text(v, &at)?),
                        "client_ca_file" => t.client_ca_file = Some(text(v, &at)?),
                        "min_version" => t.min_version = Some(text(v, &at)?),
                        "max_version" => t.max_version = Some(text(v, &at)?),
                        "cipher_suites" => t.refused.push("cipher_suites"),
                        "curve_preferences" => t.refused.push("curve_preferences"),
                        "prefer_server_cipher_suites" => {
                            t.refused.push("prefer_server_cipher_suites")
                        }
                        "client_allowed_sans" => t.refused.push("client_allowed_sans"),
                        "cert" => t.refused.push("cert"),
                        "key" => t.refused.push("key"),
                        other => return Err(format!("{at}: unknown field {other:?}")),
                    }
                }
                raw.tls_server_config = Some(t);
            }
            "basic_auth_users" => raw.basic_auth_users = Some(string_map(v, key)?),
            "http_server_config" => {
                let mut h = RawHttp::default();
                for (k, v) in mapping(v, key)? {
                    match k {
                        // HTTP/2 is not served (Prometheus scrapes over HTTP/1.1 too).
                        "http2" => {}
                        "headers" => h.headers = Some(string_map(v, "http_server_config.headers")?),
                        other => {
                            return Err(format!(
                                "http_server_config.{other}: unknown field {other:?}"
                            ));
                        }
                    }
                }
                raw.http_server_config = Some(h);
            }
            other => return Err(format!("unknown field {other:?}")),
        }
    }
    Ok(raw)
}

/// The response headers the toolkit lets a configuration set.
const HEADERS: [&str; 5] = [
    "Strict-Transport-Security",
    "X-Content-Type-Options",
    "X-Frame-Options",
    "X-XSS-Protection",
    "Content-Security-Policy",
];

fn read_capped(path: &Path) -> Result<Vec<u8>, String> {
    netsteer_host::fs::read_regular(path, MAX_FILE).map_err(|e| e.to_string())
}

impl WebConfig {
    /// Reads and checks `path`, and the certificate and key files it names (so a bad file is
    /// said at start, not at the first scrape).
    pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
        let err = |what: String| WebConfigError {
            file: path.to_path_buf(),
            what,
        };
        let bytes = read_capped(path).map_err(err)?;
        let source = String::from_utf8(bytes).map_err(|_| err("not UTF-8 text".into()))?;
        let raw = parse(&source).map_err(err)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let resolve = |p: &str| {
            let p = Path::new(p);
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                dir.join(p)
            }
        };
        let mut out = WebConfig::default();
        if let Some(t) = raw.tls_server_config {
            if let Some(name) = t.refused.first() {
                return Err(err(format!(
                    "tls_server_config.{name} is not supported by netsteer agent (cipher \
                     suites and curves are rustls's choice; certificates and keys come \
                     from cert_file and key_file)"
                )));
            }
            let cert = t
                .cert_file
                .ok_or_else(|| err("tls_server_config.cert_file is required".into()))?;
            let key = t
                .key_file
                .ok_or_else(|| err("tls_server_config.key_file is required".into()))?;
            let client_auth = match t.client_auth_type.as_deref() {
                None | Some("") | Some("NoClientCert") => ClientAuth::NoClientCert,
                Some("VerifyClientCertIfGiven") => ClientAuth::VerifyClientCertIfGiven,
                Some("RequireAndVerifyClientCert") => ClientAuth::RequireAndVerifyClientCert,
                Some(other @ ("RequestClientCert" | "RequireAnyClientCert")) => {
                    return Err(err(format!(
                        "tls_server_config.client_auth_type {other}: certificates that are not \
                         verified authenticate nobody; use RequireAndVerifyClientCert or \
                         VerifyClientCertIfGiven"
                    )));
                }
                Some(other) => {
                    return Err(err(format!(
                        "tls_server_config.client_auth_type {other:?}: one of NoClientCert, \
                         VerifyClientCertIfGiven, RequireAndVerifyClientCert"
                    )));
                }
            };
            let client_ca_file = t.client_ca_file.as_deref().map(resolve);
            if client_auth != ClientAuth::NoClientCert && client_ca_file.is_none() {
                return Err(err(format!(
                    "tls_server_config.client_auth_type {client_auth:?} needs client_ca_file"
                )));
            }
            let version = |field: &str, v: Option<&str>, default| match v {
                None | Some("") => Ok(default),
                Some("TLS12") => Ok(TlsVersion::Tls12),
                Some("TLS13") => Ok(TlsVersion::Tls13),
                Some(other) => Err(err(format!(
                    "tls_server_config.{field} {other:?}: TLS12 or TLS13 (older versions are \
                     not offered)"
                ))),
            };
            let min_version = version("min_version", t.min_version.as_deref(), TlsVersion::Tls12)?;
            let max_version = version("max_version", t.max_version.as_deref(), TlsVersion::Tls13)?;
            if min_version == TlsVersion::Tls13 && max_version == TlsVersion::Tls12 {
                return Err(err(
                    "tls_server_config.min_version is above max_version".into()
                ));
            }
            out.tls = Some(TlsSettings {
                cert_file: resolve(&cert),
                key_file: resolve(&key),
                client_auth,
                client_ca_file,
                min_version,
                max_version,
            });
        }
        for (user, hash) in raw.basic_auth_users.unwrap_or_default() {
            // The hash must be bcrypt's: a plain password here would be compared as a hash
            // and never match, which reads as "auth is on" while nobody can scrape.
            if user.is_empty() || user.contains(':') {
                return Err(err(format!(
                    "basic_auth_users: {user:?} is not a user name (empty, or has ':')"
                )));
            }
            let Ok(parts) = hash.parse::<bcrypt::HashParts>() else {
                return Err(err(format!(
                    "basic_auth_users.{user}: not a bcrypt hash (make one with `htpasswd \
                     -nBC 10 {user}`)"
                )));
            };
            if parts.get_cost() > MAX_BCRYPT_COST {
                return Err(err(format!(
                    "basic_auth_users.{user}: bcrypt cost {} is above {MAX_BCRYPT_COST}, the \
                     most the agent checks (each step doubles a check's time: at 31 one \
                     check takes days); make one with `htpasswd -nBC 10 {user}`",
                    parts.get_cost()
                )));
            }
            out.users.insert(user, hash);
        }
        if let Some(h) = raw.http_server_config {
            for (name, value) in h.headers.unwrap_or_default() {
                let Some(known) = HEADERS.iter().find(|k| k.eq_ignore_ascii_case(&name)) else {
                    return Err(err(format!(
                        "http_server_config.headers.{name}: not one of {}",
                        HEADERS.join(", ")
                    )));
                };
                if value.chars().any(|c| c.is_control()) {
                    return Err(err(format!(
                        "http_server_config.headers.{name}: control characters in the value"
                    )));
                }
                out.headers.push((known.to_string(), value));
            }
        }
        if out.tls.is_some() {
            // Loaded now so a missing or bad file is said at start.
            out.server_config().map_err(err)?;
        }
        Ok(out)
    }

    /// Whether every client must authenticate: basic auth users, or client certificates that
    /// must verify.
    pub fn authenticates(&self) -> bool {
        !self.users.is_empty()
            || self
                .tls
                .as_ref()
                .is_some_and(|t| t.client_auth == ClientAuth::RequireAndVerifyClientCert)
    }

    /// The rustls server configuration of `tls`, read from its files.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, String> {
        let t = self.tls.as_ref().ok_or("no tls_server_config")?;
        let certs = pem_certs(&t.cert_file)?;
        let key_pem = read_capped(&t.key_file).map_err(|e| format!("key_file {e}"))?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
            format!(
                "key_file {}: no private key in it ({e})",
                t.key_file.display()
            )
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions: Vec<&'static rustls::SupportedProtocolVersion> =
            match (t.min_version, t.max_version) {
                (TlsVersion::Tls12, TlsVersion::Tls13) => {
                    vec![&rustls::version::TLS12, &rustls::version::TLS13]
                }
                (TlsVersion::Tls12, TlsVersion::Tls12) => vec![&rustls::version::TLS12],
                _ => vec![&rustls::version::TLS13],
            };
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)
            .map_err(|e| e.to_string())?;
        let builder = match (&t.client_auth, &t.client_ca_file) {
            (ClientAuth::NoClientCert, _) | (_, None) => builder.with_no_client_auth(),
            (auth, Some(ca)) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in pem_certs(ca).map_err(|e| format!("client_ca_file: {e}"))? {
                    roots
                        .add(c)
                        .map_err(|e| format!("client_ca_file {}: {e}", ca.display()))?;
                }
                let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                );
                let v = if *auth == ClientAuth::VerifyClientCertIfGiven {
                    v.allow_unauthenticated()
                } else {
                    v
                };
                builder.with_client_cert_verifier(
                    v.build()
                        .map_err(|e| format!("client_ca_file {}: {e}", ca.display()))?,
                )
            }
        };
        let cfg = builder.with_single_cert(certs, key).map_err(|e| {
            format!(
                "cert_file {} and key_file {}: {e}",
                t.cert_file.display(),
                t.key_file.display()
            )
        })?;
        Ok(Arc::new(cfg))
    }
}

fn pem_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read_capped(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate in it", path.display()));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<WebConfig, String> {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("web.yml");
        std::fs::write(&p, text).unwrap();
        WebConfig::load(&p).map_err(|e| e.what)
    }

    #[test]
    fn users_need_bcrypt_hashes_and_unknown_fields_are_refused_by_name() {
        let hash = bcrypt::hash("secret", 4).unwrap();
        let ok = load(&format!("basic_auth_users:\n  prometheus: '{hash}'\n")).unwrap();
        assert_eq!(ok.users["prometheus"], hash);
        assert!(ok.tls.is_none());
        let e = load("basic_auth_users:\n  prometheus: secret\n").unwrap_err();
        assert!(e.contains("not a bcrypt hash"), "{e}");
        let costly = hash.replacen("$04$", "$31$", 1);
        let e = load(&format!("basic_auth_users:\n  prometheus: '{costly}'\n")).unwrap_err();
        assert!(
            e.contains("basic_auth_users.prometheus") && e.contains("cost 31 is above 14"),
            "{e}"
        );
        let e = load("basic_auth_user:\n  prometheus: x\n").unwrap_err();
        assert!(e.contains("basic_auth_user"), "{e}");
        let e = load("tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: [x]\n")
            .unwrap_err();
        assert!(e.contains("cipher_suites"), "{e}");
        let e = load("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAnyClientCert\n")
            .unwrap_err();
        assert!(e.contains("RequireAnyClientCert"), "{e}");
        let e = load("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAndVerifyClientCert\n")
            .unwrap_err();
        assert!(e.contains("needs client_ca_file"), "{e}");
        let e =
            load("tls_server_config:\n  cert_file: nope.crt\n  key_file: nope.key\n").unwrap_err();
        assert!(e.contains("nope.crt"), "{e}");
        let e = load("http_server_config:\n  headers:\n    Set-Cookie: x\n").unwrap_err();
        assert!(e.contains("Set-Cookie"), "{e}");
        let h = load("http_server_config:\n  headers:\n    x-frame-options: deny\n").unwrap();
        assert_eq!(h.headers, [("X-Frame-Options".into(), "deny".into())]);
    }
}
