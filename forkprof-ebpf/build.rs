//! Rebuilds the eBPF object when bpf-linker changes (it is not a cargo dependency).
use which::which;

/// Rebuild the eBPF object when bpf-linker changes (it is not a cargo dependency).
fn main() {
    let bpf_linker = which("bpf-linker").expect(
        "bpf-linker not found on PATH: run `cargo xtask setup` (see KERNEL-NOTES in README)",
    );
    println!("cargo:rerun-if-changed={}", bpf_linker.to_str().unwrap());
}
