#!/usr/bin/env python3
"""Minimal QMP client for the VM tests, run inside a host next to a nested QEMU.

    qmp.py SOCKET COMMAND_JSON [--wait-event NAME] [--timeout SECONDS]

Negotiates capabilities, sends one command, prints its reply as JSON. With
--wait-event it then waits for that event (e.g. DEVICE_DELETED) and prints it.
Exit status: 0 on success, 1 if QMP returned an error, 2 on timeout or I/O
trouble.
"""
import argparse
import json
import socket
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("socket")
    ap.add_argument("command")
    ap.add_argument("--wait-event")
    ap.add_argument("--timeout", type=float, default=30.0)
    args = ap.parse_args()
    deadline = time.monotonic() + args.timeout

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(args.timeout)
    s.connect(args.socket)
    f = s.makefile("rw")

    def read():
        s.settimeout(max(0.1, deadline - time.monotonic()))
        line = f.readline()
        if not line:
            raise EOFError("QMP closed the connection")
        return json.loads(line)

    def send(obj):
        f.write(json.dumps(obj) + "\n")
        f.flush()

    read()  # greeting
    send({"execute": "qmp_capabilities"})
    while "return" not in read():
        pass
    send(json.loads(args.command))
    events = []
    while True:
        msg = read()
        if "event" in msg:
            events.append(msg)
            continue
        print(json.dumps(msg))
        if "error" in msg:
            return 1
        break
    if args.wait_event:
        for ev in events:
            if ev["event"] == args.wait_event:
                print(json.dumps(ev))
                return 0
        while True:
            ev = read()
            if ev.get("event") == args.wait_event:
                print(json.dumps(ev))
                return 0
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, EOFError, ValueError) as e:
        print(f"qmp.py: {e}", file=sys.stderr)
        sys.exit(2)
