//! How a search reads: lines for the terminal and a self-contained HTML page (inline SVG and
//! CSS, no script, no external URL, as the lab's report) with every trial, each knob's fitted
//! response, and the confirmations.

use super::search::SearchReport;
use netsteer_experiment::search::{Phase, Trial};
use netsteer_experiment::stats::Spread;
use netsteer_experiment::workload::Goal;
use netsteer_host::safe::html as esc;
use std::fmt::Write as _;

fn us(ns: f64) -> String {
    if ns.is_finite() {
        format!("{:.1} µs", ns / 1e3)
    } else {
        "-".into()
    }
}

fn spread(s: &Spread) -> String {
    format!("{} [{}–{}]", us(s.median), us(s.min), us(s.max))
}

/// What the cost is, in words, for the goal.
fn cost_name(goal: &Goal) -> &'static str {
    match goal {
        Goal::Latency { .. } => "CPU per request",
        Goal::MaxRate => "time per request (1/rate)",
    }
}

fn phase(p: Phase) -> &'static str {
    match p {
        Phase::Screen => "screen",
        Phase::Guided => "guided",
    }
}

/// One line a trial, as the search runs and in the summary.
pub fn trial_line(r: &SearchReport, i: usize, t: &Trial) -> String {
    format!(
        "trial {:>2} ({}): {}: {} {} vs {} baseline, {} {} vs {}{}",
        i + 1,
        phase(t.phase),
        r.describe(&t.config),
        r.goal.metric(),
        us(t.latency.median),
        us(t.base_latency.median),
        cost_name(&r.goal),
        us(t.cost.median),
        us(t.base_cost.median),
        match (&t.rejected, t.lost.saturating_add(t.base_lost)) {
            (Some(why), _) => format!(", rejected: {why}"),
            (None, 0) => String::new(),
            (None, _) => format!(", {} lost vs {} baseline", t.lost, t.base_lost),
        }
    )
}

pub fn lines(r: &SearchReport) -> Vec<String> {
    let mut out = Vec::new();
    for j in &r.recovered {
        out.push(format!("rolled back an unfinished search first: {j}"));
    }
    out.push(format!(
        "goal {}, {} knob(s), {} trial(s), {} confirmation(s)",
        r.goal,
        r.dims.len(),
        r.outcome.trials.len(),
        r.outcome.confirmations.len()
    ));
    for (i, t) in r.outcome.trials.iter().enumerate() {
        out.push(trial_line(r, i, t));
    }
    for c in &r.outcome.confirmations {
        out.push(format!(
            "confirm {}: {} {} → {} ({}), {} {} → {} ({}){}",
            r.describe(&c.config),
            r.goal.metric(),
            us(c.latency.before.median),
            us(c.latency.after.median),
            c.latency.verdict,
            cost_name(&r.goal),
            us(c.cost.before.median),
            us(c.cost.after.median),
            c.cost.verdict,
            if c.meets_goal {
                ", meets the goal"
            } else {
                ", misses the goal"
            }
        ));
    }
    if let Some(why) = &r.outcome.stopped {
        out.push(format!("stopped early: {why}"));
    }
    let found = r
        .outcome
        .best
        .as_ref()
        .map_or("the baseline".to_string(), |c| r.describe(c));
    for f in &r.against {
        out.push(format!(
            "against {}: {} {} (found: {}), {} {} (found: {}): the static setting is {} on latency, {} on cost{}",
            f.contender.name(),
            r.goal.metric(),
            us(f.latency.after.median),
            us(f.latency.before.median),
            cost_name(&r.goal),
            us(f.cost.after.median),
            us(f.cost.before.median),
            f.latency.verdict,
            f.cost.verdict,
            if f.skipped.is_empty() {
                String::new()
            } else {
                format!("; not applied here: {}", f.skipped.join("; "))
            }
        ));
    }
    if !r.against.is_empty() {
        out.push(format!("(found = {found})"));
    }
    match &r.outcome.best {
        Some(c) => out.push(format!("found: {}", r.describe(c))),
        None => out.push(
            "found nothing: no configuration was confirmed within the goal and cheaper than the \
             baseline"
                .into(),
        ),
    }
    if let Some(s) = Spread::of(&r.steal_pct).filter(|s| s.max >= 0.5) {
        out.push(format!(
            "steal over the runs taken: {:.1} / {:.1} / {:.1} % (min / median / max): the \
             hypervisor's share of the cost CPU that lost most",
            s.min, s.median, s.max
        ));
    }
    if !r.reruns.is_empty() {
        out.push(format!(
            "{} run(s) measured again, the first attempt not believed: {}",
            r.reruns.len(),
            r.reruns.join("; ")
        ));
    }
    if r.not_restored.is_empty() {
        out.push("the host reads as before the search".into());
    } else {
        out.push(format!(
            "NOT RESTORED: {} (run `netsteer tune rollback`)",
            r.not_restored.join("; ")
        ));
    }
    out
}

/// Each knob's fitted response: latency and cost factors per level against the baseline's,
/// as two lines on a log-free ratio axis.
fn response_svg(r: &SearchReport, d: usize) -> String {
    let effects = &r.outcome.effects[d];
    let levels = &r.dims[d].levels;
    let (w, h, left, top, pw, ph) = (360.0, 170.0, 44.0, 12.0, 300.0, 120.0);
    let all: Vec<f64> = effects
        .iter()
        .flat_map(|(l, c)| [*l, *c])
        .filter(|v| v.is_finite())
        .chain([1.0])
        .collect();
    let lo = all.iter().copied().fold(f64::INFINITY, f64::min) * 0.95;
    let hi = all.iter().copied().fold(f64::NEG_INFINITY, f64::max) * 1.05;
    let n = levels.len().max(2) as f64 - 1.0;
    let x = |i: usize| left + pw * i as f64 / n;
    let y = |v: f64| top + ph * (1.0 - (v - lo) / (hi - lo).max(1e-9));
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" aria-label="response to {name}"><rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#ccc"/><line x1="{left}" x2="{x2}" y1="{y1}" y2="{y1}" stroke="#aaa" stroke-dasharray="3,3"/><text x="2" y="{ty}" font-size="10">1.0</text>"##,
        name = esc(&r.dims[d].name),
        x2 = left + pw,
        y1 = y(1.0),
        ty = y(1.0) + 3.0,
    );
    for (color, pick) in [("#1971c2", 0), ("#e8590c", 1)] {
        let pts: Vec<String> = effects
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let v = if pick == 0 { e.0 } else { e.1 };
                format!("{:.1},{:.1}", x(i), y(v))
            })
            .collect();
        let _ = write!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            pts.join(" ")
        );
    }
    for (i, l) in levels.iter().enumerate() {
        let base = if i == r.outcome.baseline[d] { "*" } else { "" };
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{}" font-size="10" text-anchor="middle">{}{base}</text>"#,
            x(i),
            top + ph + 14.0,
            esc(l)
        );
    }
    let _ = write!(
        s,
        r#"<text x="{left}" y="{}" font-size="10">{:.2}–{:.2} × baseline</text></svg>"#,
        h - 4.0,
        lo,
        hi
    );
    s
}

pub fn html(r: &SearchReport) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<!DOCTYPE html><html><head><meta charset="utf-8"><title>netsteer tune search: {goal}</title><style>body{{font-family:sans-serif;max-width:1000px;margin:2em auto}}table{{border-collapse:collapse;margin:.5em 0}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}td.l{{text-align:left}}.ok{{color:#2b8a3e}}.bad{{color:#c92a2a}}.knob{{display:inline-block;margin:0 1em 1em 0}}</style></head><body><h1>netsteer tune search</h1><p>Goal <b>{goal}</b>; minimized: {cost}. Each trial ran the workload on the candidate and on the baseline (the host as it was) alternately, the candidate applied through tune's transaction and rolled back after its runs; medians with [min–max] of the runs.</p>"#,
        goal = esc(&r.goal.to_string()),
        cost = cost_name(&r.goal),
    );
    let verdict = match &r.outcome.best {
        Some(c) => format!(
            r#"<p class="ok">Found: <code>{}</code></p>"#,
            esc(&r.describe(c))
        ),
        None => r#"<p class="bad">Found nothing: no configuration was confirmed within the goal and cheaper than the baseline.</p>"#.into(),
    };
    s.push_str(&verdict);
    if let Some(why) = &r.outcome.stopped {
        let _ = write!(s, r#"<p class="bad">Stopped early: {}</p>"#, esc(why));
    }
    if let Some(st) = Spread::of(&r.steal_pct).filter(|s| s.max >= 0.5) {
        let _ = write!(
            s,
            "<p>Steal over the runs taken: {:.1} / {:.1} / {:.1} % (min / median / max), the \
             hypervisor's share of the cost CPU that lost most. It is not even noise: steal on \
             a running task counts as busy, so a configuration that idles less (busy polling) \
             carries more of it.</p>",
            st.min, st.median, st.max
        );
    }
    if !r.reruns.is_empty() {
        let _ = write!(
            s,
            "<p>{} run(s) were measured again, their first attempt not believed:</p><ul>",
            r.reruns.len()
        );
        for why in &r.reruns {
            let _ = write!(s, "<li>{}</li>", esc(why));
        }
        s.push_str("</ul>");
    }
    let _ = write!(
        s,
        "<p class=\"{}\">{}</p>",
        if r.not_restored.is_empty() {
            "ok"
        } else {
            "bad"
        },
        if r.not_restored.is_empty() {
            "After the search every knob read as before it.".to_string()
        } else {
            esc(&format!("NOT RESTORED: {}", r.not_restored.join("; ")))
        }
    );
    s.push_str("<h2>Confirmations</h2><p>Fresh alternated runs of the baseline and each of the best measured candidates; the cheapest whose confirmation meets the goal (and is cheaper beyond the noise, or the baseline misses the goal) is the one found.</p><table><tr><th>configuration</th><th>latency before</th><th>latency after</th><th>verdict</th><th>cost before</th><th>cost after</th><th>verdict</th><th>goal</th></tr>");
    for c in &r.outcome.confirmations {
        let _ = write!(
            s,
            r#"<tr><td class="l"><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class="{}">{}</td></tr>"#,
            esc(&r.describe(&c.config)),
            spread(&c.latency.before),
            spread(&c.latency.after),
            c.latency.verdict,
            spread(&c.cost.before),
            spread(&c.cost.after),
            c.cost.verdict,
            if c.meets_goal { "ok" } else { "bad" },
            if c.meets_goal { "met" } else { "missed" }
        );
    }
    s.push_str("</table>");
    if !r.against.is_empty() {
        let _ = write!(
            s,
            "<h2>Against static settings</h2><p>Fresh alternated runs of <code>{}</code> and each static setting, each applied through tune's transaction and rolled back; the verdicts are the static setting's, against what the search found.</p><table><tr><th>static setting</th><th>what it set</th><th>latency found</th><th>latency static</th><th>verdict</th><th>cost found</th><th>cost static</th><th>verdict</th><th>goal</th></tr>",
            esc(&r
                .outcome
                .best
                .as_ref()
                .map_or("the baseline".to_string(), |c| r.describe(c)))
        );
        for f in &r.against {
            let mut set = f.changes.join(" ");
            if !f.skipped.is_empty() {
                set.push_str(&format!(" (not applied: {})", f.skipped.join("; ")));
            }
            let _ = write!(
                s,
                r#"<tr><td class="l">{}</td><td class="l"><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class="{}">{}</td></tr>"#,
                esc(f.contender.name()),
                esc(&set),
                spread(&f.latency.before),
                spread(&f.latency.after),
                f.latency.verdict,
                spread(&f.cost.before),
                spread(&f.cost.after),
                f.cost.verdict,
                if f.meets_goal { "ok" } else { "bad" },
                if f.meets_goal { "met" } else { "missed" }
            );
        }
        s.push_str("</table>");
    }
    s.push_str("<h2>Response to each knob</h2><p>What the model fitted on every trial: each level's factor on latency (<span style=\"color:#1971c2\">■</span>) and on cost (<span style=\"color:#e8590c\">■</span>) against the baseline's level (marked *); levels no trial used are interpolated.</p>");
    for d in 0..r.dims.len() {
        let _ = write!(
            s,
            r#"<div class="knob"><div><code>{}</code></div>{}</div>"#,
            esc(&r.dims[d].name),
            response_svg(r, d)
        );
    }
    let _ = write!(
        s,
        "<h2>Trials</h2><table><tr><th>#</th><th>phase</th><th>configuration</th><th>{m} baseline</th><th>{m} candidate</th><th>cost baseline</th><th>cost candidate</th><th>lost</th><th>predicted {m} / cost</th></tr>",
        m = r.goal.metric()
    );
    for (i, t) in r.outcome.trials.iter().enumerate() {
        let within = t.latency.median <= r.goal.limit_ns();
        let _ = write!(
            s,
            r#"<tr><td>{}</td><td>{}</td><td class="l"><code>{}</code></td><td>{}</td><td class="{}">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
            i + 1,
            phase(t.phase),
            esc(&r.describe(&t.config)),
            spread(&t.base_latency),
            if within { "ok" } else { "bad" },
            spread(&t.latency),
            spread(&t.base_cost),
            spread(&t.cost),
            match &t.rejected {
                Some(why) => format!("{} vs {} (rejected: {})", t.lost, t.base_lost, esc(why)),
                None => format!("{} vs {}", t.lost, t.base_lost),
            },
            t.predicted
                .map_or("-".into(), |(l, c)| format!("{} / {}", us(l), us(c))),
        );
    }
    s.push_str("</table>");
    if let Some(p) = &r.plan {
        let json = serde_json::to_string_pretty(p).unwrap_or_default();
        let _ = write!(
            s,
            "<h2>The plan</h2><p>What <code>netsteer tune apply --plan FILE</code> takes.</p><pre>{}</pre>",
            esc(&json)
        );
    }
    s.push_str("</body></html>\n");
    s
}
