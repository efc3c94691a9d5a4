// Command openapi_check reads metalboot's OpenAPI document as a Go client of
// it would, with kin-openapi: it loads and validates the document, then
// checks recorded HTTP exchanges against it (openapi3filter): every response,
// and the request of every exchange the server accepted (2xx).
//
// Usage: openapi_check DOCUMENT.json EXCHANGES.json
//
// EXCHANGES.json is a list of {method, path, query, request_headers,
// request_body, status, headers, body}. Builds in GOPATH mode with Debian's
// golang-go and golang-github-getkin-kin-openapi-dev:
//
//	GOPATH=/usr/share/gocode GO111MODULE=off go run main.go ...
//
// Patterns are ECMA-262 (JSON Schema's dialect); Go's regexp (RE2) has no
// look-ahead, no back-references and no \uXXXX. Before the document is
// validated, a pattern's "(?![\s\S])" (the end of the text) is written "\z"
// and "\uXXXX" "\x{XXXX}"; the few patterns RE2 still cannot compile are
// left to the Python reading of the document and listed on stderr.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"
)

type exchange struct {
	Method         string            `json:"method"`
	Path           string            `json:"path"`
	Query          string            `json:"query"`
	RequestHeaders map[string]string `json:"request_headers"`
	RequestBody    string            `json:"request_body"`
	Status         int               `json:"status"`
	Headers        map[string]string `json:"headers"`
	Body           string            `json:"body"`
}

// The server the exchanges are sent to, as far as routing is concerned.
const base = "http://metalboot"

var unicodeEscape = regexp.MustCompile(`\\u([0-9A-Fa-f]{4})`)

// patterns rewrites the patterns of every schema reachable from the document
// into what RE2 reads; it returns those it had to drop.
type patterns struct {
	seen    map[*openapi3.Schema]bool
	dropped map[string]bool
}

func (p *patterns) ref(ref *openapi3.SchemaRef) {
	if ref != nil && ref.Value != nil {
		p.schema(ref.Value)
	}
}

func (p *patterns) schema(s *openapi3.Schema) {
	if p.seen[s] {
		return
	}
	p.seen[s] = true
	if s.Pattern != "" {
		rewritten := unicodeEscape.ReplaceAllString(
			strings.ReplaceAll(s.Pattern, `(?![\s\S])`, `\z`), `\x{$1}`)
		if _, err := regexp.Compile(rewritten); err != nil {
			p.dropped[s.Pattern] = true
			s.Pattern = ""
		} else {
			s.Pattern = rewritten
		}
	}
	for _, refs := range []openapi3.SchemaRefs{s.OneOf, s.AnyOf, s.AllOf} {
		for _, ref := range refs {
			p.ref(ref)
		}
	}
	for _, ref := range s.Properties {
		p.ref(ref)
	}
	p.ref(s.Items)
	p.ref(s.Not)
	p.ref(s.AdditionalProperties)
}

func (p *patterns) content(content openapi3.Content) {
	for _, media := range content {
		p.ref(media.Schema)
	}
}

func (p *patterns) document(doc *openapi3.T) {
	for _, ref := range doc.Components.Schemas {
		p.ref(ref)
	}
	for _, item := range doc.Paths {
		for _, op := range item.Operations() {
			for _, param := range op.Parameters {
				if param.Value != nil {
					p.ref(param.Value.Schema)
				}
			}
			if op.RequestBody != nil && op.RequestBody.Value != nil {
				p.content(op.RequestBody.Value.Content)
			}
			for _, response := range op.Responses {
				if response.Value != nil {
					p.content(response.Value.Content)
				}
			}
		}
	}
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: openapi_check DOCUMENT.json EXCHANGES.json")
		os.Exit(2)
	}
	ctx := context.Background()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "cannot load the document:", err)
		os.Exit(1)
	}
	p := &patterns{seen: map[*openapi3.Schema]bool{}, dropped: map[string]bool{}}
	p.document(doc)
	var dropped []string
	for pattern := range p.dropped {
		dropped = append(dropped, pattern)
	}
	sort.Strings(dropped)
	for _, pattern := range dropped {
		fmt.Fprintf(os.Stderr, "pattern left to the Python reading (not RE2): %s\n", pattern)
	}
	if err := doc.Validate(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "the document is not valid:", err)
		os.Exit(1)
	}
	// the document's server is "/", the one that serves it: here, the one the
	// exchanges were recorded with
	doc.Servers = openapi3.Servers{&openapi3.Server{URL: base}}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cannot route the document's paths:", err)
		os.Exit(1)
	}

	data, err := os.ReadFile(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var exchanges []exchange
	if err := json.Unmarshal(data, &exchanges); err != nil {
		fmt.Fprintln(os.Stderr, "cannot read the exchanges:", err)
		os.Exit(1)
	}
	failures, requests, responses := 0, 0, 0
	options := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}
	for _, ex := range exchanges {
		url := base + ex.Path
		if ex.Query != "" {
			url += "?" + ex.Query
		}
		req, err := http.NewRequest(ex.Method, url, strings.NewReader(ex.RequestBody))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for name, value := range ex.RequestHeaders {
			req.Header.Set(name, value)
		}
		where := fmt.Sprintf("%s %s -> %d", ex.Method, ex.Path, ex.Status)
		route, params, err := router.FindRoute(req)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: no operation of the document: %v\n", where, err)
			failures++
			continue
		}
		input := &openapi3filter.RequestValidationInput{
			Request: req, PathParams: params, Route: route, Options: options}
		if ex.Status >= 200 && ex.Status < 300 {
			requests++
			if err := openapi3filter.ValidateRequest(ctx, input); err != nil {
				fmt.Fprintf(os.Stderr, "%s: request: %v\n", where, err)
				failures++
			}
		}
		header := http.Header{}
		for name, value := range ex.Headers {
			header.Set(name, value)
		}
		responses++
		err = openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{
			RequestValidationInput: input, Status: ex.Status, Header: header,
			Body:    io.NopCloser(bytes.NewReader([]byte(ex.Body))),
			Options: &openapi3filter.Options{IncludeResponseStatus: true},
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: response: %v\n", where, err)
			failures++
		}
	}
	fmt.Printf("%d exchanges: %d requests and %d responses checked, %d failures\n",
		len(exchanges), requests, responses, failures)
	if failures > 0 {
		os.Exit(1)
	}
}
