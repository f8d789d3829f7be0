//! The environment every test starts from: a temporary directory, the private control plane,
//! a client, Garage (state under the temporary directory) and the operator's namespace.

use std::path::PathBuf;

use anyhow::Result;
use kopiur_testenv::TestEnv;
use kopiur_testenv::garage::Garage;
use kopiur_testenv::operator::Operator;
use kube::Client;

/// The started environment. Field order is drop order: Garage stops before the control plane,
/// the temporary directory goes last.
pub struct Stack {
    pub client: Client,
    pub garage: Garage,
    /// The operator's namespace (`kopiur-system`, made unique by the environment).
    pub op_ns: String,
    pub env: TestEnv,
    pub dir: tempfile::TempDir,
}

impl Stack {
    /// Starts the control plane and Garage and creates the operator namespace; the operator
    /// itself is started by the test (`kopiur_testenv::operator::Operator::start`), with its
    /// own environment.
    pub async fn start() -> Result<Stack> {
        let dir = tempfile::tempdir()?;
        let env = TestEnv::start(kopiur_testenv::Options::default()).await?;
        let client = env.client().await?;
        let garage = Garage::start(&dir.path().join("garage")).await?;
        let op_ns = env.namespace("kopiur-system").await?;
        Ok(Stack { client, garage, op_ns, env, dir })
    }
}

/// Starts the operator in `op_ns` with `knobs` in its environment; returns it with its log
/// path (the log `wait_for` prints the tail of on a timeout).
pub async fn start_operator(env: &TestEnv, op_ns: &str, knobs: &[(&str, &str)]) -> Result<(Operator, PathBuf)> {
    let op = Operator::start(env, op_ns, knobs).await?;
    let log = op.log_path().to_path_buf();
    Ok((op, log))
}
