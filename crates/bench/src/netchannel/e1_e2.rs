//! E1 (one socket, channels × copy workers, beside one TCP connection) and E2 (4 KiB
//! messages across channels): the NetChannel paper's Fig. 6a-6c.

use super::*;

pub(super) fn e1(net: &Net<'_>) -> io::Result<Summary> {
    let cfg = net.cfg;
    let mut all = Vec::new();
    // Alternate TCP and netchannel points in each repeat so drift hits both alike.
    let mut tcp = Vec::new();
    // (channels, receive workers, send workers per channel): receive workers alone, then
    // both directions (NetChannel's nd_num_dc_thread serves both).
    let mut grid: Vec<(u16, usize, usize, Vec<Point>)> = Vec::new();
    for &c in &cfg.channels {
        for &w in &cfg.copy_workers {
            grid.push((c, w, 0, Vec::new()));
            if w > 0 {
                grid.push((c, w, w, Vec::new()));
            }
        }
    }
    let mut mptcp = Vec::new();
    for _ in 0..cfg.repeat.max(1) {
        tcp.push(tcp_stream(net, cfg.io_bytes)?);
        if cfg.mptcp {
            mptcp.push(mptcp_stream(net, cfg.io_bytes)?);
        }
        for (c, w, sw, pts) in &mut grid {
            let nc = netchannel::Config {
                send_copy_workers: *sw,
                ..nc_cfg(*c, *w)
            };
            pts.push(nc_stream(net, nc, true, false, false)?);
        }
    }
    all.extend(tcp.iter().copied());
    all.extend(mptcp.iter().map(|(p, _)| *p));
    let rows = grid
        .into_iter()
        .map(|(channels, copy_workers, send_copy_workers, pts)| {
            all.extend(pts.iter().copied());
            let spread = median_of(&pts, |p| p.bps);
            E1Row {
                channels,
                copy_workers,
                send_copy_workers,
                bits_per_second: spread.median,
                spread,
            }
        })
        .collect();
    let ts = median_of(&tcp, |p| p.bps);
    Ok(summary(
        net,
        steal_of(&all),
        Result::E1(E1 {
            rows,
            tcp_bits_per_second: ts.median,
            tcp_spread: ts,
            mptcp: mptcp_row(&mptcp),
        }),
    ))
}

pub(super) fn e2(net: &Net<'_>) -> io::Result<Summary> {
    let cfg = net.cfg;
    let mut tcp = Vec::new();
    let mut rows: Vec<(u16, Vec<Point>)> = cfg.channels.iter().map(|&c| (c, Vec::new())).collect();
    let mut mptcp = Vec::new();
    for _ in 0..cfg.repeat.max(1) {
        tcp.push(tcp_stream(net, MESSAGE)?);
        if cfg.mptcp {
            mptcp.push(mptcp_stream(net, MESSAGE)?);
        }
        for (c, pts) in &mut rows {
            let nc = netchannel::Config {
                // One message per frame, each frame to the next channel (paper's run_np.sh).
                policy: Policy::RoundRobin { stick_bytes: 1 },
                ..nc_cfg(*c, 0)
            };
            let (_s, _c, mut cs, mut ss) = net.nc(nc.clone(), nc, &[SocketOptions::default()])?;
            let traffic = Traffic {
                chunk: MESSAGE,
                messages: true,
                copy_reads: false,
                owned: false,
            };
            pts.push(transfer(
                cs.pop().expect("one"),
                ss.pop().expect("one"),
                cfg,
                traffic,
            )?);
        }
    }
    let mut all = tcp.clone();
    all.extend(mptcp.iter().map(|(p, _)| *p));
    let rows = rows
        .into_iter()
        .map(|(channels, pts)| {
            all.extend(pts.iter().copied());
            let spread = median_of(&pts, |p| p.bps);
            E2Row {
                channels,
                bits_per_second: spread.median,
                messages_per_second: spread.median / 8.0 / MESSAGE as f64,
                spread,
            }
        })
        .collect();
    let ts = median_of(&tcp, |p| p.bps);
    Ok(summary(
        net,
        steal_of(&all),
        Result::E2(E2 {
            message_bytes: MESSAGE,
            rows,
            tcp_bits_per_second: ts.median,
            tcp_messages_per_second: ts.median / 8.0 / MESSAGE as f64,
            tcp_spread: ts,
            mptcp: mptcp_row(&mptcp),
        }),
    ))
}
