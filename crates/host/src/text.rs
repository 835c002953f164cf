//! Text for people: the host view (`netsteer show`) and one interval of `netsteer top`, as
//! lines. Pure functions of the data, so tests render fixture trees; every name a host supplies
//! goes through [`crate::safe`].

use crate::field::Field;
use crate::irqname::IrqRole;
use crate::nic::{Nic, NicIrq};
use crate::sample::TopInterval;
use crate::view::HostView;
use std::fmt::Write as _;

fn irq_line(i: &NicIrq) -> String {
    let a = &i.affinity;
    let mut s = format!(
        "irq {:<5} {:<28} {:<11} cpus {:<10} effective {:<6}",
        i.irq,
        crate::safe::line(&i.name),
        i.role.to_string(),
        a.requested.to_string(),
        a.effective.to_string(),
    );
    if let Field::Known(h) = &a.hint
        && !h.is_empty()
    {
        let _ = write!(s, " hint {}", h.to_list());
    }
    let _ = write!(s, " {} irqs", i.count);
    if let Some(c) = i.busiest_cpu {
        let _ = write!(s, " (most on CPU{c})");
    }
    if a.move_pending() {
        s.push_str(" [move pending: goes to its cpus at its next interrupt]");
    }
    if a.settable == Field::Known(false) {
        s.push_str(" [managed: kernel will not move it]");
    }
    if i.line.is_some() {
        s.push_str(" [legacy INTx line]");
    }
    if !i.shared_with.is_empty() {
        let _ = write!(
            s,
            " [shared with {}]",
            crate::safe::line(&i.shared_with.join(", "))
        );
    }
    s
}

/// The human report. Pure, so tests can render fixture trees.
pub fn host_view(v: &HostView) -> String {
    let mut o = String::new();
    let t = &v.topology;
    let _ = writeln!(
        o,
        "kernel {}  CPUs: possible {}  online {}  (masks are {} bits wide{})",
        crate::safe::line(&v.kernel.to_string()),
        match &t.possible_unknown {
            // Not the kernel's list: what stood in for it, said as such.
            Some(_) => format!("? (at least {})", t.possible.to_list()),
            None => t.possible.to_list(),
        },
        t.online.to_list(),
        t.nr_cpu_ids,
        if t.possible_unknown.is_some() {
            " or more"
        } else {
            ""
        }
    );
    let _ = writeln!(
        o,
        "isolated {}  nohz_full {}  smt {}",
        t.isolated, t.nohz_full, t.smt
    );
    for n in &t.nodes {
        let _ = writeln!(o, "numa node{}: CPUs {}", n.id, n.cpus);
    }
    if let Some(why) = &t.numa_unknown {
        let _ = writeln!(o, "numa: unknown ({why})");
    }
    // HT siblings grouped once per core.
    let mut cores: Vec<String> = Vec::new();
    for c in &t.cpus {
        if let Field::Known(s) = &c.siblings
            && s.len() > 1
        {
            let l = s.to_list();
            if !cores.contains(&l) {
                cores.push(l);
            }
        }
    }
    if !cores.is_empty() {
        let _ = writeln!(o, "hyperthread siblings: {}", cores.join(" "));
    }
    let s = &v.sysctls;
    let _ = writeln!(
        o,
        "net.core: busy_poll={} busy_read={} netdev_budget={} netdev_budget_usecs={} netdev_max_backlog={} dev_weight={}",
        s.busy_poll,
        s.busy_read,
        s.netdev_budget,
        s.netdev_budget_usecs,
        s.netdev_max_backlog,
        s.dev_weight
    );
    let _ = writeln!(
        o,
        "          rps_sock_flow_entries={} flow_limit_cpu_bitmap={} flow_limit_table_len={} rps_default_mask={}",
        s.rps_sock_flow_entries,
        s.flow_limit_cpu_bitmap,
        s.flow_limit_table_len,
        s.rps_default_mask
    );
    let _ = writeln!(
        o,
        "irqbalance: {}",
        match &v.irqbalance {
            Field::Known(i) if i.running && !i.by.is_empty() => {
                format!("running ({})", crate::safe::line(&i.by))
            }
            Field::Known(i) if i.running => format!("running (pid {})", i.pid.unwrap_or(0)),
            Field::Known(_) => "not running".into(),
            Field::Unknown { unknown } => format!("unknown ({})", crate::safe::line(unknown)),
        }
    );
    for p in &v.problems {
        let _ = writeln!(o, "problem: {}", crate::safe::line(p));
    }
    for nic in &v.nics {
        o.push('\n');
        render_nic(&mut o, nic);
    }
    o
}

fn render_nic(o: &mut String, n: &Nic) {
    let _ = write!(
        o,
        "{}  driver {}  {}  {}  mtu {}",
        crate::safe::line(&n.name),
        crate::safe::line(&n.driver.to_string()),
        n.kind,
        crate::safe::line(&n.operstate.to_string()),
        n.mtu
    );
    if let Some(b) = &n.bus_id {
        let _ = write!(o, "  bus {}", crate::safe::line(&b.to_string()));
    }
    if !n.is_virtual() {
        let _ = write!(
            o,
            "  numa node {}  local CPUs {}",
            n.numa_node, n.local_cpus
        );
    }
    o.push('\n');
    // A device whose queues/ could not be listed has unknown queues, not none.
    let queues = match &n.queues_unknown {
        Some(why) => format!("queues unknown ({})", crate::safe::line(why)),
        None => format!("{} rx / {} tx queues", n.rx_queues.len(), n.tx_queues.len()),
    };
    let _ = writeln!(
        o,
        "  {queues}  napi: gro_flush_timeout={} napi_defer_hard_irqs={} threaded={}",
        n.gro_flush_timeout, n.napi_defer_hard_irqs, n.threaded
    );
    for q in &n.rx_queues {
        let _ = write!(
            o,
            "  rx-{:<4} rps {:<10} rps_flow_cnt {:<6}",
            q.index,
            q.rps_cpus.to_string(),
            q.rps_flow_cnt.to_string()
        );
        if q.irqs.is_empty() && !n.is_virtual() {
            o.push_str(" (no IRQ found)");
        }
        o.push('\n');
        for irq in q.irqs.iter().filter_map(|i| n.irq(*i)) {
            let _ = writeln!(o, "           {}", irq_line(irq));
        }
    }
    for q in &n.tx_queues {
        let xps = match &q.xps_cpus {
            Field::Unknown { unknown } if unknown.starts_with("not available") => "n/a".into(),
            f => f.to_string(),
        };
        let _ = write!(
            o,
            "  tx-{:<4} xps {:<10} xps_rxqs {:<6}",
            q.index,
            xps,
            q.xps_rxqs.to_string()
        );
        // The IRQ of a combined channel is already shown under its rx queue.
        let own: Vec<&NicIrq> = q
            .irqs
            .iter()
            .filter_map(|i| n.irq(*i))
            .filter(|i| matches!(i.role, IrqRole::Tx(_)))
            .collect();
        o.push('\n');
        for irq in own {
            let _ = writeln!(o, "           {}", irq_line(irq));
        }
    }
    // Control and unrecognised vectors, and any packet vector whose queue the device does not
    // list (a queue count a tree's sysfs does not follow): every vector shows somewhere.
    let listed = |irq: u32| {
        n.rx_queues.iter().any(|q| q.irqs.contains(&irq))
            || n.tx_queues.iter().any(|q| q.irqs.contains(&irq))
    };
    for irq in n
        .irqs
        .iter()
        .filter(|i| !i.role.carries_packets() || !listed(i.irq))
    {
        let _ = writeln!(o, "  {}", irq_line(irq));
    }
    if let Some(s) = &n.settings {
        render_settings(o, s);
        render_ntuple(o, s);
        render_netdev(o, n, s);
    }
}

/// The receive flow-steering rules, when the device has any.
fn render_ntuple(o: &mut String, s: &crate::ethtool::NicSettings) {
    use crate::netdev::NtupleFlow;
    let Ok(rules) = s.ntuple() else { return };
    if rules.is_empty() {
        return;
    }
    let text: Vec<String> = rules
        .iter()
        .map(|r| {
            let flow = match &r.flow {
                NtupleFlow::DstPort { proto, port } => format!("{} dst-port {port}", proto.name()),
                NtupleFlow::Other { flow_type } => format!("flow type {flow_type}"),
            };
            let to = r
                .queue
                .map_or("drop/other action".into(), |q| format!("queue {q}"));
            format!("[{}] {flow} → {to}", r.location)
        })
        .collect();
    let _ = writeln!(o, "  ntuple: {}", text.join("; "));
}

fn ns(v: Option<u64>) -> String {
    v.map_or("-".into(), crate::netdev::ns_text)
}

/// queue → NAPI → IRQ → CPU, and each NAPI's kthread and settings (netdev netlink).
fn render_netdev(o: &mut String, n: &Nic, s: &crate::ethtool::NicSettings) {
    use crate::nic::IrqSource;
    let nd = match s.netdev() {
        Ok(nd) => nd,
        Err(why) => {
            let _ = writeln!(
                o,
                "  napi: unavailable ({})",
                crate::safe::line(&why.to_string())
            );
            return;
        }
    };
    if let Some(x) = nd.xdp_features.filter(|x| *x != 0) {
        let _ = writeln!(
            o,
            "  xdp: {}{}",
            crate::netdev::xdp_feature_names(x),
            nd.xdp_zc_max_segs
                .map_or(String::new(), |z| format!("  zero-copy max segments {z}"))
        );
    }
    if n.napis.is_empty() {
        let _ = writeln!(
            o,
            "  napi: none{}",
            if n.kind == "veth" {
                " (a veth has NAPIs only with GRO on or XDP attached)"
            } else {
                ""
            }
        );
    }
    for p in &n.napis {
        let mut queues: Vec<String> = p.rx_queues.iter().map(|q| format!("rx-{q}")).collect();
        queues.extend(p.tx_queues.iter().map(|q| format!("tx-{q}")));
        let queues = if queues.is_empty() {
            "queues not linked by the driver".to_string()
        } else {
            queues.join(",")
        };
        let irq = match (p.irq, p.irq_source, &p.irq_cpus) {
            (Some(i), src, cpus) => format!(
                "irq {i}{} → CPU {}",
                if src == Some(IrqSource::InterruptsName) {
                    " (by /proc/interrupts name)"
                } else {
                    ""
                },
                cpus.as_ref().map_or("?".into(), |c| c.to_string())
            ),
            (None, ..) => "no IRQ".into(),
        };
        let mode = match p.threaded {
            Some(2) => "threaded busy-poll",
            _ => "threaded",
        };
        let thread = match (&p.thread, p.threaded) {
            (Some(t), _) => format!(
                "{mode}: kthread {} on CPU {} (allowed {})",
                t.pid, t.last_cpu, t.allowed
            ),
            (None, Some(0)) => "threaded off".into(),
            (None, Some(_)) => format!("{mode} (no kthread reported)"),
            (None, None) => "threaded -".into(),
        };
        let _ = writeln!(
            o,
            "  napi {:<6} {queues}  {irq}  defer-hard-irqs {}  gro-flush-timeout {}  irq-suspend-timeout {}  {thread}",
            p.id,
            p.defer_hard_irqs.map_or("-".into(), |d| d.to_string()),
            ns(p.gro_flush_timeout_ns),
            ns(p.irq_suspend_timeout_ns),
        );
    }
    render_page_pools(o, n, nd);
    for q in &nd.qstats {
        let _ = writeln!(
            o,
            "  {}-{:<4} packets {}  bytes {}{}",
            q.kind,
            q.id,
            q.packets.map_or("-".into(), |v| v.to_string()),
            q.bytes.map_or("-".into(), |v| v.to_string()),
            q.drops.map_or(String::new(), |d| format!("  drops {d}"))
        );
    }
}

/// Each page pool with the receive queue it feeds, its pages in flight and, where the kernel
/// counts them, its allocations and recycling since it was created.
fn render_page_pools(o: &mut String, n: &Nic, nd: &crate::netdev::Netdev) {
    let pools = match &nd.page_pools {
        None => return,
        Some(Field::Unknown { unknown }) => {
            let _ = writeln!(o, "  page pools: unknown ({})", crate::safe::line(unknown));
            return;
        }
        Some(Field::Known(p)) => p,
    };
    if pools.pools.is_empty() {
        let _ = writeln!(
            o,
            "  page pools: none registered with the device{}",
            if n.kind == "veth" {
                " (veth builds its pools without naming the device)"
            } else {
                ""
            }
        );
        return;
    }
    let opt = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
    for p in &pools.pools {
        let queues: Vec<String> = n
            .pool_queues(p.id)
            .map(|q| format!("rx-{}", q.index))
            .collect();
        let serves = match (queues.is_empty(), p.napi_id) {
            (false, _) => queues.join(","),
            (true, Some(napi)) => format!("napi {napi}"),
            (true, None) => "no NAPI".into(),
        };
        let mut line = format!(
            "  page pool {:<5} {serves}  inflight {} pages {} bytes",
            p.id,
            opt(p.inflight),
            opt(p.inflight_mem)
        );
        if let Some(t) = p.detach_time {
            let _ = write!(line, "  detached at {t} s (boot time)");
        }
        if let Some(d) = p.dmabuf {
            let _ = write!(line, "  dmabuf {d}");
        }
        if p.io_uring {
            line.push_str("  io_uring zcrx");
        }
        match &p.stats {
            Some(st) => {
                let _ = write!(
                    line,
                    "  alloc fast {} slow {} (high order {}) empty {}  recycled cache {} ring {} ring-full {} released {}",
                    opt(st.alloc_fast),
                    opt(st.alloc_slow),
                    opt(st.alloc_slow_high_order),
                    opt(st.alloc_empty),
                    opt(st.recycle_cached),
                    opt(st.recycle_ring),
                    opt(st.recycle_ring_full),
                    opt(st.recycle_released_refcnt)
                );
            }
            None => line.push_str("  counters unavailable"),
        }
        let _ = writeln!(o, "{line}");
    }
    if let Some(why) = &pools.stats_unavailable {
        let _ = writeln!(
            o,
            "  page pool counters unavailable: {}",
            crate::safe::line(why)
        );
    }
}

fn render_settings(o: &mut String, s: &crate::ethtool::NicSettings) {
    let mut parts = Vec::new();
    if let Field::Known(c) = &s.channels {
        let f = |v: Option<u32>, m: Option<u32>| match (v, m) {
            (Some(v), Some(m)) => format!("{v}/{m}"),
            (Some(v), None) => v.to_string(),
            _ => "-".into(),
        };
        parts.push(format!(
            "channels rx {} tx {} combined {}",
            f(c.rx, c.rx_max),
            f(c.tx, c.tx_max),
            f(c.combined, c.combined_max)
        ));
    }
    if let Field::Known(r) = &s.rings {
        parts.push(format!(
            "rings rx {}/{} tx {}/{}",
            r.rx.map_or("-".into(), |v| v.to_string()),
            r.rx_max.map_or("-".into(), |v| v.to_string()),
            r.tx.map_or("-".into(), |v| v.to_string()),
            r.tx_max.map_or("-".into(), |v| v.to_string())
        ));
        // Said only where the driver reports it (its absence is the JSON's missing field).
        if let Some(text) = match (r.tcp_data_split, r.hds_thresh) {
            (None, None) => None,
            (split, thresh) => Some(format!(
                "header split {}{}",
                split.map_or("-".into(), |d| d.to_string()),
                thresh.map_or(String::new(), |t| format!(
                    " (threshold {t}{})",
                    r.hds_thresh_max
                        .map_or(String::new(), |m| format!(" of at most {m}"))
                ))
            )),
        } {
            parts.push(text);
        }
    }
    if let Field::Known(c) = &s.coalesce {
        let keys = [
            "rx-usecs",
            "rx-frames",
            "tx-usecs",
            "adaptive-rx",
            "adaptive-tx",
        ];
        let shown: Vec<String> = keys
            .iter()
            .filter_map(|k| c.get(*k).map(|v| format!("{k}={v}")))
            .collect();
        if !shown.is_empty() {
            parts.push(format!("coalesce {}", shown.join(" ")));
        }
    }
    if let Field::Known(f) = &s.features {
        let keys = [
            "rx-gro",
            "rx-lro",
            "rx-gro-hw",
            "ntuple-filters",
            "rx-hashing",
        ];
        let shown: Vec<String> = keys
            .iter()
            .filter_map(|k| {
                f.get(*k).map(|v| {
                    format!(
                        "{k} {}{}",
                        if v.active { "on" } else { "off" },
                        if v.changeable { "" } else { " [fixed]" }
                    )
                })
            })
            .collect();
        if !shown.is_empty() {
            parts.push(shown.join(", "));
        }
    }
    if let Field::Known(p) = &s.pause {
        let b = |v: Option<bool>| v.map_or("-", |b| if b { "on" } else { "off" });
        parts.push(format!("pause rx {} tx {}", b(p.rx), b(p.tx)));
    }
    if let Field::Known(r) = &s.rss {
        let mut counts = std::collections::BTreeMap::new();
        for q in &r.indirection {
            *counts.entry(*q).or_insert(0u32) += 1;
        }
        // Each queue's share of the buckets, when few enough to read (a skewed table is what
        // makes one queue hot).
        let shares = if counts.len() <= 16 {
            let each: Vec<String> = counts.iter().map(|(q, n)| format!("q{q}:{n}")).collect();
            format!(" [{}]", each.join(" "))
        } else {
            String::new()
        };
        parts.push(format!(
            "rss {} entries over {} queues{shares}{}",
            r.indirection.len(),
            counts.len(),
            r.hfunc
                .as_ref()
                .map_or(String::new(), |h| format!(" ({h})"))
        ));
    }
    if let Some(Field::Known(h)) = &s.flow_hash
        && !h.is_empty()
    {
        let each: Vec<String> = h.iter().map(|(t, f)| format!("{t} {f}")).collect();
        parts.push(format!("hash {}", each.join(" ")));
    }
    if parts.is_empty() {
        let reason = match &s.channels {
            Field::Unknown { unknown } => unknown.clone(),
            _ => "nothing reported".into(),
        };
        let _ = writeln!(
            o,
            "  ethtool: unavailable ({})",
            crate::safe::line(&reason.to_string())
        );
    } else {
        let _ = writeln!(o, "  ethtool: {}", parts.join("; "));
    }
    for i in &s.interfaces {
        let _ = writeln!(o, "  kernel: {}", crate::safe::line(i));
    }
}

fn f(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.0}"))
}

/// Plain-text rendering of one interval (also used for tests).
pub fn top_interval(m: &TopInterval, seq: u64) -> Vec<String> {
    let mut lines = vec![
        format!("--- interval {seq} ({:.2} s)", m.interval_s),
        format!(
            "{:>4} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7}",
            "CPU",
            "%usr",
            "%nice",
            "%sys",
            "%irq",
            "%soft",
            "%steal",
            "%idle",
            "NET_RX/s",
            "NET_TX/s",
            "pkts/s",
            "drop/s",
            "sqz/s",
            "rps/s"
        ),
    ];
    for c in &m.cpus {
        lines.push(format!(
            "{:>4} {:>6.1} {:>6.1} {:>6.1} {:>6.1} {:>6.1} {:>6.1} {:>6.1} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7}",
            c.cpu,
            c.usr,
            c.nice,
            c.sys,
            c.irq,
            c.soft,
            c.steal,
            c.idle,
            f(c.net_rx),
            f(c.net_tx),
            f(c.processed),
            f(c.dropped),
            f(c.squeezed),
            f(c.rps_ipi)
        ));
    }
    for cpu in &m.went_offline {
        lines.push(format!("{cpu:>4} went offline"));
    }
    for q in m.queues.iter().filter(|q| q.total > 0.0) {
        lines.push(format!(
            "  {} {} irq {} {}: {:.0}/s on {}",
            q.nic,
            q.queue,
            q.irq,
            q.name,
            q.total,
            q.cpus_text()
        ));
    }
    for q in m
        .queue_packets
        .iter()
        .filter(|q| q.packets_per_s.is_some_and(|p| p > 0.0))
    {
        lines.push(format!(
            "  {} {}-{}: {} pkt/s {} B/s (driver's queue counters)",
            q.nic,
            q.kind,
            q.queue,
            f(q.packets_per_s),
            f(q.bytes_per_s)
        ));
    }
    for p in m.page_pools.iter().filter(|p| {
        p.handed_per_s.is_some_and(|r| r > 0.0) || p.freed_per_s.is_some_and(|r| r > 0.0)
    }) {
        let at = crate::netdev::pool_place(&p.rx_queues, p.napi_id);
        lines.push(format!(
            "  {} {at} page pool {}: {} pages/s handed out ({} calls/s to the page allocator), {}/s kept, {}/s freed, {} held",
            p.nic,
            p.pool,
            f(p.handed_per_s),
            f(p.slow_per_s),
            f(p.kept_per_s),
            f(p.freed_per_s),
            p.inflight.map_or("?".into(), |i| i.to_string()),
        ));
    }
    lines.extend(balance_lines(m));
    for p in &m.problems {
        lines.push(format!("  problem: {p}"));
    }
    lines
}

/// `top`'s balance lines: per device and what its queues share, the interval's CV and spread
/// beside the since-boot ones; then the platform's interrupt rate against its ceiling.
pub fn balance_lines(m: &TopInterval) -> Vec<String> {
    use crate::balance::QueueBalance;
    let measures = |b: &QueueBalance| match (b.cv, b.spread) {
        (Some(cv), Some(sp)) => format!("CV {cv:.2} spread {sp:.2}"),
        _ => "nothing counted".to_string(),
    };
    let mut lines = Vec::new();
    for b in &m.balance {
        let boot = m
            .balance_since_boot
            .iter()
            .find(|x| x.nic == b.nic && x.of == b.of)
            .map_or("not read".to_string(), measures);
        let busiest = b.busiest.as_ref().map_or(String::new(), |(q, share)| {
            format!(", busiest {q} {:.0} %", share * 100.0)
        });
        lines.push(format!(
            "  balance {} {} over {} queues: {} ({:.0}/s{busiest}); since boot {boot}",
            b.nic,
            b.of.word(),
            b.queues,
            measures(b),
            b.total
        ));
    }
    let i = &m.interrupts;
    // The device interrupts are what `of_ceiling` compares, and what is printed first.
    if let Some(devices) = i.device_per_s {
        let part = |what: &str, v: Option<f64>| v.map(|v| format!(", {what} {v:.0}/s"));
        lines.push(format!(
            "  interrupts {devices:.0}/s from devices{}{}{}: {:.1} % of {:.0} M/s, where many SoCs lose 3-4x I/O throughput",
            part("MSI", i.msi_per_s).unwrap_or_default(),
            part("NIC queues", i.nic_queues_per_s).unwrap_or_default(),
            part("all with timer and IPIs", i.total_per_s).unwrap_or_default(),
            i.of_ceiling().unwrap_or(0.0) * 100.0,
            i.ceiling_per_s / 1e6
        ));
    }
    lines
}
