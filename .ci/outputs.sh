#!/usr/bin/env bash
# The outputs a behaviour-unchanged change must keep byte for byte: every
# named scenario's JSON report and trace (seeds 1 and 7), four compare
# presets, a default hunt and a sabotaged one, from one `retrysim` binary.
#
#   bash .ci/outputs.sh OLD_BINARY /tmp/old
#   bash .ci/outputs.sh target/release/retrysim /tmp/new
#   diff -r /tmp/old /tmp/new && echo identical
#
# Exit codes are recorded in the files (a run that fails must fail alike).
set -u
if [ $# -ne 2 ]; then echo "usage: bash .ci/outputs.sh RETRYSIM_BINARY OUTPUT_DIR" >&2; exit 2; fi
bin=$1; out=$2; mkdir -p "$out"
names=$("$bin" scenarios | awk '{print $1}') || { echo "outputs: $bin scenarios failed" >&2; exit 1; }
for n in $names; do
  for s in 1 7; do
    "$bin" run --scenario "$n" --seed $s --format json > "$out/run-$n-$s.json" 2>&1; echo "rc=$?" >> "$out/run-$n-$s.json"
    "$bin" trace --scenario "$n" --seed $s > "$out/trace-$n-$s.txt" 2>&1; echo "rc=$?" >> "$out/trace-$n-$s.txt"
  done
done
"$bin" compare --format json > "$out/compare-1s.json" 2>/dev/null
"$bin" compare --preset blinkimg-60s --format json > "$out/compare-60s.json" 2>/dev/null
"$bin" compare --preset berlin --seeds 2 --format csv > "$out/compare-berlin.csv" 2>/dev/null
"$bin" compare --preset habits --seeds 2 --format csv > "$out/compare-habits.csv" 2>/dev/null
"$bin" hunt --seeds 300 > "$out/hunt-300.txt" 2>/dev/null; echo "rc=$?" >> "$out/hunt-300.txt"
"$bin" hunt --seeds 100 --sabotage ignore-cancel > "$out/hunt-sab.txt" 2>/dev/null; echo "rc=$?" >> "$out/hunt-sab.txt"
echo "outputs: $(ls "$out" | wc -l) files in $out"
