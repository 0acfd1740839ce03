// Preloaded (node --import) into the MCP conformance suites, which cannot send an Authorization
// header: adds `Authorization: Bearer $MCP_BEARER_TOKEN` to every request for the origin of
// $MCP_BEARER_URL, and to no other, whichever of Node's HTTP clients the suite sends it with:
// fetch (the SDK client's transport), undici's request (through its global dispatcher) and
// node:http's request (the header checks that must send raw values). A request that already
// carries an Authorization header keeps its own. tests/conformance.py sets both variables.
import http from "node:http";
import { Agent, setGlobalDispatcher } from "undici";

const origin = new URL(process.env.MCP_BEARER_URL).origin;
const token = process.env.MCP_BEARER_TOKEN;
if (!token) {
  throw new Error("MCP_BEARER_TOKEN is empty: the preload has no token to add");
}
const bearer = `Bearer ${token}`;

function originOf(url) {
  try {
    return new URL(url).origin;
  } catch {
    return null;
  }
}

// fetch(input, init): the headers init gives, else the Request's own, plus ours.
const fetchWithoutBearer = globalThis.fetch;
globalThis.fetch = (input, init = {}) => {
  const url = input instanceof Request ? input.url : String(input);
  if (originOf(url) !== origin) {
    return fetchWithoutBearer(input, init);
  }
  const headers = new Headers(init.headers ?? (input instanceof Request ? input.headers : undefined));
  if (!headers.has("authorization")) {
    headers.set("authorization", bearer);
  }
  return fetchWithoutBearer(input, { ...init, headers });
};

// undici's dispatch options carry headers as an object, a flat [name, value, …] array or nothing.
function withBearer(headers) {
  if (headers == null) {
    return { authorization: bearer };
  }
  if (Array.isArray(headers)) {
    const names = headers.filter((_, i) => i % 2 === 0).map((name) => String(name).toLowerCase());
    return names.includes("authorization") ? headers : [...headers, "authorization", bearer];
  }
  const has = Object.keys(headers).some((name) => name.toLowerCase() === "authorization");
  return has ? headers : { ...headers, authorization: bearer };
}

setGlobalDispatcher(
  new Agent().compose((dispatch) => (options, handler) => {
    const target = originOf(String(options.origin));
    return dispatch(target === origin ? { ...options, headers: withBearer(options.headers) } : options, handler);
  }),
);

// node:http's request(options[, callback]) or request(url[, options][, callback]).
const httpRequest = http.request;
function requestOrigin(url, options) {
  if (url) {
    return originOf(String(url));
  }
  const host = options.hostname ?? (options.host ?? "localhost").replace(/:\d+$/, "");
  return originOf(`${options.protocol ?? "http:"}//${host.includes(":") ? `[${host}]` : host}:${options.port ?? 80}`);
}
http.request = (...args) => {
  const url = typeof args[0] === "string" || args[0] instanceof URL ? args.shift() : undefined;
  const options = typeof args[0] === "object" && args[0] !== null ? args.shift() : {};
  if (requestOrigin(url, options) === origin) {
    const headers = withBearer(options.headers);
    return url === undefined
      ? httpRequest({ ...options, headers }, ...args)
      : httpRequest(url, { ...options, headers }, ...args);
  }
  return url === undefined ? httpRequest(options, ...args) : httpRequest(url, options, ...args);
};
http.get = (...args) => {
  const request = http.request(...args);
  request.end();
  return request;
};
