// Package control is what the client commands share with the daemon
// without linking it: where a running daemon announces itself
// (Discover), who answers on its socket (PeerUID), and the answers of the
// requests a lean client makes (recall, show). The daemon package
// implements the socket; memwatch's lean binary (recall, show) talks to it
// with this alone.
package control

import (
	"github.com/memwatch/memwatch/recall"
	"github.com/memwatch/memwatch/spool"
)

// RecallResponse answers GET /v1/recall.
type RecallResponse struct {
	Results []recall.Result `json:"results"`
	// Roots is how many roots were searched; Skipped how many the caller
	// reaches beyond MaxRecallRoots.
	Roots   int          `json:"roots"`
	Skipped int          `json:"skipped,omitempty"`
	Stats   recall.Stats `json:"stats"`
}

// ShowResponse answers GET /v1/show.
type ShowResponse struct {
	Root  string        `json:"root"`
	Path  string        `json:"path"`
	Lines []spool.Shown `json:"lines"`
}
