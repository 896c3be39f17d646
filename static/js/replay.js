// Replays a terminal recording (asciicast v2) with the vendored asciinema-player.
(function () {
  "use strict";
  document.addEventListener("DOMContentLoaded", function () {
    const node = document.querySelector("[data-replay]");
    if (!node || !window.AsciinemaPlayer) return;
    window.AsciinemaPlayer.create(node.dataset.src, node, { fit: "width", idleTimeLimit: 2 });
  });
})();
