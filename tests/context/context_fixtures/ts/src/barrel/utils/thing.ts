export class Thing {
  size = 1;
}
