package npusmi

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseHealth(t *testing.T) {
	for _, c := range []struct {
		name    string
		out     string
		want    Health
		healthy bool
	}{
		{"recorded healthy chip", string(read(t, "testdata", "health-ok.txt")), Health{Status: HealthOK}, true},
		// The same output as the FaultDiag document prints it, indented
		// with spaces.
		{"space-indented", " Health Status                  : OK\n Error Code                     : NA\n Error Information              : NA\n", Health{Status: HealthOK}, true},
		{"warning", "\tHealth Status                  : Warning\n\tError Code                     : 80E01801\n\tError Information              : node type=SOC, sensor type=Temperature\n",
			Health{Status: HealthWarning, ErrorCodes: []string{"80E01801"}, ErrorInfo: "node type=SOC, sensor type=Temperature"}, true},
		{"alarm with two codes", "\tHealth Status                  : Alarm\n\tError Code                     : 80E01801 80C98009\n\tError Information              : NA\n",
			Health{Status: HealthAlarm, ErrorCodes: []string{"80E01801", "80C98009"}}, false},
		{"critical", "\tHealth Status                  : Critical\n\tError Code                     : 80CB8009\n\tError Information              : NA\n",
			Health{Status: HealthCritical, ErrorCodes: []string{"80CB8009"}}, false},
		{"unknown state", "\tHealth Status                  : Unknown\n", Health{Status: "Unknown"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseHealth([]byte(c.out))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if got.Healthy() != c.healthy {
				t.Errorf("healthy %v, want %v", got.Healthy(), c.healthy)
			}
		})
	}
	for _, bad := range []string{"", "This device does not support querying health.\n", "\tError Code                     : NA\n"} {
		if h, err := ParseHealth([]byte(bad)); err == nil {
			t.Errorf("%q parsed to %+v", bad, h)
		}
	}
}

type fixedRunner struct {
	out  string
	args []string
}

func (r *fixedRunner) Run(_ context.Context, args ...string) ([]byte, error) {
	r.args = args
	return []byte(r.out), nil
}

func TestClientHealthCommand(t *testing.T) {
	r := &fixedRunner{out: string(read(t, "testdata", "health-ok.txt"))}
	h, err := (&Client{Runner: r}).Health(context.Background(), 3, 0)
	if err != nil || !h.Healthy() {
		t.Fatalf("health: %+v, %v", h, err)
	}
	if diff := cmp.Diff([]string{"info", "-t", "health", "-i", "3", "-c", "0"}, r.args); diff != "" {
		t.Errorf("command (-want +got):\n%s", diff)
	}
}
