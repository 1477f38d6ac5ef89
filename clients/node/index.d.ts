import type { ConfirmChannel, ConsumeMessage, GetMessage } from 'amqplib';

export interface ReportOptions {
  /** The scheduler's ingress queue; 'retry.scheduled' by default. */
  ingressQueue?: string;
  service?: string;
  serviceVersion?: string;
  policy?: string;
  tenantId?: string;
  /** Republish retries through the delivery's exchange and routing key (off: straight to the queue). */
  viaExchange?: boolean;
  /** Bound on the reason (the error's message) in UTF-8 bytes; 4096 by default. */
  maxReasonBytes?: number;
  /** Send the error's stack (cut at 8 KiB); true by default. */
  stackTrace?: boolean;
  /** The report's AMQP user-id: the connection's RabbitMQ user, by which the scheduler binds producers. */
  userId?: string;
  /** How long to wait for the broker's confirm before rejecting; 30000 ms by default. */
  timeoutMs?: number;
}

export type RetryMessage = Record<string, unknown> & {
  message_id: string;
  original_payload: string;
  original_queue: string;
  error_reason: string;
  retry_count: number;
  max_retries: number;
  next_retry_at_ms: number;
};

export declare const CATEGORIES: Readonly<{ TRANSIENT: 'transient'; RATE_LIMITED: 'rate-limited'; PERMANENT: 'permanent'; VALIDATION: 'validation' }>;
export declare const DEFAULT_INGRESS_QUEUE: 'retry.scheduled';
export declare const DEFAULT_TIMEOUT_MS: 30000;

export declare function reportFailure(channel: ConfirmChannel, msg: ConsumeMessage | GetMessage, queue: string, error: unknown, options?: ReportOptions): Promise<void>;
export declare function buildRetryMessage(msg: ConsumeMessage | GetMessage, queue: string, error: unknown, options?: ReportOptions): RetryMessage;
export declare function transient(err: unknown): Error;
export declare function permanent(err: unknown): Error;
export declare function validation(err: unknown): Error;
export declare function rateLimited(err: unknown, retryAfterMs?: number): Error;
