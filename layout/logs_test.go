package layout

import (
	"fmt"
	"testing"

	"github.com/memwatch/memwatch/session"
)

func TestActiveBranch(t *testing.T) {
	m := func(role, id, parent string) Message {
		return Message{Message: session.Message{Role: role, ID: id, Parent: parent, Text: id}}
	}
	result := func(id, parent string) Message {
		return Message{Message: session.Message{Role: "user", ID: id, Parent: parent, Text: "[tool result] ok"}}
	}
	ids := func(ms []Message) string {
		var s []string
		for _, x := range ms {
			s = append(s, x.ID)
		}
		return fmt.Sprint(s)
	}
	for _, tt := range []struct {
		name    string
		in      []Message
		want    string
		dropped int
	}{
		{"linear", []Message{m("user", "a", ""), m("assistant", "b", "a"), m("user", "c", "b"), m("assistant", "d", "c")}, "[a b c d]", 0},
		{"a rewind to the root", []Message{m("user", "a", "r"), m("assistant", "b", "a"), m("user", "c", "r"), m("assistant", "d", "c")}, "[c d]", 2},
		{"a rewind mid-way", []Message{m("user", "a", ""), m("assistant", "b", "a"), m("user", "c", "b"), m("assistant", "d", "c"), m("user", "e", "b"), m("assistant", "f", "e")}, "[a b e f]", 2},
		{"no tree", []Message{m("user", "", ""), m("assistant", "", ""), m("user", "", "")}, "[  ]", 0},
		{"tool results share no user parent", []Message{m("user", "a", ""), m("assistant", "b", "a"), m("tool", "c", "b"), m("tool", "d", "b")}, "[a b c d]", 0},
		{"claude tool results are user lines", []Message{m("user", "a", ""), m("assistant", "b", "a"), result("c", "b"), result("d", "b")}, "[a b c d]", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, n := ActiveBranch(tt.in)
			if ids(got) != tt.want || n != tt.dropped {
				t.Errorf("got %s (%d left out), want %s (%d)", ids(got), n, tt.want, tt.dropped)
			}
		})
	}
}
