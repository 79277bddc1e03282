// Package compact shrinks and summarizes memory: an OpenAI-compatible LLM
// client with budgets and retries, output guards that reject destructive
// results, a three-tier JSON parser for endpoints that ignore response
// formats, and helpers the layouts' offline heuristic compactors share.
package compact

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/memwatch/memwatch/jobs"
	"github.com/memwatch/memwatch/policy"
	"github.com/memwatch/memwatch/secrets"
	"github.com/memwatch/memwatch/state"
)

// ErrBudget means the endpoint's daily token budget is used up.
var ErrBudget = errors.New("daily token budget exhausted")

// Client calls one named OpenAI-compatible endpoint.
type Client struct {
	ep    *policy.Endpoint
	api   *openai.Client
	db    *state.DB
	log   *slog.Logger
	sem   chan struct{}
	Now   func() time.Time
	doer  *retryDoer
	OnUse func(endpoint string, tokens int64) // metrics hook
	// OnFail is called with each failure's cause (Cause): a metric.
	OnFail func(endpoint, cause string)
	fails  failures
}

// NewClient builds a client for ep. The API key is read from the
// environment variable or file the policy names; it is never logged.
func NewClient(ep *policy.Endpoint, db *state.DB, log *slog.Logger) (*Client, error) {
	key, err := apiKey(ep)
	if err != nil {
		return nil, err
	}
	cfg := openai.DefaultConfig(key)
	cfg.BaseURL = strings.TrimRight(ep.BaseURL, "/")
	// No redirects: the request carries the API key and the memory text,
	// and a redirect would send both to another address.
	noRedirect := func(req *http.Request, via []*http.Request) error {
		return fmt.Errorf("llm endpoint %s answered with a redirect to %s; memwatch does not follow redirects (the API key and the memory text would go there): set base_url to the final address", ep.Name, req.URL.Redacted())
	}
	doer := &retryDoer{http: &http.Client{CheckRedirect: noRedirect}, headers: ep.Headers, timeout: ep.Timeout, attempts: 4, base: time.Second, log: log, endpoint: ep.Name}
	cfg.HTTPClient = doer
	return &Client{ep: ep, api: openai.NewClientWithConfig(cfg), db: db, log: log,
		sem: make(chan struct{}, max(ep.MaxConcurrency, 1)), Now: time.Now, doer: doer}, nil
}

func apiKey(ep *policy.Endpoint) (string, error) {
	switch {
	case ep.APIKeyEnv != "":
		k := os.Getenv(ep.APIKeyEnv)
		if k == "" {
			return "", fmt.Errorf("llm endpoint %s: environment variable %s is empty or unset", ep.Name, ep.APIKeyEnv)
		}
		return k, nil
	case ep.APIKeyFile != "":
		return policy.ReadSecret(ep.APIKeyFile, "llm endpoint "+ep.Name+": api_key_file")
	}
	return "", nil // local endpoints (Ollama, llama.cpp) need no key
}

// Name is the endpoint's name in the policy.
func (c *Client) Name() string { return c.ep.Name }

// Timeout is the endpoint's timeout for one call (memory-history's consolidation timeout).
func (c *Client) Timeout() time.Duration { return c.ep.Timeout }

// MaxInputTokens is the endpoint's input budget per call.
func (c *Client) MaxInputTokens() int { return c.ep.MaxInputTokens }

// Prompt is one chat completion request.
type Prompt struct {
	System string
	User   string
	JSON   bool // ask for response_format json_object
	// Told, when set, holds the credentials masked in what the prompt was
	// made from: the same values are masked in the answer too.
	Told *secrets.Values
}

// Reply is the model's answer.
type Reply struct {
	Text   string
	Tokens int64 // total tokens the endpoint reported
}

// EstimateTokens is the rough rule used for budgets and input limits: one
// token per 3 bytes, rounded up. It over-estimates for English (about 4
// bytes a token) and roughly matches CJK text (3 bytes a character), which
// keeps the budget on the safe side without a tokenizer.
func EstimateTokens(s string) int { return EstimateTokensOf(len(s)) }

// EstimateTokensOf is EstimateTokens for a text of n bytes.
func EstimateTokensOf(n int) int { return (n + 2) / 3 }

// Day is the budget day of t (local time).
func Day(t time.Time) string { return t.Format("2006-01-02") }

// Used returns today's token use.
func (c *Client) Used(ctx context.Context) (int64, error) {
	return c.db.Tokens(ctx, c.ep.Name, Day(c.Now()))
}

// Budget returns the daily budget.
func (c *Client) Budget() int64 { return c.ep.DailyTokenBudget }

// Complete sends one prompt. It refuses with ErrBudget, before any call,
// when today's use plus this call's estimate would pass the budget, and it
// records the tokens the endpoint reports.
//
// A failure is logged at WARN with its cause when it starts a burst (then
// counted, see failures.go), and passed to OnFail.
//
// No credential goes to the endpoint, and none comes back: the prompt's
// are masked before it is sent ([REDACTED:kind]), and so are any in the
// answer, found by the rules or as one of the values masked in the prompt
// (a model that repeats what it was told, a password without its URL),
// so what memwatch writes from it never holds one.
func (c *Client) Complete(ctx context.Context, p Prompt) (Reply, error) {
	told := p.Told
	if told == nil {
		told = &secrets.Values{}
	}
	p.System, p.User = told.Mask(p.System), told.Mask(p.User)
	r, err := c.complete(ctx, p)
	r.Text = told.Mask(r.Text)
	switch {
	case err == nil:
		c.fails.answered(c.log, c.ep.Name)
	case errors.Is(err, context.Canceled):
		// memwatch is stopping: not the endpoint's failure.
	default:
		cause := c.fails.failed(c.log, c.ep.Name, c.ep.BaseURL, err, c.Now())
		if c.OnFail != nil {
			c.OnFail(c.ep.Name, cause)
		}
	}
	return r, err
}

func (c *Client) complete(ctx context.Context, p Prompt) (Reply, error) {
	in := EstimateTokens(p.System) + EstimateTokens(p.User)
	if in > c.ep.MaxInputTokens {
		return Reply{}, fmt.Errorf("prompt of ~%d tokens exceeds max_input_tokens %d of endpoint %s", in, c.ep.MaxInputTokens, c.ep.Name)
	}
	out := c.ep.MaxOutputTokens
	if out == 0 {
		out = max(in/2, 512) // a compaction answer is rarely longer than half its input
	}
	used, err := c.Used(ctx)
	if err != nil {
		return Reply{}, err
	}
	if used+int64(in+out) > c.ep.DailyTokenBudget {
		return Reply{}, fmt.Errorf("endpoint %s: %w (%d of %d used today, this call needs ~%d)", c.ep.Name, ErrBudget, used, c.ep.DailyTokenBudget, in+out)
	}
	select {
	case c.sem <- struct{}{}:
		defer func() { <-c.sem }()
	case <-ctx.Done():
		return Reply{}, ctx.Err()
	}
	req := openai.ChatCompletionRequest{
		Model:       c.ep.Model,
		Temperature: float32(c.ep.Temperature),
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: p.System},
			{Role: openai.ChatMessageRoleUser, Content: p.User},
		},
	}
	// Always bound the output, so a call can never use more than the
	// budget check allowed for. max_tokens, not max_completion_tokens:
	// Ollama, llama.cpp and most other compatible servers only know it.
	//lint:ignore SA1019 deliberately the widely supported field
	req.MaxTokens = out
	if p.JSON {
		req.ResponseFormat = &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONObject}
	}
	resp, err := c.api.CreateChatCompletion(ctx, req)
	if err != nil {
		return Reply{}, fmt.Errorf("llm endpoint %s: %w", c.ep.Name, err)
	}
	tokens := int64(resp.Usage.TotalTokens)
	if tokens == 0 {
		// Some servers omit usage; count our estimate so the budget still binds.
		tokens = int64(in)
		for _, ch := range resp.Choices {
			tokens += int64(EstimateTokens(ch.Message.Content))
		}
	}
	if _, err := c.db.AddTokens(context.WithoutCancel(ctx), c.ep.Name, Day(c.Now()), tokens); err != nil {
		return Reply{}, err
	}
	if c.OnUse != nil {
		c.OnUse(c.ep.Name, tokens)
	}
	if len(resp.Choices) == 0 {
		return Reply{Tokens: tokens}, fmt.Errorf("llm endpoint %s: response has no choices", c.ep.Name)
	}
	ch := resp.Choices[0]
	if ch.FinishReason == openai.FinishReasonLength {
		return Reply{Text: ch.Message.Content, Tokens: tokens}, fmt.Errorf("llm endpoint %s: output truncated at max_output_tokens", c.ep.Name)
	}
	return Reply{Text: ch.Message.Content, Tokens: tokens}, nil
}

// retryDoer sends requests with a per-attempt timeout and retries 429, 5xx
// and timeouts with exponential backoff that honours Retry-After.
type retryDoer struct {
	http     *http.Client
	headers  map[string]string
	timeout  time.Duration
	attempts int
	base     time.Duration
	log      *slog.Logger
	endpoint string
}

func (d *retryDoer) Do(req *http.Request) (*http.Response, error) {
	parent := req.Context()
	var lastErr error
	for attempt := 0; attempt < d.attempts; attempt++ {
		if attempt > 0 {
			if req.GetBody != nil {
				body, err := req.GetBody()
				if err != nil {
					return nil, err
				}
				req.Body = body
			}
		}
		ctx, cancel := context.WithTimeout(parent, d.timeout)
		r := req.Clone(ctx)
		for k, v := range d.headers {
			r.Header.Set(k, v)
		}
		resp, err := d.http.Do(r)
		var wait time.Duration
		hasWait := false
		switch {
		case err != nil:
			cancel()
			if parent.Err() != nil {
				return nil, parent.Err()
			}
			if !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
				return nil, err
			}
			lastErr = fmt.Errorf("no answer within %v", d.timeout)
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
			wait, hasWait = retryAfter(resp.Header.Get("Retry-After"))
			lastErr = fmt.Errorf("HTTP %d", resp.StatusCode)
			if attempt == d.attempts-1 {
				// Hand the final answer to the client so it reports the API error.
				resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
				return resp, nil
			}
			resp.Body.Close()
			cancel()
		default:
			resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
			return resp, nil
		}
		if attempt == d.attempts-1 {
			break
		}
		if !hasWait {
			wait = jobs.Backoff(d.base, 2*time.Minute, attempt)
		}
		wait = min(wait, 2*time.Minute)
		d.log.Warn("llm call failed; retrying", "endpoint", d.endpoint, "attempt", attempt+1, "err", lastErr, "retry_in", wait)
		select {
		case <-time.After(wait):
		case <-parent.Done():
			return nil, parent.Err()
		}
	}
	return nil, fmt.Errorf("after %d attempts: %w", d.attempts, lastErr)
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// retryAfter parses a Retry-After header (seconds or an HTTP date).
func retryAfter(h string) (time.Duration, bool) {
	if h == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(strings.TrimSpace(h)); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(time.Until(t), 0), true
	}
	return 0, false
}
