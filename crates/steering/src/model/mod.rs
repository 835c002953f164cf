//! The steering model shared by the doctor and tune.

pub mod ctx;
pub mod desired;
pub mod knob;
pub mod load;
pub mod planner;
pub mod rfs;
