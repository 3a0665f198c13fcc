// The relay console: a page served by the relay itself that calls the
// relay's own REST API as its user signed in: with an account's name and
// password, or with an API key. It is plain JavaScript with no build step
// and no dependency.
//
// A password sign-in opens a session: the relay sets an HttpOnly cookie
// the page never sees, and tells the page the session's CSRF token, which
// every call sends in the X-CSRF-Token header (the relay refuses a write
// without it). A key is kept in this tab only (sessionStorage), never in
// lasting storage or a cookie, and is sent only to this relay as the
// x-api-key header. Everything the relay returns is written into the page
// as text (textContent), never as HTML.
"use strict";

(() => {
  const KEY_STORAGE = "relay-console-key";
  const MAX_EVENTS = 200;
  // Scopes in the relay's canonical order, offered when the signed-in key
  // cannot list itself (it lacks `admin`); the relay refuses what the key
  // may not grant anyway.
  const ALL_SCOPES = ["entity:read", "entity:write", "search", "structure:read", "structure:write",
    "encounter:read", "encounter:manage", "execute-js", "file:read", "file:write", "clients:read",
    "dnd5e", "events:subscribe", "admin"];
  // EventSource delivers a named event only to listeners of that name, so
  // the console listens to every name the relay sends: the streams' own,
  // the combat hooks and the document hooks of every document type.
  const DOCUMENT_TYPES = ["Actor", "Item", "ActiveEffect", "Scene", "Token", "JournalEntry", "JournalEntryPage",
    "Macro", "Folder", "Combat", "Combatant", "User", "ChatMessage", "Playlist", "PlaylistSound", "RollTable",
    "Cards", "Drawing", "Tile", "Wall", "AmbientLight", "AmbientSound", "Note", "MeasuredTemplate", "Region"];
  const EVENT_NAMES = [
    "connected", "reset", "overflow", "message",
    "combatStart", "combatRound", "combatTurn",
    "combat-start", "combat-turn", "combat-round", "combat-end", "combat-combatant-add", "combat-combatant-remove",
    "actor-update", "actor-item-add", "actor-item-update", "actor-item-remove", "actor-effect-add", "actor-effect-remove",
    "scene-update", "scene-activate", "scene-token-create", "scene-token-update", "scene-token-delete",
    ...["create", "update", "delete"].flatMap((op) => DOCUMENT_TYPES.map((t) => op + t)),
  ];
  const STREAMS = {
    hooks: { path: "/hooks/subscribe", param: "hooks", hint: "hook names, such as updateActor,createItem (all when empty)" },
    actor: { path: "/actor/subscribe", param: "actorUuid", hint: "an actor's uuid (all when empty)" },
    encounters: { path: "/encounters/subscribe", param: "encounterId", hint: "an encounter's id (all when empty)" },
    scene: { path: "/scene/subscribe", param: "sceneId", hint: "a scene's id (all when empty)" },
  };

  const state = {
    key: null, // the API key, while signed in with one
    session: null, // {account, csrfToken}, while signed in with a password
    self: null, // the signed-in key's own record, when it may list keys
    clients: [], // the worlds the key may use
    stream: null, // the event stream being watched
  };

  const $ = (id) => document.getElementById(id);

  // el builds an element with attributes and children; strings become
  // text nodes, so nothing is ever parsed as HTML.
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v);
    }
    for (const c of children.flat()) {
      if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  // credentials are the headers that say who calls: the key, or the
  // session's CSRF token (its cookie goes along by itself).
  function credentials() {
    if (state.key) return { "x-api-key": state.key };
    if (state.session) return { "X-CSRF-Token": state.session.csrfToken };
    return {};
  }

  // api calls the relay with the signed-in key and returns the envelope's
  // data, or throws an ApiError with the relay's own error text.
  async function api(method, path, body) {
    const init = { method, headers: credentials() };
    if (body !== undefined) {
      init.headers["content-type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (e) {
      throw new ApiError(0, "The relay cannot be reached (" + e.message + ")");
    }
    let json = null;
    try {
      json = await resp.json();
    } catch (e) {
      // Not JSON: the status alone says what went wrong.
    }
    if (!resp.ok) {
      throw new ApiError(resp.status, (json && json.error) || resp.status + " " + resp.statusText);
    }
    return json ? json.data : null;
  }

  // authApi calls one of the relay's /auth endpoints (key requests and
  // pair requests), which answer plain JSON rather than the API's
  // envelope.
  async function authApi(method, path, body) {
    const init = { method, headers: credentials() };
    if (body !== undefined) {
      init.headers["content-type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (e) {
      throw new ApiError(0, "The relay cannot be reached (" + e.message + ")");
    }
    let json = null;
    try {
      json = await resp.json();
    } catch (e) {
      // Not JSON: the status alone says what went wrong.
    }
    if (!resp.ok) {
      throw new ApiError(resp.status, (json && json.error) || resp.status + " " + resp.statusText);
    }
    return json;
  }

  function showError(id, err) {
    $(id).textContent = err ? (err.message || String(err)) : "";
  }

  function formatTime(rfc3339) {
    if (!rfc3339) return "";
    const d = new Date(rfc3339);
    return isNaN(d) ? rfc3339 : d.toLocaleString();
  }

  // ---- signing in and out ------------------------------------------------

  async function signIn(key) {
    state.key = key;
    // Any call proves the key: 401 refuses it, while 403 only says it
    // lacks a scope (clients:read) and the key is good.
    try {
      await loadWorlds();
    } catch (e) {
      if (e.status !== 403) {
        state.key = null;
        throw e;
      }
    }
    sessionStorage.setItem(KEY_STORAGE, key);
    await loadSelf();
    await enter(state.self
      ? "Signed in as " + state.self.name + " (" + state.self.prefix + "…)"
      : "Signed in with " + key.slice(0, 11) + "…");
  }

  // signInWithPassword opens a session of the account; the relay sets its
  // cookie.
  async function signInWithPassword(name, password) {
    let resp;
    try {
      resp = await fetch("/console/session", { method: "POST", headers: { "content-type": "application/json" },
        body: JSON.stringify({ name, password }) });
    } catch (e) {
      throw new ApiError(0, "The relay cannot be reached (" + e.message + ")");
    }
    const json = await resp.json().catch(() => null);
    if (!resp.ok) throw new ApiError(resp.status, (json && json.error) || resp.status + " " + resp.statusText);
    await startSession(json);
  }

  // startSession enters the console with a session the relay confirmed.
  async function startSession(s) {
    state.key = null;
    state.session = s;
    try {
      await loadWorlds();
    } catch (e) {
      if (e.status === 401) {
        state.session = null;
        throw e;
      }
    }
    await loadSelf();
    await enter("Signed in to " + s.account.name + (s.account.operator ? " (operator)" : ""));
  }

  // enter shows the console once signed in.
  async function enter(who) {
    $("view-signin").hidden = true;
    $("tabs").hidden = false;
    $("who").hidden = false;
    $("who-name").textContent = who;
    // The accounts are the operator's: the tab shows to the operator's
    // session, and to a key that may manage them (the bootstrap key, or a
    // key with the scope `accounts`, which only the operator's keys hold).
    // The console decides from what it knows already, so that nobody
    // else's sign-in makes a refused call.
    const managesAccounts = state.session
      ? !!(state.session.account && state.session.account.operator)
      : !!(state.self && (state.self.createdBy === "bootstrap" || (state.self.scopes || []).includes("accounts")));
    $("tab-accounts").hidden = !managesAccounts;
    if (managesAccounts) {
      try {
        renderAccounts((await api("GET", "/accounts")).accounts || []);
      } catch (e) {
        $("tab-accounts").hidden = true;
      }
    }
    renderKeyForm();
    const request = pendingRequest();
    if (request) {
      showApproval(request);
      return;
    }
    show(location.hash.slice(1) || "worlds");
  }

  // ---- approving key requests and pair requests --------------------------

  // pendingRequest is the request the page was opened for: the relay's
  // approvalUrl and pairUrl end in ?key-request=CODE or ?pair-request=CODE.
  function pendingRequest() {
    const q = new URLSearchParams(location.search);
    for (const kind of ["key", "pair"]) {
      const code = q.get(kind + "-request");
      if (code) return { kind, code: code.trim().toUpperCase() };
    }
    return null;
  }

  function requestPath(req) {
    return "/auth/" + req.kind + "-request/" + encodeURIComponent(req.code);
  }

  async function showApproval(req) {
    for (const v of document.querySelectorAll(".view")) v.hidden = v.id !== "view-approve";
    for (const t of document.querySelectorAll(".tab")) t.classList.remove("active");
    showError("approve-error", null);
    $("approve-done").textContent = "";
    $("approve-key").hidden = true;
    $("approve-pair").hidden = true;
    $("approve-actions").hidden = true;
    $("approve-title").textContent = req.kind === "key" ? "Approve a key request" : "Approve a tabletop's pairing";
    $("approve-code").textContent = req.code;
    let r;
    try {
      r = await authApi("GET", requestPath(req));
    } catch (e) {
      showError("approve-error", e);
      return;
    }
    $("approve-status").textContent = r.status;
    $("approve-expiry").textContent = formatTime(r.expiresAt);
    if (req.kind === "key") {
      $("approve-app").textContent = r.appName;
      $("approve-app-desc").textContent = r.appDescription || "";
      $("approve-app-url").textContent = r.appUrl || "none given";
      $("approve-scopes").replaceChildren(...(r.requestedScopes || []).map((s) => {
        const box = el("input", { type: "checkbox", name: "scope", value: s });
        box.checked = true;
        return el("label", {}, box, s);
      }));
      const asked = r.clientIds || [];
      const worlds = asked.length ? asked : state.clients.map((c) => c.clientId);
      $("approve-worlds").replaceChildren(...worlds.map((w) => {
        const box = el("input", { type: "checkbox", name: "world", value: w });
        box.checked = asked.length > 0;
        return el("label", {}, box, w);
      }));
      $("approve-worlds-hint").textContent = asked.length
        ? "The worlds the tool asked for; uncheck those it should not use."
        : "None checked: every world, the ones linked later included.";
      $("approve-user").value = (state.self && state.self.scopedUserId) || "";
      $("approve-key").hidden = false;
    } else {
      $("approve-world-title").textContent = r.worldTitle || r.worldId;
      $("approve-world-id").textContent = r.worldId;
      $("approve-world-system").textContent = [r.systemTitle || r.systemId, r.systemVersion, r.foundryVersion && "Foundry " + r.foundryVersion]
        .filter(Boolean).join(" · ");
      $("approve-pair-world").replaceChildren(el("option", { value: "" }, "a new world"),
        ...state.clients.map((c) => el("option", { value: c.clientId }, "again: " + (c.title || c.clientId) + " (" + c.clientId + ")")));
      $("approve-pair").hidden = false;
    }
    $("approve-actions").hidden = r.status !== "pending";
    $("approve-yes").onclick = () => decide(req, true);
    $("approve-no").onclick = () => decide(req, false);
  }

  async function decide(req, approve) {
    showError("approve-error", null);
    let body = {};
    if (approve && req.kind === "key") {
      body.scopes = [...document.querySelectorAll("#approve-scopes input:checked")].map((i) => i.value);
      const worlds = [...document.querySelectorAll("#approve-worlds input:checked")].map((i) => i.value);
      if (worlds.length) body.clientIds = worlds;
      const user = $("approve-user").value.trim();
      if (user) body.userId = user;
      const expires = $("approve-expires").value;
      if (expires) body.expiresAt = new Date(expires).toISOString().replace(/\.\d+Z$/, "Z");
    } else if (approve) {
      const clientId = $("approve-pair-world").value;
      if (clientId) body.clientId = clientId;
    }
    $("approve-yes").disabled = true;
    $("approve-no").disabled = true;
    try {
      const answer = await authApi("POST", requestPath(req) + (approve ? "/approve" : "/deny"), body);
      $("approve-actions").hidden = true;
      $("approve-status").textContent = approve ? "approved" : "denied";
      $("approve-done").textContent = approve
        ? (req.kind === "key" ? "Approved: the tool receives its key." : "Approved: the tabletop pairs and connects in a moment.")
        : "Denied.";
      if (answer && answer.exchangeCode && answer.callbackUrl) {
        // The web flow: the tool's own page trades the exchange code for
        // the key. The address was checked to be http(s) when the request
        // was made.
        const back = new URL(answer.callbackUrl);
        back.searchParams.set("code", answer.exchangeCode);
        $("approve-done").append(" ", el("a", { id: "approve-callback", href: back.toString(), rel: "noreferrer" }, "Return to " + back.host));
      }
      history.replaceState(null, "", location.pathname + "#worlds");
    } catch (e) {
      showError("approve-error", e);
    } finally {
      $("approve-yes").disabled = false;
      $("approve-no").disabled = false;
    }
  }

  async function signOut() {
    stopStream("Not watching.");
    if (state.session) {
      // The relay ends the session and removes its cookie.
      await fetch("/console/session", { method: "DELETE", headers: credentials() }).catch(() => {});
    }
    sessionStorage.removeItem(KEY_STORAGE);
    state.key = null;
    state.session = null;
    state.self = null;
    state.clients = [];
    for (const v of document.querySelectorAll(".view")) v.hidden = true;
    $("tabs").hidden = true;
    $("who").hidden = true;
    $("new-key-box").hidden = true;
    $("new-key").textContent = "";
    $("new-account-box").hidden = true;
    $("new-account-key").textContent = "";
    $("tab-accounts").hidden = true;
    $("accounts-table").querySelector("tbody").replaceChildren();
    $("pair-result").hidden = true;
    $("signin-key").value = "";
    $("signin-password").value = "";
    $("view-signin").hidden = false;
    history.replaceState(null, "", location.pathname);
  }

  // loadSelf finds the signed-in key among the keys it may list (a key
  // always sees itself), to offer only what it may grant.
  async function loadSelf() {
    state.self = null;
    try {
      const data = await api("GET", "/keys");
      renderKeys(data.keys || []);
      state.self = state.key ? (data.keys || []).find((k) => !k.revokedAt && state.key.startsWith("rk_" + k.prefix)) || null : null;
    } catch (e) {
      showError("keys-error", e);
    }
  }

  // ---- views -------------------------------------------------------------

  function show(view) {
    if (!["worlds", "pairing", "keys", "events", "accounts", "audit"].includes(view)) view = "worlds";
    if (view === "accounts" && $("tab-accounts").hidden) view = "worlds";
    for (const v of document.querySelectorAll(".view")) v.hidden = v.id !== "view-" + view;
    for (const t of document.querySelectorAll(".tab")) t.classList.toggle("active", t.dataset.view === view);
    history.replaceState(null, "", "#" + view);
    if (view === "worlds") loadWorlds().catch(() => {});
    if (view === "keys") refreshKeys();
    if (view === "audit") loadAudit(false);
    if (view === "accounts") refreshAccounts();
  }

  // ---- accounts (the operator only) ----------------------------------------

  async function refreshAccounts() {
    showError("accounts-error", null);
    try {
      const data = await api("GET", "/accounts");
      renderAccounts(data.accounts || []);
    } catch (e) {
      showError("accounts-error", e);
    }
  }

  function renderAccounts(list) {
    const body = $("accounts-table").querySelector("tbody");
    body.replaceChildren(...list.map((a) => {
      const usage = a.usage || {};
      const limits = a.limits || {};
      const of = (used, limit) => used + (limit ? " of " + limit : "");
      let action = "";
      if (a.id !== "operator") {
        const verb = a.suspended ? "resume" : "suspend";
        action = el("button", { type: "button", class: a.suspended ? "ghost small" : "danger small", "data-account-action": verb }, a.suspended ? "Resume" : "Suspend");
        action.addEventListener("click", async () => {
          action.disabled = true;
          try {
            await api("POST", "/accounts/" + encodeURIComponent(a.id) + "/" + verb);
            await refreshAccounts();
          } catch (e) {
            showError("accounts-error", e);
            action.disabled = false;
          }
        });
      }
      const badge = a.suspended
        ? el("span", { class: "badge bad" }, "suspended")
        : el("span", { class: "badge ok" }, "active");
      return el("tr", { "data-account": a.id, "data-name": a.name },
        el("td", {}, a.name),
        el("td", {}, el("code", {}, a.id)),
        el("td", {}, of(usage.keys || 0, limits.keys)),
        el("td", {}, of(usage.worlds || 0, limits.worlds)),
        el("td", {}, badge),
        el("td", {}, action));
    }));
  }

  async function createAccount(ev) {
    ev.preventDefault();
    showError("account-error", null);
    $("new-account-box").hidden = true;
    try {
      const data = await api("POST", "/accounts", { name: $("account-name").value });
      $("new-account-key").textContent = data.key;
      $("new-account-box").hidden = false;
      $("account-name").value = "";
      await refreshAccounts();
    } catch (e) {
      showError("account-error", e);
    }
  }

  // ---- worlds --------------------------------------------------------------

  async function loadWorlds() {
    showError("worlds-error", null);
    let data;
    try {
      data = await api("GET", "/clients");
    } catch (e) {
      showError("worlds-error", e);
      throw e;
    }
    state.clients = data.clients || [];
    const body = $("worlds-table").querySelector("tbody");
    body.replaceChildren(...state.clients.map((c) => {
      const online = c.online ?? c.isOnline;
      return el("tr", { "data-client": c.clientId },
        el("td", {}, el("code", {}, c.clientId)),
        el("td", {}, c.title || ""),
        el("td", {}, c.system || ""),
        el("td", {}, el("span", { class: "badge " + (online ? "ok" : "off") }, online ? "online" : "offline")));
    }));
    $("worlds-empty").hidden = state.clients.length > 0;
    fillWorldSelects();
    return data;
  }

  function fillWorldSelects() {
    const pair = $("pair-world");
    const keep = pair.value;
    pair.replaceChildren(el("option", { value: "" }, "a new world"),
      ...state.clients.map((c) => el("option", { value: c.clientId }, "again: " + (c.title || c.clientId) + " (" + c.clientId + ")")));
    pair.value = keep;
    const ev = $("ev-world");
    const keepEv = ev.value;
    ev.replaceChildren(...state.clients.map((c) => el("option", { value: c.clientId }, (c.title || c.clientId) + " (" + c.clientId + ")")));
    if (keepEv) ev.value = keepEv;
    renderKeyWorlds();
  }

  // ---- pairing -------------------------------------------------------------

  async function createPairingCode(ev) {
    ev.preventDefault();
    showError("pair-error", null);
    const clientId = $("pair-world").value;
    try {
      const data = await api("POST", "/pairing-codes", clientId ? { clientId } : {});
      $("pair-code").textContent = data.code;
      $("pair-expiry").textContent = "Valid until " + formatTime(data.expiresAt) + " (" + Math.round(data.expiresIn / 60) +
        " minutes), for one pairing" + (data.clientId ? " of " + data.clientId : " of a new world") + ".";
      $("pair-address").textContent = location.origin;
      $("pair-result").hidden = false;
    } catch (e) {
      $("pair-result").hidden = true;
      showError("pair-error", e);
    }
  }

  // ---- audit log -------------------------------------------------------------

  // loadAudit shows the audit records the filters select, oldest first;
  // more appends the next page to those shown.
  async function loadAudit(more) {
    showError("audit-error", null);
    const q = new URLSearchParams();
    const action = $("audit-action").value.trim();
    if (action) q.set("action", action);
    const since = $("audit-since").value;
    if (since) q.set("since", new Date(since).toISOString());
    if (more && state.auditCursor) q.set("cursor", state.auditCursor);
    let data;
    try {
      data = await api("GET", "/audit?" + q.toString());
    } catch (e) {
      showError("audit-error", e);
      return;
    }
    const body = $("audit-table").querySelector("tbody");
    const rows = (data.records || []).map((r) => el("tr", { "data-action": r.action, "data-outcome": r.outcome, "data-id": r.id },
      el("td", {}, formatTime(r.time)),
      el("td", {}, r.accountId ? el("code", {}, r.accountId) : el("span", { class: "muted" }, "unknown")),
      el("td", {}, r.keyId ? el("code", {}, r.keyId) : r.sessionId ? "session " + r.sessionId : el("span", { class: "muted" }, "none")),
      el("td", {}, r.address),
      el("td", {}, el("code", {}, r.action)),
      el("td", {}, r.target ? el("code", {}, r.target) : ""),
      el("td", {}, el("span", { class: "badge " + (r.outcome === "ok" ? "ok" : "bad") }, r.outcome)),
      el("td", {}, r.detail)));
    if (more) body.append(...rows);
    else body.replaceChildren(...rows);
    state.auditCursor = data.nextCursor || "";
    $("audit-more").hidden = !state.auditCursor;
    $("audit-empty").hidden = body.children.length > 0;
  }

  // ---- keys ------------------------------------------------------------------

  async function refreshKeys() {
    showError("keys-error", null);
    try {
      const data = await api("GET", "/keys");
      renderKeys(data.keys || []);
    } catch (e) {
      showError("keys-error", e);
    }
  }

  function renderKeys(list) {
    const body = $("keys-table").querySelector("tbody");
    body.replaceChildren(...list.map((k) => {
      const revoked = !!k.revokedAt;
      const own = state.key && state.key.startsWith("rk_" + k.prefix) && !revoked;
      const users = [k.scopedUserId, ...Object.entries(k.clientUsers || {}).map(([w, u]) => w + ": " + u)].filter(Boolean);
      let action = "";
      if (!revoked) {
        const button = el("button", { type: "button", class: "ghost small", "data-revoke": k.id }, "Revoke");
        // Two clicks: the first arms the button, the second revokes.
        button.addEventListener("click", async () => {
          if (button.dataset.armed !== "yes") {
            button.dataset.armed = "yes";
            button.className = "danger small";
            button.textContent = own ? "Revoke this key?" : "Confirm revoke";
            return;
          }
          button.disabled = true;
          try {
            await api("DELETE", "/keys/" + encodeURIComponent(k.id));
            if (own) {
              signOut();
              return;
            }
            await refreshKeys();
          } catch (e) {
            showError("keys-error", e);
            button.disabled = false;
          }
        });
        action = button;
      }
      const stateBadge = revoked
        ? el("span", { class: "badge bad" }, "revoked")
        : k.enabled ? el("span", { class: "badge ok" }, "active") : el("span", { class: "badge off" }, "disabled");
      return el("tr", { class: revoked ? "revoked" : "", "data-key": k.id, "data-name": k.name },
        el("td", {}, k.name, own ? el("div", { class: "muted small" }, "this key") : null),
        el("td", {}, el("code", {}, k.prefix + "…"), el("div", { class: "muted small" }, k.id)),
        el("td", {}, el("div", { class: "tags" }, (k.scopes || []).map((s) => el("span", { class: "tag" }, s)))),
        el("td", {}, (k.clientIds || []).length ? el("div", { class: "tags" }, k.clientIds.map((c) => el("span", { class: "tag" }, c))) : el("span", { class: "muted" }, "every world")),
        el("td", {}, users.join(", ")),
        el("td", {}, k.expiresAt ? formatTime(k.expiresAt) : el("span", { class: "muted" }, "never")),
        el("td", {}, stateBadge),
        el("td", {}, action));
    }));
  }

  // renderKeyForm offers the scopes and worlds the signed-in key may grant.
  function renderKeyForm() {
    // A key that acts as a user creates only keys acting as that user.
    $("key-user").value = (state.self && state.self.scopedUserId) || "";
    const scopes = state.self ? state.self.scopes : ALL_SCOPES;
    $("key-scopes").replaceChildren(...scopes.map((s) =>
      el("label", {}, el("input", { type: "checkbox", name: "scope", value: s }), s)));
    renderKeyWorlds();
  }

  function renderKeyWorlds() {
    const bound = state.self && (state.self.clientIds || []).length > 0;
    const worlds = bound ? state.self.clientIds : state.clients.map((c) => c.clientId);
    const checked = new Set([...document.querySelectorAll("#key-worlds input:checked")].map((i) => i.value));
    $("key-worlds").replaceChildren(...worlds.map((w) => {
      const box = el("input", { type: "checkbox", name: "world", value: w });
      box.checked = checked.has(w);
      return el("label", {}, box, w);
    }));
    $("key-worlds-hint").textContent = bound
      ? "This key is bound to these worlds: the new key needs at least one of them."
      : "None checked: every world, the ones linked later included.";
  }

  async function createKey(ev) {
    ev.preventDefault();
    showError("key-error", null);
    const req = {
      name: $("key-name").value.trim(),
      scopes: [...document.querySelectorAll("#key-scopes input:checked")].map((i) => i.value),
      clientIds: [...document.querySelectorAll("#key-worlds input:checked")].map((i) => i.value),
    };
    const user = $("key-user").value.trim();
    if (user) req.scopedUserId = user;
    const expires = $("key-expires").value;
    if (expires) req.expiresAt = new Date(expires).toISOString().replace(/\.\d+Z$/, "Z");
    try {
      const data = await api("POST", "/keys", req);
      $("new-key").textContent = data.key;
      $("new-key-box").hidden = false;
      $("key-form").reset();
      renderKeyForm();
      await refreshKeys();
    } catch (e) {
      showError("key-error", e);
    }
  }

  // ---- events --------------------------------------------------------------

  function setStatus(kind, text) {
    $("ev-dot").className = "dot " + kind;
    $("ev-status").textContent = text;
  }

  function streamHint() {
    $("ev-filter").placeholder = STREAMS[$("ev-stream").value].hint;
  }

  function logEvent(id, name, data, system) {
    const log = $("ev-log");
    let subject = "";
    try {
      const v = JSON.parse(data);
      subject = (v && (v.uuid || v.actorUuid || v.clientId)) || "";
    } catch (e) {
      // Not JSON: shown as it came.
    }
    log.prepend(el("li", { class: "event", "data-name": name },
      el("div", { class: "meta" },
        el("span", { class: "id" }, id ? "#" + id : ""),
        el("span", { class: "name" + (system ? " system" : "") }, name),
        subject ? el("code", { class: "subject" }, subject) : null,
        el("time", {}, new Date().toLocaleTimeString())),
      data ? el("pre", {}, data) : null));
    while (log.children.length > MAX_EVENTS) log.lastChild.remove();
  }

  async function startStream(ev) {
    ev.preventDefault();
    stopStream(null);
    const kind = STREAMS[$("ev-stream").value];
    const params = new URLSearchParams();
    const clientId = $("ev-world").value;
    if (clientId) params.set("clientId", clientId);
    const filter = $("ev-filter").value.trim();
    if (filter) params.set(kind.param, filter);
    const user = $("ev-user").value.trim();
    if (user) params.set("userId", user);
    // Hook names asked for by name are listened to as well.
    const extra = kind.param === "hooks" ? filter.split(",").map((h) => h.trim()).filter(Boolean) : [];
    const s = { path: kind.path, params, names: [...new Set([...EVENT_NAMES, ...extra])], lastId: "", es: null, stopped: false, retry: null };
    state.stream = s;
    $("ev-stop").disabled = false;
    await openStream(s);
  }

  // openStream trades the key for a stream ticket and opens the
  // EventSource. The browser reconnects by itself after a drop, with the
  // same ticket and Last-Event-ID; only when it gives up (the ticket
  // lapsed, the relay restarted) does the console ask for a new ticket and
  // resume from the last event it received.
  async function openStream(s) {
    setStatus("connecting", "Connecting…");
    let ticket;
    try {
      ticket = (await api("POST", "/stream-tickets", {})).ticket;
    } catch (e) {
      if (s.stopped) return;
      setStatus("error", e.message);
      if (e.status === 0 || e.status >= 500) s.retry = setTimeout(() => openStream(s), 5000);
      return;
    }
    if (s.stopped) return;
    const q = new URLSearchParams(s.params);
    q.set("ticket", ticket);
    if (s.lastId) q.set("lastEventId", s.lastId);
    const es = new EventSource(s.path + "?" + q.toString());
    s.es = es;
    for (const name of s.names) {
      es.addEventListener(name, (e) => {
        if (s.stopped) return;
        if (e.lastEventId) s.lastId = e.lastEventId;
        if (name === "connected") {
          setStatus("live", "Live: " + s.path + " (" + (s.params.get("clientId") || "the key's world") + ")");
        }
        logEvent(e.lastEventId, name, e.data, ["connected", "reset", "overflow"].includes(name));
        if (name === "overflow") {
          // The relay closed a stream that fell behind: resume at once.
          es.close();
          openStream(s);
        }
      });
    }
    es.onerror = () => {
      if (s.stopped) return;
      if (es.readyState === EventSource.CLOSED) {
        setStatus("connecting", "The stream was refused; getting a new ticket…");
        s.retry = setTimeout(() => openStream(s), 3000);
      } else {
        setStatus("connecting", "Connection lost; reconnecting…");
      }
    };
  }

  function stopStream(text) {
    const s = state.stream;
    if (s) {
      s.stopped = true;
      clearTimeout(s.retry);
      if (s.es) s.es.close();
    }
    state.stream = null;
    $("ev-stop").disabled = true;
    if (text !== null) setStatus("idle", text);
  }

  // ---- start -----------------------------------------------------------------

  document.addEventListener("DOMContentLoaded", () => {
    $("signin-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      showError("signin-error", null);
      const key = $("signin-key").value.trim();
      $("signin-button").disabled = true;
      try {
        await signIn(key);
      } catch (e) {
        showError("signin-error", e);
      } finally {
        $("signin-button").disabled = false;
      }
    });
    $("signin-password-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      showError("signin-password-error", null);
      $("signin-password-button").disabled = true;
      try {
        await signInWithPassword($("signin-name").value.trim(), $("signin-password").value);
      } catch (e) {
        showError("signin-password-error", e);
      } finally {
        $("signin-password-button").disabled = false;
      }
    });
    $("signout").addEventListener("click", signOut);
    $("accounts-refresh").addEventListener("click", refreshAccounts);
    for (const t of document.querySelectorAll(".tab")) t.addEventListener("click", () => show(t.dataset.view));
    $("worlds-refresh").addEventListener("click", () => loadWorlds().catch(() => {}));
    $("pair-form").addEventListener("submit", createPairingCode);
    $("key-form").addEventListener("submit", createKey);
    $("keys-refresh").addEventListener("click", refreshKeys);
    $("accounts-refresh").addEventListener("click", refreshAccounts);
    $("account-form").addEventListener("submit", createAccount);
    $("audit-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      loadAudit(false);
    });
    $("audit-refresh").addEventListener("click", () => loadAudit(false));
    $("audit-more").addEventListener("click", () => loadAudit(true));
    $("new-key-copy").addEventListener("click", () => navigator.clipboard.writeText($("new-key").textContent).catch(() => {}));
    $("ev-form").addEventListener("submit", startStream);
    $("ev-stop").addEventListener("click", () => stopStream("Stopped."));
    $("ev-clear").addEventListener("click", () => $("ev-log").replaceChildren());
    $("ev-stream").addEventListener("change", streamHint);
    streamHint();
    const saved = sessionStorage.getItem(KEY_STORAGE);
    if (saved) {
      signIn(saved).catch((e) => {
        sessionStorage.removeItem(KEY_STORAGE);
        showError("signin-error", e);
      });
      return;
    }
    // A session of an earlier visit goes on while it lasts.
    fetch("/console/session").then((r) => r.ok ? r.json() : null).then((s) => s && startSession(s)).catch(() => {});
  });
})();
