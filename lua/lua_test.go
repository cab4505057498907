package lua

import (
	"strings"
	"testing"
)

func TestBake(t *testing.T) {
	got := Bake(TakeToken, 3600000, 4, []int64{10, 100000, 1, 1, 120, 500000, 1, 2})
	head, rest, _ := strings.Cut(got, "\n")
	if want := "local TTL, NF, NL, P = 3600000, 4, 2, {10, 100000, 1, 1, 120, 500000, 1, 2}"; head != want {
		t.Fatalf("baked header %q, want %q", head, want)
	}
	if rest != strings.TrimPrefix(TakeToken, unbaked) {
		t.Fatal("Bake changed the script body")
	}
	for _, s := range []string{TakeSliding, TakeFixed, TakeToken} {
		if !strings.HasPrefix(s, unbaked) {
			t.Fatalf("a Take script does not open with %q", unbaked)
		}
	}
}

func TestBakeRejects(t *testing.T) {
	for name, f := range map[string]func(){
		"refund script": func() { Bake(RefundToken, 1, 2, []int64{1, 2, 3, 4}) },
		"partial limit": func() { Bake(TakeToken, 1, 2, []int64{1, 2, 3}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Bake did not panic", name)
				}
			}()
			f()
		}()
	}
}
