'use strict';

/**
 * A priority event queue with delayed delivery, retries and a simple
 * subscriber registry.  Events with a lower `priority` number run first;
 * events with equal priority keep their insertion order.
 */

class MinHeap {
  constructor(compare) {
    this.items = [];
    this.compare = compare;
  }

  get size() {
    return this.items.length;
  }

  peek() {
    return this.items[0];
  }

  push(item) {
    this.items.push(item);
    this.siftUp(this.items.length - 1);
  }

  pop() {
    const items = this.items;
    if (items.length === 0) return undefined;
    const top = items[0];
    const last = items.pop();
    if (items.length > 0) {
      items[0] = last;
      this.siftDown(0);
    }
    return top;
  }

  siftUp(index) {
    const items = this.items;
    while (index > 0) {
      const parent = (index - 1) >> 1;
      if (this.compare(items[index], items[parent]) >= 0) break;
      [items[index], items[parent]] = [items[parent], items[index]];
      index = parent;
    }
  }

  siftDown(index) {
    const items = this.items;
    const length = items.length;
    for (;;) {
      const left = index * 2 + 1;
      const right = left + 1;
      let smallest = index;
      if (left < length && this.compare(items[left], items[smallest]) < 0) smallest = left;
      if (right < length && this.compare(items[right], items[smallest]) < 0) smallest = right;
      if (smallest === index) return;
      [items[index], items[smallest]] = [items[smallest], items[index]];
      index = smallest;
    }
  }
}

function compareEvents(a, b) {
  if (a.readyAt !== b.readyAt) return a.readyAt - b.readyAt;
  if (a.priority !== b.priority) return a.priority - b.priority;
  return a.seq - b.seq;
}

class EventQueue {
  /**
   * @param {object} [options]
   * @param {number} [options.maxRetries=3] attempts after the first failure
   * @param {number} [options.retryDelayMs=100] base delay, doubled per attempt
   * @param {() => number} [options.now] clock, replaceable in tests
   */
  constructor(options = {}) {
    this.maxRetries = options.maxRetries ?? 3;
    this.retryDelayMs = options.retryDelayMs ?? 100;
    this.now = options.now ?? (() => Date.now());
    this.heap = new MinHeap(compareEvents);
    this.handlers = new Map();
    this.deadLetters = [];
    this.seq = 0;
    this.running = false;
  }

  subscribe(type, handler) {
    if (!this.handlers.has(type)) {
      this.handlers.set(type, new Set());
    }
    this.handlers.get(type).add(handler);
    return () => this.unsubscribe(type, handler);
  }

  unsubscribe(type, handler) {
    const set = this.handlers.get(type);
    if (!set) return false;
    const removed = set.delete(handler);
    if (set.size === 0) this.handlers.delete(type);
    return removed;
  }

  publish(type, payload, { priority = 5, delayMs = 0 } = {}) {
    if (typeof type !== 'string' || type.length === 0) {
      throw new TypeError('event type must be a non-empty string');
    }
    const event = {
      id: ++this.seq,
      seq: this.seq,
      type,
      payload,
      priority,
      attempts: 0,
      readyAt: this.now() + Math.max(0, delayMs),
    };
    this.heap.push(event);
    return event.id;
  }

  get pending() {
    return this.heap.size;
  }

  /**
   * Deliver every event whose time has come.  Returns the number delivered.
   */
  async drain() {
    if (this.running) {
      throw new Error('drain() is already running');
    }
    this.running = true;
    let delivered = 0;
    try {
      while (this.heap.size > 0 && this.heap.peek().readyAt <= this.now()) {
        const event = this.heap.pop();
        const ok = await this.deliver(event);
        if (ok) delivered += 1;
      }
    } finally {
      this.running = false;
    }
    return delivered;
  }

  async deliver(event) {
    const handlers = this.handlers.get(event.type);
    if (!handlers || handlers.size === 0) {
      this.deadLetters.push({ event, reason: 'no subscribers' });
      return false;
    }
    event.attempts += 1;
    try {
      for (const handler of [...handlers]) {
        await handler(event.payload, event);
      }
      return true;
    } catch (err) {
      this.retryOrDrop(event, err);
      return false;
    }
  }

  retryOrDrop(event, err) {
    if (event.attempts > this.maxRetries) {
      this.deadLetters.push({ event, reason: err && err.message ? err.message : String(err) });
      return;
    }
    const backoff = this.retryDelayMs * 2 ** (event.attempts - 1);
    event.readyAt = this.now() + backoff;
    event.seq = ++this.seq;
    this.heap.push(event);
  }
}

// Small demonstration with a fake clock.
if (require.main === module) {
  let clock = 0;
  const queue = new EventQueue({ now: () => clock, retryDelayMs: 10, maxRetries: 2 });
  let flaky = 0;

  queue.subscribe('order.created', (order) => {
    console.log(`order ${order.id} for ${order.total.toFixed(2)}`);
  });
  queue.subscribe('email.send', (mail) => {
    flaky += 1;
    if (flaky < 3) throw new Error(`smtp timeout (${flaky})`);
    console.log(`sent mail to ${mail.to}`);
  });

  queue.publish('order.created', { id: 7, total: 19.5 }, { priority: 1 });
  queue.publish('email.send', { to: 'ada@example.com' });
  queue.publish('audit.log', { msg: 'nobody listens' }, { delayMs: 5 });

  (async () => {
    for (let tick = 0; tick < 6; tick += 1) {
      const n = await queue.drain();
      console.log(`t=${clock} delivered=${n} pending=${queue.pending}`);
      clock += 10;
    }
    console.log('dead letters:', queue.deadLetters.map((d) => d.reason));
  })();
}

module.exports = { EventQueue, MinHeap };
