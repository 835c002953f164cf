//! Recovery: bytes keep flowing when a channel dies mid-transfer (re-send on the survivors,
//! then re-dial).

use super::*;

/// One recovery run: 1 MiB writes for three durations; channel 0's connection is shut down
/// (as `ss -K` would) after the first; the receiver counts bytes per 100 ms window.
pub(super) fn recovery_run(net: &Net<'_>, channels: u16) -> io::Result<RecoveryRun> {
    const WINDOW: Duration = Duration::from_millis(100);
    let cfg = net.cfg;
    let nc = nc_cfg(channels, 0);
    let (server, client, mut cs, mut ss) = net.nc(nc.clone(), nc, &[SocketOptions::default()])?;
    let (tx, rx) = (cs.pop().expect("one"), ss.pop().expect("one"));
    let total = cfg.duration * 3;
    let busy = Busy::start();
    let started = Instant::now();
    let (scpu, rcpu) = (cfg.sender_cpu, cfg.receiver_cpu);
    let writer = thread::spawn(move || -> io::Result<u64> {
        pin(scpu);
        let buf = vec![0x5au8; 1 << 20];
        let mut sent = 0u64;
        while started.elapsed() < total {
            (&tx).write_all(&buf)?;
            sent += buf.len() as u64;
        }
        tx.shutdown_write()?;
        // Keep the socket (and its copies of unconsumed frames) until the reader is done.
        Ok(sent)
    });
    let reader = thread::spawn(move || -> io::Result<(u64, Vec<u64>)> {
        pin(rcpu);
        let mut windows = vec![0u64; (total.as_millis() / WINDOW.as_millis()) as usize + 20];
        let mut got = 0u64;
        loop {
            let n = rx.read_chunk()?.map_or(0, |c| c.len() as u64);
            if n == 0 {
                return Ok((got, windows));
            }
            got += n;
            let w = (started.elapsed().as_millis() / WINDOW.as_millis()) as usize;
            if let Some(slot) = windows.get_mut(w) {
                *slot += n;
            }
        }
    });
    thread::sleep(cfg.duration);
    let killed_at = started.elapsed();
    client.break_channel(0)?;
    let reopened = loop {
        let st = client.stats();
        if st.sessions.iter().any(|s| s.rejoined_channels > 0) {
            break Some(started.elapsed());
        }
        if started.elapsed() >= total {
            break None;
        }
        thread::sleep(Duration::from_millis(5));
    };
    let sent = writer
        .join()
        .map_err(|_| io::Error::other("the writer panicked"))??;
    let (received, windows) = reader
        .join()
        .map_err(|_| io::Error::other("the reader panicked"))??;
    let (_, steal) = busy.finish(started.elapsed().as_secs_f64());
    let reopened = reopened.ok_or_else(|| {
        io::Error::other(format!(
            "channel 0 was not re-opened within {:?} of its kill",
            total - killed_at
        ))
    })?;
    let resent: u64 = [client.stats(), server.stats()]
        .iter()
        .flat_map(|s| s.sessions.iter().map(|x| x.resent_frames))
        .sum();
    let w = WINDOW.as_millis() as usize;
    let idx = |d: Duration| d.as_millis() as usize / w;
    let rate = |from: usize, to: usize| -> f64 {
        let to = to.min(windows.len());
        if to <= from {
            return f64::NAN;
        }
        windows[from..to].iter().sum::<u64>() as f64 * 8.0
            / ((to - from) as f64 * WINDOW.as_secs_f64())
    };
    let first = idx(total / 10);
    let before = rate(first, idx(killed_at));
    let after = rate(idx(reopened + Duration::from_millis(500)), idx(total));
    let dip = windows[idx(killed_at)..=idx(reopened).min(windows.len() - 1)]
        .iter()
        .min()
        .map_or(f64::NAN, |&b| b as f64 * 8.0 / WINDOW.as_secs_f64());
    Ok(RecoveryRun {
        before_bits_per_second: before,
        dip_bits_per_second: dip,
        after_bits_per_second: after,
        ratio: after / before,
        reopen_ms: (reopened - killed_at).as_secs_f64() * 1e3,
        resent_frames: resent,
        bytes_sent: sent,
        bytes_received: received,
        steal_pct: steal,
    })
}

pub(super) fn recovery(net: &Net<'_>) -> io::Result<Summary> {
    let channels = net.cfg.channels.iter().copied().max().unwrap_or(2).max(2);
    let mut runs = Vec::new();
    for _ in 0..net.cfg.repeat.max(1) {
        let r = recovery_run(net, channels)?;
        if r.bytes_sent != r.bytes_received {
            return Err(io::Error::other(format!(
                "recovery: {} bytes sent but {} received",
                r.bytes_sent, r.bytes_received
            )));
        }
        runs.push(r);
    }
    let ratio_spread = spread_of(&runs.iter().map(|r| r.ratio).collect::<Vec<_>>());
    let steal = spread_of(&runs.iter().map(|r| r.steal_pct).collect::<Vec<_>>());
    Ok(summary(
        net,
        steal,
        Result::Recovery(Recovery {
            channels,
            runs,
            ratio_spread,
        }),
    ))
}
