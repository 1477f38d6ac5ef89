package broker

import (
	"errors"
	"fmt"
	"log/slog"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DeclareQueues declares durable queues of cfg.QueueType on a connection of its own.
//
// A queue that already exists with other arguments (another queue type, a dead-letter
// exchange set by policy-less declaration, ...) makes the broker answer 406
// PRECONDITION_FAILED; such a queue is accepted as it is once a passive declare shows it
// exists, so that the service starts against queues an operator set up differently.
func DeclareQueues(cfg Config, names ...string) error {
	cfg = cfg.WithDefaults()
	if cfg.QueueType != QueueTypeClassic && cfg.QueueType != QueueTypeQuorum {
		return fmt.Errorf("declare queues: queue type %q is neither %q nor %q", cfg.QueueType, QueueTypeClassic, QueueTypeQuorum)
	}
	conn, err := Dial(cfg)
	if err != nil {
		return fmt.Errorf("declare queues: %w", err)
	}
	defer func() { _ = conn.Close() }()

	var ch *amqp.Channel
	for _, name := range names {
		if name == "" {
			// The broker would invent a name; nobody would ever read from that queue.
			return errors.New("declare queue: empty name")
		}
		if ch == nil || ch.IsClosed() {
			if ch, err = conn.Channel(); err != nil {
				return fmt.Errorf("declare queue %q: open channel: %w", name, err)
			}
		}
		_, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{"x-queue-type": cfg.QueueType})
		if err == nil {
			continue
		}
		var amqpErr *amqp.Error
		if !errors.As(err, &amqpErr) || amqpErr.Code != amqp.PreconditionFailed {
			return fmt.Errorf("declare queue %q: %w", name, err)
		}
		// The 406 closed the channel; check existence on a fresh one.
		if ch, err = conn.Channel(); err != nil {
			return fmt.Errorf("declare queue %q: open channel: %w", name, err)
		}
		if _, perr := ch.QueueDeclarePassive(name, true, false, false, false, nil); perr != nil {
			return fmt.Errorf("declare queue %q: %w (passive declare: %v)", name, amqpErr, perr)
		}
		slog.Default().Warn("queue exists with other arguments; using it as it is",
			"queue", name, "wanted_queue_type", cfg.QueueType, "broker_says", amqpErr.Reason)
	}
	return nil
}
