// The chat page's application (embedded into chat_page.html at build time after
// chat_markdown.js, whose functions it uses).
"use strict";

// ---------------------------------------------------------------------------------------------
// The chat: conversations in localStorage (an index and one key per conversation), settings,
// streaming with DOM updates batched per animation frame.
// ---------------------------------------------------------------------------------------------
const $ = (id) => document.getElementById(id);
const ui = {
  model: $("model"), notice: $("notice"), apiKey: $("api-key"), temperature: $("temperature"),
  topP: $("top-p"), maxTokens: $("max-tokens"), system: $("system"), extra: $("extra"),
  clear: $("clear"), chats: $("chats"), toggleList: $("toggle-list"), messages: $("messages"),
  form: $("composer"), prompt: $("prompt"), send: $("send"), stop: $("stop"),
};
const STORE = {
  apiKey: "mla.apiKey", settings: "mla.settings", index: "mla.chats", current: "mla.currentChat",
  chat: (id) => "mla.chat." + id,
};
const SETTINGS = { system: ui.system, temperature: ui.temperature, top_p: ui.topP, max_tokens: ui.maxTokens, extra: ui.extra };

let modelId = null;
let index = [];     // the saved conversations, newest first: {id, title, updated}
let chat = null;    // the conversation shown: {id, title, created, updated, messages}
let live = null;    // the reply being streamed (into live.chat, which may not be the one shown)
let stick = true;   // keep the newest text in view (false once the user scrolls up)

function readJSON(key, fallback) {
  try {
    const v = localStorage.getItem(key);
    return v ? JSON.parse(v) : fallback;
  } catch (_) {
    return fallback;
  }
}

function writeJSON(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
    return true;
  } catch (e) {
    ui.notice.textContent = "not saved (" + e.name + "): delete some conversations";
    return false;
  }
}

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = ui.apiKey.value.trim();
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

// "type: message (param)" from an OpenAI error object.
function describeError(e) {
  let s = (e.type ? e.type + ": " : "") + (e.message || "unknown error");
  if (e.param) s += " (" + e.param + ")";
  return s;
}

// The error of a non-200 response: the {"error": {...}} envelope, else the status and body.
async function responseError(res) {
  const text = await res.text().catch(() => "");
  try {
    const e = JSON.parse(text).error;
    if (e) return new Error(res.status + " " + describeError(e));
  } catch (_) { /* not JSON */ }
  return new Error("HTTP " + res.status + " " + res.statusText + (text ? ": " + text.slice(0, 300) : ""));
}

async function loadModel() {
  const res = await fetch("/v1/models", { headers: headers() });
  if (!res.ok) throw await responseError(res);
  const list = await res.json();
  if (!list.data || !list.data.length) throw new Error("the server lists no model");
  modelId = list.data[0].id;
  ui.model.textContent = modelId;
  return modelId;
}

function refreshModel() {
  modelId = null;
  ui.model.textContent = "connecting\u2026";
  loadModel().catch((e) => { ui.model.textContent = "model unknown: " + e.message; });
}

// ----- conversations -----

function titleOf(c) {
  const first = c.messages.find((m) => m.role === "user");
  const t = first ? first.content.replace(/\s+/g, " ").trim() : "";
  return t.length > 60 ? t.slice(0, 57) + "\u2026" : t || "New chat";
}

function saveChat(c) {
  if (!c.messages.length || c.deleted) return;
  if (!c.id) {
    c.id = Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
    c.created = Date.now();
  }
  c.updated = Date.now();
  c.title = titleOf(c);
  writeJSON(STORE.chat(c.id), c);
  index = [{ id: c.id, title: c.title, updated: c.updated }, ...index.filter((e) => e.id !== c.id)];
  writeJSON(STORE.index, index);
  if (c === chat) localStorage.setItem(STORE.current, c.id);
  renderList();
}

function renderList() {
  ui.chats.replaceChildren(...index.map((e) => {
    const row = document.createElement("div");
    row.className = "chat-item";
    if (chat && e.id === chat.id) row.classList.add("current");
    if (live && e.id === live.chat.id) row.classList.add("streaming");
    row.dataset.id = e.id;
    const open = document.createElement("button");
    open.type = "button";
    open.className = "open";
    open.textContent = e.title;
    open.title = e.title + "\n" + new Date(e.updated).toLocaleString();
    const del = document.createElement("button");
    del.type = "button";
    del.className = "del";
    del.title = "Delete this conversation";
    del.textContent = "\u2715";
    row.append(open, del);
    return row;
  }));
}

function openChat(id) {
  if (live && live.chat.id === id) chat = live.chat;
  else chat = (id && readJSON(STORE.chat(id), null)) || { id: null, title: "", messages: [] };
  if (chat.id) localStorage.setItem(STORE.current, chat.id);
  else localStorage.removeItem(STORE.current);
  document.body.classList.remove("show-list");
  renderChat();
  renderList();
}

function deleteChat(id) {
  if (live && live.chat.id === id) {
    live.chat.deleted = true;
    live.controller.abort();
  }
  localStorage.removeItem(STORE.chat(id));
  index = index.filter((e) => e.id !== id);
  writeJSON(STORE.index, index);
  if (chat && chat.id === id) openChat(index.length ? index[0].id : null);
  else renderList();
}

// ----- messages -----

function answered(m) { return !!(m.content || m.reasoning); }

// The messages sent for a reply after msgs: the system prompt, then the conversation without
// failed replies and the user messages they answered; R1's reasoning is not sent back.
function requestMessages(msgs) {
  const out = [];
  if (ui.system.value.trim()) out.push({ role: "system", content: ui.system.value });
  for (let i = 0; i < msgs.length; i++) {
    const m = msgs[i], next = msgs[i + 1];
    if (m.role === "user") {
      if (next && next.role === "assistant" && !answered(next)) i++;
      else out.push({ role: "user", content: m.content });
    } else if (answered(m)) {
      out.push({ role: "assistant", content: m.content });
    }
  }
  return out;
}

function button(cls, label, title) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = cls;
  b.textContent = label;
  if (title) b.title = title;
  return b;
}

function reasoningBox(bubble, open) {
  const box = document.createElement("details");
  box.className = "reasoning";
  box.open = open;
  const title = document.createElement("summary");
  title.textContent = "Reasoning";
  const body = document.createElement("div");
  box.append(title, body);
  bubble.querySelector(".text").before(box);
  return body;
}

function messageEl(m, i) {
  const div = document.createElement("div");
  div.className = "msg " + m.role;
  div.dataset.index = i;
  const parts = {};
  for (const part of ["text", "meta", "error", "actions"]) {
    parts[part] = document.createElement("div");
    parts[part].className = part;
    div.append(parts[part]);
  }
  parts.actions.append(button("copy", "Copy", "Copy this message"));
  if (m.role === "user") {
    parts.text.textContent = m.content;
    parts.actions.append(button("edit", "Edit", "Edit this message and send it again"));
  } else {
    parts.actions.append(button("regen", "Regenerate", "Ask for this reply again"));
    if (m !== (live && live.msg)) {
      parts.text.innerHTML = renderMarkdown(m.content);
      if (m.reasoning) reasoningBox(div, !m.content).textContent = m.reasoning;
      if (!m.content) div.classList.add("no-text");
      parts.meta.textContent = m.meta || "";
      parts.error.textContent = m.error || "";
    }
  }
  if (m !== (live && live.msg)) div.dataset.done = "1";
  return div;
}

function renderChat() {
  const msgs = chat.messages;
  ui.messages.replaceChildren(...msgs.map(messageEl));
  msgs.forEach((m, i) => {
    if (m.role === "assistant" && !answered(m) && m !== (live && live.msg) && i > 0) {
      ui.messages.children[i - 1].classList.add("unanswered");
    }
  });
  if (live) {
    live.view = null;
    if (live.chat === chat) attachView(ui.messages.lastElementChild);
  }
  stick = true;
  scrollDown();
}

function scrollDown() { ui.messages.scrollTop = ui.messages.scrollHeight; }

function setBusy(busy) {
  ui.send.disabled = busy;
  ui.stop.disabled = !busy;
  document.body.classList.toggle("busy", busy);
  for (const b of ui.messages.querySelectorAll(".editor .edit-send")) b.disabled = busy;
}

// ----- streaming -----

// Yields, for each chunk read from a response body, the data of the server-sent events it
// completes (events end at a blank line), as an array.
async function* sseBatches(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      buf += done ? decoder.decode() : decoder.decode(value, { stream: true });
      const blocks = buf.split(/\r?\n\r?\n/);
      buf = blocks.pop();
      const batch = [];
      for (const block of blocks) {
        const data = block.split(/\r?\n/).filter((l) => l.startsWith("data:"))
          .map((l) => l.slice(l.startsWith("data: ") ? 6 : 5)).join("\n");
        if (data) batch.push(data);
      }
      if (batch.length) yield batch;
      if (done) return;
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

// A turn of the event loop, so that a frame due can be drawn (and Stop clicked).
const nextTask = () => new Promise((resolve) => setTimeout(resolve, 0));

function requestBody(model, messages) {
  const body = {};
  const extra = ui.extra.value.trim();
  if (extra) {
    let x;
    try { x = JSON.parse(extra); } catch (e) { throw new Error("Extra request fields: " + e.message); }
    if (!x || typeof x !== "object" || Array.isArray(x)) throw new Error("Extra request fields: not a JSON object");
    Object.assign(body, x);
  }
  const temperature = parseFloat(ui.temperature.value);
  if (Number.isFinite(temperature)) body.temperature = temperature;
  const topP = parseFloat(ui.topP.value);
  if (Number.isFinite(topP)) body.top_p = topP;
  const maxTokens = parseInt(ui.maxTokens.value, 10);
  if (Number.isFinite(maxTokens)) body.max_tokens = maxTokens;
  return Object.assign(body, { model: body.model || model, messages, stream: true,
                               stream_options: { include_usage: true } });
}

function usageLine(usage, t, finish) {
  const seconds = (t.end - t.start) / 1000;
  const parts = [];
  if (usage) parts.push(usage.prompt_tokens + " prompt + " + usage.completion_tokens + " completion tokens");
  parts.push(seconds.toFixed(2) + " s");
  if (t.first) parts.push("first token " + ((t.first - t.start) / 1000).toFixed(2) + " s");
  if (usage) {
    const n = usage.completion_tokens, decode = (t.end - t.first) / 1000;
    const rate = t.first && n > 1 && decode > 0 ? (n - 1) / decode : seconds > 0 ? n / seconds : 0;
    parts.push(rate.toFixed(1) + " tokens/s");
    const cached = usage.prompt_tokens_details && usage.prompt_tokens_details.cached_tokens;
    if (cached) parts.push(cached + " prompt tokens cached");
  }
  if (finish === "length") parts.push("cut at max tokens");
  return parts.join(" \u00b7 ");
}

// Connects the live reply to its bubble (when its conversation is shown) and paints what it has.
function attachView(bubble) {
  const v = { bubble, text: bubble.querySelector(".text"), meta: bubble.querySelector(".meta"),
              thought: null, thoughtClosed: false, md: null, cost: 0, next: 0 };
  v.md = new MarkdownView(v.text);
  live.view = v;
  if (live.msg.reasoning) paintThought(v, live.msg.reasoning);
  if (live.msg.content) v.md.update(live.msg.content);
  paintLive(v);
}

// Reasoning is plain text; it goes into a new div at a line break every ~2,000 characters, so
// that appending to it lays out a small block only.
function paintThought(v, text) {
  if (!v.thought) {
    v.thoughtBody = reasoningBox(v.bubble, !live.msg.content);
  }
  while (text) {
    if (!v.thought) {
      const div = document.createElement("div");
      v.thought = document.createTextNode("");
      div.append(v.thought);
      v.thoughtBody.append(div);
    }
    let piece = text;
    if (v.thought.length + text.length > 2000) {
      const nl = text.indexOf("\n");
      if (nl >= 0) piece = text.slice(0, nl + 1);
    }
    v.thought.appendData(piece);
    text = text.slice(piece.length);
    if (piece.endsWith("\n") && v.thought.length > 2000) v.thought = null;
  }
}

function paintLive(v) {
  const n = live.tokens, secs = (performance.now() - (live.first || live.start)) / 1000;
  v.meta.textContent = n ? n + " tokens" + (secs > 0.2 ? " \u00b7 " + (n / secs).toFixed(1) + " tokens/s" : "") : "";
}

function schedule() {
  if (live.frame) return;
  live.frame = requestAnimationFrame(() => flush());
  live.timer = setTimeout(() => flush(), 250);  // rAF does not run in a hidden tab
}

// Moves the deltas received since the last frame into the message and, once per frame, the page.
function flush(final = false) {
  if (!live) return;
  cancelAnimationFrame(live.frame);
  clearTimeout(live.timer);
  live.frame = live.timer = 0;
  const msg = live.msg, v = live.view;
  const r = live.pendingThought, c = live.pendingText;
  live.pendingThought = live.pendingText = "";
  msg.reasoning += r;
  msg.content += c;
  if (!v) return;
  if (r) paintThought(v, r);
  if (msg.content && v.thoughtBody && !v.thoughtClosed) {
    v.thoughtBody.parentNode.open = false;  // the answer began
    v.thoughtClosed = true;
  }
  const now = performance.now();
  let rendered = false;
  if (final || (v.dirty || c) && now >= v.next) {
    v.md.update(msg.content, final === true);
    v.dirty = false;
    rendered = true;
  } else if (c || v.dirty) {
    v.dirty = true;
    schedule();
  }
  paintLive(v);
  if (stick) scrollDown();  // lays the page out now
  if (rendered) {  // a slow render and layout give the frames after it some room
    const cost = performance.now() - now;
    v.next = now + Math.max(0, cost * 3 - 16);
  }
}

async function startReply() {
  const c = chat;
  const messages = requestMessages(c.messages);
  const msg = { role: "assistant", content: "", reasoning: "" };
  c.messages.push(msg);
  saveChat(c);
  live = { chat: c, msg, view: null, controller: new AbortController(), pendingText: "", pendingThought: "",
           tokens: 0, start: performance.now(), first: 0, frame: 0, timer: 0 };
  renderList();
  const bubble = messageEl(msg, c.messages.length - 1);
  ui.messages.append(bubble);
  attachView(bubble);
  stick = true;
  scrollDown();
  setBusy(true);
  let usage = null, finish = null;
  try {
    const model = modelId || await loadModel();
    const res = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(), body: JSON.stringify(requestBody(model, messages)),
      signal: live.controller.signal,
    });
    if (!res.ok) throw await responseError(res);
    // A page that fell behind reads many events at once: after 8 ms on them it lets a frame in.
    stream: for await (const batch of sseBatches(res.body)) {
      let slice = performance.now();
      for (const data of batch) {
        if (performance.now() - slice > 8) {
          await nextTask();
          slice = performance.now();
        }
        if (data === "[DONE]") break stream;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(describeError(chunk.error));
        const choice = chunk.choices && chunk.choices[0];
        const d = choice && choice.delta;
        if (d) {
          const thought = d.reasoning_content || d.reasoning;
          if (thought || d.content) {
            if (!live.first) live.first = performance.now();
            live.tokens++;
            if (thought) live.pendingThought += thought;
            if (d.content) live.pendingText += d.content;
            schedule();
          }
        }
        if (choice && choice.finish_reason) finish = choice.finish_reason;
        if (chunk.usage) usage = chunk.usage;
      }
    }
    msg.meta = usageLine(usage, { start: live.start, first: live.first, end: performance.now() }, finish);
  } catch (e) {
    if (e.name === "AbortError") msg.meta = "stopped";
    else msg.error = e.message;
  } finally {
    flush(true);
    const v = live.view;
    live = null;
    if (!msg.reasoning) delete msg.reasoning;
    saveChat(c);
    if (v) {
      v.meta.textContent = msg.meta || "";
      v.bubble.querySelector(".error").textContent = msg.error || "";
      if (!msg.content) v.bubble.classList.add("no-text");
      if (!answered(msg) && v.bubble.previousElementSibling) {
        v.bubble.previousElementSibling.classList.add("unanswered");
      }
      v.bubble.dataset.done = "1";
      if (stick) scrollDown();
    }
    setBusy(false);
    ui.prompt.focus();
  }
}

function send() {
  const text = ui.prompt.value;
  if (!text.trim() || live) return;
  ui.prompt.value = "";
  chat.messages.push({ role: "user", content: text });
  ui.messages.append(messageEl(chat.messages.at(-1), chat.messages.length - 1));
  startReply();
}

function regenerate() {
  if (live) return;
  const msgs = chat.messages;
  if (msgs.length && msgs.at(-1).role === "assistant") msgs.pop();
  if (!msgs.length || msgs.at(-1).role !== "user") return;
  renderChat();
  startReply();
}

function startEdit(bubble, i) {
  if (bubble.classList.contains("editing")) return;
  bubble.classList.add("editing");
  const editor = document.createElement("div");
  editor.className = "editor";
  const box = document.createElement("textarea");
  box.className = "edit-box";
  box.value = chat.messages[i].content;
  box.rows = Math.min(12, box.value.split("\n").length + 1);
  const row = document.createElement("div");
  const go = button("edit-send", "Send", "Send the edited message; the replies after it are dropped");
  go.disabled = !!live;
  const cancel = button("edit-cancel", "Cancel");
  row.append(cancel, go);
  editor.append(box, row);
  bubble.querySelector(".text").after(editor);
  const submit = () => {
    const text = box.value;
    if (!text.trim() || live) return;
    chat.messages = chat.messages.slice(0, i);
    chat.messages.push({ role: "user", content: text });
    renderChat();
    startReply();
  };
  go.addEventListener("click", submit);
  cancel.addEventListener("click", () => { editor.remove(); bubble.classList.remove("editing"); });
  box.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); submit(); }
    if (ev.key === "Escape") cancel.click();
  });
  box.focus();
}

async function copyText(text, b) {
  try {
    await navigator.clipboard.writeText(text);
  } catch (_) {  // no clipboard API (a page served over plain http to another host)
    const t = document.createElement("textarea");
    t.value = text;
    t.style.cssText = "position:fixed;opacity:0";
    document.body.append(t);
    t.select();
    document.execCommand("copy");
    t.remove();
  }
  const label = b.textContent;
  b.textContent = "Copied";
  setTimeout(() => { b.textContent = label; }, 1200);
}

// ----- events -----

ui.form.addEventListener("submit", (ev) => { ev.preventDefault(); send(); });
ui.prompt.addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    send();
  }
});
document.addEventListener("keydown", (ev) => {
  if (ev.key === "Escape" && live && !ev.target.closest(".editor")) live.controller.abort();
});
ui.stop.addEventListener("click", () => { if (live) live.controller.abort(); });
ui.clear.addEventListener("click", () => {
  openChat(null);
  ui.prompt.focus();
});
ui.toggleList.addEventListener("click", () => document.body.classList.toggle("show-list"));
ui.messages.addEventListener("scroll", () => {
  const m = ui.messages;
  stick = m.scrollTop + m.clientHeight >= m.scrollHeight - 40;
});
ui.messages.addEventListener("click", (ev) => {
  const b = ev.target.closest("button");
  if (!b) return;
  const bubble = b.closest(".msg");
  const i = bubble ? Number(bubble.dataset.index) : -1;
  if (b.classList.contains("copy-code")) copyText(b.closest(".code").querySelector("code").textContent, b);
  else if (b.classList.contains("copy")) copyText(chat.messages[i].content, b);
  else if (b.classList.contains("edit")) startEdit(bubble, i);
  else if (b.classList.contains("regen")) regenerate();
});
ui.chats.addEventListener("click", (ev) => {
  const b = ev.target.closest("button"), row = b && b.closest(".chat-item");
  if (!row) return;
  if (b.classList.contains("open")) {
    if (!chat || chat.id !== row.dataset.id) openChat(row.dataset.id);
  } else if (b.classList.contains("del")) {
    if (b.classList.contains("confirm")) deleteChat(row.dataset.id);
    else {  // a second click within 3 s deletes
      b.classList.add("confirm");
      b.textContent = "Delete?";
      setTimeout(() => { b.classList.remove("confirm"); b.textContent = "\u2715"; }, 3000);
    }
  }
});
window.addEventListener("storage", (ev) => {  // another tab saved or deleted a conversation
  if (ev.key === STORE.index) {
    index = readJSON(STORE.index, []);
    renderList();
  }
});
window.addEventListener("pagehide", () => {  // keep a reply cut short by leaving the page
  if (live) {
    flush();
    saveChat(live.chat);
  }
});

ui.apiKey.value = localStorage.getItem(STORE.apiKey) || "";
ui.apiKey.addEventListener("change", () => {
  localStorage.setItem(STORE.apiKey, ui.apiKey.value.trim());
  refreshModel();
});

function saveSettings() {
  const s = {};
  for (const [k, el] of Object.entries(SETTINGS)) s[k] = el.value;
  writeJSON(STORE.settings, s);
  let bad = false;
  if (ui.extra.value.trim()) {
    try {
      const x = JSON.parse(ui.extra.value);
      bad = !x || typeof x !== "object" || Array.isArray(x);
    } catch (_) { bad = true; }
  }
  ui.extra.classList.toggle("invalid", bad);
}
const saved = readJSON(STORE.settings, {});
for (const [k, el] of Object.entries(SETTINGS)) {
  if (typeof saved[k] === "string") el.value = saved[k];
  el.addEventListener("input", saveSettings);
  el.addEventListener("change", saveSettings);
}

index = readJSON(STORE.index, []);
if (!Array.isArray(index)) index = [];
openChat(localStorage.getItem(STORE.current));
refreshModel();

window.mlaMarkdown = { render: renderMarkdown, View: MarkdownView };  // for tests
