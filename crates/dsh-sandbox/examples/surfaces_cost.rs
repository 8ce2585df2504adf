//! The cost of checking a workspace's auto-run surfaces, as every confined call does twice
//! (before and after): `cargo run --release -p dsh-sandbox --example surfaces_cost -- DIR`.

/// Pins the surfaces of the directory named first, then times 2000 checks of it.
fn main() {
    let root = std::path::PathBuf::from(std::env::args().nth(1).expect("root"));
    let s = dsh_sandbox::Surfaces::new(&[root], None);
    let mut snap = s.pin();
    let n = 2000;
    let t = std::time::Instant::now();
    for _ in 0..n {
        let c = s.check(&mut snap);
        assert!(c.is_empty());
    }
    println!("{} surfaces pinned; check: {:?} per call", snap.len(), t.elapsed() / n);
}
