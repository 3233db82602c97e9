// The chat page: pick who you are, talk, watch tool calls and the role that applied.
// The token comes from the address fragment (#token=…), which browsers never send to
// the server; it is kept for this tab only. Where the bot listens beyond its machine
// there is no picker: a person's own link speaks only as them.
//
// Everything the bot or the model wrote is put on the page as text (textContent, or
// markdown.js, which builds elements and never parses HTML).
"use strict";

const state = {
  token: "",
  people: [],
  current: 0,
  logs: new Map(),
  // The turn in flight: its message id once stored, and how to stop it.
  turn: null,
  peopleLoaded: false,
  noticeSignature: "",
  // The last "Test model" answer, shown first until the next one.
  modelCheck: null,
};
const $ = (id) => document.getElementById(id);
const STATUS_EVERY_MS = 3000;

// The token leaves the address bar at once (it would end up in screenshots and shared
// links) and is kept by this browser for this bot's address, so a bookmark of /chat or
// a restart of the bot (whose token file stays) opens the page again.
function readToken() {
  const fragment = new URLSearchParams(location.hash.slice(1));
  const token = fragment.get("token");
  if (token) {
    localStorage.setItem("saint-token", token);
    history.replaceState(null, "", location.pathname);
  }
  return localStorage.getItem("saint-token") || "";
}

class PageError extends Error {}

async function api(path, options = {}) {
  const headers = Object.assign({ Authorization: "Bearer " + state.token }, options.headers || {});
  let response;
  try {
    response = await fetch(path, Object.assign({}, options, { headers }));
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new PageError("Lost the connection to the bot: is saint-agent still running? " +
      "Start it again and reload this page.");
  }
  if (response.status === 401) {
    localStorage.removeItem("saint-token");
    throw new PageError("The page's token was refused: open the address saint-agent printed (it ends in #token=…).");
  }
  return response;
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function timeElement(iso) {
  const when = iso ? new Date(iso) : new Date();
  const time = element("time", "", when.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }));
  time.dateTime = when.toISOString();
  time.title = when.toLocaleString();
  return time;
}

// ---- notices: one line, details on demand, dismissible until something changes ----

// lines: [{kind: "bad" | "warn" | "info", text}], most important first.
function showNotices(lines) {
  const signature = JSON.stringify(lines);
  if (signature === state.noticeSignature) return;
  state.noticeSignature = signature;
  const section = $("notices");
  const dismissed = sessionStorage.getItem("saint-dismissed") === signature;
  section.hidden = lines.length === 0 || dismissed;
  if (lines.length === 0) return;
  const kind = lines.some((line) => line.kind === "bad") ? "bad"
    : lines.some((line) => line.kind === "warn") ? "warn" : "info";
  section.className = kind;
  // A problem leads alone; start-up notes share the line, cut where it ends.
  $("notice-summary").textContent = kind === "info"
    ? lines.map((line) => line.text.split("\n")[0]).join(" · ")
    : lines[0].text.split("\n")[0];
  $("notice-more").textContent = kind !== "info" && lines.length > 1 ? "+" + (lines.length - 1) + " more" : "Details";
  const details = $("notice-details");
  details.replaceChildren(...lines.map((line) => element("li", line.kind, line.text)));
}

function noticeLines(status) {
  const lines = [];
  if (state.modelCheck) {
    lines.push({ kind: state.modelCheck.ok ? "info" : "bad", text: state.modelCheck.message });
  }
  for (const warning of status.warnings) lines.push({ kind: "warn", text: "warning: " + warning });
  for (const notice of status.notices) {
    // Without a model nothing answers: that line leads, whatever order `up` printed.
    const bad = !status.modelReady && /model/i.test(notice) && /set |no model/i.test(notice);
    if (bad) lines.unshift({ kind: "bad", text: notice });
    else lines.push({ kind: "info", text: notice });
  }
  return lines;
}

async function refreshStatus() {
  const status = await (await api("/v1/status")).json();
  $("check-model").hidden = !status.modelCheck;
  $("bot").textContent = status.bot;
  document.title = status.bot + " — Saint";
  const lines = noticeLines(status);
  if (!status.picker && state.people.length === 0 && state.peopleLoaded) {
    lines.unshift({ kind: "warn", text: "This page has no person picker here: open your own link (saint-agent up printed one per person)." });
  }
  showNotices(lines);
  return status;
}

// ---- conversations ----

function personKey(person) { return person.channel + ":" + person.peer; }

function logFor(person) {
  const key = personKey(person);
  if (!state.logs.has(key)) {
    const root = element("div", "conversation");
    const earlier = element("button", "earlier", "Show earlier messages");
    earlier.type = "button";
    earlier.hidden = true;
    const past = element("div", "history");
    const live = element("div", "live");
    root.append(earlier, past, live);
    const log = { root, earlier, past, live, loaded: false, oldest: null };
    earlier.addEventListener("click", () => loadHistory(person, log));
    state.logs.set(key, log);
  }
  return state.logs.get(key);
}

function showPerson() {
  const person = state.people[state.current];
  $("role-badge").textContent = "role: " + person.role;
  const log = logFor(person);
  $("log").replaceChildren(log.root);
  for (const id of ["applied-person", "applied-role", "applied-model", "applied-tools"]) $(id).textContent = "—";
  if (!log.loaded) {
    log.loaded = true;
    loadHistory(person, log);
  }
}

function toolItem(tool) {
  const ok = tool.outcome === "ok";
  const item = element("li", ok ? "" : "failed");
  const details = element("details");
  const summary = element("summary", "", tool.name + " → " + tool.outcome);
  const body = element("div", "tool-body");
  body.append(element("div", "label", "Arguments"),
    element("pre", "arguments", JSON.stringify(tool.arguments ?? {}, null, 2)));
  if (tool.preview) {
    body.append(element("div", "label", ok ? "Result" : "Error"), element("pre", "preview", tool.preview));
  }
  details.append(summary, body);
  item.append(details);
  return item;
}

// A bot bubble: the text (Markdown), the indicator, model trouble, tools, meta.
function botBubble() {
  const reply = element("div", "msg bot");
  const body = element("div", "text");
  const typing = element("div", "typing");
  typing.setAttribute("role", "status");
  typing.append(element("span", "label", "Thinking"), element("span", "dots"));
  typing.hidden = true;
  const trouble = element("div", "trouble");
  trouble.hidden = true;
  const tools = element("ul", "tools");
  const meta = element("div", "meta");
  // In the order they happen: tool calls, then the answer.
  reply.append(tools, typing, trouble, body, meta);
  return { reply, body, typing, trouble, tools, meta };
}

function personBubble(text, at) {
  const bubble = element("div", "msg user");
  bubble.append(element("div", "text", text));
  const meta = element("div", "meta");
  meta.append(timeElement(at));
  bubble.append(meta);
  return bubble;
}

async function loadHistory(person, log) {
  const query = new URLSearchParams({ channel: person.channel, peer: person.peer });
  if (log.oldest !== null) query.set("before", String(log.oldest));
  let page;
  try {
    const response = await api("/v1/history?" + query);
    if (!response.ok) throw new PageError((await response.json().catch(() => ({}))).error || response.statusText);
    page = await response.json();
  } catch (error) {
    log.past.prepend(element("div", "msg error", "Failed to load earlier messages: " + error.message));
    return;
  }
  const bubbles = page.items.map((item) => {
    if (item.from === "person") return personBubble(item.text, item.at);
    const parts = botBubble();
    parts.reply.dataset.state = "history";
    markdown.render(parts.body, item.text);
    for (const tool of item.tools) parts.tools.append(toolItem(tool));
    parts.meta.append(timeElement(item.at));
    return parts.reply;
  });
  log.past.prepend(...bubbles);
  log.oldest = page.oldest ?? log.oldest;
  log.earlier.hidden = !page.more;
  if (log.live.childElementCount === 0 && bubbles.length && !log.scrolled) {
    log.scrolled = true;
    bubbles[bubbles.length - 1].scrollIntoView({ block: "end" });
  }
}

function showApplied(caller) {
  $("applied-person").textContent = caller.contact || "a stranger (not a contact)";
  $("applied-role").textContent = caller.role;
  $("applied-model").textContent = caller.model;
  $("applied-tools").textContent = caller.tools.length ? caller.tools.join(", ") : "none";
}

// Reads server-sent events from a POST response (EventSource cannot POST).
async function* events(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) yield { name, data: JSON.parse(data.join("\n")) };
    }
  }
}

// What a failed model call means for the person waiting, and what to do.
function troubleText(trouble) {
  const seconds = trouble.retryInMs == null ? null : Math.max(1, Math.round(trouble.retryInMs / 1000));
  const what = trouble.address
    ? "The model at " + trouble.address + " failed: " + trouble.error + "."
    : "The model did not answer.";
  if (seconds === null) return what;
  const again = what + " Trying again in " + seconds + " s.";
  // Only whoever runs the bot (the channel's token) can do something about the server.
  return trouble.address
    ? again + " Check that the model server is running and reachable, or press Stop."
    : again;
}

class TurnFailed extends Error {
  constructor(data) {
    super(data.error);
    this.stopped = Boolean(data.stopped);
    this.model = data.model || null;
  }
}

function failureText(error) {
  if (error.model && error.model.address) {
    return "Failed to answer: the model at " + error.model.address + " failed: " + error.model.error +
      ". Check that it is running and reachable (SAINT_MODEL_BASE_URL), then send again.";
  }
  if (error.model) return "Failed to answer: the model did not answer. Try again in a moment.";
  return error.message;
}

async function send(text) {
  const person = state.people[state.current];
  const log = logFor(person);
  const sent = personBubble(text);
  log.live.append(sent);
  const parts = botBubble();
  const { reply, body, typing, trouble, tools, meta } = parts;
  reply.dataset.state = "pending";
  // From the moment it is sent until the first words: the bot is on it.
  typing.hidden = false;
  log.live.append(reply);
  reply.scrollIntoView({ block: "end" });
  const controller = new AbortController();
  state.turn = { messageId: null, controller };
  let written = "";
  let caller = null;
  const finish = (when) => {
    typing.hidden = true;
    meta.replaceChildren();
    if (caller) meta.append("role " + caller.role + " · " + caller.model + " · ");
    meta.append(timeElement(when));
  };
  try {
    const response = await api("/v1/messages", {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
      body: JSON.stringify({ channel: person.channel, peer: person.peer, text, stream: true }),
      signal: controller.signal,
    });
    if (!response.ok) {
      const problem = await response.json().catch(() => ({ error: response.statusText }));
      throw new PageError(problem.error || response.statusText);
    }
    for await (const event of events(response)) {
      if (event.name === "accepted") {
        state.turn.messageId = event.data.messageId;
        sent.querySelector(".meta").replaceChildren(timeElement(event.data.at));
      } else if (event.name === "caller") {
        caller = event.data;
        showApplied(caller);
        meta.textContent = "role " + caller.role + " · " + caller.model;
      } else if (event.name === "delta") {
        typing.hidden = true;
        trouble.hidden = true;
        written += event.data.text;
        markdown.render(body, written);
      } else if (event.name === "tool") {
        trouble.hidden = true;
        tools.append(toolItem(event.data));
      } else if (event.name === "model") {
        trouble.textContent = troubleText(event.data);
        trouble.hidden = false;
      } else if (event.name === "done") {
        markdown.render(body, event.data.reply);
        finish(event.data.at);
        reply.dataset.state = "done";
      } else if (event.name === "error") {
        throw new TurnFailed(event.data);
      }
      reply.scrollIntoView({ block: "end" });
    }
    if (reply.dataset.state === "pending") throw new PageError("The reply stopped halfway: reload the page to see what was stored.");
  } catch (error) {
    finish();
    trouble.hidden = true;
    if (error.stopped || error.name === "AbortError") {
      reply.dataset.state = "stopped";
      reply.classList.add("stopped");
      body.append(element("p", "stopped-note", "Stopped."));
    } else {
      reply.className = "msg error";
      body.textContent = failureText(error);
      reply.dataset.state = "error";
    }
  } finally {
    state.turn = null;
  }
}

// Stops the turn in flight: the server cancels it (and its model call); before the
// message is stored there is nothing to cancel yet, so the request is dropped.
async function stop() {
  const turn = state.turn;
  if (!turn) return;
  $("stop").disabled = true;
  if (turn.messageId !== null) {
    try {
      const response = await api("/v1/messages/" + turn.messageId + "/cancel", { method: "POST" });
      if (response.ok) return;
    } catch { /* fall through: at least stop listening */ }
  }
  turn.controller.abort();
}

function setBusy(busy) {
  $("send").hidden = busy;
  $("stop").hidden = !busy;
  $("stop").disabled = false;
}

// "Test model": the bot asks its model endpoint whether it answers, takes the key and
// serves the model, and the answer leads the notices until the next test.
async function checkModel() {
  const button = $("check-model");
  button.disabled = true;
  button.textContent = "Testing…";
  try {
    const response = await api("/v1/model-check", { method: "POST" });
    state.modelCheck = response.ok ? await response.json()
      : { ok: false, message: "model check refused: " + await response.text() };
  } catch (error) {
    state.modelCheck = { ok: false, message: error.message };
  } finally {
    button.disabled = false;
    button.textContent = "Test model";
  }
  sessionStorage.removeItem("saint-dismissed");
  state.noticeSignature = "";
  await refreshStatus().catch(() => {});
  $("notice-details").hidden = false;
}

async function start() {
  state.token = readToken();
  $("notice-more").addEventListener("click", () => {
    const details = $("notice-details");
    details.hidden = !details.hidden;
    $("notice-more").setAttribute("aria-expanded", String(!details.hidden));
  });
  $("notice-dismiss").addEventListener("click", () => {
    sessionStorage.setItem("saint-dismissed", state.noticeSignature);
    $("notices").hidden = true;
  });
  $("toggle-applied").addEventListener("click", () => document.body.classList.toggle("show-applied"));
  $("check-model").addEventListener("click", checkModel);
  if (!state.token) {
    showNotices([{ kind: "bad", text: "No token: open the address saint-agent printed (it ends in #token=…)." }]);
    return;
  }
  let status;
  try {
    status = await refreshStatus();
    state.people = await (await api("/v1/people")).json();
    state.peopleLoaded = true;
    await refreshStatus();
  } catch (error) {
    showNotices([{ kind: "bad", text: error.message }]);
    return;
  }
  // Kept current: a refused edit of the bot file shows here until it is fixed.
  setInterval(() => refreshStatus().catch(() => {}), STATUS_EVERY_MS);
  if (status.picker) {
    const select = $("person");
    state.people.forEach((person, index) => {
      select.append(new Option(person.name + " (" + person.role + ")", String(index)));
    });
    select.addEventListener("change", () => { state.current = Number(select.value); showPerson(); });
  } else {
    // The server speaks only as this token's holder: no control suggests otherwise.
    $("picker").remove();
    if (state.people.length === 0) {
      $("send").disabled = true;
      return;
    }
    const person = state.people[0];
    $("talking-as").textContent = "Talking as " + person.name + " (" + person.role + ")";
    $("talking-as").hidden = false;
  }
  showPerson();
  $("stop").addEventListener("click", stop);
  $("composer").addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = $("text").value.trim();
    if (!text || state.turn) return;
    setBusy(true);
    $("text").value = "";
    await send(text);
    setBusy(false);
    $("text").focus();
  });
  $("text").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      $("composer").requestSubmit();
    }
  });
}

start();
