//! netsteer's reasoning about a host. [`model`] is the shared steering model: the rule
//! context (online and usable CPUs, each IRQ's CPU, NIC locality), the load, RPS/RFS maths,
//! and the planner that turns a profile into the desired state. Its two users sit side by
//! side and never import each other: [`doctor`] turns a host view and a load sample into
//! findings with exact fixes; [`tune`] applies a plan transactionally, verifies it with an
//! experiment and rolls it back. [`watch`] sits above both: doctor's signals every interval,
//! tune's transaction for what it changes.

pub mod doctor;
pub mod lane;
pub mod model;
pub mod tune;
pub mod watch;
