#!/usr/bin/env python3
"""lab/monitor.py: send one command to a QEMU human monitor (unix socket)
and print its reply.

usage: monitor.py SOCKET COMMAND...     e.g. monitor.py run/g1.mon set_link n0 off

COMMAND may be a script: commands separated by ";", among them "sleep S"
(seconds), sent one after the other on one connection (no process start
or connect between them: the lab's flap3 pulls, whose spacing matters).
Exit status 0 when every command was sent and QEMU answered each with a
new prompt without an error message, 1 otherwise.
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
    script = [c.strip() for c in " ".join(sys.argv[2:]).split(";") if c.strip()]
    for c in script:
        if c.startswith("sleep "):
            try:
                float(c.split()[1])
            except (IndexError, ValueError):
                sys.exit("monitor.py: bad step %r (want sleep SECONDS)" % c)
    try:
        sys.exit(run(sys.argv[1], script))
    except OSError as e:
        sys.exit("monitor.py: %s: %s" % (sys.argv[1], e))


def run(path, script):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    read_prompt(s, time.time() + 5)  # banner
    bad = False
    for cmd in script:
        if cmd.startswith("sleep "):
            time.sleep(float(cmd.split()[1]))
            continue
        s.sendall((cmd + "\n").encode())
        reply = read_prompt(s, time.time() + 5)
        # the monitor echoes the command (with terminal escapes), then the reply
        lines = [l for l in reply.replace("\r", "").split("\n") if l.strip() and "(qemu)" not in l]
        out = [l for l in lines if cmd not in l]
        for l in out:
            print(l)
        bad = bad or any(w in l.lower() for l in out for w in ("error", "not found", "unknown", "invalid"))
    s.close()
    return 1 if bad else 0


if __name__ == "__main__":
    main()
