package pool

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wasmhost/wasmhost/internal/clip"
)

// kinds is a set of snapshot lists to (re)discover.
type kinds uint8

const (
	kindTools kinds = 1 << iota
	kindPrompts
	kindResources
	kindAll = kindTools | kindPrompts | kindResources
)

// discover lists the kinds in which from cs, taking the other lists from
// base, and counts the discovery.
func (e *Entry) discover(ctx context.Context, cs *mcp.ClientSession, which kinds, base *Snapshot) (*Snapshot, error) {
	e.pool.counters.Discoveries.Add(1)
	snap, err := discover(ctx, cs, which, base, e.spec.ListingCap())
	if err != nil {
		return nil, fmt.Errorf("discover: %w", cutError(err))
	}
	// Warned once for each set of duplicates, not at every rediscovery.
	dups := strings.Join(snap.duplicates, ", ")
	if last := e.dupsWarned.Swap(&dups); dups != "" && (last == nil || *last != dups) {
		e.log.Warn("upstream lists names twice; the first of each is used", "duplicates", namesTwice(snap.duplicates))
	}
	return snap.Snapshot, nil
}

// maxDupsShown is how many of an upstream's names listed twice its warning
// shows, each cut to maxDupShown bytes: the names are the upstream's,
// as long and as many as a listing of 32 MiB holds.
const (
	maxDupsShown = 10
	maxDupShown  = 256
)

// namesTwice describes dups, the names an upstream listed twice, for its
// warning: how many, and the first maxDupsShown.
func namesTwice(dups []string) string {
	shown := make([]string, 0, min(len(dups), maxDupsShown))
	for _, d := range dups[:min(len(dups), maxDupsShown)] {
		shown = append(shown, clip.String(d, maxDupShown))
	}
	s := fmt.Sprintf("%d names: %s", len(dups), strings.Join(shown, ", "))
	if len(dups) > maxDupsShown {
		s += fmt.Sprintf(", and %d more", len(dups)-maxDupsShown)
	}
	return s
}

// Discover lists every tool, prompt, resource and resource template of an
// initialized upstream connection, following pagination cursors, into a
// snapshot with Version 0 (the caller numbers its snapshots). Lists the
// server declares no capability for are empty, and so are the templates of
// a server that does not know resources/templates/list. The pool uses the
// same listing.
func Discover(ctx context.Context, cs *mcp.ClientSession) (*Snapshot, error) {
	return discoverWithin(ctx, cs, DefaultMaxListingBytes)
}

// discoverWithin is Discover with maxBytes as each listing's byte cap
// (Spec.ListingCap) instead of DefaultMaxListingBytes.
func discoverWithin(ctx context.Context, cs *mcp.ClientSession, maxBytes int64) (*Snapshot, error) {
	d, err := discover(ctx, cs, kindAll, nil, maxBytes)
	return d.Snapshot, err
}

// A discovered snapshot is a listing with the names it held twice: each
// list keeps the first item of a name (a tool's or prompt's name, a
// resource's URI, a template's URI template), so that every session sees
// the same one at every rediscovery.
type discovered struct {
	*Snapshot
	duplicates []string // "tool \"x\"", ...
}

func discover(ctx context.Context, cs *mcp.ClientSession, which kinds, base *Snapshot, maxBytes int64) (discovered, error) {
	snap := &Snapshot{}
	if base != nil {
		snap.Tools, snap.Prompts, snap.Resources, snap.ResourceTemplates = base.Tools, base.Prompts, base.Resources, base.ResourceTemplates
	}
	caps := &mcp.ServerCapabilities{}
	if r := cs.InitializeResult(); r != nil && r.Capabilities != nil {
		caps = r.Capabilities
	}
	var err error
	if which&kindTools != 0 {
		snap.Tools = nil
		if caps.Tools != nil {
			if snap.Tools, err = listAll(ctx, maxBytes, func(ctx context.Context, c string) ([]*mcp.Tool, string, error) {
				r, err := cs.ListTools(ctx, &mcp.ListToolsParams{Cursor: c})
				if err != nil {
					return nil, "", err
				}
				return r.Tools, r.NextCursor, nil
			}); err != nil {
				return discovered{}, fmt.Errorf("list tools: %w", err)
			}
		}
	}
	if which&kindPrompts != 0 {
		snap.Prompts = nil
		if caps.Prompts != nil {
			if snap.Prompts, err = listAll(ctx, maxBytes, func(ctx context.Context, c string) ([]*mcp.Prompt, string, error) {
				r, err := cs.ListPrompts(ctx, &mcp.ListPromptsParams{Cursor: c})
				if err != nil {
					return nil, "", err
				}
				return r.Prompts, r.NextCursor, nil
			}); err != nil {
				return discovered{}, fmt.Errorf("list prompts: %w", err)
			}
		}
	}
	if which&kindResources != 0 {
		snap.Resources, snap.ResourceTemplates = nil, nil
		if caps.Resources != nil {
			if snap.Resources, err = listAll(ctx, maxBytes, func(ctx context.Context, c string) ([]*mcp.Resource, string, error) {
				r, err := cs.ListResources(ctx, &mcp.ListResourcesParams{Cursor: c})
				if err != nil {
					return nil, "", err
				}
				return r.Resources, r.NextCursor, nil
			}); err != nil {
				return discovered{}, fmt.Errorf("list resources: %w", err)
			}
			// Templates are optional for a server with resources: one that
			// does not know the method has none.
			snap.ResourceTemplates, err = listAll(ctx, maxBytes, func(ctx context.Context, c string) ([]*mcp.ResourceTemplate, string, error) {
				r, err := cs.ListResourceTemplates(ctx, &mcp.ListResourceTemplatesParams{Cursor: c})
				if err != nil {
					return nil, "", err
				}
				return r.ResourceTemplates, r.NextCursor, nil
			})
			var werr *jsonrpc.Error
			if errors.As(err, &werr) && werr.Code == jsonrpc.CodeMethodNotFound {
				snap.ResourceTemplates, err = nil, nil
			}
			if err != nil {
				return discovered{}, fmt.Errorf("list resource templates: %w", err)
			}
		}
	}
	var d discovered
	d.Snapshot = snap
	snap.Tools = firstOf(snap.Tools, "tool", func(t *mcp.Tool) string { return t.Name }, &d.duplicates)
	snap.Prompts = firstOf(snap.Prompts, "prompt", func(p *mcp.Prompt) string { return p.Name }, &d.duplicates)
	snap.Resources = firstOf(snap.Resources, "resource", func(r *mcp.Resource) string { return r.URI }, &d.duplicates)
	snap.ResourceTemplates = firstOf(snap.ResourceTemplates, "resource template", func(r *mcp.ResourceTemplate) string { return r.URITemplate }, &d.duplicates)
	if base != nil {
		if which&kindTools != 0 {
			keepUnchanged(base.Tools, snap.Tools, func(t *mcp.Tool) string { return t.Name })
		}
		if which&kindPrompts != 0 {
			keepUnchanged(base.Prompts, snap.Prompts, func(p *mcp.Prompt) string { return p.Name })
		}
		if which&kindResources != 0 {
			keepUnchanged(base.Resources, snap.Resources, func(r *mcp.Resource) string { return r.URI })
			keepUnchanged(base.ResourceTemplates, snap.ResourceTemplates, func(r *mcp.ResourceTemplate) string { return r.URITemplate })
		}
	}
	return d, nil
}

// keepUnchanged replaces each item of listed (a fresh listing, which it
// modifies) that is deeply equal to base's item of the same key with
// base's own, so that an item a rediscovery found unchanged keeps its
// identity. The new listing is then compared with the last one, and the
// projections of each key with their predecessors (view's registry
// deltas), mostly by pointer: one deep comparison per item and
// rediscovery instead of one per item, key and comparison.
func keepUnchanged[T any](base, listed []*T, key func(*T) string) {
	if len(base) == 0 || len(listed) == 0 {
		return
	}
	old := make(map[string]*T, len(base))
	for _, x := range base {
		old[key(x)] = x
	}
	for i, x := range listed {
		if o, ok := old[key(x)]; ok && reflect.DeepEqual(o, x) {
			listed[i] = o
		}
	}
}

// firstOf returns items without the later items of a key seen before,
// adding `what "key"` to dups for each key given twice; items itself when
// every key is distinct.
func firstOf[T any](items []*T, what string, key func(*T) string, dups *[]string) []*T {
	seen := make(map[string]bool, len(items))
	var out []*T
	for i, it := range items {
		k := key(it)
		if !seen[k] {
			seen[k] = true
			if out != nil {
				out = append(out, it)
			}
			continue
		}
		if out == nil {
			out = append(make([]*T, 0, len(items)), items[:i]...)
		}
		*dups = append(*dups, what+" "+strconv.Quote(k))
	}
	if out == nil {
		return items
	}
	return out
}

// The bounds of one listing (tools, prompts, resources or resource
// templates) of one server: an upstream that pages forever, or lists more
// than any session could use, fails its entry instead of filling memory
// until the timeout. The listing's bytes are bounded too (Spec.ListingCap).
const (
	maxListPages = 1000
	maxListItems = 50_000
)

// DefaultMaxListingBytes is the byte cap of one listing of a server whose
// spec sets none (config "maxListingBytes"): 32 MiB.
const DefaultMaxListingBytes = 32 << 20

// ErrBadListing is wrapped by the error of a discovery that an upstream's
// listing broke off: a cursor it had given before (its pages would never
// end), more than maxListPages pages or maxListItems items, or more bytes
// than its cap (ErrListingTooLarge).
var ErrBadListing = errors.New("upstream listing refused")

// ErrListingTooLarge, which wraps ErrBadListing, is wrapped by the error of
// a discovery that a listing's bytes went past the server's cap
// (Spec.ListingCap). The entry fails, at a rediscovery too: the upstream
// asks for more memory than the operator allowed it.
var ErrListingTooLarge = fmt.Errorf("%w: over its byte cap", ErrBadListing)

// listAll follows one listing's cursors from the first page to the last,
// with page asking for the page at a cursor ("" for the first). The items
// of all its pages together may take at most maxBytes bytes.
//
// The bytes counted are each item's JSON encoding, what is kept of the
// upstream's answer once decoded (fields the go-sdk does not know are
// dropped, so they cost nothing held), and each cursor, which is sent
// back (only a digest of it is kept). A page is counted as it arrives,
// one item at a time, and the listing is given up on at the first item
// past the cap, so that what the listing holds stays within maxBytes plus
// one page; a page is itself bounded by the transport, 16 MiB a message
// (the go-sdk's line limit on stdio, maxAnswerBytes and the go-sdk's event
// limit over HTTP).
func listAll[T any](ctx context.Context, maxBytes int64, page func(ctx context.Context, cursor string) ([]*T, string, error)) ([]*T, error) {
	var out []*T
	var size int64
	seen := make(map[[sha256.Size]byte]bool) // digests of the cursors given
	cursor := ""
	for pages := 1; ; pages++ {
		items, next, err := page(ctx, cursor)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			b, err := json.Marshal(it)
			if err != nil {
				return nil, fmt.Errorf("page %d: %w", pages, err)
			}
			if size += int64(len(b)); size > maxBytes {
				return nil, fmt.Errorf("%w: more than %d bytes (maxListingBytes) by page %d", ErrListingTooLarge, maxBytes, pages)
			}
		}
		// The cursor counts too: the listing sends it back, and keeps a
		// digest of it to refuse one given twice.
		if size += int64(len(next)); size > maxBytes {
			return nil, fmt.Errorf("%w: more than %d bytes (maxListingBytes), cursors included, by page %d", ErrListingTooLarge, maxBytes, pages)
		}
		out = append(out, items...)
		key := sha256.Sum256([]byte(next))
		switch {
		case len(out) > maxListItems || next != "" && len(out) == maxListItems:
			return nil, fmt.Errorf("%w: more than %d items", ErrBadListing, maxListItems)
		case next == "":
			return out, nil
		case seen[key]:
			return nil, fmt.Errorf("%w: page %d gives cursor %q, which an earlier page gave: the pages would never end", ErrBadListing, pages, truncate(next))
		case pages >= maxListPages:
			return nil, fmt.Errorf("%w: more than %d pages", ErrBadListing, maxListPages)
		}
		seen[key] = true
		cursor = next
	}
}

// truncate shortens an upstream's string for a message.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// sameListing reports whether a and b list the same items, field by field.
func sameListing(a, b *Snapshot) bool {
	return a != nil && b != nil &&
		reflect.DeepEqual(a.Tools, b.Tools) && reflect.DeepEqual(a.Prompts, b.Prompts) &&
		reflect.DeepEqual(a.Resources, b.Resources) && reflect.DeepEqual(a.ResourceTemplates, b.ResourceTemplates)
}
