package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

// readMembers reads an object with objectStream, every value whole except
// the string values of stream, which are read through stringValue.
func readMembers(body string, stream map[string]bool) (map[string]string, error) {
	s, isObject, err := newObjectStream(strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for isObject {
		name, done, err := s.next()
		if err != nil {
			return nil, err
		}
		if done {
			break
		}
		if stream[name] {
			r, null, err := s.stringValue()
			if err != nil {
				return nil, err
			}
			if null {
				out[name] = "null"
				continue
			}
			b, err := io.ReadAll(r)
			if err != nil {
				return nil, err
			}
			out[name] = string(b)
			continue
		}
		raw, err := s.rawValue(1 << 20)
		if err != nil {
			return nil, err
		}
		out[name] = string(raw)
	}
	return out, nil
}

func TestObjectStream(t *testing.T) {
	got, err := readMembers(` { "a" : 1.5e3 , "s":"x\"\\\/\u00e9\n", "o":{"k":["]",{}]}, "t":true,"n":null} `, map[string]bool{"s": true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "1.5e3", "s": "x\"\\/é\n", "o": `{"k":["]",{}]}`, "t": "true", "n": "null"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	for _, bad := range []string{`[1]`, `{"a":1`, `{"a" 1}`, `{"a":1,}`, `{"a":1}x`, `{a:1}`, `{"a":1 "b":2}`, `{"s":"ab`} {
		if _, err := readMembers(bad, map[string]bool{"s": true}); err == nil {
			t.Errorf("%s: read without an error", bad)
		}
	}
	if _, err := readMembers(`{"a":"`+strings.Repeat("x", 2<<20)+`"}`, nil); err != errTooLong {
		t.Errorf("long value: %v, want errTooLong", err)
	}
}

// FuzzObjectStream checks the streaming reader against encoding/json: every
// object encoding/json reads, it reads too, with the same members and
// values, streamed strings included.
func FuzzObjectStream(f *testing.F) {
	for _, seed := range []string{`{}`, `{"a":1}`, `{"s":"a\u0041\n","b":[1,{"c":"}"}]}`, ` {"s" : null } `, `{"s":"\ud83d\ude00"}`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var want map[string]json.RawMessage
		if err := json.Unmarshal([]byte(body), &want); err != nil || want == nil {
			return
		}
		dec := json.NewDecoder(strings.NewReader(body))
		if tok, _ := dec.Token(); tok != json.Delim('{') {
			return
		}
		// Duplicate names: encoding/json keeps the last, the stream sees
		// both; skip those.
		names := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return
			}
			name := tok.(string)
			if names[name] {
				return
			}
			names[name] = true
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return
			}
		}
		stream := map[string]bool{}
		for name, raw := range want {
			// Surrogate escapes and bytes that are not UTF-8 are decoded
			// differently (encoding/json makes them U+FFFD; the stream, which
			// carries base64, passes bytes and decodes each escape alone).
			if len(raw) > 0 && raw[0] == '"' && utf8.Valid(raw) && !bytes.Contains(raw, []byte(`\ud`)) && !bytes.Contains(raw, []byte(`\uD`)) {
				stream[name] = true
			}
		}
		got, err := readMembers(body, stream)
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		for name, raw := range want {
			if stream[name] {
				var s string
				_ = json.Unmarshal(raw, &s)
				if got[name] != s {
					t.Fatalf("%q: streamed %s = %q, want %q", body, name, got[name], s)
				}
				continue
			}
			var a, b any
			if json.Unmarshal([]byte(got[name]), &a) != nil || json.Unmarshal(raw, &b) != nil {
				t.Fatalf("%q: %s = %q, want %s", body, name, got[name], raw)
			}
		}
	})
}
