package bridge

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"mime"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// Sources of a FailureReport (FailureReport.Source).
const (
	SourceRetryMessage = "retry-message"
	SourceDeadLetter   = "dead-letter"
	// SourcePoison marks the report that parks a poison or oversize delivery (see park.go).
	SourcePoison = "poison"
)

// Limits of the decoder. Values past them are poison: they are bugs or attacks, not failures
// worth retrying, and they would otherwise travel into every workflow history.
const (
	// DefaultMaxMessageBytes keeps a report well under Temporal's 2 MB payload limit.
	DefaultMaxMessageBytes = 512 << 10
	// MaxRetryAfter bounds retry_after_ms and x-retry-after.
	MaxRetryAfter = 30 * 24 * time.Hour
	// maxNameLen is AMQP's short-string limit: names, most properties, field-table keys.
	maxNameLen = 255
	// maxKeywordLen is the longest value of a Keyword search attribute: Temporal's SQL
	// visibility stores keep them at VARCHAR(255).
	maxKeywordLen = 255
)

// Kinds of PoisonError; they are also the envelope's DeadReason.
const (
	KindPoison   = "poison"
	KindOversize = "oversize"
)

// PoisonError says a delivery can never become a FailureReport: retrying it cannot help, so
// the bridge dead-letters it with Reason instead of requeueing it forever.
type PoisonError struct {
	// Kind is KindPoison or KindOversize.
	Kind string
	// Reason is a sentence naming the offending field, for the envelope's deadDetail.
	Reason string
	// OriginalQueue and MessageID are what could be parsed before the problem, if anything.
	OriginalQueue string
	MessageID     string
}

func (e *PoisonError) Error() string {
	return e.Kind + " message: " + e.Reason
}

func poisonf(format string, args ...any) *PoisonError {
	return &PoisonError{Kind: KindPoison, Reason: fmt.Sprintf(format, args...)}
}

// PolicyResolver picks the policy and dead-letter queue for a message's origin and an
// optional per-message policy name, and classifies failures by the operator's rules;
// *policy.Catalog implements it.
type PolicyResolver interface {
	Choose(o policy.Origin, override string) (p policy.Policy, deadLetterQueue string, note string)
	RuleCategory(o policy.Origin, f policy.Failure, errorType string) (cat policy.Category, rule string, ok bool)
}

// DecodeOptions configure Decode. The zero value works: every field has a default.
type DecodeOptions struct {
	// MaxMessageBytes is the largest body accepted. Defaults to DefaultMaxMessageBytes.
	MaxMessageBytes int
	// Resolver picks the policy. Defaults to policy.NewCatalog() (the built-ins).
	Resolver PolicyResolver
	// DefaultDeadLetterQueue is used when the resolver names none. Defaults to "manual-review.pending".
	DefaultDeadLetterQueue string
	// AllowHeaders, when not nil, lists the only original headers kept (case-insensitive).
	// The deny list applies either way.
	AllowHeaders []string
	// Now is the clock for ReportedAt and HTTP-date Retry-After values. Defaults to time.Now.
	Now func() time.Time
	// Guard says where the scheduler may republish and what each producer may ask; a report
	// outside it is poison. Config sets it (see Config.withDefaults); left nil, it is the
	// Resolver's destinations when the Resolver is a *policy.Catalog, else the secure
	// default, with DefaultDeadLetterQueue (and the catalog's dead-letter queues) as the
	// scheduler's own queues.
	Guard *policy.Guard
}

// DefaultDeadLetterQueue is the manual-review queue: where a message goes when retrying cannot
// help and its route names no dead-letter queue of its own.
const DefaultDeadLetterQueue = "manual-review.pending"

func (o DecodeOptions) withDefaults() DecodeOptions {
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.Resolver == nil {
		o.Resolver = policy.NewCatalog()
	}
	if o.DefaultDeadLetterQueue == "" {
		o.DefaultDeadLetterQueue = DefaultDeadLetterQueue
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Guard == nil {
		o.Guard = defaultGuard(o.Resolver, "", o.DefaultDeadLetterQueue)
	}
	return o
}

// defaultGuard is the guard of resolver's destinations (the secure default unless it is a
// *policy.Catalog with a destinations block) with ingress, deadLetterQueue, others and the
// catalog's dead-letter queues as the scheduler's own.
func defaultGuard(resolver PolicyResolver, ingress, deadLetterQueue string, others ...string) *policy.Guard {
	c, ok := resolver.(*policy.Catalog)
	if !ok || c == nil {
		c = &policy.Catalog{}
	}
	return c.Guard(ingress, deadLetterQueue, others...)
}

// Delivery is the part of an amqp.Delivery that Decode reads, so that decoding is testable
// without a broker.
type Delivery struct {
	Body            []byte
	Headers         amqp.Table
	ContentType     string
	ContentEncoding string
	MessageID       string
	CorrelationID   string
	Type            string
	AppID           string
	ReplyTo         string
	Priority        uint8
	Timestamp       time.Time
	Exchange        string
	RoutingKey      string
	// UserID is the AMQP user-id property, which RabbitMQ checks against the publishing
	// connection's user: the producer, where it says who it is.
	UserID string
	// Redelivered is the AMQP redelivered flag: the broker delivered it before.
	Redelivered bool
}

// DeliveryFrom copies the fields Decode reads.
func DeliveryFrom(d amqp.Delivery) Delivery {
	return Delivery{
		Body:            d.Body,
		Headers:         d.Headers,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		MessageID:       d.MessageId,
		CorrelationID:   d.CorrelationId,
		Type:            d.Type,
		AppID:           d.AppId,
		ReplyTo:         d.ReplyTo,
		Priority:        d.Priority,
		Timestamp:       d.Timestamp,
		Exchange:        d.Exchange,
		RoutingKey:      d.RoutingKey,
		UserID:          d.UserId,
		Redelivered:     d.Redelivered,
	}
}

// reasonNotRetryMessage is the reason for a delivery that is neither form.
const reasonNotRetryMessage = "not a RetryMessage and no x-death header"

// Decode turns a delivery from the ingress queue into a FailureReport. A delivery it can
// never accept is a *PoisonError; no other error is returned.
//
// The two forms are told apart by the message itself: a delivery with an x-death header is a
// dead-lettered service message (its body is the original payload, whatever its content
// type), unless its body is a JSON RetryMessage that was dead-lettered on its way here (a
// delay queue, say); otherwise the content type selects JSON or protobuf RetryMessage, and a
// delivery without a content type is a RetryMessage if it is a JSON object with original_queue.
func Decode(d Delivery, opts DecodeOptions) (message.FailureReport, error) {
	opts = opts.withDefaults()
	if len(d.Body) > opts.MaxMessageBytes {
		return message.FailureReport{}, &PoisonError{
			Kind:   KindOversize,
			Reason: fmt.Sprintf("message body is %d bytes, over the limit of %d bytes", len(d.Body), opts.MaxMessageBytes),
			// Enough to name the message in the envelope; a full parse of an oversize body is what the limit avoids.
			MessageID:     d.MessageID,
			OriginalQueue: xDeathQueueHint(d.Headers),
		}
	}

	mediaType := mediaType(d.ContentType)
	var (
		dec decoded
		err error
	)
	_, hasXDeath := d.Headers[message.HeaderDeath]
	switch {
	case hasXDeath && (mediaType == "" || isJSON(mediaType)) && looksLikeRetryMessage(d.Body):
		dec, err = decodeJSON(d, opts)
	case hasXDeath:
		dec, err = decodeXDeath(d, opts)
	case isJSON(mediaType):
		dec, err = decodeJSON(d, opts)
	case isProtobuf(mediaType):
		dec, err = decodeProtobuf(d, opts)
	case mediaType == "" && looksLikeRetryMessage(d.Body):
		dec, err = decodeJSON(d, opts)
	default:
		err = &PoisonError{Kind: KindPoison, Reason: reasonNotRetryMessage}
	}
	var rep message.FailureReport
	if err == nil {
		rep = finish(dec.rep, dec.policy, dec.rawID, opts)
		if pe := accept(&rep, d, opts); pe != nil {
			pe.OriginalQueue, pe.MessageID = rep.Message.OriginalQueue, rep.Message.MessageID
			err = pe
		}
	}
	if err != nil {
		var pe *PoisonError
		if errors.As(err, &pe) && pe.MessageID == "" {
			pe.MessageID = d.MessageID
		}
		return message.FailureReport{}, err
	}
	return rep, nil
}

// reportDigest identifies a report's bytes: a redelivery of a report has the same.
func reportDigest(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:16])
}

// accept finishes a decoded report with what every form shares, and refuses what no form
// may carry: a short string AMQP cannot encode, headers that could not be republished,
// values too long for a search attribute, and a destination the operator does not allow.
func accept(rep *message.FailureReport, d Delivery, opts DecodeOptions) *PoisonError {
	m := &rep.Message
	// A Keyword must be UTF-8 (an AMQP string header or the type property need not be).
	m.EventType = strings.ToValidUTF8(m.EventType, "\uFFFD")
	m.Producer = strings.ToValidUTF8(d.UserID, "\uFFFD")
	rep.Redelivered, rep.Digest = d.Redelivered, reportDigest(d.Body)
	if pe := checkShortStrings(*m); pe != nil {
		return pe
	}
	// headersize.go: a report whose headers could never be republished is poison now,
	// not a publish that fails for a day.
	if pe := headersTooLarge(m.Headers); pe != nil {
		return pe
	}
	if pe := checkKeywords(*m); pe != nil {
		return pe
	}
	return checkDestination(*rep, opts.Guard)
}

// checkKeywords refuses values that travel into Keyword search attributes and would not fit:
// Temporal's SQL visibility stores would refuse the write, for ever.
func checkKeywords(m message.Message) *PoisonError {
	for _, k := range []struct{ name, v string }{{"tenant id", m.TenantID}, {"event type", m.EventType}} {
		if n := len(k.v); n > maxKeywordLen {
			return poisonf("%s is %d bytes long, over the limit of %d", k.name, n, maxKeywordLen)
		}
	}
	return nil
}

// setErrorDetail puts the reporter's exception class and stack trace on rep, cut to their
// bounds (a long trace is still worth its first frames: not poison), and returns notes on
// what was cut.
func setErrorDetail(rep *message.FailureReport, errorType, stackTrace string) []string {
	var notes []string
	if n := len(errorType); n > message.MaxErrorTypeBytes {
		errorType = message.Truncate(errorType, message.MaxErrorTypeBytes)
		notes = append(notes, fmt.Sprintf("error type cut from %d to %d bytes", n, message.MaxErrorTypeBytes))
	}
	if n := len(stackTrace); n > message.MaxStackTraceBytes {
		stackTrace = message.Truncate(stackTrace, message.MaxStackTraceBytes)
		notes = append(notes, fmt.Sprintf("stack trace cut from %d to %d bytes", n, message.MaxStackTraceBytes))
	}
	rep.ErrorType = strings.ToValidUTF8(errorType, "\uFFFD")
	rep.StackTrace = strings.ToValidUTF8(stackTrace, "\uFFFD")
	return notes
}

// decoded is what a form's decoder read: the report, the policy it names and the message id
// as sent. Decode finishes it (finish) and checks it (accept), once for every form.
type decoded struct {
	rep    message.FailureReport
	policy string
	rawID  string
}

// finish resolves the policy and fills what every form shares.
func finish(rep message.FailureReport, policyName, rawID string, opts DecodeOptions) message.FailureReport {
	m := &rep.Message
	usable := rawID
	if !utf8.ValidString(rawID) {
		// The history would coerce it to UTF-8: another id than the one reported.
		usable = ""
	}
	m.MessageID = message.MessageIDOrFallback(usable, m.OriginalQueue, m.Payload)
	if rawID != "" && m.MessageID != rawID {
		rep.Notes = append(rep.Notes, fmt.Sprintf("message id unusable (empty, over %d bytes, not UTF-8 or with control characters); using fallback %s", message.MaxMessageIDLen, m.MessageID))
	} else if rawID == "" {
		rep.Notes = append(rep.Notes, "message has no id; using fallback "+m.MessageID)
	}
	if m.OriginalExchange == "" {
		// The default exchange routes by queue name; any other key would miss the queue.
		m.OriginalRoutingKey = ""
	}
	origin := policy.Origin{Queue: m.OriginalQueue, Service: rep.Service, EventType: m.EventType}
	// Classified here, where the report is built, not in the workflow: the workflow takes the
	// report's category as given, so a rule changes what new reports say, never how a
	// recorded run replays.
	if cat, rule, ok := opts.Resolver.RuleCategory(origin, rep.Failure, rep.ErrorType); ok {
		rep.Failure.Category = string(cat)
		rep.Notes = append(rep.Notes, fmt.Sprintf("classified %s by the policy file's %s", cat, rule))
	}
	p, dlq, note := opts.Resolver.Choose(origin, policyName)
	rep.Policy = p
	if ceiling := p.RetriesCeiling(); rep.MaxRetries > ceiling {
		rep.Notes = append(rep.Notes, fmt.Sprintf("max_retries %d capped to policy %q's ceiling of %d", rep.MaxRetries, p.Name, ceiling))
		rep.MaxRetries = ceiling
	}
	rep.DeadLetterQueue = dlq
	if rep.DeadLetterQueue == "" {
		rep.DeadLetterQueue = opts.DefaultDeadLetterQueue
	}
	if note != "" {
		rep.Notes = append(rep.Notes, note)
	}
	rep.ReportedAt = opts.Now()
	return rep
}

func mediaType(contentType string) string {
	if contentType == "" {
		return ""
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		// A malformed parameter should not hide an otherwise plain type.
		mt, _, _ = strings.Cut(contentType, ";")
	}
	return strings.ToLower(strings.TrimSpace(mt))
}

func isJSON(mt string) bool {
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

func isProtobuf(mt string) bool {
	switch mt {
	case "application/x-protobuf", "application/protobuf", "application/vnd.google.protobuf", "application/x-google-protobuf":
		return true
	}
	return false
}

func checkCount(field string, v int64) *PoisonError {
	if v < 0 {
		return poisonf("%s is negative (%d)", field, v)
	}
	if v > message.MaxRetryCount {
		return poisonf("%s is %d, over the limit of %d", field, v, message.MaxRetryCount)
	}
	return nil
}

// parseInteger reads a decimal integer, or a number with an integral value ("3.0", "1e3"),
// since JSON does not tell integers from floats.
func parseInteger(s string) (int64, bool) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, true
	}
	f, ok := parseDecimal(s)
	if !ok {
		return 0, false
	}
	return integral(f)
}

// parseDecimal reads a number in JSON's syntax, which encoding/json checks: strconv.ParseFloat
// alone would also take hex, underscores, "Inf" and "NaN".
func parseDecimal(s string) (float64, bool) {
	if s == "" || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) || !json.Valid([]byte(s)) {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// truncate cuts s to n bytes for an error message, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
