#!/usr/bin/env python3
"""Per-seed cost of the hunt: `python3 benches/per-seed.py BIN KIND FIRST LAST`.

Runs `BIN hunt --seeds 1 --start N --scenario-kind KIND --jobs 1
--determinism-every 0 --format json` (with `--work` when BIN has it) for
each seed N in FIRST..=LAST, one process each, in PASSES passes over the
range (environment `PASSES`, default 3), and keeps each seed's least CPU.

Why the least of several passes: on a shared machine one process of a few
milliseconds now and then takes several times its CPU (a one-job seed
measured 3.5 ms and 18 ms in five runs of the same binary), and such spikes
come in bursts of neighbouring seeds. Passes over the whole range, rather
than repeats in a row, put a seed's runs minutes apart, so that a burst
touches one of them only. Noise only ever adds CPU, so the least is the
closest to the seed's own cost.

It prints a tab-separated line per seed: the seed, the kind it drew (from
the JSON's `kinds`), the process's least CPU seconds (user + system,
getrusage of the child: exact, where /usr/bin/time's user alone is
tick-sampled), its jobs, its virtual ms, and with `--work` its events
(messages delivered + timer wakes, one run's count) and its CPU per event in
microseconds. Then, on stderr, each drawn kind's median CPU per job and every
seed above 10x it, counting a seed's CPU less the process's start (the least
of 9 runs of `BIN hunt --scenario-kind fleet --dump 1`, about 2 ms, which would
otherwise make every seed of two jobs look costly per job); with `--work`
each of those seeds' CPU per event against the kind's median per event.
Bounded: a seed stops after `--max-wall 60s` (the hunt's own bound) and the
whole run after 30 minutes.
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


def has_work_flag(binary):
    """Whether BIN's hunt takes `--work` (older builds refuse it)."""
    out = subprocess.run([binary, "hunt", "--help"], capture_output=True, text=True, timeout=60)
    return "--work" in out.stdout


def median(xs):
    return sorted(xs)[len(xs) // 2]


def main():
    if len(sys.argv) != 5:
        sys.exit("usage: per-seed.py BIN KIND FIRST LAST (KIND: fleet, single or all)")
    binary, kind = sys.argv[1], sys.argv[2]
    try:
        first, last = int(sys.argv[3]), int(sys.argv[4])
        passes = int(os.environ.get("PASSES", "3"))
    except ValueError:
        sys.exit(f"per-seed.py: FIRST, LAST and PASSES must be whole numbers, got {sys.argv[3]!r} {sys.argv[4]!r} "
                 f"{os.environ.get('PASSES')!r}")
    if kind not in ("fleet", "single", "all") or first < 0 or last < first or passes < 1:
        sys.exit(f"per-seed.py: KIND must be fleet, single or all, FIRST <= LAST and PASSES >= 1; "
                 f"got {kind} {first} {last} {passes}")
    if not os.access(binary, os.X_OK):
        sys.exit(f"per-seed.py: {binary} is not an executable")
    deadline = time.monotonic() + 30 * 60
    starts = []
    for _ in range(9):
        before = cpu()
        subprocess.run([binary, "hunt", "--scenario-kind", "fleet", "--dump", "1"], capture_output=True, timeout=60)
        starts.append(cpu() - before)
    start = min(starts)
    work = has_work_flag(binary)
    seeds = {}
    for p in range(passes):
        for seed in range(first, last + 1):
            if time.monotonic() > deadline:
                sys.exit(f"per-seed.py: stopped at seed {seed} of pass {p + 1}: over 30 minutes")
            cmd = [binary, "hunt", "--seeds", "1", "--start", str(seed), "--scenario-kind", kind,
                   "--jobs", "1", "--determinism-every", "0", "--format", "json", "--max-wall", "60s"]
            if work:
                cmd.append("--work")
            before = cpu()
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            used = cpu() - before
            if p > 0:
                seeds[seed]["cpu"] = min(seeds[seed]["cpu"], used)
                continue
            try:
                summary = json.loads(out.stdout)
            except json.JSONDecodeError:
                sys.exit(f"per-seed.py: seed {seed}: no JSON from {' '.join(cmd)}: {out.stderr.strip()[:300]}")
            w = (summary.get("work") or {}).get("all")
            seeds[seed] = {
                "kind": next(iter(summary["kinds"])),
                "cpu": used,
                "jobs": summary["jobs"],
                "virtual_ms": summary["virtual_ms"],
                "events": w["messages_delivered"] + w["timer_wakes"] if w else None,
            }
    rows = [(seed, r) for seed, r in sorted(seeds.items())]
    for seed, r in rows:
        line = f"{seed}\t{r['kind']}\t{r['cpu']:.4f}\t{r['jobs']}\t{r['virtual_ms']}"
        if r["events"] is not None:
            per_event = max(r["cpu"] - start, 0.0) / max(r["events"], 1) * 1e6
            line += f"\t{r['events']}\t{per_event:.2f}"
        print(line, flush=True)

    def per_job(r):
        return max(r["cpu"] - start, 0.0) / max(r["jobs"], 1)

    def per_event(r):
        return max(r["cpu"] - start, 0.0) / max(r["events"], 1)

    for k in sorted({r["kind"] for _, r in rows}):
        of_kind = [(s, r) for s, r in rows if r["kind"] == k]
        m = median([per_job(r) for _, r in of_kind])
        over = sorted(((s, r) for s, r in of_kind if per_job(r) > 10 * m), key=lambda x: per_job(x[1]), reverse=True)
        by_event = ""
        if work:
            me = median([per_event(r) for _, r in of_kind])
            by_event = f"; median {me * 1e6:.2f} µs an event (messages delivered + timer wakes)"

        def shown(s, r):
            text = f"{s} ({r['cpu']:.3f} s, {r['jobs']} jobs, {per_job(r) / m:.0f}x"
            if work:
                text += f"; {r['events']} events, {per_event(r) / me:.1f}x by event"
            return text + ")"

        print(f"# {k}: {len(of_kind)} seeds, {sum(r['cpu'] for _, r in of_kind):.2f} s CPU (least of {passes} "
              f"passes), process start {start * 1e3:.2f} ms, median {m * 1e3:.3f} ms a job{by_event}; "
              f"{len(over)} above 10x: " + ", ".join(shown(s, r) for s, r in over),
              file=sys.stderr)


if __name__ == "__main__":
    main()
