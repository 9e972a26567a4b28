#!/usr/bin/env bash
# Calibration against two more real rate limiters: express-rate-limit 8
# (npm, pinned in package.json and package-lock.json) and nginx's limit_req
# (the Debian package nginx-light), beside tests/conformance/run.sh's
# Flask-Limiter.
#
# Installs express and express-rate-limit with `npm ci` into
# target/limiters-node, starts express_server.mjs, and nginx on a
# nginx.conf.in of its own (a prefix under target/limiters, one process in
# the foreground) in front of nginx_backend.py, all on 127.0.0.1. Then it
# drives each of the six limiters (express draft-8 with and without legacy
# headers; nginx 503 and 429 without burst, burst=10, burst=10 nodelay) with
# the real driver (examples/calibrate.rs: 8 workers, 60 jobs, 10 requests
# per second) under each production preset, LIMITERS_REPEATS times (default
# 3), in three loops at the same time (express; nginx without burst; nginx
# with burst, each nginx pair on a server and ledger of its own); runs each simulated twin
# (sim/*.toml, `retrysim run --policy PRESET`) on seeds 1..LIMITERS_REPEATS
# and two simulated negative controls; and prints the table of
# docs/measurements/calibration.md (report.py, which also decides pass or fail).
#
# A missing node, npm or nginx is installed with apt-get where it can be
# (root, Debian); where it cannot, the script fails and says how to install
# it: it never skips. Loopback only; every run is bounded (calibrate's
# --time-limit 60s under `timeout 90`); the servers are stopped by their PIDs.
set -euo pipefail
cd "$(dirname "$0")/../../.."

REPEATS=${LIMITERS_REPEATS:-3}
HERE=tests/conformance/limiters
OUT=target/limiters
NODE_DIR=target/limiters-node
PRESETS=(interactive background batch standard)
EXPRESS=(draft8 draft8-legacy)
NGINX=(n503 n429 burst nodelay)
NGINX_A=(n503 n429)
NGINX_B=(burst nodelay)

# Installs a Debian package for a missing command, or fails saying how.
need() {
    local command=$1 package=$2
    command -v "$command" >/dev/null 2>&1 && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "limiters: $command is missing: apt-get install $package"
        { timeout 300 apt-get install -y --no-install-recommends "$package" ||
            { timeout 300 apt-get update && timeout 300 apt-get install -y --no-install-recommends "$package"; }; } \
            >"$OUT-apt.log" 2>&1 || true
    fi
    command -v "$command" >/dev/null 2>&1 && return 0
    echo "limiters: FAILED: $command is not installed and could not be installed here; the calibration"
    echo "limiters: runs a real $package: install it (as root: apt-get install $package) and run again."
    [ -s "$OUT-apt.log" ] && tail -5 "$OUT-apt.log"
    exit 1
}
mkdir -p target
need python3 python3
need node nodejs
need npm npm
need nginx nginx-light

mkdir -p "$NODE_DIR"
cp "$HERE/package.json" "$HERE/package-lock.json" "$HERE/express_server.mjs" "$NODE_DIR/"
(cd "$NODE_DIR" && timeout 300 npm ci --no-audit --no-fund --loglevel=error >npm.log 2>&1) || {
    echo "limiters: FAILED: npm ci of express and express-rate-limit (pinned in $HERE/package-lock.json):"
    tail -20 "$NODE_DIR/npm.log"
    exit 1
}
cargo build --release --quiet --example calibrate --bin retrysim
CALIBRATE=target/release/examples/calibrate
RETRYSIM=target/release/retrysim

rm -rf "$OUT" && mkdir -p "$OUT/nginx"
PIDS=()
stop() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop EXIT
# Waits for a server's port file; fails with its log if it died or never wrote one.
wait_port() {
    local pid=$1 file=$2 log=$3
    for _ in $(seq 1 100); do
        [ -s "$file" ] && return 0
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "limiters: a server did not start:" && cat "$log" && exit 1
        fi
        sleep 0.1
    done
    echo "limiters: a server did not report its port in 10 s:" && cat "$log" && exit 1
}
node "$NODE_DIR/express_server.mjs" "$OUT/express-port" >"$OUT/express.log" 2>&1 &
PIDS+=($!)
wait_port "${PIDS[-1]}" "$OUT/express-port" "$OUT/express.log"
for side in a b; do
    python3 "$HERE/nginx_backend.py" --ledger "$OUT/nginx/ledger-$side.log" --port-file "$OUT/backend-$side-port" \
        >"$OUT/backend-$side.log" 2>&1 &
    PIDS+=($!)
    wait_port "${PIDS[-1]}" "$OUT/backend-$side-port" "$OUT/backend-$side.log"
done
# nginx cannot listen on port 0: ports the kernel just gave out, tried up to 3 times.
PREFIX="$(pwd)/$OUT/nginx"
for try in 1 2 3; do
    read -r PORT_A PORT_B < <(python3 -c 'import socket
a, b = socket.socket(), socket.socket()
a.bind(("127.0.0.1", 0)); b.bind(("127.0.0.1", 0))
print(a.getsockname()[1], b.getsockname()[1])')
    sed -e "s|@PREFIX@|$PREFIX|g" -e "s|@PORT_A@|$PORT_A|g" -e "s|@PORT_B@|$PORT_B|g" \
        -e "s|@BACKEND_A@|$(cat "$OUT/backend-a-port")|g" -e "s|@BACKEND_B@|$(cat "$OUT/backend-b-port")|g" \
        "$HERE/nginx.conf.in" >"$PREFIX/nginx.conf"
    nginx -p "$PREFIX" -c "$PREFIX/nginx.conf" -e "$PREFIX/error.log" >"$OUT/nginx.log" 2>&1 &
    NGINX_PID=$!
    up=
    for _ in $(seq 1 50); do
        kill -0 "$NGINX_PID" 2>/dev/null || break
        if python3 -c "import socket; [socket.create_connection(('127.0.0.1', p), 1) for p in ($PORT_A, $PORT_B)]" \
            2>/dev/null; then
            up=1 && break
        fi
        sleep 0.1
    done
    [ -n "$up" ] && break
    kill "$NGINX_PID" 2>/dev/null || true
    wait "$NGINX_PID" 2>/dev/null || true
    [ "$try" = 3 ] && echo "limiters: nginx did not start:" && cat "$OUT/nginx.log" "$PREFIX/error.log" && exit 1
done
PIDS+=("$NGINX_PID")
EXPRESS_BASE="http://127.0.0.1:$(cat "$OUT/express-port")"
NGINX_A_BASE="http://127.0.0.1:$PORT_A"
NGINX_B_BASE="http://127.0.0.1:$PORT_B"
echo "limiters: express-rate-limit on $EXPRESS_BASE, nginx $(nginx -v 2>&1 | sed 's/.*nginx\///') on" \
    "$NGINX_A_BASE and $NGINX_B_BASE; $REPEATS runs of each preset"

# One real run: a JSON line tagged with its limiter and preset.
real() {
    local limiter=$1 url=$2 preset=$3
    local json
    json=$(timeout 90 "$CALIBRATE" --url "$url" --policy "$preset" --jobs 60 --limit 10 --format json --time-limit 60s)
    echo "{\"limiter\":\"$limiter\",\"preset\":\"$preset\",\"run\":$json}"
}
# Interleaved, so that a slow spell of the machine spreads over every row.
express_runs() {
    for rep in $(seq 1 "$REPEATS"); do
        for preset in "${PRESETS[@]}"; do
            for name in "${EXPRESS[@]}"; do
                real "express-$name" "$EXPRESS_BASE/$name/v1/jobs" "$preset" >>"$OUT/real-express.jsonl"
            done
        done
        echo "limiters: express runs $rep/$REPEATS done"
    done
}
# One nginx server's pair: SIDE BASE NAME...
nginx_runs() {
    local side=$1 base=$2 && shift 2
    for rep in $(seq 1 "$REPEATS"); do
        for preset in "${PRESETS[@]}"; do
            for name in "$@"; do
                real "nginx-$name" "$base/$name/v1/jobs" "$preset" >>"$OUT/real-nginx-$side.jsonl"
            done
        done
        echo "limiters: nginx ($*) runs $rep/$REPEATS done"
    done
}
started=$SECONDS
express_runs &
express_loop=$!
PIDS+=("$express_loop")
nginx_runs a "$NGINX_A_BASE" "${NGINX_A[@]}" &
nginx_a_loop=$!
PIDS+=("$nginx_a_loop")
nginx_runs b "$NGINX_B_BASE" "${NGINX_B[@]}"
wait "$express_loop"
wait "$nginx_a_loop"
echo "limiters: real runs took $((SECONDS - started)) s"
cat "$OUT/real-express.jsonl" "$OUT/real-nginx-a.jsonl" "$OUT/real-nginx-b.jsonl" >"$OUT/real.jsonl"

# The twins, and the negative controls' twins (one behaviour taken away).
sim() {
    local limiter=$1 config=$2 preset=$3 seed=$4 control=${5:-}
    local json
    json=$("$RETRYSIM" run --config "$config" --policy "$preset" --seed "$seed" --format json | tr -d '\n')
    echo "{\"limiter\":\"$limiter\",\"preset\":\"$preset\",\"seed\":$seed,\"control\":\"$control\",\"run\":$json}"
}
sed -e 's/^nodelay = false$/nodelay = true/' "$HERE/sim/nginx-burst.toml" >"$OUT/control-no-queue.toml"
sed -e 's/^advice = "header_seconds"$/advice = "header_seconds"\nretry_after_rounding = "truncate"/' \
    "$HERE/sim/express-draft8.toml" >"$OUT/control-retry-after-zero.toml"
grep -q '^nodelay = true$' "$OUT/control-no-queue.toml" &&
    grep -q '^retry_after_rounding = "truncate"$' "$OUT/control-retry-after-zero.toml" || {
    echo "limiters: cannot write the negative controls' twins from $HERE/sim" && exit 1
}
for seed in $(seq 1 "$REPEATS"); do
    for preset in "${PRESETS[@]}"; do
        for limiter in "${EXPRESS[@]/#/express-}" "${NGINX[@]/#/nginx-}"; do
            sim "$limiter" "$HERE/sim/$limiter.toml" "$preset" "$seed" >>"$OUT/sim.jsonl"
        done
    done
    sim nginx-burst "$OUT/control-no-queue.toml" background "$seed" nginx-burst-without-the-queue >>"$OUT/controls.jsonl"
    sim express-draft8 "$OUT/control-retry-after-zero.toml" background "$seed" express-retry-after-zero \
        >>"$OUT/controls.jsonl"
done

python3 "$HERE/report.py" "$OUT/real.jsonl" "$OUT/sim.jsonl" "$OUT/controls.jsonl"
