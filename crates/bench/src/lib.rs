//! netsteer's benchmarks and its one experiment module. One statistics engine ([`stats`]),
//! one clock abstraction ([`clock`]) and one reporter ([`report`]) serve every engine:
//! [`udp_echo`] (UDP round trips, seed 000, with an AF_XDP path), [`tcp`] (tcp-stream and
//! tcp-rr, seeds 001-004), [`netchannel`] (seed 004's experiments E1-E4). [`experiment`] is
//! the closed loop every caller shares: executor, order, clock and the three-way verdict.

pub mod args;
#[cfg(feature = "clap")]
pub mod cli;
pub mod clock;
pub mod experiment;
pub mod kv;
pub mod netchannel;
pub mod report;
pub mod search;
pub mod stats;
pub mod target;
pub mod tcp;
pub mod udp_echo;
pub mod waiter;
pub mod workload;
