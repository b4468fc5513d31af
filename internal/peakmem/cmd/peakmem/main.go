// Command peakmem runs a command and prints, when it ends, the peak summed
// resident set size of its whole process tree, sampled every 200 ms from
// /proc; it exits with the command's exit code.
//
//	peakmem [-label NAME] [-every D] COMMAND [ARG...]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/wasmhost/wasmhost/internal/peakmem"
)

func main() {
	label := flag.String("label", "", "name of what is measured in the report (default: the command line)")
	every := flag.Duration("every", 200*time.Millisecond, "sampling interval")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: peakmem [-label NAME] [-every D] COMMAND [ARG...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	args := flag.Args()
	if *label == "" {
		*label = strings.Join(args, " ")
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// Interrupts reach the command through the terminal's process group;
	// peakmem waits for it to end and still reports.
	signal.Ignore(syscall.SIGINT, syscall.SIGQUIT)
	start := time.Now()
	peak, err := peakmem.Run(context.Background(), cmd, *every)
	fmt.Fprintf(os.Stderr, "peakmem: %s: peak RSS %s (process tree, sampled every %v), %v\n",
		*label, peakmem.Format(peak), *every, time.Since(start).Round(time.Second))
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			os.Exit(128 + int(ws.Signal()))
		}
		os.Exit(exit.ExitCode())
	default:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(127)
	}
}
