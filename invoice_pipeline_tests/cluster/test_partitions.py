"""Real hosts in network namespaces: a zombie cut off or frozen past the TTL, and a short cut.

Builds a Cluster (pipeline_support.netns): a database host and three worker hosts. Skips with
one line without root or without `ip`. Each trial is the chaos scenario's own (chaos.partitions).
"""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from chaos.common import AUDIT_SQL, ScenarioResult, check_common_invariants
from chaos.partition_trial import HEARTBEAT_S, TTL_S
from chaos.partitions import trial_one
from invoice_pipeline.db.migrate import migrate
from invoice_pipeline_tests.tools import needs_tool
from pipeline_support.netns import Cluster, unavailable_reason

pytestmark = needs_tool("network namespaces", unavailable_reason())


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Cluster, str]]:
    with Cluster(3) as c:
        url = c.create_database("partitions")
        migrate(url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(AUDIT_SQL)
        yield c, url


def _trial(
    cluster: tuple[Cluster, str], tmp_path: Path, n: int, kind: str, self_fence: bool
) -> tuple[ScenarioResult, dict[str, Any]]:
    c, url = cluster
    result = ScenarioResult("partitions", n, {})
    figures: dict[str, Any] = {kind: {"trials": 0}}
    takeovers: list[float] = []
    trial_one(
        c,
        url,
        tmp_path,
        n,
        kind,
        self_fence,
        TTL_S,
        HEARTBEAT_S,
        random.Random(n),
        result,
        figures,
        takeovers,
    )
    check_common_invariants(url, result, audited=True)
    assert result.violations == [], result.violations
    return result, figures[kind] | {"takeovers": takeovers}


def test_a_cut_past_the_ttl_is_taken_over_and_every_zombie_write_is_refused(
    cluster: Any, tmp_path: Path
) -> None:
    _, fig = _trial(cluster, tmp_path, 0, "cut_long", self_fence=False)
    assert fig["takeovers"], "another host took the invoices over"
    assert fig["zombie_writes_attempted"] > 0
    assert fig["zombie_writes_refused"] == fig["zombie_writes_attempted"]
    assert fig["zombie_writes_accepted"] == 0


def test_a_self_fencing_zombie_abandons_its_chunk_without_writing(cluster: Any, tmp_path: Path) -> None:
    _, fig = _trial(cluster, tmp_path, 1, "cut_long", self_fence=True)
    assert fig["zombie_writes_attempted"] == 0
    assert fig["zombie_self_fenced_invoices"] > 0


def test_a_cut_shorter_than_the_ttl_causes_no_takeover_and_no_double_work(
    cluster: Any, tmp_path: Path
) -> None:
    _, fig = _trial(cluster, tmp_path, 2, "cut_short", self_fence=True)
    assert fig["zombie_resumed_and_finished"] == 1
    assert "takeover_s" not in fig


def test_a_frozen_host_is_taken_over_and_refused_when_it_wakes(cluster: Any, tmp_path: Path) -> None:
    _, fig = _trial(cluster, tmp_path, 3, "freeze", self_fence=False)
    assert fig["takeovers"]
    assert fig["zombie_writes_refused"] > 0
    assert fig["zombie_writes_accepted"] == 0


ROUND_TRIPS = """
import sys, time, psycopg
with psycopg.connect(sys.argv[1], connect_timeout=30) as conn:
    times = []
    for _ in range(int(sys.argv[2])):
        t = time.monotonic()
        conn.execute("SELECT 1").fetchone()
        times.append(time.monotonic() - t)
print(min(times))
"""

# ICMP echoes (a raw socket: root), one every 20 ms: a datagram is lost or delayed on its own,
# with none of the retransmission backoff that made 30 query round trips over this link take
# 60-130 s (half of all round trips lose a packet, and each loss in a row doubles TCP's wait).
# Prints how many echoes were answered and the fastest answer. Replies still on their way
# `grace` seconds after the last echo went out are not waited for: they are counted as lost here,
# the link's own counts (below) are what the loss is judged by.
ECHOES = """
import os, select, socket, struct, sys, time
dest, count, gap, grace = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
ident, payload = os.getpid() & 0xFFFF, b"lossy-link-probe"
def checksum(data):
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    return ~(total + (total >> 16)) & 0xFFFF
sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
sent, rtts = {}, []
def receive(until):
    while sent and select.select([sock], [], [], max(0.0, until - time.monotonic()))[0]:
        packet = sock.recv(2048)
        start = (packet[0] & 0x0F) * 4
        kind, _, _, who, seq = struct.unpack("!BBHHH", packet[start:start + 8])
        if kind == 0 and who == ident and seq in sent:
            rtts.append(time.monotonic() - sent.pop(seq))
for seq in range(count):
    body = struct.pack("!BBHHH", 8, 0, 0, ident, seq) + payload
    sent[seq] = time.monotonic()
    sock.sendto(struct.pack("!BBHHH", 8, 0, checksum(body), ident, seq) + payload, (dest, 0))
    receive(time.monotonic() + gap)
receive(time.monotonic() + grace)
print(len(rtts), min(rtts))
"""


def test_a_lossy_link_loses_and_delays_packets_each_way_then_heals(cluster: Any) -> None:
    """Cluster.netem itself: 30 % loss and 200 ms each way, measured from the worker host (the
    fastest of 64 ICMP echoes answered across the link is at least both delays), undone by
    clear_netem (a query connection is fast again)."""
    c, _ = cluster

    def fastest_round_trip(n: int) -> float:
        done = subprocess.run(
            ["ip", "netns", "exec", c.ns(2), sys.executable, "-c", ROUND_TRIPS, c.host_url(2, "partitions"), str(n)],
            capture_output=True, text=True, timeout=300, check=True,
        )  # fmt: skip
        return float(done.stdout.strip())

    assert fastest_round_trip(5) < 0.1
    rule = c.netem(2, loss_pct=30, delay_ms=200, seed=5)
    try:
        echoes = subprocess.run(
            ["ip", "netns", "exec", c.ns(2), sys.executable, "-c", ECHOES, c.db_address(2), "64", "0.02", "1.5"],
            capture_output=True, text=True, timeout=300, check=True,
        )  # fmt: skip
    finally:
        packets = c.clear_netem(2)
    answered, fastest = echoes.stdout.split()
    assert int(answered) > 0, (rule, echoes.stdout)
    assert float(fastest) >= 0.4, (rule, echoes.stdout)
    if rule.startswith("user-space"):
        sent = packets["forwarded"] + packets["dropped"]
        assert sent >= 60, packets
        assert 0.15 <= packets["dropped"] / sent <= 0.45, packets
    assert fastest_round_trip(5) < 0.1


def test_a_host_on_a_lossy_slow_link_finishes_less_and_breaks_nothing(cluster: Any, tmp_path: Path) -> None:
    _, fig = _trial(cluster, tmp_path, 4, "lossy", self_fence=True)
    print(fig)
    (shaped,) = fig["shaped_host_invoices"]
    assert shaped < min(fig["clean_host_invoices"]), fig
