//! The doctor's reports as text for people: one host (`render`) and a fleet
//! (`render_fleet`). Every field a host supplies is one line of its own, passed through
//! `netsteer_host::safe`.

use super::fleet::FleetReport;
use super::{LoadSource, Report, Severity};
use std::fmt::Write as _;

fn severity_mark(s: Severity) -> &'static str {
    match s {
        Severity::Critical => "C",
        Severity::Warning => "W",
        Severity::Info => "i",
    }
}

fn label(s: Severity) -> &'static str {
    match s {
        Severity::Critical => "CRITICAL",
        Severity::Warning => "WARNING",
        Severity::Info => "info",
    }
}

/// The human report: a header, then each finding with evidence, why and the fix.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let load = match &r.load {
        Some(l) if l.source == LoadSource::Sampled => {
            format!("load sampled over {:.1} s", l.seconds)
        }
        Some(l) => format!("load averaged since boot ({:.0} s)", l.seconds),
        None => "no load data".into(),
    };
    let _ = writeln!(s, "netsteer doctor: goal {}, {load}", r.goal);
    let h = &r.host;
    let _ = writeln!(
        s,
        "host: kernel {}, CPUs {} online, {}{}, irqbalance {}",
        netsteer_host::safe::line(h.kernel.as_deref().unwrap_or("?")),
        h.online_cpus,
        match h.numa_nodes {
            Some(n) => format!("{n} NUMA node(s)"),
            None => "NUMA unknown".to_string(),
        },
        h.isolated_cpus
            .as_ref()
            .map(|i| format!(", isolated {i}"))
            .unwrap_or_default(),
        match h.irqbalance_running {
            Some(true) => "running",
            Some(false) => "not running",
            None => "unknown",
        }
    );
    if let Some(v) = &h.container_view {
        let _ = writeln!(s, "view: {}", netsteer_host::safe::line(v));
    }
    for n in &h.nics {
        let queues = if n.queues_unknown.is_some() {
            "queues unknown".to_string()
        } else {
            format!("{} rx / {} tx queues", n.rx_queues, n.tx_queues)
        };
        let _ = writeln!(
            s,
            "  {} ({}, {}): {queues}, {} queue IRQs{}",
            netsteer_host::safe::line(&n.name),
            n.kind,
            netsteer_host::safe::line(n.driver.as_deref().unwrap_or("?")),
            n.queue_irqs,
            n.numa_node
                .filter(|n| *n >= 0)
                .map(|n| format!(", NUMA node {n}"))
                .unwrap_or_default()
        );
    }
    // Every field is one line of its own: a name inside it (an interface, an IRQ's action)
    // must not add lines or escape sequences of its own.
    use netsteer_host::safe::line;
    for f in &r.findings {
        let _ = writeln!(s, "\n{:<8} {}: {}", label(f.severity), f.id, line(&f.title));
        for (i, e) in f.evidence.iter().enumerate() {
            let _ = writeln!(
                s,
                "  {:<9}{}",
                if i == 0 { "evidence" } else { "" },
                line(e)
            );
        }
        let _ = writeln!(s, "  {:<9}{}", "why", line(&f.why));
        let _ = writeln!(s, "  {:<9}{}", "fix", line(&f.fix.summary));
        for step in &f.fix.steps {
            let _ = writeln!(s, "  {:<9}$ {}", "", line(step));
        }
        if let Some(t) = &f.fix.tune {
            let _ = writeln!(s, "  {:<9}{}", "tune", line(t));
        }
    }
    let c = r.counts;
    let n = r.rules;
    let judged = format!(
        "rules: {} judged, {} not judged (of {} that apply)",
        n.judged, n.not_judged, n.applied
    );
    if r.healthy() {
        let _ = writeln!(
            s,
            "\nNo findings: nothing keeps packet processing here from scaling. {judged}."
        );
    } else if r.findings.is_empty() {
        // Blind is not healthy: say what was not judged instead of the healthy sentence.
        let _ = writeln!(
            s,
            "\nNo findings in what could be judged; {judged}. Not judged:"
        );
    } else {
        let _ = writeln!(
            s,
            "\n{} finding(s): {} critical, {} warning, {} info; {judged}",
            r.findings.len(),
            c.critical,
            c.warning,
            c.info
        );
        if !r.not_judged.is_empty() || !r.unjudged.is_empty() {
            let _ = writeln!(s, "doctor could not judge:");
        }
    }
    for n in &r.not_judged {
        let _ = writeln!(s, "  not judged: {}", line(n));
    }
    for (rule, subjects) in by_rule(&r.unjudged) {
        let _ = writeln!(s, "  not judged: {rule}: {}", line(&subjects));
    }
    if !r.balance.is_empty() {
        let window = match &r.load {
            Some(l) if l.source == LoadSource::Sampled => {
                format!("over the {:.1} s sample", l.seconds)
            }
            _ => "averaged since boot".to_string(),
        };
        let _ = writeln!(s, "queue balance ({window}):");
        for b in &r.balance {
            let measures = match (b.cv, b.spread) {
                (Some(cv), Some(sp)) => format!("CV {cv:.2} spread {sp:.2}"),
                _ => "nothing counted".into(),
            };
            let busiest = b.busiest.as_ref().map_or(String::new(), |(q, share)| {
                format!(", busiest {q} {:.0} %", share * 100.0)
            });
            let _ = writeln!(
                s,
                "  {} {} over {} queues: {measures} ({}{}{busiest})",
                line(&b.nic),
                b.of.word(),
                b.queues,
                crate::model::ctx::rate(b.total),
                r.load
                    .as_ref()
                    .map_or("/s", |l| if l.source == LoadSource::Sampled {
                        "/s"
                    } else {
                        "/s on average"
                    })
            );
        }
    }
    for p in &r.problems {
        let _ = writeln!(s, "note: {}", line(p));
    }
    s
}

/// Where a device's own name stood in a reason: a character no reason and no interface name
/// holds (a reason may say "DEV", and one name may be part of another: `eth0` of `eth0.100`).
const HOLE: char = '\u{1}';

/// `needs` with each whole-word `name` (not inside a longer interface name) as [`HOLE`].
fn holed(needs: &str, name: &str) -> String {
    let in_name = |c: char| c.is_ascii_alphanumeric() || "._-@:".contains(c);
    let mut out = String::with_capacity(needs.len());
    let mut rest = needs;
    let mut before: Option<char> = None;
    while let Some(at) = rest.find(name) {
        let (head, tail) = rest.split_at(at);
        let prev = head.chars().next_back().or(before);
        let next = tail[name.len()..].chars().next();
        out.push_str(head);
        if prev.is_some_and(in_name) || next.is_some_and(in_name) {
            out.push_str(name);
        } else {
            out.push(HOLE);
        }
        before = Some(name.chars().next_back().unwrap_or(' '));
        rest = &tail[name.len()..];
    }
    out.push_str(rest);
    out
}

/// Each rule's unjudged subjects on one line: devices that lack the same thing for the same
/// reason (their own name aside) are listed together, the first three reasons in full, then
/// how many more.
fn by_rule(all: &[super::NotJudged]) -> Vec<(String, String)> {
    // rule → [(needs with the device's own name as HOLE, devices)]
    type Shapes = Vec<(String, Vec<String>)>;
    let mut out: Vec<(String, Shapes)> = Vec::new();
    for n in all {
        let shape = if n.subject.is_empty() {
            n.needs.clone()
        } else {
            holed(&n.needs, &n.subject)
        };
        let at = match out.iter().position(|(r, _)| *r == n.rule) {
            Some(i) => i,
            None => {
                out.push((n.rule.clone(), Vec::new()));
                out.len() - 1
            }
        };
        let groups = &mut out[at].1;
        match groups.iter_mut().find(|(s, _)| *s == shape) {
            Some((_, devs)) => devs.push(n.subject.clone()),
            None => groups.push((shape, vec![n.subject.clone()])),
        }
    }
    out.into_iter()
        .map(|(rule, groups)| {
            let more = groups.len().saturating_sub(3);
            let mut parts: Vec<String> = groups
                .into_iter()
                .take(3)
                .map(|(shape, devs)| match devs.as_slice() {
                    [d] if d.is_empty() => format!("needs {shape}"),
                    [d] => format!("{d} needs {}", shape.replace(HOLE, d)),
                    many => format!("{} need {}", many.join(", "), shape.replace(HOLE, "DEV")),
                })
                .collect();
            if more > 0 {
                parts.push(format!("and {more} more"));
            }
            (rule, parts.join("; "))
        })
        .collect()
}

/// One line per host (counts, then its findings most severe first), then one line per rule
/// with the hosts it fired on.
pub fn render_fleet(f: &FleetReport) -> String {
    let mut s = String::new();
    let width = f
        .hosts
        .iter()
        .map(|h| h.host.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(
        s,
        "netsteer doctor: {} host(s), loads averaged since boot",
        f.hosts.len()
    );
    let _ = writeln!(
        s,
        "\n{:<width$}  crit  warn  info  findings (C critical, W warning, i info)",
        "host"
    );
    for h in &f.hosts {
        match (&h.report, &h.error) {
            (Some(r), err) => {
                let list: Vec<String> = r
                    .findings
                    .iter()
                    .map(|x| format!("{}:{}", severity_mark(x.severity), x.id))
                    .collect();
                let _ = writeln!(
                    s,
                    "{:<width$}  {:>4}  {:>4}  {:>4}  {}{}",
                    netsteer_host::safe::line(&h.host),
                    r.counts.critical,
                    r.counts.warning,
                    r.counts.info,
                    if list.is_empty() {
                        "-".to_string()
                    } else {
                        list.join(" ")
                    },
                    err.as_deref()
                        .map(|e| format!("  (incomplete: {})", netsteer_host::safe::line(e)))
                        .unwrap_or_default()
                );
            }
            (None, err) => {
                let _ = writeln!(
                    s,
                    "{:<width$}     ?     ?     ?  ERROR {}",
                    netsteer_host::safe::line(&h.host),
                    netsteer_host::safe::line(err.as_deref().unwrap_or("no report"))
                );
            }
        }
    }
    if !f.rules.is_empty() {
        let _ = writeln!(s, "\nby rule:");
        let idw = f.rules.iter().map(|r| r.id.len()).max().unwrap_or(0);
        for r in &f.rules {
            let _ = writeln!(
                s,
                "  {:<idw$}  {:<8}  {} of {} host(s): {}",
                r.id,
                label(r.severity),
                r.hosts.len(),
                f.hosts.len(),
                netsteer_host::safe::line(&r.hosts.join(", "))
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nj(rule: &str, subject: &str, needs: &str) -> super::super::NotJudged {
        super::super::NotJudged {
            rule: rule.into(),
            subject: subject.into(),
            needs: needs.into(),
        }
    }

    /// A device's name is taken out of its reason only where it stands alone: not inside a
    /// longer name, not where the reason itself says DEV.
    #[test]
    fn grouped_reasons_keep_other_names_and_words_whole() {
        let lines = by_rule(&[
            nj("r", "eth0", "eth0 packet counters: absent"),
            nj("r", "eth1", "eth1 packet counters: absent"),
            nj("s", "eth0", "eth0.100 of eth0: DEV unknown"),
            nj("t", "e", "e queues: none listed (see /sys/class/net/e)"),
        ]);
        assert_eq!(lines[0].1, "eth0, eth1 need DEV packet counters: absent");
        assert_eq!(lines[1].1, "eth0 needs eth0.100 of eth0: DEV unknown");
        assert_eq!(
            lines[2].1,
            "e needs e queues: none listed (see /sys/class/net/e)"
        );
    }
}
