// The allocation's web terminal: xterm.js over /ws/allocations/{a}/terminal/.
//
// Output arrives as binary frames, an 8-byte big-endian offset then the bytes; the
// page keeps how many bytes it has (`received`) and acknowledges what xterm has
// written, which lets the node send more (the node sends at most a window ahead).
// After a dropped socket it reconnects with the session id and `received`, and the
// node replays from there: bytes it already has are skipped, a hole asks again.
(function () {
  "use strict";
  const ACK_BYTES = 64 * 1024;
  const ACK_DELAY_MS = 30;
  const PASTE_CHUNK = 16 * 1024;
  const PING_MS = 20000;
  const PONG_MS = 10000;
  const FINAL = new Set([4000, 4001]);

  function start(root) {
    const status = root.querySelector("[data-terminal-status]");
    const term = new window.Terminal({ cursorBlink: true, scrollback: 5000, convertEol: false });
    const fit = new window.FitAddon.FitAddon();
    term.loadAddon(fit);
    term.open(root.querySelector("[data-terminal-screen]"));
    fit.fit();
    const base = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + root.dataset.wsPath;
    let socket = null;
    let sessionId = null;
    let received = 0;
    let acked = 0;
    let writtenUpto = 0;
    let ackTimer = null;
    let askedFrom = -1;
    let askedAt = 0;
    let over = false;
    let attempt = 0;
    let pingTimer = null;
    let pongTimer = null;

    function say(text, state) {
      status.textContent = text;
      status.dataset.state = state || "";
    }

    function send(message) {
      if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify(message));
    }

    function url() {
      const query = sessionId
        ? "session=" + encodeURIComponent(sessionId) + "&offset=" + received
        : "cols=" + term.cols + "&rows=" + term.rows;
      return base + "?" + query;
    }

    function output(buffer) {
      const offset = Number(new DataView(buffer).getBigUint64(0));
      let bytes = new Uint8Array(buffer, 8);
      if (offset > received) {
        // A frame was lost on the way: ask for everything from what we have (again
        // if a second passed: the answer may have been lost too).
        if (askedFrom !== received || Date.now() - askedAt > 1000) {
          askedFrom = received;
          askedAt = Date.now();
          send({ type: "resume", offset: received });
        }
        return;
      }
      if (offset < received) bytes = bytes.subarray(received - offset);
      if (!bytes.length) return;
      received += bytes.length;
      const upto = received;
      term.write(bytes, function () { written(upto); });
    }

    // Acknowledged every ACK_BYTES, or shortly after the output pauses: one message
    // per frame would outnumber the output itself when a shell echoes keystrokes.
    function written(upto) {
      writtenUpto = upto;
      if (writtenUpto - acked >= ACK_BYTES) acknowledge();
      else if (!ackTimer) ackTimer = setTimeout(acknowledge, ACK_DELAY_MS);
    }

    function acknowledge() {
      clearTimeout(ackTimer);
      ackTimer = null;
      if (writtenUpto > acked) {
        acked = writtenUpto;
        send({ type: "ack", offset: acked });
      }
    }

    function control(message) {
      if (message.type === "session") {
        sessionId = message.id;
        say(message.state === "open" ? "Connected" : "Starting the shell…");
        send({ type: "resize", cols: term.cols, rows: term.rows });
      } else if (message.type === "ready") {
        say("Connected");
      } else if (message.type === "pong") {
        clearTimeout(pongTimer);
      } else if (message.type === "ended") {
        over = true;
        say("Session ended: " + message.reason, "ended");
      } else if (message.type === "taken_over") {
        over = true;
        say("This terminal was opened in another window.", "ended");
      }
    }

    function ping() {
      send({ type: "ping" });
      // No answer: the socket is dead without having closed (a proxy, a sleeping laptop).
      pongTimer = setTimeout(function () { if (socket) socket.close(); }, PONG_MS);
    }

    function connect() {
      socket = new WebSocket(url());
      socket.binaryType = "arraybuffer";
      socket.onopen = function () {
        attempt = 0;
        pingTimer = setInterval(ping, PING_MS);
      };
      socket.onmessage = function (event) {
        if (typeof event.data === "string") control(JSON.parse(event.data));
        else output(event.data);
      };
      socket.onclose = function (event) {
        clearInterval(pingTimer);
        clearTimeout(pongTimer);
        socket = null;
        if (over || FINAL.has(event.code)) {
          over = true;
          if (status.dataset.state !== "ended") say("Session ended.", "ended");
          term.options.disableStdin = true;
          return;
        }
        if (!sessionId && attempt > 0) {
          say("The terminal could not be opened.", "ended");
          return;
        }
        const delay = Math.min(10000, 250 * Math.pow(2, attempt++));
        say("Reconnecting…");
        setTimeout(connect, delay);
      };
    }

    term.onData(function (data) {
      for (let i = 0; i < data.length; i += PASTE_CHUNK) {
        send({ type: "input", data: data.slice(i, i + PASTE_CHUNK) });
      }
    });
    term.onResize(function (size) { send({ type: "resize", cols: size.cols, rows: size.rows }); });
    let fitting = null;
    new ResizeObserver(function () {
      clearTimeout(fitting);
      fitting = setTimeout(function () { fit.fit(); }, 50);
    }).observe(root.querySelector("[data-terminal-screen]"));

    // For the browser tests: the terminal's text, and a socket dropped as a network would.
    window.gpuaasTerminal = {
      term: term,
      text: function () {
        const buffer = term.buffer.active;
        const lines = [];
        for (let i = 0; i < buffer.length; i++) lines.push(buffer.getLine(i).translateToString(true));
        return lines.join("\n");
      },
      drop: function () { if (socket) socket.close(); },
      received: function () { return received; },
    };
    term.focus();
    connect();
  }

  document.addEventListener("DOMContentLoaded", function () {
    const root = document.getElementById("terminal");
    if (root && window.Terminal && window.FitAddon) start(root);
  });
})();
