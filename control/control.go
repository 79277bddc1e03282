// Package control is what the client commands share with the daemon
// without linking it: where a running daemon announces itself
// (Discover), who answers on its socket (PeerUID), and the requests and
// answers a client exchanges with it (recall, show, the journal, and
// how memwatch log prints it). The daemon package implements the
// socket; memwatch's lean binary talks to it with this alone, so it
// imports nothing of memwatch but this package.
package control

import "time"

// Result is one recall hit, with session-detail's SearchResult fields (recall
// finds them; recall.Result is this type).
type Result struct {
	Source     string `json:"source"`              // detail | messages | ...
	FilePath   string `json:"file_path,omitempty"` // the file, as cited
	LineNumber int64  `json:"line_number"`
	Text       string `json:"text"`
	Citation   string `json:"citation"`
	Session    string `json:"session,omitempty"` // with several roots: the root's name
	Root       string `json:"root,omitempty"`    // with several roots: the root
	Store      string `json:"store,omitempty"`   // with several roots: its store
	Host       string `json:"host,omitempty"`    // on a central node: the host the root is on
	// Project is the short name of the root the result is in (the
	// project an agent's root stands for: "src-billing" for Claude Code's
	// ~/.claude/projects/-home-alice-src-billing).
	Project string `json:"project,omitempty"`
	// Time is when it was said: the message's own timestamp, else the
	// time of the file's version it was found in.
	Time time.Time `json:"time,omitzero"`
	// Moved says the file is one memwatch moved memory into ("moved":
	// facts a compression took out of MEMORY.md; "archived": a file's
	// earlier version or a compressed archive): not what the agent loads.
	Moved string `json:"moved,omitempty"`
	// Folded cites the copies of this text left out of the results (a
	// mirror's line, the same message said again), the first of them;
	// Copies counts them all.
	Folded []string `json:"folded,omitempty"`
	Copies int      `json:"copies,omitempty"`
	// Before and After are the turns (or lines) around it, when asked
	// (recall -C N).
	Before []Turn `json:"before,omitempty"`
	After  []Turn `json:"after,omitempty"`
	// Score and Why say how a ranked result ranked (Options.Explain).
	Score float64 `json:"score,omitempty"`
	Why   string  `json:"why,omitempty"`
	// Passage numbers the passage the result is shown in (Passages):
	// results of one file whose turns touch share it.
	Passage int `json:"passage,omitempty"`
}

// Turn is a message (or a note's line) around a result.
type Turn struct {
	Line int64     `json:"line"`
	Role string    `json:"role,omitempty"`
	Text string    `json:"text"`
	Time time.Time `json:"time,omitzero"`
}

// Stats says how a search was answered (memwatch recall --explain).
type Stats struct {
	Files        int           // files searched
	Indexed      int           // of which through the index
	Blocks       int           // index blocks in those files
	BlocksRead   int           // index blocks read (could match)
	BytesRead    int64         // bytes read from files
	Duration     time.Duration // wall time
	StoppedEarly bool          // the limit was reached before every file was read
	// Unread counts the files a search left out because they could not be
	// read (the kernel refused the caller, a FIFO, over the size bound),
	// and Why says why the first was: one such file never ends a search.
	Unread int    `json:",omitempty"`
	Why    string `json:",omitempty"`
	// More counts the lines holding a word or phrase that the limit left
	// out (at most Options.More of them: MoreCapped says there are more).
	More       int  `json:",omitempty"`
	MoreCapped bool `json:",omitempty"`
}

// RecallResponse answers GET /v1/recall.
type RecallResponse struct {
	Results []Result `json:"results"`
	// Roots is how many roots were searched; Skipped how many the caller
	// reaches beyond answer.MaxRoots.
	Roots   int   `json:"roots"`
	Skipped int   `json:"skipped,omitempty"`
	Stats   Stats `json:"stats"`
	// Searched says what was searched, when the request did not name it
	// (the root or project of the caller's directory, or every root).
	Searched string `json:"searched,omitempty"`
	// Next, when more results may follow this answer (it holds the
	// request's limit, or was cut at MaxAnswer bytes), is the offset that
	// asks for them; 0: there are no more.
	Next int `json:"next,omitempty"`
	// Daemon is set by the client when the daemon answered.
	Daemon bool `json:"-"`
}

// Shown is one line of a citation: from the live file or the spool.
type Shown struct {
	Line   int64
	Data   []byte
	Source string // "live", "spool", "pruned", "missing", "version" or "omitted" (past the bound of one answer)
	// Text is the line as a person reads it: a log's message as
	// "role: text", a note's line as written ("" with no Data).
	Text string `json:",omitempty"`
}

// SecretsResponse answers GET /v1/secrets: memwatch secrets as the daemon
// reads it for a caller who cannot read memwatch's state (a daemon run
// by root): the credentials in the files and the spool's lines of the
// roots the caller reaches, newest first.
type SecretsResponse struct {
	Findings []SecretFinding `json:"findings"`
	// More counts the findings past MaxSecretFindings, left out.
	More int `json:"more,omitempty"`
}

// MaxSecretFindings bounds the findings of one answer.
const MaxSecretFindings = 10000

// ShowResponse answers GET /v1/show.
type ShowResponse struct {
	Root  string  `json:"root"`
	Path  string  `json:"path"`
	Lines []Shown `json:"lines"`
}

// From says where shown lines came from.
func From(lines []Shown) string {
	var live, spool bool
	for _, l := range lines {
		switch l.Source {
		case "live":
			live = true
		case "spool", "pruned":
			spool = true
		case "version":
			return "the newest version replicated"
		}
	}
	switch {
	case live && spool:
		return "the live file and the spool: the agent has rewritten the file since"
	case spool:
		return "the spool: the agent has rewritten the file since"
	}
	return "the live file"
}
