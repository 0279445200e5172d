package devnum

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCharDeviceMajors(t *testing.T) {
	for name, tc := range map[string]struct {
		devices string
		want    map[string]int64
	}{
		"character section only": {
			devices: "Character devices:\n  1 mem\n195 nvidia-frontend\n236 devdrv-cdev\n\nBlock devices:\n  8 sd\n259 blkext\n",
			want:    map[string]int64{"mem": 1, "nvidia-frontend": 195, "devdrv-cdev": 236},
		},
		"numbers no major can have": {
			devices: "Character devices:\n4096 too-big\n-1 negative\n12x bad\n4095 largest\n",
			want:    map[string]int64{"largest": 4095},
		},
		"empty": {devices: "", want: map[string]int64{}},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.WriteFile(filepath.Join(root, "devices"), []byte(tc.devices), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := CharDeviceMajors(root)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("majors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCharDeviceMajorsWithoutProcDevices(t *testing.T) {
	if _, err := CharDeviceMajors(t.TempDir()); err == nil {
		t.Errorf("no error without a devices file")
	}
}
