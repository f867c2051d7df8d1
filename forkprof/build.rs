//! Builds the eBPF programs (`forkprof-ebpf`) with the nightly toolchain and bpf-linker, and
//! leaves the object in OUT_DIR for `include_bytes_aligned!`. Also builds `forkprof bench`'s
//! workloads (workloads/*.c) so that they ship inside forkprof: a machine that runs
//! `forkprof bench` needs no C compiler. A workload that cannot be built here is left empty
//! and `forkprof bench` says so.
use std::path::Path;
use std::process::Command;

use anyhow::Context as _;

/// (output name, source, extra compiler arguments)
const WORKLOADS: &[(&str, &str, &[&str])] = &[
    ("driver-static", "driver.c", &["-static"]),
    ("driver-dynamic", "driver.c", &[]),
    ("true-static", "true.c", &["-static"]),
    ("true-dynamic", "true.c", &[]),
    (
        "true-libs",
        "true.c",
        &["-Wl,--no-as-needed", "-lssl", "-lcrypto", "-lz", "-lm"],
    ),
];

fn build_workloads(manifest_dir: &Path, out_dir: &Path) -> anyhow::Result<()> {
    let src = manifest_dir.join("workloads");
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-env-changed=CC");
    let dst = out_dir.join("workloads");
    std::fs::create_dir_all(&dst)?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    for (name, source, extra) in WORKLOADS {
        let out = dst.join(name);
        let status = Command::new(&cc)
            .args(["-O2", "-o"])
            .arg(&out)
            .arg(src.join(source))
            .args(*extra)
            .status();
        if !matches!(status, Ok(s) if s.success()) {
            println!(
                "cargo:warning=forkprof bench workload {name} not built ({cc} {source} {extra:?} failed)"
            );
            std::fs::write(&out, b"")?;
        }
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR")?;
    let manifest_dir = Path::new(&manifest_dir);
    let out_dir = std::env::var("OUT_DIR").context("OUT_DIR")?;
    build_workloads(manifest_dir, Path::new(&out_dir))?;
    // AYA_BUILD_SKIP=1 (used by the fuzz targets, which never load programs): leave an empty
    // object so that forkprof still compiles; loading then fails with a clear message.
    println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
    if std::env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true")) {
        std::fs::write(Path::new(&out_dir).join("forkprof"), b"")?;
        return Ok(());
    }
    let root_dir = manifest_dir
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
