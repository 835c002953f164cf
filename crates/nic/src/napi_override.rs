//! Per-NAPI settings changed for the length of a run and put back after it (a benchmark's
//! `--irq-suspend`): the old values are read first, every NAPI of the device is set, and
//! [`NapiOverride::restore`] (or dropping it) writes the old values back.

use crate::{NicBackend, NicError};
use netsteer_host::ethtool::NicKnob;
use netsteer_host::netdev::NapiAttr;

/// What was changed, to put back.
pub struct NapiOverride<'a> {
    backend: &'a dyn NicBackend,
    dev: String,
    /// (NAPI id, setting, old value), in the order they were written.
    old: Vec<(u32, NapiAttr, u64)>,
}

impl std::fmt::Debug for NapiOverride<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NapiOverride")
            .field("dev", &self.dev)
            .field("old", &self.old)
            .finish()
    }
}

impl<'a> NapiOverride<'a> {
    /// Sets `settings` on every NAPI `dev` has now. On a failure part-way, what was already
    /// written is put back before the error returns.
    pub fn apply(
        backend: &'a dyn NicBackend,
        dev: &str,
        settings: &[(NapiAttr, u64)],
    ) -> Result<NapiOverride<'a>, NicError> {
        let refused = |reason: String| NicError::Refused {
            dev: dev.to_string(),
            knob: "napi".into(),
            reason,
        };
        let now = backend.settings(dev);
        let netdev = now.netdev().map_err(refused)?;
        if netdev.napis.is_empty() {
            return Err(refused(
                "the device has no NAPI instance (a veth gets them with GRO on or XDP)".into(),
            ));
        }
        let mut o = NapiOverride {
            backend,
            dev: dev.to_string(),
            old: Vec::new(),
        };
        for n in &netdev.napis {
            for (attr, v) in settings {
                let was = attr
                    .read(n)
                    .ok_or_else(|| refused(format!("NAPI {} does not report {attr}", n.id)))?;
                // On error `o` is dropped, which restores what was already written.
                backend.set(dev, &NicKnob::Napi(n.id, *attr), &v.to_string())?;
                o.old.push((n.id, *attr, was));
            }
        }
        Ok(o)
    }

    /// Writes the old values back, newest first; returns the ones that failed.
    pub fn restore(mut self) -> Vec<String> {
        self.put_back()
    }

    fn put_back(&mut self) -> Vec<String> {
        let mut failed = Vec::new();
        for (id, attr, v) in std::mem::take(&mut self.old).into_iter().rev() {
            if let Err(e) = self
                .backend
                .set(&self.dev, &NicKnob::Napi(id, attr), &v.to_string())
            {
                failed.push(format!("NAPI {id} {attr} back to {v}: {e}"));
            }
        }
        failed
    }
}

impl Drop for NapiOverride<'_> {
    fn drop(&mut self) {
        let _ = self.put_back();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TreeNic;
    use netsteer_host::ethtool::NicSettings;
    use netsteer_host::field::Field;
    use netsteer_host::netdev::{Napi, Netdev};

    fn tree_with(napis: Vec<Napi>) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let mut s = NicSettings::unavailable("test");
        s.netdev = Some(Field::Known(Netdev {
            napis,
            ..Netdev::default()
        }));
        let all = std::collections::BTreeMap::from([("eth0".to_string(), s)]);
        let path = dir.path().join("netsteer/ethtool.json");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, netsteer_host::ethtool::tree_ethtool_text(&all)).unwrap();
        dir
    }

    fn napi(id: u32) -> Napi {
        Napi {
            id,
            defer_hard_irqs: Some(0),
            gro_flush_timeout_ns: Some(0),
            irq_suspend_timeout_ns: Some(0),
            threaded: Some(0),
            ..Napi::default()
        }
    }

    #[test]
    fn every_napi_is_set_for_the_run_and_put_back() {
        let dir = tree_with(vec![napi(1), napi(2)]);
        let before = std::fs::read(dir.path().join("netsteer/ethtool.json")).unwrap();
        let nic = TreeNic::new(dir.path());
        let want = [
            (NapiAttr::IrqSuspendTimeout, 20_000_000),
            (NapiAttr::DeferHardIrqs, 2),
            (NapiAttr::GroFlushTimeout, 200_000),
        ];
        let o = NapiOverride::apply(&nic, "eth0", &want).unwrap();
        let now = nic.settings("eth0");
        for n in &now.netdev().unwrap().napis {
            assert_eq!(n.irq_suspend_timeout_ns, Some(20_000_000));
            assert_eq!(n.defer_hard_irqs, Some(2));
        }
        assert!(o.restore().is_empty());
        assert_eq!(
            std::fs::read(dir.path().join("netsteer/ethtool.json")).unwrap(),
            before
        );
        // Dropped without restore(): put back all the same.
        drop(NapiOverride::apply(&nic, "eth0", &want).unwrap());
        assert_eq!(
            std::fs::read(dir.path().join("netsteer/ethtool.json")).unwrap(),
            before
        );
    }

    #[test]
    fn a_device_without_napis_or_a_bad_value_changes_nothing() {
        let dir = tree_with(Vec::new());
        let nic = TreeNic::new(dir.path());
        let e = NapiOverride::apply(&nic, "eth0", &[(NapiAttr::DeferHardIrqs, 2)]).unwrap_err();
        assert!(e.to_string().contains("no NAPI"), "{e}");
        let dir = tree_with(vec![napi(1), napi(2)]);
        let before = std::fs::read(dir.path().join("netsteer/ethtool.json")).unwrap();
        let nic = TreeNic::new(dir.path());
        // The second setting is refused (threaded 3: not a mode): the first is put back.
        let e = NapiOverride::apply(
            &nic,
            "eth0",
            &[(NapiAttr::DeferHardIrqs, 2), (NapiAttr::Threaded, 3)],
        )
        .unwrap_err();
        assert!(e.to_string().contains("threaded"), "{e}");
        assert_eq!(
            std::fs::read(dir.path().join("netsteer/ethtool.json")).unwrap(),
            before
        );
    }
}
