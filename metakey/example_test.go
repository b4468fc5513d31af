package metakey_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/metakey"
)

func ExampleParseSettings() {
	_, err := metakey.ParseSettings([]byte(`{"includeTools": ["read_file", 7]}`))
	fmt.Println(err)

	s, err := metakey.ParseSettings([]byte(`{"includeTools": ["write_file", "read_file(path)"], "trust": false}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(s.Canonical().Key())
	// Output:
	// includeTools[1]: expected a string, got a number
	// {"trust":false,"alwaysLoadTools":false,"includeTools":["read_file","write_file"],"excludeTools":[]}
}

func ExampleCanonical_Visible() {
	s, err := metakey.ParseSettings([]byte(`{"includeTools": ["a", "b"], "excludeTools": ["b"]}`))
	if err != nil {
		panic(err)
	}
	c := s.Canonical()
	for _, name := range []string{"a", "b", "c", ""} {
		fmt.Printf("%q: %v\n", name, c.Visible(name))
	}
	// Output:
	// "a": true
	// "b": false
	// "c": false
	// "": false
}

func ExampleReference_Project() {
	resp, err := metakey.Reference{}.Project(context.Background(), &abi.ProjectRequest{
		Settings:  json.RawMessage(`{"trust": true, "excludeTools": ["delete"]}`),
		Tools:     []string{"read", "delete", "write"},
		Resources: []string{"file:///notes.txt"},
	})
	if err != nil {
		panic(err)
	}
	out, err := json.Marshal(resp)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(out))
	// Output:
	// {"tools":[{"i":0,"trust":true,"alwaysLoad":false},{"i":2,"trust":true,"alwaysLoad":false}],"prompts":[],"resources":[0]}
}
