package wasmpack

import (
	"fmt"
	"os"
	"path/filepath"
)

// A FileReport says what PackFile did.
type FileReport struct {
	Stats
	Out           string // the file written
	Before, After int    // sizes in bytes
}

// String is the one line `wasmhost pack` prints.
func (r FileReport) String() string {
	return fmt.Sprintf("%s: %d data segments -> %d (%d zero bytes written), %d -> %d bytes",
		r.Out, r.SegmentsBefore, r.SegmentsAfter, r.ZerosWritten, r.Before, r.After)
}

// PackFile packs the module in file in (Pack, with gap) and writes it to
// out, which may be in: through a temporary file in out's directory and a
// rename, so that a failure leaves out as it was. An existing out keeps its
// permissions. A malformed module is reported with its file name.
func PackFile(in, out string, gap int) (FileReport, error) {
	wasm, err := os.ReadFile(in)
	if err != nil {
		return FileReport{}, err
	}
	packed, st, err := Pack(wasm, gap)
	if err != nil {
		return FileReport{}, fmt.Errorf("%s: %w", in, err)
	}
	if err := writeFileAtomic(out, packed); err != nil {
		return FileReport{}, err
	}
	return FileReport{Stats: st, Out: out, Before: len(wasm), After: len(packed)}, nil
}

// writeFileAtomic writes data to path through a temporary file in the same
// directory and a rename. An existing file keeps its permissions.
func writeFileAtomic(path string, data []byte) (err error) {
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
