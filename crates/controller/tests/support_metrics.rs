//! The support module's `/metrics` parser (`support/metrics.rs`), which every environment test
//! reads the operator's metrics with, on a fixed exposition.
#[path = "support/metrics.rs"]
#[allow(dead_code)]
mod metrics;

use std::collections::BTreeMap;

use metrics::*;

const TEXT: &str = "# HELP x\n# TYPE x counter\nx 3\nfam{namespace=\"t\",name=\"r\",op=\"a,b\"} 2\nfam{namespace=\"t\",name=\"s\"} 5\nfam{namespace=\"u\",name=\"r\"} 7\n";

#[test]
fn parses_bare_and_labelled_samples() {
    assert_eq!(sample(TEXT, "x", &[]), Some(3.0));
    assert_eq!(metric(TEXT, "fam", "t", "r"), Some(2.0));
    assert_eq!(sample(TEXT, "fam", &[("op", "a,b")]), Some(2.0));
    assert_eq!(sum(TEXT, "fam", &[("namespace", "t")]), 7.0);
    assert_eq!(samples(TEXT, "fa", &[]), Vec::<f64>::new());
    assert_eq!(
        sum_by(TEXT, "fam", &[("name", "r")], "namespace"),
        BTreeMap::from([("t".into(), 2.0), ("u".into(), 7.0)])
    );
}
