//! E3: one latency app beside N bulk apps — plain TCP, netchannel shared, netchannel with
//! its own latency channel (the paper's Fig. 6d).

use super::*;

/// One E3 run: the latency app's RTTs and the bulk apps' bits per second.
pub(super) fn e3_run<C: Conn>(
    cfg: &Config,
    mut clients: Vec<C>,
    mut servers: Vec<C>,
) -> io::Result<(LatencyRecorder, f64, f64)> {
    let lat_client = clients.remove(0);
    let lat_server = servers.remove(0);
    let stop = Arc::new(AtomicBool::new(false));
    let bulk_bytes = Arc::new(AtomicU64::new(0));
    let busy = Busy::start();
    let started = Instant::now();
    let echo = thread::spawn(move || {
        let mut m = vec![0u8; MESSAGE];
        'run: loop {
            let mut got = 0;
            while got < MESSAGE {
                match lat_server.read_some(&mut m[got..]) {
                    Ok(0) | Err(_) => break 'run,
                    Ok(n) => got += n,
                }
            }
            if lat_server.write_all_of(&m).is_err() {
                break;
            }
        }
    });
    let mut bulk = Vec::new();
    for (c, s) in clients.into_iter().zip(servers) {
        let stop = stop.clone();
        bulk.push(thread::spawn(move || {
            let buf = vec![0xa5u8; 1 << 20];
            while !stop.load(Ordering::Relaxed) {
                if c.write_all_of(&buf).is_err() {
                    break;
                }
            }
            let _ = c.finish();
            c
        }));
        let counted = bulk_bytes.clone();
        bulk.push(thread::spawn(move || {
            let mut buf = AlignedBuf::new(1 << 20);
            while let Ok(n) = s.drain_some(&mut buf) {
                if n == 0 {
                    break;
                }
                counted.fetch_add(n as u64, Ordering::Relaxed);
            }
            s
        }));
    }
    let mut rec = LatencyRecorder::new();
    let msg = vec![0x11u8; MESSAGE];
    let mut back = vec![0u8; MESSAGE];
    let deadline = started + cfg.duration;
    // A percentile of nothing is not a measurement: the run goes on past its duration until
    // MIN_SAMPLES round trips were recorded after the warm-up (a loaded machine or a short
    // --duration may not reach them in time), and fails, rather than report zeros, if even
    // 10 × the duration (at least 10 s) is not enough.
    let hard_deadline = started + (cfg.duration * 10).max(Duration::from_secs(10));
    let mut i = 0usize;
    loop {
        let now = Instant::now();
        if now >= deadline && rec.count() >= MIN_SAMPLES {
            break;
        }
        if now >= hard_deadline {
            stop.store(true, Ordering::Relaxed);
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "E3: only {} latency round trips after the warm-up in {:.1} s",
                    rec.count(),
                    started.elapsed().as_secs_f64()
                ),
            ));
        }
        let t0 = Instant::now();
        lat_client.write_all_of(&msg)?;
        let mut got = 0;
        while got < MESSAGE {
            match lat_client.read_some(&mut back[got..])? {
                0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "echo server closed",
                    ));
                }
                n => got += n,
            }
        }
        if i >= WARMUP_RTTS {
            rec.record(t0.elapsed().as_nanos() as u64);
        }
        i += 1;
    }
    let secs = started.elapsed().as_secs_f64();
    let bps = bulk_bytes.load(Ordering::Relaxed) as f64 * 8.0 / secs;
    let (_, steal) = busy.finish(secs);
    stop.store(true, Ordering::Relaxed);
    lat_client.finish()?;
    let _ = echo.join();
    for t in bulk {
        let _ = t.join();
    }
    drop(lat_client);
    Ok((rec, bps, steal))
}

pub(super) fn e3(net: &Net<'_>) -> io::Result<Summary> {
    let cfg = net.cfg;
    let n = cfg.bulk_apps;
    let nc = netchannel::Config {
        // One throughput channel shared by every bulk app, hashed so sockets keep to it, and
        // one latency channel (paper run_mix_flow.sh: SRC_PORT hashing, no copy workers).
        throughput_channels: 1,
        latency_channels: 1,
        policy: Policy::Hash,
        latency_realtime: cfg.latency_realtime.then_some(10),
        ..netchannel::Config::default()
    };
    let configs = ["plain-tcp", "shared", "isolated"];
    let mut runs: Vec<(LatencyRecorder, Vec<f64>, Vec<f64>)> = configs
        .iter()
        .map(|_| (LatencyRecorder::new(), Vec::new(), Vec::new()))
        .collect();
    let mut steals = Vec::new();
    for _ in 0..cfg.repeat.max(1) {
        for (k, name) in configs.iter().enumerate() {
            let (rec, bps, steal) = match *name {
                "plain-tcp" => {
                    let (c, s) = net.tcp(1 + n)?;
                    e3_run(cfg, c, s)?
                }
                _ => {
                    let lat = if *name == "isolated" {
                        SocketOptions::latency()
                    } else {
                        SocketOptions::default()
                    };
                    let mut opts = vec![lat];
                    opts.extend((0..n).map(|_| SocketOptions::default()));
                    let (_s, _c, cs, ss) = net.nc(nc.clone(), nc.clone(), &opts)?;
                    e3_run(cfg, cs, ss)?
                }
            };
            steals.push(steal);
            let slot = &mut runs[k];
            if let Some(sum) = rec.summary() {
                slot.1.push(sum.p99 as f64);
            }
            slot.0.merge(&rec);
            slot.2.push(bps);
        }
    }
    let rows: Vec<E3Row> = configs
        .iter()
        .zip(&runs)
        .map(|(name, (rec, p99s, bps))| E3Row {
            config: name.to_string(),
            latency_ns: rec.summary().unwrap_or_default(),
            p99_spread: spread_of(p99s),
            bits_per_second: spread_of(bps).median,
        })
        .collect();
    let gain = rows[1].p99_spread.median / rows[2].p99_spread.median;
    Ok(summary(
        net,
        spread_of(&steals),
        Result::E3(E3 {
            bulk_apps: n,
            message_bytes: MESSAGE,
            rows,
            isolation_p99_gain: gain,
        }),
    ))
}
