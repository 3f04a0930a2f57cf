// capgate approval console. No framework, no build step, no third-party code.
//
// Rules this file keeps (the server's Content-Security-Policy enforces most of them):
// - every value that came from a model, a requester or an approver (inputs, reasons,
//   comments, ids) is put on the page with textContent / createTextNode, never as HTML;
// - no inline script or style, no eval;
// - the mount path P is never written here: it is derived from this script's own URL
//   (P/assets/console.js), so the console works under any configured path.
'use strict';

(function () {
  const SCRIPT_SUFFIX = '/assets/console.js';
  const POLL_MS = 2000;
  const TRUNCATE_AT = 600;

  const base = (function () {
    const src = document.currentScript && document.currentScript.src;
    if (src) {
      const path = new URL(src, location.href).pathname;
      if (path.endsWith(SCRIPT_SUFFIX)) return path.slice(0, -SCRIPT_SUFFIX.length);
    }
    return null;
  })();

  // ---------------------------------------------------------------- small DOM helpers

  const $ = (id) => document.getElementById(id);

  // el('p', {class: 'x', testid: 'card-note', text: 'hello'}, child, 'text child', …)
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === 'text') node.textContent = String(value);
      else if (key === 'class') node.className = value;
      else if (key === 'testid') node.setAttribute('data-testid', value);
      else if (key === 'hidden') node.hidden = true;
      else if (key === 'onclick') node.addEventListener('click', value);
      else node.setAttribute(key, value === true ? '' : String(value));
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const child of children.flat(Infinity)) {
      if (child === undefined || child === null || child === false) continue;
      node.appendChild(typeof child === 'string' ? document.createTextNode(child) : child);
    }
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  function show(node, visible) {
    node.hidden = !visible;
  }

  function announce(text) {
    const a = $('announcer');
    a.textContent = '';
    // A fresh text node after a tick so screen readers announce repeats too.
    setTimeout(() => { a.textContent = text; }, 50);
  }

  function banner(text) {
    const b = $('banner');
    if (text) {
      b.textContent = text;
      b.hidden = false;
    } else if (!b.hidden) {
      b.textContent = '';
      b.hidden = true;
    }
  }

  // ---------------------------------------------------------------- formatting

  function time(iso) {
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return String(iso || '');
    return d.toLocaleString(undefined, {
      year: 'numeric', month: 'short', day: 'numeric',
      hour: '2-digit', minute: '2-digit', second: '2-digit',
    });
  }

  function timeEl(iso) {
    return el('time', { datetime: iso, text: time(iso) });
  }

  function left(ms) {
    if (ms <= 0) return null;
    const s = Math.floor(ms / 1000);
    const d = Math.floor(s / 86400);
    const h = Math.floor((s % 86400) / 3600);
    const m = Math.floor((s % 3600) / 60);
    const sec = s % 60;
    if (d > 0) return `${d} d ${h} h`;
    if (h > 0) return `${h} h ${String(m).padStart(2, '0')} min`;
    if (m > 0) return `${m} min ${String(sec).padStart(2, '0')} s`;
    return `${sec} s`;
  }

  function who(actor) {
    if (!actor || typeof actor !== 'object') return 'someone';
    return String(actor.id || 'someone');
  }

  function pretty(value) {
    try {
      return JSON.stringify(value, null, 2);
    } catch (_) {
      return String(value);
    }
  }

  const STATUS_WORD = {
    pending: 'Pending',
    approved: 'Approved',
    rejected: 'Rejected',
    expired: 'Expired',
    cancelled: 'Cancelled',
    consumed: 'Approved and resumed',
  };

  // "Approved by u_priya at …" for a decided approval; what happened otherwise.
  function decisionText(a, prefix) {
    const d = a.decision;
    if (d && (d.status === 'approved' || d.status === 'rejected')) {
      const verb = d.status === 'approved' ? 'approved' : 'rejected';
      const via = d.via === 'requester' ? ' (the requester confirming)' : '';
      const lead = prefix ? `${prefix} ${verb}` : verb.charAt(0).toUpperCase() + verb.slice(1);
      return `${lead} by ${who(d.approver)}${via} at ${time(d.decidedAt)}.`;
    }
    if (a.status === 'expired') return `Expired at ${time(a.expiresAt)} without a decision.`;
    if (a.status === 'cancelled') return 'Cancelled before anyone decided.';
    if (a.status === 'pending') return 'Still waiting for a decision.';
    return `${STATUS_WORD[a.status] || a.status}.`;
  }

  function outcomeText(a) {
    const o = a.outcome;
    if (o && typeof o === 'object') {
      const code = o.code ? ` (${o.code})` : '';
      const at = o.at ? ` at ${time(o.at)}` : '';
      switch (o.status) {
        case 'completed': return `Resumed: completed${at}.`;
        case 'failed': return `Resumed: failed${code}${at}.`;
        case 'cancelled': return `Resumed: cancelled${code}${at}.`;
        case 'running': return 'Resumed: still running.';
        default: return `Resumed: ${o.status}${code}${at}.`;
      }
    }
    switch (a.status) {
      case 'consumed': return 'Resumed; the outcome is not recorded.';
      case 'approved': return 'Not resumed yet.';
      case 'rejected': return 'Not run: rejected.';
      case 'expired': return 'Not run: expired.';
      case 'cancelled': return 'Not run: cancelled.';
      default: return '';
    }
  }

  // ---------------------------------------------------------------- the server

  const state = {
    session: null,
    route: { view: 'queue' },
    filters: { capability: '', requester: '', type: '' },
    cards: new Map(), // approval id -> card controller (queue and detail views)
    historyItems: new Map(),
    pollTimer: null,
    polling: false,
    generation: 0, // bumped on every view change; stale answers are dropped
    seq: 0,
  };

  class SessionEnded extends Error {}

  async function api(method, path, body) {
    const headers = { Accept: 'application/json' };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    if (method !== 'GET' && state.session && state.session.csrfToken) {
      headers['X-CSRF-Token'] = state.session.csrfToken;
    }
    let res;
    try {
      res = await fetch(base + path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        credentials: 'same-origin',
        cache: 'no-store',
        redirect: 'error',
      });
    } catch (_) {
      return { status: 0, data: null, message: 'Cannot reach capgate. Retrying…' };
    }
    let data = null;
    const text = await res.text().catch(() => '');
    if (text) {
      try { data = JSON.parse(text); } catch (_) { data = null; }
    }
    const message = data && data.error && typeof data.error.message === 'string'
      ? data.error.message
      : `The server answered ${res.status}.`;
    return { status: res.status, data, message };
  }

  // A call made on behalf of a signed-in user: 401 means the session is over.
  async function authed(method, path, body) {
    const r = await api(method, path, body);
    if (r.status === 401 && state.session) {
      endSession('Your session has ended. Sign in again to continue.');
      throw new SessionEnded();
    }
    if (r.status === 0) banner(r.message);
    else banner('');
    return r;
  }

  const approvalPath = (id) => `/api/approvals/${encodeURIComponent(id)}`;

  // ---------------------------------------------------------------- routing

  function parseRoute() {
    let rest = location.pathname.startsWith(base) ? location.pathname.slice(base.length) : '';
    rest = rest.replace(/\/+$/, '');
    if (rest === '/history') return { view: 'history' };
    const m = /^\/approvals\/([^/]+)$/.exec(rest);
    if (m) {
      let id = m[1];
      try { id = decodeURIComponent(id); } catch (_) { /* keep it as written */ }
      return { view: 'detail', id };
    }
    return { view: 'queue' };
  }

  function routeUrl(route) {
    if (route.view === 'history') return `${base}/history`;
    if (route.view === 'detail') return `${base}/approvals/${encodeURIComponent(route.id)}`;
    return `${base}/`;
  }

  function go(route) {
    if (routeUrl(route) !== location.pathname) history.pushState(null, '', routeUrl(route));
    state.route = route;
    render();
  }

  // ---------------------------------------------------------------- session

  async function start() {
    if (base === null) {
      banner('The console could not work out where it is served from.');
      return;
    }
    $('tab-queue').href = `${base}/`;
    $('tab-history').href = `${base}/history`;
    $('detail-back').href = `${base}/`;
    wire();
    state.route = parseRoute();
    const ssoError = signOnError();
    const r = await api('GET', '/session');
    if (r.status === 200 && r.data) {
      signedIn(r.data);
    } else {
      if (r.status === 0) banner(r.message);
      showSignIn();
      if (ssoError) {
        const error = $('signin-error');
        error.textContent = ssoError;
        show(error, true);
      }
    }
  }

  // What the single sign-on callback said went wrong (`?signInError=CODE`), taken off the
  // address bar so a reload does not say it again.
  function signOnError() {
    const params = new URLSearchParams(location.search);
    const code = params.get('signInError');
    if (!code) return '';
    params.delete('signInError');
    const query = params.toString();
    history.replaceState(null, '', location.pathname + (query ? `?${query}` : ''));
    const messages = {
      denied: 'The sign-in was cancelled or refused at your identity provider.',
      expired: 'That sign-in took too long or was started elsewhere. Try again.',
      refused: 'Your account was signed in, but it cannot decide approvals here (no approver role, or no namespace). Ask your administrator.',
      unavailable: 'Your identity provider could not be reached. Try again in a moment.',
    };
    return messages[code] || 'The sign-in did not complete. Try again.';
  }

  function showSignIn(info) {
    stopPolling();
    state.session = null;
    state.cards.clear();
    state.historyItems.clear();
    clear($('queue'));
    clear($('history'));
    clear($('detail'));
    show($('account'), false);
    show($('app-view'), false);
    show($('signin-view'), true);
    const infoEl = $('signin-info');
    infoEl.textContent = info || '';
    show(infoEl, Boolean(info));
    $('signin-credential').focus();
  }

  function endSession(message) {
    showSignIn(message);
  }

  function signedIn(session) {
    state.session = session;
    const whoami = $('whoami');
    clear(whoami);
    append(whoami, [
      el('span', { class: 'who-id', text: who(session.actor) }),
      el('span', { class: 'who-sep', 'aria-hidden': 'true', text: ' · ' }),
      el('span', { class: 'who-ns', text: session.namespace || '(no namespace)' }),
    ]);
    const roles = Array.isArray(session.roles) ? session.roles.join(', ') : '';
    whoami.title = roles ? `Signed in as ${who(session.actor)} in ${session.namespace}; roles: ${roles}` : '';
    show($('account'), true);
    show($('signin-view'), false);
    show($('app-view'), true);
    show($('tabs'), Boolean(session.approver));
    render();
  }

  async function signIn(event) {
    event.preventDefault();
    const input = $('signin-credential');
    const error = $('signin-error');
    const credential = input.value.trim();
    show($('signin-info'), false);
    if (!credential) {
      error.textContent = 'Paste your API key or token first.';
      show(error, true);
      input.focus();
      return;
    }
    const button = $('signin-submit');
    button.disabled = true;
    button.textContent = 'Signing in…';
    const r = await api('POST', '/session', { credential });
    button.disabled = false;
    button.textContent = 'Sign in';
    if (r.status === 200 && r.data) {
      input.value = '';
      show(error, false);
      banner('');
      signedIn(r.data);
      $('main').focus();
      announce(`Signed in as ${who(r.data.actor)}.`);
    } else {
      error.textContent = r.status === 401
        ? 'That key or token was not accepted. Check it and try again.'
        : r.message;
      show(error, true);
      input.focus();
      input.select();
    }
  }

  async function signOut() {
    const r = await api('DELETE', '/session');
    if (r.status === 204 || r.status === 200 || r.status === 401) {
      showSignIn('You are signed out.');
    } else {
      banner(`Sign-out failed: ${r.message}`);
    }
  }

  // ---------------------------------------------------------------- views

  function render() {
    state.generation += 1;
    stopPolling();
    state.cards.clear();
    state.historyItems.clear();
    clear($('queue'));
    clear($('history'));
    clear($('detail'));
    const session = state.session;
    if (!session) return;
    const view = state.route.view;
    show($('queue-view'), view === 'queue' && session.approver);
    show($('not-approver-view'), view === 'queue' && !session.approver);
    show($('history-view'), view === 'history' && session.approver);
    show($('detail-view'), view === 'detail');
    show($('detail-back'), Boolean(session.approver));
    show($('detail-not-found'), false);
    show($('empty-queue'), false);
    show($('empty-history'), false);
    for (const [id, active] of [['tab-queue', view === 'queue'], ['tab-history', view === 'history']]) {
      if (active) $(id).setAttribute('aria-current', 'page');
      else $(id).removeAttribute('aria-current');
    }
    if (view === 'queue' && !session.approver) {
      $('not-approver-text').textContent =
        `You are signed in as ${who(session.actor)} (${session.namespace}) without the approver role, ` +
        'so there is no queue to show you.';
      return;
    }
    if (view === 'history' && !session.approver) {
      show($('not-approver-view'), true);
      $('not-approver-text').textContent =
        `You are signed in as ${who(session.actor)} (${session.namespace}) without the approver role, ` +
        'so there is no history to show you.';
      return;
    }
    document.title = view === 'history' ? 'History · Approvals · capgate'
      : view === 'detail' ? `${state.route.id} · Approvals · capgate` : 'Approvals · capgate';
    startPolling();
  }

  function refresh() {
    const view = state.route.view;
    if (view === 'queue') return refreshQueue();
    if (view === 'history') return refreshHistory();
    if (view === 'detail') return refreshDetail();
    return Promise.resolve();
  }

  // Poll the visible list every 2 s while the page is visible.
  function startPolling() {
    stopPolling();
    const generation = state.generation;
    const tick = async () => {
      if (generation !== state.generation || !state.session) return;
      if (document.visibilityState === 'visible' && !state.polling) {
        state.polling = true;
        try {
          await refresh();
        } catch (e) {
          if (!(e instanceof SessionEnded)) banner(`Something went wrong: ${e && e.message}`);
        } finally {
          state.polling = false;
        }
      }
      if (generation === state.generation && state.session) {
        state.pollTimer = setTimeout(tick, POLL_MS);
      }
    };
    tick();
  }

  function stopPolling() {
    if (state.pollTimer) clearTimeout(state.pollTimer);
    state.pollTimer = null;
  }

  function pollNow() {
    if (!state.session || state.polling) return;
    stopPolling();
    if (state.route.view === 'queue' && !state.session.approver) return;
    startPolling();
  }

  // ---------------------------------------------------------------- the queue

  function matches(a) {
    const f = state.filters;
    if (f.capability && a.capabilityId !== f.capability) return false;
    if (f.requester && who(a.requester) !== f.requester) return false;
    if (f.type && !(Array.isArray(a.types) && a.types.includes(f.type))) return false;
    return true;
  }

  function fillSelect(select, allLabel, values, current) {
    const wanted = [...new Set(values.concat(current ? [current] : []))].sort();
    const existing = [...select.options].map((o) => o.value);
    const next = [''].concat(wanted);
    if (existing.length === next.length && existing.every((v, i) => v === next[i])) return;
    clear(select);
    select.appendChild(el('option', { value: '', text: allLabel }));
    for (const v of wanted) select.appendChild(el('option', { value: v, text: v }));
    select.value = current || '';
  }

  function updateFilters() {
    const all = [...state.cards.values()].map((c) => c.approval);
    fillSelect($('filter-capability'), 'All capabilities', all.map((a) => a.capabilityId), state.filters.capability);
    fillSelect($('filter-requester'), 'All requesters', all.map((a) => who(a.requester)), state.filters.requester);
    fillSelect($('filter-type'), 'All types', all.flatMap((a) => (Array.isArray(a.types) ? a.types : [])), state.filters.type);
  }

  function applyFilters() {
    let visible = 0;
    let pending = 0;
    for (const card of state.cards.values()) {
      const ok = matches(card.approval);
      card.node.hidden = !ok;
      if (ok) visible += 1;
      if (!card.settled) pending += 1;
    }
    const empty = $('empty-queue');
    if (visible === 0) {
      const filtered = state.filters.capability || state.filters.requester || state.filters.type;
      empty.textContent = filtered && state.cards.size > 0
        ? 'No pending approval matches these filters.'
        : 'Nothing is waiting for a decision. New requests appear here on their own.';
    }
    show(empty, visible === 0);
    $('queue-count').textContent = pending > 0 ? String(pending) : '';
  }

  // One listing of the approvals API, or null when there is nothing to render: the view
  // changed meanwhile (sign-out, another tab), the viewer holds no approver role (the page
  // says so instead), or the request failed (said in the banner).
  async function listApprovals(query, what) {
    const generation = state.generation;
    const r = await authed('GET', `/api/approvals?${query}`);
    if (generation !== state.generation) return null;
    if (r.status === 403) {
      state.session.approver = false;
      render();
      return null;
    }
    if (r.status !== 200 || !Array.isArray(r.data)) {
      if (r.status !== 0) banner(`Could not load ${what}: ${r.message}`);
      return null;
    }
    return r;
  }

  async function refreshQueue() {
    const generation = state.generation;
    const r = await listApprovals('status=pending&limit=200', 'the queue');
    if (!r) return;
    const list = $('queue');
    const seen = new Set();
    let added = 0;
    for (const a of r.data) {
      seen.add(a.id);
      const card = state.cards.get(a.id);
      if (card) {
        if (!card.settled && !card.busy) card.update(a);
      } else {
        const c = new Card(a, { inQueue: true });
        c.seq = (state.seq += 1); // the server lists newest first: ties keep its order
        state.cards.set(a.id, c);
        added += 1;
      }
    }
    // Cards no longer pending were decided (here or elsewhere), expired or cancelled: say so
    // in place instead of letting them vanish under the reader's eyes.
    for (const card of state.cards.values()) {
      if (!seen.has(card.approval.id) && !card.settled && !card.busy) {
        await card.reload();
        if (generation !== state.generation) return;
      }
    }
    // Newest first; existing cards keep their order, so only new ones are inserted.
    const at = (c) => Date.parse(c.approval.requestedAt) || 0;
    const ordered = [...state.cards.values()].sort((x, y) => at(y) - at(x) || x.seq - y.seq);
    ordered.forEach((card, i) => {
      if (list.children[i] !== card.node) list.insertBefore(card.node, list.children[i] || null);
    });
    updateFilters();
    applyFilters();
    $('queue-updated').textContent = `Updated ${new Date().toLocaleTimeString()}`;
    if (added > 0 && list.dataset.loaded === 'yes') {
      announce(added === 1 ? 'One new approval in the queue.' : `${added} new approvals in the queue.`);
    }
    list.dataset.loaded = 'yes';
  }

  // ---------------------------------------------------------------- one approval

  async function refreshDetail() {
    const generation = state.generation;
    const id = state.route.id;
    const card = state.cards.get(id);
    if (card && (card.settled || card.busy)) return;
    const r = await authed('GET', approvalPath(id));
    if (generation !== state.generation) return;
    const notFound = $('detail-not-found');
    if (r.status === 404 || r.status === 403) {
      notFound.textContent = r.status === 404
        ? `There is no approval ${id} that you can see. It may belong to another namespace, or the link is wrong.`
        : r.message;
      show(notFound, true);
      clear($('detail'));
      state.cards.clear();
      return;
    }
    if (r.status !== 200 || !r.data) {
      if (r.status !== 0) banner(`Could not load ${id}: ${r.message}`);
      return;
    }
    show(notFound, false);
    if (card) {
      card.update(r.data);
    } else {
      const c = new Card(r.data, { inQueue: false });
      state.cards.set(id, c);
      $('detail').appendChild(c.node);
    }
  }

  // A card: one approval, its input, and the decision controls when this viewer may decide.
  class Card {
    constructor(approval, options) {
      this.approval = approval;
      this.options = options;
      this.settled = false;
      this.busy = false;
      this.expanded = false;
      this.node = el('li', { class: 'card', testid: 'approval-card', 'data-approval-id': approval.id });
      this.build();
      if (approval.status !== 'pending') {
        this.settle(decisionText(approval), approval.decision ? approval.decision.status : approval.status);
      }
    }

    // Apply a fresh view of the approval from the server.
    update(a) {
      const before = JSON.stringify(this.approval);
      this.approval = a;
      if (a.status !== 'pending') {
        this.settle(decisionText(a), a.decision ? a.decision.status : a.status);
        return;
      }
      if (JSON.stringify(a) !== before) this.build();
    }

    async reload() {
      const r = await authed('GET', approvalPath(this.approval.id));
      if (r.status === 200 && r.data) {
        this.update(r.data);
      } else if (r.status === 404) {
        this.settle('This approval is no longer visible to you.', 'gone');
      }
    }

    build() {
      const a = this.approval;
      const node = this.node;
      const commentValue = this.comment ? this.comment.value : '';
      const hadFocus = Boolean(this.comment) && document.activeElement === this.comment;
      clear(node);
      node.className = `card risk-${a.risk || 'unknown'}`;
      const headingId = `h-${a.id}`;
      node.setAttribute('aria-labelledby', headingId);

      const head = el('div', { class: 'card-head' },
        el('h2', { class: 'card-title', id: headingId },
          el('span', { testid: 'card-capability', class: 'capability', text: a.capabilityId })),
        el('div', { class: 'badges' },
          el('span', { class: `badge badge-risk badge-${a.risk}`, text: `${a.risk} risk` }),
          a.sideEffect ? el('span', { class: 'badge', text: a.sideEffect }) : null,
          a.ownRequest ? el('span', { class: 'badge badge-own', text: 'your request' }) : null,
          a.status !== 'pending' ? el('span', { class: 'badge badge-status', text: STATUS_WORD[a.status] || a.status }) : null));

      this.countdown = el('span', { testid: 'card-countdown', class: 'countdown', 'data-expires': a.expiresAt });
      const meta = el('dl', { class: 'meta' },
        el('div', {}, el('dt', { text: 'Requested by' }),
          el('dd', { testid: 'card-requester' },
            el('span', { class: 'mono', text: who(a.requester) }),
            a.requester && a.requester.kind ? el('span', { class: 'muted', text: ` (${a.requester.kind})` }) : null)),
        el('div', {}, el('dt', { text: 'Requested' }), el('dd', {}, timeEl(a.requestedAt))),
        el('div', {}, el('dt', { text: 'Time left' }), el('dd', {}, this.countdown)),
        el('div', {}, el('dt', { text: 'Type' }),
          el('dd', { text: Array.isArray(a.types) && a.types.length ? a.types.join(', ') : 'any approver' })),
        el('div', {}, el('dt', { text: 'Asked by' }),
          el('dd', { testid: 'card-policies' },
            Array.isArray(a.policies) && a.policies.length
              ? a.policies.map((p, i) => [i ? ', ' : '', el('span', { class: 'mono', text: p })])
              : el('span', { class: 'muted', text: 'the capability itself (it always needs approval)' }))),
        el('div', { class: 'meta-wide' }, el('dt', { text: 'Approval id' }),
          el('dd', { class: 'mono small', title: `execution ${a.executionId || ''}`, text: a.id })));

      const reasons = el('ul', { testid: 'card-reasons', class: 'reasons', 'aria-label': 'Reasons' },
        (Array.isArray(a.reasons) && a.reasons.length ? a.reasons : ['No reason given.'])
          .map((r) => el('li', { text: r })));

      node.append(head, reasons, meta, this.buildInput());

      this.result = el('p', { testid: 'card-result', class: 'card-result', role: 'status', 'aria-live': 'polite' });
      this.result.hidden = true;

      if (!this.settled && a.status === 'pending' && (a.mayApprove || a.mayReject)) {
        const commentId = `c-${a.id}`;
        this.comment = el('textarea', { id: commentId, testid: 'card-comment', rows: '2', maxlength: '2000' });
        this.comment.value = commentValue;
        this.approveButton = a.mayApprove
          ? el('button', { type: 'button', class: 'button button-approve', testid: 'card-approve', text: 'Approve' })
          : null;
        this.rejectButton = a.mayReject
          ? el('button', { type: 'button', class: 'button button-reject', testid: 'card-reject', text: 'Reject' })
          : null;
        if (this.approveButton) this.approveButton.addEventListener('click', () => this.decide('approved'));
        if (this.rejectButton) this.rejectButton.addEventListener('click', () => this.decide('rejected'));
        node.append(el('div', { class: 'decide' },
          el('label', { for: commentId, text: 'Comment (optional, kept with the decision)' }),
          this.comment,
          el('div', { class: 'actions' }, this.rejectButton, this.approveButton)));
      } else {
        this.comment = null;
        this.approveButton = null;
        this.rejectButton = null;
        // A settled card says what happened in its result line instead.
        if (!this.settled) {
          const why = a.status !== 'pending'
            ? decisionText(a)
            : a.decisionNote || 'You cannot decide this approval.';
          node.append(el('p', { testid: 'card-note', class: 'card-note', text: why }));
        }
      }
      node.append(this.result);
      tickCountdown(this.countdown, a);
      if (hadFocus && this.comment) this.comment.focus();
    }

    buildInput() {
      const a = this.approval;
      const box = el('div', { class: 'input' });
      const labelId = `in-${a.id}`;
      box.append(el('p', { class: 'input-label', id: labelId, text: 'Input, as you may see it' }));
      if (a.inputWithheld === true || a.input === null || a.input === undefined) {
        box.append(el('p', { class: 'withheld', testid: 'card-input-withheld',
          text: 'Input withheld: it could not be redacted for review, so it is not shown. ' +
            'Approve only if you can check the request another way.' }));
        return box;
      }
      const full = pretty(a.input);
      const long = full.length > TRUNCATE_AT;
      const pre = el('pre', { testid: 'card-input', class: 'json', 'aria-labelledby': labelId, tabindex: '0' });
      const paint = () => {
        pre.textContent = long && !this.expanded ? `${full.slice(0, TRUNCATE_AT)}…` : full;
      };
      paint();
      box.append(pre);
      if (long) {
        const button = el('button', {
          type: 'button', class: 'button button-link', testid: 'card-expand',
          'aria-expanded': String(this.expanded),
        });
        const label = () => {
          button.textContent = this.expanded ? 'Show less' : `Show all ${full.length} characters`;
          button.setAttribute('aria-expanded', String(this.expanded));
        };
        label();
        button.addEventListener('click', () => {
          this.expanded = !this.expanded;
          paint();
          label();
        });
        box.append(button);
      }
      return box;
    }

    // The approval is no longer pending: show why, take the controls away.
    settle(text, status) {
      this.settled = true;
      this.build();
      this.node.classList.add('settled', `settled-${status}`);
      this.showResult(text, false);
      const d = this.approval.decision;
      if (d && d.comment) {
        this.node.append(el('p', { class: 'card-comment-shown' },
          el('span', { class: 'muted', text: 'Comment: ' }), el('q', { text: d.comment })));
      }
      if (this.options.inQueue) {
        const dismiss = el('button', { type: 'button', class: 'button button-link', text: 'Dismiss' });
        dismiss.addEventListener('click', () => {
          state.cards.delete(this.approval.id);
          this.node.remove();
          applyFilters();
          $('queue-title').focus();
        });
        this.node.append(dismiss);
      }
      if (this.options.inQueue) applyFilters();
    }

    showResult(text, isError) {
      this.result.textContent = text;
      this.result.classList.toggle('is-error', Boolean(isError));
      this.result.hidden = false;
    }

    async decide(decision) {
      try {
        await this.decideOnce(decision);
      } catch (e) {
        this.busy = false;
        if (e instanceof SessionEnded) return;
        this.setButtons(true);
        this.showResult(`Something went wrong: ${e && e.message}`, true);
      }
    }

    async decideOnce(decision) {
      if (this.busy) return;
      const a = this.approval;
      const comment = this.comment ? this.comment.value.trim() : '';
      const trigger = decision === 'approved' ? this.approveButton : this.rejectButton;
      if (a.risk === 'high' || a.risk === 'critical') {
        const ok = await confirmDecision(a, decision, comment);
        if (!ok) {
          if (trigger) trigger.focus();
          return;
        }
      }
      this.busy = true;
      this.setButtons(false);
      this.showResult(decision === 'approved' ? 'Approving…' : 'Rejecting…', false);
      const r = await authed('POST', `${approvalPath(a.id)}/decision`,
        comment ? { decision, comment } : { decision });
      this.busy = false;
      if (r.status === 200 && r.data) {
        this.approval = r.data;
        const text = decisionText(r.data);
        this.settle(text, decision);
        announce(text);
        this.focusResult();
      } else if (r.status === 409) {
        // Someone else was first: show who, not an error.
        const g = await authed('GET', approvalPath(a.id));
        if (g.status === 200 && g.data) {
          this.approval = g.data;
          const text = g.data.decision ? decisionText(g.data, 'Already') : decisionText(g.data);
          this.settle(text, g.data.decision ? g.data.decision.status : g.data.status);
          announce(text);
        } else {
          this.settle('Someone else decided this approval first.', 'gone');
        }
        this.focusResult();
      } else {
        this.setButtons(true);
        this.showResult(r.status === 0 ? 'Cannot reach capgate; nothing was decided. Try again.'
          : `Not decided: ${r.message}`, true);
        this.focusResult();
      }
    }

    focusResult() {
      this.result.setAttribute('tabindex', '-1');
      this.result.focus();
    }

    setButtons(enabled) {
      for (const b of [this.approveButton, this.rejectButton, this.comment]) {
        if (b) b.disabled = !enabled;
      }
    }
  }

  function tickCountdown(node, a) {
    if (!node) return;
    if (a.status !== 'pending') {
      node.textContent = a.status === 'expired' ? 'expired' : '—';
      node.classList.remove('soon');
      return;
    }
    const ms = new Date(a.expiresAt).getTime() - Date.now();
    const text = left(ms);
    node.textContent = text ? `${text} left` : 'expired';
    node.classList.toggle('soon', ms < 5 * 60 * 1000);
    node.title = `Expires ${time(a.expiresAt)}`;
  }

  setInterval(() => {
    for (const card of state.cards.values()) tickCountdown(card.countdown, card.approval);
  }, 1000);

  // ---------------------------------------------------------------- confirmation

  let confirmOpen = null;

  function confirmDecision(a, decision, comment) {
    const dialog = $('confirm-dialog');
    const verb = decision === 'approved' ? 'Approve' : 'Reject';
    $('confirm-title').textContent = `${verb} a ${a.risk}-risk call?`;
    $('confirm-text').textContent = decision === 'approved'
      ? `${who(a.requester)} asked to run ${a.capabilityId}. Approving lets the call run once, with exactly the input shown.`
      : `${who(a.requester)} asked to run ${a.capabilityId}. Rejecting ends the request; the call will not run.`;
    const c = $('confirm-comment');
    c.textContent = comment ? `Your comment: ${comment}` : 'No comment.';
    c.hidden = false;
    const yes = $('confirm-yes');
    yes.textContent = verb;
    yes.className = `button ${decision === 'approved' ? 'button-approve' : 'button-reject'}`;
    return new Promise((resolve) => {
      confirmOpen = resolve;
      dialog.returnValue = '';
      dialog.showModal();
      $('confirm-no').focus();
    });
  }

  function wireDialog() {
    const dialog = $('confirm-dialog');
    dialog.addEventListener('close', () => {
      const resolve = confirmOpen;
      confirmOpen = null;
      if (resolve) resolve(dialog.returnValue === 'yes');
    });
  }

  // ---------------------------------------------------------------- history

  async function refreshHistory() {
    const r = await listApprovals('limit=200', 'the history');
    if (!r) return;
    const closed = r.data.filter((a) => a.status !== 'pending');
    const list = $('history');
    const seen = new Set();
    closed.forEach((a, i) => {
      seen.add(a.id);
      const key = JSON.stringify(a);
      let item = state.historyItems.get(a.id);
      if (!item || item.key !== key) {
        const node = historyItem(a, item && item.node.querySelector('details[open]') !== null);
        if (item) item.node.replaceWith(node);
        item = { key, node };
        state.historyItems.set(a.id, item);
      }
      if (list.children[i] !== item.node) list.insertBefore(item.node, list.children[i] || null);
    });
    for (const [id, item] of state.historyItems) {
      if (!seen.has(id)) {
        item.node.remove();
        state.historyItems.delete(id);
      }
    }
    show($('empty-history'), closed.length === 0);
    $('history-updated').textContent = `Updated ${new Date().toLocaleTimeString()}`;
  }

  function historyItem(a, open) {
    const d = a.decision;
    const status = d ? d.status : a.status;
    const input = a.inputWithheld === true || a.input === null || a.input === undefined
      ? el('p', { class: 'withheld', text: 'Input withheld: it could not be redacted for review.' })
      : el('pre', { class: 'json', tabindex: '0', text: pretty(a.input) });
    const details = el('details', { class: 'history-details' },
      el('summary', { text: 'Request details' }),
      el('ul', { class: 'reasons', 'aria-label': 'Reasons' },
        (Array.isArray(a.reasons) ? a.reasons : []).map((r) => el('li', { text: r }))),
      el('p', { class: 'muted small' },
        `Requested ${time(a.requestedAt)} · types: ${(a.types || []).join(', ') || 'any'} · ` +
        `policies: ${(a.policies || []).join(', ') || 'the capability itself'} · ${a.id}`),
      input);
    if (open) details.open = true;
    return el('li', { class: `history-item status-${status}`, testid: 'history-item', 'data-approval-id': a.id },
      el('div', { class: 'history-head' },
        el('h2', { class: 'card-title' }, el('span', { class: 'capability', text: a.capabilityId })),
        el('div', { class: 'badges' },
          el('span', { class: `badge badge-status badge-${status}`, text: STATUS_WORD[status] || status }),
          el('span', { class: `badge badge-risk badge-${a.risk}`, text: `${a.risk} risk` }))),
      el('p', { class: 'history-line' },
        el('span', { class: 'muted', text: 'Requested by ' }),
        el('span', { class: 'mono', text: who(a.requester) })),
      el('p', { class: 'history-line', testid: 'history-decision', text: decisionText(a) }),
      d && d.comment
        ? el('blockquote', { class: 'history-comment', testid: 'history-comment', text: d.comment })
        : el('p', { class: 'history-line muted', testid: 'history-comment', text: 'No comment.' }),
      el('p', { class: `history-line outcome outcome-${a.outcome ? a.outcome.status : 'none'}`,
        testid: 'history-outcome', text: outcomeText(a) }),
      details);
  }

  // ---------------------------------------------------------------- wiring

  function wire() {
    $('signin-form').addEventListener('submit', signIn);
    $('signout').addEventListener('click', signOut);
    wireDialog();
    for (const [id, key] of [['filter-capability', 'capability'], ['filter-requester', 'requester'], ['filter-type', 'type']]) {
      $(id).addEventListener('change', (e) => {
        state.filters[key] = e.target.value;
        applyFilters();
      });
    }
    for (const [id, view] of [['tab-queue', 'queue'], ['tab-history', 'history']]) {
      $(id).addEventListener('click', (e) => {
        if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
        e.preventDefault();
        go({ view });
      });
    }
    $('detail-back').addEventListener('click', (e) => {
      if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
      e.preventDefault();
      go({ view: 'queue' });
    });
    window.addEventListener('popstate', () => {
      state.route = parseRoute();
      render();
    });
    document.addEventListener('visibilitychange', () => {
      if (document.visibilityState === 'visible') pollNow();
    });
  }

  if (document.readyState === 'loading') {
    document.addEventListener('DOMContentLoaded', start);
  } else {
    start();
  }
})();
