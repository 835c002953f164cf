//! `netsteer tune`: a transactional apply of the steering model's plan with a journal,
//! rollback (also after a crash), drift verification, persistence, and [`Tuner`], the one
//! entry point that applies, verifies with an experiment and rolls back. The plan itself (a
//! profile → the desired state) is the shared model's ([`crate::model::planner`]); nothing
//! here imports [`crate::doctor`].

pub mod apply;
pub mod journal;
pub mod persist;
pub mod process;
pub mod rollback;
pub mod saved;
pub mod search;
pub mod search_report;
pub mod state_dir;
pub mod status;
pub mod text;
pub mod tuner;
pub mod verify;

pub use crate::model::desired::{
    Action, Format, Item, ItemKind, NAPI_SET_SINCE, NapiMode, Plan, Profile, THREADED_POLL_SINCE,
    Target, kernel_version,
};
pub use crate::model::planner::{IrqbalancePolicy, Knob, PlanError, PlanOptions, plan};
pub use apply::{
    ApplyOptions, ApplyReport, Backend, HostBackend, RollbackReport, StepError, apply,
    latest_journal, rollback,
};
pub use state_dir::{DEFAULT_STATE_DIR, StateDir};
pub use status::{ApplyStatus, RollbackStatus, StepStatus};
pub use tuner::{Check, Side, TuneError, Tuner, Verified, applied_plan_in};
