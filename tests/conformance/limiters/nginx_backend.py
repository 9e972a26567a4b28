"""The backend behind nginx's limit_req for retrysim's calibration
(tests/conformance/limiters/run.sh; nginx.conf.in proxies to it).

  POST /v1/jobs   201 {"id": "job"}: what nginx lets through
  GET /__stats    the ledger, read from nginx's access log of the jobs
                  endpoints (one line per answer: status and Idempotency-Key),
                  with the fields tests/conformance/server.py's ledger has
                  (`limited` counts 429s) and `unavailable`, the 503s
                  (nginx's default refusal)
  POST /__reset   truncates the access log, then waits 1.2 s: nginx keeps
                  limit_req's state (no reset), and every bucket of
                  nginx.conf.in (10 r/s, burst at most 10) drains in 1.1 s

Usage: nginx_backend.py --ledger ACCESS_LOG --port-file FILE. Python's
standard library only; binds 127.0.0.1 on a free port, writes it to FILE,
and serves until it is killed.
"""

import argparse
import json
import os
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DRAIN_S = 1.2


def ledger_stats(path):
    requests = limited = unavailable = other = unkeyed = 0
    charges = {}
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        lines = []
    for line in lines:
        status, _, key = line.partition(" ")
        if not status.isdigit():
            continue
        requests += 1
        code = int(status)
        if 200 <= code < 300:
            if key in ("", "-"):
                unkeyed += 1
            else:
                charges[key] = charges.get(key, 0) + 1
        elif code == 429:
            limited += 1
        elif code == 503:
            unavailable += 1
        else:
            other += 1
    twice = sorted(k for k, n in charges.items() if n > 1)
    return {
        "requests": requests,
        "limited": limited,
        "unavailable": unavailable,
        "other": other,
        "charges": sum(charges.values()) + unkeyed,
        "keys": len(charges),
        "unkeyed_charges": unkeyed,
        "keys_charged_twice": len(twice),
        "max_charges_per_key": max(charges.values(), default=0),
        "twice_examples": twice[:5],
    }


def handler(ledger):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self, status, value):
            body = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            if self.path == "/v1/jobs":
                self.answer(201, {"id": "job"})
            elif self.path == "/__reset":
                with open(ledger, "r+") as f:
                    f.truncate(0)
                time.sleep(DRAIN_S)
                self.answer(200, {"reset": True})
            else:
                self.answer(404, {"error": "no route"})

        def do_GET(self):
            if self.path == "/__stats":
                self.answer(200, ledger_stats(ledger))
            else:
                self.answer(404, {"error": "no route"})

        def log_message(self, *args):
            pass

    return Handler


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledger", required=True, help="nginx's access log of the jobs endpoints")
    parser.add_argument("--port-file", required=True, help="write the chosen port to this file")
    args = parser.parse_args()
    open(args.ledger, "a").close()
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(args.ledger))
    with open(args.port_file + ".tmp", "w") as f:
        f.write(f"{server.server_address[1]}\n")
    os.replace(args.port_file + ".tmp", args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
