//! The scrape as plain data (metric families of labelled samples), and its encoding in the
//! Prometheus text format (0.0.4) by the `prometheus` crate's encoder. Gathering fills
//! [`Family`]s; tests look at them directly, and the text encoder is the crate's, not ours.
//!
//! Why the classic text format and not OpenMetrics: Prometheus reads both, but `promtool check
//! metrics` (the linter fleets run in CI, Debian's 2.42) reads only the classic one, and an
//! OpenMetrics counter's `# TYPE x counter` over `x_total` samples fails it.

use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram as PromHistogram, LabelPair, Metric, MetricFamily, MetricType,
};
use prometheus::{Encoder, TextEncoder};
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Exposed with `_total` appended by the encoder.
    Counter,
    Gauge,
    /// Constant metadata: exposed as `NAME_info{labels} 1`.
    Info,
    /// A classic histogram: `NAME_bucket{le}`, `NAME_sum`, `NAME_count` (samples carry `hist`).
    Histogram,
}

/// A classic histogram's values: cumulative counts at each upper bound (the encoder adds
/// `+Inf` from `count`), their sum and count.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramValue {
    pub buckets: Vec<(f64, u64)>,
    pub sum: f64,
    pub count: u64,
}

/// One labelled value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub labels: Vec<(&'static str, String)>,
    pub value: f64,
    /// A histogram family's sample.
    pub hist: Option<HistogramValue>,
}

impl Sample {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A metric family: its name as exposed without the `_total`/`_info` suffix the encoder adds.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub samples: Vec<Sample>,
}

impl Family {
    pub fn new(name: &'static str, kind: Kind, help: &'static str) -> Family {
        Family {
            name,
            help,
            kind,
            samples: Vec::new(),
        }
    }

    pub fn push(&mut self, labels: Vec<(&'static str, String)>, value: f64) {
        self.samples.push(Sample {
            labels,
            value,
            hist: None,
        });
    }

    pub fn push_hist(&mut self, labels: Vec<(&'static str, String)>, hist: HistogramValue) {
        self.samples.push(Sample {
            labels,
            value: hist.count as f64,
            hist: Some(hist),
        });
    }

    /// The name a query uses: `_total` on counters, `_info` on info metrics.
    pub fn exposed_name(&self) -> String {
        match self.kind {
            Kind::Counter => format!("{}_total", self.name),
            Kind::Info => format!("{}_info", self.name),
            Kind::Gauge | Kind::Histogram => self.name.to_string(),
        }
    }
}

/// The text format's content type.
pub const CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;

/// The families in the Prometheus text format. Families without samples are left out (the
/// encoder refuses them, and a TYPE line with no sample tells a reader nothing).
pub fn encode(families: Vec<Family>) -> String {
    let mut out = Vec::new();
    for f in families.into_iter().filter(|f| !f.samples.is_empty()) {
        let mut mf = MetricFamily::default();
        mf.set_name(f.exposed_name());
        mf.set_help(f.help.to_string());
        // An info metric is a gauge of 1 (as node_exporter's `*_build_info`): the text format
        // has no info type.
        mf.set_field_type(match f.kind {
            Kind::Counter => MetricType::COUNTER,
            Kind::Gauge | Kind::Info => MetricType::GAUGE,
            Kind::Histogram => MetricType::HISTOGRAM,
        });
        let metrics = f
            .samples
            .into_iter()
            .map(|s| {
                let mut m = Metric::default();
                m.set_label(
                    s.labels
                        .into_iter()
                        .map(|(k, v)| {
                            let mut l = LabelPair::default();
                            l.set_name(k.to_string());
                            l.set_value(v);
                            l
                        })
                        .collect(),
                );
                match f.kind {
                    Kind::Counter => {
                        let mut c = Counter::default();
                        c.set_value(s.value);
                        m.set_counter(c);
                    }
                    Kind::Gauge | Kind::Info => {
                        let mut g = Gauge::default();
                        g.set_value(s.value);
                        m.set_gauge(g);
                    }
                    Kind::Histogram => {
                        let hv = s.hist.unwrap_or(HistogramValue {
                            buckets: Vec::new(),
                            sum: 0.0,
                            count: 0,
                        });
                        let mut h = PromHistogram::default();
                        h.set_sample_count(hv.count);
                        h.set_sample_sum(hv.sum);
                        h.set_bucket(
                            hv.buckets
                                .iter()
                                .map(|(le, n)| {
                                    let mut b = Bucket::default();
                                    b.set_upper_bound(*le);
                                    b.set_cumulative_count(*n);
                                    b
                                })
                                .collect(),
                        );
                        m.set_histogram(h);
                    }
                }
                m
            })
            .collect();
        mf.set_metric(metrics);
        out.push(mf);
    }
    let mut text = Vec::new();
    // Encoding into memory fails only for a family without name or samples, excluded above.
    TextEncoder::new()
        .encode(&out, &mut text)
        .expect("encoding named, non-empty families");
    String::from_utf8(text).expect("the text encoder writes UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_gauges_and_info_are_encoded_with_their_suffixes() {
        let mut c = Family::new("netsteer_x", Kind::Counter, "A counter.");
        c.push(vec![("cpu", "0".into())], 3.0);
        let mut g = Family::new("netsteer_y", Kind::Gauge, "A gauge.");
        g.push(vec![], 1.5);
        let mut i = Family::new("netsteer_build", Kind::Info, "Build.");
        i.push(vec![("version", "0.1.0".into())], 1.0);
        let empty = Family::new("netsteer_none", Kind::Gauge, "Nothing.");
        let text = encode(vec![c, g, i, empty]);
        assert!(text.contains("# TYPE netsteer_x_total counter\n"), "{text}");
        assert!(text.contains("netsteer_x_total{cpu=\"0\"} 3"), "{text}");
        assert!(text.contains("netsteer_y 1.5"), "{text}");
        assert!(
            text.contains("netsteer_build_info{version=\"0.1.0\"} 1"),
            "{text}"
        );
        assert!(!text.contains("netsteer_none"), "{text}");
    }

    #[test]
    fn label_values_are_escaped() {
        let mut g = Family::new("netsteer_z", Kind::Gauge, "Escaping.");
        g.push(vec![("device", "a\"b\\c\nd".into())], 1.0);
        let text = encode(vec![g]);
        assert!(text.contains(r#"device="a\"b\\c\nd""#), "{text}");
    }
}
