// netsteer trace: where the receive path's time goes, per queue, NAPI and CPU.
//
// Tracepoints only (stable hooks; kprobes are often compiled out). No BTF is needed: every
// field is read at the offset the kernel's own tracefs format file gives, which the loader
// writes into the read-only globals below before loading. The hooks that need only their
// arguments (a vector, an IRQ number, a poll's work and budget) are raw tracepoints: the
// program gets the arguments as they are, with no record formatted first, which is most of a
// classic tracepoint program's cost on every packet.
//
// Stages, each a log-linear histogram (8 steps per power of two) keyed by stage, CPU, device,
// rx queue and NAPI id:
//   IRQ_TO_SOFTIRQ  NET_RX raised in a hard IRQ  -> NET_RX softirq entry on that CPU
//   SOFTIRQ_RUN     NET_RX softirq entry -> exit
//   POLL_TIME       previous mark in the softirq (entry or last poll) -> napi_poll end
//   POLL_WORK       packets per poll (a count, not ns); POLL_SQUEEZE counts work == budget
//   STACK           GRO/receive entry of an skb -> sk_data_ready of the socket it reached
//   RESIDENCE       sk_data_ready -> the application's copy of that skb (TCP: the skb's
//                   skb_copy_datagram_iovec; UDP copies a linear skb without that event, so
//                   a socket's datagrams are timed first-in first-out up to its recvmsg
//                   return, sock_recv_length. Not UDP's consume_skb: on Linux 6.18 it came
//                   about a round trip late for a datagram read on another CPU than the one
//                   that allocated it, which frees it in its own next NET_RX softirq
//                   (skb_attempt_defer_free): an echo's residence read 75 us, not 30)
//   WAKEUP          sched_wakeup -> sched_switch of a thread of --pid
// and drops by reason (kfree_skb of a received skb, udp_fail_queue_rcv_skb,
// sock_rcvqueue_full).
//
// Bounds: every map has a fixed size; an skb that is never copied is overwritten in its slot.
//
// Sampling: user space may attach these programs for a window of each interval only. A time
// whose start was taken before the current window opened (ctl[0]) is not a sample: its end
// may belong to a later window, with the events between them unseen.

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef long long __s64;

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name
#define always_inline inline __attribute__((always_inline))

// include/uapi/linux/bpf.h
#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_MAP_TYPE_LRU_HASH 9
#define BPF_ANY 0
#define BPF_NOEXIST 1

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value,
                                   __u64 flags) = (void *)2;
static long (*bpf_probe_read_kernel)(void *dst, __u32 size, const void *src) = (void *)113;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static __u32 (*bpf_get_smp_processor_id)(void) = (void *)8;

char LICENSE[] SEC("license") = "GPL";

// Field offsets in each tracepoint's record, from its tracefs format file (set at load; the
// defaults are Linux 6.18's).
volatile const __u32 OFF_GRO_NAME = 8;          // napi_gro_receive_entry.name (__data_loc)
volatile const __u32 OFF_GRO_NAPI = 12;         // .napi_id
volatile const __u32 OFF_GRO_QUEUE = 16;        // .queue_mapping
volatile const __u32 OFF_GRO_SKB = 24;          // .skbaddr
volatile const __u32 OFF_NETIF_RX_SKB = 8;      // netif_rx.skbaddr
volatile const __u32 OFF_NETIF_RX_NAME = 20;    // netif_rx.name (__data_loc)
volatile const __u32 OFF_READY_SK = 8;          // sk_data_ready.skaddr
volatile const __u32 OFF_READY_PROTO = 18;      // sk_data_ready.protocol
volatile const __u32 OFF_WAKE_PID = 24;         // sched_wakeup.pid
volatile const __u32 OFF_SWITCH_NEXT_PID = 56;  // sched_switch.next_pid
// Whether a --pid was given (its threads are in `threads`).
volatile const __u32 WATCH_PID = 0;

#define NET_RX_SOFTIRQ 3
#define NBUCKETS 304

enum stage {
    IRQ_TO_SOFTIRQ = 1,
    SOFTIRQ_RUN = 2,
    POLL_TIME = 3,
    POLL_WORK = 4,
    STACK = 5,
    RESIDENCE = 6,
    WAKEUP = 7,
};

struct hkey {
    __u8 stage;
    __u8 pad;
    __u16 cpu;
    __u16 queue;     // 0xffff: not a queue stage
    __u16 pad2;
    __u32 napi_id;
    __u32 irq;       // IRQ_TO_SOFTIRQ: the hard IRQ that raised NET_RX (0: unknown)
    char dev[16];
};

struct hval {
    __u64 count;
    __u64 sum;
    __u64 max;
    __u64 squeezed;  // POLL_WORK: polls that used their whole budget
    __u64 buckets[NBUCKETS];
};

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 2048);
    __type(key, struct hkey);
    __type(value, struct hval);
} hist SEC(".maps");

// A zeroed value to create a histogram from (too large for the BPF stack).
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct hval);
} zero SEC(".maps");

// A UDP socket's datagrams waiting to be read, first in first out (one recvmsg reads one).
#define SOCKQ 16
struct slot {
    __u64 ts;
    __u32 napi_id;
    __u16 queue;
    __u16 rx_cpu;
};

struct sockq {
    __u64 sk;          // the socket this slot holds now (0: none)
    __u64 opened;      // the window its queue was started in (ctl[0] then)
    __u32 head;        // next to read
    __u32 tail;        // next to write
    struct slot slots[SOCKQ];
    char dev[16];
};

// A fixed table indexed by a hash of the skb's address, not a hash map: an array lookup is an
// inlined bounds check, where a hash or LRU map update on every packet cost a flood a third of
// its rate. A slot taken over by another skb or socket (a collision) loses that one sample.
#define NSOCKS 16384
#define NSKBS 65536

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, NSOCKS);
    __type(key, __u32);
    __type(value, struct sockq);
} socks SEC(".maps");

struct skb_info {
    __u64 skb;         // the skb this slot holds now (0: none)
    __u64 rx_ts;       // GRO/receive entry
    __u64 enq_ts;      // sk_data_ready (0: not yet)
    __u32 napi_id;
    __u16 queue;
    __u16 rx_cpu;
    char dev[16];
};

// Received skbs, until copied, freed or taken over by a newer one.
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, NSKBS);
    __type(key, __u32);
    __type(value, struct skb_info);
} skbs SEC(".maps");

// Slab addresses: the low bits are alignment, the next ones tell objects apart.
static always_inline __u32 slot_of(__u64 addr, __u32 n) {
    return (__u32)((addr >> 8) ^ (addr >> 24)) & (n - 1);
}

// The slot of a received skb, or 0 when it holds another one.
static always_inline struct skb_info *skb_slot(__u64 skb) {
    __u32 i = slot_of(skb, NSKBS);
    struct skb_info *info = bpf_map_lookup_elem(&skbs, &i);
    return (info && info->skb == skb) ? info : 0;
}

struct cpu_state {
    __u64 irq_ts;
    __u64 raise_ts;
    __u64 softirq_ts;
    __u64 poll_mark;
    __u64 cur_skb;     // the skb __netif_receive_skb is processing on this CPU
    __u32 irq;
    __u32 raise_irq;
    __u32 poll_napi;   // the NAPI id of the last skb received in this poll
    __u32 pad;
    char poll_dev[16];
};

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct cpu_state);
} cpus SEC(".maps");

struct dkey {
    __u32 reason;      // kfree_skb reason; 0x10000 udp_fail_queue_rcv_skb; 0x10001 rcvqueue full
    __u16 cpu;
    __u16 queue;
    char dev[16];
};

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 1024);
    __type(key, struct dkey);
    __type(value, __u64);
} drops SEC(".maps");

// The threads of --pid, and when each was woken.
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 4096);
    __type(key, __u32);
    __type(value, __u64);
} threads SEC(".maps");

// ctl[0]: when the current sampling window opened (bpf_ktime_get_ns), set by user space.
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u64);
} ctl SEC(".maps");

static always_inline __u64 window_start(void) {
    __u32 z = 0;
    __u64 *w = bpf_map_lookup_elem(&ctl, &z);
    return w ? *w : 0;
}

// Events lost to full maps, by map: 0 hist, 1 drops.
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 2);
    __type(key, __u32);
    __type(value, __u64);
} overflow SEC(".maps");

// The record's address as a number, for reads at an offset the verifier cannot see as a
// constant (a __data_loc string's, or a field past the cases below).
static always_inline __u64 base(void *ctx) {
    __u64 a = 0;
    void *p = ctx;
    bpf_probe_read_kernel(&a, sizeof(a), &p);
    return a;
}

// Fields are loaded from the record directly where possible. The offsets are read-only globals
// whose values the verifier knows (aya creates .rodata with BPF_F_RDONLY_PROG and freezes it),
// but it only accepts a context load whose offset is the instruction's own immediate, not a
// pointer moved by a register: so each read is a switch over the aligned offsets a record can
// have, with a constant load per case, and the verifier follows only the branch of the known
// value. A field elsewhere (none on the kernels seen) falls back to bpf_probe_read_kernel, which
// costs several times more on every packet.
// Each load is inline assembly, so the compiler cannot merge the cases into one load through a
// pointer chosen by the branch (which the verifier refuses).
#define C(o) case o: asm volatile("%0 = *(" W " *)(%1 + " #o ")" : "=r"(v) : "r"(ctx)); break;
#define T __u32
#define W "u32"
static always_inline __u32 rd32(void *ctx, __u32 off) {
    __u32 v = 0;
    switch (off) { C(8) C(12) C(16) C(20) C(24) C(28) C(32) C(36) C(40) C(44) C(48) C(52) C(56) C(60) C(64) C(68) C(72) C(76) C(80)
    default: bpf_probe_read_kernel(&v, sizeof(v), (void *)(base(ctx) + off));
    }
    return v;
}
#undef T
#undef W
#define T __u16
#define W "u16"
static always_inline __u16 rd16(void *ctx, __u32 off) {
    __u16 v = 0;
    switch (off) { C(8) C(10) C(12) C(14) C(16) C(18) C(20) C(22) C(24) C(26) C(28) C(30) C(32) C(34) C(36) C(38) C(40) C(42) C(44) C(46) C(48) C(50) C(52) C(54) C(56) C(58) C(60) C(62) C(64) C(66) C(68) C(70) C(72) C(74) C(76) C(78) C(80) C(82)
    default: bpf_probe_read_kernel(&v, sizeof(v), (void *)(base(ctx) + off));
    }
    return v;
}
#undef T
#undef W
#define T __u64
#define W "u64"
static always_inline __u64 rd64(void *ctx, __u32 off) {
    __u64 v = 0;
    switch (off) { C(8) C(16) C(24) C(32) C(40) C(48) C(56) C(64) C(72) C(80)
    default: bpf_probe_read_kernel(&v, sizeof(v), (void *)(base(ctx) + off));
    }
    return v;
}
#undef T
#undef W
#undef C

static always_inline struct cpu_state *state(void) {
    __u32 k = 0;
    return bpf_map_lookup_elem(&cpus, &k);
}

static always_inline void lost(__u32 which) {
    __u64 *n = bpf_map_lookup_elem(&overflow, &which);
    if (n)
        __sync_fetch_and_add(n, 1);
}

// The highest set bit of v (v > 0), without __builtin_clzll: the BPF backend has no
// count-leading-zeros instruction, and clang 14 crashes lowering it.
static always_inline __u32 msb64(__u64 v) {
    __u32 r = 0;
    if (v >> 32) { v >>= 32; r += 32; }
    if (v >> 16) { v >>= 16; r += 16; }
    if (v >> 8) { v >>= 8; r += 8; }
    if (v >> 4) { v >>= 4; r += 4; }
    if (v >> 2) { v >>= 2; r += 2; }
    if (v >> 1) { r += 1; }
    return r;
}

// Log-linear bucket of v: exact below 8, then 8 steps per power of two. 64-bit throughout,
// so that the caller's bounds check and its index are one register: with a 32-bit result
// clang zero-extends a copy for the check and another for the index, and Linux 6.1's verifier
// rejected the index as unbounded (newer ones accept it).
static always_inline __u64 bucket(__u64 v) {
    if (v < 8)
        return v;
    __u64 msb = msb64(v);
    return (msb - 2) * 8 + ((v >> (msb - 3)) & 7);
}

static always_inline void record(struct hkey *k, __u64 v, __u64 squeezed) {
    struct hval *h = bpf_map_lookup_elem(&hist, k);
    if (!h) {
        __u32 z = 0;
        struct hval *init = bpf_map_lookup_elem(&zero, &z);
        if (!init)
            return;
        if (bpf_map_update_elem(&hist, k, init, BPF_NOEXIST) != 0) {
            // Full (or created meanwhile by another CPU: then the lookup below finds it).
        }
        h = bpf_map_lookup_elem(&hist, k);
        if (!h) {
            lost(0);
            return;
        }
    }
    __sync_fetch_and_add(&h->count, 1);
    __sync_fetch_and_add(&h->sum, v);
    __sync_fetch_and_add(&h->squeezed, squeezed);
    if (v > h->max)
        h->max = v;
    __u64 b = bucket(v);
    if (b >= NBUCKETS)
        b = NBUCKETS - 1;
    // The verifier must see the clamp on the register that indexes.
    asm volatile("" : "+r"(b));
    if (b < NBUCKETS)
        __sync_fetch_and_add(&h->buckets[b], 1);
}

static always_inline void key_of(struct hkey *k, __u8 stage, __u32 cpu) {
    __builtin_memset(k, 0, sizeof(*k));
    k->stage = stage;
    k->cpu = (__u16)cpu;
    k->queue = 0xffff;
}

// A raw tracepoint's arguments (include/uapi/linux/bpf.h: struct bpf_raw_tracepoint_args):
// its TP_PROTO's, in order, each in a u64.
struct raw_args {
    __u64 args[4];
};

// irq_handler_entry(int irq, struct irqaction *action)
SEC("raw_tp/irq_handler_entry")
int irq_entry(struct raw_args *ctx) {
    struct cpu_state *s = state();
    if (!s)
        return 0;
    s->irq_ts = bpf_ktime_get_ns();
    s->irq = (__u32)ctx->args[0];
    return 0;
}

// softirq_raise(unsigned int vec_nr), and softirq_entry and softirq_exit alike.
SEC("raw_tp/softirq_raise")
int softirq_raise(struct raw_args *ctx) {
    if ((__u32)ctx->args[0] != NET_RX_SOFTIRQ)
        return 0;
    struct cpu_state *s = state();
    if (!s || s->raise_ts)
        return 0;
    __u64 now = bpf_ktime_get_ns();
    s->raise_ts = now;
    // Raised from the hard IRQ that just ran here (napi_schedule in its handler), or from
    // elsewhere (a busy-poll rescheduling, the backlog of RPS): then no IRQ is named.
    s->raise_irq = (s->irq_ts && now - s->irq_ts < 1000000) ? s->irq : 0;
    return 0;
}

SEC("raw_tp/softirq_entry")
int softirq_entry(struct raw_args *ctx) {
    if ((__u32)ctx->args[0] != NET_RX_SOFTIRQ)
        return 0;
    struct cpu_state *s = state();
    if (!s)
        return 0;
    __u64 now = bpf_ktime_get_ns();
    __u32 cpu = bpf_get_smp_processor_id();
    if (s->raise_ts && s->raise_ts >= window_start()) {
        struct hkey k;
        key_of(&k, IRQ_TO_SOFTIRQ, cpu);
        k.irq = s->raise_irq;
        record(&k, now - s->raise_ts, 0);
        s->raise_ts = 0;
    }
    s->softirq_ts = now;
    s->poll_mark = now;
    s->poll_napi = 0;
    return 0;
}

SEC("raw_tp/softirq_exit")
int softirq_exit(struct raw_args *ctx) {
    if ((__u32)ctx->args[0] != NET_RX_SOFTIRQ)
        return 0;
    struct cpu_state *s = state();
    if (!s || !s->softirq_ts)
        return 0;
    if (s->softirq_ts < window_start()) {
        s->softirq_ts = 0;
        return 0;
    }
    struct hkey k;
    key_of(&k, SOFTIRQ_RUN, bpf_get_smp_processor_id());
    record(&k, bpf_ktime_get_ns() - s->softirq_ts, 0);
    s->softirq_ts = 0;
    return 0;
}

// napi_poll(struct napi_struct *napi, int work, int budget)
SEC("raw_tp/napi_poll")
int napi_poll(struct raw_args *ctx) {
    struct cpu_state *s = state();
    if (!s)
        return 0;
    __u64 now = bpf_ktime_get_ns();
    __u32 cpu = bpf_get_smp_processor_id();
    __s64 work = (int)ctx->args[1];
    __s64 budget = (int)ctx->args[2];
    struct hkey k;
    key_of(&k, POLL_WORK, cpu);
    k.napi_id = s->poll_napi;
    __builtin_memcpy(k.dev, s->poll_dev, sizeof(k.dev));
    record(&k, work > 0 ? (__u64)work : 0, (budget > 0 && work >= budget) ? 1 : 0);
    // Only polls inside a NET_RX softirq have a start mark (busy polls run elsewhere).
    if (s->softirq_ts && s->poll_mark && s->poll_mark >= window_start()) {
        k.stage = POLL_TIME;
        record(&k, now - s->poll_mark, 0);
        s->poll_mark = now;
    }
    s->poll_napi = 0;
    __builtin_memset(s->poll_dev, 0, sizeof(s->poll_dev));
    return 0;
}

// Records an skb entering the receive path. `napi` false: a netif_rx enqueue (loopback,
// veth without NAPI, tunnels), which has no NAPI id or queue and may follow netif_rx_entry
// for the same skb: the first sighting stands.
static always_inline int rx_seen(void *ctx, __u32 off_skb, __u32 off_name, int napi) {
    __u64 skb = rd64(ctx, off_skb);
    if (!skb)
        return 0;
    __u32 i = slot_of(skb, NSKBS);
    struct skb_info *info = bpf_map_lookup_elem(&skbs, &i);
    if (!info)
        return 0;
    // netif_rx after netif_rx_entry for the same skb: the first sighting stands.
    if (!napi && info->skb == skb && !info->enq_ts)
        return 0;
    info->skb = skb;
    info->rx_ts = bpf_ktime_get_ns();
    info->enq_ts = 0;
    info->napi_id = napi ? rd32(ctx, OFF_GRO_NAPI) : 0;
    // The record has skb->queue_mapping as is: skb_record_rx_queue() stores the receive queue
    // plus one, and 0 means none was recorded (skb_get_rx_queue, include/linux/skbuff.h).
    // Found on igb, where every row named the queue after the one that took the interrupts.
    __u16 qm = napi ? rd16(ctx, OFF_GRO_QUEUE) : 0;
    info->queue = qm ? qm - 1 : 0xffff;
    info->rx_cpu = (__u16)bpf_get_smp_processor_id();
    // __data_loc: the low 16 bits are the string's offset in the record.
    __u32 loc = rd32(ctx, off_name);
    bpf_probe_read_kernel(info->dev, sizeof(info->dev) - 1, (void *)(base(ctx) + (loc & 0xffff)));
    struct cpu_state *s = state();
    if (s) {
        s->poll_napi = info->napi_id;
        __builtin_memcpy(s->poll_dev, info->dev, sizeof(s->poll_dev));
    }
    return 0;
}

static always_inline int rx_entry(void *ctx) {
    return rx_seen(ctx, OFF_GRO_SKB, OFF_GRO_NAME, 1);
}

SEC("tracepoint/net/napi_gro_receive_entry")
int gro_entry(void *ctx) { return rx_entry(ctx); }

SEC("tracepoint/net/netif_receive_skb_entry")
int rcv_entry(void *ctx) { return rx_entry(ctx); }

SEC("tracepoint/net/netif_receive_skb_list_entry")
int rcv_list_entry(void *ctx) { return rx_entry(ctx); }

SEC("tracepoint/net/netif_rx_entry")
int netif_rx_entry(void *ctx) { return rx_entry(ctx); }

// The enqueue to a CPU's backlog (netif_rx and __netif_rx alike: loopback and veth call the
// latter, which has no _entry event).
SEC("tracepoint/net/netif_rx")
int netif_rx(void *ctx) { return rx_seen(ctx, OFF_NETIF_RX_SKB, OFF_NETIF_RX_NAME, 0); }

// The skb the protocol layer is handling on this CPU (also after RPS moved it here).
// netif_receive_skb(struct sk_buff *skb)
SEC("raw_tp/netif_receive_skb")
int rcv_core(struct raw_args *ctx) {
    struct cpu_state *s = state();
    if (s)
        s->cur_skb = ctx->args[0];
    return 0;
}

SEC("tracepoint/sock/sk_data_ready")
int data_ready(void *ctx) {
    struct cpu_state *s = state();
    if (!s || !s->cur_skb)
        return 0;
    struct skb_info *info = skb_slot(s->cur_skb);
    if (!info || info->enq_ts)
        return 0;
    if (info->rx_ts < window_start()) {
        info->skb = 0;
        return 0;
    }
    __u64 now = bpf_ktime_get_ns();
    info->enq_ts = now;
    struct hkey k;
    key_of(&k, STACK, info->rx_cpu);
    k.queue = info->queue;
    k.napi_id = info->napi_id;
    __builtin_memcpy(k.dev, info->dev, sizeof(k.dev));
    record(&k, now - info->rx_ts, 0);
    if (rd16(ctx, OFF_READY_PROTO) != 17)
        return 0;
    // UDP: timed per socket from here (see RESIDENCE); the skb slot is done with.
    info->skb = 0;
    __u64 sk = rd64(ctx, OFF_READY_SK);
    __u32 i = slot_of(sk, NSOCKS);
    struct sockq *q = bpf_map_lookup_elem(&socks, &i);
    if (!q)
        return 0;
    // A queue is started afresh in each window: what was queued before it is unknown.
    __u64 ws = window_start();
    if (q->sk != sk || q->opened != ws) {
        q->sk = sk;
        q->opened = ws;
        q->head = 0;
        q->tail = 0;
    }
    // Full: the oldest waiting datagram is forgotten (counted), not the newest.
    if (q->tail - q->head >= SOCKQ) {
        q->head = q->tail - SOCKQ + 1;
        lost(0);
    }
    struct slot *sl = &q->slots[q->tail % SOCKQ];
    sl->ts = now;
    sl->napi_id = k.napi_id;
    sl->queue = k.queue;
    sl->rx_cpu = k.cpu;
    __builtin_memcpy(q->dev, k.dev, sizeof(q->dev));
    q->tail++;
    return 0;
}

#define MSG_PEEK 2
#define EAGAIN 11

// A datagram read: the oldest this socket's queue holds. Datagrams queued before the window
// opened are not in it: reading them pops ours early (residence too short) until the socket's
// queue empties, when ours is empty too (a pop of an empty queue is no sample), or until a
// non-blocking read finds it empty (-EAGAIN), which starts it afresh.
// sock_recv_length(struct sock *sk, int ret, int flags): raw, so the socket's protocol is
// not at hand; only UDP sockets are ever in `socks` (data_ready puts them there), and a read
// of any other socket misses its slot below.
SEC("raw_tp/sock_recv_length")
int recv_length(struct raw_args *ctx) {
    int ret = (int)ctx->args[1];
    int flags = (int)ctx->args[2];
    __u64 sk = ctx->args[0];
    __u32 i = slot_of(sk, NSOCKS);
    struct sockq *q = bpf_map_lookup_elem(&socks, &i);
    if (!q || q->sk != sk || q->opened != window_start())
        return 0;
    if (ret == -EAGAIN) {
        q->head = q->tail;
        return 0;
    }
    if (ret <= 0 || (flags & MSG_PEEK) || q->head == q->tail)
        return 0;
    struct slot *sl = &q->slots[q->head % SOCKQ];
    struct hkey k;
    key_of(&k, RESIDENCE, sl->rx_cpu);
    k.queue = sl->queue;
    k.napi_id = sl->napi_id;
    __builtin_memcpy(k.dev, q->dev, sizeof(k.dev));
    record(&k, bpf_ktime_get_ns() - sl->ts, 0);
    q->head++;
    return 0;
}

// The application has the skb's data: RESIDENCE ends.
static always_inline void residence(struct skb_info *info) {
    if (info->enq_ts && info->enq_ts >= window_start()) {
        struct hkey k;
        key_of(&k, RESIDENCE, info->rx_cpu);
        k.queue = info->queue;
        k.napi_id = info->napi_id;
        __builtin_memcpy(k.dev, info->dev, sizeof(k.dev));
        record(&k, bpf_ktime_get_ns() - info->enq_ts, 0);
    }
    info->skb = 0;
}

// skb_copy_datagram_iovec(const struct sk_buff *skb, int len)
SEC("raw_tp/skb_copy_datagram_iovec")
int copy(struct raw_args *ctx) {
    struct skb_info *info = skb_slot(ctx->args[0]);
    if (info)
        residence(info);
    return 0;
}

static always_inline void count_drop(__u32 reason, __u16 cpu, __u16 queue, const char *dev) {
    struct dkey k;
    __builtin_memset(&k, 0, sizeof(k));
    k.reason = reason;
    k.cpu = cpu;
    k.queue = queue;
    if (dev)
        __builtin_memcpy(k.dev, dev, sizeof(k.dev));
    __u64 *n = bpf_map_lookup_elem(&drops, &k);
    if (n) {
        __sync_fetch_and_add(n, 1);
        return;
    }
    __u64 one = 1;
    if (bpf_map_update_elem(&drops, &k, &one, BPF_NOEXIST) != 0) {
        n = bpf_map_lookup_elem(&drops, &k);
        if (n)
            __sync_fetch_and_add(n, 1);
        else
            lost(1);
    }
}

// kfree_skb(struct sk_buff *skb, void *location, enum skb_drop_reason reason[, struct sock
// *rx_sk]): the reason is the third argument since it came (5.17); the loader refuses a
// kernel whose record has no reason field.
SEC("raw_tp/kfree_skb")
int kfree(struct raw_args *ctx) {
    struct skb_info *info = skb_slot(ctx->args[0]);
    // A slot from before the window may name an skb whose address was reused since, unseen:
    // only a slot of this window says the freed skb was a received one.
    if (!info || info->rx_ts < window_start())
        return 0;
    char dev[16];
    __builtin_memcpy(dev, info->dev, sizeof(dev));
    count_drop((__u32)ctx->args[2], info->rx_cpu, info->queue, dev);
    info->skb = 0;
    return 0;
}

// consume_skb(struct sk_buff *skb[, void *location])
SEC("raw_tp/consume_skb")
int consume(struct raw_args *ctx) {
    struct skb_info *info = skb_slot(ctx->args[0]);
    if (info)
        info->skb = 0;
    return 0;
}

SEC("raw_tp/udp_fail_queue_rcv_skb")
int udp_fail(struct raw_args *ctx) {
    count_drop(0x10000, (__u16)bpf_get_smp_processor_id(), 0xffff, 0);
    return 0;
}

SEC("raw_tp/sock_rcvqueue_full")
int rcvqueue_full(struct raw_args *ctx) {
    count_drop(0x10001, (__u16)bpf_get_smp_processor_id(), 0xffff, 0);
    return 0;
}

SEC("tracepoint/sched/sched_wakeup")
int wakeup(void *ctx) {
    if (!WATCH_PID)
        return 0;
    __u32 pid = rd32(ctx, OFF_WAKE_PID);
    __u64 *ts = bpf_map_lookup_elem(&threads, &pid);
    if (ts)
        *ts = bpf_ktime_get_ns();
    return 0;
}

SEC("tracepoint/sched/sched_switch")
int sched_switch(void *ctx) {
    if (!WATCH_PID)
        return 0;
    __u32 pid = rd32(ctx, OFF_SWITCH_NEXT_PID);
    __u64 *ts = bpf_map_lookup_elem(&threads, &pid);
    if (!ts || !*ts)
        return 0;
    if (*ts < window_start()) {
        *ts = 0;
        return 0;
    }
    struct hkey k;
    key_of(&k, WAKEUP, bpf_get_smp_processor_id());
    record(&k, bpf_ktime_get_ns() - *ts, 0);
    *ts = 0;
    return 0;
}
