'use strict';

// Against the real RabbitMQ at RABBITMQ_URL: a report is published, confirmed, and read back
// from a queue the test owns, standing in for the scheduler's ingress.

const test = require('node:test');
const assert = require('node:assert/strict');
const { randomUUID } = require('node:crypto');
const amqp = require('amqplib');
const { reportFailure, transient, permanent } = require('..');

const url = process.env.RABBITMQ_URL || 'amqp://guest:guest@127.0.0.1:5672/';

// open connects for the test; at its end the queues it lists are deleted, then the
// connection closed.
async function open(t) {
  const conn = await amqp.connect(url);
  const queues = [];
  t.after(async () => {
    const c = await conn.createChannel();
    for (const q of queues) await c.deleteQueue(q);
    await conn.close();
  });
  return { conn, owned: (q) => queues.push(q) };
}

// receive takes the next message of queue, unacknowledged.
async function receive(ch, queue, timeoutMs = 10000) {
  let tag;
  let timer;
  try {
    return await new Promise((resolve, reject) => {
      timer = setTimeout(() => reject(new Error(`nothing on ${queue} within ${timeoutMs} ms`)), timeoutMs);
      ch.consume(queue, (msg) => resolve(msg), { noAck: false }).then((ok) => { tag = ok.consumerTag; }, reject);
    });
  } finally {
    clearTimeout(timer);
    if (tag) await ch.cancel(tag);
  }
}

test('a report reaches the ingress, confirmed, with the contract fields', async (t) => {
  const { conn, owned } = await open(t);
  const ch = await conn.createConfirmChannel();
  const prefix = `node-client-${randomUUID()}`;
  const orders = `${prefix}.orders`;
  const ingress = `${prefix}.ingress`;
  for (const q of [orders, ingress]) {
    await ch.assertQueue(q, { durable: false });
    owned(q);
  }

  ch.sendToQueue(orders, Buffer.from('order 1'), {
    messageId: 'o-1', correlationId: 'c-1', contentType: 'text/plain', type: 'order.created',
    headers: { 'x-retry-count': 1, 'x-retry-key': 'o-1:1', traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' },
  });
  await ch.waitForConfirms();
  const msg = await receive(ch, orders);

  const err = transient(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET', status: 503 }));
  await reportFailure(ch, msg, orders, err, { ingressQueue: ingress, service: 'orders-api', serviceVersion: '2.0.0' });
  ch.ack(msg);

  const got = await receive(ch, ingress);
  ch.ack(got);
  assert.equal(got.properties.contentType, 'application/json');
  assert.equal(got.properties.messageId, 'o-1');
  assert.equal(got.properties.deliveryMode, 2);
  const body = JSON.parse(got.content.toString('utf8'));
  assert.match(body.stack_trace, /read ECONNRESET/);
  delete body.stack_trace;
  assert.deepEqual(body, {
    message_id: 'o-1', original_payload: Buffer.from('order 1').toString('base64'), original_queue: orders,
    error_reason: 'read ECONNRESET', retry_count: 1, max_retries: 0, next_retry_at_ms: 0,
    original_headers: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' },
    original_content_type: 'text/plain', correlation_id: 'c-1', event_type: 'order.created', retry_key: 'o-1:1',
    service: 'orders-api', service_version: '2.0.0',
    error_category: 'transient', http_status: 503, error_code: 'ECONNRESET', error_type: 'Error',
  });
});

test('an unroutable report rejects; concurrent reports each get their own answer', async (t) => {
  const { conn, owned } = await open(t);
  const ch = await conn.createConfirmChannel();
  const ingress = `node-client-${randomUUID()}.ingress`;
  const msg = (id) => ({ content: Buffer.from(id), fields: {}, properties: { messageId: id, headers: {} } });

  await assert.rejects(reportFailure(ch, msg('lost'), 'orders', permanent(new Error('x')), { ingressQueue: ingress }), /returned by the broker/);

  await ch.assertQueue(ingress, { durable: false });
  owned(ingress);
  const missing = `${ingress}.missing`;
  const results = await Promise.allSettled([
    reportFailure(ch, msg('a'), 'orders', new Error('x'), { ingressQueue: ingress }),
    reportFailure(ch, msg('b'), 'orders', new Error('x'), { ingressQueue: missing }),
    reportFailure(ch, msg('c'), 'orders', new Error('x'), { ingressQueue: ingress }),
  ]);
  assert.deepEqual(results.map((r) => r.status), ['fulfilled', 'rejected', 'fulfilled']);
  assert.equal((await ch.checkQueue(ingress)).messageCount, 2);
});

test('a plain channel is refused', async (t) => {
  const { conn } = await open(t);
  const ch = await conn.createChannel();
  await assert.rejects(reportFailure(ch, { content: Buffer.alloc(0), properties: {} }, 'q', new Error('x')), /confirm channel/);
});

test('a report carries the user-id it is given, which the broker checks', async (t) => {
  const { conn, owned } = await open(t);
  const ch = await conn.createConfirmChannel();
  const ingress = `node-client-${randomUUID()}.ingress`;
  await ch.assertQueue(ingress, { durable: false });
  owned(ingress);
  const user = decodeURIComponent(new URL(url).username || 'guest');
  const msg = { content: Buffer.from('p'), properties: { messageId: 'u-1', headers: {} }, fields: {} };
  await reportFailure(ch, msg, 'orders', new Error('x'), { ingressQueue: ingress, userId: user });
  const got = await receive(ch, ingress);
  ch.ack(got);
  assert.equal(got.properties.userId, user);
});
