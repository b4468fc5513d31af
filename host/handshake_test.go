package host

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
)

// TestDecodeHandshakeABIVersion checks abi/SPEC.md section 3: the host reads
// "abi" first, leniently, and any value other than the JSON number 1 refuses
// the plugin with ErrABIVersion, quoting the value as written and naming
// the plugin when its handshake does.
func TestDecodeHandshakeABIVersion(t *testing.T) {
	long := `"` + strings.Repeat("x", 100) + `"`
	for _, tc := range []struct {
		name, out string
		msg       []string
	}{
		{"integer 2", `{"abi":2,"name":"x","version":"1"}`,
			[]string{`plugin "x" speaks wasmhost ABI v2, this host speaks ABI v1`}},
		{"integer 2 with v2 fields", `{"abi":2,"name":"x","version":"1","color":"red"}`,
			[]string{`plugin "x" speaks wasmhost ABI v2, this host speaks ABI v1`}},
		{"integer 0", `{"abi":0,"name":"x","version":"1"}`, []string{`ABI v0,`}},
		{"string 2", `{"abi":"2","name":"x","version":"1"}`,
			[]string{`plugin "x" gives "abi": "2"; this host speaks ABI v1 and accepts only "abi": 1`}},
		{"string 1", `{"abi":"1","name":"x","version":"1"}`, []string{`plugin "x" gives "abi": "1";`}},
		{"2.0", `{"abi":2.0,"name":"x","version":"1"}`, []string{`plugin "x" gives "abi": 2.0;`}},
		{"1.0", `{"abi":1.0,"name":"x","version":"1"}`, []string{`plugin "x" gives "abi": 1.0;`}},
		{"1e0", `{"abi":1e0,"name":"x","version":"1"}`, []string{`plugin "x" gives "abi": 1e0;`}},
		{"-1", `{"abi":-1,"name":"x","version":"1"}`, []string{`plugin "x" gives "abi": -1;`}},
		{"over int64", `{"abi":99999999999999999999,"name":"x","version":"1"}`,
			[]string{`plugin "x" speaks wasmhost ABI v99999999999999999999, this host speaks ABI v1`}},
		{"null", `{"abi":null,"name":"x","version":"1"}`, []string{`plugin "x" gives "abi": null;`}},
		{"true", `{"abi":true,"name":"x","version":"1"}`, []string{`gives "abi": true;`}},
		{"object", `{"abi": {"major": 2, "minor": 0}, "name": "x", "version": "1"}`,
			[]string{`plugin "x" gives "abi": {"major":2,"minor":0};`}},
		{"array", `{"abi":[1],"name":"x","version":"1"}`, []string{`gives "abi": [1];`}},
		{"long value cut", `{"abi":` + long + `,"name":"x"}`,
			[]string{`gives "abi": "` + strings.Repeat("x", 63) + `... (102 bytes);`}},
		{"control characters escaped", `{"abi":"\u001b[31m\u0085","name":"x"}`, []string{`gives "abi": "\u001b[31m\u0085";`}},
		{"raw non-printing rune escaped", "{\"abi\":\"a\u0085b\",\"name\":\"x\"}", []string{`gives "abi": "a\u0085b";`}},
		{"no name", `{"abi":"2"}`, []string{`the plugin gives "abi": "2";`}},
		{"empty name", `{"abi":3,"name":""}`, []string{`the plugin speaks wasmhost ABI v3, this host speaks ABI v1`}},
		{"name not a string", `{"abi":3,"name":7}`, []string{`the plugin speaks wasmhost ABI v3`}},
		{"unknown fields and a last abi", `{"abi":1,"abi":"two","name":"x","wants":["everything"]}`,
			[]string{`plugin "x" gives "abi": "two";`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeHandshake([]byte(tc.out), nil)
			require.ErrorIs(t, err, ErrABIVersion)
			assert.NotErrorIs(t, err, ErrHandshake)
			for _, m := range tc.msg {
				assert.Contains(t, err.Error(), m)
			}
		})
	}
}

// TestDecodeHandshakeMalformed checks the handshakes that are ErrHandshake,
// not ErrABIVersion: a missing "abi" (SPEC section 3 lists "lacks abi"
// among them: such a handshake names no version to refuse) and broken
// handshakes whose "abi" is 1.
func TestDecodeHandshakeMalformed(t *testing.T) {
	for _, tc := range []struct{ name, out, msg string }{
		{"no abi", `{"name":"x","version":"1"}`, `no "abi" field`},
		{"not an object", `[{"abi":2}]`, "not a JSON object"},
		{"not JSON", `{"abi":2,`, `decoding output: unexpected EOF (the output: "{\"abi\":2,")`},
		{"unknown field", `{"abi":1,"name":"x","version":"1","color":"red"}`, `unknown field "color"`},
		{"empty name", `{"abi":1,"name":"","version":"1"}`, "name is empty"},
		{"data after the object", `{"abi":1,"name":"x","version":"1"} {}`, "data after the JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeHandshake([]byte(tc.out), nil)
			require.ErrorIs(t, err, ErrHandshake)
			assert.NotErrorIs(t, err, ErrABIVersion)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
}

// TestDecodeHandshakeAccepted checks that "abi": 1, spaced any way, is
// accepted.
func TestDecodeHandshakeAccepted(t *testing.T) {
	for _, out := range []string{
		`{"abi":1,"name":"x","version":"1.0.0"}`,
		"{ \"abi\" :\n\t1 , \"name\":\"x\",\"version\":\"1.0.0\"}",
	} {
		h, err := decodeHandshake([]byte(out), nil)
		require.NoError(t, err, out)
		assert.Equal(t, abi.Handshake{ABI: 1, Name: "x", Version: "1.0.0"}, h)
	}
}

// TestDecodeHandshakeSettingsKeys checks the settingsKeys rules of
// abi/SPEC.md section 3: declared keys are kept; a key that is not a
// name, one of wasmhost's own, or declared twice refuses the plugin.
func TestDecodeHandshakeSettingsKeys(t *testing.T) {
	h, err := decodeHandshake([]byte(`{"abi":1,"name":"x","version":"1","settingsKeys":["readOnlyOnly","max-rows"]}`), nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"readOnlyOnly", "max-rows"}, h.SettingsKeys)
	for _, tc := range []struct{ keys, msg string }{
		{`[""]`, `settingsKeys[0]: "" is not a settings key`},
		{`["a.b"]`, `"a.b" is not a settings key`},
		{`["1x"]`, `"1x" is not a settings key`},
		{`["trust"]`, `"trust" is one of wasmhost's own settings keys`},
		{`["a","a"]`, `settingsKeys[1]: "a" is declared twice`},
		{`"a"`, `cannot unmarshal`},
	} {
		_, err := decodeHandshake([]byte(`{"abi":1,"name":"x","version":"1","settingsKeys":`+tc.keys+`}`), nil)
		require.ErrorIs(t, err, ErrHandshake, tc.keys)
		assert.Contains(t, err.Error(), tc.msg)
	}
}

// TestHandshakeConfigReachesEveryInstance: Options.Config is the input of
// the handshake of every instance, not only the one Load makes, so calls
// served by any instance see it (testplugins/readonly-policy hides the
// tools its config names).
func TestHandshakeConfigReachesEveryInstance(t *testing.T) {
	wasm, err := os.ReadFile("../testplugins/readonly-policy/readonly-policy.wasm")
	require.NoError(t, err)
	const instances = 3
	p, err := Load(context.Background(), "readonly-policy.wasm", wasm, Options{
		Config: `{"hide":["b"]}`, MaxInstances: instances, CacheDir: testCacheDir, CallTimeout: time.Minute,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close(context.Background())) })
	assert.Equal(t, []string{"readOnlyOnly"}, p.Handshake().SettingsKeys)

	// Hold every instance at once, so that all but the load's are new, and
	// ask each one.
	ctx := context.Background()
	var held []*instance
	for range instances {
		inst, err := p.acquire(ctx)
		if !assert.NoError(t, err) {
			break
		}
		held = append(held, inst)
	}
	in := []byte(`{"settings":{},"tools":["a","b","c"],"prompts":[],"resources":[]}`)
	for i, inst := range held {
		out, healthy, err := p.invoke(ctx, inst, abi.ExportProject, in)
		// The output lies in the instance's memory: read it before release.
		if assert.NoError(t, err, "instance %d", i) {
			assert.JSONEq(t, `{"tools":[{"i":0,"trust":false,"alwaysLoad":false},{"i":2,"trust":false,"alwaysLoad":false}],"prompts":[],"resources":[]}`, string(out), "instance %d", i)
		}
		p.release(inst, healthy, abi.ExportProject, nil)
	}
	assert.Equal(t, int64(instances), p.stats.created.Load())

	bad, err := Load(context.Background(), "readonly-policy.wasm", wasm, Options{Config: `{"hide":"b"}`, CacheDir: testCacheDir, CallTimeout: time.Minute})
	require.ErrorIs(t, err, ErrHandshake, "the plugin refuses a config it cannot read")
	assert.Nil(t, bad)
}

// TestHandshakeConfigV1Plugin: a plugin built before plugin configuration
// ignores its handshake input and loads and works with a config as without.
func TestHandshakeConfigV1Plugin(t *testing.T) {
	p := loadDefault(t, Options{Config: `{"anything":[1,2]}`})
	resp, err := p.Project(context.Background(), &abi.ProjectRequest{Settings: []byte(`{}`), Tools: []string{"a"}, Prompts: []string{}, Resources: []string{}})
	require.NoError(t, err)
	assert.Len(t, resp.Tools, 1)
}
