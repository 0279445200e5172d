package testutil

import (
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/strata-sh/strata/deployments"
)

// ClassLister serves DeviceClasses to a DRA allocator.
type ClassLister map[string]*resourceapi.DeviceClass

// List implements the allocator's DeviceClassLister.
func (l ClassLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, c := range l {
		out = append(out, c)
	}
	return out, nil
}

// Get implements the allocator's DeviceClassLister.
func (l ClassLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("no DeviceClass %s", name)
}

// StrataClasses returns the DeviceClasses the chart ships.
func StrataClasses(tb testing.TB) ClassLister {
	tb.Helper()
	classes, err := deployments.DeviceClassObjects()
	if err != nil {
		tb.Fatal(err)
	}
	out := ClassLister{}
	for _, c := range classes {
		out[c.Name] = c
	}
	return out
}
