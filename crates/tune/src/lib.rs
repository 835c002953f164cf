//! netsteer's reasoning about a host: [`doctor`] turns a host view and a load sample into
//! findings; tuning (plans, apply, rollback) builds on the same model.

pub mod doctor;
