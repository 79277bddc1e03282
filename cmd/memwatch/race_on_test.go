//go:build race && !lean

package main

const raceEnabled = true
