"""The calibration table and its checks (tests/conformance/run.sh runs this).

Usage: report.py REAL.jsonl SIM.jsonl CONTROLS.jsonl [PRESETS-REAL.jsonl PRESETS-SIM.jsonl PRESETS-CONTROLS.jsonl]

REAL.jsonl: one line per run of examples/calibrate.rs against Flask-Limiter,
SIM.jsonl: one per `retrysim run` of the simulated twin (one seed each),
CONTROLS.jsonl: the negative controls, one run each.

A configuration (window x policy) fails when
  - a real run lost a job, charged a key twice, charged other than once per
    success, hit the time limit, or counted other requests or 429s than the
    server's ledger did;
  - (pacing) the median real time is more than 1.10x the median ideal time,
    or its median 429s exceed those of Retry-After plus jitter on the window;
  - the real and simulated medians of requests or of 429s differ by more
    than the tolerance: the wider of the two spreads (max - min over the
    repeats), and at least 2.
Why that tolerance: each side's spread over its repeats is what one run
can differ from another of the *same* system. Two systems that behave
alike then have medians closer than the wider spread; a gap beyond it is
not noise but a difference in behaviour. The floor of 2 keeps a
deterministic row (pacing: 120 requests, no 429 on both sides, spread 0)
from failing on a single stray 429 that a loaded machine can cause.

Every check also runs on the negative controls, each of which must fail it.

The production presets where slots are scarce (8 workers, 60 jobs,
10 per 1 s, on Flask-Limiter and on the rounding server) fail when a real
run charged a key twice, charged other than once per success, hit the time
limit or disagreed with the ledger, or when `background`, `batch` or
`standard` lost a job, real or simulated. `interactive` (3 retries) is shown
but not held to losing none: eight workers that chain new jobs into each
window outlast its four attempts (docs/guide/real-servers-habits.md). Its
negative control, `background` as it was before refused advice escalated,
must lose jobs on
the rounding server.

Prints the Markdown tables (the ones in docs/measurements/calibration.md) and a
closing line `conformance: N passed, M failed`; exits 1 on any failure.
"""

import json
import statistics
import os
import sys

from stamp import measured_at

WINDOWS = ["fixed", "moving"]
POLICIES = ["retry-after-jitter", "exponential-full-jitter", "pacing"]
SERVERS = ["flask-limiter", "rounding"]
PRESETS = ["interactive", "background", "batch", "standard"]
# The presets held to losing no job where slots are scarce (see the docstring).
LOSSLESS = ["background", "batch", "standard"]
MAX_RATIO = 1.10
FLOOR = 2


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def spread(values):
    return min(values), statistics.median(values), max(values)


def show(values, digits=0):
    lo, mid, hi = spread(values)
    f = f"{{:.{digits}f}}"
    if lo == hi:
        return f.format(mid)
    return f"{f.format(mid)} ({f.format(lo)}–{f.format(hi)})"


def run_failures(run):
    """What one real run got wrong on its own."""
    out = []
    if run["lost"]:
        out.append(f"lost {run['lost']} jobs ({run['give_ups']})")
    if run["keys_charged_twice"]:
        out.append(f"charged {run['keys_charged_twice']} keys twice")
    succeeded = run["jobs"] - run["lost"]
    if run["charges"] != succeeded:
        out.append(f"{run['charges']} charges for {succeeded} successes")
    if run["timed_out"]:
        out.append("hit the time limit")
    server = run["server"]
    if (server["requests"], server["limited"]) != (run["requests"], run["limited"]):
        out.append(
            f"the client counted {run['requests']} requests and {run['limited']} 429s, "
            f"the server {server['requests']} and {server['limited']}"
        )
    return out


def ratio(runs):
    return statistics.median(r["wall_s"] for r in runs) / statistics.median(r["ideal_s"] for r in runs)


def agreement_failures(real, sim):
    """Real and simulated medians of requests and of 429s, within the tolerance."""
    out = []
    for figure, real_key, sim_key in [("requests", "requests", "requests"), ("429s", "limited", "limited")]:
        a = [r[real_key] for r in real]
        b = [r[sim_key] for r in sim]
        tolerance = max(max(a) - min(a), max(b) - min(b), FLOOR)
        gap = abs(statistics.median(a) - statistics.median(b))
        if gap > tolerance:
            out.append(
                f"{figure}: real median {statistics.median(a):g}, simulated {statistics.median(b):g}, "
                f"apart by {gap:g} > tolerance {tolerance:g}"
            )
    return out


def configuration_failures(policy, real, sim, baseline):
    """`baseline`: the real Retry-After plus jitter runs on the same window."""
    out = []
    for i, run in enumerate(real, 1):
        out += [f"real run {i}: {f}" for f in run_failures(run)]
    if policy == "pacing":
        if ratio(real) > MAX_RATIO:
            out.append(f"median time {ratio(real):.2f}x the ideal (at most {MAX_RATIO:.2f}x)")
        mine, theirs = (statistics.median(r["limited"] for r in runs) for runs in (real, baseline))
        if baseline and mine > theirs:
            out.append(f"median 429s {mine:g}, more than Retry-After plus jitter's {theirs:g}")
    return out + agreement_failures(real, sim)


def sim_columns(row):
    """The simulated columns of a table row (window, policy, requests, 429s, time): deterministic."""
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    return (cells[0], cells[1], cells[3], cells[5], cells[7])


def preset_sim_columns(row):
    """The simulated columns of a presets row (server, preset, lost, requests, 429s, time)."""
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    return (cells[0], cells[1], cells[3], cells[5], cells[7], cells[9])


def readme_staleness(rows, starts=("| fixed |", "| moving |"), columns=sim_columns):
    """The guide's calibration table must hold this run's simulated columns.

    The real columns differ from run to run; the simulated ones are a pure
    function of the twins and the seeds, so a difference means the page is
    stale (or the twins changed): paste the table printed above into it.
    """
    page = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "measurements", "calibration.md")
    with open(page, encoding="utf-8") as f:
        text = f.read()
    section = text.split("## Calibration against Flask-Limiter", 1)[-1].split("\n## ", 1)[0]
    documented = [columns(l) for l in section.splitlines() if l.startswith(starts)]
    measured = [columns(r) for r in rows]
    if documented != measured:
        return (
            "docs/measurements/calibration.md's table is stale in its simulated columns "
            f"(the page {documented}, this run {measured}): paste the table printed above into it"
        )
    return None


def preset_failures(policy, real, sim):
    """What a preset's real and simulated runs got wrong where slots are scarce."""
    out = []
    for i, run in enumerate(real, 1):
        problems = run_failures(run)
        if policy not in LOSSLESS:
            problems = [p for p in problems if not p.startswith("lost")]
        out += [f"real run {i}: {p}" for p in problems]
    if policy in LOSSLESS:
        for i, run in enumerate(sim, 1):
            if run["gave_up_total"]:
                out.append(f"simulated seed {i}: lost {run['gave_up_total']} jobs ({run['gave_up']})")
    return out


def presets_report(real_lines, sim_lines, controls):
    """The presets table, its failures, and the checks counted."""
    rows, failures, failed = [], [], 0
    for server in SERVERS:
        for policy in PRESETS:
            real = [r["run"] for r in real_lines if (r["server"], r["policy"]) == (server, policy)]
            sim = [r["run"] for r in sim_lines if (r["server"], r["policy"]) == (server, policy)]
            if not real or not sim:
                failures.append(f"{server} {policy}: no runs (real {len(real)}, simulated {len(sim)})")
                failed += 1
                continue
            problems = preset_failures(policy, real, sim)
            failed += bool(problems)
            failures += [f"{server} {policy}: {p}" for p in problems]
            verdict = "ok" if not problems else "FAIL"
            if policy not in LOSSLESS and not problems:
                verdict = "ok (losses shown, not judged)"
            rows.append(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
                    server,
                    policy,
                    show([r["lost"] for r in real]),
                    show([r["gave_up_total"] for r in sim]),
                    show([r["requests"] for r in real]),
                    show([r["requests"] for r in sim]),
                    show([r["limited"] for r in real]),
                    show([r["limited"] for r in sim]),
                    show([r["wall_s"] for r in real], 2),
                    show([r["virtual_ms"] / 1000 for r in sim], 2),
                    verdict,
                    measured_at(),
                )
            )
    repeats = max(len([r for r in real_lines if (r["server"], r["policy"]) == ("rounding", "background")]), 1)
    print()
    print(f"The production presets where slots are scarce: median (min–max) of {repeats} real runs and of")
    print(f"simulated seeds 1..{repeats}; 8 workers, 60 jobs, 10 requests per 1 s window.")
    print()
    print(
        "| server | preset | lost real | lost sim | requests real | requests sim "
        "| 429s real | 429s sim | time s real | time s sim | | measured at |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    print("\n".join(rows))
    print()
    stale = readme_staleness(rows, ("| flask-limiter |", "| rounding |"), preset_sim_columns)
    if stale:
        failures.append(stale)
        failed += 1
    control = next((c["run"] for c in controls if c["control"] == "background-before"), None)
    found = [f for f in run_failures(control) if f.startswith("lost")] if control else []
    print("Negative control (must lose jobs on the rounding server):")
    print(f"  background-before: {'caught: ' + '; '.join(found) if found else 'NOT CAUGHT'}")
    if not found:
        failures.append("negative control background-before: it lost no job")
        failed += 1
    return failures, failed, len(SERVERS) * len(PRESETS) + 1


def main():
    real_lines, sim_lines, controls = (load(p) for p in sys.argv[1:4])
    rows, failures, failed = [], [], 0
    for window in WINDOWS:
        for policy in POLICIES:
            real = [r["run"] for r in real_lines if (r["window"], r["policy"]) == (window, policy)]
            sim = [r["run"] for r in sim_lines if (r["window"], r["policy"]) == (window, policy)]
            if not real or not sim:
                failures.append(f"{window} {policy}: no runs (real {len(real)}, simulated {len(sim)})")
                failed += 1
                continue
            baseline = [r["run"] for r in real_lines if (r["window"], r["policy"]) == (window, "retry-after-jitter")]
            problems = configuration_failures(policy, real, sim, baseline)
            failed += bool(problems)
            failures += [f"{window} {policy}: {p}" for p in problems]
            rows.append(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {:.2f} | {} | {} |".format(
                    window,
                    policy,
                    show([r["requests"] for r in real]),
                    show([r["requests"] for r in sim]),
                    show([r["limited"] for r in real]),
                    show([r["limited"] for r in sim]),
                    show([r["wall_s"] for r in real], 2),
                    show([r["virtual_ms"] / 1000 for r in sim], 2),
                    ratio(real),
                    "ok" if not problems else "FAIL",
                    measured_at(),
                )
            )
    repeats = max(len([r for r in real_lines if r["window"] == "fixed" and r["policy"] == "pacing"]), 1)
    print()
    print(f"Median (min–max) of {repeats} real runs and of simulated seeds 1..{repeats}; 8 workers, 120 jobs,")
    print("30 requests per 1 s window; time is wall time (real) and virtual time (simulated).")
    print()
    print("| window | policy | requests real | requests sim | 429s real | 429s sim | time s real | time s sim | real / ideal | | measured at |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
    print("\n".join(rows))
    print()
    stale = readme_staleness(rows)
    if stale:
        failures.append(stale)
        failed += 1

    # Negative controls: each check must catch its control.
    caught = []
    by_name = {c["control"]: c["run"] for c in controls}
    expect = {
        "uncoded-429-unclear": ("lost", lambda r: [f for f in run_failures(r) if f.startswith("lost")]),
        "pacing-no-phase": ("ideal", lambda r: [] if ratio([r]) <= MAX_RATIO else [f"{ratio([r]):.2f}x"]),
        "fixed-seed-twice": ("twice", lambda r: [f for f in run_failures(r) if "twice" in f]),
    }
    for name, (_, check) in expect.items():
        run = by_name.get(name)
        found = check(run) if run else []
        caught.append((name, found))
    # Agreement: real pacing against the simulated Retry-After plus jitter.
    real_pacing = [r["run"] for r in real_lines if (r["window"], r["policy"]) == ("fixed", "pacing")]
    sim_raj = [r["run"] for r in sim_lines if (r["window"], r["policy"]) == ("fixed", "retry-after-jitter")]
    caught.append(("real pacing vs simulated retry-after-jitter", agreement_failures(real_pacing, sim_raj)))
    print("Negative controls (each must fail its check):")
    for name, found in caught:
        print(f"  {name}: {'caught: ' + '; '.join(found) if found else 'NOT CAUGHT'}")
        if not found:
            failures.append(f"negative control {name}: the check did not catch it")
            failed += 1
    checked = len(WINDOWS) * len(POLICIES) + len(caught)
    if len(sys.argv) > 4:
        more, more_failed, more_checked = presets_report(*(load(p) for p in sys.argv[4:7]))
        failures += more
        failed += more_failed
        checked += more_checked
    print()
    for f in failures:
        print(f"FAIL {f}")
    print(f"conformance: {checked - failed} passed, {failed} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
