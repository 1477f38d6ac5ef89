package workflows

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStatusTerminal(t *testing.T) {
	for _, s := range []Status{StatusDelivered, StatusResolved, StatusDiscarded, StatusExpired} {
		require.True(t, s.Terminal(), s)
	}
	for _, s := range []Status{StatusScheduled, StatusRepublishing, StatusAwaitingOutcome, StatusHeld, StatusDead} {
		require.False(t, s.Terminal(), s)
	}
}
