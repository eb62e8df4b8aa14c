package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// URLEnv names the environment variable that gives clients the
// aggregator's URL; DefaultURL is used without it.
const (
	URLEnv     = "GRACEWATCH_AGGREGATOR"
	DefaultURL = "http://127.0.0.1:8470"
)

// clientTimeout bounds a client call; a resume or drain waits up to the
// aggregator's control timeout (10 s by default) for the agent.
const clientTimeout = 30 * time.Second

// APIError is an error answer of the aggregator.
type APIError struct {
	Status int    // HTTP status
	Msg    string // the body's "error"
}

func (e *APIError) Error() string {
	return fmt.Sprintf("aggregator: %s (HTTP %d)", e.Msg, e.Status)
}

// Client calls an aggregator's HTTP API. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	token string
	hc    *http.Client
}

// NewClient returns a client of the aggregator at baseURL (http or https).
// token, if not empty, is sent as the bearer token.
func NewClient(baseURL, token string) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("aggregator URL %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("aggregator URL %q: want http://HOST:PORT or https://HOST:PORT", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return &Client{base: u, token: token, hc: &http.Client{Timeout: clientTimeout}}, nil
}

// Nodes returns the nodes, only those in state st if it is not empty.
func (c *Client) Nodes(ctx context.Context, st State) ([]Node, error) {
	var list NodeList
	if err := c.call(ctx, "GET", "/v1/nodes", stateQuery(st, ""), nil, &list); err != nil {
		return nil, err
	}
	return list.Nodes, nil
}

// Hostlist returns the names of the nodes (in state st if not empty) as a
// compressed hostlist.
func (c *Client) Hostlist(ctx context.Context, st State) (string, error) {
	resp, err := c.do(ctx, "GET", "/v1/nodes", stateQuery(st, "hostlist"), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return "", fmt.Errorf("aggregator: reading the hostlist: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Node returns one node with its report detail.
func (c *Client) Node(ctx context.Context, name string) (Node, error) {
	var n Node
	err := c.call(ctx, "GET", "/v1/nodes/"+url.PathEscape(name), nil, nil, &n)
	return n, err
}

// Resume asks the node's agent to clear its DOWN latch.
func (c *Client) Resume(ctx context.Context, node, reason string) (Node, error) {
	return c.action(ctx, node, "resume", reason)
}

// Drain asks the node's agent to latch it DOWN.
func (c *Client) Drain(ctx context.Context, node, reason string) (Node, error) {
	return c.action(ctx, node, "drain", reason)
}

// Forget removes a gone node (its agent dead or departed) from the view of
// every aggregator.
func (c *Client) Forget(ctx context.Context, node, reason string) error {
	var f Forgotten
	return c.call(ctx, "POST", "/v1/nodes/"+url.PathEscape(node)+"/forget", nil, ActionRequest{Reason: reason}, &f)
}

func (c *Client) action(ctx context.Context, node, action, reason string) (Node, error) {
	var n Node
	err := c.call(ctx, "POST", "/v1/nodes/"+url.PathEscape(node)+"/"+action, nil, ActionRequest{Reason: reason}, &n)
	return n, err
}

// Config returns the cluster's time model.
func (c *Client) Config(ctx context.Context) (ClusterConfig, error) {
	var cc ClusterConfig
	err := c.call(ctx, "GET", "/v1/config", nil, nil, &cc)
	return cc, err
}

// Reservations returns the scheduler's reservations the aggregator keeps
// (GET /v1/reservations).
func (c *Client) Reservations(ctx context.Context) (ReservationList, error) {
	var rl ReservationList
	err := c.call(ctx, "GET", "/v1/reservations", nil, nil, &rl)
	return rl, err
}

// Incidents returns the incidents and the blast-radius limit (GET
// /v1/incidents).
func (c *Client) Incidents(ctx context.Context) (IncidentList, error) {
	var il IncidentList
	err := c.call(ctx, "GET", "/v1/incidents", nil, nil, &il)
	return il, err
}

// ConfirmIncident lets the drains of incident id's nodes now through the
// blast-radius limit and, if d is not 0, those of every node of the
// incident for d (POST /v1/incidents/{id}/confirm, admin token).
func (c *Client) ConfirmIncident(ctx context.Context, id uint64, reason string, d time.Duration) (IncidentConfirmation, error) {
	var ic IncidentConfirmation
	err := c.call(ctx, "POST", "/v1/incidents/"+strconv.FormatUint(id, 10)+"/confirm", nil,
		IncidentConfirmRequest{Reason: reason, For: d.Seconds()}, &ic)
	return ic, err
}

func stateQuery(st State, format string) url.Values {
	q := url.Values{}
	if st != "" {
		q.Set("state", string(st))
	}
	if format != "" {
		q.Set("format", format)
	}
	return q
}

func (c *Client) call(ctx context.Context, method, path string, q url.Values, body, out any) error {
	resp, err := c.do(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(out); err != nil {
		return fmt.Errorf("aggregator: decoding the answer to %s %s: %w", method, path, err)
	}
	return nil
}

// do sends a request and returns a 2xx response; other answers become an
// *APIError.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body any) (*http.Response, error) {
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("aggregator at %s: %w", c.base.Host, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var eb ErrorBody
	if json.Unmarshal(b, &eb) != nil || eb.Error == "" {
		eb.Error = strings.TrimSpace(string(b))
		if eb.Error == "" {
			eb.Error = http.StatusText(resp.StatusCode)
		}
	}
	return nil, &APIError{Status: resp.StatusCode, Msg: eb.Error}
}

// RegisterJob asks the aggregator to register a job on its nodes (POST
// /v1/jobs, admin token). A node that did not register it is in the
// result, not an error.
func (c *Client) RegisterJob(ctx context.Context, req JobRequest) (JobResult, error) {
	var res JobResult
	err := c.call(ctx, http.MethodPost, "/v1/jobs", nil, req, &res)
	return res, err
}
