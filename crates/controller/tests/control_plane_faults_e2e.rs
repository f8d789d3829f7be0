//! Control-plane faults (issue: safe under the faults real fleets hit). Two controller replicas
//! share one Lease, with Garage and the real mover through the process node agent. Three faults
//! in turn, each while two backups and two deletions are in flight:
//! 1. kube-apiserver SIGSTOPped for 60 s, then SIGCONTed (stopped, not down: connections are
//!    accepted and never answered);
//! 2. kube-apiserver SIGKILLed and started again;
//! 3. etcd SIGKILLed and started again over its data.
//!
//! After each: at most one leader transition, and none once the new leader settles; the
//! controllers' open file descriptors stay bounded (the peak is printed); no duplicate Job (one
//! backup Job per Snapshot, no deleted Snapshot in two batch Jobs); no kopia snapshot deleted
//! twice (the auditing kopia wrapper counts every delete); every item in flight resumes (the
//! backups started before the fault and one created after it succeed, the deletions drain). A
//! replica that exits because it could not renew the Lease is started again under the same
//! identity, as the kubelet restarts a container in the same pod.
mod support;
use support::recorder;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kopiur_api::Snapshot;
use kopiur_testenv::operator::Operator;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::watcher;
use recorder::Recorder;
use serde_json::json;
use support::repos::{apply, policy};
use support::status::StatusExt;
use support::*;

const LEASE: &str = "kopiur-leader";
const REPLICAS: [&str; 2] = ["a", "b"];

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn open_fds(pid: u32) -> Option<usize> {
    std::fs::read_dir(format!("/proc/{pid}/fd")).ok().map(|d| d.count())
}

fn lease_state(l: &Lease) -> (String, i32) {
    let s = l.spec.clone().unwrap_or_default();
    (s.holder_identity.unwrap_or_default(), s.lease_transitions.unwrap_or(0))
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    StallApiserver,
    RestartApiserver,
    RestartEtcd,
}

struct World {
    h: Harness,
    ns: String,
    ops: BTreeMap<&'static str, Operator>,
    env_vars: Vec<(String, String)>,
    started: Instant,
}

impl World {
    fn at(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    async fn start_replica(&mut self, r: &'static str) -> Result<()> {
        let vars: Vec<(&str, &str)> = self.env_vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let op = Operator::start_replica(&self.h.env, &self.h.op_ns, r, &vars).await?;
        wait_for(&format!("replica {r} serves metrics"), Duration::from_secs(60), op.log_path(), || async {
            Ok(op.metric("kopiur_leader").await.map(|_| ()))
        })
        .await?;
        self.ops.insert(r, op);
        Ok(())
    }

    /// Replicas that exited are started again (same identity); returns which ones.
    async fn restart_exited(&mut self) -> Result<Vec<String>> {
        let mut again = Vec::new();
        for r in REPLICAS {
            let exited = self.ops.get_mut(r).is_none_or(|o| o.proc_.try_wait().is_some());
            if exited {
                if let Some(mut o) = self.ops.remove(r) {
                    o.stop();
                }
                self.start_replica(r).await?;
                again.push(r.to_string());
            }
        }
        Ok(again)
    }

    fn sample_fds(&self, peak: &mut BTreeMap<String, usize>) {
        for (r, o) in &self.ops {
            if let Some(c) = o.proc_.pid().and_then(open_fds) {
                let e = peak.entry(r.to_string()).or_default();
                *e = (*e).max(c);
            }
        }
    }

    async fn leader(&self) -> Result<Option<&'static str>> {
        let leases: Api<Lease> = Api::namespaced(self.h.client.clone(), &self.h.op_ns);
        let Some(l) = leases.get_opt(LEASE).await? else { return Ok(None) };
        let (holder, _) = lease_state(&l);
        for (r, o) in &self.ops {
            if o.identity.as_deref() == Some(holder.as_str()) && o.is_leader().await {
                return Ok(Some(r));
            }
        }
        Ok(None)
    }

    fn backup(&self, name: &str) -> Result<Snapshot> {
        Ok(serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": name, "namespace": self.ns}, "spec": {"policyRef": {"name": "p"}}
        }))?)
    }

    /// One fault with two backups and two deletions in flight, then every check.
    async fn round(
        &mut self,
        fault: Fault,
        tag: &str,
        del: &[String],
        ids: &BTreeMap<String, String>,
        uids: &BTreeMap<String, String>,
        k: &KopiaRepo,
    ) -> Result<()> {
        let client = self.h.client.clone();
        let snaps: Api<Snapshot> = Api::namespaced(client.clone(), &self.ns);
        let leases: Api<Lease> = Api::namespaced(client.clone(), &self.h.op_ns);
        let leader0 = self.leader().await?;
        ensure!(leader0.is_some(), "{tag}: a leader before the fault");
        let (_, transitions0) = lease_state(&leases.get(LEASE).await?);
        let jobs =
            Recorder::start(Api::<Job>::namespaced(client.clone(), &self.ns), watcher::Config::default()).await?;
        let (batches, task) = JobRecorder::spawn(client.clone());
        let _task = AbortOnDrop(task);
        let audit_mark = self.h.audit.calls().len();
        let mut baseline = BTreeMap::new();
        self.sample_fds(&mut baseline);
        let mut peak = baseline.clone();

        let before = [format!("{tag}-before-1"), format!("{tag}-before-2")];
        for n in &before {
            snaps.create(&PostParams::default(), &self.backup(n)?).await?;
        }
        for n in del {
            snaps.delete(n, &DeleteParams::default()).await?;
        }
        let hit = Instant::now();
        match fault {
            Fault::StallApiserver => {
                self.h.env.cp.signal_apiserver(libc::SIGSTOP);
                while hit.elapsed() < Duration::from_secs(60) {
                    self.sample_fds(&mut peak);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                self.h.env.cp.signal_apiserver(libc::SIGCONT);
            }
            Fault::RestartApiserver => self.h.env.cp.restart_apiserver().await?,
            Fault::RestartEtcd => self.h.env.cp.restart_etcd().await?,
        }
        let back = Instant::now();
        println!(
            "[{:>5.1}s] {tag}: {fault:?} over after {:.1}s; 2 backups and {} deletions in flight",
            self.at(),
            hit.elapsed().as_secs_f64(),
            del.len()
        );
        self.sample_fds(&mut peak);

        // A leader again, within 60 s.
        let deadline = Instant::now() + Duration::from_secs(60);
        let leader1 = loop {
            self.sample_fds(&mut peak);
            if let Some(l) = self.leader().await.ok().flatten() {
                break l;
            }
            ensure!(Instant::now() < deadline, "{tag}: no leader within 60 s of the recovery");
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        let led_after = back.elapsed();
        let after = format!("{tag}-after-1");
        snaps.create(&PostParams::default(), &self.backup(&after)?).await?;
        let all: Vec<String> = before.iter().cloned().chain([after.clone()]).collect();
        let deadline = Instant::now() + Duration::from_secs(240);
        loop {
            self.sample_fds(&mut peak);
            let mut pending = Vec::new();
            for n in &all {
                let p = snaps.get(n).await?.phase();
                if p != "Succeeded" {
                    pending.push(format!("{n}={p}"));
                }
            }
            for n in del {
                if snaps.get_opt(n).await?.is_some() {
                    pending.push(format!("{n} still present"));
                }
            }
            if pending.is_empty() {
                break;
            }
            ensure!(Instant::now() < deadline, "{tag}: not everything resumed within 240 s: {pending:?}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let caught_up = back.elapsed();
        let (holder1, transitions1) = lease_state(&leases.get(LEASE).await?);
        tokio::time::sleep(Duration::from_secs(15)).await;
        let (holder2, transitions2) = lease_state(&leases.get(LEASE).await?);

        let mut per_snapshot: BTreeMap<String, usize> = BTreeMap::new();
        for n in &all {
            let job = kopiur_mover::job::job_name(n);
            let u: BTreeSet<String> = jobs.all().iter().filter(|v| v.name() == job).map(|v| v.uid()).collect();
            per_snapshot.insert(n.clone(), u.len());
        }
        let del_uids: BTreeSet<String> = del.iter().filter_map(|n| uids.get(n).cloned()).collect();
        let batch_jobs = batches.touching(&del_uids);
        let deletes = successful_deletes(&self.h.audit.since(audit_mark));
        let exited: Vec<&str> = REPLICAS
            .iter()
            .copied()
            .filter(|r| self.ops.get_mut(r).is_some_and(|o| o.proc_.try_wait().is_some()))
            .collect();
        println!(
            "{tag}: {fault:?}: leader {leader0:?} -> {leader1} {:.1}s after the recovery (Lease transitions {transitions0} -> {transitions1} -> {transitions2}, holder {holder1} -> {holder2}); \
             replicas exited {exited:?}; everything caught up {:.1}s after the recovery; open fds baseline {baseline:?} peak {peak:?}; \
             backup Jobs per Snapshot {per_snapshot:?}; batch Jobs {} (members {:?}, {} failed); kopia deletes {:?}",
            led_after.as_secs_f64(),
            caught_up.as_secs_f64(),
            batch_jobs.len(),
            batch_jobs.iter().map(|j| j.members.len()).collect::<Vec<_>>(),
            batch_jobs.iter().filter(|j| j.failed).count(),
            deletes.values().collect::<Vec<_>>(),
        );
        ensure!(
            transitions1 - transitions0 <= 1,
            "{tag}: at most one leader transition: {transitions0} -> {transitions1}"
        );
        ensure!(
            holder1 == holder2 && transitions2 == transitions1,
            "{tag}: the leader settles: {holder1} -> {holder2}"
        );
        for (r, c) in &peak {
            ensure!(*c <= 256, "{tag}: replica {r} had {c} open file descriptors (bounded at 256)");
        }
        for (n, c) in &per_snapshot {
            ensure!(*c == 1, "{tag}: Snapshot {n} had {c} backup Jobs (one expected, no duplicate)");
        }
        let mut rode: BTreeMap<&String, usize> = BTreeMap::new();
        for j in batch_jobs.iter().filter(|j| !j.failed) {
            for m in &j.members {
                *rode.entry(m).or_default() += 1;
            }
        }
        ensure!(rode.values().all(|n| *n == 1), "{tag}: a deleted Snapshot rode two batch Jobs: {batch_jobs:?}");
        let left = k.list().await?;
        for n in del {
            let id = &ids[n];
            ensure!(
                deletes.get(id) == Some(&1),
                "{tag}: {n}'s kopia snapshot deleted {:?} times (once expected)",
                deletes.get(id)
            );
            ensure!(!left.contains(id), "{tag}: {n}'s kopia snapshot is still listed");
        }
        let again = self.restart_exited().await?;
        if !again.is_empty() {
            println!("[{:>5.1}s] {tag}: started again (same identity): {again:?}", self.at());
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_plane_faults_with_two_replicas() -> Result<()> {
    let started = Instant::now();
    let h = Harness::start().await?;
    let client = h.client.clone();
    let ns = h.env.namespace("cpf").await?;
    // The repository, seeded with 6 manifests whose Snapshot CRs are deleted two per fault
    // (below the mass-deletion threshold of 10).
    let k = h.kopia_repo("cpf/").await?;
    let del_names = names("del", 6);
    let ids = k.seed(&del_names).await?;
    let repo = h.repository(&ns, "r", "cpf/", json!({})).await?;
    let wrapper = h.audit.wrapper.display().to_string();
    let mut w = World {
        h,
        ns: ns.clone(),
        ops: BTreeMap::new(),
        env_vars: vec![("KOPIUR_MOVER_KOPIA_BINARY".into(), wrapper)],
        started,
    };
    let res = async {
        w.start_replica("a").await?;
        let a_log = w.ops["a"].log_path().to_path_buf();
        wait_for("replica a leads", Duration::from_secs(60), &a_log, || async {
            Ok(w.ops["a"].is_leader().await.then_some(()))
        })
        .await?;
        w.start_replica("b").await?;
        w.h.wait_repository_ready(&ns, "r", Duration::from_secs(180)).await?;
        let uids = seed_snapshots(&client, &ns, &RepoPin::of(&repo), items(&del_names, &ids, "cpf"), 6).await?;

        let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": ns},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}}
        }))?;
        Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns).create(&PostParams::default(), &pvc).await?;
        apply(&client, &ns, policy(&ns, "p", json!({"name": "r"}), "data", json!({}))).await?;
        // A first backup end to end, so the faults meet a warm pipeline.
        let snaps: Api<Snapshot> = Api::namespaced(client.clone(), &ns);
        snaps.create(&PostParams::default(), &w.backup("warm")?).await?;
        wait_for("warm Succeeded", Duration::from_secs(180), &a_log, || async {
            Ok((snaps.get("warm").await?.phase() == "Succeeded").then_some(()))
        })
        .await?;
        println!("[{:>5.1}s] r Ready; a leads, b passive; a first backup Succeeded", w.at());

        w.round(Fault::StallApiserver, "stall", &del_names[0..2], &ids, &uids, &k).await?;
        w.round(Fault::RestartApiserver, "apiserver", &del_names[2..4], &ids, &uids, &k).await?;
        w.round(Fault::RestartEtcd, "etcd", &del_names[4..6], &ids, &uids, &k).await?;
        Ok::<_, anyhow::Error>(())
    }
    .await;
    if res.is_err() {
        let kept = w.h.env.keep_logs("control_plane_faults_e2e");
        eprintln!("logs kept in {}", kept.display());
    }
    for (_, mut o) in std::mem::take(&mut w.ops) {
        o.stop();
    }
    res
}
