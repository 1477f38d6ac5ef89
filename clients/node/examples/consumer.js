'use strict';

// A consumer of QUEUE that fails each message FAIL_TIMES times (a transient ECONNRESET; a
// permanent error for a message with the header x-fail: permanent), reporting each failure
// to the scheduler with retry-scheduler-client, then takes it. It prints one JSON line per
// event ({"event":"ready"}, "reported", "processed") for whoever runs it; the e2e tests do.
//
//   RABBITMQ_URL=amqp://guest:guest@127.0.0.1:5672/ QUEUE=orders node examples/consumer.js

const amqp = require('amqplib');
const { reportFailure, transient, permanent } = require('..');

const url = process.env.RABBITMQ_URL || 'amqp://guest:guest@127.0.0.1:5672/';
const queue = process.env.QUEUE || 'orders';
const ingressQueue = process.env.INGRESS_QUEUE || 'retry.scheduled';
const failTimes = Number(process.env.FAIL_TIMES ?? 2);

const print = (event) => process.stdout.write(`${JSON.stringify(event)}\n`);

// handle stands in for the real work.
function handle(msg) {
  const attempt = msg.properties.headers?.['x-retry-count'] ?? 0;
  if (msg.properties.headers?.['x-fail'] === 'permanent') {
    throw permanent(new Error(`order ${msg.properties.messageId} references no customer`));
  }
  if (attempt < failTimes) {
    throw transient(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }));
  }
}

async function main() {
  const conn = await amqp.connect(url);
  const reports = await conn.createConfirmChannel();
  const ch = await conn.createChannel();
  await ch.prefetch(10);
  // At least once: a retry can arrive twice with the same x-retry-key; drop the second.
  const seen = new Set();
  await ch.consume(queue, async (msg) => {
    if (msg === null) return;
    const key = msg.properties.headers?.['x-retry-key'];
    const id = msg.properties.messageId;
    const count = msg.properties.headers?.['x-retry-count'] ?? 0;
    if (key && seen.has(key)) {
      ch.ack(msg);
      return;
    }
    try {
      handle(msg);
    } catch (err) {
      try {
        await reportFailure(reports, msg, queue, err, { ingressQueue, service: 'orders-node', serviceVersion: '1.0.0' });
      } catch (reportErr) {
        print({ event: 'report-failed', id, error: String(reportErr) });
        ch.nack(msg, false, true); // not reported: keep the message
        return;
      }
      ch.ack(msg);
      print({ event: 'reported', id, retry_count: count, retry_key: key ?? '', error: err.message });
      return;
    }
    if (key) seen.add(key);
    ch.ack(msg);
    print({ event: 'processed', id, retry_count: count, retry_key: key ?? '' });
  });
  print({ event: 'ready' });

  const stop = async () => {
    await conn.close();
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
