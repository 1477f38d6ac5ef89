'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { buildRetryMessage, permanent, transient, validation, rateLimited } = require('..');

const delivery = (over = {}) => ({
  content: Buffer.from([0, 0xff, 0x78]),
  fields: { exchange: 'orders-x', routingKey: 'eu.orders', deliveryTag: 1 },
  properties: {
    messageId: 'm-1', correlationId: 'corr-7', contentType: 'application/octet-stream', type: 'order.created',
    headers: {
      'X-Retry-Count': 2, 'x-retry-key': 'm-1:2', traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', tracestate: 'v=1',
      'x-death': [{ count: 1 }], 'x-error-reason': 'old', 'x-tenant': 'acme', blob: Buffer.from([0xff]),
      at: { '!': 'timestamp', value: 1700000000 }, price: { '!': 'decimal', value: { places: 2, digits: 1050 } },
    },
  },
  ...over,
});

test('a delivery and its error become the RetryMessage', () => {
  const m = buildRetryMessage(delivery(), 'orders', transient(Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' })), { service: 'svc', serviceVersion: '1.2', policy: 'p', tenantId: 't', stackTrace: false });
  assert.deepEqual(m, {
    message_id: 'm-1', original_payload: 'AP94', original_queue: 'orders', error_reason: 'socket hang up',
    retry_count: 2, max_retries: 0, next_retry_at_ms: 0,
    original_headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', tracestate: 'v=1', 'x-tenant': 'acme', blob: '/w==', at: '2023-11-14T22:13:20Z' },
    original_content_type: 'application/octet-stream', correlation_id: 'corr-7', event_type: 'order.created', retry_key: 'm-1:2',
    service: 'svc', service_version: '1.2', policy: 'p', tenant_id: 't',
    error_category: 'transient', error_code: 'ECONNRESET', error_type: 'Error',
  });
});

test('the exchange travels only with viaExchange', () => {
  assert.equal(buildRetryMessage(delivery(), 'orders', null).original_exchange, undefined);
  const via = buildRetryMessage(delivery(), 'orders', null, { viaExchange: true });
  assert.equal(via.original_exchange, 'orders-x');
  assert.equal(via.original_routing_key, 'eu.orders');
  assert.equal(via.error_reason, '');
});

test('the republish time is copied as republished_at_ms, not as a header', () => {
  for (const [v, want] of [
    [1772366392750, 1772366392750], [1772366392750n, 1772366392750], ['1772366392750', 1772366392750],
    [Buffer.from('1772366392750'), 1772366392750], ['2026-03-01T11:59:52.750Z', 1772366392750],
    ['soon', undefined], [1.5, undefined], [-3, undefined], [true, undefined],
  ]) {
    const m = buildRetryMessage(delivery({ properties: { headers: { 'X-Retry-Republished-At': v, tenant: 'acme' } } }), 'orders', null);
    assert.equal(m.republished_at_ms, want, String(v));
    assert.deepEqual(m.original_headers, { tenant: 'acme' }, String(v));
  }
  assert.equal(buildRetryMessage(delivery(), 'orders', null).republished_at_ms, undefined, 'none without the header');
});

test('a first delivery has count 0 and no key', () => {
  const m = buildRetryMessage({ content: Buffer.alloc(0), fields: {}, properties: { headers: {} } }, 'q', new Error('x'));
  assert.equal(m.retry_count, 0);
  assert.equal(m.retry_key, undefined);
  assert.equal(m.original_payload, '');
  assert.equal(m.message_id, '');
  assert.equal(m.original_headers, undefined);
});

test('HTTP status from status, statusCode or response.status; retry-after', () => {
  assert.equal(buildRetryMessage(delivery(), 'q', Object.assign(new Error('x'), { status: 503 })).http_status, 503);
  assert.equal(buildRetryMessage(delivery(), 'q', Object.assign(new Error('x'), { statusCode: 429 })).http_status, 429);
  const axiosLike = Object.assign(new Error('x'), { response: { status: 429, headers: { 'retry-after': '7' } } });
  const m = buildRetryMessage(delivery(), 'q', axiosLike);
  assert.equal(m.http_status, 429);
  assert.equal(m.retry_after_ms, 7000);
  assert.equal(buildRetryMessage(delivery(), 'q', Object.assign(new Error('x'), { status: 1000 })).http_status, undefined);
});

test('error code from the cause chain (fetch)', () => {
  const err = new TypeError('fetch failed', { cause: Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' }) });
  const m = buildRetryMessage(delivery(), 'q', err);
  assert.equal(m.error_code, 'ECONNREFUSED');
  assert.equal(m.error_type, 'TypeError');
  assert.match(m.stack_trace, /TypeError: fetch failed/);
  assert.equal(buildRetryMessage(delivery(), 'q', Object.assign(new Error('x'), { code: 'ERR_INVALID_ARG' })).error_code, 'ERR_INVALID_ARG');
  assert.equal(buildRetryMessage(delivery(), 'q', Object.assign(new Error('x'), { code: 42 })).error_code, undefined);
});

test('category helpers', () => {
  assert.equal(buildRetryMessage(delivery(), 'q', permanent(new Error('bad'))).error_category, 'permanent');
  assert.equal(buildRetryMessage(delivery(), 'q', validation('not an order')).error_reason, 'not an order');
  const r = buildRetryMessage(delivery(), 'q', rateLimited(new Error('slow down'), 90 * 24 * 3600 * 1000));
  assert.equal(r.error_category, 'rate-limited');
  assert.equal(r.retry_after_ms, 30 * 24 * 3600 * 1000, "capped at the scheduler's 30 days");
  assert.equal(buildRetryMessage(delivery(), 'q', Object.assign(new Error('x'), { retryCategory: 'bogus' })).error_category, undefined);
});

test('the reason is bounded on a character boundary', () => {
  const m = buildRetryMessage(delivery(), 'q', new Error('é'.repeat(3000)));
  assert.ok(Buffer.byteLength(m.error_reason) <= 4096);
  assert.ok(m.error_reason.endsWith('…'));
  assert.ok(!m.error_reason.includes('\ufffd'));
  assert.equal(buildRetryMessage(delivery(), 'q', new Error('abcdef'), { maxReasonBytes: 5 }).error_reason, 'ab…');
});

test('junk retry counts read as 0; the queue is required', () => {
  for (const v of ['3', -1, 2.5, null]) {
    assert.equal(buildRetryMessage({ content: Buffer.alloc(0), properties: { headers: { 'x-retry-count': v } } }, 'q', null).retry_count, 0, String(v));
  }
  assert.throws(() => buildRetryMessage(delivery(), '', null), /queue/);
});

test('a retry count past the service limit is sent as the limit, not as 0', () => {
  for (const v of [10001, 2 ** 40, 2n ** 63n]) {
    assert.equal(buildRetryMessage({ content: Buffer.alloc(0), properties: { headers: { 'x-retry-count': v } } }, 'q', null).retry_count, 10000, String(v));
  }
});
