#!/usr/bin/env bash
# What the optional `[profile.dev.package.*]` lines of the README's Cargo.toml
# buy a user: tests/external-user outside the repository (as
# .ci/external-user.sh builds it), in a fresh target directory, built and
# then tested twice in the debug profile, with the lines (`with`) and without
# them (`without`). Prints wall and CPU seconds per step, and the load average.
#
#   bash benches/external_profile.sh without
#   bash benches/external_profile.sh with
set -euo pipefail
case "${1:-}" in with|without) ;; *) echo "usage: bash benches/external_profile.sh with|without" >&2; exit 2;; esac
variant=$1
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git clone --quiet --no-hardlinks "$root" "$tmp/retrysim"
mkdir "$tmp/user"
cp -r "$root/tests/external-user/Cargo.toml" "$root/tests/external-user/src" "$root/tests/external-user/tests" "$tmp/user/"
sed -i "s|https://github.com/retrysim/retrysim|file://$tmp/retrysim|" "$tmp/user/Cargo.toml"
if [ "$variant" = without ]; then
    # Drop each `[profile...]` header and the `opt-level` line under it.
    sed -i '/^\[profile\./,/^opt-level/d' "$tmp/user/Cargo.toml"
    if grep -q '^\[profile' "$tmp/user/Cargo.toml"; then echo "profile lines left" >&2; exit 1; fi
fi
cp "$root/Cargo.lock" "$tmp/user/Cargo.lock"
cd "$tmp/user"
export CARGO_TARGET_DIR="$tmp/target"
/usr/bin/time -f "$variant: build %e s wall, %U s user CPU" cargo test --no-run -q 2>&1 | grep -E "^$variant"
for i in 1 2; do
    /usr/bin/time -f "$variant: test run $i %e s wall, %U s user CPU" cargo test -q 2>&1 | grep -E "^$variant|test result: FAILED" || true
done
echo "$variant: load average $(cut -d' ' -f1-3 /proc/loadavg)"
