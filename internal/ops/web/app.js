// The operators' page: the destinations' breakers, the retry queue, the dead letters and the
// recently delivered over the JSON API (internal/ops/README.md), no framework, no build.
// Every value from the API is written with textContent, never as HTML.
'use strict';

const TOKEN_KEY = 'retry-scheduler-token';
const CATEGORIES = ['transient', 'rate-limited', 'permanent', 'validation', 'client', 'configuration', 'unknown'];
const REFRESH_MS = 10000;

const $ = (sel, root = document) => root.querySelector(sel);
const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

let me = null; // {name, role, tenant, auth}

class APIError extends Error {
  constructor(status, message, body) { super(message); this.status = status; this.body = body; }
}

async function api(method, path, body) {
  const headers = { 'Accept': 'application/json' };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers['Authorization'] = 'Bearer ' + token;
  // Every state-changing call is JSON, with or without a body: the API refuses any other.
  if (method !== 'GET') headers['Content-Type'] = 'application/json';
  const resp = await fetch('/api/' + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  let data = null;
  try { data = await resp.json(); } catch (_) { /* not JSON */ }
  if (resp.status === 401) {
    showLogin((data && data.error) || 'Sign in with an API token.');
    throw new APIError(401, (data && data.error) || 'unauthorized', data);
  }
  if (!resp.ok) throw new APIError(resp.status, (data && data.error) || resp.statusText, data);
  return data;
}

// ---- sign in --------------------------------------------------------------------------

function showLogin(msg) {
  $('#app').hidden = true;
  $('#login').hidden = false;
  $('#sign-out').hidden = true;
  $('#whoami').textContent = '';
  $('#login-error').textContent = msg || '';
  $('#token-input').focus();
}

async function start() {
  try {
    me = await api('GET', 'whoami');
  } catch (e) {
    if (e.status !== 401) showLogin('Cannot reach the API: ' + e.message);
    return;
  }
  $('#login').hidden = true;
  $('#login-error').textContent = '';
  $('#app').hidden = false;
  $('#sign-out').hidden = me.auth === 'off';
  $('#whoami').textContent = me.name + ' (' + me.role + (me.tenant ? ', tenant ' + me.tenant : '') + ')';
  const canAct = me.role === 'operator' || me.role === 'admin';
  $$('.act').forEach(el => { el.hidden = !canAct; });
  $$('.admin').forEach(el => { el.hidden = me.role !== 'admin'; });
  // Breakers hold every tenant's retries to a destination: unscoped operators only.
  $('#destinations').hidden = !(canAct && !me.tenant);
  await refreshAll();
}

// ---- tables ---------------------------------------------------------------------------

const tables = {
  rq: { path: 'retry-queue', kind: 'retry', section: '#retry-queue', table: '#rq-table', empty: '#rq-empty', count: '#rq-count', filters: '#rq-filters', pages: [''], selected: new Set() },
  dl: { path: 'dead-letters', kind: 'dead', section: '#dead-letters', table: '#dl-table', empty: '#dl-empty', count: '#dl-count', filters: '#dl-filters', pages: [''], selected: new Set() },
  dv: { path: 'delivered', kind: 'delivered', section: '#delivered', table: '#dv-table', empty: '#dv-empty', count: '#dv-count', filters: '#dv-filters', pages: [''], selected: new Set() },
};

function filterParams(t) {
  const p = new URLSearchParams();
  for (const el of $(t.filters).elements) {
    if (!el.name || !el.value) continue;
    let v = el.value.trim();
    if (el.type === 'datetime-local') v = new Date(v).toISOString();
    if (v) p.set(el.name, v);
  }
  return p;
}

async function load(t) {
  const p = filterParams(t);
  const token = t.pages[t.pages.length - 1];
  if (token) p.set('next_page_token', token);
  const data = await api('GET', t.path + '?' + p.toString());
  t.next = data.next_page_token || '';
  render(t, data);
}

function fmtTime(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  const s = Math.round((d.getTime() - Date.now()) / 1000);
  const abs = Math.abs(s);
  if (abs < 5) return 'just now';
  const rel = abs < 60 ? abs + 's' : abs < 3600 ? Math.round(abs / 60) + 'm' : abs < 86400 ? Math.round(abs / 3600) + 'h' : Math.round(abs / 86400) + 'd';
  return (s >= 0 ? 'in ' + rel : rel + ' ago');
}

function cell(tr, text, cls, title) {
  const td = document.createElement('td');
  td.textContent = text == null ? '' : String(text);
  if (cls) td.className = cls;
  if (title) td.title = title;
  tr.appendChild(td);
  return td;
}

// viewLog links to the item's workflow history in the Temporal Web UI (when configured).
function viewLog(url) {
  const a = document.createElement('a');
  a.className = 'view-log';
  a.textContent = 'View log';
  a.href = url;
  a.target = '_blank';
  a.rel = 'noopener noreferrer';
  return a;
}

function fmtAbs(iso) {
  return iso ? new Date(iso).toLocaleString() : '';
}

// fmtShort is fmtAbs to the minute, for a narrow column (the title has the time whole).
function fmtShort(iso) {
  return iso ? new Date(iso).toLocaleString(undefined, { dateStyle: 'short', timeStyle: 'short' }) : '';
}

function button(label, onClick) {
  const b = document.createElement('button');
  b.type = 'button';
  b.textContent = label;
  b.addEventListener('click', onClick);
  return b;
}

// classed gives el a class, for the newer row actions (tests find them by it).
function classed(el, name) {
  el.className = name;
  return el;
}

// ID_TAIL is how many of an ID's last characters its cell always shows: an ID too long for
// the cell is cut in the middle, where IDs that share a prefix (an event name, a queue) differ
// least.
const ID_TAIL = 8;

// idCell writes an ID in two parts, the head cut short with an ellipsis when the cell is too
// narrow and the tail always shown; the cell's text stays the whole ID.
function idCell(tr, text, title) {
  const td = cell(tr, '', 'id', title || text);
  if (text.length <= 2 * ID_TAIL) {
    td.textContent = text;
    return td;
  }
  const head = document.createElement('span');
  head.className = 'id-head';
  head.textContent = text.slice(0, -ID_TAIL);
  const tail = document.createElement('span');
  tail.className = 'id-tail';
  tail.textContent = text.slice(-ID_TAIL);
  td.append(head, tail);
  return td;
}

// errCell writes the last error in at most two lines; the title has it whole, after its type.
function errCell(tr, text, type) {
  const td = cell(tr, '', 'err', [type, text].filter(Boolean).join(': '));
  const clamp = document.createElement('div');
  clamp.className = 'clamp';
  clamp.textContent = text;
  td.appendChild(clamp);
  return td;
}

// titled gives each cell of tr that has text and no title its text as title: the tables cut
// long values short, and the title shows them whole.
function titled(tr) {
  for (const td of tr.cells) {
    if (td.classList.contains('actions')) continue;
    const text = td.textContent;
    if (text && !td.title) td.title = text;
  }
}

function render(t, data) {
  const tbody = $(t.table + ' tbody');
  tbody.replaceChildren();
  const items = data.items || [];
  const visible = new Set(items.map(i => i.id));
  for (const id of Array.from(t.selected)) if (!visible.has(id)) t.selected.delete(id);
  const canAct = me && (me.role === 'operator' || me.role === 'admin');
  for (const it of items) {
    const tr = document.createElement('tr');
    tr.dataset.id = it.id;
    if (t.kind !== 'delivered') {
      const sel = document.createElement('td');
      sel.className = 'sel';
      const cb = document.createElement('input');
      cb.type = 'checkbox';
      cb.className = 'row-select';
      cb.checked = t.selected.has(it.id);
      cb.setAttribute('aria-label', 'select ' + it.id);
      cb.addEventListener('change', () => { cb.checked ? t.selected.add(it.id) : t.selected.delete(it.id); });
      sel.appendChild(cb);
      tr.appendChild(sel);
    }
    idCell(tr, it.message_id || it.id, it.id);
    cell(tr, it.event_type || '', 'event-type');
    cell(tr, it.queue, 'queue');
    if (t.kind === 'delivered') {
      const n = it.succeeded_on_retry || it.retry_count;
      cell(tr, n ? 'Succeeded on retry attempt ' + n : 'Delivered', 'result');
      cell(tr, it.deliveries ? String(it.deliveries) : '', 'attempts',
        it.deliveries ? 'the original delivery and ' + (it.deliveries - 1) + ' retr' + (it.deliveries === 2 ? 'y' : 'ies') : (it.detail_error || ''));
      cell(tr, fmtTime(it.closed_at), 'when', it.closed_at || '');
    } else {
      cell(tr, it.service || '', 'service');
      cell(tr, it.external_system || '', 'external-system',
        (it.external_system ? it.external_system + ': ' : '') + 'where it failed: its queue, or exchange:routing key');
      cell(tr, it.category, 'category');
      cell(tr, it.retry_count + (it.max_retries ? ' / ' + it.max_retries : ''), 'attempts',
        it.attempts ? it.attempts + ' failure(s) recorded' : '');
      errCell(tr, it.last_error || it.detail_error || '', it.error_type || '');
    }
    if (t.kind === 'retry') {
      cell(tr, it.next_retry_at ? fmtTime(it.next_retry_at) : '—', 'when', it.next_retry_at || '');
      cell(tr, it.status, 'status' + (it.status === 'held' ? ' held' : ''),
        it.status === 'held' ? 'due, and held by its destination\'s breaker: retried when it closes or resumes' : '');
    } else if (t.kind === 'dead') {
      const created = it.first_failure_at || it.started_at;
      cell(tr, fmtShort(created), 'created', created ? fmtAbs(created) + ' (' + created + ')' : '');
      cell(tr, fmtTime(it.dead_at), 'when', it.dead_at || '');
      cell(tr, it.dead_reason || '', 'reason');
    }
    const actions = document.createElement('td');
    actions.className = 'actions';
    // The first actions are the row's buttons, in their places (Details, then Retry, ...);
    // the rest are smaller, after them in .more: a second line when the column is narrow.
    const more = document.createElement('span');
    more.className = 'more';
    actions.appendChild(button('Details', () => showDetail(it.id)));
    if (canAct && t.kind !== 'delivered') {
      if (t.kind === 'retry') {
        if (it.status === 'scheduled' || it.status === 'held') {
          actions.appendChild(button('Retry now', () => rowAction(it.id, 'retry')));
          actions.appendChild(button('Skip', () => rowAction(it.id, 'skip', 'Skip retry and move to Dead Letter Queue?')));
          if (me.role === 'admin') more.appendChild(classed(button('Edit & retry', () => openEdit(it.id)), 'edit-retry'));
        }
        if (it.status === 'scheduled') more.appendChild(classed(button('Snooze', () => openSnooze(it.id)), 'snooze'));
      } else {
        actions.appendChild(button('Retry', () => rowAction(it.id, 'retry')));
        actions.appendChild(button('Resolve', () => rowAction(it.id, 'resolve', 'Mark this entry resolved?')));
        actions.appendChild(button('Delete', () => rowAction(it.id, 'discard', 'Permanently delete this entry?')));
        // Editing before a retry is the admins' (the API refuses it to operators).
        if (me.role === 'admin') more.appendChild(classed(button('Edit & retry', () => openEdit(it.id)), 'edit-retry'));
        more.appendChild(classed(button('Snooze', () => openSnooze(it.id)), 'snooze'));
      }
    }
    // Last, so the buttons keep their places.
    if (it.web_ui_url) (t.kind === 'delivered' ? actions : more).appendChild(viewLog(it.web_ui_url));
    if (more.childElementCount > 0) actions.appendChild(more);
    tr.appendChild(actions);
    if (t.kind !== 'delivered') titled(tr);
    tbody.appendChild(tr);
  }
  const empty = items.length === 0 && t.pages.length === 1;
  $(t.table).hidden = empty;
  $(t.empty).hidden = !empty;
  $(t.count).textContent = '(' + (data.total || 0) + (data.truncated ? '+' : '') + ')';
  const section = $(t.section);
  $('.pager .next', section).disabled = !t.next;
  $('.pager .first', section).disabled = t.pages.length === 1;
  const all = $('.select-all', section);
  if (all) all.checked = items.length > 0 && items.every(i => t.selected.has(i.id));
}

let refreshing = false;
async function refreshAll() {
  if (refreshing) return;
  refreshing = true;
  try {
    const loads = Object.values(tables).map(load);
    loads.push(loadJobs());
    if (!$('#destinations').hidden) loads.push(loadBreakers());
    await Promise.all(loads);
  } catch (e) {
    if (e.status !== 401) setProgress('Could not load: ' + e.message, true);
  } finally {
    refreshing = false;
  }
}

// ---- destinations ---------------------------------------------------------------------

async function loadBreakers() {
  const data = await api('GET', 'breakers');
  const tbody = $('#br-table tbody');
  tbody.replaceChildren();
  const list = data.breakers || [];
  for (const b of list) {
    const tr = document.createElement('tr');
    tr.dataset.queue = b.queue;
    tr.className = 'mode-' + b.state;
    cell(tr, b.queue, 'queue');
    cell(tr, b.state, 'state', b.paused_by ? 'paused by ' + b.paused_by.actor + (b.paused_by.reason ? ': ' + b.paused_by.reason : '') : (b.state_error || ''));
    cell(tr, fmtTime(b.since), 'when', b.since || '');
    cell(tr, b.held, 'held', b.held_error || '');
    const p = b.last_probe;
    cell(tr, p ? fmtTime(p.at) + ': ' + (p.result || 'running') + ' (' + p.failed + '/' + p.released + ' failed)' : '—', 'probe');
    cell(tr, (b.cooldown || '') + (b.cooldown_until ? ', probes ' + fmtTime(b.cooldown_until) : ''), 'cooldown');
    const actions = document.createElement('td');
    actions.className = 'actions';
    if (b.state === 'paused') {
      actions.appendChild(button('Resume', () => breakerAction(b.queue, 'resume')));
    } else {
      actions.appendChild(button('Pause', () => breakerAction(b.queue, 'pause')));
    }
    if (b.web_ui_url) actions.appendChild(viewLog(b.web_ui_url));
    tr.appendChild(actions);
    tbody.appendChild(tr);
  }
  $('#br-table').hidden = list.length === 0;
  $('#br-empty').hidden = list.length > 0;
  $('#br-count').textContent = '(' + list.length + (data.truncated ? '+' : '') + ')';
}

const breakerQuestions = {
  pause: q => 'Pause ' + q + '? Its due retries are held until it is resumed.',
  resume: q => 'Resume ' + q + '? Its held retries are released at the release rate.',
};

async function breakerAction(queue, action, reason) {
  if (!window.confirm(breakerQuestions[action](queue))) return;
  try {
    const r = await api('POST', 'breakers/' + encodeURIComponent(queue) + '/' + action, reason ? { reason } : {});
    setProgress((action === 'pause' ? 'Paused ' : 'Resumed ') + queue + ': now ' + r.breaker.state + ', ' + r.breaker.held + ' held.');
  } catch (e) {
    if (e.status !== 401) setProgress(e.message, true);
  }
  await refreshAll();
}

// ---- actions --------------------------------------------------------------------------

function setProgress(text, bad) {
  const p = $('#progress');
  p.textContent = text;
  p.classList.toggle('bad', !!bad);
}

const verbs = { retry: 'Retried', skip: 'Skipped', resolve: 'Resolved', discard: 'Deleted' };

// RETRY_WAIT is how long a retry-now waits for its outcome: the republished message is
// delivered once its quiet window passes without a new failure report.
const RETRY_WAIT = '20s';

async function rowAction(id, action, question) {
  if (question && !window.confirm(question)) return;
  const path = 'messages/' + encodeURIComponent(id) + '/' + action;
  try {
    if (action === 'retry') {
      await retryAction(path, id);
    } else {
      const r = await api('POST', path, {});
      // Queued (202): Temporal lags, and the run applies the action at its next task.
      setProgress(verbs[action] + ' ' + id + (r.queued
        ? ': queued; Temporal lags, so the message applies it when its run next runs.'
        : ': now ' + r.state.status + '.'));
    }
  } catch (e) {
    if (e.status !== 401) setProgress(e.message, true);
  }
  await refreshAll();
}

// retryAction retries id and says how it went once the outcome is known, or that it is
// still pending; the tables refresh meanwhile, as soon as the retry is applied.
async function retryAction(path, id) {
  // A refused retry replaces this line with the refusal.
  setProgress(verbs.retry + ' ' + id + ': waiting for the outcome…');
  const early = setTimeout(refreshAll, 1000);
  try {
    const r = await api('POST', path + '?wait=' + RETRY_WAIT, {});
    clearTimeout(early);
    let o = r.outcome || { result: 'pending', status: r.state.status };
    if (o.result === 'pending' && r.state) {
      refreshAll();
      o = await followOutcome(id, r.state);
      if (!o) return; // another action took the progress line
    }
    setProgress(verbs.retry + ' ' + id + ': ' + outcomeLine(o), o.result === 'failed_again' || o.result === 'dead');
  } finally {
    clearTimeout(early);
  }
}

// OUTCOME_POLL_MS is how often the page reads a retried message whose outcome is pending.
const OUTCOME_POLL_MS = 2000;
// OUTCOME_MARGIN_MS is how long past the policy's quiet window the page keeps reading: the
// republish itself, and a loaded engine's lag, come on top of the window.
const OUTCOME_MARGIN_MS = 60000;

// followOutcome reads a retried message after the call's own wait ran out, until it settles
// or its policy's quiet window (plus a margin) has passed: a message counts as delivered only
// once its quiet window passed without a new failure, and every built-in window is longer than
// the call's wait. before is the state the retry answered with (read after the retry was
// applied): an attempt beyond its attempts is a new failure. It answers the outcome, or null
// when another action took the progress line meanwhile.
async function followOutcome(id, before) {
  const line = verbs.retry + ' ' + id + ': republished; waiting for its quiet window to pass without a new failure…';
  const windowMs = before.policy && before.policy.quiet_window > 0 ? before.policy.quiet_window / 1e6 : 0;
  const until = Date.now() + windowMs + OUTCOME_MARGIN_MS;
  const seen = (before.attempts || []).length;
  setProgress(line);
  let status = before.status;
  while (Date.now() < until) {
    await new Promise(res => setTimeout(res, OUTCOME_POLL_MS));
    if ($('#progress').textContent !== line) return null;
    let r;
    try {
      // Metadata alone: the outcome needs no payload, and a payload read is audited.
      r = await api('GET', 'messages/' + encodeURIComponent(id) + '?payload=false');
    } catch (e) {
      if (e.status === 401) return null;
      continue;
    }
    const st = r.state;
    status = st ? st.status : (r.workflow && r.workflow.status) || status;
    if (status === 'delivered') return { result: 'delivered', status };
    const attempts = st ? st.attempts || [] : [];
    if (attempts.length > seen || (status === 'dead' && before.status !== 'dead')) {
      const last = attempts.length > seen ? attempts[attempts.length - 1] : {};
      return { result: status === 'dead' ? 'dead' : 'failed_again', status, error: last.error || (st && st.dead_reason) || '', category: last.category };
    }
    if (['resolved', 'discarded', 'expired'].includes(status)) return { result: 'closed', status };
  }
  return { result: 'pending', status, waited: true };
}

// outcomeLine says a retry's outcome in words.
function outcomeLine(o) {
  const why = o.error ? ': ' + o.error + (o.category ? ' (' + o.category + ')' : '') : '';
  switch (o.result) {
    case 'delivered': return 'Retry successful.';
    case 'failed_again': return 'Failed again' + why + '.';
    case 'dead': return 'Failed again and moved to the dead letters' + why + '.';
    case 'closed': return 'Now ' + o.status + '.';
    default: return 'Still pending (now ' + o.status + '): no outcome ' + (o.waited ? 'within its quiet window' : 'within ' + RETRY_WAIT) + '; see the message for what happens next.';
  }
}

async function bulkAction(btn) {
  const t = btn.closest('#dead-letters') ? tables.dl : tables.rq;
  const ids = Array.from(t.selected);
  const label = btn.dataset.label;
  if (ids.length === 0) { setProgress(label + ': select rows first.', true); return; }
  if (btn.dataset.confirm && !window.confirm(btn.dataset.confirm + ' (' + ids.length + ')')) return;
  btn.disabled = true;
  try {
    // One job for the selection: it acts at the server's rate and can be followed and cancelled.
    const r = await api('POST', btn.dataset.bulk, { ids });
    t.selected.clear();
    await followJob(r.job, label);
  } catch (e) {
    if (e.status !== 401) setProgress(label + ': ' + e.message, true);
  } finally {
    btn.disabled = false;
  }
  await refreshAll();
}

// ---- jobs -----------------------------------------------------------------------------

const JOB_POLL_MS = 1000;
let followed = null; // the id of the job the progress bar shows

// jobLine says how a job went, or is going.
function jobLine(j, label) {
  const total = j.total >= 0 ? j.total : (j.done + j.failed + Math.max(j.remaining, 0));
  if (j.canary) {
    const c = j.canary;
    return 'Canary replay ' + (j.state === 'running' ? 'running' : (j.stopped ? 'stopped' : 'complete')) + ': ' +
      j.done + '/' + total + ' replayed, ' + c.delivered + ' delivered, ' + c.failed + ' failed again' +
      (c.unknown ? ', ' + c.unknown + ' not settled' : '') + ' (canary ' + c.verdict + ')' + (j.stopped ? '. ' + j.stopped : '') + '.';
  }
  const head = j.state === 'running' ? label + ': ' : label + (j.state === 'completed' ? ' complete' : ' ' + j.state) + ': ';
  if (j.progress_unknown) return head + 'progress not known: ' + j.progress_unknown + '.';
  const errs = j.errors ? Object.entries(j.errors).slice(0, 3).map(([id, why]) => id + ': ' + why).join('; ') : '';
  const asOf = j.progress_as_of ? ' (as of ' + new Date(j.progress_as_of).toLocaleTimeString() + ': the job did not answer the last read in time)' : '';
  return head + j.done + '/' + total + ' succeeded' + (j.failed ? ', ' + j.failed + ' failed' : '') + '.' + asOf +
    (j.state !== 'running' && j.stopped ? ' ' + j.stopped + '.' : '') + (j.state !== 'running' && errs ? ' ' + errs : '');
}

// showJob puts a job on the progress bar.
function showJob(j, label) {
  $('#job').hidden = false;
  $('#job-id').textContent = j.id;
  const bar = $('#job-bar');
  const total = j.total >= 0 ? j.total : 0;
  if (total > 0) { bar.max = total; bar.value = j.done + j.failed; } else { bar.removeAttribute('value'); }
  if (j.state !== 'running') { bar.max = 1; bar.value = 1; }
  $('#job-state').textContent = j.state;
  $('#job').dataset.state = j.state;
  $('#job-cancel').hidden = j.state !== 'running' || !(me.role === 'operator' || me.role === 'admin');
  setProgress(jobLine(j, label), j.failed > 0 || (j.canary && j.canary.verdict === 'failed') || j.state === 'failed');
  $('#job-outcomes').textContent = outcomesLine(j.outcomes);
}

// outcomesLine says how a bulk retry's messages fared so far; '' for other jobs.
function outcomesLine(o) {
  if (!o) return '';
  const parts = [o.succeeded + ' delivered', o.failed_again + ' failed again'];
  if (o.dead) parts.push(o.dead + ' dead');
  if (o.closed) parts.push(o.closed + ' closed');
  parts.push(o.pending + ' pending');
  return 'Outcomes: ' + parts.join(', ') + '.';
}

// followJob shows a job and polls it until it ends.
async function followJob(job, label) {
  followed = job.id;
  showJob(job, label);
  let j = job;
  while (j.state === 'running' && followed === job.id) {
    await new Promise(r => setTimeout(r, JOB_POLL_MS));
    try {
      j = (await api('GET', 'jobs/' + encodeURIComponent(job.id))).job;
    } catch (e) {
      if (e.status === 401) return;
      setProgress(label + ': cannot read job ' + job.id + ': ' + e.message, true);
      continue;
    }
    if (followed === job.id) showJob(j, label);
  }
  loadJobs();
  followOutcomes(j); // in the background: the action is done
}

// OUTCOME_FOLLOW_MS is how long after a bulk retry's job ended the page still reads it for
// its outcomes: a message counts as delivered only once its quiet window has passed.
const OUTCOME_FOLLOW_MS = 60000;

// followOutcomes reads an ended job until its outcomes have settled, for a while; only the
// outcomes change on the page (the progress line may tell of a later action by then).
async function followOutcomes(j) {
  const until = Date.now() + OUTCOME_FOLLOW_MS;
  while (j.outcomes && j.outcomes.pending > 0 && followed === j.id && Date.now() < until) {
    await new Promise(r => setTimeout(r, JOB_POLL_MS));
    try {
      j = (await api('GET', 'jobs/' + encodeURIComponent(j.id))).job;
    } catch (e) {
      return;
    }
    if (followed === j.id) $('#job-outcomes').textContent = outcomesLine(j.outcomes);
  }
}

async function cancelJob() {
  const id = $('#job-id').textContent;
  const reason = window.prompt('Cancel job ' + id + '? Reason:', '');
  if (reason === null) return;
  try {
    await api('POST', 'jobs/' + encodeURIComponent(id) + '/cancel', { reason });
  } catch (e) {
    if (e.status !== 401) setProgress(e.message, true);
  }
}

const jobLabels = { 'replay': 'Replay', 'purge': 'Purge', 'retry-matching': 'Retry all matching',
  'bulk-retry': 'Bulk retry', 'bulk-skip': 'Bulk skip', 'bulk-resolve': 'Bulk resolve', 'bulk-discard': 'Bulk delete' };

async function loadJobs() {
  let r;
  try { r = await api('GET', 'jobs'); } catch (e) { return; }
  const tbody = $('#jobs-table tbody');
  tbody.replaceChildren();
  for (const j of r.jobs) {
    const tr = document.createElement('tr');
    tr.dataset.id = j.id;
    cell(tr, fmtAbs(j.started_at));
    cell(tr, j.kind);
    cell(tr, j.state, 'state');
    cell(tr, j.progress_unknown ? '?' : j.done + (j.total >= 0 ? '/' + j.total : ''));
    cell(tr, j.progress_unknown ? '?' : j.failed);
    cell(tr, j.actor + (j.reason ? ': ' + j.reason : ''));
    const td = cell(tr, '');
    if (j.state === 'running') {
      const b = document.createElement('button');
      b.type = 'button';
      b.textContent = 'Follow';
      b.addEventListener('click', () => followJob(j, jobLabels[j.kind] || j.kind));
      td.appendChild(b);
    }
    tbody.appendChild(tr);
  }
  $('#jobs-empty').hidden = r.jobs.length > 0;
}

// The actions by filter: the dead letters' replay and purge, the retry queue's retry of every
// matching scheduled item (all pages). Each counts first (dry run) and asks.
const filtered = {
  'replay': { path: 'dead-letters/replay', form: '#dl-filters', what: 'dead letter(s)', ask: n => 'Replay ' + n + ' dead letter(s) now?', doing: 'Replaying ', done: 'Replay' },
  'purge': { path: 'dead-letters/purge', form: '#dl-filters', what: 'dead letter(s)', ask: n => 'Permanently delete ' + n + ' dead letter(s)?', doing: 'Purging ', done: 'Purge' },
  'retry-matching': { path: 'retry-queue/retry-matching', form: '#rq-filters', what: 'scheduled or held retr(ies)', ask: n => 'Retry ' + n + ' scheduled or held retr(ies) matching the filter now, on every page?', doing: 'Retrying ', done: 'Retry all matching' },
};

async function filteredAction(kind) {
  const k = filtered[kind];
  const body = {};
  for (const el of $(k.form).elements) {
    if (['queue', 'category', 'tenant', 'event_type', 'service', 'error_type', 'error_text'].includes(el.name) && el.value.trim()) body[el.name] = el.value.trim();
  }
  if (kind !== 'retry-matching') {
    const older = $('#replay-form [name=older_than]').value.trim();
    if (older) body.older_than = older;
  }
  const canary = kind === 'replay' ? parseInt($('#replay-form [name=canary]').value, 10) || 0 : 0;
  try {
    const dry = await api('POST', k.path, Object.assign({ dry_run: true }, body));
    if (dry.count === 0) { setProgress('No ' + k.what + ' match.'); return; }
    if (canary > 0) {
      body.canary = canary;
      const ratio = parseFloat($('#replay-form [name=max_failure_ratio]').value);
      if (ratio > 0) body.max_failure_ratio = ratio;
      if (!window.confirm('Replay ' + dry.count + ' dead letter(s), starting with a canary of ' + Math.min(canary, dry.count) + '?')) return;
    } else if (!window.confirm(k.ask(dry.count))) {
      return;
    }
    setProgress(k.doing + dry.count + ' ' + k.what + '…');
    const r = await api('POST', k.path, body);
    await followJob(r.job, k.done);
  } catch (e) {
    if (e.status !== 401) setProgress(e.message, true);
  }
  await refreshAll();
}

function summaryRow(dl, term, value) {
  if (value === undefined || value === null || value === '') return;
  const dt = document.createElement('dt');
  dt.textContent = term;
  const dd = document.createElement('dd');
  dd.textContent = String(value);
  dl.append(dt, dd);
}

// setAsideSummary says how many failure reports the item set aside (not applied as a new
// failure), by reason, and the latest: '' when none.
function setAsideSummary(st) {
  const n = st.duplicate_reports || 0;
  if (n === 0) return '';
  const by = Object.entries(st.set_aside || {}).map(([reason, count]) => reason + ' ' + count).join(', ');
  const last = st.last_set_aside;
  return n + (by ? ' (' + by + ')' : '') +
    (last ? '; latest ' + fmtAbs(last.at) + ', ' + last.reason + ': ' + (last.detail || '') : '');
}

function rows(tbody, list, fields) {
  tbody.replaceChildren();
  for (const x of list) {
    const tr = document.createElement('tr');
    for (const f of fields) cell(tr, f(x));
    tbody.appendChild(tr);
  }
}

// detailActions puts the actions on message id in the details, by its status: its row's, so
// that all of them are a click from the whole error too.
function detailActions(id, status) {
  const box = $('#detail-actions');
  box.replaceChildren();
  const canAct = me && (me.role === 'operator' || me.role === 'admin');
  // Each action closes the details first: its question, dialog or outcome shows on the page.
  const act = (label, fn) => button(label, () => { $('#detail').close(); fn(); });
  if (canAct && (status === 'dead' || status === 'scheduled' || status === 'held')) {
    if (status === 'dead') {
      box.append(act('Retry', () => rowAction(id, 'retry')),
        act('Resolve', () => rowAction(id, 'resolve', 'Mark this entry resolved?')),
        act('Delete', () => rowAction(id, 'discard', 'Permanently delete this entry?')));
    } else {
      box.append(act('Retry now', () => rowAction(id, 'retry')),
        act('Skip', () => rowAction(id, 'skip', 'Skip retry and move to Dead Letter Queue?')));
    }
    if (me.role === 'admin') box.appendChild(act('Edit & retry', () => openEdit(id)));
    if (status !== 'held') box.appendChild(act('Snooze', () => openSnooze(id)));
  }
  box.hidden = box.childElementCount === 0;
}

async function showDetail(id) {
  try {
    const r = await api('GET', 'messages/' + encodeURIComponent(id) + '?payload=false'); // metadata: a payload read is audited
    const st = r.state || {};
    const msg = st.message || {};
    $('#detail-title').textContent = id + ' — ' + (r.state ? st.status : r.workflow.status);
    detailActions(id, r.state ? st.status : '');
    const log = $('#detail-log');
    log.hidden = !r.web_ui_url;
    if (r.web_ui_url) log.href = r.web_ui_url; else log.removeAttribute('href');
    const dl = $('#detail-summary');
    dl.replaceChildren();
    summaryRow(dl, 'Message id', msg.message_id);
    summaryRow(dl, 'Event type', msg.event_type);
    summaryRow(dl, 'Queue', msg.original_queue);
    summaryRow(dl, 'External System', msg.original_exchange ? msg.original_exchange + ':' + (msg.original_routing_key || msg.original_queue) : '');
    summaryRow(dl, 'Service', st.service);
    summaryRow(dl, 'Tenant', st.tenant_id);
    summaryRow(dl, 'Policy', st.policy && st.policy.name);
    summaryRow(dl, 'Retries', r.state ? st.retry_count + (st.max_retries || (st.policy && st.policy.max_retries) ? ' / ' + (st.max_retries || st.policy.max_retries) : '') : '');
    summaryRow(dl, 'First failure', fmtAbs(st.first_failure_at));
    summaryRow(dl, 'Next retry', fmtAbs(st.next_retry_at));
    summaryRow(dl, 'Dead since', fmtAbs(st.dead_at));
    summaryRow(dl, 'Dead reason', st.dead_reason && (st.dead_reason + (st.dead_detail ? ': ' + st.dead_detail : '')));
    summaryRow(dl, 'Workflow', r.workflow.status + (r.workflow.closed_at ? ', closed ' + fmtAbs(r.workflow.closed_at) : ''));
    summaryRow(dl, 'Reports set aside', setAsideSummary(st));
    summaryRow(dl, 'State', r.state_error ? 'unavailable: ' + r.state_error : '');
    const attempts = st.attempts || [];
    rows($('#detail-attempts tbody'), attempts, [
      a => a.attempt, a => fmtAbs(a.timestamp), a => a.error, a => a.category, a => a.httpStatus || '', a => a.retryKey || '']);
    $('#detail-attempts').hidden = attempts.length === 0;
    $('#detail-no-attempts').hidden = attempts.length > 0;
    const events = st.events || [];
    rows($('#detail-events tbody'), events, [e => fmtAbs(e.at), e => e.kind, e => e.actor || '', e => e.detail || '']);
    $('#detail-events-box').hidden = events.length === 0;
    $('#detail-body').textContent = JSON.stringify(r, null, 2);
    $('#detail').showModal();
  } catch (e) {
    if (e.status !== 401) setProgress(e.message, true);
  }
}

// ---- edit and retry, snooze -----------------------------------------------------------

// editing is the item the edit dialog is open on, with what it showed at first: only what the
// operator changed is sent.
let editing = null;

// payloadText is the payload (base64 in the state's JSON) as text when it is UTF-8, else
// its base64.
function payloadText(b64) {
  const bytes = Uint8Array.from(atob(b64 || ''), c => c.charCodeAt(0));
  try {
    return { encoding: 'text', text: new TextDecoder('utf-8', { fatal: true }).decode(bytes) };
  } catch {
    return { encoding: 'base64', text: b64 || '' };
  }
}

async function openEdit(id) {
  try {
    const r = await api('GET', 'messages/' + encodeURIComponent(id));
    const msg = (r.state && r.state.message) || {};
    const f = $('#edit-form').elements;
    const p = payloadText(msg.payload);
    editing = { id, payload: p.text, encoding: p.encoding, headers: JSON.stringify(msg.headers || {}, null, 2),
      queue: msg.original_queue || '', exchange: msg.original_exchange || '', routing_key: msg.original_routing_key || '' };
    f.encoding.value = editing.encoding;
    f.payload.value = editing.payload;
    f.headers.value = editing.headers;
    f.queue.value = editing.queue;
    f.exchange.value = editing.exchange;
    f.routing_key.value = editing.routing_key;
    f.reason.value = '';
    $('#edit-id').textContent = id;
    $('#edit-error').textContent = '';
    $('#edit').showModal();
  } catch (e) {
    if (e.status !== 401) setProgress(e.message, true);
  }
}

// editBody is the retry's body: the reason, and each part the operator changed.
function editBody(f) {
  const body = {};
  if (f.reason.value.trim()) body.reason = f.reason.value.trim();
  if (f.payload.value !== editing.payload || f.encoding.value !== editing.encoding) {
    body[f.encoding.value === 'base64' ? 'payload_base64' : 'payload'] = f.payload.value;
  }
  if (f.headers.value.trim() !== editing.headers.trim()) {
    try {
      body.headers = JSON.parse(f.headers.value || '{}');
    } catch (e) {
      throw new Error('Headers are not JSON: ' + e.message);
    }
  }
  const dest = { queue: f.queue.value.trim(), exchange: f.exchange.value.trim(), routing_key: f.routing_key.value.trim() };
  if (dest.queue !== editing.queue || dest.exchange !== editing.exchange || dest.routing_key !== editing.routing_key) {
    body.destination = Object.fromEntries(Object.entries(dest).filter(([, v]) => v));
  }
  return body;
}

async function sendEdit(ev) {
  ev.preventDefault();
  const id = editing.id;
  let body;
  try {
    body = editBody($('#edit-form').elements);
  } catch (e) {
    $('#edit-error').textContent = e.message;
    return;
  }
  $('#edit-send').disabled = true;
  $('#edit-error').textContent = '';
  try {
    const r = await api('POST', 'messages/' + encodeURIComponent(id) + '/retry?wait=' + RETRY_WAIT, body);
    $('#edit').close();
    const o = r.outcome || { result: 'pending', status: r.state.status };
    setProgress((r.action === 'edit-retry' ? 'Edited and retried ' : verbs.retry + ' ') + id + ': ' + outcomeLine(o),
      o.result === 'failed_again' || o.result === 'dead');
  } catch (e) {
    // The refusal stays in the dialog, with what the operator typed.
    if (e.status !== 401) $('#edit-error').textContent = e.message;
  } finally {
    $('#edit-send').disabled = false;
  }
  await refreshAll();
}

let snoozing = null;

function openSnooze(id) {
  snoozing = id;
  const f = $('#snooze-form').elements;
  f.for.value = '';
  f.until.value = '';
  f.reason.value = '';
  $('#snooze-id').textContent = id;
  $('#snooze-error').textContent = '';
  $('#snooze').showModal();
}

async function sendSnooze(ev) {
  ev.preventDefault();
  const f = $('#snooze-form').elements;
  const body = {};
  if (f.for.value.trim()) body.for = f.for.value.trim();
  // datetime-local is the browser's local time; the API takes RFC 3339.
  if (f.until.value) body.until = new Date(f.until.value).toISOString().replace(/\.\d{3}Z$/, 'Z');
  if (f.reason.value.trim()) body.reason = f.reason.value.trim();
  $('#snooze-send').disabled = true;
  try {
    const r = await api('POST', 'messages/' + encodeURIComponent(snoozing) + '/snooze', body);
    $('#snooze').close();
    setProgress('Snoozed ' + snoozing + ': next retry ' + fmtAbs(r.state.next_retry_at) + '.');
  } catch (e) {
    if (e.status !== 401) $('#snooze-error').textContent = e.message;
  } finally {
    $('#snooze-send').disabled = false;
  }
  await refreshAll();
}

// ---- wiring ---------------------------------------------------------------------------

document.addEventListener('DOMContentLoaded', () => {
  for (const sel of $$('select.categories')) {
    sel.appendChild(new Option('any', ''));
    for (const c of CATEGORIES) sel.appendChild(new Option(c, c));
  }
  $('#login-form').addEventListener('submit', ev => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $('#token-input').value.trim());
    $('#token-input').value = '';
    start();
  });
  $('#sign-out').addEventListener('click', () => { sessionStorage.removeItem(TOKEN_KEY); showLogin(''); });
  $('#refresh').addEventListener('click', refreshAll);
  for (const t of Object.values(tables)) {
    $(t.filters).addEventListener('submit', ev => { ev.preventDefault(); t.pages = ['']; t.selected.clear(); load(t).catch(e => setProgress(e.message, true)); });
    const section = $(t.section);
    $('.pager .next', section).addEventListener('click', () => { if (t.next) { t.pages.push(t.next); load(t).catch(e => setProgress(e.message, true)); } });
    $('.pager .first', section).addEventListener('click', () => { t.pages = ['']; load(t).catch(e => setProgress(e.message, true)); });
    const all = $('.select-all', section);
    if (all) all.addEventListener('change', ev => {
      for (const cb of $$('tbody .row-select', section)) {
        cb.checked = ev.target.checked;
        const id = cb.closest('tr').dataset.id;
        cb.checked ? t.selected.add(id) : t.selected.delete(id);
      }
    });
  }
  for (const b of $$('[data-bulk]')) b.addEventListener('click', () => bulkAction(b));
  $('#replay').addEventListener('click', () => filteredAction('replay'));
  $('#purge').addEventListener('click', () => filteredAction('purge'));
  $('#rq-retry-matching').addEventListener('click', () => filteredAction('retry-matching'));
  $('#job-cancel').addEventListener('click', cancelJob);
  $('#edit-form').addEventListener('submit', sendEdit);
  $('#edit-cancel').addEventListener('click', () => $('#edit').close());
  $('#snooze-form').addEventListener('submit', sendSnooze);
  $('#snooze-cancel').addEventListener('click', () => $('#snooze').close());
  $('#br-pause-form').addEventListener('submit', ev => {
    ev.preventDefault();
    const f = ev.target.elements;
    breakerAction(f.queue.value.trim(), 'pause', f.reason.value.trim());
  });
  setInterval(() => {
    if ($('#auto-refresh').checked && !$('#app').hidden && !$('dialog[open]')) refreshAll();
  }, REFRESH_MS);
  start();
});
