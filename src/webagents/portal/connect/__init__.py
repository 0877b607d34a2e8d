"""Portal Connect (SPEC A4, P11, P12): agents hold a WebSocket to the portal (`/ws`), and the
portal relays callers to them: its public endpoint `POST /agents/<name>/chat/completions` and
the web chat box on the owner's chat page. Each relayed request carries an assertion the
portal signs for the agent, naming the caller. See docs/portal.md, "Portal Connect"."""
