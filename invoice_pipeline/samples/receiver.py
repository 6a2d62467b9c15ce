"""A real HTTP receiver on loopback for the webhook target (tests, chaos, benchmarks, the demo).

It records every request (headers and body), checks the HMAC signature when given the secret,
and accepts each key once, as an idempotent ERP does: a repeated `Idempotency-Key` is answered
200 again but not booked a second time. So a posting that arrives under two keys is booked
twice: `booked` counts, per posting id in the bodies, the distinct keys accepted for it (exactly
once is 1 for every posting). On command it answers with a status,
hangs (the client times out), holds the answer until `release_held()` (then answers as
`default` does), or closes the connection without an answer: `then(...)` queues actions for the
next requests, `default` answers the rest.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import ssl
import threading
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SIGNATURE_HEADER = "X-Invoice-Pipeline-Signature"


class _QuietServer(ThreadingHTTPServer):
    """A client killed mid-request (the crash tests' point) resets its connection: expected, not logged."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


@dataclass(frozen=True)
class Received:
    key: str | None
    body: bytes
    signature_ok: bool | None
    answered: str  # the action taken: "200", "500", "hang", "close", ...

    def json(self) -> Any:
        return json.loads(self.body)


class WebhookReceiver:
    """`with WebhookReceiver(secret) as r:` serves on 127.0.0.1:`r.port`; `r.url` to post to."""

    def __init__(
        self, secret: bytes | None = None, default: str = "200", tls: tuple[Path, Path] | None = None
    ) -> None:
        self.secret = secret
        self.default = default
        self.requests: list[Received] = []
        # key -> the posting it was first accepted for; every 2xx answered per key.
        self.accepted: dict[str, str] = {}
        self.acknowledged: Counter[str] = Counter()
        self._script: list[str] = []
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._held_gate = threading.Event()
        self.held = 0  # requests that reached a "hold" (counted on arrival, before their answer)
        self.arrived = threading.Condition(self._lock)
        self._server = _QuietServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.scheme = "http"
        if tls is not None:  # (certificate, key): HTTPS
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            self.scheme = "https"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="webhook-receiver", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}/postings"

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._held_gate.set()
        self._server.shutdown()
        self._server.server_close()

    def then(self, *actions: str) -> None:
        """The next requests' answers, in order: a status ("500", "429", "400"), "hang", "hold", "close"."""
        with self._lock:
            self._script.extend(actions)

    def answer_every_request(self, action: str) -> None:
        """From now on every request gets `action`: the scripted answers not used yet are dropped."""
        with self._lock:
            self._script.clear()
            self.default = action

    def wait_for(self, count: int, timeout: float = 30) -> None:
        """Until `count` requests have arrived (an event, not a sleep)."""
        with self.arrived:
            if not self.arrived.wait_for(lambda: len(self.requests) >= count, timeout):
                raise TimeoutError(f"{len(self.requests)} of {count} requests arrived")

    def wait_held(self, count: int, timeout: float = 60) -> None:
        """Until `count` requests are held by "hold", unanswered (an event, not a sleep)."""
        with self.arrived:
            if not self.arrived.wait_for(lambda: self.held >= count, timeout):
                raise TimeoutError(f"{self.held} of {count} requests held")

    def release_held(self) -> None:
        """Answer the held requests (and any later "hold") as `default` does."""
        self._held_gate.set()

    def booked(self) -> Counter[str]:
        """Per posting id: how many times the ERP booked it (distinct keys accepted for it)."""
        with self._lock:
            return Counter(self.accepted.values())

    def _next_action(self) -> str:
        with self._lock:
            return self._script.pop(0) if self._script else self.default

    def _record(self, received: Received) -> None:
        with self.arrived:
            self.requests.append(received)
            if received.answered.startswith("2") and received.key is not None:
                # An idempotent ERP: the first request with a key is booked, a repeat is not.
                self.acknowledged[received.key] += 1
                if received.key not in self.accepted:
                    self.accepted[received.key] = str(received.json().get("posting_id"))
            self.arrived.notify_all()

    def _signature_ok(self, body: bytes, header: str | None) -> bool | None:
        if self.secret is None:
            return None
        expected = "sha256=" + hmac.new(self.secret, body, hashlib.sha256).hexdigest()
        return header is not None and hmac.compare_digest(expected, header)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # The answer's headers and body are two writes: without this, Nagle holds the
                # body until the client's delayed ACK (40 ms), and the receiver, not the
                # deliverer, would set the pace.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                action = receiver._next_action()
                if action == "hold":
                    with receiver.arrived:
                        receiver.held += 1
                        receiver.arrived.notify_all()
                    receiver._held_gate.wait(120)
                    action = receiver.default
                key = self.headers.get("Idempotency-Key")
                ok = receiver._signature_ok(body, self.headers.get(SIGNATURE_HEADER))
                if ok is False and action.startswith("2"):
                    action = "401"
                receiver._record(Received(key, body, ok, action))
                if action == "hang":
                    receiver._release.wait(120)
                    self.close_connection = True
                    return
                if action == "close":
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                answer = json.dumps({"status": action, "key": key}).encode()
                self.send_response(int(action))
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        return Handler
