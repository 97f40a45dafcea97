// Adaptive debounce: how long to wait after a keystroke before asking the server, from this typist's
// speed. A request sent in the middle of a burst is wasted (the next key cancels it, after the server
// may already have started decoding); one sent long after the burst ended is late. The typical gap
// between keys of a burst says when a burst has probably ended. Pure: the extension feeds it times.

export interface DebounceBounds {
  /** Never wait less / more than this in total (client wait + the server's own debounceMs). */
  minMs: number;
  maxMs: number;
  /** The burst is over when no key came for factor × the typical gap. */
  factor: number;
  /** How many recent gaps make the typical one (their median: one pause or paste does not move it). */
  window: number;
  /** Gaps longer than this are pauses between bursts, not typing speed. */
  pauseMs: number;
}

export const DEFAULT_BOUNDS: DebounceBounds = { minMs: 0, maxMs: 400, factor: 1.5, window: 9, pauseMs: 1000 };

export class TypingSpeed {
  private last: number | undefined;
  private readonly gaps: number[] = [];

  constructor(private readonly bounds: DebounceBounds = DEFAULT_BOUNDS) {}

  /** A keystroke (a small edit in the active editor) at `t` ms. */
  record(t: number): void {
    if (this.last !== undefined) {
      const gap = t - this.last;
      if (gap >= 0 && gap < this.bounds.pauseMs) {
        this.gaps.push(gap);
        if (this.gaps.length > this.bounds.window) {
          this.gaps.shift();
        }
      }
    }
    this.last = t;
  }

  /** The median of the recent gaps between keys, or undefined before two keys of a burst. */
  typicalGapMs(): number | undefined {
    if (this.gaps.length === 0) {
      return undefined;
    }
    const sorted = [...this.gaps].sort((a, b) => a - b);
    const mid = Math.floor(sorted.length / 2);
    return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
  }

  /** The total wait this typist needs after a key, within the bounds (undefined: no figure yet). */
  targetMs(): number | undefined {
    const gap = this.typicalGapMs();
    if (gap === undefined) {
      return undefined;
    }
    return Math.min(this.bounds.maxMs, Math.max(this.bounds.minMs, this.bounds.factor * gap));
  }

  /**
   * How long the client should still wait at `now` before asking: the target less what the server
   * waits anyway (its debounceMs) and less the time since the last key. 0 before there is a figure, so
   * nothing changes for someone who has not typed yet (or for a manual trigger, where the caller
   * does not ask).
   */
  delayMs(now: number, serverDebounceMs: number): number {
    const target = this.targetMs();
    if (target === undefined || this.last === undefined) {
      return 0;
    }
    const since = Math.max(0, now - this.last);
    return Math.max(0, Math.round(target - serverDebounceMs - since));
  }
}
