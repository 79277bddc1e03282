//go:build !linux

package rewrite

// exchange is not available here; the caller falls back to rename and checks
// the displaced file through the descriptor it holds.
func exchange(a, b string) (bool, error) { return false, nil }
