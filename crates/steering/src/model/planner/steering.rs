//! Where the kernel's packet work runs: IRQ affinity, RPS/RFS and XPS per queue
//! (Documentation/networking/scaling.rst).

use super::*;

impl Builder<'_> {
    /// The usable CPUs outside a NIC's `order` (its node's CPUs), in the same order of
    /// preference: one thread per core first, CPU 0 last of those, HT siblings after.
    fn off_node(&self, order: &[u32]) -> Vec<u32> {
        let mut cpus: Vec<u32> = self
            .ctx
            .usable
            .iter()
            .filter(|c| !order.contains(c))
            .collect();
        cpus.sort_by_key(|&c| (self.ctx.is_secondary_thread(c), c == 0, c));
        cpus
    }

    /// One CPU per queue IRQ, host-wide: each NIC's queues on its own node's CPUs (in the
    /// order `spread_order` gives: one thread per core first, CPU 0 last, HT siblings next),
    /// each on the CPU that carries the fewest queue vectors of every NIC planned so far, and
    /// none past `irq_cap`; when the node's CPUs are all at the cap the queue goes to the
    /// least loaded CPU of another node, and the reason says so. With a sampled load the
    /// queues that move go hottest first, each to the CPU with the fewest interrupts per second
    /// planned so far (then the fewest vectors): two hot queues of a skewed RSS table do not
    /// share a CPU while cold ones share another. Returns the CPU chosen for each queue index.
    pub(super) fn irqs(
        &mut self,
        nic: &Nic,
        irqbalance_blocks: Option<String>,
    ) -> BTreeMap<u32, u32> {
        let order = self.ctx.spread_order(nic);
        let mut by_queue = BTreeMap::new();
        if order.is_empty() {
            return by_queue;
        }
        let remote = self.off_node(&order);
        let queue_of = |irq: &NicIrq| irq.role.placement_queue();
        // Queue → how many of its vectors move with it (rx-N and tx-N of split vectors).
        let mut queues: BTreeMap<u32, usize> = BTreeMap::new();
        for i in nic.queue_irqs().filter(|i| self.places(nic, i)) {
            if let Some(q) = queue_of(i) {
                // A shared line another NIC already placed: this queue follows it.
                if let Some(cpu) = self.irq_cpu.get(&i.irq) {
                    by_queue.insert(q, *cpu);
                    continue;
                }
                *queues.entry(q).or_default() += 1;
            }
        }
        queues.retain(|q, _| !by_queue.contains_key(q));
        // Interrupts per second of each queue's vectors over the sampled interval.
        let rates: Option<BTreeMap<u32, f64>> = self.ctx.load.map(|l| {
            let mut by_q: BTreeMap<u32, f64> = BTreeMap::new();
            for i in nic.queue_irqs().filter(|i| self.places(nic, i)) {
                if let Some(q) = queue_of(i) {
                    let r = l.cpu.irqs.iter().find(|r| r.irq == i.irq);
                    *by_q.entry(q).or_default() += r.map_or(0.0, |r| r.total);
                }
            }
            by_q
        });
        let rate = |q: u32| {
            rates
                .as_ref()
                .and_then(|r| r.get(&q))
                .copied()
                .unwrap_or(0.0)
        };
        let cap = self.irq_cap;
        let fair = cap.saturating_sub(1).max(1);
        // The one CPU an IRQ is pinned to, when its requested mask names exactly one.
        let single = |i: &NicIrq| {
            let set = i.affinity.requested.known()?;
            (set.len() == 1).then(|| set.lowest()).flatten()
        };
        let current_cpu = |q: u32| -> Option<u32> {
            let of_queue: Vec<&NicIrq> = nic
                .queue_irqs()
                .filter(|i| queue_of(i) == Some(q))
                .collect();
            // The receive IRQ decides: its CPU runs the queue's NET_RX softirq. A transmit
            // IRQ of the same queue follows it.
            let rx = of_queue
                .iter()
                .filter(|i| i.role.carries_rx())
                .find_map(|i| single(i));
            rx.or_else(|| {
                let first = single(of_queue.first()?)?;
                of_queue
                    .iter()
                    .all(|i| single(i) == Some(first))
                    .then_some(first)
            })
        };
        // A queue whose receive IRQ already sits on an acceptable CPU (local, usable, inside
        // --cpus) that carries no more than its fair share of every NIC's vectors stays there:
        // a well-placed host plans no moves, and doctor — which plans through this function —
        // never proposes moving an IRQ it has no complaint about. Two NICs stacked on the same
        // CPUs are not well placed: the second finds those CPUs at their share and moves.
        // With a sampled load the share is also one of interrupts per second (hottest queues
        // first, a quarter over the even split allowed so noise moves nothing): two hot queues
        // on one CPU are not well placed even when the vector count is fair. A queue alone on
        // its CPU always stays.
        //
        // Nor are two queues on the two hyperthreads of one core while a whole core of the
        // node carries no queue: siblings share the core's execution units and L1/L2, so
        // the pair gets about one core of softirq time (the doctor's irq-ht-siblings, which
        // takes its fix from here). The queue on the secondary thread moves (with a sampled
        // load the colder one; a queue under a tenth of the hottest's rate is no pair), and
        // only as many as there are free cores: with more queues than cores siblings are
        // where the rest must go.
        let mut staying: Vec<(u32, usize)> = queues.iter().map(|(&q, &k)| (q, k)).collect();
        let fair_rate = rates.as_ref().map(|r| {
            let planned: f64 = order.iter().filter_map(|c| self.irq_rate.get(c)).sum();
            1.25 * (r.values().sum::<f64>() + planned) / order.len() as f64
        });
        staying.sort_by_key(|&(q, _)| current_cpu(q).map(|c| self.ctx.is_secondary_thread(c)));
        if rates.is_some() {
            staying.sort_by(|a, b| rate(b.0).total_cmp(&rate(a.0)));
        }
        // Busy by the sampled rates, else by the interrupts counted since boot (what the
        // doctor's rule reads then): a queue that took none is no pair.
        let since_boot: BTreeMap<u32, f64> = {
            let mut by_q: BTreeMap<u32, f64> = BTreeMap::new();
            for i in nic.live_queue_irqs() {
                if let Some(q) = queue_of(i) {
                    *by_q.entry(q).or_default() += i.count as f64;
                }
            }
            by_q
        };
        let heat = |q: u32| match &rates {
            Some(_) => rate(q),
            None => since_boot.get(&q).copied().unwrap_or(0.0),
        };
        let hottest = queues.keys().map(|&q| heat(q)).fold(0.0, f64::max);
        let busy = |q: u32| heat(q) > 0.0 && heat(q) >= 0.1 * hottest;
        // A core is free when no queue vector of any NIC sits on it now or is planned there:
        // another NIC's queues on a core make it no better than the sibling pair.
        let sitting: CpuSet = self
            .ctx
            .view
            .nics
            .iter()
            .flat_map(|n| n.live_queue_irqs())
            .filter_map(single)
            .collect();
        let mut free_cores = order
            .iter()
            .map(|&c| self.ctx.siblings(c))
            .filter(|core: &CpuSet| {
                core.iter().all(|c| {
                    order.contains(&c)
                        && !sitting.contains(c)
                        && self.irq_load.get(&c).copied().unwrap_or(0) == 0
                })
            })
            .filter_map(|core| core.lowest())
            .collect::<std::collections::BTreeSet<u32>>()
            .len()
            // The queues that move anyway (off the node, or placed nowhere) take free cores
            // first: only what is left is room for a pair to part.
            .saturating_sub(
                queues
                    .keys()
                    .filter(|&&q| current_cpu(q).is_none_or(|c| !order.contains(&c)))
                    .count(),
            );
        // CPU → the busy queue that stays on it.
        let mut kept: BTreeMap<u32, u32> = BTreeMap::new();
        for (q, k) in staying {
            if let Some(cpu) = current_cpu(q)
                && busy(q)
                && free_cores > 0
                && self
                    .ctx
                    .siblings(cpu)
                    .iter()
                    .any(|s| s != cpu && kept.contains_key(&s))
            {
                free_cores -= 1;
                continue;
            }
            let rate_fits = |cpu: u32| {
                fair_rate.is_none_or(|fair| {
                    let here = self.irq_rate.get(&cpu).copied().unwrap_or(0.0);
                    here == 0.0 || here + rate(q) <= fair
                })
            };
            if let Some(cpu) = current_cpu(q)
                && order.contains(&cpu)
                && self.irq_load.get(&cpu).copied().unwrap_or(0) + k <= fair.max(k)
                && rate_fits(cpu)
            {
                by_queue.insert(q, cpu);
                *self.irq_load.entry(cpu).or_default() += k;
                *self.irq_rate.entry(cpu).or_default() += rate(q);
                if busy(q) {
                    kept.insert(cpu, q);
                }
            }
        }
        let mut spilled: std::collections::BTreeSet<u32> = Default::default();
        let mut moving: Vec<(u32, usize)> = queues
            .iter()
            .filter(|(q, _)| !by_queue.contains_key(q))
            .map(|(&q, &k)| (q, k))
            .collect();
        if rates.is_some() {
            // Hottest first (longest processing time first); the sort is stable, so equal
            // rates keep queue order.
            moving.sort_by(|a, b| rate(b.0).total_cmp(&rate(a.0)));
        }
        for (q, k) in moving {
            let load = &self.irq_load;
            let planned_rate = &self.irq_rate;
            let weighted = rates.is_some();
            // The least loaded of `cands` that stays within `limit`, earlier in order first;
            // with a sampled load, least loaded in interrupts per second first. Between CPUs
            // equally loaded, one whose HT siblings carry fewer queue vectors first: a queue
            // goes to a whole free core before it goes next to another on one core.
            let ctx = &self.ctx;
            let pick = |cands: &[u32], limit: usize| -> Option<u32> {
                cands
                    .iter()
                    .enumerate()
                    .map(|(pos, c)| {
                        let r = if weighted {
                            planned_rate.get(c).copied().unwrap_or(0.0)
                        } else {
                            0.0
                        };
                        let beside: usize = ctx
                            .siblings(*c)
                            .iter()
                            .filter(|s| s != c)
                            .map(|s| load.get(&s).copied().unwrap_or(0))
                            .sum();
                        (r, load.get(c).copied().unwrap_or(0), beside, pos, *c)
                    })
                    .filter(|(_, l, _, _, _)| l + k <= limit.max(k))
                    .min_by(|a, b| {
                        a.0.total_cmp(&b.0)
                            .then(a.1.cmp(&b.1))
                            .then(a.2.cmp(&b.2))
                            .then(a.3.cmp(&b.3))
                    })
                    .map(|(_, _, _, _, c)| c)
            };
            let cpu = match pick(&order, cap) {
                Some(c) => c,
                None => match pick(&remote, cap) {
                    Some(c) => {
                        spilled.insert(q);
                        c
                    }
                    None => pick(&order, usize::MAX).unwrap_or(order[0]),
                },
            };
            by_queue.insert(q, cpu);
            *self.irq_load.entry(cpu).or_default() += k;
            *self.irq_rate.entry(cpu).or_default() += rate(q);
        }
        let near = match self.ctx.nic_node(nic) {
            Some(n) => format!("on node {n}, {}'s own", nic.name),
            None if self.ctx.view.topology.nodes.len() > 1 => format!(
                "{}'s NUMA node is unknown (numa_node {}), so any usable CPU",
                nic.name, nic.numa_node
            ),
            None => match &self.ctx.view.topology.numa_unknown {
                Some(_) => "NUMA unknown (no node files), so any usable CPU".to_string(),
                None => "one NUMA node".to_string(),
            },
        };
        let irqs: Vec<NicIrq> = nic
            .queue_irqs()
            .filter(|i| self.places(nic, i))
            .cloned()
            .collect();
        for irq in irqs {
            let Some(q) = queue_of(&irq) else { continue };
            let cpu = by_queue[&q];
            if self.irq_cpu.insert(irq.irq, cpu).is_some() {
                continue;
            }
            let want: CpuSet = std::iter::once(cpu).collect();
            let current = irq.affinity.requested.known().map(CpuSet::to_list);
            let skip = if irq.affinity.settable.known() == Some(&false) {
                Some("kernel-managed IRQ: smp_affinity is read-only, writes fail with EPERM (EIO before 6.12)".to_string())
            } else {
                irqbalance_blocks.clone()
            };
            let shared = if irq.shared_with.is_empty() {
                String::new()
            } else {
                format!(
                    " [one line shared with {}: they follow it]",
                    irq.shared_with.join(", ")
                )
            };
            let reason = if spilled.contains(&q) {
                format!(
                    "{} ({}) on CPU {cpu}: no CPU {near} has room for this queue's {} vector(s) under the cap of {cap} (⌈vectors ÷ CPUs⌉ + 1 over every NIC), so the least loaded CPU of another node{shared}",
                    irq.name, irq.role, queues[&q]
                )
            } else if rates.is_some() {
                format!(
                    "{} ({}, {:.0} interrupts/s sampled) on CPU {cpu}: {near}; hottest queues first, each on the CPU with the fewest interrupts per second planned so far (at most {cap} queue vectors), a thread per core first, CPU 0 last of those, HT siblings after{shared}",
                    irq.name,
                    irq.role,
                    rate(q)
                )
            } else {
                format!(
                    "{} ({}) on CPU {cpu}: {near}; the CPU with the fewest queue vectors of every NIC (at most {cap}), a thread per core first, CPU 0 last of those, HT siblings after{shared}",
                    irq.name, irq.role
                )
            };
            self.irq_item(&irq, current, &want, reason, skip);
        }
        by_queue
    }

    /// One IRQ's affinity as an item, labelled with its vector's name (a saved plan finds a
    /// renumbered IRQ by it): the one IRQ item builder profiles and lanes share.
    pub(super) fn irq_item(
        &mut self,
        irq: &NicIrq,
        current: Option<String>,
        want: &CpuSet,
        reason: String,
        skip: Option<String>,
    ) {
        // smp_affinity_list rather than the mask: the kernel parses both the same way
        // (bitmap_parselist), the list reads the same at any nr_cpu_ids, and it is the
        // file the host model reads (and so the one a snapshot tree holds).
        let id = ItemId::Irq(irq.irq);
        let target = id.target().expect("an IRQ's id names its file");
        self.push(id.into(), target, current, want.to_list(), reason, skip);
        if let Some(last) = self.items.last_mut() {
            last.label = Some(irq.name.clone());
        }
    }

    /// A device whose `queues/` could not be listed gets one skipped item naming why, instead
    /// of no RPS/RFS/XPS items at all (which would read as "nothing to do").
    pub(super) fn queues_unreadable(&mut self, nic: &Nic, file: QueueFile) -> bool {
        let Some(why) = &nic.queues_unknown else {
            return false;
        };
        let id = ItemId::Queues {
            dev: nic.name.clone(),
            file,
        };
        let target = id.target().expect("a device's queues name their directory");
        self.push(
            id.into(),
            target,
            None,
            "?".into(),
            format!("{}: the device's queues could not be listed", file.word()),
            Some(why.clone()),
        );
        // What it stands for has no file of its own (its target is the directory that could
        // not be listed): it is filed under the kind of the files it would have planned.
        if let Some(last) = self.items.last_mut() {
            last.kind = file.kind();
            last.format = file.format();
        }
        true
    }

    /// One queue's CPU mask file as an item: `rps_cpus` of rx-`index` (kind `Rps`) or
    /// `xps_cpus` of tx-`index` (kind `Xps`), from what it holds now (`now`, or why it could
    /// not be read: then the item is skipped with that reason) to `want`.
    pub(super) fn queue_mask(
        &mut self,
        nic: &Nic,
        index: u32,
        now: &Field<CpuSet>,
        want: &CpuSet,
        kind: ItemKind,
        reason: String,
    ) {
        let file = match kind {
            ItemKind::Xps => QueueFile::XpsCpus,
            _ => QueueFile::RpsCpus,
        };
        let id = ItemId::Queue {
            dev: nic.name.clone(),
            file,
            index,
        };
        let target = id.target().expect("a queue's id names its file");
        let current = now.known().map(|s| self.ctx.mask(s));
        let skip = now.unknown_reason().map(str::to_string);
        let mask = self.ctx.mask(want);
        self.push(id.into(), target, current, mask, reason, skip);
    }

    pub(super) fn rps(&mut self, nic: &Nic, irq_cpus: &CpuSet) {
        if self.queues_unreadable(nic, QueueFile::RpsCpus) {
            return;
        }
        let profile = self.opts.profile;
        let local = self.ctx.local_cpus(nic);
        let nq = nic.rx_queues.len();
        // scaling.rst: with a queue per CPU RPS is redundant; with fewer queues it helps when
        // each queue steers to CPUs near its interrupting CPU. Here: RPS once the queues cover
        // less than half of the local CPUs, each queue taking its own share of the CPUs that
        // do not take queue interrupts (so no CPU is every queue's RPS target).
        let cores = local
            .iter()
            .filter(|c| !self.ctx.is_secondary_thread(*c))
            .count();
        // A device without queue IRQs (veth, tun) processes every queue on the sending CPU:
        // its queues spread nothing, so only RPS can, and every queue gets every local CPU.
        let irqless = nic.queue_irqs().next().is_none();
        let spread =
            profile != Profile::Latency && nq > 0 && cores > 1 && (irqless || nq * 2 <= cores);
        let mut per_queue: Vec<CpuSet> = vec![CpuSet::new(); nq];
        let reason = if !spread {
            if profile == Profile::Latency {
                "latency: RPS adds an IPI and a second CPU to every packet's path".to_string()
            } else {
                format!(
                    "{nq} rx queues for {cores} local cores: RSS covers at least half of them, RPS would mostly add IPIs (scaling.rst)"
                )
            }
        } else {
            let without = local.difference(irq_cpus);
            let pool = if without.is_empty() {
                local.clone()
            } else {
                without
            };
            if irqless {
                per_queue.iter_mut().for_each(|q| *q = pool.clone());
            } else {
                for (i, cpu) in pool.iter().enumerate() {
                    per_queue[i % nq].insert(cpu);
                }
            }
            if irq_cpus.is_empty() || pool == local {
                format!(
                    "{nq} rx queue(s) for {} local CPUs: spread protocol work over CPUs {}",
                    local.len(),
                    pool.to_list()
                )
            } else {
                format!(
                    "{nq} rx queue(s) for {} local CPUs: spread protocol work over CPUs {}, not the IRQ CPU(s) {} (scaling.rst: at high interrupt rates exclude the interrupting CPU)",
                    local.len(),
                    pool.to_list(),
                    irq_cpus.to_list()
                )
            }
        };
        let queues = nic.rx_queues.clone();
        for (i, q) in queues.iter().enumerate() {
            self.queue_mask(
                nic,
                q.index,
                &q.rps_cpus,
                &per_queue[i],
                ItemKind::Rps,
                reason.clone(),
            );
        }
        if !spread {
            return;
        }
        // RFS: both the global table and each queue's share must be set (scaling.rst, RFS).
        let entries = self.ctx.view.sysctls.rps_sock_flow_entries.clone();
        self.sysctl(
            "net.core.rps_sock_flow_entries",
            &entries,
            RFS_ENTRIES as i64,
            format!("RFS: {RFS_ENTRIES} flow entries, \"works fairly well on a moderately loaded server\" (scaling.rst)"),
        );
        let table = ItemId::Sysctl("net.core.rps_sock_flow_entries".into()).to_string();
        if let Some(last) = self.items.last_mut()
            && last.id == table
        {
            last.kind = ItemKind::RfsTable;
        }
        let per_queue = flow_cnt_per_queue(RFS_ENTRIES, nic.rx_queues.len());
        for q in &queues {
            let current = q.rps_flow_cnt.known().map(u64::to_string);
            let skip = q.rps_flow_cnt.unknown_reason().map(str::to_string);
            let id = ItemId::Queue {
                dev: nic.name.clone(),
                file: QueueFile::RpsFlowCnt,
                index: q.index,
            };
            let target = id.target().expect("a queue's id names its file");
            self.push(
                id.into(),
                target,
                current,
                per_queue.to_string(),
                format!(
                    "RFS: the {RFS_ENTRIES}-entry table shared over {} queue(s)",
                    nic.rx_queues.len()
                ),
                skip,
            );
        }
    }

    /// XPS: each CPU sends on the queue whose IRQ it serves, so transmit completions stay on
    /// the CPU that sent (scaling.rst, XPS).
    pub(super) fn xps(&mut self, nic: &Nic, queue_cpu: &BTreeMap<u32, u32>) {
        if self.queues_unreadable(nic, QueueFile::XpsCpus) {
            return;
        }
        let ntx = nic.tx_queues.len();
        if ntx < 2 {
            if ntx == 1 {
                self.notes.push(format!(
                    "{}: one tx queue, XPS has no effect (and xps_cpus answers ENOENT)",
                    nic.name
                ));
            }
            return;
        }
        let order = self.ctx.spread_order(nic);
        let mut masks: BTreeMap<u32, CpuSet> = BTreeMap::new();
        let mut placed = CpuSet::new();
        // CPUs that serve a queue's IRQ send on that queue...
        for (q, cpu) in queue_cpu {
            if (*q as usize) < ntx {
                masks.entry(*q).or_default().insert(*cpu);
                placed.insert(*cpu);
            }
        }
        // ...an HT sibling of such a CPU sends on its core's queue (seed 000's "0 12" pairs),
        // and the other usable CPUs, the NIC's node first, are dealt round-robin over the
        // queues: a sender may run anywhere, and a CPU without XPS picks its queue by hash.
        let mut rest: Vec<u32> = order.clone();
        rest.extend(self.off_node(&order));
        let mut next = 0usize;
        for cpu in rest.into_iter().filter(|c| !placed.contains(*c)) {
            let core_queue = queue_cpu
                .iter()
                .find(|(q, c)| (**q as usize) < ntx && self.ctx.siblings(cpu).contains(**c))
                .map(|(q, _)| *q);
            let q = core_queue.unwrap_or_else(|| {
                let q = (next % ntx) as u32;
                next += 1;
                q
            });
            masks.entry(q).or_default().insert(cpu);
        }
        let queues = nic.tx_queues.clone();
        for q in &queues {
            let want = masks.get(&q.index).cloned().unwrap_or_default();
            let reason = if want.is_empty() {
                format!(
                    "more tx queues ({ntx}) than CPUs: tx-{} gets no CPU",
                    q.index
                )
            } else {
                format!("CPU(s) {} send on tx-{}", want.to_list(), q.index)
            };
            self.queue_mask(nic, q.index, &q.xps_cpus, &want, ItemKind::Xps, reason);
        }
    }
}
