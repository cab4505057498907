package ratelimit

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// ---------------------------------------------------------------------------
// A Structured Field List parser (RFC 9651 §4.2.1) for the subset the
// rate-limit headers use: items are sf-string, sf-token, sf-integer or
// sf-boolean; parameters carry the same bare items. Inner lists, decimals,
// byte sequences, dates and display strings are rejected, as is anything
// malformed.
// ---------------------------------------------------------------------------

// sfToken is a parsed sf-token, kept apart from sf-string.
type sfToken string

// sfParam is one parameter; Value is a string, sfToken, int64 or bool.
type sfParam struct {
	Key   string
	Value any
}

// sfItem is one list member; Value is a string, sfToken, int64 or bool.
type sfItem struct {
	Value  any
	Params []sfParam
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) eof() bool  { return p.i >= len(p.s) }
func (p *sfParser) peek() byte { return p.s[p.i] }

func (p *sfParser) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d of %q: %s", p.i, p.s, fmt.Sprintf(format, args...))
}

// parseSFList parses a whole field value as an sf-list.
func parseSFList(s string) ([]sfItem, error) {
	p := &sfParser{s: s}
	for !p.eof() && p.peek() == ' ' { // leading SP
		p.i++
	}
	var items []sfItem
	for !p.eof() {
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		items = append(items, it)
		p.ows()
		if p.eof() {
			return items, nil
		}
		if p.peek() != ',' {
			return nil, p.errorf("want ',' after a list member, got %q", p.peek())
		}
		p.i++
		p.ows()
		if p.eof() {
			return nil, p.errorf("trailing comma")
		}
	}
	return items, nil // an empty field is an empty list
}

func (p *sfParser) ows() {
	for !p.eof() && (p.peek() == ' ' || p.peek() == '\t') {
		p.i++
	}
}

func (p *sfParser) item() (sfItem, error) {
	v, err := p.bareItem()
	if err != nil {
		return sfItem{}, err
	}
	params, err := p.params()
	if err != nil {
		return sfItem{}, err
	}
	return sfItem{Value: v, Params: params}, nil
}

func (p *sfParser) params() ([]sfParam, error) {
	var out []sfParam
	for !p.eof() && p.peek() == ';' {
		p.i++
		for !p.eof() && p.peek() == ' ' {
			p.i++
		}
		key, err := p.key()
		if err != nil {
			return nil, err
		}
		var v any = true
		if !p.eof() && p.peek() == '=' {
			p.i++
			if v, err = p.bareItem(); err != nil {
				return nil, err
			}
		}
		replaced := false // a repeated key overwrites, keeping its place
		for j := range out {
			if out[j].Key == key {
				out[j].Value, replaced = v, true
			}
		}
		if !replaced {
			out = append(out, sfParam{key, v})
		}
	}
	return out, nil
}

func (p *sfParser) key() (string, error) {
	start := p.i
	if p.eof() || !(sfLCAlpha(p.peek()) || p.peek() == '*') {
		return "", p.errorf("parameter key must start with a-z or '*'")
	}
	for !p.eof() {
		c := p.peek()
		if !(sfLCAlpha(c) || sfDigit(c) || c == '_' || c == '-' || c == '.' || c == '*') {
			break
		}
		p.i++
	}
	return p.s[start:p.i], nil
}

func (p *sfParser) bareItem() (any, error) {
	if p.eof() {
		return nil, p.errorf("missing item")
	}
	switch c := p.peek(); {
	case c == '-' || sfDigit(c):
		return p.integer()
	case c == '"':
		return p.str()
	case c == '?':
		return p.boolean()
	case sfAlpha(c) || c == '*':
		return p.token(), nil
	default:
		return nil, p.errorf("unsupported or invalid item starting with %q", c)
	}
}

func (p *sfParser) integer() (int64, error) {
	start := p.i
	if p.peek() == '-' {
		p.i++
	}
	digits := p.i
	for !p.eof() && sfDigit(p.peek()) {
		p.i++
	}
	n := p.i - digits
	if n == 0 {
		return 0, p.errorf("'-' without digits")
	}
	if n > 15 {
		return 0, p.errorf("integer of %d digits, at most 15 allowed", n)
	}
	if !p.eof() && p.peek() == '.' {
		return 0, p.errorf("decimals are not part of the supported subset")
	}
	return strconv.ParseInt(p.s[start:p.i], 10, 64)
}

func (p *sfParser) str() (string, error) {
	p.i++ // opening DQUOTE
	var b strings.Builder
	for !p.eof() {
		c := p.peek()
		p.i++
		switch {
		case c == '\\':
			if p.eof() || (p.peek() != '"' && p.peek() != '\\') {
				return "", p.errorf("bad escape in string")
			}
			b.WriteByte(p.peek())
			p.i++
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", p.errorf("byte %#x not allowed in a string", c)
		default:
			b.WriteByte(c)
		}
	}
	return "", p.errorf("unterminated string")
}

func (p *sfParser) boolean() (bool, error) {
	p.i++ // '?'
	if p.eof() || (p.peek() != '0' && p.peek() != '1') {
		return false, p.errorf("boolean must be ?0 or ?1")
	}
	v := p.peek() == '1'
	p.i++
	return v, nil
}

func (p *sfParser) token() sfToken {
	start := p.i
	p.i++ // ALPHA or '*', checked by the caller
	for !p.eof() && (sfTchar(p.peek()) || p.peek() == ':' || p.peek() == '/') {
		p.i++
	}
	return sfToken(p.s[start:p.i])
}

func sfLCAlpha(c byte) bool { return c >= 'a' && c <= 'z' }
func sfAlpha(c byte) bool   { return sfLCAlpha(c) || c >= 'A' && c <= 'Z' }
func sfDigit(c byte) bool   { return c >= '0' && c <= '9' }
func sfTchar(c byte) bool {
	return sfAlpha(c) || sfDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func TestHeaderSFParser(t *testing.T) {
	valid := []struct {
		in   string
		want []sfItem
	}{
		{``, nil},
		{`"a"`, []sfItem{{Value: "a"}}},
		{`  "a";q=1;w=2, "b";q=3;w=4`, []sfItem{
			{Value: "a", Params: []sfParam{{"q", int64(1)}, {"w", int64(2)}}},
			{Value: "b", Params: []sfParam{{"q", int64(3)}, {"w", int64(4)}}},
		}},
		{"tok/x:y;a=\"s\";b=t1;c;d=?0 \t,\t 42;n=-7,\"q\\\"\\\\\"", []sfItem{
			{Value: sfToken("tok/x:y"), Params: []sfParam{{"a", "s"}, {"b", sfToken("t1")}, {"c", true}, {"d", false}}},
			{Value: int64(42), Params: []sfParam{{"n", int64(-7)}}},
			{Value: `q"\`},
		}},
		{`"a";q=1;q=2;w=3`, []sfItem{{Value: "a", Params: []sfParam{{"q", int64(2)}, {"w", int64(3)}}}}},
		{`"a"; q=1`, []sfItem{{Value: "a", Params: []sfParam{{"q", int64(1)}}}}},
		{`999999999999999`, []sfItem{{Value: int64(999999999999999)}}},
	}
	for _, tc := range valid {
		got, err := parseSFList(tc.in)
		if err != nil {
			t.Errorf("parseSFList(%q): %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseSFList(%q) = %#v, want %#v", tc.in, got, tc.want)
		}
	}
	invalid := []string{
		`"unterminated`, `"a";q=`, `"a";Q=1`, `"a";1=1`, `"a",`, `,"a"`, `"a",,"b"`,
		`"a" "b"`, `"a";q=1 ;w=2`, `1234567890123456`, `"a";q=1.5`, `-`, `"a\x"`,
		"\"caf\xc3\xa9\"", "\"a\x00\"", `(inner list)`, `:Ymlu:`, `@date`, `%"display"`,
		`?2`, "\t\"a\"", `"a";=1`, `"a";q="b`,
	}
	for _, in := range invalid {
		if got, err := parseSFList(in); err == nil {
			t.Errorf("parseSFList(%q) = %#v, want an error", in, got)
		}
	}
}
