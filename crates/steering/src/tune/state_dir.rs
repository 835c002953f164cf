//! The state directory's layout, in one place. `tune` keeps its journals and applied plan at
//! the top (`/var/lib/netsteer` by default, resolved inside `--root`); each user of the tuner
//! above it keeps its own journals in a subdirectory, so that one's apply and rollback never
//! replace the plan another last kept:
//!
//! ```text
//! STATE/                 tune apply / rollback / verify / persist
//! STATE/watch/           netsteer watch: its journals, what it owns, its standing advice
//! STATE/lanes/NAME/      one lane: lane.json and the lane's journals
//! STATE/search/          tune search: each trial's journal
//! ```

use std::path::{Path, PathBuf};

/// Where netsteer keeps what it applied, when no `--state-dir` is given.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/netsteer";

/// A state directory: its root and the places under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    pub fn new(root: impl Into<PathBuf>) -> StateDir {
        StateDir { root: root.into() }
    }

    /// tune's own journals and applied plan.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `netsteer watch`'s directory.
    pub fn watch(&self) -> PathBuf {
        self.root.join("watch")
    }

    /// The directory of every lane.
    pub fn lanes(&self) -> PathBuf {
        self.root.join("lanes")
    }

    /// One lane's directory; `name` is one `lane` accepted (`valid_lane_name`: no `/`, `.`
    /// or `..`), so it stays inside [`StateDir::lanes`].
    pub fn lane(&self, name: &str) -> PathBuf {
        self.lanes().join(name)
    }

    /// `tune search`'s trials.
    pub fn search(&self) -> PathBuf {
        self.root.join("search")
    }

    /// The state directory whose `watch/` is `dir` (a watcher's tuner holds only its own).
    pub fn of_watch(dir: &Path) -> Option<StateDir> {
        if dir.file_name()? != "watch" {
            return None;
        }
        Some(StateDir::new(dir.parent()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_spelled_once() {
        let s = StateDir::new("/var/lib/netsteer");
        assert_eq!(s.watch(), Path::new("/var/lib/netsteer/watch"));
        assert_eq!(s.lane("echo"), Path::new("/var/lib/netsteer/lanes/echo"));
        assert_eq!(s.search(), Path::new("/var/lib/netsteer/search"));
        assert_eq!(StateDir::of_watch(&s.watch()), Some(s.clone()));
        assert_eq!(StateDir::of_watch(&s.search()), None);
    }
}
