//! How an apply, each of its steps and a rollback ended, as values. Serialised as the words
//! reports, journals and `--json` have always carried (`applied`, `rolled-back`, …), so no
//! reader sees a change; compared as enums, never as text.

use serde::{Deserialize, Serialize};
use std::fmt;

/// How `tune apply` ended (`ApplyReport::status`, and a journal's `End` record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApplyStatus {
    /// Every step done or skipped by design.
    Applied,
    /// A step failed and every value written was put back.
    RolledBack,
    /// A step failed and some written value could not be put back.
    RollbackIncomplete,
}

/// What became of one item of an apply (`StepOutcome::status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepStatus {
    /// Written, and reads back as wanted.
    Changed,
    /// Already as wanted at apply time: not written.
    Unchanged,
    /// Written again although it read as wanted (an RSS table after a channel change).
    Rewritten,
    /// Left alone, with why: refused by the kernel's design, or ignored by the driver.
    Skipped,
    /// Written, then undone by the rollback after a later step failed.
    Restored,
}

/// How `tune rollback` ended (`RollbackReport::status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RollbackStatus {
    /// Every value the journal recorded as written is back.
    Restored,
    /// Nothing to restore: already rolled back, or nothing was written.
    NothingToDo,
    /// Some values could not be written back.
    Incomplete,
}

impl ApplyStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ApplyStatus::Applied => "applied",
            ApplyStatus::RolledBack => "rolled-back",
            ApplyStatus::RollbackIncomplete => "rollback-incomplete",
        }
    }
}

impl StepStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Changed => "changed",
            StepStatus::Unchanged => "unchanged",
            StepStatus::Rewritten => "rewritten",
            StepStatus::Skipped => "skipped",
            StepStatus::Restored => "restored",
        }
    }
}

impl RollbackStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RollbackStatus::Restored => "restored",
            RollbackStatus::NothingToDo => "nothing-to-do",
            RollbackStatus::Incomplete => "incomplete",
        }
    }

    /// Whether the knobs hold what they held before the apply (restored now, or already).
    pub fn is_clean(self) -> bool {
        self != RollbackStatus::Incomplete
    }
}

macro_rules! display_as_str {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )*};
}
display_as_str!(ApplyStatus, StepStatus, RollbackStatus);

#[cfg(test)]
mod tests {
    use super::*;

    /// The words on disk and in `--json` stay what they were.
    #[test]
    fn each_status_is_spelled_as_before_and_reads_back() {
        fn round<
            T: Serialize + for<'de> Deserialize<'de> + PartialEq + fmt::Debug + fmt::Display,
        >(
            v: T,
        ) {
            let json = serde_json::to_string(&v).unwrap();
            assert_eq!(json, format!("\"{v}\""));
            assert_eq!(serde_json::from_str::<T>(&json).unwrap(), v);
        }
        for s in [
            ApplyStatus::Applied,
            ApplyStatus::RolledBack,
            ApplyStatus::RollbackIncomplete,
        ] {
            round(s);
        }
        for s in [
            StepStatus::Changed,
            StepStatus::Unchanged,
            StepStatus::Rewritten,
            StepStatus::Skipped,
            StepStatus::Restored,
        ] {
            round(s);
        }
        for s in [
            RollbackStatus::Restored,
            RollbackStatus::NothingToDo,
            RollbackStatus::Incomplete,
        ] {
            round(s);
        }
        assert_eq!(
            serde_json::to_string(&ApplyStatus::RolledBack).unwrap(),
            "\"rolled-back\""
        );
        assert_eq!(
            serde_json::to_string(&RollbackStatus::NothingToDo).unwrap(),
            "\"nothing-to-do\""
        );
        assert!(serde_json::from_str::<ApplyStatus>("\"done\"").is_err());
    }
}
