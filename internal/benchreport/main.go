// Command benchreport runs wasmhost's benchmark suite and writes
// BENCHMARKS.md: every benchmark with its baseline, the ratio between them,
// the target, whether it is met, what limits it when it is not, the machine
// and the commands that reproduce the run. `make bench` runs it as
//
//	go run ./internal/benchreport -out BENCHMARKS.md
//
// Machines are noisy, so targets are ratios between a benchmark and its
// baseline measured in the same process. Each group of benchmarks below
// runs the target and its baseline in one test-binary invocation (the same
// as one `go test -bench` invocation). The groups are run in rounds, one
// after the other, so that a slow minute hurts both sides of every pair.
// The ratio reported is the median of the per-round ratios, with their
// range. The raw output of every invocation is written, in the format
// benchstat reads, to -raw.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A group is one test-binary invocation, repeated each round.
type group struct {
	pkg       string // package directory, relative to the module root
	bench     string // -bench pattern
	benchtime string
	rounds    int // 0 means -rounds
}

// groups is the suite. Pairs (target and baseline) are always in the same
// group.
var groups = []group{
	{pkg: "host", bench: `^Benchmark(EmptyExtismCall|RawWazeroCall)$`, benchtime: "1s"},
	{pkg: "host", bench: `^BenchmarkLoad(Cold|WarmCache)$`, benchtime: "3x"},
	{pkg: "internal/bench", bench: `^BenchmarkCanonicalize1000$`, benchtime: "1s"},
	{pkg: "internal/bench", bench: `^BenchmarkProject1000$`, benchtime: "1s"},
	{pkg: "internal/bench", bench: `^BenchmarkReconcileMetadata$`, benchtime: "5x"},
	{pkg: "internal/bench", bench: `^BenchmarkReconcileEquivalent$`, benchtime: "30x"},
	{pkg: "internal/bench", bench: `^BenchmarkToolCall$`, benchtime: "1s"},
	{pkg: "internal/bench", bench: `^BenchmarkViewMemory$`, benchtime: "1x", rounds: 2},
	{pkg: "internal/bench", bench: `^BenchmarkReconcileScaling$`, benchtime: "3x", rounds: 2},
	{pkg: "internal/bench", bench: `^BenchmarkPolicyCallCost$`, benchtime: "1s", rounds: 3},
	{pkg: "internal/bench", bench: `^BenchmarkGateways$`, benchtime: "1x", rounds: 3},
	{pkg: "internal/bench", bench: `^BenchmarkSessionScale$`, benchtime: "1x", rounds: 1},
	{pkg: "internal/bench", bench: `^BenchmarkUpstreamScale$`, benchtime: "1x", rounds: 1},
}

func main() {
	out := flag.String("out", "BENCHMARKS.md", "the report to write")
	raw := flag.String("raw", filepath.Join("bench", "raw.txt"), "where to write the raw benchmark output (benchstat format)")
	chart := flag.String("chart", filepath.Join("docs", "benchmarks-gateways.svg"), "the chart of the gateway comparison to write (SVG), linked from the report")
	rounds := flag.Int("rounds", 5, "rounds of the paired groups")
	only := flag.String("only", "", "run only the groups whose -bench pattern contains this (development runs; the report then misses the rest)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("benchreport: ")
	if *only != "" {
		groups = slices.DeleteFunc(groups, func(g group) bool { return !strings.Contains(g.bench, *only) })
	}
	if err := run(*out, *raw, *chart, *rounds); err != nil {
		log.Fatal(err)
	}
}

func run(outPath, rawPath, chartPath string, rounds int) error {
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	root, err := moduleRoot(goCmd)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "benchreport")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	m := machineInfo(goCmd)
	start := time.Now()
	binaries := make(map[string]string)
	for _, g := range groups {
		if binaries[g.pkg] != "" {
			continue
		}
		bin := filepath.Join(tmp, strings.ReplaceAll(g.pkg, "/", "_")+".test")
		log.Printf("building %s", g.pkg)
		cmd := exec.Command(goCmd, "test", "-c", "-o", bin, "./"+g.pkg)
		cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("building the tests of %s: %w", g.pkg, err)
		}
		binaries[g.pkg] = bin
	}

	var rawOut bytes.Buffer
	res := newResults()
	for r := range rounds {
		for _, g := range groups {
			n := g.rounds
			if n == 0 {
				n = rounds
			}
			if r >= n {
				continue
			}
			log.Printf("round %d/%d: %s %s", r+1, n, g.pkg, g.bench)
			cmd := exec.Command(binaries[g.pkg], "-test.run", "^$", "-test.bench", g.bench,
				"-test.benchmem", "-test.count", "1", "-test.benchtime", g.benchtime, "-test.timeout", "30m")
			cmd.Dir = filepath.Join(root, g.pkg)
			var buf bytes.Buffer
			cmd.Stdout = io.MultiWriter(&buf, os.Stderr)
			cmd.Stderr = os.Stderr
			runErr := cmd.Run()
			rawOut.Write(buf.Bytes())
			res.parse(r, buf.Bytes())
			if runErr != nil {
				res.failures = append(res.failures, fmt.Sprintf("round %d, %s %s: %v\n\n```\n%s\n```", r+1, g.pkg, g.bench, runErr, tail(buf.String(), 40)))
			}
		}
	}
	m.took = time.Since(start).Round(time.Second)
	m.loadEnd = loadavg()

	rawFile, outFile := inRoot(root, rawPath), inRoot(root, outPath)
	if err := os.MkdirAll(filepath.Dir(rawFile), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(rawFile, rawOut.Bytes(), 0o644); err != nil {
		return err
	}
	chartFile := inRoot(root, chartPath)
	// The report links the chart relative to where the report is.
	link, err := filepath.Rel(filepath.Dir(outFile), chartFile)
	if err != nil {
		return err
	}
	report, chart := render(m, res, rounds, rawPath, filepath.ToSlash(link))
	if err := os.WriteFile(outFile, []byte(report), 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(chartFile), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(chartFile, []byte(chart), 0o644); err != nil {
		return err
	}
	log.Printf("wrote %s, %s and %s in %s", outPath, chartPath, rawPath, m.took)
	return nil
}

func moduleRoot(goCmd string) (string, error) {
	out, err := exec.Command(goCmd, "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the wasmhost module")
	}
	return filepath.Dir(mod), nil
}

// inRoot resolves a relative path against the module root.
func inRoot(root, path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(root, path)
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// machine describes where the suite ran.
type machine struct {
	cpus      int
	goVersion string
	cpuModel  string
	osArch    string
	date      string
	loadStart string
	loadEnd   string
	took      time.Duration
}

func machineInfo(goCmd string) machine {
	m := machine{
		cpus:      runtime.NumCPU(),
		goVersion: runtime.Version(),
		osArch:    runtime.GOOS + "/" + runtime.GOARCH,
		date:      time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		loadStart: loadavg(),
		cpuModel:  "unknown",
	}
	if out, err := exec.Command(goCmd, "env", "GOVERSION").Output(); err == nil {
		m.goVersion = strings.TrimSpace(string(out))
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpuModel = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

// loadavg returns the 1, 5 and 15 minute load averages, or "unknown".
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// results holds every measurement: by benchmark name (without the
// -GOMAXPROCS suffix), by round, by unit.
type results struct {
	values   map[string]map[int]map[string]float64
	failures []string
	// missing are the peer gateways BenchmarkGateways could not install
	// or start, with why (its "gateway-missing:" lines), once each.
	missing []string
}

func newResults() *results {
	return &results{values: make(map[string]map[int]map[string]float64)}
}

var procSuffix = regexp.MustCompile(`-\d+$`)

// parse reads the benchmark lines of one invocation's output.
func (r *results) parse(round int, out []byte) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m, ok := strings.CutPrefix(sc.Text(), "gateway-missing: "); ok {
			if !slices.Contains(r.missing, m) {
				r.missing = append(r.missing, m)
			}
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := procSuffix.ReplaceAllString(f[0], "")
		vals := make(map[string]float64)
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			vals[f[i+1]] = v
		}
		if r.values[name] == nil {
			r.values[name] = make(map[int]map[string]float64)
		}
		r.values[name][round] = vals
	}
}
