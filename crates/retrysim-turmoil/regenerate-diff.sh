#!/usr/bin/env bash
# Writes UPSTREAM.diff: `diff -ruN` of the published turmoil 0.7.2 against
# this directory, with the fork's own files (and upstream's files the fork
# does not carry) left out, the roots named turmoil-0.7.2/ and
# retrysim-turmoil/, and no timestamps.
#
#   bash crates/retrysim-turmoil/regenerate-diff.sh        # rewrites UPSTREAM.diff
#   bash crates/retrysim-turmoil/regenerate-diff.sh OUT    # writes OUT instead
#
# tests/upstream_diff.rs runs it with OUT and compares OUT with UPSTREAM.diff.
# The published source comes through cargo: a throwaway crate depending on
# turmoil = "=0.7.2" makes cargo download it (checked against the registry
# index's checksum) into its cache, and the .crate is unpacked from there.
# Needs bash, cargo, tar, GNU diff, and crates.io unless cargo's cache
# already holds turmoil 0.7.2 and its dependencies.
set -euo pipefail
export LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/UPSTREAM.diff}
cargo=${CARGO:-cargo}

# The one list of what the diff leaves out (diff matches each against a
# file's or directory's base name). FORK.md explains each.
exclude=(
    # The fork's own files.
    Cargo.toml             # the fork's manifest (upstream's is Cargo.toml.orig, compared)
    FORK.md
    UPSTREAM.diff
    regenerate-diff.sh
    rustfmt.toml
    fork.rs                # tests/fork.rs
    upstream_diff.rs       # tests/upstream_diff.rs
    target
    # Upstream's files the fork does not carry: cargo's bookkeeping in a
    # published crate, upstream's lock file and CI workflows.
    .cargo-ok
    .cargo_vcs_info.json
    Cargo.lock
    .github
)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/fetch/src"
cat >"$work/fetch/Cargo.toml" <<'EOF'
[package]
name = "fetch-turmoil"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
turmoil = "=0.7.2"

[workspace]
EOF
: >"$work/fetch/src/lib.rs"

# Where cargo unpacked turmoil 0.7.2 (the cache, else the network).
metadata() { (cd "$work/fetch" && "$cargo" metadata --format-version 1 "$@"); }
json=$(metadata --offline 2>/dev/null || metadata)
manifest=$(grep -o '"manifest_path":"[^"]*/turmoil-0\.7\.2/Cargo\.toml"' <<<"$json" | head -n 1 | cut -d'"' -f4)
if [[ -z $manifest ]]; then
    echo "regenerate-diff.sh: cargo metadata names no turmoil 0.7.2" >&2
    exit 2
fi
unpacked=$(dirname "$manifest")
# registry/src/<index>/turmoil-0.7.2 is unpacked from registry/cache/<index>/turmoil-0.7.2.crate:
# unpack the .crate afresh, so that nothing written into cargo's unpacked
# copy since could hide in it.
crate=${unpacked/\/registry\/src\//\/registry\/cache\/}.crate
if [[ -f $crate ]]; then
    tar -xzf "$crate" -C "$work"
else
    cp -R "$unpacked" "$work/turmoil-0.7.2"
fi

printf '%s\n' "${exclude[@]}" >"$work/upstream-diff.exclude"
ln -s "$here" "$work/retrysim-turmoil"
status=0
(cd "$work" && diff -ruN --exclude-from=upstream-diff.exclude turmoil-0.7.2 retrysim-turmoil) >"$work/raw" || status=$?
if ((status > 1)); then
    echo "regenerate-diff.sh: diff failed ($status)" >&2
    exit 2
fi

# Drop the timestamps from each file's two header lines.
awk '
    /^diff / { header = 2; print; next }
    header > 0 && /^(---|\+\+\+) / { sub(/\t.*/, ""); header--; print; next }
    { header = 0; print }
' "$work/raw" >"$work/diff"
mv "$work/diff" "$out"
