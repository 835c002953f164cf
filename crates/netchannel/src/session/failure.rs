//! When a channel dies: each socket's frames that were on it are sent again on the surviving
//! channels of its class, with the control state the peer may have missed; a class with no
//! channel left fails its sockets (see the module above).

use super::*;

impl Session {
    /// Fails a socket; one its application already dropped leaves the table.
    pub(super) fn fail_socket(&self, vs: &Arc<VsShared>, e: Error) {
        vs.fail(e);
        if vs.lingering.load(Ordering::Acquire) {
            self.forget(vs);
        }
    }

    pub(super) fn class_alive(&self, class: Class) -> bool {
        self.class_channels(class)
            .iter()
            .any(|c| c.load().is_alive())
    }

    /// A channel died: close it, and re-send what each socket had on it over the surviving
    /// channels of the socket's class; fail the sockets whose class has none left.
    pub fn channel_failed(&self, dead: &Channel, cause: &str) {
        // A stale thread of a replaced channel finds it closed already.
        if !dead.close() {
            return;
        }
        let ch = dead.index;
        let closing = self.closing.load(Ordering::Acquire);
        if !closing {
            self.counters.lost_channels.fetch_add(1, Ordering::Relaxed);
        }
        let socks: Vec<Arc<VsShared>> = lock(&self.table).socks.values().cloned().collect();
        for vs in socks {
            if closing {
                vs.fail(Error::Closed);
            } else if !self.class_alive(vs.class) {
                self.fail_socket(
                    &vs,
                    Error::ChannelLost {
                        peer: self.peer,
                        channel: ch,
                        cause: cause.to_string(),
                    },
                );
                // The other class may still reach the peer, which may not have seen the
                // last channel of this class die yet.
                let f = Header::control(
                    FrameType::Rst,
                    vs.local,
                    vs.remote,
                    RstReason::ChannelLost as u32,
                    0,
                );
                self.send_control(&vs, f);
            } else {
                self.resend(&vs, dead.id);
                self.resend_control(&vs);
            }
        }
        let _g = lock(&self.space);
        self.space_cv.notify_all();
    }

    /// Re-sends the frames of `vs` that went on the channel with id `dead`, spread over the
    /// live channels of its class. A frame already moved (by a racing writer) is left alone.
    /// Queued only: this runs under the socket's lock and must never block in write(2).
    pub fn resend(&self, vs: &VsShared, dead: u64) {
        let live: Vec<Arc<Channel>> = self
            .class_channels(vs.class)
            .iter()
            .map(|c| c.load_full())
            .filter(|c| c.is_alive())
            .collect();
        let mut tx = lock(&vs.tx);
        if tx.error.is_some() || live.is_empty() {
            return;
        }
        let lat = if vs.class == Class::Latency {
            flags::LAT
        } else {
            0
        };
        let mut next = 0;
        for f in tx.unacked.iter_mut().filter(|f| f.via == dead) {
            let h = Header {
                kind: FrameType::Data,
                flags: lat | if f.eom { flags::EOM } else { 0 },
                src_port: vs.local,
                dst_port: vs.remote,
                len: f.data.len() as u32,
                credit: 0,
                seq: f.seq,
            };
            let placed = (0..live.len())
                .map(|k| (next + k) % live.len())
                .find(|&k| live[k].send_with(&h, f.data.clone(), Inline::Never).is_ok());
            // None: the class is dying too; its last channel's failure fails the socket.
            let Some(k) = placed else { break };
            f.via = live[k].id;
            next = k + 1;
            self.counters.resent_frames.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Control frames the peer may have lost on a dead channel: an OPEN not yet answered, the
    /// FIN (the final length), the latest CREDIT. Each is idempotent at the peer.
    pub(super) fn resend_control(&self, vs: &VsShared) {
        let (opening, fin) = {
            let tx = lock(&vs.tx);
            if tx.error.is_some() {
                return;
            }
            (
                tx.state == OpenState::Opening,
                tx.fin_sent.then_some(tx.next_seq),
            )
        };
        let credit = {
            let mut rx = lock(&vs.rx);
            let consumed = rx.re.consumed();
            (rx.error.is_none() && consumed > 0).then(|| {
                rx.advertised = consumed;
                consumed
            })
        };
        let window = self.cfg.window;
        if opening {
            let mut f = Header::control(FrameType::Open, vs.local, vs.remote, window, 0);
            if vs.class == Class::Latency {
                f.flags |= flags::LAT;
            }
            self.send_control(vs, f);
        }
        if let Some(seq) = fin {
            self.send_control(
                vs,
                Header::control(FrameType::Fin, vs.local, vs.remote, 0, seq),
            );
        }
        if let Some(c) = credit {
            let f = Header::control(FrameType::Credit, vs.local, vs.remote, window, c);
            self.send_control(vs, f);
        }
    }
}
