// The ES module entry: the same functions as the CommonJS one (index.js), which it loads.
import client from './index.js';

export const {
  reportFailure,
  buildRetryMessage,
  transient,
  permanent,
  validation,
  rateLimited,
  CATEGORIES,
  DEFAULT_INGRESS_QUEUE,
  DEFAULT_TIMEOUT_MS,
} = client;
