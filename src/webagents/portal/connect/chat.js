// The chat box of the owner's chat page (Portal Connect, P11): sends the next message with
// the page's CSRF token and shows the agent's reply as it streams. The portal answers with
// server-sent events of its own: {"delta": text}, then {"done": true, "html": ...} once the
// turn is recorded in the chat, or {"error": message}. The page builds the markup of the
// chat page's messages (the same classes, so the same look). What streams in is inserted as
// text (textContent); the one HTML it takes is the finished answer's, which the portal
// rendered from Markdown and sanitized (chats/markdown.py).
//
// The typed text leaves the box only once the turn is saved: when anything fails (the agent
// offline or busy, the message too large, the portal out of reach, the reply cut off), the
// text stays there to send again and the error shows where the reply would have been. The
// message and the reply are shown once the reply starts, so a failure before it leaves no
// empty message behind.
(() => {
  "use strict";
  const form = document.getElementById("continue-form");
  if (!form) return;
  const list = document.getElementById("messages");
  const status = document.getElementById("continue-status");
  const box = document.getElementById("continue-message");
  const button = form.querySelector("button[type=submit]");
  const UNREACHABLE = "the portal could not be reached: the message was not sent; send it again";
  let shownError = null;

  const LABELS = { user: "You", assistant: list.dataset.agent || "assistant" };

  // A message as the chat page shows one: its label, then its content in a paragraph.
  function shown(role, text) {
    const item = document.createElement("li");
    item.className = "message " + role;
    const label = document.createElement("div");
    label.className = "role";
    label.textContent = LABELS[role] || role;
    const content = document.createElement("div");
    content.className = "content";
    const paragraph = document.createElement("p");
    paragraph.className = "streaming";
    paragraph.textContent = text;
    content.append(paragraph);
    item.append(label, content);
    list.append(item);
    return content;
  }

  function showError(text) {
    shownError = document.createElement("li");
    shownError.className = "error";
    shownError.setAttribute("role", "alert");
    shownError.textContent = text;
    list.append(shownError);
    status.textContent = "";
  }

  // One turn on the page: the question and the reply appear with the reply's first piece.
  class Turn {
    constructor(text) {
      this.text = text;
      this.reply = null;
      this.failed = null;
      this.saved = false;
    }

    handle(event) {
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const message = JSON.parse(line.slice(6));
        if (typeof message.delta === "string") {
          if (this.reply === null) {
            shown("user", this.text);
            this.reply = shown("assistant", "");
          }
          this.reply.firstChild.textContent += message.delta;
          status.textContent = "the agent is answering…";
        } else if (message.done) {
          this.saved = true;
          // Sanitized by the portal (chats/markdown.py), as the chat page's own messages.
          if (this.reply !== null && typeof message.html === "string") {
            this.reply.innerHTML = message.html;
          }
        } else if (typeof message.error === "string") {
          this.failed = message.error;
        }
      }
    }
  }

  async function errorOf(response) {
    if (response.redirected && new URL(response.url).pathname === "/signin") {
      return "you were signed out: copy your message, sign in again and send it";
    }
    // The portal's API answers errors as JSON ({"detail"} or {"error": {"message"}}).
    try {
      const body = await response.json();
      const error = body.error;
      const message = typeof error === "object" && error ? error.message : body.detail;
      if (typeof message === "string" && message) return message;
    } catch (_) {
      // not JSON: the status alone
    }
    return (
      `not sent (the portal answered ${response.status}): copy your message, reload the page ` +
      "and send it again"
    );
  }

  async function send(data, turn) {
    const response = await fetch(form.action, {
      method: "POST",
      body: data,
      credentials: "same-origin",
      headers: { Accept: "text/event-stream" },
    });
    const type = response.headers.get("content-type") || "";
    if (!response.body || !type.startsWith("text/event-stream")) {
      turn.failed = await errorOf(response);
      return;
    }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let pending = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      pending += value;
      let cut;
      while ((cut = pending.indexOf("\n\n")) >= 0) {
        turn.handle(pending.slice(0, cut));
        pending = pending.slice(cut + 2);
      }
    }
    if (!turn.saved && turn.failed === null) {
      turn.failed = "the answer stopped before it was saved: send the message again";
    }
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = new URLSearchParams(new FormData(form));
    const text = (data.get("message") || "").trim();
    if (!text) return;
    button.disabled = true;
    if (shownError !== null) {
      shownError.remove();
      shownError = null;
    }
    status.textContent = "waiting for the agent…";
    const turn = new Turn(text);
    try {
      await send(data, turn);
    } catch (_) {
      turn.failed =
        turn.reply === null
          ? UNREACHABLE
          : "the connection to the portal was lost: reload the page to see what was saved";
    } finally {
      if (turn.failed !== null) {
        showError(turn.failed);
      } else {
        box.value = "";
        status.textContent = "saved in this chat";
      }
      button.disabled = false;
    }
  });
})();
