//! The agent's HTTP front: `GET /metrics` and nothing else, for a listener that may face the
//! network. HTTP/1.1 is hyper's (the request head parsed by a maintained stack, with its size
//! cap and a whole-head deadline); TLS is rustls's, configured from the exporter-toolkit web
//! configuration file ([`crate::web`]) with optional client certificates; basic auth checks
//! bcrypt hashes, bounded by [`crate::auth`] (a cache of verified credentials checked first,
//! failure budgets per source network and in all, and a small pool of its own). Connections
//! are capped in total and per source network (a slow or hostile client can hold at most a
//! few places, never all of them), with places kept for the configured scrapers, or, with
//! `scrapers_only`, for nobody else at all. Anything it does not know (a path, a method, a
//! body) gets a 404 and a closed connection.

use crate::Agent;
use crate::auth::{Auth, Checked, Who};
use crate::web::WebConfig;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// An address prefix (`--scraper`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Net {
    addr: IpAddr,
    len: u8,
}

impl Net {
    fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, unmap(ip)) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.len))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

pub fn parse_net(s: &str) -> std::result::Result<Net, String> {
    let (a, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let addr: IpAddr = a
        .parse()
        .map_err(|_| format!("{a:?} is not an IP address"))?;
    let addr = unmap(addr);
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match len {
        None => max,
        Some(l) => l
            .parse::<u8>()
            .ok()
            .filter(|&l| l <= max)
            .ok_or_else(|| format!("prefix length {l:?} (0..={max})"))?,
    };
    Ok(Net { addr, len })
}

/// An IPv4 client on a dual-stack socket arrives as ::ffff:a.b.c.d.
fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The key a client's connections are counted under: its /24 (IPv4) or /64 (IPv6), or for a
/// configured scraper, its own address.
fn peer_key(ip: IpAddr, scrapers: &[Net]) -> (IpAddr, bool) {
    let ip = unmap(ip);
    if scrapers.iter().any(|n| n.contains(ip)) {
        return (ip, true);
    }
    let net = match ip {
        IpAddr::V4(a) => IpAddr::V4((u32::from(a) & 0xffff_ff00).into()),
        IpAddr::V6(a) => IpAddr::V6((u128::from(a) & !((1u128 << 64) - 1)).into()),
    };
    (net, false)
}

/// The whole request head must arrive within this from the connection's start (not per
/// read: a client trickling a byte a second would otherwise hold its place forever).
const HEAD_DEADLINE: Duration = Duration::from_secs(5);
/// A TLS handshake must finish within this.
const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(5);
/// A whole connection (head, scrape, response) must end within this.
const CONNECTION_DEADLINE: Duration = Duration::from_secs(60);

/// How many connections are served at once.
#[derive(Debug, Clone)]
pub struct Limits {
    /// In total; more are answered 503 and closed.
    pub total: usize,
    /// Per source network (/24, /64), or per scraper address.
    pub per_peer: usize,
    /// Scrapers' addresses or networks: counted apart, with `per_peer` places kept for them.
    pub scrapers: Vec<Net>,
    /// Only the scrapers are served: every other client's connection is closed at once.
    pub scrapers_only: bool,
}

impl Limits {
    /// Places of `total` that clients other than the scrapers may hold.
    fn for_others(&self) -> usize {
        if self.scrapers.is_empty() {
            self.total
        } else {
            self.total.saturating_sub(self.per_peer).max(1)
        }
    }
}

/// Connections held, in total, by clients other than the scrapers, and per peer key
/// ([`peer_key`]).
#[derive(Default)]
struct Slots {
    total: usize,
    others: usize,
    by_peer: HashMap<IpAddr, usize>,
}

/// Gives the slot back when the connection's thread ends, however it ends.
struct Slot {
    slots: Arc<Mutex<Slots>>,
    peer: IpAddr,
    scraper: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut s = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        s.total -= 1;
        if !self.scraper {
            s.others -= 1;
        }
        if let Some(n) = s.by_peer.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                s.by_peer.remove(&self.peer);
            }
        }
    }
}

/// A connection's stream with its place: the place is given back before the peer can see the
/// connection end — when hyper shuts the stream down (the FIN), or, when it drops it without
/// (a head that never came), first of the two fields — so a client that saw its connection
/// closed and connects again never finds its old place still counted.
struct Placed<I> {
    slot: Option<Slot>,
    io: I,
}

impl<I: hyper::rt::Read + Unpin> hyper::rt::Read for Placed<I> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<I: hyper::rt::Write + Unpin> hyper::rt::Write for Placed<I> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let me = self.get_mut();
        me.slot = None;
        std::pin::Pin::new(&mut me.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }
}

/// What every connection's task shares.
struct Front {
    agent: Arc<Agent>,
    /// Basic auth, when the web configuration has users.
    auth: Option<Arc<Auth>>,
    headers: Vec<(String, String)>,
}

/// Serves `/metrics` on `listener` until the process ends, over TLS and with basic auth when
/// `web` asks for them. Errors only when it cannot start.
pub fn serve(
    listener: TcpListener,
    agent: Arc<Agent>,
    limits: Limits,
    web: Option<WebConfig>,
) -> std::io::Result<std::convert::Infallible> {
    let web = web.unwrap_or_default();
    let tls = match &web.tls {
        Some(_) => Some(tokio_rustls::TlsAcceptor::from(
            web.server_config().map_err(std::io::Error::other)?,
        )),
        None => None,
    };
    let auth = match web.users.is_empty() {
        true => None,
        false => Some(Arc::new(Auth::new(web.users.clone())?)),
    };
    // The doctor's rates on the agent's own clock, whoever scrapes.
    agent.start_sampler()?;
    let front = Arc::new(Front {
        agent,
        auth,
        headers: web.headers.clone(),
    });
    // Two threads serve connections; scrapes run on tokio's blocking pool (they read /proc
    // and /sys and take the agent's lock), and so do bcrypt checks, at most
    // [`crate::auth::WORKERS`] of the 8 threads at once.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(8)
        .thread_name("agent-http")
        .enable_all()
        .build()?;
    listener.set_nonblocking(true)?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let slots = Arc::new(Mutex::new(Slots::default()));
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(c) => c,
                // A connection reset before accept, or out of fds for a moment: keep serving.
                Err(e) => {
                    eprintln!("netsteer agent: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let (key, scraper) = peer_key(peer.ip(), &limits.scrapers);
            if limits.scrapers_only && !scraper {
                // Not on the allow list: closed before a byte is read.
                continue;
            }
            let slot = {
                let mut s = slots.lock().unwrap_or_else(|p| p.into_inner());
                let mine = s.by_peer.get(&key).copied().unwrap_or(0);
                if s.total >= limits.total
                    || mine >= limits.per_peer
                    || (!scraper && s.others >= limits.for_others())
                {
                    None
                } else {
                    s.total += 1;
                    s.others += usize::from(!scraper);
                    *s.by_peer.entry(key).or_default() += 1;
                    Some(Slot {
                        slots: slots.clone(),
                        peer: key,
                        scraper,
                    })
                }
            };
            let Some(slot) = slot else {
                // Told why in one non-blocking write (plain HTTP only: a TLS client would
                // read it as a broken handshake), then closed: refusing costs no task.
                if tls.is_none() {
                    let _ = stream.try_write(
                        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n\
                          Content-Length: 21\r\nConnection: close\r\n\r\ntoo many connections\n",
                    );
                }
                continue;
            };
            let (front, tls) = (front.clone(), tls.clone());
            let who = Who { key, scraper };
            tokio::spawn(async move {
                // The place goes with the stream ([`Placed`]); a TLS handshake that fails or
                // times out gives it back when the task ends.
                let served = tokio::time::timeout(CONNECTION_DEADLINE, async {
                    let slot = Some(slot);
                    match tls {
                        Some(acceptor) => {
                            let Ok(Ok(s)) =
                                tokio::time::timeout(HANDSHAKE_DEADLINE, acceptor.accept(stream))
                                    .await
                            else {
                                return;
                            };
                            let io = hyper_util::rt::TokioIo::new(s);
                            connection(Placed { slot, io }, front, peer, who).await
                        }
                        None => {
                            let io = hyper_util::rt::TokioIo::new(stream);
                            connection(Placed { slot, io }, front, peer, who).await
                        }
                    }
                })
                .await;
                let _ = served;
            });
        }
    })
}

/// One HTTP/1.1 connection: one request (no keep-alive: a scraper's connection does not
/// hold a place between scrapes).
async fn connection<I>(io: I, front: Arc<Front>, peer: SocketAddr, who: Who)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req| {
        let front = front.clone();
        async move { Ok::<_, std::convert::Infallible>(answer(req, &front, who).await) }
    });
    let r = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEAD_DEADLINE)
        .max_buf_size(8192)
        .keep_alive(false)
        .serve_connection(io, svc)
        .await;
    if let Err(e) = r
        && !(e.is_timeout() || e.is_incomplete_message() || e.is_canceled() || e.is_closed())
        && !e.is_parse()
    {
        // Timeouts, resets and garbage are the client's business; nothing to log at rate.
        let io = std::error::Error::source(&e)
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .is_some();
        if !io {
            eprintln!("netsteer agent: {peer}: {e}");
        }
    }
}

fn reply(
    front: &Front,
    status: StatusCode,
    content_type: &str,
    body: Bytes,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    let h = r.headers_mut();
    if let Ok(v) = content_type.parse() {
        h.insert(hyper::header::CONTENT_TYPE, v);
    }
    for (name, value) in &front.headers {
        if let (Ok(n), Ok(v)) = (
            hyper::header::HeaderName::from_bytes(name.as_bytes()),
            hyper::header::HeaderValue::from_str(value),
        ) {
            h.insert(n, v);
        }
    }
    r
}

async fn answer(req: Request<Incoming>, front: &Arc<Front>, who: Who) -> Response<Full<Bytes>> {
    let Some(auth) = &front.auth else {
        return route(req, front).await;
    };
    let header = req.headers().get(hyper::header::AUTHORIZATION);
    match auth.check(header.map(|h| h.as_bytes()), who).await {
        Checked::User(_) => route(req, front).await,
        Checked::Refused => {
            let mut resp = reply(
                front,
                StatusCode::UNAUTHORIZED,
                "text/plain; charset=utf-8",
                Bytes::from_static(b"Unauthorized\n"),
            );
            resp.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                hyper::header::HeaderValue::from_static("Basic"),
            );
            resp
        }
        Checked::OverBudget => {
            // Said apart from a wrong password, so an operator who mistyped one a few times
            // knows to wait rather than to doubt the right one.
            let mut resp = reply(
                front,
                StatusCode::TOO_MANY_REQUESTS,
                "text/plain; charset=utf-8",
                Bytes::from_static(b"too many failed authentications; try again later\n"),
            );
            resp.headers_mut().insert(
                hyper::header::RETRY_AFTER,
                hyper::header::HeaderValue::from_static("1"),
            );
            resp
        }
    }
}

async fn route(req: Request<Incoming>, front: &Arc<Front>) -> Response<Full<Bytes>> {
    let plain = "text/plain; charset=utf-8";
    let not_found = || {
        reply(
            front,
            StatusCode::NOT_FOUND,
            plain,
            Bytes::from_static(b"not found\n"),
        )
    };
    // A body is nothing this server knows: GET /metrics has none.
    let has_body = req.headers().contains_key(hyper::header::TRANSFER_ENCODING)
        || req
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0");
    let head_only = match *req.method() {
        hyper::Method::GET => false,
        hyper::Method::HEAD => true,
        _ => return not_found(),
    };
    if has_body {
        return not_found();
    }
    let mut resp = match req.uri().path() {
        "/metrics" => {
            // Every client gets the same rates: the sampler's ([`Agent::start_sampler`]).
            let agent = front.agent.clone();
            let auth = front.auth.clone();
            let text = tokio::task::spawn_blocking(move || {
                let mut families = agent.scrape(Instant::now(), SystemTime::now());
                if let Some(auth) = auth {
                    families.extend(auth.families());
                }
                crate::encode(families)
            })
            .await
            .expect("a scrape does not panic");
            reply(
                front,
                StatusCode::OK,
                crate::CONTENT_TYPE,
                Bytes::from(text),
            )
        }
        "/" => reply(
            front,
            StatusCode::OK,
            plain,
            Bytes::from_static(b"netsteer agent: metrics at /metrics\n"),
        ),
        _ => return not_found(),
    };
    if head_only {
        let len = hyper::body::Body::size_hint(resp.body())
            .exact()
            .unwrap_or(0);
        *resp.body_mut() = Full::new(Bytes::new());
        resp.headers_mut()
            .insert(hyper::header::CONTENT_LENGTH, len.into());
    }
    resp
}
