#!/usr/bin/env bash
# Calibration against a real rate limiter.
#
# Installs Flask-Limiter (pinned, tests/conformance/requirements.txt) into
# target/conformance-venv, starts tests/conformance/server.py on 127.0.0.1,
# drives it with the real driver (examples/calibrate.rs: 8 workers, 120 jobs)
# for three policies on a fixed and a moving window, runs the simulated twin
# of each (tests/conformance/sim/*.toml), and prints both side by side
# (tests/conformance/report.py, which also decides pass or fail).
#
# Each configuration runs CONFORMANCE_REPEATS times (default 5) on the real
# server and on seeds 1..CONFORMANCE_REPEATS in the simulator; then the
# negative controls run once each, to show that every check can fail.
#
# Then the production presets where slots are scarce: 8 workers,
# 60 jobs, 10 requests per 1 s window, on Flask-Limiter's fixed window
# (/fixed10) and on tests/conformance/rounding_server.py (Retry-After
# int(reset - now): 0 for a whole window), CONFORMANCE_PRESET_REPEATS times
# each (default 3), with their simulated twins: the `habits` rows
# flask-fixed/PRESET and retry-after-truncated/PRESET with 10 writes and 60
# jobs. `background` as it was before refused advice escalated is the negative
# control.
# Loopback only; about six minutes; the servers are stopped by their PIDs.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v python3 >/dev/null 2>&1; then
    echo "conformance: SKIPPED: python3 is not installed, and the calibration runs a real"
    echo "conformance: Flask-Limiter server (apt-get install python3 python3-venv to run it)."
    exit 0
fi

REPEATS=${CONFORMANCE_REPEATS:-5}
VENV=target/conformance-venv
OUT=target/conformance
WINDOWS=(fixed moving)
POLICIES=(retry-after-jitter exponential-full-jitter pacing)

if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV" || {
        echo "conformance: python3 cannot create a virtual environment in $VENV:"
        echo "conformance: install its venv module (apt-get install python3-venv) and run again."
        exit 1
    }
fi
timeout 300 "$VENV/bin/pip" install --disable-pip-version-check --quiet -r tests/conformance/requirements.txt
cargo build --release --quiet --example calibrate --bin retrysim
CALIBRATE=target/release/examples/calibrate
RETRYSIM=target/release/retrysim

rm -rf "$OUT" && mkdir -p "$OUT/twins"
"$VENV/bin/python" tests/conformance/server.py --port-file "$OUT/port" >"$OUT/server.log" 2>&1 &
SERVER=$!
"$VENV/bin/python" tests/conformance/rounding_server.py --limit 10 --port-file "$OUT/rounding-port" \
    >"$OUT/rounding-server.log" 2>&1 &
ROUNDING=$!
trap 'kill "$SERVER" "$ROUNDING" 2>/dev/null || true; wait "$SERVER" "$ROUNDING" 2>/dev/null || true' EXIT
# Waits for a server's port file; fails with its log if it died or never wrote one.
wait_port() {
    local pid=$1 file=$2 log=$3
    for _ in $(seq 1 100); do
        [ -s "$file" ] && return 0
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "conformance: a server did not start:" && cat "$log" && exit 1
        fi
        sleep 0.1
    done
    echo "conformance: a server did not report its port in 10 s:" && cat "$log" && exit 1
}
wait_port "$SERVER" "$OUT/port" "$OUT/server.log"
wait_port "$ROUNDING" "$OUT/rounding-port" "$OUT/rounding-server.log"
BASE="http://127.0.0.1:$(cat "$OUT/port")"
ROUNDING_URL="http://127.0.0.1:$(cat "$OUT/rounding-port")/v1/jobs"
echo "conformance: Flask-Limiter on $BASE; $REPEATS runs of each configuration"

# One real run: a JSON line tagged with its window and policy (and a control name).
real() {
    local window=$1 policy=$2 control=$3 && shift 3
    local json
    json=$(timeout 90 "$CALIBRATE" --url "$BASE/$window/v1/jobs" --policy "$policy" --format json --time-limit 60s "$@")
    echo "{\"window\":\"$window\",\"policy\":\"$policy\",\"control\":\"$control\",\"run\":$json}"
}

# Interleaved, so that a slow spell of the machine spreads over every configuration.
for rep in $(seq 1 "$REPEATS"); do
    for window in "${WINDOWS[@]}"; do
        for policy in "${POLICIES[@]}"; do
            real "$window" "$policy" "" >>"$OUT/real.jsonl"
        done
    done
    echo "conformance: real runs $rep/$REPEATS done"
done

for seed in $(seq 1 "$REPEATS"); do
    for window in "${WINDOWS[@]}"; do
        for policy in "${POLICIES[@]}"; do
            json=$("$RETRYSIM" run --config "tests/conformance/sim/$window-$policy.toml" --seed "$seed" --format json |
                tr -d '\n')
            echo "{\"window\":\"$window\",\"policy\":\"$policy\",\"seed\":$seed,\"run\":$json}" >>"$OUT/sim.jsonl"
        done
    done
done

# Negative controls: each must trip its check in report.py.
# A classifier that calls Flask-Limiter's 429 (HTML, no code) unclear, as retrysim's once did: jobs are lost.
# Where slots are scarce (10 per 1 s, 60 jobs), so that a slow machine cannot
# hide it: on the 30-per-second window it lost 27, 3 and 30 of 120 jobs in three
# runs, and none in one CI run on a machine four sessions shared; here 10 of 60
# in each of three runs.
real fixed10 retry-after-jitter uncoded-429-unclear --jobs 60 --uncoded-429 unclear >>"$OUT/controls.jsonl"
# Pacing that trusts the rounded reset, as it once did: about 2x the ideal.
real fixed pacing-no-phase pacing-no-phase >>"$OUT/controls.jsonl"
# A fixed seed run twice without resetting the ledger: every key charged twice.
real fixed pacing fixed-seed-twice --jobs 10 --seed 42 >/dev/null
real fixed pacing fixed-seed-twice --jobs 10 --seed 42 --no-reset >>"$OUT/controls.jsonl"

# The production presets where slots are scarce.
PRESETS=(interactive background batch standard)
PRESET_REPEATS=${CONFORMANCE_PRESET_REPEATS:-3}
preset_real() {
    local server=$1 url=$2 policy=$3 control=$4
    local json
    json=$(timeout 90 "$CALIBRATE" --url "$url" --policy "$policy" --jobs 60 --limit 10 --format json --time-limit 60s)
    echo "{\"server\":\"$server\",\"policy\":\"$policy\",\"control\":\"$control\",\"run\":$json}"
}
for rep in $(seq 1 "$PRESET_REPEATS"); do
    for preset in "${PRESETS[@]}"; do
        preset_real flask-limiter "$BASE/fixed10/v1/jobs" "$preset" "" >>"$OUT/presets-real.jsonl"
        preset_real rounding "$ROUNDING_URL" "$preset" "" >>"$OUT/presets-real.jsonl"
    done
    echo "conformance: preset runs $rep/$PRESET_REPEATS done"
done
# The twins, from the habits preset's rows with the scarce slots written in
# (checked: a format change must not leave 30 writes and 120 jobs behind).
for pair in flask-limiter:flask-fixed rounding:retry-after-truncated; do
    server=${pair%%:*} habit=${pair#*:}
    for preset in "${PRESETS[@]}"; do
        twin="$OUT/twins/$server-$preset.toml"
        "$RETRYSIM" compare --preset habits --show "$habit/$preset" |
            sed -e 's/^writes = 30$/writes = 10/' -e 's/^jobs = 120$/jobs = 60/' >"$twin"
        grep -q '^writes = 10$' "$twin" && grep -q '^jobs = 60$' "$twin" || {
            echo "conformance: cannot write 10 writes and 60 jobs into $habit/$preset's twin ($twin)" && exit 1
        }
        for seed in $(seq 1 "$PRESET_REPEATS"); do
            json=$("$RETRYSIM" run --config "$twin" --seed "$seed" --format json | tr -d '\n')
            echo "{\"server\":\"$server\",\"policy\":\"$preset\",\"seed\":$seed,\"run\":$json}" >>"$OUT/presets-sim.jsonl"
        done
    done
done
# Negative control: background as it was before refused advice escalated loses jobs on the rounding server.
preset_real rounding "$ROUNDING_URL" background-before background-before >>"$OUT/presets-controls.jsonl"

"$VENV/bin/python" tests/conformance/report.py "$OUT/real.jsonl" "$OUT/sim.jsonl" "$OUT/controls.jsonl" \
    "$OUT/presets-real.jsonl" "$OUT/presets-sim.jsonl" "$OUT/presets-controls.jsonl"
