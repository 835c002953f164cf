//! netsteer's experiment policy, with no traffic engine in it: what `tune apply --verify-with`,
//! `tune search`, the lab and the benchmarks' comparisons decide with. One clock abstraction
//! ([`clock`]), one statistics engine ([`stats`]), the closed loop every caller shares
//! ([`experiment`]: executor, order and the three-way verdict), workloads and their goals
//! ([`workload`]) and the search's model ([`search`]).
//!
//! Why a crate of its own: the steering policy (doctor, tune) depends on it, and must not
//! compile the UDP, TCP and netchannel engines (`netsteer-bench`) to decide anything
//! (docs/architecture.md).

pub mod clock;
pub mod experiment;
pub mod search;
pub mod stats;
pub mod workload;
