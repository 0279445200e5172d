package main

import (
	"errors"
	"testing"

	"github.com/spf13/pflag"
)

// TestHelp: asking for help lists the commands or a command's flags and
// succeeds; a missing or unknown command or flag is an error.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"run", "--help"}, {"replay", "-h"}} {
		if err := run(args); !errors.Is(err, pflag.ErrHelp) {
			t.Errorf("strata-sim %v: %v, want help (exit 0)", args, err)
		}
	}
	for _, args := range [][]string{nil, {"bogus"}, {"run", "--bogus"}, {"replay", "--bogus"}} {
		if err := run(args); err == nil || errors.Is(err, pflag.ErrHelp) {
			t.Errorf("strata-sim %v: %v, want an error", args, err)
		}
	}
}
