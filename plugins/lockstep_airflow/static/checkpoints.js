// Routes links into the Airflow UI when the page is inside the UI's (same-origin) iframe, which is
// sandboxed without allow-top-navigation: a target="_top" link does nothing there, so the click
// pushes the link onto the top window's history and fires popstate, which the UI's router follows
// like the back button. On a page opened on its own (top === window) links work as they are, and
// with JavaScript off the page loses nothing but this. See checkpoints_page.py's docstring.
document.addEventListener("click", function (e) {
  var a = e.target.closest ? e.target.closest("a[data-airflow]") : null;
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  var top;
  try { top = window.top; if (top === window || !top.history || !top.location.href) return; }
  catch (err) { return; }
  var state = top.history.state || {};
  top.history.pushState({usr: null, key: Math.random().toString(36).slice(2, 10),
                         idx: (typeof state.idx === "number" ? state.idx : 0) + 1}, "", a.getAttribute("href"));
  top.dispatchEvent(new PopStateEvent("popstate", {state: top.history.state}));
  e.preventDefault();
});
