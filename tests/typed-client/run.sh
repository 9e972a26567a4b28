#!/usr/bin/env bash
# A published typed client, unchanged, against the simulated API wearing its
# API's preset (docs/guide/typed-clients.md): async-openai 0.43.0 (pinned in
# tests/typed-client/Cargo.toml and its lockfile) sends chat completions to
# `retrysim serve --config tests/typed-client/openai-chat.toml` by base URL.
#
# Two cases, each judged from the server's ledger (judge.py) and the
# server's own ledger-only checks:
# - openai-chat: refusals carry Retry-After, retry-after-ms and
#   x-ratelimit-* as OpenAI documents; the client must finish every job and
#   send no retry before either advice.
# - openai-chat-ms-only (negative control): the same API without
#   Retry-After; async-openai reads only Retry-After, so it must come back
#   before retry-after-ms says and lose jobs. If it ever stops doing so (a
#   new version reads retry-after-ms), this case fails: update the audit
#   row (docs/guide/what-people-use.md) and the expectation here.
#
# Needs cargo (the client builds in tests/typed-client/target, its own
# workspace, a debug build of about 1.2 CPU-minutes the first time), python3 and curl; a missing
# one fails with what to install. Real time: about 15 s once built.
set -euo pipefail
cd "$(dirname "$0")/../.."

for tool in cargo python3 curl; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "typed-client: $tool is not installed: install it (apt-get install python3 curl; cargo from rustup.rs) and run again."
        exit 1
    }
done
RETRYSIM=${RETRYSIM:-target/release/retrysim}
[ -x "$RETRYSIM" ] || cargo build --release --quiet --bin retrysim
(cd tests/typed-client && nice -n 19 cargo build --quiet --locked) || {
    echo "typed-client: async-openai did not build: it needs crates.io (or a vendored copy) for its pinned lockfile; see the error above."
    exit 1
}
CLIENT=tests/typed-client/target/debug/typed-client
OUT=target/typed-client
rm -rf "$OUT" && mkdir -p "$OUT"

SERVER=""
trap '[ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; true' EXIT
FAILED=0

# case NAME EXPECT: serve tests/typed-client/NAME.toml, run the client (30
# jobs, one at a time), read the ledger, stop the server, judge.
case_() {
    local name=$1 expect=$2
    local log="$OUT/$name"
    "$RETRYSIM" serve --config "tests/typed-client/$name.toml" --for 120s >"$log.server" 2>"$log.server-err" &
    SERVER=$!
    for _ in $(seq 1 100); do
        [ -s "$log.server" ] && break
        kill -0 "$SERVER" 2>/dev/null || break
        sleep 0.1
    done
    local url
    url=$(head -n 1 "$log.server")
    if [[ "$url" != http://127.0.0.1:* ]]; then
        echo "typed-client: $name: the server did not start:" && cat "$log.server-err" && exit 1
    fi
    timeout 60 "$CLIENT" --url "$url" --jobs 30 --workers 1 >"$log.client" 2>"$log.client-err" || true
    curl -sf "$url/__retrysim/ledger" >"$log.ledger" || echo '{"arrivals":[]}' >"$log.ledger"
    kill -TERM "$SERVER" 2>/dev/null || true
    local rc=0
    wait "$SERVER" || rc=$?
    SERVER=""
    local verdict
    verdict=$(grep -E '^verdict' "$log.server" || echo "verdict (none: the server printed no report)")
    if [ ! -s "$log.client" ]; then
        echo "typed-client: $name: the client printed nothing: $(tail -n 3 "$log.client-err")"
        FAILED=1
        return
    fi
    local judged
    judged=$(python3 tests/typed-client/judge.py "$log.ledger" "$log.client" "$expect") || FAILED=1
    printf 'typed-client: %-22s %s\n' "$name" "$(tail -n 1 "$log.client")"
    printf 'typed-client: %-22s %s; server exit %s, %s\n' "" "$judged" "$rc" "$verdict"
    if [ "$rc" != 0 ]; then
        echo "typed-client: $name: the server's ledger-only checks broke:" && sed 's/^/    /' "$log.server"
        FAILED=1
    fi
}

case_ openai-chat honours
case_ openai-chat-ms-only ignores-dialect
if [ "$FAILED" != 0 ]; then
    echo "typed-client: FAILED: a run is not what tests/typed-client/run.sh expects (above)"
    exit 1
fi
echo "typed-client: async-openai honours OpenAI's Retry-After and ignores retry-after-ms, as expected"
