// Command soak drives the ratelimit middleware against a real Redis for a
// chosen time at a steady offered load, and fails (exit status 1) when a
// limit admits too much or the process or Redis grows without bound.
//
//	cd bench && go run ./soak -duration 30m
//	cd bench && go run ./soak -fleet -csv ../docs/fleet.csv
//
// By default it starts its own redis-server on a free 127.0.0.1 port; -redis
// host:port uses another (not in -fleet mode, which kills and restarts its
// server). See soak/README.md.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

type config struct {
	duration  time.Duration
	interval  time.Duration
	rps       float64
	workers   int
	policy    string
	residents int
	greedy    int
	polite    int
	redisAddr string
	redisBin  string
	out       string
	timeout   time.Duration

	fleet      bool
	servers    int
	fleetIDs   int
	outage     time.Duration
	csv        string
	serve      bool   // child process mode: serve the handler under test
	prefix     string // -serve: the store's key prefix
	durationOK bool   // -duration was given
}

func main() {
	var cfg config
	flag.DurationVar(&cfg.duration, "duration", 30*time.Second, "how long to run (default 30s; 3m with -fleet)")
	flag.DurationVar(&cfg.interval, "interval", 0, "time between report rows (default: a thirtieth of the run, between 1s and 1m)")
	flag.Float64Var(&cfg.rps, "rps", 0, "offered load, requests per second, sent at even spacing (default 1000; 200 with -fleet)")
	flag.IntVar(&cfg.workers, "workers", 64, "concurrent HTTP clients; a request finding none free is dropped and counted")
	flag.StringVar(&cfg.policy, "policy", "", `policy (ParsePolicy syntax); default: chosen from -duration so that its longest period is at most a quarter of the run ("10/s" with -fleet)`)
	flag.IntVar(&cfg.residents, "residents", 1000, "identities present all run, each sending well under the policy")
	flag.IntVar(&cfg.greedy, "greedy", 20, "identities sending above the policy and ignoring Retry-After")
	flag.IntVar(&cfg.polite, "polite", 20, "identities sending above the policy that wait Retry-After after each 429")
	flag.StringVar(&cfg.redisAddr, "redis", "", "Redis to use (host:port); empty starts a private redis-server on a free 127.0.0.1 port (DBSIZE and used_memory are only meaningful then)")
	flag.StringVar(&cfg.redisBin, "redis-server", "redis-server", "redis-server binary used when -redis is empty")
	flag.StringVar(&cfg.out, "out", "", "also write the report (markdown) to this file")
	flag.DurationVar(&cfg.timeout, "timeout", 0, "the Limiter's store timeout (WithTimeout); 0 keeps the default (100ms)")
	flag.BoolVar(&cfg.fleet, "fleet", false, "fleet mode: several Limiters (one go-redis client and Handler each) share one Redis, which is killed and restarted in the middle; writes per-second figures as CSV")
	flag.IntVar(&cfg.servers, "servers", 4, "-fleet: number of servers (Limiters)")
	flag.IntVar(&cfg.fleetIDs, "fleet-identities", 10, "-fleet: identities, each sending -rps/identities requests per second to random servers")
	flag.DurationVar(&cfg.outage, "outage", 5*time.Second, "-fleet: how long Redis stays down between the kill and the restart")
	flag.StringVar(&cfg.csv, "csv", "", "-fleet: write the per-second CSV to this file (default: stdout)")
	flag.BoolVar(&cfg.serve, "serve", false, "internal: run as the soak's server process (needs -redis, -policy, -prefix)")
	flag.StringVar(&cfg.prefix, "prefix", "", "internal: -serve's Redis key prefix")
	flag.Parse()
	if flag.NArg() > 0 {
		fatalf("unexpected arguments %q", flag.Args())
	}
	if cfg.serve {
		if err := serveMain(cfg); err != nil {
			fatalf("server process: %v", err)
		}
		return
	}
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "duration" {
			cfg.durationOK = true
		}
	})
	if cfg.fleet {
		if !cfg.durationOK {
			cfg.duration = 3 * time.Minute
		}
		if cfg.rps == 0 {
			cfg.rps = 200
		}
	} else if cfg.rps == 0 {
		cfg.rps = 1000
	}
	if cfg.interval == 0 {
		cfg.interval = min(max(cfg.duration/30, time.Second), time.Minute).Truncate(time.Second)
	}
	switch {
	case cfg.duration < 12*time.Second:
		fatalf("-duration %v: at least 12s", cfg.duration)
	case cfg.interval < 100*time.Millisecond || cfg.interval > cfg.duration/4:
		fatalf("-interval %v: between 100ms and a quarter of -duration", cfg.interval)
	case cfg.rps <= 0 || cfg.rps > 1e6:
		fatalf("-rps %v: must be in (0, 1e6]", cfg.rps)
	case cfg.workers < 1 || cfg.workers > 10000:
		fatalf("-workers %d: must be in [1, 10000]", cfg.workers)
	case cfg.residents < 1 || cfg.greedy < 0 || cfg.polite < 0:
		fatalf("-residents must be positive, -greedy and -polite not negative")
	case cfg.timeout < 0:
		fatalf("-timeout %v: must not be negative", cfg.timeout)
	case cfg.fleet && (cfg.servers < 1 || cfg.servers > 64 || cfg.fleetIDs < 1):
		fatalf("-servers must be in [1, 64], -fleet-identities positive")
	case cfg.fleet && (cfg.outage <= 0 || cfg.outage >= cfg.duration/2):
		fatalf("-outage %v: must be positive and under half of -duration", cfg.outage)
	case cfg.fleet && cfg.redisAddr != "":
		fatalf("-fleet kills and restarts its Redis: it needs its own (leave -redis empty)")
	}

	stop := make(chan struct{})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		fmt.Fprintln(os.Stderr, "soak: interrupted: stopping the load and reporting what was measured")
		close(stop)
	}()
	// Every run is bounded: the load stops at -duration; this ends the
	// program if winding down hangs.
	watchdog := time.AfterFunc(cfg.duration+2*time.Minute, func() {
		fmt.Fprintf(os.Stderr, "soak: still running %v after the planned %v: giving up\n", 2*time.Minute, cfg.duration)
		os.Exit(3)
	})
	defer watchdog.Stop()

	var err error
	if cfg.fleet {
		err = runFleet(cfg, stop)
	} else {
		err = runSoak(cfg, stop)
	}
	if err != nil {
		fatalf("%v", err)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "soak: "+format+"\n", args...)
	os.Exit(1)
}
