// The console's app.js in Node with a small DOM of its own (no browser): it opens one page of the
// console against a real API and prints the page as HTML (its view, then the nav's Pool link) once its
// view holds the ready marker.
// Usage: node console_dom.js APP_JS BASE_URL TOKEN HASH READY_MARKER [TIMEOUT_MS]
// Only what app.js uses is modelled: elements (SVG ones alike), text nodes, attributes, hidden,
// dataset, listeners.
"use strict";
const fs = require("fs");
const vm = require("vm");

const [appJs, base, tok, hash, ready, timeoutMs] = process.argv.slice(2);

class Text {
  constructor(t) { this.data = String(t); }
  get textContent() { return this.data; }
  html() { return esc(this.data); }
}
function esc(s) { return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;"); }

class Element {
  constructor(tag) {
    this.tagName = tag.toUpperCase();
    this.attrs = new Map();
    this.children = [];
    this.listeners = {};
    this.disabled = false;
    const self = this;
    this.dataset = new Proxy({}, {
      set(_, k, v) { self.setAttribute("data-" + k.replace(/[A-Z]/g, (c) => "-" + c.toLowerCase()), v); return true; },
      get(_, k) { return self.getAttribute("data-" + String(k).replace(/[A-Z]/g, (c) => "-" + c.toLowerCase())); },
    });
  }
  setAttribute(k, v) { this.attrs.set(k, String(v)); }
  getAttribute(k) { return this.attrs.has(k) ? this.attrs.get(k) : null; }
  removeAttribute(k) { this.attrs.delete(k); }
  get id() { return this.getAttribute("id") || ""; }
  set className(v) { this.setAttribute("class", v); }
  get className() { return this.getAttribute("class") || ""; }
  get hidden() { return this.attrs.has("hidden"); }
  set hidden(v) { if (v) this.setAttribute("hidden", ""); else this.removeAttribute("hidden"); }
  get firstChild() { return this.children[0] || null; }
  get textContent() { return this.children.map((c) => c.textContent).join(""); }
  set textContent(v) { this.children = [new Text(v)]; }
  append(...nodes) { for (const n of nodes) this.children.push(typeof n === "string" ? new Text(n) : n); }
  replaceChildren(...nodes) { this.children = []; this.append(...nodes); }
  addEventListener(kind, fn) { (this.listeners[kind] = this.listeners[kind] || []).push(fn); }
  focus() {}
  find(id) {
    if (this.id === id) return this;
    for (const c of this.children) { if (c instanceof Element) { const f = c.find(id); if (f) return f; } }
    return null;
  }
  html() {
    const a = [...this.attrs].map(([k, v]) => (v === "" ? ` ${k}` : ` ${k}="${esc(v)}"`)).join("");
    const tag = this.tagName.toLowerCase();
    return `<${tag}${a}>${this.children.map((c) => c.html()).join("")}</${tag}>`;
  }
}

const root = new Element("body");
for (const id of ["view", "login", "logout", "login-error", "token", "login-form", "nav-pool"]) {
  const e = new Element(id === "nav-pool" ? "a" : "div");
  e.setAttribute("id", id);
  root.append(e);
}
const docListeners = {};
const storage = new Map([["agentmill.token", tok]]);
const realFetch = globalThis.fetch;
const sandbox = {
  document: {
    createElement: (t) => new Element(t),
    createElementNS: (_, t) => new Element(t),
    createTextNode: (t) => new Text(t),
    getElementById: (id) => root.find(id),
    addEventListener: (k, fn) => { (docListeners[k] = docListeners[k] || []).push(fn); },
  },
  window: { addEventListener() {} },
  location: { hash },
  sessionStorage: {
    getItem: (k) => (storage.has(k) ? storage.get(k) : null),
    setItem: (k, v) => storage.set(k, String(v)),
    removeItem: (k) => storage.delete(k),
  },
  fetch: (path, init) => realFetch(base + path, init),
  confirm: () => false,
  setTimeout, clearTimeout, setInterval, clearInterval, console, TextDecoder, URLSearchParams, AbortController,
  Promise, JSON, Math, Number, String, Object, Array, Date, Set, Map, Error,
};
sandbox.Node = function Node() {};
Object.defineProperty(sandbox.Node, Symbol.hasInstance, { value: (x) => x instanceof Element || x instanceof Text });
vm.createContext(sandbox);
vm.runInContext(fs.readFileSync(appJs, "utf8"), sandbox, { filename: "app.js" });
for (const fn of docListeners.DOMContentLoaded || []) fn();

root.find("nav-pool").hidden = true;  // as index.html has it
root.find("nav-pool").textContent = "Pool";
const view = root.find("view");
const deadline = Date.now() + Number(timeoutMs || 10000);
(function poll() {
  const html = view.html();
  if (html.includes(ready) || Date.now() > deadline) {
    setTimeout(() => {  // what the page's other calls (GET /v1/me) answered by then too
      process.stdout.write(view.html() + root.find("nav-pool").html());
      process.exit(html.includes(ready) ? 0 : 3);
    }, 200);
    return;
  }
  setTimeout(poll, 50);
})();
