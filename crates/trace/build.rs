//! Compiles the BPF programs (`bpf/trace.bpf.c`) with clang, the one BPF compiler Debian ships
//! (`apt-get install clang`; `$CLANG` names another). `-g` gives the object the BTF that
//! describes its maps; the programs themselves use no CO-RE relocation, so the running kernel
//! needs no BTF.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = PathBuf::from("bpf/trace.bpf.c");
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-env-changed=CLANG");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("trace.bpf.o");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let status = Command::new(&clang)
        .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror", "-c"])
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("{clang} failed to compile {} ({s})", src.display()),
        Err(e) => panic!(
            "{clang}: {e}: netsteer trace's BPF programs are compiled with clang at build time (apt-get install clang)"
        ),
    }
}
