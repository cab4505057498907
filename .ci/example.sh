# The _example smoke test of .ci/run (step 6), sourced by it: free_port and
# step_example, which use its WORK and STARTED_PIDS.

# free_port prints a loopback port nothing listens on right now.
free_port() {
	local port i
	for i in $(seq 1 50); do
		port=$((20000 + RANDOM % 10000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return 0
		fi
	done
	return 1
}

step_example() {
	if [[ ! -d _example ]]; then
		echo "no _example directory: skipping the example smoke test"
		return 2
	fi
	if ! command -v curl >/dev/null; then
		echo "curl not found: cannot smoke-test the example"
		return 1
	fi
	local bin="$WORK/example" log="$WORK/example.log"
	echo "+ go test -C _example -race -count=1 ./...   (a module of its own: ./... does not reach it)"
	go test -C _example -race -count=1 -timeout "$TEST_TIMEOUT" ./... || return 1
	echo "+ go build -C _example -o $bin ."
	go build -C _example -o "$bin" . || return 1

	local port pid code attempt up=no
	for attempt in 1 2 3; do
		port=$(free_port) || { echo "no free port found"; return 1; }
		echo "+ ADDR=127.0.0.1:$port $bin   (REDIS_URL unset: embedded miniredis)"
		env -u REDIS_URL ADDR="127.0.0.1:$port" "$bin" >"$log" 2>&1 &
		pid=$!
		STARTED_PIDS+=("$pid")
		local i
		for i in $(seq 1 100); do # up to ~30s
			if ! kill -0 "$pid" 2>/dev/null; then
				break
			fi
			code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$port/api/hello" || true)
			if [[ $code == 200 ]]; then
				up=yes
				break
			fi
			sleep 0.3
		done
		[[ $up == yes ]] && break
		if kill -0 "$pid" 2>/dev/null; then
			echo "example did not answer 200 on /api/hello within 30s (last status: ${code:-none})"
			stop_pid "$pid"
			echo "--- example output ---"; tail -n 50 "$log"
			return 1
		fi
		wait "$pid" 2>/dev/null || true
		echo "example exited before answering (attempt $attempt); output:"
		tail -n 20 "$log"
	done
	if [[ $up != yes ]]; then
		return 1
	fi
	echo "example is up on 127.0.0.1:$port"

	# /api/hello is 10/s, 120/m, 240/h: 15 quick requests are all served,
	# those past 10 in a second held (their wait is below a second, what
	# Retry-After cannot say) rather than answered 429. 15 served within
	# one second with none held would be an over-admission.
	local n ok=0 limited=0 other=0 missing_policy=0 held=0 codes=() took t_start t_end
	t_start=$(date +%s.%N)
	for n in $(seq 1 15); do
		read -r code took < <(curl -s -D "$WORK/h.$n" -o /dev/null -w '%{http_code} %{time_total}\n' --max-time 5 "http://127.0.0.1:$port/api/hello" || true)
		codes+=("$code")
		if awk -v t="${took:-0}" 'BEGIN { exit !(t >= 0.2) }'; then
			held=$((held + 1))
		fi
		case $code in
		200)
			ok=$((ok + 1))
			if ! grep -qi '^ratelimit-policy:' "$WORK/h.$n"; then
				missing_policy=$((missing_policy + 1))
				if [[ $missing_policy -eq 1 ]]; then
					echo "response $n: 200 without a RateLimit-Policy header; its headers:"
					cat "$WORK/h.$n"
				fi
			fi
			;;
		429) limited=$((limited + 1)) ;;
		*) other=$((other + 1)) ;;
		esac
	done
	t_end=$(date +%s.%N)
	local span
	span=$(awk -v a="$t_start" -v b="$t_end" 'BEGIN { printf "%.2f", b - a }')
	echo "15 requests to /api/hello in ${span}s: ${codes[*]}"
	echo "  200: $ok   429: $limited   other: $other   held (answered after 0.2s or more): $held"
	local rc=0
	if [[ $held -eq 0 ]] && awk -v s="$span" 'BEGIN { exit !(s < 1) }'; then
		echo "15 requests served within one second on a 10/s limit, none held: over-admission"
		rc=1
	fi
	if [[ $limited -gt 0 ]]; then
		echo "a request to /api/hello got 429: a wait below one second should be held, not refused"
		rc=1
	fi
	if [[ $missing_policy -gt 0 ]]; then
		echo "$missing_policy of the 200 responses lacked RateLimit-Policy"
		rc=1
	fi
	if [[ $other -gt 0 ]]; then
		echo "unexpected status codes (neither 200 nor 429)"
		rc=1
	fi

	# /api/search?pages=N: a bad N is a 400 problem document naming the
	# accepted range; a good one is served.
	local q body
	for q in -3 abc 1.5 999999999999999999999 11; do
		code=$(curl -s -D "$WORK/h.search" -o "$WORK/b.search" -w '%{http_code}' --max-time 5 "http://127.0.0.1:$port/api/search?pages=$q" || true)
		body=$(cat "$WORK/b.search" 2>/dev/null || true)
		if [[ $code != 400 ]] || ! grep -qi '^content-type: application/problem+json' "$WORK/h.search" || [[ $body != *'from 1 to 10'* ]]; then
			echo "pages=$q: got $code, want 400 application/problem+json naming the range 1 to 10; body: $body"
			rc=1
		else
			echo "pages=$q: 400 $body"
		fi
	done
	code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$port/api/search?pages=3" || true)
	if [[ $code != 200 ]]; then
		echo "pages=3: got $code, want 200"
		rc=1
	fi
	# /api/search is 30/m, a page a unit: 3 + 10 + 10 pages are served, the
	# next 10 would make 33 in a minute: 429 with a Retry-After of seconds.
	local want
	for want in 200 200 429; do
		code=$(curl -s -D "$WORK/h.search" -o "$WORK/b.search" -w '%{http_code}' --max-time 5 "http://127.0.0.1:$port/api/search?pages=10" || true)
		if [[ $code != "$want" ]]; then
			echo "pages=10: got $code, want $want; body: $(cat "$WORK/b.search" 2>/dev/null)"
			rc=1
		elif [[ $code == 429 ]]; then
			if ! grep -qi '^retry-after: [1-9]' "$WORK/h.search"; then
				echo "pages=10: 429 without a Retry-After of a second or more; headers:"
				cat "$WORK/h.search"
				rc=1
			else
				echo "pages=10 past 30/m: 429, $(grep -i '^retry-after:' "$WORK/h.search" | tr -d '\r')"
			fi
		fi
	done
	if ! grep -q 'redis answers' "$log"; then
		echo "the example did not log its startup check of Redis ('redis answers')"
		rc=1
	fi
	stop_pid "$pid"
	if [[ $rc -ne 0 ]]; then
		echo "--- example output ---"; tail -n 50 "$log"
	fi
	return "$rc"
}
