//go:build !gendocs

package main

import "github.com/spf13/cobra"

// packagingCmds are the commands only packaging needs: none in the
// memwatch people run (gendocs.go says why).
func packagingCmds(*globals) []*cobra.Command { return nil }
