// Package sandboxprobe defines the report of the hostile plugin's "sandbox"
// mode (testplugins/hostile-go/hostile/probe.go), which the plugin writes as
// JSON and the host tests decode: one definition for both sides.
package sandboxprobe

// Observations are what the "sandbox" mode could read from its sandbox.
type Observations struct {
	// Files maps each path the plugin tried to read to "read N bytes: TEXT"
	// (the first 64 bytes) or to the error it got.
	Files map[string]string `json:"files"`
	// Dirs maps each directory the plugin tried to list to its entries or
	// to the error it got.
	Dirs map[string]string `json:"dirs"`
	// Environ is os.Environ().
	Environ []string `json:"environ"`
	// Getenv maps each variable looked up with os.LookupEnv to its value,
	// or null when it is unset.
	Getenv map[string]*string `json:"getenv"`
	// Args is os.Args.
	Args []string `json:"args"`
	// Hostname is os.Hostname's answer or error.
	Hostname string `json:"hostname"`
	// Times holds two readings of time.Now (RFC 3339 with nanoseconds, UTC),
	// and Elapsed the monotonic time between them in nanoseconds.
	Times   []string `json:"times"`
	Elapsed int64    `json:"elapsedNanos"`
	// CryptoRand is 16 bytes from crypto/rand, in hex (or the error).
	CryptoRand string `json:"cryptoRand"`
	// MathRand is math/rand's Int63 and math/rand/v2's Int64, as decimal
	// strings.
	MathRand []string `json:"mathRand"`
	// Dial maps each network address the plugin tried to reach to
	// "connected to ADDR" or to the error it got; "lookup HOST" is a DNS
	// lookup.
	Dial map[string]string `json:"dial"`
}
