//! The receive side of a session: a channel's reader loop, each frame delivered to its
//! socket (in order through the reassembly), OPENs accepted, and frames for no socket
//! answered or dropped.

use super::*;

impl Session {
    /// Reads and handles one frame. Err(cause): the channel is finished.
    pub fn read_frame(
        self: &Arc<Self>,
        ch: &Arc<Channel>,
        r: &mut ChannelReader,
    ) -> Result<(), String> {
        let h = match r.next_header() {
            Ok(Some(h)) => h,
            Ok(None) => return Err("the peer closed the channel".to_string()),
            Err(e) => return Err(format!("read failed: {e}")),
        };
        self.handle_frame(ch, r, h)
    }

    /// Takes the payload of frame `h` (its header just read) and handles the frame.
    pub(crate) fn handle_frame(
        self: &Arc<Self>,
        ch: &Arc<Channel>,
        r: &mut ChannelReader,
        h: Header,
    ) -> Result<(), String> {
        ch.counters.frames_in.fetch_add(1, Ordering::Relaxed);
        ch.counters
            .bytes_in
            .fetch_add(h.wire_len() as u64, Ordering::Relaxed);
        if h.kind == FrameType::Data
            && let Some(pool) = &self.pool
        {
            match pool.offer(self, ch, &h, r) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => return Err(format!("splice failed: {e}")),
            }
        }
        let payload = r.payload(&h).map_err(|e| format!("read failed: {e}"))?;
        self.deliver(ch.index, h, payload, &mut r.get_mut().wakes)
    }

    /// Handles frame `h` whose payload was read whole (by a pump: `crate::drive`).
    pub(crate) fn frame_in(
        self: &Arc<Self>,
        ch: &Channel,
        h: Header,
        payload: Bytes,
        wakes: &mut Wakes,
    ) -> Result<(), String> {
        ch.counters.frames_in.fetch_add(1, Ordering::Relaxed);
        ch.counters
            .bytes_in
            .fetch_add(h.wire_len() as u64, Ordering::Relaxed);
        self.deliver(ch.index, h, payload, wakes)
    }

    /// The reader loop of a channel's I/O thread.
    pub(super) fn read_loop(self: &Arc<Self>, ch: &Arc<Channel>, mut r: ChannelReader) {
        let cause = loop {
            if let Err(e) = self.read_frame(ch, &mut r) {
                break e;
            }
        };
        r.get_mut().wakes.flush();
        let cause = ch.cut_off.get().cloned().unwrap_or(cause);
        self.channel_failed(ch, &cause);
    }

    /// Handles one frame from channel `ch`. Err = the channel must be closed (the peer broke
    /// the channel-level protocol).
    ///
    /// Readers of throughput sockets are woken lazily: the socket goes on `wakes`, which the
    /// caller flushes before it would block (or at once for the latency class, or when a
    /// burst has piled up). One futex wake per burst instead of per frame keeps the hand-off
    /// from costing more CPU than the copy.
    pub fn deliver(
        self: &Arc<Self>,
        ch: usize,
        h: Header,
        payload: Bytes,
        wakes: &mut Wakes,
    ) -> Result<(), String> {
        match h.kind {
            FrameType::Data => {
                let Some(vs) = self.lookup(&h) else {
                    self.orphan(ch, &h);
                    return Ok(());
                };
                if vs.lingering.load(Ordering::Acquire) {
                    // Its application is gone: data for it is answered as for a closed socket.
                    self.orphan(ch, &h);
                    self.fail_socket(&vs, Error::Closed);
                    return Ok(());
                }
                let mut rx = lock(&vs.rx);
                if rx.error.is_some() {
                    return Ok(());
                }
                match rx.re.insert(h.seq, payload, h.flags & flags::EOM != 0) {
                    Ok(Placed::InOrder) => {
                        if vs.class == Class::Latency || rx.re.readable() >= WAKE_BURST {
                            vs.wake_rx(&mut rx);
                        } else {
                            drop(rx);
                            wakes.add(&vs);
                        }
                    }
                    Ok(Placed::OutOfOrder) => {
                        self.counters
                            .out_of_order_frames
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(Placed::Duplicate) => {
                        self.counters
                            .duplicate_frames
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    Err(cause) => {
                        drop(rx);
                        self.protocol_reset(&vs, cause);
                    }
                }
            }
            FrameType::Open => self.accept_open(ch, &h),
            FrameType::OpenAck => {
                if let Some(vs) = self.lookup(&h) {
                    let mut tx = lock(&vs.tx);
                    tx.state = OpenState::Open;
                    tx.peer_window = self.send_window(h.credit);
                    vs.wake_tx(&mut tx);
                } else {
                    self.counters.orphan_frames.fetch_add(1, Ordering::Relaxed);
                }
            }
            FrameType::Credit => {
                if let Some(vs) = self.lookup(&h) {
                    let mut tx = lock(&vs.tx);
                    if h.seq > tx.next_seq {
                        let sent = tx.next_seq;
                        drop(tx);
                        self.protocol_reset(
                            &vs,
                            format!(
                                "CREDIT says {} bytes consumed, only {sent} were sent",
                                h.seq
                            ),
                        );
                        return Ok(());
                    }
                    tx.acknowledge(h.seq);
                    tx.peer_window = self.send_window(h.credit);
                    let done = vs.lingering.load(Ordering::Acquire) && tx.all_acknowledged();
                    vs.wake_tx(&mut tx);
                    drop(tx);
                    if done {
                        self.forget(&vs);
                    }
                } else {
                    self.counters.orphan_frames.fetch_add(1, Ordering::Relaxed);
                }
            }
            FrameType::Fin => {
                if let Some(vs) = self.lookup(&h) {
                    let mut rx = lock(&vs.rx);
                    match rx.re.set_fin(h.seq) {
                        Ok(()) => vs.wake_rx(&mut rx),
                        Err(cause) => {
                            drop(rx);
                            self.protocol_reset(&vs, cause);
                        }
                    }
                } else {
                    self.counters.orphan_frames.fetch_add(1, Ordering::Relaxed);
                }
            }
            FrameType::Rst => {
                if let Some(vs) = self.lookup(&h) {
                    self.fail_socket(
                        &vs,
                        Error::Reset {
                            peer: self.peer,
                            port: h.src_port,
                            reason: RstReason::from_u32(h.credit),
                        },
                    );
                }
            }
            FrameType::Hello => return Err("HELLO after the handshake".into()),
        }
        Ok(())
    }

    /// DATA for a socket we do not have (closed here): tell the peer, as TCP does.
    pub(super) fn orphan(&self, ch: usize, h: &Header) {
        self.counters.orphan_frames.fetch_add(1, Ordering::Relaxed);
        let f = Header::control(
            FrameType::Rst,
            h.dst_port,
            h.src_port,
            RstReason::Aborted as u32,
            0,
        );
        self.send_raw_control(ch, f);
    }

    pub(super) fn protocol_reset(&self, vs: &Arc<VsShared>, cause: impl std::fmt::Display) {
        self.counters
            .protocol_resets
            .fetch_add(1, Ordering::Relaxed);
        self.fail_socket(
            vs,
            Error::Protocol {
                peer: self.peer,
                port: vs.local,
                cause: cause.to_string(),
            },
        );
        let f = Header::control(
            FrameType::Rst,
            vs.local,
            vs.remote,
            RstReason::Aborted as u32,
            0,
        );
        self.send_control(vs, f);
    }

    pub(super) fn accept_open(self: &Arc<Self>, ch: usize, h: &Header) {
        let class = if h.flags & flags::LAT != 0 {
            Class::Latency
        } else {
            Class::Throughput
        };
        let refuse = |reason: RstReason| {
            let f = Header::control(FrameType::Rst, h.dst_port, h.src_port, reason as u32, 0);
            self.send_raw_control(ch, f);
        };
        let ack = Header::control(
            FrameType::OpenAck,
            h.dst_port,
            h.src_port,
            self.cfg.window,
            0,
        );
        let Some(listener) = self.listeners.get(h.dst_port) else {
            return refuse(RstReason::Refused);
        };
        if self.class_channels(class).is_empty() {
            return refuse(RstReason::Refused);
        }
        let vs = {
            let mut t = lock(&self.table);
            if t.socks.len() >= self.socket_limit() {
                drop(t);
                return refuse(RstReason::TooManySockets);
            }
            let is_new = !t.socks.contains_key(&(h.dst_port, h.src_port));
            // Each socket a peer opens leases its receive window from the endpoint's
            // budget (per prefix and in all), held until the socket is gone.
            let lease = match (&self.guard, is_new) {
                (Some(g), true) => match g.lease(self.peer.ip()) {
                    Ok(l) => Some(l),
                    Err(why) => {
                        drop(t);
                        g.refuse_open(format!(
                            "OPEN of virtual port {} from {}: {why}",
                            h.dst_port, self.peer
                        ));
                        return refuse(RstReason::TooManySockets);
                    }
                },
                _ => None,
            };
            if t.socks.contains_key(&(h.dst_port, h.src_port)) {
                // The opener re-sends OPEN when a channel dies before it saw OPEN_ACK (which
                // may have been on that channel): answer again.
                drop(t);
                return self.send_raw_control(ch, ack);
            }
            let vs = Arc::new(
                VsShared::new(
                    h.dst_port,
                    h.src_port,
                    class,
                    self.cfg.policy,
                    u64::from(self.cfg.window),
                    OpenState::Open,
                    self.send_window(h.credit),
                )
                .holding_at_most(self.cfg.receive_share())
                .leased(lease),
            );
            t.socks.insert((h.dst_port, h.src_port), vs.clone());
            vs
        };
        let mut q = lock(&listener.queue);
        if q.1 || q.0.len() >= listener.backlog {
            drop(q);
            self.forget(&vs);
            return refuse(RstReason::Refused);
        }
        let sock = VSocket {
            shared: vs,
            session: self.clone(),
        };
        self.send_raw_control(ch, ack);
        q.0.push_back(sock);
        listener.cv.notify_one();
        drop(q);
        if let Some(w) = lock(&listener.waker).take() {
            w.wake();
        }
    }
}
