package activities

import (
	"context"
	"fmt"
)

// ListHeldName is the registered name of Activities.ListHeld.
const ListHeldName = "ListHeld"

// ListHeldInput asks for the held retries of one destination.
type ListHeldInput struct {
	Queue string `json:"queue"`
	Limit int    `json:"limit"`
}

// ListHeld lists up to in.Limit held retries of in.Queue, oldest due first: the workflow IDs
// a breaker releases. Without a lister (Held) there are none.
func (a *Activities) ListHeld(ctx context.Context, in ListHeldInput) ([]string, error) {
	if a.Held == nil || in.Limit <= 0 {
		return nil, nil
	}
	ids, err := a.Held.ListHeld(ctx, in.Queue, in.Limit)
	if err != nil {
		return nil, fmt.Errorf("list held retries of %q: %w", in.Queue, err)
	}
	return ids, nil
}
