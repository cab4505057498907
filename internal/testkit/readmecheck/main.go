// Command readmecheck keeps the Go code in a README compiling. Run it from
// the module's root:
//
//	go run ./internal/readmecheck [-strict] [README.md]
//
// It reads every fenced ```go block of the file and sorts it:
//
//   - A program: its first line that is neither blank nor a // comment is
//     "package main". Each program is written to a temporary directory
//     inside the module and built and vetted there, so its imports of this
//     module resolve to the code beside it (never a downloaded copy) and
//     other imports to the module's go.mod. Compiler messages name the
//     README's lines. A program whose leading comment says
//     "go run -C _example ./NAME" must also be a copy of _example/NAME/main.go,
//     byte for byte: the README quotes that file.
//   - A fragment: it has a comment line "// fragment: see FILE". Its other
//     lines (blank lines and "..." elisions aside) must appear in FILE in
//     the same order, compared with runs of spaces and tabs made one space;
//     FILE is a program the checks above (or CI's go vet) build.
//   - Anything else is reported as unmarked: a warning, or with -strict an
//     error.
//
// It exits 1 if a program does not build or vet, a quoted program differs
// from its file, or a fragment's lines are not found in its file; 2 on a
// usage error.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

func main() {
	strict := flag.Bool("strict", false, "treat a go block that is neither a program nor a marked fragment as an error")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: go run ./internal/readmecheck [-strict] [README.md]   (from the module's root)")
		flag.PrintDefaults()
	}
	flag.Parse()
	readme := "README.md"
	switch flag.NArg() {
	case 0:
	case 1:
		readme = flag.Arg(0)
	default:
		flag.Usage()
		os.Exit(2)
	}
	if _, err := os.Stat("go.mod"); err != nil {
		fmt.Fprintln(os.Stderr, "readmecheck: run from the module's root (no go.mod here):", err)
		os.Exit(2)
	}
	failed, err := run(os.Stdout, ".", readme, *strict)
	if err != nil {
		fmt.Fprintln(os.Stderr, "readmecheck:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}

// block is one fenced ```go block.
type block struct {
	line  int      // line number of its first code line (after the fence)
	lines []string // its code lines
}

func (b block) text() string { return strings.Join(b.lines, "\n") + "\n" }

var (
	fenceOpen  = regexp.MustCompile("^```go\\s*$")
	fenceClose = regexp.MustCompile("^```\\s*$")
	fragmentRe = regexp.MustCompile(`^\s*//\s*fragment:\s*see\s+(\S+)`)
	goRunRe    = regexp.MustCompile(`go run -C _example \./([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*)\b`)
	elision    = regexp.MustCompile(`^\s*(//\s*)?(\.\.\.|…)\s*$`)
	spaces     = regexp.MustCompile(`[ \t]+`)
)

// parse returns the ```go blocks of a Markdown text. An unclosed fence is
// an error.
func parse(text string) ([]block, error) {
	var out []block
	var cur *block
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		switch {
		case cur == nil && fenceOpen.MatchString(line):
			cur = &block{line: n + 1}
		case cur != nil && fenceClose.MatchString(line):
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, line)
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("line %d: ```go block never closed", cur.line-1)
	}
	return out, nil
}

// isProgram reports whether the block's first line that is neither blank
// nor a // comment is "package main".
func isProgram(b block) bool {
	for _, l := range b.lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "//") {
			continue
		}
		return t == "package main"
	}
	return false
}

// fragmentOf returns the file a fragment names, or "".
func fragmentOf(b block) string {
	for _, l := range b.lines {
		if m := fragmentRe.FindStringSubmatch(l); m != nil {
			return m[1]
		}
	}
	return ""
}

// quotedFile returns the file a program's leading comment names with
// "go run -C _example ./NAME", or "".
func quotedFile(b block) string {
	for _, l := range b.lines {
		t := strings.TrimSpace(l)
		if t != "" && !strings.HasPrefix(t, "//") {
			break
		}
		if m := goRunRe.FindStringSubmatch(t); m != nil {
			return filepath.Join("_example", filepath.FromSlash(m[1]), "main.go")
		}
	}
	return ""
}

func normalize(s string) string { return spaces.ReplaceAllString(strings.TrimSpace(s), " ") }

// checkFragment returns "" if the fragment's lines appear in order in
// file, or what is wrong.
func checkFragment(readme string, b block, file string) string {
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Sprintf("%s:%d: fragment names %s: %v", readme, b.line, file, err)
	}
	var have []string
	for _, l := range strings.Split(string(data), "\n") {
		have = append(have, normalize(l))
	}
	at := 0
	for i, l := range b.lines {
		want := normalize(l)
		if want == "" || elision.MatchString(l) || fragmentRe.MatchString(l) {
			continue
		}
		found := false
		for ; at < len(have); at++ {
			if have[at] == want {
				found, at = true, at+1
				break
			}
		}
		if !found {
			return fmt.Sprintf("%s:%d: fragment line not found in %s (after the lines before it):\n\t%s",
				readme, b.line+i, file, strings.TrimSpace(l))
		}
	}
	return ""
}

// checkCopy returns "" if the program is byte for byte file, or the first
// line where they differ.
func checkCopy(readme string, b block, file string) string {
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Sprintf("%s:%d: the program says %q but %v", readme, b.line, "go run ./"+filepath.ToSlash(filepath.Dir(file)), err)
	}
	if string(data) == b.text() {
		return ""
	}
	have := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	for i := 0; ; i++ {
		var r, f string
		rok, fok := i < len(b.lines), i < len(have)
		if rok {
			r = b.lines[i]
		}
		if fok {
			f = have[i]
		}
		if !rok && !fok {
			return fmt.Sprintf("%s:%d: the program differs from %s (line endings or final newline)", readme, b.line, file)
		}
		if r != f || rok != fok {
			return fmt.Sprintf("%s:%d: the program is not a copy of %s: its line %d differs\n\tREADME: %q\n\t%s: %q\n"+
				"\tcopy the file into the README (or the README into the file)", readme, b.line+i, file, i+1, r, file, f)
		}
	}
}

// run checks every go block of readme, in module root dir, and reports on
// w. It returns whether any check failed.
func run(w io.Writer, dir, readme string, strict bool) (failed bool, err error) {
	data, err := os.ReadFile(filepath.Join(dir, readme))
	if err != nil {
		return false, err
	}
	blocks, err := parse(string(data))
	if err != nil {
		return false, fmt.Errorf("%s: %w", readme, err)
	}
	tmp, err := os.MkdirTemp(dir, "_readmecheck-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(tmp)

	var programs, fragments, unmarked int
	fail := func(msg string) {
		failed = true
		fmt.Fprintf(w, "FAIL %s\n", msg)
	}
	for _, b := range blocks {
		switch {
		case isProgram(b):
			programs++
			if f := quotedFile(b); f != "" {
				if msg := checkCopy(readme, b, filepath.Join(dir, f)); msg != "" {
					fail(msg)
				}
			}
			if msg := build(dir, tmp, readme, b); msg != "" {
				fail(msg)
			} else {
				fmt.Fprintf(w, "ok   %s:%d: program builds and vets\n", readme, b.line)
			}
		case fragmentOf(b) != "":
			fragments++
			f := fragmentOf(b)
			if msg := checkFragment(readme, b, filepath.Join(dir, filepath.FromSlash(f))); msg != "" {
				fail(msg)
			} else {
				fmt.Fprintf(w, "ok   %s:%d: fragment found in %s\n", readme, b.line, f)
			}
		default:
			unmarked++
			msg := fmt.Sprintf("%s:%d: ```go block is neither a program (package main) nor marked \"// fragment: see FILE\"", readme, b.line)
			if strict {
				fail(msg)
			} else {
				fmt.Fprintf(w, "WARN %s\n", msg)
			}
		}
	}
	fmt.Fprintf(w, "%s: %d go blocks: %d programs, %d fragments, %d unmarked\n", readme, len(blocks), programs, fragments, unmarked)
	return failed, nil
}

// build writes the program into its own package under tmp (inside the
// module) and runs go build and go vet on it. It returns "" on success, or
// the tools' output with the temporary file's positions turned into the
// README's lines.
func build(dir, tmp, readme string, b block) string {
	pkg := filepath.Join(tmp, "line"+strconv.Itoa(b.line))
	if err := os.Mkdir(pkg, 0o755); err != nil {
		return err.Error()
	}
	if err := os.WriteFile(filepath.Join(pkg, "main.go"), []byte(b.text()), 0o644); err != nil {
		return err.Error()
	}
	rel, err := filepath.Rel(dir, pkg)
	if err != nil {
		return err.Error()
	}
	rel = filepath.ToSlash(rel)
	target := "./" + rel
	out, err := exec.Command("gofmt", "-l", filepath.Join(pkg, "main.go")).CombinedOutput()
	switch {
	case err != nil:
		return fmt.Sprintf("%s:%d: gofmt: %v\n%s", readme, b.line, err, readmePositions(out, filepath.ToSlash(rel), readme, b.line))
	case len(out) > 0:
		return fmt.Sprintf("%s:%d: the program is not gofmt-formatted", readme, b.line)
	}
	for _, args := range [][]string{
		{"build", "-o", filepath.Join(pkg, "bin"), target},
		{"vet", target},
	} {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Sprintf("%s:%d: the program does not pass go %s:\n%s", readme, b.line, args[0],
				readmePositions(out, rel, readme, b.line))
		}
	}
	return ""
}

// readmePositions rewrites "<rel>/main.go:L:C" (with or without a leading
// "./") in out as "<readme>:<first+L-1>:C", and indents every line.
func readmePositions(out []byte, rel, readme string, first int) string {
	re := regexp.MustCompile(`(?:\./)?` + regexp.QuoteMeta(rel) + `/main\.go:(\d+)`)
	out = re.ReplaceAllFunc(out, func(m []byte) []byte {
		n, _ := strconv.Atoi(string(re.FindSubmatch(m)[1]))
		return []byte(readme + ":" + strconv.Itoa(first+n-1))
	})
	var b bytes.Buffer
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		b.WriteString("\t" + l + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}
