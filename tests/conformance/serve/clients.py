"""Real Python retry clients in front of `retrysim serve`.

Runs --jobs POST /v1/jobs on --workers threads with one of these clients:

  urllib3-429           urllib3 Retry with the usual recipe for a 429 on a POST:
                        status_forcelist=[429], allowed_methods=None (every
                        method), backoff_factor=0.1; respect_retry_after_header
                        is on by default.
  urllib3-no-retry-after  the same with respect_retry_after_header=False.
  urllib3-defaults      urllib3's default Retry(3): a POST is never retried.
  requests-adapter      requests.Session with HTTPAdapter(max_retries=) the
                        urllib3-429 Retry.
  stdlib-loop           the standard library only (http.client), as a plain
                        service writes it: up to 5 tries, a lost connection
                        retried at once, a 429 after its Retry-After seconds.

Each job's requests carry `x-retrysim-client: <client> job-<n>` unless
--no-label (then the server groups a job's requests by what they ask for),
so the server judges each job as one operation, and an Idempotency-Key (one
per job) unless --no-keys. Prints one JSON line: jobs, succeeded, and what
failed (on SIGTERM too, marked interrupted). The verdict is the server's,
not this script's.
"""

import argparse
import collections
import http.client
import json
import os
import signal
import threading
import time
import urllib.parse
import uuid

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry


def retry_429(respect_retry_after):
    return Retry(
        total=20,
        status_forcelist=[429],
        allowed_methods=None,
        backoff_factor=0.1,
        respect_retry_after_header=respect_retry_after,
        raise_on_status=False,
    )


def stdlib_loop(url, body, headers):
    """Up to 5 tries on a fresh connection each: a lost connection is retried
    at once, a 429 after its Retry-After (whole seconds)."""
    u = urllib.parse.urlsplit(url)
    for attempt in range(5):
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=5)
        try:
            conn.request("POST", u.path, body=body, headers=headers)
            res = conn.getresponse()
            res.read()
            if res.status != 429 or attempt == 4:
                return res.status
            time.sleep(int(res.getheader("retry-after") or "1"))
        except (OSError, http.client.HTTPException):
            if attempt == 4:
                raise
        finally:
            conn.close()


def sender(client, workers):
    """A function (url, body, headers) -> status, one per worker thread."""
    if client == "stdlib-loop":
        return stdlib_loop
    if client == "requests-adapter":
        local = threading.local()

        def send(url, body, headers):
            if not hasattr(local, "session"):
                local.session = requests.Session()
                local.session.mount("http://", HTTPAdapter(max_retries=retry_429(True)))
            return local.session.post(url, data=body, headers=headers, timeout=5).status_code

        return send
    retries = {
        "urllib3-429": retry_429(True),
        "urllib3-no-retry-after": retry_429(False),
        "urllib3-defaults": Retry(3),
    }[client]
    pool = urllib3.PoolManager(maxsize=workers, retries=retries, timeout=5)

    def send(url, body, headers):
        return pool.request("POST", url, body=body, headers=headers).status

    return send


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:PORT")
    p.add_argument("--client", required=True,
                   choices=["urllib3-429", "urllib3-no-retry-after", "urllib3-defaults", "requests-adapter", "stdlib-loop"])
    p.add_argument("--jobs", type=int, default=100)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--api-key", default="key-a")
    p.add_argument("--no-keys", action="store_true")
    p.add_argument("--no-label", action="store_true", help="send no x-retrysim-client header")
    args = p.parse_args()
    send = sender(args.client, args.workers)
    lock = threading.Lock()
    jobs = iter(range(args.jobs))
    outcomes = collections.Counter()

    def worker():
        while True:
            with lock:
                job = next(jobs, None)
            if job is None:
                return
            headers = {"content-type": "application/json", "x-api-key": args.api_key}
            if not args.no_label:
                headers["x-retrysim-client"] = f"{args.client} job-{job}"
            if not args.no_keys:
                headers["idempotency-key"] = uuid.uuid4().hex
            body = json.dumps({"uploadId": f"u{job}", "options": {"op": "compress"}})
            try:
                outcome = str(send(args.url + "/v1/jobs", body, headers))
            except Exception as e:  # noqa: BLE001 - every failure is an outcome to count
                outcome = type(e).__name__
            with lock:
                outcomes[outcome] += 1

    def summary(interrupted):
        with lock:
            ok = sum(n for o, n in outcomes.items() if o.startswith("2"))
            done = {"client": args.client, "jobs": args.jobs, "succeeded": ok, "outcomes": dict(sorted(outcomes.items()))}
        if interrupted:
            done["interrupted"] = "still running when stopped (SIGTERM)"
        print(json.dumps(done), flush=True)

    def stopped(*_):
        # A client asleep on a long Retry-After: say what it did so far.
        summary(True)
        os._exit(0)

    signal.signal(signal.SIGTERM, stopped)
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(args.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    summary(False)


if __name__ == "__main__":
    main()
