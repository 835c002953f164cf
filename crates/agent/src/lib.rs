//! `netsteer agent`'s work: the host's packet path as Prometheus metrics, read when scraped.
//!
//! Every scrape reads /proc and /sys (through a [`HostFs`], so a `--root` tree is served like a
//! live host), the NIC settings, the doctor's findings and the tune state, and encodes them with
//! the `prometheus` crate's text encoder. The doctor's rates are not the scrape's: a sampler of
//! the agent's own ([`Agent::start_sampler`]) reads the counters every [`RATE_INTERVAL`] (on a
//! live host), and every scrape judges by its last interval, so any number of scrapers, at any
//! pace, see the same rates (before issue 77 each scrape reset the interval of its client, and
//! every client on loopback was one client).
//!
//! Names sit beside node_exporter's without taking them: everything is `netsteer_*`, so a host
//! running both exports no series twice under one name. The mapping to node_exporter's names
//! (`node_softnet_*`, `node_cpu_seconds_total`, `node_interrupts_total`) is in docs/agent.md.
//!
//! Cardinality is bounded by the host's shape, never by traffic: per CPU (a fixed handful of
//! series), per queue (settings), per (queue IRQ, CPU) only where that CPU took interrupts, per
//! (queue, CPU) only where RPS/XPS allow that CPU, and per finding. See [`series_bound`].
//!
//! `--trace` adds another background loop: [`trace::TraceFeed`] samples the receive path's stage
//! latencies with `netsteer trace`'s programs and keeps cumulative histograms for the scrapes.

pub mod auth;
mod family;
mod gather;
pub mod http;
pub mod trace;
pub mod web;

pub use family::{CONTENT_TYPE, Family, HistogramValue, Kind, Sample, encode};
pub use gather::{Agent, AgentOptions, NicSource, RATE_INTERVAL, Rates, series_bound};
