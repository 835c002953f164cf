//! The self-contained HTML report of a scenario: inline SVG and CSS, no script, no external
//! URL, readable offline (mailed, attached to a ticket).

use crate::run::{Row, RunRecord, Summary, VariantStats};
use crate::scenario::Unit;
use netsteer_experiment::experiment::Verdict;
use netsteer_host::safe::html as esc;
use std::fmt::Write as _;

/// A measure in its unit, scaled for reading ([`Unit::show`]).
pub fn show(v: f64, unit: Unit) -> String {
    unit.show(v)
}

/// Colours of the variants, in order (the baseline grey).
const COLORS: [&str; 8] = [
    "#8a8a8a", "#1971c2", "#e8590c", "#2b8a3e", "#9c36b5", "#c92a2a", "#0c8599", "#5c940d",
];

fn color(i: usize) -> &'static str {
    COLORS[i % COLORS.len()]
}

/// One bar per variant at the median, with min–max whiskers, on one scale; a variant's bar is
/// green when it was better than the baseline beyond the noise, red when worse beyond it, grey
/// within it.
fn bars(tool: &str, summary: &Summary) -> String {
    let stats: Vec<&VariantStats> = summary.stats.iter().filter(|s| s.tool == tool).collect();
    let Some(first) = stats.first() else {
        return String::new();
    };
    let (w, left, bar_h, gap) = (640.0, 110.0, 24.0, 34.0);
    let h = 10.0 + gap * stats.len() as f64;
    let top = stats
        .iter()
        .map(|s| s.value.max)
        .fold(0.0, f64::max)
        .max(f64::MIN_POSITIVE);
    let x = |v: f64| left + (w - left - 130.0) * v / top;
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" aria-label="{} per variant">"#,
        esc(tool)
    );
    for (i, st) in stats.iter().enumerate() {
        let verdict = summary
            .rows
            .iter()
            .find(|r| r.tool == tool && r.variant == st.variant)
            .map(|r| r.decision.verdict);
        let fill = match verdict {
            None | Some(Verdict::WithinNoise) => "#8a8a8a",
            Some(Verdict::Better) => "#2b8a3e",
            Some(Verdict::Worse) => "#c92a2a",
        };
        let y = 8.0 + i as f64 * gap;
        let sp = &st.value;
        let _ = write!(
            s,
            r#"<text x="0" y="{ty}" font-size="13">{label}</text><rect x="{left}" y="{y}" width="{bw:.1}" height="{bar_h}" fill="{fill}"/><line x1="{x0:.1}" x2="{x1:.1}" y1="{my}" y2="{my}" stroke="black"/><line x1="{x0:.1}" x2="{x0:.1}" y1="{y0}" y2="{y1}" stroke="black"/><line x1="{x1:.1}" x2="{x1:.1}" y1="{y0}" y2="{y1}" stroke="black"/><text x="{tx:.1}" y="{ty}" font-size="12">{med}</text>"#,
            label = esc(&st.variant),
            ty = y + 17.0,
            bw = (x(sp.median) - left).max(0.5),
            x0 = x(sp.min),
            x1 = x(sp.max),
            my = y + bar_h / 2.0,
            y0 = y + 5.0,
            y1 = y + bar_h - 5.0,
            tx = x(sp.max) + 6.0,
            med = show(sp.median, first.unit),
        );
    }
    s.push_str("</svg>");
    s
}

/// The round-trip CDF of every variant (medians of each percentile point over the runs), on a
/// logarithmic time axis, percentiles up the side.
fn cdf(tool: &str, summary: &Summary) -> String {
    let stats: Vec<(usize, &VariantStats)> = summary
        .stats
        .iter()
        .filter(|s| s.tool == tool && s.latency_points.len() >= 2)
        .enumerate()
        .collect();
    if stats.is_empty() {
        return String::new();
    }
    let all = stats.iter().flat_map(|(_, s)| s.latency_points.iter());
    let (lo, hi) = all.fold((f64::MAX, 0.0f64), |(lo, hi), [_, v]| {
        (lo.min(v.max(1.0)), hi.max(*v))
    });
    // Whole decades, at least one: ceil(log(10·lo)) is already past floor(log(lo)).
    let (lo, hi) = (lo.log10().floor(), hi.max(lo * 10.0).log10().ceil());
    let (w, h, left, bottom, top) = (640.0, 300.0, 50.0, 40.0, 10.0);
    let x = |ns: f64| left + (w - left - 150.0) * (ns.max(1.0).log10() - lo) / (hi - lo);
    let y = |p: f64| top + (h - top - bottom) * (1.0 - p / 100.0);
    let mut s = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" aria-label="{} round-trip CDF"><rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#ccc"/>"##,
        esc(tool),
        pw = w - left - 150.0,
        ph = h - top - bottom,
    );
    let mut d = lo;
    while d <= hi {
        let ns = 10f64.powf(d);
        let label = if ns >= 1e6 {
            format!("{} ms", ns / 1e6)
        } else if ns >= 1e3 {
            format!("{} µs", ns / 1e3)
        } else {
            format!("{ns} ns")
        };
        let _ = write!(
            s,
            r##"<line x1="{xx:.1}" x2="{xx:.1}" y1="{top}" y2="{yb}" stroke="#eee"/><text x="{xx:.1}" y="{ty}" font-size="11" text-anchor="middle">{label}</text>"##,
            xx = x(ns),
            yb = h - bottom,
            ty = h - bottom + 14.0
        );
        d += 1.0;
    }
    for p in [0.0, 50.0, 90.0, 99.0, 100.0] {
        let _ = write!(
            s,
            r#"<text x="{tx}" y="{ty:.1}" font-size="11" text-anchor="end">{p}%</text>"#,
            tx = left - 4.0,
            ty = y(p) + 4.0
        );
    }
    for (i, st) in &stats {
        let pts: Vec<String> = st
            .latency_points
            .iter()
            .map(|[p, v]| format!("{:.1},{:.1}", x(*v), y(*p)))
            .collect();
        let _ = write!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="2"/><text x="{lx}" y="{ly}" font-size="12" fill="{c}">{n}</text>"#,
            pts.join(" "),
            c = color(*i),
            lx = w - 140.0,
            ly = top + 14.0 + *i as f64 * 16.0,
            n = esc(&st.variant)
        );
    }
    let _ = write!(
        s,
        r#"<text x="{cx}" y="{ty}" font-size="11" text-anchor="middle">round trip (log scale)</text></svg>"#,
        cx = left + (w - left - 150.0) / 2.0,
        ty = h - 8.0
    );
    s
}

/// Where the receive path's time went (`--trace`): per device and receive queue, one bar per
/// variant stacking the mean stack time (the skb's entry to its socket) and the mean socket
/// residence (the socket to the application's read); then the per-CPU softirq stages. Means,
/// not medians, because means add up along a path.
fn stage_bars(tool: &str, summary: &Summary) -> String {
    use netsteer_trace::Stage;
    let stats: Vec<(usize, &VariantStats)> = summary
        .stats
        .iter()
        .filter(|s| s.tool == tool && !s.stages.is_empty())
        .enumerate()
        .collect();
    if stats.is_empty() {
        return String::new();
    }
    type Place = (Option<String>, Option<u32>);
    // (device, queue) -> variant index -> (stack mean, residence mean), count-weighted over the
    // CPUs that handled the queue.
    let mut places: std::collections::BTreeMap<Place, Vec<(usize, f64, f64)>> =
        std::collections::BTreeMap::new();
    for (i, st) in &stats {
        let mut acc: std::collections::BTreeMap<Place, [(f64, u64); 2]> =
            std::collections::BTreeMap::new();
        for r in &st.stages {
            let slot = match r.stage {
                Stage::Stack => 0,
                Stage::Residence => 1,
                _ => continue,
            };
            let e = acc.entry((r.dev.clone(), r.queue)).or_default();
            e[slot].0 += r.mean * r.count as f64;
            e[slot].1 += r.count;
        }
        for (place, [stack, res]) in acc {
            let mean = |(sum, n): (f64, u64)| if n > 0 { sum / n as f64 } else { 0.0 };
            places
                .entry(place)
                .or_default()
                .push((*i, mean(stack), mean(res)));
        }
    }
    let (w, left, bar_h, gap) = (640.0, 170.0, 16.0, 20.0);
    let n_bars: usize = places.values().map(Vec::len).sum();
    let h = 30.0 + gap * (n_bars + places.len()) as f64;
    let top = places
        .values()
        .flatten()
        .map(|(_, a, b)| a + b)
        .fold(0.0, f64::max)
        .max(f64::MIN_POSITIVE);
    let x = |v: f64| (w - left - 120.0) * v / top;
    let mut s = format!(
        r##"<p>Where the receive path's time went (traced runs, means): <span style="color:#1971c2">■</span> stack, an skb's entry to its socket; <span style="color:#e8590c">■</span> residence, the socket to the application's read.</p><svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" aria-label="{} receive path per queue">"##,
        esc(tool)
    );
    let mut y = 10.0;
    for ((dev, queue), bars) in &places {
        let name = format!(
            "{} {}",
            dev.as_deref().unwrap_or("-"),
            queue.map_or("(backlog)".to_string(), |q| format!("rx-{q}"))
        );
        let _ = write!(
            s,
            r#"<text x="0" y="{:.1}" font-size="13" font-weight="bold">{}</text>"#,
            y + 12.0,
            esc(&name)
        );
        y += gap;
        for (i, stack, res) in bars {
            let (ws, wr) = (x(*stack), x(*res));
            let label = &stats[*i].1.variant;
            let _ = write!(
                s,
                r##"<text x="10" y="{ty:.1}" font-size="12" fill="{c}">{l}</text><rect x="{left}" y="{y:.1}" width="{ws:.1}" height="{bar_h}" fill="#1971c2"/><rect x="{x2:.1}" y="{y:.1}" width="{wr:.1}" height="{bar_h}" fill="#e8590c"/><text x="{tx:.1}" y="{ty:.1}" font-size="12">{a:.1} + {b:.1} µs</text>"##,
                ty = y + 12.0,
                c = color(*i),
                l = esc(label),
                x2 = left + ws,
                tx = left + ws + wr + 6.0,
                a = stack / 1e3,
                b = res / 1e3,
            );
            y += gap;
        }
    }
    s.push_str("</svg>");
    s.push_str("<table><tr><th>variant</th><th>CPU</th><th>NET_RX wait mean / p99 µs</th><th>softirq run mean / p99 µs</th><th>softirqs</th></tr>");
    for (_, st) in &stats {
        let cpus: std::collections::BTreeSet<u32> = st
            .stages
            .iter()
            .filter(|r| matches!(r.stage, Stage::IrqToSoftirq | Stage::SoftirqRun))
            .filter_map(|r| r.cpu)
            .collect();
        for cpu in cpus {
            let of = |stage: Stage| {
                let rows: Vec<_> = st
                    .stages
                    .iter()
                    .filter(|r| r.stage == stage && r.cpu == Some(cpu))
                    .collect();
                let n: u64 = rows.iter().map(|r| r.count).sum();
                let mean =
                    rows.iter().map(|r| r.mean * r.count as f64).sum::<f64>() / n.max(1) as f64;
                let p99 = rows.iter().filter_map(|r| r.p99).max();
                (n, mean, p99)
            };
            let (_, wm, wp) = of(Stage::IrqToSoftirq);
            let (n, rm, rp) = of(Stage::SoftirqRun);
            let p = |v: Option<u64>| v.map_or("-".into(), |v| format!("{:.1}", v as f64 / 1e3));
            let _ = write!(
                s,
                "<tr><td>{}</td><td>{cpu}</td><td>{:.1} / {}</td><td>{:.1} / {}</td><td>{n}</td></tr>",
                esc(&st.variant),
                wm / 1e3,
                p(wp),
                rm / 1e3,
                p(rp),
            );
        }
    }
    s.push_str("</table>");
    s
}

fn share_table(row: &Row) -> String {
    let mut s = format!(
        "<table><tr><th>CPU</th><th>packets processed, {b}</th><th>{a}</th><th>%soft {b}</th><th>{a}</th><th>%idle {b}</th><th>{a}</th></tr>",
        b = esc(&row.baseline),
        a = esc(&row.variant)
    );
    let share = |v: Option<f64>| v.map_or("-".into(), |v| format!("{:.0} %", v * 100.0));
    let pct = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
    for c in &row.per_cpu {
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            c.cpu,
            share(c.before),
            share(c.after),
            pct(c.soft_before),
            pct(c.soft_after),
            pct(c.idle_before),
            pct(c.idle_after)
        );
    }
    s.push_str("</table>");
    s
}

fn extra_table(tool: &str, summary: &Summary) -> String {
    let stats: Vec<&VariantStats> = summary.stats.iter().filter(|s| s.tool == tool).collect();
    let keys: std::collections::BTreeSet<&String> =
        stats.iter().flat_map(|s| s.extra.keys()).collect();
    if keys.is_empty() {
        return String::new();
    }
    let mut s = String::from("<p>Other measures, medians over the runs:</p><table><tr><th></th>");
    for st in &stats {
        let _ = write!(s, "<th>{}</th>", esc(&st.variant));
    }
    s.push_str("</tr>");
    for k in keys {
        let _ = write!(s, "<tr><th>{}</th>", esc(k));
        for st in &stats {
            let v = st.extra.get(k).map_or("-".into(), |v| {
                if v.abs() >= 1e6 {
                    format!("{v:.3e}")
                } else {
                    format!("{v:.2}")
                }
            });
            let _ = write!(s, "<td>{v}</td>");
        }
        s.push_str("</tr>");
    }
    s.push_str("</table>");
    s
}

pub fn html(summary: &Summary, runs: &[RunRecord]) -> String {
    let e = &summary.environment;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<!DOCTYPE html><html><head><meta charset="utf-8"><title>netsteer lab: {name}</title><style>body{{font-family:sans-serif;max-width:960px;margin:2em auto}}table{{border-collapse:collapse;margin:.5em 0}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}.keep{{color:#2b8a3e}}.undo{{color:#c92a2a}}.same{{color:#555}}.limits{{background:#fff4e6;padding:.5em 1em}}</style></head><body><h1>netsteer lab: {name}</h1><p>{desc}</p><p>{repeats} repeat(s) of {dur} s per workload; the variants alternate repeat by repeat, and a variant that changes the host is rolled back after its runs. Each variant after the first is judged against the first: better or worse beyond the noise when its median moved by more than the larger min–max spread, else within the noise.</p><table><tr><th>variant</th><th>change</th></tr>"#,
        name = esc(&summary.scenario),
        desc = esc(&summary.description),
        repeats = summary.repeats,
        dur = summary.duration_s,
    );
    for v in &summary.variants {
        let _ = write!(
            s,
            "<tr><td>{}</td><td style=\"text-align:left\"><code>{}</code></td></tr>",
            esc(&v.name),
            esc(&v.change)
        );
    }
    s.push_str("</table>");
    if !summary.limits.is_empty() {
        s.push_str("<div class=\"limits\"><b>What this lab cannot show:</b><ul>");
        for l in &summary.limits {
            let _ = write!(s, "<li>{}</li>", esc(l));
        }
        s.push_str("</ul></div>");
    }
    let _ = write!(
        s,
        "<h2>Environment</h2><table><tr><th>kernel</th><td>{}</td></tr><tr><th>CPUs</th><td>{}</td></tr><tr><th>steal</th><td>{:.1} %</td></tr><tr><th>netsteer</th><td>{}</td></tr>",
        esc(&e.kernel),
        e.cpus,
        e.steal_pct,
        esc(&e.netsteer_version)
    );
    for (tool, v) in &e.tools {
        let _ = write!(s, "<tr><th>{}</th><td>{}</td></tr>", esc(tool), esc(v));
    }
    s.push_str("</table>");
    let _ = write!(
        s,
        "<p>Host restored after the last rollback: <b class=\"{}\">{}</b></p>",
        if summary.restored { "keep" } else { "undo" },
        if summary.restored {
            "yes, every file the variants wrote reads as before"
        } else {
            "NO"
        }
    );
    for p in &summary.restore_problems {
        let _ = write!(s, "<p class=\"undo\">{}</p>", esc(p));
    }
    let mut tools: Vec<&str> = summary.stats.iter().map(|s| s.tool.as_str()).collect();
    tools.dedup();
    for tool in tools {
        let _ = write!(s, "<h2>{}</h2>", esc(tool));
        s.push_str(&cdf(tool, summary));
        s.push_str(&bars(tool, summary));
        s.push_str(&stage_bars(tool, summary));
        for row in summary.rows.iter().filter(|r| r.tool == tool) {
            let d = &row.decision;
            let _ = write!(
                s,
                "<h3>{v} against {b}</h3><p class=\"{cls}\">{why} (median {mb} → {ma}, {imp:+.1} %, noise {noise:.1} %)</p><p>Per CPU, medians over the runs: share of the packets processed (softnet_stat), and mpstat's %soft and %idle (/proc/stat):</p>{table}",
                v = esc(&row.variant),
                b = esc(&row.baseline),
                cls = match d.verdict {
                    Verdict::Better => "keep",
                    Verdict::WithinNoise => "same",
                    Verdict::Worse => "undo",
                },
                why = esc(&d.why),
                mb = show(d.before.median, row.unit),
                ma = show(d.after.median, row.unit),
                imp = d.improvement_pct,
                noise = d.noise_pct,
                table = share_table(row),
            );
        }
        s.push_str(&extra_table(tool, summary));
    }
    s.push_str("<h2>Runs</h2><table><tr><th>repeat</th><th>variant</th><th>tool</th><th>measured</th><th>p99</th><th>share per CPU</th></tr>");
    for r in runs {
        let share: Vec<String> = r
            .per_cpu
            .iter()
            .map(|p| {
                format!(
                    "{}: {:.0} % (usr {:.0} sys {:.0} soft {:.0} idle {:.0})",
                    p.cpu,
                    p.share * 100.0,
                    p.usr,
                    p.sys,
                    p.soft,
                    p.idle
                )
            })
            .collect();
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            r.repeat,
            esc(&r.variant),
            esc(&r.tool),
            show(r.value, r.unit),
            r.p99_us.map_or("-".into(), |p| format!("{p:.0} µs")),
            share.join(", ")
        );
    }
    s.push_str("</table></body></html>\n");
    s
}

/// One run as a progress line: when it ended, which variant and tool, what it measured, and
/// each CPU's share of the packets and %soft.
pub fn run_line(r: &RunRecord) -> String {
    format!(
        "{} [{:>5.0} s] repeat {} {:<10} {:<20} {:>14}  per CPU packets/%soft {}",
        r.scenario,
        r.started_s + r.elapsed_s,
        r.repeat,
        r.variant,
        r.tool,
        show(r.value, r.unit),
        r.per_cpu
            .iter()
            .map(|p| format!("{}:{:.0}%/{:.0}", p.cpu, p.share * 100.0, p.soft))
            .collect::<Vec<_>>()
            .join(" ")
    )
}

/// The end of a scenario as lines: each variant against the baseline with its verdict, what
/// the lab cannot show, and whether the host was restored.
pub fn summary_lines(summary: &Summary) -> Vec<String> {
    let mut lines: Vec<String> = summary
        .rows
        .iter()
        .map(|row| {
            let (d, u) = (&row.decision, row.unit);
            format!(
                "{} {} against {}: median {} -> {} (min-max {}..{} -> {}..{}): {}",
                row.tool,
                row.variant,
                row.baseline,
                show(d.before.median, u),
                show(d.after.median, u),
                show(d.before.min, u),
                show(d.before.max, u),
                show(d.after.min, u),
                show(d.after.max, u),
                d.why
            )
        })
        .collect();
    lines.extend(
        summary
            .limits
            .iter()
            .map(|l| format!("what this lab cannot show: {l}")),
    );
    lines.push(format!(
        "host restored after the last rollback: {}",
        if summary.restored { "yes" } else { "NO" }
    ));
    lines
}
