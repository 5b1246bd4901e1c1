// <dial-chat>: a chat panel speaking AG-UI (POST /agui, server-sent events) to a dial-runtime server.
// Plain JavaScript, no build step; markdown-it (vendored beside this file, raw HTML off) renders the agent's text.
//
// The panel renders the server's projection of the conversation, one renderer per kind of item, fed the same
// view live (tool calls, dial.card / dial.question, activity events) and after a reload (MESSAGES_SNAPSHOT): so a
// live page, a reloaded one and a second tab show the same thing. Payloads are shown and edited as JSON text
// (payload_json), never as numbers a browser parsed: JSON.parse rounds integers past 2**53.

import { button, clearActions, el, learnServerTime, newCard, offerDecisions, renderCard, withCode, withJsonText } from "./dial-card.js";
import markdownit from "./markdown-it.min.js";

const BUSY_RETRIES = 8;
const BUSY_DELAY_MS = 250;
// A request the server never received (it is restarting, the network is down) is sent again, this long at most.
const UNREACHABLE_GIVE_UP_MS = 60_000;
const UNREACHABLE_MAX_DELAY_MS = 4_000;
const CONTINUE_WORDS = "Please continue.";
// While a snapshot says a turn runs that another run drives, the conversation is read again this often: a turn
// ends with a change to the log, unless its worker dies first, which changes nothing.
const RUNNING_RECHECK_MS = 5_000;

const markdown = markdownit({ html: false, linkify: false, breaks: true, typographer: false });
markdown.disable(["image"]); // an agent's text never makes the page load anything
const defaultLinkOpen = markdown.renderer.rules.link_open || ((tokens, at, options, env, self) => self.renderToken(tokens, at, options));
markdown.renderer.rules.link_open = (tokens, at, options, env, self) => {
  tokens[at].attrSet("target", "_blank");
  tokens[at].attrSet("rel", "noopener noreferrer nofollow");
  return defaultLinkOpen(tokens, at, options, env, self);
};

function uid() {
  return (crypto.randomUUID ? crypto.randomUUID() : String(Date.now()) + Math.random()).replace(/-/g, "");
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

class Unreachable extends Error {}

class DialChat extends HTMLElement {
  connectedCallback() {
    this.endpoint = this.getAttribute("endpoint") || "/agui";
    this.base = this.endpoint.replace(/agui\/?$/, "");
    this.threadId = this.getAttribute("thread") || this.rememberedThread();
    this.cards = new Map(); // suggestion id -> card record
    this.questions = new Map(); // ask id -> question record
    this.interrupts = new Map(); // interrupt id -> interrupt
    this.texts = new Map(); // messageId -> open text record
    this.running = false;
    this.seq = 0; // the stored log's last seq this page shows
    this.latest = 0; // the last seq the change stream named
    this.turnRunning = false; // the last snapshot said a turn runs that this page does not drive
    this.render();
    this.describeDomain();
    this.watch();
    this.sync();
    this.leaving = () => this.detach();
    window.addEventListener("pagehide", this.leaving);
    this.keys = (event) => this.onKey(event);
    document.addEventListener("keydown", this.keys);
  }

  disconnectedCallback() {
    if (this.changes) this.changes.close();
    window.removeEventListener("pagehide", this.leaving);
    document.removeEventListener("keydown", this.keys);
    clearTimeout(this.recheck);
  }

  // The keys, wherever the focus is but a text field or an open editor: j and k move to the next and the previous
  // card waiting for a decision, a accepts and d dismisses the card the focus is on (what the card's own buttons
  // do, a destructive accept's second yes included). Escape in the message box goes to the nearest waiting card.
  onKey(event) {
    const target = event.target;
    if (event.altKey || event.ctrlKey || event.metaKey || event.isComposing) return;
    if (event.key === "Escape" && target === this.input) {
      const nearest = [...this.querySelectorAll(".dial-card.dial-pending")].pop();
      if (nearest) {
        nearest.focus();
        nearest.scrollIntoView({ block: "nearest" });
        event.preventDefault();
      }
      return;
    }
    if (target instanceof HTMLTextAreaElement || target instanceof HTMLSelectElement || target.isContentEditable) return;
    if (target instanceof HTMLInputElement && target.type !== "checkbox" && target.type !== "radio") return;
    const waiting = [...this.querySelectorAll(".dial-card.dial-pending")];
    const current = target instanceof Element ? target.closest(".dial-card") : null;
    if (event.key === "j" || event.key === "k") {
      if (!waiting.length) return;
      const at = waiting.indexOf(current);
      const next = event.key === "j" ? (at < 0 ? 0 : Math.min(at + 1, waiting.length - 1)) : at < 0 ? waiting.length - 1 : Math.max(at - 1, 0);
      waiting[next].focus();
      waiting[next].scrollIntoView({ block: "nearest" });
      event.preventDefault();
    } else if ((event.key === "a" || event.key === "d") && current && waiting.includes(current)) {
      const control = current.querySelector(`.dial-actions > ${event.key === "a" ? ".dial-accept" : ".dial-dismiss"}`);
      if (control && !control.disabled) {
        control.click();
        event.preventDefault();
      }
    }
  }

  // A page that goes away (a reload, a closed tab) while its run goes on tells the server the run should go on
  // without it: the request's closing is then no Stop, and the turn ends in the log, where the next page reads it.
  detach() {
    if (!this.inFlight) return;
    const detachUrl = `${this.endpoint.replace(/\/$/, "")}/detach`;
    navigator.sendBeacon(detachUrl, JSON.stringify(this.inFlight));
  }

  // The server says when the conversation's log grows, whoever made it grow (this tab, another tab, another
  // worker), naming the log's last seq: past what this page shows, the panel takes a snapshot, at once or as
  // soon as its own run ends (every run's RUN_FINISHED names the seq it shows). EventSource reconnects by itself;
  // the first event of every connection names the seq too, so nothing made while it was away is missed.
  watch() {
    const url = this.getAttribute("changes") || `${this.base}conversations/${encodeURIComponent(this.threadId)}/changes`;
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
    this.log.setAttribute("aria-label", "conversation");
    this.log.tabIndex = 0;
    this.empty = el("div", "dial-empty");
    this.empty.append(el("p", "dial-empty-title", "Ask the agent to do something."));
    this.empty.append(el("p", "dial-empty-hint", "It proposes each action as a card: nothing runs until you accept it."));
    this.working = el("div", "dial-working", "The agent is working");
    this.working.hidden = true;
    this.status = el("div", "dial-status");
    this.status.setAttribute("role", "status");
    const form = el("form", "dial-compose");
    this.input = el("textarea", "dial-input");
    this.input.rows = 2;
    this.input.placeholder = "Write to the agent";
    this.input.setAttribute("aria-label", "message to the agent");
    this.input.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey) {
        event.preventDefault();
        form.requestSubmit();
      }
    });
    this.sendButton = el("button", "dial-button dial-send", "Send");
    this.sendButton.type = "submit";
    this.stopButton = button("Stop", "dial-stop", () => this.stop(), "Stop the agent");
    this.stopButton.hidden = true;
    form.append(this.input, this.sendButton, this.stopButton);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const words = this.input.value.trim();
      if (!words || this.running) return;
      this.input.value = "";
      this.say(words);
    });
    this.log.append(this.empty);
    this.append(this.log, this.working, this.status, form);
  }

  // The empty state names what the domain can do, when the server lists its actions (GET actions).
  async describeDomain() {
    let actions = [];
    try {
      const response = await fetch(`${this.base}actions`, { headers: { Accept: "application/json" } });
      if (response.ok) actions = (await response.json()).actions || [];
    } catch (error) {
      return;
    }
    if (!actions.length) return;
    const list = el("ul", "dial-capabilities");
    list.setAttribute("aria-label", "what the agent can propose");
    for (const action of actions) {
      const item = el("li", "dial-capability");
      item.append(el("code", "dial-action", action.name));
      if (action.description) item.append(" ", withCode(action.description));
      if (action.destructive) item.append(" ", el("span", "dial-destructive", "destructive"));
      list.append(item);
    }
    this.empty.append(el("p", "dial-empty-hint", "It can propose:"), list);
  }

  // ---- talking to the server ----

  // One run: its events are handled as they arrive (a snapshot's only once complete, and only when it differs
  // from the last one shown, so a change made elsewhere that this page already shows never disturbs an editor).
  // `what` says in words what the request carries, for the person when it cannot be delivered at once.
  async post(body, { snapshot = false, what = "" } = {}) {
    const held = [];
    const began = Date.now();
    let unreachable = 0;
    let lost = false; // the connection broke after the server received the request
    for (let attempt = 0; ; attempt++) {
      let retry = false;
      const controller = new AbortController();
      this.controller = snapshot ? null : controller;
      this.inFlight = snapshot ? null : this.idsOf(body);
      this.setRunning(true, !snapshot);
      try {
        const response = await this.send(body, controller.signal);
        if (unreachable || lost) this.showStatus(what ? `Reconnected: ${what} was sent.` : "Reconnected.");
        unreachable = 0;
        lost = false;
        if (!response.ok) {
          let message = response.statusText;
          try {
            message = (await response.json()).error || message;
          } catch (error) {
            /* not JSON */
          }
          this.showStatus(`The server refused this (${response.status}): ${message}`, true);
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
        if (controller.signal.aborted) {
          this.closeTexts();
          this.showStatus("You stopped the agent.");
          snapshot = true;
          body = this.runInput();
          retry = true;
        } else if (error instanceof Unreachable) {
          // Never received: the same request is sent again once the server answers.
          unreachable += 1;
          if (Date.now() - began > UNREACHABLE_GIVE_UP_MS) {
            this.showStatus(`The server cannot be reached${what ? `: ${what} was not sent` : ""}. Try again later.`, true);
            return;
          }
          this.showStatus(`The server cannot be reached${what ? `: ${what} will be sent when it is back` : "; retrying"}…`, true);
          retry = true;
        } else {
          // Received, then the connection broke: the run goes on in the server; its log is read again.
          this.closeTexts();
          this.showStatus("The connection was lost while the agent worked; reconnecting…", true);
          lost = true;
          body = this.runInput();
          snapshot = true;
          what = "";
          retry = Date.now() - began < UNREACHABLE_GIVE_UP_MS;
        }
      } finally {
        this.controller = null;
        this.inFlight = null;
        // A request that will be sent again keeps the cards' buttons disabled until it is: a second click
        // meanwhile would queue a second decision behind the first.
        if (!retry) this.setRunning(false);
      }
      if (!retry) break;
      held.length = 0;
      const delay = unreachable
        ? Math.min(UNREACHABLE_MAX_DELAY_MS, BUSY_DELAY_MS * 2 ** unreachable)
        : BUSY_DELAY_MS * (attempt + 1);
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
    if (snapshot) {
      const key = JSON.stringify(
        held.filter((e) => e.type !== "RUN_STARTED").map((e) => e.messages || [e.outcome, Boolean(e.metadata && e.metadata.running)]),
      );
      if (key !== this.shown) {
        this.shown = key;
        held.forEach((event) => this.handle(event));
      } else {
        held.filter((event) => event.type === "RUN_FINISHED").forEach((event) => this.tookSeq(event));
      }
      this.recheckLater();
      this.caughtUp();
      return;
    }
    this.shown = null;
    this.caughtUp();
  }

  // The request, as text: an edited payload is spliced in as the person wrote it (see resolveEdited). Stop
  // aborts it (the signal): the server takes a closed request as stopping the run.
  async send(body, signal) {
    const text = typeof body === "string" ? body : JSON.stringify(body);
    try {
      const response = await fetch(this.endpoint, {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
        body: text,
        signal,
      });
      learnServerTime(response); // the cards' countdowns run on the server's clock
      return response;
    } catch (error) {
      if (signal.aborted) throw error;
      throw new Unreachable(error.message);
    }
  }

  // The conversation and run a request names (an edit's body is text: see resolveEdited).
  idsOf(body) {
    const named = typeof body === "string" ? JSON.parse(body) : body;
    return { threadId: named.threadId, runId: named.runId };
  }

  // Stop: the client closes the run's request (AG-UI's abort); the page then reads what the log holds.
  stop() {
    if (this.controller) this.controller.abort();
  }

  tookSeq(finished) {
    if (finished.metadata && Number.isInteger(finished.metadata.seq)) this.seq = finished.metadata.seq;
  }

  recheckLater() {
    clearTimeout(this.recheck);
    if (!this.turnRunning) return;
    this.recheck = setTimeout(() => this.turnRunning && !this.running && this.sync(), RUNNING_RECHECK_MS);
  }

  // After a run: a snapshot if the log grew past what the run showed while it ran.
  caughtUp() {
    if (this.latest > this.seq) this.sync();
  }

  runInput(extra = {}) {
    return { threadId: this.threadId, runId: uid(), messages: [], ...extra };
  }

  sync() {
    return this.post(this.runInput(), { snapshot: true });
  }

  say(words) {
    const message = { id: uid(), role: "user", content: words };
    this.showWords(words);
    const resume = [...this.interrupts.values()].map((interrupt) => ({
      interruptId: interrupt.id,
      status: "cancelled",
    }));
    return this.post(this.runInput({ messages: [message], ...(resume.length ? { resume } : {}) }), {
      what: "your message",
    });
  }

  resolve(interrupt, payload, what) {
    return this.post(this.runInput({ resume: [{ interruptId: interrupt.id, status: "resolved", payload }] }), { what });
  }

  // An edit goes as the JSON text the person wrote (checked to be JSON first), so every digit reaches the server.
  resolveEdited(interrupt, digest, jsonText, what) {
    const marker = `edited-${uid()}`;
    const body = this.runInput({ resume: [{ interruptId: interrupt.id, status: "resolved", payload: { approved: true, editedArgs: marker, digest } }] });
    return this.post(withJsonText(body, marker, jsonText), { what });
  }

  // ---- events ----

  handle(event) {
    switch (event.type) {
      case "RUN_STARTED":
        break;
      case "MESSAGES_SNAPSHOT":
        this.snapshot(event.messages);
        break;
      case "TEXT_MESSAGE_START":
        this.openText(event.messageId, event.role, event.metadata);
        break;
      case "TEXT_MESSAGE_CONTENT": {
        const text = this.texts.get(event.messageId) || this.openText(event.messageId, "assistant");
        text.text += event.delta;
        text.show(text.text);
        this.scroll();
        break;
      }
      case "TEXT_MESSAGE_END":
        this.texts.delete(event.messageId);
        this.showWorking();
        break;
      case "TOOL_CALL_START":
      case "TOOL_CALL_RESULT":
        if (event.metadata && event.metadata.card) this.showCard(event.metadata.card);
        break;
      case "ACTIVITY_SNAPSHOT":
        this.showActivity(event.activityType, event.content);
        break;
      case "CUSTOM":
        if (event.name === "dial.card" && event.value) this.showCard(event.value.card);
        if (event.name === "dial.question" && event.value) this.showQuestion(event.value.question);
        if (event.name === "dial.unconfirmed" && event.value) {
          const text = this.texts.get(event.value.messageId);
          if (text && text.bubble) this.markUnconfirmed(text.bubble, event.value.unconfirmed);
        }
        break;
      case "RUN_FINISHED":
        this.tookSeq(event);
        this.turnRunning = Boolean(event.metadata && event.metadata.running);
        this.finished(event.outcome);
        this.showWorking();
        break;
      case "RUN_ERROR":
        this.showStatus(this.errorWords(event), true);
        if (["already-decided", "stale-interrupt", "unknown-interrupt", "digest-mismatch"].includes(event.code)) {
          setTimeout(() => this.sync(), 0);
        }
        break;
      default:
        break;
    }
  }

  errorWords(event) {
    const words = {
      "already-decided": "Someone decided this already",
      "stale-interrupt": "This card changed after you saw it",
      "digest-mismatch": "The payload changed after you saw it",
      forbidden: "You may not decide this",
      busy: "The conversation is busy; try again",
      "run-failed": "The agent failed",
      "no-reply": "The agent did not answer",
      "awaiting-reviewer": "A reviewer decides this card first",
    };
    const lead = words[event.code] || "Something went wrong";
    return event.message ? `${lead}: ${event.message}` : lead;
  }

  snapshot(messages) {
    this.log.replaceChildren(this.empty);
    this.empty.hidden = false;
    this.cards.clear();
    this.questions.clear();
    this.texts.clear();
    for (const message of messages) {
      const meta = message.metadata || {};
      if (message.role === "user") {
        this.showWords(typeof message.content === "string" ? message.content : "");
      } else if (message.role === "assistant") {
        if (meta.question) this.showQuestion(meta.question);
        else if (message.content) {
          const bubble = this.showAgentText(message.content);
          if (meta.unconfirmed) this.markUnconfirmed(bubble, meta.unconfirmed);
        }
        if (meta.card) this.showCard(meta.card);
      } else if (message.role === "tool") {
        if (meta.card) this.showCard(meta.card);
      } else if (message.role === "activity") {
        this.showActivity(message.activityType, message.content);
      }
    }
    this.showWorking();
  }

  finished(outcome) {
    this.interrupts.clear();
    for (const card of this.cards.values()) clearActions(card);
    for (const question of this.questions.values()) question.controls.replaceChildren();
    const interrupts = outcome && outcome.type === "interrupt" ? outcome.interrupts : [];
    for (const interrupt of interrupts) {
      this.interrupts.set(interrupt.id, interrupt);
      if (interrupt.reason === "tool_call") this.cardInterrupt(interrupt);
      else this.askInterrupt(interrupt);
    }
    this.input.placeholder = interrupts.length ? "Or say something else instead" : "Write to the agent";
    this.offerContinue();
    this.scroll();
  }

  // ---- rendering: one function per kind of item, fed the same view live and after a reload ----

  place(node) {
    this.log.append(node);
    this.empty.hidden = true;
    this.scroll();
    return node;
  }

  openText(messageId, role, metadata) {
    let text;
    if (metadata && metadata.question) {
      const question = this.showQuestion(metadata.question);
      text = { text: "", show: (value) => question.setText(value) };
    } else if (role === "user") {
      const bubble = this.showWords("");
      text = { text: "", show: (value) => (bubble.textContent = value) };
    } else {
      const bubble = this.showAgentText("");
      if (metadata && metadata.unconfirmed) this.markUnconfirmed(bubble, metadata.unconfirmed);
      text = { text: "", bubble, show: (value) => this.renderMarkdown(bubble, value) };
    }
    this.texts.set(messageId, text);
    this.showWorking();
    return text;
  }

  closeTexts() {
    this.texts.clear();
  }

  showWords(text) {
    return this.place(el("div", "dial-message dial-user", text));
  }

  showAgentText(text) {
    const bubble = el("div", "dial-message dial-assistant");
    this.renderMarkdown(bubble, text);
    return this.place(bubble);
  }

  // An acknowledgement the log contradicts: the agent's own claim, never an outcome in the runtime's voice.
  markUnconfirmed(bubble, why) {
    bubble.classList.add("dial-unconfirmed");
    bubble.before(el("p", "dial-unconfirmed-note", `Not confirmed by the runtime: ${why}`));
  }

  renderMarkdown(node, text) {
    node.innerHTML = markdown.render(text); // raw HTML is off: markup in the text is shown as text
  }

  showQuestion(view) {
    let question = this.questions.get(view.id);
    if (!question) {
      const root = el("section", "dial-ask");
      root.dataset.ask = view.id;
      const text = el("div", "dial-question");
      const controls = el("div", "dial-actions");
      root.append(text, controls);
      question = {
        root,
        text,
        controls,
        setText: (value) => {
          this.renderMarkdown(text, value);
          root.setAttribute("aria-label", `question: ${value}`);
        },
      };
      this.questions.set(view.id, question);
      this.place(root);
    }
    question.view = view;
    if (view.text) question.setText(view.text);
    question.root.dataset.status = view.status;
    return question;
  }

  askInterrupt(interrupt) {
    const meta = interrupt.metadata || {};
    const question =
      this.questions.get(interrupt.id) || this.showQuestion({ id: interrupt.id, text: interrupt.message || "", status: "asked" });
    const controls = question.controls;
    controls.replaceChildren();
    const asked = question.view.text || interrupt.message || "";
    if (meta.canDecide === false) {
      controls.append(el("span", "dial-note", "Waiting for someone else's answer"));
      return;
    }
    if ((meta.options || []).length) {
      for (const option of meta.options) {
        const label = option.label || option.value;
        controls.append(
          button(label, "dial-option", () => this.resolve(interrupt, { answer: option.value }, `your answer “${label}”`), `${label}: answer to “${asked}”`),
        );
      }
      return;
    }
    const field = el("input", "dial-answer");
    field.setAttribute("aria-label", `answer to “${asked}”`);
    const submit = () => field.value.trim() && this.resolve(interrupt, { answer: field.value.trim() }, "your answer");
    field.addEventListener("keydown", (event) => event.key === "Enter" && submit());
    controls.append(field, button("Answer", "dial-reply", submit, `Answer “${asked}”`));
  }

  // A card, rendered as every page that decides cards renders it (dial-card.js).
  showCard(view) {
    let card = this.cards.get(view.id);
    if (!card) {
      card = newCard(view);
      this.cards.set(view.id, card);
      this.place(card.root);
    }
    return renderCard(card, view);
  }

  cardInterrupt(interrupt) {
    const meta = interrupt.metadata || {};
    let card = this.cards.get(interrupt.toolCallId);
    if (!card) {
      card = this.showCard({
        id: interrupt.toolCallId,
        action: meta.action || "",
        preview: interrupt.message || "",
        text: meta.text || "",
        destructive: meta.destructive,
        payload: meta.payload,
        payload_json: meta.payloadJson,
        payload_fields: meta.payloadFields,
        issue: meta.issue,
        status: "pending",
      });
    }
    const view = card.view;
    const label = view.preview || view.action;
    const digest = meta.digest || view.digest;
    clearActions(card);
    card.root.classList.add("dial-pending");
    if (meta.canDecide === false) {
      card.actions.append(el("span", "dial-note", "Waiting for a reviewer"));
      return;
    }
    const what = (verb) => `your ${verb} of “${label}”`;
    const instead = button("Say something else", "dial-instead", () => {
      this.input.focus();
      this.showStatus("Type what you want instead and send it: this proposal will be set aside.");
    }, `Say something else instead of: ${label}`);
    offerDecisions(
      card,
      {
        accept: () => this.resolve(interrupt, { approved: true, digest }, what("Accept")),
        edit: (jsonText) => this.resolveEdited(interrupt, digest, jsonText, `your edit of “${label}”`),
        dismiss: () => this.resolve(interrupt, { approved: false, digest }, what("Dismiss")),
      },
      [instead],
    );
  }

  // A notice (no reply, the turn limit, a deadline, ...), an aside or a proposal that never became a card: a
  // muted line in the conversation.
  showActivity(type, view) {
    if (!view) return;
    let node;
    if (type === "dial.refused") {
      node = el("p", "dial-refused");
      const why = view.hint || view.error || view.code;
      const lead = view.status === "invalid" ? "A proposal was refused and not shown" : "A proposal was set aside before it was shown";
      node.append(`${lead}: `, el("code", "dial-action", view.action), why ? " — " : "");
      if (why) node.append(withCode(why));
    } else {
      node = el("p", `dial-notice${type === "dial.aside" ? " dial-aside" : ""}`);
      node.dataset.what = view.what;
      node.textContent = this.noticeWords(view);
    }
    node.dataset.seq = view.seq === null || view.seq === undefined ? "" : String(view.seq);
    this.place(node);
  }

  noticeWords(view) {
    if (view.what === "turn-limit") return `The agent stopped after ${view.data && view.data.turns} turns without finishing.`;
    if (view.what === "no-reply") return `The agent did not answer: ${(view.data && view.data.error) || view.text}`;
    return view.text ? view.text.charAt(0).toUpperCase() + view.text.slice(1) : "";
  }

  // The way on after the turn limit: while it is the last thing said, a button asks the agent to go on.
  offerContinue() {
    this.log.querySelectorAll(".dial-continue").forEach((node) => node.remove());
    const last = this.log.lastElementChild;
    if (last && last.matches('.dial-notice[data-what="turn-limit"]') && !this.interrupts.size) {
      last.append(" ", button("Continue", "dial-continue", () => this.running || this.say(CONTINUE_WORDS), "Continue: ask the agent to go on"));
    }
  }

  setRunning(running, ownRun = false) {
    this.running = running;
    this.classList.toggle("dial-running", running);
    this.sendButton.disabled = running;
    this.stopButton.hidden = !(running && ownRun);
    this.querySelectorAll(".dial-log button").forEach((node) => {
      node.disabled = running;
    });
    if (running && ownRun) this.showStatus("");
    this.ownRun = running && ownRun;
    this.showWorking();
  }

  // The working state: from Send until text streams in, and whenever the agent is busy between messages; and
  // while a snapshot says a turn runs that this page does not drive (after a reload mid-turn, in a second tab),
  // until the change stream brings its end.
  showWorking() {
    this.working.hidden = !((this.ownRun && this.texts.size === 0) || (this.turnRunning && !this.running));
  }

  showStatus(text, error = false) {
    this.status.textContent = text;
    this.status.classList.toggle("dial-error", error);
    if (error) this.status.setAttribute("role", "alert");
    else this.status.setAttribute("role", "status");
  }

  scroll() {
    this.log.scrollTop = this.log.scrollHeight;
  }
}

customElements.define("dial-chat", DialChat);
