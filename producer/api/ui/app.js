// agentmill's web console: plain JS, no build step. Every request carries the bearer token the user
// typed (kept in sessionStorage); the event stream is read with fetch (EventSource cannot send an
// Authorization header). The DOM is built with textContent only: run data never becomes markup.
"use strict";

const TOKEN_KEY = "agentmill.token";
const TERMINAL = new Set(["completed", "failed", "aborted", "superseded"]);
const STATUSES = ["scheduled", "queued", "running", "awaiting_human", "awaiting_tools", "awaiting_children", "completed", "failed", "aborted", "superseded"];
let cleanup = [];  // what the current page must stop (timers, streams) when the user leaves it
let caller = null;  // GET /v1/me for the token signed in (a promise): its tenant, and operator or not

// ---- small helpers ----

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }
function auth() { return { Authorization: "Bearer " + token() }; }
function when(ms) { return ms ? new Date(ms).toISOString().replace("T", " ").slice(0, 19) + " UTC" : "—"; }
// A table cell's time: "MM-DD HH:MM:SS" (UTC, one line), the full date in its title.
function shortWhen(ms) {
  if (!ms) return "—";
  const iso = new Date(ms).toISOString();
  return el("time", { datetime: iso, title: when(ms), text: iso.slice(5, 10) + " " + iso.slice(11, 19) });
}
// A span of time, short: 850 ms, 12.3 s, 4.2 min, 1.5 h.
function span(ms) {
  const s = ms / 1000;
  if (s < 1) return Math.max(0, Math.round(ms)) + " ms";
  return s < 60 ? s.toFixed(1) + " s" : s < 3600 ? (s / 60).toFixed(1) + " min" : (s / 3600).toFixed(1) + " h";
}
function toast(msg) {
  const t = document.getElementById("toast");
  t.textContent = msg;
  setTimeout(() => { if (t.textContent === msg) t.textContent = ""; }, 4000);
}
// A usage (tokens in, of them read from and written to a prompt cache, tokens out, cost in USD;
// "estimated" when agentmill counted some call's tokens).
function usageText(u) {
  const n = (x) => Number(x || 0).toLocaleString("en-US");
  let t = `${n(u.inputTokens)} tokens in`;
  if (u.cacheReadTokens || u.cacheWriteTokens) {
    t += ` (${n(u.cacheReadTokens)} read from cache, ${n(u.cacheWriteTokens)} written)`;
  }
  t += `, ${n(u.outputTokens)} out`;
  if (u.costUsd !== null && u.costUsd !== undefined) t += `, $${Number(u.costUsd).toFixed(6)}`;
  return u.estimated ? t + " (estimated)" : t;
}
function statusBadge(s) { return el("span", { class: "status status-" + s, text: s.replace(/_/g, " ") }); }

class Unauthorized extends Error {}

async function api(method, path, body) {
  const init = { method, headers: { ...auth() } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  if (resp.status === 401) { signOut(); throw new Unauthorized("the token was refused"); }
  const data = await resp.json().catch(() => ({}));
  if (!resp.ok) {
    const e = new Error((data.error && data.error.message) || "HTTP " + resp.status);
    e.status = resp.status;
    e.code = data.error && data.error.code;
    throw e;
  }
  return data;
}

// ---- sign-in ----

function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  caller = null;
  showLogin("");
}

function showLogin(message) {
  stopPage();
  document.getElementById("view").replaceChildren();
  document.getElementById("login").hidden = false;
  document.getElementById("logout").hidden = true;
  document.getElementById("login-error").textContent = message;
  document.getElementById("token").focus();
}

async function onLogin(ev) {
  ev.preventDefault();
  const input = document.getElementById("token");
  sessionStorage.setItem(TOKEN_KEY, input.value.trim());
  input.value = "";
  try {
    await api("GET", "/v1/runs?limit=1");
  } catch (e) {
    showLogin(e instanceof Unauthorized ? "That token was not accepted." : e.message);
    return;
  }
  document.getElementById("login").hidden = true;
  route();
}

// ---- routing: #/runs?filters, #/batch/ID, #/run/ID ----

function stopPage() { for (const stop of cleanup) stop(); cleanup = []; }

// Who the token is (asked once a sign-in): the Pool link shows for operator tenants only.
function whoAmI() {
  if (!caller) caller = api("GET", "/v1/me").catch((e) => { caller = null; throw e; });
  return caller;
}
function showNav() {
  const link = document.getElementById("nav-pool");
  if (!link) return;
  whoAmI().then((me) => { link.hidden = !me.operator; }, () => { link.hidden = true; });
}

function route() {
  stopPage();
  if (!token()) { showLogin(""); return; }
  document.getElementById("login").hidden = true;
  document.getElementById("logout").hidden = false;
  showNav();
  const hash = location.hash.slice(1) || "/runs";
  const [path, query] = hash.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const view = document.getElementById("view");
  view.replaceChildren();
  if (parts[0] === "run" && parts[1]) runPage(view, parts[1]);
  else if (parts[0] === "batch" && parts[1]) batchPage(view, parts[1]);
  else if (parts[0] === "pool") poolPage(view);
  else runsPage(view, new URLSearchParams(query || ""));
}

function onError(view, e) {
  if (e instanceof Unauthorized) return;
  view.append(el("p", { role: "alert", class: "error", text: e.message }));
}

function every(ms, fn) {
  const id = setInterval(fn, ms);
  cleanup.push(() => clearInterval(id));
}

// ---- the runs table ----

function duration(r) {
  if (!r.finishedAt) return "—";
  const ms = r.finishedAt - r.createdAt;
  return ms < 1000 ? (ms / 1000).toFixed(1) + " s" : span(ms);
}

// A run's lineage (retryOf, forkOf + atSeq, retriedBy) as links to the runs it names.
function runLink(id) { return el("a", { href: "#/run/" + encodeURIComponent(id), text: id }); }
function lineage(r) {
  const parts = [];
  if (r.retryOf) parts.push("retry of ", runLink(r.retryOf));
  if (r.forkOf) parts.push("fork of ", runLink(r.forkOf), ` at seq ${r.atSeq}`);
  if (r.retriedBy) parts.push(parts.length ? "; " : "", "retried by ", runLink(r.retriedBy));
  return parts.length ? el("span", { class: "muted lineage", "data-lineage": r.runId }, " (", parts, ")") : null;
}

function runsTable(caption, runs) {
  const rows = runs.map((r) => el("tr", { "data-run": r.runId },
    el("td", {}, el("a", { href: "#/run/" + encodeURIComponent(r.runId), text: r.runId }), lineage(r)),
    el("td", {}, statusBadge(r.status)),
    el("td", { "data-col": "created" }, shortWhen(r.createdAt)),
    el("td", { "data-col": "duration", text: duration(r) }),
    el("td", { "data-col": "iterations", text: r.iterations === undefined || r.iterations === null ? "—" : r.iterations }),
    el("td", { "data-col": "error", class: r.errorCode ? "error" : "", text: r.errorCode || "" }),
    el("td", { text: r.agent || "" }),
    el("td", { text: r.sessionId || "" }),
    el("td", {}, r.batchId ? el("a", { href: "#/batch/" + encodeURIComponent(r.batchId), text: r.batchId }) : ""),
  ));
  return el("table", { class: "runs" },
    el("caption", { text: caption }),
    el("thead", {}, el("tr", {}, ["Run", "Status", "Created (UTC)", "Duration", "Iterations", "Error", "Agent", "Session", "Batch"].map((h) => el("th", { scope: "col", text: h })))),
    el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: 9, class: "muted", text: "No runs." }))),
  );
}

function runsPage(view, params) {
  view.append(el("h1", { text: "Runs" }));
  const field = (label, name, input) => el("label", {}, label, input);
  const status = el("select", { name: "status", id: "f-status" },
    el("option", { value: "", text: "any" }), STATUSES.map((s) => el("option", { value: s, text: s })));
  status.value = params.get("status") || "";
  const text = (name, ph) => el("input", { name, id: "f-" + name, value: params.get(name) || "", placeholder: ph || "" });
  const dt = (name) => {
    const input = el("input", { name, id: "f-" + name, type: "datetime-local" });
    if (params.get(name)) input.value = new Date(+params.get(name)).toISOString().slice(0, 16);
    return input;
  };
  const form = el("form", { class: "filters", role: "search", "aria-label": "Filter runs" },
    field("Status", "status", status),
    field("Agent", "agent", text("agent")),
    field("Session", "sessionId", text("sessionId")),
    field("Batch", "batchId", text("batchId")),
    field("Metadata (key=value)", "metadata", text("metadata", "team=red")),
    field("Created after (UTC)", "createdAfter", dt("createdAfter")),
    field("Created before (UTC)", "createdBefore", dt("createdBefore")),
    el("button", { type: "submit", text: "Apply" }),
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    for (const [k, v] of new FormData(form).entries()) {
      if (!v) continue;
      q.set(k, k.startsWith("created") ? String(Date.parse(v + "Z")) : String(v));
    }
    location.hash = "/runs?" + q.toString();
  });
  const holder = el("div", { "aria-live": "polite" });
  const pager = el("div", { class: "actions" });
  view.append(form, holder, pager);
  const cursors = [null];  // the cursor of each page seen, to go back to the first
  let page = 0;

  async function load() {
    const q = new URLSearchParams(params);
    q.set("limit", "25");
    if (cursors[page]) q.set("cursor", cursors[page]);
    try {
      const data = await api("GET", "/v1/runs?" + q.toString());
      cursors[page + 1] = data.next;
      holder.replaceChildren(runsTable(`Page ${page + 1}, newest first; statuses refresh every 2 s`, data.runs));
      pager.replaceChildren(
        el("button", { type: "button", disabled: page === 0, onclick: () => { page = 0; load(); }, text: "First page" }),
        el("button", { type: "button", disabled: !data.next, onclick: () => { page += 1; load(); }, text: "Next page" }),
      );
    } catch (e) { holder.replaceChildren(); onError(holder, e); }
  }
  load();
  every(2000, load);
}

// ---- a batch ----

function batchPage(view, batchId) {
  view.append(el("h1", {}, "Batch ", el("code", { text: batchId })));
  const summary = el("div", { "aria-live": "polite" });
  const abort = el("button", { type: "button", class: "danger", id: "abort-batch", text: "Abort the batch's runs" });
  const download = el("button", { type: "button", id: "download-results", text: "Download results (JSONL)" });
  download.addEventListener("click", () => downloadResults(batchId, download));
  const retry = el("button", { type: "button", id: "retry-batch", text: "Retry failed runs" });
  const runs = el("div");
  view.append(summary, el("div", { class: "actions" }, abort, retry, download), runs);

  retry.addEventListener("click", async () => {
    try {
      const r = await api("POST", `/v1/batches/${encodeURIComponent(batchId)}/retry?status=failed`);
      toast(`${r.results.filter((i) => i.retryRunId).length} of ${r.results.length} failed runs retried`);
      load();
    } catch (e) { onError(view, e); }
  });

  abort.addEventListener("click", async () => {
    if (!confirm("Abort every run of this batch that has not ended?")) return;
    try {
      const r = await api("POST", `/v1/batches/${encodeURIComponent(batchId)}/abort`);
      toast(`${r.aborted} aborted, ${r.requested} stopping, ${r.finished} had ended`);
      load();
    } catch (e) { onError(view, e); }
  });

  async function load() {
    try {
      const b = await api("GET", `/v1/batches/${encodeURIComponent(batchId)}`);
      const pct = Math.round(b.progress * 100);
      summary.replaceChildren(
        el("label", { for: "batch-progress" }, `${b.done} of ${b.total} runs ended (${pct}%)`),
        el("progress", { id: "batch-progress", max: b.total || 1, value: b.done }),
        el("dl", { class: "counts" },
          STATUSES.map((s) => [el("dt", { text: s.replace(/_/g, " ") }), el("dd", { "data-count": s, text: b.counts[s] || 0 })]),
          el("dt", { text: "started" }), el("dd", { text: when(b.createdAt) }),
          el("dt", { text: "ended" }), el("dd", { text: b.finished ? when(b.finishedAt) : "not yet" }),
        ),
        el("dl", { class: "counts", id: "batch-usage", "aria-label": "Usage of its ended runs" },
          el("dt", { text: "tokens in" }), el("dd", { "data-usage": "inputTokens", text: b.usage.inputTokens }),
          el("dt", { text: "read from cache" }), el("dd", { "data-usage": "cacheReadTokens", text: b.usage.cacheReadTokens || 0 }),
          el("dt", { text: "written to cache" }), el("dd", { "data-usage": "cacheWriteTokens", text: b.usage.cacheWriteTokens || 0 }),
          el("dt", { text: "tokens out" }), el("dd", { "data-usage": "outputTokens", text: b.usage.outputTokens }),
          el("dt", { text: "cost (USD)" }), el("dd", { "data-usage": "costUsd",
            text: b.usage.costUsd === null ? "no pricing" : Number(b.usage.costUsd).toFixed(6) }),
          el("dt", { text: "estimated" }), el("dd", { "data-usage": "estimated", text: b.usage.estimated ? "partly" : "no" }),
        ),
      );
      abort.disabled = b.finished;
      retry.disabled = !b.counts.failed;
      const page = await api("GET", `/v1/batches/${encodeURIComponent(batchId)}/runs?limit=100`);
      runs.replaceChildren(runsTable(`Runs of the batch (newest 100)`, page.runs));
      return b.finished;
    } catch (e) { summary.replaceChildren(); onError(summary, e); return true; }
  }
  load();
  every(1000, load);
}

// The batch's results file (GET /v1/batches/{id}/results): fetched with the token (a plain link
// cannot send it), then saved from an object URL.
async function downloadResults(batchId, button) {
  button.disabled = true;
  try {
    const resp = await fetch(`/v1/batches/${encodeURIComponent(batchId)}/results`, { headers: auth() });
    if (resp.status === 401) { signOut(); return; }
    if (!resp.ok) {
      const data = await resp.json().catch(() => ({}));
      throw new Error((data.error && data.error.message) || "HTTP " + resp.status);
    }
    const url = URL.createObjectURL(await resp.blob());
    const a = el("a", { href: url, download: `batch-${batchId}-results.jsonl`, hidden: true });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
    toast("results downloaded");
  } catch (e) { toast("download failed: " + e.message); }
  finally { button.disabled = false; }
}

// ---- a run and its live timeline ----

function describeArgs(a) { return typeof a === "string" ? a : JSON.stringify(a); }

// An event's time: its clock time (UTC, to the ms), the time since the run was created and since the
// event before it.
function eventTime(e, state) {
  const iso = new Date(e.ts).toISOString();
  const since = state.createdAt ? " +" + span(e.ts - state.createdAt) : "";
  const gap = state.prevTs ? " (Δ " + span(e.ts - state.prevTs) + ")" : "";
  return el("span", { class: "ts", "data-ts": e.ts, title: "since the run was created (since the event before)" },
    el("time", { datetime: iso, text: iso.slice(11, 23) }), since, gap);
}

function eventItem(e, state) {
  const p = e.payload || {};
  const seq = [el("span", { class: "seq", text: "#" + e.seq }), e.ts ? eventTime(e, state) : null];
  switch (e.kind) {
    case "status": {
      const parts = [seq, "status ", statusBadge(p.status)];
      if (p.status === "retrying") parts.push(` attempt ${p.attempt} in ${((p.delayMs || 0) / 1000).toFixed(1)} s (${p.reason || ""})`);
      if (p.status === "repairing") parts.push(` the answer did not match responseFormat: repair ${p.repair} of ${p.maxRepairs}`);
      if (p.error) parts.push(` ${p.error.code}: ${p.error.message}`);
      if (p.status === "completed" && p.iterations !== undefined) parts.push(` after ${p.iterations} iterations`);
      return el("li", { "data-kind": "status", "data-status": p.status }, parts);
    }
    case "model_delta": {
      const frag = p.text || (p.toolCall && p.toolCall.arguments) || "";
      if (state.stream) { state.stream.textContent += frag; return null; }
      state.stream = el("span", { class: "stream", text: frag });
      return el("li", { "data-kind": "model_delta" }, seq, "streaming: ", state.stream);
    }
    case "assistant_message": {
      state.stream = null;
      const m = p.message || {};
      if (m.toolCalls && m.toolCalls.length) {
        return el("li", { "data-kind": "assistant_message" }, seq, "assistant asks for ",
          m.toolCalls.map((c) => `${c.name}(${describeArgs(c.arguments)})`).join(", "));
      }
      return el("li", { "data-kind": "assistant_message" }, seq, "assistant: ", el("strong", { text: m.content || "" }));
    }
    case "tool_call":
      return el("li", { "data-kind": "tool_call" }, seq, "→ tool call ", el("code", { text: `${p.name}(${describeArgs(p.arguments)})` }));
    case "tool_result":
      return el("li", { "data-kind": "tool_result", class: p.isError ? "error" : "" }, seq, `← ${p.name}: `,
        el("pre", { text: String(p.content === undefined ? "" : describeArgs(p.content)).slice(0, 2000) }));
    case "error":
      return el("li", { "data-kind": "error", class: "error" }, seq, `error ${p.code || ""}: ${p.message || ""}`);
    case "usage":
      return el("li", { "data-kind": "usage" }, seq, `usage of model call ${p.modelCallIndex}: ${usageText(p.usage || {})}`);
    case "child_started":
    case "child_ended":
      return el("li", { "data-kind": e.kind, class: p.isError ? "error" : "" }, seq,
        e.kind === "child_started" ? `⇢ sub-agent ${p.agent || ""} for ${p.toolCallId}: ` : `⇠ sub-agent for ${p.toolCallId} ended: `,
        el("a", { href: "#/run/" + encodeURIComponent(p.childRunId || ""), text: p.childRunId || "" }));
    case "compaction":
      return el("li", { "data-kind": "compaction" }, seq, `compacted ${p.removed} messages (${p.reason || ""})`);
    default:
      return el("li", { "data-kind": e.kind }, seq, `${e.kind}: ${JSON.stringify(p).slice(0, 300)}`);
  }
}

// Reads GET /v1/runs/{id}/events (Server-Sent Events) with fetch, calling onEvent per event; resolves
// when the stream ends. Throws on HTTP errors.
async function readStream(runId, after, onEvent, signal) {
  const resp = await fetch(`/v1/runs/${encodeURIComponent(runId)}/events?after=${after}`,
    { headers: { ...auth(), Accept: "text/event-stream" }, signal });
  if (resp.status === 401) { signOut(); throw new Unauthorized("the token was refused"); }
  if (!resp.ok) throw new Error("events: HTTP " + resp.status);
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, ""));
      if (data.length) onEvent(JSON.parse(data.join("\n")));
    }
  }
}

function runPage(view, runId) {
  const status = el("span", { id: "run-status", "aria-live": "polite" });
  const abort = el("button", { type: "button", class: "danger", id: "abort", text: "Abort run" });
  const approvals = el("section", { class: "approvals", id: "approvals", "aria-labelledby": "approvals-title", hidden: true });
  const meta = el("p", { class: "muted" });
  const usage = el("p", { id: "run-usage", hidden: true });
  const economy = el("p", { id: "run-economy", "aria-live": "polite", hidden: true });
  const timeline = el("ol", { class: "timeline", id: "timeline", "aria-label": "Events, oldest first" });
  const live = el("p", { class: "muted", id: "live", text: "connecting…" });
  const outputText = el("pre", { id: "run-output" });
  const output = el("section", { id: "output", "aria-labelledby": "output-title", hidden: true },
    el("h2", { id: "output-title", text: "Output" }), outputText);
  const retry = el("button", { type: "button", id: "retry", text: "Retry from its checkpoint", disabled: true });
  const forkSeq = el("input", { type: "number", id: "fork-seq", min: 0, value: 0, "aria-label": "Fork at event seq" });
  const fork = el("button", { type: "button", id: "fork", text: "Fork at seq", disabled: true });
  const tree = el("section", { id: "children", "aria-labelledby": "children-title", hidden: true });
  const input = el("section", { id: "input", "aria-labelledby": "input-title", hidden: true });
  view.append(el("h1", {}, "Run ", el("code", { text: runId })), el("p", {}, "Status: ", status), meta, economy, usage,
    el("div", { class: "actions" }, abort, retry, fork, forkSeq), approvals, input, output, tree,
    el("h2", { text: "Timeline" }), live, timeline);
  const state = { stream: null, last: 0, status: "", ended: false, createdAt: 0, prevTs: 0, loadedSeq: 0 };
  const controller = new AbortController();
  cleanup.push(() => controller.abort());

  function setStatus(s) {
    state.status = s;
    status.replaceChildren(statusBadge(s));
    abort.disabled = TERMINAL.has(s);
    retry.disabled = s !== "failed" && s !== "aborted";
    fork.disabled = !TERMINAL.has(s);
    if (s !== "awaiting_human") { approvals.hidden = true; approvals.replaceChildren(); }
  }

  function showApprovals(pending) {
    if (!pending || !pending.length) return;
    approvals.hidden = false;
    approvals.replaceChildren(el("h2", { id: "approvals-title", text: "Waiting for your approval" }),
      el("ul", {}, pending.map((a) => {
        const result = el("span", { class: "muted", "aria-live": "polite" });
        const decide = async (approved, buttons) => {
          buttons.forEach((b) => { b.disabled = true; });
          try {
            const r = await api("POST", `/v1/runs/${encodeURIComponent(runId)}/approvals`,
              { decisions: [{ toolCallId: a.toolCallId, approved }] });
            result.textContent = (approved ? "approved" : "rejected") + (r.resumed ? "; the run resumes" : "");
          } catch (e) { result.textContent = e.message; buttons.forEach((b) => { b.disabled = false; }); }
        };
        const yes = el("button", { type: "button", "data-action": "approve", "data-call": a.toolCallId,
          "aria-label": `Approve ${a.name} (${a.toolCallId})`, text: "Approve" });
        const no = el("button", { type: "button", class: "danger", "data-action": "reject", "data-call": a.toolCallId,
          "aria-label": `Reject ${a.name} (${a.toolCallId})`, text: "Reject" });
        yes.addEventListener("click", () => decide(true, [yes, no]));
        no.addEventListener("click", () => decide(false, [yes, no]));
        return el("li", {}, el("code", { text: `${a.name}(${describeArgs(a.arguments)})` }), " ", yes, " ", no, " ", result);
      })));
  }

  // The economy lane: while a model call waits in a provider batch, that batch (GET's economyWait).
  function showEconomy(run) {
    const w = run.economyWait;
    economy.hidden = !w;
    if (!w) { economy.replaceChildren(); return; }
    economy.replaceChildren("Waiting in a provider batch: call ", el("code", { text: w.customId || "" }),
      ", batch ", el("strong", { id: "economy-batch-state", text: w.batchState || "—" }),
      w.providerBatchId ? ` (${w.providerBatchId})` : "", ` · standard lane at ${when(w.switchAt)}`);
  }

  // Its usage so far: from GET (usage) and from each usage event's running total.
  function showUsage(u) {
    if (!u) return;
    usage.textContent = "Usage: " + usageText(u);
    usage.dataset.input = u.inputTokens || 0;
    usage.dataset.output = u.outputTokens || 0;
    usage.hidden = false;
  }

  // Sub-agents: the run's parent, and its child runs as a tree (each child's own children below it).
  async function showTree(run) {
    const kids = await childTree(run.children || [], 1);
    if (!run.parentRunId && !kids) return;
    tree.hidden = false;
    tree.replaceChildren(el("h2", { id: "children-title", text: "Sub-agents" }));
    if (run.parentRunId) {
      tree.append(el("p", {}, "Child of run ", el("a", { href: "#/run/" + encodeURIComponent(run.parentRunId),
        text: run.parentRunId }), ` (its call ${run.parentToolCallId})`));
    }
    if (kids) tree.append(kids);
  }
  function refreshTree() {
    api("GET", `/v1/runs/${encodeURIComponent(runId)}`).then(showTree, () => {});
  }

  // A structured-output run's parsed answer (result.output), pretty-printed; textContent only.
  function showOutput(run) {
    const out = run.result ? run.result.output : undefined;
    if (out === undefined || out === null) return;
    outputText.textContent = JSON.stringify(out, null, 2);
    output.hidden = false;
  }

  abort.addEventListener("click", async () => {
    try {
      const r = await api("POST", `/v1/runs/${encodeURIComponent(runId)}/abort`);
      toast(r.result === "requested" ? "abort requested: its worker stops it" : "run " + r.result);
    } catch (e) { onError(view, e); }
  });

  // A retry or fork is a new run: its page opens once the API accepted it.
  async function startFrom(path, body) {
    try {
      const r = await api("POST", `/v1/runs/${encodeURIComponent(runId)}/${path}`, body);
      location.hash = "#/run/" + encodeURIComponent(r.runId);
    } catch (e) { onError(view, e); }
  }
  retry.addEventListener("click", () => startFrom("retry", {}));
  fork.addEventListener("click", () => startFrom("fork", { atSeq: Number(forkSeq.value) || 0 }));

  function onEvent(e) {
    if (e.seq <= state.last) return;
    state.last = e.seq;
    const item = eventItem(e, state);
    if (e.ts) state.prevTs = e.ts;
    if (item) timeline.append(item);
    if (e.kind === "usage") showUsage(e.payload.total);
    if (e.kind === "child_started" || e.kind === "child_ended") refreshTree();
    if (e.kind === "status" && e.payload.status !== "retrying") {
      setStatus(e.payload.status);
      if (e.payload.status === "awaiting_human") showApprovals(e.payload.pendingApprovals);
      if (e.seq > state.loadedSeq && e.payload.status === "awaiting_model") {  // (the first GET showed older ones)
        api("GET", `/v1/runs/${encodeURIComponent(runId)}`).then(showEconomy, () => {});
      } else if (e.seq > state.loadedSeq && e.payload.status !== "lane_changed") showEconomy({});
      if (TERMINAL.has(e.payload.status)) {
        state.ended = true;
        api("GET", `/v1/runs/${encodeURIComponent(runId)}`).then((r) => { showUsage(r.usage); showOutput(r); showTree(r); }, () => {});
      }
    }
  }

  (async () => {
    try {
      const run = await api("GET", `/v1/runs/${encodeURIComponent(runId)}?include=input`);
      setStatus(run.status);
      state.createdAt = run.createdAt;
      meta.replaceChildren("agent ", el("strong", { id: "run-agent", text: run.agent || "—" }),
        " · lane ", el("strong", { id: "run-lane", text: run.lane || "standard" }),
        ` · created ${when(run.createdAt)}` + (run.sessionId ? ` · session ${run.sessionId}` : ""), lineage(run) || "");
      showInput(input, run.inputMessages);
      forkSeq.max = run.lastSeq; forkSeq.value = run.lastSeq;
      state.loadedSeq = run.lastSeq;
      if (run.status === "awaiting_human") showApprovals(run.pendingApprovals);
      showUsage(run.usage);
      showEconomy(run);
      showOutput(run);
      showTree(run).catch(() => {});
    } catch (e) { onError(view, e); return; }
    while (!state.ended && !controller.signal.aborted) {
      try {
        live.textContent = "live: following the event stream";
        await readStream(runId, state.last, onEvent, controller.signal);
      } catch (e) {
        if (controller.signal.aborted || e instanceof Unauthorized) return;
        live.textContent = "stream interrupted (" + e.message + "); reconnecting…";
      }
      if (!state.ended) await new Promise((r) => setTimeout(r, 1000));
    }
    live.textContent = "the run has ended";
  })();
}

// A message's text: its content (a string, or its parts' texts; other parts named), and its tool calls.
function messageText(m) {
  const c = m.content;
  let t = typeof c === "string" ? c
    : Array.isArray(c) ? c.map((part) => (part && typeof part.text === "string" ? part.text : `[${(part && part.type) || "part"}]`)).join("\n")
    : c === null || c === undefined ? "" : JSON.stringify(c);
  for (const call of m.toolCalls || []) t += (t ? "\n" : "") + `→ ${call.name}(${describeArgs(call.arguments)})`;
  return t;
}

// The run's input messages (GET …?include=input), each its role and its text; text only, never markup.
function showInput(section, messages) {
  if (!messages || !messages.length) return;
  section.hidden = false;
  section.replaceChildren(el("h2", { id: "input-title", text: "Input" }),
    el("ol", { id: "run-input", class: "messages" }, messages.map((m) => el("li", { "data-role": String(m.role || "") },
      el("span", { class: "role", text: String(m.role || "") }), el("pre", { text: messageText(m) })))));
}

// A list of child runs, each with its status, the call it answers and its own children (to depth 4).
async function childTree(children, depth) {
  if (!children.length) return null;
  const items = await Promise.all(children.map(async (c) => {
    let below = null;
    if (depth < 4) {
      try {
        const run = await api("GET", `/v1/runs/${encodeURIComponent(c.runId)}`);
        below = await childTree(run.children || [], depth + 1);
      } catch (e) { below = null; }
    }
    return el("li", { "data-child": c.runId },
      el("a", { href: "#/run/" + encodeURIComponent(c.runId), text: c.runId }), " ", statusBadge(c.status),
      el("span", { class: "muted", text: ` for ${c.parentToolCallId}` }), below || "");
  }));
  return el("ul", { class: "tree" }, items);
}

// ---- the pool: workers, queues, runs per minute over the last hour ----

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  for (const c of children) node.append(c);
  return node;
}
function ago(ms) { return ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(1) + " s"; }

// A bar chart of one or more series per minute (stacked), drawn as SVG with the DOM (no library,
// no inline style): each bar has a <title> with its minute and figures.
function minuteChart(id, caption, minutes, series) {
  const W = 720, H = 160, pad = 28, bw = (W - pad) / minutes.length;
  const totals = minutes.map((m) => series.reduce((n, s) => n + m[s.field], 0));
  const top = Math.max(1, ...totals);
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H + 18}`, role: "img", class: "chart", id, "aria-labelledby": id + "-t" },
    svg("title", { id: id + "-t" }), svg("line", { x1: pad, y1: H, x2: W, y2: H, class: "axis" }));
  chart.firstChild.textContent = `${caption}: ${totals.reduce((a, b) => a + b, 0)} in the last hour, at most ${top} a minute`;
  const label = svg("text", { x: 0, y: 10, class: "tick" }); label.textContent = String(top);
  chart.append(label);
  minutes.forEach((m, i) => {
    let y = H;
    for (const s of series) {
      const h = (m[s.field] / top) * (H - 6);
      if (h <= 0) continue;
      y -= h;
      const bar = svg("rect", { x: pad + i * bw + 1, y, width: Math.max(1, bw - 2), height: h, class: "bar " + s.cls, "data-minute": m.minute });
      const t = svg("title");
      t.textContent = `${new Date(m.minute).toISOString().slice(11, 16)} UTC: ` + series.map((x) => `${m[x.field]} ${x.field}`).join(", ");
      bar.append(t);
      chart.append(bar);
    }
  });
  for (const [x, anchor, text] of [[pad, "start", "60 min ago"], [W, "end", "now"]]) {
    const t = svg("text", { x, y: H + 14, class: "tick", "text-anchor": anchor });
    t.textContent = text;
    chart.append(t);
  }
  const legend = el("p", { class: "legend" }, series.map((s) => el("span", { class: "key " + s.cls, text: s.field })));
  return el("figure", {}, el("figcaption", { text: caption }), chart, legend);
}

// A count that opens the runs table filtered by a status (the listing is the caller's tenant's runs).
function statusLink(n, status) {
  return el("a", { href: "#/runs?status=" + encodeURIComponent(status), "data-status-link": status,
    title: `your tenant's ${status.replace(/_/g, " ")} runs`, text: n });
}

// What a tenant that is not an operator sees at #/pool: why, not an error.
function notOperator(view, tenant) {
  view.replaceChildren(el("h1", { text: "Pool" }), el("p", { id: "not-operator", class: "notice" },
    "The pool page is for operator tenants: it shows every tenant's load. ",
    tenant ? ["This token's tenant, ", el("code", { text: tenant }), ", is not one. "] : "This token's tenant is not one. ",
    "An administrator names the operator tenants in AGENTMILL_OPERATOR_TENANTS. ",
    el("a", { href: "#/runs", text: "Back to your runs" })));
}

function poolPage(view) {
  view.append(el("h1", { text: "Pool" }));
  const holder = el("div", { "aria-live": "off" });
  view.append(holder);
  let refused = false;

  async function load() {
    if (refused) return;
    try {
      const me = await whoAmI();
      if (!me.operator) { refused = true; notOperator(view, me.tenant); return; }
      const p = await api("GET", "/v1/pool");
      const h = p.lastHour;
      const running = p.partitions.reduce((n, x) => n + x.running, 0);
      const queued = p.partitions.reduce((n, x) => n + x.queued, 0);
      holder.replaceChildren(
        el("dl", { class: "counts", id: "pool-summary" },
          el("dt", { text: "workers" }), el("dd", { "data-count": "workers", text: p.workers.length }),
          el("dt", { text: "running" }), el("dd", { "data-count": "running" }, statusLink(running, "running")),
          el("dt", { text: "queued" }), el("dd", { "data-count": "queued" }, statusLink(queued, "queued")),
          el("dt", { text: "last hour" }), el("dd", { text: `${h.started} started, ${h.completed} completed, ${h.failed} failed, ${h.aborted} aborted` }),
        ),
        minuteChart("chart-started", "Runs started per minute", p.minutes, [{ field: "started", cls: "s-started" }]),
        minuteChart("chart-ended", "Runs ended per minute", p.minutes, [
          { field: "completed", cls: "s-completed" }, { field: "failed", cls: "s-failed" }, { field: "aborted", cls: "s-aborted" }]),
        el("table", { id: "workers" },
          el("caption", { text: `Live workers (lease ${ago(p.leaseMs)}; refreshed every 5 s)` }),
          el("thead", {}, el("tr", {}, ["Worker lease", "Runs", "Lease renewed", "Lease expires in"].map((x) => el("th", { scope: "col", text: x })))),
          el("tbody", {}, p.workers.length ? p.workers.map((w) => el("tr", { "data-worker": w.leaseId },
            el("td", {}, el("code", { text: w.leaseId })), el("td", { text: w.runs }),
            el("td", { text: ago(w.leaseAgeMs) + " ago" }), el("td", { text: ago(w.expiresInMs) })))
            : el("tr", {}, el("td", { colspan: 4, class: "muted", text: "No live worker." }))),
        ),
        el("table", { id: "partitions" },
          el("caption", { text: "Partitions (every tenant's runs; a count opens your tenant's runs of that status)" }),
          el("thead", {}, el("tr", {}, ["Partition", "Queued", "Running", "Awaiting a human"].map((x) => el("th", { scope: "col", text: x })))),
          el("tbody", {}, p.partitions.map((x) => el("tr", { "data-partition": x.index },
            el("td", { text: x.index }), el("td", {}, statusLink(x.queued, "queued")), el("td", {}, statusLink(x.running, "running")),
            el("td", {}, statusLink(x.awaitingHuman, "awaiting_human"))))),
        ),
      );
    } catch (e) {
      if (e.code === "not_operator") { refused = true; notOperator(view, ""); return; }
      holder.replaceChildren(); onError(holder, e);
    }
  }
  load();
  every(5000, load);
}

// ---- start ----

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("login-form").addEventListener("submit", onLogin);
  document.getElementById("logout").addEventListener("click", signOut);
  window.addEventListener("hashchange", route);
  route();
});
