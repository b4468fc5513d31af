// The wasmhost operator page. It holds no data of its own: it reads
// /v1/state (and, for a clicked matrix cell, the binding's tools) with the
// admin token as a bearer token, every POLL_MS while the tab is visible.
// Every string from the daemon is put into the page as text (textContent,
// text nodes, attribute values), never as HTML: tool and client names come
// from upstreams and clients. The CSP forbids inline script and HTML sinks.
'use strict';

(() => {
  const POLL_MS = 1500;
  const STORE = 'wasmhost-admin-token';
  const $ = (id) => document.getElementById(id);

  let token = '';
  let timer = 0;
  let lastState = ''; // the last /v1/state body rendered
  let selected = null; // {session, server} of the clicked cell
  let gen = 0; // bumped on every (re)start, so stale answers are dropped

  // el makes an element with text children (strings become text nodes).
  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (k === 'class') e.className = v;
      else if (k === 'title') e.title = v;
      else e.setAttribute(k, v); // data-*, only
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
    }
    return e;
  }

  function setText(id, s) { $(id).textContent = s === undefined || s === null ? '' : String(s); }

  function status(text, ok) {
    const s = $('status');
    s.textContent = text;
    s.className = ok ? 'ok' : 'bad';
  }

  // get fetches path with the token; null on 401 (the login form is shown).
  async function get(path) {
    const resp = await fetch(path, {
      headers: { Authorization: 'Bearer ' + token },
      cache: 'no-store',
      credentials: 'omit',
      redirect: 'error',
    });
    if (resp.status === 401) {
      logout('The daemon refused the admin token.');
      return null;
    }
    const body = await resp.text();
    if (!resp.ok) {
      let msg = body;
      try { msg = JSON.parse(body).error || body; } catch (_) { /* not JSON */ }
      throw new Error(resp.status + ': ' + msg);
    }
    return body;
  }

  function logout(why) {
    gen++;
    clearTimeout(timer);
    token = '';
    lastState = '';
    sessionStorage.removeItem(STORE);
    $('main').hidden = true;
    $('forget').hidden = true;
    $('login').hidden = false;
    setText('login-error', why || '');
    status('not connected', false);
    $('token').focus();
  }

  function login(t) {
    token = t;
    sessionStorage.setItem(STORE, t);
    $('login').hidden = true;
    $('forget').hidden = false;
    setText('login-error', '');
    gen++;
    poll(gen);
  }

  async function poll(g) {
    if (g !== gen) return;
    clearTimeout(timer);
    try {
      const body = await get('/v1/state');
      if (g !== gen || body === null) return;
      if (body !== lastState) {
        lastState = body;
        render(JSON.parse(body));
        if (selected) await loadTools(g);
      }
      $('main').hidden = false;
      status('live, updated ' + new Date().toLocaleTimeString(), true);
    } catch (err) {
      if (g !== gen) return;
      status('cannot read /v1/state: ' + err.message, false);
    }
    if (g === gen && !document.hidden) timer = setTimeout(() => poll(g), POLL_MS);
  }

  function render(st) {
    renderPlugin(st.policy || {});
    renderServers(st.pool || []);
    renderSessions(st.sessions || []);
    renderMatrix(st.sessions || []);
    renderReloads(st.reloads || []);
  }

  function renderPlugin(p) {
    setText('plugin-name', p.name);
    setText('plugin-version', p.version);
    setText('plugin-source', p.source);
    setText('plugin-digest', p.sha256);
  }

  function renderServers(entries) {
    const rows = [...entries].sort((a, b) => a.server.localeCompare(b.server) || (a.id || '').localeCompare(b.id || ''));
    $('servers').tBodies[0].replaceChildren(...rows.map((e) => el('tr', { 'data-server': e.server },
      el('td', {}, e.server),
      el('td', { class: 'state-' + e.state, 'data-field': 'state' }, e.state),
      el('td', { class: 'mono', 'data-field': 'pid' }, e.pid ? String(e.pid) : '-'),
      el('td', { 'data-field': 'restarts' }, String(e.restarts || 0)),
      el('td', {}, e.pooled ? 'yes' : 'no'),
      el('td', {}, String(e.views || 0)),
      el('td', { class: 'error', 'data-field': 'error' }, e.error || e.lastError || ''),
    )));
  }

  function renderSessions(sessions) {
    $('sessions').tBodies[0].replaceChildren(...sessions.map((s) => {
      const clients = el('ul', { 'data-field': 'client-list' }, ...(s.clientList || []).map((c) =>
        el('li', {}, c.name || '(unnamed)', c.version ? ' ' + c.version : '', c.protocolVersion ? ' (' + c.protocolVersion + ')' : '')));
      return el('tr', { 'data-session': s.name },
        el('td', {}, s.name),
        el('td', { class: 'mono' }, s.url),
        el('td', {}, s.tokenSource || ''),
        el('td', { 'data-field': 'clients' }, String(s.clients || 0)),
        el('td', {}, clients),
        el('td', { 'data-field': 'tools' }, String((s.tools || []).length)));
    }));
  }

  function renderMatrix(sessions) {
    const servers = [...new Set(sessions.flatMap((s) => (s.servers || []).map((b) => b.server)))].sort();
    $('matrix').tHead.replaceChildren(el('tr', {}, el('th', {}, 'session \\ server'), ...servers.map((n) => el('th', {}, n))));
    $('matrix').tBodies[0].replaceChildren(...sessions.map((s) => {
      const byServer = new Map((s.servers || []).map((b) => [b.server, b]));
      return el('tr', {}, el('th', {}, s.name), ...servers.map((server) => cell(s.name, server, byServer.get(server))));
    }));
  }

  function cell(session, server, b) {
    if (!b) return el('td', { class: 'none' }, '-');
    let cls = 'cell';
    if (b.pending) cls += ' pending';
    else if (b.error) cls += ' failed';
    if (selected && selected.session === session && selected.server === server) cls += ' selected';
    const btn = el('button', { type: 'button', 'data-field': 'counts' },
      b.tools + ' tools / ' + b.prompts + ' prompts / ' + b.resources + ' resources');
    btn.addEventListener('click', () => select(session, server));
    const td = el('td', { class: cls, 'data-session': session, 'data-server': server },
      btn,
      el('span', { class: 'badge' + (b.trusted > 0 ? ' trusted' : ''), 'data-field': 'trusted' }, b.trusted + ' trusted'),
      b.overlay ? el('span', { class: 'badge overlay' }, 'overlay') : null,
      b.pending ? el('span', { class: 'badge' }, 'pending') : null);
    const err = b.switchError || b.error;
    if (err) td.append(el('div', { class: 'error' }, err));
    return td;
  }

  function select(session, server) {
    selected = { session, server };
    for (const td of document.querySelectorAll('#matrix td.cell')) {
      td.classList.toggle('selected', td.dataset.session === session && td.dataset.server === server);
    }
    loadTools(gen);
  }

  async function loadTools(g) {
    const sel = selected;
    if (!sel) return;
    $('detail').hidden = false;
    setText('detail-title', 'Tools of ' + sel.server + ' that ' + sel.session + ' sees');
    try {
      const body = await get('/v1/sessions/' + encodeURIComponent(sel.session) + '/servers/' + encodeURIComponent(sel.server) + '/tools');
      if (g !== gen || body === null || selected !== sel) return;
      const tools = JSON.parse(body).tools || [];
      setText('detail-error', '');
      $('detail-tools').tBodies[0].replaceChildren(...tools.map((t) => el('tr', {},
        el('td', { class: 'mono', 'data-field': 'tool' }, t.name),
        el('td', {}, t.trust ? 'yes' : 'no'),
        el('td', {}, t.alwaysLoad ? 'yes' : 'no'))));
    } catch (err) {
      if (g !== gen || selected !== sel) return;
      setText('detail-error', err.message);
      $('detail-tools').tBodies[0].replaceChildren();
    }
  }

  function renderReloads(reloads) {
    $('reloads').replaceChildren(...reloads.map((r) => {
      const li = el('li', { class: r.ok ? 'ok' : 'failed' },
        el('span', { class: 'mono' }, new Date(r.at).toLocaleString()), ' ',
        el('strong', {}, r.trigger), ' ', r.ok ? 'ok' : (r.applied ? 'partly applied' : 'refused'), ': ',
        el('span', { 'data-field': 'summary' }, r.summary));
      if (r.changed && r.changed.length) li.append(el('div', {}, 'sessions changed: ' + r.changed.join(', ')));
      if (r.error) li.append(el('div', { class: 'error' }, r.error));
      for (const w of r.warnings || []) li.append(el('div', { class: 'hint' }, 'warning: ' + w));
      return li;
    }));
  }

  document.addEventListener('visibilitychange', () => {
    if (!document.hidden && token) { gen++; poll(gen); }
  });

  $('login').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = $('token').value.trim();
    $('token').value = '';
    if (t) login(t);
  });
  $('forget').addEventListener('click', () => logout(''));

  // A token in the fragment (/ui/#token=...) is taken and removed from the
  // address bar and history; the fragment is never sent to the server.
  const frag = new URLSearchParams(location.hash.slice(1));
  const fromFragment = frag.get('token');
  if (fromFragment) history.replaceState(null, '', location.pathname + location.search);
  const saved = fromFragment || sessionStorage.getItem(STORE);
  if (saved) login(saved); else logout('');
})();
