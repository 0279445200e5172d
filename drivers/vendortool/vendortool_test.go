package vendortool

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestExecReportsStatusStderrAndOutput(t *testing.T) {
	x := Exec{Tool: "tool", Binary: "/bin/sh", Env: []string{"GREETING=hello"}}
	out, err := x.Run(context.Background(), "-c", `echo "$GREETING"`)
	if err != nil || strings.TrimSpace(string(out)) != "hello" {
		t.Fatalf("run: %q, %v; want the program's own env var printed", out, err)
	}
	out, err = x.Run(context.Background(), "-c", "echo 'Error parameter of -v.'; echo usage; echo oops >&2; exit 215")
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 215 || ee.Stderr != "oops" {
		t.Fatalf("failure: %v, want exit 215 with stderr oops", err)
	}
	got := Failed("tool", []string{"-c", "..."}, out, err).Error()
	want := `tool -c echo 'Error parameter of -v.'; echo usage; echo oops >&2; exit 215: exit status 215: oops: "Error parameter of -v.", "usage"`
	if got != want {
		t.Errorf("error\n got %s\nwant %s", got, want)
	}
	if got := Failed("tool", []string{"info"}, []byte("\n  first\n"), errors.New("boom")).Error(); got != `tool info: boom: "first"` {
		t.Errorf("plain error: %s", got)
	}
}
