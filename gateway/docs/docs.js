// The relay's API reference page: fetches the OpenAPI document the relay
// serves (openapi.json, beside this page) and renders it: the description,
// then each tag's operations with their parameters, bodies, responses and
// schemas, a curl line, and a form that sends the request to this relay.
// It loads nothing from elsewhere and builds the page with DOM nodes only
// (never HTML strings), so no text of the document can become markup.
"use strict";

(() => {
  const main = document.getElementById("main");
  const toc = document.getElementById("toc");
  const filter = document.getElementById("filter");
  const keyInput = document.getElementById("apikey");
  let spec = null;

  // el builds an element; attributes go through setAttribute or as
  // properties (for `on*` handlers), children may be strings or nodes.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      if (c === undefined || c === null || c === false) continue;
      node.append(typeof c === "string" ? document.createTextNode(c) : c);
    }
    return node;
  }

  // inline renders the inline Markdown the document uses: `code`, **bold**
  // and [links](url) to http(s) or relative addresses.
  function inline(text) {
    const out = document.createDocumentFragment();
    const re = /`([^`]+)`|\*\*([^*]+)\*\*|\[([^\]]+)\]\(([^)\s]+)\)/g;
    let last = 0;
    for (let m; (m = re.exec(text)); ) {
      out.append(text.slice(last, m.index));
      if (m[1] !== undefined) out.append(el("code", {}, m[1]));
      else if (m[2] !== undefined) out.append(el("strong", {}, m[2]));
      else {
        const safe = /^(https?:\/\/|\/|#|[a-z0-9._-]+(\/|$))/i.test(m[4]) && !/^javascript:/i.test(m[4]);
        out.append(safe ? el("a", { href: m[4] }, m[3]) : m[3]);
      }
      last = re.lastIndex;
    }
    out.append(text.slice(last));
    return out;
  }

  // markdown renders blocks: headings, tables, lists, fenced code and
  // paragraphs (lines of one paragraph join with spaces).
  function markdown(text) {
    const out = el("div", { class: "md" });
    const lines = String(text || "").split("\n");
    for (let i = 0; i < lines.length; ) {
      const line = lines[i];
      if (!line.trim()) { i++; continue; }
      if (line.startsWith("```")) {
        const code = [];
        for (i++; i < lines.length && !lines[i].startsWith("```"); i++) code.push(lines[i]);
        i++;
        out.append(el("pre", {}, el("code", {}, code.join("\n"))));
        continue;
      }
      const heading = /^(#{1,6})\s+(.*)$/.exec(line);
      if (heading) {
        out.append(el("h" + Math.min(6, heading[1].length + 2), {}, inline(heading[2])));
        i++;
        continue;
      }
      if (line.trim().startsWith("|")) {
        const rows = [];
        for (; i < lines.length && lines[i].trim().startsWith("|"); i++) rows.push(lines[i]);
        const cells = (r) => r.trim().replace(/^\||\|$/g, "").split("|").map((c) => c.trim());
        const head = cells(rows[0]);
        const body = rows.slice(1).filter((r) => !/^\s*\|?\s*:?-+/.test(r));
        out.append(el("table", {},
          el("thead", {}, el("tr", {}, head.map((c) => el("th", {}, inline(c))))),
          el("tbody", {}, body.map((r) => el("tr", {}, cells(r).map((c) => el("td", {}, inline(c))))))));
        continue;
      }
      if (/^\s*[-*]\s+/.test(line)) {
        const items = [];
        for (; i < lines.length && lines[i].trim(); i++) {
          if (/^\s*[-*]\s+/.test(lines[i])) items.push(lines[i].replace(/^\s*[-*]\s+/, ""));
          else items[items.length - 1] += " " + lines[i].trim();
        }
        out.append(el("ul", {}, items.map((t) => el("li", {}, inline(t)))));
        continue;
      }
      const para = [];
      for (; i < lines.length && lines[i].trim() && !/^(#{1,6}\s|\||```|\s*[-*]\s)/.test(lines[i]); i++) para.push(lines[i].trim());
      out.append(el("p", {}, inline(para.join(" "))));
    }
    return out;
  }

  // ref follows a local reference (`#/components/schemas/Name`).
  function ref(r) {
    let node = spec;
    for (const part of r.replace(/^#\//, "").split("/")) {
      node = node && node[part.replace(/~1/g, "/").replace(/~0/g, "~")];
    }
    return node;
  }
  const deref = (s) => { for (let i = 0; s && s.$ref && i < 20; i++) s = ref(s.$ref); return s; };
  const refName = (r) => r.split("/").pop();

  // typeLabel is a schema's one-line type: `string`, `Document`,
  // `SearchResult[]`, `integer | null`, `"a" | "b"`.
  function typeLabel(s) {
    if (!s) return "any";
    if (s.$ref) return refName(s.$ref);
    let t;
    if (s.enum) t = s.enum.map((v) => JSON.stringify(v)).join(" | ");
    else if (s.type === "array") t = typeLabel(s.items) + "[]";
    else if (s.allOf && s.allOf.length === 1) t = typeLabel(s.allOf[0]);
    else if (s.oneOf || s.anyOf) t = "one of " + (s.oneOf || s.anyOf).length;
    else if (s.type === "object" && s.additionalProperties && !s.properties) {
      t = s.additionalProperties === true ? "object" : "map of " + typeLabel(s.additionalProperties);
    } else if (s.type) t = s.type + (s.format ? " (" + s.format + ")" : "");
    else t = "any JSON value";
    if (s.pattern) t += " matching " + s.pattern;
    return s.nullable ? t + " | null" : t;
  }

  // hasDetail reports whether a schema has structure worth unfolding.
  function hasDetail(s) {
    s = deref(s);
    if (!s) return false;
    if (s.type === "array") return hasDetail(s.items);
    if (s.allOf && s.allOf.length === 1) return hasDetail(s.allOf[0]);
    return Boolean(s.properties || s.oneOf || s.anyOf || s.allOf ||
      (s.additionalProperties && s.additionalProperties !== true && hasDetail(s.additionalProperties)));
  }

  // lazy is a <details> whose content is built on first opening, so
  // recursive schemas (a document's items are documents) cost nothing
  // until read.
  function lazy(label, build, open) {
    const d = el("details", {}, el("summary", {}, label));
    let built = false;
    const fill = () => { if (!built) { built = true; d.append(build()); } };
    d.addEventListener("toggle", fill);
    if (open) { d.open = true; fill(); }
    return d;
  }

  // schemaBody renders a schema's structure: its properties, the values
  // of a map, the items of an array, or its alternatives.
  function schemaBody(s) {
    s = deref(s);
    const out = el("div", { class: "schema" });
    if (!s) return out;
    if (s.description && s !== spec) out.append(el("div", { class: "desc" }, markdown(s.description)));
    if (s.type === "array") {
      out.append(el("div", { class: "muted" }, "Each item: ", el("span", { class: "type" }, typeLabel(s.items))));
      if (hasDetail(s.items)) out.append(schemaBody(s.items));
      return out;
    }
    for (const key of ["oneOf", "anyOf", "allOf"]) {
      if (!s[key]) continue;
      const word = { oneOf: "One of:", anyOf: "Any of:", allOf: "All of:" }[key];
      if (key !== "allOf" || s[key].length > 1) out.append(el("div", { class: "muted" }, word));
      for (const alt of s[key]) {
        const a = deref(alt);
        const title = (a && a.title) || typeLabel(alt);
        out.append(hasDetail(alt) ? lazy(el("span", { class: "type" }, title), () => schemaBody(alt)) : el("div", { class: "type" }, title));
      }
    }
    const required = new Set(s.required || []);
    for (const [name, p] of Object.entries(s.properties || {})) {
      const row = el("div", { class: "prop" },
        el("span", { class: "name" }, name),
        required.has(name) ? el("span", { class: "req" }, "required") : null, " ",
        el("span", { class: "type" }, typeLabel(p)));
      if (p.description) row.append(el("div", { class: "desc" }, markdown(p.description)));
      if (hasDetail(p)) row.append(lazy("fields", () => schemaBody(p)));
      out.append(row);
    }
    const extra = s.additionalProperties;
    if (extra && s.properties) {
      out.append(el("div", { class: "prop muted" }, extra === true ? "… and any other fields" : "… and other fields of type " + typeLabel(extra)));
    } else if (extra && extra !== true && hasDetail(extra)) {
      out.append(el("div", { class: "muted" }, "Each value:"), schemaBody(extra));
    }
    return out;
  }

  // schemaBlock is a schema with its type on top.
  function schemaBlock(s, open) {
    const label = el("span", {}, "Schema: ", el("span", { class: "type" }, typeLabel(s)));
    return hasDetail(s) ? lazy(label, () => schemaBody(s), open) : el("div", {}, label);
  }

  function paramTable(params) {
    return el("table", {},
      el("thead", {}, el("tr", {}, el("th", {}, "name"), el("th", {}, "in"), el("th", {}, "type"), el("th", {}, "description"))),
      el("tbody", {}, params.map((p) => {
        p = deref(p);
        const schema = p.schema || (p.content && Object.values(p.content)[0].schema);
        return el("tr", {},
          el("td", {}, el("code", {}, p.name), p.required ? el("span", { class: "req" }, "required") : null),
          el("td", {}, p.in),
          el("td", {}, el("span", { class: "type" }, typeLabel(schema))),
          el("td", {}, markdown(p.description || "")));
      })));
  }

  // responsesBlock shows the successes in full and the failures, which
  // share the error body, as a table.
  function responsesBlock(responses) {
    const out = [];
    const failures = [];
    for (const [code, r0] of Object.entries(responses || {})) {
      const r = deref(r0);
      if (!code.startsWith("2")) { failures.push([code, r]); continue; }
      const row = el("div", { class: "prop" }, el("span", { class: "status" }, code), " ", inline(r.description || ""));
      for (const [type, media] of Object.entries(r.content || {})) {
        row.append(el("div", {}, el("code", {}, type), " ", schemaBlock(media.schema, false)));
      }
      const headers = Object.keys(r.headers || {});
      if (headers.length) row.append(el("div", { class: "muted" }, "Headers: " + headers.join(", ")));
      out.push(row);
    }
    if (failures.length) {
      out.push(el("table", { class: "failures" }, el("tbody", {}, failures.map(([code, r]) => {
        const types = Object.values(r.content || {}).map((m) => typeLabel(m.schema));
        return el("tr", {},
          el("td", { class: "status" }, code),
          el("td", {}, inline(r.description || "")),
          el("td", {}, el("span", { class: "type" }, types.join(", "))));
      }))));
      const error = spec.components && spec.components.schemas && spec.components.schemas.Error;
      if (error) out.push(lazy(el("span", {}, "Failure body: ", el("span", { class: "type" }, "Error")), () => schemaBody({ $ref: "#/components/schemas/Error" })));
    }
    return out;
  }

  // example builds a JSON value for a schema's required fields, to start
  // the body of a request from.
  function example(s, depth) {
    s = deref(s);
    if (!s || depth > 4) return null;
    if (s.enum) return s.enum[0];
    switch (s.type) {
      case "object": {
        const o = {};
        for (const name of s.required || []) o[name] = example(s.properties && s.properties[name], depth + 1);
        return o;
      }
      case "array": return [];
      case "string": return "";
      case "integer": case "number": return 0;
      case "boolean": return false;
    }
    return null;
  }

  const shellQuote = (s) => "'" + String(s).replace(/'/g, "'\\''") + "'";

  // tryForm lets the reader send the operation to this relay with the API
  // key of the header field, and shows the curl command that does the
  // same.
  function tryForm(method, path, op) {
    const params = (op.parameters || []).map(deref).filter((p) => p.in !== "header");
    const json = op.requestBody && deref(op.requestBody).content && deref(op.requestBody).content["application/json"];
    const ok = op.responses && deref(op.responses["200"]);
    const streams = ok && ok.content && ok.content["text/event-stream"];
    const inputs = {};
    const form = el("div", { class: "try" });
    for (const p of params) {
      inputs[p.name] = el("input", { type: "text", name: p.name, placeholder: p.required ? "required" : "" });
      form.append(el("label", {}, el("span", {}, p.name), inputs[p.name]));
    }
    let body = null;
    if (json) {
      body = el("textarea", { spellcheck: "false", "aria-label": "JSON body" });
      body.value = JSON.stringify(example(json.schema, 0), null, 2);
      form.append(el("label", {}, "JSON body"), body);
    }
    const curl = el("pre", {}, "");
    const result = el("pre", { class: "hidden" });
    const build = () => {
      let url = path;
      const query = new URLSearchParams();
      for (const p of params) {
        const v = inputs[p.name].value;
        if (p.in === "path") url = url.replace("{" + p.name + "}", encodeURIComponent(v));
        else if (v !== "") query.append(p.name, v);
      }
      const qs = query.toString();
      return new URL(url.replace(/^\//, "") + (qs ? "?" + qs : ""), new URL(".", location.href)).toString();
    };
    const showCurl = () => {
      const parts = ["curl -s"];
      if (streams) parts.push("-N");
      if (method !== "get") parts.push("-X " + method.toUpperCase());
      if (op.security === undefined || op.security.length) parts.push("-H " + shellQuote("x-api-key: $KEY"));
      if (body) parts.push("-H 'content-type: application/json' -d " + shellQuote(body.value.replace(/\s*\n\s*/g, " ")));
      parts.push(shellQuote(build()));
      curl.textContent = parts.join(" ");
    };
    form.addEventListener("input", showCurl);
    const send = async () => {
      result.classList.remove("hidden");
      result.textContent = "…";
      const headers = {};
      if (keyInput.value) headers["x-api-key"] = keyInput.value;
      let payload;
      if (body) { headers["content-type"] = "application/json"; payload = body.value; }
      try {
        const resp = await fetch(build(), { method: method.toUpperCase(), headers, body: payload });
        const text = await resp.text();
        let shown = text;
        try { shown = JSON.stringify(JSON.parse(text), null, 2); } catch (e) { /* not JSON */ }
        result.textContent = resp.status + " " + resp.statusText + "\n\n" + shown;
      } catch (e) {
        result.textContent = "Failed: " + e;
      }
    };
    form.append(el("div", { class: "muted" }, "curl:"), curl);
    if (!streams) form.append(el("button", { type: "button", onclick: send }, "Send"));
    else form.append(el("div", { class: "muted" }, "An event stream: open it with curl -N, or an EventSource with a stream ticket."));
    form.append(result);
    showCurl();
    return form;
  }

  function operationSection(method, path, op, pathItem) {
    const id = op.operationId || method + path;
    const policy = op["x-relay-policy"] || {};
    const badges = el("div", { class: "badges" });
    if (policy.scope) badges.append(el("span", {}, "scope " + policy.scope));
    if (policy.gmOnly) badges.append(el("span", {}, "GM only"));
    if (policy.worldPermission) badges.append(el("span", {}, policy.worldPermission));
    if (op.security && op.security.length === 0) badges.append(el("span", {}, "no API key"));
    if (op.security && op.security.some((s) => s.StreamTicket)) badges.append(el("span", {}, "stream ticket accepted"));
    if (op.deprecated) badges.append(el("span", {}, "deprecated"));
    const sec = el("section", { class: "op", id: id, "data-search": (method + " " + path + " " + (op.summary || "") + " " + id).toLowerCase() },
      el("h3", {}, el("span", { class: "method " + method }, method.toUpperCase()), el("span", { class: "path" }, path), el("span", { class: "summary" }, inline(op.summary || ""))),
      badges,
      markdown(op.description || ""));
    const params = (pathItem.parameters || []).concat(op.parameters || []);
    if (params.length) sec.append(el("h4", {}, "Parameters"), paramTable(params));
    if (op.requestBody) {
      const rb = deref(op.requestBody);
      sec.append(el("h4", {}, "Request body" + (rb.required ? "" : " (optional)")));
      if (rb.description) sec.append(markdown(rb.description));
      for (const [type, media] of Object.entries(rb.content || {})) {
        sec.append(el("div", {}, el("code", {}, type), " ", schemaBlock(media.schema, true)));
      }
    }
    sec.append(el("h4", {}, "Responses"), ...responsesBlock(op.responses));
    sec.append(lazy("Try it", () => tryForm(method, path, op)));
    return sec;
  }

  function render() {
    main.replaceChildren();
    const info = spec.info || {};
    document.title = (info.title || "API") + " reference";
    document.getElementById("version").textContent = "OpenAPI " + spec.openapi + ", version " + (info.version || "?");
    main.append(el("h1", { id: "top" }, info.title || "API"), markdown(info.description || ""));
    const tags = (spec.tags || []).map((t) => t.name);
    const byTag = new Map(tags.map((t) => [t, []]));
    for (const [path, item] of Object.entries(spec.paths || {})) {
      for (const method of ["get", "put", "post", "delete", "patch"]) {
        const op = item[method];
        if (!op) continue;
        const tag = (op.tags && op.tags[0]) || "Other";
        if (!byTag.has(tag)) byTag.set(tag, []);
        byTag.get(tag).push({ method, path, op, item });
      }
    }
    toc.replaceChildren();
    for (const [tag, ops] of byTag) {
      if (!ops.length) continue;
      const tagInfo = (spec.tags || []).find((t) => t.name === tag) || {};
      toc.append(el("li", { class: "tag" }, el("a", { href: "#tag-" + tag }, tag)));
      main.append(el("h2", { class: "tag", id: "tag-" + tag }, tag), markdown(tagInfo.description || ""));
      for (const { method, path, op, item } of ops) {
        const id = op.operationId || method + path;
        toc.append(el("li", { class: "op", "data-search": (method + " " + path + " " + (op.summary || "") + " " + id).toLowerCase() },
          el("a", { href: "#" + id, title: op.summary || "" }, el("span", { class: "method " + method }, method.toUpperCase()), el("span", { class: "path" }, path))));
        main.append(operationSection(method, path, op, item));
      }
    }
    main.dataset.operations = String(document.querySelectorAll("section.op").length);
    if (location.hash) {
      const target = document.getElementById(decodeURIComponent(location.hash.slice(1)));
      if (target) target.scrollIntoView();
    }
  }

  filter.addEventListener("input", () => {
    const q = filter.value.trim().toLowerCase();
    for (const node of document.querySelectorAll("[data-search]")) {
      node.classList.toggle("hidden", q !== "" && !node.dataset.search.includes(q));
    }
  });

  // The key stays in this tab (sessionStorage), never in a cookie or
  // long-lived storage.
  keyInput.value = sessionStorage.getItem("relay-docs-key") || "";
  keyInput.addEventListener("input", () => sessionStorage.setItem("relay-docs-key", keyInput.value));

  fetch(main.dataset.spec, { headers: { accept: "application/json" } })
    .then((resp) => {
      if (!resp.ok) throw new Error(resp.status + " " + resp.statusText);
      return resp.json();
    })
    .then((doc) => { spec = doc; render(); })
    .catch((err) => {
      main.replaceChildren(el("p", { class: "error", id: "load-error" }, "Could not load openapi.json: " + err.message));
    });
})();
