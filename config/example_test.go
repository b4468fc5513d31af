package config_test

import (
	"errors"
	"fmt"

	"github.com/wasmhost/wasmhost/config"
)

func ExampleParse() {
	data := []byte(`{
  "mcpServers": {
    "fs": {"command": "mcp-fs", "args": ["/srv"], "includeTools": ["read_file(path)"]}
  },
  "sessions": {
    "alice": {"tokenEnv": "ALICE_TOKEN"},
    "bob": {"tokenEnv": "BOB_TOKEN", "overrides": {"fs": {"includeTools": null, "trust": true}}}
  }
}`)
	env := func(name string) (string, bool) {
		v, ok := map[string]string{"ALICE_TOKEN": "alice-0123456789abcdef", "BOB_TOKEN": "bob-0123456789abcdef"}[name]
		return v, ok
	}
	cfg, _, err := config.Parse("config.json", data, env, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, name := range cfg.SessionNames() {
		_, settings, enabled := cfg.Sessions[name].Effective("fs")
		fmt.Println(cfg.Sessions[name], string(settings), enabled)
	}

	_, _, err = config.Parse("config.json", []byte(`{"mcpServers": {"fs": {"command": "mcp-fs", "args": ["-v", 2]}}}`), env, nil)
	fmt.Println(errors.Is(err, config.ErrInvalid))
	fmt.Println(err)
	// Output:
	// session "alice" (token from tokenEnv ALICE_TOKEN) {"includeTools":["read_file(path)"]} true
	// session "bob" (token from tokenEnv BOB_TOKEN) {"trust":true,"includeTools":null} true
	// true
	// config.json: mcpServers.fs.args[1]: expected a string, got a number
}
