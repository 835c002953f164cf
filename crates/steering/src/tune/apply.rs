//! Transactional apply: re-read every value, journal the old ones, write phase by phase with a
//! read-back after each write, and on any failure put back everything already changed.

use super::journal::{self, Journal, Record};
use crate::model::desired::{Action, Format, Item, ItemKind, Plan, Target};
use crate::model::knob::{ItemId, QueueFile};
use netsteer_host::HostFs;
use netsteer_host::ethtool::NicKnob;
use netsteer_nic::NicBackend;
use std::path::Path;

/// A refused read or write, with the errno when the kernel gave one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{target}: {message}")]
pub struct StepError {
    pub target: String,
    pub errno: Option<i32>,
    pub message: String,
}

/// Where values are read and written. [`HostBackend`] is the real one; tests wrap it to inject
/// failures.
pub trait Backend {
    fn read(&self, target: &Target) -> Result<String, StepError>;
    fn write(&self, target: &Target, value: &str) -> Result<(), StepError>;

    /// What a channel (or ring) change on `dev` may reset besides itself, as plan items would
    /// name them: its queue IRQs' affinities (drivers free and request their vectors again),
    /// its queues' RPS/RFS/XPS files (the queue kobjects are made anew, knobs.md 4.6) and its
    /// RSS table (igb writes its default; virtio-net on 6.1 keeps a copy the device no longer
    /// follows). Apply journals them before the change, so rollback puts them back after the
    /// count. None by default (test backends).
    fn channel_dependents(&self, _dev: &str) -> Vec<(String, Target, Format)> {
        Vec::new()
    }
}

/// Files through a `HostFs` root, NIC settings through a [`NicBackend`], services through
/// systemctl (live host only).
pub struct HostBackend<'a> {
    pub fs: HostFs,
    pub nic: &'a dyn NicBackend,
}

pub(super) fn step_err(
    target: &Target,
    errno: Option<i32>,
    message: impl Into<String>,
) -> StepError {
    StepError {
        target: target.to_string(),
        errno,
        message: message.into(),
    }
}

fn systemctl(args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new("systemctl")
        .args(args)
        .output()
        .map_err(|e| format!("systemctl {}: {e}", args.join(" ")))?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    // `is-active` exits non-zero for inactive units and still prints the state.
    if out.status.success() || args.first() == Some(&"is-active") {
        Ok(text)
    } else {
        Err(format!(
            "systemctl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl HostBackend<'_> {
    /// Services exist only on the live host; a tree's are never started or stopped.
    fn services_allowed(&self, target: &Target) -> Result<(), StepError> {
        if self.fs.is_live() {
            Ok(())
        } else {
            Err(step_err(
                target,
                None,
                "services and processes are not touched with --root",
            ))
        }
    }
}

impl Backend for HostBackend<'_> {
    fn channel_dependents(&self, dev: &str) -> Vec<(String, Target, Format)> {
        let settings = |name: &str| self.nic.settings(name);
        let view = netsteer_host::read_host(&self.fs, Some(&settings as &dyn Fn(&str) -> _));
        let Some(nic) = view.nic(dev) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut add = |id: ItemId, format: Format| {
            let target = id.target().expect("a file's or setting's id names it");
            out.push((id.to_string(), target, format));
        };
        for i in nic.queue_irqs() {
            add(ItemId::Irq(i.irq), Format::List);
        }
        let queue = |file: QueueFile, index: u32| ItemId::Queue {
            dev: dev.to_string(),
            file,
            index,
        };
        for r in &nic.rx_queues {
            add(queue(QueueFile::RpsCpus, r.index), Format::Mask);
            add(queue(QueueFile::RpsFlowCnt, r.index), Format::Int);
        }
        for t in &nic.tx_queues {
            add(queue(QueueFile::XpsCpus, t.index), Format::Mask);
        }
        if nic
            .settings
            .as_ref()
            .is_some_and(|s| NicKnob::RssIndirection.read(s).is_ok())
        {
            let knob = NicKnob::RssIndirection;
            let dev = dev.to_string();
            add(ItemId::Nic { dev, knob }, Format::Text);
        }
        out
    }

    fn read(&self, target: &Target) -> Result<String, StepError> {
        match target {
            Target::Nic { dev, knob } => knob
                .read(&self.nic.settings(dev))
                .map_err(|m| step_err(target, None, m)),
            Target::Service { name } => {
                self.services_allowed(target)?;
                systemctl(&["is-active", name]).map_err(|m| step_err(target, None, m))
            }
            Target::Process { pid, start } => {
                self.services_allowed(target)?;
                super::process::read_affinity(&self.fs, target, *pid, *start)
            }
            Target::NapiThread { dev, napi } => {
                self.services_allowed(target)?;
                super::process::read_napi_thread(&self.fs, self.nic, target, dev, *napi)
            }
            // Every other variant is a file (`Target::path` is Some for each).
            file => self
                .fs
                .read(file.path().unwrap_or_default())
                .map_err(|e| step_err(target, e.raw_os_error(), e.to_string())),
        }
    }

    fn write(&self, target: &Target, value: &str) -> Result<(), StepError> {
        // The last gate of every write to the host, whoever planned it.
        target
            .knob_check()
            .map_err(|why| step_err(target, Some(libc::EPERM), why))?;
        match target {
            Target::Nic { dev, knob } => self
                .nic
                .set(dev, knob, value)
                .map_err(|e| step_err(target, e.errno(), e.to_string())),
            Target::Service { name } => {
                self.services_allowed(target)?;
                let verb = if value.trim() == "active" {
                    "start"
                } else {
                    "stop"
                };
                systemctl(&[verb, name])
                    .map(|_| ())
                    .map_err(|m| step_err(target, None, m))
            }
            Target::Process { pid, start } => {
                self.services_allowed(target)?;
                super::process::write_affinity(&self.fs, target, *pid, *start, value)
            }
            Target::NapiThread { dev, napi } => {
                self.services_allowed(target)?;
                super::process::write_napi_thread(&self.fs, self.nic, target, dev, *napi, value)
            }
            // Every other variant is a file (`Target::path` is Some for each).
            file => self
                .fs
                .write(file.path().unwrap_or_default(), value)
                .map_err(|e| step_err(target, e.raw_os_error(), e.to_string())),
        }
    }
}

/// Refusals that are the kernel's design, not a failure: a managed IRQ (EPERM from 6.12, EIO
/// before, knobs.md 4.2), a knob the driver does not implement (EOPNOTSUPP), a file that the
/// device does not back (ENOENT `xps_cpus` on one tx queue).
fn refused_by_design(item: &Item, e: &StepError) -> Option<String> {
    let errno = e.errno?;
    // The target's kind, not the item's: a plan file's `kind` is someone's word.
    match (item.target.kind(), errno) {
        (ItemKind::IrqAffinity, libc::EPERM | libc::EIO) => Some(format!(
            "the kernel refuses to move this IRQ ({}): a managed or per-CPU IRQ",
            if errno == libc::EPERM { "EPERM" } else { "EIO" }
        )),
        (_, libc::EOPNOTSUPP) => Some("not supported by the driver (EOPNOTSUPP)".into()),
        (ItemKind::Xps, libc::ENOENT) => {
            Some("the device does not back xps_cpus (ENOENT: one tx queue)".into())
        }
        // A lane's service that exited: its pin went with it, nothing to put back.
        (ItemKind::Affinity, libc::ESRCH) => Some("the process is gone (ESRCH)".into()),
        _ => None,
    }
}

#[derive(Debug, Clone, Default)]
pub struct ApplyOptions {
    /// Test hook: abort the process right after this many writes (a crash between two writes).
    pub crash_after_writes: Option<usize>,
    /// Recorded in the journal ([`Record::Begin`]'s `leave_rewritten`): whoever rolls it back
    /// leaves a knob that no longer holds what this apply wrote (someone else wrote it since).
    /// `watch` applies so: its step-aside then holds for a `tune rollback` of its journals
    /// even when the watcher never saw the rewrite (killed, or not running).
    pub leave_rewritten: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StepOutcome {
    pub id: String,
    pub target: String,
    pub old: String,
    pub new: String,
    pub status: StepStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ApplyReport {
    pub journal: String,
    pub status: ApplyStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub steps: Vec<StepOutcome>,
    /// The plan's notes: what it chose not to do, and why (a driver that fixes n-tuple filters
    /// off, coalescing it does not offer).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl ApplyReport {
    /// How many steps changed a value.
    pub fn changed(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| s.status == StepStatus::Changed)
            .count()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("journal {path}: {source}")]
    Journal {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("re-planning after the channel change: {0}")]
    Replan(String),
    /// A plan item whose target is not a knob ([`Target::knob_check`]): nothing was written.
    #[error("plan item {id}: {why}; nothing was applied")]
    NotAKnob { id: String, why: String },
}

fn jerr(path: &Path) -> impl Fn(std::io::Error) -> ApplyError + '_ {
    move |source| ApplyError::Journal {
        path: path.display().to_string(),
        source,
    }
}

/// A value this apply may have changed, and what it was.
#[derive(Debug, Clone)]
pub(super) struct Written {
    pub(super) item: Item,
    pub(super) old: String,
    /// First journaled after a channel change: the target may have been made by it (a new
    /// queue's files, a new vector), and may go with the old count again.
    pub(super) after_channels: bool,
}

struct Run<'a> {
    backend: &'a dyn Backend,
    journal: Journal,
    /// Items written (journal order), with their old values.
    written: Vec<Written>,
    /// A channel (or ring) count has been written in this apply.
    channels_written: bool,
    steps: Vec<StepOutcome>,
    writes: usize,
    opts: &'a ApplyOptions,
}

impl Run<'_> {
    fn append(&mut self, r: &Record) -> Result<(), ApplyError> {
        let path = self.journal.path().to_path_buf();
        self.journal.append(r).map_err(jerr(&path))
    }

    /// Journals the old value of every change in `items` that still needs one, before any of
    /// them is written. Returns the items to write with their old values.
    fn prepare(&mut self, items: &[Item]) -> Result<Vec<(Item, String)>, ApplyError> {
        let mut todo = Vec::new();
        for item in items.iter().filter(|i| i.action == Action::Change) {
            match self.backend.read(&item.target) {
                Ok(old) if item.format.same(&old, &item.desired) && !item.rewrite => {
                    self.steps.push(StepOutcome {
                        id: item.id.clone(),
                        target: item.target.to_string(),
                        old: old.trim().to_string(),
                        new: item.desired.clone(),
                        status: StepStatus::Unchanged,
                        why: Some("already as wanted when applied".into()),
                    });
                }
                Ok(old) => {
                    self.append(&Record::Old {
                        id: item.id.clone(),
                        target: item.target.clone(),
                        format: item.format,
                        old: old.clone(),
                        new: item.desired.clone(),
                    })?;
                    todo.push((item.clone(), old));
                }
                Err(e) => {
                    let why = refused_by_design(item, &e)
                        .unwrap_or_else(|| format!("cannot read it: {}", e.message));
                    self.skip_unread(item, why)?;
                }
            }
        }
        Ok(todo)
    }

    /// Journals and reports `item` as skipped before anything was read of it.
    fn skip_unread(&mut self, item: &Item, why: String) -> Result<(), ApplyError> {
        self.append(&Record::Skipped {
            id: item.id.clone(),
            why: why.clone(),
        })?;
        self.steps.push(StepOutcome {
            id: item.id.clone(),
            target: item.target.to_string(),
            old: String::new(),
            new: item.desired.clone(),
            status: StepStatus::Skipped,
            why: Some(why),
        });
        Ok(())
    }

    fn remember(&mut self, item: &Item, old: &str) {
        self.written.push(Written {
            item: item.clone(),
            old: old.to_string(),
            after_channels: self.channels_written,
        });
    }

    /// Before a channel (or ring) change on `dev`: journals what it may reset, as written, so
    /// that a rollback restores it after the count.
    fn guard_dependents(&mut self, dev: &str) -> Result<(), ApplyError> {
        for (id, target, format) in self.backend.channel_dependents(dev) {
            let Ok(old) = self.backend.read(&target) else {
                continue;
            };
            self.append(&Record::Old {
                id: id.clone(),
                target: target.clone(),
                format,
                old: old.clone(),
                new: old.clone(),
            })?;
            self.append(&Record::Write { id: id.clone() })?;
            let item = Item {
                id: id.clone(),
                kind: target.kind(),
                target,
                format,
                label: None,
                current: Some(old.clone()),
                desired: old.clone(),
                reason: String::new(),
                action: Action::Change,
                rewrite: false,
            };
            self.remember(&item, &old);
        }
        Ok(())
    }

    /// Writes one item and reads it back. `Err` means the transaction must be undone.
    fn write(&mut self, item: &Item, old: &str) -> Result<Result<(), String>, ApplyError> {
        if item.kind == ItemKind::Channels
            && let Some(dev) = item.target_device()
        {
            let dev = dev.to_string();
            self.guard_dependents(&dev)?;
        }
        self.append(&Record::Write {
            id: item.id.clone(),
        })?;
        let result = self.backend.write(&item.target, &item.desired);
        self.writes += 1;
        if self.opts.crash_after_writes == Some(self.writes) {
            // Simulates a power cut: no destructors, no journal end.
            std::process::abort();
        }
        let outcome = |status: StepStatus, why: Option<String>| StepOutcome {
            id: item.id.clone(),
            target: item.target.to_string(),
            old: old.trim().to_string(),
            new: item.desired.clone(),
            status,
            why,
        };
        match result {
            Ok(()) => {}
            Err(e) => {
                if let Some(why) = refused_by_design(item, &e) {
                    // The value did not change, but it may have been half-written: keep it in
                    // the undo list anyway; restoring an unchanged value is harmless.
                    self.remember(item, old);
                    self.append(&Record::Skipped {
                        id: item.id.clone(),
                        why: why.clone(),
                    })?;
                    self.steps.push(outcome(StepStatus::Skipped, Some(why)));
                    return Ok(Ok(()));
                }
                self.remember(item, old);
                return Ok(Err(e.to_string()));
            }
        }
        self.remember(item, old);
        if item.kind == ItemKind::Channels {
            self.channels_written = true;
        }
        match self.backend.read(&item.target) {
            Ok(back) if item.format.same(&back, &item.desired) => {
                self.append(&Record::Done {
                    id: item.id.clone(),
                    readback: back.trim().to_string(),
                })?;
                if item.format.same(old, &item.desired) {
                    self.steps.push(outcome(
                        StepStatus::Rewritten,
                        Some("written again although it read as wanted: after a channel change (or when given explicitly) the device may not follow the table the driver reports".into()),
                    ));
                } else {
                    self.steps.push(outcome(StepStatus::Changed, None));
                }
                Ok(Ok(()))
            }
            // A NIC driver that takes the request and keeps its value (virtio-net on 6.12
            // reports adaptive-rx and ignores it without VIRTIO_NET_F_VQ_NOTF_COAL): nothing
            // changed, so nothing to undo; said as a skip, and left out of what verify checks.
            Ok(back)
                if matches!(item.target, Target::Nic { .. }) && item.format.same(&back, old) =>
            {
                let why = format!(
                    "the driver accepted {:?} and kept {:?}: it does not implement this setting",
                    item.desired,
                    back.trim()
                );
                self.append(&Record::Skipped {
                    id: item.id.clone(),
                    why: why.clone(),
                })?;
                self.steps.push(outcome(StepStatus::Skipped, Some(why)));
                Ok(Ok(()))
            }
            Ok(back) => Ok(Err(format!(
                "{}: wrote {:?} but it reads back as {:?}",
                item.target,
                item.desired,
                back.trim()
            ))),
            Err(e) => Ok(Err(format!("reading back {}", e))),
        }
    }
}

/// Where an item stands in a rollback: the channel and ring counts first (they recreate the
/// queues, vectors and, on igb, the RSS table that the rest then restores), then the tables and
/// features, IRQ affinities and per-NAPI settings, the per-queue files, the sysctls, and
/// irqbalance last (started before the IRQs are back, it would move them again).
fn undo_rank(kind: ItemKind) -> u8 {
    match kind {
        ItemKind::Irqbalance => u8::MAX,
        k => k.phase(),
    }
}

/// Restores what `written` changed; returns (restored ids, failures). The first record of an id
/// holds its value from before the apply (a later one may be a value a channel change made).
pub(super) fn undo(backend: &dyn Backend, written: &[Written]) -> (Vec<String>, Vec<String>) {
    let mut seen = std::collections::BTreeSet::new();
    let mut order: Vec<(usize, &Written)> = written
        .iter()
        .enumerate()
        .filter(|(_, w)| seen.insert(w.item.id.clone()))
        .collect();
    // Counts first, then by phase; newest first within a phase (the n-tuple rules go before
    // the feature that allowed them).
    order.sort_by_key(|(i, w)| (undo_rank(w.item.kind), std::cmp::Reverse(*i)));
    let mut restored = Vec::new();
    let mut failed = Vec::new();
    let mut recounted: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    // Ids put back ahead of their turn, for a count going down (see `before_fewer_queues`).
    let mut early: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    for (_, w) in &order {
        let item = &w.item;
        if early.contains(&item.id) {
            continue;
        }
        let dev = item.target.device().map(str::to_string);
        // A channel count only: ring sizes share the kind but recreate no queues.
        if matches!(
            &item.target,
            Target::Nic {
                knob: NicKnob::Channels(_),
                ..
            }
        ) && let Some(d) = &dev
        {
            before_fewer_queues(
                backend,
                w,
                d,
                &order,
                &mut early,
                &mut restored,
                &mut failed,
            );
        }
        let table = old_table(backend, item, &w.old);
        let value = match table {
            OldTable::KernelDefault => netsteer_host::ethtool::INDIRECTION_DEFAULT,
            _ => w.old.as_str(),
        };
        // After its count is restored a device's table is put back even when it reads as
        // before (the device may not follow the driver's copy), unless it is the driver's
        // own default, which the count change re-made (see OldTable).
        let force = matches!(table, OldTable::KernelDefault | OldTable::Configured)
            && dev.as_ref().is_some_and(|d| recounted.contains(d));
        let gone_ok = w.after_channels && !recounted.is_empty();
        match put_back(backend, item, &w.old, value, force, gone_ok) {
            PutBack::Gone => {
                restored.push(item.id.clone());
                continue;
            }
            PutBack::Done => restored.push(item.id.clone()),
            PutBack::Failed(e) => failed.push(e),
        }
        if item.kind == ItemKind::Channels
            && let Some(d) = dev
        {
            recounted.insert(d);
        }
    }
    (restored, failed)
}

/// How one journaled item went back.
enum PutBack {
    /// It reads as it was, or was written so (or the kernel refuses it by design).
    Done,
    /// Its target is gone (ENOENT) where that is allowed: made by a channel change the
    /// rollback undid.
    Gone,
    /// "id: error".
    Failed(String),
}

/// Puts `item` back to `value` unless it reads as `old` already and `force` is off.
fn put_back(
    backend: &dyn Backend,
    item: &Item,
    old: &str,
    value: &str,
    force: bool,
    gone_ok: bool,
) -> PutBack {
    match backend.read(&item.target) {
        Ok(now) if now == old && !force => return PutBack::Done,
        Err(e) if e.errno == Some(libc::ENOENT) && gone_ok => return PutBack::Gone,
        _ => {}
    }
    match backend.write(&item.target, value) {
        Ok(()) => PutBack::Done,
        Err(e) if refused_by_design(item, &e).is_some() => PutBack::Done,
        Err(e) => PutBack::Failed(format!("{}: {}", item.id, e)),
    }
}

/// Before `channels` (a journaled channel count of `dev`) goes back down: what of this journal
/// would make the kernel refuse the smaller count is undone first. A table written out is
/// marked configured, and a configured table or an n-tuple rule naming a queue at or above
/// the new count makes ethtool refuse it ("requested channel counts are too low for existing
/// indirection table settings" / "… ntuple filter settings", net/ethtool/channels.c); seen
/// when a profile grew igb's channels and wrote its table over them. The journal's n-tuple
/// rules of the device are put back now (newest first, as their phase would); the table is
/// reset to the default (which clears the flag), and its own entry, after the count, then
/// puts it back as it was. Only this journal's own entries: a table or rule someone else made
/// is not ours to move, and the count's failure then says why.
fn before_fewer_queues(
    backend: &dyn Backend,
    channels: &Written,
    dev: &str,
    order: &[(usize, &Written)],
    early: &mut std::collections::BTreeSet<String>,
    restored: &mut Vec<String>,
    failed: &mut Vec<String>,
) {
    let count = |v: &str| v.trim().parse::<u32>().ok();
    let now = backend.read(&channels.item.target).ok();
    let to = match (now.as_deref().and_then(count), count(&channels.old)) {
        (Some(now), Some(old)) if old < now => old,
        _ => return,
    };
    let of_dev = |kind: ItemKind| {
        order
            .iter()
            .map(|(_, w)| *w)
            .filter(move |w| w.item.kind == kind && w.item.target.device() == Some(dev))
    };
    for w in of_dev(ItemKind::Ntuple) {
        if !early.insert(w.item.id.clone()) {
            continue;
        }
        match put_back(backend, &w.item, &w.old, &w.old, false, false) {
            PutBack::Done | PutBack::Gone => restored.push(w.item.id.clone()),
            PutBack::Failed(e) => failed.push(e),
        }
    }
    // The indirection table only: flow-hash items share the kind and have no default.
    let tables = of_dev(ItemKind::Rss).filter(|w| {
        matches!(
            &w.item.target,
            Target::Nic {
                knob: NicKnob::RssIndirection,
                ..
            }
        )
    });
    for w in tables {
        // A table that sends no bucket to a queue at or above the count it goes back to does
        // not stand in its way (the kernel checks the highest queue the table names): it is
        // left as it is. What cannot be read is reset.
        let fits = backend
            .read(&w.item.target)
            .ok()
            .and_then(|t| netsteer_host::ethtool::parse_indirection(&t).ok())
            .is_some_and(|t| !t.is_empty() && t.iter().all(|q| *q < to));
        if fits {
            continue;
        }
        if let Err(e) = backend.write(&w.item.target, netsteer_host::ethtool::INDIRECTION_DEFAULT)
            && refused_by_design(&w.item, &e).is_none()
        {
            failed.push(format!(
                "{}: reset to the default before the channel count goes down: {e}",
                w.item.id
            ));
        }
    }
}

/// What a journaled RSS table was, for rollback: writing a table out marks it configured
/// (IFF_RXFH_CONFIGURED), after which the kernel refuses any channel count below its highest
/// queue ("requested channel counts are too low for existing indirection table settings",
/// seen on igb after a rollback wrote its table back) and drivers stop re-making it when
/// queues change. So how a table goes back depends on what it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OldTable {
    /// Not a table.
    None,
    /// The kernel's default layout (ethtool_rxfh_indir_default): put back by a reset to the
    /// default, which restores the table and clears the flag (if someone had written this
    /// layout by hand, the flag ends cleared: the more permissive state, the same table).
    KernelDefault,
    /// A driver's own default (igb and igc: contiguous blocks, `j * queues / size`), which the
    /// driver re-makes on a count change: left alone when it reads as before, written back
    /// (and then marked configured: no interface resets to it) only when it does not.
    DriverBlocks,
    /// Anything else was written by someone and is marked configured already: written back,
    /// and after a count change even when it reads as before (virtio-net under QEMU drops RSS
    /// on a queue change while the driver keeps reporting its copy).
    Configured,
}

/// The queue count is the device's as it reads now: rollback restores channel counts first.
fn old_table(backend: &dyn Backend, item: &Item, old: &str) -> OldTable {
    let Target::Nic {
        dev,
        knob: NicKnob::RssIndirection,
    } = &item.target
    else {
        return OldTable::None;
    };
    // The rx queue count as drivers give ETHTOOL_GRXRINGS: combined plus rx-only channels.
    let count = |kind: &str| {
        backend
            .read(&Target::Nic {
                dev: dev.clone(),
                knob: NicKnob::Channels(kind.into()),
            })
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok())
            .unwrap_or(0)
    };
    let n = count("combined") + count("rx");
    match netsteer_host::ethtool::parse_indirection(old) {
        Ok(t) if netsteer_host::ethtool::is_default_indirection(&t, n) => OldTable::KernelDefault,
        Ok(t) if netsteer_host::ethtool::is_block_indirection(&t, n) => OldTable::DriverBlocks,
        _ => OldTable::Configured,
    }
}

/// Applies `plan`. `replan` is called after channel counts changed (queues were recreated) to
/// plan the later phases against the new queues. The journal goes to `state_dir/journal/`.
pub fn apply(
    plan: &Plan,
    root: &str,
    backend: &dyn Backend,
    state_dir: &Path,
    replan: &mut dyn FnMut() -> Result<Plan, String>,
    opts: &ApplyOptions,
) -> Result<ApplyReport, ApplyError> {
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // A plan may come from a file: nothing is journaled or written unless every item it
    // would read or change is a knob (a skipped item is never touched: the planner's
    // "queues could not be listed" item names the directory).
    // Its ids are the journal's keys (one rollback entry an id): each names its own target
    // and stands once.
    let mut ids = std::collections::BTreeSet::new();
    for i in plan
        .items
        .iter()
        .filter(|i| !matches!(i.action, Action::Skip(_)))
    {
        let checked = crate::model::knob::check_knob(&i.id, &i.target).and_then(|()| {
            if ids.insert(i.id.as_str()) {
                Ok(())
            } else {
                Err("the plan names this id twice".to_string())
            }
        });
        if let Err(why) = checked {
            return Err(ApplyError::NotAKnob {
                id: i.id.clone(),
                why,
            });
        }
    }
    let journal = Journal::create(state_dir).map_err(jerr(state_dir))?;
    let seq = journal.seq();
    let mut run = Run {
        backend,
        journal,
        written: Vec::new(),
        channels_written: false,
        steps: Vec::new(),
        writes: 0,
        opts,
    };
    run.append(&Record::Begin {
        version: journal::JOURNAL_VERSION,
        seq,
        root: root.to_string(),
        started_unix: started,
        plan: Box::new(plan.clone()),
        leave_rewritten: opts.leave_rewritten,
    })?;
    let mut final_plan = plan.clone();
    // Phase 1 (channels) recreates queues: everything after it is planned again from the
    // host as it is then, so no per-queue write goes to a queue that vanished or missed one
    // that appeared.
    let (first, rest): (Vec<Item>, Vec<Item>) =
        plan.items.iter().cloned().partition(|i| i.phase() <= 1);
    let mut failure = None;
    let todo = run.prepare(&first)?;
    let channels_changed = todo.iter().any(|(i, _)| i.kind == ItemKind::Channels);
    for (item, old) in &todo {
        if let Err(e) = run.write(item, old)? {
            failure = Some(e);
            break;
        }
    }
    if failure.is_none() {
        let rest = if channels_changed {
            match replan() {
                Ok(p) => {
                    let recounted: Vec<String> = todo
                        .iter()
                        .filter(|(i, _)| i.kind == ItemKind::Channels)
                        .filter_map(|(i, _)| i.target_device().map(str::to_string))
                        .collect();
                    let rest: Vec<Item> = p
                        .items
                        .iter()
                        .filter(|i| i.phase() > 1)
                        .cloned()
                        .map(|mut i| {
                            // The table is written again after the count changed, even when
                            // the driver reports it as wanted (virtio-net on 6.1 under QEMU
                            // drops RSS on the queue-count command but keeps reporting it).
                            let table = matches!(
                                &i.target,
                                Target::Nic {
                                    knob: NicKnob::RssIndirection,
                                    ..
                                }
                            );
                            if table
                                && i.action == Action::Keep
                                && i.target_device()
                                    .is_some_and(|d| recounted.iter().any(|r| r == d))
                            {
                                i.action = Action::Change;
                                i.rewrite = true;
                            }
                            i
                        })
                        .collect();
                    // What was to change and cannot now (a queue the new count removed) is
                    // said in the report, not dropped unseen.
                    for i in &rest {
                        if let Action::Skip(why) = &i.action
                            && plan
                                .items
                                .iter()
                                .any(|o| o.id == i.id && o.action == Action::Change)
                        {
                            run.skip_unread(i, format!("after the channel change: {why}"))?;
                        }
                    }
                    final_plan.items = first.iter().cloned().chain(rest.iter().cloned()).collect();
                    final_plan.notes.extend(p.notes);
                    rest
                }
                Err(e) => {
                    failure = Some(format!("re-planning after the channel change: {e}"));
                    Vec::new()
                }
            }
        } else {
            rest
        };
        if failure.is_none() {
            // Every old value of every remaining phase is journaled before the first of
            // their writes.
            let todo = run.prepare(&rest)?;
            for (item, old) in &todo {
                if let Err(e) = run.write(item, old)? {
                    failure = Some(e);
                    break;
                }
            }
        }
    }
    let journal_path = run.journal.path().display().to_string();
    match failure {
        None => {
            run.append(&Record::End {
                status: ApplyStatus::Applied,
                error: None,
            })?;
            // What was skipped at apply time (refused by design, ignored by the driver) is
            // kept as a skip with its reason, so verify does not call it drift.
            for s in run.steps.iter().filter(|s| s.status == StepStatus::Skipped) {
                if let Some(i) = final_plan.items.iter_mut().find(|i| i.id == s.id) {
                    i.action = Action::Skip(s.why.clone().unwrap_or_default());
                }
            }
            let kept = serde_json::to_vec_pretty(&final_plan).unwrap_or_default();
            journal::write_atomic(&journal::applied_plan_path(state_dir), &kept)
                .map_err(jerr(state_dir))?;
            Ok(ApplyReport {
                journal: journal_path,
                status: ApplyStatus::Applied,
                error: None,
                steps: run.steps,
                notes: final_plan.notes,
            })
        }
        Some(error) => {
            let (restored, failed) = undo(backend, &run.written);
            run.append(&Record::RolledBack {
                restored: restored.clone(),
                failed: failed.clone(),
            })?;
            let status = if failed.is_empty() {
                ApplyStatus::RolledBack
            } else {
                ApplyStatus::RollbackIncomplete
            };
            run.append(&Record::End {
                status,
                error: Some(error.clone()),
            })?;
            let mut steps = run.steps;
            for s in steps.iter_mut() {
                if s.status == StepStatus::Changed && restored.contains(&s.id) {
                    s.status = StepStatus::Restored;
                }
            }
            let error = if failed.is_empty() {
                error
            } else {
                format!("{error}; and could not restore: {}", failed.join("; "))
            };
            Ok(ApplyReport {
                journal: journal_path,
                status,
                error: Some(error),
                steps,
                notes: final_plan.notes,
            })
        }
    }
}

pub use super::rollback::{RollbackError, RollbackReport, latest_journal, rollback};
use super::status::{ApplyStatus, StepStatus};
