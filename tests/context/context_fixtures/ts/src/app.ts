import Vector, { add as plus, PI } from './lib/math';
import * as lib from './lib';
import { readFile } from 'fs';

const v = new Vector(plus(1, PI));
let s: lib.Shape;
