'use strict';

/**
 * A small HTTP router for Node's built-in `http` module.
 *
 * Routes are patterns such as `/users/:id` or `/files/*path`.  Middleware runs
 * in registration order and may short-circuit by not calling `next()`.
 */

const http = require('http');
const { URL } = require('url');

class HttpError extends Error {
  constructor(status, message, details = undefined) {
    super(message);
    this.name = 'HttpError';
    this.status = status;
    this.details = details;
  }
}

/**
 * Compile a path pattern into a regular expression and a list of parameter names.
 * @param {string} pattern
 * @returns {{ regex: RegExp, keys: string[] }}
 */
function compilePattern(pattern) {
  const keys = [];
  const parts = pattern.split('/').filter(Boolean).map((segment) => {
    if (segment.startsWith(':')) {
      keys.push(segment.slice(1));
      return '([^/]+)';
    }
    if (segment.startsWith('*')) {
      keys.push(segment.slice(1) || 'wildcard');
      return '(.*)';
    }
    return segment.replace(/[.+?^${}()|[\]\\]/g, '\\$&');
  });
  const source = parts.length === 0 ? '^/?$' : `^/${parts.join('/')}/?$`;
  return { regex: new RegExp(source), keys };
}

class Router {
  constructor() {
    this.routes = [];
    this.middleware = [];
    this.errorHandler = defaultErrorHandler;
  }

  use(fn) {
    if (typeof fn !== 'function') {
      throw new TypeError('middleware must be a function');
    }
    this.middleware.push(fn);
    return this;
  }

  add(method, pattern, handler) {
    const { regex, keys } = compilePattern(pattern);
    this.routes.push({ method: method.toUpperCase(), pattern, regex, keys, handler });
    return this;
  }

  get(pattern, handler) { return this.add('GET', pattern, handler); }
  post(pattern, handler) { return this.add('POST', pattern, handler); }
  put(pattern, handler) { return this.add('PUT', pattern, handler); }
  delete(pattern, handler) { return this.add('DELETE', pattern, handler); }

  onError(handler) {
    this.errorHandler = handler;
    return this;
  }

  /**
   * Find the route for a method and path.  Returns the route and decoded params,
   * or a list of allowed methods when the path matches but the method does not.
   */
  match(method, pathname) {
    const allowed = new Set();
    for (const route of this.routes) {
      const found = route.regex.exec(pathname);
      if (!found) continue;
      if (route.method !== method) {
        allowed.add(route.method);
        continue;
      }
      const params = {};
      route.keys.forEach((key, index) => {
        params[key] = decodeURIComponent(found[index + 1] || '');
      });
      return { route, params };
    }
    return { route: null, params: {}, allowed: [...allowed] };
  }

  async handle(req, res) {
    const url = new URL(req.url, `http://${req.headers.host || 'localhost'}`);
    const ctx = {
      req,
      res,
      method: req.method,
      path: url.pathname,
      query: Object.fromEntries(url.searchParams),
      params: {},
      state: {},
    };
    try {
      await runMiddleware(this.middleware, ctx);
      if (res.writableEnded) return;
      const { route, params, allowed } = this.match(ctx.method, ctx.path);
      if (!route) {
        if (allowed && allowed.length > 0) {
          res.setHeader('Allow', allowed.join(', '));
          throw new HttpError(405, `method ${ctx.method} not allowed`);
        }
        throw new HttpError(404, `no route for ${ctx.path}`);
      }
      ctx.params = params;
      const result = await route.handler(ctx);
      if (!res.writableEnded && result !== undefined) {
        sendJson(res, 200, result);
      }
    } catch (err) {
      this.errorHandler(err, ctx);
    }
  }

  listen(port, callback) {
    const server = http.createServer((req, res) => this.handle(req, res));
    return server.listen(port, callback);
  }
}

function runMiddleware(stack, ctx) {
  let index = -1;
  const dispatch = async (i) => {
    if (i <= index) {
      throw new Error('next() called more than once');
    }
    index = i;
    const fn = stack[i];
    if (!fn) return;
    await fn(ctx, () => dispatch(i + 1));
  };
  return dispatch(0);
}

function sendJson(res, status, body) {
  const payload = JSON.stringify(body);
  res.statusCode = status;
  res.setHeader('Content-Type', 'application/json; charset=utf-8');
  res.setHeader('Content-Length', Buffer.byteLength(payload));
  res.end(payload);
}

function defaultErrorHandler(err, ctx) {
  const status = err instanceof HttpError ? err.status : 500;
  if (status >= 500) {
    console.error(`[router] ${ctx.method} ${ctx.path} failed:`, err);
  }
  sendJson(ctx.res, status, {
    error: status >= 500 ? 'internal server error' : err.message,
    details: err.details,
  });
}

function readJsonBody(req, limit = 1024 * 1024) {
  return new Promise((resolve, reject) => {
    let size = 0;
    const chunks = [];
    req.on('data', (chunk) => {
      size += chunk.length;
      if (size > limit) {
        reject(new HttpError(413, 'request body too large'));
        req.destroy();
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (chunks.length === 0) return resolve(null);
      try {
        resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')));
      } catch (err) {
        reject(new HttpError(400, 'invalid JSON body', err.message));
      }
    });
    req.on('error', reject);
  });
}

// Example application: an in-memory list of notes.
if (require.main === module) {
  const notes = new Map();
  let nextId = 1;
  const router = new Router();

  router.use(async (ctx, next) => {
    const started = Date.now();
    await next();
    console.log(`${ctx.method} ${ctx.path} ${ctx.res.statusCode} ${Date.now() - started}ms`);
  });

  router.get('/notes', () => [...notes.values()]);
  router.get('/notes/:id', (ctx) => {
    const note = notes.get(Number(ctx.params.id));
    if (!note) throw new HttpError(404, `note ${ctx.params.id} not found`);
    return note;
  });
  router.post('/notes', async (ctx) => {
    const body = await readJsonBody(ctx.req);
    if (!body || typeof body.text !== 'string' || body.text.trim() === '') {
      throw new HttpError(422, 'field "text" is required');
    }
    const note = { id: nextId++, text: body.text.trim(), createdAt: new Date().toISOString() };
    notes.set(note.id, note);
    sendJson(ctx.res, 201, note);
  });
  router.delete('/notes/:id', (ctx) => {
    const removed = notes.delete(Number(ctx.params.id));
    return { removed };
  });

  router.listen(Number(process.env.PORT) || 3000, () => {
    console.log('listening');
  });
}

module.exports = { Router, HttpError, compilePattern, readJsonBody, sendJson };
