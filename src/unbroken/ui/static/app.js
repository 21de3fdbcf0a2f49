// unbroken ui: vanilla JavaScript, no build step. Every string from the store is inserted as
// text (textContent / text nodes), never as HTML, so a tool result cannot inject markup.
"use strict";

const TOKEN_KEY = "unbroken-action-token";
(function keepToken() {
  const match = /[#&]token=([^&]+)/.exec(location.hash);
  if (match) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
})();

// Bidi embeddings, overrides and isolates would reorder what the page shows ("exe.txt" read
// backwards): every text from the store is shown with them written out as \u202e and so on.
const BIDI = /[\u202a-\u202e\u2066-\u2069]/g;
const visible = (text) => text.replace(BIDI, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "onclick" || name === "onchange" || name === "onsubmit" || name === "oninput") node[name] = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(visible(String(child))));
  }
  return node;
}

const main = () => document.getElementById("main");
const fmtTime = (t) => (t ? new Date(t * 1000).toLocaleString() : "");
const fmtNum = (n) => (n === null || n === undefined ? "" : Number(n).toLocaleString("en-US"));
const json = (v) => JSON.stringify(v, null, 2);
const phase = (p) => el("span", { class: "phase " + p, "data-phase": p }, p.replace("_", " "));

function toast(text, bad) {
  const box = document.getElementById("toast");
  box.textContent = visible(text);
  box.className = "show" + (bad ? " bad" : "");
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { box.className = ""; }, bad ? 9000 : 4000);
}

// the token, when the page has one: a server reachable from the network needs it for reads too
function readHeaders() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { Accept: "application/json", "X-Unbroken-Token": token } : { Accept: "application/json" };
}

async function getJSON(url) {
  const response = await fetch(url, { headers: readHeaders() });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

async function act(runId, name, body) {
  const response = await fetch(`/api/runs/${encodeURIComponent(runId)}/${name}`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Unbroken-Token": sessionStorage.getItem(TOKEN_KEY) || "" },
    body: JSON.stringify(body),
  });
  const answer = await response.json();
  if (!response.ok) throw new Error(answer.error || response.statusText);
  return answer;
}

// ---------------------------------------------------------------- runs list

async function runsPage() {
  const params = new URLSearchParams(location.search);
  document.getElementById("where").textContent = "runs";
  const phases = ["", "awaiting_model", "running_tools", "paused", "awaiting_approval", "completed", "max_turns", "failed", "queued"];
  const phaseSelect = el("select", { name: "phase", "aria-label": "phase" },
    phases.map((p) => el("option", { value: p, selected: params.get("phase") === p }, p || "any phase")));
  const text = el("input", { type: "search", name: "q", placeholder: "task or run id contains…", value: params.get("q") || "" });
  const attention = el("input", { type: "checkbox", name: "attention", id: "attention", checked: params.get("attention") === "1" });
  const form = el("form", { class: "filters", id: "filters" }, phaseSelect, text,
    el("label", { for: "attention" }, attention, " needs attention"), el("button", { type: "submit" }, "Filter"));
  form.onsubmit = (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    if (phaseSelect.value) next.set("phase", phaseSelect.value);
    if (text.value) next.set("q", text.value);
    if (attention.checked) next.set("attention", "1");
    location.search = next.toString();
  };
  const body = el("tbody");
  const total = el("span", { class: "muted" });
  const more = el("button", { class: "secondary more", id: "more-runs", hidden: true }, "More runs");
  const table = el("table", { id: "runs" },
    el("thead", {}, el("tr", {}, ["run", "task", "phase", "turns", "tokens", "last update", "owner / lease"].map(
      (h, i) => el("th", { class: i === 3 || i === 4 ? "num" : null }, h)))), body);
  main().replaceChildren(el("h1", {}, "Runs"), form, total, table, more);
  let cursor = null;
  let shown = 0;
  async function load() {
    const query = new URLSearchParams(params);
    if (cursor) query.set("after", cursor);
    const page = await getJSON("/api/runs?" + query.toString());
    shown += page.runs.length;
    // a page is one bounded read of the store: the store's run count is not read (it would read every run)
    total.textContent = `${fmtNum(shown)} run(s) shown, newest first` + (page.next ? "; more below" : "");
    for (const run of page.runs) body.append(runRow(run));
    if (!shown && !page.next) body.append(el("tr", {}, el("td", { colspan: 7, class: "muted" }, "No run matches.")));
    cursor = page.next;
    more.hidden = !cursor;
  }
  more.onclick = () => load().catch((e) => toast(e.message, true));
  await load();
}

function leaseText(lease) {
  if (!lease) return el("span", { class: "muted" }, "free");
  const left = Math.round(lease.expires_in);  // the store's lease clock is not always a Unix time
  return el("span", { class: "mono", title: lease.owner },
    lease.owner.split(":").slice(0, 2).join(":"), lease.holder_dead ? " (holder gone)" : ` (${left}s left)`);
}

function runRow(run) {
  return el("tr", { "data-run": run.run_id, class: run.needs_attention ? "attention" : null },
    el("td", { class: "mono" }, el("a", { href: "/runs/" + encodeURIComponent(run.run_id) }, run.run_id)),
    el("td", {}, run.task.length > 120 ? run.task.slice(0, 120) + "…" : run.task),
    el("td", {}, phase(run.phase)),
    el("td", { class: "num" }, fmtNum(run.turns)),
    el("td", { class: "num" }, fmtNum(run.tokens_used)),
    el("td", {}, fmtTime(run.updated_at)),
    el("td", {}, leaseText(run.lease)));
}

// ---------------------------------------------------------------- one run

let current = null; // the run page's data

async function runPage(runId) {
  document.getElementById("where").textContent = runId;
  document.title = runId + " · unbroken";
  await showRun(runId);
  const token = sessionStorage.getItem(TOKEN_KEY);
  const source = new EventSource(`/api/runs/${encodeURIComponent(runId)}/events` + (token ? `?token=${encodeURIComponent(token)}` : ""));
  const live = document.getElementById("live");
  let loading = null; // one reload at a time; saves that land meanwhile are picked up by the next one
  let wanted = 0;
  const reload = () => {
    loading = showRun(runId).then((shown) => {
      loading = null;
      if (shown && current && wanted > current.seq) reload();
    }, (error) => { loading = null; toast(error.message, true); });
  };
  source.addEventListener("head", (event) => {
    wanted = JSON.parse(event.data).seq;
    live.textContent = `live · save ${wanted}`;
    if (current && wanted !== current.seq && !loading) reload();
  });
  source.onerror = () => { live.textContent = "reconnecting…"; };
}

async function showRun(runId) {
  let run;
  try {
    run = await getJSON(`/api/runs/${encodeURIComponent(runId)}`);
  } catch (error) {
    main().replaceChildren(el("h1", {}, runId), el("p", { class: "error-box" }, error.message));
    return false;
  }
  current = run;
  if (run.queued) {
    main().replaceChildren(el("h1", {}, runId), el("p", {}, "Queued: submitted, not started yet."),
      el("pre", {}, run.queued.task));
    return true;
  }
  const y = window.scrollY;
  main().replaceChildren(...[
    el("h1", { id: "run-id" }, run.run_id),
    el("p", { class: "task" }, run.task),
    facts(run),
    run.problem ? el("p", { class: "error-box" }, "Damaged: " + run.problem) : null,
    run.error ? el("p", { class: "error-box" }, run.error) : null,
    waiting(run),
    run.timeline.length ? section("At a glance", el("div", { class: "strip" }, drawStrip(run.timeline)), stripLegend()) : null,
    section("Timeline of save points", timeline(run)),
    section("Conversation", conversation(run)),
    run.summary_upto ? section("Compaction summary", el("p", { class: "muted" },
      `The model is sent this summary instead of messages 0–${run.summary_upto - 1} (they stay stored and shown above).`),
      el("pre", { id: "summary" }, typeof run.summary === "string" ? run.summary : json(run.summary))) : null,
    section("business_state", el("pre", { id: "business-state" }, json(run.business_state))),
    section("Effect ledger", ledger(run)),
    run.actions ? section("Export", el("button", { class: "secondary", id: "export", onclick: () => exportRun(run) }, "Download the run as JSON")) : null,
  ].filter(Boolean));
  window.scrollTo(0, y);
  return true;
}

const section = (title, ...content) => el("section", {}, el("h2", {}, title), ...content);

function facts(run) {
  const fact = (name, value, id) => el("div", { id }, el("span", {}, name), value);
  return el("div", { class: "facts" },
    fact("phase", phase(run.phase), "phase"),
    fact("turns", fmtNum(run.turns), "turns"),
    fact("tokens", fmtNum(run.tokens_used), "tokens"),
    fact("save points", fmtNum(run.timeline_count)),
    fact("resumes (a crash or a stop each)", fmtNum(run.crashes), "crashes"),
    fact("provider", run.provider),
    fact("usage (whole run)", el("span", { class: "mono", id: "usage" },
      Object.entries(run.usage || {}).map(([name, n]) => `${name.replace(/_tokens$/, "")} ${fmtNum(n)}`).join(" · ") || "none")),
    fact("owner / lease", leaseText(run.lease)),
    fact("last update", fmtTime(run.updated_at)),
    run.output ? fact("output", run.output.length > 200 ? run.output.slice(0, 200) + "…" : run.output) : null);
}

function waiting(run) {
  const asks = [];
  for (const call of run.unsettled) asks.push(unsettledCall(run, call));
  for (const request of run.approvals.filter((r) => r.status === "requested")) asks.push(approvalRequest(run, request));
  if (!asks.length) return null;
  const note = run.actions ? null : el("p", { class: "muted" }, "Read-only: start `unbroken ui --enable-actions` to settle these here (or use the CLI).");
  return el("div", { class: "panel", id: "waiting" }, el("h2", {}, "Waiting for you"), note, asks);
}

function callHeader(tool, callId, args) {
  return [el("div", {}, el("strong", {}, tool), " ", el("span", { class: "mono muted" }, callId)), el("pre", {}, json(args))];
}

function unsettledCall(run, call) {
  const result = el("textarea", { placeholder: "what it did (told to the model)", "data-field": "result", "data-call": call.call_id });
  const tookEffect = el("button", { "data-action": "took-effect", "data-call": call.call_id, disabled: !run.actions }, "It took effect");
  const notRun = el("button", { class: "secondary", "data-action": "not-executed", "data-call": call.call_id, disabled: !run.actions }, "It did not happen: run it again");
  tookEffect.onclick = () => perform(run, "resolve", { call_id: call.call_id, outcome: "took_effect", result: result.value || "done (confirmed by hand)" });
  notRun.onclick = () => perform(run, "resolve", { call_id: call.call_id, outcome: "not_executed" });
  return el("div", { class: "ask", "data-unsettled": call.call_id },
    el("div", {}, "Outcome unknown: the process died while this call ran. Check the real system, then say what happened. ",
      el("span", { class: "muted" }, `ledger: ${call.ledger_status || "no entry"}, key ${call.key}`)),
    callHeader(call.tool, call.call_id, call.arguments),
    el("div", { class: "row" }, result, tookEffect, notRun));
}

function approvalRequest(run, request) {
  const reason = el("input", { type: "text", placeholder: "reason (for a denial)", "data-field": "reason", "data-call": request.call_id });
  const approve = el("button", { "data-action": "approve", "data-call": request.call_id, disabled: !run.actions }, "Approve");
  const deny = el("button", { class: "danger", "data-action": "deny", "data-call": request.call_id, disabled: !run.actions }, "Deny");
  approve.onclick = () => perform(run, "approve", { call_id: request.call_id, digest: request.digest });
  deny.onclick = () => perform(run, "deny", { call_id: request.call_id, digest: request.digest, reason: reason.value || "denied in unbroken ui" });
  return el("div", { class: "ask", "data-approval": request.call_id },
    el("div", {}, "Approval requested", request.expires_at ? ` (expires ${fmtTime(request.expires_at)})` : ""),
    callHeader(request.tool, request.call_id, request.input),
    el("div", { class: "row" }, approve, reason, deny));
}

async function perform(run, name, body) {
  try {
    const done = await act(run.run_id, name, body);
    toast(name === "fork" ? `forked as ${done.run_id}` : `${name}: done`);
    if (name === "fork") location.href = "/runs/" + encodeURIComponent(done.run_id);
    else await showRun(run.run_id);
  } catch (error) {
    toast(`${name} refused: ${error.message}`, true);
  }
}

async function exportRun(run) {
  try {
    const data = await act(run.run_id, "export", {});
    const link = el("a", { href: URL.createObjectURL(new Blob([JSON.stringify(data, null, 1)], { type: "application/json" })), download: run.run_id + ".json" });
    link.click();
    toast("exported");
  } catch (error) {
    toast(`export refused: ${error.message}`, true);
  }
}

function timelineRows(run, entries) {
  const rows = [];
  for (const save of entries) {
    rows.push(el("tr", { class: "k-" + save.kind, "data-seq": save.seq },
      el("td", { class: "num mono" }, save.seq),
      el("td", {}, save.label, " ", el("span", { class: "kind" }, save.kind)),
      el("td", {}, phase(save.phase)),
      el("td", { class: "num" }, fmtNum(save.turns)),
      el("td", { class: "num" }, save.tokens_added ? "+" + fmtNum(save.tokens_added) : ""),
      el("td", { class: "num" }, save.messages[1] - save.messages[0] > 1 ? `${save.messages[0]}–${save.messages[1] - 1}` : save.messages[1] > save.messages[0] ? String(save.messages[0]) : ""),
      el("td", {}, fmtTime(save.at)),
      el("td", {}, run.actions ? el("button", { class: "secondary", "data-action": "fork", "data-seq": save.seq,
        onclick: () => perform(run, "fork", { at: save.seq }) }, "fork here") : null)));
    if (save.notes.length) {
      rows.push(el("tr", { class: "notes", "data-notes-for": save.seq },
        el("td", {}), el("td", { colspan: 7 }, save.notes.map((line) => el("div", {}, line)))));
    }
  }
  return rows;
}

function timeline(run) {
  const body = el("tbody", {}, timelineRows(run, run.timeline));
  const table = el("table", { class: "timeline", id: "timeline" },
    el("thead", {}, el("tr", {}, ["save", "label", "phase", "turns", "tokens", "messages", "at", ""].map(
      (h, i) => el("th", { class: [0, 3, 4, 5].includes(i) ? "num" : null }, h)))), body);
  const first = run.timeline.length ? run.timeline[0].seq : 0;
  if (run.timeline_count <= run.timeline.length) return table;
  const earlier = el("button", { class: "secondary more", id: "earlier-saves" }, "Earlier save points");
  let before = first;
  earlier.onclick = async () => {
    const page = await getJSON(`/api/runs/${encodeURIComponent(run.run_id)}/timeline?before=${before}`);
    body.prepend(...timelineRows(run, page.timeline));
    before = page.timeline.length ? page.timeline[0].seq : 0;
    if (page.timeline.length < 200) earlier.remove();
  };
  return [earlier, table];
}

function part(p, runId, index, n) {
  const node = partNode(p);
  if (!p.more) return node;
  // the server sent the first part of a long text; "show all" streams the rest into the same box
  const target = node.tagName === "PRE" || node.classList.contains("text") ? node : node.querySelector("pre") || node;
  const button = el("button", { class: "secondary more show-all" }, `show all (${fmtNum(p.more)} more characters)`);
  button.onclick = async () => {
    button.disabled = true;
    const response = await fetch(`/api/runs/${encodeURIComponent(runId)}/messages/${index}/parts/${n}`, { headers: readHeaders() });
    if (!response.ok) { toast(`could not read the whole text (${response.status})`, true); button.disabled = false; return; }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    target.textContent = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      target.append(document.createTextNode(visible(value)));
    }
    button.remove();
  };
  return el("div", { class: "capped" }, node, button);
}

function partNode(p) {
  if (p.kind === "text") return el("div", { class: "part text" }, p.text);
  if (p.kind === "thinking") return el("details", { class: "part thinking" }, el("summary", {}, "thinking"), el("pre", {}, p.text));
  if (p.kind === "tool_call") return el("div", { class: "part tool_call", "data-call": p.id },
    el("div", { class: "label" }, "→ tool call ", p.name, " ", el("span", { class: "mono muted" }, p.id)), el("pre", {}, typeof p.arguments === "string" ? p.arguments : json(p.arguments)));
  if (p.kind === "tool_result") return el("div", { class: "part tool_result" + (p.is_error ? " error" : ""), "data-result": p.id },
    el("div", { class: "label" }, p.is_error ? "← error from " : "← result of ", el("span", { class: "mono" }, p.id)), el("pre", {}, p.text));
  return el("pre", { class: "part other" }, p.text);
}

function messageNodes(run, messages) {
  // crash and settlement notes of the save points up to each message, shown right before it
  const notes = run.timeline.filter((s) => s.notes.length);
  const nodes = [];
  let after = messages.length && messages[0].seq !== undefined ? messages[0].seq - 1 : -1;
  const mark = (upto) => {
    const lines = notes.filter((s) => s.seq > after && s.seq <= upto).flatMap((s) => s.notes.map((line) => `save ${s.seq}: ${line}`));
    if (lines.length) nodes.push(el("div", { class: "crash-mark" }, lines.map((line) => el("div", {}, line))));
    after = Math.max(after, upto);
  };
  for (const message of messages) {
    if (message.seq !== undefined) mark(message.seq);
    const meta = [message.role, `#${message.index}`];
    if (message.seq !== undefined) meta.push(`save ${message.seq}`);
    if (message.tokens) meta.push(`${fmtNum(message.tokens)} tokens`);
    nodes.push(el("div", { class: "msg role-" + message.role, "data-index": message.index },
      el("div", { class: "meta" }, meta.join(" · ")), message.parts.map((p, n) => part(p, run.run_id, message.index, n))));
  }
  if (messages.length && messages[messages.length - 1].index === run.message_count - 1) mark(Infinity);
  return nodes;
}

function conversation(run) {
  const box = el("div", { class: "conversation", id: "conversation" }, messageNodes(run, run.messages));
  let start = run.messages.length ? run.messages[0].index : 0;
  if (start <= 0) return box;
  const earlier = el("button", { class: "secondary more", id: "earlier-messages" }, `Earlier messages (${fmtNum(start)})`);
  earlier.onclick = async () => {
    const page = await getJSON(`/api/runs/${encodeURIComponent(run.run_id)}/messages?before=${start}`);
    box.prepend(...messageNodes(run, page.messages));
    start = page.start;
    if (start <= 0) earlier.remove(); else earlier.textContent = `Earlier messages (${fmtNum(start)})`;
  };
  return [earlier, box];
}

function ledgerRows(entries) {
  return entries.map((entry) => el("tr", { "data-key": entry.key },
    el("td", {}, entry.tool),
    el("td", { class: "mono" }, entry.call_id),
    el("td", { class: "status-" + entry.status }, entry.status),
    el("td", { class: "num" }, entry.attempts),
    el("td", { class: "mono" }, entry.key),
    el("td", {}, entry.result ? el("pre", {}, entry.result.content) : ""),
    el("td", {}, fmtTime(entry.updated_at))));
}

function ledger(run) {
  // the newest entries (oldest first); "Earlier side effects" reads the page before them
  if (!run.ledger.length) return el("p", { class: "muted" }, "No side effect recorded.");
  const body = el("tbody", {}, ledgerRows(run.ledger));
  const table = el("table", { id: "ledger" },
    el("thead", {}, el("tr", {}, ["tool", "call", "status", "attempts", "idempotency key", "result", "updated"].map((h) => el("th", {}, h)))),
    body);
  if (!run.ledger_earlier) return table;
  const earlier = el("button", { class: "secondary more", id: "earlier-effects" }, "Earlier side effects");
  let oldest = run.ledger[0];
  earlier.onclick = async () => {
    const query = `at=${encodeURIComponent(oldest.created_at)}&key=${encodeURIComponent(oldest.key)}`;
    const page = await getJSON(`/api/runs/${encodeURIComponent(run.run_id)}/ledger?${query}`);
    body.prepend(...ledgerRows(page.ledger));
    if (page.ledger.length) oldest = page.ledger[0];
    if (!page.earlier || !page.ledger.length) earlier.remove();
  };
  return [earlier, table];
}

// ---------------------------------------------------------------- routing

(async function start() {
  try {
    if (location.pathname.startsWith("/runs/")) await runPage(decodeURIComponent(location.pathname.slice(6)));
    else await runsPage();
  } catch (error) {
    main().replaceChildren(el("p", { class: "error-box" }, error.message));
  }
})();
