//! What doctor's rules judge that the watcher's reflexes act on as well, named here so that a
//! reflex depends on these judgments and not on a rule file's insides: which CPUs drop with
//! no idle time and where their RPS work could go (`backlog-drops`), whether a device has RPS
//! off and the planner's RPS/RFS for it (`softirq-hot-cpu`), and how far an RSS table's hot
//! queue stands above an equal share (`rss-table-skewed`).

pub use super::rules::drops::{SATURATED_IDLE, away_evidence, idle, rps_away};
pub use super::rules::rps::{planned, rps_off, spreading_profile};
pub use super::rules::rss::hot_queue_excess;
