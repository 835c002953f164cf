#!/usr/bin/env python3
"""The tests' own reader of the kernel's page pools, written apart from netsteer's netlink code
(no shared parser, no shared numbering table) so that the two can be held against each other.

Prints one JSON object: the netdev family's command numbers, every page pool that
PAGE_POOL_GET dumps (id, ifindex, napi-id, inflight, inflight-mem, detach-time), and, where the
kernel has PAGE_POOL_STATS_GET, each pool's counters by their netdev.yaml names.
Numbers: include/uapi/linux/netdev.h and include/uapi/linux/genetlink.h.
"""
import json
import socket
import struct

NETLINK_GENERIC = 16
GENL_ID_CTRL = 0x10
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_ID = 1
CTRL_ATTR_FAMILY_NAME = 2
CTRL_ATTR_OPS = 6
CTRL_ATTR_OP_ID = 1
NLM_F_REQUEST = 1
NLM_F_DUMP = 0x300
NLMSG_ERROR = 2
NLMSG_DONE = 3
PAGE_POOL_GET = 5
PAGE_POOL_STATS_GET = 9
POOL = {1: "id", 2: "ifindex", 3: "napi_id", 4: "inflight", 5: "inflight_mem", 6: "detach_time"}
STATS = {
    8: "alloc_fast", 9: "alloc_slow", 10: "alloc_slow_high_order", 11: "alloc_empty",
    12: "alloc_refill", 13: "alloc_waive", 14: "recycle_cached", 15: "recycle_cache_full",
    16: "recycle_ring", 17: "recycle_ring_full", 18: "recycle_released_refcnt",
}


def attributes(buf):
    out, i = {}, 0
    while i + 4 <= len(buf):
        length, kind = struct.unpack_from("=HH", buf, i)
        if length < 4:
            break
        out[kind & 0x3FFF] = buf[i + 4:i + length]
        i += (length + 3) & ~3
    return out


def number(b):
    return int.from_bytes(b, "little") if len(b) in (1, 2, 4, 8) else None


class Netlink:
    def __init__(self):
        self.s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC)
        self.s.bind((0, 0))
        self.seq = 0

    def ask(self, family, cmd, flags, payload=b""):
        """The replies' attribute bytes, or the negative errno the kernel answered."""
        self.seq += 1
        body = struct.pack("=BBH", cmd, 1, 0) + payload
        self.s.send(struct.pack("=IHHII", 16 + len(body), family, flags, self.seq, 0) + body)
        replies = []
        while True:
            data, i = self.s.recv(1 << 20), 0
            while i + 16 <= len(data):
                length, kind, _, seq, _ = struct.unpack_from("=IHHII", data, i)
                if seq == self.seq:
                    if kind == NLMSG_DONE:
                        return replies
                    if kind == NLMSG_ERROR:
                        err = struct.unpack_from("=i", data, i + 16)[0]
                        return err if err else replies
                    replies.append(data[i + 20:i + length])
                i += (length + 3) & ~3
            if not flags & NLM_F_DUMP and replies:
                return replies


def main():
    nl = Netlink()
    name = b"netdev\0"
    req = struct.pack("=HH", 4 + len(name), CTRL_ATTR_FAMILY_NAME) + name
    req += b"\0" * (-len(req) % 4)
    family = attributes(nl.ask(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, NLM_F_REQUEST, req)[0])
    fid = number(family[CTRL_ATTR_FAMILY_ID])
    ops = sorted(number(attributes(op)[CTRL_ATTR_OP_ID])
                 for op in attributes(family.get(CTRL_ATTR_OPS, b"")).values())
    out = {"ops": ops, "pools": [], "stats": None}
    if PAGE_POOL_GET in ops:
        for r in nl.ask(fid, PAGE_POOL_GET, NLM_F_REQUEST | NLM_F_DUMP):
            a = attributes(r)
            out["pools"].append({v: number(a[k]) for k, v in POOL.items() if k in a})
    if PAGE_POOL_STATS_GET in ops:
        out["stats"] = []
        for r in nl.ask(fid, PAGE_POOL_STATS_GET, NLM_F_REQUEST | NLM_F_DUMP):
            a = attributes(r)
            row = {v: number(a[k]) for k, v in STATS.items() if k in a}
            row["id"] = number(attributes(a[1])[1])
            out["stats"].append(row)
    print(json.dumps(out, sort_keys=True))


main()
