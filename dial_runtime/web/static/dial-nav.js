// <dial-nav>: the panel page's way around: the inbox (with how many cards wait there for the person), a new
// conversation, and the conversations the person may see, the one on the page marked as such. Read once when the
// page opens, and again when the inbox's change stream says a conversation changed.

import { el } from "./dial-card.js";

class DialNav extends HTMLElement {
  connectedCallback() {
    const nav = el("nav", "dial-nav");
    nav.setAttribute("aria-label", "Conversations and the inbox");
    this.inbox = el("a", "dial-nav-inbox", "Inbox");
    this.inbox.href = "inbox";
    const fresh = el("a", "dial-nav-new", "New conversation");
    fresh.href = "./";
    this.list = el("details", "dial-nav-list");
    this.summary = el("summary", "dial-nav-summary", "Conversations");
    this.items = el("ul", "dial-nav-items");
    this.list.append(this.summary, this.items);
    nav.append(this.inbox, fresh, this.list);
    this.append(nav);
    this.current = new URL(window.location.href).searchParams.get("thread");
    this.load();
    this.changes = new EventSource("inbox/changes");
    this.changes.addEventListener("changed", () => this.load());
  }

  disconnectedCallback() {
    if (this.changes) this.changes.close();
  }

  async load() {
    try {
      const [listed, waiting] = await Promise.all([
        fetch("conversations", { headers: { Accept: "application/json" } }).then((response) => (response.ok ? response.json() : null)),
        fetch("inbox/cards?limit=1000", { headers: { Accept: "application/json" } }).then((response) => (response.ok ? response.json() : null)),
      ]);
      const counts = new Map();
      for (const card of waiting ? waiting.cards : []) counts.set(card.threadId, (counts.get(card.threadId) || 0) + 1);
      const total = waiting ? waiting.cards.length : 0;
      this.inbox.textContent = total ? `Inbox (${total} waiting for you)` : "Inbox";
      const ids = listed ? listed.conversations : [];
      if (this.current && !ids.includes(this.current)) ids.unshift(this.current); // a new one, not stored yet
      this.summary.textContent = `Conversations (${ids.length})`;
      this.items.replaceChildren(
        ...ids.map((id) => {
          const item = el("li");
          const link = el("a", "dial-nav-item", id);
          link.href = `./?${new URLSearchParams({ thread: id })}`;
          if (id === this.current) link.setAttribute("aria-current", "page");
          item.append(link);
          const count = counts.get(id);
          if (count) item.append(el("span", "dial-nav-waiting", ` ${count} waiting`));
          return item;
        }),
      );
    } catch {
      // the list stays as it was; the panel itself says when the server cannot be reached
    }
  }
}

customElements.define("dial-nav", DialNav);
