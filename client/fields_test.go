package client

import (
	"reflect"
	"strings"
	"testing"
)

func intItem(n int64, params ...sfParam) sfMember {
	return sfMember{item: sfItem{bare: sfBare{kind: sfInteger, num: n}, params: params}}
}

func strItem(s string, params ...sfParam) sfMember {
	return sfMember{item: sfItem{bare: sfBare{kind: sfString, str: s}, params: params}}
}

func intParamOf(key string, n int64) sfParam {
	return sfParam{key, sfBare{kind: sfInteger, num: n}}
}

// TestStructuredListParsesValidFields pins what valid RFC 9651 lists parse
// to, every bare item type included.
func TestStructuredListParsesValidFields(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []sfMember
	}{
		{"empty field is an empty list", "", nil},
		{"only spaces", "   ", nil},
		{"draft-11 policy", `"hello-1s";q=10;w=1, "hello-1m";q=120;w=60`, []sfMember{
			strItem("hello-1s", intParamOf("q", 10), intParamOf("w", 1)),
			strItem("hello-1m", intParamOf("q", 120), intParamOf("w", 60)),
		}},
		{"leading spaces and tabs around commas", "  \"a\";r=1 \t,\t \"b\";r=2", []sfMember{
			strItem("a", intParamOf("r", 1)), strItem("b", intParamOf("r", 2)),
		}},
		{"space after semicolon", `"a"; r=1`, []sfMember{strItem("a", intParamOf("r", 1))}},
		{"duplicate key: the last value, in the first place", `"a";r=1;t=2;r=3`, []sfMember{
			strItem("a", intParamOf("r", 3), intParamOf("t", 2)),
		}},
		{"largest integer", "999999999999999", []sfMember{intItem(999999999999999)}},
		{"negative integer", "-999999999999999", []sfMember{intItem(-999999999999999)}},
		{"escapes in strings", `"q\"\\"`, []sfMember{strItem(`q"\`)}},
		{"token with colon and slash", "tok/x:y", []sfMember{{item: sfItem{bare: sfBare{kind: sfToken, str: "tok/x:y"}}}}},
		{"decimal", "-12.5", []sfMember{{item: sfItem{bare: sfBare{kind: sfDecimal, num: -12500}}}}},
		{"longest decimal", "123456789012.123", []sfMember{{item: sfItem{bare: sfBare{kind: sfDecimal, num: 123456789012123}}}}},
		{"byte sequence", ":aGVsbG8=:", []sfMember{{item: sfItem{bare: sfBare{kind: sfBytes, str: "hello"}}}}},
		{"byte sequence without padding", ":aGVsbG8:", []sfMember{{item: sfItem{bare: sfBare{kind: sfBytes, str: "hello"}}}}},
		{"booleans and a bare key", "?1;a;b=?0", []sfMember{{item: sfItem{
			bare:   sfBare{kind: sfBoolean, num: 1},
			params: []sfParam{{"a", sfBare{kind: sfBoolean, num: 1}}, {"b", sfBare{kind: sfBoolean, num: 0}}},
		}}}},
		{"date", "@1659578233", []sfMember{{item: sfItem{bare: sfBare{kind: sfDate, num: 1659578233}}}}},
		{"display string", `%"f%c3%bc%c3%bc"`, []sfMember{{item: sfItem{bare: sfBare{kind: sfDisplay, str: "füü"}}}}},
		{"inner list with parameters", `("a" 1);p=2, 3`, []sfMember{
			{isInn: true, inner: []sfItem{{bare: sfBare{kind: sfString, str: "a"}}, {bare: sfBare{kind: sfInteger, num: 1}}},
				item: sfItem{params: []sfParam{intParamOf("p", 2)}}},
			intItem(3),
		}},
		{"empty inner list", "()", []sfMember{{isInn: true}}},
		{"trailing spaces", `"a"  `, []sfMember{strItem("a")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSFList(tc.in)
			if err != nil {
				t.Fatalf("parseSFList(%q): %v", tc.in, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("parseSFList(%q) =\n%#v\nwant\n%#v", tc.in, got, tc.want)
			}
		})
	}
}

// TestStructuredListRejectsMalformedFields pins that every deviation from
// RFC 9651 fails the whole field.
func TestStructuredListRejectsMalformedFields(t *testing.T) {
	tests := []struct{ name, in string }{
		{"unterminated string", `"abc`},
		{"missing parameter value", `"a";q=`},
		{"upper-case key", `"a";Q=1`},
		{"key starting with a digit", `"a";1=1`},
		{"empty key", `"a";=1`},
		{"trailing comma", `"a",`},
		{"leading comma", `,"a"`},
		{"empty member", `"a",,"b"`},
		{"members without a comma", `"a" "b"`},
		{"space before a semicolon", `"a";q=1 ;w=2`},
		{"16-digit integer", "1234567890123456"},
		{"huge integer", "99999999999999999999999"},
		{"decimal with 4 fraction digits", "1.2345"},
		{"decimal with 13 integer digits", "1234567890123.1"},
		{"decimal ending in a dot", "1."},
		{"minus without digits", "-"},
		{"minus then a letter", "-a"},
		{"bad escape", `"a\x"`},
		{"non-ASCII in a string", "\"caf\xc3\xa9\""},
		{"control in a string", "\"a\x01\""},
		{"unterminated inner list", `("a" 1`},
		{"inner list items without a space", `("a""b")`},
		{"unterminated byte sequence", ":aGVsbG8="},
		{"bad byte in byte sequence", ":aGVs*G8=:"},
		{"boolean other than 0 or 1", "?2"},
		{"decimal date", "@1.5"},
		{"display string with upper-case hex", `%"%C3%BC"`},
		{"display string with invalid UTF-8", `%"%ff"`},
		{"display string without quotes", "%abc"},
		{"leading tab", "\t\"a\""},
		{"garbage", "}{)(*&^"},
		{"unknown start", "<a>"},
		{"a semicolon alone", ";"},
		{"parameter value unterminated", `"a";q="b`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := parseSFList(tc.in); err == nil {
				t.Errorf("parseSFList(%q) = %#v, want an error", tc.in, got)
			}
		})
	}
}

// TestStructuredItemParsesOneItemOnly pins the Item form used by the
// draft-06 fields.
func TestStructuredItemParsesOneItemOnly(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"5", 5, true},
		{" 5 ", 5, true},
		{"5;w=1", 5, true},
		{"5, 6", 0, false},
		{"5 6", 0, false},
		{"", 0, false},
		{"five", 0, false},
	}
	for i, tc := range tests {
		it, err := parseSFItem(tc.in)
		if ok := err == nil && it.bare.kind == sfInteger; ok != tc.ok || ok && it.bare.num != tc.want {
			t.Errorf("step %d: parseSFItem(%q) = %#v, %v; want %d, ok %v", i, tc.in, it, err, tc.want, tc.ok)
		}
	}
}

// FuzzStructuredList checks that no input makes the parser panic, and
// that what it accepts contains no byte a field cannot carry in a string.
func FuzzStructuredList(f *testing.F) {
	for _, s := range []string{
		`"hello-1s";q=10;w=1, "hello-1m";q=120;w=60`, `"a";r=0;t=1`, `(1 2);a=?1`, `:AQID:`,
		`%"%c3%bc"`, `@-5`, `1.5`, `-`, `"`, `;`, `(`, "\x00",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ms, err := parseSFList(s)
		if err != nil {
			return
		}
		for _, m := range ms {
			if m.item.bare.kind == sfString && strings.ContainsFunc(m.item.bare.str, func(r rune) bool { return r < 0x20 || r > 0x7e }) {
				t.Errorf("string %q holds a byte it cannot", m.item.bare.str)
			}
		}
		_, _ = parseSFItem(s)
	})
}
