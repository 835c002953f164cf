//! Anchor tools of another Debian suite, run inside a guest whose userland is the host's
//! (Debian 12, through `chroot /host`): their packages and the libraries they need, taken with
//! `apt-get download` through the lab's private apt list (never installed, never the host's
//! sources) and unpacked with `dpkg-deb -x` into a root of their own, which the guest reaches
//! through its scratch share and runs with that root's own dynamic loader.

use super::image::{Apt, cache_dir, debs_in, run};
use crate::{LabError, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Debian 13's bpftune (Oracle's BPF auto-tuner, docs/watch.md's anchor) and what it links:
/// its library, trixie's libbpf, glibc (2.38 or later: Debian 12 has 2.36), libcap, libnl,
/// libelf, zlib and zstd (libelf's).
pub const BPFTUNE_PACKAGES: &[&str] = &[
    "bpftune",
    "libbpftune0",
    "libbpf1",
    "libc6",
    "libcap2",
    "libnl-3-200",
    "libelf1t64",
    "zlib1g",
    "libzstd1",
];

/// An unpacked root of another suite's packages.
#[derive(Debug, Clone)]
pub struct PrivateRoot {
    /// Where it is on the host.
    pub dir: PathBuf,
    /// The version of its main package.
    pub version: String,
}

/// The library directory inside a root (Debian's multiarch path).
const LIBDIR: &str = "usr/lib/x86_64-linux-gnu";

impl PrivateRoot {
    /// bpftune's root, downloaded and unpacked under the lab's cache (a fresh directory made
    /// exclusively, renamed into place once whole; a root already there for the same version
    /// is used as it is).
    pub fn bpftune() -> Result<PrivateRoot> {
        let apt = Apt::private()?;
        let base = cache_dir().join("anchors");
        let io = |what: String| move |source| LabError::Io { what, source };
        std::fs::create_dir_all(&base).map_err(io(format!("creating {}", base.display())))?;
        let work = make_temp_dir(&base)?;
        let pkgs: Vec<String> = BPFTUNE_PACKAGES.iter().map(|p| p.to_string()).collect();
        let got = (|| {
            apt.download(&pkgs, &work)?;
            let debs = debs_in(&work)?;
            let version = debs
                .iter()
                .filter_map(|d| d.file_name()?.to_str())
                .find_map(|n| n.strip_prefix("bpftune_"))
                .and_then(|n| n.split('_').next())
                .map(|v| v.replace("%3a", ":"))
                .ok_or_else(|| {
                    LabError::Invalid("apt-get download bpftune: no bpftune .deb".into())
                })?;
            Ok::<_, LabError>((debs, version))
        })();
        let (debs, version) = match got {
            Ok(g) => g,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&work);
                return Err(e);
            }
        };
        // Named after the version and the package list, so a list that grows (a library found
        // missing) never reuses a root unpacked without it.
        let list = BPFTUNE_PACKAGES.join(" ");
        let key = list.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        let dir = base.join(format!(
            "bpftune-{}-{:08x}",
            version.replace([':', '/'], "_"),
            key as u32
        ));
        if dir.join(LIBDIR).join("ld-linux-x86-64.so.2").is_file() {
            let _ = std::fs::remove_dir_all(&work);
            return Ok(PrivateRoot { dir, version });
        }
        let root = work.join("root");
        for deb in &debs {
            if let Err(e) = run(
                Command::new("dpkg-deb").arg("-x").arg(deb).arg(&root),
                &format!("dpkg-deb -x {}", deb.display()),
            ) {
                let _ = std::fs::remove_dir_all(&work);
                return Err(e);
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::rename(&root, &dir).map_err(io(format!("moving {} into place", dir.display())))?;
        let _ = std::fs::remove_dir_all(&work);
        Ok(PrivateRoot { dir, version })
    }

    /// The command that runs `program` (a path inside the root, e.g. `usr/sbin/bpftune`) with
    /// the root's own loader and libraries, the root being at `at` where the command runs.
    pub fn command(at: &str, program: &str) -> String {
        let lib = format!("{at}/{LIBDIR}");
        format!("{lib}/ld-linux-x86-64.so.2 --library-path {lib} {at}/{program}")
    }

    /// bpftune's tuner plugins inside a root at `at` (its `-l` directory).
    pub fn bpftune_tuners(at: &str) -> String {
        format!("{at}/{LIBDIR}/bpftune")
    }

    /// Copies the root to `to` (links kept as links), e.g. into a guest's scratch share.
    pub fn copy_to(&self, to: &Path) -> Result<()> {
        run(
            Command::new("cp").arg("-a").arg(&self.dir).arg(to),
            &format!("copying {} to {}", self.dir.display(), to.display()),
        )
        .map(|_| ())
    }
}

/// A new directory under `base` with an unpredictable name, made by mkdir, which fails on
/// anything already there (a link included): as root the lab never reuses a path another user
/// could have prepared.
fn make_temp_dir(base: &Path) -> Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    for i in 0..64u128 {
        let name = format!(
            "tmp.{}.{:x}",
            std::process::id(),
            seed.wrapping_mul(6364136223846793005).wrapping_add(i)
        );
        let p = base.join(name);
        match std::fs::DirBuilder::new().mode(0o700).create(&p) {
            Ok(()) => return Ok(p),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(source) => {
                return Err(LabError::Io {
                    what: format!("creating {}", p.display()),
                    source,
                });
            }
        }
    }
    Err(LabError::Invalid(format!(
        "no new directory could be made under {}",
        base.display()
    )))
}
