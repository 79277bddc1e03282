package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memwatch/memwatch/cmd/internal/cli"
	"github.com/memwatch/memwatch/policy"
)

func tokenCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Make scoped tokens for the control API's TCP listener",
	}
	var name string
	var stores, owners, rights []string
	newCmd := &cobra.Command{
		Use:   "new --name NAME (--store S | --owner USER)... [--right read|write|undo]...",
		Short: "Make a token: print it once, and the policy entry that holds only its SHA-256",
		Long: `Make a random token for a client of the control API over TCP (an agent's
MCP client, a dashboard) and print it, with the control.tokens entry to add
to the policy. The policy holds the token's SHA-256, never the token: give
the token to the client (Authorization: Bearer TOKEN) and keep no other copy.
The client reaches only the stores it names (--store) or the roots its
owners own (--owner), with only its rights (default: read).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if name == "" {
				return cli.UsageError{Err: fmt.Errorf("--name is required: it names the client in memwatch's log")}
			}
			if len(stores) == 0 && len(owners) == 0 {
				return cli.UsageError{Err: fmt.Errorf("give --store NAME or --owner USER: a token reaches nothing else")}
			}
			for _, r := range rights {
				if r != policy.RightRead && r != policy.RightWrite && r != policy.RightUndo {
					return cli.UsageError{Err: fmt.Errorf("--right %q: want read, write or undo", r)}
				}
			}
			var raw [32]byte
			if _, err := rand.Read(raw[:]); err != nil {
				return err
			}
			token := "mwt_" + base64.RawURLEncoding.EncodeToString(raw[:])
			sum := sha256.Sum256([]byte(token))
			list := func(xs []string) string { return "[" + strings.Join(xs, ", ") + "]" }
			fmt.Fprintf(g.Stdout, "token (give it to the client; it is not stored anywhere):\n  %s\n\n", token)
			fmt.Fprintf(g.Stdout, "add to the policy, under control:\n  tokens:\n    - name: %s\n      sha256: %s\n", name, hex.EncodeToString(sum[:]))
			if len(stores) > 0 {
				fmt.Fprintf(g.Stdout, "      stores: %s\n", list(stores))
			}
			if len(owners) > 0 {
				fmt.Fprintf(g.Stdout, "      owners: %s\n", list(owners))
			}
			fmt.Fprintf(g.Stdout, "      rights: %s\n", list(rights))
			return nil
		},
	}
	newCmd.Flags().StringVar(&name, "name", "", "the client's name, as the log and refusals say it")
	newCmd.Flags().StringSliceVar(&stores, "store", nil, "a store the token reaches (repeatable)")
	newCmd.Flags().StringSliceVar(&owners, "owner", nil, "a user whose roots the token reaches (repeatable)")
	newCmd.Flags().StringSliceVar(&rights, "right", []string{policy.RightRead}, "a right: read, write or undo (repeatable)")
	cmd.AddCommand(newCmd)
	return cmd
}
