"""Judges a typed client's run from `retrysim serve`'s ledger.

Usage: python3 judge.py LEDGER_JSON CLIENT_JSON EXPECT

The client ran one job at a time (--workers 1), so each request after a 429
is that job's retry, and its wait is the time from the 429's answer to the
retry's arrival. A retry is early against Retry-After when it arrived before
`retry_after` had passed, and early against the dialect when it arrived
before `dialect_wait` (OpenAI's `retry-after-ms`) had passed. EXPECT is
`honours` (every job done, no early retry by either measure) or
`ignores-dialect` (some retry early against the dialect: the negative
control). Prints one line of figures; exits 1 when they are not EXPECT.
"""

import json
import sys


def main():
    ledger = json.load(open(sys.argv[1]))
    client = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
    expect = sys.argv[3]
    arrivals = ledger["arrivals"]
    requests = len(arrivals)
    limited = sum(1 for a in arrivals if a["status"] == 429)
    early_ra = early_dialect = 0
    for a, b in zip(arrivals, arrivals[1:]):
        if a["status"] != 429 or a.get("answered_at") is None:
            continue
        waited = b["at"] - a["answered_at"]
        if a.get("retry_after") is not None and waited < a["retry_after"]:
            early_ra += 1
        if a.get("dialect_wait") is not None and waited < a["dialect_wait"]:
            early_dialect += 1
    done, jobs = client["succeeded"], client["jobs"]
    print(
        f"jobs done {done} of {jobs}; requests {requests}; 429s {limited}; "
        f"retries early against Retry-After {early_ra}, against retry-after-ms {early_dialect}"
    )
    if expect == "honours":
        ok = done == jobs and early_ra == 0 and early_dialect == 0
    elif expect == "ignores-dialect":
        ok = early_dialect > 0 and done < jobs
    else:
        sys.exit(f"judge.py: unknown expectation {expect!r}: honours or ignores-dialect")
    if not ok:
        print(f"typed-client: expected {expect}, the run above is not that")
        sys.exit(1)


if __name__ == "__main__":
    main()
