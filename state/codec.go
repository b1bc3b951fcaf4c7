package state

import (
	"strings"
	"time"
	"unicode/utf8"
)

// fastDecodeRecord parses a stored audit record laid out exactly as
// encodeRecord writes it, when no string needs unescaping. It returns ok=false
// for anything else (escapes, other key order, whitespace, edited records),
// and decodeRecord then falls back to encoding/json. For every input it
// accepts, the result equals encoding/json's, so verification does not
// depend on which path decoded a record. Queries decode every returned
// record; this path is several times faster than encoding/json.
func fastDecodeRecord(raw []byte) (AuditRecord, bool) {
	// One allocation for the whole record; every field is a substring of it.
	p := fastParser{b: string(raw)}
	var r AuditRecord
	ok := p.lit(`{"action":`) && p.str(&r.Action) &&
		p.lit(`,"actor":`) && p.str(&r.Actor) &&
		p.lit(`,"cluster":`) && p.str(&r.Cluster) &&
		p.lit(`,"command":`) && p.str(&r.Command)
	if !ok {
		return AuditRecord{}, false
	}
	if p.lit(`,"detail":{`) {
		r.Detail = map[string]string{}
		for {
			var k, v string
			if !p.str(&k) || !p.lit(`:`) || !p.str(&v) {
				return AuditRecord{}, false
			}
			if _, dup := r.Detail[k]; dup {
				return AuditRecord{}, false // encoding/json keeps the last; not worth mirroring
			}
			r.Detail[k] = v
			if p.lit(`}`) {
				break
			}
			if !p.lit(`,`) {
				return AuditRecord{}, false
			}
		}
	}
	var ts string
	ok = p.lit(`,"op_id":`) && p.str(&r.OpID) &&
		p.lit(`,"prev_hash":`) && p.str(&r.PrevHash) &&
		p.lit(`,"result":`) && p.str(&r.Result) &&
		p.lit(`,"seq":`) && p.uint(&r.Seq) &&
		p.lit(`,"time":`) && p.str(&ts) &&
		p.lit(`,"hash":`) && p.str(&r.Hash) &&
		p.lit(`}`) && len(p.b) == 0
	if !ok {
		return AuditRecord{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return AuditRecord{}, false
	}
	r.Time = t.UTC()
	return r, true
}

type fastParser struct{ b string }

func (p *fastParser) lit(s string) bool {
	if !strings.HasPrefix(p.b, s) {
		return false
	}
	p.b = p.b[len(s):]
	return true
}

// str reads a JSON string that contains no escapes, no control characters
// and only valid UTF-8 — exactly the strings encoding/json would decode to
// their own bytes.
func (p *fastParser) str(dst *string) bool {
	if len(p.b) == 0 || p.b[0] != '"' {
		return false
	}
	end := strings.IndexByte(p.b[1:], '"')
	if end < 0 {
		return false
	}
	s := p.b[1 : 1+end]
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '\\' || c < 0x20 {
			return false
		}
	}
	if !utf8.ValidString(s) {
		return false
	}
	*dst = s
	p.b = p.b[2+end:]
	return true
}

// uint reads a JSON unsigned integer without leading zeros that fits uint64.
func (p *fastParser) uint(dst *uint64) bool {
	n := 0
	for n < len(p.b) && p.b[n] >= '0' && p.b[n] <= '9' {
		n++
	}
	if n == 0 || n > 19 || (n > 1 && p.b[0] == '0') {
		return false // 19 digits always fit; longer ones go the slow way
	}
	var v uint64
	for i := 0; i < n; i++ {
		v = v*10 + uint64(p.b[i]-'0')
	}
	*dst = v
	p.b = p.b[n:]
	return true
}
