package client

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A strict parser of Structured Field Values for HTTP (RFC 9651, which
// obsoletes RFC 8941): Lists and Items, with every bare item type. It
// follows the RFC's parsing algorithms: any deviation fails the whole field,
// and the caller then ignores that field. It never panics, whatever the
// input.

// sfKind is the type of a bare item.
type sfKind uint8

const (
	sfInteger sfKind = iota + 1
	sfDecimal
	sfString
	sfToken
	sfBytes
	sfBoolean
	sfDate
	sfDisplay
)

// sfBare is a bare item. Integers, dates and booleans (0 or 1) are in num,
// decimals in num as thousandths; strings, tokens, byte sequences and
// display strings (decoded) in str.
type sfBare struct {
	kind sfKind
	num  int64
	str  string
}

// sfParam is one parameter of an item.
type sfParam struct {
	key string
	val sfBare
}

// sfItem is an Item: a bare item and its parameters, in order.
type sfItem struct {
	bare   sfBare
	params []sfParam
}

// param returns the value of the parameter named key.
func (it sfItem) param(key string) (sfBare, bool) {
	for _, p := range it.params {
		if p.key == key {
			return p.val, true
		}
	}
	return sfBare{}, false
}

// sfMember is a member of a List: an Item, or an Inner List (inner set)
// with the list's parameters in item.params.
type sfMember struct {
	item  sfItem
	inner []sfItem
	isInn bool
}

// errSF is the error of every malformed field; the caller only needs to
// know that the field is to be ignored.
var errSF = errors.New("malformed structured field")

// Limits of RFC 9651.
const (
	sfMaxIntegerDigits = 15
	sfMaxDecimalInt    = 12
	sfMaxDecimalFrac   = 3
)

type sfParser struct {
	s string
	i int
}

func (p *sfParser) eof() bool { return p.i >= len(p.s) }

// peek returns the next byte, 0 at the end (0 never starts a valid
// construct, so callers need not check eof first).
func (p *sfParser) peek() byte {
	if p.eof() {
		return 0
	}
	return p.s[p.i]
}

func (p *sfParser) skipSP() {
	for p.peek() == ' ' {
		p.i++
	}
}

func (p *sfParser) skipOWS() {
	for c := p.peek(); c == ' ' || c == '\t'; c = p.peek() {
		p.i++
	}
}

// parseSFList parses a field value as a List (RFC 9651 §4.2.1). An empty
// value is an empty list. Several field lines are to be joined with ", "
// by the caller.
func parseSFList(s string) ([]sfMember, error) {
	p := &sfParser{s: s}
	p.skipSP()
	var out []sfMember
	for !p.eof() {
		m, err := p.member()
		if err != nil {
			return nil, err
		}
		out = append(out, m)
		p.skipOWS()
		if p.eof() {
			return out, nil
		}
		if p.peek() != ',' {
			return nil, errSF
		}
		p.i++
		p.skipOWS()
		if p.eof() {
			return nil, errSF // trailing comma
		}
	}
	return out, nil
}

// parseSFItem parses a field value as an Item (RFC 9651 §4.2.3).
func parseSFItem(s string) (sfItem, error) {
	p := &sfParser{s: s}
	p.skipSP()
	it, err := p.item()
	if err != nil {
		return sfItem{}, err
	}
	p.skipSP()
	if !p.eof() {
		return sfItem{}, errSF
	}
	return it, nil
}

func (p *sfParser) member() (sfMember, error) {
	if p.peek() != '(' {
		it, err := p.item()
		return sfMember{item: it}, err
	}
	p.i++
	var inner []sfItem
	for {
		p.skipSP()
		if p.eof() {
			return sfMember{}, errSF
		}
		if p.peek() == ')' {
			p.i++
			params, err := p.params()
			if err != nil {
				return sfMember{}, err
			}
			return sfMember{item: sfItem{params: params}, inner: inner, isInn: true}, nil
		}
		it, err := p.item()
		if err != nil {
			return sfMember{}, err
		}
		inner = append(inner, it)
		if c := p.peek(); c != ' ' && c != ')' {
			return sfMember{}, errSF
		}
	}
}

func (p *sfParser) item() (sfItem, error) {
	b, err := p.bare()
	if err != nil {
		return sfItem{}, err
	}
	params, err := p.params()
	if err != nil {
		return sfItem{}, err
	}
	return sfItem{bare: b, params: params}, nil
}

// params parses parameters; a repeated key overwrites the earlier value
// in its place, as the RFC says.
func (p *sfParser) params() ([]sfParam, error) {
	var out []sfParam
	for p.peek() == ';' {
		p.i++
		p.skipSP()
		key, err := p.key()
		if err != nil {
			return nil, err
		}
		val := sfBare{kind: sfBoolean, num: 1}
		if p.peek() == '=' {
			p.i++
			if val, err = p.bare(); err != nil {
				return nil, err
			}
		}
		replaced := false
		for j := range out {
			if out[j].key == key {
				out[j].val, replaced = val, true
			}
		}
		if !replaced {
			out = append(out, sfParam{key, val})
		}
	}
	return out, nil
}

func (p *sfParser) key() (string, error) {
	start := p.i
	if c := p.peek(); !isLCAlpha(c) && c != '*' {
		return "", errSF
	}
	for c := p.peek(); isLCAlpha(c) || isDigit(c) || c == '_' || c == '-' || c == '.' || c == '*'; c = p.peek() {
		p.i++
	}
	return p.s[start:p.i], nil
}

func (p *sfParser) bare() (sfBare, error) {
	switch c := p.peek(); {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		s, err := p.str()
		return sfBare{kind: sfString, str: s}, err
	case c == '*' || isAlpha(c):
		return sfBare{kind: sfToken, str: p.token()}, nil
	case c == ':':
		return p.bytes()
	case c == '?':
		return p.boolean()
	case c == '@':
		p.i++
		n, err := p.number()
		if err != nil || n.kind != sfInteger {
			return sfBare{}, errSF
		}
		return sfBare{kind: sfDate, num: n.num}, nil
	case c == '%':
		return p.display()
	}
	return sfBare{}, errSF
}

// number parses an Integer or a Decimal (RFC 9651 §4.2.4).
func (p *sfParser) number() (sfBare, error) {
	neg := false
	if p.peek() == '-' {
		neg = true
		p.i++
	}
	if !isDigit(p.peek()) {
		return sfBare{}, errSF
	}
	start, dot := p.i, -1
	for {
		c := p.peek()
		if isDigit(c) {
			p.i++
		} else if c == '.' && dot < 0 {
			if p.i-start > sfMaxDecimalInt {
				return sfBare{}, errSF
			}
			dot = p.i
			p.i++
		} else {
			break
		}
		n := p.i - start
		if dot < 0 && n > sfMaxIntegerDigits || dot >= 0 && n > sfMaxDecimalInt+1+sfMaxDecimalFrac {
			return sfBare{}, errSF
		}
	}
	if dot < 0 {
		v, err := strconv.ParseInt(p.s[start:p.i], 10, 64) // at most 15 digits: cannot overflow
		if err != nil {
			return sfBare{}, errSF
		}
		if neg {
			v = -v
		}
		return sfBare{kind: sfInteger, num: v}, nil
	}
	frac := p.s[dot+1 : p.i]
	if len(frac) == 0 || len(frac) > sfMaxDecimalFrac {
		return sfBare{}, errSF
	}
	whole, err := strconv.ParseInt(p.s[start:dot], 10, 64)
	if err != nil {
		return sfBare{}, errSF
	}
	f, _ := strconv.ParseInt(frac+strings.Repeat("0", sfMaxDecimalFrac-len(frac)), 10, 64)
	v := whole*1000 + f
	if neg {
		v = -v
	}
	return sfBare{kind: sfDecimal, num: v}, nil
}

// str parses a String (RFC 9651 §4.2.5): printable ASCII, with only \" and
// \\ as escapes.
func (p *sfParser) str() (string, error) {
	p.i++ // DQUOTE
	var b strings.Builder
	for !p.eof() {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if n := p.peek(); n != '"' && n != '\\' {
				return "", errSF
			}
			b.WriteByte(p.s[p.i])
			p.i++
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", errSF
		default:
			b.WriteByte(c)
		}
	}
	return "", errSF // unterminated
}

// token parses a Token (RFC 9651 §4.2.6); the caller checked its first byte.
func (p *sfParser) token() string {
	start := p.i
	p.i++
	for c := p.peek(); isTchar(c) || c == ':' || c == '/'; c = p.peek() {
		p.i++
	}
	return p.s[start:p.i]
}

// bytes parses a Byte Sequence (RFC 9651 §4.2.7), base64 between colons;
// missing padding is accepted, as the RFC recommends.
func (p *sfParser) bytes() (sfBare, error) {
	p.i++ // ':'
	end := strings.IndexByte(p.s[p.i:], ':')
	if end < 0 {
		return sfBare{}, errSF
	}
	enc := p.s[p.i : p.i+end]
	for i := 0; i < len(enc); i++ {
		if c := enc[i]; !isAlpha(c) && !isDigit(c) && c != '+' && c != '/' && c != '=' {
			return sfBare{}, errSF
		}
	}
	p.i += end + 1
	dec, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		if dec, err = base64.RawStdEncoding.DecodeString(enc); err != nil {
			return sfBare{}, errSF
		}
	}
	return sfBare{kind: sfBytes, str: string(dec)}, nil
}

func (p *sfParser) boolean() (sfBare, error) {
	p.i++ // '?'
	switch p.peek() {
	case '0':
		p.i++
		return sfBare{kind: sfBoolean, num: 0}, nil
	case '1':
		p.i++
		return sfBare{kind: sfBoolean, num: 1}, nil
	}
	return sfBare{}, errSF
}

// display parses a Display String (RFC 9651 §4.2.10): %"...", with
// lowercase %xx escapes of UTF-8 bytes.
func (p *sfParser) display() (sfBare, error) {
	p.i++ // '%'
	if p.peek() != '"' {
		return sfBare{}, errSF
	}
	p.i++
	var b []byte
	for !p.eof() {
		c := p.s[p.i]
		p.i++
		switch {
		case c < 0x20 || c > 0x7e:
			return sfBare{}, errSF
		case c == '%':
			if p.i+2 > len(p.s) {
				return sfBare{}, errSF
			}
			hi, ok1 := lowerHex(p.s[p.i])
			lo, ok2 := lowerHex(p.s[p.i+1])
			if !ok1 || !ok2 {
				return sfBare{}, errSF
			}
			b = append(b, hi<<4|lo)
			p.i += 2
		case c == '"':
			if !utf8.Valid(b) {
				return sfBare{}, errSF
			}
			return sfBare{kind: sfDisplay, str: string(b)}, nil
		default:
			b = append(b, c)
		}
	}
	return sfBare{}, errSF
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case isDigit(c):
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

func isLCAlpha(c byte) bool { return c >= 'a' && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool   { return c >= '0' && c <= '9' }

// isTchar reports an RFC 9110 tchar.
func isTchar(c byte) bool {
	return isAlpha(c) || isDigit(c) || c != 0 && strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
