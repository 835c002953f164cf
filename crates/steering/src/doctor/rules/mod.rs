//! The rules, one function each: `fn(&Ctx) -> Vec<Finding>`, pure and independent.

pub mod cpu;
pub mod drops;
pub mod irqrate;
pub mod latency;
pub mod napi;
pub mod pool;
pub mod rps;
pub mod rss;
pub mod spread;
pub mod trace;
pub mod tx;
