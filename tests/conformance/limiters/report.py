"""The calibration table against express-rate-limit and nginx limit_req, and its checks
(tests/conformance/limiters/run.sh runs this).

Usage: report.py REAL.jsonl SIM.jsonl CONTROLS.jsonl

REAL.jsonl: one line per run of examples/calibrate.rs against a real limiter,
SIM.jsonl: one per `retrysim run` of its simulated twin (one seed each),
CONTROLS.jsonl: simulated negative controls, one line per seed.
Each line: {"limiter": LIMITER, "preset": PRESET, ["control": NAME,] "run": {...}}.

A row (limiter x production preset) fails when
  - a real run charged a key twice, charged other than once per success,
    hit the time limit, or counted other requests or refusals than the
    server's ledger did;
  - `background`, `batch` or `standard` lost a job, real or simulated
    (`interactive`, three retries, is shown and not judged, as on the
    Flask-Limiter page);
  - the real and simulated medians of requests or of refusals (429s, and
    nginx's 503s) differ by more than the TOLERANCE, written down before
    the first comparison ran:
        max(spread real, spread simulated, 2, 15% of the larger median)
    where a spread is max - min over the repeats. Why: each side's spread is
    what one run can differ from another of the *same* system (the Flask-
    Limiter calibration's rule, with its floor of 2 for a row that does not
    vary). The 15% is for nginx: its leaky bucket decides by the millisecond
    (one request per 100 ms without burst), so the real refusals depend on
    how the machine schedules eight workers, which three repeats sample
    narrowly; a difference of behaviour (a queue that is not modelled, a
    Retry-After of 0) moves the figures by far more.
The time is shown, not judged (wall time against virtual time).

Negative controls (simulated twins with one behaviour taken away, set
against the real runs of a row; each must fail the agreement check):
  - nginx-burst-without-the-queue: the real `burst` runs against the twin
    with `nodelay` (the model without the queue that delays);
  - express-retry-after-zero: the real draft-8 runs against the twin with
    `retry_after_rounding = "truncate"` (Retry-After: 0 within the window).

Prints the Markdown table (the one in docs/measurements/calibration.md) and a closing
line `limiters: N passed, M failed`; exits 1 on any failure.
"""

import json
import os
import statistics
import sys

# stamp.py lives in the parent directory (tests/conformance).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from stamp import measured_at  # noqa: E402

LIMITERS = ["express-draft8", "express-draft8-legacy", "nginx-n503", "nginx-n429", "nginx-burst", "nginx-nodelay"]
PRESETS = ["interactive", "background", "batch", "standard"]
LOSSLESS = ["background", "batch", "standard"]
FLOOR = 2
RELATIVE = 0.15
# control name -> (the real row it is set against)
CONTROLS = {
    "nginx-burst-without-the-queue": ("nginx-burst", "background"),
    "express-retry-after-zero": ("express-draft8", "background"),
}
SECTION = "## Calibration against express-rate-limit and nginx"


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def show(values, digits=0):
    lo, mid, hi = min(values), statistics.median(values), max(values)
    f = f"{{:.{digits}f}}"
    if lo == hi:
        return f.format(mid)
    return f"{f.format(mid)} ({f.format(lo)}–{f.format(hi)})"


def real_refusals(run):
    return run["limited"] + run.get("unavailable", 0)


def sim_refusals(run):
    """A twin's refusals: its attempts that were not charged (its report counts
    429s only; no faults, so every other attempt is a 429 or a 503)."""
    return run["requests"] - run["charged"]


def run_failures(run, judge_losses):
    """What one real run got wrong on its own."""
    out = []
    if judge_losses and run["lost"]:
        out.append(f"lost {run['lost']} jobs ({run['give_ups']})")
    if run["keys_charged_twice"]:
        out.append(f"charged {run['keys_charged_twice']} keys twice")
    succeeded = run["jobs"] - run["lost"]
    if run["charges"] != succeeded:
        out.append(f"{run['charges']} charges for {succeeded} successes")
    if run["timed_out"]:
        out.append("hit the time limit")
    server = run["server"]
    theirs = (server["requests"], server["limited"] + server.get("unavailable", 0))
    mine = (run["requests"], real_refusals(run))
    if theirs != mine:
        out.append(f"the client counted {mine[0]} requests and {mine[1]} refusals, the server {theirs[0]} and {theirs[1]}")
    return out


def tolerance(a, b):
    spread = max(max(a) - min(a), max(b) - min(b))
    return max(spread, FLOOR, RELATIVE * max(statistics.median(a), statistics.median(b)))


def agreement_failures(real, sim):
    out = []
    for figure, of_real, of_sim in [
        ("requests", lambda r: r["requests"], lambda r: r["requests"]),
        ("refusals", real_refusals, sim_refusals),
    ]:
        a, b = [of_real(r) for r in real], [of_sim(r) for r in sim]
        gap = abs(statistics.median(a) - statistics.median(b))
        allowed = tolerance(a, b)
        if gap > allowed:
            out.append(
                f"{figure}: real median {statistics.median(a):g}, simulated {statistics.median(b):g}, "
                f"apart by {gap:g} > tolerance {allowed:g}"
            )
    return out


def row_failures(preset, real, sim):
    out = []
    for i, run in enumerate(real, 1):
        out += [f"real run {i}: {p}" for p in run_failures(run, preset in LOSSLESS)]
    if preset in LOSSLESS:
        for i, run in enumerate(sim, 1):
            if run["gave_up_total"]:
                out.append(f"simulated seed {i}: lost {run['gave_up_total']} jobs ({run['gave_up']})")
    return out + agreement_failures(real, sim)


def sim_columns(row):
    """The simulated columns of a row (limiter, preset, lost, requests, refusals, time): deterministic."""
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    return (cells[0], cells[1], cells[3], cells[5], cells[7], cells[9])


def page_staleness(rows):
    """The guide's table must hold this run's simulated columns (see the Flask-Limiter report)."""
    page = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "measurements", "calibration.md")
    with open(page, encoding="utf-8") as f:
        text = f.read()
    section = text.split(SECTION, 1)[-1].split("\n## ", 1)[0]
    starts = tuple(f"| {name} |" for name in LIMITERS)
    documented = [sim_columns(l) for l in section.splitlines() if l.startswith(starts)]
    measured = [sim_columns(r) for r in rows]
    if documented != measured:
        return (
            "docs/measurements/calibration.md's limiters table is stale in its simulated columns "
            f"(the page {documented}, this run {measured}): paste the table printed above into it"
        )
    return None


def main():
    real_lines, sim_lines, control_lines = (load(p) for p in sys.argv[1:4])
    pick = lambda lines, limiter, preset: [
        r["run"] for r in lines if (r["limiter"], r["preset"]) == (limiter, preset)
    ]
    rows, failures, failed, checked = [], [], 0, 0
    for limiter in LIMITERS:
        for preset in PRESETS:
            checked += 1
            real, sim = pick(real_lines, limiter, preset), pick(sim_lines, limiter, preset)
            if not real or not sim:
                failures.append(f"{limiter} {preset}: no runs (real {len(real)}, simulated {len(sim)})")
                failed += 1
                continue
            problems = row_failures(preset, real, sim)
            failed += bool(problems)
            failures += [f"{limiter} {preset}: {p}" for p in problems]
            verdict = "ok" if not problems else "FAIL"
            if preset not in LOSSLESS and not problems:
                verdict = "ok (losses shown, not judged)"
            rows.append(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
                    limiter,
                    preset,
                    show([r["lost"] for r in real]),
                    show([r["gave_up_total"] for r in sim]),
                    show([r["requests"] for r in real]),
                    show([r["requests"] for r in sim]),
                    show([real_refusals(r) for r in real]),
                    show([sim_refusals(r) for r in sim]),
                    show([r["wall_s"] for r in real], 2),
                    show([r["virtual_ms"] / 1000 for r in sim], 2),
                    verdict,
                    measured_at(),
                )
            )
    repeats = max(len(pick(real_lines, "nginx-n503", "background")), 1)
    print()
    print(f"Median (min–max) of {repeats} real runs and of simulated seeds 1..{repeats}; 8 workers,")
    print("60 jobs, 10 requests per second; refusals are 429s and nginx's 503s; time is wall")
    print("time (real) and virtual time (simulated).")
    print()
    print(
        "| limiter | preset | lost real | lost sim | requests real | requests sim "
        "| refusals real | refusals sim | time s real | time s sim | | measured at |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    print("\n".join(rows))
    print()
    stale = page_staleness(rows)
    checked += 1
    if stale:
        failures.append(stale)
        failed += 1
    print("Negative controls (each must fail the agreement check):")
    for name, (limiter, preset) in CONTROLS.items():
        checked += 1
        real = pick(real_lines, limiter, preset)
        sim = [r["run"] for r in control_lines if r["control"] == name]
        found = agreement_failures(real, sim) if real and sim else []
        print(f"  {name} (against the real {limiter} {preset}): {'caught: ' + '; '.join(found) if found else 'NOT CAUGHT'}")
        if not found:
            failures.append(f"negative control {name}: the agreement check did not catch it")
            failed += 1
    print()
    for f in failures:
        print(f"FAIL {f}")
    print(f"limiters: {checked - failed} passed, {failed} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
