package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const fence = "```"

func TestParse(t *testing.T) {
	md := strings.Join([]string{
		"# Title",               // 1
		fence + "go",            // 2
		"package main",          // 3
		"",                      // 4
		"func main() {}",        // 5
		fence,                   // 6
		fence + "sh",            // 7
		"go test ./...",         // 8
		fence,                   // 9
		fence + "go",            // 10
		"// fragment: see a.go", // 11
		"x := 1",                // 12
		fence,                   // 13
	}, "\n")
	blocks, err := parse(md)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 2 {
		t.Fatalf("got %d blocks, want 2 (the sh block is not Go)", len(blocks))
	}
	if b := blocks[0]; b.line != 3 || len(b.lines) != 3 || !isProgram(b) || fragmentOf(b) != "" {
		t.Errorf("block 0: %+v, want a program starting at line 3", b)
	}
	if b := blocks[1]; b.line != 11 || isProgram(b) || fragmentOf(b) != "a.go" {
		t.Errorf("block 1: %+v, want a fragment of a.go starting at line 11", b)
	}
	if _, err := parse(fence + "go\nx := 1\n"); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("unclosed fence: error %v, want one naming line 1", err)
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		code    string
		program bool
		quoted  string
	}{
		{"package main\n", true, ""},
		{"// Command x does y.\n//\n//\tgo run -C _example ./x\npackage main\n", true, filepath.Join("_example", "x", "main.go")},
		{"\n// go run -C _example ./a/b\n\npackage main", true, filepath.Join("_example", "a", "b", "main.go")},
		{"package main\n// go run -C _example ./late\n", true, ""}, // only the leading comment counts
		{"package store\n", false, ""},
		{"lim, err := ratelimit.New(st, p)\n", false, ""},
		{"// package main\nx := 1\n", false, ""},
	} {
		b := block{line: 1, lines: strings.Split(tc.code, "\n")}
		if got := isProgram(b); got != tc.program {
			t.Errorf("isProgram(%q) = %v, want %v", tc.code, got, tc.program)
		}
		if got := quotedFile(b); got != tc.quoted {
			t.Errorf("quotedFile(%q) = %q, want %q", tc.code, got, tc.quoted)
		}
	}
}

func TestCheckFragment(t *testing.T) {
	file := filepath.Join(t.TempDir(), "main.go")
	src := "package main\n\nfunc main() {\n\tlim, err := New(st,\n\t\tWithA(),   // a\n\t\tWithB())\n\tr.With(lim.Handler).Get(\"/\", h)\n}\n"
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, code string
		badLine    int // 0: found; else the README line reported
	}{
		{"in order, with gaps and an elision", "// fragment: see x\nlim, err := New(st,\n    WithB())\n...\nr.With(lim.Handler).Get(\"/\", h)", 0},
		{"spaces differ", "// fragment: see x\n  WithA(),      // a", 0},
		{"out of order", "// fragment: see x\nr.With(lim.Handler).Get(\"/\", h)\nlim, err := New(st,", 12},
		{"not there", "// fragment: see x\n\nlim, err := New(store,", 12},
	} {
		b := block{line: 10, lines: strings.Split(tc.code, "\n")}
		msg := checkFragment("README.md", b, file)
		switch {
		case tc.badLine == 0 && msg != "":
			t.Errorf("%s: %s", tc.name, msg)
		case tc.badLine != 0 && !strings.HasPrefix(msg, "README.md:"+strconv.Itoa(tc.badLine)+": fragment line not found"):
			t.Errorf("%s: message %q, want one naming README.md:%d", tc.name, msg, tc.badLine)
		}
	}
	if msg := checkFragment("README.md", block{line: 3, lines: []string{"x"}}, file+".missing"); !strings.Contains(msg, "README.md:3: fragment names") {
		t.Errorf("missing file: %q", msg)
	}
}

func TestCheckCopy(t *testing.T) {
	file := filepath.Join(t.TempDir(), "main.go")
	src := "// go run -C _example ./x\npackage main\n\nfunc main() {}\n"
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	same := block{line: 20, lines: strings.Split(strings.TrimSuffix(src, "\n"), "\n")}
	if msg := checkCopy("README.md", same, file); msg != "" {
		t.Errorf("identical: %s", msg)
	}
	changed := block{line: 20, lines: []string{"// go run -C _example ./x", "package main", "", "func main() { }"}}
	if msg := checkCopy("README.md", changed, file); !strings.HasPrefix(msg, "README.md:23: the program is not a copy of") {
		t.Errorf("changed line 4: message %q, want one naming README.md:23", msg)
	}
	longer := block{line: 20, lines: append(same.lines[:len(same.lines):len(same.lines)], "// more")}
	if msg := checkCopy("README.md", longer, file); !strings.HasPrefix(msg, "README.md:24: ") {
		t.Errorf("extra line: message %q, want one naming README.md:24", msg)
	}
}

// run, end to end, in a module of its own: a good program, one that does
// not compile, one that is not gofmt-formatted, a fragment and an unmarked
// block.
func TestRun(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go command not in PATH:", err)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n\ngo 1.23\n")
	good := "// go run -C _example ./good\npackage main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hi\") }\n"
	write("_example/good/main.go", good)
	md := strings.Join([]string{
		"# m",                                    // 1
		fence + "go",                             // 2
		strings.TrimSuffix(good, "\n"),           // 3-8
		fence,                                    // 9
		fence + "go",                             // 10
		"package main",                           // 11
		"",                                       // 12
		"func main() {",                          // 13
		"\tretryIn := 1",                         // 14
		"}",                                      // 15
		fence,                                    // 16
		fence + "go",                             // 17
		"// fragment: see _example/good/main.go", // 18
		"func main() { fmt.Println(\"hi\") }",    // 19
		fence,                                    // 20
		fence + "go",                             // 21
		"x := 1",                                 // 22
		fence,                                    // 23
		fence + "go",                             // 24
		"package main",                           // 25
		"func main() {}",                         // 26
		fence,                                    // 27
	}, "\n") + "\n"
	write("README.md", md)

	var out bytes.Buffer
	failed, err := run(&out, dir, "README.md", false)
	if err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"ok   README.md:3: program builds and vets",
		"FAIL README.md:11: the program does not pass go build:",
		"README.md:14:",
		"declared and not used: retryIn",
		"ok   README.md:18: fragment found in _example/good/main.go",
		"WARN README.md:22: ```go block is neither a program",
		"FAIL README.md:25: the program is not gofmt-formatted",
		"README.md: 5 go blocks: 3 programs, 1 fragments, 1 unmarked",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if !failed {
		t.Errorf("run reported success:\n%s", got)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "_readmecheck-*")); len(m) != 0 {
		t.Errorf("temporary directories left behind: %v", m)
	}

	// The quoted program drifts from its file: named with the README's line.
	write("_example/good/main.go", strings.Replace(good, "hi", "hello", 1))
	out.Reset()
	if _, err := run(&out, dir, "README.md", true); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"FAIL README.md:8: the program is not a copy of " + filepath.Join(dir, "_example", "good", "main.go"),
		"FAIL README.md:19: fragment line not found",
		"FAIL README.md:22: ```go block is neither a program", // -strict
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("after the file changed, output lacks %q:\n%s", want, out.String())
		}
	}
}
