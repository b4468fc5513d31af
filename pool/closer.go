package pool

import (
	"context"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A closer is a transport that remembers the connection it made, so that
// the connection can be closed beneath the mcp.ClientSession using it.
// mcp.ClientSession.Close waits until every request under way on the
// connection has its answer, however long the upstream takes, or for ever;
// closing the connection first fails those requests at once. A restart
// closes its old connection this way.
type closer struct {
	mcp.Transport

	mu   sync.Mutex
	conn mcp.Connection
}

// Connect connects the transport and remembers the connection.
func (t *closer) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.Transport.Connect(ctx)
	if err == nil {
		t.mu.Lock()
		t.conn = conn
		t.mu.Unlock()
	}
	return conn, err
}

// CloseConnection closes the connection made, if any. The
// mcp.ClientSession's own Close closes it again, which the connections of the go-sdk's
// transports, and wasmhost's wrappers of them, take as a no-op.
func (t *closer) CloseConnection() {
	t.mu.Lock()
	conn := t.conn
	t.mu.Unlock()
	if conn != nil {
		_ = conn.Close()
	}
}
