#!/usr/bin/env bash
# Issue 57's targets, side by side on one machine, in one go:
#
#   bash benches/speed-targets.sh OLD_BIN NEW_BIN [BASE_BIN]
#
# OLD_BIN is the binary before the change (e.g. e8338c5's), NEW_BIN after it,
# BASE_BIN (optional) 9af3722's, the build whose hunt the first target is
# measured against. It prints, each with the command that gave it:
#   1. `hunt --seeds 1000 --jobs 1 --format json` CPU (user + system), determinism on and
#      `--determinism-every 0`, median of REPS alternating runs of each binary,
#      with jobs and virtual time from the JSON (target: NEW <= 1.5x BASE, on;
#      docs/guide/speed.md's table is user time alone, system adds about 1%);
#   2. the dumped worlds of fleet seeds 7, 30, 41, 100, 106 (dumped by OLD_BIN):
#      `run --config FILE --seed N` CPU on OLD and NEW and their ratio
#      (target: >= 5x), whether the outputs are the same, and
#      `hunt --seeds 1 --start N --scenario-kind fleet` on each binary;
#   3. per-seed outliers of seeds 1..=SEEDS (2000) on NEW_BIN, one process a
#      seed (`benches/per-seed.py`, each seed's least CPU of PASSES passes,
#      3 unless set): every seed above 10x the median CPU per job of the kind
#      it drew (target: none), with its CPU per event when NEW_BIN has
#      `hunt --work`;
#   4. `diff -r` of `.ci/outputs.sh` for OLD and NEW (target: identical).
# Environment: REPS (3), SEEDS (2000), KINDS ("all": the default hunt's
# seeds, each of the kind it draws; add fleet and single to run each kind's
# own 2,000), SKIP ("" or any of hunt dumped outliers outputs), OUT (a fresh
# temporary directory). Every command is bounded by `timeout`; the whole run
# takes about 15 to 25 minutes on two cores.
set -u
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: bash benches/speed-targets.sh OLD_BIN NEW_BIN [BASE_BIN]" >&2; exit 2
fi
for b in "$@"; do
  [ -x "$b" ] || { echo "speed-targets: $b is not an executable file" >&2; exit 2; }
done
old=$1; new=$2; base=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
reps=${REPS:-3}; seeds=${SEEDS:-2000}; kinds=${KINDS:-all}; skip=${SKIP:-}
out=${OUT:-$(mktemp -d /tmp/speed-targets.XXXXXX)}; mkdir -p "$out"
case "$reps$seeds" in *[!0-9]*) echo "speed-targets: REPS and SEEDS must be whole numbers" >&2; exit 2;; esac
bins=("$old" "$new"); [ -n "$base" ] && bins+=("$base")
name() { case "$1" in "$old") echo OLD;; "$new") echo NEW;; *) echo BASE;; esac; }
skipped() { case " $skip " in *" $1 "*) return 0;; *) return 1;; esac; }
echo "speed-targets: OLD=$old NEW=$new${base:+ BASE=$base}; REPS=$reps SEEDS=$seeds KINDS=$kinds; files in $out"

# CPU seconds (user + system: their sum is exact, the split is sampled at
# the kernel's tick) of one command (stdout to $2), bounded by $1 seconds.
user_cpu() {
  local limit=$1 dest=$2; shift 2
  /usr/bin/time -f "%U %S" -o "$out/time" timeout "$limit" "$@" > "$dest" 2> "$out/stderr" || true
  tail -1 "$out/time" | awk '{printf "%.2f\n", $1 + $2}'
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'; }

if ! skipped hunt; then
  echo; echo "## 1. hunt --seeds 1000 --jobs 1 --format json (CPU s, median of $reps alternating runs)"
  for det in 1 0; do
    echo "    command: BIN hunt --seeds 1000 --jobs 1 --format json --determinism-every $det"
    for b in "${bins[@]}"; do : > "$out/hunt-$(name "$b")-$det.cpu"; done
    for _ in $(seq "$reps"); do
      for b in "${bins[@]}"; do
        user_cpu 600 "$out/hunt-$(name "$b")-$det.json" "$b" hunt --seeds 1000 --jobs 1 --format json \
          --determinism-every $det >> "$out/hunt-$(name "$b")-$det.cpu"
      done
    done
  done
  echo "| build | determinism on | determinism off | jobs simulated | virtual s |"
  echo "|---|---:|---:|---:|---:|"
  for b in "${bins[@]}"; do
    n=$(name "$b")
    on=$(median < "$out/hunt-$n-1.cpu"); off=$(median < "$out/hunt-$n-0.cpu")
    jobs=$(jq .jobs "$out/hunt-$n-0.json"); virt=$(jq '.virtual_ms / 1000 | floor' "$out/hunt-$n-0.json")
    echo "| $n | $on | $off | $jobs | $virt |"
    eval "hunt_$n=$on"
  done
  [ -n "$base" ] && echo "NEW / BASE, determinism on: $(ratio "$hunt_NEW" "$hunt_BASE") (target: at most 1.50x)"
  echo "NEW / OLD, determinism on: $(ratio "$hunt_NEW" "$hunt_OLD")"
fi

if ! skipped dumped; then
  echo; echo "## 2. dumped fleet worlds (CPU s, median of $reps alternating runs)"
  echo "    commands: OLD hunt --scenario-kind fleet --dump N > seed-N.toml; BIN run --config seed-N.toml --seed N;"
  echo "              BIN hunt --seeds 1 --start N --scenario-kind fleet --jobs 1"
  echo "| seed | run OLD | run NEW | OLD / NEW (target >= 5x) | same output | hunt OLD | hunt NEW |${base:+ hunt BASE |}"
  echo "|---:|---:|---:|---:|---|---:|---:|${base:+---:|}"
  for n in 7 30 41 100 106; do
    "$old" hunt --scenario-kind fleet --dump "$n" > "$out/seed-$n.toml"
    : > "$out/run-OLD-$n.cpu"; : > "$out/run-NEW-$n.cpu"
    for _ in $(seq "$reps"); do
      for b in "$old" "$new"; do
        user_cpu 300 "$out/run-$(name "$b")-$n.out" "$b" run --config "$out/seed-$n.toml" --seed "$n" \
          >> "$out/run-$(name "$b")-$n.cpu"
      done
    done
    ro=$(median < "$out/run-OLD-$n.cpu"); rn=$(median < "$out/run-NEW-$n.cpu")
    same=no; cmp -s "$out/run-OLD-$n.out" "$out/run-NEW-$n.out" && same=yes
    row="| $n | $ro | $rn | $(ratio "$ro" "$rn") | $same |"
    for b in "${bins[@]}"; do
      row="$row $(user_cpu 300 /dev/null "$b" hunt --seeds 1 --start "$n" --scenario-kind fleet --jobs 1) |"
    done
    echo "$row"
  done
fi

if ! skipped outliers; then
  echo; echo "## 3. per-seed outliers on NEW, seeds 1..=$seeds (>10x the median CPU per job of the kind drawn)"
  for k in $kinds; do
    echo "    command: python3 benches/per-seed.py NEW $k 1 $seeds"
    timeout 1800 python3 "$here/per-seed.py" "$new" "$k" 1 "$seeds" > "$out/per-seed-$k.tsv" 2> "$out/per-seed-$k.summary"
    cat "$out/per-seed-$k.summary"
  done
fi

if ! skipped outputs; then
  echo; echo "## 4. outputs (bash .ci/outputs.sh BIN DIR; diff -r)"
  root=$(cd "$here/.." && pwd)
  timeout 1200 bash "$root/.ci/outputs.sh" "$old" "$out/outputs-old" > /dev/null
  timeout 1200 bash "$root/.ci/outputs.sh" "$new" "$out/outputs-new" > /dev/null
  if diff -r "$out/outputs-old" "$out/outputs-new" > "$out/outputs.diff"; then
    echo "identical: $(ls "$out/outputs-new" | wc -l) files"
  else
    echo "DIFFERENT: $(grep -c '^diff\|^Only' "$out/outputs.diff") files differ; see $out/outputs.diff"
  fi
fi
