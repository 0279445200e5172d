// Package queueworkers runs the workers of a workqueue that a plugin
// writes the API from, off the scheduling loop.
package queueworkers

import (
	"context"
	"sync"
)

// Run starts workers goroutines that each call next until it reports
// the queue shut down, and once ctx ends shuts the queue down and waits
// for them: a worker finishes the item it is on (ctx is done, so its
// write fails fast) and what is still queued is left, as the scheduler
// is stopping.
func Run(ctx context.Context, workers int, shutDown func(), next func(context.Context) bool) {
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for next(ctx) {
			}
		})
	}
	<-ctx.Done()
	shutDown()
	wg.Wait()
}
