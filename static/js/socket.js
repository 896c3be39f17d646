// The portal pages' own WebSocket (live.js, logs.js): a same-origin path, JSON
// messages, reconnected with exponential backoff and jitter, so pages reconnecting
// after a server restart do not all arrive at once. What a page does after a
// reconnect (read what it missed) is the page's: messages sent while the socket was
// closed are lost.
//
// gpuaasSocket.open(path, {status(state, text), open(reconnected), message(object)})
// answers {isOpen(), stop()}; state is "connecting", "live" or "reconnecting".
(function () {
  "use strict";
  if (window.gpuaasSocket) return;

  var BACKOFF_MS = 1000;
  var BACKOFF_MAX_MS = 30000;
  var TEXT = { connecting: "Connecting\u2026", live: "Live", reconnecting: "Reconnecting\u2026" };

  function socketUrl(path) {
    return (window.location.protocol === "https:" ? "wss://" : "ws://") + window.location.host + path;
  }

  function open(path, handlers) {
    var state = { ws: null, timer: null, attempts: 0, opened: false, stopped: false };

    function status(name) {
      if (handlers.status) handlers.status(name, TEXT[name]);
    }

    function connect() {
      state.timer = null;
      status(state.opened ? "reconnecting" : "connecting");
      var ws;
      try {
        ws = new WebSocket(socketUrl(path));
      } catch (error) {
        retry();
        return;
      }
      state.ws = ws;
      ws.addEventListener("open", function () {
        var reconnected = state.opened;
        state.opened = true;
        state.attempts = 0;
        status("live");
        if (handlers.open) handlers.open(reconnected);
      });
      ws.addEventListener("message", function (event) {
        var message;
        try {
          message = JSON.parse(event.data);
        } catch (error) {
          return;
        }
        if (message && typeof message === "object") handlers.message(message);
      });
      ws.addEventListener("close", function () {
        if (!state.stopped && state.ws === ws) retry();
      });
    }

    function retry() {
      status("reconnecting");
      var delay = Math.min(BACKOFF_MAX_MS, BACKOFF_MS * Math.pow(2, state.attempts));
      state.attempts += 1;
      state.timer = window.setTimeout(function () {
        if (!state.stopped) connect();
      }, delay * (0.5 + Math.random() / 2));
    }

    connect();
    return {
      isOpen: function () {
        return state.opened && state.ws !== null && state.ws.readyState === 1;
      },
      stop: function () {
        state.stopped = true;
        if (state.timer) window.clearTimeout(state.timer);
        if (state.ws && state.ws.readyState <= 1) state.ws.close(1000);
      },
    };
  }

  window.gpuaasSocket = { open: open };
})();
