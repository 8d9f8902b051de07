#!/usr/bin/env python3
"""lab/pcap.py: read a lab link's capture (LAB_PCAP=1, docs/LAB.md) as RoCEv2.

usage: lab/pcap.py FILE [--around N] [--since S] [--until S] [--all]

Prints, per destination QP, how many packets of each opcode crossed the
link, the NAKs (with their syndrome: PSN sequence error, invalid request,
remote access error, remote operational error) and RNR NAKs, and the
retransmissions (a request PSN at or below one already sent to that QP),
and the retransmissions that differ from the first packet of their PSN
(opcode, payload or RETH length): a requester that rebuilt a message
differently on its retry, which the responder may refuse (docs/results/lab-2026-11.md,
"The remote invalid request, found"). A PSN more than 2^16 from the last
one sent to the QP, or a QP silent for 10 s, starts another incarnation
(a reset with fresh PSNs, a QPN reused by a later program), whose PSNs
are new.
--around N prints the N packets of the same two hosts before every NAK
that is not a PSN sequence error, and the N/4 after. --all prints every
packet (within --since/--until, seconds of the capture's clock).
Only the Python standard library: the host has no tcpdump.
"""
import argparse
import struct
import sys
import time

OPCODES = {
    0x00: "SEND_FIRST", 0x01: "SEND_MIDDLE", 0x02: "SEND_LAST", 0x03: "SEND_LAST_IMM",
    0x04: "SEND_ONLY", 0x05: "SEND_ONLY_IMM", 0x06: "WRITE_FIRST", 0x07: "WRITE_MIDDLE",
    0x08: "WRITE_LAST", 0x09: "WRITE_LAST_IMM", 0x0A: "WRITE_ONLY", 0x0B: "WRITE_ONLY_IMM",
    0x0C: "READ_REQ", 0x0D: "READ_RESP_FIRST", 0x0E: "READ_RESP_MIDDLE", 0x0F: "READ_RESP_LAST",
    0x10: "READ_RESP_ONLY", 0x11: "ACK", 0x12: "ATOMIC_ACK", 0x13: "CMP_SWAP", 0x14: "FETCH_ADD",
    0x16: "SEND_LAST_INV", 0x17: "SEND_ONLY_INV",
}
RETH = {0x06, 0x0A, 0x0B, 0x0C}
AETH = {0x0D, 0x0F, 0x10, 0x11, 0x12}
IMM_AFTER_BTH = {0x03, 0x05, 0x09}
RESPONSES = {0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12}
NAK_CODES = {0: "PSN sequence error", 1: "invalid request", 2: "remote access error",
             3: "remote operational error", 4: "invalid RD request"}
ROCE_PORT = 4791


def syndrome_text(s):
    kind = (s >> 5) & 3
    if kind == 0:
        return "ack credits=%d" % (s & 0x1F)
    if kind == 1:
        return "RNR NAK timer=%d" % (s & 0x1F)
    if kind == 3:
        return "NAK " + NAK_CODES.get(s & 0x1F, "code %d" % (s & 0x1F))
    return "reserved 0x%02x" % s


def packets(path):
    """Yield dicts, one per RoCEv2 packet of the capture."""
    with open(path, "rb") as f:
        head = f.read(24)
        if len(head) < 24:
            raise ValueError("%s: not a pcap file (%d bytes)" % (path, len(head)))
        magic = struct.unpack("<I", head[:4])[0]
        if magic == 0xA1B2C3D4:
            endian, scale = "<", 1e-6
        elif magic == 0xD4C3B2A1:
            endian, scale = ">", 1e-6
        elif magic == 0xA1B23C4D:
            endian, scale = "<", 1e-9
        else:
            raise ValueError("%s: not a pcap file (magic 0x%08x)" % (path, magic))
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                return
            sec, frac, caplen, origlen = struct.unpack(endian + "IIII", rec)
            data = f.read(caplen)
            if len(data) < caplen:
                return
            p = parse(data, origlen)
            if p is not None:
                p["t"] = sec + frac * scale
                yield p


def parse(d, origlen):
    if len(d) < 14 + 20 + 8 + 12 or struct.unpack("!H", d[12:14])[0] != 0x0800:
        return None
    ihl = (d[14] & 0xF) * 4
    if d[14 + 9] != 17:
        return None
    src = ".".join(str(b) for b in d[26:30])
    dst = ".".join(str(b) for b in d[30:34])
    u = 14 + ihl
    if struct.unpack("!H", d[u + 2:u + 4])[0] != ROCE_PORT:
        return None
    ulen = struct.unpack("!H", d[u + 4:u + 6])[0]
    b = u + 8
    if len(d) < b + 12:
        return None
    op, flags = d[b], d[b + 1]
    dqp = struct.unpack("!I", d[b + 4:b + 8])[0] & 0xFFFFFF
    areq = d[b + 8] >> 7
    psn = struct.unpack("!I", d[b + 8:b + 12])[0] & 0xFFFFFF
    pad = (flags >> 4) & 3
    p = {"src": src, "dst": dst, "op": op, "dqp": dqp, "psn": psn, "ackreq": areq,
         "len": origlen, "se": flags >> 7}
    x = b + 12
    hdr = 12
    if op in RETH and len(d) >= x + 16:
        va, rkey, dlen = struct.unpack("!QII", d[x:x + 16])
        p.update(va=va, rkey=rkey, dlen=dlen)
        x += 16
        hdr += 16
        if op == 0x0B:
            x += 4
            hdr += 4
    if op in AETH and len(d) >= x + 4:
        a = struct.unpack("!I", d[x:x + 4])[0]
        p.update(syn=a >> 24, msn=a & 0xFFFFFF)
        hdr += 4
    if op in IMM_AFTER_BTH:
        hdr += 4
    # UDP length covers BTH .. ICRC
    p["payload"] = ulen - 8 - hdr - 4 - pad
    return p


def psn_diff(a, b):
    """a - b in the 24-bit PSN space, from -2^23 to 2^23 - 1."""
    return ((a - b + 0x800000) & 0xFFFFFF) - 0x800000


def describe(p, t0):
    s = "%10.6f %s>%s %-16s dqp=0x%06x psn=%-8d" % (
        p["t"] - t0, p["src"].split(".")[-1], p["dst"].split(".")[-1],
        OPCODES.get(p["op"], "op 0x%02x" % p["op"]), p["dqp"], p["psn"])
    if p["op"] not in RESPONSES:
        s += " pay=%d%s" % (p["payload"], " A" if p["ackreq"] else "")
    if "va" in p:
        s += " va=0x%x rkey=0x%x len=%d" % (p["va"], p["rkey"], p["dlen"])
    if "syn" in p:
        s += " [%s msn=%d]" % (syndrome_text(p["syn"]), p["msn"])
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("--around", type=int, default=0)
    ap.add_argument("--since", type=float, default=None)
    ap.add_argument("--until", type=float, default=None)
    ap.add_argument("--all", action="store_true")
    a = ap.parse_args()
    try:
        pk = list(packets(a.file))
    except (OSError, ValueError) as e:
        print("pcap.py: %s" % e, file=sys.stderr)
        return 2
    if not pk:
        print("%s: no RoCEv2 packets" % a.file)
        return 0
    t0 = pk[0]["t"]
    sel = [p for p in pk if (a.since is None or p["t"] - t0 >= a.since) and
           (a.until is None or p["t"] - t0 <= a.until)]
    print("%s: %d RoCEv2 packets from %s (%.1f s)" % (
        a.file, len(pk), time.strftime("%H:%M:%S", time.gmtime(t0)), pk[-1]["t"] - t0))
    if a.all:
        for p in sel:
            print(describe(p, t0))
        return 0
    per = {}
    last = {}
    retx = {}
    first = {}
    changed = []
    for p in sel:
        key = (p["dst"], p["dqp"])
        per.setdefault(key, {})
        per[key][p["op"]] = per[key].get(p["op"], 0) + 1
        if p["op"] not in RESPONSES:
            prev = last.get(key)
            if prev is not None and ((p["psn"] - prev) & 0xFFFFFF) > 0x800000 or prev == p["psn"]:
                retx[key] = retx.get(key, 0) + 1
            if prev is None or ((p["psn"] - prev) & 0xFFFFFF) < 0x800000:
                last[key] = p["psn"]
            # a PSN far from the last one sent to the QP, or a QP silent
            # for 10 s, is another incarnation (a QP reset with fresh
            # PSNs, a QPN a later program reused): its PSNs are new
            seen = first.get(key)
            if seen is None or seen[0] is None or abs(psn_diff(p["psn"], seen[0])) > 0x10000 or p["t"] - seen[1] > 10:
                seen = first[key] = [p["psn"], p["t"], {}]
            seen[0], seen[1] = p["psn"], p["t"]
            shape = (p["op"], p["payload"], p.get("dlen"))
            orig = seen[2].setdefault(p["psn"], (shape, p))
            if orig[0] != shape:
                changed.append((orig[1], p))
    for key in sorted(per):
        ops = ", ".join("%s %d" % (OPCODES.get(o, hex(o)), n) for o, n in sorted(per[key].items()))
        print("to %s qp 0x%06x: %s; retransmitted %d" % (key[0], key[1], ops, retx.get(key, 0)))
    print("retransmissions unlike their first packet: %d" % len(changed))
    for o, p in changed[:10]:
        print("  first " + describe(o, t0))
        print("  then  " + describe(p, t0))
    naks = [i for i, p in enumerate(sel) if "syn" in p and (p["syn"] >> 5) in (1, 3)]
    print("NAKs: %d" % len(naks))
    for i in naks:
        p = sel[i]
        print("  " + describe(p, t0))
        if a.around and not ((p["syn"] >> 5) == 3 and (p["syn"] & 0x1F) == 0):
            hosts = {p["src"], p["dst"]}
            before = [q for q in sel[:i] if {q["src"], q["dst"]} == hosts][-a.around:]
            after = [q for q in sel[i + 1:] if {q["src"], q["dst"]} == hosts][:max(1, a.around // 4)]
            for q in before:
                print("      " + describe(q, t0))
            print("   >> " + describe(p, t0))
            for q in after:
                print("      " + describe(q, t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
