//! The NIC's own settings in a plan: channels, RSS indirection and n-tuple rules, per-NAPI
//! settings, offloads, interrupt coalescing and pause frames (over ethtool netlink).

use super::*;

/// An RSS table of `current.len()` buckets shared equally by `queues`. A table that already
/// does so (within one) and names no other queue is kept as it is, whatever its layout: igb's
/// default is contiguous blocks, ethtool's `equal` round robin, and both spread flows the same.
/// Otherwise the buckets are dealt round robin. `queues` is not empty.
pub(super) fn equal_table(current: &[u32], queues: &[u32]) -> Vec<String> {
    let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
    for q in current {
        *counts.entry(*q).or_default() += 1;
    }
    let (lo, hi) = queues.iter().fold((usize::MAX, 0), |(lo, hi), q| {
        let n = counts.get(q).copied().unwrap_or(0);
        (lo.min(n), hi.max(n))
    });
    if counts.keys().all(|q| queues.contains(q)) && hi - lo <= 1 {
        current.iter().map(u32::to_string).collect()
    } else {
        (0..current.len())
            .map(|i| queues[i % queues.len()].to_string())
            .collect()
    }
}

/// A flow hash (ethtool's rx-flow-hash letters) with the two port halves added, in ethtool's
/// letter order.
pub(super) fn with_ports(now: &str) -> String {
    "mvtsdfnr"
        .chars()
        .filter(|c| now.contains(*c) || *c == 'f' || *c == 'n')
        .collect()
}

impl Builder<'_> {
    pub(super) fn nic_item(&mut self, nic: &Nic, knob: NicKnob, desired: u64, reason: String) {
        self.nic_text_item(nic, knob, desired.to_string(), reason);
    }

    pub(super) fn nic_text_item(
        &mut self,
        nic: &Nic,
        knob: NicKnob,
        desired: String,
        reason: String,
    ) {
        let id = ItemId::Nic {
            dev: nic.name.clone(),
            knob: knob.clone(),
        };
        let target = id.target().expect("a NIC knob's id names it");
        let format = target.format();
        let id = id.to_string();
        let (current, skip) = match &nic.settings {
            None => (
                None,
                Some("NIC settings were not read (--no-ethtool or no ethtool netlink)".to_string()),
            ),
            Some(s) => match knob.read(s) {
                Err(why) => (None, Some(why)),
                Ok(v) if !format.same(&v, &desired) && !knob.changeable(s) => {
                    (Some(v), Some(format!("{knob} is fixed by the driver")))
                }
                Ok(v) => (Some(v), None),
            },
        };
        self.push(id, target, current, desired, reason, skip);
    }

    /// Seed 000's n-tuple rules: TCP and UDP to each reserved port go to the reserved queue
    /// (`ethtool -N DEV flow-type tcp4 dst-port P action Q`), with the filters turned on first.
    pub(super) fn ntuple(&mut self, nic: &Nic, s: &NicSettings, queue: u32) {
        use netsteer_host::netdev::{NtupleKey, NtupleProto};
        if self.opts.ports.is_empty() {
            return;
        }
        let features = s.features.known();
        let feature = features.and_then(|f| f.get("ntuple-filters")).copied();
        // A device whose driver fixes n-tuple filters off (igb's 82576, virtio-net: off
        // [fixed], or not among the features it reports at all) refuses every rule: say so
        // once, plan none.
        let fixed_off = match (features, feature) {
            (Some(_), Some(f)) => !f.active && !f.changeable,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if fixed_off {
            let ports: Vec<String> = self.opts.ports.iter().map(u16::to_string).collect();
            self.notes.push(format!(
                "{}: n-tuple filters are fixed off by the driver (ntuple-filters off [fixed]): port(s) {} cannot be steered to the reserved queue {queue}; it gets no RSS traffic, and nothing else",
                nic.name,
                ports.join(",")
            ));
            return;
        }
        if feature.is_some() {
            self.nic_item(
                nic,
                NicKnob::Feature("ntuple-filters".into()),
                1,
                "n-tuple filters on: the rules below need them".into(),
            );
        }
        for port in self.opts.ports.clone() {
            for proto in [NtupleProto::Tcp4, NtupleProto::Udp4] {
                let why = format!(
                    "seed 000: {} port {port} to the reserved queue {queue}, past RSS",
                    proto.name()
                );
                self.ntuple_item(nic, NtupleKey { proto, port }, queue, why);
            }
        }
    }

    /// One n-tuple rule as an item: `key`'s traffic to `queue` (`ethtool -N DEV flow-type P
    /// dst-port N action Q`), the one rule builder profiles and lanes share.
    pub(super) fn ntuple_item(
        &mut self,
        nic: &Nic,
        key: netsteer_host::netdev::NtupleKey,
        queue: u32,
        reason: String,
    ) {
        self.nic_text_item(
            nic,
            NicKnob::Ntuple(key),
            key.rule_text(u64::from(queue)),
            reason,
        );
    }

    /// The RSS indirection table: every active queue gets an equal share of the hash buckets,
    /// except a queue reserved (`--reserve-queue`) for traffic steered to it by n-tuple rules,
    /// as seed 000 keeps SSH and BGP away from the data queues.
    pub(super) fn rss(&mut self, nic: &Nic, s: &NicSettings) {
        let Some(rss) = s.rss.known() else {
            return;
        };
        if rss.indirection.is_empty() {
            return;
        }
        // The receive queues the table may name: the driver's channel count where it says
        // (a tree's sysfs queue directories do not follow a count changed in its NIC state),
        // else the queues sysfs lists.
        let nq = s
            .channels
            .known()
            .map(|c| c.combined.unwrap_or(0) + c.rx.unwrap_or(0))
            .filter(|n| *n > 0)
            .unwrap_or(nic.rx_queues.len() as u32);
        let reserved = self.opts.reserve_queue.filter(|q| *q < nq);
        if let Some(q) = self.opts.reserve_queue
            && reserved.is_none()
        {
            self.notes.push(format!(
                "{}: --reserve-queue {q}: the device has {nq} rx queue(s); nothing reserved",
                nic.name
            ));
        }
        let queues: Vec<u32> = (0..nq).filter(|q| Some(*q) != reserved).collect();
        if queues.is_empty() {
            return;
        }
        let table = equal_table(&rss.indirection, &queues);
        let reason = match reserved {
            None => format!(
                "RSS: the {} hash buckets shared equally by the {nq} rx queues",
                table.len()
            ),
            Some(q) => {
                let ports = if self.opts.ports.is_empty() {
                    String::new()
                } else {
                    "; the n-tuple items below steer the reserved ports to it".to_string()
                };
                format!(
                    "RSS: queue {q} reserved (no hash bucket), the other {} queues share the {} buckets equally{ports}",
                    queues.len(),
                    table.len()
                )
            }
        };
        self.nic_text_item(nic, NicKnob::RssIndirection, table.join(" "), reason);
        if let Some(q) = reserved {
            self.ntuple(nic, s, q);
        }
    }

    /// Throughput: UDP hashed on ports as well as addresses where the driver hashes it on
    /// addresses alone (igb, ixgbe), so UDP flows between two hosts spread over the queues.
    /// Only there: a fragmented datagram's pieces then take different queues, which a
    /// throughput host of many flows accepts and a latency host need not.
    pub(super) fn flow_hash(&mut self, nic: &Nic, s: &NicSettings) {
        if self.opts.profile != Profile::Throughput || nic.rx_queues.len() < 2 {
            return;
        }
        let (Ok(hash), Some(rss)) = (s.flow_hash(), s.rss.known()) else {
            return;
        };
        if rss.indirection.is_empty() {
            return;
        }
        for t in ["udp4", "udp6"] {
            let Some(now) = hash.get(t) else {
                continue;
            };
            self.nic_text_item(nic, NicKnob::FlowHash(t.into()), with_ports(now), format!(
                    "throughput: hash {t} on the ports too (ethtool -N {} rx-flow-hash {t} sdfn), so UDP flows between two hosts spread over the {} queues",
                    nic.name,
                    nic.rx_queues.len()
                ));
        }
    }

    pub(super) fn channels(&mut self, nic: &Nic, s: &NicSettings) {
        let Some(c) = s.channels.known() else {
            return;
        };
        let cores = self
            .ctx
            .local_cpus(nic)
            .iter()
            .filter(|cpu| !self.ctx.is_secondary_thread(*cpu))
            .count()
            .max(1) as u64;
        let kinds: &[&str] = if c.combined_max.unwrap_or(0) > 0 {
            &["combined"]
        } else {
            &["rx", "tx"]
        };
        for kind in kinds {
            let knob = NicKnob::Channels(kind.to_string());
            let (Ok(current), Some(max)) = (knob.read_number(s), knob.limit(s)) else {
                continue;
            };
            if max == 0 {
                continue;
            }
            let want = cores.min(max).max(current);
            if want > current {
                // The queues this brings up: combined channels count in both directions.
                let n = |v: Option<u32>| v.unwrap_or(0);
                let w = u32::try_from(want).unwrap_or(u32::MAX);
                let e = self.raised.entry(nic.name.clone()).or_insert((0, 0));
                match *kind {
                    "combined" => *e = (w + n(c.rx), w + n(c.tx)),
                    "rx" => e.0 = w + n(c.combined),
                    _ => e.1 = w + n(c.combined),
                }
            }
            let reason = if want == current {
                format!(
                    "{current} {kind} channel(s): at least one per local core ({cores}) or the maximum ({max})"
                )
            } else {
                format!(
                    "one {kind} channel per local core: {want} (of at most {max}; scaling.rst: a queue per CPU, not per hyperthread)"
                )
            };
            self.nic_item(nic, knob, want, reason);
        }
    }

    /// Per-NAPI items: the mode's settings on every NAPI the device has now (netdev netlink).
    pub(super) fn napis(&mut self, nic: &Nic, s: &NicSettings, mode: Option<NapiMode>) {
        let settings: Vec<(NapiAttr, u64, String)> = match (mode, self.opts.profile) {
            (Some(m), _) => m
                .settings()
                .iter()
                .map(|(a, v, why)| (*a, *v, format!("napi {m}: {why}")))
                .collect(),
            (None, Profile::Latency) => NapiMode::Irq.settings()[..2]
                .iter()
                .map(|(a, v, _)| {
                    (
                        *a,
                        *v,
                        "latency: a deferred hard IRQ holds packets until gro-flush-timeout unless an application busy-polls (--napi prefer-busy-poll if one does)".to_string(),
                    )
                })
                .collect(),
            (None, _) => return,
        };
        let nd = match s.netdev() {
            Ok(nd)
                if !nd.napis.is_empty() && nd.napis.iter().all(|n| n.defer_hard_irqs.is_none()) =>
            {
                self.napi_sysfs(
                    nic,
                    &settings,
                    mode,
                    "this kernel does not report per-NAPI settings (NETDEV_CMD_NAPI_SET, Linux 6.13+)",
                );
                return;
            }
            Ok(nd) => nd,
            // A tree captured before netsteer read netdev data: what the kernel had is
            // unknown, so nothing is planned in its place.
            Err(why) if s.netdev.is_none() => {
                if mode.is_some() {
                    self.notes.push(format!(
                        "{}: per-NAPI settings not planned: {why}",
                        nic.name
                    ));
                }
                return;
            }
            Err(why) => {
                self.napi_sysfs(nic, &settings, mode, &why);
                return;
            }
        };
        if nd.napis.is_empty() {
            if mode.is_some() {
                self.notes.push(format!(
                    "{}: no NAPI instances now{}; per-NAPI settings not planned (tune again once they exist)",
                    nic.name,
                    if nic.kind == "veth" {
                        " (a veth gets them with GRO on or XDP attached)"
                    } else {
                        ""
                    }
                ));
            }
            return;
        }
        for n in &nd.napis {
            for (attr, v, why) in &settings {
                self.nic_item(nic, NicKnob::Napi(n.id, *attr), *v, why.clone());
            }
        }
    }

    /// Where the kernel has no per-NAPI settings (before 6.13), the device-wide sysfs files
    /// the mode's values go to instead (napi.rst: they are the defaults of every NAPI of the
    /// device, so one value for all is the same state); IRQ suspension has no such file.
    /// The device-wide sysfs file of a per-NAPI setting (napi.rst: the defaults of every NAPI of
    /// the device) as an item; IRQ suspension has no such file and plans nothing.
    pub(super) fn napi_sysfs_item(&mut self, nic: &Nic, attr: NapiAttr, v: u64, reason: String) {
        let (file, current) = match attr {
            NapiAttr::DeferHardIrqs => (
                "napi_defer_hard_irqs",
                nic.napi_defer_hard_irqs.known().map(u64::to_string),
            ),
            NapiAttr::GroFlushTimeout => (
                "gro_flush_timeout",
                nic.gro_flush_timeout.known().map(u64::to_string),
            ),
            NapiAttr::Threaded => ("threaded", nic.threaded.known().cloned()),
            NapiAttr::IrqSuspendTimeout => return,
        };
        let id = ItemId::NapiDefault {
            dev: nic.name.clone(),
            file: file.to_string(),
        };
        let target = id.target().expect("a NAPI default's id names its file");
        let skip = current
            .is_none()
            .then(|| format!("{target} cannot be read on this host"));
        self.push(id.into(), target, current, v.to_string(), reason, skip);
    }

    fn napi_sysfs(
        &mut self,
        nic: &Nic,
        settings: &[(NapiAttr, u64, String)],
        mode: Option<NapiMode>,
        why: &str,
    ) {
        let mut planned = 0;
        for (attr, v, reason) in settings {
            if *attr == NapiAttr::IrqSuspendTimeout {
                if *v != 0 {
                    self.notes.push(format!(
                        "{}: irq-suspend-timeout not planned: it is per-NAPI only (NETDEV_CMD_NAPI_SET, Linux 6.13+) and {why}; the rest of the mode goes to the device-wide sysfs files",
                        nic.name
                    ));
                }
                continue;
            }
            self.napi_sysfs_item(
                nic,
                *attr,
                *v,
                format!("{reason} (device-wide: per-NAPI settings need Linux 6.13+, and {why})"),
            );
            planned += 1;
        }
        if planned == 0 && mode.is_some() {
            self.notes.push(format!(
                "{}: per-NAPI settings not planned: {why}",
                nic.name
            ));
        }
    }

    pub(super) fn features(&mut self, nic: &Nic, s: &NicSettings) {
        let has = |n: &str| s.features.known().is_some_and(|f| f.contains_key(n));
        if has("rx-gro") {
            self.nic_item(nic, NicKnob::Feature("rx-gro".into()), 1, "GRO on: fewer, larger packets up the stack; on veth it also gives the device a NAPI instance to busy-poll".into());
        }
        if self.opts.profile == Profile::Latency
            && nic.kind == "veth"
            && has("rx-udp-gro-forwarding")
        {
            self.nic_item(nic, NicKnob::Feature("rx-udp-gro-forwarding".into()), 1, "latency: a veth hands a local socket's UDP to its NAPI (which busy polling needs) only with UDP GRO forwarding on; with GRO alone it goes through the backlog without a NAPI id (veth_skb_is_eligible_for_gro)".into());
        }
        if has("rx-lro") && self.opts.profile != Profile::Throughput {
            self.nic_item(nic, NicKnob::Feature("rx-lro".into()), 0, "LRO off: it holds segments in the NIC to merge them (latency) and breaks forwarding".into());
        }
    }

    pub(super) fn coalesce(&mut self, nic: &Nic, s: &NicSettings) {
        let reported = |n: &str| s.coalesce.known().is_some_and(|c| c.contains_key(n));
        let wanted: &[(&str, u64, &str)] = match self.opts.profile {
            Profile::Latency => &[
                (
                    "adaptive-rx",
                    0,
                    "latency: a fixed, immediate interrupt per packet",
                ),
                (
                    "rx-usecs",
                    0,
                    "latency: interrupt at once, no moderation delay",
                ),
            ],
            Profile::Throughput | Profile::Balanced | Profile::None => &[(
                "adaptive-rx",
                1,
                "adaptive moderation: few interrupts under load, quick ones when idle",
            )],
        };
        if let Field::Unknown { unknown } = &s.coalesce {
            self.notes
                .push(format!("{}: coalescing left alone: {unknown}", nic.name));
            return;
        }
        for (name, v, why) in wanted {
            if reported(name) {
                self.nic_item(nic, NicKnob::Coalesce((*name).into()), *v, (*why).into());
            }
        }
    }

    /// Flow control off, for latency only (seed 000 does it there; doctor's flow-control-on is
    /// a latency rule). Not for balanced: on igb the driver resolves pause again from the link
    /// partner's advertisement when the link comes back up after a reinit (a channel or ring
    /// change), so "off" does not hold on every NIC, and a balanced host loses little to it.
    pub(super) fn pause(&mut self, nic: &Nic, s: &NicSettings) {
        if self.opts.profile != Profile::Latency {
            return;
        }
        let Some(p) = s.pause.known() else {
            return;
        };
        let wanted_off = [p.rx, p.tx].contains(&Some(true));
        if p.autoneg == Some(true) && wanted_off {
            // With pause autonegotiation on, the driver reports (and keeps) what the link
            // partner agreed to (igb: hw->fc.current_mode), so rx/tx off would read back on.
            self.nic_item(nic, NicKnob::Pause("autoneg".into()), 0, "flow control out of autonegotiation first: while negotiated, the link partner's pause setting wins over a local off".into());
        }
        for (name, on) in [("rx", p.rx), ("tx", p.tx)] {
            if on.is_some() {
                self.nic_item(nic, NicKnob::Pause(name.into()), 0, "flow control off: a PAUSE frame stalls every flow on the link for up to 3.4 ms at 10 Gbit/s".into());
            }
        }
    }
}
