#!/usr/bin/env bash
# benchbundle.sh: the benchmarks that issues 15 and 16 judge on 16 cores,
# packed to run on a machine that has neither Go nor a network.
#
#   hack/benchbundle.sh build        # here: static binaries and the run
#                                    # script into bin/bench-bundle.tgz
#   hack/benchbundle.sh run OUT      # there, from the unpacked bundle:
#                                    # results into OUT
#   hack/benchbundle.sh report DIR   # here: tables and verdicts of the
#                                    # matcher suites from DIR's results
#
# `make bench-bundle` runs the first. On the other machine:
#   mkdir -p /tmp/b && tar xzf bin/bench-bundle.tgz -C /tmp/b && /tmp/b/benchbundle.sh run "$OUT"
# The knobs are environment variables (defaults in brackets), sized so that
# the whole run takes about 8 minutes on 16 cores (under one call of 10):
#   MATCHER_CPU [16], MATCHER_BENCHTIME [0.5s], MATCHER_COUNT [5],
#   MATCHER_WORKLOADS [parallel|churn90|fanin|faninsert|fanchurn],
#   NATS_BENCHTIME [0.5s], NATS_COUNT [5],
#   SIDECAR_DURATION [2s], SIDECAR_ROUNDS [3], SIDECAR_ONLY [all five],
#   RATE_DURATION [2s], RATE_ROUNDS [1] (0 skips the rate search).
# bench-sidecar prints its own tables and verdicts (bench-sidecar.txt,
# rates.txt); the matcher suites' output is raw `go test` output, which
# `report` turns into tables with test/bench/matcher's and
# test/bench/matchernats' -results.
set -euo pipefail

build() {
	local dir=bin/bench-bundle
	rm -rf "$dir" && mkdir -p "$dir"
	export CGO_ENABLED=0
	make binaries BIN_DIR="$dir" >/dev/null
	go build -trimpath -ldflags="-s -w" -o "$dir/tcprelay" ./test/bench/tcprelay
	go build -trimpath -ldflags="-s -w" -o "$dir/benchsidecar" ./test/bench/sidecar
	go test -c -trimpath -ldflags="-s -w" -o "$dir/matcher.test" ./matcher
	go run ./test/bench/matchernats -c "$dir/natsserver.test"
	cp hack/benchbundle.sh "$dir/"
	tar czf bin/bench-bundle.tgz -C "$dir" .
	ls -l bin/bench-bundle.tgz
}

run() {
	local out=$1 d
	d=$(cd "$(dirname "$0")" && pwd)
	mkdir -p "$out"
	{ date -u; nproc; grep -m1 "model name" /proc/cpuinfo || true; uname -r; } >"$out/machine.txt"
	cd /tmp
	echo "== matcher $(date -u +%T)"
	"$d/matcher.test" -test.run '^$' -test.bench "^BenchmarkMatcher\$/^(${MATCHER_WORKLOADS:-parallel|churn90|fanin|faninsert|fanchurn})\$" \
		-test.benchmem -test.count "${MATCHER_COUNT:-5}" -test.benchtime "${MATCHER_BENCHTIME:-0.5s}" \
		-test.cpu "${MATCHER_CPU:-16}" >"$out/matcher.txt" 2>&1 || echo "matcher: exit $?"
	echo "== nats-server comparison $(date -u +%T)"
	"$d/natsserver.test" -test.run '^$' -test.bench '^BenchmarkWeighstationMatcher$' -test.benchmem \
		-test.count "${NATS_COUNT:-5}" -test.benchtime "${NATS_BENCHTIME:-0.5s}" >"$out/nats.txt" 2>&1 || echo "nats: exit $?"
	echo "== bench-sidecar $(date -u +%T)"
	local sidecar=(-bin "$d/weighstation" -sidecar-bin "$d/weighstation-sidecar" -relay "$d/tcprelay")
	"$d/benchsidecar" "${sidecar[@]}" -only "${SIDECAR_ONLY:-}" -duration "${SIDECAR_DURATION:-2s}" \
		-rounds "${SIDECAR_ROUNDS:-3}" -max-rate=false -out "$out/bench-sidecar" \
		>"$out/bench-sidecar.txt" 2>"$out/bench-sidecar.err" || echo "bench-sidecar: exit $?"
	if [ "${RATE_ROUNDS:-1}" -gt 0 ]; then
		echo "== sustainable rates $(date -u +%T)"
		"$d/benchsidecar" "${sidecar[@]}" -overlap -only none -rounds "${RATE_ROUNDS:-1}" -rate-duration "${RATE_DURATION:-2s}" \
			>"$out/rates.txt" 2>"$out/rates.err" || echo "rates: exit $?"
	fi
	echo "== done $(date -u +%T)"
}

report() {
	local dir=$1
	go run ./test/bench/matcher -results "$dir/matcher.txt"
	go run ./test/bench/matchernats -results "$dir/nats.txt"
}

case "${1:-}" in
build) build ;;
run) run "${2:?run needs an output directory}" ;;
report) report "${2:?report needs the results directory}" ;;
*)
	echo "usage: $0 build | run OUT | report DIR" >&2
	exit 2
	;;
esac
