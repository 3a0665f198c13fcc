package link

// A module's reply carries a document of tens of kilobytes that the relay
// passes on as it is. Reading such a reply once with encoding/json to
// check it and find its `type` and `requestId`, once more to measure its
// nesting, and once more to split it into fields took most of the time
// the relay adds to a linked call; scanJSON does all three in one pass
// over the bytes, without decoding or copying any value.

// member is one top-level member of a JSON object: its key (empty when
// the key holds escapes: no field the relay reads has one) and its value,
// a slice of the scanned text.
type member struct {
	key   string
	value []byte
}

// stringStop marks the bytes that end a run of plain characters in a
// JSON string: the closing quote, a backslash, and the control
// characters, which a string must not hold unescaped.
var stringStop = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// scanJSON checks that b is one JSON value, as json.Valid does, and
// returns how deep it nests objects and arrays (the outermost value
// counting as the first level). When the value is an object, visit is
// called with each of its top-level members in order, until it returns
// false; scanJSON then stops and reports the text valid so far, so that a
// caller looking for one member need not read the rest. visit may be nil.
func scanJSON(b []byte, visit func(m member) bool) (depth int, ok bool) {
	var (
		i      int
		stack  []byte // the open containers, '{' or '['
		key    string // the top-level member's key being read
		start  int    // where its value begins
		inTop  bool   // the outermost value is an object
		expect = true // a value comes next (else a separator or an end)
	)
	for {
		i = skipSpace(b, i)
		if expect {
			if i >= len(b) {
				return depth, false
			}
			switch c := b[i]; {
			case c == '{' || c == '[':
				if len(stack) == 0 && c == '{' {
					inTop = true
				}
				stack = append(stack, c)
				depth = max(depth, len(stack))
				i++
				i = skipSpace(b, i)
				if i < len(b) && (b[i] == '}' && c == '{' || b[i] == ']' && c == '[') {
					// An empty container is a complete value.
					i++
					stack = stack[:len(stack)-1]
					expect = false
					break
				}
				if c == '{' && !readMemberKey(b, &i, len(stack) == 1, &key, &start) {
					return depth, false
				}
				continue
			case c == '"':
				end, _, ok := scanString(b, i+1)
				if !ok {
					return depth, false
				}
				i = end
			case c == 't', c == 'f', c == 'n':
				lit := literalOf(c)
				if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
					return depth, false
				}
				i += len(lit)
			default:
				end, ok := scanNumber(b, i)
				if !ok {
					return depth, false
				}
				i = end
			}
			expect = false
		}
		// A value ended at i: a top-level member is complete when only the
		// outermost object is open.
		if inTop && len(stack) == 1 && visit != nil && !visit(member{key: key, value: b[start:i:i]}) {
			return depth, true
		}
		i = skipSpace(b, i)
		if len(stack) == 0 {
			return depth, i == len(b)
		}
		if i >= len(b) {
			return depth, false
		}
		open := stack[len(stack)-1]
		switch c := b[i]; {
		case c == ',':
			i++
			if open == '{' && !readMemberKey(b, &i, len(stack) == 1, &key, &start) {
				return depth, false
			}
			expect = true
		case c == '}' && open == '{', c == ']' && open == '[':
			i++
			stack = stack[:len(stack)-1]
		default:
			return depth, false
		}
	}
}

// readMemberKey reads an object member's key and colon from *i; for a
// member of the outermost object (top) it records the key and where the
// value starts.
func readMemberKey(b []byte, i *int, top bool, key *string, start *int) bool {
	k, ok := scanKey(b, i, top)
	if ok && top {
		*key, *start = k, *i
	}
	return ok
}

// scanKey reads an object member's key and its colon from *i, leaving *i
// at the value; it returns the key when keep is set and the key holds no
// escapes.
func scanKey(b []byte, i *int, keep bool) (string, bool) {
	j := skipSpace(b, *i)
	if j >= len(b) || b[j] != '"' {
		return "", false
	}
	end, escaped, ok := scanString(b, j+1)
	if !ok {
		return "", false
	}
	var key string
	if keep && !escaped {
		key = string(b[j+1 : end-1])
	}
	j = skipSpace(b, end)
	if j >= len(b) || b[j] != ':' {
		return "", false
	}
	*i = skipSpace(b, j+1)
	return key, true
}

// skipSpace returns the offset of the first byte from i on that is not
// JSON white space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

// scanString reads a string whose opening quote is before i and returns
// the offset just past its closing quote, and whether it holds escapes.
func scanString(b []byte, i int) (end int, escaped, ok bool) {
	for {
		for i < len(b) && !stringStop[b[i]] {
			i++
		}
		if i >= len(b) || b[i] < 0x20 {
			return i, escaped, false
		}
		if b[i] == '"' {
			return i + 1, escaped, true
		}
		// A backslash: one of the short escapes, or \u and four hex digits.
		escaped = true
		if i+1 >= len(b) {
			return i, escaped, false
		}
		switch b[i+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i += 2
		case 'u':
			if len(b)-i < 6 {
				return i, escaped, false
			}
			for _, h := range b[i+2 : i+6] {
				if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
					return i, escaped, false
				}
			}
			i += 6
		default:
			return i, escaped, false
		}
	}
}

// literalOf returns the literal a value starting with c must be.
func literalOf(c byte) string {
	switch c {
	case 't':
		return "true"
	case 'f':
		return "false"
	}
	return "null"
}

// scanNumber reads a number starting at i and returns the offset past it:
// an optional minus, an integer without leading zeros, an optional
// fraction and an optional exponent.
func scanNumber(b []byte, i int) (int, bool) {
	digits := func() int {
		n := 0
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return i, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return i, false
		}
	}
	return i, true
}

// hasMember reports whether doc, a JSON text already known to be valid,
// is an object with a top-level member named key (written without
// escapes). It does not check the text again: it only tells strings from
// structure, and skips each string's run of plain characters at once.
func hasMember(doc []byte, key string) bool {
	i := skipSpace(doc, 0)
	if i >= len(doc) || doc[i] != '{' {
		return false
	}
	depth, wantKey := 0, true
	for i++; i < len(doc); i++ {
		switch doc[i] {
		case '"':
			end, _, ok := scanString(doc, i+1)
			if !ok {
				return false
			}
			if depth == 0 && wantKey && string(doc[i+1:end-1]) == key {
				return true
			}
			wantKey = false
			i = end - 1
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth < 0 {
				return false
			}
		case ',':
			wantKey = wantKey || depth == 0
		}
	}
	return false
}
