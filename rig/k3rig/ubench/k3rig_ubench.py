"""Fake ubench 07_ualoe tools for the simulated rack (stdlib only; runs on a node as
``/opt/k3rig/bin/k3rig-ubench.py <tool> <args>`` behind the ``ualoe-tool`` wrapper).

They behave like the real tools at the process and network level (reference §8): the
exporter/listener really listens on TCP at the node's data-plane address (the address
the SSH session came in on), the importer/connector really connects and exchanges a JSON
handshake, and each side prints the result lines / bandwidth table.  What the fabric
"does" comes from the node's fixture data, ``/opt/k3rig/data/ubench/config.json`` with
``scenario.json`` merged on top, of both ends of the pair:

- ``p2p``: ``ok`` | ``fail`` (importer prints the ``[FATAL] ... hipMemSetAccess`` line and its
  node's kernel log gains ``IMPORT: NPA-RSP timeout from remote AccId:<exporter's id>`` lines;
  the exporter's log stays empty) | ``hang`` (importer prints nothing and never returns);
- ``bw``: ``{read, write, bidir}`` GB/s of this node; a pair runs at the lower end per figure.

A bandwidth listener whose peer disappears mid-session never exits (the stale listener of
§8 pitfall 2).
"""
from __future__ import annotations

import json
import os
import re
import socket
import sys
import time

DATA = "/opt/k3rig/data/ubench"
DMESG = "/opt/k3rig/data/dmesg/@noargs/stdout"
GPUS = 4
SPLIT = (0.002, -0.001, 0.0005, -0.0015)  # per-GPU-pair share deviations (sum 0)


def config() -> dict:
    cfg = {}
    for name in ("config.json", "scenario.json"):
        path = os.path.join(DATA, name)
        if os.path.exists(path):
            with open(path) as f:
                cfg.update(json.load(f))
    return cfg


def accel_id(gpu: int) -> int:
    with open(f"/sys/class/drm/card{gpu}/device/ualink/accel_id") as f:
        return int(f.read())


def my_address() -> str:
    """The data-plane address: the one this node was reached at (rig nodes share the host network)."""
    fields = os.environ.get("SSH_CONNECTION", "").split()
    return fields[2] if len(fields) == 4 else "127.0.0.1"


def say(line: str) -> None:
    print(line, flush=True)


def send(conn, msg: dict) -> None:
    conn.sendall((json.dumps(msg) + "\n").encode())


def recv(stream) -> dict | None:
    line = stream.readline()
    return json.loads(line) if line else None


def listen(port: int) -> socket.socket:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        srv.bind((my_address(), port))
    except OSError as exc:
        say(f"[FATAL] bind({my_address()}:{port}) -> {exc.strerror}")
        sys.exit(1)
    srv.listen(1)
    return srv


def connect(peer: str, port: int):
    try:
        conn = socket.create_connection((peer, port), timeout=10)
    except OSError as exc:
        say(f"[FATAL] connect({peer}:{port}) -> {exc.strerror or exc}")
        sys.exit(1)
    conn.settimeout(None)
    return conn, conn.makefile("r")


def kernel_log(lines: list) -> None:
    """Append lines to this node's fake kernel log, after its last timestamp."""
    with open(DMESG) as f:
        stamps = re.findall(r"^\[\s*(\d+\.\d+)\]", f.read(), re.MULTILINE)
    t = float(stamps[-1]) if stamps else 0.0
    with open(DMESG, "a") as f:
        for i, text in enumerate(lines, start=1):
            f.write(f"[{t + 3.5 * i:12.6f}] {text}\n")


def gpus(args: dict) -> list:
    return [int(args["gpu"])] if "gpu" in args else list(range(GPUS))


def p2p_export(args: dict, cfg: dict) -> int:
    ids = [accel_id(g) for g in gpus(args)]
    srv = listen(int(args["port"]))
    say(f"[INFO] ualoe_p2p export: GPU(s) {gpus(args)} AccId {ids}, listening on {my_address()}:{args['port']}")
    conn, _ = srv.accept()
    stream = conn.makefile("r")
    send(conn, {"accids": ids, "p2p": cfg.get("p2p", "ok")})
    peer = recv(stream)
    say(f"[INFO] exported {len(ids)} fabric handle(s) to AccId {peer['accids'] if peer else '?'}")
    result = recv(stream)
    if not result:
        say("[ERROR] peer closed the connection before reporting the result")
        return 1
    n = len(ids)
    say(f"RESULT OK: {n}/{n} pairs PASS" if result.get("ok") else f"RESULT FAIL: 0/{n} pairs PASS")
    return 0 if result.get("ok") else 1


def p2p_import(args: dict, cfg: dict) -> int:
    ids = [accel_id(g) for g in gpus(args)]
    conn, stream = connect(args["peer_ip"], int(args["port"]))
    peer = recv(stream)
    send(conn, {"accids": ids, "p2p": cfg.get("p2p", "ok")})
    modes = {cfg.get("p2p", "ok"), peer["p2p"]}
    say(f"[INFO] ualoe_p2p import: GPU(s) {gpus(args)} AccId {ids}, {len(peer['accids'])} handle(s) received")
    if "hang" in modes:
        while True:
            time.sleep(3600)
    if "fail" in modes:
        kernel_log([f"amdgpu {g:04x}:01:00.0: IMPORT: NPA-RSP timeout from remote AccId:{remote}"
                    for g, remote in zip(gpus(args), peer["accids"], strict=False)])
        say("[FATAL] ualoe_p2p.cpp:49 hipMemSetAccess(...) -> invalid argument")
        return 1
    send(conn, {"ok": True})
    n = len(ids)
    say(f"RESULT OK: {n}/{n} pairs PASS")
    return 0


def bw_listen(args: dict, cfg: dict) -> int:
    srv = listen(int(args["port"]))
    say(f"[INFO] ualoe_bw listen on {my_address()}:{args['port']}")
    conn, _ = srv.accept()
    stream = conn.makefile("r")
    hello = recv(stream)
    if hello:
        send(conn, {"bw": cfg["bw"]})
        if recv(stream):  # the connector's "done"
            say("[INFO] session complete")
            return 0
    conn.close()
    while True:  # the peer died: this side holds its port (and, for real, device memory) forever
        time.sleep(3600)


def bw_connect(args: dict, cfg: dict) -> int:
    conn, stream = connect(args["peer_ip"], int(args["port"]))
    send(conn, {"bw": cfg["bw"]})
    peer = recv(stream)
    figures = {m: min(cfg["bw"][m], peer["bw"][m]) for m in ("read", "write", "bidir")}
    say(f"[INFO] ualoe_bw connect: peer {args['peer_ip']}:{args['port']}, {GPUS} GPU pair(s), 1 GiB transfers")
    say(f"{'GPU pair':<12}{'read (GB/s)':>14}{'write (GB/s)':>15}{'bidir (GB/s)':>15}")
    for g, d in enumerate(SPLIT):
        row = [figures[m] / GPUS * (1 + d) for m in ("read", "write", "bidir")]
        say(f"{f'{g} <-> {g}':<12}{row[0]:>14.2f}{row[1]:>15.2f}{row[2]:>15.2f}")
    say(f"{'total':<12}{figures['read']:>14.2f}{figures['write']:>15.2f}{figures['bidir']:>15.2f}")
    send(conn, {"done": True})
    return 0


MODES = {("ualoe_p2p.exe", "export"): p2p_export, ("ualoe_p2p.exe", "import"): p2p_import,
         ("ualoe_bw.exe", "listen"): bw_listen, ("ualoe_bw.exe", "connect"): bw_connect}


def main(argv: list) -> int:
    tool, mode = argv[0], (argv[1] if len(argv) > 1 else "")
    args = dict(a.lstrip("-").split("=", 1) for a in argv[2:] if "=" in a)
    fn = MODES.get((tool, mode))
    if fn is None:
        say(f"usage: {tool} {'export|import' if 'p2p' in tool else 'listen|connect'} -port=N [-peer_ip=IP] [-gpu=N]")
        return 2
    return fn(args, config())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
