#!/usr/bin/env bash
# Real clients nobody here wrote, in front of `retrysim serve`.
#
# For each case: start `retrysim serve` on 127.0.0.1 (port 0, the URL is
# its first line), run the client against it (bounded by `timeout`), stop
# the server with SIGTERM by its PID, and hold its exit code and report to
# what we expect (100 jobs on 4 workers: more than three 30-request windows
# can take at loopback speed, so some are refused whatever the phase of the
# clock; 10% of answers lost in the lost-answers scenarios): 0 when every ledger-only check holds, 1 and the named
# check BROKEN when the client breaks it (a real finding:
# docs/guide/any-language.md says what each client did, and its table must
# match: the verdict exactly, the figures within a quarter or 2). Python clients are
# installed pinned (tests/conformance/serve/requirements.txt) into
# target/serve-clients-venv; Node's fetch is built in. A missing interpreter
# skips its cases with a message; under a minute in all.
set -euo pipefail
cd "$(dirname "$0")/../../.."

OUT=target/serve-clients
RETRYSIM=target/release/retrysim
VENV=target/serve-clients-venv
# Built as tests/conformance/run.sh and .ci/run build it (an example brings in
# the dev-dependencies' features), so the runs share one build of the binary.
cargo build --release --quiet --example calibrate --bin retrysim
rm -rf "$OUT" && mkdir -p "$OUT"

PYTHON=""
if command -v python3 >/dev/null 2>&1; then
    if [ ! -x "$VENV/bin/python" ]; then
        python3 -m venv "$VENV" || {
            echo "serve-clients: python3 cannot create a virtual environment in $VENV:"
            echo "serve-clients: install its venv module (apt-get install python3-venv) and run again."
            exit 1
        }
    fi
    timeout 300 "$VENV/bin/pip" install --disable-pip-version-check --quiet -r tests/conformance/serve/requirements.txt
    PYTHON="$VENV/bin/python"
else
    echo "serve-clients: SKIPPED the Python clients: python3 is not installed (apt-get install python3 python3-venv)."
fi
NODE=""
if command -v node >/dev/null 2>&1 && [ "$(node -e 'console.log(Number(process.versions.node.split(".")[0]) >= 18)')" = true ]; then
    NODE=node
else
    echo "serve-clients: SKIPPED the Node client: node 18 or later (built-in fetch) is not installed."
fi

SERVER=""
trap '[ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; true' EXIT
FAILED=0

# case NAME SCENARIO EXPECT CLIENT-COMMAND...: EXPECT is "holds" or the
# broken checks, comma-separated in the report's order. The client is stopped
# (SIGTERM) after CLIENT_TIMEOUT seconds (default 60).
case_() {
    local name=$1 scenario=$2 expect=$3 && shift 3
    local log="$OUT/${name//\//_}"
    local source=(--scenario "$scenario")
    [[ "$scenario" == *.toml ]] && source=(--config "$scenario")
    "$RETRYSIM" serve "${source[@]}" --for 120s >"$log.server" 2>"$log.server-err" &
    SERVER=$!
    for _ in $(seq 1 100); do
        [ -s "$log.server" ] && break
        kill -0 "$SERVER" 2>/dev/null || break
        sleep 0.1
    done
    local url
    url=$(head -n 1 "$log.server")
    if [[ "$url" != http://127.0.0.1:* ]]; then
        echo "serve-clients: $name: the server did not start:" && cat "$log.server-err" && exit 1
    fi
    local client
    client=$(timeout "${CLIENT_TIMEOUT:-60}" "$@" "$url" 2>"$log.client-err") || true
    [ -n "$client" ] || client="the client printed nothing: $(tail -n 3 "$log.client-err")"
    kill -TERM "$SERVER" 2>/dev/null || true
    local rc=0
    wait "$SERVER" || rc=$?
    SERVER=""
    local figures verdict
    figures=$(grep -E '^(requests|limited|charged|lost answers) ' "$log.server" | awk '{print $NF}' | paste -sd' ')
    verdict=$(grep -E '^  BROKEN' "$log.server" | awk '{print $2}' | paste -sd',' || true)
    local ok=no
    if [ "$expect" = holds ] && [ "$rc" = 0 ] && [ -z "$verdict" ]; then ok=yes; fi
    if [ "$expect" != holds ] && [ "$rc" = 1 ] && [ "$verdict" = "$expect" ]; then ok=yes; fi
    printf 'serve-clients: %-40s %s\n' "$name" "$client"
    printf 'serve-clients: %-40s server: requests/429s/charged/lost %s; exit %s; broken: %s; expected %s: %s\n' \
        "" "$figures" "$rc" "${verdict:-none}" "$expect" "$ok"
    if [ "$ok" != yes ]; then
        FAILED=1
        sed 's/^/    /' "$log.server"
    fi
    local done
    done=$(grep -o '"succeeded": *[0-9]*' <<<"$client" | grep -o '[0-9]*$' || echo -1)
    readme_row "$name" "$done $figures" "${verdict:-holds}"
}

# The guide's row for a case (docs/guide/any-language.md): the verdict
# exactly, each figure within a quarter of it (or 2).
readme_row() {
    local name=$1 have=$2 verdict=$3
    local row
    row=$(grep -F "| $name |" docs/guide/any-language.md || true)
    if [ -z "$row" ]; then
        echo "serve-clients: $name: docs/guide/any-language.md has no row for this case" && FAILED=1 && return
    fi
    local want want_verdict
    want=$(awk -F'|' '{print $3, $4, $5, $6, $7}' <<<"$row")
    want_verdict=$(awk -F'|' '{gsub(/ /, "", $8); print $8}' <<<"$row")
    read -r -a w <<<"$want"
    read -r -a h <<<"$have"
    local i
    for i in 0 1 2 3 4; do
        local d=$((h[i] - w[i])) slack=$((w[i] / 4 > 2 ? w[i] / 4 : 2))
        if [ "${d#-}" -gt "$slack" ]; then
            echo "serve-clients: $name: docs/guide/any-language.md says $want, this run $have" && FAILED=1 && return
        fi
    done
    if [ "$want_verdict" != "$verdict" ]; then
        echo "serve-clients: $name: docs/guide/any-language.md says $want_verdict, the server $verdict" && FAILED=1
    fi
}

PY=tests/conformance/serve/clients.py
JS=tests/conformance/serve/fetch_client.mjs
QUOTA=tests/conformance/serve/quota-30-days.toml
if [ -n "$PYTHON" ]; then
    case_ blinkimg-1s/urllib3-429 blinkimg-1s holds "$PYTHON" "$PY" --client urllib3-429 --url
    case_ blinkimg-1s/urllib3-no-retry-after blinkimg-1s early-retry "$PYTHON" "$PY" --client urllib3-no-retry-after --url
    case_ blinkimg-1s/urllib3-defaults blinkimg-1s holds "$PYTHON" "$PY" --client urllib3-defaults --url
    case_ blinkimg-1s/requests-adapter blinkimg-1s holds "$PYTHON" "$PY" --client requests-adapter --url
    case_ lost-answers-no-key/urllib3-429 lost-answers-no-key unkeyed-replay "$PYTHON" "$PY" --client urllib3-429 --no-keys --url
    case_ lost-answers-no-key/urllib3-defaults lost-answers-no-key holds "$PYTHON" "$PY" --client urllib3-defaults --no-keys --url
    case_ lost-answers-no-key/requests-adapter lost-answers-no-key unkeyed-replay "$PYTHON" "$PY" --client requests-adapter --no-keys --url
    case_ lost-answers-with-key/urllib3-429 lost-answers-with-key holds "$PYTHON" "$PY" --client urllib3-429 --url
    # Unmodified clients: no label, no key; the server groups by what they ask for.
    case_ lost-answers-no-key/stdlib-loop-unlabelled lost-answers-no-key unkeyed-replay \
        "$PYTHON" "$PY" --client stdlib-loop --no-keys --no-label --url
    case_ lost-answers-no-key/requests-adapter-unlabelled lost-answers-no-key unkeyed-replay \
        "$PYTHON" "$PY" --client requests-adapter --no-keys --no-label --url
    case_ blinkimg-1s/stdlib-loop-unlabelled blinkimg-1s holds "$PYTHON" "$PY" --client stdlib-loop --no-keys --no-label --url
    # One job answered 429 QUOTA_EXCEEDED with a 30-day Retry-After.
    CLIENT_TIMEOUT=3 case_ quota-30-days/urllib3-429 "$QUOTA" holds \
        "$PYTHON" "$PY" --client urllib3-429 --jobs 1 --workers 1 --url
    # Its backoff retries at once, then after 0.2, 0.4, 0.8, 1.6 s: six requests by 5 s, the next at 6.2 s.
    CLIENT_TIMEOUT=5 case_ quota-30-days/urllib3-no-retry-after "$QUOTA" early-retry,after-terminal \
        "$PYTHON" "$PY" --client urllib3-no-retry-after --jobs 1 --workers 1 --url
fi
if [ -n "$NODE" ]; then
    case_ blinkimg-1s/node-fetch blinkimg-1s holds "$NODE" "$JS" --url
    case_ lost-answers-no-key/node-fetch lost-answers-no-key unkeyed-replay "$NODE" "$JS" --no-keys --url
    case_ lost-answers-with-key/node-fetch lost-answers-with-key holds "$NODE" "$JS" --url
    case_ quota-30-days/node-fetch "$QUOTA" early-retry,after-terminal "$NODE" "$JS" --jobs 1 --workers 1 --url
fi
# The production driver's calibration example against `retrysim serve`
# (`--server serve`: the ledger is /__retrysim/report): 60 jobs, 4 workers,
# every job done, each charged once.
cargo build --release --quiet --example calibrate
"$RETRYSIM" serve --scenario blinkimg-1s --for 60s >"$OUT/calibrate.server" 2>"$OUT/calibrate.server-err" &
SERVER=$!
for _ in $(seq 1 100); do
    [ -s "$OUT/calibrate.server" ] && break
    sleep 0.1
done
url=$(head -n 1 "$OUT/calibrate.server")
calibrate=$(timeout 60 target/release/examples/calibrate --server serve --url "$url/v1/jobs" \
    --policy retry-after-jitter --workers 4 --jobs 60 --seed 1 --format json 2>&1) || true
kill -TERM "$SERVER" 2>/dev/null || true
wait "$SERVER" || true
SERVER=""
echo "serve-clients: calibrate --server serve: $calibrate"
if ! grep -q '"lost":0,' <<<"$calibrate" || ! grep -q '"charges":60,"keys_charged_twice":0' <<<"$calibrate"; then
    echo "serve-clients: calibrate --server serve: expected 60 jobs done, 60 charges, no key charged twice"
    FAILED=1
fi
if [ "$FAILED" != 0 ]; then
    echo "serve-clients: FAILED: a server verdict differs from the expected one (reports above)"
    exit 1
fi
echo "serve-clients: every server verdict is the expected one"
