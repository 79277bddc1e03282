//go:build !lean

package main

// delegate: the full binary runs every command itself.
func delegate([]string) (int, bool) { return 0, false }

// runFull is never asked of the full binary.
func runFull([]string) int { return exitFailure }
