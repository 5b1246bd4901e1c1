// <dial-decision>: the page a decision link opens. It shows the one card the link names, rendered as the panel
// renders it (dial-card.js), and offers only the decisions the link allows; a decision is a POST of the link's
// token to the server, which checks it again and takes the decision once. Opening the page decides nothing.
//
// The server puts what the page shows in a JSON script element (the element's data-source names it): the token,
// the decisions it allows, the card as it is now, when the link expires, or why the link cannot be used.

import { cardLabel, el, newCard, offerDecisions, renderCard, withJsonText } from "./dial-card.js";

const BUSY_RETRIES = 8;
const BUSY_DELAY_MS = 500;

const DONE = { accept: "You accepted this proposal.", dismiss: "You dismissed this proposal.", edit: "You ran this proposal edited." };

const REFUSED = {
  malformed: "This is not a decision link",
  "unknown-key": "This link was not signed by a key this server has",
  "bad-signature": "This link was altered, or not made by this server",
  "not-yet-valid": "This link is not valid yet",
  expired: "This link has expired: ask for a new one",
  "wrong-person": "This link is for someone else",
  "wrong-conversation": "This link is for another conversation",
  "wrong-suggestion": "This link is for another proposal",
  "decision-not-allowed": "This link does not allow that decision",
  "payload-changed": "The proposal changed after this link was made",
  replayed: "This link has been used already",
  "already-decided": "This proposal was decided already",
  "unknown-suggestion": "No such proposal waits in this conversation",
  forbidden: "You may not decide this proposal",
  "not-signed-in": "Sign in, then open this link again",
  busy: "The conversation is busy: try again in a moment",
};

// The refusals whose first words say it all: the server's own words for them add nothing.
const SAID_ALONE = new Set(["replayed", "wrong-person", "bad-signature", "unknown-key", "payload-changed", "not-signed-in", "busy"]);

// "accept, edit or dismiss"
function listed(words) {
  return words.length < 2 ? words.join("") : `${words.slice(0, -1).join(", ")} or ${words[words.length - 1]}`;
}

function when(seconds) {
  return new Date(seconds * 1000).toLocaleString([], { dateStyle: "medium", timeStyle: "short" });
}

class DialDecision extends HTMLElement {
  connectedCallback() {
    this.endpoint = this.getAttribute("endpoint") || "decide";
    const source = document.getElementById(this.dataset.source || "dial-decision-data");
    const data = source ? JSON.parse(source.textContent) : { error: "the page holds no decision", reason: "malformed" };
    this.token = data.token || "";
    this.decisions = data.decisions || [];
    this.render(data);
  }

  render(data) {
    this.replaceChildren();
    this.heading = el("h2", "dial-decision-title", data.error ? "This link cannot be used" : "Decision needed");
    this.intro = el("p", "dial-decision-intro");
    this.box = el("div", "dial-decision-card");
    this.status = el("p", "dial-status");
    this.status.setAttribute("role", "status");
    this.append(this.heading, this.intro, this.box, this.status);
    if (data.open) {
      const line = el("p", "dial-open-line");
      const open = el("a", "dial-open", "Open the conversation");
      open.href = data.open;
      line.append(open);
      this.append(line);
    }
    if (data.card) {
      this.card = newCard(data.card);
      this.box.append(this.card.root);
      renderCard(this.card, data.card);
    }
    if (data.error) {
      this.intro.hidden = true;
      this.showStatus(this.refusalWords(data), true);
      return;
    }
    const verbs = ["accept", "edit", "dismiss"].filter((verb) => this.decisions.includes(verb));
    this.intro.textContent = `This link lets you ${listed(verbs)} this proposal, once${
      typeof data.expires_at === "number" ? `, until ${when(data.expires_at)}` : ""
    }.`;
    this.offer();
  }

  offer() {
    if (!this.card || this.card.view.outcome) return;
    const allowed = (verb) => this.decisions.includes(verb);
    offerDecisions(this.card, {
      accept: allowed("accept") ? () => this.decide("accept") : null,
      edit: allowed("edit") ? (jsonText) => this.decide("edit", jsonText) : null,
      dismiss: allowed("dismiss") ? () => this.decide("dismiss") : null,
    });
    if (!this.card.actions.querySelector("button")) {
      this.showStatus("Nothing this link allows can be done with the proposal as it is now: open the conversation.");
    }
  }

  refusalWords(answer) {
    const lead = REFUSED[answer.reason] || "This link cannot be used";
    return answer.error && !SAID_ALONE.has(answer.reason) ? `${lead}: ${answer.error}.` : `${lead}.`;
  }

  setBusy(busy) {
    this.classList.toggle("dial-running", busy);
    if (this.card) this.card.actions.querySelectorAll("button").forEach((node) => (node.disabled = busy));
  }

  async decide(decision, jsonText) {
    const marker = "dial-edited-payload";
    const body = { token: this.token, decision, ...(jsonText === undefined ? {} : { payload: marker }) };
    const sent = jsonText === undefined ? JSON.stringify(body) : withJsonText(body, marker, jsonText);
    this.setBusy(true);
    this.showStatus(`Sending your decision on “${cardLabel(this.card.view)}”…`);
    let answer;
    let response;
    try {
      for (let attempt = 0; ; attempt += 1) {
        response = await fetch(this.endpoint, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: sent,
          credentials: "same-origin",
          cache: "no-store",
        });
        answer = await response.json();
        if (!(response.status === 409 && answer.reason === "busy" && attempt < BUSY_RETRIES)) break;
        await new Promise((resolve) => setTimeout(resolve, BUSY_DELAY_MS));
      }
    } catch (problem) {
      this.setBusy(false);
      this.showStatus(`The server could not be reached (${problem.message}): try again.`, true);
      return;
    }
    this.setBusy(false);
    if (answer.card) renderCard(this.card, answer.card);
    if (!response.ok) {
      this.intro.hidden = true;
      this.showStatus(this.refusalWords(answer), true);
      if (answer.card && !answer.card.outcome && answer.reason === "busy") this.offer();
      else this.card.actions.replaceChildren();
      return;
    }
    if (answer.token && answer.card && !answer.card.outcome) {
      // The domain refused the edit: the refused payload waits, and a link for it goes on where this one ended.
      this.token = answer.token;
      this.offer();
      this.showStatus("The edit was refused: change it and run it again, or dismiss the proposal.", true);
      return;
    }
    this.card.actions.replaceChildren();
    this.intro.hidden = true;
    if (!answer.card || answer.card.outcome || answer.status !== "awaiting") {
      this.heading.textContent = "Decided";
      this.showStatus(DONE[decision] || "Decided.");
    } else {
      this.heading.textContent = "Approved";
      this.showStatus("Your approval is recorded: the proposal waits for another approver.");
    }
  }

  showStatus(text, error = false) {
    this.status.textContent = text;
    this.status.classList.toggle("dial-error", error);
    this.status.setAttribute("role", error ? "alert" : "status");
  }
}

customElements.define("dial-decision", DialDecision);
