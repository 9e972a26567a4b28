#!/usr/bin/env bash
# Calibration against a real rate limiter (issue 11, part 3).
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
# Loopback only; about three minutes; the server is stopped by its PID.
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

rm -rf "$OUT" && mkdir -p "$OUT"
"$VENV/bin/python" tests/conformance/server.py --port-file "$OUT/port" >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
    [ -s "$OUT/port" ] && break
    if ! kill -0 "$SERVER" 2>/dev/null; then
        echo "conformance: the server did not start:" && cat "$OUT/server.log" && exit 1
    fi
    sleep 0.1
done
[ -s "$OUT/port" ] || { echo "conformance: the server did not report its port in 10 s" && exit 1; }
BASE="http://127.0.0.1:$(cat "$OUT/port")"
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
# A classifier that calls Flask-Limiter's 429 (HTML, no code) unclear, as before issue 11: jobs are lost.
real fixed retry-after-jitter uncoded-429-unclear --uncoded-429 unclear >>"$OUT/controls.jsonl"
# Pacing that trusts the rounded reset, as it did before issue 11: about 2x the ideal.
real fixed pacing-no-phase pacing-no-phase >>"$OUT/controls.jsonl"
# A fixed seed run twice without resetting the ledger: every key charged twice.
real fixed pacing fixed-seed-twice --jobs 10 --seed 42 >/dev/null
real fixed pacing fixed-seed-twice --jobs 10 --seed 42 --no-reset >>"$OUT/controls.jsonl"

"$VENV/bin/python" tests/conformance/report.py "$OUT/real.jsonl" "$OUT/sim.jsonl" "$OUT/controls.jsonl"
