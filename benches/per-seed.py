#!/usr/bin/env python3
"""Per-seed cost of the hunt: `python3 benches/per-seed.py BIN KIND FIRST LAST`.

Runs `BIN hunt --seeds 1 --start N --scenario-kind KIND --jobs 1
--determinism-every 0 --format json` once per seed N in FIRST..=LAST, one
process each, and prints a tab-separated line per seed: the seed, the kind it
drew (from the JSON's `kinds`), the process's CPU seconds (user + system, getrusage of
the child: exact, where /usr/bin/time's user alone is tick-sampled), its jobs and its
virtual ms. Then, on stderr, each drawn kind's median CPU per job and every
seed above 10x it, counting a seed's CPU less the process's start (the
median of 9 runs of `BIN hunt --scenario-kind fleet --dump 1`, about 2 ms,
which would otherwise make every seed of two jobs look costly per job). Bounded: a seed stops after `--max-wall 60s` (the
hunt's own bound) and the whole run after 30 minutes.
"""
import json
import os
import resource
import subprocess
import sys
import time


def cpu():
    """User + system CPU seconds of the children waited for so far. Their sum
    is the scheduler's exact runtime; the split between the two is sampled at
    the kernel's tick, so a process of a few ms may show 0 user alone."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main():
    if len(sys.argv) != 5:
        sys.exit("usage: per-seed.py BIN KIND FIRST LAST (KIND: fleet, single or all)")
    binary, kind = sys.argv[1], sys.argv[2]
    try:
        first, last = int(sys.argv[3]), int(sys.argv[4])
    except ValueError:
        sys.exit(f"per-seed.py: FIRST and LAST must be whole numbers, got {sys.argv[3]!r} {sys.argv[4]!r}")
    if kind not in ("fleet", "single", "all") or first < 0 or last < first:
        sys.exit(f"per-seed.py: KIND must be fleet, single or all and FIRST <= LAST; got {kind} {first} {last}")
    if not os.access(binary, os.X_OK):
        sys.exit(f"per-seed.py: {binary} is not an executable")
    deadline = time.monotonic() + 30 * 60
    starts = []
    for _ in range(9):
        before = cpu()
        subprocess.run([binary, "hunt", "--scenario-kind", "fleet", "--dump", "1"], capture_output=True, timeout=60)
        starts.append(cpu() - before)
    start = sorted(starts)[len(starts) // 2]
    rows = []
    for seed in range(first, last + 1):
        if time.monotonic() > deadline:
            sys.exit(f"per-seed.py: stopped at seed {seed}: over 30 minutes")
        cmd = [binary, "hunt", "--seeds", "1", "--start", str(seed), "--scenario-kind", kind,
               "--jobs", "1", "--determinism-every", "0", "--format", "json", "--max-wall", "60s"]
        before = cpu()
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        user = cpu() - before
        try:
            summary = json.loads(out.stdout)
        except json.JSONDecodeError:
            sys.exit(f"per-seed.py: seed {seed}: no JSON from {' '.join(cmd)}: {out.stderr.strip()[:300]}")
        drawn = next(iter(summary["kinds"]))
        rows.append((seed, drawn, user, summary["jobs"], summary["virtual_ms"]))
        print(f"{seed}\t{drawn}\t{user:.4f}\t{summary['jobs']}\t{summary['virtual_ms']}", flush=True)
    for k in sorted({r[1] for r in rows}):
        of_kind = [r for r in rows if r[1] == k]
        def per_job(r):
            return max(r[2] - start, 0.0) / max(r[3], 1)
        median = sorted(per_job(r) for r in of_kind)[len(of_kind) // 2]
        over = sorted((r for r in of_kind if per_job(r) > 10 * median), key=per_job, reverse=True)
        print(f"# {k}: {len(of_kind)} seeds, {sum(r[2] for r in of_kind):.2f} s CPU, process start "
              f"{start * 1e3:.2f} ms, median {median * 1e3:.3f} ms a job; {len(over)} above 10x: "
              + ", ".join(f"{r[0]} ({r[2]:.3f} s, {r[3]} jobs, {per_job(r) / median:.0f}x)" for r in over),
              file=sys.stderr)


if __name__ == "__main__":
    main()
