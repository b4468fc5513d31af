package host

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

func TestPadInput(t *testing.T) {
	for n := range 20 {
		in := []byte(`{"settings":["` + strings.Repeat("x", n) + `"]}`)
		orig := string(in)
		got := padInput(in)
		require.Zero(t, len(got)%8, "length %d of %q", len(got), got)
		require.Less(t, len(got)-len(orig), 8, "at most seven bytes added to %q", orig)
		require.Equal(t, orig[:len(orig)-1], string(got[:len(orig)-1]), "the request up to its closing brace is kept")
		require.Equal(t, byte('}'), got[len(got)-1])
		var want, have any
		require.NoError(t, json.Unmarshal([]byte(orig), &want))
		require.NoError(t, json.Unmarshal(got, &have), "%q", got)
		if diff := cmp.Diff(want, have); diff != "" {
			t.Fatalf("padding changed the meaning of %q (-want +got):\n%s", orig, diff)
		}
	}
	for _, in := range []string{"", "[1,2]", "null"} {
		require.Equal(t, in, string(padInput([]byte(in))), "only objects are padded")
	}
}
