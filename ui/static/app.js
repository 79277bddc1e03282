// memwatch review pages: live updates. The server says "change" on its
// event stream when the journal or the versions change; the page fetches
// itself again and swaps its content in. Without JavaScript the pages
// read whole; with it they stay current without reloading.
(function () {
  "use strict";
  var main = document.getElementById("content");
  var live = document.getElementById("live");
  if (!main || !window.EventSource || !window.fetch) {
    return;
  }
  var busy = false, again = false;
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(window.location.href, { headers: { "X-Memwatch-Fragment": "1" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html !== null && !document.activeElement.closest("form")) {
          main.innerHTML = html;
          if (live) { live.textContent = "updated " + new Date().toLocaleTimeString(); }
        }
      })
      .catch(function () {})
      .then(function () { busy = false; if (again) { again = false; refresh(); } });
  }
  var es = new EventSource(main.getAttribute("data-events"));
  es.addEventListener("change", refresh);
  es.addEventListener("open", function () { if (live) { live.textContent = "live"; } });
  es.addEventListener("error", function () { if (live) { live.textContent = "reconnecting…"; } });
})();
