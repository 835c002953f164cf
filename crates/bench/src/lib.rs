//! netsteer's benchmarks. One statistics engine ([`stats`]), one clock abstraction
//! ([`clock`]) and one reporter ([`report`]) serve every benchmark; [`udp_echo`] is the UDP
//! round-trip benchmark (seed 000's apparatus).

pub mod clock;
pub mod netchannel;
pub mod report;
pub mod stats;
pub mod tcp;
pub mod udp_echo;
