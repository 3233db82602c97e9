// The chat page: pick who you are, talk, watch tool calls and the role that applied.
// The token comes from the address fragment (#token=…), which browsers never send to
// the server; it is kept for this tab only. Where the bot listens beyond its machine
// there is no picker: a person's own link speaks only as them.
"use strict";

const state = { token: "", people: [], current: 0, logs: new Map(), busy: false };
const $ = (id) => document.getElementById(id);

function readToken() {
  const fragment = new URLSearchParams(location.hash.slice(1));
  const token = fragment.get("token");
  if (token) {
    sessionStorage.setItem("saint-token", token);
    history.replaceState(null, "", location.pathname);
  }
  return sessionStorage.getItem("saint-token") || "";
}

async function api(path, options = {}) {
  const headers = Object.assign({ Authorization: "Bearer " + state.token }, options.headers || {});
  const response = await fetch(path, Object.assign({}, options, { headers }));
  if (response.status === 401) {
    throw new Error("The page's token was refused: open the address saint-agent printed (it ends in #token=…).");
  }
  return response;
}

// kind: "info" (start-up notices), "warn" (a channel cannot work) or "bad" (nothing
// will answer until something is set).
function banner(lines, kind) {
  const element = $("banner");
  element.hidden = lines.length === 0;
  element.className = kind;
  element.textContent = lines.join("\n");
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function personKey(person) { return person.channel + ":" + person.peer; }

function logFor(person) {
  const key = personKey(person);
  if (!state.logs.has(key)) state.logs.set(key, element("div", "conversation"));
  return state.logs.get(key);
}

function showPerson() {
  const person = state.people[state.current];
  $("role-badge").textContent = "role: " + person.role;
  const log = $("log");
  log.replaceChildren(logFor(person));
  log.firstChild.style.display = "contents";
  for (const id of ["applied-person", "applied-role", "applied-model", "applied-tools"]) $(id).textContent = "—";
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

async function send(text) {
  const person = state.people[state.current];
  const log = logFor(person);
  log.append(element("div", "msg user", text));
  const reply = element("div", "msg bot");
  reply.dataset.state = "pending";
  const body = element("div", "text", "");
  const tools = element("ul", "tools");
  const meta = element("div", "meta");
  reply.append(body, tools, meta);
  log.append(reply);
  reply.scrollIntoView({ block: "end" });
  try {
    const response = await api("/v1/messages", {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
      body: JSON.stringify({ channel: person.channel, peer: person.peer, text, stream: true }),
    });
    if (!response.ok) {
      const problem = await response.json().catch(() => ({ error: response.statusText }));
      throw new Error(problem.error || response.statusText);
    }
    for await (const event of events(response)) {
      if (event.name === "caller") {
        showApplied(event.data);
        meta.textContent = "role " + event.data.role + " · " + event.data.model;
      } else if (event.name === "delta") {
        body.textContent += event.data.text;
      } else if (event.name === "tool") {
        const item = element("li", event.data.outcome === "ok" ? "" : "failed",
          event.data.name + " → " + event.data.outcome);
        tools.append(item);
      } else if (event.name === "done") {
        body.textContent = event.data.reply;
        reply.dataset.state = "done";
      } else if (event.name === "error") {
        throw new Error(event.data.error);
      }
      reply.scrollIntoView({ block: "end" });
    }
  } catch (error) {
    reply.className = "msg error";
    body.textContent = error.message;
    reply.dataset.state = "error";
  }
}

async function start() {
  state.token = readToken();
  if (!state.token) {
    banner(["No token: open the address saint-agent printed (it ends in #token=…)."], "bad");
    return;
  }
  let status;
  try {
    status = await (await api("/v1/status")).json();
    $("bot").textContent = status.bot;
    document.title = status.bot + " — Saint";
    const kind = !status.modelReady ? "bad" : status.warnings.length ? "warn" : "info";
    banner(status.notices.concat(status.warnings.map((warning) => "warning: " + warning)), kind);
    state.people = await (await api("/v1/people")).json();
  } catch (error) {
    banner([error.message], "bad");
    return;
  }
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
      banner(status.notices.concat(status.warnings.map((warning) => "warning: " + warning),
        ["This page has no person picker here: open your own link (saint-agent up printed one per person)."]),
        "warn");
      $("send").disabled = true;
      return;
    }
    const person = state.people[0];
    $("talking-as").textContent = "Talking as " + person.name + " (" + person.role + ")";
    $("talking-as").hidden = false;
  }
  showPerson();
  $("composer").addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = $("text").value.trim();
    if (!text || state.busy) return;
    state.busy = true;
    $("send").disabled = true;
    $("text").value = "";
    await send(text);
    state.busy = false;
    $("send").disabled = false;
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
