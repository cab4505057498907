// Command testrun is go test that also says which tests skipped, and why.
//
//	go run ./internal/testrun            # go test ./...
//	go run ./internal/testrun -race ./store
//
// go test prints only "ok" for a package whose tests pass, hiding the
// output of the tests it ran, so nothing says that the tests needing a
// real redis-server skipped because none was on PATH. testrun runs
// go test -json with the same arguments (./... when none is given),
// prints what go test prints (a line per package, the output of the tests
// that failed, build errors), and ends with the skipped tests grouped by
// the reason they gave. Its exit status is go test's.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
)

func main() {
	args := os.Args[1:]
	if !hasPackage(args) {
		args = append(args, "./...")
	}
	fmt.Printf("+ go test %s   (run as go test -json, to list the tests that skipped)\n", strings.Join(args, " "))
	cmd := exec.Command("go", append([]string{"test", "-json"}, args...)...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testrun:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testrun:", err)
		os.Exit(2)
	}
	r := newReport(os.Stdout)
	r.verbose = verbose(args)
	if err := r.read(stdout); err != nil {
		fmt.Fprintln(os.Stderr, "testrun: reading go test's output:", err)
	}
	r.summary()
	if err := cmd.Wait(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			os.Exit(exit.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "testrun:", err)
		os.Exit(2)
	}
}

// hasPackage reports whether args name a package (an argument not
// starting with "-" that is not the value of a flag such as -run X).
func hasPackage(args []string) bool {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return true
		}
		if !strings.Contains(a, "=") && takesValue(strings.TrimLeft(a, "-")) {
			i++ // the flag's value
		}
	}
	return false
}

// verbose reports whether args ask for go test -v.
func verbose(args []string) bool {
	for _, a := range args {
		if a == "-v" || a == "--v" || a == "-v=true" || a == "--v=true" {
			return true
		}
	}
	return false
}

// takesValue reports whether the go test flag needs a value.
func takesValue(flag string) bool {
	switch flag {
	case "run", "skip", "bench", "count", "cpu", "p", "parallel", "timeout", "tags", "coverpkg",
		"covermode", "coverprofile", "benchtime", "blockprofile", "cpuprofile", "memprofile",
		"mutexprofile", "outputdir", "trace", "list", "fuzz", "fuzztime", "shuffle", "o", "exec", "vet",
		"ldflags", "gcflags", "asmflags", "mod", "modfile", "overlay", "pgo", "C":
		return true
	}
	return false
}

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output events
	Test       string
	Output     string
}

// report turns go test -json events into go test's usual output, and
// remembers the skipped tests.
type report struct {
	w       io.Writer
	verbose bool                // -v: print every test's output as it comes
	outputs map[string][]string // package + "\x00" + test → its output lines
	skipped map[string][]string // reason → "package TestName" of each test that gave it
	nSkip   int
}

func newReport(w io.Writer) *report {
	return &report{w: w, outputs: map[string][]string{}, skipped: map[string][]string{}}
}

// read processes events until r ends. Lines that are not JSON are printed
// as they are.
func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(r.w, sc.Text())
			continue
		}
		r.event(e)
	}
	return sc.Err()
}

func (r *report) event(e event) {
	key := e.Package + "\x00" + e.Test
	switch {
	case e.Action == "build-output":
		fmt.Fprint(r.w, e.Output)
	case e.Test == "":
		// Package-level: "ok  pkg 1.2s", "FAIL pkg", "?   pkg [no test
		// files]", and what a test binary printed outside any test.
		if e.Action == "output" && !strings.HasPrefix(e.Output, "PASS\n") && !strings.HasPrefix(e.Output, "testing: warning:") {
			fmt.Fprint(r.w, e.Output)
		}
	case e.Action == "output":
		if r.verbose {
			fmt.Fprint(r.w, e.Output)
		}
		r.outputs[key] = append(r.outputs[key], e.Output)
	case e.Action == "fail":
		if !r.verbose { // as go test does: the output of a failed test
			for _, l := range r.outputs[key] {
				if !strings.HasPrefix(l, "=== ") {
					fmt.Fprint(r.w, l)
				}
			}
		}
		delete(r.outputs, key)
	case e.Action == "skip":
		reason := skipReason(r.outputs[key])
		r.skipped[reason] = append(r.skipped[reason], shortPkg(e.Package)+" "+e.Test)
		r.nSkip++
		delete(r.outputs, key)
	case e.Action == "pass":
		delete(r.outputs, key)
	}
}

var logPrefix = regexp.MustCompile(`^\s*[\w.-]+\.go:\d+: `)

// skipReason returns the message a skipped test logged last (its t.Skip
// message, normally), without its file:line prefix.
func skipReason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- ") {
			continue
		}
		if loc := logPrefix.FindStringIndex(lines[i]); loc != nil {
			return strings.TrimSpace(lines[i][loc[1]:])
		}
		return l
	}
	return "(no reason given)"
}

// shortPkg drops the module path from a package path ("ratelimit" for
// the root package).
func shortPkg(p string) string {
	const mod = "github.com/ratelimitkit/ratelimit"
	if p == mod {
		return "ratelimit"
	}
	return strings.TrimPrefix(p, mod+"/")
}

// maxListed is how many tests summary names per reason.
const maxListed = 4

// summary prints the skipped tests by reason, or that none skipped.
func (r *report) summary() {
	if r.nSkip == 0 {
		fmt.Fprintln(r.w, "testrun: no test skipped")
		return
	}
	reasons := make([]string, 0, len(r.skipped))
	for k := range r.skipped {
		reasons = append(reasons, k)
	}
	sort.Slice(reasons, func(i, j int) bool {
		if a, b := len(r.skipped[reasons[i]]), len(r.skipped[reasons[j]]); a != b {
			return a > b
		}
		return reasons[i] < reasons[j]
	})
	fmt.Fprintf(r.w, "testrun: %d tests skipped (subtests counted); they did not run:\n", r.nSkip)
	for _, reason := range reasons {
		tests := r.skipped[reason]
		sort.Strings(tests)
		listed := tests
		more := ""
		if len(listed) > maxListed {
			listed, more = listed[:maxListed], fmt.Sprintf(", and %d more", len(tests)-maxListed)
		}
		fmt.Fprintf(r.w, "  %3d  %s\n       (%s%s)\n", len(tests), reason, strings.Join(listed, ", "), more)
	}
}
