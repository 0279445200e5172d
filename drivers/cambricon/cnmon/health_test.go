package cnmon

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestInfoHealth(t *testing.T) {
	recorded, err := os.ReadFile("testdata/mlu370-x8-8boards/info-c0.txt")
	if err != nil {
		t.Fatal(err)
	}
	faulty := strings.Replace(string(recorded), ": Good", ": Bad", 1)
	noDriver := strings.Replace(string(recorded), ": Running", ": Stopped", 1)
	var none strings.Builder
	for _, l := range strings.SplitAfter(string(recorded), "\n") {
		if !strings.Contains(l, "Health State") && !strings.Contains(l, ": Good") && !strings.Contains(l, ": Running") {
			none.WriteString(l)
		}
	}
	for _, c := range []struct {
		name    string
		out     string
		want    Health
		healthy bool
	}{
		{"working", string(recorded), Health{Reported: true, Device: "Good", Driver: "Running"}, true},
		{"faulty device", faulty, Health{Reported: true, Device: "Bad", Driver: "Running"}, false},
		{"driver not running", noDriver, Health{Reported: true, Device: "Good", Driver: "Stopped"}, false},
		{"not reported", none.String(), Health{}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			infos, err := ParseInfo([]byte(c.out))
			if err != nil {
				t.Fatal(err)
			}
			got := infos[0].Health()
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if got.Healthy() != c.healthy {
				t.Errorf("healthy %v, want %v", got.Healthy(), c.healthy)
			}
		})
	}
}
