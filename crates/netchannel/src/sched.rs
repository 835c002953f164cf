//! The NetScheduler: which channel of a class carries a socket's next frame. Pure functions
//! over a snapshot of channel loads, so the policies are tested without sockets.
//!
//! The limits come from NetChannel's code (module/nd_host.c, nd_data_copy.c): round-robin
//! stays on a channel for `compact_low_thre` = 6 PDUs (≈ 384 KiB of 64 KiB frames) before
//! moving on; a channel with 32 PDUs (≈ 2 MiB) outstanding is skipped; a copy worker with
//! 10 × 64 KiB = 640 KiB pending is skipped.

/// Default bytes round-robin sends on one channel before moving to the next.
pub const STICK_BYTES: u64 = 6 * 64 * 1024;
/// Default bytes queued on a channel (library queue, not yet written) before it is skipped.
pub const CHANNEL_LIMIT: u64 = 2 << 20;
/// Default bytes pending at a copy worker before it is skipped.
pub const WORKER_LIMIT: u64 = 10 * 65536;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// One stream over every channel of its class: stay on a channel for `stick_bytes`, then
    /// take the next one below the channel limit. Needs reassembly at the receiver.
    RoundRobin { stick_bytes: u64 },
    /// Channel = hash of the socket's ports: a socket always uses one channel, so its bytes
    /// arrive in order and sockets are spread over channels (NetChannel's SCHE_SRC_PORT).
    Hash,
    /// The channel with the fewest bytes queued (join the shortest queue).
    LeastLoaded,
}

impl Default for Policy {
    fn default() -> Self {
        Policy::RoundRobin {
            stick_bytes: STICK_BYTES,
        }
    }
}

/// One channel as the scheduler sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Load {
    pub alive: bool,
    /// Bytes handed to the channel and not yet written to its TCP socket.
    pub queued: u64,
}

/// Per-socket scheduler memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cursor {
    pub current: usize,
    pub sent_on_current: u64,
}

/// Result of a choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    Channel(usize),
    /// Every usable channel is at the limit: wait for one to drain.
    Full,
    /// No channel of the class is alive.
    NoChannel,
}

/// Chooses the channel (an index into `loads`) for a frame of `len` bytes.
pub fn choose(
    policy: Policy,
    limit: u64,
    cursor: &mut Cursor,
    loads: &[Load],
    port_hash: u64,
    len: u64,
) -> Choice {
    let n = loads.len();
    if n == 0 || loads.iter().all(|l| !l.alive) {
        return Choice::NoChannel;
    }
    let open = |i: usize| loads[i].alive && loads[i].queued < limit;
    match policy {
        Policy::Hash => {
            let i = (port_hash % n as u64) as usize;
            if !loads[i].alive {
                Choice::NoChannel
            } else if open(i) {
                Choice::Channel(i)
            } else {
                Choice::Full
            }
        }
        Policy::RoundRobin { stick_bytes } => {
            let cur = cursor.current % n;
            if open(cur) && cursor.sent_on_current < stick_bytes {
                cursor.sent_on_current += len;
                return Choice::Channel(cur);
            }
            for step in 1..=n {
                let i = (cur + step) % n;
                if open(i) {
                    cursor.current = i;
                    cursor.sent_on_current = len;
                    return Choice::Channel(i);
                }
            }
            Choice::Full
        }
        Policy::LeastLoaded => {
            let start = cursor.current % n;
            let best = (0..n)
                .map(|step| (start + step) % n)
                .filter(|&i| open(i))
                .min_by_key(|&i| loads[i].queued);
            match best {
                Some(i) => {
                    cursor.current = i + 1;
                    Choice::Channel(i)
                }
                None => Choice::Full,
            }
        }
    }
}

/// A stable hash of a socket's ports (FNV-1a), so both directions of different sockets
/// spread over channels the same way on every run.
pub fn port_hash(local: u16, remote: u16) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in local.to_be_bytes().into_iter().chain(remote.to_be_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Copy-worker choice: the next worker after `last` with less than `limit` pending; None
/// when all are busy (the caller then copies itself, as NetChannel's app thread does).
pub fn choose_worker(pending: &[u64], limit: u64, last: &mut usize) -> Option<usize> {
    let n = pending.len();
    for step in 1..=n {
        let i = (*last + step) % n;
        if pending[i] < limit {
            *last = i;
            return Some(i);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loads(q: &[u64]) -> Vec<Load> {
        q.iter()
            .map(|&queued| Load {
                alive: true,
                queued,
            })
            .collect()
    }

    #[test]
    fn round_robin_sticks_then_moves_and_skips_full_channels() {
        let p = Policy::default();
        let mut c = Cursor::default();
        let l = loads(&[0, 0, 0]);
        let chunk = 64 * 1024;
        let picks: Vec<_> = (0..14)
            .map(|_| choose(p, CHANNEL_LIMIT, &mut c, &l, 0, chunk))
            .collect();
        let expect: Vec<_> = [0; 6]
            .iter()
            .chain(&[1; 6])
            .chain(&[2; 2])
            .map(|&i| Choice::Channel(i))
            .collect();
        assert_eq!(picks, expect);
        // Channel 0 is full: the move from 2 skips it.
        let l = loads(&[CHANNEL_LIMIT, 0, 0]);
        let mut c = Cursor {
            current: 2,
            sent_on_current: STICK_BYTES,
        };
        assert_eq!(
            choose(p, CHANNEL_LIMIT, &mut c, &l, 0, chunk),
            Choice::Channel(1)
        );
        // All full: wait.
        let l = loads(&[CHANNEL_LIMIT; 3]);
        assert_eq!(choose(p, CHANNEL_LIMIT, &mut c, &l, 0, chunk), Choice::Full);
        // A dead current channel is left at once.
        let mut l = loads(&[0, 0]);
        l[0].alive = false;
        let mut c = Cursor::default();
        assert_eq!(
            choose(p, CHANNEL_LIMIT, &mut c, &l, 0, chunk),
            Choice::Channel(1)
        );
    }

    #[test]
    fn hash_is_stable_and_least_loaded_picks_the_shortest() {
        let l = loads(&[0, 0, 0, 0]);
        let mut c = Cursor::default();
        let h = port_hash(40000, 7);
        let first = choose(Policy::Hash, CHANNEL_LIMIT, &mut c, &l, h, 1);
        for _ in 0..10 {
            assert_eq!(choose(Policy::Hash, CHANNEL_LIMIT, &mut c, &l, h, 1), first);
        }
        let spread: std::collections::BTreeSet<u64> =
            (0..64u16).map(|p| port_hash(p, 7) % 4).collect();
        assert_eq!(spread.len(), 4);
        let l = loads(&[500, 100, 300]);
        assert_eq!(
            choose(Policy::LeastLoaded, CHANNEL_LIMIT, &mut c, &l, 0, 1),
            Choice::Channel(1)
        );
        let mut dead = loads(&[0]);
        dead[0].alive = false;
        assert_eq!(
            choose(Policy::LeastLoaded, CHANNEL_LIMIT, &mut c, &dead, 0, 1),
            Choice::NoChannel
        );
    }

    #[test]
    fn workers_over_the_limit_are_skipped() {
        let mut last = 0;
        assert_eq!(
            choose_worker(&[0, WORKER_LIMIT, 10], WORKER_LIMIT, &mut last),
            Some(2)
        );
        assert_eq!(
            choose_worker(&[0, WORKER_LIMIT, 10], WORKER_LIMIT, &mut last),
            Some(0)
        );
        assert_eq!(
            choose_worker(&[WORKER_LIMIT; 2], WORKER_LIMIT, &mut last),
            None
        );
    }
}
