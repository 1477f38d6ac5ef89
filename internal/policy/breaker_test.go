package policy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestBreakerCooldownAt(t *testing.T) {
	b := Breaker{Cooldown: 10 * time.Second, CooldownMax: 35 * time.Second}
	for opens, want := range map[int]time.Duration{-1: 10 * time.Second, 0: 10 * time.Second, 1: 10 * time.Second,
		2: 20 * time.Second, 3: 35 * time.Second, 60: 35 * time.Second} {
		assert.Equal(t, want, b.CooldownAt(opens), "opens %d", opens)
	}
	d := Breaker{}.WithDefaults()
	assert.Equal(t, DefaultBreakerCooldown, d.CooldownAt(1))
	assert.Equal(t, DefaultBreakerCooldownMax, d.CooldownAt(1000), "doubling stops at the maximum: no overflow")
}
