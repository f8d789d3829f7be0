//! The metric families of [`super::Metrics`], typed by their label set (a struct of
//! [`super::labels`]). Counters and the duration histogram are prometheus-client's `Family`;
//! a store-backed gauge is a [`GaugeFamily`], prometheus-client's encoding of a series set its
//! owner swaps whole. Each is registered in a prometheus-client `Registry`, which writes the
//! exposition (`prometheus_text::encode`): names, `# HELP`/`# TYPE`, label escaping, values.
//!
//! Every family here keeps its `# HELP`/`# TYPE` header while it has no series (the library
//! leaves out an empty `Family`): the header lists what the controller exports from the first
//! scrape, and `metric_names_lists_exactly_what_render_emits` checks the list against it.
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter as Count;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

/// What a family's label set is: an owned struct of [`super::labels`] (or `NoLabels`).
pub trait Labels: EncodeLabelSet + Clone + Hash + Eq + Debug + Send + Sync + 'static {}
impl<L: EncodeLabelSet + Clone + Hash + Eq + Debug + Send + Sync + 'static> Labels for L {}

/// A counter family: `Family<L, Counter>`, one series per label set, from its first increment.
/// The series order of the exposition is the family's (hash) order.
#[derive(Clone, Debug)]
pub struct Counter<L>(Family<L, Count>);

impl<L: Labels> Default for Counter<L> {
    fn default() -> Self {
        Counter(Family::default())
    }
}

impl<L: Labels> Counter<L> {
    pub fn inc(&self, labels: L) {
        self.add(labels, 1);
    }
    pub fn add(&self, labels: L, n: u64) {
        self.0.get_or_create(&labels).inc_by(n);
    }
    pub fn get(&self, labels: &L) -> u64 {
        self.0.get(labels).map(|c| c.get()).unwrap_or(0)
    }
}

impl<L: Labels> EncodeMetric for Counter<L> {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }
    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

/// A histogram family with fixed buckets: `Family<L, Histogram>`.
#[derive(Clone, Debug)]
pub struct HistogramFamily<L>(Family<L, Histogram>);

impl<L: Labels> HistogramFamily<L> {
    /// `buckets` makes the histogram of a new series.
    pub fn new(buckets: fn() -> Histogram) -> Self {
        HistogramFamily(Family::new_with_constructor(buckets))
    }
    pub fn observe(&self, labels: L, v: f64) {
        self.0.get_or_create(&labels).observe(v);
    }
}

impl<L: Labels> EncodeMetric for HistogramFamily<L> {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }
    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// A gauge family whose whole series set is replaced by its owner on each pass (so a series
/// disappears with its object). Rendered only by the leader, sorted by the label set's `Ord`
/// (the values in label order).
///
/// Not prometheus-client's `Family<L, Gauge>`: that one is refilled by `clear` and one
/// `get_or_create` per series, so a scrape between the two sees a partial set (a series that is
/// there every pass would flap), it cannot drop one owner's slice (`replace_where`: it has no
/// iteration), and it holds an `Arc` gauge per series (50,000 Snapshots have three families).
#[derive(Clone, Debug)]
pub struct GaugeFamily<L>(Arc<Mutex<BTreeMap<L, i64>>>);

impl<L> Default for GaugeFamily<L> {
    fn default() -> Self {
        GaugeFamily(Arc::new(Mutex::new(BTreeMap::new())))
    }
}

impl<L: Labels + Ord> GaugeFamily<L> {
    /// Replace every series.
    pub fn replace(&self, series: BTreeMap<L, i64>) {
        if let Ok(mut m) = self.0.lock() {
            *m = series;
        }
    }
    /// Replace one owner's slice: drop the series `owned` selects, then add `series`.
    pub fn replace_where(&self, owned: impl Fn(&L) -> bool, series: BTreeMap<L, i64>) {
        if let Ok(mut m) = self.0.lock() {
            m.retain(|k, _| !owned(k));
            m.extend(series);
        }
    }
    pub fn get(&self, labels: &L) -> Option<i64> {
        self.0.lock().ok().and_then(|m| m.get(labels).copied())
    }
    /// The series only, under a header another writer has encoded (`kopiur_resource_phase`).
    pub(super) fn encode_series(&self, encoder: &mut MetricEncoder) -> Result<(), std::fmt::Error> {
        if let Ok(m) = self.0.lock() {
            for (labels, v) in m.iter() {
                encoder.encode_family(labels)?.encode_gauge(v)?;
            }
        }
        Ok(())
    }
}

impl<L: Labels + Ord> EncodeMetric for GaugeFamily<L> {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.encode_series(&mut encoder)
    }
    fn metric_type(&self) -> MetricType {
        MetricType::Gauge
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::labels::{KindLabels, NoLabels, PhaseLabels, TripLabels};
    use prometheus_client::registry::Registry;

    fn encode(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, registry).unwrap();
        out
    }

    #[test]
    fn labels_are_the_struct_fields_in_order_and_values_are_escaped() {
        let c: Counter<TripLabels> = Counter::default();
        let trip = |name: &str| TripLabels {
            kind: "Repository".into(),
            namespace: "t".into(),
            name: name.into(),
            probe_kind: "probe".into(),
        };
        c.inc(trip("a\"b\\c\nd"));
        c.add(trip("a\"b\\c\nd"), 2);
        assert_eq!(c.get(&trip("a\"b\\c\nd")), 3);
        assert_eq!(c.get(&trip("other")), 0);
        let mut r = Registry::default();
        r.register("kopiur_test", "Test", c);
        assert_eq!(
            encode(&r),
            "# HELP kopiur_test_total Test.\n# TYPE kopiur_test_total counter\n\
             kopiur_test_total{kind=\"Repository\",namespace=\"t\",name=\"a\\\"b\\\\c\\nd\",probe_kind=\"probe\"} 3\n"
        );
    }

    #[test]
    fn empty_families_keep_their_header_and_no_labels_write_no_braces() {
        let mut r = Registry::default();
        let none: Counter<NoLabels> = Counter::default();
        r.register("kopiur_a", "A", none.clone());
        r.register("kopiur_b", "B", Counter::<KindLabels>::default());
        r.register("kopiur_c", "C", GaugeFamily::<PhaseLabels>::default());
        let h = HistogramFamily::<KindLabels>::new(|| Histogram::new([1.0]));
        r.register("kopiur_d", "D", h);
        assert_eq!(
            encode(&r),
            "# HELP kopiur_a_total A.\n# TYPE kopiur_a_total counter\n\
             # HELP kopiur_b_total B.\n# TYPE kopiur_b_total counter\n\
             # HELP kopiur_c C.\n# TYPE kopiur_c gauge\n\
             # HELP kopiur_d D.\n# TYPE kopiur_d histogram\n"
        );
        none.inc(NoLabels);
        assert!(encode(&r).contains("\nkopiur_a_total 1\n"), "{}", encode(&r));
    }

    #[test]
    fn replace_where_replaces_one_owners_slice_and_series_sort_in_label_order() {
        let g: GaugeFamily<PhaseLabels> = GaugeFamily::default();
        let p =
            |kind, name: &str| PhaseLabels { kind, namespace: "t".into(), name: name.into(), phase: "Ready".into() };
        g.replace(BTreeMap::from([(p("Restore", "x"), 1), (p("Snapshot", "s"), 1)]));
        g.replace_where(|l| l.kind == "Restore", BTreeMap::from([(p("Restore", "y"), 1), (p("Restore", "a b"), 1)]));
        assert_eq!(g.get(&p("Restore", "x")), None);
        assert_eq!(g.get(&p("Restore", "y")), Some(1));
        assert_eq!(g.get(&p("Snapshot", "s")), Some(1));
        let mut r = Registry::default();
        r.register("kopiur_resource_phase", "Test", g);
        let names: Vec<String> = encode(&r)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split("name=\"").nth(1).unwrap().split('"').next().unwrap().to_string())
            .collect();
        assert_eq!(names, ["a b", "y", "s"], "kind, then namespace, then name");
    }
}
