//! `kubectl kopiur` plugin (not built yet: see README "Status").
fn main() {
    eprintln!("kubectl-kopiur: not implemented yet");
    std::process::exit(2);
}
