//! In-process scrape time of a tree (no HTTP, no process start): what one scrape of the agent
//! costs for a host of that shape, as the agent serves it (its sampler's tick held, the
//! counters read and everything encoded), and what a tick costs (the settings read and the
//! doctor evaluated, once an interval). `cargo run --release -p netsteer-agent --example
//! scrape_time -- fixtures/hosts/mlx5-128cpu [N]`
use netsteer_agent::{Agent, AgentOptions, NicSource, Rates, encode};
use netsteer_host::HostFs;
use std::time::{Instant, SystemTime};

fn main() {
    let mut args = std::env::args().skip(1);
    let root = args.next().expect("a tree");
    let n: usize = args.next().map(|s| s.parse().expect("N")).unwrap_or(200);
    let tree = std::path::PathBuf::from(&root);
    let nic: NicSource = Box::new(move || {
        Ok(Box::new(netsteer_nic::TreeNic::new(&tree)) as Box<dyn netsteer_nic::NicBackend>)
    });
    let agent = Agent::new(
        HostFs::open(&root).expect("tree"),
        nic,
        AgentOptions {
            devices: Vec::new(),
            state_dir: None,
            goal: Default::default(),
            version: "bench",
            rates: Rates::SinceBoot,
            trace: None,
        },
    );
    let mut ticks = Vec::with_capacity(n);
    let mut times = Vec::with_capacity(n);
    let mut series = 0;
    for _ in 0..n {
        let t = Instant::now();
        agent.tick(Instant::now(), SystemTime::now());
        ticks.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let text = encode(agent.scrape(Instant::now(), SystemTime::now()));
        times.push(t.elapsed().as_secs_f64() * 1e3);
        series = text.lines().filter(|l| !l.starts_with('#')).count();
    }
    for (what, t) in [("scrapes", &mut times), ("ticks", &mut ticks)] {
        t.sort_by(f64::total_cmp);
        println!(
            "{root}: {n} {what}, ms min/median/max {:.2}/{:.2}/{:.2}, {series} series",
            t[0],
            t[n / 2],
            t[n - 1]
        );
    }
}
