'use strict';

// retry-scheduler-client: report a failed RabbitMQ delivery (amqplib) to retry-scheduler.
// The consumer calls reportFailure with a confirm channel, the delivery, the queue it came
// from and the error, then acks the delivery once the returned promise resolves.

const DEFAULT_INGRESS_QUEUE = 'retry.scheduled';
const DEFAULT_MAX_REASON_BYTES = 4096;
// The scheduler keeps stack traces up to 8 KiB and refuses a retry-after beyond 30 days.
const MAX_STACK_BYTES = 8192;
const MAX_RETRY_AFTER_MS = 30 * 24 * 3600 * 1000;
// Deeper header values are dropped: a Go consumer closes its connection on tables nested
// more than 32 deep.
const MAX_HEADER_DEPTH = 31;

const CATEGORIES = Object.freeze({
  TRANSIENT: 'transient',
  RATE_LIMITED: 'rate-limited',
  PERMANENT: 'permanent',
  VALIDATION: 'validation',
});

// MAX_RETRY_COUNT is the service's limit on a report's retry count.
const MAX_RETRY_COUNT = 10000;

// Headers that never travel with a retry: the scheduler's own (each republish sets fresh
// ones), the broker's dead-lettering history, routing extras and one failure's detail.
const DENIED_HEADERS = new Set(['cc', 'bcc', 'x-death', 'x-delay', 'user-id', 'x-retry-count', 'x-retry-key', 'x-retry-republished-at', 'x-stack-trace', 'x-http-status', 'x-retry-after']);
const DENIED_PREFIXES = ['x-first-death-', 'x-last-death-', 'x-error-'];

function headerDenied(name) {
  const n = name.toLowerCase();
  return DENIED_HEADERS.has(n) || DENIED_PREFIXES.some((p) => n.startsWith(p));
}

function asError(err) {
  return err instanceof Error ? err : new Error(String(err));
}

function categorize(err, category, retryAfterMs) {
  const e = asError(err);
  e.retryCategory = category;
  if (retryAfterMs > 0) e.retryAfterMs = retryAfterMs;
  return e;
}

/** Marks err as a failure that passes with time: retried with the policy's backoff. */
const transient = (err) => categorize(err, CATEGORIES.TRANSIENT);
/** Marks err as a failure no retry can mend: dead-lettered at once. */
const permanent = (err) => categorize(err, CATEGORIES.PERMANENT);
/** Marks err as a message that failed validation: dead-lettered at once. */
const validation = (err) => categorize(err, CATEGORIES.VALIDATION);
/** Marks err as throttling; retryAfterMs (optional) is the earliest retry the dependency asked for. */
const rateLimited = (err, retryAfterMs) => categorize(err, CATEGORIES.RATE_LIMITED, retryAfterMs);

// causes walks err and its cause chain (bounded: a chain may loop).
function* causes(err) {
  let e = err;
  for (let i = 0; i < 8 && e != null && typeof e === 'object'; i++) {
    yield e;
    e = e.cause;
  }
}

function httpStatus(err) {
  for (const e of causes(err)) {
    const s = e.status ?? e.statusCode ?? e.response?.status;
    if (Number.isInteger(s) && s > 0 && s <= 999) return s;
  }
  return 0;
}

// errorCode is the first Node.js system error code (ECONNRESET, ETIMEDOUT ...) in the chain:
// fetch puts it on the cause.
function errorCode(err) {
  for (const e of causes(err)) {
    if (typeof e.code === 'string' && /^E[A-Z0-9_]+$/.test(e.code)) return e.code;
  }
  return '';
}

function retryAfterMs(err) {
  for (const e of causes(err)) {
    if (Number.isFinite(e.retryAfterMs) && e.retryAfterMs > 0) return Math.min(Math.round(e.retryAfterMs), MAX_RETRY_AFTER_MS);
    const h = e.response?.headers;
    const v = typeof h?.get === 'function' ? h.get('retry-after') : h?.['retry-after'];
    const secs = Number(v);
    if (v != null && v !== '' && Number.isFinite(secs) && secs > 0) return Math.min(secs * 1000, MAX_RETRY_AFTER_MS);
  }
  return 0;
}

// bounded cuts s to at most limit UTF-8 bytes on a character boundary, marking the cut.
function bounded(s, limit) {
  const buf = Buffer.from(s, 'utf8');
  if (buf.length <= limit) return s;
  const mark = '…';
  let cut = Math.max(limit - Buffer.byteLength(mark), 0);
  while (cut > 0 && (buf[cut] & 0xc0) === 0x80) cut--;
  return buf.subarray(0, cut).toString('utf8') + mark;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

// headerValue turns an amqplib header value into JSON: Buffers become text (base64 when not
// UTF-8), timestamps RFC 3339; decimals, non-finite numbers and values nested too deep are
// dropped (undefined).
function headerValue(v, depth) {
  if (depth > MAX_HEADER_DEPTH) return undefined;
  if (v === null || typeof v === 'string' || typeof v === 'boolean') return v;
  if (typeof v === 'number') return Number.isFinite(v) ? v : undefined;
  if (typeof v === 'bigint') return v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= BigInt(Number.MIN_SAFE_INTEGER) ? Number(v) : v.toString();
  if (Buffer.isBuffer(v)) {
    try {
      return utf8.decode(v);
    } catch {
      return v.toString('base64');
    }
  }
  if (v instanceof Date) return v.toISOString();
  if (Array.isArray(v)) return v.map((e) => headerValue(e, depth + 1)).filter((e) => e !== undefined);
  if (typeof v === 'object') {
    if (v['!'] === 'timestamp') return new Date(v.value * 1000).toISOString().replace('.000Z', 'Z');
    if (v['!'] !== undefined) return undefined;
    const out = {};
    for (const [k, e] of Object.entries(v)) {
      const c = headerValue(e, depth + 1);
      if (c !== undefined) out[k] = c;
    }
    return out;
  }
  return undefined;
}

function carriedHeaders(headers) {
  let out;
  for (const [k, v] of Object.entries(headers ?? {})) {
    if (headerDenied(k)) continue;
    const c = headerValue(v, 1);
    if (c === undefined) continue;
    out ??= {};
    out[k] = c;
  }
  return out;
}

function header(headers, name) {
  for (const [k, v] of Object.entries(headers ?? {})) {
    if (k.toLowerCase() === name) return v;
  }
  return undefined;
}

// A count past the service's limit is sent as the limit, past every policy's retries: the
// message is dead-lettered as exhausted instead of starting over or being parked as poison.
function retryCount(headers) {
  const v = header(headers, 'x-retry-count');
  const n = typeof v === 'bigint' ? Number(v) : v;
  return Number.isInteger(n) && n >= 0 ? Math.min(n, MAX_RETRY_COUNT) : 0;
}

function retryKey(headers) {
  const v = header(headers, 'x-retry-key');
  if (typeof v === 'string') return v;
  return Buffer.isBuffer(v) ? v.toString('utf8') : '';
}

// republishedAtMs is when the scheduler republished the retry that failed (its
// x-retry-republished-at, unix milliseconds): it dates the failure for the destination's
// circuit breaker. Undefined when absent or not a date: the scheduler then dates the report
// at its arrival.
function republishedAtMs(headers) {
  let v = header(headers, 'x-retry-republished-at');
  if (typeof v === 'bigint') v = Number(v);
  if (Buffer.isBuffer(v)) v = v.toString('utf8');
  if (typeof v === 'string') v = /^\s*\d+\s*$/.test(v) ? Number(v) : Date.parse(v);
  return Number.isSafeInteger(v) && v > 0 ? v : undefined;
}

/**
 * Builds the RetryMessage (the scheduler's JSON contract) for the delivery msg, consumed from
 * queue, that failed with error.
 */
function buildRetryMessage(msg, queue, error, options = {}) {
  if (typeof queue !== 'string' || queue === '') throw new TypeError('reportFailure: the queue the message came from is required');
  const props = msg.properties ?? {};
  const fields = msg.fields ?? {};
  const err = error == null ? undefined : asError(error);
  const m = {
    message_id: props.messageId ?? '',
    original_payload: Buffer.from(msg.content ?? []).toString('base64'),
    original_queue: queue,
    error_reason: err ? bounded(err.message || String(err), options.maxReasonBytes ?? DEFAULT_MAX_REASON_BYTES) : '',
    retry_count: retryCount(props.headers),
    max_retries: 0,
    next_retry_at_ms: 0,
  };
  const optional = {
    original_headers: carriedHeaders(props.headers),
    original_content_type: props.contentType,
    correlation_id: props.correlationId,
    event_type: props.type,
    retry_key: retryKey(props.headers),
    republished_at_ms: republishedAtMs(props.headers),
    service: options.service,
    service_version: options.serviceVersion,
    policy: options.policy,
    tenant_id: options.tenantId,
  };
  if (options.viaExchange && fields.exchange) {
    // Off by default: through the exchange a retry would reach every queue bound to it.
    optional.original_exchange = fields.exchange;
    optional.original_routing_key = fields.routingKey;
  }
  if (err) {
    Object.assign(optional, {
      error_category: Object.values(CATEGORIES).includes(err.retryCategory) ? err.retryCategory : undefined,
      http_status: httpStatus(err) || undefined,
      error_code: errorCode(err) || undefined,
      retry_after_ms: retryAfterMs(err) || undefined,
      error_type: err.name && err.name !== 'Error' ? err.name : err.constructor?.name,
      stack_trace: options.stackTrace === false || !err.stack ? undefined : bounded(err.stack, MAX_STACK_BYTES),
    });
  }
  for (const [k, v] of Object.entries(optional)) {
    if (v !== undefined && v !== '') m[k] = v;
  }
  return m;
}

// DEFAULT_TIMEOUT_MS is how long a report waits for the broker's confirm unless told
// (options.timeoutMs): a broker that never answers must not hold the consumer for ever.
const DEFAULT_TIMEOUT_MS = 30000;

/**
 * Reports the failed delivery msg, consumed from queue, to the scheduler, publishing on the
 * confirm channel (channel.createConfirmChannel()). Resolves once the broker has confirmed the
 * report; then ack msg. On a rejection, do not ack: nack with requeue so nothing is lost.
 * Rejects when no confirm came within options.timeoutMs (30 s by default).
 */
function reportFailure(channel, msg, queue, error, options = {}) {
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  let timer;
  const confirmed = publishReport(channel, msg, queue, error, options);
  const timedOut = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`retry-scheduler-client: no confirm for the report within ${timeoutMs} ms; do not ack the delivery`)), timeoutMs);
  });
  return Promise.race([confirmed, timedOut]).finally(() => clearTimeout(timer));
}

// publishReport publishes the report and settles on the broker's confirm.
function publishReport(channel, msg, queue, error, options) {
  return new Promise((resolve, reject) => {
    if (!channel || typeof channel.waitForConfirms !== 'function') {
      reject(new TypeError('reportFailure needs a confirm channel (connection.createConfirmChannel())'));
      return;
    }
    let body;
    let m;
    try {
      m = buildRetryMessage(msg, queue, error, options);
      body = Buffer.from(JSON.stringify(m));
    } catch (e) {
      reject(e);
      return;
    }
    const ingress = options.ingressQueue || DEFAULT_INGRESS_QUEUE;
    const pending = { body, returned: undefined };
    const waiting = pendingReports(channel);
    waiting.add(pending);
    const publishOptions = { persistent: true, contentType: 'application/json', mandatory: true };
    if (m.message_id) publishOptions.messageId = m.message_id;
    // The connection's RabbitMQ user, which the broker checks: the scheduler's destinations
    // block binds producers by it.
    if (options.userId) publishOptions.userId = options.userId;
    try {
      channel.publish('', ingress, body, publishOptions, (err) => {
        waiting.delete(pending);
        const r = pending.returned;
        if (err) reject(new Error(`retry-scheduler-client: the broker refused the report to ${ingress}: ${err.message ?? err}`));
        else if (r) reject(new Error(`retry-scheduler-client: report returned by the broker: ${r.fields.replyCode} ${r.fields.replyText} (does queue "${ingress}" exist?)`));
        else resolve();
      });
    } catch (e) {
      waiting.delete(pending);
      reject(e);
    }
  });
}

// pending holds, per channel, the reports awaiting their confirm. The broker returns an
// unroutable report before it confirms it, and amqplib emits both in that order: one
// 'return' listener per channel marks the report it belongs to.
const pending = new WeakMap();

function pendingReports(channel) {
  let waiting = pending.get(channel);
  if (!waiting) {
    waiting = new Set();
    pending.set(channel, waiting);
    channel.on('return', (r) => {
      for (const p of waiting) {
        if (!p.returned && r.content.equals(p.body)) {
          p.returned = r;
          return;
        }
      }
    });
  }
  return waiting;
}

module.exports = {
  reportFailure,
  buildRetryMessage,
  transient,
  permanent,
  validation,
  rateLimited,
  CATEGORIES,
  DEFAULT_INGRESS_QUEUE,
  DEFAULT_TIMEOUT_MS,
};
