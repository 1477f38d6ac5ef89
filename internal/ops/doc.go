// Package ops serves the operators' HTTP surface on the ops port: /healthz, /readyz and
// /metrics (Handler), and the operators' API under /api/ with its web page at / (API).
//
// The API is a queue-shaped view over Temporal: lists come from visibility (the search
// attributes RetryWorkflow keeps current, queried through the visibility package), an item's
// details from the workflow's state query, and actions are the workflow's operator updates and
// signals, so the workflow history is the audit trail. Files by concern:
//
//   - api.go: configuration, routes, error answers;
//   - auth.go, tenant.go: who calls, with which role, and which tenant's items they see;
//   - request.go, filter.go: decoding and checking requests, and the filters they name;
//   - guard.go: the cap on concurrent visibility scans and the bound on a call's time;
//   - list.go, paging.go, delivered.go: the lists, their sorting and keyset paging, and the
//     retries a message gets (policy.MaxRetries, as the workflow decides them);
//   - message.go, delayed.go: one item, read by id;
//   - actions.go, canary.go, jobs.go: single, bulk and filtered actions, the canary replay's
//     settings, and the long actions run as jobs;
//   - edit.go: a retry with an edited message (payload, headers, destination through the
//     destinations guard) and a snooze;
//   - breakers.go: the destinations' breakers, their state (the cooldown from
//     policy.Breaker.CooldownAt, the breaker workflow's own formula) and pause or resume;
//   - openapi.go: the API's OpenAPI description, held to the routes by the tests;
//   - health.go, page.go: the probes, /metrics and the embedded page.
//
// internal/ops/README.md documents the routes for operators.
package ops
