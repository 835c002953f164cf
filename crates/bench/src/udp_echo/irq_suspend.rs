//! IRQ suspension for an echo server's run (Documentation/networking/napi.rst, "IRQ
//! suspension", 6.13+): every NAPI of the device gets irq-suspend-timeout, with its two
//! companions, and is put back afterwards. It acts only for an epoll busy poller that prefers
//! busy polling.

use netsteer_host::netdev::NapiAttr;
use netsteer_nic::napi_override::NapiOverride;
use netsteer_nic::{NicBackend, NicError};

/// The deferral that keeps interrupts off between polls.
pub const DEFER_HARD_IRQS: u64 = 2;
/// The timer that ends a suspension an application abandons (well below the suspension).
pub const GRO_FLUSH_TIMEOUT_NS: u64 = 200_000;

/// Sets the suspension on every NAPI of `dev`; dropping (or `restore`) puts the old values
/// back.
pub fn apply<'a>(
    backend: &'a dyn NicBackend,
    dev: &str,
    timeout_ns: u64,
) -> Result<NapiOverride<'a>, NicError> {
    NapiOverride::apply(
        backend,
        dev,
        &[
            (NapiAttr::DeferHardIrqs, DEFER_HARD_IRQS),
            (NapiAttr::GroFlushTimeout, GRO_FLUSH_TIMEOUT_NS),
            (NapiAttr::IrqSuspendTimeout, timeout_ns),
        ],
    )
}

/// Suspension acts only for an epoll busy poller that prefers busy polling (napi.rst).
pub fn check(wait: super::Wait, prefer_busy_poll: bool) -> Result<(), String> {
    if wait == super::Wait::EpollBusy && prefer_busy_poll {
        Ok(())
    } else {
        Err("--irq-suspend acts only for an epoll busy poller that prefers busy polling: add --wait epoll-busy --prefer-busy-poll".into())
    }
}

/// Runs `f` with the suspension set on `dev` (when `timeout_ns` is given), then puts every
/// NAPI back; returns what `f` returned and the settings that could not be restored.
pub fn during<T>(
    backend: &dyn NicBackend,
    dev: &str,
    timeout_ns: u64,
    f: impl FnOnce() -> T,
) -> Result<(T, Vec<String>), NicError> {
    let o = apply(backend, dev, timeout_ns)?;
    let out = f();
    Ok((out, o.restore()))
}

/// [`during`] for the echo server's run, saying what it set on stderr and what it could not
/// restore; an error names the flags.
pub fn around_run<T>(
    backend: &dyn NicBackend,
    dev: &str,
    timeout_ns: u64,
    f: impl FnOnce() -> T,
) -> Result<T, String> {
    eprintln!(
        "netsteer: {dev}: IRQ suspension {timeout_ns} ns, defer-hard-irqs {DEFER_HARD_IRQS}, gro-flush-timeout {GRO_FLUSH_TIMEOUT_NS} ns on every NAPI for the run"
    );
    let (out, failed) = during(backend, dev, timeout_ns, f)
        .map_err(|e| format!("--irq-suspend {timeout_ns} --dev {dev}: {e}"))?;
    for f in failed {
        eprintln!("netsteer: error: restoring {f}");
    }
    Ok(out)
}
