//go:build !linux

package main

import "os/exec"

// dieWithUs: no parent-death signal here; fail leaves what it started.
func dieWithUs(cmd *exec.Cmd) *exec.Cmd { return cmd }
