export interface Shape {
  area(): number;
  name: string;
}

export type Id = string | number;
