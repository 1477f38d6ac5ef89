package broker

import (
	"errors"
	"fmt"
	"log/slog"

	amqp "github.com/rabbitmq/amqp091-go"
)

// IngressDeliveryLimit is the x-delivery-limit of a quorum ingress queue the service
// declares: RabbitMQ 4's default for every quorum queue, set explicitly so that a 3.x broker
// behaves the same. The bridge spends no delivery while Temporal is down (it holds them
// unacked); only a bridge that dies or loses its connection with deliveries in hand returns
// them. A message that does that 20 times (one that breaks the client, say) is dead-lettered.
const IngressDeliveryLimit = 20

// QueueArgs are the arguments of a queue the service declares: its type.
func QueueArgs(cfg Config) amqp.Table {
	return amqp.Table{"x-queue-type": cfg.WithDefaults().QueueType}
}

// IngressArgs are QueueArgs plus a dead-letter route to deadLetterQueue, so that a message
// the broker gives up on (over a quorum queue's delivery limit, expired by a policy's TTL) is
// kept on the dead-letter queue, never dropped. A quorum queue also gets the delivery limit
// and at-least-once dead-lettering (the broker keeps the message until the dead-letter queue
// confirms it; that mode needs overflow reject-publish).
func IngressArgs(cfg Config, deadLetterQueue string) amqp.Table {
	args := QueueArgs(cfg)
	args["x-dead-letter-exchange"] = ""
	args["x-dead-letter-routing-key"] = deadLetterQueue
	if cfg.WithDefaults().QueueType == QueueTypeQuorum {
		args["x-delivery-limit"] = int64(IngressDeliveryLimit)
		args["x-dead-letter-strategy"] = "at-least-once"
		args["x-overflow"] = "reject-publish"
	}
	return args
}

// Queue is a queue to declare: its name and arguments.
type Queue struct {
	Name string
	Args amqp.Table
}

// Topology is the service's queues: the dead-letter queue, every other configured
// dead-letter queue (a route's or a policy's), with the same arguments, then the ingress
// queue dead-lettering into the first. Empty and repeated names are left out.
func Topology(cfg Config, ingress, deadLetterQueue string, otherDeadLetterQueues ...string) []Queue {
	qs := []Queue{{Name: deadLetterQueue, Args: QueueArgs(cfg)}}
	seen := map[string]bool{deadLetterQueue: true, ingress: true}
	for _, n := range otherDeadLetterQueues {
		if n == "" || seen[n] {
			continue
		}
		seen[n] = true
		qs = append(qs, Queue{Name: n, Args: QueueArgs(cfg)})
	}
	return append(qs, Queue{Name: ingress, Args: IngressArgs(cfg, deadLetterQueue)})
}

// DeclareQueues declares durable queues of cfg.QueueType with no other argument (see Declare).
func DeclareQueues(cfg Config, logger *slog.Logger, names ...string) error {
	qs := make([]Queue, 0, len(names))
	for _, n := range names {
		qs = append(qs, Queue{Name: n, Args: QueueArgs(cfg)})
	}
	return Declare(cfg, logger, qs...)
}

// Declare declares durable queues, in order, on a connection of its own.
//
// A queue that already exists with other arguments (another queue type, no dead-letter
// route, ...) makes the broker answer 406 PRECONDITION_FAILED; such a queue is accepted as it
// is once a passive declare shows it exists, so that the service starts against queues an
// operator set up differently, and a warning on logger (nil: none) says what it lacks.
func Declare(cfg Config, logger *slog.Logger, queues ...Queue) error {
	cfg = cfg.WithDefaults()
	if logger == nil {
		logger = discard
	}
	if cfg.QueueType != QueueTypeClassic && cfg.QueueType != QueueTypeQuorum {
		return fmt.Errorf("declare queues: queue type %q is neither %q nor %q", cfg.QueueType, QueueTypeClassic, QueueTypeQuorum)
	}
	conn, err := Dial(cfg)
	if err != nil {
		return fmt.Errorf("declare queues: %w", err)
	}
	defer func() { _ = conn.Close() }()

	var ch *amqp.Channel
	for _, q := range queues {
		name := q.Name
		if name == "" {
			// The broker would invent a name; nobody would ever read from that queue.
			return errors.New("declare queue: empty name")
		}
		if ch == nil || ch.IsClosed() {
			if ch, err = conn.Channel(); err != nil {
				return fmt.Errorf("declare queue %q: open channel: %w", name, err)
			}
		}
		_, err := ch.QueueDeclare(name, true, false, false, false, q.Args)
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
		logger.Warn("queue exists with other arguments; using it as it is (a dead-letter route, if wanted, can be set by policy: see the README)",
			"queue", name, "wanted_arguments", fmt.Sprint(q.Args), "broker_says", amqpErr.Reason)
	}
	return nil
}
