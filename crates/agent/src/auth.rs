//! Basic auth for the HTTP front, bounded against a crowd guessing passwords.
//!
//! bcrypt is slow by design (tens of milliseconds a check at cost 10, four times that at 12),
//! so a check is the most expensive thing a client can make the agent do, and before issue 77
//! every guess got one on the blocking pool the scrapes run on: 60 connections guessing kept
//! the pool busy and the authenticated scraper's scrapes took 12–17 s. Now:
//!
//! - A request whose `Authorization` header is byte for byte one that passed recently is let
//!   in on the connection's task, before any queue: an HMAC-SHA-256 of the header under a key
//!   drawn at start is looked up in a small cache (the plaintext is never kept; [`CACHE_SIZE`]
//!   entries, each forgotten [`CACHE_TTL`] after its last use). A scraper's every scrape after
//!   its first is such a request, so it never waits behind anyone's check.
//! - Every other request with credentials needs a token from its source network's budget
//!   (the /24 or /64 the connection caps count by, or a `--scraper`'s own address) and, unless
//!   it comes from a scraper, from the global budget; a request that finds none is answered 429
//!   without a check. A check that passes gives its tokens back, so the budgets count failures.
//! - Checks run at most [`WORKERS`] at a time (a semaphore in front of tokio's blocking pool,
//!   whose other threads the scrapes keep), with at most [`WAITING`] more waiting; a request
//!   beyond them is answered 429 unchecked too.
//! - An unknown user is checked against a dummy hash of the highest configured cost, so its
//!   answer takes as long as a configured user's.

use crate::family::{Family, Kind};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// Verified credentials remembered at most: a few scrapers with a few users each; only
/// credentials that passed enter, so guesses cannot push a scraper's out.
pub const CACHE_SIZE: usize = 64;
/// A remembered credential is forgotten this long after its last use (a scraper scraping at
/// any usual interval keeps its own; one that stopped is checked afresh when it returns).
pub const CACHE_TTL: Duration = Duration::from_secs(600);
/// bcrypt checks run at once: two of the blocking pool's 8 threads, so scrapes keep six.
pub const WORKERS: usize = 2;
/// Checks (of clients other than the scrapers) waiting for a worker at most; a request beyond
/// is refused unchecked rather than queued without bound.
pub const WAITING: usize = 6;

/// The global failure budget at bcrypt cost 10: 4 failed checks a second after a burst of 8.
/// Each step of cost doubles a check's work, so the budget halves with each step above 10
/// (doubles with each below): failed checks cost about the same CPU time whatever the cost,
/// about a quarter of one core at 50–60 ms a cost-10 check.
const GLOBAL_RATE_AT_10: f64 = 4.0;
const GLOBAL_BURST_AT_10: f64 = 8.0;
/// A source network's budget: 4 failures, then one every 4 seconds (an operator mistyping a
/// password a few times is not refused; one network cannot take the global budget alone).
const NET_BURST: f64 = 4.0;
const NET_RATE: f64 = 0.25;
/// Source networks tracked before the buckets that have refilled (and so carry nothing) are
/// dropped.
const MAX_NETS: usize = 1024;

/// Who asks: the key its connections are counted under, and whether it is a `--scraper`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Who {
    pub key: IpAddr,
    pub scraper: bool,
}

/// What a request's credentials came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked {
    /// Authenticated as this user.
    User(String),
    /// No credentials, malformed ones, or ones that failed the check: 401.
    Refused,
    /// Over the failure budget or the checks' queue: 429, no check run.
    OverBudget,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(burst: f64, now: Instant) -> Bucket {
        Bucket {
            tokens: burst,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant, rate: f64, burst: f64) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + rate * dt).min(burst);
        self.at = now;
    }
}

/// Token buckets of failed checks: one global, one per source network.
#[derive(Debug)]
struct Budget {
    rate: f64,
    burst: f64,
    global: Bucket,
    nets: HashMap<IpAddr, Bucket>,
}

impl Budget {
    fn new(cost: u32, now: Instant) -> Budget {
        let scale = 2f64.powi(10 - cost as i32);
        // At least one check in the burst, and no more than a hundred a second at low costs
        // (cheap hashes: the CPU is not the limit there, the connection caps are).
        let rate = (GLOBAL_RATE_AT_10 * scale).min(100.0);
        let burst = (GLOBAL_BURST_AT_10 * scale).clamp(1.0, 200.0);
        Budget {
            rate,
            burst,
            global: Bucket::full(burst, now),
            nets: HashMap::new(),
        }
    }

    /// Takes a token for `who`, or says there is none.
    fn take(&mut self, who: Who, now: Instant) -> bool {
        if self.nets.len() >= MAX_NETS {
            self.nets.retain(|_, b| {
                b.refill(now, NET_RATE, NET_BURST);
                b.tokens < NET_BURST
            });
        }
        self.global.refill(now, self.rate, self.burst);
        let net = self
            .nets
            .entry(who.key)
            .or_insert_with(|| Bucket::full(NET_BURST, now));
        net.refill(now, NET_RATE, NET_BURST);
        if net.tokens < 1.0 || (!who.scraper && self.global.tokens < 1.0) {
            return false;
        }
        net.tokens -= 1.0;
        if !who.scraper {
            self.global.tokens -= 1.0;
        }
        true
    }

    /// Gives back what [`Budget::take`] took (the check passed, or never ran).
    fn give_back(&mut self, who: Who) {
        if let Some(net) = self.nets.get_mut(&who.key) {
            net.tokens = (net.tokens + 1.0).min(NET_BURST);
        }
        if !who.scraper {
            self.global.tokens = (self.global.tokens + 1.0).min(self.burst);
        }
    }
}

struct Entry {
    tag: [u8; 32],
    user: String,
    used: Instant,
}

/// Credentials that passed, by their keyed hash.
#[derive(Default)]
struct Cache {
    entries: Vec<Entry>,
}

impl Cache {
    fn lookup(&mut self, tag: &[u8; 32], now: Instant) -> Option<String> {
        self.entries
            .retain(|e| now.saturating_duration_since(e.used) < CACHE_TTL);
        let e = self.entries.iter_mut().find(|e| &e.tag == tag)?;
        e.used = now;
        Some(e.user.clone())
    }

    fn insert(&mut self, tag: [u8; 32], user: String, now: Instant) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.tag == tag) {
            e.used = now;
            return;
        }
        if self.entries.len() >= CACHE_SIZE
            && let Some(oldest) = (0..self.entries.len()).min_by_key(|&i| self.entries[i].used)
        {
            self.entries.swap_remove(oldest);
        }
        self.entries.push(Entry {
            tag,
            user,
            used: now,
        });
    }
}

#[derive(Default)]
struct Counters {
    cache_hits: AtomicU64,
    passed: AtomicU64,
    failed: AtomicU64,
    no_credentials: AtomicU64,
    over_budget: AtomicU64,
}

/// The basic-auth users and everything that bounds their checking.
pub struct Auth {
    users: BTreeMap<String, String>,
    /// The unknown user's hash: random, of the highest configured cost.
    dummy: String,
    key: ring::hmac::Key,
    cache: Mutex<Cache>,
    budget: Mutex<Budget>,
    /// Places of checks running or waiting, for clients other than the scrapers.
    queue: Arc<Semaphore>,
    workers: Arc<Semaphore>,
    counters: Counters,
}

/// bcrypt's base64 of `n` random bytes.
fn random_b64(rng: &dyn ring::rand::SecureRandom, n: usize) -> std::io::Result<String> {
    use base64::Engine;
    let mut b = vec![0u8; n];
    rng.fill(&mut b)
        .map_err(|_| std::io::Error::other("no randomness from the system"))?;
    Ok(bcrypt::BASE_64.encode(&b))
}

impl Auth {
    /// `users` maps user names to bcrypt hashes (checked by [`crate::web::WebConfig::load`]).
    pub fn new(users: BTreeMap<String, String>) -> std::io::Result<Auth> {
        let rng = ring::rand::SystemRandom::new();
        let cost = users
            .values()
            .filter_map(|h| h.parse::<bcrypt::HashParts>().ok())
            .map(|p| p.get_cost())
            .max()
            .unwrap_or(bcrypt::DEFAULT_COST);
        // A well-formed hash no password matches (16 bytes of salt, 23 of hash): checking
        // against it costs what checking a configured hash of that cost does.
        let dummy = format!(
            "$2b${cost:02}${}{}",
            random_b64(&rng, 16)?,
            random_b64(&rng, 23)?
        );
        let key = ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng)
            .map_err(|_| std::io::Error::other("no randomness from the system"))?;
        Ok(Auth {
            users,
            dummy,
            key,
            cache: Mutex::default(),
            budget: Mutex::new(Budget::new(cost, Instant::now())),
            queue: Arc::new(Semaphore::new(WORKERS + WAITING)),
            workers: Arc::new(Semaphore::new(WORKERS)),
            counters: Counters::default(),
        })
    }

    /// The cost of the check an unknown user gets.
    pub fn dummy_cost(&self) -> u32 {
        self.dummy
            .parse::<bcrypt::HashParts>()
            .map(|p| p.get_cost())
            .unwrap_or(0)
    }

    /// The global failure budget: (failed checks a second, burst).
    pub fn budget(&self) -> (f64, f64) {
        let b = self.budget.lock().unwrap_or_else(|p| p.into_inner());
        (b.rate, b.burst)
    }

    fn tag(&self, header: &[u8]) -> [u8; 32] {
        ring::hmac::sign(&self.key, header)
            .as_ref()
            .try_into()
            .expect("HMAC-SHA-256 is 32 bytes")
    }

    /// Checks a request's `Authorization` header for `who`.
    pub async fn check(self: &Arc<Self>, header: Option<&[u8]>, who: Who) -> Checked {
        let c = &self.counters;
        let Some(header) = header else {
            c.no_credentials.fetch_add(1, Ordering::Relaxed);
            return Checked::Refused;
        };
        let tag = self.tag(header);
        let now = Instant::now();
        let hit = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .lookup(&tag, now);
        if let Some(user) = hit {
            c.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Checked::User(user);
        }
        let Some((user, password)) = basic(header) else {
            c.no_credentials.fetch_add(1, Ordering::Relaxed);
            return Checked::Refused;
        };
        let (hash, known) = match self.users.get(&user) {
            Some(h) => (h.clone(), true),
            None => (self.dummy.clone(), false),
        };
        let budget = || self.budget.lock().unwrap_or_else(|p| p.into_inner());
        if !budget().take(who, now) {
            c.over_budget.fetch_add(1, Ordering::Relaxed);
            return Checked::OverBudget;
        }
        // The scrapers' checks are bounded by their own budgets; everyone else's by the queue.
        let place = if who.scraper {
            None
        } else {
            match self.queue.clone().try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => {
                    budget().give_back(who);
                    c.over_budget.fetch_add(1, Ordering::Relaxed);
                    return Checked::OverBudget;
                }
            }
        };
        let worker = self
            .workers
            .clone()
            .acquire_owned()
            .await
            .expect("the workers' semaphore is never closed");
        let ok = tokio::task::spawn_blocking(move || {
            let _worker = worker;
            bcrypt::verify(password, &hash).unwrap_or(false)
        })
        .await
        .unwrap_or(false);
        drop(place);
        if ok && known {
            c.passed.fetch_add(1, Ordering::Relaxed);
            budget().give_back(who);
            self.cache.lock().unwrap_or_else(|p| p.into_inner()).insert(
                tag,
                user.clone(),
                Instant::now(),
            );
            Checked::User(user)
        } else {
            c.failed.fetch_add(1, Ordering::Relaxed);
            Checked::Refused
        }
    }

    /// The checks' counters and the budget, for the scrape.
    pub fn families(&self) -> Vec<Family> {
        let c = &self.counters;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        let mut checks = Family::new(
            "netsteer_http_bcrypt_checks",
            Kind::Counter,
            "bcrypt checks of basic-auth credentials the agent ran, by result (unknown users' included, as failed).",
        );
        checks.push(vec![("result", "passed".into())], n(&c.passed));
        checks.push(vec![("result", "failed".into())], n(&c.failed));
        let mut hits = Family::new(
            "netsteer_http_auth_cache_hits",
            Kind::Counter,
            "Requests let in because their Authorization header passed a check recently (no bcrypt run).",
        );
        hits.push(vec![], n(&c.cache_hits));
        let mut refused = Family::new(
            "netsteer_http_auth_refused",
            Kind::Counter,
            "Requests refused: without credentials (401), with wrong ones (401), over the failure budget or the checks' queue (429, unchecked).",
        );
        refused.push(
            vec![("reason", "no_credentials".into())],
            n(&c.no_credentials),
        );
        refused.push(vec![("reason", "wrong".into())], n(&c.failed));
        refused.push(vec![("reason", "over_budget".into())], n(&c.over_budget));
        let (rate, burst) = self.budget();
        let mut r = Family::new(
            "netsteer_http_auth_failure_budget_per_second",
            Kind::Gauge,
            "Failed bcrypt checks allowed a second, over all clients other than the scrapers (scaled to the highest configured cost).",
        );
        r.push(vec![], rate);
        let mut b = Family::new(
            "netsteer_http_auth_failure_budget_burst",
            Kind::Gauge,
            "Failed bcrypt checks allowed at once before the per-second budget applies.",
        );
        b.push(vec![], burst);
        vec![checks, hits, refused, r, b]
    }
}

/// `Basic BASE64(user:password)` as user and password.
fn basic(header: &[u8]) -> Option<(String, String)> {
    use base64::Engine;
    let b64 = std::str::from_utf8(header).ok()?.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users(costs: &[u32]) -> BTreeMap<String, String> {
        costs
            .iter()
            .enumerate()
            .map(|(i, c)| (format!("u{i}"), bcrypt::hash("pw", *c).unwrap()))
            .collect()
    }

    /// Issue 77 (low): the unknown user's check costs what the costliest configured user's
    /// does, so its time does not tell that the name is unknown. (Before: a fixed cost-10
    /// dummy beside cost-12 users.)
    #[test]
    fn the_unknown_users_check_has_the_highest_configured_cost() {
        let a = Auth::new(users(&[4, 6, 5])).unwrap();
        assert_eq!(a.dummy_cost(), 6);
        let d: bcrypt::HashParts = a.dummy.parse().unwrap();
        assert_eq!(d.get_cost(), 6);
        // A hash bcrypt checks (not one it refuses before hashing), which nothing matches.
        assert_eq!(bcrypt::verify("pw", &a.dummy).ok(), Some(false));
        assert_eq!(bcrypt::verify("", &a.dummy).ok(), Some(false));
    }

    fn who(key: &str, scraper: bool) -> Who {
        Who {
            key: key.parse().unwrap(),
            scraper,
        }
    }

    /// The budgets: a network's burst, then the global one shared by every other network;
    /// the scrapers are held to their own only; given-back tokens count again.
    #[test]
    fn failures_are_budgeted_per_network_and_in_all() {
        let t = Instant::now();
        // Cost 10: a burst of 8, 4 a second.
        let mut b = Budget::new(10, t);
        assert_eq!((b.rate, b.burst), (4.0, 8.0));
        let one = who("10.0.0.0", false);
        for _ in 0..4 {
            assert!(b.take(one, t));
        }
        assert!(!b.take(one, t), "past the network's burst");
        for n in 1..=4 {
            assert!(b.take(who(&format!("10.0.{n}.0"), false), t));
        }
        assert!(!b.take(who("10.0.9.0", false), t), "past the global burst");
        assert!(b.take(who("10.0.0.9", true), t), "a scraper has its own");
        b.give_back(who("10.0.1.0", false));
        assert!(b.take(who("10.0.5.0", false), t));
        // A quarter second refills one global token.
        assert!(b.take(who("10.0.6.0", false), t + Duration::from_millis(250)));
        assert!(!b.take(who("10.0.7.0", false), t + Duration::from_millis(250)));
        // Cost 12 is four times the work: a quarter of the budget.
        let b = Budget::new(12, t);
        assert_eq!((b.rate, b.burst), (1.0, 2.0));
        assert_eq!(Budget::new(14, t).burst, 1.0);
    }

    /// Only credentials that passed are remembered, by a keyed hash of the whole header, for
    /// CACHE_TTL after their last use, CACHE_SIZE at most.
    #[test]
    fn the_cache_forgets_after_its_ttl_and_keeps_its_size() {
        let t = Instant::now();
        let mut c = Cache::default();
        c.insert([1; 32], "a".into(), t);
        assert_eq!(c.lookup(&[1; 32], t + CACHE_TTL / 2), Some("a".into()));
        assert_eq!(
            c.lookup(&[1; 32], t + CACHE_TTL),
            Some("a".into()),
            "used at TTL/2"
        );
        assert_eq!(c.lookup(&[1; 32], t + CACHE_TTL * 3), None);
        for i in 0..(CACHE_SIZE + 10) as u8 {
            c.insert([i; 32], "u".into(), t + Duration::from_secs(u64::from(i)));
        }
        assert_eq!(c.entries.len(), CACHE_SIZE);
        assert_eq!(c.lookup(&[0; 32], t + Duration::from_secs(100)), None);
        assert!(c.lookup(&[73; 32], t + Duration::from_secs(100)).is_some());
    }

    /// Through the check itself: a right password passes once and is then a cache hit; a
    /// wrong one and an unknown user fail; past the budget nothing is checked.
    #[test]
    fn a_passed_header_is_a_cache_hit_and_past_the_budget_nothing_is_checked() {
        use base64::Engine;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let auth = Arc::new(Auth::new(users(&[4])).unwrap());
        let h = |s: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(s)
            )
        };
        let me = who("127.0.0.0", false);
        rt.block_on(async {
            let right = h("u0:pw");
            assert_eq!(
                auth.check(Some(right.as_bytes()), me).await,
                Checked::User("u0".into())
            );
            assert_eq!(
                auth.check(Some(right.as_bytes()), me).await,
                Checked::User("u0".into())
            );
            assert_eq!(auth.counters.passed.load(Ordering::Relaxed), 1);
            assert_eq!(auth.counters.cache_hits.load(Ordering::Relaxed), 1);
            assert_eq!(auth.check(None, me).await, Checked::Refused);
            // The network's burst of 4 failures, then refused unchecked.
            for guess in ["u0:nope", "nobody:pw", "u0:pw2", "u0:"] {
                assert_eq!(
                    auth.check(Some(h(guess).as_bytes()), me).await,
                    Checked::Refused
                );
            }
            assert_eq!(
                auth.check(Some(h("u0:x").as_bytes()), me).await,
                Checked::OverBudget
            );
            assert_eq!(auth.counters.failed.load(Ordering::Relaxed), 4);
            // The cached header still passes.
            assert_eq!(
                auth.check(Some(right.as_bytes()), me).await,
                Checked::User("u0".into())
            );
        });
    }
}
