// Quartermaster's own behaviour on top of htmx; loaded from a file (no inline script, for CSP).

// A button or form with data-confirm asks before it submits (cancel, reject, withdraw, hold).
document.addEventListener("submit", (event) => {
  const button = event.submitter;
  const question = button?.dataset.confirm || event.target.dataset.confirm;
  if (question && !window.confirm(question)) {
    event.preventDefault();
  }
});
