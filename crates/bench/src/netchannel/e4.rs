//! E4: throughput per core against raw TCP, every CPU's busy time counted (the paper's
//! Fig. 8a).

use super::*;

pub(super) fn e4(net: &Net<'_>) -> io::Result<Summary> {
    let cfg = net.cfg;
    let per_core = |p: &Point| p.bps / p.cores;
    let mut tcp = Vec::new();
    let mut inline = Vec::new();
    let mut lent = Vec::new();
    let mut handoff = Vec::new();
    let mut pairs = Vec::new();
    for _ in 0..cfg.repeat.max(1) {
        let before = tcp_stream(net, cfg.io_bytes)?;
        let one = nc_cfg(1, 0);
        let inline_cfg = netchannel::Config {
            inline_send: true,
            ..one.clone()
        };
        // The application hands its buffers over (write_owned): the socket keeps references
        // for re-sending, no copy.
        // Each side's channel I/O thread is pinned beside its application thread; the
        // receiver's I/O thread does that side's copy, and left to the scheduler it runs
        // wherever it was woken. The same stream in a scratch harness: 25.0-25.9 Gbit/s
        // unpinned, 29.9-31.4 pinned, plain TCP 32.7-33.1 (BENCHMARKS.md, issue 14 ninth pass).
        let nc = nc_stream(net, inline_cfg.clone(), false, true, true)?;
        let after = tcp_stream(net, cfg.io_bytes)?;
        // Each repeat's netchannel run is compared with the TCP runs just before and just
        // after it (A-B-A), not median with median: on a VM the host moves the vCPUs between
        // cache domains now and then, and plain TCP's per-core rate jumps 2× for a while (12
        // against 25 Gbit/s per core within one run, issue 14); A-B-A cancels a drift.
        pairs.push(per_core(&nc) / ((per_core(&before) + per_core(&after)) / 2.0));
        tcp.extend([before, after]);
        inline.push(nc);
        // It lends them (write): the socket copies each frame to keep it for re-sending.
        lent.push(nc_stream(net, inline_cfg, false, false, true)?);
        handoff.push(nc_stream(net, one, false, false, true)?);
    }
    let row = |mode: &str, pts: &[Point]| E4Row {
        mode: mode.into(),
        bits_per_second: median_of(pts, |p| p.bps).median,
        cores_used: median_of(pts, |p| p.cores).median,
        bits_per_second_per_core: median_of(pts, per_core).median,
        spread: median_of(pts, per_core),
    };
    let rows = vec![
        row("inline", &inline),
        row("inline-lent", &lent),
        row("handoff", &handoff),
    ];
    let tcp_pc = median_of(&tcp, per_core);
    let ratio_spread = spread_of(&pairs);
    let mut all = tcp.clone();
    all.extend(inline.iter().chain(&lent).chain(&handoff).copied());
    Ok(summary(
        net,
        steal_of(&all),
        Result::E4(E4 {
            bits_per_second_per_core: rows[0].bits_per_second_per_core,
            ratio: ratio_spread.median,
            ratio_spread: Some(ratio_spread),
            rows,
            tcp_bits_per_second: median_of(&tcp, |p| p.bps).median,
            tcp_cores_used: median_of(&tcp, |p| p.cores).median,
            tcp_bits_per_second_per_core: tcp_pc.median,
            tcp_spread: tcp_pc,
        }),
    ))
}
