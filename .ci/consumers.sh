#!/usr/bin/env bash
# Builds one scratch consumer per sub-module (grpc, client,
# metrics/prometheus, metrics/otel), each requiring that module alone, as
# a project would: the modules of this repository come from a module
# proxy on disk built from the commit under test (the sub-modules as the
# work tree holds them, the root at the version their go.mod requires,
# from the commit that version names); every other module from the local
# module cache or the usual proxy. A sub-module whose go.mod names a
# placeholder, or a root commit that does not exist, fails here.
#
#     bash .ci/consumers.sh WORKDIR
set -euo pipefail
# The consumers build outside the repository's workspace (go.work): each
# module as a project that requires it sees it.
export GOWORK=off
cd "$(dirname "${BASH_SOURCE[0]}")/.."
work=${1:?usage: consumers.sh WORKDIR}
mkdir -p "$work"
proxy=$work/proxy
rm -rf "$proxy" "$work/modcache"
root=github.com/ratelimitkit/ratelimit
head=$(git rev-parse --short=12 HEAD)
subv=v0.0.0-$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S HEAD)-$head
go build -o "$work/modproxy" ./internal/testkit/modproxy

declare -A served=()
rc=0
for sub in grpc client metrics/prometheus metrics/otel; do
	rootv=$(cd "$sub" && go list -m -f '{{if not .Main}}{{.Path}} {{.Version}}{{end}}' all 2>/dev/null | awk -v m="$root" '$1 == m {print $2}')
	if [[ -n $rootv && -z ${served[$rootv]:-} ]]; then
		commit=${rootv##*-}
		if [[ $rootv != v0.0.0-* || ${#commit} != 12 ]] || ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
			echo "$sub requires $root $rootv: not a pseudo-version of a commit of this repository"
			rc=1
			continue
		fi
		src=$work/root-$commit
		rm -rf "$src" && mkdir -p "$src"
		git archive "$commit" | tar -x -C "$src"
		"$work/modproxy" -out "$proxy" -module "$root" -version "$rootv" -src "$src"
		served[$rootv]=1
	fi
	"$work/modproxy" -out "$proxy" -module "$root/$sub" -version "$subv" -src "$sub"
done

# main.go of each consumer: one use of the module's API.
consumer_main() {
	case $1 in
	grpc) printf 'package main\n\nimport ratelimitgrpc "%s/grpc"\n\nfunc main() { _ = ratelimitgrpc.UnaryClientInterceptor() }\n' "$root" ;;
	client) printf 'package main\n\nimport "%s/client"\n\nfunc main() { _ = client.NewTransport(nil) }\n' "$root" ;;
	metrics/prometheus) printf 'package main\n\nimport rlprom "%s/metrics/prometheus"\n\nfunc main() { _ = rlprom.New }\n' "$root" ;;
	metrics/otel) printf 'package main\n\nimport rlotel "%s/metrics/otel"\n\nfunc main() { _ = rlotel.New }\n' "$root" ;;
	esac
}

cache=$(go env GOMODCACHE)/cache/download
for sub in grpc client metrics/prometheus metrics/otel; do
	dir=$work/consumer-${sub//\//-}
	rm -rf "$dir" && mkdir -p "$dir"
	consumer_main "$sub" >"$dir/main.go"
	printf 'module example.com/consumer\n\ngo 1.26\n' >"$dir/go.mod"
	echo "+ consumer of $root/$sub@$subv"
	if ! (cd "$dir" &&
		export GOPROXY="file://$proxy,file://$cache,$(go env GOPROXY)" GOFLAGS=-mod=mod \
			GONOSUMDB="$root" GOMODCACHE="$work/modcache" &&
		go get "$root/$sub@$subv" && go mod tidy && go build ./... &&
		go list -m all | sed 's/^/    /'); then
		echo "FAIL: a project requiring only $root/$sub does not build"
		rc=1
		continue
	fi
	if [[ $sub == client ]] && (cd "$dir" && GOFLAGS=-mod=mod GOPROXY=off GOMODCACHE="$work/modcache" go list -m all | grep -qv -e '^example.com/consumer$' -e "^$root/client "); then
		echo "FAIL: the client module requires more than the standard library"
		rc=1
	fi
done

chmod -R u+w "$work/modcache" 2>/dev/null || true
rm -rf "$work/modcache"
exit $rc
