// zsynth demo page: plain JavaScript, no build step, nothing fetched from outside.
// The page holds only short-lived tokens from its backend (/demo/session); the full key never comes here.
"use strict";

const PCM_RATE = 22050;              // output_format=pcm_22050: 16-bit little-endian mono
const REFRESH_MARGIN_S = 30;         // fetch new tokens when this close to their expiry

const $ = (id) => document.getElementById(id);

// Page-side counters: what a user would hear, in numbers (the browser tests read them too).
const stats = {
  speak: { bytes: 0, chunks: 0, scheduledSeconds: 0, played: 0, firstAudioMs: null, done: false, ended: false, error: null },
  realtime: { bytes: 0, frames: 0, alignedChars: 0, highlighted: 0, trace: [], done: false, ended: false, error: null },
  avatar: { connected: false, ready: false, talking: false, events: [], spoken: 0, error: null },
  audioState: "none",
};
window.demoStats = stats;

const state = { session: null, loadedAt: 0, ctx: null, player: null, ws: null, run: 0, avatar: null, live: null };

// ---- session and tokens ----------------------------------------------------------------------------------------

async function loadSession() {
  const resp = await fetch("/demo/session", { cache: "no-store" });
  const body = await resp.json();
  if (!resp.ok) throw new Error(errorMessage(body, resp.status));
  state.session = body;
  state.loadedAt = performance.now() / 1000;
  showAuth();
  return body;
}

async function session() {
  const s = state.session;
  const age = performance.now() / 1000 - state.loadedAt;
  if (!s || (s.mode === "token" && age > s.ttl_seconds - REFRESH_MARGIN_S)) return loadSession();
  return s;
}

function showAuth() {
  const s = state.session;
  const pill = $("auth");
  const note = $("note");
  note.hidden = true;
  if (s.mode === "open") {
    pill.textContent = "open server · no token";
    pill.className = "pill warn";
    note.textContent = s.note;
    note.hidden = false;
  } else if (s.speech.token) {
    pill.textContent = `ephemeral token ${s.speech.token.slice(0, 13)}… · ${s.ttl_seconds / 60} min`;
    pill.className = "pill ok";
  } else {
    pill.textContent = "no speech token";
    pill.className = "pill bad";
  }
  const problems = ["speech", "avatar"].filter((k) => s[k] && s[k].error).map((k) => `${k}: ${s[k].error}`);
  if (problems.length) {
    note.textContent = problems.join(" · ");
    note.hidden = false;
  }
}

function bearer(token) {
  return token ? { Authorization: `Bearer ${token}` } : {};
}

function wsBase(httpBase) {
  return httpBase.replace(/^http/, "ws");
}

function errorMessage(body, status) {
  if (body && body.detail && body.detail.message) return body.detail.message;
  if (body && body.message) return body.message;
  return `HTTP ${status}`;
}

async function readError(resp) {
  try {
    return errorMessage(await resp.json(), resp.status);
  } catch (err) {
    return `HTTP ${resp.status}`;
  }
}

// ---- voices ----------------------------------------------------------------------------------------------------

async function loadVoices(select) {
  const s = await session();
  const resp = await fetch(`${s.api_url}/v1/voices`, { headers: bearer(s.speech.token) });
  if (!resp.ok) throw new Error(await readError(resp));
  const { voices } = await resp.json();
  const picker = $("voice");
  picker.replaceChildren(...voices.map((v) => new Option(`${v.name} · ${v.category}`, v.voice_id)));
  if (select) picker.value = select;
  $("voice-info").textContent = `${voices.length} voice${voices.length === 1 ? "" : "s"}`;
}

// ---- audio -----------------------------------------------------------------------------------------------------

async function audioContext() {
  if (!state.ctx) {
    state.ctx = new AudioContext();
    state.ctx.onstatechange = () => { stats.audioState = state.ctx.state; };
  }
  if (state.ctx.state !== "running") await state.ctx.resume();
  stats.audioState = state.ctx.state;
  return state.ctx;
}

// Plays 16-bit PCM pieces back to back as they arrive; a piece may end mid-sample (the rest comes next time).
class PcmPlayer {
  constructor(ctx, counters) {
    this.ctx = ctx;
    this.counters = counters;
    this.next = 0;
    this.carry = null;
    this.live = new Set();
    this.stopped = false;
  }

  // Queue the bytes; returns the AudioContext time their first sample plays (null when nothing was queued).
  push(bytes) {
    if (this.stopped) return null;
    if (this.carry) {
      const joined = new Uint8Array(this.carry.length + bytes.length);
      joined.set(this.carry);
      joined.set(bytes, this.carry.length);
      bytes = joined;
      this.carry = null;
    }
    if (bytes.length % 2) {
      this.carry = bytes.slice(bytes.length - 1);
      bytes = bytes.subarray(0, bytes.length - 1);
    }
    const samples = bytes.length / 2;
    if (!samples) return null;
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
    const buffer = this.ctx.createBuffer(1, samples, PCM_RATE);
    const channel = buffer.getChannelData(0);
    for (let i = 0; i < samples; i++) channel[i] = view.getInt16(i * 2, true) / 32768;
    const source = this.ctx.createBufferSource();
    source.buffer = buffer;
    source.connect(this.ctx.destination);
    const start = Math.max(this.next, this.ctx.currentTime + 0.06);
    source.start(start);
    this.next = start + buffer.duration;
    this.counters.scheduledSeconds = (this.counters.scheduledSeconds || 0) + buffer.duration;
    this.live.add(source);
    source.onended = () => {
      this.live.delete(source);
      if (!this.stopped) this.counters.played = (this.counters.played || 0) + 1;
    };
    return start;
  }

  // Resolves once everything queued has been heard.
  drained() {
    return new Promise((resolve) => {
      const check = () => (this.live.size === 0 || this.stopped ? resolve() : setTimeout(check, 50));
      check();
    });
  }

  stop() {
    this.stopped = true;
    for (const source of this.live) {
      try { source.stop(); } catch (err) { /* already stopped */ }
    }
    this.live.clear();
  }
}

function status(text, error = false) {
  const el = $("speech-status");
  el.textContent = text;
  el.className = error ? "status error" : "status muted";
}

function meters(counters) {
  $("m-bytes").textContent = counters.bytes.toLocaleString();
  $("m-chunks").textContent = counters.chunks ?? counters.frames;
  $("m-first").textContent = counters.firstAudioMs == null ? "–" : `${Math.round(counters.firstAudioMs)} ms`;
  $("m-seconds").textContent = `${(counters.scheduledSeconds || 0).toFixed(1)} s`;
  $("m-chars").textContent = counters.highlighted ?? "–";
}

function stopAll() {
  endLive();
  state.run += 1;
  if (state.player) state.player.stop();
  if (state.ws && state.ws.readyState <= 1) state.ws.close(1000);
  state.player = null;
  state.ws = null;
}

// ---- Speak: HTTP stream, played as it arrives ----------------------------------------------------------------

async function speak() {
  stopAll();
  const run = state.run;
  const counters = Object.assign(stats.speak, { bytes: 0, chunks: 0, scheduledSeconds: 0, played: 0,
    firstAudioMs: null, done: false, ended: false, error: null });
  try {
    const ctx = await audioContext();
    const s = await session();
    const text = $("text").value.trim();
    if (!text) throw new Error("Type something to say first.");
    status("requesting…");
    const began = performance.now();
    const resp = await fetch(`${s.api_url}/v1/text-to-speech/${encodeURIComponent($("voice").value)}/stream?output_format=pcm_22050`, {
      method: "POST",
      headers: { ...bearer(s.speech.token), "Content-Type": "application/json" },
      body: JSON.stringify({ text }),
    });
    if (!resp.ok) throw new Error(await readError(resp));
    const player = (state.player = new PcmPlayer(ctx, counters));
    const reader = resp.body.getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      if (run !== state.run) {
        reader.cancel().catch(() => {});  // stopped: the server cancels the job when the stream closes
        break;
      }
      if (counters.firstAudioMs == null) counters.firstAudioMs = performance.now() - began;
      counters.bytes += value.length;
      counters.chunks += 1;
      player.push(value);
      meters(counters);
      status("playing as it arrives…");
    }
    counters.done = true;
    await player.drained();
    if (run === state.run) {
      counters.ended = true;
      status(`done · ${counters.scheduledSeconds.toFixed(1)} s of audio`);
    }
  } catch (err) {
    counters.error = String(err.message || err);
    status(counters.error, true);
  }
}

// ---- Realtime: the stream-input WebSocket, with highlighted characters -----------------------------------------

// Show text in the spoken box, one span per character; ``spans`` grows as live text is typed.
function appendSpoken(spans, text) {
  const box = $("spoken");
  for (const ch of text) {
    const span = document.createElement("span");
    span.textContent = ch;
    box.append(span);
    spans.push(span);
  }
}

function clearSpoken() {
  const box = $("spoken");
  box.className = "spoken";
  box.replaceChildren();
  return [];
}

// Text in pieces of a few words, as an LLM would stream it.
function pieces(text) {
  const words = text.split(" ");
  const out = [];
  for (let i = 0; i < words.length; i += 3) out.push(words.slice(i, i + 3).join(" ") + " ");
  return out;
}

async function realtime() {
  if (state.live) return finishLive();
  const live = $("live").checked;
  stopAll();
  const run = state.run;
  const counters = Object.assign(stats.realtime, { bytes: 0, frames: 0, alignedChars: 0, highlighted: 0, trace: [],
    scheduledSeconds: 0, played: 0, firstAudioMs: null, done: false, ended: false, error: null });
  try {
    const ctx = await audioContext();
    const s = await session();
    const text = $("text").value.replace(/\s+/g, " ").trim();
    if (!text && !live) throw new Error("Type something to say first.");
    const spans = clearSpoken();
    if (!live) appendSpoken(spans, text);
    const player = (state.player = new PcmPlayer(ctx, counters));
    const marks = [];             // [AudioContext time, span index] in the order spoken
    let cursor = 0;               // next span an alignment character may match
    let lit = 0;                  // marks already shown

    // Alignment characters spell the sent text with white space collapsed: walk both in step.
    const align = (start, alignment) => {
      alignment.chars.forEach((ch, i) => {
        let at = cursor;
        while (at < spans.length && at < cursor + 4 && spans[at].textContent !== ch) at += 1;
        if (at >= spans.length || spans[at].textContent !== ch) return;
        cursor = at + 1;
        counters.alignedChars += 1;
        marks.push([start + alignment.charStartTimesMs[i] / 1000, at]);
      });
    };
    const paint = () => {
      if (run !== state.run) return;
      const now = ctx.currentTime;
      let changed = false;
      while (lit < marks.length && marks[lit][0] <= now) {
        const index = marks[lit][1];
        for (let j = 0; j <= index; j++) spans[j].className = "said";
        spans[index].className = "now";
        lit += 1;
        changed = true;
      }
      if (changed) {
        counters.highlighted = lit;
        counters.trace.push([Math.round(performance.now()), lit]);
        meters(counters);
      }
      requestAnimationFrame(paint);
    };
    requestAnimationFrame(paint);

    const voice = encodeURIComponent($("voice").value);
    let url = `${wsBase(s.api_url)}/v1/text-to-speech/${voice}/stream-input?output_format=pcm_22050`;
    if (s.speech.token) url += `&authorization=${encodeURIComponent(`Bearer ${s.speech.token}`)}`;
    const ws = (state.ws = new WebSocket(url));
    const began = performance.now();
    status("connecting…");
    const closed = new Promise((resolve, reject) => {
      ws.onmessage = (event) => {
        const msg = JSON.parse(event.data);
        if (msg.error) {
          reject(new Error(msg.message || msg.error));
          return;
        }
        if (msg.audio) {
          const bytes = Uint8Array.from(atob(msg.audio), (c) => c.charCodeAt(0));
          if (counters.firstAudioMs == null) counters.firstAudioMs = performance.now() - began;
          counters.bytes += bytes.length;
          counters.frames += 1;
          const start = player.push(bytes);
          if (msg.alignment && start != null) align(start, msg.alignment);
          meters(counters);
          status("streaming…");
        }
        if (msg.isFinal) counters.done = true;
      };
      ws.onerror = () => reject(new Error("The realtime socket failed (is the speech API reachable?)."));
      ws.onclose = (event) => (event.code === 1000 || counters.done ? resolve() : reject(
        new Error(event.reason || `The realtime socket closed with ${event.code}.`)));
    });
    ws.onopen = async () => {
      ws.send(JSON.stringify({ text: " ", generation_config: { chunk_length_schedule: [50, 90, 120, 160] } }));
      if (live) return startLive(ws, spans, run);
      for (const piece of pieces(text)) {
        if (run !== state.run || ws.readyState !== 1) return;
        ws.send(JSON.stringify({ text: piece, try_trigger_generation: true }));
        await new Promise((r) => setTimeout(r, 120));
      }
      if (ws.readyState === 1) ws.send(JSON.stringify({ text: "" }));
      status("text sent, speaking…");
    };
    try {
      await closed;
    } finally {
      endLive();
    }
    counters.done = true;
    await player.drained();
    if (run === state.run) {
      counters.ended = true;
      status(`done · ${counters.frames} frames, ${counters.highlighted} characters highlighted`);
    }
  } catch (err) {
    counters.error = String(err.message || err);
    status(counters.error, true);
  }
}

// Live mode: the text box is sent word by word while it is typed; Realtime again (or Enter) ends the input.
function startLive(ws, spans, run) {
  const box = $("text");
  box.value = "";
  box.focus();
  let sent = 0;
  const sendTyped = (all) => {
    if (run !== state.run || ws.readyState !== 1) return;
    const value = box.value;
    const end = all ? value.length : Math.max(value.lastIndexOf(" "), value.lastIndexOf("\n")) + 1;
    if (end <= sent) return;
    const piece = value.slice(sent, end).replace(/\s+/g, " ");
    sent = end;
    if (!piece.trim()) return;
    appendSpoken(spans, piece);
    ws.send(JSON.stringify({ text: piece.endsWith(" ") ? piece : piece + " ", try_trigger_generation: true }));
  };
  const onKey = (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      finishLive();
    }
  };
  const onInput = () => sendTyped(false);
  box.addEventListener("input", onInput);
  box.addEventListener("keydown", onKey);
  const keepAlive = setInterval(() => ws.readyState === 1 && ws.send(JSON.stringify({ text: " " })), 10000);
  state.live = {
    finish: () => {
      sendTyped(true);
      if (ws.readyState === 1) ws.send(JSON.stringify({ text: "" }));
    },
    detach: () => {
      clearInterval(keepAlive);
      box.removeEventListener("input", onInput);
      box.removeEventListener("keydown", onKey);
    },
  };
  $("realtime").textContent = "Finish";
  status("live: type, each word is sent as you go; Enter or Finish ends the input");
}

function finishLive() {
  if (!state.live) return;
  state.live.finish();
  endLive();
  status("text sent, speaking…");
}

function endLive() {
  if (!state.live) return;
  state.live.detach();
  state.live = null;
  $("realtime").textContent = "Realtime";
}

// ---- Clone: upload through the demo backend (cloning needs a full key) ----------------------------------------

async function clone(event) {
  event.preventDefault();
  const el = $("clone-status");
  el.className = "status muted";
  el.textContent = "uploading…";
  const form = new FormData();
  form.append("name", $("clone-name").value);
  form.append("files", $("clone-file").files[0]);
  try {
    const resp = await fetch("/demo/clone", { method: "POST", body: form });
    if (!resp.ok) throw new Error(await readError(resp));
    const { voice_id } = await resp.json();
    await loadVoices(voice_id);
    el.textContent = `cloned: ${voice_id} — now selected on the Speech tab`;
  } catch (err) {
    el.className = "status error";
    el.textContent = String(err.message || err);
  }
}

// ---- Avatar: WebRTC through /connect with the session token, control socket for speak/interrupt --------------

function avatarEvent(text) {
  const li = document.createElement("li");
  li.textContent = text;
  $("avatar-events").prepend(li);
}

function avatarUi(connected) {
  $("avatar-connect").disabled = connected;
  $("avatar-disconnect").disabled = !connected;
  $("avatar-speak").disabled = !connected;
  $("avatar-interrupt").disabled = !connected;
}

function badge(text, kind = "") {
  const el = $("avatar-badge");
  el.textContent = text;
  el.className = `badge ${kind}`;
}

async function iceComplete(pc) {
  if (pc.iceGatheringState === "complete") return;
  await new Promise((resolve) => {
    const timer = setTimeout(resolve, 3000);  // host candidates come at once; do not wait on slow ones
    pc.addEventListener("icegatheringstatechange", () => {
      if (pc.iceGatheringState === "complete") { clearTimeout(timer); resolve(); }
    });
  });
}

async function connectAvatar() {
  const counters = Object.assign(stats.avatar, { connected: false, ready: false, talking: false, events: [], spoken: 0, error: null });
  const out = $("avatar-status");
  out.className = "status muted";
  $("avatar-connect").disabled = true;
  try {
    const s = await session();
    const token = s.avatar.token;
    if (s.mode === "token" && !token) throw new Error(s.avatar.error || "No avatar session token.");
    const query = token ? `?session_token=${encodeURIComponent(token)}` : "";
    const pc = new RTCPeerConnection({ iceServers: [] });
    pc.addTransceiver("audio", { direction: "recvonly" });
    pc.addTransceiver("video", { direction: "recvonly" });
    const video = $("avatar-video");
    pc.ontrack = (event) => {
      if (video.srcObject !== event.streams[0]) {
        video.srcObject = event.streams[0];
        video.play().catch(() => {});
      }
    };
    pc.onconnectionstatechange = () => {
      if (pc.connectionState === "failed") badge("connection failed", "");
    };
    await pc.setLocalDescription(await pc.createOffer());
    badge("connecting…");
    await iceComplete(pc);
    const resp = await fetch(`${s.avatar_url}/connect${query}`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ sdp: pc.localDescription.sdp, type: "offer", avatar_id: $("avatar-id").value || undefined,
        voice_id: $("voice").value || undefined }),
    });
    if (!resp.ok) throw new Error(await readError(resp));
    const answer = await resp.json();
    await pc.setRemoteDescription({ type: "answer", sdp: answer.sdp });
    const ws = new WebSocket(`${wsBase(s.avatar_url)}${answer.control_url}${query}`);
    const keepAlive = setInterval(() => ws.readyState === 1 && ws.send(JSON.stringify({ type: "keep_alive" })), 30000);
    ws.onmessage = (msg) => {
      const event = JSON.parse(msg.data);
      if (event.type === "pong") return;
      counters.events.push(event.type);
      if (event.type === "session.ready") {
        counters.ready = true;
        badge("live", "live");
        out.textContent = "ready: type something and press Speak";
      } else if (event.type === "avatar.start_talking") {
        counters.talking = true;
        badge("talking", "talking");
      } else if (event.type === "avatar.stop_talking") {
        counters.talking = false;
        counters.spoken += 1;
        badge("live", "live");
      } else if (event.type === "error") {
        out.className = "status error";
        out.textContent = event.message;
      }
      const extra = event.duration_ms != null ? ` ${event.duration_ms} ms${event.interrupted ? ", interrupted" : ""}` : "";
      avatarEvent(`${event.type}${event.state ? ` ${event.state}` : ""}${extra}`);
    };
    ws.onclose = () => {
      clearInterval(keepAlive);
      counters.connected = false;
      counters.ready = false;
      badge("not connected");
      avatarUi(false);
      pc.close();
    };
    state.avatar = { pc, ws };
    counters.connected = true;
    avatarUi(true);
    out.textContent = `session ${answer.session_id}`;
  } catch (err) {
    counters.error = String(err.message || err);
    out.className = "status error";
    out.textContent = counters.error;
    badge("not connected");
    avatarUi(false);
  }
}

function avatarSend(message) {
  if (state.avatar && state.avatar.ws.readyState === 1) state.avatar.ws.send(JSON.stringify(message));
}

// ---- wiring ----------------------------------------------------------------------------------------------------

function selectTab(name) {
  for (const tab of document.querySelectorAll(".tabs button")) {
    const on = tab.dataset.tab === name;
    tab.setAttribute("aria-selected", String(on));
    $(`panel-${tab.dataset.tab}`).hidden = !on;
  }
}

async function start() {
  for (const tab of document.querySelectorAll(".tabs button")) tab.onclick = () => selectTab(tab.dataset.tab);
  $("speak").onclick = speak;
  $("realtime").onclick = realtime;
  $("stop").onclick = () => { stopAll(); status("stopped"); };
  $("clone-form").onsubmit = clone;
  $("avatar-connect").onclick = connectAvatar;
  $("avatar-disconnect").onclick = () => avatarSend({ type: "stop" });
  $("avatar-speak").onclick = () => avatarSend({ type: "speak", text: $("avatar-text").value, voice_id: $("voice").value });
  $("avatar-interrupt").onclick = () => avatarSend({ type: "interrupt" });
  try {
    const s = await loadSession();
    $("avatar-id").replaceChildren(...(s.avatars || []).map((a) => new Option(a.name || a.avatar_id, a.avatar_id)));
    await loadVoices();
    status("ready");
    document.body.dataset.ready = "true";
  } catch (err) {
    status(String(err.message || err), true);
    document.body.dataset.ready = "error";
  }
}

start();
