package ops

import (
	"context"
	"time"

	"golang.org/x/sync/errgroup"
)

// readEach calls read for each index below n, enrichParallel at a time, each under a context
// that ends after timeout, and returns when all have returned. read records its own failure:
// a row that cannot be read must not stop the others.
func readEach(ctx context.Context, n int, timeout time.Duration, read func(ctx context.Context, i int)) {
	var g errgroup.Group
	g.SetLimit(enrichParallel)
	for i := range n {
		g.Go(func() error {
			rctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			read(rctx, i)
			return nil
		})
	}
	_ = g.Wait()
}
