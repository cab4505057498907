// Command plot draws what each rate-limiting algorithm of
// github.com/ratelimitkit/ratelimit does to the same traffic, from the
// library's own code: a Limiter's Handler over the memory store, on a
// simulated clock (nothing sleeps, no wall time is read), answered as a
// client sees it (status codes and Retry-After).
//
// Run from this directory:
//
//	go run .
//
// It writes docs/algorithms/NAME.svg and NAME.png for every scenario, and,
// when docs/fleet.csv exists, docs/fleet.svg and docs/fleet.png from it.
// The output is byte-for-byte the same on every run (on one architecture:
// CI compares on linux/amd64 with the gonum version pinned in go.mod).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

func main() {
	out := flag.String("out", "../../docs/algorithms", "directory for the algorithm figures")
	fleet := flag.String("fleet", "../../docs/fleet.csv", "CSV of the fleet soak run; drawn when the file exists")
	fleetOut := flag.String("fleet-out", "../../docs/fleet", "path of the fleet figure, without extension")
	flag.Parse()
	if err := generate(*out, *fleet, *fleetOut); err != nil {
		fmt.Fprintln(os.Stderr, "plot:", err)
		os.Exit(1)
	}
}

func generate(out, fleetCSV, fleetOut string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, s := range scenarios() {
		f, r, err := s.figure()
		if err != nil {
			return err
		}
		if err := write(filepath.Join(out, s.File), &f.figure); err != nil {
			return err
		}
		fmt.Printf("%s.{svg,png}: %d requests, %d admitted; most admitted in any window:", filepath.Join(out, s.File), len(r.Events), len(r.admittedTimes()))
		for i, c := range f.Counts {
			l := r.Policy.Limit(i)
			fmt.Printf(" %d per %s (limit %d)", maxCount(c), durationLabel(l.Period), l.Rate)
		}
		fmt.Println()
	}
	return drawFleet(fleetCSV, fleetOut)
}

// drawFleet draws the fleet soak run's CSV, if there is one: its first
// column is the time in seconds, every other column a rate per second.
func drawFleet(csvPath, out string) error {
	fh, err := os.Open(csvPath)
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Printf("%s: not found, fleet figure not drawn\n", csvPath)
		return nil
	}
	if err != nil {
		return err
	}
	defer fh.Close()
	cols, err := readColumns(fh)
	if err != nil {
		return fmt.Errorf("%s: %w", csvPath, err)
	}
	if len(cols) < 2 {
		return fmt.Errorf("%s: want a time column and at least one rate column, got %d column(s)", csvPath, len(cols))
	}
	f, err := buildSeriesFigure(seriesSpec{
		Title:  "Admitted rate across the fleet: Limiters sharing one Redis, per second",
		XLabel: cols[0].Name + " (s)",
		YLabel: "admitted per second",
	}, cols[0], cols[1:])
	if err != nil {
		return fmt.Errorf("%s: %w", csvPath, err)
	}
	if err := write(out, f); err != nil {
		return err
	}
	fmt.Printf("%s.{svg,png}: from %s, %d rows\n", out, csvPath, len(cols[0].Values))
	return nil
}

// write renders f to base.svg and base.png.
func write(base string, f *figure) error {
	svg, err := renderSVG(f)
	if err != nil {
		return err
	}
	png, err := renderPNG(f)
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".svg", svg, 0o644); err != nil {
		return err
	}
	return os.WriteFile(base+".png", png, 0o644)
}
