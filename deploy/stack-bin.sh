#!/usr/bin/env bash
# `make stack-bin`: builds the stack's OpenTelemetry Collector (otel-collector/build: main.go, go.mod) and Jaeger
# (jaeger/build: a Go tool module) with CGO_ENABLED=0 -trimpath, into a cache outside the repository keyed by
# sha256(go.mod, go.sum, main.go, `go version`), so a second build, or one from a fresh clone on the same machine,
# costs seconds. ROOT/.stack-bin/NAME links to the cached binary (`verl-otel stack up --native` looks there).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${VERL_OTEL_STACK_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/verl-otel/stack-bin}
links=$root/.stack-bin
if ! command -v go >/dev/null 2>&1; then
    echo "make stack-bin: no \`go\` on PATH; install Go >= 1.25 (go.dev/dl) to build the Collector and Jaeger" >&2
    # `make test` goes on without them (the real-stack tests skip, saying why), except under CI=true
    [ "${VERL_OTEL_STACK_BIN_OPTIONAL:-}" = 1 ] && [ "${CI:-}" != true ] && exit 0
    exit 1
fi
gov=$(go version)
mkdir -p "$cache" "$links"

build() {  # NAME FOLDER PACKAGE
    local name=$1 dir=$root/deploy/$2 pkg=$3 key out tmp t0
    key=$(cat "$dir/go.mod" "$dir/go.sum" $(ls "$dir"/*.go 2>/dev/null) <(echo "$gov") | sha256sum | cut -c1-16)
    out=$cache/$key/$name
    if [ -x "$out" ]; then
        echo "[stack-bin] $name: cached $out"
    else
        echo "[stack-bin] $name: building $pkg ($gov; the first build takes minutes, Jaeger's 10-20 on 2 cores)"
        t0=$SECONDS
        tmp=$(mktemp -d "$cache/.build-XXXXXX")
        (cd "$dir" && CGO_ENABLED=0 go build -trimpath -o "$tmp/$name" "$pkg") || { rm -rf "$tmp"; exit 1; }
        mkdir -p "$cache/$key"
        mv "$tmp/$name" "$out"  # atomic: a concurrent or interrupted build never leaves half a binary there
        rm -rf "$tmp"
        echo "[stack-bin] $name: built in $((SECONDS - t0))s -> $out"
    fi
    ln -sfn "$out" "$links/$name"
}

build otelcol-verl otel-collector/build .
build jaeger jaeger/build github.com/jaegertracing/jaeger/cmd/jaeger
