/** Adds two numbers. */
export function add(a: number, b: number): number {
  return a + b;
}

export const PI = 3.14159;

export default class Vector {
  x = 0;
  constructor(x: number) { this.x = x; }
  length(): number { return Math.abs(this.x); }
}
