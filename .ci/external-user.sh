#!/usr/bin/env bash
# retrysim as a user gets it: `tests/external-user` copied into a temporary
# directory outside this repository (so no .cargo/config.toml, path or
# workspace of ours is inherited), its `retrysim = { git = ... }` lines (the
# README's, verbatim) pointed at a clone of HEAD by file:// URL, no [patch];
# then its tests in a debug build, as `cargo test` runs them, with CI=true.
# Also a crate that depends on the checkout by path with default features.
#
# Both start from retrysim's Cargo.lock, so they build the versions retrysim
# is tested with (a user's first build picks the newest compatible ones).
# Usage: bash .ci/external-user.sh   (from anywhere; tests committed HEAD)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
url_in_readme="https://github.com/retrysim/retrysim"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export CARGO_TARGET_DIR="${EXTERNAL_TARGET_DIR:-$root/target/external}"

git clone --quiet --no-hardlinks "$root" "$tmp/retrysim"
echo "external-user: retrysim at $(git -C "$tmp/retrysim" rev-parse --short HEAD), from file://$tmp/retrysim"

mkdir "$tmp/user"
cp -r "$root/tests/external-user/Cargo.toml" "$root/tests/external-user/rustfmt.toml" "$root/tests/external-user/src" "$root/tests/external-user/tests" "$tmp/user/"
sed -i "s|$url_in_readme|file://$tmp/retrysim|" "$tmp/user/Cargo.toml"
test "$(grep -c "git = \"file://$tmp/retrysim\"" "$tmp/user/Cargo.toml")" = 2 || {
    echo "external-user: expected two retrysim git lines with $url_in_readme in tests/external-user/Cargo.toml" >&2
    exit 1
}
if grep -q '^\[patch' "$tmp/user/Cargo.toml"; then echo "external-user: a [patch] section crept in" >&2; exit 1; fi
cp "$root/Cargo.lock" "$tmp/user/Cargo.lock"
(
    cd "$tmp/user"
    cargo fmt --check
    cargo test
)

# A path dependent with default features (the fork comes in by path too).
mkdir -p "$tmp/path-dependent/src"
cat > "$tmp/path-dependent/Cargo.toml" <<TOML
[package]
name = "path-dependent"
version = "0.1.0"
edition = "2024"
publish = false

[dependencies]
retrysim = { path = "$root" }
TOML
echo 'pub use retrysim::testing::Harness;' > "$tmp/path-dependent/src/lib.rs"
cp "$root/Cargo.lock" "$tmp/path-dependent/Cargo.lock"
(cd "$tmp/path-dependent" && cargo build)
echo "external-user: the git dependent's tests and the path dependent's build passed"
