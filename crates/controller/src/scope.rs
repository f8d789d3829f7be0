//! Which namespaces the controller serves: every namespace (the default), or the namespaced
//! install mode's list (`KOPIUR_WATCH_NAMESPACES`, chart value `watchNamespaces`), where the
//! controller holds Roles in those namespaces only and no ClusterRole that reads Secrets
//! (audit finding 1.3). Namespaced kinds are watched and listed per namespace there; cluster-
//! scoped kinds (Namespaces, ClusterRepositories) are watched as before.
use std::collections::{BTreeSet, VecDeque};

use futures::StreamExt;
use futures::stream::{BoxStream, SelectAll};
use kube::core::NamespaceResourceScope;
use kube::runtime::watcher;
use kube::{Api, Client, Resource};

/// The namespaces served: `None` for every namespace.
pub type Namespaces = Option<Vec<String>>;

/// `KOPIUR_WATCH_NAMESPACES`.
pub const WATCH_NAMESPACES_ENV: &str = "KOPIUR_WATCH_NAMESPACES";

/// Comma-separated namespace names; unset or empty means every namespace. The operator's own
/// namespace (ClusterRepository Secrets and batch Jobs, the pin ledger) is always served.
pub fn parse(raw: Option<&str>, operator_namespace: &str) -> Result<Namespaces, String> {
    let Some(raw) = raw.map(str::trim).filter(|r| !r.is_empty()) else { return Ok(None) };
    let mut out: BTreeSet<String> = BTreeSet::new();
    for n in raw.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let valid = n.len() <= 63
            && n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !n.starts_with('-')
            && !n.ends_with('-');
        if !valid {
            return Err(format!(
                "{WATCH_NAMESPACES_ENV}: {n:?} is not a namespace name (lowercase letters, digits and '-', at most 63); \
                 chart value watchNamespaces"
            ));
        }
        out.insert(n.to_string());
    }
    out.insert(operator_namespace.to_string());
    Ok(Some(out.into_iter().collect()))
}

/// One `Api` per served namespace, or the cluster-wide one.
pub fn apis<K>(client: &Client, namespaces: &Namespaces) -> Vec<Api<K>>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
{
    match namespaces {
        None => vec![Api::all(client.clone())],
        Some(list) => list.iter().map(|ns| Api::namespaced(client.clone(), ns)).collect(),
    }
}

type EventStream<K> = BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>;

/// The watch of a namespaced kind over the served namespaces, as one watcher's events: a
/// reflector over it holds every served namespace's objects.
pub fn watch<K>(client: Client, namespaces: Namespaces, wc: watcher::Config) -> EventStream<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    match namespaces {
        None => watcher(Api::<K>::all(client), wc).boxed(),
        Some(list) => {
            merged(list.len(), move |i| watcher(Api::<K>::namespaced(client.clone(), &list[i]), wc.clone()).boxed())
        }
    }
}

struct Merge<K> {
    make: Box<dyn Fn(usize) -> EventStream<K> + Send>,
    n: usize,
    subs: SelectAll<BoxStream<'static, (usize, Result<watcher::Event<K>, watcher::Error>)>>,
    /// Sub-watches whose list is not done yet (non-empty: a merged list is in progress).
    listing: BTreeSet<usize>,
    /// Events of sub-watches already listed, held until the merged list is done.
    held: VecDeque<watcher::Event<K>>,
    /// Events ready to hand out.
    ready: VecDeque<Result<watcher::Event<K>, watcher::Error>>,
}

impl<K: Send + 'static> Merge<K> {
    /// (Re)starts every sub-watch: one merged list begins.
    fn restart(&mut self) {
        let mut subs = SelectAll::new();
        for i in 0..self.n {
            subs.push((self.make)(i).map(move |e| (i, e)).boxed());
        }
        self.subs = subs;
        self.listing = (0..self.n).collect();
        self.held.clear();
        self.ready.push_back(Ok(watcher::Event::Init));
    }

    fn take(&mut self, i: usize, ev: Result<watcher::Event<K>, watcher::Error>) {
        let listing = self.listing.contains(&i);
        match ev {
            Err(e) => self.ready.push_back(Err(e)),
            // A sub-watch lists again (it lost its place): list them all again, so the store
            // drops what went away in that namespace meanwhile.
            Ok(watcher::Event::Init) if !listing => self.restart(),
            Ok(watcher::Event::Init) => {}
            Ok(watcher::Event::InitApply(o)) => self.ready.push_back(Ok(watcher::Event::InitApply(o))),
            Ok(watcher::Event::InitDone) => {
                if self.listing.remove(&i) && self.listing.is_empty() {
                    self.ready.push_back(Ok(watcher::Event::InitDone));
                    let held: Vec<_> = self.held.drain(..).map(Ok).collect();
                    self.ready.extend(held);
                }
            }
            Ok(ev @ (watcher::Event::Apply(_) | watcher::Event::Delete(_))) => {
                if self.listing.is_empty() {
                    self.ready.push_back(Ok(ev));
                } else {
                    // During a merged list the store is being rebuilt from a buffer; a change
                    // applied now would be lost when the buffer is swapped in.
                    self.held.push_back(ev);
                }
            }
        }
    }
}

/// `n` sub-watches (`make(i)`) merged into one watcher's event sequence: one `Init`, every
/// sub-watch's listed objects, one `InitDone` once all are listed (their changes meanwhile
/// held until then, in order), then their changes. When a sub-watch lists again, all do.
pub fn merged<K>(n: usize, make: impl Fn(usize) -> EventStream<K> + Send + 'static) -> EventStream<K>
where
    K: Send + 'static,
{
    let mut m = Merge {
        make: Box::new(make),
        n,
        subs: SelectAll::new(),
        listing: BTreeSet::new(),
        held: VecDeque::new(),
        ready: VecDeque::new(),
    };
    m.restart();
    futures::stream::unfold(m, |mut m| async move {
        loop {
            if let Some(ev) = m.ready.pop_front() {
                return Some((ev, m));
            }
            let (i, ev) = m.subs.next().await?;
            m.take(i, ev);
        }
    })
    .boxed()
}

/// A stream's items as a `Vec` (tests).
#[cfg(test)]
async fn collect<S: futures::Stream + Unpin>(s: S, n: usize) -> Vec<S::Item> {
    s.take(n).collect().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use watcher::Event as E;

    #[test]
    fn the_list_always_includes_the_operator_namespace() {
        assert_eq!(parse(None, "op"), Ok(None));
        assert_eq!(parse(Some("  "), "op"), Ok(None));
        assert_eq!(parse(Some("b, a,,a"), "op"), Ok(Some(vec!["a".into(), "b".into(), "op".into()])));
        assert_eq!(parse(Some("op"), "op"), Ok(Some(vec!["op".into()])));
        for bad in ["Apps", "a_b", "-a", &"x".repeat(64)] {
            let e = parse(Some(bad), "op").unwrap_err();
            assert!(e.starts_with(WATCH_NAMESPACES_ENV) && e.contains("watchNamespaces"), "{e}");
        }
    }

    type Script = Vec<E<String>>;

    fn scripted(scripts: Vec<Vec<Script>>) -> impl Fn(usize) -> EventStream<String> + Send + 'static {
        // Each sub-watch i plays its scripts in turn, one per (re)start, then stays silent.
        let next: Arc<Mutex<Vec<VecDeque<Script>>>> =
            Arc::new(Mutex::new(scripts.into_iter().map(VecDeque::from).collect()));
        move |i| {
            let script = next.lock().unwrap()[i].pop_front().unwrap_or_default();
            futures::stream::iter(script.into_iter().map(Ok)).chain(futures::stream::pending()).boxed()
        }
    }

    fn show(v: &[Result<E<String>, watcher::Error>]) -> Vec<String> {
        v.iter()
            .map(|e| match e {
                Ok(E::Init) => "Init".to_string(),
                Ok(E::InitApply(o)) => format!("InitApply {o}"),
                Ok(E::InitDone) => "InitDone".to_string(),
                Ok(E::Apply(o)) => format!("Apply {o}"),
                Ok(E::Delete(o)) => format!("Delete {o}"),
                Err(e) => format!("Err {e}"),
            })
            .collect()
    }

    #[tokio::test]
    async fn one_list_over_every_namespace_then_their_changes_in_order() {
        let a = vec![E::Init, E::InitApply("a1".into()), E::InitDone, E::Apply("a2".into()), E::Delete("a1".into())];
        let b = vec![E::Init, E::InitApply("b1".into()), E::InitDone, E::Apply("b2".into())];
        let got = show(&collect(merged(2, scripted(vec![vec![a], vec![b]])), 7).await);
        assert_eq!(got[0], "Init");
        let done = got.iter().position(|e| e == "InitDone").expect("one InitDone");
        let listed: BTreeSet<&str> = got[1..done].iter().map(String::as_str).collect();
        assert_eq!(listed, BTreeSet::from(["InitApply a1", "InitApply b1"]), "{got:?}");
        let after: Vec<&str> = got[done + 1..].iter().map(String::as_str).collect();
        let a_order: Vec<&str> = after.iter().copied().filter(|e| e.ends_with("a2") || e.ends_with("a1")).collect();
        assert_eq!(a_order, ["Apply a2", "Delete a1"], "a namespace's changes keep their order: {got:?}");
        assert!(after.contains(&"Apply b2"), "{got:?}");
        assert_eq!(got.iter().filter(|e| *e == "InitDone").count(), 1);
    }

    #[tokio::test]
    async fn a_namespace_that_lists_again_relists_them_all() {
        let a1 = vec![E::Init, E::InitApply("a1".into()), E::InitDone, E::Init];
        let a2 = vec![E::Init, E::InitApply("a3".into()), E::InitDone];
        let b1 = vec![E::Init, E::InitApply("b1".into()), E::InitDone];
        let b2 = vec![E::Init, E::InitApply("b1".into()), E::InitDone];
        // Until the InitDone that follows the second Init, however the two interleave.
        let mut s = merged(2, scripted(vec![vec![a1, a2], vec![b1, b2]]));
        let mut got = Vec::new();
        let mut inits = 0;
        while let Ok(Some(ev)) = tokio::time::timeout(std::time::Duration::from_secs(5), s.next()).await {
            let e = show(&[ev]).remove(0);
            inits += usize::from(e == "Init");
            let last = inits == 2 && e == "InitDone";
            got.push(e);
            if last {
                break;
            }
        }
        assert_eq!(got.last().map(String::as_str), Some("InitDone"), "the second list ends: {got:?}");
        assert_eq!(inits, 2, "a second merged list: {got:?}");
        let second = got.iter().rposition(|e| e == "Init").unwrap();
        let relisted: BTreeSet<&str> = got[second + 1..got.len() - 1].iter().map(String::as_str).collect();
        assert_eq!(relisted, BTreeSet::from(["InitApply a3", "InitApply b1"]), "{got:?}");
    }
}
