//! netsteer's reasoning about a host: [`doctor`] turns a host view and a load sample into
//! findings; [`tune`] turns a profile into a plan and applies it transactionally.

pub mod doctor;
pub mod tune;
