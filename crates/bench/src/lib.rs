//! netsteer's benchmarks. One statistics engine ([`stats`]), one clock abstraction
//! ([`clock`]) and one reporter ([`report`]) serve every benchmark; [`udp_echo`] is the UDP
//! round-trip benchmark (seed 000's apparatus).

pub mod clock;
pub mod experiment;
pub mod netchannel;
pub mod report;
pub mod stats;
pub mod tcp;
pub mod udp_echo;
pub mod waiter;

/// Makes SIGINT, SIGTERM and SIGHUP set `stop` instead of killing the process, so a server
/// started in the background by a script ends its run, restores what it changed and prints its
/// summary when stopped with `kill`. Call it before starting threads (they inherit the blocked
/// signals; one thread waits for them).
pub fn stop_on_termination(
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::io::Result<()> {
    netsteer_sock::signal::block_termination()?;
    std::thread::Builder::new()
        .name("stop-on-signal".into())
        .spawn(move || {
            if netsteer_sock::signal::wait_termination().is_ok() {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        })?;
    Ok(())
}
