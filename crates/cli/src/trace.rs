//! `netsteer trace`: the receive path's stage latencies (the trace crate does the work).
use netsteer_trace::run::{TraceArgs, run};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

pub fn run_trace(a: &TraceArgs) -> anyhow::Result<ExitCode> {
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    netsteer_sock::signal::stop_on_termination(stop.clone())?;
    let mut out = std::io::stdout().lock();
    run(&a.options(), &|| stop.load(Ordering::Relaxed), &mut |m| {
        m.lines(a.json)
            .iter()
            .try_for_each(|l| crate::emit(&mut out, l))
    })?;
    Ok(ExitCode::SUCCESS)
}
