#!/usr/bin/env bash
# retrysim as a user gets it: `tests/external-user` (the README's crate) and
# `tests/external-reqwest` (the book's reqwest-middleware stack), each copied
# into a temporary directory outside this repository (so no .cargo/config.toml, path or
# workspace of ours is inherited), its `retrysim = { git = ... }` lines (the
# README's and the book's, verbatim) pointed at a clone of HEAD by file:// URL, no [patch];
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
# Without debug info (a user's `cargo test` has it): what is tested is what
# builds and passes, and debug info is much of a debug build's CPU. `cargo
# package` in .ci/run builds in the same directory with the same setting.
export CARGO_PROFILE_DEV_DEBUG=false

git clone --quiet --no-hardlinks "$root" "$tmp/retrysim"
echo "external-user: retrysim at $(git -C "$tmp/retrysim" rev-parse --short HEAD), from file://$tmp/retrysim"

# Each outside crate: copied, its retrysim git lines pointed at the clone
# (as many as it has), no [patch], retrysim's lockfile, then `cargo fmt
# --check` and `cargo test` in the one target directory they share.
outside() {
    local name=$1 lines=$2
    mkdir "$tmp/$name"
    cp -r "$root/tests/$name/Cargo.toml" "$root/tests/$name/rustfmt.toml" "$root/tests/$name/src" "$root/tests/$name/tests" "$tmp/$name/"
    sed -i "s|$url_in_readme|file://$tmp/retrysim|" "$tmp/$name/Cargo.toml"
    test "$(grep -c "git = \"file://$tmp/retrysim\"" "$tmp/$name/Cargo.toml")" = "$lines" || {
        echo "external-user: expected $lines retrysim git line(s) with $url_in_readme in tests/$name/Cargo.toml" >&2
        exit 1
    }
    if grep -q '^\[patch' "$tmp/$name/Cargo.toml"; then echo "external-user: a [patch] section crept in tests/$name" >&2; exit 1; fi
    cp "$root/Cargo.lock" "$tmp/$name/Cargo.lock"
    local start=$SECONDS
    (
        cd "$tmp/$name"
        cargo fmt --check
        cargo test
    )
    echo "external-user: tests/$name built and tested in $((SECONDS - start)) s"
}
# The README's crate: its own client, lean in [dependencies], the harness in
# [dev-dependencies].
outside external-user 2
# The book's reqwest-middleware stack (docs/book/reqwest-middleware.md):
# reqwest-retry over reqwest, the harness with `sim-reqwest`.
outside external-reqwest 1

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
echo "external-user: the git dependents' tests and the path dependent's build passed"
