# The figures check of .ci/run (step 10), sourced by it: step_figures,
# which uses its WORK.

# bench/plot is its own module (gonum plot pinned in its go.mod): vet and
# test it, then draw every figure into a temporary directory and fail if any
# differs from the one committed under docs/ (or one is missing or stale).
# The bytes are compared on linux/amd64 only: another architecture may
# round floating point differently when rasterising. They also depend on
# the gonum version pinned in bench/plot/go.mod and on Go's compressor
# (image/png): after a Go upgrade that changes it, redraw and commit.

step_figures() {
	local rc=0
	if [[ ! -f bench/plot/go.mod ]]; then
		echo "no bench/plot/go.mod: no figures to check"
		return 2
	fi
	echo "+ (cd bench/plot && go vet ./...)"
	(cd bench/plot && go vet ./...) || rc=1
	echo "+ (cd bench/plot && go test -count=1 ./...)"
	(cd bench/plot && go test -count=1 -timeout "$TEST_TIMEOUT" ./...) || rc=1
	local platform
	platform="$(go env GOOS)/$(go env GOARCH)"
	if [[ $platform != linux/amd64 ]]; then
		echo "on $platform: not comparing the figures byte for byte (they are committed from linux/amd64)"
		return "$rc"
	fi
	local out="$WORK/figures"
	mkdir -p "$out"
	echo "+ (cd bench/plot && go run . -out $out/algorithms -fleet ../../docs/fleet.csv -fleet-out $out/fleet)"
	if ! (cd bench/plot && go run . -out "$out/algorithms" -fleet ../../docs/fleet.csv -fleet-out "$out/fleet"); then
		echo "bench/plot failed"
		return 1
	fi
	local f name differ=0
	for f in "$out"/algorithms/* "$out"/fleet.svg "$out"/fleet.png; do
		[[ -e $f ]] || continue
		name=${f#"$out"/}
		if [[ ! -f docs/$name ]]; then
			echo "docs/$name: missing (bench/plot draws it)"
			differ=1
		elif ! cmp -s "$f" "docs/$name"; then
			echo "docs/$name: differs from what bench/plot draws now"
			differ=1
		fi
	done
	for f in docs/algorithms/*; do
		[[ -e $f ]] || continue
		if [[ ! -e $out/algorithms/${f#docs/algorithms/} ]]; then
			echo "$f: committed, but bench/plot no longer draws it"
			differ=1
		fi
	done
	if [[ $differ -ne 0 ]]; then
		loud "the committed figures are not what bench/plot draws" \
			"regenerate them on linux/amd64: cd bench/plot && go run .   then commit docs/"
		return 1
	fi
	echo "figures: every committed figure is byte-identical to a fresh drawing ($(ls "$out"/algorithms | wc -l) files)"
	return "$rc"
}
