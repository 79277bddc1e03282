// Package hostname says what a host of a fleet may be called: one path
// element (its directory under the central node's state, the HOST of a
// HOST:/path citation) of letters, digits, '.', '_' and '-', starting with
// a letter or a digit, at most Max bytes.
//
// It is a loop rather than a regular expression: the expression's bounded
// repetition compiled to 128 copies of its class in every process's start,
// a tenth of memwatchd's page faults before main.
package hostname

// Max is the longest name of a host, in bytes.
const Max = 128

// Valid reports whether s may name a host.
func Valid(s string) bool {
	if len(s) == 0 || len(s) > Max || !alnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
