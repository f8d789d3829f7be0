//! The kopiur controller binary (reconcilers wired in a later step).
fn main() {
    eprintln!("kopiur-controller: the reconcilers are not wired yet");
    std::process::exit(2);
}
