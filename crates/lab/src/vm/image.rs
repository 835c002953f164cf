//! The guest's boot image: a Debian kernel and a busybox initramfs, built once and cached.
//!
//! The kernel comes from Debian's `linux-image-amd64` package, downloaded (`apt-get download`,
//! never installed on the host) and unpacked into the cache. Which one: the candidate of the
//! machine's apt sources (Debian 12: 6.1), or the newest of a chosen series (`6.12`, which
//! Debian 12 has from bookworm-backports; `.ci/deps` enables that suite) — the kernels users
//! run differ in what netdev and ethtool netlink offer, and the lab boots each.
//! The initramfs holds a static busybox, the kernel modules the guest's NICs need (virtio PCI
//! and net, Intel igb, 9p over virtio), each with the modules its `depends=` names, loaded in
//! dependency order (the debs carry no modules.dep; what modules.builtin lists is compiled in
//! and skipped; 6.12's `.ko.xz` are decompressed, busybox insmod cannot), and the guest's
//! `/init`. The cache is `$NETSTEER_VM_CACHE`, else `$XDG_CACHE_HOME/netsteer/vm`, else
//! `~/.cache/netsteer/vm`.

use crate::{LabError, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The modules the guest loads (their dependencies come along): every NIC model's driver, so
/// one image serves them all (a driver without its device only registers itself).
/// The zoo's guests add e1000e, vmxnet3 and the legacy NICs that interrupt on INTx lines (e1000,
/// rtl8139, ne2k-pci, pcnet32, e100, tulip), and a bond and a VLAN over them.
const MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_net",
    "igb",
    "e1000e",
    "e1000",
    "vmxnet3",
    "8139too",
    "8139cp",
    "ne2k_pci",
    "pcnet32",
    "e100",
    "tulip",
    "bonding",
    "8021q",
    "9pnet_virtio",
    "9p",
];

/// The guest's /init: mounts, modules, the host's root (read-only) and the lab's scratch
/// directory over 9p, then the command loop on the second serial port. Each command line is
/// `@@CMD ID LEN SHELL-COMMAND @@END`, LEN the command's length in bytes, acknowledged with
/// `@@ACK ID` (a line that is not whole is answered `@@BAD` and not run: under TCG a busy
/// guest has been seen to lose 16 bytes of a line, one UART FIFO's worth, at its start or in
/// the middle of a long RSS table, so the host sends it again); an ID already run is
/// acknowledged again and not run twice. Its output goes to /x/out.ID and the answer
/// `@@DONE ID RC` to the port. Commands get no copy of the port (3<&-). A twin
/// (`netsteer.peer` on the kernel's command line) has a second loop on the third serial port
/// whose commands run in the `peer` network namespace, their output in /x/peer.
const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /lib/modules/order); do insmod /lib/modules/$m.ko || echo "netsteer-vm: insmod $m failed"; done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose hostroot /host || echo "netsteer-vm: 9p hostroot failed"
mount -t 9p -o trans=virtio,version=9p2000.L scratch /x || echo "netsteer-vm: 9p scratch failed"
# The host's programs run in a chroot of its root, with the guest's kernel interfaces.
mount -t proc proc /host/proc
mount -t sysfs sys /host/sys
mount -t devtmpfs dev /host/dev
mount -t tmpfs tmp /host/tmp
# The scratch share inside the chroot, at a path the tmpfs above cannot shadow: programs the
# lab hands the guest (its netsteer) run from here, wherever they live on the host.
mkdir -p /host/tmp/netsteer-x && mount -o bind /x /host/tmp/netsteer-x
mount -t tmpfs run /host/run
ip link set lo up
# serve PORT OUT [NETNS]: the command loop on PORT, output in OUT; with NETNS, each command
# runs in that network namespace (a twin's client end, `ip netns add` in the chroot: it must
# exist by the first command), in a mount namespace of its own whose sysfs is mounted again
# there, so /sys/class/net lists that namespace's devices (as `ip netns exec` does).
serve() {
  exec 3<>$1
  stty -F $1 raw -echo
  # Said until the host answers: a line sent while no one is connected to the port is lost.
  until read -t 1 -r hello <&3; do echo "@@READY $(uname -r)" >&3; done
  last=-1
  while read -r line <&3; do
    case "$line" in
      "@@CMD "*" @@END") ;;
      *) echo "@@BAD" >&3; continue ;;
    esac
    body=${line#@@CMD }
    body=${body% @@END}
    id=${body%% *}
    body=${body#* }
    len=${body%% *}
    cmd=${body#* }
    case "$id$len" in
      ''|*[!0-9]*) echo "@@BAD" >&3; continue ;;
    esac
    [ "${#cmd}" = "$len" ] || { echo "@@BAD" >&3; continue; }
    echo "@@ACK $id" >&3
    [ "$id" -le "$last" ] && continue
    last=$id
    if [ -n "$3" ]; then
      nsenter --net=/host/run/netns/$3 unshare -m --propagation private sh -c 'mount -t sysfs sys /sys && mount -t sysfs sys /host/sys && eval "$1"' sh "$cmd" > $2/out.$id 2>&1 < /dev/null 3<&-
    else
      sh -c "$cmd" > $2/out.$id 2>&1 < /dev/null 3<&-
    fi
    echo "@@DONE $id $?" >&3
  done
}
# A twin (netsteer.peer on the command line) has a second port for its client end.
if grep -q netsteer.peer /proc/cmdline; then
  mkdir -p /x/peer
  serve /dev/ttyS2 /x/peer peer &
fi
serve /dev/ttyS1 /x
"#;

/// A built image.
#[derive(Debug, Clone)]
pub struct Image {
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    /// The kernel release (`6.1.0-56-amd64`).
    pub release: String,
}

/// The cache directory the user controls.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("NETSTEER_VM_CACHE") {
        return PathBuf::from(d);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/var/cache"));
    base.join("netsteer/vm")
}

pub(crate) fn run(cmd: &mut Command, what: &str) -> Result<String> {
    let out = cmd.output().map_err(|source| LabError::Io {
        what: what.to_string(),
        source,
    })?;
    if !out.status.success() {
        return Err(LabError::Invalid(format!(
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The names a module's `depends=` lists (from its .modinfo strings).
pub fn module_depends(ko: &[u8]) -> Vec<String> {
    let needle = b"depends=";
    ko.windows(needle.len())
        .position(|w| w == needle)
        .map(|i| {
            let rest = &ko[i + needle.len()..];
            let end = rest.iter().position(|b| *b == 0).unwrap_or(rest.len());
            String::from_utf8_lossy(&rest[..end])
                .split(',')
                .filter(|s| !s.is_empty())
                .map(|s| s.replace('-', "_"))
                .collect()
        })
        .unwrap_or_default()
}

/// How the kernel package has a module.
pub enum Module {
    /// Compiled into the kernel (modules.builtin): nothing to load.
    Builtin,
    /// A loadable module: the (decompressed) `.ko` bytes.
    File(Vec<u8>),
}

/// `wanted` and what they depend on, dependencies first, built-in ones left out. `find` maps a
/// module name to how the kernel package has it.
pub fn load_order(
    wanted: &[&str],
    find: &dyn Fn(&str) -> Option<Module>,
) -> std::result::Result<Vec<String>, String> {
    fn visit(
        m: &str,
        find: &dyn Fn(&str) -> Option<Module>,
        order: &mut Vec<String>,
        on_path: &mut Vec<String>,
    ) -> std::result::Result<(), String> {
        if order.iter().any(|o| o == m) {
            return Ok(());
        }
        if on_path.iter().any(|o| o == m) {
            return Err(format!("module dependency loop at {m}"));
        }
        let bytes = match find(m) {
            None => return Err(format!("module {m} is not in the kernel package")),
            // What a built-in module needs is built in too.
            Some(Module::Builtin) => return Ok(()),
            Some(Module::File(bytes)) => bytes,
        };
        on_path.push(m.to_string());
        for d in module_depends(&bytes) {
            visit(&d, find, order, on_path)?;
        }
        on_path.pop();
        order.push(m.to_string());
        Ok(())
    }
    let mut order = Vec::new();
    for m in wanted {
        visit(m, find, &mut order, &mut Vec::new())?;
    }
    Ok(order)
}

/// One file of a newc cpio archive (the initramfs format, Documentation/driver-api/
/// early-userspace/buffer-format.rst).
pub struct CpioEntry {
    pub path: String,
    pub mode: u32,
    pub data: Vec<u8>,
}

/// A newc archive of `entries` (directories need no data; the kernel creates parents in
/// order, so directories come before what they hold).
pub fn cpio(entries: &[CpioEntry]) -> Vec<u8> {
    let mut out = Vec::new();
    let pad = |out: &mut Vec<u8>| {
        while !out.len().is_multiple_of(4) {
            out.push(0);
        }
    };
    let push = |out: &mut Vec<u8>, ino: u32, path: &str, mode: u32, data: &[u8]| {
        let fields = [
            ino,
            mode,
            0,
            0,
            1,
            0,
            data.len() as u32,
            0,
            0,
            0,
            0,
            path.len() as u32 + 1,
            0,
        ];
        out.extend_from_slice(b"070701");
        for f in fields {
            out.extend_from_slice(format!("{f:08X}").as_bytes());
        }
        out.extend_from_slice(path.as_bytes());
        out.push(0);
        pad(out);
        out.extend_from_slice(data);
        pad(out);
    };
    for (i, e) in entries.iter().enumerate() {
        push(&mut out, i as u32 + 1, &e.path, e.mode, &e.data);
    }
    push(&mut out, 0, "TRAILER!!!", 0, &[]);
    out
}

const DIR: u32 = 0o040755;
const EXEC: u32 = 0o100755;
const FILE: u32 = 0o100644;

/// Debian suites the lab may take a guest kernel from besides those the machine is configured
/// with: Debian 11's 5.10, Debian 13's 6.12 and the newest kernel of trixie-backports (7.x).
/// Read through a private apt configuration ([`Apt::private`]), never the host's.
const OTHER_SUITES: &[&str] = &["bullseye", "trixie", "trixie-backports"];

/// Where apt looks: the machine's own configuration, or a private one under the lab's cache
/// whose sources name only [`OTHER_SUITES`] on the archive the machine already uses. The
/// private lists are read by `apt-cache` and `apt-get download` with these options alone:
/// nothing in them can be installed on the host (its sources and status are not involved).
#[derive(Debug, Clone)]
pub struct Apt {
    options: Vec<String>,
    /// The private configuration's directory, when this is one.
    pub dir: Option<PathBuf>,
}

impl Apt {
    pub fn host() -> Apt {
        Apt {
            options: Vec::new(),
            dir: None,
        }
    }

    /// The private configuration, its package lists fetched when absent or a day old. The
    /// archive is the one that serves the machine's own suite (`apt-get indextargets`), as
    /// `.ci/deps` derives bookworm-backports: no host name is written anywhere.
    pub fn private() -> Result<Apt> {
        let dir = cache_dir().join("apt");
        let io = |what: String| move |source| LabError::Io { what, source };
        for d in ["etc", "lists/partial", "cache/archives/partial"] {
            std::fs::create_dir_all(dir.join(d))
                .map_err(io(format!("creating {}", dir.join(d).display())))?;
        }
        let codename = std::fs::read_to_string("/etc/os-release")
            .ok()
            .and_then(|t| {
                t.lines().find_map(|l| {
                    l.strip_prefix("VERSION_CODENAME=")
                        .map(|v| v.trim_matches('"').to_string())
                })
            })
            .ok_or_else(|| {
                LabError::Invalid(
                    "/etc/os-release names no VERSION_CODENAME: is this Debian?".into(),
                )
            })?;
        let targets = run(
            Command::new("apt-get").args(["indextargets", "--format", "$(SITE) $(RELEASE)"]),
            "apt-get indextargets",
        )?;
        let site = targets
            .lines()
            .find_map(|l| {
                let (site, release) = l.split_once(' ')?;
                (release == codename).then(|| site.to_string())
            })
            .ok_or_else(|| {
                LabError::Invalid(format!(
                    "no apt source serves '{codename}': cannot derive the archive for {}",
                    OTHER_SUITES.join(", ")
                ))
            })?;
        let keyring = "/usr/share/keyrings/debian-archive-keyring.gpg";
        let sources: String = OTHER_SUITES
            .iter()
            .filter(|s| !s.starts_with(codename.as_str()))
            .map(|s| format!("deb [signed-by={keyring}] {site} {s} main\n"))
            .collect();
        let list = dir.join("etc/sources.list");
        let stale = std::fs::read_to_string(&list).ok().as_deref() != Some(sources.as_str());
        std::fs::write(&list, &sources).map_err(io(format!("writing {}", list.display())))?;
        let apt = Apt {
            options: [
                format!("Dir::Etc::SourceList={}", list.display()),
                "Dir::Etc::SourceParts=/dev/null".into(),
                format!("Dir::State::Lists={}", dir.join("lists").display()),
                format!("Dir::Cache={}", dir.join("cache").display()),
                "Dir::State::status=/dev/null".into(),
                "Debug::NoLocking=1".into(),
            ]
            .into_iter()
            .flat_map(|o| ["-o".to_string(), o])
            .collect(),
            dir: Some(dir.clone()),
        };
        let fresh = std::fs::metadata(dir.join("lists"))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age < std::time::Duration::from_secs(86_400));
        let has_lists = std::fs::read_dir(dir.join("lists"))
            .map(|d| {
                d.flatten()
                    .any(|e| e.file_name().to_string_lossy().ends_with("_Packages"))
            })
            .unwrap_or(false);
        if stale || !fresh || !has_lists {
            run(
                Command::new("apt-get").args(&apt.options).arg("update"),
                &format!(
                    "apt-get update of the lab's private list ({})",
                    OTHER_SUITES.join(", ")
                ),
            )?;
        }
        Ok(apt)
    }

    fn cache(&self, args: &[&str]) -> Result<String> {
        run(
            Command::new("apt-cache").args(&self.options).args(args),
            &format!("apt-cache {} (is this Debian?)", args.join(" ")),
        )
    }

    /// The packages `spec` depends on whose names start with `prefix`.
    fn depends_on(&self, spec: &str, prefix: &str) -> Result<Vec<String>> {
        Ok(self
            .cache(&["depends", spec])?
            .lines()
            .filter_map(|l| l.trim().strip_prefix("Depends: "))
            .filter(|p| p.starts_with(prefix))
            .map(str::to_string)
            .collect())
    }

    pub(crate) fn download(&self, pkgs: &[String], dir: &Path) -> Result<()> {
        run(
            Command::new("apt-get")
                .args(&self.options)
                .arg("download")
                .args(pkgs)
                .current_dir(dir),
            &format!("apt-get download {}", pkgs.join(" ")),
        )
        .map(|_| ())
    }
}

/// The `.deb` files in `dir` (what `apt-get download` left there).
pub(crate) fn debs_in(dir: &Path) -> Result<Vec<PathBuf>> {
    Ok(std::fs::read_dir(dir)
        .map_err(|source| LabError::Io {
            what: format!("listing {}", dir.display()),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "deb"))
        .collect())
}

/// The kernel package to boot and where apt finds it: the candidate `linux-image-amd64`
/// depends on, or, for a `series` (`6.12`), the one the newest `linux-image-amd64` of that
/// series depends on — in the machine's own suites first, else in [`OTHER_SUITES`].
pub fn kernel_package(series: Option<&str>) -> Result<(String, Apt)> {
    let host = Apt::host();
    let image_of = |apt: &Apt, spec: &str| -> Result<String> {
        apt.depends_on(spec, "linux-image-")?
            .into_iter()
            .next()
            .ok_or_else(|| LabError::Invalid(format!("{spec} names no kernel package")))
    };
    let Some(series) = series else {
        return Ok((image_of(&host, "linux-image-amd64")?, host));
    };
    let newest = |apt: &Apt| -> Result<Option<String>> {
        let listed = apt.cache(&["madison", "linux-image-amd64"])?;
        let mut versions = versions_of_series(&listed, series);
        versions.sort_by(|a, b| dpkg_compare(a, b));
        Ok(versions.pop())
    };
    if let Some(v) = newest(&host)? {
        return Ok((image_of(&host, &format!("linux-image-amd64={v}"))?, host));
    }
    let private = Apt::private()?;
    let v = newest(&private)?.ok_or_else(|| {
        LabError::Invalid(format!(
            "no linux-image-amd64 of kernel series {series} in the apt sources nor in {} \
             (Debian 12 has 6.1, bookworm-backports 6.12, bullseye 5.10, trixie-backports 7.x)",
            OTHER_SUITES.join(", ")
        ))
    })?;
    Ok((
        image_of(&private, &format!("linux-image-amd64={v}"))?,
        private,
    ))
}

/// The versions `apt-cache madison` lists whose upstream part is of `series` (`6.12.95-1~bpo12+1`
/// is of `6.12`, not of `6.1`).
pub fn versions_of_series(madison: &str, series: &str) -> Vec<String> {
    let mut v: Vec<String> = madison
        .lines()
        .filter_map(|l| l.split('|').nth(1).map(str::trim))
        .filter(|v| {
            v.strip_prefix(series)
                .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('-'))
        })
        .map(str::to_string)
        .collect();
    v.dedup();
    v
}

/// Debian version order, by dpkg itself (epochs, tildes and all).
fn dpkg_compare(a: &str, b: &str) -> std::cmp::Ordering {
    let lt = Command::new("dpkg")
        .args(["--compare-versions", a, "lt", b])
        .status()
        .is_ok_and(|s| s.success());
    if a == b {
        std::cmp::Ordering::Equal
    } else if lt {
        std::cmp::Ordering::Less
    } else {
        std::cmp::Ordering::Greater
    }
}

/// Builds (or finds in the cache) the image of `series` (None: the candidate kernel). Needs
/// `apt-get` and `dpkg-deb` (Debian) for the kernel, `xz` for compressed modules, and a static
/// busybox (`busybox-static`) at /bin/busybox.
pub fn build(series: Option<&str>) -> Result<Image> {
    let cache = cache_dir();
    let (pkg, apt) = kernel_package(series)?;
    let release = pkg.trim_start_matches("linux-image-").to_string();
    let dir = cache.join(&release);
    let kernel = dir.join("vmlinuz");
    // Named after what goes into it, so a changed /init or module list builds a new one.
    let recipe = fnv64(format!("{INIT}{}", MODULES.join(",")).as_bytes());
    let initramfs = dir.join(format!("initramfs-{recipe:016x}.cpio"));
    if kernel.is_file() && initramfs.is_file() {
        return Ok(Image {
            kernel,
            initramfs,
            release,
        });
    }
    let io = |what: String| move |source| LabError::Io { what, source };
    std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    let unpacked = dir.join("deb");
    // Debian's kernels up to 6.x ship in linux-image-REL (/boot/vmlinuz-REL, /lib/modules);
    // from 7.x that package is an empty shell depending on linux-base-REL (modules.builtin),
    // linux-binary-REL (the image, /usr/lib/modules/REL/vmlinuz) and linux-modules-REL.
    let layouts = [
        (
            unpacked.join(format!("boot/vmlinuz-{release}")),
            unpacked.join("lib/modules").join(&release),
        ),
        (
            unpacked.join(format!("usr/lib/modules/{release}/vmlinuz")),
            unpacked.join("usr/lib/modules").join(&release),
        ),
    ];
    if !layouts.iter().any(|(k, _)| k.is_file()) {
        let mut pkgs = vec![pkg.clone()];
        for part in ["linux-base-", "linux-binary-", "linux-modules-"] {
            pkgs.extend(
                apt.depends_on(&pkg, part)?
                    .into_iter()
                    .filter(|p| p.ends_with(&release)),
            );
        }
        apt.download(&pkgs, &dir)?;
        let debs = debs_in(&dir)?;
        if debs.is_empty() {
            return Err(LabError::Invalid(format!(
                "apt-get download {pkg}: no .deb"
            )));
        }
        for deb in debs {
            run(
                Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacked),
                &format!("dpkg-deb -x {}", deb.display()),
            )?;
            let _ = std::fs::remove_file(&deb);
        }
    }
    let (vmlinuz, modroot) = layouts
        .iter()
        .find(|(k, _)| k.is_file())
        .cloned()
        .ok_or_else(|| {
            LabError::Invalid(format!(
                "{pkg}: no kernel image at boot/vmlinuz-{release} nor usr/lib/modules/{release}/vmlinuz"
            ))
        })?;
    let builtin = std::fs::read_to_string(modroot.join("modules.builtin")).unwrap_or_default();
    let find = |name: &str| -> Option<Module> {
        if is_builtin(&builtin, name) {
            return Some(Module::Builtin);
        }
        find_module(&modroot, name)
            .and_then(|p| read_module(&p).ok())
            .map(Module::File)
    };
    let order = load_order(MODULES, &find).map_err(LabError::Invalid)?;
    let busybox = std::fs::read("/bin/busybox").map_err(io(
        "/bin/busybox (apt-get install busybox-static)".to_string(),
    ))?;
    let mut entries = Vec::new();
    for d in [
        "bin",
        "dev",
        "proc",
        "sys",
        "host",
        "x",
        "tmp",
        "lib",
        "lib/modules",
    ] {
        entries.push(CpioEntry {
            path: d.into(),
            mode: DIR,
            data: Vec::new(),
        });
    }
    entries.push(CpioEntry {
        path: "bin/busybox".into(),
        mode: EXEC,
        data: busybox,
    });
    entries.push(CpioEntry {
        path: "init".into(),
        mode: EXEC,
        data: INIT.as_bytes().to_vec(),
    });
    for m in &order {
        let Some(Module::File(data)) = find(m) else {
            unreachable!("ordered modules are files")
        };
        entries.push(CpioEntry {
            path: format!("lib/modules/{m}.ko"),
            mode: FILE,
            data,
        });
    }
    entries.push(CpioEntry {
        path: "lib/modules/order".into(),
        mode: FILE,
        data: (order.join("\n") + "\n").into_bytes(),
    });
    let tmp = dir.join("initramfs.cpio.tmp");
    std::fs::write(&tmp, cpio(&entries)).map_err(io(format!("writing {}", tmp.display())))?;
    std::fs::copy(&vmlinuz, &kernel).map_err(io(format!("copying the kernel of {pkg}")))?;
    std::fs::rename(&tmp, &initramfs).map_err(io(format!("writing {}", initramfs.display())))?;
    Ok(Image {
        kernel,
        initramfs,
        release,
    })
}

/// Whether modules.builtin (`kernel/drivers/virtio/virtio_pci.ko` a line) lists `name`.
fn is_builtin(list: &str, name: &str) -> bool {
    list.lines().any(|l| {
        l.rsplit('/')
            .next()
            .and_then(|f| f.strip_suffix(".ko"))
            .is_some_and(|f| f.replace('-', "_") == name)
    })
}

/// A module file's bytes, decompressed when it is `.ko.xz` (Debian's kernels from 6.x on).
fn read_module(p: &Path) -> Result<Vec<u8>> {
    if p.extension().is_some_and(|e| e == "xz") {
        let out = Command::new("xz")
            .arg("-dc")
            .arg(p)
            .output()
            .map_err(|source| LabError::Io {
                what: format!("xz -dc {} (apt-get install xz-utils)", p.display()),
                source,
            })?;
        if !out.status.success() {
            return Err(LabError::Invalid(format!(
                "xz -dc {}: {}",
                p.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        return Ok(out.stdout);
    }
    std::fs::read(p).map_err(|source| LabError::Io {
        what: format!("reading {}", p.display()),
        source,
    })
}

fn fnv64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The file of module `name` (`9pnet_virtio.ko`, or `.ko.xz`; `-` and `_` are the same in
/// module names).
fn find_module(root: &Path, name: &str) -> Option<PathBuf> {
    let want = format!("{name}.ko");
    let want_xz = format!("{name}.ko.xz");
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).ok()?.filter_map(|e| e.ok()) {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if [&want, &want_xz]
                .contains(&&e.file_name().to_string_lossy().replace('-', "_"))
            {
                return Some(p);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependencies_come_first_and_loops_are_named() {
        let mods = |name: &str| -> Option<Module> {
            let deps = match name {
                "virtio_pci" => return Some(Module::Builtin),
                "9p" => "9pnet,fscache,netfs",
                "9pnet_virtio" => "9pnet,virtio,virtio_ring",
                "fscache" => "netfs",
                "virtio" | "virtio_ring" | "netfs" | "9pnet" => "",
                "a" => "b",
                "b" => "a",
                _ => return None,
            };
            Some(Module::File(
                format!("license=GPL\0depends={deps}\0retpoline=Y\0").into_bytes(),
            ))
        };
        let order = load_order(&["9pnet_virtio", "9p"], &mods).unwrap();
        assert_eq!(
            order,
            [
                "9pnet",
                "virtio",
                "virtio_ring",
                "9pnet_virtio",
                "netfs",
                "fscache",
                "9p"
            ]
        );
        // Built in: nothing to load, and nothing of its dependencies either.
        assert_eq!(
            load_order(&["virtio_pci"], &mods).unwrap(),
            Vec::<String>::new()
        );
        assert!(load_order(&["a"], &mods).unwrap_err().contains("loop"));
        assert!(
            load_order(&["nosuch"], &mods)
                .unwrap_err()
                .contains("nosuch")
        );
    }

    #[test]
    fn a_series_is_matched_on_its_whole_number() {
        let madison = "linux-image-amd64 | 6.12.95-1~bpo12+1 | http://a bookworm-backports/main amd64 Packages
linux-image-amd64 |   6.1.192-2 | http://a bookworm-security/main amd64 Packages
linux-image-amd64 |   6.1.176-1 | http://a bookworm/main amd64 Packages
";
        assert_eq!(versions_of_series(madison, "6.12"), ["6.12.95-1~bpo12+1"]);
        assert_eq!(
            versions_of_series(madison, "6.1"),
            ["6.1.192-2", "6.1.176-1"]
        );
        assert!(versions_of_series(madison, "6.13").is_empty());
        let list = "kernel/drivers/virtio/virtio_pci.ko\nkernel/net/9p/9pnet-virtio.ko\n";
        assert!(is_builtin(list, "virtio_pci"));
        assert!(is_builtin(list, "9pnet_virtio"));
        assert!(!is_builtin(list, "virtio"));
    }

    #[test]
    fn cpio_entries_are_newc_and_aligned() {
        let a = cpio(&[
            CpioEntry {
                path: "bin".into(),
                mode: DIR,
                data: vec![],
            },
            CpioEntry {
                path: "bin/x".into(),
                mode: EXEC,
                data: b"hello".to_vec(),
            },
        ]);
        assert_eq!(&a[..6], b"070701");
        assert_eq!(a.len() % 4, 0);
        // Second header: 110-byte header + "bin\0" padded to 4 from the first entry's start.
        let second = (110usize + 4).div_ceil(4) * 4;
        assert_eq!(&a[second..second + 6], b"070701");
        let size = u32::from_str_radix(
            std::str::from_utf8(&a[second + 54..second + 62]).unwrap(),
            16,
        )
        .unwrap();
        assert_eq!(size, 5);
        assert!(a.windows(10).any(|w| w == b"TRAILER!!!"));
        assert!(a.windows(5).any(|w| w == b"hello"));
    }
}
