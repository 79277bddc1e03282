package e2e

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromium finds a Chromium to drive: $MEMWATCH_CHROMIUM, or Debian's
// chromium (apt-get install chromium), or a Chrome on the PATH.
func chromium() string {
	if p := os.Getenv("MEMWATCH_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browser starts a headless Chromium for the test, offline: no
// background connections, a fresh profile.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromium()
	if path == "" {
		t.Skip("no Chromium to drive: apt-get install chromium (or set MEMWATCH_CHROMIUM); make browser installs it as root")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1200, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	ctx, cancelT := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancelT)
	if err := chromedp.Do(ctx); err != nil {
		t.Skipf("Chromium at %s does not start: %v", path, err)
	}
	return ctx
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// screenshot saves the page as name.png in the test's artifact directory
// (go test -artifacts keeps it; make browser does).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	p := filepath.Join(t.ArtifactDir(), name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}

// pageText is the visible text of the page.
func pageText(t *testing.T, ctx context.Context) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// do runs browser steps, each within 20 s; on a failure it says where
// the browser was and what the page showed.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	for i, step := range steps {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := chromedp.Do(sctx, step)
		cancel()
		if err != nil {
			where, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText`))
			t.Fatalf("%s, step %d: %v; the page was %s", what, i+1, err, where)
		}
	}
}

// TestReviewPagesInABrowser drives a real headless Chromium against the
// real daemon's review pages (/ui/ on its token-protected TCP listener),
// with two stores: it signs in, sees both, opens a compaction's diff,
// presses Undo and finds the file restored on disk, searches a word and
// follows a citation, and sees a change made on disk appear without a
// reload. Memory holding markup and terminal escapes renders inert.
// Screenshots of each page go to the test's artifact directory.
func TestReviewPagesInABrowser(t *testing.T) {
	ctx := browser(t)
	dir := t.TempDir()
	notesA, notesB := filepath.Join(dir, "notes", "a"), filepath.Join(dir, "notes", "b")
	facts := filepath.Join(dir, "facts", "f")
	for _, d := range []string{filepath.Join(notesA, "memory"), filepath.Join(notesB, "memory"), filepath.Join(facts, "facts"), filepath.Join(facts, "episodes")} {
		os.MkdirAll(d, 0o755)
	}
	// An agent's memory that holds markup and a terminal escape.
	hostile := "<script>window.pwned=1</script><img src=x onerror=window.pwned=2> \x1b[31mred\x1b[0m"
	big := strings.Replace(string(bigMemory(60, "alpha")), "- runs: 1", "- runs: 1 "+hostile, 1)
	os.WriteFile(filepath.Join(notesA, "memory.md"), []byte(big), 0o644)
	os.WriteFile(filepath.Join(notesB, "memory.md"), []byte("# now\n\n## State\n- small\n\n# History\n"), 0o644)
	os.WriteFile(filepath.Join(facts, "facts", "deploys.md"), []byte("> Summary: how we deploy\n\nThe ledger service deploys on Fridays through the quokka pipeline.\n"), 0o644)
	token, addr, pol := uiPolicy(t, dir, fmt.Sprintf(`  - name: notes
    layout: now-history
    paths: [%q]
    settle: 30ms
    max_size: 2KiB
  - name: facts
    layout: facts-episodes
    paths: [%q]
    settle: 30ms
`, filepath.Join(dir, "notes", "*"), facts))
	p := start(t, "--policy", pol, "--state-dir", filepath.Join(dir, "state"))
	p.waitLog("ready", 20*time.Second)
	p.waitLogWith("rewrote file", map[string]any{"store": "notes", "rule": "compact"}, 20*time.Second)
	base := "http://" + addr + "/ui/"

	// Sign in: the pages ask for a token, then show both stores.
	do(t, ctx, "sign in", uiSignIn(base, token)...)
	text := pageText(t, ctx)
	for _, want := range []string{"notes", "facts", notesA, facts} {
		if !strings.Contains(text, want) {
			t.Errorf("overview: want %q on it:\n%s", want, text)
		}
	}
	screenshot(t, ctx, "overview")

	// The compaction's record: its diff, then Undo.
	do(t, ctx, "open the compaction's record",
		chromedp.Navigate(base+"root?root="+notesA),
		chromedp.WaitVisible(`//a[contains(., "memory.md")]`),
		chromedp.Click(`//tr[contains(., "compact") and contains(., "done")]//a[contains(., "memory.md")]`),
		chromedp.WaitVisible(`table.diff`),
	)
	archive, err := chromedp.Run(ctx, chromedp.Text(`//dt[.="archive"]/following-sibling::dd[1]`))
	if err != nil {
		t.Fatalf("the record's archive: %v", err)
	}
	rows, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("table.diff tr.del").length`))
	if rows == 0 {
		t.Errorf("record page: the diff shows no removed line")
	}
	screenshot(t, ctx, "record")
	// The archive it came from: the whole pre-image, the agent's markup
	// and terminal escape in it shown as text.
	do(t, ctx, "open the archive",
		chromedp.Click(`//dt[.="archive"]/following-sibling::dd[1]/a`),
		chromedp.WaitVisible(`//h1[contains(., "Archive")]`),
	)
	text = pageText(t, ctx)
	if !strings.Contains(text, "<script>window.pwned=1</script>") || !strings.Contains(text, "␛[31mred") {
		t.Errorf("archive page: want the agent's markup and escape shown as text:\n%s", text)
	}
	screenshot(t, ctx, "archive")
	do(t, ctx, "back to the record", chromedp.NavigateBack(), chromedp.WaitVisible(`table.diff`))
	archive = strings.TrimSpace(archive)
	before, err := os.ReadFile(filepath.Join(notesA, archive))
	if err != nil {
		t.Fatalf("the record's archive %q: %v", archive, err)
	}
	do(t, ctx, "undo",
		chromedp.Click(`#undo`),
		chromedp.WaitVisible(`//p[contains(., "Undone")]`),
	)
	if now, _ := os.ReadFile(filepath.Join(notesA, "memory.md")); string(now) != string(before) {
		t.Errorf("after Undo the file is %d bytes, want its archive's %d", len(now), len(before))
	}
	screenshot(t, ctx, "undone")
	pwned, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.pwned !== undefined`))
	if pwned {
		t.Errorf("the agent's markup ran: window.pwned is set")
	}
	// The loop closed: the record says what undid it, offers Redo, not
	// Undo.
	if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#undo").length`)); n != 0 || !strings.Contains(pageText(t, ctx), "Undone by #") {
		t.Errorf("the undone record still offers Undo (%d) or does not say what undid it:\n%s", n, pageText(t, ctx))
	}
	if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#redo").length`)); n != 1 {
		t.Errorf("the undone record offers no Redo")
	}
	// The file's versions: the page lists them, and Restore puts the
	// compaction's version back (journaled, undoable).
	do(t, ctx, "open the versions of memory.md",
		chromedp.Click(`//a[contains(., "versions of memory.md")]`),
		chromedp.WaitVisible(`h1`),
	)
	if !strings.Contains(pageText(t, ctx), "memory.md: versions") {
		t.Fatalf("versions page:\n%s", pageText(t, ctx))
	}
	rows, _ = chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("button.restore").length`))
	if rows < 2 {
		t.Fatalf("versions page: %d versions to restore, want the agent's and memwatch's\n%s", rows, pageText(t, ctx))
	}
	screenshot(t, ctx, "versions")
	do(t, ctx, "restore the compacted version",
		// The oldest of memwatch's: the compaction (the newest is the undo).
		chromedp.Click(`(//tr[contains(., "memwatch")])[last()]//button[contains(., "Restore")]`),
		chromedp.WaitVisible(`//p[contains(., "Restored")]`),
	)
	if now, _ := os.ReadFile(filepath.Join(notesA, "memory.md")); string(now) == string(before) || len(now) >= len(before) {
		t.Errorf("after Restore of the compacted version the file is %d bytes (the pre-image %d)", len(now), len(before))
	}

	// Search a word, follow the citation to the line in context.
	do(t, ctx, "search",
		chromedp.Navigate(base),
		chromedp.SendKeys(`header input[name=q]`, "quokka"),
		chromedp.Submit(`header input[name=q]`),
		chromedp.WaitVisible(`//a[contains(., "deploys.md")]`),
	)
	screenshot(t, ctx, "search")
	do(t, ctx, "follow the citation",
		chromedp.Click(`//a[contains(., "deploys.md")]`),
		chromedp.WaitVisible(`tr.cited`),
	)
	cited, _ := chromedp.Run(ctx, chromedp.Text(`tr.cited`))
	if !strings.Contains(cited, "quokka pipeline") {
		t.Errorf("the cited line: got %q, want the line with the word", cited)
	}
	screenshot(t, ctx, "citation")

	// Live: a change made on disk appears on the open page, which is not
	// reloaded (the marker set on it survives).
	do(t, ctx, "open the overview",
		chromedp.Navigate(base),
		chromedp.WaitVisible(`//h1[contains(., "What memwatch did")]`),
		chromedp.WaitVisible(`//span[@id="live" and .="live"]`),
	)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__notReloaded = true`)); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(notesB, "memory.md"), bigMemory(60, "beta"), 0o644)
	p.waitLogWith("rewrote file", map[string]any{"store": "notes", "root": notesB}, 20*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		row, _ := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`[...document.querySelectorAll("tr")].filter(r => r.innerText.includes(%q)).map(r => r.innerText).join("\n")`, notesB)))
		if strings.Contains(row, "compact") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the overview never showed root b's compaction without a reload; its row: %q", row)
		}
		time.Sleep(100 * time.Millisecond)
	}
	same, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__notReloaded === true`))
	if !same {
		t.Errorf("the page was reloaded: the live update should swap its content in place")
	}
	screenshot(t, ctx, "live")

	// At 360 px the overview still fits the screen.
	do(t, ctx, "the overview at 360 px",
		chromedp.EmulateViewport(360, 800),
		chromedp.Navigate(base),
		chromedp.WaitVisible(`//h1[contains(., "What memwatch did")]`),
	)
	width, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
	if width > 360 {
		t.Errorf("at 360 px the overview is %d px wide", width)
	}
	screenshot(t, ctx, "overview-360px")
	// No word broken in two, on the overview nor a record: a word (no
	// space in it) of a heading, a table's header or a badge lies on one
	// line. (Paths may break: they are no word.)
	for _, page := range []string{base, base + "record/1"} {
		do(t, ctx, "open "+page+" at 360 px", chromedp.Navigate(page), chromedp.WaitVisible(`h1`))
		broken, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`(() => {
			const out = [];
			const walk = document.createTreeWalker(document.querySelector("main"), NodeFilter.SHOW_TEXT);
			for (let n = walk.nextNode(); n; n = walk.nextNode()) {
				const el = n.parentElement;
				if (!el.closest("th, .tag, h2, dt, button, label")) continue;
				const re = /[A-Za-z]{4,}/g;
				let m;
				while ((m = re.exec(n.data))) {
					const r = document.createRange();
					r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
					const tops = new Set([...r.getClientRects()].map(x => Math.round(x.top)));
					if (tops.size > 1) out.push(m[0]);
				}
			}
			return out;
		})()`))
		if err != nil {
			t.Fatal(err)
		}
		if len(broken) > 0 {
			t.Errorf("at 360 px %s breaks words in two: %v", page, broken)
		}
	}
}

// TestReviewPageWeight measures, in the browser, what the overview of 50
// stores transfers and how soon it paints.
func TestReviewPageWeight(t *testing.T) {
	ctx := browser(t)
	dir := t.TempDir()
	var stores strings.Builder
	for i := range 50 {
		root := filepath.Join(dir, fmt.Sprintf("s%02d", i), "a")
		os.MkdirAll(filepath.Join(root, "memory"), 0o755)
		os.WriteFile(filepath.Join(root, "memory.md"), bigMemory(40, fmt.Sprint("s", i)), 0o644)
		fmt.Fprintf(&stores, "  - name: store-%02d\n    layout: now-history\n    paths: [%q]\n    settle: 30ms\n    max_size: 2KiB\n", i, filepath.Dir(root)+"/*")
	}
	token, addr, pol := uiPolicy(t, dir, stores.String())
	p := start(t, "--policy", pol, "--state-dir", filepath.Join(dir, "state"))
	p.waitLog("ready", 30*time.Second)
	p.waitLog("caught up: every root evaluated, its logs captured and indexed", 60*time.Second)
	base := "http://" + addr + "/ui/"
	do(t, ctx, "sign in", uiSignIn(base, token)...)
	do(t, ctx, "open the overview",
		chromedp.Navigate(base),
		chromedp.WaitVisible(`//h1[contains(., "What memwatch did")]`),
	)
	time.Sleep(300 * time.Millisecond) // the paint entries are recorded after the load
	type weight struct {
		Transfer, Body float64
		Paint          float64
		Stores         int
	}
	m, err := chromedp.Run(ctx, chromedp.Evaluate[weight](`(() => {
		const nav = performance.getEntriesByType("navigation")[0];
		let transfer = nav.transferSize, body = nav.decodedBodySize;
		for (const r of performance.getEntriesByType("resource")) { if (!r.name.includes("/events")) { transfer += r.transferSize; body += r.decodedBodySize; } }
		const fcp = performance.getEntriesByType("paint").find(p => p.name === "first-contentful-paint");
		return {Transfer: transfer, Body: body, Paint: fcp ? fcp.startTime : -1, Stores: document.querySelectorAll("section.store").length};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("overview of %d stores: %.0f bytes transferred (%.0f decoded), first contentful paint at %.0f ms", m.Stores, m.Transfer, m.Body, m.Paint)
	if m.Stores != 50 {
		t.Errorf("the overview lists %d stores, want 50", m.Stores)
	}
	if m.Transfer > 200<<10 || m.Transfer <= 0 {
		t.Errorf("the overview transferred %.0f bytes, want at most 200 KiB", m.Transfer)
	}
	screenshot(t, ctx, "overview-50-stores")
}

// TestReviewSearchAtAGlance: the review page's search, in a real
// Chromium: the answer with the query's words in <mark>, its date, the
// turn before it, and an entry written three times shown once, with its
// two copies counted.
func TestReviewSearchAtAGlance(t *testing.T) {
	ctx := browser(t)
	dir := t.TempDir()
	root := filepath.Join(dir, "ws", "billing")
	os.MkdirAll(filepath.Join(root, "sessions"), 0o755)
	os.WriteFile(filepath.Join(root, "sessions", "s1.jsonl"), []byte(
		`{"role":"user","content":"which cluster does billing deploy to?","timestamp":"2026-11-20T10:00:00Z"}`+"\n"+
			`{"role":"assistant","content":"Billing deploys to the eu-west-2 cluster.","timestamp":"2026-11-20T10:01:00Z"}`+"\n"), 0o644)
	entry := "- [2026-11-20] the wombat-queue carries billing events\n"
	os.WriteFile(filepath.Join(root, "NOTES.md"), []byte(strings.Repeat(entry, 3)), 0o644)
	token, addr, pol := uiPolicy(t, dir, fmt.Sprintf("  - name: talk\n    layout: session-detail\n    paths: [%q]\n    settle: 30ms\n", filepath.Join(dir, "ws", "*")))
	// session-detail searches messages.jsonl and detail/: the log and the
	// note go where it looks.
	os.Rename(filepath.Join(root, "sessions", "s1.jsonl"), filepath.Join(root, "messages.jsonl"))
	os.MkdirAll(filepath.Join(root, "working-memory", "detail"), 0o755)
	os.Rename(filepath.Join(root, "NOTES.md"), filepath.Join(root, "working-memory", "detail", "notes.md"))
	p := start(t, "--policy", pol, "--state-dir", filepath.Join(dir, "state"))
	p.waitLog("ready", 20*time.Second)
	base := "http://" + addr + "/ui/"
	do(t, ctx, "sign in", uiSignIn(base, token)...)
	do(t, ctx, "search a question",
		chromedp.Navigate(base+"search?q="+url.QueryEscape("which cluster does billing deploy to?")),
		chromedp.WaitVisible(`.result`),
	)
	type hit struct {
		Marks  []string `json:"marks"`
		Date   string   `json:"date"`
		Before string   `json:"before"`
		Text   string   `json:"text"`
	}
	hits, err := chromedp.Run(ctx, chromedp.Evaluate[[]hit](`[...document.querySelectorAll(".result")].map(r => ({
		marks: [...r.querySelectorAll(".hit mark")].map(m => m.textContent),
		date: (r.querySelector(".date") || {}).textContent || "",
		before: [...r.querySelectorAll(".turn.before")].map(t => t.textContent).join("\n"),
		text: r.querySelector(".hit").textContent}))`))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, h := range hits {
		if strings.Contains(h.Text, "eu-west-2 cluster") {
			found = true
			if !slices.Contains(h.Marks, "cluster") || !slices.Contains(h.Marks, "Billing") || !slices.Contains(h.Marks, "deploys") {
				t.Errorf("the answer's marks: %q", h.Marks)
			}
			if h.Date != "2026-11-20 10:01" {
				t.Errorf("the answer's date: %q", h.Date)
			}
			if !strings.Contains(h.Before, "user:") || !strings.Contains(h.Before, "which cluster does billing deploy to?") {
				t.Errorf("the turn before the answer: %q", h.Before)
			}
		}
	}
	if !found {
		t.Fatalf("the answer is not among the results: %+v", hits)
	}
	screenshot(t, ctx, "search-question")
	do(t, ctx, "search a word said three times",
		chromedp.Navigate(base+"search?q=wombat-queue"),
		chromedp.WaitVisible(`.result`),
	)
	n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll(".result").length`))
	copies, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector(".result .copies summary") || {}).textContent || ""`))
	if n != 1 || !strings.Contains(copies, "2 more copies") {
		t.Errorf("an entry written three times: %d result(s), copies %q; want one, with its 2 copies", n, copies)
	}
	screenshot(t, ctx, "search-copies")
}

// uiPolicy writes a policy with the review pages on a loopback listener
// guarded by an administrator's token, and the stores given (YAML list
// items): the token, the listener's address and the policy's path.
func uiPolicy(t *testing.T, dir, stores string) (token, addr, pol string) {
	t.Helper()
	token = "ui-admin-" + strings.Repeat("t", 32)
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte(token), 0o600)
	addr = freeAddr(t)
	pol = writePolicy(t, dir, fmt.Sprintf("control:\n  tcp: %s\n  token_file: %s\nui:\n  enabled: true\nstores:\n%s", addr, tokenFile, stores))
	return token, addr, pol
}

// uiSignIn signs in to the review pages at base with the token.
func uiSignIn(base, token string) []chromedp.Action[chromedp.Void] {
	return []chromedp.Action[chromedp.Void]{
		chromedp.Navigate(base),
		chromedp.WaitVisible(`input[name=token]`),
		chromedp.SendKeys(`input[name=token]`, token),
		chromedp.Submit(`input[name=token]`),
		chromedp.WaitVisible(`//h1[contains(., "What memwatch did")]`),
	}
}
