// <dial-inbox>: every card waiting for the person across the store's conversations, the nearest deadline first.
// Each card shows what would run, who asked, how long it has waited, a live countdown to its deadline, and the
// approvals its policy wants; the person accepts or dismisses one card, or selects several and decides them at
// once. Each decision of a bulk is checked and logged on its own by the server: one whose card ended or changed
// meanwhile is refused alone, and the card says why. A card shows who claimed it (until when) and to whom it is
// assigned; the person claims or releases it, or assigns it to someone, or to one of its roles.
//
// The page reads the cards from GET <endpoint>/cards and reads them again whenever the server's change stream
// (GET <endpoint>/changes) says a conversation changed, wherever the change was made. Keys: j and k (or the
// arrow keys) move between cards, x selects one, a accepts and d dismisses the selected cards (or the focused one).

import { button, el, holdingText, span } from "./dial-card.js";

const DONE = { accept: "accepted", dismiss: "dismissed" };

// What the status line says once a claim, a release or an assignment is made.
const HELD = {
  claim: (card) => `You claimed “${card.preview || card.action}”.`,
  release: (card) => `You released “${card.preview || card.action}”.`,
  assign: (card) => `“${card.preview || card.action}” is assigned.`,
};

function keyOf(card) {
  return `${card.threadId}\u0000${card.id}`;
}

function age(seconds) {
  const whole = Math.max(0, Math.floor(seconds));
  if (whole < 60) return "under a minute";
  if (whole < 3600) return `${Math.floor(whole / 60)} min`;
  return span(whole);
}

function plural(count, one, many) {
  return `${count} ${count === 1 ? one : many}`;
}

class DialInbox extends HTMLElement {
  connectedCallback() {
    this.endpoint = this.getAttribute("endpoint") || "inbox";
    this.cards = [];
    this.selected = new Set();
    this.notes = new Map(); // why a decision on a card was refused, shown on it while it waits
    this.offset = 0; // the server's clock minus this one, in seconds: countdowns use the server's time
    this.you = null; // the signed-in person, as the server names them
    this.sending = false;
    this.online = true;
    this.loading = null;
    this.again = false;
    this.build();
    this.load();
    this.watch();
    this.ticker = window.setInterval(() => this.tick(), 1000);
    window.addEventListener("offline", () => this.setOnline(false));
    window.addEventListener("online", () => this.load());
    this.keys = (event) => this.onKey(event);
    document.addEventListener("keydown", this.keys); // the page's keys, wherever the focus is but a text field
  }

  disconnectedCallback() {
    window.clearInterval(this.ticker);
    document.removeEventListener("keydown", this.keys);
    if (this.changes) this.changes.close();
  }

  build() {
    const head = el("div", "dial-inbox-head");
    this.heading = el("h2", "dial-inbox-title", "Waiting for you");
    const panel = el("a", "dial-inbox-panel", "Conversations");
    panel.href = "./";
    head.append(this.heading, panel);

    const bar = el("div", "dial-inbox-bar");
    bar.setAttribute("role", "group");
    bar.setAttribute("aria-label", "Filter and decide");
    const overdueLabel = el("label", "dial-filter");
    this.overdue = el("input");
    this.overdue.type = "checkbox";
    this.overdue.addEventListener("change", () => this.load());
    overdueLabel.append(this.overdue, document.createTextNode("Overdue only"));
    const actionLabel = el("label", "dial-filter", "Action ");
    this.action = el("select");
    this.action.append(new Option("every action", ""));
    this.action.addEventListener("change", () => this.load());
    actionLabel.append(this.action);
    this.selectAll = button("Select all", "dial-select-all", () => this.toggleAll());
    this.acceptSelected = button("Accept selected", "dial-accept dial-accept-selected", () => this.decideSelected("accept"));
    this.dismissSelected = button("Dismiss selected", "dial-dismiss-selected", () => this.decideSelected("dismiss"));
    bar.append(overdueLabel, actionLabel, el("span", "dial-spacer"), this.selectAll, this.acceptSelected, this.dismissSelected);

    this.confirmBox = el("div", "dial-confirm-box");
    this.confirmBox.hidden = true;
    this.confirmText = el("p", "dial-confirm-text");
    this.confirmYes = button("Yes", "dial-confirm", () => this.confirmed());
    const no = button("Cancel", "dial-cancel", () => this.closeConfirm());
    this.confirmBox.append(this.confirmText, this.confirmYes, no);

    this.status = el("p", "dial-status");
    this.status.setAttribute("role", "status");
    const keys = el("p", "dial-keys");
    keys.innerHTML =
      "Keys: <kbd>j</kbd> and <kbd>k</kbd> move between cards, <kbd>x</kbd> selects one, " +
      "<kbd>a</kbd> accepts and <kbd>d</kbd> dismisses the selected cards, or the card you are on.";
    this.list = el("ul", "dial-inbox-list");
    this.list.setAttribute("aria-label", "Waiting cards");
    this.empty = el("p", "dial-inbox-empty", "Nothing waits for you.");
    this.empty.hidden = true;
    this.append(head, bar, this.confirmBox, this.status, keys, this.list, this.empty);
    this.loadActions();
  }

  async loadActions() {
    try {
      const response = await fetch("actions", { headers: { Accept: "application/json" } });
      if (!response.ok) return;
      for (const action of (await response.json()).actions) this.action.append(new Option(action.name, action.name));
    } catch {
      // the filter offers every action only; the cards still load
    }
  }

  // The change stream: the cards are read again whenever a conversation changes. EventSource reconnects by itself
  // (the page is offline meanwhile); the first event of every connection makes the page read them again.
  watch() {
    this.changes = new EventSource(`${this.endpoint}/changes`);
    this.changes.addEventListener("changed", () => this.load());
    this.changes.addEventListener("error", () => this.setOnline(false));
  }

  async load() {
    if (this.loading) {
      this.again = true;
      return this.loading;
    }
    this.loading = this.fetchCards();
    try {
      await this.loading;
    } finally {
      this.loading = null;
    }
    if (this.again) {
      this.again = false;
      await this.load();
    }
  }

  async fetchCards() {
    const query = new URLSearchParams();
    if (this.overdue.checked) query.set("overdue", "true");
    if (this.action.value) query.set("action", this.action.value);
    let data;
    try {
      const response = await fetch(`${this.endpoint}/cards?${query}`, { headers: { Accept: "application/json" } });
      data = await response.json();
      if (!response.ok) {
        this.say(data.error || `the inbox could not be read (${response.status})`, true);
        return;
      }
    } catch {
      this.setOnline(false);
      return;
    }
    this.setOnline(true);
    this.offset = data.now - Date.now() / 1000;
    this.you = data.you;
    const fresh = new Map(data.cards.map((card) => [keyOf(card), card]));
    for (const key of [...this.selected]) {
      const before = this.cards.find((card) => keyOf(card) === key);
      const now = fresh.get(key);
      if (!now || (before && before.digest !== now.digest)) this.selected.delete(key); // ended, or changed: look again
    }
    for (const key of [...this.notes.keys()]) if (!fresh.has(key)) this.notes.delete(key);
    this.cards = data.cards;
    this.render();
    this.dataset.loaded = "true"; // the cards shown are the server's (a test, or a page's script, can wait for it)
  }

  setOnline(online) {
    if (this.online === online) return;
    this.online = online;
    if (!online) this.say("Offline: deciding is paused until the server can be reached again.", true);
    else this.say("");
    this.updateControls();
  }

  say(words, error = false) {
    this.status.textContent = words;
    this.status.classList.toggle("dial-error", error);
  }

  render() {
    const focused = this.list.contains(document.activeElement) ? document.activeElement.closest(".dial-inbox-card") : null;
    const focusedKey = focused ? focused.dataset.key : null;
    const focusedControl = focused && document.activeElement !== focused ? document.activeElement.className : null;
    const assigning = [...this.list.querySelectorAll(".dial-assign[open]")].map((node) => [
      node.closest(".dial-inbox-card").dataset.key,
      node.querySelector(".dial-assign-person").value,
    ]);
    this.list.replaceChildren(...this.cards.map((card) => this.renderCard(card)));
    for (const [key, typed] of assigning) { // an assignment being typed survives the cards being read again
      const again = this.cardNode(key);
      const form = again ? again.querySelector(".dial-assign") : null;
      if (form) {
        form.open = true;
        form.querySelector(".dial-assign-person").value = typed;
      }
    }
    this.empty.hidden = this.cards.length > 0;
    this.heading.textContent = this.cards.length ? `Waiting for you (${this.cards.length})` : "Waiting for you";
    if (focusedKey) {
      const again = this.cardNode(focusedKey);
      if (again) {
        const control = focusedControl ? again.querySelector(`[class="${focusedControl}"]`) : null;
        (control || again).focus();
      }
    }
    this.tick();
    this.updateControls();
  }

  cardNode(key) {
    return [...this.list.children].find((node) => node.dataset.key === key) || null;
  }

  renderCard(card) {
    const key = keyOf(card);
    const label = card.preview || card.text || card.action;
    const item = el("li", "dial-inbox-card");
    item.tabIndex = 0;
    item.dataset.key = key;
    item.dataset.suggestion = card.id;
    item.dataset.thread = card.threadId;
    item.classList.toggle("dial-is-destructive", card.destructive);
    item.classList.toggle("dial-is-selected", this.selected.has(key));
    const titleId = `dial-card-${btoa(unescape(encodeURIComponent(key))).replace(/[^A-Za-z0-9]/g, "")}`;
    item.setAttribute("aria-labelledby", titleId);

    // A question is answered in words, and a refused payload is edited again, in the conversation: neither is
    // selected for a bulk.
    const selectable = card.kind === "suggestion" && !card.issue;
    const pick = el(selectable ? "label" : "span", "dial-pick");
    if (selectable) {
      const box = el("input", "dial-select");
      box.type = "checkbox";
      box.checked = this.selected.has(key);
      box.setAttribute("aria-label", `Select: ${label}`);
      box.addEventListener("change", () => this.toggle(key, box.checked));
      pick.append(box);
    }

    const body = el("div", "dial-inbox-body");
    const title = el("p", "dial-preview", card.kind === "question" ? `Question: ${card.text}` : label);
    title.id = titleId;
    body.append(title);
    if (card.destructive) body.append(el("span", "dial-destructive", "destructive"));
    if (card.kind === "suggestion" && card.text && card.text !== label) body.append(el("p", "dial-words", `The agent: ${card.text}`));

    const meta = el("p", "dial-inbox-meta");
    const open = el("a", "dial-open", `Conversation ${card.threadId}`);
    const conversation = `./?${new URLSearchParams({ thread: card.threadId })}`;
    open.href = conversation;
    meta.append(open);
    if (card.asked_by) meta.append(el("span", "dial-asked-by", `asked by ${card.asked_by}`));
    const waited = el("span", "dial-age");
    waited.dataset.since = String(card.since);
    meta.append(waited);
    if (typeof card.deadline === "number") {
      const due = el("time", "dial-due");
      due.dataset.deadline = String(card.deadline);
      due.dateTime = new Date(card.deadline * 1000).toISOString();
      meta.append(due);
    }
    if (card.approvals_needed > 1) {
      const given = card.approvers.length;
      const who = given ? `: ${card.approvers.join(", ")}` : "";
      meta.append(el("span", "dial-approvals", `${given} of ${card.approvals_needed} approvals${who}`));
    }
    if (card.roles.length) meta.append(el("span", "dial-roles", `for ${card.roles.join(" or ")}`));
    if (card.escalated_to.length) meta.append(el("span", "dial-escalated", `escalated to ${card.escalated_to.join(", ")}`));
    const holder = this.holder(card);
    const holding = el("span", "dial-holding", holdingText(card, this.now(), this.you));
    if (holder) holding.dataset.until = String(card.claimed_until); // the page is drawn again when the claim ends
    holding.hidden = !holding.textContent;
    meta.append(holding);
    body.append(meta);

    if (card.kind === "suggestion") {
      const details = el("details", "dial-details");
      details.append(el("summary", "dial-summary", "What would run"), el("pre", "dial-payload", card.payload_json));
      body.append(details);
    }
    if (card.why_asked) body.append(el("p", "dial-why", `Why this needs approval: ${card.why_asked}`));
    if (card.issue) {
      const refused = el("p", "dial-issue", `Refused${card.issue.field ? ` (${card.issue.field})` : ""}: ${card.issue.hint || card.issue.code || "not valid"}`);
      if (card.edit_preview) refused.append(` The edit: “${card.edit_preview}”.`);
      body.append(refused);
    }
    const note = el("p", "dial-inbox-note", this.notes.get(key) || "");
    body.append(note);

    const actions = el("div", "dial-actions");
    if (card.kind === "suggestion") {
      if (card.issue) { // as the panel: a payload the domain refused is edited again, or dismissed
        const edit = el("a", "dial-edit-link", "Edit it in the conversation");
        edit.href = conversation;
        actions.append(edit);
      } else {
        actions.append(button("Accept", "dial-accept", () => this.decide("accept", [key]), `Accept: ${label}`));
      }
      actions.append(button("Dismiss", "dial-dismiss", () => this.decide("dismiss", [key]), `Dismiss: ${label}`));
      if (holder === this.you) {
        actions.append(button("Release", "dial-release", () => this.hold("release", card), `Release: ${label}`));
      } else if (!holder) {
        actions.append(button("Claim", "dial-claim", () => this.hold("claim", card), `Claim: ${label}`));
      }
      body.append(actions, this.assignForm(card, label));
    } else {
      const answer = el("a", "dial-answer-link", "Answer in the conversation");
      answer.href = conversation;
      actions.append(answer);
      body.append(actions);
    }
    item.append(pick, body);
    return item;
  }

  // "Assign": to a person named in a field, to one of the card's roles, or back to nobody.
  assignForm(card, label) {
    const box = el("details", "dial-assign");
    box.append(el("summary", "dial-assign-summary", "Assign"));
    const form = el("form", "dial-assign-form");
    form.setAttribute("aria-label", `Assign: ${label}`);
    const field = el("label", "dial-assign-label", "Person ");
    const person = el("input", "dial-assign-person");
    person.type = "text";
    person.autocomplete = "off";
    person.maxLength = 128;
    field.append(person);
    const toPerson = el("button", "dial-button dial-assign-to-person", "Assign");
    toPerson.type = "submit";
    form.append(field, toPerson);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      if (person.value.trim()) this.hold("assign", card, { person: person.value.trim() });
    });
    for (const role of card.roles) {
      form.append(button(`To ${role}`, "dial-assign-to-role", () => this.hold("assign", card, { role })));
    }
    if (card.assigned_to || card.assigned_role) {
      form.append(button("Unassign", "dial-unassign", () => this.hold("assign", card, {})));
    }
    box.append(form);
    return box;
  }

  now() {
    return Date.now() / 1000 + this.offset;
  }

  // Who holds a claim on the card now, on the server's clock (null: nobody).
  holder(card) {
    return card.claimed_by && typeof card.claimed_until === "number" && this.now() < card.claimed_until ? card.claimed_by : null;
  }

  // Claim, release or assign a card; a refusal is said on the card, and the cards are read again either way.
  async hold(kind, card, extra = {}) {
    if (!this.online) return;
    const key = keyOf(card);
    let answer;
    try {
      const response = await fetch(`${this.endpoint}/${kind}`, {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "application/json" },
        body: JSON.stringify({ threadId: card.threadId, id: card.id, ...extra }),
      });
      answer = await response.json();
    } catch {
      this.say("The server could not be reached: reload to see who has the card.", true);
      return;
    }
    if (answer.refused || answer.error) {
      this.notes.set(key, `Not done: ${answer.reason || answer.error}`);
    } else {
      this.notes.delete(key);
      const form = this.cardNode(key) ? this.cardNode(key).querySelector(".dial-assign") : null;
      if (form) form.open = false; // done: the form folds away (a refused one stays open, to be put right)
    }
    this.say(answer.refused || answer.error ? "" : HELD[kind](card));
    await this.load();
  }

  // The countdowns and ages, measured on the server's clock.
  tick() {
    const now = Date.now() / 1000 + this.offset;
    for (const node of this.list.querySelectorAll(".dial-due")) {
      const left = Number(node.dataset.deadline) - now;
      node.textContent = left > 0 ? `due in ${span(left)}` : "overdue";
      node.closest(".dial-inbox-card").classList.toggle("dial-is-overdue", left <= 0);
    }
    for (const node of this.list.querySelectorAll(".dial-age")) {
      node.textContent = `waiting ${age(now - Number(node.dataset.since))}`;
    }
    if ([...this.list.querySelectorAll(".dial-holding[data-until]")].some((node) => Number(node.dataset.until) <= now)) {
      this.render(); // a claim ran out: the card is free to claim again
    }
  }

  toggle(key, on) {
    if (on) this.selected.add(key);
    else this.selected.delete(key);
    const node = this.cardNode(key);
    const box = node ? node.querySelector(".dial-select") : null;
    if (box) {
      node.classList.toggle("dial-is-selected", on);
      box.checked = on;
    }
    this.updateControls();
  }

  decidable() {
    return this.cards.filter((card) => card.kind === "suggestion" && !card.issue);
  }

  toggleAll() {
    const every = this.decidable().map(keyOf);
    const on = every.some((key) => !this.selected.has(key));
    for (const key of every) this.toggle(key, on);
  }

  updateControls() {
    const count = this.selected.size;
    const blocked = this.sending || !this.online;
    this.acceptSelected.textContent = count ? `Accept ${plural(count, "card", "cards")}` : "Accept selected";
    this.dismissSelected.textContent = count ? `Dismiss ${plural(count, "card", "cards")}` : "Dismiss selected";
    this.acceptSelected.disabled = blocked || count === 0;
    this.dismissSelected.disabled = blocked || count === 0;
    const every = this.decidable();
    this.selectAll.disabled = every.length === 0;
    this.selectAll.textContent = every.length && every.every((card) => this.selected.has(keyOf(card))) ? "Select none" : "Select all";
    for (const node of this.list.querySelectorAll(".dial-accept, .dial-dismiss")) node.disabled = blocked;
    this.confirmYes.disabled = blocked;
  }

  decideSelected(decision) {
    const keys = this.decidable().map(keyOf).filter((key) => this.selected.has(key));
    if (keys.length) this.decide(decision, keys);
  }

  // Accepting a destructive card asks for a second yes, as the panel does; a bulk names how many are destructive.
  decide(decision, keys) {
    if (this.sending || !this.online) return;
    const chosen = keys.map((key) => this.cards.find((card) => keyOf(card) === key)).filter(Boolean);
    const destructive = chosen.filter((card) => card.destructive);
    if (decision === "accept" && destructive.length) {
      const what = chosen.length === 1 ? `“${chosen[0].preview || chosen[0].action}”` : plural(chosen.length, "card", "cards");
      const some = chosen.length === 1 ? "It is destructive." : `${destructive.length} of them destructive.`;
      this.confirmText.textContent = `Accept ${what}? ${some}`;
      this.confirmYes.textContent = chosen.length === 1 ? "Yes, accept it" : `Yes, accept ${plural(chosen.length, "card", "cards")}`;
      this.pendingChoice = { decision, keys };
      this.confirmBox.hidden = false;
      this.confirmYes.focus();
      return;
    }
    this.send(decision, chosen);
  }

  confirmed() {
    const choice = this.pendingChoice;
    this.closeConfirm();
    if (!choice) return;
    const chosen = choice.keys.map((key) => this.cards.find((card) => keyOf(card) === key)).filter(Boolean);
    this.send(choice.decision, chosen);
  }

  closeConfirm() {
    this.pendingChoice = null;
    this.confirmBox.hidden = true;
  }

  async send(decision, chosen) {
    if (!chosen.length) return;
    this.sending = true;
    this.updateControls();
    this.say(`Sending ${plural(chosen.length, "decision", "decisions")}…`);
    const decisions = chosen.map((card) => ({ threadId: card.threadId, id: card.id, decision, digest: card.digest }));
    let answer;
    try {
      const response = await fetch(`${this.endpoint}/decide`, {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "application/json" },
        body: JSON.stringify({ decisions }),
      });
      answer = await response.json();
      if (!response.ok) {
        this.say(answer.error || `the decisions were refused (${response.status})`, true);
        return;
      }
    } catch {
      this.say("The server could not be reached: reload to see what was decided.", true);
      return;
    } finally {
      this.sending = false;
      this.updateControls();
    }
    const taken = answer.results.filter((result) => !result.refused);
    const refused = answer.results.filter((result) => result.refused);
    for (const result of answer.results) {
      const key = keyOf(result);
      this.selected.delete(key);
      if (result.refused) this.notes.set(key, `Not taken: ${result.reason}`);
    }
    const words = [];
    if (taken.length) words.push(`${plural(taken.length, "card", "cards")} ${DONE[decision]}.`);
    if (refused.length) words.push(`${plural(refused.length, "card was", "cards were")} not: see why on ${refused.length === 1 ? "it" : "each"}.`);
    this.say(words.join(" "), refused.length > 0);
    await this.load();
  }

  onKey(event) {
    const target = event.target;
    if (event.altKey || event.ctrlKey || event.metaKey) return;
    if (target instanceof HTMLSelectElement || target instanceof HTMLTextAreaElement) return;
    if (target instanceof HTMLInputElement && target.type !== "checkbox") return;
    if (!this.confirmBox.hidden) return; // a second yes is asked: Enter or a click answers it, not a shortcut
    const cards = [...this.list.children];
    const current = target.closest ? target.closest(".dial-inbox-card") : null;
    const at = current ? cards.indexOf(current) : -1;
    const move = (step) => {
      const next = cards[Math.min(cards.length - 1, Math.max(0, at + step))];
      if (next) next.focus();
      event.preventDefault();
    };
    if (event.key === "j" || (event.key === "ArrowDown" && current)) move(1);
    else if (event.key === "k" || (event.key === "ArrowUp" && current)) move(at < 0 ? cards.length : -1);
    else if (event.key === "x" && current) {
      if (current.querySelector(".dial-select")) this.toggle(current.dataset.key, !this.selected.has(current.dataset.key));
      event.preventDefault();
    } else if (event.key === "a" || event.key === "d") {
      const decision = event.key === "a" ? "accept" : "dismiss";
      const focused = current && current.querySelector(".dial-select") ? [current.dataset.key] : [];
      const keys = this.selected.size ? this.decidable().map(keyOf).filter((key) => this.selected.has(key)) : focused;
      if (keys.length) this.decide(decision, keys);
      event.preventDefault();
    }
  }
}

customElements.define("dial-inbox", DialInbox);
