//! The queues' balance and the platform's interrupt rate as metric families, and the
//! per-queue packet counters the sampler reads for them.

use super::{Agent, Sampled};
use crate::gather::families::Families;
use netsteer_host::HostView;
use netsteer_host::balance;
use netsteer_host::nic::Nic;
use netsteer_host::sample::{CounterSample, QueueCounters};
use std::collections::BTreeSet;

type Labels = Vec<(&'static str, String)>;

impl Agent {
    /// The per-queue packet counters of the devices that keep them (netdev qstats through
    /// the NIC backend), read beside the sampler's counters; None when the backend cannot be
    /// opened or the interfaces cannot be listed.
    pub(super) fn queue_counters(&self, s: &mut Sampled) -> Option<QueueCounters> {
        let backend = (self.nic)().ok()?;
        let all = netsteer_host::nic::list_interfaces(&self.fs).ok()?;
        let wanted: Vec<String> = all
            .into_iter()
            .filter(|d| self.opts.devices.is_empty() || self.opts.devices.contains(d))
            .collect();
        let source: netsteer_host::top::QueueStatsSource =
            Box::new(move |d: &str| backend.queue_stats(d));
        let mut problems = Vec::new();
        let new: Vec<String> = wanted
            .iter()
            .filter(|d| !s.probed.contains(*d))
            .cloned()
            .collect();
        let found = netsteer_host::top::read_queues(Some(&source), &new, &mut problems);
        s.probed.extend(new);
        s.counting.extend(
            found
                .keys()
                .map(|(d, _, _)| d.clone())
                .collect::<BTreeSet<_>>(),
        );
        // A device gone (or no longer wanted) is forgotten, so one coming back is asked again.
        s.probed.retain(|d| wanted.contains(d));
        s.counting.retain(|d| wanted.contains(d));
        let mut q = found;
        let again: Vec<String> = s
            .counting
            .iter()
            .filter(|d| !q.keys().any(|(n, _, _)| n == *d))
            .cloned()
            .collect();
        q.extend(netsteer_host::top::read_queues(
            Some(&source),
            &again,
            &mut problems,
        ));
        Some(q)
    }

    /// The exported devices' queue balance over the sampler's last interval and since boot,
    /// and the platform's interrupt rate over that interval (`netsteer_host::balance`; the
    /// interval's figures only while sampling, since a tree or a first tick has none).
    pub(super) fn balance(
        &self,
        out: &mut Families,
        c: &CounterSample,
        view: &HostView,
        devs: &[&Nic],
    ) {
        let names: BTreeSet<&str> = devs.iter().map(|n| n.name.as_str()).collect();
        let roles: balance::IrqRoles = balance::live_queue_roles(view)
            .into_iter()
            .filter(|(_, (nic, _))| names.contains(nic.as_str()))
            .collect();
        let ours = |q: &QueueCounters| -> QueueCounters {
            q.iter()
                .filter(|((d, _, _), _)| names.contains(d.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        let (interval, boot_queues) = {
            let s = self
                .sampled
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let queues = s.queues.as_ref().map(|(a, b)| (ours(a), ours(b)));
            let interval = s.interval.as_ref().map(|(a, b, dt)| {
                balance::between(&roles, a, b, *dt, queues.as_ref().map(|(a, b)| (a, b)))
            });
            let last = s.last_queues.as_ref().map(ours);
            (interval, last)
        };
        // Without a sampler (a tree's since-boot agent) the queues are read now.
        let boot_queues = boot_queues
            .or_else(|| {
                let mut scratch = Sampled::default();
                self.queue_counters(&mut scratch).as_ref().map(ours)
            })
            .unwrap_or_default();
        // The interrupts read at this scrape, as the counters beside them are (without
        // /proc/stat too); the queues' packets at the sampler's last reading.
        let boot = Some(balance::since_boot(
            &roles,
            c.interrupts.as_ref(),
            &boot_queues,
        ));
        let windows = [
            ("interval", interval.as_ref().map(|i| &i.balance)),
            ("boot", boot.as_ref()),
        ];
        for (window, list) in windows {
            for b in list.into_iter().flatten() {
                let of = serde_json::to_value(b.of)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                let l = || -> Labels {
                    vec![
                        ("device", b.nic.clone()),
                        ("of", of.clone()),
                        ("window", window.to_string()),
                    ]
                };
                if let (Some(cv), Some(spread)) = (b.cv, b.spread) {
                    out.balance_cv.push(l(), cv);
                    out.balance_spread.push(l(), spread);
                }
            }
        }
        if let Some(i) = interval.map(|i| i.interrupts) {
            for (kind, v) in [
                ("all", i.total_per_s),
                ("devices", i.device_per_s),
                ("msi", i.msi_per_s),
                ("nic-queues", i.nic_queues_per_s),
            ] {
                if let Some(v) = v {
                    out.interrupts_rate.push(vec![("kind", kind.into())], v);
                }
            }
        }
        out.interrupt_ceiling
            .push(vec![], balance::INTERRUPT_CEILING_PER_S);
    }
}
