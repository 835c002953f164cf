//! The live `netsteer top` view. Rendering is a pure function of one interval so it is tested
//! with ratatui's `TestBackend`; only `run_live` touches the terminal.

use anyhow::Result;
use netsteer_host::sample::TopInterval;
use ratatui::Frame;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// %soft at or above this paints the CPU red: the seeds' drowning CPU sits at 95-100%.
const HOT_SOFT_PCT: f64 = 50.0;
const BAR_WIDTH: usize = 30;

/// A stacked bar of usr/sys/irq/soft/steal over `BAR_WIDTH` cells; idle stays blank.
fn bar(c: &netsteer_host::sample::CpuRates) -> Vec<Span<'static>> {
    let parts = [
        (c.usr + c.nice, Color::Green, '|'),
        (c.sys, Color::Blue, '|'),
        (c.irq, Color::Yellow, 'i'),
        (c.soft, Color::Red, 's'),
        (c.steal, Color::Magenta, '~'),
    ];
    let mut spans = Vec::new();
    let mut used = 0usize;
    for (pct, color, ch) in parts {
        let cells = ((pct / 100.0) * BAR_WIDTH as f64).round() as usize;
        let cells = cells.min(BAR_WIDTH - used);
        if cells > 0 {
            spans.push(Span::styled(
                ch.to_string().repeat(cells),
                Style::default().fg(color),
            ));
            used += cells;
        }
    }
    spans.push(Span::raw(" ".repeat(BAR_WIDTH - used)));
    spans
}

fn num(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.0}"))
}

pub fn render(frame: &mut Frame, m: &TopInterval, seq: u64) {
    let area = frame.area();
    let cpu_rows = m.cpus.len() as u16 + 3;
    // The queues' balance and the platform's interrupt rate, as `top --plain` prints them.
    let balance = netsteer_host::text::balance_lines(m);
    let [head, cpus, queues, bal] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(cpu_rows),
        Constraint::Min(3),
        Constraint::Length(balance.len() as u16 + u16::from(!balance.is_empty())),
    ])
    .areas(area);
    let hottest = m
        .cpus
        .iter()
        .max_by(|a, b| a.soft.total_cmp(&b.soft))
        .map(|c| format!("hottest softirq CPU{} {:.0}%", c.cpu, c.soft))
        .unwrap_or_default();
    frame.render_widget(
        Paragraph::new(Line::from(vec![
            Span::styled(
                "netsteer top",
                Style::default().add_modifier(Modifier::BOLD),
            ),
            Span::raw(format!(
                "  interval {seq} ({:.2} s)  {hottest}  q: quit",
                m.interval_s
            )),
        ])),
        head,
    );

    let rows = m.cpus.iter().map(|c| {
        let hot = c.soft >= HOT_SOFT_PCT;
        let style = if hot {
            Style::default().fg(Color::Red).add_modifier(Modifier::BOLD)
        } else {
            Style::default()
        };
        Row::new(vec![
            Line::from(format!("CPU{}", c.cpu)).style(style),
            Line::from(bar(c)),
            Line::from(format!("{:.1}", c.usr + c.nice)),
            Line::from(format!("{:.1}", c.sys)),
            Line::from(format!("{:.1}", c.irq)),
            Line::from(format!("{:.1}", c.soft)).style(style),
            Line::from(format!("{:.1}", c.steal)),
            Line::from(format!("{:.1}", c.idle)),
            Line::from(num(c.net_rx)),
            Line::from(num(c.processed)),
            Line::from(num(c.dropped)),
            Line::from(num(c.squeezed)),
            Line::from(num(c.rps_ipi)),
        ])
    });
    let header = Row::new(vec![
        "CPU",
        "usr|sys|irq i|soft s|steal ~",
        "%usr",
        "%sys",
        "%irq",
        "%soft",
        "%steal",
        "%idle",
        "NET_RX/s",
        "pkts/s",
        "drop/s",
        "sqz/s",
        "rps/s",
    ])
    .style(Style::default().add_modifier(Modifier::BOLD));
    let widths = [
        Constraint::Length(6),
        Constraint::Length(BAR_WIDTH as u16),
        Constraint::Length(6),
        Constraint::Length(6),
        Constraint::Length(6),
        Constraint::Length(6),
        Constraint::Length(7),
        Constraint::Length(6),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(7),
        Constraint::Length(6),
        Constraint::Length(7),
    ];
    frame.render_widget(
        Table::new(rows, widths)
            .header(header)
            .block(Block::default().borders(Borders::TOP).title("CPUs")),
        cpus,
    );

    let qrows = m.queues.iter().filter(|q| q.total > 0.0).map(|q| {
        Row::new(vec![
            q.nic.clone(),
            q.queue.clone(),
            q.irq.to_string(),
            q.name.clone(),
            format!("{:.0}", q.total),
            q.cpus_text(),
        ])
    });
    frame.render_widget(
        Table::new(
            qrows,
            [
                Constraint::Length(12),
                Constraint::Length(11),
                Constraint::Length(6),
                Constraint::Length(26),
                Constraint::Length(9),
                Constraint::Min(10),
            ],
        )
        .header(
            Row::new(vec!["NIC", "queue", "IRQ", "name", "irqs/s", "on CPUs"])
                .style(Style::default().add_modifier(Modifier::BOLD)),
        )
        .block(
            Block::default()
                .borders(Borders::TOP)
                .title("queue interrupts"),
        ),
        queues,
    );
    if !balance.is_empty() {
        let lines: Vec<Line> = balance
            .iter()
            .map(|l| Line::from(netsteer_host::safe::line(l.trim_start()).into_owned()))
            .collect();
        frame.render_widget(
            Paragraph::new(lines).block(Block::default().borders(Borders::TOP).title("balance")),
            bal,
        );
    }
}

pub fn run_live(
    count: Option<u64>,
    interval: Duration,
    next: &mut dyn FnMut(Instant) -> Result<TopInterval>,
) -> Result<ExitCode> {
    let mut terminal = ratatui::init();
    let result = (|| -> Result<ExitCode> {
        let start = Instant::now();
        let mut seq = 0u64;
        loop {
            seq += 1;
            let deadline = start + interval.mul_f64(seq as f64);
            // Wait for the deadline while answering keys.
            while Instant::now() < deadline {
                if event::poll(deadline.saturating_duration_since(Instant::now()))?
                    && let Event::Key(k) = event::read()?
                    && k.kind == KeyEventKind::Press
                    && matches!(k.code, KeyCode::Char('q') | KeyCode::Esc)
                {
                    return Ok(ExitCode::SUCCESS);
                }
            }
            let m = next(deadline)?;
            terminal.draw(|f| render(f, &m, seq))?;
            if count.is_some_and(|c| seq >= c) {
                return Ok(ExitCode::SUCCESS);
            }
        }
    })();
    ratatui::restore();
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use netsteer_host::sample::CpuRates;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    #[test]
    fn a_drowning_cpu_is_red() {
        let hot = CpuRates {
            cpu: 9,
            soft: 95.0,
            idle: 5.0,
            net_rx: Some(40_000.0),
            ..Default::default()
        };
        let idle = CpuRates {
            cpu: 0,
            idle: 100.0,
            ..Default::default()
        };
        let m = TopInterval {
            kind: "interval".into(),
            time_unix_ms: 0,
            interval_s: 1.0,
            cpus: vec![idle, hot],
            queues: vec![netsteer_host::sample::QueueRate {
                nic: "eth0".into(),
                queue: "rx-0".into(),
                irq: 48,
                name: "virtio0-input.0".into(),
                per_cpu: [(9, 1234.0)].into(),
                total: 1234.0,
            }],
            went_offline: vec![],
            queue_packets: vec![],
            page_pools: vec![],
            balance: vec![netsteer_host::balance::QueueBalance {
                nic: "eth0".into(),
                of: netsteer_host::balance::BalanceOf::RxInterrupts,
                queues: 2,
                total: 1000.0,
                cv: Some(0.8),
                spread: Some(1.6),
                busiest: Some(("rx-0".into(), 0.9)),
            }],
            balance_since_boot: vec![],
            interrupts: Default::default(),
            problems: vec![],
        };
        let mut t = Terminal::new(TestBackend::new(140, 16)).unwrap();
        t.draw(|f| render(f, &m, 1)).unwrap();
        let buf = t.backend().buffer().clone();
        let text: String = buf.content().iter().map(|c| c.symbol()).collect();
        assert!(text.contains("hottest softirq CPU9 95%"), "{text}");
        assert!(text.contains("virtio0-input.0"));
        assert!(
            text.contains("balance eth0 rx interrupts over 2 queues: CV 0.80 spread 1.60"),
            "{text}"
        );
        assert!(text.contains("CPU9:1234"));
        // The hot CPU's label cell is red, the idle one's is not.
        // Table rows start at column 0 (the header line also names CPU9, mid-line).
        let is_red = |label: &str| {
            let y = (0..buf.area.height)
                .find(|&y| {
                    let row: String = (0..label.len() as u16)
                        .map(|x| buf[(x, y)].symbol().to_string())
                        .collect();
                    row == label
                })
                .unwrap();
            buf[(0, y)].fg == Color::Red
        };
        assert!(is_red("CPU9 "));
        assert!(!is_red("CPU0 "));
        // 95% soft paints 29 of 30 bar cells with 's'.
        assert!(text.contains(&"s".repeat(28)));
    }
}
