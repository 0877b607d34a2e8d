// The chat box of the owner's chat page (Portal Connect, P11): sends the next message with
// the page's CSRF token and shows the agent's reply as it streams. The portal answers with
// server-sent events of its own: {"delta": text}, then {"done": true} once the turn is
// recorded in the chat, or {"error": message}. Text only (textContent): no markup from a
// message ever reaches the page.
(() => {
  "use strict";
  const form = document.getElementById("continue-form");
  if (!form) return;
  const list = document.getElementById("messages");
  const status = document.getElementById("continue-status");
  const box = document.getElementById("continue-message");
  const button = form.querySelector("button[type=submit]");

  function shown(role, text) {
    const item = document.createElement("li");
    item.className = "message " + role;
    const label = document.createElement("div");
    label.className = "role";
    label.textContent = role;
    const content = document.createElement("div");
    content.className = "content";
    content.textContent = text;
    item.append(label, content);
    list.append(item);
    return content;
  }

  function handle(event, reply) {
    for (const line of event.split("\n")) {
      if (!line.startsWith("data: ")) continue;
      const message = JSON.parse(line.slice(6));
      if (typeof message.delta === "string") {
        reply.textContent += message.delta;
        status.textContent = "the agent is answering…";
      } else if (message.done) {
        status.textContent = "saved in this chat";
      } else if (typeof message.error === "string") {
        status.textContent = message.error;
      }
    }
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = new URLSearchParams(new FormData(form));
    const text = (data.get("message") || "").trim();
    if (!text) return;
    button.disabled = true;
    shown("user", text);
    const reply = shown("assistant", "");
    box.value = "";
    status.textContent = "waiting for the agent…";
    try {
      const response = await fetch(form.action, {
        method: "POST",
        body: data,
        credentials: "same-origin",
        headers: { Accept: "text/event-stream" },
      });
      const type = response.headers.get("content-type") || "";
      if (!response.body || !type.startsWith("text/event-stream")) {
        status.textContent = `not sent (${response.status}): reload the page and send it again`;
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
          handle(pending.slice(0, cut), reply);
          pending = pending.slice(cut + 2);
        }
      }
    } catch (error) {
      status.textContent = "the connection to the portal was lost: reload the page";
    } finally {
      button.disabled = false;
    }
  });
})();
