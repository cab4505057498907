package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
)

// pinnedEnv marks the run that pin started under taskset, so that it
// does not start itself again.
const pinnedEnv = "RATELIMIT_BENCH_PINNED"

// redisCore is the core -pin gives the private redis-server alone; this
// program runs on every other core.
const redisCore = 0

// pin re-runs this program on every core but redisCore (taskset), with
// the same arguments, and does not return unless that fails; in the run it
// started, it returns nil at once. Redis then has a core of its own, as on
// a machine of its own in production, where its CPU per decision, not the
// callers', bounds a fleet's decisions a second.
func pin() error {
	if os.Getenv(pinnedEnv) != "" {
		return nil
	}
	n := runtime.NumCPU()
	if n < 2 {
		return fmt.Errorf("-pin needs at least 2 CPUs (one for Redis), this machine has %d", n)
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return fmt.Errorf("-pin: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("-pin: %w", err)
	}
	cores := strconv.Itoa(redisCore+1) + "-" + strconv.Itoa(n-1)
	if n == 2 {
		cores = strconv.Itoa(redisCore + 1)
	}
	args := append([]string{taskset, "-c", cores, self}, os.Args[1:]...)
	return syscall.Exec(taskset, args, append(os.Environ(), pinnedEnv+"="+cores))
}

// pinnedTopology says where Redis and the callers ran, for the report.
func pinnedTopology() string {
	if cores := os.Getenv(pinnedEnv); cores != "" {
		return fmt.Sprintf("Redis pinned to core %d, this program (callers and load generator) to cores %s (taskset): Redis's CPU is its own", redisCore, cores)
	}
	return "client and server share the machine's CPUs"
}
