// Package activities holds the workflow's side effects on the broker: the republish of a
// message to its original queue and the dead-letter publish of its envelope.
package activities

import (
	"time"

	"retry-scheduler/message"
)

// Activity names, as registered on the worker.
const (
	RepublishName  = "Republish"
	DeadLetterName = "DeadLetter"
)

// Headers the republish adds.
const (
	HeaderRetryCount = "x-retry-count"
	HeaderRetryKey   = "x-retry-key"
)

// RepublishInput is one retry: the message and the attempt it is.
type RepublishInput struct {
	Message message.Message `json:"message"`
	// Attempt is the x-retry-count to stamp: 1 for the first retry.
	Attempt int `json:"attempt"`
	// Key is the idempotency key x-retry-key, "<message_id>:<n>".
	Key string `json:"key"`
	// ScheduledAt is when the retry was due; the lateness metric is measured from it.
	ScheduledAt time.Time `json:"scheduled_at"`
}

// RepublishResult says when the broker confirmed the republish.
type RepublishResult struct {
	PublishedAt time.Time `json:"published_at"`
}

// DeadLetterInput is one dead-letter publish.
type DeadLetterInput struct {
	Queue    string           `json:"queue"`
	Envelope message.Envelope `json:"envelope"`
}
