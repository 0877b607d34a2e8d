// The copy buttons of the owner's pages: a <button data-copy="ID"> copies the text of the
// element with that id and says so in its own label for a moment's reading (a status line,
// so a screen reader hears it too). Text only: nothing is parsed as markup.
(() => {
  "use strict";
  for (const button of document.querySelectorAll("button[data-copy]")) {
    const source = document.getElementById(button.dataset.copy);
    const said = document.getElementById(button.dataset.copy + "-copied");
    if (!source) continue;
    button.hidden = false;
    button.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(source.textContent.trim());
        if (said) said.textContent = "Copied.";
      } catch (_) {
        if (said) said.textContent = "Not copied: select the text and copy it.";
      }
    });
  }
})();
