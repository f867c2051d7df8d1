//! Builds the eBPF programs (`forkprof-ebpf`) with the nightly toolchain and bpf-linker, and
//! leaves the object in OUT_DIR for `include_bytes_aligned!`.
use anyhow::Context as _;

fn main() -> anyhow::Result<()> {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR")?;
    let root_dir = std::path::Path::new(&manifest_dir)
        .parent()
        .context("workspace root")?
        .join("forkprof-ebpf");
    let root_dir = root_dir.to_str().context("non-UTF-8 path")?;
    let package = aya_build::Package {
        name: "forkprof-ebpf",
        root_dir,
        ..Default::default()
    };
    aya_build::build_ebpf([package], aya_build::Toolchain::default())
}
