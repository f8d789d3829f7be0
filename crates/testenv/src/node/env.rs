//! NA-7: container environment, and `$(VAR)` expansion for env values, command and args.
use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Container, Pod};

/// Secrets and ConfigMaps a container refers to, fetched beforehand so that resolution
/// stays pure. `None` means the object does not exist.
#[derive(Debug, Default, Clone)]
pub struct EnvSources {
    pub secrets: HashMap<String, Option<BTreeMap<String, String>>>,
    pub config_maps: HashMap<String, Option<BTreeMap<String, String>>>,
}

/// Names of the Secrets and ConfigMaps referenced by a container's env and envFrom.
pub fn referenced_sources(c: &Container) -> (Vec<String>, Vec<String>) {
    let mut secrets = Vec::new();
    let mut cms = Vec::new();
    for ef in c.env_from.iter().flatten() {
        if let Some(s) = &ef.secret_ref {
            secrets.push(s.name.clone());
        }
        if let Some(m) = &ef.config_map_ref {
            cms.push(m.name.clone());
        }
    }
    for e in c.env.iter().flatten() {
        if let Some(vf) = &e.value_from {
            if let Some(s) = &vf.secret_key_ref {
                secrets.push(s.name.clone());
            }
            if let Some(m) = &vf.config_map_key_ref {
                cms.push(m.name.clone());
            }
        }
    }
    secrets.sort();
    secrets.dedup();
    cms.sort();
    cms.dedup();
    (secrets, cms)
}

/// An insertion-ordered map where a later set of an existing name replaces its value.
#[derive(Debug, Default, Clone)]
pub struct EnvList {
    vars: Vec<(String, String)>,
    index: HashMap<String, usize>,
}

impl EnvList {
    pub fn set(&mut self, k: impl Into<String>, v: impl Into<String>) {
        let k = k.into();
        let v = v.into();
        match self.index.get(&k) {
            Some(&i) => self.vars[i].1 = v,
            None => {
                self.index.insert(k.clone(), self.vars.len());
                self.vars.push((k, v));
            }
        }
    }
    pub fn get(&self, k: &str) -> Option<&str> {
        self.index.get(k).map(|&i| self.vars[i].1.as_str())
    }
    pub fn into_vec(self) -> Vec<(String, String)> {
        self.vars
    }
    pub fn as_slice(&self) -> &[(String, String)] {
        &self.vars
    }
}

/// Kubernetes `$(VAR)` expansion: `$$` is a literal `$`, `$(NAME)` is replaced when NAME is
/// defined and kept verbatim otherwise, any other `$` is literal.
pub fn expand(input: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut i = 0;
    let mut lit_start = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() {
            match bytes[i + 1] {
                b'$' => {
                    out.push_str(&input[lit_start..i]);
                    out.push('$');
                    i += 2;
                    lit_start = i;
                    continue;
                }
                b'(' => {
                    if let Some(close) = input[i + 2..].find(')') {
                        let name = &input[i + 2..i + 2 + close];
                        out.push_str(&input[lit_start..i]);
                        match lookup(name) {
                            Some(v) => out.push_str(&v),
                            None => out.push_str(&input[i..i + 3 + close]),
                        }
                        i += 3 + close;
                        lit_start = i;
                        continue;
                    }
                }
                _ => {}
            }
        }
        i += 1;
    }
    out.push_str(&input[lit_start..]);
    out
}

/// Resolves the full environment of one container (NA-7). `Err` carries the
/// `CreateContainerConfigError` message.
pub fn resolve_env(
    pod: &Pod,
    c: &Container,
    src: &EnvSources,
    apiserver_port: u16,
    host_path: &str,
) -> Result<Vec<(String, String)>, String> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let mut env = EnvList::default();
    // Stands in for the image's own ENV (every image sets PATH).
    if !host_path.is_empty() {
        env.set("PATH", host_path);
    }
    env.set("HOSTNAME", pod_name.clone());
    env.set("KUBERNETES_SERVICE_HOST", "127.0.0.1");
    env.set("KUBERNETES_SERVICE_PORT", apiserver_port.to_string());

    for ef in c.env_from.iter().flatten() {
        let prefix = ef.prefix.clone().unwrap_or_default();
        let (kind, name, optional, data) = if let Some(s) = &ef.secret_ref {
            ("secret", &s.name, s.optional.unwrap_or(false), src.secrets.get(&s.name))
        } else if let Some(m) = &ef.config_map_ref {
            ("configmap", &m.name, m.optional.unwrap_or(false), src.config_maps.get(&m.name))
        } else {
            continue;
        };
        match data.and_then(|d| d.as_ref()) {
            Some(d) => {
                for (k, v) in d {
                    let key = format!("{prefix}{k}");
                    if key.is_empty() || key.contains('=') {
                        continue;
                    }
                    env.set(key, v.clone());
                }
            }
            None if optional => {}
            None => return Err(format!("{kind} \"{name}\" not found")),
        }
    }

    for e in c.env.iter().flatten() {
        if let Some(v) = &e.value {
            let expanded = expand(v, |n| env.get(n).map(str::to_string));
            env.set(e.name.clone(), expanded);
            continue;
        }
        let Some(vf) = &e.value_from else {
            env.set(e.name.clone(), "");
            continue;
        };
        if let Some(s) = &vf.secret_key_ref {
            let optional = s.optional.unwrap_or(false);
            match src.secrets.get(&s.name).and_then(|d| d.as_ref()) {
                Some(d) => match d.get(&s.key) {
                    Some(v) => env.set(e.name.clone(), v.clone()),
                    None if optional => {}
                    None => {
                        return Err(format!("couldn't find key {} in Secret {}/{}", s.key, ns, s.name));
                    }
                },
                None if optional => {}
                None => return Err(format!("secret \"{}\" not found", s.name)),
            }
        } else if let Some(m) = &vf.config_map_key_ref {
            let optional = m.optional.unwrap_or(false);
            match src.config_maps.get(&m.name).and_then(|d| d.as_ref()) {
                Some(d) => match d.get(&m.key) {
                    Some(v) => env.set(e.name.clone(), v.clone()),
                    None if optional => {}
                    None => {
                        return Err(format!("couldn't find key {} in ConfigMap {}/{}", m.key, ns, m.name));
                    }
                },
                None if optional => {}
                None => return Err(format!("configmap \"{}\" not found", m.name)),
            }
        } else if let Some(f) = &vf.field_ref {
            let v =
                field_value(pod, &f.field_path).ok_or_else(|| format!("unsupported fieldRef {:?}", f.field_path))?;
            env.set(e.name.clone(), v);
        } else if let Some(r) = &vf.resource_field_ref {
            let divisor = r.divisor.as_ref().map(|q| q.0.as_str());
            let v = resource_value(c, &r.resource, divisor)
                .ok_or_else(|| format!("unsupported resourceFieldRef {:?}", r.resource))?;
            env.set(e.name.clone(), v);
        }
    }
    Ok(env.into_vec())
}

/// Downward-API field values for env and downwardAPI volumes.
pub fn field_value(pod: &Pod, path: &str) -> Option<String> {
    let md = &pod.metadata;
    let spec = pod.spec.as_ref();
    let bracket = |prefix: &str| -> Option<String> {
        let rest = path.strip_prefix(prefix)?.strip_suffix(']')?;
        let key = rest
            .strip_prefix('\'')
            .and_then(|r| r.strip_suffix('\''))
            .or_else(|| rest.strip_prefix('"').and_then(|r| r.strip_suffix('"')))?;
        Some(key.to_string())
    };
    if let Some(k) = bracket("metadata.labels[") {
        return Some(md.labels.as_ref().and_then(|l| l.get(&k)).cloned().unwrap_or_default());
    }
    if let Some(k) = bracket("metadata.annotations[") {
        return Some(md.annotations.as_ref().and_then(|l| l.get(&k)).cloned().unwrap_or_default());
    }
    Some(match path {
        "metadata.name" => md.name.clone().unwrap_or_default(),
        "metadata.namespace" => md.namespace.clone().unwrap_or_default(),
        "metadata.uid" => md.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(md.labels.as_ref()),
        "metadata.annotations" => format_map(md.annotations.as_ref()),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => {
            spec.and_then(|s| s.service_account_name.clone()).unwrap_or_else(|| "default".into())
        }
        "status.podIP" | "status.hostIP" | "status.podIPs" | "status.hostIPs" => "127.0.0.1".into(),
        _ => return None,
    })
}

/// `key="value"` lines, as the downward API renders label and annotation maps.
fn format_map(m: Option<&BTreeMap<String, String>>) -> String {
    let mut out = String::new();
    for (k, v) in m.into_iter().flatten() {
        out.push_str(&format!("{k}={v:?}\n"));
    }
    out.pop();
    out
}

/// `resourceFieldRef`: the container's limit or request, divided and rounded up; 0 when unset.
pub fn resource_value(c: &Container, resource: &str, divisor: Option<&str>) -> Option<String> {
    let res = c.resources.as_ref();
    let (kind, name) = resource.split_once('.')?;
    let map = match kind {
        "limits" => res.and_then(|r| r.limits.as_ref()),
        "requests" => res.and_then(|r| r.requests.as_ref()),
        _ => return None,
    };
    if !matches!(name, "cpu" | "memory" | "ephemeral-storage") && !name.starts_with("hugepages-") {
        return None;
    }
    let value = map.and_then(|m| m.get(name)).and_then(|q| parse_quantity(&q.0)).unwrap_or(0.0);
    let div = divisor.and_then(parse_quantity).filter(|d| *d > 0.0).unwrap_or(1.0);
    Some(format!("{}", (value / div).ceil() as i64))
}

/// Parses a Kubernetes quantity into base units (cores, bytes).
pub fn parse_quantity(q: &str) -> Option<f64> {
    let q = q.trim();
    let split = q.find(|ch: char| !(ch.is_ascii_digit() || ch == '.' || ch == '+' || ch == '-')).unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mult = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        s if s.starts_with('e') || s.starts_with('E') => 10f64.powi(s[1..].parse().ok()?),
        _ => return None,
    };
    Some(n * mult)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ConfigMapEnvSource, ConfigMapKeySelector, EnvFromSource, EnvVar, EnvVarSource, ObjectFieldSelector, PodSpec,
        ResourceFieldSelector, ResourceRequirements, SecretEnvSource, SecretKeySelector,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |n| m.get(n).cloned()
    }

    #[test]
    fn expansion() {
        let l = lookup(&[("A", "x"), ("B", "y z")]);
        assert_eq!(expand("$(A)", &l), "x");
        assert_eq!(expand("pre-$(A)-$(B)-post", &l), "pre-x-y z-post");
        assert_eq!(expand("$$(A)", &l), "$(A)");
        assert_eq!(expand("$$$(A)", &l), "$x");
        assert_eq!(expand("$(MISSING)", &l), "$(MISSING)");
        assert_eq!(expand("$A $", &l), "$A $");
        assert_eq!(expand("$(A", &l), "$(A");
        assert_eq!(expand("a$$b", &l), "a$b");
        assert_eq!(expand("ünï$(A)cödé", &l), "ünïxcödé");
        assert_eq!(expand("", &l), "");
    }

    fn pod_with(c: Container) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("p1".into());
        p.metadata.namespace = Some("ns1".into());
        p.metadata.uid = Some("uid-1".into());
        p.metadata.labels = Some([("app".to_string(), "demo".to_string())].into());
        p.metadata.annotations =
            Some([("batch.kubernetes.io/job-completion-index".to_string(), "3".to_string())].into());
        p.spec = Some(PodSpec {
            containers: vec![c],
            node_name: Some("local".into()),
            service_account_name: Some("sa1".into()),
            ..Default::default()
        });
        p
    }

    fn var(name: &str, value: &str) -> EnvVar {
        EnvVar { name: name.into(), value: Some(value.into()), ..Default::default() }
    }

    fn var_from(name: &str, vf: EnvVarSource) -> EnvVar {
        EnvVar { name: name.into(), value_from: Some(vf), ..Default::default() }
    }

    fn sources() -> EnvSources {
        let mut s = EnvSources::default();
        s.secrets.insert(
            "sec".into(),
            Some(
                [("password".to_string(), "hunter2".to_string()), ("X".to_string(), "from-secret".to_string())].into(),
            ),
        );
        s.config_maps.insert(
            "cm".into(),
            Some([("mode".to_string(), "fast".to_string()), ("X".to_string(), "from-cm".to_string())].into()),
        );
        s.secrets.insert("gone".into(), None);
        s
    }

    #[test]
    fn order_and_sources() {
        let c = Container {
            name: "c".into(),
            env_from: Some(vec![
                EnvFromSource {
                    config_map_ref: Some(ConfigMapEnvSource { name: "cm".into(), optional: None }),
                    prefix: Some("CM_".into()),
                    ..Default::default()
                },
                EnvFromSource {
                    secret_ref: Some(SecretEnvSource { name: "sec".into(), optional: None }),
                    ..Default::default()
                },
                EnvFromSource {
                    secret_ref: Some(SecretEnvSource { name: "gone".into(), optional: Some(true) }),
                    ..Default::default()
                },
            ]),
            env: Some(vec![
                var("PLAIN", "v"),
                var("REF", "$(PLAIN)-$(CM_mode)-$$(PLAIN)"),
                var_from(
                    "PW",
                    EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: "sec".into(),
                            key: "password".into(),
                            optional: None,
                        }),
                        ..Default::default()
                    },
                ),
                var_from(
                    "MODE",
                    EnvVarSource {
                        config_map_key_ref: Some(ConfigMapKeySelector {
                            name: "cm".into(),
                            key: "mode".into(),
                            optional: None,
                        }),
                        ..Default::default()
                    },
                ),
                var_from(
                    "OPT",
                    EnvVarSource {
                        config_map_key_ref: Some(ConfigMapKeySelector {
                            name: "cm".into(),
                            key: "nope".into(),
                            optional: Some(true),
                        }),
                        ..Default::default()
                    },
                ),
                var("X", "from-env"),
                var_from("POD", field("metadata.name")),
                var_from("NS", field("metadata.namespace")),
                var_from("UID", field("metadata.uid")),
                var_from("APP", field("metadata.labels['app']")),
                var_from("IDX", field("metadata.annotations['batch.kubernetes.io/job-completion-index']")),
                var_from("NODE", field("spec.nodeName")),
                var_from("SA", field("spec.serviceAccountName")),
                var_from("IP", field("status.podIP")),
                var("HOSTNAME", "override"),
            ]),
            ..Default::default()
        };
        let pod = pod_with(c.clone());
        let env = resolve_env(&pod, &c, &sources(), 6443, "/usr/bin:/bin").unwrap();
        let m: HashMap<_, _> = env.iter().cloned().collect();
        assert_eq!(m["PATH"], "/usr/bin:/bin");
        assert_eq!(m["KUBERNETES_SERVICE_HOST"], "127.0.0.1");
        assert_eq!(m["KUBERNETES_SERVICE_PORT"], "6443");
        assert_eq!(m["CM_mode"], "fast");
        assert_eq!(m["password"], "hunter2");
        assert_eq!(m["REF"], "v-fast-$(PLAIN)");
        assert_eq!(m["PW"], "hunter2");
        assert_eq!(m["MODE"], "fast");
        assert!(!m.contains_key("OPT"));
        // envFrom first, then env: env wins; the later envFrom beats the earlier one.
        assert_eq!(m["X"], "from-env");
        assert_eq!(m["POD"], "p1");
        assert_eq!(m["NS"], "ns1");
        assert_eq!(m["UID"], "uid-1");
        assert_eq!(m["APP"], "demo");
        assert_eq!(m["IDX"], "3");
        assert_eq!(m["NODE"], "local");
        assert_eq!(m["SA"], "sa1");
        assert_eq!(m["IP"], "127.0.0.1");
        assert_eq!(m["HOSTNAME"], "override");
        assert!(!env.iter().any(|(k, _)| k.contains("SERVICE_PORT_") || k.ends_with("_TCP")));
    }

    #[test]
    fn later_envfrom_wins() {
        let c = Container {
            name: "c".into(),
            env_from: Some(vec![
                EnvFromSource {
                    secret_ref: Some(SecretEnvSource { name: "sec".into(), optional: None }),
                    ..Default::default()
                },
                EnvFromSource {
                    config_map_ref: Some(ConfigMapEnvSource { name: "cm".into(), optional: None }),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        let env = resolve_env(&pod_with(c.clone()), &c, &sources(), 1, "").unwrap();
        let m: HashMap<_, _> = env.into_iter().collect();
        assert_eq!(m["X"], "from-cm");
        assert!(!m.contains_key("PATH"));
    }

    fn field(path: &str) -> EnvVarSource {
        EnvVarSource {
            field_ref: Some(ObjectFieldSelector { field_path: path.into(), api_version: None }),
            ..Default::default()
        }
    }

    #[test]
    fn missing_sources_are_config_errors() {
        let missing_key = Container {
            name: "c".into(),
            env: Some(vec![var_from(
                "PW",
                EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector { name: "sec".into(), key: "nokey".into(), optional: None }),
                    ..Default::default()
                },
            )]),
            ..Default::default()
        };
        let err = resolve_env(&pod_with(missing_key.clone()), &missing_key, &sources(), 1, "").unwrap_err();
        assert!(err.contains("couldn't find key nokey in Secret ns1/sec"), "{err}");

        let missing_secret = Container {
            name: "c".into(),
            env_from: Some(vec![EnvFromSource {
                secret_ref: Some(SecretEnvSource { name: "gone".into(), optional: None }),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let err = resolve_env(&pod_with(missing_secret.clone()), &missing_secret, &sources(), 1, "").unwrap_err();
        assert_eq!(err, "secret \"gone\" not found");

        let missing_cm = Container {
            name: "c".into(),
            env: Some(vec![var_from(
                "M",
                EnvVarSource {
                    config_map_key_ref: Some(ConfigMapKeySelector {
                        name: "absent".into(),
                        key: "k".into(),
                        optional: None,
                    }),
                    ..Default::default()
                },
            )]),
            ..Default::default()
        };
        let err = resolve_env(&pod_with(missing_cm.clone()), &missing_cm, &sources(), 1, "").unwrap_err();
        assert_eq!(err, "configmap \"absent\" not found");
    }

    #[test]
    fn resources() {
        let c = Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                limits: Some(
                    [("cpu".to_string(), Quantity("1500m".into())), ("memory".to_string(), Quantity("128Mi".into()))]
                        .into(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(resource_value(&c, "limits.cpu", None).unwrap(), "2");
        assert_eq!(resource_value(&c, "limits.cpu", Some("1m")).unwrap(), "1500");
        assert_eq!(resource_value(&c, "limits.memory", Some("1Mi")).unwrap(), "128");
        assert_eq!(resource_value(&c, "requests.memory", None).unwrap(), "0");
        assert!(resource_value(&c, "bogus", None).is_none());
        let _ = ResourceFieldSelector::default();
    }

    #[test]
    fn referenced() {
        let c = Container {
            name: "c".into(),
            env_from: Some(vec![EnvFromSource {
                secret_ref: Some(SecretEnvSource { name: "b".into(), optional: None }),
                ..Default::default()
            }]),
            env: Some(vec![var_from(
                "x",
                EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector { name: "a".into(), key: "k".into(), optional: None }),
                    ..Default::default()
                },
            )]),
            ..Default::default()
        };
        let (s, m) = referenced_sources(&c);
        assert_eq!(s, vec!["a", "b"]);
        assert!(m.is_empty());
    }
}
