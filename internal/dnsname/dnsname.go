// Package dnsname holds helpers on presentation-format domain names that
// both plugins use.
package dnsname

// Lower returns s with ASCII letters lower-cased, s itself (no
// allocation) when it is lower-case already.
func Lower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if c := b[j]; 'A' <= c && c <= 'Z' {
					b[j] = c + 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}
