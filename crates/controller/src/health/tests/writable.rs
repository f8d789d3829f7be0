//! `RepositoryWritable` on the repository (docs/design/api-contract.md §4.1 `mode: ReadOnly`) and the connect
//! kind labels read back from a Job.
use super::*;
use crate::health::kstatus::drop_stale_repository_writable;
use crate::health::plan;

fn writable(conds: &[Cond]) -> Option<&Cond> {
    conds.iter().find(|c| c.type_ == "RepositoryWritable")
}

#[test]
fn a_read_only_repository_says_it_is_not_writable_in_every_phase() {
    for p in Phase::ALL {
        let mut f = with_phase(ready(), p);
        f.spec.read_only = true;
        let d = plan(&f, at(10));
        let w = writable(&d.conditions).unwrap_or_else(|| panic!("{p:?}: no RepositoryWritable in {:?}", d.conditions));
        assert_eq!((w.status, w.reason.as_str()), (CondStatus::False, "RepositoryReadOnly"), "{p:?}");
        assert_eq!(
            w.message,
            "spec.mode is ReadOnly: backups are refused and maintenance is skipped; restores and reads work"
        );
        // It reports the mode; it never changes the kstatus verdict of the phase.
        let mut rw = f.clone();
        rw.spec.read_only = false;
        let d_rw = plan(&rw, at(10));
        assert_eq!(writable(&d_rw.conditions), None, "{p:?}: a ReadWrite repository carries no RepositoryWritable");
        let trio = |c: &[Cond]| -> Vec<Cond> {
            c.iter().filter(|c| ["Ready", "Reconciling", "Stalled"].contains(&c.type_)).cloned().collect()
        };
        assert_eq!(trio(&d.conditions), trio(&d_rw.conditions), "{p:?}");
    }
}

#[test]
fn switching_back_to_read_write_drops_the_stored_condition() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    let stored = |t: &str| Condition {
        type_: t.into(),
        status: "False".into(),
        reason: "RepositoryReadOnly".into(),
        message: String::new(),
        observed_generation: Some(1),
        last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ),
    };
    let mut conds = vec![stored("Ready"), stored("RepositoryWritable")];
    let mut ro = ready();
    ro.spec.read_only = true;
    let desired = plan(&ro, at(10)).conditions;
    drop_stale_repository_writable(&mut conds, &desired);
    assert_eq!(conds.len(), 2, "kept while ReadOnly");
    drop_stale_repository_writable(&mut conds, &plan(&ready(), at(10)).conditions);
    assert_eq!(conds.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(), ["Ready"]);
}

#[test]
fn every_connect_kind_label_reads_back() {
    for k in ConnectKind::ALL {
        assert_eq!(ConnectKind::from_probe_kind(k.probe_kind()), Some(k));
    }
    let labels: Vec<&str> = ConnectKind::ALL.iter().map(|k| k.probe_kind()).collect();
    assert_eq!(labels, ["strict", "probe", "reverify"]);
    assert_eq!(ConnectKind::from_probe_kind("replay"), None);
}
