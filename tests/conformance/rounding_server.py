"""A small Flask-Limiter-like server whose Retry-After is rounded down.

Python's standard library only: no Flask, nothing to install. One endpoint,
limited for the whole fleet (one budget for every caller):

  POST /v1/jobs   LIMIT requests per 1 s fixed window (default 10). The window
                  starts at the first hit after the last one ended, and a
                  refused hit counts, as in `limits`' fixed window. A refusal
                  is Werkzeug's HTML 429 page with no error code and
                  `Retry-After: int(reset - now)`: the time to the reset
                  rounded *down* to whole seconds, so `0` for a whole 1 s
                  window. Every answer carries `X-RateLimit-Limit`,
                  `X-RateLimit-Remaining` and a `Date` in whole seconds.

Flask-Limiter itself rounds twice (`int(int(reset + 1) - now)`) and says `1`
in part of some windows; this server says `0` in all of them, the harshest
form of the habit, which the production presets met (37 and 33
of 60 jobs done with `Policy::background()` before the rule that spreads a
zero advice over its second and escalates an advice refused again).

A ledger records every answer: each 2xx is one charge against its
`Idempotency-Key` (the server does not deduplicate, so a key charged twice
shows up). `GET /__stats` returns it as JSON (the same fields as
tests/conformance/server.py) and `POST /__reset` clears it and the window.

Usage: rounding_server.py [--limit N] [--port-file FILE]. It binds 127.0.0.1
on a free port, prints `listening on http://127.0.0.1:PORT` (and writes PORT
to FILE), and serves until it is killed. Bodies over 64 KiB are refused.
"""

import argparse
import email.utils
import json
import math
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 64 * 1024
PAGE = (
    "<!doctype html>\n<html lang=en>\n<title>429 Too Many Requests</title>\n"
    "<h1>Too Many Requests</h1>\n<p>{limit} per 1 second</p>\n"
)


class Window:
    """A fixed window of `limit` hits per second from the first hit."""

    def __init__(self, limit):
        self.limit = limit
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        self.start = None
        self.count = 0

    def hit(self, now):
        """(accepted, remaining, seconds until the window resets)."""
        with self.lock:
            if self.start is None or now >= self.start + 1.0:
                self.start, self.count = now, 0
            self.count += 1
            left = self.start + 1.0 - now
            return self.count <= self.limit, max(0, self.limit - self.count), left


class Ledger:
    def __init__(self):
        self.lock = threading.Lock()
        self.clear()

    def clear(self):
        self.requests = self.limited = self.other = self.unkeyed_charges = 0
        self.charges = {}

    def record(self, status, key):
        with self.lock:
            self.requests += 1
            if 200 <= status < 300:
                if key is None:
                    self.unkeyed_charges += 1
                else:
                    self.charges[key] = self.charges.get(key, 0) + 1
            elif status == 429:
                self.limited += 1
            else:
                self.other += 1

    def stats(self):
        with self.lock:
            twice = sorted(k for k, n in self.charges.items() if n > 1)
            return {
                "requests": self.requests,
                "limited": self.limited,
                "other": self.other,
                "charges": sum(self.charges.values()) + self.unkeyed_charges,
                "keys": len(self.charges),
                "unkeyed_charges": self.unkeyed_charges,
                "keys_charged_twice": len(twice),
                "max_charges_per_key": max(self.charges.values(), default=0),
                "twice_examples": twice[:5],
            }


def handler(window, ledger):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "rounding-server"

        def log_message(self, *args):
            pass

        def answer(self, status, body, content_type, headers=()):
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def date_time_string(self, timestamp=None):
            # Whole seconds, truncated, as waitress and http.server send it.
            return email.utils.formatdate(math.floor(time.time()), usegmt=True)

        def read_body(self):
            length = self.headers.get("Content-Length", "0")
            if not length.isdigit() or int(length) > MAX_BODY:
                self.answer(413, "body too large or no length\n", "text/plain")
                return None
            return self.rfile.read(int(length))

        def do_GET(self):
            if self.path == "/__stats":
                self.answer(200, json.dumps(ledger.stats()), "application/json")
            else:
                self.answer(404, "not found\n", "text/plain")

        def do_POST(self):
            if self.read_body() is None:
                return
            if self.path == "/__reset":
                with ledger.lock:
                    ledger.clear()
                window.reset()
                self.answer(200, json.dumps({"reset": True}), "application/json")
                return
            if self.path != "/v1/jobs":
                self.answer(404, "not found\n", "text/plain")
                return
            accepted, remaining, left = window.hit(time.time())
            limits = [("X-RateLimit-Limit", str(window.limit)), ("X-RateLimit-Remaining", str(remaining))]
            key = self.headers.get("Idempotency-Key")
            # The ledger records before the answer goes out, so that a client
            # that reads /__stats right after its last answer sees it.
            if accepted:
                ledger.record(201, key)
                body = json.dumps({"id": "job", "key": key})
                self.answer(201, body, "application/json", limits)
            else:
                ledger.record(429, key)
                retry_after = ("Retry-After", str(int(left)))
                page = PAGE.format(limit=window.limit)
                self.answer(429, page, "text/html; charset=utf-8", limits + [retry_after])

    return Handler


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=10, help="requests per 1 s window (default 10)")
    parser.add_argument("--port-file", help="write the chosen port to this file")
    args = parser.parse_args()
    if args.limit < 1:
        parser.error("--limit must be at least 1")
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(Window(args.limit), Ledger()))
    server.daemon_threads = True
    port = server.server_address[1]
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as f:
            f.write(f"{port}\n")
        os.replace(args.port_file + ".tmp", args.port_file)
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
