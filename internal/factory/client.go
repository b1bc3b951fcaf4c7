// Package factory is a client of the Talos Image Factory HTTP API
// (https://factory.talos.dev): the Talos versions it serves, schematics and
// the official extensions of a version. It links no Talos library, so the
// bot process may use it.
//
// The endpoints and their replies follow image-factory's
// internal/frontend/http (meta.go: /versions and
// /version/{v}/extensions/official; configuration.go: /schematics).
package factory

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultURL is the public Image Factory.
const DefaultURL = "https://factory.talos.dev"

// maxBody bounds what the client reads from one reply: the version list and
// an extension list are a few tens of KiB.
const maxBody = 4 << 20

// ErrNotFound matches a 404 from the factory (an unknown schematic or
// version).
var ErrNotFound = errors.New("not found")

// StatusError is a reply other than the one the endpoint documents.
type StatusError struct {
	Method, URL string
	Code        int
	// Body is the start of the reply, which for the factory is a one-line
	// reason ("schematic not found").
	Body string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("image factory %s %s: HTTP %d: %s", e.Method, e.URL, e.Code, e.Body)
}

// Is makes a 404 match ErrNotFound.
func (e *StatusError) Is(target error) bool {
	return target == ErrNotFound && e.Code == http.StatusNotFound
}

// Client talks to one Image Factory.
type Client struct {
	base *url.URL
	http *http.Client
}

// New returns a client for the factory at baseURL (DefaultURL when empty).
// hc nil uses a client with a 30 s timeout: a hung factory must not hold a
// release check forever.
func New(baseURL string, hc *http.Client) (*Client, error) {
	if baseURL == "" {
		baseURL = DefaultURL
	}
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("image factory URL %q is not http(s)://host[/path]", baseURL)
	}
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	return &Client{base: u, http: hc}, nil
}

// BaseURL is the factory's address.
func (c *Client) BaseURL() string { return c.base.String() }

// Versions lists the Talos versions the factory serves, in its order
// (ascending). The list may end with pre-releases of the newest minor
// (v1.14.0-beta.0): callers that roll only releases filter them.
func (c *Client) Versions(ctx context.Context) ([]string, error) {
	var out []string
	if err := c.getJSON(ctx, "/versions", &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Extension is one official system extension of a Talos version.
type Extension struct {
	Name        string `json:"name"`
	Ref         string `json:"ref"`
	Digest      string `json:"digest"`
	Author      string `json:"author"`
	Description string `json:"description"`
}

// OfficialExtensions lists the official extensions built for version
// (ErrNotFound when the factory does not serve that version).
func (c *Client) OfficialExtensions(ctx context.Context, version string) ([]Extension, error) {
	var out []Extension
	if err := c.getJSON(ctx, "/version/"+url.PathEscape(version)+"/extensions/official", &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Schematic fetches a schematic by id (ErrNotFound when the factory does
// not know it).
func (c *Client) Schematic(ctx context.Context, id string) (*Schematic, error) {
	body, err := c.do(ctx, http.MethodGet, "/schematics/"+url.PathEscape(id), nil, http.StatusOK)
	if err != nil {
		return nil, err
	}
	s, err := ParseSchematic(body)
	if err != nil {
		return nil, fmt.Errorf("image factory schematic %s: %w", id, err)
	}
	return s, nil
}

// CreateSchematic registers s and returns the id the factory gave it
// (creating an existing schematic returns its id again).
func (c *Client) CreateSchematic(ctx context.Context, s *Schematic) (string, error) {
	doc, err := s.Marshal()
	if err != nil {
		return "", err
	}
	body, err := c.do(ctx, http.MethodPost, "/schematics", doc, http.StatusCreated)
	if err != nil {
		return "", err
	}
	var resp struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &resp); err != nil || resp.ID == "" {
		return "", fmt.Errorf("image factory POST /schematics: reply is not {\"id\": …}: %.200q", body)
	}
	return resp.ID, nil
}

func (c *Client) getJSON(ctx context.Context, path string, v any) error {
	body, err := c.do(ctx, http.MethodGet, path, nil, http.StatusOK)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("image factory GET %s: the reply is not the expected JSON: %w", path, err)
	}
	return nil
}

func (c *Client) do(ctx context.Context, method, path string, body []byte, want int) ([]byte, error) {
	u := c.base.String() + path
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("image factory %s %s: %w", method, path, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("image factory %s %s: %w", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("image factory %s %s: read the reply: %w", method, path, err)
	}
	if resp.StatusCode != want {
		first, _, _ := strings.Cut(strings.TrimSpace(string(data)), "\n")
		if len(first) > 200 {
			first = first[:200]
		}
		return nil, &StatusError{Method: method, URL: path, Code: resp.StatusCode, Body: first}
	}
	if len(data) > maxBody {
		return nil, fmt.Errorf("image factory %s %s: the reply is larger than %d bytes", method, path, maxBody)
	}
	return data, nil
}
