// Package retryclient reports failed RabbitMQ deliveries to retry-scheduler.
//
// A consumer that fails to process a delivery calls Report with the delivery, the queue it
// consumed it from and the error, then acks the delivery once Report returns nil. The
// scheduler republishes the message to that queue after its policy's delay, with the
// headers x-retry-count (1 for the first retry) and x-retry-key (<message id>:<n>), or
// dead-letters it when the error is permanent or the retries are spent.
//
// The error says how to retry: mark it with Transient, Permanent, RateLimited or
// Validation, or return an error with an HTTPStatus() int method (such as *HTTPError);
// socket errors (ECONNRESET, ETIMEDOUT ...) are recognised in the error's chain. Anything
// else is classified by the scheduler from its text.
//
// Delivery is at least once: a retry can, rarely, arrive twice, always with the same
// x-retry-key. A consumer that must not process a message twice drops a delivery whose key
// it has already processed.
package retryclient
