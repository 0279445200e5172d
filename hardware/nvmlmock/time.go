package nvmlmock

import "time"

func timeAfterMs(ms uint32) <-chan time.Time {
	return time.After(time.Duration(ms) * time.Millisecond)
}
