#!/usr/bin/env bash
# luacost.sh counts the instructions Redis runs per decision inside our
# script: the library of a section's policy (a: one sliding-window limit, b:
# three), called by FCALL in runs of calls, as the store's batches call it;
# or (d) a flood of one identity, past its limits, called one common call at
# a time, as the store sends calls a run would decline. The
# count comes from valgrind's callgrind, so it is the same whatever else the
# machine is doing, where timings on a shared machine move by a third from
# run to run: the yardstick for a change of the script (see README.md,
# "Counting a decision's instructions").
#
# Usage: ./luacost.sh [-s section] [-l library.lua] [-r identities] [-n fcalls] [-b calls] [-m] [-w] [-f]
#   -s  the section whose policy's library is counted: a, b or d (default b)
#   -l  a library to count (FUNCTION LOAD text) instead: a variant of one
#       this bench loads, taken from a private redis-server
#   -r  identities (default 8: under callgrind Redis runs about 50 times
#       slower, and 8 identities space each one's calls about as 1,000 do
#       in the pinned bench, so that its sub-buckets turn over as there)
#   -n  FCALLs counted, after as many again to warm the keys (default 500)
#   -b  calls per FCALL (default 10)
#   -m  runs laid out call by call ('m', as the store sends calls that
#       differ), not as calls alike ('u', the common case)
#   -w  the whole request: reading and parsing it, FCALL, and writing the
#       reply (without it, FCALL alone)
#   -f  with -s d, each call by 'f' (the lean path's try first), not by 'g' (the
#       general path at once, as the store sends a key it has just seen denied)
# LUACOST_KEEP=dir keeps callgrind's output and its annotation there, to read
# with callgrind_annotate.
# Needs redis-server, redis-cli, redis-benchmark, valgrind and go.
set -euo pipefail
cd "$(dirname "$0")"

lib="" section=b ids=8 n=500 per=10 layout=u toggle=(--toggle-collect=fcallCommand) what="inside FCALL"
flood=g
while getopts "s:l:r:n:b:mwf" o; do
  case $o in
    s) section=$OPTARG ;;
    l) lib=$OPTARG ;;
    r) ids=$OPTARG ;;
    n) n=$OPTARG ;;
    b) per=$OPTARG ;;
    m) layout=m ;;
    f) flood=f ;;
    w) toggle=(--toggle-collect=readQueryFromClient --toggle-collect=writeToClient) what="in the whole request" ;;
    *) sed -n '/^# Usage/,/^# Needs/p' "$0" >&2; exit 2 ;;
  esac
done
for tool in redis-server redis-cli redis-benchmark valgrind callgrind_control callgrind_annotate go; do
  command -v "$tool" >/dev/null || { echo "luacost: $tool not found" >&2; exit 2; }
done

work=$(mktemp -d)
plain="" counted=""
cleanup() {
  [ -n "$plain" ] && redis-cli -p "$plain" shutdown nosave >/dev/null 2>&1 || true
  [ -n "$counted" ] && redis-cli -p "$counted" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
[ -n "${LUACOST_KEEP:-}" ] && trap 'cp "$work"/annotate.txt "$work"/cg.out* "$LUACOST_KEEP"/ 2>/dev/null; cleanup' EXIT

# freeport prints a loopback port nothing listens on.
freeport() {
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 20000))
    redis-cli -p "$p" ping >/dev/null 2>&1 || { echo "$p"; return; }
  done
  echo "luacost: no free port" >&2
  exit 1
}

# waitfor waits until the server on port $1 answers.
waitfor() {
  for _ in $(seq 100); do
    redis-cli -p "$1" ping >/dev/null 2>&1 && return
    sleep 0.2
  done
  echo "luacost: no redis-server on port $1" >&2
  exit 1
}

if [ -z "$lib" ]; then
  plain=$(freeport)
  redis-server --port "$plain" --bind 127.0.0.1 --save '' --appendonly no >/dev/null 2>&1 &
  waitfor "$plain"
  case $section in
    a | b | d) ;;
    *) echo "luacost: -s wants a, b or d" >&2; exit 2 ;;
  esac
  go run . -redis "127.0.0.1:$plain" -sections "$section" -duration 1s -rounds 1 -only '^ours Take, sliding-window$' >/dev/null 2>&1
  redis-cli -p "$plain" --raw function list withcode >"$work/list.txt"
  if [ "$(grep -c '^library_name$' "$work/list.txt")" != 1 ]; then
    echo "luacost: expected the bench to load one library" >&2
    exit 1
  fi
  sed -n '/^library_code$/,$p' "$work/list.txt" | tail -n +2 >"$work/lib.lua"
  lib="$work/lib.lua"
fi
# The library under a name of our own, so that any library's text will do.
sed '1s/^#!lua name=.*/#!lua name=luacost/; s/register_function(.ratelimit_[0-9a-f]*./register_function('"'"'luacost'"'"'/' "$lib" >"$work/luacost.lua"

counted=$(freeport)
valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" "${toggle[@]}" --collect-atstart=no \
  redis-server --port "$counted" --bind 127.0.0.1 --save '' --appendonly no >/dev/null 2>&1 &
waitfor "$counted"
redis-cli -p "$counted" -x function load <"$work/luacost.lua" >/dev/null

# A run of calls alike ('u'): their key count, now (0: Redis's clock) and
# cost once, then per call a resend ID of the store's length (RIDLEN); with
# -m ('m'), per call all four (lua/script.lua, MARGS). A flood: the common
# call by the general path at once ('g', as the store sends a key it has
# just seen denied; with -f by 'f': now, cost, resend ID) on one key, every call
# at the same given time (floodNow, µs), after the key's admissions: ten
# calls fillAgo earlier fill the policy's 10/s, so that every call of the
# flood is denied by it, however fast the calls go, and finds the key as a
# flood does, its last charge before the call.
floodNow=1800000000000000 fillAgo=500000
if [ "$section" = d ]; then
  per=1 ids=1
  cmd=(fcall luacost 1 "{ip:1}:luacost" "$flood" "$floodNow" 1 abcdef)
  for _ in $(seq 10); do
    redis-cli -p "$counted" fcall luacost 1 "{ip:1}:luacost" f "$((floodNow - fillAgo))" 1 abcdef >/dev/null
  done
else
  cmd=(fcall luacost "$per")
  for _ in $(seq "$per"); do cmd+=("{ip:__rand_int__}:luacost"); done
  if [ "$layout" = m ]; then
    cmd+=(m)
    for _ in $(seq "$per"); do cmd+=(1 0 1 abcdef); done
  else
    cmd+=(u 1 0 1)
    for _ in $(seq "$per"); do cmd+=(abcdef); done
  fi
fi
probe=("${cmd[@]}")
for i in "${!probe[@]}"; do probe[i]=${probe[i]//__rand_int__/1}; done
if redis-cli -p "$counted" "${probe[@]}" | grep -q ERR; then
  echo "luacost: the run's arguments no longer fit the script:" >&2
  redis-cli -p "$counted" "${probe[@]}" >&2
  exit 1
fi

pid=$(pgrep -f "valgrind.*--port $counted" | head -1)
redis-benchmark -p "$counted" -n "$n" -c 4 -r "$ids" -q "${cmd[@]}" >/dev/null 2>&1
callgrind_control -z "$pid" >/dev/null 2>&1
redis-benchmark -p "$counted" -n "$n" -c 4 -r "$ids" -q "${cmd[@]}" >/dev/null 2>&1
callgrind_control -d "$pid" >/dev/null 2>&1
sleep 1
out=$(ls -t "$work"/cg.out* | head -1)
decisions=$((n * per))
callgrind_annotate --threshold=100 --inclusive=yes "$out" 2>/dev/null >"$work/annotate.txt"
total=$(awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}' "$work/annotate.txt")
echo "instructions per decision $what: $((total / decisions)) ($decisions decisions, $ids identities, $per calls per FCALL)"
echo "of which (inclusive, per decision):"
for f in hmgetCommand hsetCommand lpFind parseReply strtod __sprintf_chk lua_pushlstring; do
  awk -v f="$f" -v d="$decisions" '$0 ~ (":" f " ") {gsub(",", "", $1); printf "  %-16s %8d\n", f, $1 / d; exit}' "$work/annotate.txt"
done
