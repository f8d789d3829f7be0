//! The kopiur controller (not built yet: see README "Status").
fn main() {
    eprintln!("kopiur-controller: the reconcilers are not implemented yet");
    std::process::exit(2);
}
