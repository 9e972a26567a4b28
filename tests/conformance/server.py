"""A real Flask-Limiter server for retrysim's calibration (tests/conformance/run.sh).

Three endpoints, each limited for the whole fleet (one key for every
caller), with Flask-Limiter's default headers and its default HTML 429 page:

  POST /fixed/v1/jobs    30 per 1 second, the `fixed-window` strategy of `limits`
  POST /moving/v1/jobs   30 per 1 second, the `moving-window` strategy of `limits`
  POST /fixed10/v1/jobs  10 per 1 second, fixed window: fewer slots than a
                         fleet of 8 needs, where the production presets met
                         the truncated Retry-After

What Flask-Limiter 4.1 then sends on every answer (read from its source,
`flask_limiter/_extension.py`, and from `limits/strategies.py` and
`limits/storage/memory.py`):
  X-RateLimit-Limit      30
  X-RateLimit-Remaining  what is left in the window
  X-RateLimit-Reset      int(reset + 1): the reset as whole Unix seconds, rounded up
  Retry-After            int(X-RateLimit-Reset - now): truncated, so it can be 0
and waitress adds `Date` in whole seconds (rounded down). The fixed window
starts at the first hit after the last one expired and counts refused hits;
the moving window counts accepted hits in the trailing second only.

A ledger beside the limiter records every answer: each 2xx is one charge
against its `Idempotency-Key` (the server does not deduplicate, so a key
charged twice shows up). `GET /__stats` returns the ledger as JSON and
`POST /__reset` clears it and both limiters.

Usage: server.py [--port-file FILE]. It binds 127.0.0.1 on a free port,
prints `listening on http://127.0.0.1:PORT` (and writes PORT to FILE), and
serves until it is killed.
"""

import argparse
import os
import sys
import threading

from flask import Flask, jsonify, request
from flask_limiter import Limiter
from waitress import create_server
from werkzeug.middleware.dispatcher import DispatcherMiddleware

LIMIT = "30 per 1 second"
LIMIT_10 = "10 per 1 second"


class Ledger:
    """Every answer of the jobs endpoints, and every charge per key."""

    def __init__(self):
        self.lock = threading.Lock()
        self._clear()

    def _clear(self):
        self.requests = 0
        self.limited = 0
        self.other = 0
        self.unkeyed_charges = 0
        self.charges = {}

    def reset(self):
        with self.lock:
            self._clear()

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


LEDGER = Ledger()


def jobs_app(strategy, limit=LIMIT):
    """One Flask app with one limiter of the given `limits` strategy and limit."""
    app = Flask(f"jobs-{strategy}-{limit}")
    app.config.update(
        RATELIMIT_HEADERS_ENABLED=True,
        RATELIMIT_STORAGE_URI="memory://",
        RATELIMIT_STRATEGY=strategy,
    )
    # One budget for the whole fleet, as an API key's budget would be.
    limiter = Limiter(key_func=lambda: "fleet", app=app)

    @app.post("/v1/jobs")
    @limiter.limit(limit)
    def create_job():
        return jsonify({"id": "job", "key": request.headers.get("Idempotency-Key")}), 201

    @app.after_request
    def record(response):
        if request.path == "/v1/jobs":
            LEDGER.record(response.status_code, request.headers.get("Idempotency-Key"))
        return response

    return app, limiter


def build():
    fixed, fixed_limiter = jobs_app("fixed-window")
    moving, moving_limiter = jobs_app("moving-window")
    fixed10, fixed10_limiter = jobs_app("fixed-window", LIMIT_10)
    root = Flask("conformance")

    @root.get("/__stats")
    def stats():
        return jsonify(LEDGER.stats())

    @root.post("/__reset")
    def reset():
        LEDGER.reset()
        fixed_limiter.reset()
        moving_limiter.reset()
        fixed10_limiter.reset()
        return jsonify({"reset": True})

    return DispatcherMiddleware(root, {"/fixed": fixed, "/moving": moving, "/fixed10": fixed10})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port-file", help="write the chosen port to this file")
    args = parser.parse_args()
    # 16 threads: the 8 workers of a run never wait for a free thread.
    server = create_server(build(), host="127.0.0.1", port=0, threads=16, ident="conformance")
    port = server.effective_port
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as f:
            f.write(f"{port}\n")
        os.replace(args.port_file + ".tmp", args.port_file)
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    try:
        server.run()
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
