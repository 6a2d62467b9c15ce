"""The review page under attack (issue 41): an anonymous flood, password guessing, a huge page.

The page runs as the real command (`invoice-pipeline review-ui`, accounts mode, its own process),
so its memory is read from /proc without this process's load generator in it.

- **Flood**: N anonymous requests (no cookie, each on a new connection's worth of nothing: the
  page's login form) from 4 threads; the server's resident memory before, during and after.
- **Guessing**: the p95 of a logged-in reviewer's queue page, idle, then while 4 threads guess
  passwords at full speed. Twice: from one address other than the reviewer's (its request
  budget, then the login throttle, answer 429 without hashing),
  and spread over 250 loopback source addresses with random names (no throttle applies: every
  guess costs a scrypt in the bounded login pool). The guessers are processes of their own.
- **Huge page**: a 1 KB PDF with a 3,500 mm page: what refusing its image costs (wall time, the
  server's and the sandbox worker's peak memory).
"""

from __future__ import annotations

import http.client
import http.cookiejar
import io
import json
import multiprocessing
import os
import re
import secrets
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.harness import BenchContext, BenchResult, Check, Figure, register
from invoice_pipeline.engine.reviewers import add_user
from invoice_pipeline.engine.store import InvoiceStore
from pipeline_support.helpers import free_port

# Made anew every run: no password lives in the repository.
PASSWORD = secrets.token_urlsafe(16)
GUESSERS = 4
P95_FACTOR_TARGET = 2.0
# The page's budget (default 200 at once, then 50/s per address) would answer most of a flood
# from one address with 429: the flood comes from 4 x 60 addresses.
FLOOD_ADDRESSES_PER_THREAD = 60
# The guessers' one address when not spread: not the measuring reviewer's (127.0.0.1), whose
# requests the budget must keep serving.
GUESSER_ADDRESS = "127.0.0.2"
REFUSE_MS_TARGET = 2000.0
REFUSE_MB_TARGET = 100.0


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():  # a worker started from any of its threads
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


class _Browser:
    def __init__(self, base: str) -> None:
        self.base = base
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        )

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with self.opener.open(self.base + path, timeout=60) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def log_in(self, name: str, password: str) -> int:
        page = self.get("/login")[1].decode()
        token = re.search(r'name="csrf" value="([^"]*)"', page)
        assert token is not None
        data = urllib.parse.urlencode({"csrf": token.group(1), "name": name, "password": password}).encode()
        try:
            with self.opener.open(self.base + "/login", data=data, timeout=60) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code


def _flood(port: int, count: int, threads: int) -> int:
    """`count` anonymous GET /login, no cookies sent back, over keep-alive connections; each
    thread's from FLOOD_ADDRESSES_PER_THREAD source addresses in turn, so that the per-address
    request budget lets them all reach the page (what is measured is the page's memory). The
    number answered 429."""
    per = count // threads
    refused = [0] * threads

    def one(slot: int) -> None:
        conns = [
            http.client.HTTPConnection(
                "127.0.0.1", port, timeout=60, source_address=(f"127.0.{10 + slot}.{i + 1}", 0)
            )
            for i in range(FLOOD_ADDRESSES_PER_THREAD)
        ]
        for n in range(per):
            conn = conns[n % len(conns)]
            conn.request("GET", "/login", headers={"Host": f"127.0.0.1:{port}"})
            response = conn.getresponse()
            response.read()
            refused[slot] += response.status == 429
        for conn in conns:
            conn.close()

    workers = [threading.Thread(target=one, args=(slot,)) for slot in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sum(refused)


def _guess(port: int, stop: Any, spread: bool, counts: Any, slot: int) -> None:
    """Wrong passwords as fast as the page answers; `spread`: each from another 127.0.0.x
    address and name, so that no throttle applies; counts the guesses posted. Runs in its own process (the measuring
    client's latency must not include this one's GIL)."""
    n = 0
    while not stop.is_set():
        source = ("127.0.0." + str(2 + (slot * 61 + n) % 250), 0) if spread else (GUESSER_ADDRESS, 0)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60, source_address=source)
        host = {"Host": f"127.0.0.1:{port}"}
        conn.request("GET", "/login", headers=host)
        response = conn.getresponse()
        page = response.read().decode()
        if response.status == 429:  # the request budget: no form to post, try again at once
            conn.close()
            continue
        cookies = "; ".join(c.split(";", 1)[0] for c in response.headers.get_all("set-cookie") or [])
        token = re.search(r'name="csrf" value="([^"]*)"', page)
        assert token is not None
        name = f"guess{secrets.token_hex(4)}" if spread else "alice"
        body = urllib.parse.urlencode({"csrf": token.group(1), "name": name, "password": f"pw{n}"})
        conn.request(
            "POST",
            "/login",
            body=body,
            headers=host | {"Cookie": cookies, "Content-Type": "application/x-www-form-urlencoded"},
        )
        conn.getresponse().read()
        conn.close()
        n += 1
    counts[slot] = n


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


def _queue_times(reviewer: _Browser, rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        status, _ = reviewer.get("/")
        assert status == 200
        times.append((time.perf_counter() - began) * 1000)
    return times


@register(
    "review_ui_attacks", "The review page under attack: anonymous flood, password guessing, a huge page"
)
def run(ctx: BenchContext) -> BenchResult:
    import pypdfium2 as pdfium

    flood_n = ctx.pick(5_000, 100_000)
    rounds = ctx.pick(100, 400)
    url = ctx.database("review_ui_attacks")
    home = Path(tempfile.mkdtemp(prefix="review-ui-attacks-"))
    users = home / "users.json"
    add_user(users, "alice", PASSWORD, None)
    add_user(users, "bob", PASSWORD, None)
    store = InvoiceStore(url, max_size=2)
    doc = pdfium.PdfDocument.new()
    doc.new_page(3500 / 25.4 * 72, 3500 / 25.4 * 72)
    out = io.BytesIO()
    doc.save(out)
    huge = out.getvalue()
    huge_id = store.documents.store_document(huge, "org-1", "huge.pdf").invoice_id
    store.close()
    port = free_port()
    env = dict(os.environ, INVOICE_PIPELINE_DATABASE_URL=url, INVOICE_PIPELINE_HOME=str(home))
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "invoice_pipeline.cli",
            "review-ui",
            "--users",
            str(users),
            "--port",
            str(port),
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    figures: list[Figure] = []
    checks: list[Check] = []
    try:
        assert server.stdout is not None
        server.stdout.readline()  # "Review page on ..."
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/healthz", timeout=5).read()
                break
            except OSError:
                assert time.monotonic() < deadline, "the review page did not start"
                time.sleep(0.1)
        # -- flood --
        _flood(port, 2_000, 4)  # warm: templates compiled, allocator settled
        rss = [_status_kb(server.pid, "VmRSS") / 1024]
        began = time.monotonic()
        refused = 0
        for _ in range(4):
            refused += _flood(port, flood_n // 4, 4)
            rss.append(_status_kb(server.pid, "VmRSS") / 1024)
        ctx.log(f"flood: {refused} of {flood_n} answered 429 by the request budget")
        flood_s = time.monotonic() - began
        ctx.log(f"flood of {flood_n} in {flood_s:.0f} s; RSS {', '.join(f'{r:.1f}' for r in rss)} MB")
        figures.append(
            Figure(f"server RSS before and after each quarter of {flood_n:,} anonymous requests", "MB", rss)
        )
        figures.append(Figure("anonymous requests per second (4 clients)", "req/s", [flood_n / flood_s]))
        growth = rss[-1] - rss[0]
        checks.append(
            Check(
                "memory flat under an anonymous flood (< 10 MB growth)",
                growth < 10,
                f"{rss[0]:.1f} -> {rss[-1]:.1f} MB after {flood_n:,} requests",
                fatal=False,
            )
        )
        # -- guessing --
        reviewer = _Browser(base)
        assert reviewer.log_in("bob", PASSWORD) in (200, 303)
        idle = _queue_times(reviewer, rounds)
        figures.append(Figure("logged-in queue page, idle", "ms", idle))
        for spread in (False, True):
            forked = multiprocessing.get_context("fork")
            stop = forked.Event()
            counts = forked.Array("q", GUESSERS)
            guessers = [
                forked.Process(target=_guess, args=(port, stop, spread, counts, i)) for i in range(GUESSERS)
            ]
            began = time.monotonic()
            for g in guessers:
                g.start()
            time.sleep(1.0)  # the guessers at full speed before measuring
            busy = _queue_times(reviewer, rounds)
            stop.set()
            for g in guessers:
                g.join(60)
            rate = sum(counts[:]) / (time.monotonic() - began)
            label = "spread over 250 addresses, random names" if spread else "from one address"
            figures.append(Figure(f"logged-in queue page, 4 guessers {label}", "ms", busy))
            figures.append(Figure(f"guesses per second, {label}", "1/s", [rate]))
            ratio = _p95(busy) / _p95(idle)
            checks.append(
                Check(
                    f"p95 under guessing ({label}) within {P95_FACTOR_TARGET:g}x idle",
                    ratio <= P95_FACTOR_TARGET,
                    f"p95 {_p95(busy):.1f} ms vs idle {_p95(idle):.1f} ms ({ratio:.2f}x), {rate:.0f} guesses/s",
                    fatal=False,
                )
            )
        # -- a huge page --
        before = _status_kb(server.pid, "VmHWM") / 1024
        began = time.perf_counter()
        status, body = reviewer.get(f"/invoice/{huge_id}/page/1.png")
        refuse_ms = (time.perf_counter() - began) * 1000
        assert status == 422, (status, body[:200])
        server_peak = _status_kb(server.pid, "VmHWM") / 1024
        workers = _children(server.pid)
        worker_peak = max((_status_kb(w, "VmHWM") / 1024 for w in workers), default=0.0)
        began = time.perf_counter()
        reviewer.get(f"/invoice/{huge_id}/page/1.png")
        again_ms = (time.perf_counter() - began) * 1000
        figures.append(Figure(f"refusing a {len(huge)} B PDF's 3,500 mm page, first view", "ms", [refuse_ms]))
        figures.append(Figure("refusing it again (known refusal)", "ms", [again_ms]))
        figures.append(Figure("server peak RSS before / after the refusal", "MB", [before, server_peak]))
        figures.append(Figure("sandbox worker peak RSS", "MB", [worker_peak]))
        checks.append(
            Check(
                f"a page over the bound is refused in <= {REFUSE_MS_TARGET:g} ms and <= {REFUSE_MB_TARGET:g} MB",
                refuse_ms <= REFUSE_MS_TARGET and server_peak - before <= REFUSE_MB_TARGET,
                f"{refuse_ms:.0f} ms (worker start included), server peak +{server_peak - before:.1f} MB, "
                f"worker peak {worker_peak:.1f} MB",
                fatal=False,
            )
        )
    finally:
        server.terminate()
        server.wait(30)
    result = BenchResult(
        "review_ui_attacks",
        "The review page under attack (accounts mode, the real command, loopback HTTP)",
        params={"flood_requests": flood_n, "rounds": rounds, "guessers": GUESSERS},
        figures=figures,
    )
    result.checks.extend(checks)
    (ctx.out_dir / "review_ui_attacks.json").write_text(
        json.dumps({f.name: f.values for f in figures}, indent=2) + "\n"
    )
    return result
