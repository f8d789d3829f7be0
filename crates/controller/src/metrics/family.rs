//! The typed metric families: a family's label set is a struct ([`LabelSet`]), declared once
//! with [`label_set!`], so label names and values cannot disagree. The text exposition of a
//! family is written here.
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

/// A family's labels: the names, once, and the values of one series in the same order.
/// Implemented by [`label_set!`] (the names are the struct's field names, the values its
/// fields in declaration order), and by `()` for a family without labels.
pub trait LabelSet {
    /// The label names, in exposition order.
    const NAMES: &'static [&'static str];
    /// Calls `f` with each label value, in [`LabelSet::NAMES`] order.
    fn for_each_value(&self, f: &mut dyn FnMut(&str));
    /// The label values, in [`LabelSet::NAMES`] order.
    fn values(&self) -> Vec<String> {
        let mut out = Vec::with_capacity(Self::NAMES.len());
        self.for_each_value(&mut |v| out.push(v.to_string()));
        out
    }
}

impl LabelSet for () {
    const NAMES: &'static [&'static str] = &[];
    fn for_each_value(&self, _: &mut dyn FnMut(&str)) {}
}

/// Declares a label-set struct: one public field per label, named as the label, each a `&str`
/// or a `String` (anything `AsRef<str>`). The exposition order of the labels is the field
/// order, and so is the derived `Ord`: a family's series are sorted by their values in label
/// order.
///
/// ```ignore
/// label_set! {
///     /// `op`, `namespace`.
///     pub struct JobLabels<'a> { pub op: &'a str, pub namespace: &'a str }
/// }
/// ```
macro_rules! label_set {
    ($(#[$meta:meta])* pub struct $name:ident $(<$lt:lifetime>)? {
        $($(#[$fmeta:meta])* pub $field:ident : $ty:ty),+ $(,)?
    }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name $(<$lt>)? {
            $($(#[$fmeta])* pub $field: $ty),+
        }
        impl $(<$lt>)? $crate::metrics::LabelSet for $name $(<$lt>)? {
            const NAMES: &'static [&'static str] = &[$(stringify!($field)),+];
            fn for_each_value(&self, f: &mut dyn FnMut(&str)) {
                $(f(::std::convert::AsRef::<str>::as_ref(&self.$field));)+
            }
        }
    };
}
pub(crate) use label_set;

/// A family rendered in the exposition (its `# HELP`/`# TYPE` header and its series).
pub trait Family {
    fn render(&self, out: &mut String);
}

/// A counter family. It is incremented with borrowed labels and holds each series' values as
/// owned strings in label order, so its series are sorted by their values in label order.
///
/// A family of borrowing labels is declared with `'static` (`Counter<KindLabels<'static>>`):
/// it holds no `L`, so it is covariant in `L` and `inc` takes labels borrowed for any shorter
/// lifetime.
pub struct Counter<L> {
    name: &'static str,
    help: &'static str,
    values: Mutex<BTreeMap<Vec<String>, u64>>,
    labels: std::marker::PhantomData<L>,
}

impl<L: LabelSet> Counter<L> {
    pub const fn new(name: &'static str, help: &'static str) -> Counter<L> {
        Counter { name, help, values: Mutex::new(BTreeMap::new()), labels: std::marker::PhantomData }
    }
    pub fn inc(&self, labels: L) {
        self.add(labels, 1);
    }
    pub fn add(&self, labels: L, n: u64) {
        if let Ok(mut m) = self.values.lock() {
            *m.entry(labels.values()).or_default() += n;
        }
    }
    pub fn get(&self, labels: L) -> u64 {
        let key = labels.values();
        self.values.lock().ok().and_then(|m| m.get(&key).copied()).unwrap_or(0)
    }
}

impl<L: LabelSet> Family for Counter<L> {
    fn render(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}\n# TYPE {} counter", self.name, self.help, self.name);
        if let Ok(m) = self.values.lock() {
            for (k, v) in m.iter() {
                out.push_str(self.name);
                write_labels(out, L::NAMES, |f| k.iter().for_each(|v| f(v)));
                let _ = writeln!(out, " {v}");
            }
        }
    }
}

/// A gauge family whose whole series set is replaced by its owner on each pass (so a series
/// disappears with its object). Rendered only by the leader. `L` is an owned label set; the
/// series are sorted by its `Ord`, which [`label_set!`] derives in label order.
pub struct GaugeFamily<L> {
    name: &'static str,
    help: &'static str,
    values: Mutex<BTreeMap<L, i64>>,
}

impl<L: LabelSet + Ord> GaugeFamily<L> {
    pub const fn new(name: &'static str, help: &'static str) -> GaugeFamily<L> {
        GaugeFamily { name, help, values: Mutex::new(BTreeMap::new()) }
    }
    /// Replace every series.
    pub fn replace(&self, series: BTreeMap<L, i64>) {
        if let Ok(mut m) = self.values.lock() {
            *m = series;
        }
    }
    /// Replace one owner's slice: drop the series `owned` selects, then add `series`.
    pub fn replace_where(&self, owned: impl Fn(&L) -> bool, series: BTreeMap<L, i64>) {
        if let Ok(mut m) = self.values.lock() {
            m.retain(|k, _| !owned(k));
            m.extend(series);
        }
    }
    pub fn get(&self, labels: &L) -> Option<i64> {
        self.values.lock().ok().and_then(|m| m.get(labels).copied())
    }
    /// The series lines only (for a family whose header another writer emits).
    pub(super) fn render_series(&self, out: &mut String) {
        if let Ok(m) = self.values.lock() {
            for (k, v) in m.iter() {
                out.push_str(self.name);
                write_labels(out, L::NAMES, |f| k.for_each_value(f));
                let _ = writeln!(out, " {v}");
            }
        }
    }
}

impl<L: LabelSet + Ord> Family for GaugeFamily<L> {
    fn render(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}\n# TYPE {} gauge", self.name, self.help, self.name);
        self.render_series(out);
    }
}

/// Writes `{name="value",...}` (nothing for a family without labels), values escaped:
/// `each` calls its argument with every value, in `names` order.
fn write_labels(out: &mut String, names: &[&str], each: impl FnOnce(&mut dyn FnMut(&str))) {
    if names.is_empty() {
        return;
    }
    out.push('{');
    let mut names = names.iter();
    let mut first = true;
    each(&mut |v| {
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(names.next().copied().unwrap_or_default());
        out.push_str("=\"");
        write_escaped(out, v);
        out.push('"');
    });
    out.push('}');
}

pub fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Writes `v` escaped for a label value, without an intermediate copy.
pub fn write_escaped(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// One `kopiur_resource_phase{kind,namespace,name,phase} 1` line.
pub fn write_phase_line(out: &mut String, kind: &str, namespace: &str, name: &str, phase: &str) {
    out.push_str("kopiur_resource_phase{kind=\"");
    write_escaped(out, kind);
    out.push_str("\",namespace=\"");
    write_escaped(out, namespace);
    out.push_str("\",name=\"");
    write_escaped(out, name);
    out.push_str("\",phase=\"");
    write_escaped(out, phase);
    out.push_str("\"} 1\n");
}

/// Series written at scrape time straight from a reflector store, so nothing per object is
/// held between scrapes (a per-object family over 50,000 Snapshots held about 300 bytes per
/// series, and as much again while each pass built its replacement).
pub type LiveSeries = Box<dyn Fn(&mut String) + Send + Sync>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::labels::{KindLabels, PhaseLabels, TripLabels};

    #[test]
    fn label_names_and_values_are_the_struct_fields_in_order() {
        assert_eq!(TripLabels::NAMES, ["kind", "namespace", "name", "probe_kind"]);
        let t = TripLabels { kind: "Repository", namespace: "t", name: "r", probe_kind: "probe" };
        assert_eq!(t.values(), ["Repository", "t", "r", "probe"]);
        assert_eq!(<() as LabelSet>::NAMES, [] as [&str; 0]);
        assert!(().values().is_empty());
        let mut out = String::new();
        let kind = KindLabels { kind: "a\"b\\c\nd" };
        write_labels(&mut out, KindLabels::NAMES, |f| kind.for_each_value(f));
        assert_eq!(out, r#"{kind="a\"b\\c\nd"}"#);
        out.clear();
        write_labels(&mut out, <() as LabelSet>::NAMES, |f| ().for_each_value(f));
        assert_eq!(out, "", "no braces without labels");
    }

    /// A gauge's series are sorted by the derived `Ord` of its label struct, a counter's by the
    /// values in label order: both must be the order of the values in label order (the order of
    /// the positional registry, whose keys were `Vec<String>`).
    #[test]
    fn gauge_series_sort_like_their_values_in_label_order() {
        let words = ["", "a", "a b", "a,b", "a-b", "ab", "b", "B", "é"];
        let mut typed = Vec::new();
        for (i, ns) in words.iter().enumerate() {
            for name in &words[i % 3..] {
                for kind in ["Snapshot", "Restore"] {
                    let phase = words[(i + name.len()) % words.len()];
                    typed.push(PhaseLabels {
                        kind,
                        namespace: ns.to_string(),
                        name: name.to_string(),
                        phase: phase.into(),
                    });
                }
            }
        }
        let mut by_values: Vec<Vec<String>> = typed.iter().map(LabelSet::values).collect();
        by_values.sort();
        typed.sort();
        assert_eq!(typed.iter().map(LabelSet::values).collect::<Vec<_>>(), by_values);
    }

    #[test]
    fn counters_take_labels_borrowed_for_any_lifetime() {
        let c: Counter<TripLabels<'static>> = Counter::new("kopiur_test_total", "Test.");
        let name = String::from("r");
        c.inc(TripLabels { kind: "Repository", namespace: "t", name: &name, probe_kind: "probe" });
        assert_eq!(c.get(TripLabels { kind: "Repository", namespace: "t", name: "r", probe_kind: "probe" }), 1);
        let mut out = String::new();
        c.render(&mut out);
        assert_eq!(
            out,
            "# HELP kopiur_test_total Test.\n# TYPE kopiur_test_total counter\n\
             kopiur_test_total{kind=\"Repository\",namespace=\"t\",name=\"r\",probe_kind=\"probe\"} 1\n"
        );
    }

    #[test]
    fn replace_where_replaces_one_owners_slice() {
        let g: GaugeFamily<PhaseLabels> = GaugeFamily::new("kopiur_resource_phase", "Test.");
        let p =
            |kind, name: &str| PhaseLabels { kind, namespace: "t".into(), name: name.into(), phase: "Ready".into() };
        g.replace(BTreeMap::from([(p("Restore", "x"), 1), (p("Snapshot", "s"), 1)]));
        g.replace_where(|l| l.kind == "Restore", BTreeMap::from([(p("Restore", "y"), 1)]));
        assert_eq!(g.get(&p("Restore", "x")), None);
        assert_eq!(g.get(&p("Restore", "y")), Some(1));
        assert_eq!(g.get(&p("Snapshot", "s")), Some(1));
    }
}
