// tenure dashboard: poll the page's JSON endpoint for fresh server-rendered fragments,
// and between polls shrink lease bars and age heartbeats from their data attributes.
// No framework and no build: the server renders (and escapes) all HTML.
"use strict";
(() => {
  const body = document.body;
  const poll = body.dataset.poll;
  const interval = Math.max(0.2, parseFloat(body.dataset.interval || "1")) * 1000;
  const status = document.getElementById("status");
  let renderedAt = performance.now();

  const format = (s) => (Math.abs(s) >= 120 ? (s / 60).toFixed(1) + " min" : s.toFixed(1) + " s");

  function tick() {
    const elapsed = (performance.now() - renderedAt) / 1000;
    for (const lease of document.querySelectorAll(".lease")) {
      const left = parseFloat(lease.dataset.remaining) - elapsed;
      const granted = parseFloat(lease.dataset.granted);
      const share = Math.max(0, Math.min(1, left / granted));
      lease.querySelector(".bar-fill").setAttribute("width", (share * 100).toFixed(2));
      lease.querySelector(".lease-left").textContent = format(left);
      lease.classList.toggle("low", share < 0.34);
      lease.classList.toggle("expired", left <= 0);
    }
    for (const age of document.querySelectorAll(".age")) {
      age.textContent = format(parseFloat(age.dataset.age) + elapsed);
    }
  }

  async function refresh() {
    try {
      const response = await fetch(poll, {
        headers: { Accept: "application/json" },
        credentials: "same-origin",
      });
      if (response.status === 401) {
        location.href = "/login?next=" + encodeURIComponent(location.pathname);
        return;
      }
      if (!response.ok) throw new Error("HTTP " + response.status);
      const data = await response.json();
      const fragments = data.fragments || data; // /api/workers, /api/queues: records + fragments
      for (const [id, html] of Object.entries(fragments)) {
        const target = document.getElementById(id);
        if (target) target.innerHTML = html;
      }
      renderedAt = performance.now();
      status.textContent = "live";
      status.classList.remove("stale");
    } catch (error) {
      status.textContent = "stale (" + error.message + ")";
      status.classList.add("stale");
    }
  }

  setInterval(tick, 100);
  if (poll) setInterval(refresh, interval);
})();
