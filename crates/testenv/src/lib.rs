//! Dev/test only, never shipped: the real local control plane (etcd, kube-apiserver,
//! kube-controller-manager), the process node agent, Garage S3 and the fault proxy.
pub mod apply;
pub mod controlplane;
pub mod env;
pub mod garage;
pub mod index_growth;
pub mod kubeconfig;
pub mod node;
pub mod operator;
pub mod pki;
pub mod process;
pub mod proxy;
pub mod realnode;
pub mod tls;
pub mod tools;
pub mod wait;
pub mod yaml;

pub use controlplane::Options;
pub use env::TestEnv;
