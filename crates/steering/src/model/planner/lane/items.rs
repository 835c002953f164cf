//! The lane's items, knob family by knob family: steering onto the queue, the RSS table
//! without the lanes' queues, IRQs, RPS/XPS, coalescing and the queue's NAPI.

use super::*;

impl Builder<'_> {
    /// The flow onto the lane's queue: the n-tuple rules (TCP or UDP, IPv4 and IPv6) with the
    /// queue out of the RSS table, or the given RSS buckets alone on it.
    pub(super) fn lane_steering(
        &mut self,
        nic: &Nic,
        spec: &LaneSpec,
        queue: u32,
        held: &BTreeSet<u32>,
    ) -> Result<(), LaneError> {
        let nq = nic.rx_queues.len() as u32;
        if nq <= 1 {
            self.notes.push(format!(
                "{}: one rx queue: every flow of the device shares the lane's queue (nothing to steer)",
                nic.name
            ));
            return Ok(());
        }
        let no_steering = |why: String| LaneError::NoSteering {
            dev: nic.name.clone(),
            proto: spec.proto,
            port: spec.port,
            queue,
            why,
        };
        let Some(s) = nic.settings.clone() else {
            return Err(no_steering("its NIC settings were not read".into()));
        };
        let table_len = s.rss.known().map_or(0, |r| r.indirection.len());
        if !spec.rss_buckets.is_empty() {
            if table_len == 0 {
                return Err(LaneError::BadBucket(format!(
                    "{} reports no RSS indirection table",
                    nic.name
                )));
            }
            if let Some(b) = spec.rss_buckets.iter().find(|b| **b as usize >= table_len) {
                return Err(LaneError::BadBucket(format!(
                    "bucket {b}: {}'s table has {table_len} (0 to {})",
                    nic.name,
                    table_len - 1
                )));
            }
            let rest: Vec<u32> = (0..nq)
                .filter(|q| *q != queue && !held.contains(q))
                .collect();
            if rest.is_empty() {
                return Err(no_steering(format!(
                    "every other rx queue is a lane's ({})",
                    held.iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                )));
            }
            // A bucket another lane's queue has now is that lane's (its own --rss-bucket):
            // kept there, or this lane's table would move the other lane's flow off it.
            let current: Vec<u32> = s
                .rss
                .known()
                .map(|r| r.indirection.clone())
                .unwrap_or_default();
            let mut k = 0usize;
            let table: Vec<String> = (0..table_len as u32)
                .map(|i| {
                    let now = current.get(i as usize).copied();
                    if spec.rss_buckets.contains(&i) {
                        queue.to_string()
                    } else if let Some(q) = now.filter(|q| held.contains(q)) {
                        q.to_string()
                    } else {
                        k += 1;
                        rest[(k - 1) % rest.len()].to_string()
                    }
                })
                .collect();
            // The buckets were found for one flow: with addresses alone in the hash every
            // flow between the same two hosts shares them (igb hashes UDP that way).
            if let Ok(hash) = s.flow_hash() {
                for t in match spec.proto {
                    Proto::Udp => ["udp4", "udp6"],
                    Proto::Tcp => ["tcp4", "tcp6"],
                } {
                    let Some(now) = hash.get(t) else { continue };
                    if now.contains('f') && now.contains('n') {
                        continue;
                    }
                    self.nic_text_item(nic, NicKnob::FlowHash(t.into()), super::super::nic::with_ports(now), format!(
                            "{t} hashed on the ports too: with addresses alone every flow between two hosts shares the lane's bucket(s)"
                        ));
                }
            }
            let buckets: Vec<String> = spec.rss_buckets.iter().map(u32::to_string).collect();
            self.nic_text_item(nic, NicKnob::RssIndirection, table.join(" "), format!(
                    "RSS: bucket(s) {} (the service's flow) alone on rx-{queue}, the other {} buckets over the other {} queues",
                    buckets.join(","),
                    table_len - spec.rss_buckets.len(),
                    rest.len()
                ));
            self.notes.push(format!(
                "{}: a flow steered by RSS bucket stays on rx-{queue} only while its hash does: other flows hashing into bucket(s) {} share the queue, and a new RSS key moves it",
                nic.name,
                buckets.join(",")
            ));
            return Ok(());
        }
        let features = s.features.known();
        let ntuple = features.and_then(|f| f.get("ntuple-filters")).copied();
        let why = match (features, ntuple) {
            (None, _) => Some("its offload features could not be read".to_string()),
            (Some(_), None) => Some("the driver has no n-tuple filters".to_string()),
            (Some(_), Some(f)) if !f.active && !f.changeable => Some(
                "n-tuple filters are fixed off by the driver (ntuple-filters off [fixed])"
                    .to_string(),
            ),
            _ => None,
        };
        if let Some(why) = why {
            return Err(no_steering(why));
        }
        // The lanes' queues out of the RSS table (no bulk flow hashes to them), then the rules.
        self.lane_table(nic, &s, queue, held, nq)
            .map_err(no_steering)?;
        self.nic_item(
            nic,
            NicKnob::Feature("ntuple-filters".into()),
            1,
            "n-tuple filters on: the lane's rules need them".into(),
        );
        let protos = match spec.proto {
            Proto::Udp => [NtupleProto::Udp4, NtupleProto::Udp6],
            Proto::Tcp => [NtupleProto::Tcp4, NtupleProto::Tcp6],
        };
        for proto in protos {
            let why = format!(
                "the service's {} port {} to rx-{queue}, past RSS",
                proto.name(),
                spec.port
            );
            let key = NtupleKey {
                proto,
                port: spec.port,
            };
            self.ntuple_item(nic, key, queue, why);
        }
        Ok(())
    }

    /// The RSS table without the lanes' queues: kept when it already shares its buckets
    /// equally (within one) over exactly the other queues, else dealt round robin.
    pub(super) fn lane_table(
        &mut self,
        nic: &Nic,
        s: &NicSettings,
        queue: u32,
        held: &BTreeSet<u32>,
        nq: u32,
    ) -> Result<(), String> {
        let Some(rss) = s.rss.known().filter(|r| !r.indirection.is_empty()) else {
            self.notes.push(format!(
                "{}: no RSS indirection table reported: bulk flows may still hash to rx-{queue}",
                nic.name
            ));
            return Ok(());
        };
        let rest: Vec<u32> = (0..nq)
            .filter(|q| *q != queue && !held.contains(q))
            .collect();
        if rest.is_empty() {
            return Err("every other rx queue is a lane's".into());
        }
        let table = super::super::nic::equal_table(&rss.indirection, &rest);
        let lanes: Vec<String> = std::iter::once(queue)
            .chain(held.iter().copied())
            .map(|q| format!("rx-{q}"))
            .collect();
        self.nic_text_item(nic, NicKnob::RssIndirection, table.join(" "), format!(
                "RSS: no hash bucket on the lane queue(s) {}; the other {} queues share the {} buckets equally",
                lanes.join(", "),
                rest.len(),
                table.len()
            ));
        Ok(())
    }

    /// The lane queue's vectors on the lane's CPU; every other queue vector of the device
    /// that may be delivered on a lane's CPU keeps the rest of its CPUs (or, with none left,
    /// the CPUs near the NIC that no lane holds).
    pub(super) fn lane_irqs(
        &mut self,
        nic: &Nic,
        spec: &LaneSpec,
        queue: u32,
        lane_cpus: &CpuSet,
        held: &BTreeSet<u32>,
    ) -> Result<(), LaneError> {
        let cpu = spec.cpu;
        // Every vector, those of queues turned off too (unlike the host plan): a later
        // `ethtool -L` brings their queues back on the vectors' affinity, and a lane's CPU
        // must not take their interrupts then.
        let irqs: Vec<NicIrq> = nic.queue_irqs().cloned().collect();
        if irqs.is_empty() {
            self.notes.push(format!(
                "{}: no queue IRQ (a virtual device): its queues are processed on the sending CPU, so only RPS, XPS, the NAPI and the service's pin apply",
                nic.name
            ));
            return Ok(());
        }
        let near = self.ctx.local_cpus(nic).difference(lane_cpus);
        let mine = |i: &NicIrq| i.role.placement_queue() == Some(queue);
        for irq in &irqs {
            // Another lane's queue stays where that lane put it.
            if irq
                .role
                .placement_queue()
                .is_some_and(|q| q != queue && held.contains(&q))
            {
                continue;
            }
            let requested = irq.affinity.requested.known().cloned();
            let managed = irq.affinity.settable.known() == Some(&false);
            let (want, reason) = if mine(irq) {
                if managed {
                    let eff = irq.affinity.effective.known().cloned().unwrap_or_default();
                    if eff.len() == 1 && eff.contains(cpu) {
                        continue;
                    }
                    return Err(LaneError::ManagedIrq {
                        cpu,
                        queue,
                        irq: irq.irq,
                        effective: eff.to_list(),
                    });
                }
                (
                    std::iter::once(cpu).collect::<CpuSet>(),
                    format!(
                        "{} ({}) on the lane's CPU {cpu}: the queue's NET_RX runs there, beside the service",
                        irq.name, irq.role
                    ),
                )
            } else {
                let Some(req) = requested.clone() else {
                    continue;
                };
                if req.intersection(lane_cpus).is_empty() {
                    continue;
                }
                let rest = req.difference(lane_cpus);
                let want = if rest.is_empty() { near.clone() } else { rest };
                if managed {
                    self.notes.push(format!(
                        "{}: IRQ {} ({}) is kernel-managed and may be delivered on lane CPU(s) {}: it cannot be moved off",
                        nic.name,
                        irq.irq,
                        irq.name,
                        req.intersection(lane_cpus).to_list()
                    ));
                    continue;
                }
                (
                    want,
                    format!(
                        "{} ({}) off the lane CPU(s) {}: no other queue interrupts a lane",
                        irq.name,
                        irq.role,
                        lane_cpus.to_list()
                    ),
                )
            };
            let current = requested.as_ref().map(CpuSet::to_list);
            self.irq_item(irq, current, &want, reason, None);
        }
        Ok(())
    }

    /// No RPS after the lane's queue (its packets stay on the lane's CPU); no other queue's
    /// RPS onto a lane's CPU; the lane's CPU sends on the lane's tx queue, and no other tx
    /// queue lists it (scaling.rst: XPS picks the queue by the sending CPU).
    pub(super) fn lane_rps_xps(
        &mut self,
        nic: &Nic,
        queue: u32,
        cpu: u32,
        lane_cpus: &CpuSet,
        held: &BTreeSet<u32>,
    ) {
        if self.queues_unreadable(nic, QueueFile::RpsCpus) {
            return;
        }
        for q in nic.rx_queues.clone() {
            let Some(now) = q.rps_cpus.known().cloned() else {
                continue;
            };
            if q.index != queue && held.contains(&q.index) {
                continue;
            }
            let (want, reason) = if q.index == queue {
                (
                    CpuSet::new(),
                    "no RPS after the lane's queue: its packets are processed on the lane's CPU, with no IPI to another".to_string(),
                )
            } else if !now.intersection(lane_cpus).is_empty() {
                (
                    now.difference(lane_cpus),
                    format!(
                        "rx-{}'s RPS off the lane CPU(s) {}",
                        q.index,
                        lane_cpus.to_list()
                    ),
                )
            } else {
                continue;
            };
            self.queue_mask(nic, q.index, &q.rps_cpus, &want, ItemKind::Rps, reason);
        }
        let ntx = nic.tx_queues.len() as u32;
        if ntx < 2 {
            self.notes.push(format!(
                "{}: {ntx} tx queue(s): XPS has no choice to make for the replies",
                nic.name
            ));
            return;
        }
        if queue >= ntx {
            self.notes.push(format!(
                "{}: no tx-{queue} (the device has {ntx} tx queues): the replies leave on the queue XPS or the hash picks",
                nic.name
            ));
        }
        for q in nic.tx_queues.clone() {
            let Some(now) = q.xps_cpus.known().cloned() else {
                continue;
            };
            if q.index != queue && held.contains(&q.index) {
                continue;
            }
            let (want, reason) = if q.index == queue {
                (
                    std::iter::once(cpu).collect::<CpuSet>(),
                    format!(
                        "the replies leave on tx-{queue}, the lane's own: its completions interrupt the lane's CPU {cpu}"
                    ),
                )
            } else if now.contains(cpu) {
                let mut w = now.clone();
                w.remove(cpu);
                (
                    w,
                    format!("tx-{} no longer takes the lane CPU {cpu}", q.index),
                )
            } else {
                continue;
            };
            self.queue_mask(nic, q.index, &q.xps_cpus, &want, ItemKind::Xps, reason);
        }
    }

    /// Interrupt coalescing is device-wide over ethtool netlink: set off only when asked,
    /// otherwise what it would cost the other queues is said.
    pub(super) fn lane_coalesce(&mut self, nic: &Nic, spec: &LaneSpec) {
        let Some(c) = nic.settings.as_ref().and_then(|s| s.coalesce.known()) else {
            return;
        };
        let now = c.get("rx-usecs").copied();
        let adaptive = c.get("adaptive-rx").copied();
        if now.unwrap_or(0) == 0 && adaptive.unwrap_or(0) == 0 {
            return;
        }
        if !spec.device_coalesce {
            self.notes.push(format!(
                "{}: interrupt coalescing (rx-usecs {}, adaptive-rx {}) is device-wide here (ethtool netlink sets no queue alone): left as it is; --device-coalesce sets it off on every queue, the bulk queues then interrupt once per packet too",
                nic.name,
                now.map_or("-".into(), |v| v.to_string()),
                adaptive.map_or("-".into(), |v| v.to_string())
            ));
            return;
        }
        for (name, why) in [
            (
                "adaptive-rx",
                "--device-coalesce: a fixed moderation, so rx-usecs 0 holds",
            ),
            (
                "rx-usecs",
                "--device-coalesce: the lane's packets interrupt at once; the device's other queues too (more interrupts per packet for the bulk flows)",
            ),
        ] {
            if c.contains_key(name) {
                self.nic_item(nic, NicKnob::Coalesce(name.into()), 0, why.into());
            }
        }
    }

    /// The lane's NAPI in the mode asked for: per-NAPI settings where the kernel has them;
    /// on kernels before 6.13 the device-wide files for busy-poll (said: they are every
    /// queue's), suspension named as missing, threaded busy polling refused before 6.19.
    pub(super) fn lane_napi(
        &mut self,
        nic: &Nic,
        spec: &LaneSpec,
        queue: u32,
    ) -> Result<(), LaneError> {
        let mode = spec.mode;
        let kernel = self
            .ctx
            .view
            .kernel
            .known()
            .cloned()
            .unwrap_or_else(|| "?".into());
        let version = kernel_version(&kernel);
        let at_least = |v: (u32, u32)| version.is_some_and(|k| k >= v);
        let netdev = nic.settings.as_ref().and_then(|s| s.netdev().ok());
        let napi = netdev.and_then(|nd| {
            let linked = nd
                .queues
                .iter()
                .find(|q| q.kind == netsteer_host::netdev::QueueType::Rx && q.id == queue)
                .and_then(|q| q.napi_id);
            match linked {
                Some(id) => nd.napis.iter().find(|n| n.id == id),
                // veth links no queue to its NAPI (no netif_queue_set_napi), but adds one per
                // rx queue in queue order (veth_napi_add), and NAPI ids count up as added.
                None if nic.kind == "veth" && nd.napis.len() == nic.rx_queues.len() => {
                    let mut by_id: Vec<_> = nd.napis.iter().collect();
                    by_id.sort_by_key(|n| n.id);
                    by_id.get(queue as usize).copied()
                }
                None => None,
            }
        });
        let per_napi = napi.is_some_and(|n| n.irq_suspend_timeout_ns.is_some())
            || (napi.is_some() && at_least(NAPI_SET_SINCE));
        match napi {
            Some(n) if per_napi => {
                for (attr, v, why) in mode.napi().settings() {
                    self.nic_item(
                        nic,
                        NicKnob::Napi(n.id, *attr),
                        *v,
                        format!("{mode}: {why} (NAPI {} of rx-{queue} only)", n.id),
                    );
                }
                if let (LaneMode::ThreadedPoll, Some(p)) = (mode, spec.poll_cpu) {
                    // The kthread exists once `threaded` is written (napi_set_threaded makes
                    // it at once); the pin is written after, in the last phase. No kthread
                    // reads as "" and is what a rollback leaves (it goes with threaded 0).
                    let current = nic
                        .napis
                        .iter()
                        .find(|v| v.id == n.id)
                        .and_then(|v| v.thread.as_ref())
                        .and_then(|t| t.allowed.known().map(CpuSet::to_list))
                        .unwrap_or_default();
                    let want: CpuSet = std::iter::once(p).collect();
                    let id = ItemId::NapiThread {
                        dev: nic.name.clone(),
                        napi: n.id,
                    };
                    let target = id.target().expect("a NAPI thread's id names it");
                    self.push(
                        id.into(),
                        target,
                        Some(current),
                        want.to_list(),
                        format!(
                            "threaded-poll: NAPI {}'s kthread (napi/{}-{}) on its own CPU {p}, off the service's {}: it polls without pause (napi.rst pins each NAPI thread to one CPU)",
                            n.id, nic.name, n.id, spec.cpu
                        ),
                        None,
                    );
                }
                Ok(())
            }
            _ if mode == LaneMode::Irq => {
                self.notes.push(format!(
                    "{}: rx-{queue}'s NAPI settings left as they are (no per-NAPI settings on {kernel}, or no NAPI reported)",
                    nic.name
                ));
                Ok(())
            }
            // The kernel lists the device's NAPIs and it has none: nothing to poll.
            None if netdev.is_some_and(|nd| nd.napis.is_empty()) => Err(LaneError::Mode {
                mode,
                why: format!(
                    "{} has no NAPI{}, so there is nothing to busy-poll",
                    nic.name,
                    if nic.kind == "veth" {
                        " (a veth has NAPIs with GRO on or XDP attached)"
                    } else {
                        ""
                    }
                ),
            }),
            _ => {
                // Before 6.13 (or without netdev netlink, before 6.8), or a driver that links
                // no NAPI to its queues (igb on 6.12): the device-wide defaults napi.rst
                // describes, every queue's.
                if mode == LaneMode::Suspend {
                    self.notes.push(format!(
                        "{}: --mode suspend: irq-suspend-timeout is per-NAPI only (NAPI_SET, Linux {}.{}+) and this kernel is {kernel}: the lane runs as busy-poll (hard-IRQ deferral) instead",
                        nic.name, NAPI_SET_SINCE.0, NAPI_SET_SINCE.1
                    ));
                }
                let why = if napi.is_some() || !at_least(NAPI_SET_SINCE) {
                    format!(
                        "no per-NAPI settings before {}.{}",
                        NAPI_SET_SINCE.0, NAPI_SET_SINCE.1
                    )
                } else {
                    format!("the driver links no NAPI to rx-{queue}")
                };
                // busy-poll's deferral, the part of the mode a device-wide file can hold.
                for (attr, v, _) in NapiMode::PreferBusyPoll.settings() {
                    self.napi_sysfs_item(
                        nic,
                        *attr,
                        *v,
                        format!(
                            "{mode}: device-wide ({why}): every queue of {} defers its hard IRQs while a busy poller polls it, and a queue nobody polls waits for the 200 µs timer",
                            nic.name
                        ),
                    );
                }
                Ok(())
            }
        }
    }
}
