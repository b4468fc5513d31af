package host

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	"github.com/wasmhost/wasmhost/internal/wasmmeter"
)

// Instrumented modules are kept in the compilation cache directory, beside
// wazero's compiled code, so that a later process loading the same plugin
// skips the metering rewrite (a tenth of a warm load of the default
// plugin). An entry is named by the SHA-256 of the plugin as given, the
// rewriter's wasmmeter.Version and meterBudget, and holds the instrumented
// bytes followed by their CRC-32C and meteredMagic: an entry that does not
// check out (damaged on disk, cut short) is ignored and written again.
// Whoever can write the directory can change the plugin the host runs, as
// with wazero's own entries of machine code.

// meteredDir is the subdirectory of the cache directory holding them.
const meteredDir = "wasmhost-metered"

// meteredMagic ends every entry.
var meteredMagic = []byte("whm1")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// meteredPath returns the entry of the plugin with SHA-256 digest in dir.
func meteredPath(dir, digest string) string {
	return filepath.Join(dir, meteredDir, fmt.Sprintf("%s-m%d-b%d.wasm", digest, wasmmeter.Version, meterBudget))
}

// readMetered returns the instrumented module kept at path, or false when
// there is none that checks out.
func readMetered(path string) ([]byte, bool) {
	b, err := os.ReadFile(path)
	n := len(b) - 4 - len(meteredMagic)
	if err != nil || n < 8 || !bytes.Equal(b[n+4:], meteredMagic) {
		return nil, false
	}
	if crc32.Checksum(b[:n], castagnoli) != binary.LittleEndian.Uint32(b[n:]) {
		return nil, false
	}
	return b[:n:n], true
}

// writeMetered keeps the instrumented module code at path: written to a
// temporary file and renamed into place, so that a reader finds a whole
// entry or none.
func writeMetered(path string, code []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // fails once renamed
	trailer := binary.LittleEndian.AppendUint32(nil, crc32.Checksum(code, castagnoli))
	_, err = f.Write(code)
	if err == nil {
		_, err = f.Write(append(trailer, meteredMagic...))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
