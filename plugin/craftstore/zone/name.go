package zone

// Name helpers on presentation-format names. They work on bytes so that a
// lookup lower-cases the query name into a stack buffer and indexes the map
// with string(b[i:]), which the compiler does without allocating.

// appendLower appends s lower-cased (ASCII) to dst.
func appendLower(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// equalFold reports whether a and b are equal under ASCII case folding.
func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		ca, cb := a[i], b[i]
		if ca == cb {
			continue
		}
		if 'A' <= ca && ca <= 'Z' {
			ca += 'a' - 'A'
		}
		if 'A' <= cb && cb <= 'Z' {
			cb += 'a' - 'A'
		}
		if ca != cb {
			return false
		}
	}
	return true
}

// nextLabel returns the offset of the label after the one starting at off,
// skipping escaped dots ("\." and "\046").
func nextLabel(name []byte, off int) int {
	for i := off; i < len(name); i++ {
		switch name[i] {
		case '\\':
			i++
		case '.':
			return i + 1
		}
	}
	return len(name)
}

// parentKey returns the name one label up from key, a substring sharing
// key's memory.
func parentKey(key string) string {
	for i := 0; i < len(key); i++ {
		switch key[i] {
		case '\\':
			i++
		case '.':
			if i+1 == len(key) {
				return "." // a child of the root
			}
			return key[i+1:]
		}
	}
	return ""
}

// isWildcard reports whether the first label of key is "*".
func isWildcard(key string) bool { return len(key) >= 2 && key[0] == '*' && key[1] == '.' }
