// <dial-chat>: a chat panel speaking AG-UI (POST /agui, server-sent events) to a dial-runtime server.
// Plain JavaScript, no dependencies, no build step. Every text from the agent or the domain is rendered with
// textContent, never as HTML: a reply holding markup shows the markup as text.

const BUSY_RETRIES = 8;
const BUSY_DELAY_MS = 250;

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function uid() {
  return (crypto.randomUUID ? crypto.randomUUID() : String(Date.now()) + Math.random()).replace(/-/g, "");
}

function pretty(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch (error) {
    return String(value);
  }
}

function parseJson(text) {
  try {
    return JSON.parse(text);
  } catch (error) {
    return text;
  }
}

// Reads an SSE body (fetch's stream) and calls onEvent with each decoded AG-UI event.
async function readEvents(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = block
        .split("\n")
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).trimStart())
        .join("\n");
      if (data) onEvent(JSON.parse(data));
    }
  }
}

class DialChat extends HTMLElement {
  connectedCallback() {
    this.endpoint = this.getAttribute("endpoint") || "/agui";
    this.threadId = this.getAttribute("thread") || this.rememberedThread();
    this.cards = new Map(); // toolCallId -> card record
    this.interrupts = new Map(); // interrupt id -> interrupt
    this.texts = new Map(); // messageId -> bubble
    this.running = false;
    this.seq = 0; // the stored log's last seq this page shows
    this.latest = 0; // the last seq the change stream named
    this.render();
    this.watch();
    this.sync();
  }

  disconnectedCallback() {
    if (this.changes) this.changes.close();
  }

  // The server says when the conversation's log grows, whoever made it grow (this tab, another tab, another
  // worker), naming the log's last seq: past what this page shows, the panel takes a snapshot, at once or as
  // soon as its own run ends (every run's RUN_FINISHED names the seq it shows). EventSource reconnects by itself;
  // the first event of every connection names the seq too, so nothing made while it was away is missed.
  watch() {
    const base = this.endpoint.replace(/agui\/?$/, "");
    const url = this.getAttribute("changes") || `${base}conversations/${encodeURIComponent(this.threadId)}/changes`;
    this.changes = new EventSource(url);
    this.changes.addEventListener("changed", (message) => {
      this.latest = Math.max(this.latest, JSON.parse(message.data).seq);
      if (!this.running && this.latest > this.seq) this.sync();
    });
  }

  rememberedThread() {
    const url = new URL(window.location.href);
    let thread = url.searchParams.get("thread");
    if (!thread) {
      thread = "c-" + uid().slice(0, 12);
      url.searchParams.set("thread", thread);
      window.history.replaceState(null, "", url);
    }
    return thread;
  }

  render() {
    this.replaceChildren();
    this.classList.add("dial-chat");
    this.log = el("div", "dial-log");
    this.log.setAttribute("role", "log");
    this.log.setAttribute("aria-live", "polite");
    this.status = el("div", "dial-status");
    this.status.setAttribute("role", "status");
    const form = el("form", "dial-compose");
    this.input = el("textarea", "dial-input");
    this.input.rows = 2;
    this.input.placeholder = "Write to the agent (while a card waits: say something else)";
    this.input.setAttribute("aria-label", "message");
    this.input.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey) {
        event.preventDefault();
        form.requestSubmit();
      }
    });
    this.sendButton = el("button", "dial-send", "Send");
    this.sendButton.type = "submit";
    form.append(this.input, this.sendButton);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const words = this.input.value.trim();
      if (!words || this.running) return;
      this.input.value = "";
      this.say(words);
    });
    this.append(this.log, this.status, form);
  }

  // ---- talking to the server ----

  // One run: its events are handled as they arrive (a snapshot's only once complete, and only when it differs
  // from the last one shown, so a change made elsewhere that this page already shows never disturbs an editor).
  async post(body, snapshot = false) {
    const held = [];
    for (let attempt = 0; ; attempt++) {
      let retry = false;
      this.setRunning(true);
      try {
        const response = await fetch(this.endpoint, {
          method: "POST",
          headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
          body: JSON.stringify(body),
        });
        if (!response.ok) {
          let message = response.statusText;
          try {
            message = (await response.json()).error || message;
          } catch (error) {
            /* not JSON */
          }
          this.showStatus(`refused (${response.status}): ${message}`, true);
          return;
        }
        await readEvents(response, (event) => {
          if (event.type === "RUN_ERROR" && event.code === "busy" && attempt < BUSY_RETRIES) {
            retry = true;
            return;
          }
          if (snapshot) held.push(event);
          else this.handle(event);
        });
      } catch (error) {
        this.showStatus(`connection lost: ${error.message}; reloading the conversation`, true);
        retry = attempt < BUSY_RETRIES;
        body = this.runInput();
        snapshot = true;
      } finally {
        this.setRunning(false);
      }
      if (!retry) break;
      held.length = 0;
      await new Promise((resolve) => setTimeout(resolve, BUSY_DELAY_MS * (attempt + 1)));
    }
    if (snapshot) {
      const key = JSON.stringify(held.filter((e) => e.type !== "RUN_STARTED").map((e) => e.messages || e.outcome || e));
      if (key !== this.shown) {
        this.shown = key;
        held.forEach((event) => this.handle(event));
      } else {
        held.filter((event) => event.type === "RUN_FINISHED").forEach((event) => this.tookSeq(event));
      }
      this.caughtUp();
      return;
    }
    this.shown = null;
    this.caughtUp();
  }

  tookSeq(finished) {
    if (finished.metadata && Number.isInteger(finished.metadata.seq)) this.seq = finished.metadata.seq;
  }

  // After a run: a snapshot if the log grew past what the run showed while it ran.
  caughtUp() {
    if (this.latest > this.seq) this.sync();
  }

  runInput(extra = {}) {
    return { threadId: this.threadId, runId: uid(), messages: [], ...extra };
  }

  sync() {
    return this.post(this.runInput(), true);
  }

  say(words) {
    const message = { id: uid(), role: "user", content: words };
    this.addBubble("user", words);
    const resume = [...this.interrupts.values()].map((interrupt) => ({
      interruptId: interrupt.id,
      status: "cancelled",
    }));
    return this.post(this.runInput({ messages: [message], ...(resume.length ? { resume } : {}) }));
  }

  resolve(interrupt, payload) {
    return this.post(this.runInput({ resume: [{ interruptId: interrupt.id, status: "resolved", payload }] }));
  }

  // ---- events ----

  handle(event) {
    switch (event.type) {
      case "RUN_STARTED":
        this.showStatus("");
        break;
      case "MESSAGES_SNAPSHOT":
        this.snapshot(event.messages);
        break;
      case "TEXT_MESSAGE_START":
        this.texts.set(event.messageId, this.addBubble(event.role === "user" ? "user" : "assistant", ""));
        break;
      case "TEXT_MESSAGE_CONTENT": {
        const bubble = this.texts.get(event.messageId) || this.addBubble("assistant", "");
        this.texts.set(event.messageId, bubble);
        bubble.textContent += event.delta;
        this.scroll();
        break;
      }
      case "TEXT_MESSAGE_END":
        this.texts.delete(event.messageId);
        break;
      case "TOOL_CALL_START":
        this.shownCard(this.card(event.toolCallId, event.toolCallName), event.metadata);
        break;
      case "TOOL_CALL_ARGS": {
        const card = this.cards.get(event.toolCallId);
        if (card) {
          card.args += event.delta;
          card.payload.textContent = pretty(parseJson(card.args));
        }
        break;
      }
      case "TOOL_CALL_RESULT":
        this.outcome(event.toolCallId, parseJson(event.content), event.metadata);
        break;
      case "RUN_FINISHED":
        this.tookSeq(event);
        this.finished(event.outcome);
        break;
      case "RUN_ERROR":
        this.showStatus(`${event.code || "error"}: ${event.message}`, true);
        if (["already-decided", "stale-interrupt", "unknown-interrupt", "digest-mismatch"].includes(event.code)) {
          setTimeout(() => this.sync(), 0);
        }
        break;
      case "CUSTOM":
        if (event.name === "dial.no-reply") this.showStatus("the agent did not answer in time", true);
        if (event.name === "dial.turn-limit") this.showStatus("the turn limit was reached", true);
        break;
      default:
        break;
    }
  }

  snapshot(messages) {
    this.log.replaceChildren();
    this.cards.clear();
    this.texts.clear();
    for (const message of messages) {
      if (message.role === "user") this.addBubble("user", typeof message.content === "string" ? message.content : "");
      else if (message.role === "assistant") {
        if (message.content) this.addBubble("assistant", message.content);
        for (const call of message.toolCalls || []) {
          const card = this.card(call.id, call.function.name);
          card.args = call.function.arguments;
          card.payload.textContent = pretty(parseJson(card.args));
          this.shownCard(card, message.metadata);
        }
      } else if (message.role === "tool") {
        const fact = parseJson(typeof message.content === "string" ? message.content : "");
        this.outcome(message.toolCallId, fact, message.metadata);
      }
    }
  }

  finished(outcome) {
    this.interrupts.clear();
    for (const card of this.cards.values()) this.clearActions(card);
    this.log.querySelectorAll(".dial-ask").forEach((node) => node.remove());
    const interrupts = outcome && outcome.type === "interrupt" ? outcome.interrupts : [];
    for (const interrupt of interrupts) {
      this.interrupts.set(interrupt.id, interrupt);
      if (interrupt.reason === "tool_call") this.pendingCard(interrupt);
      else this.ask(interrupt);
    }
    this.input.placeholder = interrupts.length
      ? "Or say something else instead"
      : "Write to the agent";
    this.scroll();
  }

  // ---- rendering ----

  addBubble(role, text) {
    const bubble = el("div", `dial-message dial-${role}`, text);
    this.log.append(bubble);
    this.scroll();
    return bubble;
  }

  card(id, action) {
    let card = this.cards.get(id);
    if (card) return card;
    const root = el("section", "dial-card");
    root.dataset.suggestion = id;
    const head = el("header", "dial-card-head");
    const title = el("span", "dial-action", action);
    const mark = el("span", "dial-destructive", "destructive");
    mark.hidden = true;
    head.append(title, mark);
    const preview = el("p", "dial-preview");
    const payload = el("pre", "dial-payload");
    const issue = el("p", "dial-issue");
    issue.hidden = true;
    const actions = el("div", "dial-actions");
    const result = el("p", "dial-outcome");
    result.hidden = true;
    root.append(head, preview, payload, issue, actions, result);
    this.log.append(root);
    card = { id, root, mark, preview, payload, issue, actions, result, args: "" };
    this.cards.set(id, card);
    return card;
  }

  // The card as the server's projection has it (metadata.card, live and in a snapshot alike): the preview, the
  // destructive mark, and the payload that waits or ran.
  shownCard(card, metadata) {
    const shown = metadata && metadata.card;
    if (!shown) return;
    card.preview.textContent = shown.preview || "";
    card.mark.hidden = !shown.destructive;
    card.root.classList.toggle("dial-is-destructive", Boolean(shown.destructive));
    if (shown.payload !== undefined) card.payload.textContent = pretty(shown.payload);
    if (shown.outcome) card.result.title = shown.outcome;
    if (shown.decided_by) card.root.dataset.decidedBy = shown.decided_by;
  }

  clearActions(card) {
    card.actions.replaceChildren();
    card.root.classList.remove("dial-pending");
  }

  pendingCard(interrupt) {
    const meta = interrupt.metadata || {};
    const card = this.card(interrupt.toolCallId, meta.action || "");
    card.root.classList.add("dial-pending");
    card.preview.textContent = interrupt.message || "";
    card.mark.hidden = !meta.destructive;
    card.root.classList.toggle("dial-is-destructive", Boolean(meta.destructive));
    card.payload.textContent = pretty(meta.payload);
    const issue = meta.issue;
    card.issue.hidden = !issue;
    card.issue.textContent = issue
      ? `Refused${issue.field ? ` (${issue.field})` : ""}: ${issue.hint || issue.code || "not valid"}`
      : "";
    this.clearActions(card);
    card.root.classList.add("dial-pending");
    if (meta.canDecide === false) {
      card.actions.append(el("span", "dial-note", "waiting for a reviewer"));
      return;
    }
    const button = (label, className, onClick) => {
      const node = el("button", `dial-button ${className}`, label);
      node.type = "button";
      node.addEventListener("click", onClick);
      card.actions.append(node);
      return node;
    };
    button("Accept", "dial-accept", () => this.resolve(interrupt, { approved: true, digest: meta.digest }));
    button("Edit", "dial-edit", () => this.editor(card, interrupt));
    button("Dismiss", "dial-dismiss", () => this.resolve(interrupt, { approved: false, digest: meta.digest }));
    button("Say something else", "dial-instead", () => {
      this.input.focus();
      this.showStatus("Type what you want instead and send it: this suggestion will be set aside.");
    });
    if (issue) this.editor(card, interrupt);
  }

  editor(card, interrupt) {
    const meta = interrupt.metadata || {};
    card.actions.querySelectorAll(".dial-editor").forEach((node) => node.remove());
    const box = el("div", "dial-editor");
    const area = el("textarea", "dial-json");
    area.rows = 6;
    area.spellcheck = false;
    area.setAttribute("aria-label", "payload as JSON");
    area.value = pretty(meta.payload);
    const error = el("p", "dial-json-error");
    error.hidden = true;
    const save = el("button", "dial-button dial-save", "Run edited");
    save.type = "button";
    save.addEventListener("click", () => {
      let edited;
      try {
        edited = JSON.parse(area.value);
      } catch (problem) {
        error.hidden = false;
        error.textContent = `Not JSON: ${problem.message}`;
        return;
      }
      this.resolve(interrupt, { approved: true, editedArgs: edited, digest: meta.digest });
    });
    box.append(area, error, save);
    card.actions.append(box);
    area.focus();
  }

  outcome(id, fact, metadata) {
    const card = this.cards.get(id);
    if (!card) return;
    this.shownCard(card, metadata);
    this.clearActions(card);
    const status = fact && typeof fact === "object" ? fact.status : String(fact);
    card.root.dataset.outcome = status || "";
    card.result.hidden = false;
    const details = fact && typeof fact === "object" ? { ...fact } : {};
    delete details.status;
    delete details.action;
    const extra = Object.keys(details).length ? ` ${JSON.stringify(details)}` : "";
    card.result.textContent = `${status}${extra}`;
    card.issue.hidden = true;
  }

  ask(interrupt) {
    const meta = interrupt.metadata || {};
    const box = el("section", "dial-ask");
    box.dataset.ask = interrupt.id;
    box.append(el("p", "dial-question", interrupt.message || ""));
    const controls = el("div", "dial-actions");
    if (meta.canDecide === false) {
      controls.append(el("span", "dial-note", "waiting for someone else's answer"));
    } else if ((meta.options || []).length) {
      for (const option of meta.options) {
        const node = el("button", "dial-button dial-option", option.label || option.value);
        node.type = "button";
        node.addEventListener("click", () => this.resolve(interrupt, { answer: option.value }));
        controls.append(node);
      }
    } else {
      const field = el("input", "dial-answer");
      field.setAttribute("aria-label", "answer");
      const reply = el("button", "dial-button dial-reply", "Answer");
      reply.type = "button";
      const submit = () => field.value.trim() && this.resolve(interrupt, { answer: field.value.trim() });
      reply.addEventListener("click", submit);
      field.addEventListener("keydown", (event) => event.key === "Enter" && submit());
      controls.append(field, reply);
    }
    box.append(controls);
    this.log.append(box);
  }

  setRunning(running) {
    this.running = running;
    this.classList.toggle("dial-running", running);
    this.sendButton.disabled = running;
    this.querySelectorAll(".dial-actions button").forEach((node) => {
      node.disabled = running;
    });
  }

  showStatus(text, error = false) {
    this.status.textContent = text;
    this.status.classList.toggle("dial-error", error);
  }

  scroll() {
    this.log.scrollTop = this.log.scrollHeight;
  }
}

customElements.define("dial-chat", DialChat);
