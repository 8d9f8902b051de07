#!/usr/bin/env python3
"""lab/report.py: the lab report, from the rows a run left in OUT/rows/.

usage: report.py OUT        (OUT = $LAB_WORK/out)

Writes OUT/report.json and OUT/report.tsv, prints the table. Exit status 1
when a must-pass row failed: a row without a cut must finish with correct
results, with and without the shim, and so must a cut row with the shim of
a program the shim protects (PROTECTED: layer 2 fails it over); SKIP rows
do not count. The other cut rows (without the shim, or MPI over TCP) are
reported only.

Columns:
  finished  the program exited 0 on every side (and printed its summary)
  correct   yes: its own check passed (ibv_rc_pingpong -c, mpi_check, go
            test); "n/c": the program does not check data (perftest), it
            finished without error; no: it failed or reported bad data
  pause     longest traffic gap, ms: ib_write_lat t_max; mpi_check's own
            longest gap between iterations; for bandwidth programs and
            ibv_rc_pingpong an estimate, run time minus the time the same
            work takes in the uncut row with the same shim setting
  tput      MB/s (bw programs, BW average; pingpong from its Mbit/s; mpi ring)
  lat       us: ib_write_lat t_typical (median) / t_avg; pingpong usec/iter;
            mpi iteration time
  to_backup ms, shim rows with a cut: from the cut to the first good
            completion on the backup path (the at_unix_ns of the shim's
            log line), on the cut guest's wall clock: for ip-down cuts
            from the guest's clock just before the command; for set_link
            cuts from the earlier of eth0 seen down (a polling loop) and
            the shim's PORT_ERR line, both at or after the cut (marked *);
            "d+" = the shim's own figure from the fault it detected
  home      shim rows with a cut: QPs the shim switched back to link A
            after the restore (both sides), and the ms from the restore
            (each guest's clock read just after it) to the last of them;
            "0" = none switched back before the program ended
"""
import json
import math
import os
import re
import sys


# programs whose QPs layer 2 protects in the lab (RC, ibv_post_send;
# MPI over libfabric's verbs provider, which connects through rdma_cm;
# the programs whose QPs receive through an SRQ): with the shim their
# cut rows must finish with correct results.
PROTECTED = ("pingpong", "write_bw", "write_bw-q4", "write_bw-bi", "send_bw", "read_bw", "write_lat", "pingpong-ev", "send_bw-ev",
             "pingpong-wr", "mpi-verbs", "rping", "nccl", "nccl-r3", "srq_pingpong", "ucx_put_bw", "mpi-ucx")


# the arms with the shim: on (its defaults), and sb (IBPATH_SWITCHBACK=on
# named, cut rows only)
SHIMMED = ("on", "sb")


def switches_back(m):
    """Whether a shim row's shim switched back: its meta's switchback
    (on|off, lab/lib/rows.sh: on for the arm sb, and for on unless
    LAB_SHIM_ENV turned it off). A row without the key (a run before it
    was written) follows the rule of its time: only the arm sb did.

    >>> switches_back({"shim": "on", "switchback": "on"}), switches_back({"shim": "on", "switchback": "off"})
    (True, False)
    >>> switches_back({"shim": "sb", "switchback": "on"}), switches_back({"shim": "sb"}), switches_back({"shim": "on"})
    (True, True, False)
    """
    sb = m.get("switchback")
    if sb in ("on", "off"):
        return sb == "on"
    return m.get("shim") == "sb"


def kind(prog):
    """The program a row runs, without the suffix of its variant: -ev (the
    same program sleeping on its completion channel), -wr (the same
    program posting through the ibv_wr_* API), -q4 (the same program on
    four QPs), -bi (the same program writing both ways), -r3 (the same
    program at retry_cnt 3).

    >>> kind("write_bw-q4"), kind("pingpong-ev"), kind("write_bw"), kind("write_bw-bi"), kind("nccl-r3")
    ('write_bw', 'pingpong', 'write_bw', 'write_bw', 'nccl')
    """
    return prog[:-3] if prog.endswith(("-ev", "-wr", "-q4", "-bi", "-r3")) else prog


def median_ci(v, level=0.95):
    """The median of v and a distribution-free confidence interval for it:
    the order statistics x(k) and x(n+1-k) with the largest k whose
    coverage, 1 - 2 P(Binomial(n, 1/2) < k), is still at least level.
    Returns (median, low, high, coverage); low/high are None when n is too
    small for the level (n < 6 at 95 %).

    >>> median_ci([1.0, 1.1, 0.9, 1.2, 0.8])
    (1.0, None, None, None)
    >>> m, lo, hi, cov = median_ci([1.0, 1.1, 0.9, 1.2, 0.8, 1.3, 0.7, 1.05])
    >>> (m, lo, hi, round(cov, 4))
    (1.025, 0.7, 1.3, 0.9922)
    >>> median_ci(list(range(1, 13)))[1:3]
    (3, 10)
    """
    v = sorted(v)
    n = len(v)
    mid = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    tail, best = 0.0, None
    for k in range(1, n // 2 + 1):
        # tail = P(B <= k-1)
        tail += math.comb(n, k - 1) / 2 ** n
        if 1 - 2 * tail >= level:
            best = (k, 1 - 2 * tail)
    if best is None:
        return mid, None, None, None
    k, cov = best
    return mid, v[k - 1], v[n - k], cov


def paired(rows, prog, field, arm):
    """The ratios arm/off of the uncut rows of prog, pair by pair (the same
    repetition), with their median and its confidence interval. A pair
    counts only when both rows passed and have the figure.

    >>> rows = [{"prog": "write_bw", "cut": "none", "status": "PASS", "rep": r, "shim": sh, "tput_MBps": v}
    ...         for r, sh, v in [(1, "off", 10.0), (1, "on", 9.0), (2, "on", 12.0), (2, "off", 12.0),
    ...                          (3, "off", 8.0), (3, "on", None)]]
    >>> paired(rows, "write_bw", "tput_MBps", "on")
    {'n': 2, 'median': 0.95, 'pairs': [0.9, 1.0]}
    >>> paired(rows, "write_bw", "tput_MBps", "ctl") is None
    True
    """
    byrep = {}
    for r in rows:
        if r["prog"] == prog and r["cut"] == "none" and r.get("status") == "PASS" and r.get(field):
            byrep.setdefault(r["rep"], {})[r["shim"]] = r[field]
    ratios = [round(x[arm] / x["off"], 3) for _, x in sorted(byrep.items()) if "off" in x and arm in x]
    if not ratios:
        return None
    mid, lo, hi, cov = median_ci(ratios)
    out = {"n": len(ratios), "median": round(mid, 3), "pairs": ratios}
    if lo is not None:
        out.update(ci_low=lo, ci_high=hi, ci_coverage=round(cov, 3))
    return out


def read_meta(d):
    m = {}
    p = os.path.join(d, "meta")
    if os.path.exists(p):
        for line in open(p, errors="replace"):
            k, _, v = line.rstrip("\n").partition("=")
            m[k] = v
    return m


def text(d, f):
    p = os.path.join(d, f)
    return open(p, errors="replace").read() if os.path.exists(p) else ""


ERR = re.compile(r"(Completion with error|Failed status|failed|Couldn't|Unable|error|Invalid|ERROR|abort)", re.I)
STAMP = re.compile(r"^\[(\d+\.\d+)\] ?")


# a program's report of an async event it does not take as fatal
# (nccl_pattern's "async event: port error" before its failing completion)
NOTICE = re.compile(r"\basync event: ")


def first_error(*outs):
    r"""The programs' first line that reports an error.

    >>> first_error("[74.42] nccl_pattern: async event: port error\n[75.01] nccl_pattern: completion with error on the send connection: transport retry counter exceeded (wr_id 7)")
    'nccl_pattern: completion with error on the send connection: transport retry counter exceeded (wr_id 7)'
    """
    for o in outs:
        for line in o.splitlines():
            l = STAMP.sub("", line).strip()
            if l and ERR.search(l) and "IBPATH" not in l.upper() and not NOTICE.search(l):
                return l[:110]
    return ""


EARLY = re.compile(r'msg="libibpath: the fault came before layer 2 could protect some QPs.*? qps=(\d+)')


def early_fault(*outs):
    """Why a shim cut row failed when the fault came before its QPs'
    backups were connected (the shim's log line, bb92451): layer 2 could
    not act, and the error reached the program as plain verbs report it.

    >>> early_fault('[70.1] time=2026-11-30T00:47:01Z level=WARN msg="libibpath: the fault came before layer 2 could protect some QPs (their backup QPs were not connected yet); their errors reach the application" event=PORT_ERR device=rxe0 port=1 qps=2 qpns="0x11 0x12"', "")
    'the cut came before the backups of 2 QPs were connected (the shim logs which)'
    >>> early_fault("nccl_pattern: async event: port error", "")
    ''
    """
    n = sum(int(x) for o in outs for x in EARLY.findall(o))
    return "the cut came before the backups of %d QPs were connected (the shim logs which)" % n if n else ""


DUR = re.compile(r"since_fault=([\d.]+)(ns|µs|us|ms|s)\b")
UNIT_MS = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1e3}


AT_NS = re.compile(r"at_unix_ns=(\d+)")
QPN = re.compile(r"\bqpn=(\d+)")
# a shim log line (stderr) glued to the end of a program's line (stdout)
# that had no newline yet when the shim wrote
GLUED_LOG = re.compile(r"(?<=\S)time=\d{4}-\d\d-\d\dT\S+ level=[A-Z]+ msg=.*$")


PORT_ERR_AT = re.compile(r"time=(\S+) level=INFO msg=\"libibpath: rxe0 PORT_ERR")


def wall_ns(iso):
    """ns since the epoch of a slog time= value (2026-11-22T08:29:53.936Z)."""
    import datetime
    t = datetime.datetime.strptime(iso.rstrip("Z")[:26], "%Y-%m-%dT%H:%M:%S.%f")
    return int((t.replace(tzinfo=datetime.timezone.utc).timestamp()) * 1e9)


def failover(m, client, server):
    """The shim's failover figures of a cut row: the time from the cut to
    the first good completion on the backup path, on the cut guest's wall
    clock, and the shim's own time from the fault it detected to that
    completion (the smaller of the two sides). The cut's time: for ip-down
    cuts the guest's clock just before the command (cut_from "command");
    for set_link cuts (issued by the host) the earlier of the guest's eth0
    seen down by a polling loop and the shim's PORT_ERR log line
    (cut_from "port_err" or "operstate"), both at or after the cut."""
    f = {}
    cut_guest = m["cut"].rsplit("-", 1)[-1]
    for guest, out in (("g1", client), ("g2", server)):
        cut, src = None, ""
        if m.get("cut_ns_" + guest):
            cut, src = int(m["cut_ns_" + guest]), "command"
        else:
            seen = m.get("cut_seen_ns_" + guest)
            if seen:
                cut, src = int(seen), "operstate"
            pe = PORT_ERR_AT.search(out)
            if pe:
                pns = wall_ns(pe.group(1))
                if cut is None or pns < cut:
                    cut, src = pns, "port_err"
        # one line per QP that failed over: the first says when traffic
        # resumed, the last when the last QP did (the cut guest's)
        ats = []
        for line in out.splitlines():
            if "first good completion on the backup" not in line:
                continue
            d = DUR.search(line)
            if d and not ats:
                ms = float(d.group(1)) * UNIT_MS[d.group(2)]
                f["detect_to_backup_ms"] = min(f.get("detect_to_backup_ms", ms), ms)
            at = AT_NS.search(line)
            if at:
                ats.append(int(at.group(1)))
        if guest == cut_guest and ats and cut:
            f["cut_to_backup_ms"] = (ats[0] - cut) / 1e6
            f["cut_from"] = src
        if len(ats) > f.get("backup_qps", 0):
            # the side whose QPs came back: from its first to its last
            f["backup_qps"] = len(ats)
            f["backup_spread_ms"] = (max(ats) - min(ats)) / 1e6
    return f


PORT_ACTIVE_AT = re.compile(r"time=(\S+) level=INFO msg=\"libibpath: rxe0 PORT_ACTIVE")
UNDRAINED_AT = re.compile(r"time=(\S+) level=INFO msg=\"libibpath: rxe0 port 1 undrained\"")


def switchback(m, client, server):
    """The shim's switch backs of a cut row: how many QPs went home (both
    sides) and the time from the restore of link A to the last of them.
    The restore's time: a drain row's undrain (the cut guest's shim
    logging that it heard it, else the cut guest's clock just before the
    command, which under TCG may start seconds before the shim hears it),
    else the cut guest's shim logging PORT_ACTIVE of rxe0, else each
    guest's wall clock read just after the restore (late by the time that
    read takes).

    >>> line = 'time=2026-11-28T11:46:09.015Z level=INFO msg="libibpath: layer 2 switched back" qpn=17 at_unix_ns=1795866369014876395'
    >>> heard = 'time=2026-11-28T11:46:08.910Z level=INFO msg="libibpath: rxe0 port 1 undrained" was_drained=true'
    >>> m = {"cut": "drain-g1", "undrain_ns": "1795866362901713747"}
    >>> round(switchback(m, heard + chr(10) + line, "")["restore_to_home_ms"])
    105
    >>> round(switchback(m, line, "")["restore_to_home_ms"])
    6113
    """
    f = {"home_qps": 0}
    cut_guest = m["cut"].rsplit("-", 1)[-1]
    active = PORT_ACTIVE_AT.search(client if cut_guest == "g1" else server)
    for guest, out in (("g1", client), ("g2", server)):
        rest = m.get("restore_ns_" + guest, "")
        ref = int(rest) if rest.isdigit() else None
        if active:
            ref = wall_ns(active.group(1))
        if m.get("undrain_ns", "").isdigit():
            ref = int(m["undrain_ns"])
        heard = UNDRAINED_AT.search(client if cut_guest == "g1" else server)
        if heard:
            ref = wall_ns(heard.group(1))
        for line in out.splitlines():
            if "layer 2 switched back" not in line:
                continue
            f["home_qps"] += 1
            at = AT_NS.search(line)
            if at and ref:
                ms = (int(at.group(1)) - ref) / 1e6
                f["restore_to_home_ms"] = max(f.get("restore_to_home_ms", ms), ms)
    return f


NCCL_LINE = re.compile(r"NCCL_PATTERN sent=(\d+) received=(\d+) bytes=(\d+) bad=(\d+) elapsed_s=([\d.]+) "
                       r"max_gap_ms=([\d.]+) MBps=([\d.]+)")


def nccl_summary(client, server, rc_ok):
    """The nccl row from both sides' summary lines (lab/nccl/nccl_pattern.c):
    finished when both printed one and exited 0, correct when neither found
    a bad byte; the pause is the longer of the two sides' longest gap.

    >>> ok = "NCCL_PATTERN sent=5 received=6 bytes=9 bad=0 elapsed_s=1.00 max_gap_ms=12.5 MBps=3.00"
    >>> srv = "NCCL_PATTERN sent=6 received=5 bytes=9 bad=0 elapsed_s=1.00 max_gap_ms=40.0 MBps=2.00"
    >>> s = nccl_summary(ok, srv, True)
    >>> s["finished"], s["correct"], s["pause_ms"], s["tput_MBps"], s["detail"]
    (True, 'yes', 40.0, 3.0, '5+6 steps each way')
    >>> nccl_summary(ok, srv.replace("bad=0", "bad=7"), True)["correct"]
    'no'
    >>> nccl_summary(ok, "", True)["finished"], nccl_summary(ok, srv, False)["correct"]
    (False, 'no')
    """
    mc, ms = NCCL_LINE.search(client), NCCL_LINE.search(server)
    r = {"finished": rc_ok and mc is not None and ms is not None}
    if mc:
        r["tput_MBps"] = float(mc.group(7))
        r["pause_ms"], r["pause_kind"] = max(float(x.group(6)) for x in (mc, ms) if x), "measured"
    r["correct"] = "yes" if r["finished"] and mc.group(4) == "0" and ms.group(4) == "0" else "no"
    if mc and ms:
        r["detail"] = "%s+%s steps each way" % (mc.group(1), ms.group(1))
    return r


# the averages (third, fifth, seventh columns) are of the last report's
# interval: -nan when it was empty (the last puts fell in the one before)
UCX_AVG = r"(-?nan|[\d.]+)"
UCX_FINAL = re.compile(r"^\s*Final:\s+(\d+)\s+([\d.]+)\s+" + UCX_AVG + r"\s+([\d.]+)\s+" + UCX_AVG + r"\s+([\d.]+)\s+" + UCX_AVG + r"\s+(\d+)\s*$", re.M)


def ucx_summary(client, rc_ok, size=65536):
    """The ucx_perftest row (UCT put_bw) from the client's Final line:
    iterations, overhead 50th percentile / average / overall (us),
    bandwidth average / overall (MB/s, MB = 2^20 bytes), message rate
    average / overall. ucx_perftest does not check data; work is the MB
    moved, so that a cut row's pause is its run time minus the time the
    same puts take at the uncut row's rate.

    >>> c = chr(10).join(["[thread 0]   212  6635.000  7147.546  9603.825  8.74  6.51  140  104",
    ...                   "Final:   2000   5028.000  6354.094  6241.361   9.84   10.01   160   160"])
    >>> s = ucx_summary(c, True)
    >>> s["finished"], s["correct"], s["tput_MBps"], s["lat_us"], s["work"], s["detail"]
    (True, 'n/c', 10.01, 6241.361, 125.0, '2000 puts of 64 KiB')
    >>> ucx_summary(c, False)["correct"], ucx_summary("[thread 0]  1  2  3", True)["finished"]
    ('no', False)
    >>> n = ucx_summary("Final:   500  11466.000  -nan  18597.140  -nan  3.36  -nan  54", True)
    >>> n["finished"], n["tput_MBps"], n["lat_us"]
    (True, 3.36, 18597.14)
    """
    mm = UCX_FINAL.search(client)
    r = {"finished": rc_ok and mm is not None}
    r["correct"] = "n/c" if r["finished"] else "no"
    if mm:
        iters = int(mm.group(1))
        r["tput_MBps"], r["lat_us"] = float(mm.group(6)), float(mm.group(4))
        r["work"] = iters * size / 2 ** 20
        r["detail"] = "%d puts of %d KiB" % (iters, size // 1024)
    return r


def pingpong_check(out):
    """ibv_rc_pingpong and ibv_srq_pingpong with -c: the server prints
    "invalid data in page N" when a received page is not the pattern (and
    exits 0 all the same).

    >>> pingpong_check("1000 iters in 0.77 seconds = 767.11 usec/iter")
    ''
    >>> pingpong_check("[12.5] invalid data in page 0")
    'invalid data in page 0'
    """
    mm = re.search(r"invalid data in page \d+", out)
    return mm.group(0) if mm else ""


def drain_verdict(m, r):
    """A drain row (cut drain-GUEST: "ibpath drain --wait", then "ibpath
    undrain", the link up throughout) is correct only when both commands
    succeeded, a QP failed over (the drain moved its traffic), and, with
    the shim switching back, QPs came home after the undrain. Returns the
    reason it is not, or "".

    >>> ok = {"cut": "drain-g1", "shim": "sb", "drain_rc": "0", "undrain_rc": "0"}
    >>> drain_verdict(ok, {"backup_qps": 1, "home_qps": 2})
    ''
    >>> drain_verdict(dict(ok, drain_rc="5"), {"backup_qps": 1, "home_qps": 2})
    'ibpath drain --wait exited 5 (traffic left on the port, or a process did not drain)'
    >>> drain_verdict(ok, {"backup_qps": 0, "home_qps": 0})
    'no QP failed over: the drain moved nothing'
    >>> drain_verdict(ok, {"backup_qps": 1, "home_qps": 0})
    'no QP came home after the undrain'
    >>> drain_verdict(dict(ok, shim="on", switchback="on"), {"backup_qps": 1, "home_qps": 0})
    'no QP came home after the undrain'
    >>> drain_verdict(dict(ok, shim="on", switchback="off"), {"backup_qps": 1, "home_qps": 0})
    ''
    >>> drain_verdict(dict(ok, shim="on"), {"backup_qps": 1, "home_qps": 0})
    ''
    """
    if m.get("drain_rc") != "0":
        return "ibpath drain --wait exited %s (traffic left on the port, or a process did not drain)" % (m.get("drain_rc") or "?")
    if m.get("undrain_rc") != "0":
        return "ibpath undrain exited %s" % (m.get("undrain_rc") or "?")
    if not r.get("backup_qps"):
        return "no QP failed over: the drain moved nothing"
    if switches_back(m) and not r.get("home_qps"):
        return "no QP came home after the undrain"
    return ""


DRAINED_HEARD = re.compile(r"libibpath: rxe0 port 1 drained")


def loss_verdict(m, client, server, r):
    """A loss row (cut loss-GUEST: link A of that guest loses packets, up
    throughout) is correct only when that guest's shim was told the port
    was drained (its ibpathd found it degraded: nobody else drains in the
    row), a QP failed over, and, with the shim switching back, QPs came
    home once the port was back in service. Returns the reason it is
    not, or "".

    >>> told = 'time=t level=INFO msg="libibpath: rxe0 port 1 drained" moving=1'
    >>> ok = {"cut": "loss-g1", "shim": "sb"}
    >>> loss_verdict(ok, told, "", {"backup_qps": 1, "home_qps": 2})
    ''
    >>> loss_verdict(ok, "", told, {"backup_qps": 1, "home_qps": 2})
    "g1's shim was never told rxe0:1 was drained: its ibpathd did not find the port degraded (is its --health on? LAB_DAEMON_ARGS)"
    >>> loss_verdict(ok, told, "", {"backup_qps": 0})
    'no QP failed over: the traffic stayed on the lossy port'
    >>> loss_verdict(ok, told, "", {"backup_qps": 1, "home_qps": 0})
    'no QP came home after the loss stopped'
    >>> loss_verdict(dict(ok, shim="on", switchback="on"), told, "", {"backup_qps": 1, "home_qps": 0})
    'no QP came home after the loss stopped'
    >>> loss_verdict(dict(ok, shim="on", switchback="off"), told, "", {"backup_qps": 1})
    ''
    >>> loss_verdict(dict(ok, shim="on"), told, "", {"backup_qps": 1})
    ''
    """
    g = m["cut"].rsplit("-", 1)[-1]
    if not DRAINED_HEARD.search(client if g == "g1" else server):
        return "%s's shim was never told rxe0:1 was drained: its ibpathd did not find the port degraded (is its --health on? LAB_DAEMON_ARGS)" % g
    if not r.get("backup_qps"):
        return "no QP failed over: the traffic stayed on the lossy port"
    if switches_back(m) and not r.get("home_qps"):
        return "no QP came home after the loss stopped"
    return ""


def stop_verdict(m):
    """A stop row (cut stop-GUEST: the program in that guest stopped and
    continued, the link up throughout) tested something only when the
    stop found the program. Returns the reason it did not, or "".

    >>> stop_verdict({"cut": "stop-g1", "stopped": "1"})
    ''
    >>> stop_verdict({"cut": "stop-g1", "stopped": "0"})
    'the stop found no program to stop in g1'
    >>> stop_verdict({"cut": "stop-g1"})
    'the stop found no program to stop in g1'
    """
    if not (m.get("stopped") or "0").isdigit() or int(m.get("stopped") or 0) == 0:
        return "the stop found no program to stop in %s" % m["cut"].rsplit("-", 1)[-1]
    return ""


def flap_verdict(m, client, server, r):
    """A flap2 row with the shim switching back (the link pulled, restored,
    pulled again once the traffic came home, restored) is correct only
    when the second failover was handed over through the mailbox on both
    ends (a "layer 2 failover" line with via_mailbox=true in each
    guest's log: the first goes through the control receives) and the
    QPs came home after each pull (two switch backs per end). Returns
    the reason it is not, or "".

    >>> fo = 'level=INFO msg="libibpath: layer 2 failover" qpn=17 via_mailbox=%s'
    >>> sb = 'level=INFO msg="libibpath: layer 2 switched back" qpn=17'
    >>> side = chr(10).join([fo % "false", sb, fo % "true", sb])
    >>> flap_verdict({"shim": "sb"}, side, side, {"home_qps": 4})
    ''
    >>> flap_verdict({"shim": "sb"}, side, side.replace("true", "false"), {"home_qps": 4})
    'g2: no failover handed over through the mailbox'
    >>> flap_verdict({"shim": "sb"}, side, side, {"home_qps": 3})
    'the QPs came home 3 times, want 4 (each end after each pull)'
    >>> flap_verdict({"shim": "on", "switchback": "on"}, side, side, {"home_qps": 3})
    'the QPs came home 3 times, want 4 (each end after each pull)'
    >>> flap_verdict({"shim": "on", "switchback": "off"}, "", "", {"home_qps": 0})
    ''
    >>> flap_verdict({"shim": "on"}, "", "", {"home_qps": 0})
    ''
    """
    if not switches_back(m):
        return ""
    for guest, out in (("g1", client), ("g2", server)):
        if not any("layer 2 failover" in l and "via_mailbox=true" in l for l in out.splitlines()):
            return "%s: no failover handed over through the mailbox" % guest
    if r.get("home_qps", 0) < 4:
        return "the QPs came home %d times, want 4 (each end after each pull)" % r.get("home_qps", 0)
    return ""


def flap3_verdict(m, client, server, r):
    """A flap3 row (the shim switching back; link A pulled three times in
    10 s) is correct only when a QP failed over and every QP of g1 that
    failed over came home after its last failover: its last layer 2 line
    is a switch back (with the hold on, flap damping keeps them on the
    backup until the port's penalty has decayed: about a minute). The
    log's order, not a guest clock: the restore's time, read through the
    job channel after the command, came 2 to 3 s late under TCG, after
    switch backs that followed the restore. Returns the reason it is not,
    or "".

    >>> fo = 'level=INFO msg="libibpath: layer 2 failover" qpn=%d'
    >>> sb = 'level=INFO msg="libibpath: layer 2 switched back" qpn=%d'
    >>> m = {"shim": "sb"}
    >>> flap3_verdict(m, chr(10).join([fo % 17, sb % 17, fo % 17, sb % 17]), "", {"backup_qps": 1})
    ''
    >>> flap3_verdict(m, chr(10).join([fo % 17, sb % 17, fo % 17]), "", {"backup_qps": 1})
    "g1's QP 17 did not come home after its last failover"
    >>> flap3_verdict(m, chr(10).join([fo % 17, fo % 18, sb % 17]), "", {"backup_qps": 2})
    "g1's QP 18 did not come home after its last failover"
    >>> flap3_verdict(m, sb % 17, "", {"backup_qps": 0})
    'no QP failed over'
    >>> flap3_verdict({"shim": "on", "switchback": "on"}, chr(10).join([fo % 17, sb % 17, fo % 17]), "", {"backup_qps": 1})
    "g1's QP 17 did not come home after its last failover"
    >>> flap3_verdict({"shim": "on", "switchback": "off"}, fo % 17, "", {"backup_qps": 1})
    ''
    >>> flap3_verdict({"shim": "on"}, fo % 17, "", {"backup_qps": 1})
    ''
    """
    if not switches_back(m):
        return ""
    if not r.get("backup_qps"):
        return "no QP failed over"
    last = {}
    for l in client.splitlines():
        q = QPN.search(l)
        if not q:
            continue
        if "layer 2 failover\"" in l:
            last[q.group(1)] = "failover"
        elif "layer 2 switched back\"" in l:
            last[q.group(1)] = "home"
    if not last:
        return "no layer 2 failover in g1's log"
    for qpn, what in sorted(last.items()):
        if what != "home":
            return "g1's QP %s did not come home after its last failover" % qpn
    return ""


PAIRED = re.compile(r"resets_paired=(\d+)")


def paired_verdict(m, client, server, r):
    """A -r3 row with the shim switching back (the program at retry_cnt 3,
    so that a probe of the default path still down fails with an error)
    is correct only if a reset of the default QP was paired through the
    mailbox (a "layer 2 send queue" line with resets_paired above 0, on
    either end) and the QPs came home. Returns the reason it is not, or
    "".

    >>> sq = 'level=INFO msg="libibpath: layer 2 send queue" qpn=17 from=fallback to=wait-signaled probes=9 reset_failures=0 resets_paired=%d'
    >>> paired_verdict({"shim": "sb"}, sq % 2, sq % 0, {"home_qps": 4})
    ''
    >>> paired_verdict({"shim": "sb"}, sq % 0, sq % 0, {"home_qps": 4})
    'no reset of the default QP was paired through the mailbox'
    >>> paired_verdict({"shim": "sb"}, sq % 1, "", {"home_qps": 0})
    'no QP came home'
    >>> paired_verdict({"shim": "on", "switchback": "on"}, sq % 1, "", {"home_qps": 0})
    'no QP came home'
    >>> paired_verdict({"shim": "on", "switchback": "off"}, "", "", {})
    ''
    >>> paired_verdict({"shim": "on"}, "", "", {})
    ''
    """
    if not switches_back(m):
        return ""
    if not any(int(n) > 0 for n in PAIRED.findall(client + "\n" + server)):
        return "no reset of the default QP was paired through the mailbox"
    if not r.get("home_qps"):
        return "no QP came home"
    return ""


def parse(m, client, server):
    r = {"finished": False, "correct": "no", "tput_MBps": None, "lat_us": None, "lat_avg_us": None,
         "pause_ms": None, "pause_kind": "", "work": None, "detail": ""}
    prog = kind(m["prog"])
    rc_ok = m.get("client_rc") == "0" and m.get("server_rc", "0") == "0"
    c = "\n".join(GLUED_LOG.sub("", STAMP.sub("", l)) for l in client.splitlines())
    # perftest checks the CPU clock it times with; under TCG the check
    # fails now and then and the figures print as 0.00 or inf: the run
    # itself finished, its figures are unknown.
    clock_bad = "Correlation coefficient r^2" in c
    if prog in ("write_bw", "send_bw", "read_bw"):
        mm = re.search(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", c, re.M)
        if mm and not clock_bad:
            r["tput_MBps"] = float(mm.group(4))
        r["finished"] = rc_ok and mm is not None
        r["correct"] = "n/c" if r["finished"] else "no"
        if r["finished"] and r["tput_MBps"] is not None and m.get("duration"):
            r["work"] = float(m["duration"]) * r["tput_MBps"]  # MB moved (duration mode only)
    elif prog == "write_lat":
        num = r"([\d.]+|inf|-?nan)"
        mm = re.search(r"^\s*\d+\s+(\d+)" + (r"\s+" + num) * 4, c, re.M)
        if mm and not clock_bad:
            r["lat_us"], r["lat_avg_us"] = float(mm.group(4)), float(mm.group(5))
            r["pause_ms"], r["pause_kind"] = float(mm.group(3)) / 1e3, "t_max"
        r["finished"] = rc_ok and mm is not None
        r["correct"] = "n/c" if r["finished"] else "no"
    if clock_bad and r["finished"]:
        r["detail"] = "perftest's clock check failed (r^2 < 0.9): no figures"
    elif prog in ("pingpong", "srq_pingpong"):
        b = re.search(r"(\d+) bytes in ([\d.]+) seconds = ([\d.]+) Mbit/sec", c)
        i = re.search(r"(\d+) iters in ([\d.]+) seconds = ([\d.]+) usec/iter", c)
        if b and i:
            r["tput_MBps"] = float(b.group(3)) / 8
            r["lat_us"] = float(i.group(3))
            r["work"] = float(i.group(2))  # seconds
            r["iters"] = int(i.group(1))
        r["finished"] = rc_ok and b is not None and i is not None
        bad = pingpong_check(c + "\n" + server)
        r["correct"] = "yes" if r["finished"] and not bad else "no"
        if bad:
            r["detail"] = bad
    elif prog == "ucx_put_bw":
        r.update(ucx_summary(c, rc_ok))
    elif prog in ("mpi", "mpi-verbs", "mpi-ucx"):
        mm = re.search(r"MPI_CHECK ranks=(\d+) iters=(\d+) errors=(\d+) elapsed_s=([\d.]+) max_gap_ms=([\d.]+) ring_MBps=([\d.]+) iter_us=(\d+)", c)
        if mm:
            r["tput_MBps"], r["lat_us"] = float(mm.group(6)), float(mm.group(7))
            r["pause_ms"], r["pause_kind"] = float(mm.group(5)), "measured"
        r["finished"] = rc_ok and mm is not None
        r["correct"] = "yes" if (mm and mm.group(3) == "0" and rc_ok) else "no"
    elif prog == "nccl":  # (nccl-r3 too)
        srv = "\n".join(GLUED_LOG.sub("", STAMP.sub("", l)) for l in server.splitlines())
        r.update(nccl_summary(c, srv, rc_ok))
    elif prog == "rping":
        # rping -v prints each ping's data: "ping data: rdma-ping-N: ..."
        pings = re.findall(r"ping data: rdma-ping-(\d+):", c)
        want = int(m.get("count") or 0)
        r["finished"] = rc_ok
        r["correct"] = "yes" if rc_ok and pings and (not want or len(pings) == want) else "no"
        r["detail"] = "%d pings" % len(pings)
    elif prog == "ibpathd":
        outs = c + "\n" + "\n".join(STAMP.sub("", l) for l in server.splitlines())
        mm = re.search(r"IBPATHD_CHECK ok=(\d+) fail=(\d+)", c)
        r["finished"] = rc_ok and mm is not None
        r["correct"] = "yes" if (mm and mm.group(2) == "0" and rc_ok) else "no"
        fails = re.findall(r"^CHECK FAIL (.*)$", outs, re.M)
        if fails:
            r["detail"] = fails[0][:90]
    elif prog.startswith("ibvtest"):
        outs = c + "\n" + "\n".join(STAMP.sub("", l) for l in server.splitlines())
        if "no tests to run" in outs:
            r.update(finished=True, correct="skip", detail="no TestLab* test in this ibv.test build")
            return r
        passed = rc_ok and re.search(r"^(PASS|ok)\b", outs, re.M) is not None
        skipped = re.search(r"^--- SKIP", outs, re.M) and not re.search(r"^--- PASS", outs, re.M)
        r["finished"] = rc_ok
        r["correct"] = "skip" if skipped and passed else ("yes" if passed else "no")
        if skipped:
            r["detail"] = "go test skipped: " + (re.findall(r"^\s+\S+\.go:\d+: (.*)$", outs, re.M) or [""])[-1][:90]
        if m.get("client_rc") != "0" and not re.search(r"^(--- |=== RUN)", outs, re.M):
            r["detail"] = first_error(c, server) or "no test output"
    if m["cut"] != "none" and m.get("cut_uptime_g1"):
        stamps = [float(x) for x in re.findall(r"^\[(\d+\.\d+)\]", client, re.M)]
        try:
            cu = float(m["cut_uptime_g1"])
        except ValueError:
            cu = None
        if rc_ok and stamps and cu and stamps[-1] < cu:
            r["cut_missed"] = True
            r["detail"] = "cut came after the program ended (%.1f s)" % (cu - stamps[-1])
    if not r["finished"] and not r["detail"]:
        r["detail"] = first_error(c, server) or ("timed out" if m.get("client_rc") in ("124", "137") else "rc %s/%s" % (m.get("client_rc"), m.get("server_rc", "-")))
    if m["cut"] != "none" and m["shim"] in SHIMMED:
        if not (r["finished"] and r["correct"] == "yes"):
            r["detail"] = early_fault(client, server) or r["detail"]
        for g in ("g1", "g2"):
            if m.get("armed_" + g):
                r["armed_" + g] = m["armed_" + g]
        r.update(failover(m, client, server))
        r.update(switchback(m, client, server))
        # the verdicts of the rows that check more than the data: the
        # first reason a row is not correct wins
        checks = [
            (m["cut"].startswith("drain-"), lambda: drain_verdict(m, r)),
            (m["cut"].startswith("loss-"), lambda: loss_verdict(m, client, server, r)),
            (m["cut"].startswith("flap3-"), lambda: flap3_verdict(m, client, server, r)),
            (m["cut"].startswith("stop-"), lambda: stop_verdict(m)),
            (m["cut"].startswith("flap2-"), lambda: flap_verdict(m, client, server, r)),
            (m["prog"].endswith("-r3"), lambda: paired_verdict(m, client, server, r)),
        ]
        for applies, verdict in checks:
            why = verdict() if applies else ""
            if why and r["correct"] == "yes":
                r["correct"], r["detail"] = "no", why
        # (a flap2 or flap3 row's pulls each fail the QPs over: no spread)
        if r.get("backup_qps", 0) > 1 and not r["detail"] and not m["cut"].startswith(("flap2-", "flap3-")):
            r["detail"] = "%d QPs on the backup, the last %.0f ms after the first" % (r["backup_qps"], r["backup_spread_ms"])
    shimlines = len([l for l in (client + server).splitlines() if "ibpath" in l.lower()])
    r["shim_log_lines"] = shimlines
    return r


def fmt(v, f="%.1f"):
    return "-" if v is None else (f % v if isinstance(v, float) else str(v))


def main():
    out = sys.argv[1]
    rows_dir = os.path.join(out, "rows")
    env = {}
    if os.path.exists(os.path.join(out, "env")):
        env = dict(l.rstrip("\n").split("=", 1) for l in open(os.path.join(out, "env")) if "=" in l)
    rows = []
    for name in os.listdir(rows_dir) if os.path.isdir(rows_dir) else []:
        d = os.path.join(rows_dir, name)
        m = read_meta(d)
        if not m:
            continue
        row = {"name": name, "prog": m["prog"], "shim": m["shim"], "cut": m["cut"], "switchback": m.get("switchback"),
               "cut_at_s": m.get("cut_time"), "cut_for_s": m.get("cut_for") if m["cut"] != "none" else None,
               "cut_held_s": m.get("cut_held"),
               "rep": int(m.get("rep") or (name.rsplit(".r", 1)[1] if re.search(r"\.r\d+$", name) else 1)),
               "elapsed_s": m.get("elapsed"), "again": m.get("again"), "again_skipped": m.get("again_skipped"), "order": float(m.get("started") or os.path.getmtime(os.path.join(d, "meta")))}
        if m.get("status") in ("SKIP", "FAIL"):
            # not run: a build that failed, the lab budget spent, a guest gone
            row.update(status=m["status"], reason=m.get("reason", ""), finished=False, correct="no")
        else:
            row.update(parse(m, text(d, "client.out"), text(d, "server.out")))
            row["recovered"] = m.get("recovered") if m["cut"] != "none" else None
            # ip-down cuts: a new rdma_cm connection into the cut guest
            # (ok, broken: rxe0 re-created there, cm_fix says with what result)
            row["cm_after_cut"] = m.get("cm_after_cut")
            row["cm_fix"] = m.get("cm_fix")
            # a failed recovery or a timed-out client: links A and B's IP
            # both ways (ok, or "dead: A from g1 ...": both guests
            # rebooted, link_fix says with what result)
            row["links"] = m.get("links")
            row["link_fix"] = m.get("link_fix")
            row["port_active_s"] = m.get("port_active_s")
            row["status"] = "PASS" if row["finished"] and row["correct"] in ("yes", "n/c", "skip") else "FAIL"
            # a cut that came after the program ended tested nothing: not
            # a pass, and not the program's failure
            if row["status"] == "PASS" and row.get("cut_missed"):
                row["status"] = "MISS"
        rows.append(row)
    # reference rows: same program and shim, no cut; with repetitions, the
    # median by the program's main figure
    groups = {}
    for r in rows:
        if r["cut"] == "none" and r.get("status") == "PASS":
            groups.setdefault((r["prog"], r["shim"]), []).append(r)
    ref = {}
    for k, g in groups.items():
        key = (lambda r: r.get("lat_us") or 0) if k[0] == "write_lat" else (lambda r: r.get("tput_MBps") or r.get("lat_us") or 0)
        g.sort(key=key)
        ref[k] = g[(len(g) - 1) // 2] if len(g) % 2 else g[len(g) // 2 - 1]
        ref[k]["samples"] = len(g)
    for r in rows:
        if r.get("status") != "PASS" or r["cut"] == "none" or r.get("pause_ms") is not None:
            continue
        # the arm sb has no uncut rows: its reference is on's, the same
        # shim, whose defaults switch back as sb does
        base = ref.get((r["prog"], "on" if r["shim"] == "sb" else r["shim"]))
        if not base or base.get("work") is None:
            continue
        if r["prog"] == "srq_pingpong" and r.get("iters") and base.get("iters"):
            # the cut rows run more exchanges than the uncut one: the
            # same work is their count at the uncut row's pace
            r["pause_ms"] = max(0.0, (r["work"] - r["iters"] * base["work"] / base["iters"]) * 1e3)
        elif kind(r["prog"]) == "pingpong":
            r["pause_ms"] = max(0.0, (r["work"] - base["work"]) * 1e3)
        elif r["tput_MBps"] and base["tput_MBps"]:
            d = float(r.get("duration") or 0) or r["work"] / r["tput_MBps"]
            r["pause_ms"] = max(0.0, d * (1 - r["tput_MBps"] / base["tput_MBps"]) * 1e3)
        r["pause_kind"] = "estimate"
    rows.sort(key=lambda r: r["order"])
    for r in rows:
        r.pop("order", None)
        # uncut rows must finish; so must the cut rows of programs the
        # shim protects, with the shim: layer 2 fails them over
        r["must_pass"] = r["cut"] == "none" or (r["shim"] in SHIMMED and r["prog"] in PROTECTED)
        # a row under which the lab's links failed, run again after a
        # reboot (row_again): its retry is judged in its place
        if r.get("again") or r.get("again_skipped"):
            r["must_pass"] = False
    ratios = {}
    def median(v):
        v = sorted(v)
        return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2

    def med(prog, shim, field):
        v = [r[field] for r in groups.get((prog, shim), []) if r.get(field) is not None]
        return median(v) if v else None

    for label, prog, field in (("write_lat_typical", "write_lat", "lat_us"), ("write_lat_avg", "write_lat", "lat_avg_us"),
                               ("write_bw", "write_bw", "tput_MBps")):
        off, on = med(prog, "off", field), med(prog, "on", field)
        if off and on:
            ratios[label + "_on_over_off"] = round(on / off, 3)
            ratios[label + "_median_off"] = round(off, 2)
            ratios[label + "_median_on"] = round(on, 2)
            ratios[label + "_samples"] = "%d/%d" % (len(groups[(prog, "off")]), len(groups[(prog, "on")]))
    for label, prog, field in (("write_lat_typical", "write_lat", "lat_us"), ("write_bw", "write_bw", "tput_MBps")):
        for arm in ("on", "ctl"):
            p = paired(rows, prog, field, arm)
            if p:
                ratios["%s_%s_over_off_pairs" % (label, arm)] = p
    failed = [r["name"] for r in rows if r["must_pass"] and r["status"] == "FAIL"]
    report = {"env": env, "rows": rows, "ratios": ratios, "must_pass_failed": failed,
              "result": "FAIL" if failed else "PASS"}
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    cols = ["name", "prog", "shim", "cut", "cut_at_s", "cut_for_s", "cut_held_s", "status", "finished", "correct",
            "recovered", "cm_after_cut", "cm_fix", "links", "link_fix", "again", "again_skipped", "pause_ms", "pause_kind", "cut_to_backup_ms", "cut_from", "detect_to_backup_ms", "backup_qps", "backup_spread_ms", "home_qps", "restore_to_home_ms", "tput_MBps", "lat_us", "lat_avg_us", "elapsed_s",
            "armed_g1", "armed_g2", "shim_log_lines", "reason", "detail"]
    with open(os.path.join(out, "report.tsv"), "w") as f:
        f.write("\t".join(cols) + "\n")
        for r in rows:
            f.write("\t".join(fmt(r.get(c)) if r.get(c) is not None else "" for c in cols) + "\n")

    print("ibpath lab report  (%s, kernel %s, rdma-core %s, perftest %s, commit %s)" % (
        env.get("accel", "?"), env.get("kernel", "?"), env.get("rdma_core", "?"), env.get("perftest", "?"), env.get("commit", "?")))
    h = "%-14s %-4s %-11s %-6s %-4s %-4s %-5s %-5s %-11s %-9s %-10s %-8s %-9s %-6s  %s"
    print(h % ("program", "shim", "cut", "status", "fin", "ok", "recov", "cut@s", "pause ms", "to_backup", "home", "MB/s", "lat us", "run s", "detail"))
    print("-" * 139)
    for r in rows:
        if r.get("reason"):
            st = r["status"] if r["must_pass"] or r["status"] == "SKIP" else r["status"].lower()
            print(h % (r["prog"], r["shim"], r["cut"], st, "", "", "", "", "", "", "", "", "", "", r["reason"][:60]))
            continue
        pause = fmt(r.get("pause_ms"), "%.0f")
        if r.get("pause_kind") == "estimate":
            pause += "~"
        if not r["finished"] and r["cut"] != "none":
            pause = "failed"
        latv = fmt(r.get("lat_us"), "%.0f")
        if r.get("lat_avg_us") is not None:
            latv += "/%.0f" % r["lat_avg_us"]
        cut_at = r.get("cut_at_s") or ""
        tb = ""
        if r.get("cut_to_backup_ms") is not None:
            tb = "%.0f%s" % (r["cut_to_backup_ms"], "" if r.get("cut_from") == "command" else "*")
        elif r.get("detect_to_backup_ms") is not None:
            tb = "d+%.0f" % r["detect_to_backup_ms"]
        home = ""
        if r.get("home_qps") is not None:
            home = str(r["home_qps"])
            if r.get("restore_to_home_ms") is not None:
                home += " %.0f" % r["restore_to_home_ms"]
        recov = r.get("recovered") or ""
        if r.get("cm_after_cut") == "broken":
            recov += "!"
        if (r.get("links") or "ok") != "ok":
            recov += "#"
        print(h % (r["prog"], r["shim"], r["cut"], r["status"] if r["must_pass"] else r["status"].lower(),
                   "yes" if r["finished"] else "no", r["correct"], recov, cut_at and "%.1f" % float(cut_at),
                   pause, tb, home, fmt(r.get("tput_MBps"), "%.2f"), latv, fmt(r.get("elapsed_s") and float(r["elapsed_s"]), "%.1f"),
                   r.get("detail", "")[:60]))
    print("-" * 139)
    if ratios:
        flat = {k: v for k, v in ratios.items() if not isinstance(v, dict)}
        print("ratios (with shim / without, same run, no cut): " + ", ".join("%s=%s" % kv for kv in flat.items()))
        for k, p in ratios.items():
            if isinstance(p, dict):
                ci = " [%s, %s] at %.1f %%" % (p["ci_low"], p["ci_high"], 100 * p["ci_coverage"]) if "ci_low" in p else " (too few pairs for an interval)"
                print("  %s: median %s of %d pairs%s; pairs %s" % (k, p["median"], p["n"], ci, " ".join(map(str, p["pairs"]))))
    else:
        print("ratios: n/a (needs write_lat and write_bw rows without a cut, with and without the shim)")
    print("status: upper case = must pass (no cut, or a cut the shim must hide); lower case = reported only. pause ~ = estimate.")
    cm = ["%s (%s)" % (r["name"], r.get("cm_fix") or "not re-created") for r in rows if r.get("cm_after_cut") == "broken"]
    if cm:
        print("recov !: rdma_cm over link A broken in the cut guest after the row (its GSI QP receives no more; "
              "docs/LAB.md, Known limits): " + ", ".join(cm))
    dead = ["%s (%s; %s)" % (r["name"], r["links"], r.get("link_fix") or "not rebooted") for r in rows if (r.get("links") or "ok") != "ok"]
    if dead:
        print("recov #: a link carried no IP after the row (as when a guest's virtio-net stops sending; docs/LAB.md, Known limits): " + ", ".join(dead))
    again = ["%s (%s; retry %s)" % (r["name"], r["status"], next((a["status"] for a in rows if a["name"] == r["again"]), "lost"))
             for r in rows if r.get("again")]
    if again:
        print("run again after the guests' reboot (the first run's status in lower case, the retry's judged): " + ", ".join(again))
    unjudged = ["%s (%s; retry not run: %s)" % (r["name"], r["status"], r["again_skipped"]) for r in rows if r.get("again_skipped")]
    if unjudged:
        print("not judged, the lab's links failed under them and their retry did not fit: " + ", ".join(unjudged))
    missed = [r["name"] for r in rows if r["status"] == "MISS"]
    if missed:
        print("cut missed (MISS), the cut came after the program ended and the row tested no fault: %d rows: %s" % (len(missed), ", ".join(missed)))
    budget = [r["name"] for r in rows if r["status"] == "SKIP" and r["reason"].startswith("lab budget")]
    if budget:
        print("not run, the lab budget (LAB_BUDGET) spent: %d rows: %s" % (len(budget), ", ".join(budget)))
    print("result: %s%s" % (report["result"], (" (failed: " + ", ".join(failed) + ")") if failed else ""))
    print("report: %s/report.json, %s/report.tsv" % (out, out))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
