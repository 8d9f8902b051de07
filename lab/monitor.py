#!/usr/bin/env python3
"""lab/monitor.py: send one command to a QEMU human monitor (unix socket)
and print its reply.

usage: monitor.py SOCKET COMMAND...     e.g. monitor.py run/g1.mon set_link n0 off
Exit status 0 when the command was sent and QEMU answered with a new prompt
without an error message, 1 otherwise.
"""
import socket
import sys
import time


def read_prompt(s, deadline):
    buf = b""
    while not buf.rstrip().endswith(b"(qemu)"):
        s.settimeout(max(0.05, deadline - time.time()))
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    return buf.decode("utf-8", "replace")


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    cmd = " ".join(sys.argv[2:])
    deadline = time.time() + 5
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    read_prompt(s, deadline)  # banner
    s.sendall((cmd + "\n").encode())
    reply = read_prompt(s, deadline)
    s.close()
    # the monitor echoes the command (with terminal escapes), then the reply
    lines = [l for l in reply.replace("\r", "").split("\n") if l.strip() and "(qemu)" not in l]
    out = [l for l in lines if cmd not in l]
    for l in out:
        print(l)
    bad = any(w in l.lower() for l in out for w in ("error", "not found", "unknown", "invalid"))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
