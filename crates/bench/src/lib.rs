//! netsteer's traffic engines: [`udp_echo`] (UDP round trips, seed 000, with an AF_XDP path),
//! [`tcp`] (tcp-stream and tcp-rr, seeds 001-004), [`netchannel`] (seed 004's experiments
//! E1-E4) and [`kv`]. One reporter ([`report`]) serves them all; the statistics, the clock and
//! the experiment machinery are `netsteer-experiment`'s, which callers name directly, so policy
//! never compiles an engine and no engine stands between a caller and the policy.

use netsteer_experiment::{clock, stats};
pub mod kv;
pub mod netchannel;
pub mod report;
pub mod target;
pub mod tcp;
pub mod udp_echo;
pub mod waiter;
