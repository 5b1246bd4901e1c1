// The card a person decides on, as the panel (<dial-chat>) and the decision link page (<dial-decision>) both
// render it: one renderer, so a card looks and reads the same wherever it is decided. Plain JavaScript, no build
// step. A card is rendered from the server's JSON view of it (item_view): the domain's preview, the agent's own
// words for the proposal (marked as the agent's), the action's id, the destructive mark, every field of the
// payload that would run while it waits (each value as its exact JSON text: JSON.parse rounds integers past
// 2**53) and the whole payload as JSON, the domain's refusal of an edit, and once it ended its outcome in words
// and what a done action returned.

export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

// "10:02" for a time in seconds since the epoch, in the person's own clock.
function hourMinute(seconds) {
  return new Date(seconds * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}

// "4:59", "2 h 05 min", "3 days" for a number of seconds.
export function span(seconds) {
  const whole = Math.max(0, Math.floor(seconds));
  if (whole < 3600) return `${Math.floor(whole / 60)}:${String(whole % 60).padStart(2, "0")}`;
  if (whole < 86400) return `${Math.floor(whole / 3600)} h ${String(Math.floor((whole % 3600) / 60)).padStart(2, "0")} min`;
  const days = Math.floor(whole / 86400);
  return days === 1 ? "1 day" : `${days} days`;
}

// The server's clock minus this one, in seconds, as the last response's Date header said (to the second): a card's
// countdown runs on the server's time, so a wrong clock here cannot make a card look on time.
let serverOffset = 0;

export function learnServerTime(response) {
  const said = Date.parse(response.headers.get("date") || "");
  if (!Number.isNaN(said)) serverOffset = said / 1000 - Date.now() / 1000;
}

// Every waiting card's countdown to its deadline, once a second, on the server's clock.
let ticking = null;

function tickDeadlines() {
  const now = Date.now() / 1000 + serverOffset;
  for (const node of document.querySelectorAll(".dial-card .dial-due[data-deadline]")) {
    const left = Number(node.dataset.deadline) - now;
    node.textContent = left > 0 ? `due in ${span(left)}` : "overdue";
    node.classList.toggle("dial-is-overdue", left <= 0);
  }
}

// " at 10:02" for a time in seconds since the epoch; nothing without one.
export function clockTime(seconds) {
  return typeof seconds === "number" ? ` at ${hourMinute(seconds)}` : "";
}

export function button(label, className, onClick, name) {
  const node = el("button", `dial-button ${className}`, label);
  node.type = "button";
  if (name) node.setAttribute("aria-label", name);
  node.addEventListener("click", onClick);
  return node;
}

// Text from the domain (a hint, a reason) with `code` spans shown as code, everything else as text.
export function withCode(text) {
  const box = document.createDocumentFragment();
  String(text)
    .split(/(`[^`]+`)/)
    .forEach((part) => {
      if (/^`[^`]+`$/.test(part)) box.append(el("code", "", part.slice(1, -1)));
      else if (part) box.append(document.createTextNode(part));
    });
  return box;
}

// What a card is called in its buttons' names and its confirmations: the domain's preview, else the action.
export function cardLabel(view) {
  return view.preview || view.action;
}

// Where a card's approval policy stands ("1 of 2 approvals: ana"), with its reminder, escalation and the last
// approval the policy did not take; empty for a card without a policy.
function approvalsText(view) {
  if (!view.approvals_needed) return "";
  const approvers = view.approvers || [];
  const parts = [`${approvers.length} of ${view.approvals_needed} approvals${approvers.length ? `: ${approvers.join(", ")}` : ""}`];
  if (view.escalated_to && view.escalated_to.length) parts.push(`escalated to ${view.escalated_to.join(", ")}`);
  else if (view.reminded) parts.push("reminded");
  if (view.approval_refused) parts.push(`not taken: ${view.approval_refused}`);
  return parts.join(" · ");
}

// Who holds a waiting card at `now` (seconds since the epoch): "claimed by ana until 10:15 · assigned to
// finance", each part only when it holds; `you` names the person reading ("claimed by you"). Empty when nobody
// holds it. A claim decides nothing: it says who is on the card, so that others leave it alone.
export function holdingText(view, now, you) {
  const parts = [];
  if (view.claimed_by && typeof view.claimed_until === "number" && now < view.claimed_until) {
    const who = view.claimed_by === you ? "you" : view.claimed_by;
    parts.push(`claimed by ${who} until ${hourMinute(view.claimed_until)}`);
  }
  if (view.assigned_to) parts.push(`assigned to ${view.assigned_to === you ? "you" : view.assigned_to}`);
  else if (view.assigned_role) parts.push(`assigned to ${view.assigned_role}`);
  return parts.join(" · ");
}

// A new card's elements (not placed anywhere yet: the caller puts card.root where it belongs).
export function newCard(view) {
  const root = el("section", "dial-card");
  root.dataset.suggestion = view.id;
  root.tabIndex = -1; // the keys move the focus from card to card (j, k), and decide the one it is on (a, d)
  const head = el("header", "dial-card-head");
  const action = el("code", "dial-action");
  const mark = el("span", "dial-destructive", "destructive");
  head.append(action, mark);
  const preview = el("p", "dial-preview");
  const words = el("p", "dial-words");
  const repeat = el("p", "dial-done-before");
  const approvals = el("p", "dial-approvals");
  const holding = el("p", "dial-holding");
  const why = el("p", "dial-why");
  const due = el("time", "dial-due");
  due.hidden = true;
  const fields = el("dl", "dial-fields");
  fields.setAttribute("aria-label", "what would run");
  const details = el("details", "dial-details");
  details.append(el("summary", "dial-summary", "Payload as JSON"));
  const payload = el("pre", "dial-payload");
  details.append(payload);
  const issue = el("p", "dial-issue");
  const actions = el("div", "dial-actions");
  const result = el("p", "dial-outcome");
  const decider = el("p", "dial-decided-by");
  const resultFields = el("dl", "dial-result-fields");
  resultFields.setAttribute("aria-label", "what it returned");
  resultFields.hidden = true;
  const returned = el("details", "dial-returned");
  returned.append(el("summary", "dial-result-summary", "What it returned"));
  const returnedText = el("pre", "dial-result");
  returned.append(returnedText);
  root.append(head, preview, words, repeat, approvals, holding, why, due, fields, details, issue, actions, result, decider);
  root.append(resultFields, returned);
  return {
    id: view.id, root, action, mark, preview, words, repeat, approvals, holding, why, due, fields, details, payload,
    issue, actions, result, decider, resultFields, returned, returnedText,
  };
}

// The doors a decision comes through (DecidedEvent.via), as a person names them.
const DOORS = {
  web: "the panel",
  inbox: "the inbox",
  link: "a decision link",
  cli: "the command line",
  terminal: "the terminal",
  a2a: "A2A",
  mcp: "MCP",
};
const DECIDED = { accept: "Accepted", dismiss: "Dismissed", edit: "Run edited" };

// Who took the decision that ended a card, through which door and when ("Accepted by ana through the inbox at
// 10:02"), or the rule that decided it without asking ("Approved by rule small-refunds@2"); empty when nothing
// decided it (a deadline, new words).
function deciderText(view) {
  if (view.ruled_words) return view.ruled_words;
  const decided = DECIDED[view.decision];
  if (!decided || !view.decided_by) return "";
  const door = view.decided_via ? ` through ${DOORS[view.decided_via] || view.decided_via}` : "";
  return `${decided} by ${view.decided_by}${door}${clockTime(view.decided_at)}`;
}

// Every field of an object (a payload, a result) as a definition list, each value as its exact JSON text.
function renderFields(card, fields, list = card.fields) {
  list.replaceChildren();
  for (const field of fields || []) {
    list.append(el("dt", "dial-field-name", field.name), el("dd", "dial-field-value", field.json));
  }
}

// Show `view` (the card as the server has it now) in `card`; an ended card loses its decision controls and folds
// its payload away. The preview is the domain's account of what would run; the agent's words are shown apart,
// as the agent's, never in its place.
export function renderCard(card, view) {
  const ended = Boolean(view.outcome);
  card.view = view;
  const root = card.root;
  root.setAttribute("aria-label", `${view.destructive ? "destructive " : ""}proposal: ${cardLabel(view)}`);
  card.action.textContent = view.action;
  card.preview.textContent = view.preview || "";
  card.preview.hidden = !view.preview;
  card.words.textContent = view.text ? `The agent's words: “${view.text}”` : "";
  card.words.hidden = !view.text;
  const fields = view.payload_fields;
  renderFields(card, ended ? [] : fields);
  card.fields.hidden = ended || !fields || !fields.length;
  card.details.open = !ended && !fields;
  card.mark.hidden = !view.destructive;
  root.classList.toggle("dial-is-destructive", Boolean(view.destructive));
  card.repeat.hidden = !view.done_before;
  card.repeat.textContent = view.done_before ? `Already done${clockTime(view.done_at)} as ${view.done_before}` : "";
  card.approvals.hidden = !view.approvals_needed;
  card.approvals.textContent = approvalsText(view);
  card.holding.textContent = ended ? "" : holdingText(view, Date.now() / 1000 + serverOffset);
  card.holding.hidden = !card.holding.textContent;
  card.why.textContent = !ended && view.why_asked ? `Why this needs approval: ${view.why_asked}` : "";
  card.why.hidden = !card.why.textContent;
  const counting = !ended && view.status !== "running" && typeof view.deadline === "number";
  card.due.hidden = !counting;
  if (counting) {
    card.due.dataset.deadline = String(view.deadline);
    card.due.dateTime = new Date(view.deadline * 1000).toISOString();
    if (ticking === null) ticking = window.setInterval(tickDeadlines, 1000);
    tickDeadlines();
  } else {
    delete card.due.dataset.deadline;
    card.due.textContent = "";
  }
  card.payload.textContent = view.payload_json !== undefined ? view.payload_json : JSON.stringify(view.payload, null, 2);
  const issue = !ended && view.issue ? view.issue : null;
  card.issue.hidden = !issue;
  card.issue.replaceChildren();
  if (issue) {
    card.issue.append(`Refused${issue.field ? ` (${issue.field})` : ""}: `, withCode(issue.hint || issue.code || "not valid"));
    const refusals = view.refusals || [];
    const edit = refusals.length ? refusals[refusals.length - 1].preview : null;
    if (edit) card.issue.append(` Your edit: “${edit}”.`); // the card keeps its own words above
  }
  root.dataset.status = ended ? view.status : view.status === "pending" || view.status === "deferred-waiting" ? "pending" : "running";
  if (ended) {
    root.dataset.outcome = view.status;
    const code = view.reported && view.reported.code;
    if (code) root.dataset.code = code; // why it ended, for the page's own styles and tests (interrupted, ...)
    else delete root.dataset.code;
    card.result.hidden = false;
    card.result.replaceChildren(withCode(view.outcome));
    card.decider.textContent = deciderText(view);
    card.decider.hidden = !card.decider.textContent;
    const returned = view.status === "done" && typeof view.result === "string" && view.result !== "null";
    const resultFields = returned ? view.result_fields || [] : [];
    renderFields(card, resultFields, card.resultFields);
    card.resultFields.hidden = !resultFields.length; // an object returned reads field by field, its JSON folded
    card.returned.hidden = !returned;
    card.returned.open = returned && !resultFields.length;
    card.returnedText.textContent = returned ? view.result : "";
    clearActions(card);
  } else {
    delete root.dataset.outcome;
    delete root.dataset.code;
    card.result.hidden = root.dataset.status !== "running";
    card.result.textContent = root.dataset.status === "running" ? "Running…" : "";
    card.decider.hidden = true;
    card.resultFields.hidden = true;
    card.returned.hidden = true;
  }
  return card;
}

export function clearActions(card) {
  card.actions.replaceChildren();
  card.root.classList.remove("dial-pending");
}

// The decisions offered on a waiting card, each only when its handler is given: accept(), edit(jsonText),
// dismiss(). `extra` nodes follow the buttons (the panel's "Say something else"). A destructive action runs only
// after a second, explicit yes; a payload the domain refused is not offered as it is (edit it, or dismiss it),
// and its editor is open from the start.
export function offerDecisions(card, { accept, edit, dismiss } = {}, extra = []) {
  const view = card.view;
  const label = cardLabel(view);
  clearActions(card);
  card.root.classList.add("dial-pending");
  if (accept && !view.issue) {
    const onAccept = () => (view.destructive ? confirm(card, label, accept) : accept());
    const accepting = button("Accept", "dial-accept", onAccept, `Accept: ${label}`);
    accepting.setAttribute("aria-keyshortcuts", "A");
    card.actions.append(accepting);
  }
  if (edit) card.actions.append(button("Edit", "dial-edit", () => editor(card, label, edit), `Edit: ${label}`));
  if (dismiss) {
    const dismissing = button("Dismiss", "dial-dismiss", dismiss, `Dismiss: ${label}`);
    dismissing.setAttribute("aria-keyshortcuts", "D");
    card.actions.append(dismissing);
  }
  card.actions.append(...extra);
  if (edit && view.issue) editor(card, label, edit);
}

// The second yes a destructive action needs.
export function confirm(card, label, run) {
  card.actions.querySelectorAll(".dial-confirm-box").forEach((node) => node.remove());
  const box = el("div", "dial-confirm-box");
  box.setAttribute("role", "alertdialog");
  box.setAttribute("aria-label", `confirm: ${label}`);
  box.append(el("p", "dial-confirm-text", `This is destructive and may not be undone: ${label}?`));
  const cancel = button("Cancel", "dial-cancel", () => box.remove(), `Cancel: ${label}`);
  box.append(button("Yes, run it", "dial-confirm", run, `Yes, run it: ${label}`), cancel);
  card.actions.append(box);
  cancel.focus();
}

// The payload as JSON text to edit; `save(text)` gets the text once it parses as JSON (the text itself goes to
// the server, so every digit of it reaches the domain).
export function editor(card, label, save) {
  card.actions.querySelectorAll(".dial-editor").forEach((node) => node.remove());
  const box = el("div", "dial-editor");
  const area = el("textarea", "dial-json");
  area.rows = Math.min(12, Math.max(3, card.payload.textContent.split("\n").length));
  area.spellcheck = false;
  area.setAttribute("aria-label", `payload of ${label}, as JSON`);
  area.value = card.payload.textContent;
  const error = el("p", "dial-json-error");
  error.hidden = true;
  error.setAttribute("role", "alert");
  const run = button("Run edited", "dial-save", () => {
    try {
      JSON.parse(area.value);
    } catch (problem) {
      error.hidden = false;
      error.textContent = `Not JSON: ${problem.message}`;
      return;
    }
    save(area.value);
  }, `Run edited: ${label}`);
  box.append(area, error, run);
  card.actions.append(box);
  area.focus();
}

// A JSON request body with `jsonText` (checked to be JSON) in place of `marker`'s value: a payload goes as the
// text the person wrote, never as numbers a browser parsed.
export function withJsonText(body, marker, jsonText) {
  return JSON.stringify(body).replace(JSON.stringify(marker), () => jsonText.trim());
}
