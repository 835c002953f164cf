//! What the agent's tests share: an agent over a tree, as the binary builds one with `--root`.

use netsteer_agent::{Agent, AgentOptions, NicSource, Rates};
use netsteer_host::HostFs;
use netsteer_steering::doctor::Goal;
use std::path::{Path, PathBuf};

/// An agent reading the tree at `root` (NIC settings from its recorded ethtool.json), every
/// device, the balanced goal.
pub fn tree_agent(root: &Path, rates: Rates, state_dir: Option<PathBuf>) -> Agent {
    let tree = root.to_path_buf();
    let nic: NicSource = Box::new(move || {
        Ok(Box::new(netsteer_nic::TreeNic::new(&tree)) as Box<dyn netsteer_nic::NicBackend>)
    });
    Agent::new(
        HostFs::open(root).unwrap(),
        nic,
        AgentOptions {
            devices: Vec::new(),
            state_dir,
            goal: Goal::Balanced,
            version: "test",
            rates,
            trace: None,
        },
    )
}
