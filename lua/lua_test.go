package lua

import (
	"strings"
	"testing"
)

func TestBake(t *testing.T) {
	got := Bake(Baked{TTLMS: 3600000, BlockUS: 5, IDTTLUS: 7, Reserve: true,
		P: []int64{3, 10, 100000, 1, 1000000, 2, 0, 1, 120, 3600000, 1, 3600000000, 3, 4}})
	head, rest, _ := strings.Cut(got, "\n")
	if want := "local TTL, NL, BLOCK, IDTTL, RES, P = 3600000, 2, 5, 7, true, {3, 10, 100000, 1, 1000000, 2, 0, 1, 120, 3600000, 1, 3600000000, 3, 4}"; head != want {
		t.Fatalf("baked header %q, want %q", head, want)
	}
	if rest != strings.TrimPrefix(Take, unbaked) {
		t.Fatal("Bake changed the script body")
	}
	for _, s := range []string{Take, Refund} {
		if !strings.HasPrefix(s, unbaked) {
			t.Fatalf("a script does not open with %q", unbaked)
		}
	}
}

func TestBakeRejectsPartialLimit(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Bake of 8 numbers (a limit and a part) did not panic")
		}
	}()
	Bake(Baked{P: []int64{1, 2, 3, 4, 5, 6, 7, 8}})
}
