package workflows

import "go.temporal.io/sdk/temporal"

// Search attributes kept current on every transition; they make the Web UI and
// `temporal workflow list --query` the operator's views. devserver.SearchAttributeKeys
// registers them on the dev server and docker-compose.yml on its server (a devserver test
// checks the two agree); add a new one to both.
var (
	// SAStatus is the lifecycle state: scheduled, republishing, awaiting-outcome, held, dead, delivered, resolved, discarded, expired.
	SAStatus = temporal.NewSearchAttributeKeyKeyword("RetryStatus")
	// SAOriginalQueue is the queue the message failed on.
	SAOriginalQueue = temporal.NewSearchAttributeKeyKeyword("OriginalQueue")
	// SARetryCount is the number of retries had so far.
	SARetryCount = temporal.NewSearchAttributeKeyInt64("RetryCount")
	// SANextRetryTime is when the next republish is due; unset when none is.
	SANextRetryTime = temporal.NewSearchAttributeKeyTime("NextRetryTime")
	// SAErrorCategory is the category of the last failure.
	SAErrorCategory = temporal.NewSearchAttributeKeyKeyword("ErrorCategory")
	// SAPolicy is the retry policy's name.
	SAPolicy = temporal.NewSearchAttributeKeyKeyword("RetryPolicy")
	// SATenant is the tenant the message belongs to.
	SATenant = temporal.NewSearchAttributeKeyKeyword("TenantId")
	// SADeadAt is when the message was dead-lettered; unset while it is not dead.
	SADeadAt = temporal.NewSearchAttributeKeyTime("DeadAt")
	// SAEventType is the message's event type, when the producer gave one.
	SAEventType = temporal.NewSearchAttributeKeyKeyword("EventType")
	// SAProducer is the AMQP user-id the failure was reported with (RabbitMQ validated it),
	// when the report carried one.
	SAProducer = temporal.NewSearchAttributeKeyKeyword("RetryProducer")
)

// Search attributes operators find dead letters by. A run writes them when it takes the
// change finding-attributes (revision.go): in practice the runs started after it, since a run
// that upserted before it answers its first GetVersion with the old branch on replay.
var (
	// SAConsumerService is the consuming service that reported the failure (the
	// RetryMessage's service, the x-service header), when the report named one.
	SAConsumerService = temporal.NewSearchAttributeKeyKeyword("ConsumerService")
	// SAErrorType is the last failure's error type (the reporter's exception class); unset
	// when that failure named none.
	SAErrorType = temporal.NewSearchAttributeKeyKeyword("ErrorType")
	// SADeadLetterIDs holds a dead message's dlqId and dlqUuid, the ids its envelope carries
	// on the dead-letter queue (a list, so that either finds it with one condition); unset
	// while the message is not dead.
	SADeadLetterIDs = temporal.NewSearchAttributeKeyKeywordList("DeadLetterIds")
)
