//! `netsteer tune`: profiles → a plan (pure), a transactional apply with a journal, rollback
//! (also after a crash), drift verification, persistence, and [`Tuner`], the one entry point
//! that applies, verifies with an experiment and rolls back.

pub mod apply;
pub mod journal;
pub mod model;
pub mod persist;
pub mod plan;
pub mod saved;
pub mod tuner;
pub mod verify;

pub use apply::{
    ApplyOptions, ApplyReport, Backend, HostBackend, RollbackReport, StepError, apply,
    latest_journal, rollback,
};
pub use model::{Action, Format, Item, ItemKind, NapiMode, Plan, Profile, Target};
pub use plan::{IrqbalancePolicy, Knob, PlanError, PlanOptions, plan};
pub use tuner::{Check, Side, TuneError, Tuner, Verified};
