"""A lossy, slow link between two network namespaces, made in user space: what `tc netem` does
(random loss and a fixed delay on every IP packet, each direction), for kernels without
sch_netem (this machine kind's 6.18 has none, and no classifiers either).

    python -m pipeline_support.lossy_link NS_A DEV_A NS_B DEV_B LOSS_PCT DELAY_MS SEED STATS

opens a TUN device DEV_A inside namespace NS_A and DEV_B inside NS_B (setns(2) between the two
opens: the device stays in the namespace it was made in), prints `ready`, and then forwards every
packet one device reads to the other: a packet is dropped with probability LOSS_PCT/100, or
written DELAY_MS later. The TCP connections over it see real loss: retransmissions, backoff,
congestion windows, exactly as on a lossy wire. Nothing is proxied or reassembled.

The caller (Cluster.netem) routes one worker host's traffic to the database host through the
pair (a /32 route each way, addresses unchanged), so connections already open move onto the
lossy path at once and move back when the routes are deleted. The devices vanish with this
process. On SIGTERM it writes {"forwarded": n, "dropped": n} to STATS and exits; it also exits
when its parent dies, so it never outlives the test.
"""

from __future__ import annotations

import ctypes
import fcntl
import heapq
import json
import os
import random
import select
import signal
import struct
import sys
import time
from pathlib import Path

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
CLONE_NEWNET = 0x40000000
MAX_PACKET = 65536
# The most packets held at once (each direction's delay queue); beyond it a packet is dropped,
# as a full qdisc would. Bounds memory whatever the traffic.
MAX_QUEUED = 10_000


def enter_namespace(name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {name}")
    finally:
        os.close(fd)


def open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def forward(a: int, b: int, loss: float, delay_s: float, rng: random.Random, stats: dict[str, int]) -> None:
    parent = os.getppid()
    queue: list[tuple[float, int, int, bytes]] = []
    seq = 0
    other = {a: b, b: a}
    while os.getppid() == parent:
        timeout = max(0.0, queue[0][0] - time.monotonic()) if queue else 0.5
        readable, _, _ = select.select([a, b], [], [], min(timeout, 0.5))
        now = time.monotonic()
        for fd in readable:
            packet = os.read(fd, MAX_PACKET)
            if rng.random() < loss or len(queue) >= MAX_QUEUED:
                stats["dropped"] += 1
                continue
            seq += 1
            heapq.heappush(queue, (now + delay_s, seq, other[fd], packet))
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            _, _, out, packet = heapq.heappop(queue)
            try:
                os.write(out, packet)
                stats["forwarded"] += 1
            except OSError:  # the device is down (the link being torn down): the packet is lost
                stats["dropped"] += 1


def main(argv: list[str]) -> int:
    ns_a, dev_a, ns_b, dev_b, loss_pct, delay_ms, seed, stats_path = argv
    enter_namespace(ns_a)
    a = open_tun(dev_a)
    enter_namespace(ns_b)
    b = open_tun(dev_b)
    stats = {"forwarded": 0, "dropped": 0}

    def stop(*_: object) -> None:
        Path(stats_path).write_text(json.dumps(stats))
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    print("ready", flush=True)
    forward(a, b, float(loss_pct) / 100, int(delay_ms) / 1000, random.Random(int(seed)), stats)
    stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
