//! The self-contained HTML report of a scenario: inline SVG and CSS, no script, no external
//! URL, readable offline (mailed, attached to a ticket).

use crate::run::{Row, RunRecord, Summary};
use std::fmt::Write as _;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A measure in its unit, scaled for reading: Gbit/s for bit/s, plain for requests/s.
pub fn show(v: f64, unit: &str) -> String {
    if unit == "bit/s" {
        format!("{:.3} Gbit/s", v / 1e9)
    } else {
        format!("{v:.0} {unit}")
    }
}

/// Bars for before and after at the median, with min–max whiskers, on one scale.
fn bars(row: &Row) -> String {
    let (w, h, left, bar_h) = (560.0, 120.0, 70.0, 28.0);
    let d = &row.decision;
    let top = d.before.max.max(d.after.max).max(1.0);
    let x = |v: f64| left + (w - left - 20.0) * v / top;
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" aria-label="{} before and after">"#,
        esc(&row.tool)
    );
    for (i, (label, sp, color)) in [
        ("before", &d.before, "#8a8a8a"),
        (
            "after",
            &d.after,
            if d.keep { "#2b8a3e" } else { "#c92a2a" },
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let y = 15.0 + i as f64 * 50.0;
        let _ = write!(
            s,
            r#"<text x="0" y="{ty}" font-size="13">{label}</text><rect x="{left}" y="{y}" width="{bw:.1}" height="{bar_h}" fill="{color}"/><line x1="{x0:.1}" x2="{x1:.1}" y1="{my}" y2="{my}" stroke="black"/><line x1="{x0:.1}" x2="{x0:.1}" y1="{y0}" y2="{y1}" stroke="black"/><line x1="{x1:.1}" x2="{x1:.1}" y1="{y0}" y2="{y1}" stroke="black"/><text x="{tx:.1}" y="{ty}" font-size="12">{med}</text>"#,
            ty = y + 19.0,
            bw = x(sp.median) - left,
            x0 = x(sp.min),
            x1 = x(sp.max),
            my = y + bar_h / 2.0,
            y0 = y + 6.0,
            y1 = y + bar_h - 6.0,
            tx = x(sp.max) + 6.0,
            med = show(sp.median, &row.unit),
        );
    }
    s.push_str("</svg>");
    s
}

fn share_table(row: &Row) -> String {
    let mut s = String::from(
        "<table><tr><th>CPU</th><th>packets processed, before</th><th>after</th><th>%soft before</th><th>after</th><th>%idle before</th><th>after</th></tr>",
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

pub fn html(summary: &Summary, runs: &[RunRecord]) -> String {
    let e = &summary.environment;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<!DOCTYPE html><html><head><meta charset="utf-8"><title>netsteer lab: {name}</title><style>body{{font-family:sans-serif;max-width:900px;margin:2em auto}}table{{border-collapse:collapse;margin:.5em 0}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}.keep{{color:#2b8a3e}}.undo{{color:#c92a2a}}</style></head><body><h1>netsteer lab: {name}</h1><p>{desc}</p><p>Change: <code>{change}</code>; {repeats} repeat(s) of {dur} s per workload, before and after alternated; the change is rolled back after every "after" run.</p>"#,
        name = esc(&summary.scenario),
        desc = esc(&summary.description),
        change = esc(&summary.change),
        repeats = summary.repeats,
        dur = summary.duration_s,
    );
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
            "yes, every file the change wrote reads as before"
        } else {
            "NO"
        }
    );
    for p in &summary.restore_problems {
        let _ = write!(s, "<p class=\"undo\">{}</p>", esc(p));
    }
    for row in &summary.rows {
        let d = &row.decision;
        let _ = write!(
            s,
            "<h2>{tool}</h2><p class=\"{cls}\">{verdict}: {why} (median {b} → {a}, {imp:+.1} %, noise {noise:.1} %)</p>{svg}<p>Per CPU, medians over the runs: share of the packets processed (softnet_stat), and mpstat's %soft and %idle (/proc/stat):</p>{table}",
            tool = esc(&row.tool),
            cls = if d.keep { "keep" } else { "undo" },
            verdict = if d.keep {
                "beyond the noise"
            } else {
                "not beyond the noise"
            },
            why = esc(&d.why),
            b = show(d.before.median, &row.unit),
            a = show(d.after.median, &row.unit),
            imp = d.improvement_pct,
            noise = d.noise_pct,
            svg = bars(row),
            table = share_table(row),
        );
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
            show(r.value, &r.unit),
            r.p99_us.map_or("-".into(), |p| format!("{p:.0} µs")),
            share.join(", ")
        );
    }
    s.push_str("</table></body></html>\n");
    s
}
